"""Publishing a data-dependent PATE ε: smooth sensitivity and the GNSS release (torch-free).

A data-dependent ε depends on the private votes. To publish it, Papernot et al. (2018, §4.2,
Theorem 23 and Appendix C) add Gaussian noise scaled to its β-smooth sensitivity (Nissim,
Raskhodnikova & Smith 2007; the GNSS mechanism): :func:`gnmax_local_sensitivities`,
:func:`smooth_sensitivity`, :func:`gnss_rdp` and :func:`release_gnmax_epsilon` for GNMax,
:func:`threshold_local_sensitivities` with :func:`release_confident_gnmax_epsilon` for
Confident-GNMax. The released value is a noisy estimate; its noise comes from the operating
system's entropy unless a seed is given (then the release is reproducible and not private), its
order is fixed from public parameters (:func:`release_order`), and the release keeps neither the
smooth sensitivity nor the private ε.

Every function evaluates the mathematics, not the public reference code: the reference's
smooth-sensitivity wrapper swaps its arguments; privacy arguments here are keyword-only.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize, special

from dpaudit import _validate as v
from dpaudit.privacy.pate.mechanisms import (
    _log_q_gaussian,
    _per_variance,
    _theorem6,
    _theorem6_valid,
    _threshold_rdp_from_log_p,
)
from dpaudit.privacy.pate.votes import (
    GNMAX_ORDERS,
    _counts,
    _num_teachers,
    _order,
    _release_orders,
    _rows,
    _threshold_step,
    check_votes,
)

__all__ = [
    "gnmax_local_sensitivities",
    "smooth_sensitivity",
    "gnss_rdp",
    "SmoothSensitivityRelease",
    "release_order",
    "release_gnmax_epsilon",
    "threshold_local_sensitivities",
    "release_confident_gnmax_epsilon",
    "release_epsilon",
]


#: The smooth-sensitivity release walks every teacher count per query (10-20 ms a query), so it
#: reports after fewer rows than the analysis (about a second apart).
RELEASE_PROGRESS_EVERY = 50

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


def gnmax_local_sensitivities(
    counts: Any, *, sigma: float, order: float, num_teachers: int | None = None
) -> np.ndarray:
    """Local sensitivity at distance d of GNMax's data-dependent RDP, d = 0 … num_teachers − 1 (2018, Algorithms 3-5).

    LS_d bounds how much the RDP at ``order`` changes when one more teacher's vote changes,
    over all vote vectors within d changed votes of ``counts``. q̃ of a neighbour lies in
    [BL(q̃), BU(q̃)] (2018, Proposition 12, with the bounds of docs/defenses/pate.md §4). Walking from
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
        raise v.invalid(
            "local_sensitivities",
            f"local_sensitivities must be a non-empty 1-D array of finite values >= 0, got shape {ls.shape}",
        )
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
    *,
    sigma: float,
    num_answered: int,
    delta: float,
    beta: float,
    sigma_ss: float,
    num_queries: int = 0,
    threshold_sigma: float | None = None,
    orders: ArrayLike = GNMAX_ORDERS,
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
    public = (
        release_order(sigma=s, num_answered=int(arr.shape[0]), delta=d, beta=b, sigma_ss=ss_sigma, orders=orders)
        if order is None
        else 0.0
    )
    lam, rule = _release_order_arg(order, public)
    gnss_rdp(beta=b, sigma_ss=ss_sigma, order=lam)  # refuses λ outside (1, 1/(2β)) before the work
    _check_release_sigma("sigma", s, lam)
    total_rdp, total_ls = _gnmax_release_inputs(arr, s, lam, progress)
    return _release(total_rdp, total_ls, lam, rule, d, b, ss_sigma, sd, aggregator="gnmax")


def _gnmax_release_inputs(
    arr: np.ndarray, sigma: float, lam: float, progress: Callable[[int], None] | None = None
) -> tuple[float, np.ndarray]:
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
        raise v.invalid(
            name,
            f"{name}={sigma!r} is too small for a smooth-sensitivity release: λ/σ² "
            f"at order {lam:g} is not a finite number, so neither ε is (the analysis "
            "reports ε = inf)",
        )


