"""One-run auditing against an f-DP hypothesis (Mahloujifar, Melis & Chaudhuri, ICML 2025).

Mahloujifar, Melis & Chaudhuri, "Auditing f-Differential Privacy in One Run" (ICML 2025,
arXiv:2410.22235) keep the game of Steinke, Nasr & Jagielski (2023): m canaries, each included
independently with probability ½, one training run, an auditor who guesses on r of them and
abstains on the rest, v guesses correct. What changes is the analysis. Instead of Steinke et
al.'s binomial tail for an (ε, δ)-DP mechanism, it asks whether v correct guesses are
compatible with the mechanism being f-DP for a whole trade-off curve f (Dong, Roth & Su 2022),
by bounding, level by level from v correct guesses down to none, how much probability mass of
correct and of wrong guesses the curve allows (the paper's recursion with abstention, its
Algorithm 3; ``rh_with_cap`` / ``audit_rh_with_cap`` in the authors' PrivacyGuard library and
``_epsilon_one_run_fdp`` in jax_privacy, both of which this module agrees with step for step).
If honouring the curve would need more guesses in expectation than the auditor made, seeing
≥ v correct has probability below 1 − confidence and the hypothesis is rejected.

The curves tested here are one-parameter families, so rejection turns into a lower bound on the
parameter:

* ``gaussian``: G_μ(α) = Φ(Φ⁻¹(1 − α) − μ), μ-GDP (Dong, Roth & Su 2022, Def. 2.7); the bound is
  μ_LB, reported as ε at δ of the μ_LB-Gaussian (their Cor. 2.13).
* ``subsampled-gaussian``: C_q(G_μ), one Poisson-subsampled Gaussian step with sampling rate q
  (Dong, Roth & Su 2022, §4.2; Zhu, Dong & Wang 2022 for Poisson sampling); the bound is again
  on μ = 1/σ at the stated q, reported as ε at δ of the subsampled step.

The bound rejects "the mechanism is f_{μ_LB}-DP" at ``confidence``; as ε it is sound only for
mechanisms whose trade-off curve lies in the family, so every number it produces says so. What that
means, and how the reproduction of the paper's table went (``scripts/reproduce_fdp_one_run.py``), is
on the docs page "Audit statistics", §4 (``docs/audits/statistics.md``).

Torch-free (NumPy/SciPy only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy import optimize, special

from dpaudit import _validate as v
from dpaudit.privacy.audit_stats import default_guess_counts, one_run_correct_guesses
from dpaudit.privacy.gaussian import gdp_epsilon

__all__ = [
    "TRADEOFF_CURVES",
    "gaussian_tradeoff",
    "subsampled_gaussian_tradeoff",
    "fdp_one_run_rejects",
    "fdp_one_run_mu_lb",
    "fdp_one_run_epsilon_lb",
    "fdp_one_run_bound_from_scores",
    "curve_epsilon",
    "idealised_gaussian_counts",
]

TRADEOFF_CURVES = ("gaussian", "subsampled-gaussian")

# μ beyond this is indistinguishable from "no privacy" in double precision (Φ(−40) ≈ 4e−350).
_MU_MAX = 40.0


def gaussian_tradeoff(alpha: float, *, mu: float) -> float:
    """G_μ(α) = Φ(Φ⁻¹(1 − α) − μ): the least type-II error at type-I error α (μ-GDP).

    Dong, Roth & Su (2022), Definition 2.7.
    """
    a = min(max(float(alpha), 0.0), 1.0)
    return float(special.ndtr(special.ndtri(1.0 - a) - mu))


def subsampled_gaussian_tradeoff(alpha: float, *, mu: float, sampling_rate: float) -> float:
    """C_q(G_μ)(α): the symmetric trade-off curve of one Poisson-subsampled Gaussian step.

    With f_q = q·G_μ + (1 − q)·Id⁻ (Id⁻(α) = 1 − α), C_q(G_μ) is the convex hull of
    min(f_q, f_q⁻¹) (Dong, Roth & Su 2022, §4.2). G_μ has slope −1 at α* = Φ(−μ/2), so the
    curve is f_q on [0, α*], the straight line of slope −1 from (α*, f_q(α*)) to
    (f_q(α*), α*), and f_q⁻¹ beyond.
    """
    q = float(sampling_rate)
    a = min(max(float(alpha), 0.0), 1.0)
    if q >= 1.0:
        return gaussian_tradeoff(a, mu=mu)
    star = float(special.ndtr(-mu / 2.0))

    def f_q(x: float) -> float:
        return q * gaussian_tradeoff(x, mu=mu) + (1.0 - q) * (1.0 - x)

    f_star = f_q(star)
    if a <= star:
        return f_q(a)
    if a <= f_star:
        return star + f_star - a
    # f_q⁻¹(a): the x in [0, α*] with f_q(x) = a (f_q decreases from 1 to f_q(α*) < a there).
    if a >= 1.0:
        return 0.0
    return float(optimize.brentq(lambda x: f_q(x) - a, 0.0, star, xtol=1e-15, rtol=1e-12))


def _least_type_one_error(curve: str, mu: float, sampling_rate: float) -> Callable[[float], float]:
    """y ↦ the least type-I error at which the curve allows power y, i.e. f(1 − y) for symmetric f.

    Evaluated directly in y (not through 1 − y) so that the tiny masses of the recursion keep
    their relative precision.
    """
    if curve == "gaussian" or sampling_rate >= 1.0:
        return lambda y: float(special.ndtr(special.ndtri(y) - mu)) if y < 1.0 else 1.0
    q = sampling_rate
    star = float(special.ndtr(-mu / 2.0))

    def power_q(x: float) -> float:  # 1 − f_q(x) = q·(1 − G_μ(x)) + (1 − q)·x
        return q * float(special.ndtr(special.ndtri(x) + mu)) + (1.0 - q) * x

    knee = power_q(star)
    f_star = 1.0 - knee

    def least(y: float) -> float:
        if y >= 1.0:
            return 1.0
        if y <= 0.0:
            return 0.0
        if y <= knee:  # on f_q⁻¹: solve 1 − f_q(x) = y on [0, α*]
            return float(optimize.brentq(lambda x: power_q(x) - y, 0.0, star, xtol=1e-300, rtol=1e-13))
        if y <= knee + (f_star - star):  # on the segment of slope −1
            return star + (y - knee)
        return q * float(special.ndtr(special.ndtri(y) - mu)) + (1.0 - q) * y  # on f_q

    return least


def _check_counts(num_canaries: int, num_guesses: int, num_correct: int) -> tuple[int, int, int]:
    m = v.integer("num_canaries", num_canaries, minimum=1)
    r = v.integer("num_guesses", num_guesses, minimum=0)
    c = v.integer("num_correct", num_correct, minimum=0)
    if r > m:
        raise v.invalid("num_guesses", f"num_guesses must be <= num_canaries={m}, got {r}")
    if c > r:
        raise v.invalid("num_correct", f"num_correct must be <= num_guesses={r}, got {c}")
    return m, r, c


def fdp_one_run_rejects(
    *,
    mu: float,
    num_canaries: int,
    num_guesses: int,
    num_correct: int,
    confidence: float = 0.95,
    num_tests: int = 1,
    curve: str = "gaussian",
    sampling_rate: float = 1.0,
) -> bool:
    """Whether ≥ ``num_correct`` correct of ``num_guesses`` guesses refutes "M is f-DP".

    Mahloujifar, Melis & Chaudhuri (2025), Algorithm 3 (the recursion with abstention). Let
    a = 1 − confidence over ``num_tests`` and suppose, for contradiction, that v or more correct
    guesses happen with probability ≥ a. Write E_j for the event "at least j guesses correct"
    and, averaged over the m canaries, C_j and W_j for the probability that canary i's guess is
    correct (wrong) and E_j holds. The supposition gives C_v ≥ a·v/m, W_v ≥ a·(r − v)/m.

    Why each step is what it is: E_j counts canary i's own guess, so "i correct and E_j" is
    "i correct and at least j − 1 of the others correct", and f-DP for canary i (the guess
    on i is a test between i IN and i OUT, given the rest; Dong, Roth & Su 2022, Def. 2.3)
    ties it to "i wrong and at least j − 1 of the others correct", which is "i wrong and
    E_{j−1}". Averaged over canaries (f is convex) this gives W_{j−1} ≥ f(1 − C_j), the type-I
    error at which a test reaches power C_j, hence the index shift h_{j−1} = max(h_j,
    f(1 − r_j)). The runs with exactly j − 1 correct carry correct and wrong mass in the ratio
    (j − 1)/(r − j + 1), so the wrong mass added at that level adds (j − 1)/(r − j + 1) times as
    much correct mass. Applying the constraint to r_{j−1} itself instead (no shift) would
    treat E_j as if it did not depend on canary i's own membership and is not sound.
    At j = 0 every run is counted, so C_0 + W_0 = r/m exactly; lower bounds summing to more
    than r/m contradict the supposition and the hypothesis is rejected at level a.
    Args:
        mu: the hypothesised member of the family (μ of G_μ, or of C_q(G_μ)).
        num_canaries: m.
        num_guesses: r (guesses made; the rest abstained).
        num_correct: v.
        confidence: confidence of the rejection.
        num_tests: Bonferroni factor when the guess count was chosen among that many.
        curve: ``gaussian`` or ``subsampled-gaussian``.
        sampling_rate: q of ``subsampled-gaussian`` (1 for ``gaussian``).

    Returns:
        True when the curve is rejected at ``confidence``.
    """
    m, r, c = _check_counts(num_canaries, num_guesses, num_correct)
    confidence = v.open_unit("confidence", confidence)
    tests = v.integer("num_tests", num_tests, minimum=1)
    mu = v.non_negative("mu", mu)
    curve, q = _check_curve(curve, sampling_rate)
    return _rejects(_least_type_one_error(curve, mu, q), m, r, c, (1.0 - confidence) / tests)


def _check_curve(curve: str, sampling_rate: float) -> tuple[str, float]:
    curve = v.choice("curve", curve, TRADEOFF_CURVES)
    q = v.half_open_unit("sampling_rate", sampling_rate)
    if curve == "gaussian" and q != 1.0:
        raise v.invalid(
            "sampling_rate",
            f"sampling_rate applies to curve='subsampled-gaussian'; curve='gaussian' needs 1, got {sampling_rate!r}",
        )
    return curve, q


def _rejects(least_alpha: Callable[[float], float], m: int, r: int, c: int, level: float) -> bool:
    """The recursion of :func:`fdp_one_run_rejects` (paper's Algorithm 3) on validated inputs.

    ``correct``/``wrong`` hold the lower bounds r_j/h_j on C_j/W_j; the loop variable i is
    j − 1, the level whose wrong mass is being added.
    """
    if c == 0:
        return False
    correct = level * c / m
    wrong = level * (r - c) / m
    for i in range(c - 1, -1, -1):
        needed = max(wrong, least_alpha(correct))
        if needed == wrong:
            # Neither mass moves again once the wrong-guess mass already satisfies the curve.
            break
        correct = min(correct + i / (r - i) * (needed - wrong), 1.0)
        wrong = needed
    return correct + wrong > r / m


def fdp_one_run_mu_lb(
    *,
    num_canaries: int,
    num_guesses: int,
    num_correct: int,
    confidence: float = 0.95,
    num_tests: int = 1,
    curve: str = "gaussian",
    sampling_rate: float = 1.0,
    tolerance: float = 1e-6,
) -> float:
    """Largest μ whose curve the counts reject: a lower bound on the mechanism's μ.

    The families are ordered (a larger μ is a weaker hypothesis), so the rejected set is an
    interval [0, μ_LB) found by bisection; 0 when nothing is rejected.

    Args:
        num_canaries: m.
        num_guesses: r.
        num_correct: v.
        confidence: confidence of the bound.
        num_tests: Bonferroni factor for the choice of the guess count.
        curve: ``gaussian`` (G_μ) or ``subsampled-gaussian`` (C_q(G_μ) at ``sampling_rate``).
        sampling_rate: q of ``subsampled-gaussian`` (1 for ``gaussian``).
        tolerance: bisection width on μ (the returned value is the lower end: conservative).

    Returns:
        μ_LB ≥ 0, holding with probability ≥ ``confidence`` for a mechanism in the family.
    """
    m, r, c = _check_counts(num_canaries, num_guesses, num_correct)
    confidence = v.open_unit("confidence", confidence)
    tests = v.integer("num_tests", num_tests, minimum=1)
    curve, q = _check_curve(curve, sampling_rate)
    tol = v.positive("tolerance", tolerance)
    level = (1.0 - confidence) / tests

    def rejected(mu: float) -> bool:
        return _rejects(_least_type_one_error(curve, mu, q), m, r, c, level)

    # At μ = 0 the curve is 1 − α (perfect privacy) and nothing can beat chance.
    if not rejected(tol):
        return 0.0
    lo, hi = tol, 1.0
    while rejected(hi):
        lo, hi = hi, 2.0 * hi
        if hi > _MU_MAX:
            return lo
    while hi - lo > tol:
        mid = 0.5 * (lo + hi)
        if rejected(mid):
            lo = mid
        else:
            hi = mid
    return lo


def curve_epsilon(*, mu: float, delta: float, curve: str = "gaussian", sampling_rate: float = 1.0) -> float:
    """ε at δ of the family's member μ (and q).

    * ``gaussian``: the μ-GDP conversion (Dong, Roth & Su 2022, Cor. 2.13).
    * ``subsampled-gaussian``: on [0, α*] the curve is q·G_μ + (1 − q)·Id⁻, so its privacy
      profile is δ(ε) = q·δ_μ(ln(1 + (e^ε − 1)/q)) (the amplification-by-subsampling identity
      of Balle, Barthe & Gaboardi 2018, Thm 8, tight here); solving for ε gives
      ε = ln(1 + q(e^{ε_μ(δ/q)} − 1)), and 0 when δ ≥ q.
    """
    mu = v.non_negative("mu", mu)
    delta = v.open_unit("delta", delta)
    curve, q = _check_curve(curve, sampling_rate)
    if mu == 0.0:
        return 0.0
    if curve == "gaussian" or q == 1.0:
        return gdp_epsilon(mu=mu, delta=delta)
    if delta >= q:
        return 0.0
    inner = gdp_epsilon(mu=mu, delta=delta / q)
    return float(math.log1p(q * math.expm1(inner))) if inner < 700 else inner + math.log(q)


def fdp_one_run_epsilon_lb(
    *,
    num_canaries: int,
    num_guesses: int,
    num_correct: int,
    delta: float,
    confidence: float = 0.95,
    num_tests: int = 1,
    curve: str = "gaussian",
    sampling_rate: float = 1.0,
) -> float:
    """ε at δ of the μ_LB member of the family (see :func:`fdp_one_run_mu_lb`).

    Sound as an (ε, δ) lower bound for mechanisms whose trade-off curve is in the family.
    """
    delta = v.open_unit("delta", delta)
    mu = fdp_one_run_mu_lb(
        num_canaries=num_canaries,
        num_guesses=num_guesses,
        num_correct=num_correct,
        confidence=confidence,
        num_tests=num_tests,
        curve=curve,
        sampling_rate=sampling_rate,
    )
    return curve_epsilon(mu=mu, delta=delta, curve=curve, sampling_rate=sampling_rate)


def fdp_one_run_bound_from_scores(
    scores: Sequence[float] | np.ndarray,
    included: Sequence[bool] | np.ndarray,
    *,
    delta: float,
    confidence: float = 0.95,
    guess_counts: Sequence[int] | None = None,
    curve: str = "gaussian",
    sampling_rate: float = 1.0,
    seed: int = 0,
) -> tuple[float, float, int, int]:
    """f-DP one-run ε_LB from canary scores (higher = IN).

    Guess IN for the top-k and OUT for the bottom-k scores for each k in ``guess_counts`` and
    pay a Bonferroni factor for the choice among them (as
    :func:`dpaudit.privacy.audit_stats.one_run_bound_from_scores` does for Steinke et al.).

    Args:
        scores: one score per canary.
        included: whether each canary was included (independently with probability ½).
        delta: δ at which ε is stated.
        confidence: confidence after the choice of k.
        guess_counts: the k tried (each ≤ m/2); default a fixed grid of fractions of m.
        curve: ``gaussian`` or ``subsampled-gaussian``.
        sampling_rate: q of ``subsampled-gaussian``.
        seed: seed of the random order among tied scores
            (:func:`dpaudit.privacy.audit_stats.one_run_correct_guesses`: ties never decide a guess).

    Returns:
        (ε_LB, μ_LB, guesses r, correct v) of the best k.
    """
    s = np.asarray(scores, dtype=float).reshape(-1)
    if s.size < 2:
        raise v.invalid("scores", f"scores must hold at least 2 canary scores, got {s.size}")
    if not np.all(np.isfinite(s)):
        raise v.invalid("scores", f"scores must be finite; found {s[~np.isfinite(s)][:3].tolist()}")
    inc = np.asarray(included).reshape(-1)
    if inc.dtype != bool:
        raise v.invalid_type("included", f"included must be booleans, got dtype {inc.dtype}")
    if inc.size != s.size:
        raise v.invalid("included", f"included must have one entry per score ({s.size}), got {inc.size}")
    delta = v.open_unit("delta", delta)
    confidence = v.open_unit("confidence", confidence)
    m = s.size
    counts = (
        [v.integer("guess_counts[i]", k, minimum=1) for k in guess_counts]
        if guess_counts is not None
        else default_guess_counts(m)
    )
    if not counts:
        raise v.invalid("guess_counts", "guess_counts must hold at least one k, got none")
    for k in counts:
        if 2 * k > m:
            raise v.invalid("guess_counts", f"guess_counts entries must be <= m/2 = {m // 2}, got {k}")
    best = (0.0, 0.0, 2 * counts[0], 0)
    for k, correct in zip(counts, one_run_correct_guesses(s, inc, counts, seed=seed), strict=True):
        mu = fdp_one_run_mu_lb(
            num_canaries=m,
            num_guesses=2 * k,
            num_correct=correct,
            confidence=confidence,
            num_tests=len(counts),
            curve=curve,
            sampling_rate=sampling_rate,
        )
        if mu > best[1] or best[3] == 0:
            best = (curve_epsilon(mu=mu, delta=delta, curve=curve, sampling_rate=sampling_rate), mu, 2 * k, correct)
    return best


def idealised_gaussian_counts(*, mu: float, num_canaries: int, num_guesses_per_side: int) -> tuple[int, int]:
    """Expected (r, v) of the top-k / bottom-k auditor on the idealised Gaussian mechanism.

    Each canary's score is μ·1{included} + N(0, 1) (the mechanism run once per canary, what a
    white-box auditor of one Gaussian step sees); half are included in expectation. With k
    guesses per side the IN threshold t solves (m/2)(Φ̄(t − μ) + Φ̄(t)) = k, the OUT side is its
    mirror image, and the expected number correct is m·Φ̄(t − μ). Deterministic, so a table
    computed from it does not move with a random seed or a library's random streams.

    Returns:
        (r, v) = (2k, round(m·Φ̄(t − μ))).
    """
    mu = v.positive("mu", mu)
    m = v.integer("num_canaries", num_canaries, minimum=2)
    k = v.integer("num_guesses_per_side", num_guesses_per_side, minimum=1)
    if 2 * k > m:
        raise v.invalid("num_guesses_per_side", f"num_guesses_per_side must be <= num_canaries/2 = {m // 2}, got {k}")

    def excess(t: float) -> float:
        return 0.5 * m * (float(special.ndtr(mu - t)) + float(special.ndtr(-t))) - k

    t = float(optimize.brentq(excess, -60.0, 60.0 + mu, xtol=1e-12))
    correct = int(round(m * float(special.ndtr(mu - t))))
    return 2 * k, min(correct, 2 * k)
