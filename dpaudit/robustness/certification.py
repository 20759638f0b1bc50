"""Certification mathematics: certified robustness from noise layers and randomized smoothing.

Pure NumPy/SciPy (no torch), so reports can recompute and render certificates from stored
results. Everything is vectorised over test points.

* **PixelDP expected-output stability** (Lecuyer et al. 2019, "Certified Robustness to
  Adversarial Examples with Differential Privacy", §3, Lemma 1 / Proposition 1): if the
  randomized scoring function A is (ε, δ)-DP with respect to input changes of size ≤ L, the
  prediction k is robust within L whenever
  E_lb[A_k(x)] > e^{2ε} max_{i≠k} E_ub[A_i(x)] + (1 + e^ε) δ. The expectations are bounded
  from Monte Carlo draws (Clopper–Pearson on argmax counts, Hoeffding or empirical Bernstein
  on softmax means), with a Bonferroni union over the classes.
* **Certified size**: noise with σ per unit of sensitivity (σ/Δ) is (ε', δ')-DP for attacks of
  size L' = (σ/Δ)/c(ε', δ'), where c is the multiplier of the calibration (σ = c·Δ). Searching
  (ε', δ') over the robustness condition gives the largest certified L'. PixelDP uses the
  classical multiplier with ε' ≤ 1; the heterogeneous Gaussian mechanism of Phan et al. 2019
  ("Scalable Differential Privacy with Certified Robustness in Adversarial Learning",
  Theorems 2–3, Eq. 10) uses the extended multiplier with ε' > 0 unbounded; the analytic
  multiplier (Balle & Wang 2018) is offered as the tight alternative.
* **Randomized smoothing** (Cohen, Rosenfeld & Kolter 2019, Theorem 1 and CERTIFY):
  R = σ Φ⁻¹(p_A) with p_A a one-sided Clopper–Pearson lower bound.
* **The authors' mixed δ** (certified.md §2 (f)): Phan et al.'s code certifies with the
  multiplier taken at another δ than the one the noise was calibrated at. It is available as
  the explicit, off-by-default ``authors_mixed_delta`` option of :func:`certified_radius`
  (:class:`AuthorsMixedDelta`), only to reproduce their numbers; its radii are not certificates.

Formulas and test vectors: ``reference/certified.md``. A certificate is a *lower* bound on
robust accuracy; :func:`soundness_violations` flags sizes where it exceeds the accuracy an
actual attack left, which means a bug (or a failure of the 1 − η event).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special, stats

from dpaudit import _validate as v
from dpaudit.privacy.gaussian import calibrate_gaussian
from dpaudit.results.certification import (
    CERTIFICATION_NORMS,
    CertificationResult,
    SoundnessViolation,
    _int_array,
    _readonly,
    _real_array,
    load_certification_result,
    save_certification_result,
)

__all__ = [
    "AUTHORS_REFERENCE_DELTA",
    "AuthorsMixedDelta",
    "CERTIFICATION_MECHANISMS",
    "CERTIFICATION_NORMS",
    "DEFAULT_DELTA_GRID",
    "RADIUS_SEARCHES",
    "SCORE_BOUNDS",
    "CertificationResult",
    "ScoreBounds",
    "SoundnessViolation",
    "certified_radius",
    "count_bounds",
    "load_certification_result",
    "mean_bounds",
    "noise_multiplier",
    "robust",
    "save_certification_result",
    "smoothing_certify",
    "smoothing_lower_bound",
    "soundness_violations",
]

#: Calibrations whose multiplier c(ε, δ) (σ = c·Δ) a noise layer may have used.
CERTIFICATION_MECHANISMS = ("classical", "analytic", "extended")
#: Ways of bounding the expected scores from Monte Carlo draws.
SCORE_BOUNDS = ("clopper-pearson", "hoeffding", "bernstein")
#: How :func:`certified_radius` finds the largest ε' for each δ'.
RADIUS_SEARCHES = ("exact", "pixeldp")
#: Attack norms a certified radius can be measured in.

#: δ' grid of the certified-size search: 0.001, 0.002, …, 0.299 (certified.md §1).
DEFAULT_DELTA_GRID = np.arange(1, 300) / 1000.0
DEFAULT_DELTA_GRID.flags.writeable = False

#: The δ Phan et al.'s certification code passes to its robustness-size routine (their DP-SGD δ).
AUTHORS_REFERENCE_DELTA = 1e-5

# Theorem 2 of Phan et al. needs δ ≤ 0.484 (accounting.md §5); mirrors dpaudit.privacy.gaussian.
_EGM_MAX_DELTA = 0.484
_DEFAULT_TOLERANCE = {"exact": 1e-6, "pixeldp": 1e-3}
_ARRAYS = ("labels", "predictions", "radii")


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------
def _probabilities(name: str, value: Any) -> np.ndarray:
    arr = _real_array(name, value)
    if np.any((arr < 0) | (arr > 1)):
        bad = arr[(arr < 0) | (arr > 1)][:3].tolist()
        raise v.invalid(name, f"{name} must lie in [0, 1], got e.g. {bad}")
    return arr


def _count_matrix(name: str, value: Any) -> np.ndarray:
    counts = _int_array(name, value, ndim=2)
    if counts.shape[0] == 0 or counts.shape[1] < 2:
        raise v.invalid(name, f"{name} must have shape (n >= 1, num_classes >= 2), got {counts.shape}")
    if np.any(counts < 0):
        raise v.invalid(name, f"{name} must be non-negative counts, got e.g. {counts[counts < 0][:3].tolist()}")
    empty = counts.sum(axis=1) == 0
    if np.any(empty):
        raise v.invalid(name, f"{name} must count at least one draw per test point; rows {np.flatnonzero(empty)[:5].tolist()} are empty")
    return counts


def _bonferroni_level(confidence: float, num_classes: int) -> float:
    """η/k: one-sided failure probability of each of the k bounds of the union."""
    return (1.0 - confidence) / num_classes


# --------------------------------------------------------------------------------------------
# Noise multipliers
# --------------------------------------------------------------------------------------------
def noise_multiplier(mechanism: str, *, epsilon: float, delta: float) -> float:
    """The multiplier c(ε, δ) of a Gaussian calibration: σ = c·Δ.

    Args:
        mechanism: one of :data:`CERTIFICATION_MECHANISMS`.
        epsilon: ε > 0 (≤ 1 for ``"classical"``).
        delta: δ in (0, 1) (≤ 0.484 for ``"extended"``).

    Returns:
        σ of the calibration at sensitivity 1 (:func:`dpaudit.privacy.gaussian.calibrate_gaussian`).

    Raises:
        ValueError: unknown mechanism or (ε, δ) outside the calibration's validity.
    """
    mechanism = v.choice("mechanism", mechanism, CERTIFICATION_MECHANISMS)
    return calibrate_gaussian(epsilon=epsilon, delta=delta, sensitivity=1.0, method=mechanism)


def _log_gaussian_delta(mu: np.ndarray, epsilon: np.ndarray) -> np.ndarray:
    """ln δ(ε) of the Gaussian mechanism with Δ/σ = mu (Balle & Wang 2018, Thm 8), vectorised."""
    a = special.log_ndtr(mu / 2.0 - epsilon / mu)
    b = epsilon + special.log_ndtr(-mu / 2.0 - epsilon / mu)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = a + np.log1p(-np.exp(np.minimum(b - a, 0.0)))
    return np.where(b < a, out, -np.inf)


def _analytic_multipliers(epsilon: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Smallest σ (Δ = 1) with δ(ε; σ) ≤ δ, over whole arrays (analytic Gaussian mechanism).

    Safeguarded Newton on t = ln σ for f(t) = ln δ(ε; e^{-t}) − ln δ_target, using
    dδ/dμ = φ(μ/2 − ε/μ) (the two Gaussian terms of the derivative coincide), with a
    bisection step whenever Newton leaves the bracket. The answer is then nudged up until the
    condition holds as evaluated, so the mechanism is never under-noised: an under-estimated
    c would over-state the certified size.
    """
    epsilon, delta = np.broadcast_arrays(np.asarray(epsilon, dtype=np.float64), np.asarray(delta, dtype=np.float64))
    log_target = np.log(delta)
    lo = np.full(epsilon.shape, -30.0)  # σ = e^-30: δ(ε) ≈ 1, fails every target δ < 1
    hi = np.full(epsilon.shape, 30.0)  # σ = e^30: δ(ε) ≈ 0, meets every target
    # EGM's σ is always at least AGM's (accounting.md §5): a close start from above.
    s = np.log(math.sqrt(2.0 / math.pi) / np.minimum(delta, _EGM_MAX_DELTA))
    t = np.where(delta <= _EGM_MAX_DELTA, np.log((np.sqrt(s) + np.sqrt(s + epsilon)) / (math.sqrt(2.0) * epsilon)), 0.0)

    def excess(t: np.ndarray) -> np.ndarray:
        return _log_gaussian_delta(np.exp(-t), epsilon) - log_target

    for _ in range(200):
        f = excess(t)
        ok = f <= 0
        hi = np.where(ok, np.minimum(hi, t), hi)
        lo = np.where(ok, lo, np.maximum(lo, t))
        mu = np.exp(-t)
        with np.errstate(over="ignore", invalid="ignore"):
            step = f * np.exp(f + log_target - np.log(mu) - stats.norm.logpdf(mu / 2.0 - epsilon / mu))
            t_new = t + step
        # A converged Newton iterate sits on the bracket's end (t = hi), so test convergence
        # before falling back to bisection.
        done = np.abs(step) <= 1e-13 * np.maximum(1.0, np.abs(t))
        inside = np.isfinite(t_new) & (t_new > lo) & (t_new < hi)
        t = np.where(done, t, np.where(inside, t_new, 0.5 * (lo + hi)))
        if np.all(done):
            break
    # Step up past the root where rounding left t on the wrong side; the step doubles, so
    # this ends quickly (and at the bracket's end at worst).
    bump = 4e-16 * np.maximum(1.0, np.abs(t))
    for _ in range(200):
        bad = excess(t) > 0
        if not np.any(bad):
            break
        t = np.where(bad, np.minimum(t + bump, hi), t)
        bump = bump * 2.0
    return np.exp(t)


