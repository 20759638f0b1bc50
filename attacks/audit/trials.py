"""The trials of an audit game: one training each, run through an executor and stored one file per trial.

Every game of :mod:`attacks.audit.procedures` writes one file per finished trial
(``trials/trial-NNNNN.npz``, atomically) under its audit directory through a :class:`TrialStore`,
so an interrupted audit resumes where it stopped. Trials fan out over a
:mod:`dpaudit.executors` pool (spawned workers, one torch thread each).

Training functions follow the third-party protocol ``train(dataset, *, seed) -> nn.Module``
(black-box, :data:`TrainFn`), or for white-box an object with ``build_model(dataset)`` and
``__call__(dataset, *, seed, on_step, canary_gradient)`` (:class:`HookedTrainer`); both must
pickle (module-level functions, ``functools.partial`` of them, or small dataclasses) to cross
into workers.
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

from attacks.audit.canaries import DIRAC_SCORES, DiracCanary, loss_scores, with_canaries
from dpaudit import _validate as v
from dpaudit.data import ArrayDataset
from dpaudit.executors.jobs import Executor, Job, SerialExecutor
from dpaudit.progress import Progress
from dpaudit.seeding import numpy_rng
from dpaudit.store import JsonObject, atomic_save_npz, atomic_write_json, load_npz, read_json, to_jsonable

__all__ = [
    "DatasetLike",
    "TrainFn",
    "TrialJobs",
    "TrialFailed",
    "HookedTrainer",
    "TrialStore",
    "accepts_initial_state",
    "black_box_trial",
    "white_box_trial",
    "load_dataset_like",
    "run_trials",
    "run_trials_for",
]

TrainFn = Callable[..., nn.Module]
DatasetLike = ArrayDataset | Callable[[], ArrayDataset]


class TrialFailed(Exception):
    """A training function failed in one trial: it raised, returned something other than an
    ``nn.Module``, or returned a model that cannot score the canaries.

    The message is one line naming the trial index and its seed (and, for a model that rejects
    the data, the input shape it was given). Raised inside the trial, so it crosses process
    boundaries as text; trials finished before it stay stored (:func:`run_trials` says how many).

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

    def __call__(
        self, dataset: ArrayDataset, *, seed: int, on_step: Callable[..., None], canary_gradient: Callable[[int], Any]
    ) -> Any: ...


def load_dataset_like(data: DatasetLike) -> ArrayDataset:
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

    def __init__(
        self, directory: str | os.PathLike[str], config: Mapping[str, object], *, resizable: Sequence[str] = ()
    ) -> None:
        self.path = Path(directory)
        self.config: JsonObject = json.loads(json.dumps(to_jsonable(dict(config))))
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
                    f"out: audit directory {str(self.path)!r} holds trials of a different "
                    f"audit (differs in {', '.join(differ)}); "
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


#: Trial jobs: ``(i, job)`` trains trial i and returns its arrays; ``((i, j, …), job)`` trains a
#: group of trials at once (:mod:`attacks.audit.batched_trials`) and returns their arrays in order.
TrialJobs = Sequence[tuple[int | tuple[int, ...], Job]]


def _indices(where: int | tuple[int, ...]) -> tuple[int, ...]:
    return where if isinstance(where, tuple) else (where,)


def run_trials(
    store: TrialStore,
    jobs: TrialJobs,
    executor: Executor | None,
    description: str,
    progress: bool,
    *,
    stored: int = 0,
) -> None:
    """Runs the unfinished jobs, saving each trial's result the moment its job returns.

    ``stored``: trials already in ``store`` that no job lists (batched groups are made of the
    missing trials only); they are counted in what a rerun says it reuses.
    """
    todo = [(where, job) for where, job in jobs if not all(store.done(i) for i in _indices(where))]
    total = sum(len(_indices(where)) for where, _ in jobs)
    pending = sum(len(_indices(where)) for where, _ in todo)
    reused = stored + total - pending
    if reused and progress:
        # A rerun resumes: say so, so nobody mistakes stored trials for fresh ones.
        print(
            f"reusing {reused} stored trial{'s' if reused != 1 else ''} from {store.path}", file=sys.stderr, flush=True
        )
    if not todo:
        return
    index = {job.key: where for where, job in todo}
    ex = executor if executor is not None else SerialExecutor()
    try:
        with Progress(pending, description, enabled=progress) as bar:
            # Trials run in worker processes that cannot move this bar: say what is pending.
            with bar.heartbeat():
                for job, result in ex.run([job for _, job in todo]):
                    where = index[job.key]
                    results = result if isinstance(where, tuple) else [result]
                    for i, arrays in zip(_indices(where), results, strict=True):
                        store.save(i, arrays)
                    bar.update(len(_indices(where)))
    except TrialFailed as exc:
        kept = sum(store.done(i) for where, _ in jobs for i in _indices(where))
        where_kept = (
            f"{kept} finished trial{'s' if kept != 1 else ''} kept in {store.path}; "
            "rerun the same command to resume from them"
            if kept
            else "no finished trial to keep"
        )
        raise TrialFailed(f"{exc}; {where_kept}", exc.index, exc.seed) from exc


