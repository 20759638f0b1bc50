"""Intervals on the rates reports estimate: accuracies, TPR/FPR, AUC, and the advantage an (ε, δ) claim allows.

Every estimated rate a page shows carries one of these (issue 46: no rate without its interval):
Clopper–Pearson for a proportion with its counts, a stratified bootstrap for the AUC, which has
no exact interval, and the tight membership-advantage ceiling of a claim. The ε lower bounds of
the audits themselves are in :mod:`dpaudit.privacy.audit_stats`, which re-exports these names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

from dpaudit import _validate as v

__all__ = ["advantage_ceiling", "as_scores", "auc_interval", "auc_score", "clopper_pearson_interval"]


def clopper_pearson_interval(successes: int, trials: int, *, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Clopper–Pearson interval (Clopper & Pearson 1934) on a binomial rate, e.g. an accuracy.

    Each end misses with probability (1 − ``confidence``)/2; the interval is exact (never shorter
    than the binomial allows), so "33 of 40" reads as a range, not as 82.5 % flat.

    Returns:
        ``(low, high)`` in [0, 1]: low is 0 at no successes, high is 1 at all successes.

    Raises:
        ValueError: counts out of range or ``confidence`` outside (0, 1) (named).
    """
    k = v.integer("successes", successes, minimum=0)
    n = v.integer("trials", trials, minimum=1)
    confidence = v.open_unit("confidence", confidence)
    if k > n:
        raise v.invalid("successes", f"successes must be <= trials={n}, got {k}")
    miss = (1.0 - confidence) / 2
    low = 0.0 if k == 0 else float(stats.beta.ppf(miss, k, n - k + 1))
    high = 1.0 if k == n else float(stats.beta.ppf(1.0 - miss, k + 1, n - k))
    return low, high


def auc_score(in_scores: Sequence[float] | np.ndarray, out_scores: Sequence[float] | np.ndarray) -> float:
    """The area under the ROC of IN against OUT scores (higher = IN): the Mann–Whitney statistic, ties ½.

    The point estimate beside :func:`auc_interval`'s interval.

    Raises:
        ValueError: an empty or non-finite score set, named with the value.
    """
    s_in, s_out = as_scores("in_scores", in_scores), as_scores("out_scores", out_scores)
    ranks = stats.rankdata(np.concatenate([s_in, s_out]))
    return float((ranks[: s_in.size].sum() - s_in.size * (s_in.size + 1) / 2) / (s_in.size * s_out.size))


def advantage_ceiling(epsilon: float, *, delta: float) -> float:
    """The largest membership advantage TPR − FPR an (ε, δ)-DP mechanism allows: (e^ε − 1 + 2δ)/(e^ε + 1).

    The tight bound of the hypothesis-testing view of DP (Kairouz, Oh & Viswanath 2015, Thm 2.1: the
    two rate constraints meet at FPR = FNR = (1 − δ)/(e^ε + 1)); unlike Yeom et al.'s e^ε − 1 it stays
    below 1 at every finite ε, so it separates ε = 1 from ε = 8. ``epsilon = ∞`` gives 1.
    """
    eps = v.real("epsilon", epsilon)
    if eps < 0:
        raise v.invalid("epsilon", f"epsilon must be >= 0, got {epsilon!r}")
    delta = v.open_unit("delta", delta)
    if eps > 700:  # e^ε overflows; the bound is 1 to machine precision long before
        return 1.0
    return min(1.0, (math.expm1(eps) + 2.0 * delta) / (math.exp(eps) + 1.0))


def as_scores(name: str, values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=float).reshape(-1)
    if arr.size == 0:
        raise v.invalid(name, f"{name} must hold at least one score, got none")
    if not np.all(np.isfinite(arr)):
        raise v.invalid(name, f"{name} must be finite; found {arr[~np.isfinite(arr)][:3].tolist()}")
    return arr


def auc_interval(
    in_scores: Sequence[float] | np.ndarray,
    out_scores: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    num_resamples: int = 1000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval (low, high) on the AUC of IN against OUT scores (higher = IN).

    The AUC has no closed-form exact interval, so the IN and OUT scores are each resampled with
    replacement (stratified: every resample keeps both sizes), the AUC of each resample is the
    Mann–Whitney statistic (ties count ½), and the interval is the (1 ∓ ``confidence``)/2
    quantiles of the ``num_resamples`` values (Efron & Tibshirani 1993, §13; the bootstrap of the
    AUC as in Hanley & McNeil 1982's setting). Deterministic for a given ``seed``.

    Raises:
        ValueError: an empty or non-finite score set, ``confidence`` outside (0, 1) or fewer
            than 10 resamples, named with the value.
    """
    s_in, s_out = as_scores("in_scores", in_scores), as_scores("out_scores", out_scores)
    confidence = v.open_unit("confidence", confidence)
    b = v.integer("num_resamples", num_resamples, minimum=10)
    rng = np.random.default_rng(seed)
    n_in, n_out = s_in.size, s_out.size
    out_sorted = np.sort(s_out)
    # Each IN score's position among the OUT scores, computed once: a resample only reweights them.
    below = np.searchsorted(out_sorted, s_in, side="left")
    upto = np.searchsorted(out_sorted, s_in, side="right")
    values = np.empty(b)
    # Resamples in blocks of about 2 million cells: vectorised, in bounded memory at any size.
    block = max(1, 2_000_000 // max(n_in, n_out))
    for start in range(0, b, block):
        rows = min(block, b - start)
        offsets = np.arange(rows)[:, None]
        w_out = np.bincount(
            (rng.integers(0, n_out, (rows, n_out)) + offsets * n_out).ravel(), minlength=rows * n_out
        ).reshape(rows, n_out)
        cum = np.concatenate([np.zeros((rows, 1), dtype=np.int64), np.cumsum(w_out, axis=1)], axis=1)
        w_in = np.bincount(
            (rng.integers(0, n_in, (rows, n_in)) + offsets * n_in).ravel(), minlength=rows * n_in
        ).reshape(rows, n_in)
        # Resampled OUT weight strictly below each IN score, plus half the weight tied with it.
        wins = cum[:, below] + 0.5 * (cum[:, upto] - cum[:, below])
        values[start : start + rows] = (w_in * wins).sum(axis=1) / (n_in * n_out)
    miss = (1.0 - confidence) / 2
    low, high = np.quantile(values, [miss, 1.0 - miss])
    return float(low), float(high)
