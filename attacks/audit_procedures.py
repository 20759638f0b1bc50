"""Audit procedures: the distinguishing games that turn training runs into ε lower bounds.

Three games (audit.md §3–5), each returning an :class:`~dpaudit.privacy.audit.AuditResult`:

``multi-run`` (black-box; Jagielski et al. 2020, §4; Nasr et al. 2021, §3)
    R trainings with the canary and R without (trial i is IN when i is even), each scored on
    the final model by the canary's negative loss. One observation per training; the claim
    compared against is the training's own claim (the canary is one more record).
``one-run`` (black-box; Steinke, Nasr & Jagielski 2023, Alg. 1)
    m canaries, each included independently with probability ½, one training; guesses on the
    top/bottom scores bound ε through their Theorem 3.1 (sound under adaptive composition).
``white-box`` per-step Dirac game (Nasr et al. 2021, §4.3; Nasr et al. 2023, §4)
    At every step of a DP-SGD run the auditor flips a fair coin b_t and, when it lands IN,
    adds a Dirac gradient canary to the clipped sum before the noise
    (``canary_gradient``); the score is the canary's coordinate of the released noisy sum
    (``on_step``). A canary the auditor inserts is certainly in the lot, so step t's release
    is, with respect to the canary, ONE un-sampled Gaussian mechanism with sensitivity C and
    noise σC, i.e. μ = 1/σ. **The claim compared against is that one step**
    (:func:`dpaudit.privacy.audit.gaussian_step_claim`), not the whole Poisson-sampled training run,
    which is a different (much smaller-per-step) mechanism. When the coordinate's clean
    gradient is structurally zero (:func:`attacks.canaries.find_dirac_coordinate`), the T
    observations are exactly i.i.d. draws of N(C·b_t, σ²C²), so the Clopper–Pearson and GDP
    bounds apply as to any i.i.d. sample and the GDP bound is exact-model (a single Gaussian
    has a Gaussian trade-off curve). The composed ε of the full run under the central-limit
    formula μ_total = q·√(T(e^{μ²}−1)) is attached in ``details["composed_estimate"]`` only
    — an approximation, never a bound.

Every game writes one file per finished trial (``trials/trial-NNNNN.npz``, atomically) under
its audit directory, so an interrupted audit resumes where it stopped; the pooled scores go to
``scores.npz`` and the result to ``result.json``. Trials fan out over a
:mod:`dpaudit.executors` pool (spawned workers, one torch thread each).

Training functions follow the third-party protocol ``train(dataset, *, seed) -> nn.Module``
(black-box), or for white-box an object with ``build_model(dataset)`` and
``__call__(dataset, *, seed, on_step, canary_gradient)``; both must pickle (module-level
functions, ``functools.partial`` of them, or small dataclasses) to cross into workers.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from attacks.canaries import (
    DIRAC_SCORES,
    DiracCanary,
    find_dirac_coordinate,
    loss_scores,
    with_canaries,
)
from dpaudit import _validate as v
from dpaudit.data import ArrayDataset
from dpaudit.executors.jobs import Executor, Job, SerialExecutor
from dpaudit.privacy.audit_bounds import composed_gdp_epsilon, gaussian_step_claim
from dpaudit.privacy.audit_stats import THRESHOLD_STRATEGIES, gdp_mu_lb_from_counts
from dpaudit.privacy.claims import PrivacyClaim
from dpaudit.progress import Progress
from dpaudit.results.audit import AuditResult, save_audit_result
from dpaudit.results.auditing import audit_from_one_run, audit_from_scores
from dpaudit.seeding import derive_seed, numpy_rng
from dpaudit.store import (
    atomic_save_npz,
    atomic_write_json,
    load_npz,
    read_json,
    to_jsonable,
)

__all__ = [
    "TrainFn",
    "TrialFailed",
    "HookedTrainer",
    "TrialStore",
    "black_box_trial",
    "white_box_trial",
    "multi_run_audit",
    "one_run_audit",
    "white_box_audit",
]

TrainFn = Callable[..., nn.Module]
DatasetLike = ArrayDataset | Callable[[], ArrayDataset]


class TrialFailed(Exception):
    """A training function failed in one trial: it raised, returned something other than an
    ``nn.Module``, or returned a model that cannot score the canaries.

    The message is one line naming the trial index and its seed (and, for a model that rejects
    the data, the input shape it was given). Raised inside the trial, so it crosses process
    boundaries as text; trials finished before it stay stored (:func:`_run` says how many).

    Attributes:
        index: the trial index (``trials/trial-NNNNN.npz``).
        seed: the seed the training function was called with.
    """

    def __init__(self, message: str, index: int, seed: int) -> None:
        super().__init__(message)
        self.index = index
        self.seed = seed

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled into and out of worker processes: rebuild from the three values, not from args.
        return (type(self), (str(self), self.index, self.seed))


class HookedTrainer(Protocol):
    """A DP-SGD implementation with the white-box hooks of :mod:`defenses.dpsgd`."""

    def build_model(self, dataset: ArrayDataset) -> nn.Module: ...

    def __call__(self, dataset: ArrayDataset, *, seed: int, on_step: Callable[..., None], canary_gradient: Callable[[int], Any]) -> Any: ...


def _dataset(data: DatasetLike) -> ArrayDataset:
    """The dataset itself, or the result of a zero-argument loader (cheap to send to workers)."""
    ds = data() if callable(data) and not isinstance(data, ArrayDataset) else data
    if not isinstance(ds, ArrayDataset):
        raise TypeError(f"dataset must be an ArrayDataset or a function returning one, got {type(ds).__name__}")
    return ds


# ----------------------------------------------------------------------------- persistence
class TrialStore:
    """One audit's directory: ``config.json``, ``trials/trial-NNNNN.npz``, ``scores.npz``, ``result.json``.

    Args:
        directory: the audit directory (``RUN_DIR/audits/<name>``).
        config: JSON-able description of the audit; a directory holding trials of a
            different configuration is refused, so results are never mixed.
        resizable: keys of ``config`` that no single trial depends on (a multi-run audit's
            ``num_trials``: trial i's seed and side follow from i alone). A stored audit that
            differs only in them is the same audit at another size: its trials are reused and
            ``config.json`` takes the new values.

    Raises:
        ValueError: the directory belongs to an audit with another configuration.
    """

    def __init__(self, directory: str | os.PathLike[str], config: Mapping[str, Any], *, resizable: Sequence[str] = ()) -> None:
        self.path = Path(directory)
        self.config = json.loads(json.dumps(to_jsonable(dict(config))))
        cfg = self.path / "config.json"
        if cfg.is_file():
            old = read_json(cfg)
            stored = json.loads(json.dumps(to_jsonable(old)))
            differ = sorted(k for k in set(stored) | set(self.config) if stored.get(k) != self.config.get(k))
            if differ and set(differ) <= set(resizable):
                atomic_write_json(cfg, self.config)
            elif differ:
                raise v.invalid(
                    "out",
                    f"out: audit directory {str(self.path)!r} holds trials of a different audit (differs in {', '.join(differ)}); "
                    "they are never reused for this one: choose another --name or --out (the stored trials are kept)",
                )
        else:
            atomic_write_json(cfg, self.config)
        (self.path / "trials").mkdir(parents=True, exist_ok=True)

    def trial_path(self, index: int) -> Path:
        return self.path / "trials" / f"trial-{index:05d}.npz"

    def done(self, index: int) -> bool:
        return self.trial_path(index).is_file()

    def save(self, index: int, arrays: Mapping[str, np.ndarray]) -> None:
        atomic_save_npz(self.trial_path(index), **{k: np.asarray(a) for k, a in arrays.items()})

    def load(self, index: int) -> dict[str, np.ndarray]:
        return load_npz(self.trial_path(index))


def _run(store: TrialStore, jobs: list[tuple[int, Job]], executor: Executor | None, description: str, progress: bool) -> None:
    """Runs the unfinished jobs, saving each result the moment it arrives."""
    todo = [(i, job) for i, job in jobs if not store.done(i)]
    reused = len(jobs) - len(todo)
    if reused and progress:
        # A rerun resumes: say so, so nobody mistakes stored trials for fresh ones.
        print(f"reusing {reused} stored trial{'s' if reused != 1 else ''} from {store.path}", file=sys.stderr, flush=True)
    if not todo:
        return
    index = {job.key: i for i, job in todo}
    ex = executor if executor is not None else SerialExecutor()
    try:
        with Progress(len(todo), description, enabled=progress) as bar:
            # Trials run in worker processes that cannot move this bar: say what is pending.
            with bar.heartbeat():
                for job, result in ex.run([job for _, job in todo]):
                    store.save(index[job.key], result)
                    bar.update(1)
    except TrialFailed as exc:
        kept = sum(store.done(i) for i, _ in jobs)
        where = f"{kept} finished trial{'s' if kept != 1 else ''} kept in {store.path}; rerun the same command to resume from them" if kept else "no finished trial to keep"
        raise TrialFailed(f"{exc}; {where}", exc.index, exc.seed) from exc


def _run_for(store: TrialStore, job: Callable[[int, str], tuple[int, Job]], executor: Executor | None, *, budget_seconds: float, most: int, progress: bool) -> int:
    """Runs trials 0, 1, 2, … in waves until the next wave would overrun the budget; returns how many.

    Stored trials (a contiguous prefix from an earlier run of the same audit) are reused
    without spending the budget. A wave is one trial per worker of ``executor``; its duration
    is measured, and another starts only while elapsed + the last wave's duration fits in
    ``budget_seconds``. The first new wave always runs, so a budget below one wave still
    gives an audit (said on stderr).
    """
    stored = 0
    while stored < most and store.done(stored):
        stored += 1
    if stored and progress:
        print(f"reusing {stored} stored trial{'s' if stored != 1 else ''} from {store.path}; the budget goes to new ones", file=sys.stderr, flush=True)
    width = max(1, getattr(executor, "workers", None) or 1)
    started = time.monotonic()
    last_wave = 0.0
    done = stored
    while done < most:
        elapsed = time.monotonic() - started
        if done > stored and elapsed + last_wave > budget_seconds:
            break
        wave = list(range(done, min(most, done + width)))
        wave_started = time.monotonic()
        _run(store, [job(i, "") for i in wave], executor, f"white-box audit (trials {wave[0] + 1}-{wave[-1] + 1}, {budget_seconds:g} s budget)", progress)
        last_wave = time.monotonic() - wave_started
        done = wave[-1] + 1
    if progress:
        spent = time.monotonic() - started
        over = " (one wave is longer than the budget)" if spent > budget_seconds else ""
        print(f"budget: {done - stored} new trial{'s' if done - stored != 1 else ''} in {spent:.0f} s of {budget_seconds:g} s{over}; {done} pooled", file=sys.stderr, flush=True)
    return done


def white_box_strategy(score: str, strategy: str | None) -> str:
    """The threshold strategy of a white-box game: ``strategy``, or the default for ``score``.

    ``fixed`` needs a threshold known before the scores: the Dirac score has one (C/2, from
    the claim); the norm score's scale depends on the model's dimension and the data, so it
    defaults to ``bonferroni`` and refuses ``fixed``.
    """
    v.choice("score", score, DIRAC_SCORES)
    if strategy is None:
        return "fixed" if score == "dirac" else "bonferroni"
    v.choice("strategy", strategy, THRESHOLD_STRATEGIES)
    if strategy == "fixed" and score != "dirac":
        raise v.invalid("strategy", f"strategy='fixed' sets the threshold from the claim, which fixes only the Dirac score's scale; got score={score!r} (use bonferroni or split)")
    return strategy


# ----------------------------------------------------------------------------- trials
def accepts_initial_state(train_fn: Callable[..., Any]) -> bool:
    """Whether ``train_fn`` takes the protocol's optional ``initial_state`` keyword (or ``**kwargs``)."""
    import inspect

    try:
        params = inspect.signature(train_fn).parameters.values()
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return False
    return any(p.name == "initial_state" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) or p.kind is p.VAR_KEYWORD for p in params)


