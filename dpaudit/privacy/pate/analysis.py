"""Whole vote matrices analysed: RDP summed over queries and converted to (ε, δ) (torch-free).

RDP adds over queries; (ε, δ) comes from the standard conversion (Mironov 2017, Proposition 3)
minimised over :data:`~dpaudit.privacy.pate.votes.GNMAX_ORDERS`, the grid of Papernot et al.
(2018), with the improved conversion (Balle et al. 2020; Canonne, Kamath & Steinke 2020)
reported beside it. The 2017 moments accountant is the same thing at RDP order λ = l + 1:
α(l) = l · RDP(l + 1).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from dp_accounting.rdp import rdp_privacy_accountant
from numpy.typing import ArrayLike
from scipy import special

from dpaudit import _validate as v
from dpaudit.privacy.pate.mechanisms import (
    _log_q_gaussian,
    _per_variance,
    _rdp_from_log_q,
    _threshold_rdp_from_log_p,
    lnmax_log_moments,
)
from dpaudit.privacy.pate.votes import (
    AGGREGATOR_NAMES,
    GNMAX_ORDERS,
    LNMAX_MOMENT_ORDERS,
    PATE_COSTS,
    _orders,
    _rows,
    _threshold_step,
    check_votes,
)

__all__ = [
    "PateEpsilon",
    "PateAnalysis",
    "rdp_to_epsilon",
    "analyze_lnmax",
    "analyze_gnmax",
    "analyze_confident_gnmax",
    "analyze_votes",
]


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


def rdp_to_epsilon(
    orders: ArrayLike, rdp: ArrayLike, *, delta: float, conversion: str = "standard"
) -> tuple[float, float]:
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
    return PateEpsilon(
        epsilon=eps,
        order=order,
        epsilon_improved=min(eps_i, eps),
        order_improved=order_i if eps_i <= eps else order,
        delta=delta,
        **fields,
    )


def _analysis(
    orders: np.ndarray, ind: np.ndarray, dep: np.ndarray, delta: float, *, cost: str = "realised", **fields: Any
) -> PateAnalysis:
    dep = np.minimum(dep, ind)
    extra = dict(fields)
    expected = extra.pop("expected_answered", None)
    return PateAnalysis(
        # The data-independent bound charges every query that may have been answered: a bound for any run.
        data_independent=_pate_epsilon(orders, ind, delta, data_dependent=False, expected_answered=None, **extra),
        data_dependent=_pate_epsilon(
            orders, dep, delta, data_dependent=True, expected_answered=expected, cost=cost, **extra
        ),
        orders=tuple(float(x) for x in orders),
        rdp_data_independent=tuple(float(x) for x in ind),
        rdp_data_dependent=tuple(float(x) for x in dep),
    )


def analyze_lnmax(
    votes: Any,
    *,
    laplace_scale: float,
    delta: float,
    moment_orders: ArrayLike = LNMAX_MOMENT_ORDERS,
    progress: Callable[[int], None] | None = None,
) -> PateAnalysis:
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


def analyze_gnmax(
    votes: Any,
    *,
    sigma: float,
    delta: float,
    orders: ArrayLike = GNMAX_ORDERS,
    progress: Callable[[int], None] | None = None,
) -> PateAnalysis:
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
            raise v.invalid(
                "answered",
                f"answered must be a boolean array of one entry per query ({k}), got "
                f"dtype {mask.dtype} shape {mask.shape}",
            )
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
    return _analysis(
        lam,
        ind,
        dep,
        d,
        aggregator="confident-gnmax",
        num_queries=int(k),
        expected_answered=expected,
        cost="expected" if mask is None else "realised",
    )


def analyze_votes(
    votes: Any,
    *,
    aggregator: str,
    delta: float,
    sigma: float | None = None,
    threshold: float | None = None,
    threshold_sigma: float | None = None,
    laplace_scale: float | None = None,
    answered: Any = None,
    progress: Callable[[int], None] | None = None,
) -> PateAnalysis:
    """The analysis of ``aggregator`` over a vote matrix: :func:`analyze_lnmax`, :func:`analyze_gnmax` or
    :func:`analyze_confident_gnmax`.

    Args:
        votes: queries × classes vote counts.
        aggregator: ``"lnmax"``, ``"gnmax"`` or ``"confident-gnmax"``.
        delta: the δ.
        sigma: GNMax's σ (σ2 of Confident-GNMax).
        threshold: T of Confident-GNMax.
        threshold_sigma: σ1 of Confident-GNMax.
        laplace_scale: b of LNMax.
        answered: Confident-GNMax only: the boolean mask of the answered queries (the realised cost).
        progress: called with the number of queries analysed since its last call.

    Raises:
        ValueError: an unknown aggregator, a parameter it needs missing, or one it does not take given.
    """
    name = v.choice("aggregator", aggregator, AGGREGATOR_NAMES)
    given = {"sigma": sigma, "threshold": threshold, "threshold_sigma": threshold_sigma, "laplace_scale": laplace_scale}
    needed = {
        "lnmax": ("laplace_scale",),
        "gnmax": ("sigma",),
        "confident-gnmax": ("threshold", "threshold_sigma", "sigma"),
    }[name]
    for key, value in given.items():
        if (value is None) == (key in needed):
            raise v.invalid(
                key, f"{key} {'is needed by' if value is None else 'does not apply to'} aggregator {name!r}"
            )
    if answered is not None and name != "confident-gnmax":
        raise v.invalid("answered", f"answered applies to aggregator 'confident-gnmax', not {name!r}")
    if laplace_scale is not None:
        return analyze_lnmax(votes, laplace_scale=laplace_scale, delta=delta, progress=progress)
    assert sigma is not None  # every other aggregator needs it (checked above)
    if threshold is None or threshold_sigma is None:
        return analyze_gnmax(votes, sigma=sigma, delta=delta, progress=progress)
    return analyze_confident_gnmax(
        votes,
        threshold=threshold,
        threshold_sigma=threshold_sigma,
        sigma=sigma,
        delta=delta,
        answered=answered,
        progress=progress,
    )
