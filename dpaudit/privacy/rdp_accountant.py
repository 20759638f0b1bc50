"""The Rényi-DP accountants ``moments`` and ``rdp`` (torch-free).

``moments`` is Abadi et al.'s moments accountant (2016, Theorem 2): Rényi DP of the sampled
Gaussian at integer orders α = λ + 1 ∈ {2, …, 33} with the standard tail-bound conversion
ε = min_α RDP(α) + ln(1/δ)/(α − 1) (Mironov 2017, Proposition 3). ``rdp`` is the same curve on a
fine fractional grid, converted with the improved bound of Balle et al. (2020) / Canonne,
Kamath & Steinke (2020). Fractional orders of the Poisson-sampled Gaussian use the signed
series of Mironov, Talwar & Zhang (2019, §3.3), as Opacus and TF Privacy do
(:func:`_log_a_frac`).
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
from dp_accounting import dp_event as dpe
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import special

from dpaudit import _validate as v
from dpaudit.privacy.events import DP_ACCOUNTING_RELATIONS

__all__ = [
    "MOMENTS_ORDERS",
    "RDP_ORDERS",
    "moments_delta",
    "moments_epsilon",
    "rdp_delta",
    "rdp_epsilon",
    "rdp_supports",
]

# Abadi et al. track moments for λ ≤ 32, i.e. RDP orders 2..33.
MOMENTS_ORDERS = tuple(range(2, 34))
# The customary grid (Opacus, TF Privacy) extended upward so that small-T / large-σ settings
# find their optimum inside the grid rather than at its end.
RDP_ORDERS = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [80, 96, 128, 192, 256, 384, 512, 1024]
)


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
    z0 = σ² ln(1/q − 1) + ½ (docs/privacy/accounting.md §1).
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
        tail_done = (
            start > alpha + 2
            and max(s0[-1], s1[-1]) < -_FRAC_TAIL
            and bool(np.all(np.diff(s0[-half:]) <= 0))
            and bool(np.all(np.diff(s1[-half:]) <= 0))
        )
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
        acc = rdp_privacy_accountant.RdpAccountant(
            orders=[orders[k] for k in rest], neighboring_relation=DP_ACCOUNTING_RELATIONS["add_or_remove_one"]
        )
        acc.compose(dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(sigma)))
        out[rest] = acc.rdp
    out.setflags(write=False)
    return out


def _add_remove_rdp(event: dpe.DpEvent, orders: tuple[float, ...]) -> np.ndarray:
    if isinstance(event, dpe.PoissonSampledDpEvent) and isinstance(event.event, dpe.GaussianDpEvent):
        return _sampled_gaussian_rdp(
            float(event.sampling_probability), float(event.event.noise_multiplier), tuple(orders)
        )
    if isinstance(event, dpe.SelfComposedDpEvent):
        if event.count == 0:
            return np.zeros(len(orders))
        return float(event.count) * _add_remove_rdp(event.event, orders)
    if isinstance(event, dpe.ComposedDpEvent):
        total = np.zeros(len(orders))
        for e in event.events:
            total = total + _add_remove_rdp(e, orders)
        return total
    acc = rdp_privacy_accountant.RdpAccountant(
        orders=list(orders), neighboring_relation=DP_ACCOUNTING_RELATIONS["add_or_remove_one"]
    )
    acc.compose(event)
    return np.asarray(acc.rdp, dtype=float)


def _rdp_curve(event: dpe.DpEvent, orders: tuple[float, ...], neighbouring: str) -> np.ndarray:
    acc = rdp_privacy_accountant.RdpAccountant(
        orders=list(orders), neighboring_relation=DP_ACCOUNTING_RELATIONS[neighbouring]
    )
    if not acc.supports(event):
        raise v.invalid("accountant", f"accountant 'rdp'/'moments' does not support the event {event!r}")
    if neighbouring == "add_or_remove_one":
        return _add_remove_rdp(event, orders)
    acc.compose(event)
    return acc.rdp


def _warn_if_edge(orders: tuple[float, ...], best: int, name: str) -> None:
    if best in (0, len(orders) - 1) and len(orders) > 1:
        warnings.warn(
            f"{name}: the optimal RDP order {orders[best]} lies at the end of the "
            "order grid; the bound is valid but may be loose",
            RuntimeWarning,
            stacklevel=4,  # the caller of compute_epsilon_detailed, past the registered entry
        )


def moments_epsilon(event: dpe.DpEvent, delta: float, neighbouring: str) -> float:
    rdp = _rdp_curve(event, MOMENTS_ORDERS, neighbouring)
    if np.all(rdp == 0):  # zero Rényi divergence: the outputs do not depend on the data
        return 0.0
    orders = np.asarray(MOMENTS_ORDERS, dtype=float)
    eps = rdp + math.log(1.0 / delta) / (orders - 1.0)
    best = int(np.argmin(eps))
    _warn_if_edge(MOMENTS_ORDERS, best, "moments")
    return float(max(eps[best], 0.0))


def rdp_epsilon(event: dpe.DpEvent, delta: float, neighbouring: str) -> float:
    rdp = _rdp_curve(event, RDP_ORDERS, neighbouring)
    eps, order = rdp_privacy_accountant.compute_epsilon(RDP_ORDERS, rdp, delta)
    if 0 < eps < math.inf and order in RDP_ORDERS:
        _warn_if_edge(RDP_ORDERS, RDP_ORDERS.index(order), "rdp")
    return float(eps)


def moments_delta(event: dpe.DpEvent, epsilon: float, neighbouring: str) -> float:
    """δ at ``epsilon`` by the standard conversion inverted: min over the integer orders of e^{(α−1)(RDP(α) − ε)}."""
    rdp = _rdp_curve(event, MOMENTS_ORDERS, neighbouring)
    if np.all(rdp == 0):
        return 0.0
    orders = np.asarray(MOMENTS_ORDERS, dtype=float)
    with np.errstate(over="ignore"):
        log_delta = (orders - 1.0) * (rdp - epsilon)
    return float(min(1.0, math.exp(min(0.0, float(np.min(log_delta))))))


def rdp_delta(event: dpe.DpEvent, epsilon: float, neighbouring: str) -> float:
    """δ at ``epsilon`` from the fine-grid RDP curve (``dp_accounting``'s conversion)."""
    rdp = _rdp_curve(event, RDP_ORDERS, neighbouring)
    delta, _ = rdp_privacy_accountant.compute_delta(RDP_ORDERS, rdp, epsilon)
    return float(min(1.0, delta))


def rdp_supports(event: dpe.DpEvent, neighbouring: str) -> bool:
    return bool(
        rdp_privacy_accountant.RdpAccountant(neighboring_relation=DP_ACCOUNTING_RELATIONS[neighbouring]).supports(event)
    )


def rdp_decline(event: dpe.DpEvent, neighbouring: str) -> str:
    """Why the RDP analyses (``moments`` and ``rdp``) cannot evaluate ``event``; empty when they can."""
    if rdp_supports(event, neighbouring):
        return ""
    return f"dp_accounting's RDP analysis does not support the event {event!r} under {neighbouring}"
