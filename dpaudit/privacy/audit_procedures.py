"""Audits turned into results: ε_LB from scores, set against the claim's ε_UB, as an :class:`AuditResult`.

An audit plays a distinguishing game (docs/audits/statistics.md §1): a canary is IN or OUT, an attack scores
it, and the scores give ε_LB at a stated confidence (:mod:`dpaudit.privacy.audit_stats`). This
module turns scores and a :class:`~dpaudit.privacy.claims.PrivacyClaim` into the value that
carries the outcome, :class:`~dpaudit.results.audit.AuditResult` (torch-free):

* :func:`audit_from_scores` — IN/OUT observations (multi-run and white-box games), bounded by
  Clopper–Pearson (Kairouz, Oh & Viswanath 2015, Thm 2.1) or the Gaussian-DP estimator of
  Nasr et al. (2023, "Tight Auditing", §4), with an honest threshold choice (Bonferroni or
  split, docs/audits/statistics.md §2);
* :func:`audit_from_one_run` — m canaries of one training run, bounded by Steinke, Nasr &
  Jagielski (2023, Thm 3.1) or, with ``bound="fdp"``, by the f-DP analysis of Mahloujifar,
  Melis & Chaudhuri (2025, Algorithm 3; :mod:`dpaudit.privacy.fdp_one_run`);
* :func:`audit_ceiling` — the largest ε_LB an audit's design could produce: its counts with a
  perfect attack (every IN scored above every OUT; for one-run, every guess correct). Every
  result carries it as ``ceiling``, so ε_LB reads against what the design could have shown;
  :func:`dpaudit.privacy.audit_trials.epsilon_lb_by_trials` recomputes both on prefixes of stored scores for the report.

Which bound a claim admits, the one-step claim of the white-box game and the central-limit
composition are privacy mathematics (:mod:`dpaudit.privacy.audit_bounds`); results import
privacy, never the reverse.

Beside ε_UB every result carries the claim's last-iterate ε (Steinke et al. 2024, Theorem 1 /
Heuristic 1; :mod:`dpaudit.privacy.last_iterate`), ``None`` outside the DP-SGD family.

ε_UB is evaluated once, on the claim (``claim.upper_bound``, i.e. :meth:`PrivacyClaim.epsilons`
under every applicable accountant); the result keeps every accountant's number and compares
ε_LB with the tightest: an audit that beats the best available upper bound is the strongest
evidence of a broken implementation. The verdicts (``violation`` = ε_LB > ε_UB, ``tightness``
= ε_LB / ε_UB) are properties of :class:`AuditResult`, computed here in the core and stored with
the result, so reports only render them. Results persist as JSON
through :mod:`dpaudit.store` (strict JSON, schema-versioned).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from dpaudit import _validate as v
from dpaudit.privacy.audit_bounds import ONE_RUN_BOUND_CHOICES, not_gaussian_error, resolve_bound
from dpaudit.privacy.audit_stats import (
    THRESHOLD_STRATEGIES,
    ThresholdBound,
    bound_from_scores,
    default_guess_counts,
    gdp_epsilon_lb_from_counts,
    one_run_bound_from_scores,
    one_run_correct_guesses,
    one_run_epsilon_lb,
    perfect_attack_epsilon_lb,
    point_estimate,
)
from dpaudit.privacy.claims import PrivacyClaim
from dpaudit.privacy.estimate_interval import estimate_interval
from dpaudit.privacy.fdp_one_run import TRADEOFF_CURVES, fdp_one_run_bound_from_scores, fdp_one_run_epsilon_lb
from dpaudit.privacy.gaussian import gdp_epsilon
from dpaudit.privacy.last_iterate import claim_last_iterate_epsilon
from dpaudit.results.audit import (
    ASSUMPTION_APPROXIMATE,
    AUDIT_BOUNDS,
    ONE_RUN_BOUNDS,
    AuditResult,
    default_assumption,
)
from dpaudit.results.audit_details import GuessPoint, OneRunDetails, ScoresDetails, WhiteBoxDetails

__all__ = ["audit_ceiling", "audit_from_scores", "audit_from_one_run", "bound_assumption", "one_run_curve"]

#: The value the stored :class:`AuditResult` carries in its ``bound`` field for each choice.
_ONE_RUN_RESULT_BOUND = {"steinke": "one-run", "fdp": "one-run-fdp"}


def bound_assumption(bound: str, *, claim: PrivacyClaim, curve: str = "gaussian") -> str:
    """What a result of ``bound`` (:data:`AUDIT_BOUNDS`) assumes about ``claim``'s mechanism, in words.

    ``none (…)`` for Clopper–Pearson and Steinke et al.; the trade-off family for ``gdp`` and
    ``one-run-fdp``, marked approximate when the claim is Gaussian only by the central limit
    (:attr:`PrivacyClaim.trade_off_exact`).
    """
    v.choice("bound", bound, AUDIT_BOUNDS)
    text = default_assumption(bound, curve)
    if bound in ("gdp", "one-run-fdp") and not claim.trade_off_exact:
        text += ASSUMPTION_APPROXIMATE
    return text


# One-run audits guess IN for the top-k and OUT for the bottom-k scores (Steinke et al. 2023, §5).
_STRATEGIES = (*THRESHOLD_STRATEGIES, "top-bottom")


def audit_ceiling(
    *,
    bound: str,
    delta: float,
    confidence: float,
    num_in: int,
    num_out: int,
    num_tests: int = 1,
    group_size: int = 1,
    guess_counts: Sequence[int] = (),
    curve: str = "gaussian",
    sampling_rate: float = 1.0,
) -> float:
    """The largest ε_LB an audit of this design can report: its own counts with a perfect attack.

    The ceiling depends on the design only — the numbers of observations, the Bonferroni factor,
    the confidence, δ, the group size and the bound — never on the scores. With zero errors a
    Clopper–Pearson bound on n observations per side is capped near ln(n) (docs/audits/statistics.md §1: 3.28 at
    n = 100, 5.60 at 1,000, 95 %); Steinke, Nasr & Jagielski (2023, Thm 3.1)'s one-run bound by its
    guess count (docs/audits/statistics.md §4: 3.49 at r = 100). Each bound is monotone in the errors (a larger
    false-positive or false-negative count raises the Clopper–Pearson upper rates; a smaller
    correct count raises the one-run p-value), so no attack on the same design exceeds it.

    Args:
        bound: the result's bound (:data:`AUDIT_BOUNDS`): ``clopper-pearson`` or ``gdp`` (IN/OUT
            observations), ``one-run`` (Steinke et al. 2023) or ``one-run-fdp`` (Mahloujifar,
            Melis & Chaudhuri 2025).
        delta: δ of the bound.
        confidence: confidence of the bound (before the Bonferroni factor).
        num_in: IN observations the bound is computed on (for ``split``, the bounding half); for
            one-run, the IN canaries.
        num_out: OUT observations (OUT canaries for one-run).
        num_tests: the Bonferroni factor the audit paid (candidate thresholds, or guess counts).
        group_size: canary multiplicity k (the bound is divided by k).
        guess_counts: one-run only: the k tried (top-k guessed IN, bottom-k OUT). A perfect
            attack gets min(k, IN) + min(k, OUT) of the 2k guesses right.
        curve: ``one-run-fdp`` only: the trade-off curve family.
        sampling_rate: ``one-run-fdp`` with ``subsampled-gaussian`` only: the step's q.

    Returns:
        The ceiling ≥ 0 (the same units as ε_LB: already divided by ``group_size``).

    Raises:
        ValueError: a bad argument, named with its value (e.g. a guess count above m/2).
    """
    bound = v.choice("bound", bound, AUDIT_BOUNDS)
    delta = v.open_unit("delta", delta)
    confidence = v.open_unit("confidence", confidence)
    n_in = v.integer("num_in", num_in, minimum=0)
    n_out = v.integer("num_out", num_out, minimum=0)
    tests = v.integer("num_tests", num_tests, minimum=1)
    k = v.integer("group_size", group_size, minimum=1)
    if bound in ONE_RUN_BOUNDS:
        m = n_in + n_out
        counts = [v.integer("guess_counts[i]", c, minimum=1) for c in guess_counts]
        if not counts:
            raise v.invalid("guess_counts", f"guess_counts must hold at least one k for bound={bound!r}, got none")
        best = 0.0
        for c in counts:
            if 2 * c > m:
                raise v.invalid("guess_counts", f"guess_counts entries must be <= m/2 = {m // 2}, got {c}")
            correct = min(c, n_in) + min(c, n_out)
            if bound == "one-run-fdp":
                eps = fdp_one_run_epsilon_lb(
                    num_canaries=m,
                    num_guesses=2 * c,
                    num_correct=correct,
                    delta=delta,
                    confidence=confidence,
                    num_tests=tests,
                    curve=curve,
                    sampling_rate=sampling_rate,
                )
            else:
                eps = one_run_epsilon_lb(
                    num_canaries=m,
                    num_guesses=2 * c,
                    num_correct=correct,
                    delta=delta,
                    confidence=confidence,
                    num_tests=tests,
                )
            best = max(best, eps)
        return best / k
    if n_in == 0 or n_out == 0:
        return 0.0  # one side unobserved: no test can tell IN from OUT
    # A perfect attack: every IN observation guessed IN, no OUT observation guessed IN.
    if bound == "clopper-pearson":
        return perfect_attack_epsilon_lb(
            num_in=n_in, num_out=n_out, delta=delta, confidence=confidence, group_size=k, num_tests=tests
        )
    return (
        gdp_epsilon_lb_from_counts(
            true_positives=n_in,
            num_in=n_in,
            false_positives=0,
            num_out=n_out,
            delta=delta,
            confidence=confidence,
            num_tests=tests,
        )
        / k
    )


def scores_bound(
    s_in: np.ndarray,
    s_out: np.ndarray,
    *,
    delta: float,
    confidence: float,
    bound: str,
    strategy: str,
    num_thresholds: int,
    group_size: int,
    seed: int,
    threshold: float | None = None,
) -> tuple[ThresholdBound, float]:
    """(the threshold bound, its ceiling): the one computation behind ε_LB of IN/OUT observations."""
    tb = bound_from_scores(
        s_in,
        s_out,
        delta=delta,
        confidence=confidence,
        method=bound,
        strategy=strategy,
        num_thresholds=num_thresholds,
        group_size=group_size,
        seed=seed,
        threshold=threshold,
    )
    ceiling = audit_ceiling(
        bound=bound,
        delta=delta,
        confidence=confidence,
        num_in=tb.num_in,
        num_out=tb.num_out,
        num_tests=tb.num_tests,
        group_size=group_size,
    )
    return tb, ceiling


def audit_from_scores(
    in_scores: Sequence[float] | np.ndarray,
    out_scores: Sequence[float] | np.ndarray,
    *,
    claim: PrivacyClaim,
    delta: float,
    confidence: float = 0.95,
    method: str = "multi-run",
    bound: str = "auto",
    strategy: str = "bonferroni",
    num_thresholds: int = 20,
    group_size: int = 1,
    threat_model: str = "black-box",
    seed: int = 0,
    details: Mapping[str, object] | None = None,
    threshold: float | None = None,
) -> AuditResult:
    """ε_LB from IN/OUT observations (higher score = IN), set against ``claim``.

    Args:
        in_scores: scores of IN observations.
        out_scores: scores of OUT observations.
        claim: what the audited mechanism claims (per observation: for a white-box per-step
            game, the claim of one step; see :func:`gaussian_step_claim`).
        delta: δ of both bounds.
        confidence: confidence of ε_LB.
        method: ``multi-run`` or ``white-box``.
        bound: ``auto`` (the default: ``gdp`` when ``claim`` is Gaussian-family, else
            ``clopper-pearson``; :func:`resolve_bound`), ``gdp`` (refused for other claims)
            or ``clopper-pearson``. The result names the bound used and its ``assumption``.
        strategy: ``bonferroni``, ``split`` (docs/audits/statistics.md §2) or ``fixed`` (``threshold``).
        num_thresholds: candidate thresholds (Bonferroni factor).
        group_size: canary multiplicity k.
        threat_model: ``black-box`` or ``white-box``.
        seed: seed of the random halves for ``split``.
        details: the caller's context to keep with the result (the ``context`` of its
            :class:`~dpaudit.results.audit_details.ScoresDetails`).
        threshold: ``strategy="fixed"``: the threshold, chosen before the scores were seen
            (kept as ``details.threshold``, so the prefix curve reuses it).

    Returns:
        The :class:`AuditResult`; ``epsilon_estimate`` is the uncorrected best-threshold
        ratio estimate (an estimate, never a bound); ``ceiling`` what a perfect attack would
        give on the same bounding counts and Bonferroni factor (:func:`audit_ceiling`).
    """
    v.choice("method", method, ("multi-run", "white-box"))
    bound = resolve_bound(bound, claim=claim)
    delta = v.open_unit("delta", delta)
    s_in, s_out = np.asarray(in_scores, dtype=float).reshape(-1), np.asarray(out_scores, dtype=float).reshape(-1)
    tb, ceiling = scores_bound(
        s_in,
        s_out,
        delta=delta,
        confidence=confidence,
        bound=bound,
        strategy=strategy,
        num_thresholds=num_thresholds,
        group_size=group_size,
        seed=seed,
        threshold=threshold,
    )
    acc, ub, by = _upper(claim, delta)
    estimate, kind = _scores_estimate(s_in, s_out, bound=bound, delta=delta, num_thresholds=num_thresholds)
    estimate /= group_size
    interval = estimate_interval(
        s_in, s_out, bound=bound, delta=delta, confidence=confidence, num_thresholds=num_thresholds
    )
    low, high = _interval(interval, group_size)
    info = (WhiteBoxDetails if method == "white-box" else ScoresDetails)(
        threshold=tb.threshold,
        true_positives=tb.true_positives,
        false_positives=tb.false_positives,
        bounding_num_in=tb.num_in,
        bounding_num_out=tb.num_out,
        num_tests=tb.num_tests,
        num_thresholds=num_thresholds,
        split_seed=seed if strategy == "split" else None,
        estimate_kind=kind,
        estimate_interval=(low, high),
        estimate_interval_confidence=confidence,
        context=details or {},
    )
    return AuditResult(
        epsilon_lb=tb.epsilon_lb,
        ceiling=ceiling,
        confidence=confidence,
        method=method,
        bound=bound,
        delta=delta,
        threshold_strategy=strategy,
        num_in=int(s_in.size),
        num_out=int(s_out.size),
        epsilon_ub=ub,
        accountant=acc,
        epsilon_ub_by_accountant=by,
        epsilon_last_iterate=claim_last_iterate_epsilon(claim, delta=delta),
        epsilon_estimate=estimate,
        group_size=group_size,
        threat_model=threat_model,
        claim_description=claim.statement(),
        details=info,
        assumption=bound_assumption(bound, claim=claim),
    )


def _scores_estimate(
    s_in: np.ndarray, s_out: np.ndarray, *, bound: str, delta: float, num_thresholds: int
) -> tuple[float, str]:
    """(ε estimate, what it is) of IN/OUT observations: never a bound, reported beside ε_LB."""
    if bound == "gdp":
        return _gdp_point_estimate(
            s_in, s_out, delta=delta, num_thresholds=num_thresholds
        ), "GDP fit of the raw rates at the best candidate threshold (an estimate, not a bound)"
    return point_estimate(s_in, s_out, delta=delta), "uncorrected best-threshold ratio (an estimate, not a bound)"


def _interval(interval: tuple[float, float], group_size: int) -> tuple[float, float | None]:
    """The estimate's interval as a result keeps it (∞ as ``None``: strict JSON), per canary copy."""
    low, high = (x / group_size for x in interval)
    return low, (high if np.isfinite(high) else None)


