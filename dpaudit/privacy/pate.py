"""Privacy analysis of PATE's noisy vote aggregators (torch-free).

Three aggregators of a vote matrix (queries × classes; entry ``[i, j]`` is the number of
teachers voting for class j on query i):

``LNMax`` (Papernot et al. 2017, "Semi-supervised Knowledge Transfer for Deep Learning from
    Private Training Data", §3 and Appendix/Theorem 3)
    argmax_j n_j + Lap(b). Changing one teacher's vote moves two counts by one, so with
    γ = 1/b every query is (2γ, 0)-DP. Its moments analysis bounds the log moment α(l) data-
    independently by 2γ² l(l + 1) and data-dependently through a bound on q, the probability
    of not answering the plurality class (Theorem 3 and Proposition "q bound" of the 2017 paper).
``GNMax`` (Papernot et al. 2018, "Scalable Private Learning with PATE", §3 and Appendix B)
    argmax_j n_j + N(0, σ²). Data-independent RDP λ/σ² (the histogram has L2 sensitivity √2);
    data-dependent RDP from Theorem 6 with Proposition 10's choice of the higher orders, given
    the union bound q̃ of Proposition 7.
``Confident-GNMax`` (2018, Algorithm 1 and §4)
    answers only when max_j n_j + N(0, σ1²) ≥ T, then runs GNMax with σ2. The threshold step
    has sensitivity 1, i.e. it is the GNMax bound with σ replaced by √2·σ1 (Theorem 6 applied
    to the threshold, 2018 §4.1). The realised cost charges GNMax's RDP to the answered queries
    only; without knowing which were answered, the expected cost of a query is the threshold's
    RDP plus P(answered) × GNMax's RDP, as in the 2018 analysis scripts — an expectation, not a
    bound for any one run (:attr:`PateEpsilon.cost`).

RDP adds over queries; (ε, δ) comes from the standard conversion (Mironov 2017, Proposition 3)
minimised over :data:`GNMAX_ORDERS`, the 2018 grid, with the improved conversion (Balle et al.
2020; Canonne, Kamath & Steinke 2020) reported beside it. The 2017 moments accountant is the
same thing at RDP order λ = l + 1: α(l) = l · RDP(l + 1).

A data-dependent ε depends on the private votes. To publish it the 2018 paper (§4.2,
Theorem 23 and Appendix C) adds Gaussian noise scaled to its β-smooth sensitivity (Nissim,
Raskhodnikova & Smith 2007; the GNSS mechanism); :func:`gnmax_local_sensitivities`,
:func:`smooth_sensitivity`, :func:`gnss_rdp` and :func:`release_gnmax_epsilon` implement it for
GNMax, and :func:`threshold_local_sensitivities` with :func:`release_confident_gnmax_epsilon` for
Confident-GNMax. The released value is a noisy estimate; its noise comes from the operating
system's entropy unless a seed is given (then the release is reproducible and not private), its
order is fixed from public parameters (:func:`release_order`), and the release keeps neither the
smooth sensitivity nor the private ε.

Votes must be non-negative integer counts (:func:`check_votes`). Fractional (weighted) votes
are refused: the bound q̃ would still hold, but the 2018 reference rounds max(counts) in the
threshold step and the smooth-sensitivity search walks the votes one teacher at a time, so a
fractional matrix has no well-defined answer there; refusing keeps every analysis exact.

Every function evaluates the mathematics, not the public reference code: the traps listed in
the project's ``pate.md`` §6 (LNMax's ε written as 1/b, the swapped argument order of the
reference's smooth-sensitivity wrapper) do not apply here; privacy arguments are keyword-only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant
from numpy.typing import ArrayLike
from scipy import optimize, special

from dpaudit import _validate as v

__all__ = [
    "settings_used",
    "GNMAX_ORDERS",
    "LNMAX_MOMENT_ORDERS",
    "PATE_COSTS",
    "PateEpsilon",
    "PateAnalysis",
    "SmoothSensitivityRelease",
    "check_votes",
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
    "rdp_to_epsilon",
    "pate_claim",
    "analyze_lnmax",
    "analyze_gnmax",
    "analyze_confident_gnmax",
    "gnmax_local_sensitivities",
    "smooth_sensitivity",
    "gnss_rdp",
    "release_order",
    "release_gnmax_epsilon",
    "threshold_local_sensitivities",
    "release_confident_gnmax_epsilon",
]

#: RDP orders of the 2018 analysis: 2, 2.5, …, 100, then 99 log-spaced values up to 500.
GNMAX_ORDERS: tuple[float, ...] = tuple([float(x) for x in np.arange(2.0, 100.25, 0.5)] + [float(x) for x in np.logspace(np.log10(100.0), np.log10(500.0), 100)[1:]])
#: Moment orders l of the 2017 moments accountant (its code uses l = 1..8).
LNMAX_MOMENT_ORDERS: tuple[int, ...] = tuple(range(1, 9))
#: What a :class:`PateEpsilon` charges: the answers given, or Confident-GNMax's expectation.
PATE_COSTS: tuple[str, ...] = ("realised", "expected")


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def check_votes(votes: Any, *, name: str = "votes", equal_totals: bool = True, allow_empty: bool = False) -> np.ndarray:
    """Validates a vote matrix and returns it as a read-only int64 array (queries × classes).

    Args:
        votes: array-like of shape (queries, classes); entry [i, j] is the number of teachers
            that voted for class j on query i.
        name: the argument named in error messages.
        equal_totals: require every row to sum to the same (non-zero) number of teachers, as
            the analysis does; the aggregators accept any rows.
        allow_empty: accept a matrix with no queries.

    Returns:
        A read-only 2-D int64 copy.

    Raises:
        ValueError: empty matrix, not 2-D, fewer than 2 classes, negative, non-finite or
            non-integer counts (fractional weighted votes are refused, see the module
            docstring), or rows whose totals (the number of teachers) differ.
        TypeError: not numeric.
    """
    if hasattr(votes, "detach") and hasattr(votes, "numpy"):  # a torch tensor, without importing torch
        votes = votes.detach().cpu().numpy()
    try:
        arr = np.asarray(votes)
    except ValueError as exc:  # ragged nested lists
        raise v.invalid(name, f"{name} must be a rectangular queries × classes matrix ({exc})") from None
    if arr.dtype.kind not in "iuf":
        raise v.invalid_type(name, f"{name} must hold numbers (integer vote counts), got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise v.invalid(name, f"{name} must be 2-D (queries × classes), got shape {arr.shape}")
    if arr.size == 0 and not (allow_empty and arr.ndim == 2 and arr.shape[1] >= 2):
        raise v.invalid(name, f"{name} must not be empty, got shape {arr.shape}")
    if arr.shape[1] < 2:
        raise v.invalid(name, f"{name} must have at least 2 classes (columns), got shape {arr.shape}")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise v.invalid(name, f"{name} must be finite, got {name}[{i}, {j}] = {arr[i, j]!r}")
        frac = arr != np.round(arr)
        if frac.any():
            i, j = np.argwhere(frac)[0]
            raise v.invalid(name, f"{name} must be integer counts (weighted votes are not supported), got {name}[{i}, {j}] = {arr[i, j]!r}")
        if np.abs(arr).max() > 2.0**53:
            raise v.invalid(name, f"{name} must be counts below 2**53, got max {np.abs(arr).max()!r}")
    neg = arr < 0
    if neg.any():
        i, j = np.argwhere(neg)[0]
        raise v.invalid(name, f"{name} must be >= 0, got {name}[{i}, {j}] = {arr[i, j]!r}")
    out = arr.astype(np.int64)
    totals = out.sum(axis=1)
    if not equal_totals or out.shape[0] == 0:
        out.setflags(write=False)
        return out
    if np.any(totals != totals[0]):
        i = int(np.argmax(totals != totals[0]))
        raise v.invalid(name, f"{name} rows must all sum to the number of teachers; row 0 sums to {totals[0]}, row {i} to {totals[i]}")
    if totals[0] == 0:
        raise v.invalid(name, f"{name} must count at least one teacher, got rows summing to 0")
    out.setflags(write=False)
    return out


def _counts(counts: Any) -> np.ndarray:
    arr = np.asarray(counts)
    if arr.ndim != 1:
        raise v.invalid("counts", f"counts must be 1-D (one query's votes per class), got shape {arr.shape}")
    return check_votes(arr[None, :])[0]


#: Queries between two calls of an analysis's ``progress`` callback.
PROGRESS_EVERY = 1000


#: The smooth-sensitivity release walks every teacher count per query (10-20 ms a query), so it
#: reports after fewer rows than the analysis (about a second apart).
RELEASE_PROGRESS_EVERY = 50


def _rows(arr: np.ndarray, progress: Callable[[int], None] | None, every: int = PROGRESS_EVERY) -> Iterator[np.ndarray]:
    """The rows of a vote matrix, calling ``progress(n)`` after every ``n`` rows (a long analysis is never silent)."""
    for start in range(0, arr.shape[0], every):
        yield from arr[start : start + every]
        if progress is not None:
            progress(min(every, arr.shape[0] - start))


def _orders(orders: Any, name: str = "orders") -> np.ndarray:
    arr = np.atleast_1d(np.asarray(orders, dtype=float))
    if arr.ndim != 1 or arr.size == 0:
        raise v.invalid(name, f"{name} must be a non-empty 1-D sequence of RDP orders, got {orders!r}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 1.0):
        raise v.invalid(name, f"{name} must be finite RDP orders > 1, got {orders!r}")
    return arr


def _threshold_step(threshold: Any, threshold_sigma: Any) -> tuple[float, float]:
    """(T, σ1) of Confident-GNMax's threshold step, checked: T finite, σ1 > 0."""
    t = v.real("threshold", threshold)
    if not math.isfinite(t):
        raise v.invalid("threshold", f"threshold must be finite, got {threshold!r}")
    return t, v.positive("threshold_sigma", threshold_sigma)


