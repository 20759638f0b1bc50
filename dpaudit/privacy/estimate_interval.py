"""A confidence interval for an audit's ε point estimate, so it is never shown bare.

An audit's ε estimate (the uncorrected best-threshold ratio, or its Gaussian-DP fit) is a point
estimate, not a bound: on scores at chance (AUC 0.49) the best of many thresholds still gives an
estimate near 1. This module puts a two-sided interval around it, from the Clopper–Pearson
intervals of the two error rates at the estimate's own threshold (Clopper & Pearson 1934;
Kairouz, Oh & Viswanath 2015, Thm 2.1 relate the rates to ε): the lower end is the ε the
rates' upper limits allow (the same formula as ε_LB, without its Bonferroni factor), the upper
end the ε their lower limits allow. The interval is conditional on the threshold, which was
picked on the same scores, so it is optimistic about the estimate; a report shows the estimate
only when even this interval excludes 0.

Torch-free.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from dpaudit import _validate as v
from dpaudit.privacy.audit_stats import epsilon_from_rates, epsilon_lb_from_counts, gdp_epsilon_lb_from_counts
from dpaudit.privacy.gaussian import gdp_epsilon

__all__ = ["estimate_interval"]


def _lower(successes: int, trials: int, miss: float) -> float:
    """One-sided Clopper–Pearson lower limit of a binomial rate (0 at no successes)."""
    return 0.0 if successes <= 0 else float(stats.beta.ppf(miss, successes, trials - successes + 1))


def _best_counts(s_in: np.ndarray, s_out: np.ndarray, thresholds: np.ndarray, score: np.ndarray) -> tuple[int, int]:
    """(true positives, false positives) at the threshold of the largest ``score``."""
    t = thresholds[int(np.argmax(score))]
    return int((s_in >= t).sum()), int((s_out >= t).sum())


def estimate_interval(
    in_scores: np.ndarray,
    out_scores: np.ndarray,
    *,
    bound: str,
    delta: float,
    confidence: float = 0.95,
    num_thresholds: int = 20,
) -> tuple[float, float]:
    """(low, high) of a two-sided ``confidence`` interval around the audit's ε estimate.

    Args:
        in_scores: IN scores (higher = IN).
        out_scores: OUT scores.
        bound: ``gdp`` (the estimate is the Gaussian-DP fit at the best of ``num_thresholds``
            pooled-score quantiles) or anything else (the best-threshold ratio over every score).
        delta: δ of the estimate.
        confidence: the interval's two-sided confidence.
        num_thresholds: candidate thresholds of the GDP fit.

    Returns:
        (low ≥ 0, high, possibly ∞): low is 0 when the rates at the estimate's threshold are
        consistent with no leakage at all.
    """
    s_in, s_out = np.asarray(in_scores, dtype=float).reshape(-1), np.asarray(out_scores, dtype=float).reshape(-1)
    if s_in.size == 0 or s_out.size == 0:
        raise v.invalid("in_scores", f"both score sets must be non-empty, got {s_in.size} IN and {s_out.size} OUT")
    delta = v.open_unit("delta", delta)
    confidence = v.open_unit("confidence", confidence)
    n_in, n_out = s_in.size, s_out.size
    miss = (1.0 - confidence) / 2  # each end of the interval
    if bound == "gdp":
        qs = np.quantile(np.concatenate([s_in, s_out]), np.linspace(0, 1, num_thresholds + 2)[1:-1])
        tpr = np.array([(s_in >= t).mean() for t in qs])
        fpr = np.array([(s_out >= t).mean() for t in qs])
        lo_in, lo_out = 0.5 / n_in, 0.5 / n_out
        mu = stats.norm.isf(np.clip(fpr, lo_out, 1 - lo_out)) - stats.norm.ppf(np.clip(1 - tpr, lo_in, 1 - lo_in))
        tp, fp = _best_counts(s_in, s_out, qs, mu)
        low = gdp_epsilon_lb_from_counts(
            true_positives=tp, num_in=n_in, false_positives=fp, num_out=n_out, delta=delta, confidence=1.0 - miss
        )
        mu_hi = float(stats.norm.isf(_lower(fp, n_out, miss / 2)) - stats.norm.ppf(_lower(n_in - tp, n_in, miss / 2)))
        high = math.inf if not math.isfinite(mu_hi) else (0.0 if mu_hi <= 0 else gdp_epsilon(mu=mu_hi, delta=delta))
        return low, max(high, low)
    thresholds = np.unique(np.concatenate([s_in, s_out]))
    tp_all = n_in - np.searchsorted(np.sort(s_in), thresholds, side="left")
    fp_all = n_out - np.searchsorted(np.sort(s_out), thresholds, side="left")
    tpr = np.clip(tp_all / n_in, 0.5 / n_in, 1 - 0.5 / n_in)
    fpr = np.clip(fp_all / n_out, 0.5 / n_out, 1 - 0.5 / n_out)
    eps = np.array([epsilon_from_rates(tpr=a, fpr=b, delta=delta) for a, b in zip(tpr, fpr)])
    tp, fp = _best_counts(s_in, s_out, thresholds, eps)
    low = epsilon_lb_from_counts(
        true_positives=tp, num_in=n_in, false_positives=fp, num_out=n_out, delta=delta, confidence=1.0 - miss
    )
    high = epsilon_from_rates(tpr=1.0 - _lower(n_in - tp, n_in, miss / 2), fpr=_lower(fp, n_out, miss / 2), delta=delta)
    return low, max(high, low)