def _release(
    total_rdp: float,
    total_ls: np.ndarray,
    lam: float,
    rule: str,
    d: float,
    b: float,
    ss_sigma: float,
    sd: int | None,
    *,
    aggregator: str,
) -> SmoothSensitivityRelease:
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


def threshold_local_sensitivities(
    counts: Any, *, threshold: float, threshold_sigma: float, order: float, num_teachers: int | None = None
) -> np.ndarray:
    """Local sensitivity at distance d of the threshold step's data-dependent RDP, d = 0 … num_teachers − 1 (2018,
    Appendix C).

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
    return np.array(
        [
            _threshold_rdp_from_log_p(float(special.log_ndtr((m - threshold) / sigma1)), sigma1, lam)[0]
            for m in range(teachers + 1)
        ]
    )


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
        raise v.invalid(
            "answered",
            "answered must be a boolean array of one entry per query "
            f"({arr.shape[0]}), got dtype {mask.dtype} shape {mask.shape}",
        )
    _check_release_sigma("threshold_sigma", s1, 1.0)  # before the public order, which divides by σ² too
    _check_release_sigma("sigma", s2, 1.0)
    public = 0.0
    if order is None:
        public = release_order(
            sigma=s2,
            num_answered=int(mask.sum()),
            num_queries=int(arr.shape[0]),
            threshold_sigma=s1,
            delta=d,
            beta=b,
            sigma_ss=ss_sigma,
            orders=orders,
        )
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


def release_epsilon(
    votes: Any,
    *,
    aggregator: str,
    sigma: float,
    delta: float,
    beta: float,
    sigma_ss: float,
    threshold: float | None = None,
    threshold_sigma: float | None = None,
    answered: Any = None,
    seed: int | None = None,
    order: float | None = None,
    progress: Callable[[int], None] | None = None,
) -> SmoothSensitivityRelease:
    """The GNSS release of ``aggregator``'s data-dependent ε: :func:`release_gnmax_epsilon` or
    :func:`release_confident_gnmax_epsilon`.

    Args:
        votes: queries × classes vote counts.
        aggregator: ``"gnmax"`` or ``"confident-gnmax"`` (LNMax has no release).
        sigma: GNMax's σ (σ2 of Confident-GNMax).
        delta: the δ.
        beta: smoothness β > 0.
        sigma_ss: standard deviation of the sanitising noise (in units of SS_β).
        threshold: T of Confident-GNMax.
        threshold_sigma: σ1 of Confident-GNMax.
        answered: Confident-GNMax: the boolean mask of the answered queries (required: the release
            is of the realised cost).
        seed: ``None`` (default): noise from the operating system's entropy (private); a seed
            makes the release reproducible and NOT private.
        order: the order λ, fixed without looking at the votes (default: :func:`release_order`).
        progress: called with the number of queries processed since its last call.
    """
    name = v.choice("aggregator", aggregator, ("gnmax", "confident-gnmax"))
    if name == "gnmax":
        for key, value in (("threshold", threshold), ("threshold_sigma", threshold_sigma), ("answered", answered)):
            if value is not None:
                raise v.invalid(key, f"{key} does not apply to aggregator 'gnmax'")
        return release_gnmax_epsilon(
            votes, sigma=sigma, delta=delta, beta=beta, sigma_ss=sigma_ss, seed=seed, order=order, progress=progress
        )
    if threshold is None or threshold_sigma is None or answered is None:
        missing = next(
            k
            for k, x in (("threshold", threshold), ("threshold_sigma", threshold_sigma), ("answered", answered))
            if x is None
        )
        raise v.invalid(missing, f"{missing} is needed by the release of aggregator 'confident-gnmax'")
    return release_confident_gnmax_epsilon(
        votes,
        threshold=threshold,
        threshold_sigma=threshold_sigma,
        sigma=sigma,
        answered=answered,
        delta=delta,
        beta=beta,
        sigma_ss=sigma_ss,
        seed=seed,
        order=order,
        progress=progress,
    )