def _order(order: Any) -> float:
    """One RDP order: finite and > 1."""
    lam = v.real("order", order)
    if not (lam > 1.0 and math.isfinite(lam)):
        raise v.invalid("order", f"order must be a finite RDP order > 1, got {order!r}")
    return lam


def _num_teachers(counts: np.ndarray, num_teachers: Any) -> int:
    """The length of a local-sensitivity vector: the teachers, at least the votes cast."""
    total = int(counts.sum())
    teachers = total if num_teachers is None else v.integer("num_teachers", num_teachers, minimum=1)
    if teachers < total:
        raise v.invalid("num_teachers", f"num_teachers must be >= the votes cast ({total}), got {num_teachers!r}")
    return teachers


def _release_orders(orders: Any, beta: float) -> np.ndarray:
    """The orders at which a smooth-sensitivity release with ``beta`` is defined (λ < 1/(2β))."""
    grid = _orders(orders)
    grid = grid[grid < 1.0 / (2.0 * beta)]
    if grid.size == 0:
        raise v.invalid("beta", f"beta must leave some order of the grid below 1/(2*beta), got beta={beta!r}")
    return grid


def _log1mexp(x: float) -> float:
    """ln(1 − e^x) for x ≤ 0, accurate near both ends (Mächler 2012)."""
    if x >= 0.0:
        return -math.inf
    return math.log(-math.expm1(x)) if x > -math.log(2.0) else math.log1p(-math.exp(x))


# --------------------------------------------------------------------------------------------
# LNMax (2017)
# --------------------------------------------------------------------------------------------