def _multipliers(mechanism: str, epsilon: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """c(ε, δ) over broadcast arrays (ε > 0); the caller enforces each formula's validity."""
    if mechanism == "classical":
        return np.sqrt(2.0 * np.log(1.25 / delta)) / epsilon
    if mechanism == "extended":
        s = np.log(math.sqrt(2.0 / math.pi) / delta)
        return (np.sqrt(s) + np.sqrt(s + epsilon)) / (math.sqrt(2.0) * epsilon)
    return _analytic_multipliers(epsilon, delta)


# --------------------------------------------------------------------------------------------
# Bounds on the expected scores
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True, eq=False)
class ScoreBounds:
    """Bounds on the expected scores that the robustness condition needs, per test point.

    The bounds of one test point hold jointly with probability ≥ ``confidence``: one
    one-sided bound per class, each at level η/k (η = 1 − confidence, Bonferroni over the k
    classes).

    Attributes:
        top: (n,) int, the class with the largest estimated expected score.
        lower: (n,) float, lower bound on E[A_top(x)].
        upper: (n,) float, upper bound on max_{i≠top} E[A_i(x)].
        method: one of :data:`SCORE_BOUNDS`.
        confidence: joint confidence 1 − η of the bounds of one test point.
        num_draws: Monte Carlo draws per test point.
    """

    top: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    method: str
    confidence: float
    num_draws: int

    def __post_init__(self) -> None:
        v.choice("method", self.method, SCORE_BOUNDS)
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        object.__setattr__(self, "num_draws", v.integer("num_draws", self.num_draws, minimum=1))
        top = _int_array("top", self.top, ndim=1)
        if np.any(top < 0):
            raise v.invalid("top", f"top must hold class indices >= 0, got e.g. {top[top < 0][:3].tolist()}")
        lower = _probabilities("lower", self.lower)
        upper = _probabilities("upper", self.upper)
        for name, arr in (("lower", lower), ("upper", upper)):
            if arr.shape != top.shape:
                raise ValueError(f"{name} must have shape {top.shape} (one per test point), got {arr.shape}")
        object.__setattr__(self, "top", _readonly(top))
        object.__setattr__(self, "lower", _readonly(lower))
        object.__setattr__(self, "upper", _readonly(upper))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScoreBounds):
            return NotImplemented
        return (
            self.method == other.method
            and self.confidence == other.confidence
            and self.num_draws == other.num_draws
            and all(np.array_equal(getattr(self, a), getattr(other, a)) for a in ("top", "lower", "upper"))
        )

    __hash__ = None  # type: ignore[assignment]