def _gdp_point_estimate(s_in: np.ndarray, s_out: np.ndarray, *, delta: float, num_thresholds: int) -> float:
    """ε at δ of μ̂ = max over candidate thresholds of Φ⁻¹(1 − FPR) − Φ⁻¹(FNR) on raw rates.

    Nasr et al. (2023, §4)'s estimator without the confidence correction: an *estimate*.
    Candidates are pooled-score quantiles (as for the bound), away from the noisy extreme tails.
    """
    from scipy import stats

    qs = np.quantile(np.concatenate([s_in, s_out]), np.linspace(0, 1, num_thresholds + 2)[1:-1])
    tpr = np.array([(s_in >= t).mean() for t in qs])
    fpr = np.array([(s_out >= t).mean() for t in qs])
    lo_in, lo_out = 0.5 / s_in.size, 0.5 / s_out.size  # continuity correction keeps μ̂ finite
    mu = stats.norm.isf(np.clip(fpr, lo_out, 1 - lo_out)) - stats.norm.ppf(np.clip(1 - tpr, lo_in, 1 - lo_in))
    best = float(np.max(mu))
    return 0.0 if best <= 0 else gdp_epsilon(mu=best, delta=delta)


def one_run_curve(
    scores: np.ndarray,
    included: np.ndarray,
    *,
    delta: float,
    confidence: float,
    guess_counts: Sequence[int],
    bound: str = "steinke",
    curve: str = "gaussian",
    sampling_rate: float = 1.0,
    seed: int = 0,
) -> list[tuple[int, int, float]]:
    """(guesses r, correct v, ε_LB) for each k in ``guess_counts``, each bounded on its own.

    For plotting ε_LB against the number of guesses; each point is valid alone, the curve's
    maximum is not (it would need the Bonferroni factor the headline bound pays). ``bound``
    picks Steinke et al. (2023) or the f-DP bound (``curve``, ``sampling_rate``); guesses are
    counted as for the headline bound (:func:`one_run_correct_guesses`, ``seed``).
    """
    m = scores.size
    ks = [k for k in guess_counts if 2 * k <= m]
    out = []
    for k, correct in zip(ks, one_run_correct_guesses(scores, included, ks, seed=seed)):
        if bound == "fdp":
            eps = fdp_one_run_epsilon_lb(
                num_canaries=m,
                num_guesses=2 * k,
                num_correct=correct,
                delta=delta,
                confidence=confidence,
                curve=curve,
                sampling_rate=sampling_rate,
            )
        else:
            eps = one_run_epsilon_lb(
                num_canaries=m, num_guesses=2 * k, num_correct=correct, delta=delta, confidence=confidence
            )
        out.append((2 * k, correct, eps))
    return out


