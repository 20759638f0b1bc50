"""Grey-box checks: the training function replayed on neighbouring datasets, its mechanism's inputs compared.

The battery runs these first (orders 1–7, before the statistical games): one replayed pair of
trainings (:mod:`attacks.audit.checks.greybox.replay`) — D, D′ = D + one auditor-chosen record,
and D again — observed by instrumenting torch, decides every check here
(:mod:`attacks.audit.checks.greybox.checks`), each with a verdict and a one-sentence cause. The
pair is computed once per battery run and shared by the checks; its CPU time is counted by the
first check that needs it.

D is ⌈2/q⌉ − 1 records (q·|D| crosses an integer when the record joins, so a normaliser
``int(q·|D|)`` shows), or the user's |D| (``--dataset``'s training split) when the claim declares
the dataset size public, since q, T and the normaliser are then claimed for that size. With
``--model-fn`` they are zero-gradient records from the crafted worst-case start
(:mod:`attacks.audit.checks.game`) and the added record is its canary, whose gradient is far
above any clipping norm, so a correct implementation's measured sensitivity is exactly C;
without it, digits records and an all-ones record of another class from the function's own
initialisation.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from attacks.audit.checks.greybox.checks import DECISIONS, ClaimedMechanism, Verdict, claimed_mechanism
from attacks.audit.checks.greybox.replay import PairTrace, run_pair
from attacks.audit.checks.spec import CHECKS, CheckCannotRun, CheckContext, CheckEvidence, CheckSpec

__all__ = ["pair_for", "MAX_RECORDS", "MAX_USER_RECORDS", "KIND"]

KIND = "grey-box"
#: Largest D (records): the replay's cost grows with the lots, ≈ q·|D| records each.
MAX_RECORDS = 256
_PAIRS: dict[tuple[str, str, int, int], tuple[PairTrace, ClaimedMechanism]] = {}
_FAILED: dict[tuple[str, str, int, int], Exception] = {}


def _with_start(train_fn: Callable[..., Any], state: Mapping[str, torch.Tensor]) -> Callable[..., Any]:
    """``train_fn`` given a fresh copy of the crafted start at every call (a training may change it)."""

    @functools.wraps(train_fn)
    def train(dataset: Any, *, seed: int) -> Any:
        return train_fn(dataset, seed=seed, initial_state={k: t.clone() for k, t in state.items()})

    return train


def _datasets(ctx: CheckContext, records: int) -> tuple[Any, Any, Callable[..., Any]]:
    from attacks.audit.canaries import with_canaries
    from attacks.audit.checks.game import first, relabelled, start_for
    from attacks.audit.trials import accepts_initial_state
    from dpaudit.data import ArrayDataset

    if ctx.model_fn is not None and accepts_initial_state(ctx.train_fn):
        try:
            start = start_for(ctx)
        except CheckCannotRun:
            start = None
        if start is not None and len(start.zero_gradient) >= records:
            from dpaudit.weights import weights_from_bytes

            base = first(start.zero_gradient, records)
            return base, with_canaries(base, start.canary), _with_start(ctx.train_fn, weights_from_bytes(start.state))
    pool = ctx.pool
    base = relabelled(pool, range(min(records, len(pool))), 0)
    blank = ArrayDataset(
        name=pool.name,
        features=torch.ones_like(pool.features[:1]),
        labels=torch.ones(1, dtype=torch.long),
        ids=torch.tensor([int(pool.ids.max()) + 1]),
        num_classes=pool.num_classes,
    )
    return base, with_canaries(base, blank), ctx.train_fn


def pair_for(ctx: CheckContext) -> tuple[PairTrace, ClaimedMechanism]:
    """The battery's replayed pair (computed on first use, then shared) and the claim's q, σ, T.

    Raises:
        TrialFailed: the training function failed on D or D′.
    """
    from attacks.audit.checks.game import _time_limit
    from attacks.audit.trials import TrialFailed
    from dpaudit.callables import callable_label

    key = (str(ctx.directory.parent), ctx.train_spec, ctx.seed, id(ctx.train_fn))
    if key in _PAIRS:
        return _PAIRS[key]
    if key in _FAILED:  # one failed replay fails every grey-box check, without training again
        raise _FAILED[key]
    claim = claimed_mechanism(
        ctx.claim.to_dict(),
        dataset_size_public=bool(getattr(ctx.claim, "dataset_size_public", False)),
        dataset_size=len(ctx.pool),  # the user's training data: --dataset's training split
        delta=ctx.delta,
        replay=functools.partial(_replay_at, ctx),
    )
    q = claim.sampling_rate if claim.sampling_rate and 0 < claim.sampling_rate <= 1 else 0.1
    records = min(MAX_RECORDS, max(2, math.ceil(2.0 / q) - 1))
    if claim.dataset_size_public and len(ctx.pool) <= MAX_USER_RECORDS:
        # The claim's q, T and normaliser are those of the user's |D| (public): replay at that size,
        # where a rate or step count derived from len(dataset) is the claimed one.
        records = len(ctx.pool)
    base, added, train = _datasets(ctx, records)
    label = f"the training function {callable_label(ctx.train_fn)}"
    from dpaudit.callables import OutOfTime

    _FAILED.clear()
    try:
        with _time_limit(ctx.deadline):
            pair = run_pair(train, base, added, seed=ctx.seed, label=label)
    except OutOfTime:
        _FAILED[key] = TrialFailed(f"{label} ran past the battery's time budget in the grey-box replay", 0, ctx.seed)
        raise _FAILED[key] from None
    for trace in (pair.d, pair.d_added):
        if trace.error:
            _FAILED[key] = TrialFailed(f"{trace.error} (grey-box replay)", 0, ctx.seed)
            raise _FAILED[key]
    _PAIRS.clear()  # one battery at a time: the traces hold every step's sums
    _PAIRS[key] = (pair, claim)
    return pair, claim


#: Largest |D| the normaliser check replays at to say what leaks at the user's dataset size.
MAX_USER_RECORDS = 4096


def _replay_at(ctx: CheckContext, records: int) -> PairTrace | None:
    """D and D + 1 record at ``records`` records (no second run on D), ``None`` when too large or failed."""
    from attacks.audit.checks.game import _time_limit
    from dpaudit.callables import OutOfTime, callable_label

    if records > MAX_USER_RECORDS:
        return None
    base, added, train = _datasets(ctx, records)
    try:
        with _time_limit(ctx.deadline):
            pair = run_pair(
                train,
                base,
                added,
                seed=ctx.seed,
                label=f"the training function {callable_label(ctx.train_fn)}",
                again=False,
            )
    except OutOfTime:
        return None
    return None if pair.d.error or pair.d_added.error else pair


def _run(decide: Callable[[PairTrace, ClaimedMechanism, float], Verdict], ctx: CheckContext) -> CheckEvidence:
    fresh = (str(ctx.directory.parent), ctx.train_spec, ctx.seed, id(ctx.train_fn)) not in _PAIRS
    started = time.process_time()
    pair, claim = pair_for(ctx)
    verdict = decide(pair, claim, ctx.confidence)
    details: dict[str, Any] = {
        "records": pair.records,
        "replay_cpu_seconds": round(pair.seconds, 3),
        "decision_cpu_seconds": round(time.process_time() - started - (pair.seconds if fresh else 0.0), 3),
        **dict(verdict.facts),
    }
    return CheckEvidence(
        epsilon_lb=0.0, ceiling=0.0, num_trials=3, details=details, verdict=verdict.status, cause=verdict.cause
    )


for _name, (_order, _decide, _detects, _misses) in DECISIONS.items():
    CHECKS.register(
        CheckSpec(
            name=_name,
            order=_order,
            detects=_detects,
            misses=_misses,
            violation="the replayed trainings show the mechanism differs from the claim",
            needs_initial_state=False,
            run=functools.partial(_run, _decide),
            kind=KIND,
        )
    )
