"""Audit statistics: honest empirical lower bounds ε_LB from IN/OUT observations.

Pure NumPy/SciPy (no torch), so results can be recomputed and reported anywhere.

* Hypothesis-testing bound (Kairouz, Oh & Viswanath 2015, Theorem 2.1; used for auditing by
  Jagielski et al. 2020 and Nasr et al. 2021): an (ε, δ)-DP mechanism forces
  FPR + e^ε FNR ≥ 1 − δ and e^ε FPR + FNR ≥ 1 − δ; Clopper–Pearson upper bounds on FPR and
  FNR turn observed counts into ε_LB at a stated confidence.
* Gaussian-DP bound (Nasr et al. 2023, "Tight Auditing", §4): one (FPR, FNR) point of a
  μ-GDP mechanism pins μ ≥ Φ⁻¹(1 − FPR) − Φ⁻¹(FNR); μ_LB converts to ε at δ
  (Dong, Roth & Su 2019, Corollary 2.13).
* One-run bound (Steinke, Nasr & Jagielski 2023, Theorem 3.1 / Proposition 5.7): m canaries
  included independently with probability ½, r guesses of which v are correct.

Choosing the threshold on the same observations that bound it inflates ε_LB (several
published tools do this). Every bound here either pays for the selection (Bonferroni over
the candidate thresholds), selects on one half and bounds on the other (split), or uses one
threshold fixed before any score was seen (fixed: e.g. halfway between the claimed IN and OUT
means of a white-box Dirac game, which costs nothing); the uncorrected maximum is available
only as an explicitly labelled point estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from dpaudit import _validate as v
from dpaudit.privacy.gaussian import gdp_epsilon
from dpaudit.privacy.rate_intervals import (
    advantage_ceiling,
    as_scores,
    auc_interval,
    auc_score,
    clopper_pearson_interval,
)

__all__ = [
    "THRESHOLD_STRATEGIES",
    "advantage_ceiling",
    "auc_interval",
    "auc_score",
    "clopper_pearson_interval",
    "clopper_pearson_upper",
    "epsilon_from_rates",
    "epsilon_lb_from_counts",
    "perfect_attack_epsilon_lb",
    "gdp_mu_lb_from_counts",
    "gdp_epsilon_lb_from_counts",
    "one_run_p_value",
    "one_run_epsilon_lb",
    "ThresholdBound",
    "bound_from_scores",
    "uncorrected_gdp_estimate",
    "one_run_bound_from_scores",
    "one_run_correct_guesses",
    "default_guess_counts",
    "gdp_observations_needed",
    "point_estimate",
]

THRESHOLD_STRATEGIES = ("bonferroni", "split", "fixed")
BOUND_METHODS = ("clopper-pearson", "gdp")


def clopper_pearson_upper(successes: int, trials: int, *, confidence: float) -> float:
    """One-sided Clopper–Pearson upper bound on a binomial rate, holding with probability ``confidence``.

    Defined at the edges: ``successes == trials`` gives 1 (never NaN).
    """
    k = v.integer("successes", successes, minimum=0)
    n = v.integer("trials", trials, minimum=1)
    confidence = v.open_unit("confidence", confidence)
    if k > n:
        raise v.invalid("successes", f"successes must be <= trials={n}, got {k}")
    if k == n:
        return 1.0
    return float(stats.beta.ppf(confidence, k + 1, n - k))


def epsilon_from_rates(*, tpr: float, fpr: float, delta: float) -> float:
    """max(0, ln((TPR − δ)/FPR), ln((1 − δ − FPR)/(1 − TPR))): ε implied by one test's rates.

    Returns ``math.inf`` when a rate of 0 makes the ratio unbounded.
    """
    tpr, fpr = float(tpr), float(fpr)
    best = 0.0
    if tpr - delta > 0:
        best = max(best, math.inf if fpr <= 0 else math.log((tpr - delta) / fpr))
    if 1.0 - delta - fpr > 0:
        best = max(best, math.inf if tpr >= 1 else math.log((1.0 - delta - fpr) / (1.0 - tpr)))
    return best


def _check_counts(tp: int, num_in: int, fp: int, num_out: int) -> None:
    v.integer("num_in", num_in, minimum=1)
    v.integer("num_out", num_out, minimum=1)
    if not 0 <= v.integer("true_positives", tp) <= num_in:
        raise v.invalid("true_positives", f"true_positives must lie in [0, num_in={num_in}], got {tp}")
    if not 0 <= v.integer("false_positives", fp) <= num_out:
        raise v.invalid("false_positives", f"false_positives must lie in [0, num_out={num_out}], got {fp}")


def _upper_rates(tp: int, num_in: int, fp: int, num_out: int, miss: float) -> tuple[float, float]:
    """(FPR_hi, FNR_hi), each failing with probability miss/2 so both hold jointly with 1 − miss."""
    fpr_hi = clopper_pearson_upper(fp, num_out, confidence=1.0 - miss / 2)
    fnr_hi = clopper_pearson_upper(num_in - tp, num_in, confidence=1.0 - miss / 2)
    return fpr_hi, fnr_hi


def epsilon_lb_from_counts(
    *,
    true_positives: int,
    num_in: int,
    false_positives: int,
    num_out: int,
    delta: float,
    confidence: float = 0.95,
    group_size: int = 1,
    num_tests: int = 1,
) -> float:
    """Clopper–Pearson ε_LB from the counts of one threshold test (docs/audits/statistics.md §1).

    Args:
        true_positives: IN observations guessed IN.
        num_in: IN observations.
        false_positives: OUT observations guessed IN.
        num_out: OUT observations.
        delta: the δ of the claim being tested.
        confidence: joint confidence of the bound (1 − a).
        group_size: k when the canary was inserted k times (group privacy: divide by k).
        num_tests: Bonferroni factor when the test was chosen among this many.

    Returns:
        ε_LB ≥ 0 that holds with probability ≥ ``confidence``.
    """
    _check_counts(true_positives, num_in, false_positives, num_out)
    delta = v.open_unit("delta", delta)
    confidence = v.open_unit("confidence", confidence)
    k = v.integer("group_size", group_size, minimum=1)
    tests = v.integer("num_tests", num_tests, minimum=1)
    fpr_hi, fnr_hi = _upper_rates(true_positives, num_in, false_positives, num_out, (1 - confidence) / tests)
    return epsilon_from_rates(tpr=1.0 - fnr_hi, fpr=fpr_hi, delta=delta) / k


def perfect_attack_epsilon_lb(
    *, num_in: int, num_out: int, delta: float, confidence: float = 0.95, num_tests: int = 1, group_size: int = 1
) -> float:
    """The Clopper–Pearson ε_LB of a perfect attack on ``num_in`` / ``num_out`` observations: every IN guessed IN, no
    OUT guessed IN. No attack on as many observations reaches more (the bound is monotone in the errors), so this is
    the power of an audit of that size: a membership audit's, and an IN/OUT canary audit's ceiling."""
    return epsilon_lb_from_counts(
        true_positives=num_in,
        num_in=num_in,
        false_positives=0,
        num_out=num_out,
        delta=delta,
        confidence=confidence,
        group_size=group_size,
        num_tests=num_tests,
    )


def gdp_mu_lb_from_counts(
    *,
    true_positives: int,
    num_in: int,
    false_positives: int,
    num_out: int,
    confidence: float = 0.95,
    num_tests: int = 1,
) -> float:
    """μ_LB = Φ⁻¹(1 − FPR_hi) − Φ⁻¹(FNR_hi), clipped at 0 (Nasr et al. 2023, §4)."""
    _check_counts(true_positives, num_in, false_positives, num_out)
    confidence = v.open_unit("confidence", confidence)
    tests = v.integer("num_tests", num_tests, minimum=1)
    fpr_hi, fnr_hi = _upper_rates(true_positives, num_in, false_positives, num_out, (1 - confidence) / tests)
    mu = float(stats.norm.isf(fpr_hi) - stats.norm.ppf(fnr_hi))
    return max(mu, 0.0) if math.isfinite(mu) else 0.0


def gdp_epsilon_lb_from_counts(
    *,
    true_positives: int,
    num_in: int,
    false_positives: int,
    num_out: int,
    delta: float,
    confidence: float = 0.95,
    num_tests: int = 1,
) -> float:
    """ε at δ of the μ_LB-GDP curve: a lower bound for mechanisms whose curve is Gaussian.

    Sound only under the assumption that the audited mechanism's trade-off curve is a GDP
    curve (true of the Gaussian mechanism, asymptotically of DP-SGD); report it as such.
    """
    mu = gdp_mu_lb_from_counts(
        true_positives=true_positives,
        num_in=num_in,
        false_positives=false_positives,
        num_out=num_out,
        confidence=confidence,
        num_tests=num_tests,
    )
    delta = v.open_unit("delta", delta)
    return 0.0 if mu <= 0 else gdp_epsilon(mu=mu, delta=delta)


# ----------------------------------------------------------------------------- one run
def one_run_p_value(*, epsilon: float, delta: float, num_canaries: int, num_guesses: int, num_correct: int) -> float:
    """p-value of observing ≥ v correct of r guesses under (ε, δ)-DP (docs/audits/statistics.md §4).

    β̂ = P[Bin(r, q) ≥ v], α̂ = max_{i=1..v} P[v − i ≤ Bin(r, q) < v] / i, q = e^ε/(1 + e^ε),
    p = min(1, β̂ + 2 m δ α̂).
    """
    eps = v.non_negative("epsilon", epsilon)
    r = v.integer("num_guesses", num_guesses, minimum=0)
    m = v.integer("num_canaries", num_canaries, minimum=max(r, 1))
    vv = v.integer("num_correct", num_correct, minimum=0)
    if vv > r:
        raise v.invalid("num_correct", f"num_correct must be <= num_guesses={r}, got {vv}")
    if r == 0 or vv == 0:
        return 1.0
    q = 1.0 / (1.0 + math.exp(-eps))
    # cdf[j + 1] = P[X ≤ j] for j = −1 … v − 1, evaluated once.
    cdf = stats.binom.cdf(np.arange(-1, vv), r, q)
    beta = 1.0 - float(cdf[-1])
    i = np.arange(1, vv + 1)
    # P[v − i ≤ X < v] = P[X ≤ v − 1] − P[X ≤ v − i − 1]
    # The δ-slack term of Steinke et al. (2023, Thm 3.1); not a significance level.
    slack = float(np.max((cdf[-1] - cdf[vv - i]) / i))
    return min(1.0, beta + 2.0 * m * delta * slack)


def one_run_epsilon_lb(
    *, num_canaries: int, num_guesses: int, num_correct: int, delta: float, confidence: float = 0.95, num_tests: int = 1
) -> float:
    """Largest ε whose p-value is below 1 − confidence (Steinke, Nasr & Jagielski 2023).

    ``num_tests`` is the Bonferroni factor when (k₊, k₋) were chosen among that many.
    """
    delta = v.open_unit("delta", delta)
    confidence = v.open_unit("confidence", confidence)
    tests = v.integer("num_tests", num_tests, minimum=1)
    level = (1.0 - confidence) / tests

    def p(eps: float) -> float:
        return one_run_p_value(
            epsilon=eps, delta=delta, num_canaries=num_canaries, num_guesses=num_guesses, num_correct=num_correct
        )

    if p(0.0) >= level:
        return 0.0
    lo, hi = 0.0, 1.0
    while p(hi) < level:
        lo, hi = hi, 2 * hi
        if hi > 100:
            return lo
    while hi - lo > 1e-7:
        mid = 0.5 * (lo + hi)
        if p(mid) < level:
            lo = mid
        else:
            hi = mid
    return lo


# ----------------------------------------------------------------------------- from scores
@dataclass(frozen=True, kw_only=True)
class ThresholdBound:
    """ε_LB from scores, with the test that produced it.

    Attributes:
        epsilon_lb: the lower bound (valid at ``confidence`` after threshold selection).
        threshold: the score threshold (guess IN when score ≥ threshold).
        true_positives / num_in / false_positives / num_out: counts on the bounding data.
        num_tests: Bonferroni factor paid for the selection (1 for split).
    """

    epsilon_lb: float
    threshold: float
    true_positives: int
    num_in: int
    false_positives: int
    num_out: int
    num_tests: int


def _candidate_thresholds(in_scores: np.ndarray, out_scores: np.ndarray, num: int) -> np.ndarray:
    pooled = np.concatenate([in_scores, out_scores])
    qs = np.quantile(pooled, np.linspace(0, 1, num + 1)[1:], method="higher") if num < pooled.size else np.sort(pooled)
    return np.unique(qs)


def _counts(in_scores: np.ndarray, out_scores: np.ndarray, thresholds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s_in, s_out = np.sort(in_scores), np.sort(out_scores)
    tp = s_in.size - np.searchsorted(s_in, thresholds, side="left")
    fp = s_out.size - np.searchsorted(s_out, thresholds, side="left")
    return tp, fp


def _upper_rate_arrays(
    tp: np.ndarray, num_in: int, fp: np.ndarray, num_out: int, miss: float
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised :func:`_upper_rates` (Clopper–Pearson, 1 at the k = n edge)."""
    fn = num_in - tp
    with np.errstate(invalid="ignore"):
        fpr_hi = np.where(fp >= num_out, 1.0, stats.beta.ppf(1 - miss / 2, fp + 1, np.maximum(num_out - fp, 1)))
        fnr_hi = np.where(fn >= num_in, 1.0, stats.beta.ppf(1 - miss / 2, fn + 1, np.maximum(num_in - fn, 1)))
    return fpr_hi, fnr_hi


