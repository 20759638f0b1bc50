"""Spending a PATE privacy budget: σ for a number of queries, or queries for a σ (torch-free).

A budget must be met by a quantity that can be published. PATE's data-dependent ε depends on the
private votes (Papernot et al. 2018, "Scalable Private Learning with PATE", §4.2), so a plan made
before the teachers vote can only rest on the data-independent bound: GNMax with noise σ on the
vote histogram (L2 sensitivity √2) is (λ, λ/σ²)-RDP per answer (2018, §3, Appendix B), and
Confident-GNMax's threshold step on the top count (sensitivity 1) adds (λ, λ/(2σ1²))-RDP per
query asked (2018, §4.1, Algorithm 1). RDP adds over queries (Mironov 2017, Proposition 1) and ε
is the standard conversion min_λ RDP(λ) + ln(1/δ)/(λ − 1) (Mironov 2017, Proposition 3) over the
2018 order grid, which is what a PATE claim reports.

The worst case charges every query asked as answered, so the plan holds whatever the votes: a run
of ``num_queries`` queries at the planned σ never spends more than the target, and nothing has to
stop early. The functions here are the one place the PATE defense resolves a budget
(:func:`defenses.pate.defense.plan_pate`).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from dpaudit import _validate as v
from dpaudit.privacy.calibration import largest_num_steps, smallest_noise_multiplier
from dpaudit.privacy.pate.analysis import rdp_to_epsilon
from dpaudit.privacy.pate.votes import GNMAX_ORDERS

__all__ = ["worst_case_epsilon", "calibrate_sigma", "max_queries"]


def _threshold_sigma(sigma: float, threshold_ratio: float | None, fixed: float | None) -> float | None:
    if fixed is not None:
        return fixed
    return None if threshold_ratio is None else sigma * threshold_ratio


def worst_case_epsilon(
    *, num_queries: int, sigma: float, threshold_sigma: float | None, delta: float, orders: ArrayLike = GNMAX_ORDERS
) -> float:
    """Data-independent ε of ``num_queries`` queries, every one answered (GNMax; with ``threshold_sigma``,
    Confident-GNMax).

    Args:
        num_queries: queries asked (each may be answered).
        sigma: GNMax's σ (σ2 of Confident-GNMax).
        threshold_sigma: Confident-GNMax's σ1; ``None`` for GNMax (no threshold step).
        delta: the δ.
        orders: RDP orders of the conversion.

    Returns:
        ε by the standard conversion; 0 for no query.
    """
    q = v.integer("num_queries", num_queries, minimum=0)
    s = v.positive("sigma", sigma)
    d = v.open_unit("delta", delta)
    if q == 0:
        return 0.0
    lam = np.asarray(orders, dtype=float)
    per_query = 1.0 / (s * s)
    if threshold_sigma is not None:
        s1 = v.positive("threshold_sigma", threshold_sigma)
        per_query += 1.0 / (2.0 * s1 * s1)
    return rdp_to_epsilon(lam, q * per_query * lam, delta=d)[0]


def calibrate_sigma(
    *,
    target_epsilon: float,
    delta: float,
    num_queries: int,
    threshold_ratio: float | None = None,
    threshold_sigma: float | None = None,
) -> float:
    """Smallest σ (to 0.1 %, never overshooting) whose worst case over ``num_queries`` queries stays ≤
    ``target_epsilon``.

    Args:
        target_epsilon: the budget ε.
        delta: its δ.
        num_queries: queries the student asks.
        threshold_ratio: σ1/σ of Confident-GNMax (σ1 moves with σ); ``None`` for GNMax.
        threshold_sigma: a fixed σ1 of Confident-GNMax instead (its cost then bounds the budget from below).

    Raises:
        ValueError: no σ reaches the target (δ alone needs more than it).
    """
    target = v.positive("target_epsilon", target_epsilon)
    q = v.integer("num_queries", num_queries, minimum=1)
    sigma = smallest_noise_multiplier(
        lambda s: worst_case_epsilon(
            num_queries=q, sigma=s, threshold_sigma=_threshold_sigma(s, threshold_ratio, threshold_sigma), delta=delta
        ),
        target=target,
        tolerance=1e-3,
        max_sigma=1e7,
    )
    if math.isinf(sigma):
        raise v.invalid(
            "target_epsilon",
            f"target_epsilon={target!r} is unreachable at delta={delta!r} with any sigma for {q} queries"
            + ("" if threshold_sigma is None else f" at threshold_sigma={threshold_sigma!r}"),
        )
    return float(sigma)


def max_queries(*, target_epsilon: float, delta: float, sigma: float, threshold_sigma: float | None, limit: int) -> int:
    """Largest number of queries (≤ ``limit``) whose worst case at ``sigma`` stays ≤ ``target_epsilon``; 0 if one query
    overshoots."""
    target = v.positive("target_epsilon", target_epsilon)
    cap = v.integer("limit", limit, minimum=1)
    return largest_num_steps(
        lambda q: worst_case_epsilon(num_queries=q, sigma=sigma, threshold_sigma=threshold_sigma, delta=delta),
        target=target,
        max_steps=cap,
    )