def black_box_trial(
    *,
    train_fn: TrainFn,
    dataset: DatasetLike,
    canaries: ArrayDataset,
    include: Sequence[bool] | np.ndarray,
    seed: int,
    index: int = 0,
    initial_state: bytes | None = None,
) -> dict[str, np.ndarray]:
    """One training on ``dataset`` plus the included canaries; every canary's score.

    Args:
        train_fn: ``train(dataset, *, seed) -> nn.Module``.
        dataset: the clean training data (or a loader of it).
        canaries: the canaries, scored on the final model.
        include: which canaries join the training data.
        seed: the training's seed.
        index: the trial's index, named in errors.
        initial_state: the safetensors bytes of the parameters every training starts from (the
            auditor's crafted start), passed as ``train_fn(..., initial_state=tensors)``; bytes,
            not a path, so the job carries its start to a worker on another machine.

    Returns:
        ``{"scores": negative loss of each canary on the final model, "included": mask, "seed"}``.

    Raises:
        TrialFailed: ``train_fn`` raised, returned something other than an ``nn.Module``, or
            returned a model that cannot score the canaries (the message names the shape).
    """
    data = _dataset(dataset)
    mask = np.asarray(include, dtype=bool).reshape(-1)
    where = f"trial {index} (seed {seed})"
    extra: dict[str, Any] = {}
    if initial_state is not None:
        from dpaudit.weights import weights_from_bytes

        extra["initial_state"] = weights_from_bytes(initial_state)
    try:
        model = train_fn(with_canaries(data, canaries, mask), seed=seed, **extra)
    except Exception as exc:  # third-party code: any failure is reported with the trial that hit it
        raise TrialFailed(f"the training function raised {type(exc).__name__}: {_one_line(exc)} in {where}", index, seed) from exc
    if not isinstance(model, nn.Module):
        raise TrialFailed(f"the training function returned a {type(model).__name__}, not a torch.nn.Module, in {where}", index, seed)
    try:
        scores = loss_scores(model, canaries.features, canaries.labels)
    except Exception as exc:
        shape = tuple(canaries.features.shape)
        raise TrialFailed(
            f"the model the training function returned in {where} cannot score inputs of shape {shape} "
            f"(a batch of {shape[0]} example{'s' if shape[0] != 1 else ''} of shape {shape[1:]}, dtype {str(canaries.features.dtype).removeprefix('torch.')}, "
            f"{canaries.num_classes} classes): {type(exc).__name__}: {_one_line(exc)}",
            index,
            seed,
        ) from exc
    return {"scores": scores, "included": mask, "seed": np.array(seed)}


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or "(no message)"