def count_bounds(counts: np.ndarray, *, confidence: float = 0.95) -> ScoreBounds:
    """Clopper–Pearson bounds from argmax counts (PixelDP, Lecuyer et al. 2019, §3).

    With η = 1 − confidence and k classes, each bound is a *one-sided* Clopper–Pearson bound
    at level η/k (Bonferroni over the classes), as in the PixelDP reference code:

    * lower = BetaInv(η/k; n_top, n − n_top + 1), 0 when n_top = 0;
    * upper = BetaInv(1 − η/k; n_2 + 1, n − n_2), 1 when n_2 = n, with n_2 the largest count
      among the other classes.

    These reproduce the certified.md §1 vectors (n = 2000, k = 10, η = 0.05) to 5 decimals;
    the two-sided form (quantiles at η/(2k)) does not (e.g. 0.99701 instead of 0.99735).

    Args:
        counts: (n, k) non-negative integer counts of the argmax class over the draws; every
            row must sum to the same number of draws.
        confidence: joint confidence 1 − η, in (0, 1).

    Returns:
        The bounds, with ``method="clopper-pearson"``; ties for the top class go to the lowest
        class index.

    Raises:
        TypeError: ``counts`` does not hold integers.
        ValueError: bad shape, negative counts, empty rows or unequal row totals.
    """
    counts = _count_matrix("counts", counts)
    confidence = v.open_unit("confidence", confidence)
    totals = counts.sum(axis=1)
    if np.any(totals != totals[0]):
        raise v.invalid("counts", f"counts must sum to the same number of draws in every row, got totals {np.unique(totals)[:5].tolist()}")
    n = int(totals[0])
    rows = np.arange(counts.shape[0])
    top = np.argmax(counts, axis=1)
    top_count = counts[rows, top]
    others = counts.copy()
    others[rows, top] = -1
    second = others.max(axis=1)
    level = _bonferroni_level(confidence, counts.shape[1])
    # Substitute harmless parameters where the bound is fixed by definition, so beta.ppf
    # never sees a zero shape parameter.
    lower = np.where(top_count > 0, stats.beta.ppf(level, np.maximum(top_count, 1), n - top_count + 1), 0.0)
    upper = np.where(second < n, stats.beta.ppf(1.0 - level, second + 1, np.maximum(n - second, 1)), 1.0)
    return ScoreBounds(top=top, lower=lower, upper=upper, method="clopper-pearson", confidence=confidence, num_draws=n)