def _best(
    in_scores: np.ndarray,
    out_scores: np.ndarray,
    thresholds: np.ndarray,
    *,
    method: str,
    delta: float,
    confidence: float,
    num_tests: int,
    group_size: int,
) -> ThresholdBound:
    tp, fp = _counts(in_scores, out_scores, thresholds)
    fpr_hi, fnr_hi = _upper_rate_arrays(tp, in_scores.size, fp, out_scores.size, (1 - confidence) / num_tests)
    if method == "clopper-pearson":
        tpr_lo = 1.0 - fnr_hi
        with np.errstate(divide="ignore", invalid="ignore"):
            a = np.where((tpr_lo - delta > 0) & (fpr_hi > 0), np.log(np.maximum(tpr_lo - delta, 1e-300) / fpr_hi), 0.0)
            b = np.where(
                (1 - delta - fpr_hi > 0) & (fnr_hi > 0), np.log(np.maximum(1 - delta - fpr_hi, 1e-300) / fnr_hi), 0.0
            )
        values = np.maximum(np.maximum(a, b), 0.0)
        i = int(np.argmax(values))
        eps = float(values[i])
    else:
        # ε at δ is increasing in μ, so the best threshold is the one with the largest μ_LB.
        mu = np.nan_to_num(stats.norm.isf(fpr_hi) - stats.norm.ppf(fnr_hi), nan=0.0, posinf=0.0, neginf=0.0)
        i = int(np.argmax(mu))
        eps = 0.0 if mu[i] <= 0 else gdp_epsilon(mu=float(mu[i]), delta=delta)
    return ThresholdBound(
        epsilon_lb=eps / group_size,
        threshold=float(thresholds[i]),
        true_positives=int(tp[i]),
        num_in=in_scores.size,
        false_positives=int(fp[i]),
        num_out=out_scores.size,
        num_tests=num_tests,
    )