def lnmax_epsilon_per_query(*, laplace_scale: float) -> float:
    """Pure ε of one LNMax answer: 2γ = 2/b (Papernot et al. 2017, §3).

    One teacher changing its vote lowers one count and raises another, so the Laplace
    report-noisy-max with scale b = 1/γ is (2γ, 0)-DP — not 1/b (pate.md §6).
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


def lnmax_log_moments(counts: Any, *, laplace_scale: float, moment_orders: ArrayLike = LNMAX_MOMENT_ORDERS, data_dependent: bool = True) -> np.ndarray:
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
        raise v.invalid("moment_orders", f"moment_orders must be a non-empty sequence of positive numbers, got {moment_orders!r}")
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


def gnmax_rdp(counts: Any, *, sigma: float, orders: ArrayLike = GNMAX_ORDERS, data_dependent: bool = True) -> np.ndarray:
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


def threshold_rdp(counts: Any, *, threshold: float, threshold_sigma: float, orders: ArrayLike = GNMAX_ORDERS, data_dependent: bool = True) -> np.ndarray:
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


def confident_gnmax_expected_rdp(counts: Any, *, threshold: float, threshold_sigma: float, sigma: float, orders: ArrayLike = GNMAX_ORDERS) -> np.ndarray:
    """Expected data-dependent RDP of one Confident-GNMax query: RDP1 + P_ans · RDP2 (2018 analysis scripts)."""
    rdp1 = threshold_rdp(counts, threshold=threshold, threshold_sigma=threshold_sigma, orders=orders)
    p = math.exp(threshold_log_answer_probability(counts, threshold=threshold, threshold_sigma=threshold_sigma))
    return rdp1 + p * gnmax_rdp(counts, sigma=sigma, orders=orders)


# --------------------------------------------------------------------------------------------
# RDP → (ε, δ) and whole-matrix analyses
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PateEpsilon:
    """One (ε, δ) bound of a PATE aggregator's answers.

    Attributes:
        epsilon: ε by the standard conversion min_λ RDP(λ) + ln(1/δ)/(λ − 1) (Mironov 2017,
            Proposition 3), the conversion of the 2017 and 2018 papers.
        order: the RDP order λ attaining ``epsilon`` (for LNMax, λ = l + 1 of moment l).
        epsilon_improved: ε by the improved conversion (Balle et al. 2020; Canonne, Kamath &
            Steinke 2020), never larger than ``epsilon``.
        order_improved: the order attaining ``epsilon_improved``.
        delta: the δ of both.
        data_dependent: whether the RDP used the votes (then ε itself is private information;
            publish it through :func:`release_gnmax_epsilon`).
        aggregator: ``"lnmax"``, ``"gnmax"`` or ``"confident-gnmax"``.
        num_queries: queries (rows of the vote matrix) analysed.
        expected_answered: Confident-GNMax only: Σ P_ans over the queries; else ``None``.
        cost: ``"realised"``: the RDP charged is that of the answers the mechanism gave, so ε
            bounds this run's privacy loss (every query of LNMax and GNMax; the answered
            queries of Confident-GNMax); ``"expected"``: Confident-GNMax analysed without
            knowing which queries were answered, charging GNMax's RDP in expectation over the
            threshold step (P_ans · RDP2, as the 2018 analysis scripts do) — an expected cost,
            not a bound for any one run (the realised cost exceeds it whenever more
            high-cost queries pass the threshold than expected).
    """

    epsilon: float
    order: float
    epsilon_improved: float
    order_improved: float
    delta: float
    data_dependent: bool
    aggregator: str
    num_queries: int
    expected_answered: float | None = None
    cost: str = "realised"

    def __post_init__(self) -> None:
        v.choice("cost", self.cost, PATE_COSTS)


@dataclass(frozen=True)
class PateAnalysis:
    """Data-independent and data-dependent bounds of one vote matrix, and the RDP curves behind them.

    Attributes:
        data_independent: the bound that ignores the votes.
        data_dependent: the bound from the votes (never larger in RDP at any order).
        orders: the RDP orders of the curves.
        rdp_data_independent: total RDP per order.
        rdp_data_dependent: total RDP per order.
    """

    data_independent: PateEpsilon
    data_dependent: PateEpsilon
    orders: tuple[float, ...]
    rdp_data_independent: tuple[float, ...]
    rdp_data_dependent: tuple[float, ...]


def rdp_to_epsilon(orders: ArrayLike, rdp: ArrayLike, *, delta: float, conversion: str = "standard") -> tuple[float, float]:
    """(ε, best order) from an RDP curve (``conversion``: ``"standard"`` or ``"improved"``).

    Standard: ε = min_λ RDP(λ) + ln(1/δ)/(λ − 1) (Mironov 2017, Proposition 3). Improved:
    ε = min_λ RDP(λ) + ln((λ − 1)/λ) − (ln δ + ln λ)/(λ − 1) (Balle et al. 2020,
    Theorem 21; Canonne et al. 2020), evaluated by ``dp_accounting`` as :mod:`.accountants` does.
    """
    d = v.open_unit("delta", delta)
    v.choice("conversion", conversion, ("standard", "improved"))
    lam = _orders(orders)
    r = np.asarray(rdp, dtype=float)
    if r.shape != lam.shape or np.any(np.isnan(r)) or np.any(r < 0):
        raise v.invalid("rdp", f"rdp must be one value >= 0 per order ({lam.size}), got shape {r.shape}")
    if conversion == "improved":
        eps, order = rdp_privacy_accountant.compute_epsilon(list(lam), list(r), d)
        return float(eps), float(order)
    eps_vec = r + math.log(1.0 / d) / (lam - 1.0)
    best = int(np.argmin(eps_vec))
    return float(eps_vec[best]), float(lam[best])


def _pate_epsilon(orders: np.ndarray, rdp: np.ndarray, delta: float, **fields: Any) -> PateEpsilon:
    eps, order = rdp_to_epsilon(orders, rdp, delta=delta)
    eps_i, order_i = rdp_to_epsilon(orders, rdp, delta=delta, conversion="improved")
    return PateEpsilon(epsilon=eps, order=order, epsilon_improved=min(eps_i, eps), order_improved=order_i if eps_i <= eps else order, delta=delta, **fields)


def _analysis(orders: np.ndarray, ind: np.ndarray, dep: np.ndarray, delta: float, *, cost: str = "realised", **fields: Any) -> PateAnalysis:
    dep = np.minimum(dep, ind)
    extra = dict(fields)
    expected = extra.pop("expected_answered", None)
    return PateAnalysis(
        # The data-independent bound charges every query that may have been answered: a bound for any run.
        data_independent=_pate_epsilon(orders, ind, delta, data_dependent=False, expected_answered=None, **extra),
        data_dependent=_pate_epsilon(orders, dep, delta, data_dependent=True, expected_answered=expected, cost=cost, **extra),
        orders=tuple(float(x) for x in orders),
        rdp_data_independent=tuple(float(x) for x in ind),
        rdp_data_dependent=tuple(float(x) for x in dep),
    )


def analyze_lnmax(votes: Any, *, laplace_scale: float, delta: float, moment_orders: ArrayLike = LNMAX_MOMENT_ORDERS, progress: Callable[[int], None] | None = None) -> PateAnalysis:
    """The 2017 moments analysis of LNMax over a vote matrix (Papernot et al. 2017, Theorems 2-3).

    α's add over queries; ε = min_l (α(l) + ln(1/δ))/l, i.e. the standard conversion at RDP
    order λ = l + 1 with RDP = α(l)/l (reported ``order`` is λ).

    Args:
        votes: queries × classes vote counts (:func:`check_votes`).
        laplace_scale: b = 1/γ.
        delta: the δ.
        moment_orders: the l's (default 1..8, as the 2017 code).
        progress: called with the number of queries analysed since its last call.
    """
    arr = check_votes(votes)
    b = v.positive("laplace_scale", laplace_scale)
    d = v.open_unit("delta", delta)
    ls = np.atleast_1d(np.asarray(moment_orders, dtype=float))
    ind = lnmax_log_moments(arr[0], laplace_scale=b, moment_orders=ls, data_dependent=False) * arr.shape[0]
    dep = np.zeros_like(ind)
    for row in _rows(arr, progress):
        dep += lnmax_log_moments(row, laplace_scale=b, moment_orders=ls)
    return _analysis(ls + 1.0, ind / ls, dep / ls, d, aggregator="lnmax", num_queries=int(arr.shape[0]))


def analyze_gnmax(votes: Any, *, sigma: float, delta: float, orders: ArrayLike = GNMAX_ORDERS, progress: Callable[[int], None] | None = None) -> PateAnalysis:
    """RDP analysis of GNMax over a vote matrix (2018, Theorem 6 / Proposition 8); RDP adds over queries.

    ``progress`` is called with the number of queries analysed since its last call.
    """
    arr = check_votes(votes)
    s = v.positive("sigma", sigma)
    d = v.open_unit("delta", delta)
    lam = _orders(orders)
    ind = _per_variance(arr.shape[0] * lam, s)
    dep = np.zeros_like(lam)
    for row in _rows(arr, progress):
        dep += _rdp_from_log_q(_log_q_gaussian(row.astype(float), s), s, lam)
    return _analysis(lam, ind, dep, d, aggregator="gnmax", num_queries=int(arr.shape[0]))


def analyze_confident_gnmax(
    votes: Any,
    *,
    threshold: float,
    threshold_sigma: float,
    sigma: float,
    delta: float,
    orders: ArrayLike = GNMAX_ORDERS,
    answered: Any = None,
    progress: Callable[[int], None] | None = None,
) -> PateAnalysis:
    """RDP analysis of Confident-GNMax over a vote matrix (2018, Algorithm 1, §4.1, Theorem 6).

    Every query pays the threshold step. The GNMax step is charged to the answered queries when
    ``answered`` (one bool per query, the mechanism's public output) is given: the realised cost
    (``cost="realised"``). Otherwise the data-dependent ε charges its expectation P_ans · RDP2
    over the threshold step's noise (the 2018 analysis scripts; ``cost="expected"``), which is
    not a bound for any one run, and the data-independent bound charges every query (which
    queries are answered is then unknown).

    Args:
        votes: queries × classes vote counts.
        threshold: T.
        threshold_sigma: σ1.
        sigma: σ2 of the GNMax step.
        delta: the δ.
        orders: RDP orders.
        answered: optional boolean mask of the answered queries.
        progress: called with the number of queries analysed since its last call.
    """
    arr = check_votes(votes)
    t, s1 = _threshold_step(threshold, threshold_sigma)
    s2 = v.positive("sigma", sigma)
    d = v.open_unit("delta", delta)
    lam = _orders(orders)
    k = arr.shape[0]
    mask = None
    if answered is not None:
        mask = np.asarray(answered)
        if mask.dtype != bool or mask.shape != (k,):
            raise v.invalid("answered", f"answered must be a boolean array of one entry per query ({k}), got dtype {mask.dtype} shape {mask.shape}")
    charged = k if mask is None else int(mask.sum())
    ind = _per_variance(k * lam / 2.0, s1) + _per_variance(charged * lam, s2)
    dep = np.zeros_like(lam)
    expected = 0.0
    for i, row in enumerate(_rows(arr, progress)):
        row = row.astype(float)
        logp = float(special.log_ndtr((row.max() - t) / s1))
        p = math.exp(logp)
        expected += p
        weight = p if mask is None else float(mask[i])
        dep += _threshold_rdp_from_log_p(logp, s1, lam)
        if weight > 0:
            dep += weight * _rdp_from_log_q(_log_q_gaussian(row, s2), s2, lam)
    return _analysis(lam, ind, dep, d, aggregator="confident-gnmax", num_queries=int(k), expected_answered=expected, cost="expected" if mask is None else "realised")


# --------------------------------------------------------------------------------------------
# Smooth sensitivity and the GNSS release (2018, §4.2 and Appendix C)
# --------------------------------------------------------------------------------------------


def _log_half_erfc(x: float) -> float:
    return float(special.log_ndtr(-math.sqrt(2.0) * x))


def _log_bu(logq: float, sigma: float, m: int) -> float:
    """ln BU(q), BU(q) = min(1, ((m−1)/2) erfc(erfcinv(2q/(m−1)) − 1/σ)): the largest q̃ one vote away."""
    lm = math.log(m - 1)
    x = -float(special.ndtri_exp(logq - lm)) / math.sqrt(2.0)  # erfcinv(2q/(m−1))
    return min(0.0, lm + _log_half_erfc(x - 1.0 / sigma))


def _log_bl(logq: float, sigma: float, m: int) -> float:
    """ln BL(q), BL(q) = ((m−1)/2) erfc(erfcinv(2q/(m−1)) + 1/σ): the smallest q̃ one vote away."""
    lm = math.log(m - 1)
    x = -float(special.ndtri_exp(logq - lm)) / math.sqrt(2.0)
    return lm + _log_half_erfc(x + 1.0 / sigma)


@functools.lru_cache(maxsize=256)
def _log_q0(sigma: float, order: float) -> float:
    """ln q0: below it the data-dependent bound at ``order`` beats λ/σ² (2018, Appendix B.4)."""
    lam = np.array([order])
    ind = order / (sigma * sigma)

    def gap(logq: float) -> float:
        return float(_theorem6(logq, sigma, lam)[0]) - ind

    # Where Theorem 6 certainly applies: μ1 > λ, μ2 > 1 and ε2 < ln(1/q̃).
    hi = min(-((1.0 + 1.0 / sigma) ** 2), -(((order - 0.99) / sigma) ** 2), -1.0 / sigma**2)
    while not _theorem6_valid(hi, sigma)[0]:
        hi *= 1.5
    if gap(hi) < 0:
        return hi
    lo = 2.0 * hi
    while gap(lo) > 0:
        if lo < -1e6:
            raise v.invalid("sigma", f"no data-dependent regime found for sigma={sigma!r} at order={order!r}")
        lo *= 1.5
    return float(optimize.brentq(gap, lo, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps))


def _log_q1(sigma: float, order: float, m: int) -> float:
    return min(_log_bl(_log_q0(sigma, order), sigma, m), _log_q0(sigma, order))


def _rdp_at(logq: float, sigma: float, order: float, *, slack: float = 0.0) -> float:
    # The data-dependent bound below ln q0, λ/σ² from ln q0 up (the bound is non-decreasing in q̃
    # below q0: conditions C5-C6 of the 2018 Appendix B.4). The bound may jump at q0 (when the
    # data-dependent bound is still below λ/σ² where Theorem 6 stops being certain to apply);
    # ``slack`` makes a neighbour's q̃ that reaches q0 up to rounding take the upper side.
    logq0 = _log_q0(sigma, order)
    if logq >= logq0 - slack * abs(logq0):
        return order / (sigma * sigma)
    if logq == -math.inf:
        return 0.0
    return float(_theorem6(logq, sigma, np.array([order]))[0])


def _local_sens(logq: float, sigma: float, m: int, order: float) -> float:
    """Upper bound on the local sensitivity of the data-dependent RDP at ln q̃ (2018, Algorithm 3, Prop. 13)."""
    logq0, logq1 = _log_q0(sigma, order), _log_q1(sigma, order, m)
    if logq1 <= logq <= logq0:
        logq = logq1
    base = _rdp_at(logq, sigma, order)
    # BU(BL(q0)) = q0 exactly in real arithmetic; round-off must not drop it below the jump at q0.
    up = _rdp_at(_log_bu(logq, sigma, m), sigma, order, slack=1e-9)
    down = _rdp_at(_log_bl(logq, sigma, m), sigma, order)
    return max(up - base, base - down)


def gnmax_local_sensitivities(counts: Any, *, sigma: float, order: float, num_teachers: int | None = None) -> np.ndarray:
    """Local sensitivity at distance d of GNMax's data-dependent RDP, d = 0 … num_teachers − 1 (2018, Algorithms 3-5).

    LS_d bounds how much the RDP at ``order`` changes when one more teacher's vote changes,
    over all vote vectors within d changed votes of ``counts``. q̃ of a neighbour lies in
    [BL(q̃), BU(q̃)] (2018, Proposition 12, with the bounds of pate.md §4). Walking from
    ``counts`` toward the plateau [ln q1, ln q0] — widening the top gap when q̃ is above q0,
    narrowing it when below q1 — gives the largest local sensitivity at each distance; beyond
    it every value is the plateau's.

    Args:
        counts: one query's votes per class (integers).
        sigma: GNMax's σ.
        order: the RDP order λ > 1.
        num_teachers: length of the result (default: the number of votes in ``counts``).

    Returns:
        Float array of LS_d, d = 0 … num_teachers − 1.
    """
    n = _counts(counts)
    s = v.positive("sigma", sigma)
    lam = _order(order)
    teachers = _num_teachers(n, num_teachers)
    m = int(n.size)
    logq0, logq1 = _log_q0(s, lam), _log_q1(s, lam, m)
    out = np.full(teachers, _local_sens(logq1, s, m, lam))
    work = sorted((int(x) for x in n), reverse=True)
    logq = _log_q_gaussian(np.asarray(work, dtype=float), s)
    if logq1 <= logq <= logq0:
        return out
    out[0] = _local_sens(logq, s, m, lam)
    widen = logq > logq0  # otherwise logq < logq1: narrow the gap to raise q̃
    d = 0
    while d + 1 < teachers and ((widen and logq > logq0 and work[1] > 0) or (not widen and logq < logq1)):
        d += 1
        if widen:
            # Move one vote from the runner-up to the leader, then keep the list sorted.
            work[0] += 1
            work[1] -= 1
            i = 1
            while i < m - 1 and work[i] < work[i + 1]:
                work[i], work[i + 1] = work[i + 1], work[i]
                i += 1
        else:
            # Move one vote from the leader to the runner-up (still sorted, as q̃ < q1 < 1 − 1/m).
            work[0] -= 1
            work[1] += 1
        logq = _log_q_gaussian(np.asarray(work, dtype=float), s)
        out[d] = _local_sens(logq, s, m, lam)
    return out


def smooth_sensitivity(local_sensitivities: Any, *, beta: float) -> float:
    """β-smooth sensitivity SS_β = max_d e^{−βd} LS_d (Nissim, Raskhodnikova & Smith 2007; 2018, §4.2)."""
    b = v.positive("beta", beta)
    ls = np.asarray(local_sensitivities, dtype=float)
    if ls.ndim != 1 or ls.size == 0 or np.any(~np.isfinite(ls)) or np.any(ls < 0):
        raise v.invalid("local_sensitivities", f"local_sensitivities must be a non-empty 1-D array of finite values >= 0, got shape {ls.shape}")
    return float(np.max(ls * np.exp(-b * np.arange(ls.size))))


def gnss_rdp(*, beta: float, sigma_ss: float, order: float) -> float:
    """RDP at ``order`` of releasing f + SS_β · N(0, σ_ss²) (GNSS; 2018, Theorem 23 of the arXiv version).

    ε_ss(λ) = λ e^{2β}/σ_ss² + (βλ − ½ ln(1 − 2λβ))/(λ − 1), valid for 1 < λ < 1/(2β).
    """
    b = v.positive("beta", beta)
    s = v.positive("sigma_ss", sigma_ss)
    lam = v.real("order", order)
    if not 1.0 < lam < 1.0 / (2.0 * b):
        raise v.invalid("order", f"order must lie in (1, 1/(2*beta)) = (1, {1.0 / (2.0 * b):g}), got {order!r}")
    return lam * math.exp(2.0 * b) / (s * s) + (b * lam - 0.5 * math.log1p(-2.0 * lam * b)) / (lam - 1.0)


@dataclass(frozen=True)
class SmoothSensitivityRelease:
    """What a GNSS release of a data-dependent ε publishes (2018, §4.2, Theorem 23, Algorithm GNSS).

    Only publishable values: the noisy estimate and the public parameters of the release. The
    private inputs (the data-dependent RDP, its smooth sensitivity, the noise draw) are never
    stored here, so no printout of a release can undo it; :func:`release_order` fixes the order
    from public parameters, since an order chosen from the data-dependent analysis would itself
    leak the votes.

    Attributes:
        epsilon_noisy_estimate: the released ε at ``order``: ``rdp_noisy_estimate`` +
            ``rdp_release`` + ln(1/δ)/(λ − 1). A noisy estimate of the data-dependent ε (plus
            the release's own cost), not a bound: it lies below the true value about half the time.
        rdp_noisy_estimate: the data-dependent total RDP at λ plus SS_β · N(0, σ_ss²), clipped
            at 0 (post-processing: RDP is never negative).
        rdp_release: the RDP ε_ss(λ) that publishing the estimate itself costs (:func:`gnss_rdp`;
            data-independent), composed into ``epsilon_noisy_estimate``.
        order: the RDP order λ, fixed before looking at the votes.
        order_rule: ``"public"`` (chosen by :func:`release_order` from public parameters) or
            ``"given"`` (passed by the caller, who must have fixed it without the votes).
        delta: the δ.
        beta: β of the smooth sensitivity.
        sigma_ss: σ_ss, the noise's standard deviation in units of SS_β.
        seed: ``None`` when the noise came from the operating system's entropy (the release is
            private); a seed makes it reproducible — and then it is not private, since anyone
            with the seed can subtract the noise.
        aggregator: ``"gnmax"`` or ``"confident-gnmax"``.
        reproducible: whether ``seed`` was given.
        private: ``not reproducible``: whether the release is differentially private (a
            reproducible one is not: do not publish it).
        data_dependent: always ``True`` (what is estimated is a data-dependent ε).
        sanitised: always ``True`` (it went through the smooth-sensitivity mechanism).
    """

    epsilon_noisy_estimate: float
    rdp_noisy_estimate: float
    rdp_release: float
    order: float
    order_rule: str
    delta: float
    beta: float
    sigma_ss: float
    seed: int | None
    aggregator: str = "gnmax"
    reproducible: bool = field(init=False)
    private: bool = field(init=False)
    data_dependent: bool = True
    sanitised: bool = True

    def __post_init__(self) -> None:
        v.choice("order_rule", self.order_rule, ("public", "given"))
        object.__setattr__(self, "reproducible", self.seed is not None)
        object.__setattr__(self, "private", self.seed is None)


def release_order(
    *, sigma: float, num_answered: int, delta: float, beta: float, sigma_ss: float, num_queries: int = 0, threshold_sigma: float | None = None, orders: ArrayLike = GNMAX_ORDERS
) -> float:
    """The RDP order of a smooth-sensitivity release, from public parameters only.

    The order must not depend on the votes (the 2018 analysis takes it from the data-dependent
    ε, which leaks through the order). Rule: among ``orders`` below 1/(2β), the λ minimising the
    data-independent RDP of the answers + the release's own cost ε_ss(λ) (:func:`gnss_rdp`) +
    ln(1/δ)/(λ − 1). The data-independent RDP is num_answered · λ/σ² for the GNMax answers, plus
    num_queries · λ/(2σ1²) for Confident-GNMax's threshold steps (whose answered count is the
    mechanism's public output). The data-dependent RDP never exceeds the data-independent one
    at any order, so at this λ the expected release is never above the data-independent ε plus
    the release's cost; it gives up some ε when the votes are near-unanimous, where a larger λ
    would do better — pass ``order`` to the release functions to fix λ otherwise in advance.

    Args:
        sigma: GNMax's σ (σ2 of Confident-GNMax).
        num_answered: queries answered by GNMax.
        delta: the δ.
        beta: β of the release.
        sigma_ss: σ_ss of the release.
        num_queries: Confident-GNMax: queries that passed through the threshold step (0 for GNMax).
        threshold_sigma: Confident-GNMax's σ1 (``None`` for GNMax).
        orders: the candidate orders.

    Returns:
        λ, a float.
    """
    s = v.positive("sigma", sigma)
    answered = v.integer("num_answered", num_answered, minimum=0)
    d = v.open_unit("delta", delta)
    b = v.positive("beta", beta)
    ss_sigma = v.positive("sigma_ss", sigma_ss)
    queries = v.integer("num_queries", num_queries, minimum=0)
    grid = _release_orders(orders, b)
    rdp = answered * grid / (s * s)
    if threshold_sigma is not None:
        s1 = v.positive("threshold_sigma", threshold_sigma)
        rdp = rdp + queries * grid / (2.0 * s1 * s1)
    release = np.array([gnss_rdp(beta=b, sigma_ss=ss_sigma, order=float(lam)) for lam in grid])
    return float(grid[int(np.argmin(rdp + release + math.log(1.0 / d) / (grid - 1.0)))])


def _release_noise(seed: int | None, sigma_ss: float) -> float:
    # No seed: numpy seeds the generator from the operating system's entropy (secrets), so
    # nobody can recompute the draw; a given seed makes the release reproducible (not private).
    rng = np.random.default_rng() if seed is None else np.random.default_rng(seed)
    return float(rng.normal(0.0, sigma_ss))


def _release_order_arg(order: float | None, public: float) -> tuple[float, str]:
    if order is None:
        return public, "public"
    return v.real("order", order), "given"


def release_gnmax_epsilon(
    votes: Any,
    *,
    sigma: float,
    delta: float,
    beta: float,
    sigma_ss: float,
    seed: int | None = None,
    order: float | None = None,
    orders: ArrayLike = GNMAX_ORDERS,
    progress: Callable[[int], None] | None = None,
) -> SmoothSensitivityRelease:
    """Publishes a noisy estimate of GNMax's data-dependent ε by GNSS (2018, §4.2, Theorem 23, Algorithm GNSS).

    The total data-dependent RDP at order λ has local sensitivity at distance d at most the
    sum over queries of :func:`gnmax_local_sensitivities`; its β-smooth sensitivity SS_β
    (Nissim, Raskhodnikova & Smith 2007) scales Gaussian noise N(0, σ_ss²). Publishing the noisy
    value costs :func:`gnss_rdp` at λ (Theorem 23), which composes with the answers' RDP; the
    reported ε is the noisy RDP plus that cost, converted at λ.

    Args:
        votes: queries × classes vote counts.
        sigma: GNMax's σ.
        delta: the δ.
        beta: smoothness β > 0.
        sigma_ss: standard deviation of the sanitising noise (in units of SS_β).
        seed: ``None`` (default): the noise comes from the operating system's entropy, as a
            private release needs. A seed makes the release reproducible and NOT private.
        order: the order λ, fixed without looking at the votes; by default
            :func:`release_order` from the public parameters.
        orders: the candidate orders of :func:`release_order`.
        progress: called with the number of queries processed since its last call.

    Returns:
        The release: publishable values only (no smooth sensitivity, no noise, no private ε).
    """
    arr = check_votes(votes)
    s = v.positive("sigma", sigma)
    d = v.open_unit("delta", delta)
    b = v.positive("beta", beta)
    ss_sigma = v.positive("sigma_ss", sigma_ss)
    sd = None if seed is None else v.integer("seed", seed, minimum=0)
    _check_release_sigma("sigma", s, 1.0)  # before the public order, which divides by σ² too
    public = release_order(sigma=s, num_answered=int(arr.shape[0]), delta=d, beta=b, sigma_ss=ss_sigma, orders=orders) if order is None else 0.0
    lam, rule = _release_order_arg(order, public)
    gnss_rdp(beta=b, sigma_ss=ss_sigma, order=lam)  # refuses λ outside (1, 1/(2β)) before the work
    _check_release_sigma("sigma", s, lam)
    total_rdp, total_ls = _gnmax_release_inputs(arr, s, lam, progress)
    return _release(total_rdp, total_ls, lam, rule, d, b, ss_sigma, sd, aggregator="gnmax")


def _gnmax_release_inputs(arr: np.ndarray, sigma: float, lam: float, progress: Callable[[int], None] | None = None) -> tuple[float, np.ndarray]:
    """(the data-dependent total RDP at λ, its local sensitivity at each distance): private values."""
    teachers = int(arr[0].sum())
    total_rdp = 0.0
    total_ls = np.zeros(teachers)
    for row in _rows(arr, progress, RELEASE_PROGRESS_EVERY):
        # The released function must be the one whose sensitivity is bounded: the data-dependent
        # bound below q0 and λ/σ² above (never below the min used by analyze_gnmax).
        total_rdp += _rdp_at(_log_q_gaussian(row.astype(float), sigma), sigma, lam)
        total_ls += gnmax_local_sensitivities(row, sigma=sigma, order=lam, num_teachers=teachers)
    return total_rdp, total_ls


def _check_release_sigma(name: str, sigma: float, lam: float) -> None:
    """A smooth-sensitivity release needs λ/σ² finite: its local sensitivities are built from it."""
    if not np.isfinite(_per_variance(lam, sigma)):
        raise v.invalid(name, f"{name}={sigma!r} is too small for a smooth-sensitivity release: λ/σ² at order {lam:g} is not a finite number, so neither ε is (the analysis reports ε = inf)")


def _release(total_rdp: float, total_ls: np.ndarray, lam: float, rule: str, d: float, b: float, ss_sigma: float, sd: int | None, *, aggregator: str) -> SmoothSensitivityRelease:
    release_cost = gnss_rdp(beta=b, sigma_ss=ss_sigma, order=lam)
    # total_rdp, the smooth sensitivity and the noise stay in this frame: only their noisy sum
    # leaves, clipped at 0 (RDP is never negative; clipping is post-processing of the release).
    noisy = max(0.0, total_rdp + smooth_sensitivity(total_ls, beta=b) * _release_noise(sd, ss_sigma))
    return SmoothSensitivityRelease(
        epsilon_noisy_estimate=noisy + release_cost + math.log(1.0 / d) / (lam - 1.0),
        rdp_noisy_estimate=noisy,
        rdp_release=release_cost,
        order=float(lam),
        order_rule=rule,
        delta=d,
        beta=b,
        sigma_ss=ss_sigma,
        seed=sd,
        aggregator=aggregator,
    )


def threshold_local_sensitivities(counts: Any, *, threshold: float, threshold_sigma: float, order: float, num_teachers: int | None = None) -> np.ndarray:
    """Local sensitivity at distance d of the threshold step's data-dependent RDP, d = 0 … num_teachers − 1 (2018, Appendix C).

    The threshold RDP depends on the votes only through v = max_j n_j, and one teacher moves v
    by at most one; so LS at v is the larger change to v ± 1, and LS_d is the larger of the LS
    at v + d and v − d (the discounted maximum of :func:`smooth_sensitivity` covers the values
    in between).

    Args:
        counts: one query's votes per class (integers).
        threshold: T.
        threshold_sigma: σ1.
        order: the RDP order λ > 1.
        num_teachers: length of the result and largest possible count (default: the votes cast).

    Returns:
        Float array of LS_d, d = 0 … num_teachers − 1.
    """
    n = _counts(counts)
    t, s1 = _threshold_step(threshold, threshold_sigma)
    lam = _order(order)
    teachers = _num_teachers(n, num_teachers)
    return _threshold_ls(int(n.max()), teachers, t, s1, lam)


@functools.lru_cache(maxsize=64)
def _threshold_rdp_by_max(teachers: int, threshold: float, sigma1: float, order: float) -> np.ndarray:
    lam = np.array([order])
    return np.array([_threshold_rdp_from_log_p(float(special.log_ndtr((m - threshold) / sigma1)), sigma1, lam)[0] for m in range(teachers + 1)])


def _threshold_ls(top: int, teachers: int, threshold: float, sigma1: float, order: float) -> np.ndarray:
    rdp = _threshold_rdp_by_max(teachers, threshold, sigma1, order)
    steps = np.abs(np.diff(rdp))  # steps[k] = |rdp[k + 1] − rdp[k]|
    at = np.zeros(teachers + 1)  # LS at max count m: the larger step to m − 1 or m + 1
    at[1:] = steps
    at[:-1] = np.maximum(at[:-1], steps)
    out = np.zeros(teachers)
    for d in range(teachers):
        up = at[top + d] if top + d <= teachers else 0.0
        down = at[top - d] if top - d >= 0 else 0.0
        out[d] = max(up, down)
    return out


def release_confident_gnmax_epsilon(
    votes: Any,
    *,
    threshold: float,
    threshold_sigma: float,
    sigma: float,
    answered: Any,
    delta: float,
    beta: float,
    sigma_ss: float,
    seed: int | None = None,
    order: float | None = None,
    orders: ArrayLike = GNMAX_ORDERS,
    progress: Callable[[int], None] | None = None,
) -> SmoothSensitivityRelease:
    """Publishes a noisy estimate of Confident-GNMax's realised data-dependent ε by GNSS (2018, §4.2, Theorem 23).

    The released RDP charges the threshold step on every query and GNMax on the answered ones
    (``answered``, the mechanism's public output): the realised cost (the expectation
    P_ans · RDP2 of :func:`analyze_confident_gnmax` without ``answered`` is not a bound for the
    run). Its local sensitivity at distance d is at most the sum of
    :func:`threshold_local_sensitivities` over all queries and :func:`gnmax_local_sensitivities`
    over the answered ones; otherwise as :func:`release_gnmax_epsilon`.

    Args:
        votes: queries × classes vote counts.
        threshold: T.
        threshold_sigma: σ1.
        sigma: σ2 of the GNMax step.
        answered: boolean mask of the answered queries.
        delta: the δ.
        beta: smoothness β > 0.
        sigma_ss: standard deviation of the sanitising noise (in units of SS_β).
        seed: ``None`` (default): noise from the operating system's entropy (private); a seed
            makes the release reproducible and NOT private.
        order: the order λ, fixed without looking at the votes; by default
            :func:`release_order` from the public parameters (queries, answered count, σ1, σ2, δ, β, σ_ss).
        orders: the candidate orders of :func:`release_order`.
        progress: called with the number of queries processed since its last call.
    """
    arr = check_votes(votes)
    t, s1 = _threshold_step(threshold, threshold_sigma)
    s2 = v.positive("sigma", sigma)
    d = v.open_unit("delta", delta)
    b = v.positive("beta", beta)
    ss_sigma = v.positive("sigma_ss", sigma_ss)
    sd = None if seed is None else v.integer("seed", seed, minimum=0)
    mask = np.asarray(answered)
    if mask.dtype != bool or mask.shape != (arr.shape[0],):
        raise v.invalid("answered", f"answered must be a boolean array of one entry per query ({arr.shape[0]}), got dtype {mask.dtype} shape {mask.shape}")
    _check_release_sigma("threshold_sigma", s1, 1.0)  # before the public order, which divides by σ² too
    _check_release_sigma("sigma", s2, 1.0)
    public = 0.0
    if order is None:
        public = release_order(sigma=s2, num_answered=int(mask.sum()), num_queries=int(arr.shape[0]), threshold_sigma=s1, delta=d, beta=b, sigma_ss=ss_sigma, orders=orders)
    lam, rule = _release_order_arg(order, public)
    gnss_rdp(beta=b, sigma_ss=ss_sigma, order=lam)  # refuses λ outside (1, 1/(2β)) before the work
    _check_release_sigma("threshold_sigma", s1, lam)
    _check_release_sigma("sigma", s2, lam)
    teachers = int(arr[0].sum())
    rdp_by_max = _threshold_rdp_by_max(teachers, t, s1, float(lam))
    total_rdp = 0.0
    total_ls = np.zeros(teachers)
    for row, ans in zip(_rows(arr, progress, RELEASE_PROGRESS_EVERY), mask):
        total_rdp += float(rdp_by_max[int(row.max())])
        total_ls += _threshold_ls(int(row.max()), teachers, t, s1, float(lam))
        if ans:
            total_rdp += _rdp_at(_log_q_gaussian(row.astype(float), s2), s2, lam)
            total_ls += gnmax_local_sensitivities(row, sigma=s2, order=lam, num_teachers=teachers)
    return _release(total_rdp, total_ls, lam, rule, d, b, ss_sigma, sd, aggregator="confident-gnmax")


def pate_claim(
    analysis: PateAnalysis,
    *,
    parameters: dict[str, float],
    num_answered: int,
    data_dependent: bool = True,
    release: SmoothSensitivityRelease | None = None,
    description: str | None = None,
) -> Any:
    """The :class:`dpaudit.privacy.claims.PATEClaim` of an analysed run of the aggregator.

    Args:
        analysis: the analysis of the vote matrix of the student's queries.
        parameters: the aggregator's noise parameters (as the claim names them).
        num_answered: how many queries were answered.
        data_dependent: state the data-dependent bound (else the data-independent one).
        release: the smooth-sensitivity release of the data-dependent bound, when it was made;
            the claim is then its noisy estimate, stated at the release's order.
        description: a human-readable account (default: derived).
    """
    from dpaudit.privacy.claims import PATEClaim

    bound = analysis.data_dependent if data_dependent else analysis.data_independent
    if release is not None:
        if not data_dependent:
            raise v.invalid("release", "release applies to the data-dependent bound; pass data_dependent=True")
        orders: tuple[float, ...] = (release.order,)
        # A low noise draw can push the estimate below zero; clipping it at 0 is post-processing.
        rdp: tuple[float, ...] = (max(0.0, release.rdp_noisy_estimate + release.rdp_release),)
        smooth: dict[str, float] | None = {"beta": release.beta, "sigma_ss": release.sigma_ss}
    else:
        orders = analysis.orders
        rdp = analysis.rdp_data_dependent if data_dependent else analysis.rdp_data_independent
        smooth = None
    kind = "data-dependent" if data_dependent else "data-independent"
    text = description or (
        f"PATE {bound.aggregator} {', '.join(f'{k}={x:g}' for k, x in parameters.items())}: {num_answered} of {bound.num_queries} queries answered, {kind}"
        + (" (smooth-sensitivity release)" if release is not None else "")
    )
    return PATEClaim(
        aggregator=bound.aggregator,
        parameters=parameters,
        num_queries=bound.num_queries,
        num_answered=num_answered,
        orders=orders,
        rdp=rdp,
        analysis=kind,
        smooth_sensitivity=smooth,
        description=text,
    )


def settings_used(config: Mapping[str, Any], metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The PATE settings a run used: its config, completed where a value was left unset.

    A PATE run derives what the user left unset (teachers, noise, threshold, queries, the
    aggregator) from public sizes, and keeps the values it used in its metrics as
    ``run_<key>``; the config itself keeps the values as asked (they name the record).
    """
    used = dict(config)
    for key, value in metrics.items():
        if key.startswith("run_") and used.get(key[4:]) is None:
            used[key[4:]] = value
    return used