def one_run_bound(
    s: np.ndarray,
    inc: np.ndarray,
    *,
    delta: float,
    confidence: float,
    counts: Sequence[int],
    bound: str,
    curve: str,
    sampling_rate: float,
    seed: int,
) -> tuple[float, int, int, float | None, float]:
    """(ε_LB, guesses r, correct v, the f-DP bound's rejected μ (``None`` for Steinke et al.), ceiling) of the one-run
    game.

    Both bounds count the guesses the same way (:func:`one_run_correct_guesses`: ties never
    decide a guess) and pay the same Bonferroni factor over ``counts``.
    """
    mu: float | None = None
    if bound == "fdp":
        eps, mu, r, correct = fdp_one_run_bound_from_scores(
            s,
            inc,
            delta=delta,
            confidence=confidence,
            guess_counts=counts,
            curve=curve,
            sampling_rate=sampling_rate,
            seed=seed,
        )
    else:
        eps, r, correct = one_run_bound_from_scores(
            s, inc, delta=delta, confidence=confidence, guess_counts=counts, seed=seed
        )
    ceiling = audit_ceiling(
        bound=_ONE_RUN_RESULT_BOUND[bound],
        delta=delta,
        confidence=confidence,
        num_in=int(inc.sum()),
        num_out=int((~inc).sum()),
        num_tests=len(counts),
        guess_counts=counts,
        curve=curve,
        sampling_rate=sampling_rate,
    )
    return eps, r, correct, mu, ceiling