def uncorrected_gdp_estimate(
    in_scores: Sequence[float] | np.ndarray,
    out_scores: Sequence[float] | np.ndarray,
    *,
    delta: float,
    confidence: float = 0.95,
) -> float:
    """The GDP figure of Annamalai & De Cristofaro's published protocol: an estimate, not a bound.

    Their black-box audits (NeurIPS 2024, §3; their ``compute_eps_lower_gdp``) try every score
    as the threshold, bound FPR and FNR each by Clopper–Pearson at ``confidence`` separately
    (jointly only 1 − 2(1 − confidence)) and keep the largest ε, with no price for the choice.
    Reproductions report it beside :func:`bound_from_scores` so a published number can be set
    against the same scores; the choice after the fact lifts it above what holds at
    ``confidence`` (on ideal N(2, 1) against N(0, 1) scores, 100 per side: about 8.2 where the
    honest Bonferroni bound gives 5.4 and the true ε is 10).

    Args:
        in_scores: IN scores (higher = IN).
        out_scores: OUT scores.
        delta: δ of the ε read off the μ-GDP curve.
        confidence: the per-rate Clopper–Pearson level.

    Returns:
        The largest ε over all thresholds (0 when no threshold separates).
    """
    s_in, s_out = as_scores("in_scores", in_scores), as_scores("out_scores", out_scores)
    delta = v.open_unit("delta", delta)
    confidence = v.open_unit("confidence", confidence)
    thresholds = np.unique(np.concatenate([s_in, s_out]))
    # _best spends (1 - confidence) / 2 on each rate; each rate here gets 1 - confidence.
    return _best(
        s_in,
        s_out,
        thresholds,
        method="gdp",
        delta=delta,
        confidence=max(0.0, 1.0 - 2.0 * (1.0 - confidence)) or 1e-12,
        num_tests=1,
        group_size=1,
    ).epsilon_lb