def white_box_trial(
    *, trainer: HookedTrainer, dataset: DatasetLike, canary: DiracCanary, score: str, seed: int, num_steps: int | None = None, progress: bool = False, label: str = "white-box trial"
) -> dict[str, np.ndarray]:
    """One DP-SGD run in which every step is a round of the per-step Dirac game.

    At step t a fair coin (stream ``white-box/insert`` of ``seed``) decides whether the canary
    gradient is added; ``on_step`` reads the released sum. ``score="dirac"`` reads the
    canary's coordinate; ``score="norm"`` the negative L2 norm of the whole release (it
    detects data-dependent normalisers, which rescale every coordinate). With ``progress``, the
    steps are counted on stderr (``num_steps`` is the expected total): one run takes minutes.
    """
    v.choice("score", score, DIRAC_SCORES)
    data = _dataset(dataset)
    rng = numpy_rng(seed, "white-box/insert")
    shapes = {n: p.shape for n, p in trainer.build_model(data).named_parameters()}
    inserted: dict[int, bool] = {}
    scores: dict[int, float] = {}
    lots: dict[int, int] = {}

    def canary_gradient(step: int) -> dict[str, torch.Tensor] | None:
        inserted[step] = bool(rng.random() < 0.5)
        return canary.gradient(shapes) if inserted[step] else None

    def on_step(step: int, update: Mapping[str, torch.Tensor], lot_size: int) -> None:
        if step not in inserted:
            raise RuntimeError(f"on_step({step}) was called before canary_gradient({step}); the trainer breaks the hook protocol")
        if score == "dirac":
            scores[step] = canary.read(update)
        else:
            scores[step] = -math.sqrt(sum(float(t.double().pow(2).sum()) for t in update.values()))
        lots[step] = int(lot_size)
        bar.update(1)

    with Progress(num_steps or 0, f"{label} (steps)", enabled=progress) as bar:
        trainer(data, seed=seed, on_step=on_step, canary_gradient=canary_gradient)
    steps = sorted(scores)
    return {
        "inserted": np.array([inserted[s] for s in steps], dtype=bool),
        "scores": np.array([scores[s] for s in steps], dtype=float),
        "lot_sizes": np.array([lots[s] for s in steps], dtype=np.int64),
    }