def mean_bounds(
    means: np.ndarray,
    *,
    num_draws: int,
    variances: np.ndarray | None = None,
    method: str = "hoeffding",
    confidence: float = 0.95,
) -> ScoreBounds:
    """Hoeffding or empirical-Bernstein bounds from mean softmax scores (PixelDP, §3).

    With η = 1 − confidence, k classes and n draws, each class gets a one-sided bound at η/k:

    * Hoeffding: E ± √(ln(k/η) / (2n));
    * empirical Bernstein (Maurer & Pontil 2009):
      E ± [√(2 V ln(2k/η) / n) + 7 ln(2k/η) / (3(n − 1))], V the unbiased sample variance.

    The upper bound is max over the non-top classes of (mean + its bound), which covers the
    largest of them even when a class with a lower mean has a wider (Bernstein) interval; the
    PixelDP code bounds only the class with the second-largest mean. Bounds are clipped into
    [0, 1], where every expected softmax score lies.

    Args:
        means: (n_points, k) mean softmax scores over ``num_draws`` draws, in [0, 1].
        num_draws: draws per test point (≥ 2 for Bernstein).
        variances: (n_points, k) unbiased sample variances; required for ``"bernstein"``,
            ignored for ``"hoeffding"``.
        method: ``"hoeffding"`` or ``"bernstein"``.
        confidence: joint confidence 1 − η, in (0, 1).

    Returns:
        The bounds; ties for the top class go to the lowest class index.

    Raises:
        ValueError: bad shapes or values, an unknown method, or Bernstein without variances.
    """
    method = v.choice("method", method, ("hoeffding", "bernstein"))
    confidence = v.open_unit("confidence", confidence)
    num_draws = v.integer("num_draws", num_draws, minimum=2 if method == "bernstein" else 1)
    means = _probabilities("means", means)
    if means.ndim != 2 or means.shape[0] == 0 or means.shape[1] < 2:
        raise v.invalid("means", f"means must have shape (n >= 1, num_classes >= 2), got {means.shape}")
    k = means.shape[1]
    eta = 1.0 - confidence
    if method == "hoeffding":
        width = np.full(means.shape, math.sqrt(math.log(k / eta) / (2.0 * num_draws)))
    else:
        if variances is None:
            raise v.invalid("variances", "variances must be given for method='bernstein', got None")
        var = _real_array("variances", variances)
        if var.shape != means.shape:
            raise v.invalid("variances", f"variances must have shape {means.shape} (like means), got {var.shape}")
        if np.any(var < 0):
            raise v.invalid("variances", f"variances must be >= 0, got e.g. {var[var < 0][:3].tolist()}")
        log_term = math.log(2.0 * k / eta)
        width = np.sqrt(2.0 * var * log_term / num_draws) + 7.0 * log_term / (3.0 * (num_draws - 1))
    rows = np.arange(means.shape[0])
    top = np.argmax(means, axis=1)
    lower = means[rows, top] - width[rows, top]
    others = means + width
    others[rows, top] = -np.inf
    upper = others.max(axis=1)
    return ScoreBounds(top=top, lower=np.clip(lower, 0.0, 1.0), upper=np.clip(upper, 0.0, 1.0), method=method, confidence=confidence, num_draws=num_draws)