def bound_from_scores(
    in_scores: Sequence[float] | np.ndarray,
    out_scores: Sequence[float] | np.ndarray,
    *,
    delta: float,
    confidence: float = 0.95,
    method: str = "clopper-pearson",
    strategy: str = "bonferroni",
    num_thresholds: int = 20,
    group_size: int = 1,
    seed: int = 0,
    threshold: float | None = None,
) -> ThresholdBound:
    """ε_LB from IN and OUT scores (higher = IN) with an honest threshold choice.

    Args:
        in_scores: attack scores of IN observations.
        out_scores: attack scores of OUT observations.
        delta: δ of the claim.
        confidence: confidence of the bound after selection.
        method: ``clopper-pearson`` (ratio bound) or ``gdp`` (Gaussian-DP bound).
        strategy: ``bonferroni`` (pay a/num_tests over candidate thresholds), ``split``
            (choose on a random half, bound on the other half) or ``fixed`` (the one
            ``threshold`` given, which must have been chosen without looking at these scores:
            one test, nothing paid).
        num_thresholds: candidate thresholds, at quantiles of the pooled scores.
        group_size: canary multiplicity k (group privacy).
        seed: seed of the random halves for ``split``.
        threshold: the threshold of ``strategy="fixed"`` (required there, refused elsewhere).
    """
    s_in, s_out = as_scores("in_scores", in_scores), as_scores("out_scores", out_scores)
    delta = v.open_unit("delta", delta)
    confidence = v.open_unit("confidence", confidence)
    method = v.choice("method", method, BOUND_METHODS)
    strategy = v.choice("strategy", strategy, THRESHOLD_STRATEGIES)
    num = v.integer("num_thresholds", num_thresholds, minimum=1)
    k = v.integer("group_size", group_size, minimum=1)
    if (threshold is not None) != (strategy == "fixed"):
        raise v.invalid(
            "threshold",
            f"threshold is given exactly when strategy='fixed'; got strategy={strategy!r}, threshold={threshold!r}",
        )
    if strategy == "fixed":
        return _best(
            s_in,
            s_out,
            np.array([v.real("threshold", threshold)]),
            method=method,
            delta=delta,
            confidence=confidence,
            num_tests=1,
            group_size=k,
        )
    if strategy == "bonferroni":
        thresholds = _candidate_thresholds(s_in, s_out, num)
        return _best(
            s_in,
            s_out,
            thresholds,
            method=method,
            delta=delta,
            confidence=confidence,
            num_tests=len(thresholds),
            group_size=k,
        )
    if s_in.size < 2 or s_out.size < 2:
        raise v.invalid(
            "strategy", f"strategy='split' needs at least 2 IN and 2 OUT scores, got {s_in.size} and {s_out.size}"
        )
    rng = np.random.default_rng(seed)
    pin, pout = rng.permutation(s_in.size), rng.permutation(s_out.size)
    sel_in, bnd_in = s_in[pin[: s_in.size // 2]], s_in[pin[s_in.size // 2 :]]
    sel_out, bnd_out = s_out[pout[: s_out.size // 2]], s_out[pout[s_out.size // 2 :]]
    # Choose by the bound the selection half itself would give; nothing about the other half leaks.
    chosen = _best(
        sel_in,
        sel_out,
        _candidate_thresholds(sel_in, sel_out, num),
        method=method,
        delta=delta,
        confidence=confidence,
        num_tests=1,
        group_size=k,
    )
    # The candidate is a selection score; any threshold down to the next lower selection score is
    # the same test on the selection half. Take the middle of that gap, so bounding scores that
    # fall inside it are not decided by which half drew the extreme score (with separable scores
    # this is what lets a perfect attack reach the design's ceiling).
    pooled = np.concatenate([sel_in, sel_out])
    below = pooled[pooled < chosen.threshold]
    threshold = 0.5 * (chosen.threshold + float(below.max())) if below.size else chosen.threshold
    return _best(
        bnd_in,
        bnd_out,
        np.array([threshold]),
        method=method,
        delta=delta,
        confidence=confidence,
        num_tests=1,
        group_size=k,
    )


def gdp_observations_needed(
    *, mu: float, delta: float, confidence: float = 0.95, ratio: float = 0.9, most: int = 10**6
) -> int:
    """Observations a Gaussian game needs for its expected GDP ε_LB to reach ``ratio`` · ε(μ).

    The design rule behind the white-box audit's default length: IN and OUT scores are
    N(μ, 1) and N(0, 1) (the per-step Dirac game against a μ-GDP step, in units of the noise),
    half of the observations on each side, one threshold fixed at μ/2; the counts are their
    expectations, bounded with :func:`gdp_mu_lb_from_counts` at ``confidence``. The realised
    ratio scatters around the expected one (a few points at 10⁵ observations).

    Args:
        mu: μ of the claimed step (1/σ for one Gaussian step with noise multiplier σ).
        delta: δ at which ε is compared.
        confidence: confidence of the bound.
        ratio: the expected ε_LB/ε(μ) wanted, in (0, 1).
        most: the largest count returned (the answer when even that falls short).

    Returns:
        The smallest even count (to a 2 % grid) reaching the ratio, or ``most``.
    """
    mu = v.positive("mu", mu)
    delta = v.open_unit("delta", delta)
    confidence = v.open_unit("confidence", confidence)
    ratio = v.open_unit("ratio", ratio)
    most = v.integer("most", most, minimum=2)
    target = ratio * gdp_epsilon(mu=mu, delta=delta)
    rate = float(stats.norm.sf(mu / 2))  # FPR = FNR at the midpoint threshold

    def expected_epsilon(n: int) -> float:
        half = n // 2
        wrong = int(round(half * rate))
        return gdp_epsilon_lb_from_counts(
            true_positives=half - wrong,
            num_in=half,
            false_positives=wrong,
            num_out=half,
            delta=delta,
            confidence=confidence,
        )

    n = 100
    while n < most and expected_epsilon(n) < target:
        n = min(most, max(n + 2, int(n * 1.02)))
    return n + (n % 2) if n < most else most


def point_estimate(
    in_scores: Sequence[float] | np.ndarray, out_scores: Sequence[float] | np.ndarray, *, delta: float
) -> float:
    """Uncorrected best-threshold ε from raw rates: an *estimate*, never a bound.

    Rates of 0 are replaced by 0.5/n (a continuity correction) so the estimate stays finite.
    """
    s_in, s_out = as_scores("in_scores", in_scores), as_scores("out_scores", out_scores)
    delta = v.open_unit("delta", delta)
    thresholds = np.unique(np.concatenate([s_in, s_out]))
    tp, fp = _counts(s_in, s_out, thresholds)
    tpr = np.clip(tp / s_in.size, 0.5 / s_in.size, 1 - 0.5 / s_in.size)
    fpr = np.clip(fp / s_out.size, 0.5 / s_out.size, 1 - 0.5 / s_out.size)
    return max(epsilon_from_rates(tpr=a, fpr=b, delta=delta) for a, b in zip(tpr, fpr))


def one_run_correct_guesses(
    scores: Sequence[float] | np.ndarray,
    included: Sequence[bool] | np.ndarray,
    guess_counts: Sequence[int],
    *,
    seed: int = 0,
) -> list[int]:
    """Correct guesses of the top-k / bottom-k auditor (Steinke, Nasr & Jagielski 2023, §5) for each k.

    The k highest scores are guessed IN and the k lowest OUT. Ties decide nothing by themselves:

    * a block of tied scores cut once (some of it guessed, some not) is guessed in a random
      order drawn from ``seed``, independent of the scores and of the inclusion, so the order
      the caller listed the canaries in (say, IN first) never decides a guess;
    * a block cut by both (the same score guessed IN for some canaries and OUT for others, as
      when every score is equal) carries no evidence either way: its guesses count as wrong.

    Counting a guess as wrong is never optimistic: the auditor that guesses those canaries at
    random makes the same r = 2k guesses and gets at least as many right on every outcome, and
    the bounds hold for it, so they hold for these counts (Steinke et al. 2023, Thm 3.1, allow
    any guesser that looks at the scores only). Identical scores therefore give 0 correct.

    Args:
        scores: one score per canary (higher = IN).
        included: whether each canary was included.
        guess_counts: the k (each 1 ≤ k ≤ m/2).
        seed: seed of the random order among tied scores.

    Returns:
        The number of correct guesses for each k, in order.
    """
    s = as_scores("scores", scores)
    inc = np.asarray(included, dtype=bool).reshape(-1)
    if inc.size != s.size:
        raise v.invalid("included", f"included must have one entry per score ({s.size}), got {inc.size}")
    m = s.size
    perm = np.random.default_rng(np.random.SeedSequence([v.integer("seed", seed, minimum=0), 0x6F6E65])).permutation(m)
    s, inc = s[perm], inc[perm]
    order = np.argsort(-s, kind="stable")
    out = []
    for k in guess_counts:
        k = v.integer("guess_counts[i]", k, minimum=1)
        if 2 * k > m:
            raise v.invalid("guess_counts", f"guess_counts entries must be <= m/2 = {m // 2}, got {k}")
        top, bottom = order[:k], order[m - k :]
        hit_top, hit_bottom = inc[top], ~inc[bottom]
        if s[order[k - 1]] == s[order[m - k]]:  # one tied block runs from the IN cut to the OUT cut
            tied = s[order[k - 1]]
            hit_top, hit_bottom = hit_top & (s[top] != tied), hit_bottom & (s[bottom] != tied)
        out.append(int(hit_top.sum() + hit_bottom.sum()))
    return out


def default_guess_counts(m: int) -> list[int]:
    """The one-run guess counts k tried by default: 2, 5, 10, 20 and 50 % of m (every bound)."""
    return sorted({max(1, int(m * f)) for f in (0.02, 0.05, 0.1, 0.2, 0.5)})


def one_run_bound_from_scores(
    scores: Sequence[float] | np.ndarray,
    included: Sequence[bool] | np.ndarray,
    *,
    delta: float,
    confidence: float = 0.95,
    guess_counts: Sequence[int] | None = None,
    seed: int = 0,
) -> tuple[float, int, int]:
    """One-run ε_LB: guess IN for the top-k scores and OUT for the bottom-k, for k in
    ``guess_counts`` (Bonferroni over them); returns (ε_LB, guesses r, correct v) of the best.

    Ties are handled by :func:`one_run_correct_guesses` (``seed``: the random order among them).
    """
    s = as_scores("scores", scores)
    m = s.size
    counts = list(guess_counts) if guess_counts is not None else default_guess_counts(m)
    best = (0.0, 0, 0)
    for k, correct in zip(counts, one_run_correct_guesses(s, included, counts, seed=seed)):
        eps = one_run_epsilon_lb(
            num_canaries=m,
            num_guesses=2 * k,
            num_correct=correct,
            delta=delta,
            confidence=confidence,
            num_tests=len(counts),
        )
        if eps > best[0] or best[1] == 0:
            best = (eps, 2 * k, correct)
    return best
