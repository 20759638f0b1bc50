"""The ``dp_accounting`` events every accountant reads, and their normalisation before accounting (torch-free).

DP-SGD is the event ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)`` (Abadi et al. 2016,
Algorithm 1; :func:`sampled_gaussian_event`). Before any accountant sees an event, zero-fold
compositions become no-ops, step counts above :data:`~dpaudit.privacy.accountant_names.MAX_NUM_STEPS`
are refused, and noise multipliers above :data:`NOISE_MULTIPLIER_MAX` are evaluated at that
value: more noise is a post-processing of less noise, so ε(σ) is non-increasing and the bound
at the smaller σ holds for the larger one. Below :data:`NOISE_MULTIPLIER_MIN` every bound
exceeds ~1e300 and floating-point arithmetic breaks down, so ε_UB = ∞ is reported instead.
"""

from __future__ import annotations

import math
import numbers

import dp_accounting
from dp_accounting import dp_event as dpe

from dpaudit import _validate as v
from dpaudit.privacy.accountant_names import MAX_NUM_STEPS

__all__ = [
    "NOISE_MULTIPLIER_MIN",
    "NOISE_MULTIPLIER_MAX",
    "DP_ACCOUNTING_RELATIONS",
    "sampled_gaussian_event",
    "contains_non_private",
    "drop_empty",
    "check_counts",
    "smallest_active_sigma",
    "clamp_sigma",
]

#: Noise multipliers outside [MIN, MAX] (module docstring): below, ε_UB = ∞; above, evaluated at MAX.
NOISE_MULTIPLIER_MIN = 1e-150
NOISE_MULTIPLIER_MAX = 1e100


DP_ACCOUNTING_RELATIONS = {
    "add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
}


def sampled_gaussian_event(*, sampling_rate: float, noise_multiplier: float, num_steps: int) -> dpe.DpEvent:
    """The DP-SGD event ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)`` (Abadi et al., Alg. 1)."""
    q = v.half_open_unit("sampling_rate", sampling_rate)
    sigma = v.positive("noise_multiplier", noise_multiplier)
    steps = v.integer("num_steps", num_steps, minimum=0)
    if steps > MAX_NUM_STEPS:
        raise v.invalid("num_steps", f"num_steps must be <= 10**18, got {steps!r}")
    inner: dpe.DpEvent = dpe.GaussianDpEvent(sigma)
    if q < 1.0:
        inner = dpe.PoissonSampledDpEvent(q, inner)
    return dpe.SelfComposedDpEvent(inner, steps)


def contains_non_private(event: dpe.DpEvent) -> bool:
    if isinstance(event, dpe.NonPrivateDpEvent):
        return True
    if isinstance(event, (dpe.SelfComposedDpEvent, dpe.PoissonSampledDpEvent)):
        return contains_non_private(event.event)
    if isinstance(event, dpe.ComposedDpEvent):
        return any(contains_non_private(e) for e in event.events)
    return False


def drop_empty(event: dpe.DpEvent) -> dpe.DpEvent:
    """Replaces zero-fold self-compositions by ``NoOpDpEvent`` (dp_accounting's PLD refuses count 0)."""
    if isinstance(event, dpe.SelfComposedDpEvent):
        return dpe.NoOpDpEvent() if event.count == 0 else dpe.SelfComposedDpEvent(drop_empty(event.event), event.count)
    if isinstance(event, dpe.ComposedDpEvent):
        return dpe.ComposedDpEvent([drop_empty(e) for e in event.events])
    return event


def check_counts(event: dpe.DpEvent) -> None:
    """Refuses self-composition counts above :data:`MAX_NUM_STEPS` (float conversions overflow)."""
    if isinstance(event, dpe.SelfComposedDpEvent):
        if (
            isinstance(event.count, numbers.Integral)
            and not isinstance(event.count, bool)
            and int(event.count) > MAX_NUM_STEPS
        ):
            raise v.invalid("event", f"event count (num_steps) must be <= 10**18, got {event.count!r}")
        check_counts(event.event)
    elif isinstance(event, dpe.PoissonSampledDpEvent):
        check_counts(event.event)
    elif isinstance(event, dpe.ComposedDpEvent):
        for e in event.events:
            check_counts(e)


def smallest_active_sigma(event: dpe.DpEvent, active: bool = True) -> float:
    """Smallest σ among Gaussian steps that run at least once with a non-zero sampling rate."""
    if isinstance(event, dpe.GaussianDpEvent):
        return float(event.noise_multiplier) if active else math.inf
    if isinstance(event, dpe.PoissonSampledDpEvent):
        return smallest_active_sigma(event.event, active and event.sampling_probability > 0)
    if isinstance(event, dpe.SelfComposedDpEvent):
        return smallest_active_sigma(event.event, active and int(event.count) > 0)
    if isinstance(event, dpe.ComposedDpEvent):
        return min((smallest_active_sigma(e, active) for e in event.events), default=math.inf)
    return math.inf


def clamp_sigma(event: dpe.DpEvent) -> dpe.DpEvent:
    """``event`` with every σ above :data:`NOISE_MULTIPLIER_MAX` lowered to it (a valid bound, see module docstring)."""
    if isinstance(event, dpe.GaussianDpEvent):
        return dpe.GaussianDpEvent(NOISE_MULTIPLIER_MAX) if event.noise_multiplier > NOISE_MULTIPLIER_MAX else event
    if isinstance(event, dpe.PoissonSampledDpEvent):
        return dpe.PoissonSampledDpEvent(event.sampling_probability, clamp_sigma(event.event))
    if isinstance(event, dpe.SelfComposedDpEvent):
        return dpe.SelfComposedDpEvent(clamp_sigma(event.event), event.count)
    if isinstance(event, dpe.ComposedDpEvent):
        return dpe.ComposedDpEvent([clamp_sigma(e) for e in event.events])
    return event