# ----------------------------------------------------------------------------- games
def _common_checks(num_trials: int, delta: float, confidence: float) -> tuple[int, float, float]:
    return v.integer("num_trials", num_trials, minimum=1), v.open_unit("delta", delta), v.open_unit("confidence", confidence)


def multi_run_audit(
    *,
    train_fn: TrainFn,
    dataset: DatasetLike,
    canaries: ArrayDataset,
    claim: PrivacyClaim,
    num_trials: int,
    directory: str | os.PathLike[str],
    delta: float,
    confidence: float = 0.95,
    bound: str = "auto",
    strategy: str = "bonferroni",
    seed: int = 0,
    executor: Executor | None = None,
    config: Mapping[str, Any] | None = None,
    progress: bool = True,
    initial_state: str | os.PathLike[str] | None = None,
) -> AuditResult:
    """Black-box multi-run game: ``num_trials`` trainings IN and ``num_trials`` OUT.

    Args:
        train_fn: ``train(dataset, *, seed) -> nn.Module`` (picklable for workers).
        dataset: the clean training data (or a zero-argument loader of it).
        canaries: the canary copies inserted together in IN trials (group size = their number).
        claim: the training's claim; ε_UB is its tightest accountant.
        num_trials: R, trainings per side.
        directory: the audit directory (resumes finished trials).
        delta: δ of both bounds.
        confidence: confidence of ε_LB.
        bound: ``auto`` (default: ``gdp`` for a Gaussian-family claim, else
            ``clopper-pearson``; :func:`dpaudit.privacy.audit.resolve_bound`), ``gdp`` or
            ``clopper-pearson``.
        strategy: ``bonferroni`` or ``split``.
        seed: root seed (training seeds are independent streams per trial).
        executor: where trials run (default: in this process).
        config: extra description stored in ``config.json``.
        progress: report progress on stderr.
        initial_state: a safetensors file every training starts from (worst-case-start audits,
            Annamalai & De Cristofaro 2024): ``train_fn`` must accept ``initial_state``.
    """
    r, delta, confidence = _common_checks(num_trials, delta, confidence)
    if initial_state is not None and not accepts_initial_state(train_fn):
        raise v.invalid("initial_state", f"initial_state needs a training function that accepts initial_state=..., and {getattr(train_fn, '__name__', train_fn)!r} does not")
    # The start travels inside each job (a cluster's workers cannot read this machine's files).
    state_blob = None if initial_state is None else Path(initial_state).read_bytes()
    k = len(canaries)
    # Trial i's seed and side depend on i alone, so raising (or lowering) R on a rerun reuses
    # the stored trials: an audit can be made tighter without training its first models again.
    store = TrialStore(directory, {"method": "multi-run", "num_trials": r, "seed": seed, "group_size": k, **dict(config or {})}, resizable=("num_trials",))
    jobs = []
    for i in range(2 * r):
        include = np.full(k, i % 2 == 0)
        jobs.append(
            (
                i,
                Job(
                    key=f"trial-{i}",
                    fn=black_box_trial,
                    kwargs={
                        "train_fn": train_fn,
                        "dataset": dataset,
                        "canaries": canaries,
                        "include": include,
                        "seed": derive_seed(seed, "audit-trial", i),
                        "index": i,
                        "initial_state": state_blob,
                    },
                ),
            )
        )
    _run(store, jobs, executor, f"multi-run audit ({2 * r} trainings)", progress)
    s_in, s_out = [], []
    for i in range(2 * r):
        res = store.load(i)
        (s_in if bool(res["included"].all()) else s_out).append(float(res["scores"].mean()))
    atomic_save_npz(store.path / "scores.npz", in_scores=np.array(s_in), out_scores=np.array(s_out))
    result = audit_from_scores(
        s_in,
        s_out,
        claim=claim,
        delta=delta,
        confidence=confidence,
        method="multi-run",
        bound=bound,
        strategy=strategy,
        group_size=k,
        threat_model="black-box",
        seed=seed,
        details={"score": "negative canary loss on the final model", **dict(config or {})},
    )
    save_audit_result(result, store.path)
    return result