def _one_run_choices(
    bound: str, curve: str, sampling_rate: float, seed: int, claim: PrivacyClaim
) -> tuple[str, str, float, int]:
    """(bound, curve, q, seed) of a one-run audit, checked against each other and against the claim."""
    bound = v.choice("bound", bound, ONE_RUN_BOUND_CHOICES)
    curve = v.choice("curve", curve, TRADEOFF_CURVES)
    sampling_rate = v.half_open_unit("sampling_rate", sampling_rate)
    seed = v.integer("seed", seed, minimum=0)
    if bound == "steinke" and (curve != "gaussian" or sampling_rate != 1.0):
        raise v.invalid(
            "curve",
            "curve and sampling_rate apply to bound='fdp'; got bound='steinke', "
            f"curve={curve!r}, sampling_rate={sampling_rate!r}",
        )
    if not isinstance(claim, PrivacyClaim):
        raise v.invalid_type("claim", f"claim must be a PrivacyClaim, got {type(claim).__name__}")
    if bound == "fdp" and claim.trade_off_family != "gaussian":
        # Both f-DP curves are Gaussian-shaped: the same rule as bound='gdp' for IN/OUT games.
        raise not_gaussian_error(bound, claim)
    return bound, curve, sampling_rate, seed


#: What the f-DP one-run bound's result says it assumes (the family is named beside it).
_FDP_ASSUMPTION = (
    "epsilon_lb is the epsilon at delta of the rejected trade-off curve: a "
    "lower bound for mechanisms whose curve is in this family"
)


