"""The RDP of PATE's three noisy aggregators, per query (torch-free).

``LNMax`` (Papernot et al. 2017, §3 and Theorem 3): argmax_j n_j + Lap(b), (2/b, 0)-DP per
query, with its moments analysis. ``GNMax`` (Papernot et al. 2018, §3 and Appendix B):
argmax_j n_j + N(0, σ²), data-independent RDP λ/σ² and data-dependent RDP by Theorem 6 with
Proposition 10's higher orders. ``Confident-GNMax``'s threshold step (2018, Algorithm 1 and
§4.1): the GNMax bound with σ replaced by √2·σ1, and its expected cost.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from dpaudit import _validate as v
from dpaudit.privacy.pate.votes import GNMAX_ORDERS, LNMAX_MOMENT_ORDERS, _counts, _log1mexp, _orders, _threshold_step

__all__ = [
    "lnmax_epsilon_per_query",
    "lnmax_q_bound",
    "lnmax_log_moments",
    "gnmax_log_q",
    "gnmax_rdp_data_independent",
    "gnmax_rdp_from_log_q",
    "gnmax_rdp",
    "threshold_log_answer_probability",
    "threshold_rdp",
    "confident_gnmax_expected_rdp",
]


# --------------------------------------------------------------------------------------------
# LNMax (2017)
# --------------------------------------------------------------------------------------------


def lnmax_epsilon_per_query(*, laplace_scale: float) -> float:
    """Pure ε of one LNMax answer: 2γ = 2/b (Papernot et al. 2017, §3).

    One teacher changing its vote lowers one count and raises another, so the Laplace
    report-noisy-max with scale b = 1/γ is (2γ, 0)-DP — not 1/b (docs/defenses/pate.md §6).
    """
    b = v.positive("laplace_scale", laplace_scale)
    return 2.0 / b


def lnmax_q_bound(counts: Any, *, laplace_scale: float) -> float:
    """Bound on q = P(LNMax does not answer the plurality class) (Papernot et al. 2017, Thm 3's q).

    q ≤ Σ_{j≠j*} (2 + γ(n_j* − n_j)) / (4 exp(γ(n_j* − n_j))), capped at 1 − 1/m.
    """
    n = _counts(counts).astype(float)
    gamma = 1.0 / v.positive("laplace_scale", laplace_scale)
    top = int(np.argmax(n))
    gaps = np.delete(n[top] - n, top)
    q = float(np.sum((2.0 + gamma * gaps) / (4.0 * np.exp(gamma * gaps))))
    return min(q, 1.0 - 1.0 / n.size)


def lnmax_log_moments(
    counts: Any, *, laplace_scale: float, moment_orders: ArrayLike = LNMAX_MOMENT_ORDERS, data_dependent: bool = True
) -> np.ndarray:
    """Log moments α(l) of one LNMax query (Papernot et al. 2017, Theorem 2 and 3; Abadi et al. 2016).

    Data-independent: α(l) ≤ min(2γ² l(l + 1), 2γ l) (the (2γ, 0)-DP bound). Data-dependent
    (Theorem 3), valid when q < (e^{2γ} − 1)/(e^{4γ} − 1): α(l) ≤ ln((1 − q)((1 − q)/(1 −
    e^{2γ} q))^l + q e^{2γ l}), with q from :func:`lnmax_q_bound`; the minimum is returned.

    Args:
        counts: one query's votes per class.
        laplace_scale: b = 1/γ.
        moment_orders: the l's (positive numbers).
        data_dependent: whether to use the bound on q.

    Returns:
        α(l) per moment order (float array).
    """
    b = v.positive("laplace_scale", laplace_scale)
    ls = np.atleast_1d(np.asarray(moment_orders, dtype=float))
    if ls.ndim != 1 or ls.size == 0 or not np.all(np.isfinite(ls)) or np.any(ls <= 0):
        raise v.invalid(
            "moment_orders", f"moment_orders must be a non-empty sequence of positive numbers, got {moment_orders!r}"
        )
    eps = 2.0 / b
    bound = np.minimum(0.5 * eps * eps * ls * (ls + 1.0), eps * ls)
    q = lnmax_q_bound(counts, laplace_scale=b)  # validates counts
    if not data_dependent:
        return bound
    if q < math.expm1(eps) / math.expm1(2.0 * eps):
        log1q = math.log1p(-q)
        first = log1q + ls * (log1q - math.log1p(-math.exp(eps) * q))
        second = math.log(q) + eps * ls if q > 0 else np.full_like(ls, -np.inf)
        dep = np.logaddexp(first, second)
        bound = np.minimum(bound, np.maximum(dep, 0.0))
    return bound


# --------------------------------------------------------------------------------------------
# GNMax (2018)
# --------------------------------------------------------------------------------------------


def gnmax_log_q(counts: Any, *, sigma: float) -> float:
    """ln q̃, the union bound on P(GNMax does not answer the plurality class) (2018, Proposition 7).

    q̃ = Σ_{i≠i*} ½ erfc((n_i* − n_i)/(2σ)), capped at 1 − 1/m; evaluated in log space
    (½ erfc(x/(2σ)) = Φ(−x/(√2σ))), so a unanimous vote far from any tie still gets a finite
    ln q̃. Only one plurality class is excluded; tied classes contribute ½ each.
    """
    n = _counts(counts).astype(float)
    s = v.positive("sigma", sigma)
    return _log_q_gaussian(n, s)


def _log_q_gaussian(n: np.ndarray, sigma: float) -> float:
    top = int(np.argmax(n))
    gaps = np.delete(n[top] - n, top)
    logq = float(special.logsumexp(special.log_ndtr(-gaps / (math.sqrt(2.0) * sigma))))
    return min(logq, math.log1p(-1.0 / n.size))


def gnmax_rdp_data_independent(*, sigma: float, orders: ArrayLike = GNMAX_ORDERS) -> np.ndarray:
    """Data-independent RDP of GNMax: λ/σ² (2018, Proposition 8; L2 sensitivity √2)."""
    s = v.positive("sigma", sigma)
    return _per_variance(_orders(orders), s)


def _theorem6(logq: float, sigma: float, lam: np.ndarray) -> np.ndarray:
    """Theorem 6 with Proposition 10's μ's, no validity check (the caller checks)."""
    var = sigma * sigma
    mu2 = sigma * math.sqrt(-logq)
    mu1 = mu2 + 1.0
    eps1, eps2 = mu1 / var, mu2 / var
    log1q = _log1mexp(logq)
    log_a = log1q - _log1mexp((logq + eps2) * (1.0 - 1.0 / mu2))
    log_b = eps1 - logq / (mu1 - 1.0)
    return np.logaddexp(log1q + (lam - 1.0) * log_a, logq + (lam - 1.0) * log_b) / (lam - 1.0)


def _theorem6_valid(logq: float, sigma: float) -> tuple[bool, float]:
    """Whether Theorem 6's conditions independent of λ hold; returns them and μ1 (λ < μ1 needed)."""
    if not logq < 0.0:
        return False, 0.0
    var = sigma * sigma
    mu2 = sigma * math.sqrt(-logq)
    mu1 = mu2 + 1.0
    if not mu2 > 1.0:
        return False, mu1
    eps2 = mu2 / var
    if not logq + eps2 < 0.0:  # q̃ e^{ε2} < 1
        return False, mu1
    # Lemma 9: q̃ must lie where the bound is increasing in q̃ and A is positive.
    limit = (mu2 - 1.0) * eps2 - mu2 * (math.log(mu1 / (mu1 - 1.0)) + math.log(mu2 / (mu2 - 1.0)))
    return logq <= limit, mu1


def gnmax_rdp_from_log_q(log_q: float, *, sigma: float, orders: ArrayLike = GNMAX_ORDERS) -> np.ndarray:
    """Data-dependent RDP of GNMax given ln q̃ (2018, Theorem 6 with Proposition 10).

    μ2 = σ √(ln(1/q̃)), μ1 = μ2 + 1, ε_i = μ_i/σ²; valid only if μ1 > λ, μ2 > 1, q̃ e^{ε2} < 1
    and ln q̃ ≤ (μ2 − 1)ε2 − μ2[ln(μ1/(μ1 − 1)) + ln(μ2/(μ2 − 1))]. Where valid,
    RDP(λ) ≤ ln((1 − q̃) A^{λ−1} + q̃ B^{λ−1})/(λ − 1) with A = (1 − q̃)/(1 − (q̃ e^{ε2})^{(μ2−1)/μ2}),
    B = e^{ε1}/q̃^{1/(μ1−1)}; everywhere the result is min(that, λ/σ²). q̃ = 0 (ln q̃ = −∞) gives 0.

    Args:
        log_q: ln q̃ ≤ 0 (e.g. from :func:`gnmax_log_q`).
        sigma: the noise standard deviation σ.
        orders: RDP orders λ > 1.

    Returns:
        RDP per order (float array).
    """
    s = v.positive("sigma", sigma)
    lam = _orders(orders)
    logq = v.real("log_q", log_q)
    if logq > 0.0:
        raise v.invalid("log_q", f"log_q must be <= 0 (the log of a probability), got {log_q!r}")
    return _rdp_from_log_q(logq, s, lam)


def _per_variance(numerator: Any, sigma: float) -> np.ndarray:
    """``numerator / σ²`` (the Gaussian mechanism's RDP λ/σ²) without a RuntimeWarning.

    Where σ² underflows to 0 or the quotient overflows, the result is ∞: no finite bound exists
    in floating point, which is what the analysis then reports.
    """
    with np.errstate(divide="ignore", over="ignore"):
        return np.asarray(numerator, dtype=float) / (sigma * sigma)


def _rdp_from_log_q(logq: float, sigma: float, lam: np.ndarray) -> np.ndarray:
    ind = _per_variance(lam, sigma)
    if not np.isfinite(ind).any():
        # σ so small that λ/σ² is ∞ at every order: Theorem 6's conditions (ε_i = μ_i/σ²) cannot
        # be checked either, so no data-dependent bound is established: ∞ too, never a finite ε
        # beside an infinite data-independent one.
        return ind
    if logq == -math.inf:
        return np.zeros_like(lam)
    valid, mu1 = _theorem6_valid(logq, sigma)
    if not valid:
        return ind
    mask = lam < mu1
    if not mask.any():
        return ind
    out = ind.copy()
    dep = _theorem6(logq, sigma, lam[mask])
    out[mask] = np.minimum(ind[mask], np.maximum(dep, 0.0))
    return out


def gnmax_rdp(
    counts: Any, *, sigma: float, orders: ArrayLike = GNMAX_ORDERS, data_dependent: bool = True
) -> np.ndarray:
    """RDP of one GNMax answer on ``counts`` (2018, Theorem 6 / Proposition 8); see :func:`gnmax_rdp_from_log_q`."""
    n = _counts(counts).astype(float)
    s = v.positive("sigma", sigma)
    lam = _orders(orders)
    if not data_dependent:
        return _per_variance(lam, s)
    return _rdp_from_log_q(_log_q_gaussian(n, s), s, lam)


# --------------------------------------------------------------------------------------------
# Confident-GNMax's threshold step (2018)
# --------------------------------------------------------------------------------------------


def threshold_log_answer_probability(counts: Any, *, threshold: float, threshold_sigma: float) -> float:
    """ln P_ans, P_ans = P(max_j n_j + N(0, σ1²) ≥ T) = Q((T − max_j n_j)/σ1) (2018, Algorithm 1).

    The 2018 reference rounds max(counts) first (to allow fractional votes); counts here are
    integers (:func:`check_votes`), so rounding changes nothing.
    """
    n = _counts(counts)
    t, s1 = _threshold_step(threshold, threshold_sigma)
    return float(special.log_ndtr((float(n.max()) - t) / s1))


def _threshold_rdp_from_log_p(logp: float, sigma1: float, lam: np.ndarray) -> np.ndarray:
    # Sensitivity 1 instead of GNMax's √2: the GNMax bound at σ√2 (2018, §4.1).
    logq = min(logp, _log1mexp(logp))
    return _rdp_from_log_q(logq, math.sqrt(2.0) * sigma1, lam)


def threshold_rdp(
    counts: Any,
    *,
    threshold: float,
    threshold_sigma: float,
    orders: ArrayLike = GNMAX_ORDERS,
    data_dependent: bool = True,
) -> np.ndarray:
    """RDP of Confident-GNMax's noisy threshold check on one query (2018, §4.1 and Theorem 6).

    The check has sensitivity 1, so its data-independent RDP is λ/(2σ1²) and its data-dependent
    bound is :func:`gnmax_rdp_from_log_q` at σ = √2 σ1 with ln q = min(ln P_ans, ln(1 − P_ans)).
    """
    logp = threshold_log_answer_probability(counts, threshold=threshold, threshold_sigma=threshold_sigma)
    s1 = float(threshold_sigma)
    lam = _orders(orders)
    if not data_dependent:
        return _per_variance(lam / 2.0, s1)
    return _threshold_rdp_from_log_p(logp, s1, lam)


def confident_gnmax_expected_rdp(
    counts: Any, *, threshold: float, threshold_sigma: float, sigma: float, orders: ArrayLike = GNMAX_ORDERS
) -> np.ndarray:
    """Expected data-dependent RDP of one Confident-GNMax query: RDP1 + P_ans · RDP2 (2018 analysis scripts)."""
    rdp1 = threshold_rdp(counts, threshold=threshold, threshold_sigma=threshold_sigma, orders=orders)
    p = math.exp(threshold_log_answer_probability(counts, threshold=threshold, threshold_sigma=threshold_sigma))
    return rdp1 + p * gnmax_rdp(counts, sigma=sigma, orders=orders)
