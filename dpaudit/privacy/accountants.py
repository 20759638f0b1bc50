"""Privacy accountants: upper bounds ε_UB for a mechanism described as a ``dp_accounting`` event.

Four named accountants, from loosest to tightest on DP-SGD:

``strong``
    Strong (advanced) composition of Dwork, Rothblum & Vadhan (2010, Theorem III.3), applied
    as in Abadi et al. (2016), Figure 2: every step is a classical Gaussian mechanism
    amplified by Poisson sampling to (q·ε0, q·δ_g), and the total δ is split optimally
    between the per-step δ_g's and the composition slack δ'.
``moments``
    Abadi et al.'s moments accountant (2016, Theorem 2): Rényi DP of the sampled Gaussian at
    integer orders α = λ + 1 ∈ {2, …, 33} with the standard tail-bound conversion
    ε = min_α RDP(α) + ln(1/δ)/(α − 1) (Mironov 2017, Proposition 3).
``rdp``
    The same RDP curve on a fine fractional grid, converted with the improved bound of
    Balle et al. (2020) / Canonne, Kamath & Steinke (2020). Fractional orders of the
    Poisson-sampled Gaussian use the signed series of Mironov, Talwar & Zhang (2019, §3.3),
    as Opacus and TF Privacy do (see :func:`_log_a_frac`).
``pld``
    Privacy loss distributions (Koskela et al. 2020; Doroshenko et al. 2022), the tightest in
    practice; ``dp_accounting``'s pessimistic estimate, so it stays an upper bound.

RDP and PLD come from ``dp_accounting``; what it lacks (the standard conversion on integer
orders, strong composition, calibration that never overshoots) is written here.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable

import dp_accounting
import numpy as np
from dp_accounting import dp_event as dpe
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import optimize, special

from dpaudit import _validate as v

__all__ = [
    "ACCOUNTANTS",
    "MOMENTS_ORDERS",
    "RDP_ORDERS",
    "compute_epsilon",
    "calibrate_noise_multiplier",
    "calibrate_num_steps",
    "smallest_noise_multiplier",
    "largest_num_steps",
    "sampled_gaussian_event",
]

ACCOUNTANTS = ("moments", "rdp", "pld", "strong")

# Abadi et al. track moments for λ ≤ 32, i.e. RDP orders 2..33.
MOMENTS_ORDERS = tuple(range(2, 34))
# The customary grid (Opacus, TF Privacy) extended upward so that small-T / large-σ settings
# find their optimum inside the grid rather than at its end.
RDP_ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [80, 96, 128, 192, 256, 384, 512, 1024])

# PLD discretisation: 1e-4 in the privacy-loss domain keeps ε within ~0.1 % of the exact
# curve for DP-SGD-sized compositions while composing 10^4 steps in about a second.
PLD_DISCRETIZATION = 1e-4

_NEIGHBOURING = {
    "add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
}


def sampled_gaussian_event(*, sampling_rate: float, noise_multiplier: float, num_steps: int) -> dpe.DpEvent:
    """The DP-SGD event ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)`` (Abadi et al., Alg. 1)."""
    q = v.half_open_unit("sampling_rate", sampling_rate)
    sigma = v.positive("noise_multiplier", noise_multiplier)
    steps = v.integer("num_steps", num_steps, minimum=0)
    inner: dpe.DpEvent = dpe.GaussianDpEvent(sigma)
    if q < 1.0:
        inner = dpe.PoissonSampledDpEvent(q, inner)
    return dpe.SelfComposedDpEvent(inner, steps)


def _contains_non_private(event: dpe.DpEvent) -> bool:
    if isinstance(event, dpe.NonPrivateDpEvent):
        return True
    if isinstance(event, (dpe.SelfComposedDpEvent, dpe.PoissonSampledDpEvent)):
        return _contains_non_private(event.event)
    if isinstance(event, dpe.ComposedDpEvent):
        return any(_contains_non_private(e) for e in event.events)
    return False


# Fractional-order RDP of the Poisson-sampled Gaussian.
#
# dp_accounting (checked: 0.6.0) sums the series of Mironov, Talwar & Zhang (2019, §3.3) with
# |C(α, i)| in place of the generalised binomial coefficient, whose sign alternates for
# i > α + 1. That is a valid but loose upper bound (RDP up to ~10 % too large at α < 2), and
# when the all-positive series has not converged after 1000 terms it drops the order (∞),
# which at q = 0.1, σ = 0.8 removes α ≤ 1.6: ε(T = 5000, δ = 1e-5) came out 169.8 instead of
# 131.2. The signed series below is the one Opacus and TF Privacy evaluate; it is summed
# exactly (``math.fsum``) and refused (falling back to dp_accounting's bound) when the
# cancellation is too severe for double precision or the tail has not died out.
_FRAC_CHUNK = 512
_FRAC_MAX_TERMS = 1 << 17
_FRAC_TAIL = 32.0  # stop once the terms are below e^-32 (≤ e^-32 · A_α, since A_α ≥ 1)
_FRAC_MAX_CANCELLATION = 14.0  # refuse when the largest term exceeds the sum by more than e^14


def _log_a_frac(q: float, sigma: float, alpha: float) -> float | None:
    """ln A_α of the sampled Gaussian at fractional α, 0 < q < 1; ``None`` if unreliable.

    A_α = A0 + A1 with, summed over i = 0, 1, … with the signed generalised binomial C(α, i),
    A0 = Σ C(α,i) q^i (1−q)^{α−i} e^{(i²−i)/2σ²} ½erfc((i − z0)/(√2σ)) and
    A1 = Σ C(α,i) q^{α−i} (1−q)^i e^{(j²−j)/2σ²} ½erfc((z0 − j)/(√2σ)), j = α − i,
    z0 = σ² ln(1/q − 1) + ½ (accounting.md §1).
    """
    z0 = sigma**2 * math.log(1.0 / q - 1.0) + 0.5
    log_q, log_1mq = math.log(q), math.log1p(-q)
    inv_2s2 = 0.5 / sigma**2
    # C(α, i) has max(0, i − ⌊α⌋ − 1) negative factors (α − k, k > α).
    first_negative = math.floor(alpha) + 1
    lgamma_alpha = float(special.gammaln(alpha + 1.0))
    logs: list[np.ndarray] = []
    signs: list[np.ndarray] = []
    half = _FRAC_CHUNK // 2
    start = 0
    while start < _FRAC_MAX_TERMS:
        i = np.arange(start, start + _FRAC_CHUNK, dtype=float)
        j = alpha - i
        log_coef = lgamma_alpha - special.gammaln(i + 1.0) - special.gammaln(j + 1.0)
        sign = np.where((np.maximum(i - first_negative, 0.0) % 2) == 1, -1.0, 1.0)
        s0 = log_coef + i * log_q + j * log_1mq + (i * i - i) * inv_2s2 + special.log_ndtr((z0 - i) / sigma)
        s1 = log_coef + j * log_q + i * log_1mq + (j * j - j) * inv_2s2 + special.log_ndtr((j - z0) / sigma)
        logs += [s0, s1]
        signs += [sign, sign]
        start += _FRAC_CHUNK
        # A_α ≥ 1 (a Rényi divergence is ≥ 0), so terms below e^-TAIL are below e^-TAIL · A_α;
        # once they are also decreasing, the alternating tail is bounded by the first of them.
        tail_done = start > alpha + 2 and max(s0[-1], s1[-1]) < -_FRAC_TAIL and bool(np.all(np.diff(s0[-half:]) <= 0)) and bool(np.all(np.diff(s1[-half:]) <= 0))
        if tail_done:
            all_logs = np.concatenate(logs)
            top = float(np.max(all_logs))
            total = math.fsum(np.concatenate(signs) * np.exp(all_logs - top))
            if not total > 0:
                return None
            log_total = top + math.log(total)
            return None if top - log_total > _FRAC_MAX_CANCELLATION else log_total
    return None


@functools.lru_cache(maxsize=512)
def _sampled_gaussian_rdp(q: float, sigma: float, orders: tuple[float, ...]) -> np.ndarray:
    """RDP curve (add/remove one) of a single Poisson-sampled Gaussian step (read-only)."""
    out = np.full(len(orders), np.nan)
    if 0.0 < q < 1.0 and sigma > 0.0:
        for k, alpha in enumerate(orders):
            if not float(alpha).is_integer():
                log_a = _log_a_frac(q, sigma, float(alpha))
                if log_a is not None:
                    out[k] = log_a / (alpha - 1.0)
    rest = [k for k in range(len(orders)) if np.isnan(out[k])]
    if rest:  # integer orders (exact, all terms positive), edge cases and refused orders
        acc = rdp_privacy_accountant.RdpAccountant(orders=[orders[k] for k in rest], neighboring_relation=_NEIGHBOURING["add_or_remove_one"])
        acc.compose(dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(sigma)))
        out[rest] = acc.rdp
    out.setflags(write=False)
    return out


def _add_remove_rdp(event: dpe.DpEvent, orders: tuple[float, ...]) -> np.ndarray:
    if isinstance(event, dpe.PoissonSampledDpEvent) and isinstance(event.event, dpe.GaussianDpEvent):
        return _sampled_gaussian_rdp(float(event.sampling_probability), float(event.event.noise_multiplier), tuple(orders))
    if isinstance(event, dpe.SelfComposedDpEvent):
        if event.count == 0:
            return np.zeros(len(orders))
        return event.count * _add_remove_rdp(event.event, orders)
    if isinstance(event, dpe.ComposedDpEvent):
        total = np.zeros(len(orders))
        for e in event.events:
            total = total + _add_remove_rdp(e, orders)
        return total
    acc = rdp_privacy_accountant.RdpAccountant(orders=list(orders), neighboring_relation=_NEIGHBOURING["add_or_remove_one"])
    acc.compose(event)
    return np.asarray(acc.rdp, dtype=float)


def _drop_empty(event: dpe.DpEvent) -> dpe.DpEvent:
    """Replaces zero-fold self-compositions by ``NoOpDpEvent`` (dp_accounting's PLD refuses count 0)."""
    if isinstance(event, dpe.SelfComposedDpEvent):
        return dpe.NoOpDpEvent() if event.count == 0 else dpe.SelfComposedDpEvent(_drop_empty(event.event), event.count)
    if isinstance(event, dpe.ComposedDpEvent):
        return dpe.ComposedDpEvent([_drop_empty(e) for e in event.events])
    return event


def _rdp_curve(event: dpe.DpEvent, orders: tuple[float, ...], neighbouring: str) -> np.ndarray:
    acc = rdp_privacy_accountant.RdpAccountant(orders=list(orders), neighboring_relation=_NEIGHBOURING[neighbouring])
    if not acc.supports(event):
        raise ValueError(f"accountant 'rdp'/'moments' does not support the event {event!r}")
    if neighbouring == "add_or_remove_one":
        return _add_remove_rdp(event, orders)
    acc.compose(event)
    return acc.rdp


def _warn_if_edge(orders: tuple[float, ...], best: int, name: str) -> None:
    if best in (0, len(orders) - 1) and len(orders) > 1:
        warnings.warn(
            f"{name}: the optimal RDP order {orders[best]} lies at the end of the order grid; the bound is valid but may be loose",
            RuntimeWarning,
            stacklevel=3,
        )


def _moments_epsilon(event: dpe.DpEvent, delta: float, neighbouring: str) -> float:
    rdp = _rdp_curve(event, MOMENTS_ORDERS, neighbouring)
    if np.all(rdp == 0):  # zero Rényi divergence: the outputs do not depend on the data
        return 0.0
    orders = np.asarray(MOMENTS_ORDERS, dtype=float)
    eps = rdp + math.log(1.0 / delta) / (orders - 1.0)
    best = int(np.argmin(eps))
    _warn_if_edge(MOMENTS_ORDERS, best, "moments")
    return float(max(eps[best], 0.0))


def _rdp_epsilon(event: dpe.DpEvent, delta: float, neighbouring: str) -> float:
    rdp = _rdp_curve(event, RDP_ORDERS, neighbouring)
    eps, order = rdp_privacy_accountant.compute_epsilon(RDP_ORDERS, rdp, delta)
    if eps > 0:
        _warn_if_edge(RDP_ORDERS, RDP_ORDERS.index(order), "rdp")
    return float(eps)


def _pld_epsilon(event: dpe.DpEvent, delta: float, neighbouring: str) -> float:
    acc = pld_privacy_accountant.PLDAccountant(neighboring_relation=_NEIGHBOURING[neighbouring], value_discretization_interval=PLD_DISCRETIZATION)
    if not acc.supports(event):
        raise ValueError(f"accountant 'pld' does not support the event {event!r}")
    acc.compose(event)
    return float(acc.get_epsilon(delta))


def _flatten_gaussians(event: dpe.DpEvent, count: int = 1) -> list[tuple[int, float, float]]:
    """(count, sampling rate, σ) for each Gaussian component of ``event``."""
    if isinstance(event, dpe.NoOpDpEvent):
        return []
    if isinstance(event, dpe.GaussianDpEvent):
        return [(count, 1.0, float(event.noise_multiplier))]
    if isinstance(event, dpe.PoissonSampledDpEvent) and isinstance(event.event, dpe.GaussianDpEvent):
        return [(count, float(event.sampling_probability), float(event.event.noise_multiplier))]
    if isinstance(event, dpe.SelfComposedDpEvent):
        return _flatten_gaussians(event.event, count * int(event.count))
    if isinstance(event, dpe.ComposedDpEvent):
        return [g for e in event.events for g in _flatten_gaussians(e, count)]
    raise ValueError(f"accountant 'strong' supports compositions of (Poisson-sampled) Gaussian events only, got {event!r}")


def _strong_epsilon(event: dpe.DpEvent, delta: float) -> float:
    groups = [g for g in _flatten_gaussians(event) if g[0] > 0]
    if not groups:
        return 0.0
    # Total δ spent on the per-step Gaussian δ_g's, after sampling amplification.
    weight = sum(n * q for n, q, _ in groups)

    def epsilon_for(frac: float) -> float:
        slack = frac * delta  # δ' of the composition theorem
        delta_g = (1.0 - frac) * delta / weight
        eps_sq, eps_lin = 0.0, 0.0
        for n, q, sigma in groups:
            eps0 = q * math.sqrt(2.0 * math.log(1.25 / delta_g)) / sigma
            eps_sq += n * eps0**2
            eps_lin += n * eps0 * math.expm1(eps0)
        return math.sqrt(2.0 * math.log(1.0 / slack) * eps_sq) + eps_lin

    res = optimize.minimize_scalar(epsilon_for, bounds=(1e-6, 1 - 1e-6), method="bounded", options={"xatol": 1e-9})
    return float(res.fun)


_DISPATCH: dict[str, Callable[[dpe.DpEvent, float, str], float]] = {
    "moments": _moments_epsilon,
    "rdp": _rdp_epsilon,
    "pld": _pld_epsilon,
    "strong": lambda e, d, _n: _strong_epsilon(e, d),
}


def compute_epsilon(event: dpe.DpEvent, *, delta: float, accountant: str = "pld", neighbouring: str = "add_or_remove_one") -> float:
    """ε at ``delta`` of the mechanism described by ``event`` under the named accountant.

    Args:
        event: a ``dp_accounting`` DpEvent describing everything that touched the data.
        delta: target δ ∈ (0, 1).
        accountant: one of :data:`ACCOUNTANTS`.
        neighbouring: ``add_or_remove_one`` (the DP-SGD analysis) or ``replace_one``.

    Returns:
        ε_UB as a float; ``math.inf`` if the event contains a non-private step.

    Raises:
        ValueError: unknown accountant or neighbouring relation, δ outside (0, 1), or an event
            the accountant cannot analyse.
    """
    delta = v.open_unit("delta", delta)
    accountant = v.choice("accountant", accountant, ACCOUNTANTS)
    neighbouring = v.choice("neighbouring", neighbouring, tuple(_NEIGHBOURING))
    if not isinstance(event, dpe.DpEvent):
        raise TypeError(f"event must be a dp_accounting DpEvent, got {event!r}")
    if _contains_non_private(event):
        return math.inf
    event = _drop_empty(event)
    if accountant == "strong" and neighbouring != "add_or_remove_one":
        raise ValueError(f"accountant 'strong' is defined for add_or_remove_one only, got neighbouring={neighbouring!r}")
    return _DISPATCH[accountant](event, delta, neighbouring)


def calibrate_noise_multiplier(
    *,
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    num_steps: int,
    accountant: str = "pld",
    tolerance: float = 1e-3,
) -> float:
    """Smallest noise multiplier σ (to ``tolerance`` relative) with ε(σ) ≤ ``target_epsilon``.

    Bisection on σ, keeping the upper end of the bracket, so the returned σ never overshoots
    the target: ``compute_epsilon`` at the returned σ is always ≤ ``target_epsilon``.
    """
    target = v.positive("target_epsilon", target_epsilon)
    delta = v.open_unit("delta", delta)
    v.half_open_unit("sampling_rate", sampling_rate)
    steps = v.integer("num_steps", num_steps, minimum=1)
    accountant = v.choice("accountant", accountant, ACCOUNTANTS)
    tolerance = v.positive("tolerance", tolerance)

    def eps(sigma: float) -> float:
        event = sampled_gaussian_event(sampling_rate=sampling_rate, noise_multiplier=sigma, num_steps=steps)
        return compute_epsilon(event, delta=delta, accountant=accountant)

    sigma = smallest_noise_multiplier(eps, target=target, tolerance=tolerance)
    if math.isinf(sigma):
        raise ValueError(f"target_epsilon={target!r} is unreachable at delta={delta!r} with any noise multiplier")
    return sigma


def calibrate_num_steps(
    *,
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    noise_multiplier: float,
    accountant: str = "pld",
    max_steps: int = 10**7,
) -> int:
    """Largest number of steps T with ε(T) ≤ ``target_epsilon`` (never overshooting).

    Raises:
        ValueError: if even one step exceeds the target.
    """
    target = v.positive("target_epsilon", target_epsilon)
    delta = v.open_unit("delta", delta)
    v.half_open_unit("sampling_rate", sampling_rate)
    v.positive("noise_multiplier", noise_multiplier)
    accountant = v.choice("accountant", accountant, ACCOUNTANTS)
    max_steps = v.integer("max_steps", max_steps, minimum=1)

    def eps(steps: int) -> float:
        event = sampled_gaussian_event(sampling_rate=sampling_rate, noise_multiplier=noise_multiplier, num_steps=steps)
        return compute_epsilon(event, delta=delta, accountant=accountant)

    steps = largest_num_steps(eps, target=target, max_steps=max_steps)
    if steps == 0:
        raise ValueError(f"target_epsilon={target!r} is exceeded by a single step at noise_multiplier={noise_multiplier!r}, sampling_rate={sampling_rate!r}")
    return steps


def smallest_noise_multiplier(epsilon_of: Callable[[float], float], *, target: float, tolerance: float = 1e-3, max_sigma: float = 1e6) -> float:
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