# --------------------------------------------------------------------------------------------
# The authors' mixed δ (certified.md §2 (f))
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class AuthorsMixedDelta:
    """The δ mix of Phan et al.'s certification code, as an explicit option (certified.md §2 (f)).

    A noise layer calibrated at (ε_r, δ_r) for attack size L has σ/Δ = L·c(ε_r, δ_r), and the
    same noise certifies L' = (σ/Δ)/c(ε', δ') (:func:`certified_radius`). The authors' code
    instead scales the certified size by the multiplier at its reference δ (``1e-5``, the
    DP-SGD δ it passes to its robustness-size routine) while the noise was calibrated at
    δ_r = 0.05: L' = L·c(ε_r, δ_ref)/c(ε', δ'). Every radius is multiplied by
    :meth:`factor` = c(ε_r, δ_ref)/c(ε_r, δ_r) (> 1 when δ_ref < δ_r), which the noise does not
    support: the resulting radii are **not certificates**.

    Assumed reading (the code cannot be run here): we model only the reference δ; the code's
    further division by its classical multiplier at δ_r (its ``dp_mult``), whose units do not
    match a radius, and its ε' cap at ε_r are not reproduced.

    Attributes:
        robustness_epsilon: ε_r the noise was calibrated at.
        robustness_delta: δ_r the noise was calibrated at.
        reference_delta: the δ the code's certification uses instead (default 1e-5).
    """

    robustness_epsilon: float
    robustness_delta: float
    reference_delta: float = AUTHORS_REFERENCE_DELTA

    def __post_init__(self) -> None:
        object.__setattr__(self, "robustness_epsilon", v.positive("robustness_epsilon", self.robustness_epsilon))
        object.__setattr__(self, "robustness_delta", v.open_unit("robustness_delta", self.robustness_delta))
        object.__setattr__(self, "reference_delta", v.open_unit("reference_delta", self.reference_delta))

    def factor(self, mechanism: str) -> float:
        """c(ε_r, δ_ref)/c(ε_r, δ_r) under ``mechanism``: how much the mix inflates every radius.

        Raises:
            ValueError: unknown mechanism, or (ε_r, δ) outside its validity (named).
        """
        mechanism = v.choice("mechanism", mechanism, CERTIFICATION_MECHANISMS)
        try:
            reference = noise_multiplier(mechanism, epsilon=self.robustness_epsilon, delta=self.reference_delta)
            calibrated = noise_multiplier(mechanism, epsilon=self.robustness_epsilon, delta=self.robustness_delta)
        except ValueError as exc:
            raise v.invalid("authors_mixed_delta", f"authors_mixed_delta={self!r} is invalid for the {mechanism} calibration: {exc}") from None
        return reference / calibrated


# --------------------------------------------------------------------------------------------
# The robustness condition and the certified size
# --------------------------------------------------------------------------------------------
def robust(p_lower: np.ndarray, p_upper: np.ndarray, *, epsilon: float | np.ndarray, delta: float | np.ndarray) -> np.ndarray:
    """PixelDP robustness condition p_lb > e^{2ε} p_ub + (1 + e^ε) δ (Lecuyer et al. 2019, Prop. 1).

    Args:
        p_lower: lower bounds on the top class's expected score, in [0, 1].
        p_upper: upper bounds on the largest other expected score, in [0, 1].
        epsilon: ε ≥ 0 of the noise for the attack size in question (scalar or array).
        delta: δ in [0, 1) (scalar or array).

    Returns:
        A bool array of the broadcast shape of the four arguments.

    Raises:
        ValueError: values out of range or shapes that do not broadcast.
    """
    p_lower = _probabilities("p_lower", p_lower)
    p_upper = _probabilities("p_upper", p_upper)
    eps = _real_array("epsilon", epsilon)
    if np.any(eps < 0):
        raise v.invalid("epsilon", f"epsilon must be >= 0, got e.g. {eps[eps < 0][:3].tolist()}")
    dlt = _real_array("delta", delta)
    if np.any((dlt < 0) | (dlt >= 1)):
        raise v.invalid("delta", f"delta must lie in [0, 1), got e.g. {dlt[(dlt < 0) | (dlt >= 1)][:3].tolist()}")
    try:
        np.broadcast_shapes(p_lower.shape, p_upper.shape, eps.shape, dlt.shape)
    except ValueError:
        raise v.invalid("p_lower", f"p_lower, p_upper, epsilon and delta must broadcast together, got shapes {p_lower.shape}, {p_upper.shape}, {eps.shape}, {dlt.shape}") from None
    return _robust(p_lower, p_upper, eps, dlt)


