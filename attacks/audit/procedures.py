"""Audit procedures: the distinguishing games that turn training runs into ε lower bounds.

Three games (docs/audits/statistics.md §3–5), each returning an :class:`~dpaudit.results.audit.AuditResult`:

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
    (:func:`dpaudit.privacy.audit_bounds.gaussian_step_claim`), not the whole Poisson-sampled training run,
    which is a different (much smaller-per-step) mechanism. When the coordinate's clean
    gradient is structurally zero (:func:`attacks.audit.canaries.find_dirac_coordinate`), the T
    observations are exactly i.i.d. draws of N(C·b_t, σ²C²), so the Clopper–Pearson and GDP
    bounds apply as to any i.i.d. sample and the GDP bound is exact-model (a single Gaussian
    has a Gaussian trade-off curve). The composed ε of the full run under the central-limit
    formula μ_total = q·√(T(e^{μ²}−1)) is attached as ``details.composed_estimate`` only
    — an approximation, never a bound.


The trials of each game are run and stored by :mod:`attacks.audit.trials`. Every game registers
itself in :data:`AUDIT_PROCEDURES` as an :class:`AuditProcedureSpec` (its threat model, whether
it needs a :class:`~attacks.audit.trials.HookedTrainer`, and the call that plays it); the
application's audit run looks its game up there.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from attacks.audit.batched_trials import TrialBatcher, batches_every_side, black_box_trial_group, trial_groups
from attacks.audit.canaries import DIRAC_SCORES, find_dirac_coordinate
from attacks.audit.trials import (
    DatasetLike,
    HookedTrainer,
    TrainFn,
    TrialStore,
    accepts_initial_state,
    black_box_trial,
    load_dataset_like,
    run_trials,
    run_trials_for,
    white_box_trial,
)
from dpaudit import _validate as v
from dpaudit.data import ArrayDataset
from dpaudit.executors.jobs import Executor, Job
from dpaudit.privacy.audit_bounds import composed_gdp_epsilon, gaussian_step_claim
from dpaudit.privacy.audit_procedures import audit_from_one_run, audit_from_scores
from dpaudit.privacy.audit_stats import THRESHOLD_STRATEGIES, gdp_mu_lb_from_counts
from dpaudit.privacy.claims import PrivacyClaim
from dpaudit.privacy.last_iterate import claim_last_iterate_epsilon
from dpaudit.registry import Registry
from dpaudit.results.audit import AuditResult, save_audit_result
from dpaudit.results.audit_details import ComposedEstimate, FullRunClaim, WhiteBoxDetails
from dpaudit.seeding import derive_seed, numpy_rng
from dpaudit.store import atomic_save_npz

__all__ = [
    "AUDIT_PROCEDURES",
    "AuditProcedure",
    "AuditProcedureSpec",
    "multi_run_audit",
    "one_run_audit",
    "white_box_audit",
    "white_box_strategy",
]


class AuditProcedure(Protocol):
    """What an audit game provides: it plays its trials under ``directory`` (resuming stored ones) and bounds ε from
    them.

    Every game also takes ``confidence``, ``seed``, ``config`` (stored in ``config.json``) and
    ``progress``, and the options of its own threat model (a ``train_fn`` and canaries for a
    black-box game, a :class:`~attacks.audit.trials.HookedTrainer` for the white-box one).
    """

    def __call__(
        self, *, dataset: DatasetLike, directory: str | os.PathLike[str], delta: float, **options: Any
    ) -> AuditResult: ...


@dataclass(frozen=True, kw_only=True)
class AuditProcedureSpec:
    """One registered audit game.

    Attributes:
        name: registry key (``--method`` for a black-box game, ``white-box`` for the per-step game).
        summary: one line, citing the paper.
        threat: ``black-box`` (it sees the final model) or ``white-box`` (every step's release).
        run: the call that plays it (:class:`AuditProcedure`).
        hooked_trainer: whether it needs a :class:`~attacks.audit.trials.HookedTrainer` (the
            white-box hooks of a DP-SGD implementation) instead of a ``train(dataset, *, seed)``.
    """

    name: str
    summary: str
    threat: str
    run: Callable[..., AuditResult]
    hooked_trainer: bool = False

    def __post_init__(self) -> None:
        v.choice("threat", self.threat, ("black-box", "white-box"))


#: Every audit game, in registration order; each registers itself below its definition.
AUDIT_PROCEDURES: Registry[AuditProcedureSpec] = Registry(
    "audit procedure", argument="method", discover=("attacks.audit",)
)


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
        raise v.invalid(
            "strategy",
            "strategy='fixed' sets the threshold from the claim, which fixes only "
            f"the Dirac score's scale; got score={score!r} (use bonferroni or split)",
        )
    return strategy


# ----------------------------------------------------------------------------- games
def _common_checks(num_trials: int, delta: float, confidence: float) -> tuple[int, float, float]:
    return (
        v.integer("num_trials", num_trials, minimum=1),
        v.open_unit("delta", delta),
        v.open_unit("confidence", confidence),
    )


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
    config: Mapping[str, object] | None = None,
    progress: bool = True,
    initial_state: str | os.PathLike[str] | None = None,
    batcher: TrialBatcher | None = None,
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
            ``clopper-pearson``; :func:`dpaudit.privacy.audit_bounds.resolve_bound`), ``gdp`` or
            ``clopper-pearson``.
        strategy: ``bonferroni`` or ``split``.
        seed: root seed (training seeds are independent streams per trial).
        executor: where trials run (default: in this process).
        config: extra description stored in ``config.json``.
        progress: report progress on stderr.
        initial_state: a safetensors file every training starts from (worst-case-start audits,
            Annamalai & De Cristofaro 2024): ``train_fn`` must accept ``initial_state``.
        batcher: how ``train_fn`` trains many trials at once (:mod:`attacks.audit.batched_trials`:
            the same loop, plan and seed streams); ``None``, or one that cannot batch a side: one
            trial per job. Either way trial i has the same seed, side and file.
    """
    r, delta, confidence = _common_checks(num_trials, delta, confidence)
    if initial_state is not None and not accepts_initial_state(train_fn):
        raise v.invalid(
            "initial_state",
            "initial_state needs a training function that accepts "
            f"initial_state=..., and {getattr(train_fn, '__name__', train_fn)!r} "
            "does not",
        )
    # The start travels inside each job (a cluster's workers cannot read this machine's files).
    state_blob = None if initial_state is None else Path(initial_state).read_bytes()
    k = len(canaries)
    # Trial i's seed and side depend on i alone, so raising (or lowering) R on a rerun reuses
    # the stored trials: an audit can be made tighter without training its first models again.
    store = TrialStore(
        directory,
        {"method": "multi-run", "num_trials": r, "seed": seed, "group_size": k, **dict(config or {})},
        resizable=("num_trials",),
    )

    def side(i: int) -> np.ndarray:  # even trials train with every canary, odd ones without
        return np.full(k, i % 2 == 0)

    def trial_seed(i: int) -> int:
        return derive_seed(seed, "audit-trial", i)

    shared: dict[str, object] = {"dataset": dataset, "canaries": canaries, "initial_state": state_blob}
    jobs: list[tuple[int | tuple[int, ...], Job]] = []
    stored = 0
    if not batches_every_side(batcher, dataset, canaries):
        for i in range(2 * r):
            alone = {**shared, "train_fn": train_fn, "include": side(i), "seed": trial_seed(i), "index": i}
            jobs.append((i, Job(key=f"trial-{i}", fn=black_box_trial, kwargs=alone)))
    else:
        missing = [i for i in range(2 * r) if not store.done(i)]
        stored = 2 * r - len(missing)  # the groups list the missing trials only
        for group in trial_groups(missing, {i: i % 2 == 0 for i in missing}):
            grouped = {
                **shared,
                "batcher": batcher,
                "includes": np.stack([side(i) for i in group]),
                "seeds": [trial_seed(i) for i in group],
                "indices": list(group),
            }
            jobs.append((group, Job(key=f"trials-{group[0]}-{group[-1]}", fn=black_box_trial_group, kwargs=grouped)))
    run_trials(store, jobs, executor, f"multi-run audit ({2 * r} trainings)", progress, stored=stored)
    s_in: list[float] = []
    s_out: list[float] = []
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
    config: Mapping[str, object] | None = None,
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
    job = Job(
        key="trial-0",
        fn=black_box_trial,
        kwargs={
            "train_fn": train_fn,
            "dataset": dataset,
            "canaries": canaries,
            "include": include,
            "seed": derive_seed(seed, "audit-trial", 0),
            "index": 0,
        },
    )
    run_trials(store, [(0, job)], None, "one-run audit (1 training)", progress)
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


def _pooled_steps(store: TrialStore, finished: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every step of the first ``finished`` white-box trials: whether the canary was inserted, the score, the lot
    size."""
    ins, scores, lots = [], [], []
    for i in range(finished):
        res = store.load(i)
        ins.append(res["inserted"])
        scores.append(res["scores"])
        lots.append(res["lot_sizes"])
    return np.concatenate(ins).astype(bool), np.concatenate(scores), np.concatenate(lots)


def _with_run_context(
    result: AuditResult,
    *,
    full_claim: PrivacyClaim | None,
    sampling_rate: float | None,
    num_steps: int | None,
    delta: float,
    confidence: float,
) -> AuditResult:
    """The white-box result with the full run's own claim and the CLT-composed estimate beside it (never compared)."""
    d = result.details
    if not isinstance(d, WhiteBoxDetails):
        raise TypeError(f"a white-box result's details must be WhiteBoxDetails, got {type(d).__name__}")
    full = None
    if full_claim is not None:
        ub = full_claim.upper_bound(delta=delta)
        full = FullRunClaim(
            description=full_claim.description,
            accountant=ub.accountant,
            epsilon_ub=ub.epsilon,
            epsilon_ub_by_accountant=dict(ub.by_accountant),
            # The final model's ε under the linear-loss heuristic: what a black-box audit of the run could aim at.
            epsilon_last_iterate=claim_last_iterate_epsilon(full_claim, delta=delta),
        )
    mu, composed = None, None
    if sampling_rate is not None and num_steps is not None:
        mu = gdp_mu_lb_from_counts(
            true_positives=d.true_positives,
            num_in=d.bounding_num_in,
            false_positives=d.false_positives,
            num_out=d.bounding_num_out,
            confidence=confidence,
            num_tests=d.num_tests,
        )
        composed = ComposedEstimate(
            epsilon=composed_gdp_epsilon(mu_step=mu, sampling_rate=sampling_rate, num_steps=num_steps, delta=delta),
            sampling_rate=sampling_rate,
            num_steps=num_steps,
            kind="CLT composition mu_total = q*sqrt(T*(exp(mu_step^2)-1)) of the "
            "per-step mu_LB: an estimate, not a bound",
        )
    if full is None and composed is None:
        return result
    return dataclasses.replace(
        result, details=dataclasses.replace(d, full_run_claim=full, mu_step_lb=mu, composed_estimate=composed)
    )


def _run_white_box_trials(
    store: TrialStore,
    trial: Mapping[str, object],
    *,
    seed: int,
    num_trials: int,
    budget: float | None,
    executor: Executor | None,
    progress: bool,
) -> int:
    """Runs (or reuses) the white-box trials (``trial``: the keyword arguments every trial shares): exactly
    ``num_trials``, or waves within ``budget`` seconds; returns how many finished."""

    def job(i: int, of: str) -> tuple[int, Job]:
        kwargs = {**trial, "seed": derive_seed(seed, "audit-trial", i), "label": f"white-box trial {i + 1}{of}"}
        return i, Job(key=f"trial-{i}", fn=white_box_trial, kwargs=kwargs)

    r = num_trials
    if budget is None:
        run_trials(
            store,
            [job(i, f"/{r}") for i in range(r)],
            executor,
            f"white-box audit ({r} run{'s' if r > 1 else ''})",
            progress,
        )
        return r
    return run_trials_for(store, job, executor, budget_seconds=budget, most=r, progress=progress)


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
    config: Mapping[str, object] | None = None,
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
        the uncorrected per-step estimate. ``details.composed_estimate`` holds the CLT
        composition over the full run (when q and T are given) and
        ``details.full_run_claim`` the run's own claim: both for context, never compared.
    """
    r, delta, confidence = _common_checks(num_trials, delta, confidence)
    sigma = v.positive("noise_multiplier", noise_multiplier)
    c = v.positive("clip_norm", clip_norm)
    scale = v.real("canary_scale", canary_scale)
    if scale < 1:
        raise v.invalid(
            "canary_scale",
            f"canary_scale must be >= 1 (a canary smaller than C is not the worst case), got {canary_scale!r}",
        )
    v.choice("score", score, DIRAC_SCORES)
    strategy = white_box_strategy(score, strategy)
    budget = None if budget_seconds is None else v.positive("budget_seconds", budget_seconds)
    data = load_dataset_like(dataset)
    canary = find_dirac_coordinate(trainer.build_model(data), data, magnitude=scale * c)
    description = {
        "method": "white-box",
        "num_trials": "budget" if budget is not None else r,
        "seed": seed,
        "score": score,
        "noise_multiplier": sigma,
        "clip_norm": c,
        "canary": canary.to_dict(),
        **dict(config or {}),
    }
    store = TrialStore(directory, description)
    trial = {
        "trainer": trainer,
        "dataset": dataset,
        "canary": canary,
        "score": score,
        "num_steps": num_steps,
        "progress": progress,
    }
    finished = _run_white_box_trials(
        store, trial, seed=seed, num_trials=r, budget=budget, executor=executor, progress=progress
    )
    inserted, s, lots = _pooled_steps(store, finished)
    if inserted.all() or not inserted.any():
        raise v.invalid(
            "num_steps",
            f"white-box audit needs IN and OUT steps; got {int(inserted.sum())} IN of {inserted.size} (too few steps)",
        )
    atomic_save_npz(
        store.path / "scores.npz", in_scores=s[inserted], out_scores=s[~inserted], inserted=inserted, scores=s
    )
    details: dict[str, object] = {
        "score": "canary coordinate of the released noisy sum"
        if score == "dirac"
        else "negative L2 norm of the released noisy sum",
        "canary": canary.to_dict(),
        "num_steps_observed": int(s.size),
        "mean_lot_size": float(lots.mean()),
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
    result = _with_run_context(
        result,
        full_claim=full_claim,
        sampling_rate=sampling_rate,
        num_steps=num_steps,
        delta=delta,
        confidence=confidence,
    )
    save_audit_result(result, store.path)
    return result


AUDIT_PROCEDURES.register(
    AuditProcedureSpec(
        name="multi-run",
        summary="R trainings with the canary and R without, scored on the final model "
        "(Jagielski et al. 2020, §4; Nasr et al. 2021, §3)",
        threat="black-box",
        run=multi_run_audit,
    )
)
AUDIT_PROCEDURES.register(
    AuditProcedureSpec(
        name="one-run",
        summary="m canaries each included with probability 1/2 in one training "
        "(Steinke, Nasr & Jagielski 2023, Alg. 1)",
        threat="black-box",
        run=one_run_audit,
    )
)
AUDIT_PROCEDURES.register(
    AuditProcedureSpec(
        name="white-box",
        summary="per-step Dirac gradient canary against one un-sampled Gaussian step "
        "(Nasr et al. 2021, §4.3; Nasr et al. 2023, §4)",
        threat="white-box",
        run=white_box_audit,
        hooked_trainer=True,
    )
)