def one_run_audit(
    *,
    train_fn: TrainFn,
    dataset: DatasetLike,
    canaries: ArrayDataset,
    claim: PrivacyClaim,
    directory: str | os.PathLike[str],
    delta: float,
    confidence: float = 0.95,
    guess_counts: Sequence[int] | None = None,
    seed: int = 0,
    config: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> AuditResult:
    """Black-box one-run game: m canaries, each in with probability ½, one training.

    Args:
        train_fn: ``train(dataset, *, seed) -> nn.Module``.
        dataset: the clean training data (or a loader of it).
        canaries: the m canaries (distinct records).
        claim: the training's claim.
        directory: the audit directory (a finished training is reused).
        delta: δ of both bounds.
        confidence: confidence of ε_LB.
        guess_counts: the k tried (top-k IN, bottom-k OUT), Bonferroni over them.
        seed: root seed (inclusion coins: stream ``one-run/include``).
        config: extra description stored in ``config.json``.
        progress: report progress on stderr.
    """
    _, delta, confidence = _common_checks(1, delta, confidence)
    m = len(canaries)
    if m < 2:
        raise v.invalid("canaries", f"canaries must hold at least 2 canaries for a one-run audit, got {m}")
    store = TrialStore(directory, {"method": "one-run", "num_canaries": m, "seed": seed, **dict(config or {})})
    include = numpy_rng(seed, "one-run/include").random(m) < 0.5
    job = Job(key="trial-0", fn=black_box_trial, kwargs={"train_fn": train_fn, "dataset": dataset, "canaries": canaries, "include": include, "seed": derive_seed(seed, "audit-trial", 0), "index": 0})
    _run(store, [(0, job)], None, "one-run audit (1 training)", progress)
    res = store.load(0)
    scores, inc = res["scores"], res["included"].astype(bool)
    atomic_save_npz(store.path / "scores.npz", scores=scores, included=inc)
    result = audit_from_one_run(
        scores,
        inc,
        claim=claim,
        delta=delta,
        confidence=confidence,
        guess_counts=guess_counts,
        threat_model="black-box",
        details={"score": "negative canary loss on the final model", **dict(config or {})},
    )
    save_audit_result(result, store.path)
    return result


def white_box_audit(
    *,
    trainer: HookedTrainer,
    dataset: DatasetLike,
    noise_multiplier: float,
    clip_norm: float,
    directory: str | os.PathLike[str],
    delta: float,
    num_trials: int = 1,
    confidence: float = 0.95,
    bound: str = "auto",
    strategy: str | None = None,
    score: str = "dirac",
    canary_scale: float = 1000.0,
    full_claim: PrivacyClaim | None = None,
    sampling_rate: float | None = None,
    num_steps: int | None = None,
    budget_seconds: float | None = None,
    seed: int = 0,
    executor: Executor | None = None,
    config: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> AuditResult:
    """White-box per-step Dirac game against the claim of ONE un-sampled Gaussian step.

    Args:
        trainer: the DP-SGD implementation with hooks (:class:`HookedTrainer`).
        dataset: the training data (or a loader of it).
        noise_multiplier: the claimed σ (noise std σ·C on the clipped sum).
        clip_norm: the claimed C; the canary's magnitude is ``canary_scale`` · C, so a correct
            implementation clips it to C and a non-clipping one does not.
        directory: the audit directory (finished runs are reused).
        delta: δ of both bounds.
        num_trials: independent training runs whose steps are pooled (with
            ``budget_seconds``: the most that will be run).
        confidence: confidence of ε_LB.
        bound: ``auto`` (default: ``gdp``, exact for the compared Gaussian step), ``gdp`` or ``clopper-pearson``.
        strategy: ``fixed`` (the default for ``score="dirac"``: one threshold at C/2, halfway
            between the claimed OUT mean 0 and IN mean C of the canary coordinate, set before
            any score is seen, so no multiple-testing price is paid), ``bonferroni`` (the
            default for ``score="norm"``, whose scale the claim does not fix) or ``split``.
        score: ``dirac`` (the canary coordinate) or ``norm`` (negative norm of the release).
        canary_scale: canary magnitude in units of C (≥ 1).
        full_claim: the training run's own claim, reported beside (never compared).
        sampling_rate: q of the run, for the composed estimate.
        num_steps: T of each run (the trainer's own length); also used for the composed
            estimate.
        budget_seconds: run trials in waves (one per executor worker) until the next wave
            would overrun this many seconds of wall time, instead of exactly ``num_trials``;
            at least one wave runs. Trials stored by an earlier run of the same audit are
            reused first and cost nothing, so a rerun with a budget extends the audit.
        seed: root seed.
        executor: where runs execute (default: in this process).
        config: extra description stored in ``config.json``.
        progress: report progress on stderr.

    Returns:
        The result; ``epsilon_ub`` is ε of one Gaussian step with σ and ``epsilon_estimate``
        the uncorrected per-step estimate. ``details["composed_estimate"]`` holds the CLT
        composition over the full run (when q and T are given) and
        ``details["full_run_claim"]`` the run's own claim: both for context, never compared.
    """
    r, delta, confidence = _common_checks(num_trials, delta, confidence)
    sigma = v.positive("noise_multiplier", noise_multiplier)
    c = v.positive("clip_norm", clip_norm)
    scale = v.real("canary_scale", canary_scale)
    if scale < 1:
        raise v.invalid("canary_scale", f"canary_scale must be >= 1 (a canary smaller than C is not the worst case), got {canary_scale!r}")
    v.choice("score", score, DIRAC_SCORES)
    strategy = white_box_strategy(score, strategy)
    budget = None if budget_seconds is None else v.positive("budget_seconds", budget_seconds)
    data = _dataset(dataset)
    canary = find_dirac_coordinate(trainer.build_model(data), data, magnitude=scale * c)
    store = TrialStore(
        directory,
        {
            "method": "white-box",
            "num_trials": "budget" if budget is not None else r,
            "seed": seed,
            "score": score,
            "noise_multiplier": sigma,
            "clip_norm": c,
            "canary": canary.to_dict(),
            **dict(config or {}),
        },
    )

    def job(i: int, of: str) -> tuple[int, Job]:
        kwargs = {
            "trainer": trainer,
            "dataset": dataset,
            "canary": canary,
            "score": score,
            "seed": derive_seed(seed, "audit-trial", i),
            "num_steps": num_steps,
            "progress": progress,
            "label": f"white-box trial {i + 1}{of}",
        }
        return i, Job(key=f"trial-{i}", fn=white_box_trial, kwargs=kwargs)

    if budget is None:
        _run(store, [job(i, f"/{r}") for i in range(r)], executor, f"white-box audit ({r} run{'s' if r > 1 else ''})", progress)
        finished = r
    else:
        finished = _run_for(store, job, executor, budget_seconds=budget, most=r, progress=progress)
    ins, scores, lots = [], [], []
    for i in range(finished):
        res = store.load(i)
        ins.append(res["inserted"])
        scores.append(res["scores"])
        lots.append(res["lot_sizes"])
    inserted, s = np.concatenate(ins).astype(bool), np.concatenate(scores)
    if inserted.all() or not inserted.any():
        raise v.invalid("num_steps", f"white-box audit needs IN and OUT steps; got {int(inserted.sum())} IN of {inserted.size} (too few steps)")
    atomic_save_npz(store.path / "scores.npz", in_scores=s[inserted], out_scores=s[~inserted], inserted=inserted, scores=s)
    details: dict[str, Any] = {
        "score": "canary coordinate of the released noisy sum" if score == "dirac" else "negative L2 norm of the released noisy sum",
        "canary": canary.to_dict(),
        "num_steps_observed": int(s.size),
        "mean_lot_size": float(np.concatenate(lots).mean()),
        "compared_claim": "one un-sampled Gaussian step (the canary inserted by the auditor is always in the lot)",
        **dict(config or {}),
    }
    claim = gaussian_step_claim(noise_multiplier=sigma)
    result = audit_from_scores(
        s[inserted],
        s[~inserted],
        claim=claim,
        delta=delta,
        confidence=confidence,
        method="white-box",
        bound=bound,
        strategy=strategy,
        threat_model="white-box",
        seed=seed,
        details=details,
        # Under the claim the canary coordinate is N(0, σ²C²) OUT and N(C, σ²C²) IN (C: the
        # clipped canary); halfway is where the two error rates are equal.
        threshold=c / 2 if strategy == "fixed" else None,
    )
    if full_claim is not None:
        ub = full_claim.upper_bound(delta=delta)
        details["full_run_claim"] = {"description": full_claim.description, "accountant": ub.accountant, "epsilon_ub": ub.epsilon, "epsilon_ub_by_accountant": dict(ub.by_accountant)}
    estimate = None
    if sampling_rate is not None and num_steps is not None:
        d = result.details
        mu = gdp_mu_lb_from_counts(
            true_positives=d["true_positives"],
            num_in=d["bounding_num_in"],
            false_positives=d["false_positives"],
            num_out=d["bounding_num_out"],
            confidence=confidence,
            num_tests=d["num_tests"],
        )
        estimate = composed_gdp_epsilon(mu_step=mu, sampling_rate=sampling_rate, num_steps=num_steps, delta=delta)
        details["mu_step_lb"] = mu
        details["composed_estimate"] = {
            "epsilon": estimate,
            "sampling_rate": sampling_rate,
            "num_steps": num_steps,
            "kind": "CLT composition mu_total = q*sqrt(T*(exp(mu_step^2)-1)) of the per-step mu_LB: an estimate, not a bound",
        }
    if full_claim is not None or estimate is not None:
        merged = {**dict(result.details), **details}
        result = AuditResult(**{**{f: getattr(result, f) for f in _FIELDS}, "details": merged})
    save_audit_result(result, store.path)
    return result


_FIELDS = tuple(AuditResult.__dataclass_fields__)