def _robust(p_lower: np.ndarray, p_upper: np.ndarray, epsilon: np.ndarray, delta: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        # e^{2ε}·0 must be 0 even where e^{2ε} overflows.
        spread = np.where(p_upper > 0, np.exp(2.0 * epsilon) * p_upper, 0.0)
        slack = np.where(delta > 0, (1.0 + np.exp(epsilon)) * delta, 0.0)
        return np.asarray(p_lower > spread + slack)


def _supremum_epsilon(p_lower: np.ndarray, p_upper: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """sup{ε : robust(ε, δ)}; ≤ 0 (or NaN-free −inf) where even ε = 0 fails.

    With x = e^ε the condition is the quadratic p_ub x² + δ x − (p_lb − δ) < 0, whose positive
    root x* = 2(p_lb − δ)/(δ + √(δ² + 4 p_ub (p_lb − δ))) is written so that p_ub = 0 and tiny
    p_ub do not cancel. The condition is decreasing in ε, so it holds exactly for ε < ln x*.
    """
    slack = p_lower - delta
    with np.errstate(divide="ignore", invalid="ignore"):
        root = 2.0 * slack / (delta + np.sqrt(delta * delta + 4.0 * p_upper * np.maximum(slack, 0.0)))
        return np.where(slack > 0, np.log(root), -np.inf)


def certified_radius(
    p_lower: np.ndarray,
    p_upper: np.ndarray,
    *,
    noise_per_sensitivity: float,
    mechanism: str,
    max_epsilon: float | None = None,
    delta_grid: np.ndarray | None = None,
    tolerance: float | None = None,
    search: str = "exact",
    allow_classical_above_one: bool = False,
    authors_mixed_delta: AuthorsMixedDelta | None = None,
) -> np.ndarray:
    """Largest attack size certified by a Gaussian noise layer, per test point.

    The layer adds Gaussian noise with standard deviation σ per unit of (r-weighted)
    sensitivity, ``noise_per_sensitivity = σ/Δ``; a layer calibrated at (ε, δ) for attack size
    L under multiplier c has σ/Δ = L·c(ε, δ). The same noise is (ε', δ')-DP for attacks of
    size L' = (σ/Δ)/c(ε', δ') (certified.md §1; Phan et al. 2019, Eq. 10 for the
    heterogeneous mechanism, where Δ is the r-weighted sensitivity). For each δ' of the grid
    the largest ε' satisfying :func:`robust` is found; c decreases in ε', so that ε' gives
    the largest L' at this δ'. The certified size is the maximum over the grid, 0 where no
    (ε', δ') certifies.

    Two searches for ε':

    * ``"exact"`` (default): the condition is a quadratic in e^{ε'}, so its supremum has a
      closed form (:func:`_supremum_epsilon`); the returned ε' is ``tolerance`` below it (the
      condition is strict, the supremum itself is not certified) or ``max_epsilon`` when that
      already certifies. The result is verified against :func:`robust`.
    * ``"pixeldp"``: the bisection of the PixelDP reference code — ε' bracketed in
      [0, max_epsilon], first test at the midpoint, the upper end never tested, stop when the
      bracket is narrower than ``tolerance`` (default 1e-3), keep the last certified ε'. It
      reproduces the published PixelDP sizes (certified.md §1) and is slightly smaller than
      the exact search. It needs a finite ``max_epsilon``.

    Args:
        p_lower: lower bounds on the top class's expected score, in [0, 1].
        p_upper: upper bounds on the largest other expected score, same shape.
        noise_per_sensitivity: σ/Δ > 0.
        mechanism: the calibration whose multiplier defines L', one of
            :data:`CERTIFICATION_MECHANISMS`.
        max_epsilon: upper end of the ε' search. For ``"classical"`` the default is 1 and
            larger values are refused (the classical formula is not DP above ε = 1) unless
            ``allow_classical_above_one``; for the others the default ``None`` searches
            ε' > 0 without bound.
        delta_grid: δ' values, each in (0, 1) (≤ 0.484 for ``"extended"``); default
            :data:`DEFAULT_DELTA_GRID` (0.001, …, 0.299).
        tolerance: how far below the largest certifying ε' the returned ε' may lie; default
            1e-6 for ``"exact"`` and 1e-3 (PixelDP's) for ``"pixeldp"``.
        search: ``"exact"`` or ``"pixeldp"``.
        allow_classical_above_one: accept ``max_epsilon > 1`` with the classical multiplier,
            only to reproduce published numbers that did so; such sizes are not certificates.
        authors_mixed_delta: off (``None``, the mathematics) by default. An
            :class:`AuthorsMixedDelta` reproduces Phan et al.'s code, which certifies with the
            multiplier at another δ than the noise's: every size is multiplied by
            :meth:`AuthorsMixedDelta.factor` (the search over (ε', δ') does not depend on
            σ/Δ). Such sizes are **not certificates** (certified.md §2 (f)).

    Returns:
        Float array of certified sizes, same shape as ``p_lower``.

    Raises:
        ValueError: bad bounds, unknown mechanism or search, a grid outside the mechanism's
            validity, or a ``max_epsilon`` the mechanism does not allow.
    """
    p_lower = _probabilities("p_lower", p_lower)
    p_upper = _probabilities("p_upper", p_upper)
    if p_lower.shape != p_upper.shape:
        raise v.invalid("p_upper", f"p_upper must have the shape of p_lower {p_lower.shape}, got {p_upper.shape}")
    scale = v.positive("noise_per_sensitivity", noise_per_sensitivity)
    mechanism = v.choice("mechanism", mechanism, CERTIFICATION_MECHANISMS)
    search = v.choice("search", search, RADIUS_SEARCHES)
    if not isinstance(allow_classical_above_one, bool):
        raise v.invalid_type("allow_classical_above_one", f"allow_classical_above_one must be a bool, got {allow_classical_above_one!r}")
    if authors_mixed_delta is not None:
        if not isinstance(authors_mixed_delta, AuthorsMixedDelta):
            raise v.invalid_type("authors_mixed_delta", f"authors_mixed_delta must be an AuthorsMixedDelta or None, got {authors_mixed_delta!r}")
        # σ/Δ as the authors' code takes it: L·c(ε_r, δ_ref) instead of L·c(ε_r, δ_r).
        scale *= authors_mixed_delta.factor(mechanism)
    if max_epsilon is None:
        max_eps = 1.0 if mechanism == "classical" else math.inf
    else:
        max_eps = v.positive("max_epsilon", max_epsilon)
    if mechanism == "classical" and max_eps > 1.0 and not allow_classical_above_one:
        raise v.invalid(
            "max_epsilon",
            f"max_epsilon must be <= 1 for the classical multiplier (it is not DP above epsilon = 1), got {max_epsilon!r}; pass allow_classical_above_one=True only to reproduce published numbers",
        )
    if search == "pixeldp" and math.isinf(max_eps):
        raise v.invalid("max_epsilon", f"max_epsilon must be finite for search='pixeldp' (its bisection brackets [0, max_epsilon]), got {max_epsilon!r}")
    tol = _DEFAULT_TOLERANCE[search] if tolerance is None else v.positive("tolerance", tolerance)
    grid = DEFAULT_DELTA_GRID if delta_grid is None else _real_array("delta_grid", delta_grid)
    if grid.ndim != 1 or grid.size == 0:
        raise v.invalid("delta_grid", f"delta_grid must be a non-empty 1-D array, got shape {grid.shape}")
    if np.any((grid <= 0) | (grid >= 1)):
        raise v.invalid("delta_grid", f"delta_grid must lie in (0, 1), got e.g. {grid[(grid <= 0) | (grid >= 1)][:3].tolist()}")
    if mechanism == "extended" and np.any(grid > _EGM_MAX_DELTA):
        raise v.invalid("delta_grid", f"delta_grid must be <= {_EGM_MAX_DELTA} for the extended mechanism, got e.g. {grid[grid > _EGM_MAX_DELTA][:3].tolist()}")

    shape = p_lower.shape
    if p_lower.size == 0:
        return np.zeros(shape)
    # Test sets repeat the same bounds (every draw on one class): solve each pair once.
    pairs, inverse = np.unique(np.stack([p_lower.ravel(), p_upper.ravel()], axis=1), axis=0, return_inverse=True)
    pl, pu, d = pairs[:, :1], pairs[:, 1:], grid[None, :]
    if search == "exact":
        sup = _supremum_epsilon(pl, pu, d)
        eps = np.where(sup > max_eps, max_eps, sup - tol)
    else:
        lo = np.zeros((pairs.shape[0], grid.size))
        hi = np.full_like(lo, max_eps)
        width = max_eps
        while width >= tol:
            mid = 0.5 * (lo + hi)
            ok = _robust(pl, pu, mid, d)
            lo = np.where(ok, mid, lo)
            hi = np.where(ok, hi, mid)
            width *= 0.5
        eps = lo
    valid = (eps > 0) & _robust(pl, pu, np.maximum(eps, 0.0), d)
    sizes = np.zeros(eps.shape)
    if np.any(valid):
        sizes[valid] = scale / _multipliers(mechanism, eps[valid], np.broadcast_to(d, eps.shape)[valid])
    return sizes.max(axis=1)[inverse.ravel()].reshape(shape)


# --------------------------------------------------------------------------------------------
# Randomized smoothing
# --------------------------------------------------------------------------------------------
def smoothing_lower_bound(n_a: int | np.ndarray, n: int | np.ndarray, *, confidence: float = 0.999) -> np.ndarray:
    """One-sided Clopper–Pearson lower bound p_A = BetaInv(1 − confidence; n_A, n − n_A + 1).

    Cohen, Rosenfeld & Kolter (2019), CERTIFY, whose failure probability α is
    ``1 − confidence``; 0 where n_A = 0.

    Args:
        n_a: counts of the guessed class (integers, 0 ≤ n_A ≤ n).
        n: numbers of draws (integers ≥ 1), broadcast against ``n_a``.
        confidence: probability in (0, 1) that the bound holds (0.999 is the paper's α = 0.001).

    Returns:
        Float array of the broadcast shape.
    """
    confidence = v.open_unit("confidence", confidence)
    n_a_arr = np.asarray(n_a)
    n_arr = np.asarray(n)
    for name, arr in (("n_a", n_a_arr), ("n", n_arr)):
        if arr.dtype == bool or arr.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold integers, got {arr!r}")
    n_a_arr, n_arr = np.broadcast_arrays(n_a_arr.astype(np.int64), n_arr.astype(np.int64))
    if np.any(n_arr < 1):
        raise v.invalid("n", f"n must be >= 1, got e.g. {n_arr[n_arr < 1][:3].tolist()}")
    if np.any((n_a_arr < 0) | (n_a_arr > n_arr)):
        raise v.invalid("n_a", f"n_a must lie in [0, n], got e.g. {n_a_arr[(n_a_arr < 0) | (n_a_arr > n_arr)][:3].tolist()}")
    bound = stats.beta.ppf(1.0 - confidence, np.maximum(n_a_arr, 1), n_arr - n_a_arr + 1)
    return np.asarray(np.where(n_a_arr > 0, bound, 0.0), dtype=np.float64)


def smoothing_certify(selection_counts: np.ndarray, estimation_counts: np.ndarray, *, sigma: float, confidence: float = 0.999) -> tuple[np.ndarray, np.ndarray]:
    """CERTIFY of randomized smoothing (Cohen, Rosenfeld & Kolter 2019, Theorem 1, §3.2).

    Guesses c_A = argmax of the selection counts (n0 draws), bounds P(f(x + e) = c_A) from
    below with the independent estimation counts (n draws) by :func:`smoothing_lower_bound`,
    abstains when p_A ≤ ½ and otherwise certifies the L2 radius R = σ Φ⁻¹(p_A) (p_B = 1 − p_A).

    The counts may come from any randomized classifier: Gaussian noise on the input (the
    ``smoothing`` defense, where σ is the input noise's) or a noise layer after the first
    layer (PixelDP / HGM, where σ is the noise per unit of the layer's sensitivity, σ/Δ).

    Args:
        selection_counts: (n_points, k) class counts from the selection draws.
        estimation_counts: (n_points, k) class counts from fresh draws, same shape.
        sigma: standard deviation σ > 0 of the smoothing noise.
        confidence: probability 1 − α that each certificate holds (Cohen et al.'s α = 1 − confidence).

    Returns:
        ``(predictions, radii)``: int64 predictions (−1 = abstain) and float64 radii (0 where
        abstaining).

    Raises:
        ValueError: bad shapes, negative counts or empty rows.
    """
    selection = _count_matrix("selection_counts", selection_counts)
    estimation = _count_matrix("estimation_counts", estimation_counts)
    if estimation.shape != selection.shape:
        raise v.invalid("estimation_counts", f"estimation_counts must have the shape of selection_counts {selection.shape}, got {estimation.shape}")
    sigma = v.positive("sigma", sigma)
    guess = np.argmax(selection, axis=1)
    n_a = estimation[np.arange(selection.shape[0]), guess]
    p_a = smoothing_lower_bound(n_a, estimation.sum(axis=1), confidence=confidence)
    # CERTIFY returns c_A only when p_A > ½; at p_A = ½ the radius would be 0 and g(x) itself
    # may be a tie, so the paper abstains there too.
    certified = p_a > 0.5
    predictions = np.where(certified, guess, -1).astype(np.int64)
    radii = np.where(certified, sigma * special.ndtri(np.where(certified, p_a, 0.5)), 0.0)
    return predictions, radii


# --------------------------------------------------------------------------------------------
# Result value
# --------------------------------------------------------------------------------------------
def soundness_violations(
    certified_accuracy: np.ndarray | Sequence[float],
    robust_accuracy: np.ndarray | Sequence[float],
    *,
    radii: Sequence[float] | np.ndarray,
    certificate: str,
    tolerance: float = 0.0,
) -> list[SoundnessViolation]:
    """Radii at which a certificate's certified accuracy exceeds the accuracy an attack left.

    Certified accuracy is a lower bound on robust accuracy (Lecuyer et al. 2019, Prop. 1;
    Cohen et al. 2019, Theorem 1) and an attack's robust accuracy an upper bound, so
    certified > empirical (+ ``tolerance``) means a broken certificate (or the rare failure of
    the 1 − η event behind the bounds). Pass the lowest robust accuracy over all attacks.

    Args:
        certified_accuracy: certified accuracy at each radius, in [0, 1].
        robust_accuracy: accuracy under attack at the same radii, in [0, 1].
        radii: the radii, 1-D, same length.
        certificate: the certificate's method name (e.g. ``"hgm"``, ``"smoothing"``).
        tolerance: slack ≥ 0 before a difference counts (e.g. for Monte Carlo noise).

    Returns:
        One :class:`SoundnessViolation` per offending radius, in the order given.

    Raises:
        ValueError: shapes disagree or values are out of range.
    """
    t = np.atleast_1d(_real_array("radii", radii))
    if t.ndim != 1:
        raise v.invalid("radii", f"radii must be 1-D, got shape {t.shape}")
    cert = np.atleast_1d(_probabilities("certified_accuracy", certified_accuracy))
    emp = np.atleast_1d(_probabilities("robust_accuracy", robust_accuracy))
    for name, arr in (("certified_accuracy", cert), ("robust_accuracy", emp)):
        if arr.shape != t.shape:
            raise ValueError(f"{name} must have shape {t.shape} (one per radius), got {arr.shape}")
    tolerance = v.non_negative("tolerance", tolerance)
    return [
        SoundnessViolation(certificate=certificate, radius=float(r), certified_accuracy=float(c), robust_accuracy=float(e))
        for r, c, e in zip(t.tolist(), cert.tolist(), emp.tolist())
        if c > e + tolerance
    ]
