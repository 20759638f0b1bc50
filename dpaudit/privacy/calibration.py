"""Calibrations that never overshoot: the noise or the step count that meets an ε target (torch-free).

:func:`calibrate_noise_multiplier` finds the smallest σ, and :func:`calibrate_num_steps` the
largest T, whose ε_UB under a named accountant stays within the target; both evaluate ε with a
bounded PLD memory budget (:data:`PLD_SOLVER_MEMORY_BUDGET`). :func:`smallest_noise_multiplier`
and :func:`largest_num_steps` are the searches themselves, for any monotone ε.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dpaudit import _validate as v
from dpaudit.privacy.accountant_names import ACCOUNTANTS, MAX_NUM_STEPS
from dpaudit.privacy.accountants import AccountantDeclined, EpsilonResult, compute_epsilon_detailed
from dpaudit.privacy.events import sampled_gaussian_event

__all__ = [
    "PLD_SOLVER_MEMORY_BUDGET",
    "calibrate_noise_multiplier",
    "calibrate_num_steps",
    "smallest_noise_multiplier",
    "largest_num_steps",
]

#: The budget of each evaluation inside :func:`calibrate_noise_multiplier` and
#: :func:`calibrate_num_steps` (256 MiB): they evaluate ε 15-40 times, and a PLD evaluation
#: takes ~10 ms per MB of its budget, so this keeps a calibration to about a minute at worst.
PLD_SOLVER_MEMORY_BUDGET = 1 << 28


def _bound(result: EpsilonResult) -> float:
    """``result.epsilon``; a declined accountant is an error in a calibration (no ε to aim at)."""
    if result.declined:
        raise AccountantDeclined(f"accountant {result.accountant!r} declines: {result.note}")
    return result.epsilon


def calibrate_noise_multiplier(
    *,
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    num_steps: int,
    accountant: str = "pld",
    tolerance: float = 1e-3,
    memory_budget: float = PLD_SOLVER_MEMORY_BUDGET,
) -> float:
    """Smallest noise multiplier σ (to ``tolerance`` relative) with ε(σ) ≤ ``target_epsilon``.

    Bisection on σ, keeping the upper end of the bracket, so the returned σ never overshoots
    the target: ``compute_epsilon`` at the returned σ is always ≤ ``target_epsilon``. The
    search does not go below σ ≈ 1e-3 (:func:`smallest_noise_multiplier`).

    With ``accountant="pld"``, an evaluation whose grid would exceed ``memory_budget`` bytes
    uses ``rdp`` instead (see :func:`compute_epsilon_detailed`). That happens for small σ
    only (the grid shrinks as σ grows), so ε stays monotone in σ, and since the RDP bound is
    the larger, the returned σ still satisfies the PLD bound ≤ ``target_epsilon``.

    Every accountant bounds DP-SGD at every σ (``naive`` and ``strong`` use the exact Gaussian
    ε0, valid for all ε0, rather than declining where the classical formula fails), so each
    finds its own σ; an accountant that declined would raise :class:`AccountantDeclined`.
    """
    target = v.positive("target_epsilon", target_epsilon)
    delta = v.open_unit("delta", delta)
    v.half_open_unit("sampling_rate", sampling_rate)
    steps = v.integer("num_steps", num_steps, minimum=1)
    accountant = v.choice("accountant", accountant, ACCOUNTANTS)
    tolerance = v.positive("tolerance", tolerance)

    def eps(sigma: float) -> float:
        event = sampled_gaussian_event(sampling_rate=sampling_rate, noise_multiplier=sigma, num_steps=steps)
        return _bound(compute_epsilon_detailed(event, delta=delta, accountant=accountant, memory_budget=memory_budget))

    sigma = smallest_noise_multiplier(eps, target=target, tolerance=tolerance)
    if math.isinf(sigma):
        raise v.invalid(
            "target_epsilon", f"target_epsilon={target!r} is unreachable at delta={delta!r} with any noise multiplier"
        )
    return sigma


def calibrate_num_steps(
    *,
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    noise_multiplier: float,
    accountant: str = "pld",
    max_steps: int = 10**7,
    memory_budget: float = PLD_SOLVER_MEMORY_BUDGET,
) -> int:
    """Largest number of steps T ≤ ``max_steps`` with ε(T) ≤ ``target_epsilon`` (never overshooting).

    Returns ``max_steps`` itself when even ``max_steps`` steps stay within the target: callers
    should compare the result with ``max_steps`` to tell "the largest T" from "the cap".
    With ``accountant="pld"``, evaluations beyond ``memory_budget`` use ``rdp`` (as in
    :func:`calibrate_noise_multiplier`; the grid grows with T, so ε stays monotone in T).

    Raises:
        ValueError: if even one step exceeds the target, or ``max_steps`` > :data:`MAX_NUM_STEPS`.
    """
    target = v.positive("target_epsilon", target_epsilon)
    delta = v.open_unit("delta", delta)
    v.half_open_unit("sampling_rate", sampling_rate)
    v.positive("noise_multiplier", noise_multiplier)
    accountant = v.choice("accountant", accountant, ACCOUNTANTS)
    max_steps = v.integer("max_steps", max_steps, minimum=1)
    if max_steps > MAX_NUM_STEPS:
        raise v.invalid("max_steps", f"max_steps must be <= 10**18, got {max_steps!r}")

    def eps(steps: int) -> float:
        event = sampled_gaussian_event(sampling_rate=sampling_rate, noise_multiplier=noise_multiplier, num_steps=steps)
        return _bound(compute_epsilon_detailed(event, delta=delta, accountant=accountant, memory_budget=memory_budget))

    steps = largest_num_steps(eps, target=target, max_steps=max_steps)
    if steps == 0:
        raise v.invalid(
            "target_epsilon",
            f"target_epsilon={target!r} is exceeded by a single step at "
            f"noise_multiplier={noise_multiplier!r}, sampling_rate={sampling_rate!r}",
        )
    return steps


def smallest_noise_multiplier(
    epsilon_of: Callable[[float], float], *, target: float, tolerance: float = 1e-3, max_sigma: float = 1e6
) -> float:
    """Smallest σ (to ``tolerance`` relative) with ``epsilon_of(σ)`` ≤ ``target``, for any
    mechanism whose ε decreases in σ; ``math.inf`` when even ``max_sigma`` overshoots.

    Bisection keeping the upper end of the bracket, so the result never overshoots.
    """
    lo, hi = 0.0, 1.0
    while epsilon_of(hi) > target:
        lo, hi = hi, hi * 2.0
        if hi > max_sigma:
            return math.inf
    if lo == 0.0:
        lo = hi / 2.0
        while lo > 1e-3 and epsilon_of(lo) <= target:
            hi, lo = lo, lo / 2.0
    while (hi - lo) / hi > tolerance:
        mid = 0.5 * (lo + hi)
        if epsilon_of(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


def largest_num_steps(epsilon_of: Callable[[int], float], *, target: float, max_steps: int) -> int:
    """Largest T ≤ ``max_steps`` with ``epsilon_of(T)`` ≤ ``target`` for ε increasing in T;
    0 when a single step already overshoots (never overshooting)."""
    if epsilon_of(1) > target:
        return 0
    lo, hi = 1, 2
    while hi <= max_steps and epsilon_of(hi) <= target:
        lo, hi = hi, hi * 2
    if hi > max_steps:
        if epsilon_of(max_steps) <= target:
            return max_steps
        hi = max_steps
    while hi - lo > 1:  # invariant: epsilon_of(lo) <= target < epsilon_of(hi)
        mid = (lo + hi) // 2
        if epsilon_of(mid) <= target:
            lo = mid
        else:
            hi = mid
    return lo