def run_trials_for(
    store: TrialStore,
    job: Callable[[int, str], tuple[int, Job]],
    executor: Executor | None,
    *,
    budget_seconds: float,
    most: int,
    progress: bool,
) -> int:
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
        print(
            f"reusing {stored} stored trial{'s' if stored != 1 else ''} from {store.path}; the budget goes to new ones",
            file=sys.stderr,
            flush=True,
        )
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
        run_trials(
            store,
            [job(i, "") for i in wave],
            executor,
            f"white-box audit (trials {wave[0] + 1}-{wave[-1] + 1}, {budget_seconds:g} s budget)",
            progress,
        )
        last_wave = time.monotonic() - wave_started
        done = wave[-1] + 1
    if progress:
        spent = time.monotonic() - started
        over = " (one wave is longer than the budget)" if spent > budget_seconds else ""
        print(
            f"budget: {done - stored} new trial{'s' if done - stored != 1 else ''} "
            f"in {spent:.0f} s of {budget_seconds:g} s{over}; {done} pooled",
            file=sys.stderr,
            flush=True,
        )
    return done


def accepts_initial_state(train_fn: Callable[..., Any]) -> bool:
    """Whether ``train_fn`` takes the protocol's optional ``initial_state`` keyword (or ``**kwargs``)."""
    import inspect

    try:
        params = inspect.signature(train_fn).parameters.values()
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        return False
    return any(
        p.name == "initial_state" and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) or p.kind is p.VAR_KEYWORD
        for p in params
    )


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
    data = load_dataset_like(dataset)
    mask = np.asarray(include, dtype=bool).reshape(-1)
    where = f"trial {index} (seed {seed})"
    extra: dict[str, dict[str, torch.Tensor]] = {}  # initial_state=, only to a start that was given
    if initial_state is not None:
        from dpaudit.weights import weights_from_bytes

        extra["initial_state"] = weights_from_bytes(initial_state)
    from dpaudit.callables import UserCodeFailed, call_user, callable_label, describe_exception

    try:
        # User code: its prints go to stderr and its SystemExit or closed streams are its failure,
        # never the exit status or the --json output of the verb (the battery's trials do the same).
        model = call_user(
            train_fn,
            with_canaries(data, canaries, mask),
            seed=seed,
            label=f"the training function {callable_label(train_fn)}",
            **extra,
        )
    except UserCodeFailed as exc:
        raise TrialFailed(f"{exc} in {where}", index, seed) from None
    except Exception as exc:  # third-party code: any failure is reported with the trial that hit it
        raise TrialFailed(f"the training function raised {describe_exception(exc)} in {where}", index, seed) from exc
    if not isinstance(model, nn.Module):
        raise TrialFailed(
            f"the training function returned a {type(model).__name__}, not a torch.nn.Module, in {where}", index, seed
        )
    try:
        scores = loss_scores(model, canaries.features, canaries.labels)
    except Exception as exc:
        shape = tuple(canaries.features.shape)
        raise TrialFailed(
            f"the model the training function returned in {where} cannot score inputs of shape {shape} "
            f"(a batch of {shape[0]} example{'s' if shape[0] != 1 else ''} of shape "
            f"{shape[1:]}, dtype "
            f"{str(canaries.features.dtype).removeprefix('torch.')}, "
            f"{canaries.num_classes} classes): {type(exc).__name__}: {_one_line(exc)}",
            index,
            seed,
        ) from exc
    return {"scores": scores, "included": mask, "seed": np.array(seed)}


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or "(no message)"


def white_box_trial(
    *,
    trainer: HookedTrainer,
    dataset: DatasetLike,
    canary: DiracCanary,
    score: str,
    seed: int,
    num_steps: int | None = None,
    progress: bool = False,
    label: str = "white-box trial",
) -> dict[str, np.ndarray]:
    """One DP-SGD run in which every step is a round of the per-step Dirac game.

    At step t a fair coin (stream ``white-box/insert`` of ``seed``) decides whether the canary
    gradient is added; ``on_step`` reads the released sum. ``score="dirac"`` reads the
    canary's coordinate; ``score="norm"`` the negative L2 norm of the whole release (it
    detects data-dependent normalisers, which rescale every coordinate). With ``progress``, the
    steps are counted on stderr (``num_steps`` is the expected total): one run takes minutes.
    """
    v.choice("score", score, DIRAC_SCORES)
    data = load_dataset_like(dataset)
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
            raise RuntimeError(
                f"on_step({step}) was called before canary_gradient({step}); the trainer breaks the hook protocol"
            )
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