def audit_from_one_run(
    scores: Sequence[float] | np.ndarray,
    included: Sequence[bool] | np.ndarray,
    *,
    claim: PrivacyClaim,
    delta: float,
    confidence: float = 0.95,
    guess_counts: Sequence[int] | None = None,
    threat_model: str = "black-box",
    details: Mapping[str, object] | None = None,
    bound: str = "steinke",
    curve: str = "gaussian",
    sampling_rate: float = 1.0,
    seed: int = 0,
) -> AuditResult:
    """One-run ε_LB from m canary scores, against ``claim``.

    Two analyses of the same game. ``steinke`` (the default): Steinke, Nasr & Jagielski (2023,
    Thm 3.1), an (ε, δ) lower bound valid for every mechanism. ``fdp``: Mahloujifar, Melis &
    Chaudhuri (2025, Algorithm 3), which rejects a whole trade-off curve and so gets much closer
    to the true ε from the same guesses, but whose ε is a lower bound only for mechanisms in the
    assumed family (``curve``: the Gaussian G_μ, or one subsampled Gaussian step C_q(G_μ)); the
    result's ``bound`` field is ``one-run`` or ``one-run-fdp`` and ``details`` name the family.
    The result's ``ceiling`` is the bound with every guess correct (:func:`audit_ceiling`).

    Args:
        scores: one score per canary (higher = IN).
        included: whether each canary was included (each independently with probability ½).
        claim: the training's claim.
        delta: δ of both bounds.
        confidence: confidence of ε_LB.
        guess_counts: the k values (top-k guessed IN, bottom-k OUT) tried, Bonferroni over them
            (default: the same grid for both bounds, fractions 2 %–50 % of m).
        threat_model: ``black-box`` or ``white-box``.
        details: the caller's context to keep (the ``context`` of its
            :class:`~dpaudit.results.audit_details.OneRunDetails`).
        bound: ``steinke`` or ``fdp`` (refused unless ``claim`` is Gaussian-family,
            :attr:`PrivacyClaim.trade_off_family`: both of its curves are Gaussian-shaped).
        curve: ``fdp`` only: ``gaussian`` or ``subsampled-gaussian``.
        sampling_rate: ``fdp`` with ``subsampled-gaussian`` only: the step's q.
        seed: seed of the random order in which tied scores are guessed
            (:func:`~dpaudit.privacy.audit_stats.one_run_correct_guesses`).
    """
    delta = v.open_unit("delta", delta)
    bound, curve, sampling_rate, seed = _one_run_choices(bound, curve, sampling_rate, seed, claim)
    s = np.asarray(scores, dtype=float).reshape(-1)
    inc = np.asarray(included, dtype=bool).reshape(-1)
    if inc.size != s.size:
        raise v.invalid("included", f"included must have one entry per score ({s.size}), got {inc.size}")
    m = s.size
    # The same default grid for both bounds, so switching the bound changes nothing else.
    counts = list(guess_counts) if guess_counts is not None else default_guess_counts(m)
    eps, r, correct, mu, ceiling = one_run_bound(
        s,
        inc,
        delta=delta,
        confidence=confidence,
        counts=counts,
        bound=bound,
        curve=curve,
        sampling_rate=sampling_rate,
        seed=seed,
    )
    acc, ub, by = _upper(claim, delta)
    ks = sorted(
        {k for k in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000) if 2 * k <= m} | ({r // 2} if r else set())
    )
    points = one_run_curve(
        s,
        inc,
        delta=delta,
        confidence=confidence,
        guess_counts=ks,
        bound=bound,
        curve=curve,
        sampling_rate=sampling_rate,
        seed=seed,
    )
    estimate = point_estimate(s[inc], s[~inc], delta=delta) if inc.any() and (~inc).any() else None
    fdp = bound == "fdp"
    info = OneRunDetails(
        num_guesses=r,
        num_correct=correct,
        num_canaries=m,
        guess_counts=tuple(int(k) for k in counts),
        tie_break_seed=seed,
        guess_curve=tuple(GuessPoint(num_guesses=a, num_correct=b, epsilon_lb=c) for a, b, c in points),
        one_run_bound=bound,
        mu_lb=mu if fdp else None,
        tradeoff_curve=curve if fdp else None,
        sampling_rate=sampling_rate if fdp else None,
        bound_assumption=_FDP_ASSUMPTION if fdp else None,
        estimate_interval=None
        if estimate is None
        else _interval(
            estimate_interval(s[inc], s[~inc], bound="clopper-pearson", delta=delta, confidence=confidence), 1
        ),
        estimate_interval_confidence=None if estimate is None else confidence,
        context=details or {},
    )
    return AuditResult(
        epsilon_lb=eps,
        ceiling=ceiling,
        confidence=confidence,
        method="one-run",
        bound=_ONE_RUN_RESULT_BOUND[bound],
        delta=delta,
        threshold_strategy="top-bottom",
        num_in=int(inc.sum()),
        num_out=int((~inc).sum()),
        epsilon_ub=ub,
        accountant=acc,
        epsilon_ub_by_accountant=by,
        epsilon_last_iterate=claim_last_iterate_epsilon(claim, delta=delta),
        epsilon_estimate=estimate,
        threat_model=threat_model,
        claim_description=claim.statement(),
        details=info,
        assumption=bound_assumption(_ONE_RUN_RESULT_BOUND[bound], claim=claim, curve=curve),
    )


def _upper(claim: PrivacyClaim, delta: float) -> tuple[str, float, dict[str, float]]:
    if not isinstance(claim, PrivacyClaim):
        raise v.invalid_type("claim", f"claim must be a PrivacyClaim, got {type(claim).__name__}")
    bound = claim.upper_bound(delta=delta)
    return bound.accountant, bound.epsilon, dict(bound.by_accountant)
