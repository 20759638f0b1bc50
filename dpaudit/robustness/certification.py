"""Certification mathematics: certified robustness from noise layers and randomized smoothing.

Pure NumPy/SciPy (no torch), so reports can recompute and render certificates from stored
results. Everything is vectorised over test points.

* **PixelDP expected-output stability** (Lecuyer et al. 2019, "Certified Robustness to
  Adversarial Examples with Differential Privacy", §3, Lemma 1 / Proposition 1): if the
  randomized scoring function A is (ε, δ)-DP with respect to input changes of size ≤ L, the
  prediction k is robust within L whenever
  E_lb[A_k(x)] > e^{2ε} max_{i≠k} E_ub[A_i(x)] + (1 + e^ε) δ. The expectations are bounded
  from Monte Carlo draws (Clopper–Pearson on argmax counts, Hoeffding or empirical Bernstein
  on softmax means), with a union bound over the classes: both sides of every class at η/(2k)
  when the prediction comes from the same draws (:mod:`dpaudit.robustness.score_bounds`).
* **Certified size**: noise with σ per unit of sensitivity (σ/Δ) is (ε', δ')-DP for attacks of
  size L' = (σ/Δ)/c(ε', δ'), where c is the multiplier of the calibration (σ = c·Δ). Searching
  (ε', δ') over the robustness condition gives the largest certified L'. PixelDP uses the
  classical multiplier with ε' ≤ 1; the heterogeneous Gaussian mechanism of Phan et al. 2019
  ("Scalable Differential Privacy with Certified Robustness in Adversarial Learning",
  Theorems 2–3, Eq. 10) uses the extended multiplier with ε' > 0 unbounded; the analytic
  multiplier (Balle & Wang 2018) is offered as the tight alternative.
* **Randomized smoothing** (Cohen, Rosenfeld & Kolter 2019, Theorem 1 and CERTIFY):
  R = σ Φ⁻¹(p_A) with p_A a one-sided Clopper–Pearson lower bound.
* **The authors' mixed δ** (docs/defenses/noise-layer.md §2 (f)): Phan et al.'s code certifies with the
  multiplier taken at another δ than the one the noise was calibrated at. It is available as
  the explicit, off-by-default ``authors_mixed_delta`` option of :func:`certified_radius`
  (:class:`AuthorsMixedDelta`), only to reproduce their numbers; its radii are not certificates.

Formulas and test vectors: ``docs/defenses/noise-layer.md`` and ``docs/defenses/smoothing.md``. A certificate is a
*lower* bound on
robust accuracy; :func:`soundness_violations` flags sizes where it exceeds the accuracy an
actual attack left, which means a bug (or a failure of the 1 − η event).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpaudit import _validate as v
from dpaudit.results.certification import _real_array
from dpaudit.results.certify_summary import SoundnessViolation
from dpaudit.robustness.multipliers import CERTIFICATION_MECHANISMS, EGM_MAX_DELTA, _multipliers, noise_multiplier
from dpaudit.robustness.score_bounds import _probabilities

__all__ = [
    "AUTHORS_REFERENCE_DELTA",
    "DEFAULT_DELTA_GRID",
    "RADIUS_SEARCHES",
    "AuthorsMixedDelta",
    "certified_radius",
    "robust",
    "soundness_violations",
]

#: How :func:`certified_radius` finds the largest ε' for each δ'.
RADIUS_SEARCHES = ("exact", "pixeldp")

#: δ' grid of the certified-size search: 0.001, 0.002, …, 0.299 (docs/defenses/noise-layer.md §1).
DEFAULT_DELTA_GRID = np.arange(1, 300) / 1000.0
DEFAULT_DELTA_GRID.flags.writeable = False

#: The δ Phan et al.'s certification code passes to its robustness-size routine (their DP-SGD δ).
AUTHORS_REFERENCE_DELTA = 1e-5

_DEFAULT_TOLERANCE = {"exact": 1e-6, "pixeldp": 1e-3}
_ARRAYS = ("labels", "predictions", "radii")


# The authors' mixed δ (docs/defenses/noise-layer.md §2 (f))
@dataclass(frozen=True, kw_only=True)
class AuthorsMixedDelta:
    """The δ mix of Phan et al.'s certification code, as an explicit option (docs/defenses/noise-layer.md §2 (f)).

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
            raise v.invalid(
                "authors_mixed_delta", f"authors_mixed_delta={self!r} is invalid for the {mechanism} calibration: {exc}"
            ) from None
        return reference / calibrated


# The robustness condition and the certified size
def robust(
    p_lower: np.ndarray, p_upper: np.ndarray, *, epsilon: float | np.ndarray, delta: float | np.ndarray
) -> np.ndarray:
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
        raise v.invalid(
            "p_lower",
            "p_lower, p_upper, epsilon and delta must broadcast together, got "
            f"shapes {p_lower.shape}, {p_upper.shape}, {eps.shape}, {dlt.shape}",
        ) from None
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
    size L' = (σ/Δ)/c(ε', δ') (docs/defenses/noise-layer.md §1; Phan et al. 2019, Eq. 10 for the
    heterogeneous mechanism, where Δ is the r-weighted sensitivity). For each δ' of the grid
    the largest ε' satisfying :func:`robust` is found; c decreases in ε', so that ε' gives
    the largest L' at this δ'. The certified size is the maximum over the grid, 0 where no
    (ε', δ') certifies.

    Two searches for ε' (:func:`_search_epsilons`): ``"exact"`` (default), the closed-form
    supremum of the condition less ``tolerance``; ``"pixeldp"``, the bisection of the PixelDP
    reference code, which reproduces the published PixelDP sizes (docs/defenses/noise-layer.md §1).

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
            σ/Δ). Such sizes are **not certificates** (docs/defenses/noise-layer.md §2 (f)).

    Returns:
        Float array of certified sizes, same shape as ``p_lower``.

    Raises:
        ValueError: bad bounds, unknown mechanism or search, a grid outside the mechanism's
            validity, or a ``max_epsilon`` the mechanism does not allow.
    """
    p_lower, p_upper = _bound_pair(p_lower, p_upper)
    scale = v.positive("noise_per_sensitivity", noise_per_sensitivity)
    mechanism = v.choice("mechanism", mechanism, CERTIFICATION_MECHANISMS)
    search = v.choice("search", search, RADIUS_SEARCHES)
    if not isinstance(allow_classical_above_one, bool):
        raise v.invalid_type(
            "allow_classical_above_one", f"allow_classical_above_one must be a bool, got {allow_classical_above_one!r}"
        )
    scale = _authors_scale(scale, authors_mixed_delta, mechanism)
    max_eps = _max_epsilon(
        max_epsilon, mechanism=mechanism, search=search, allow_classical_above_one=allow_classical_above_one
    )
    tol = _DEFAULT_TOLERANCE[search] if tolerance is None else v.positive("tolerance", tolerance)
    grid = _delta_grid(delta_grid, mechanism)
    shape = p_lower.shape
    if p_lower.size == 0:
        return np.zeros(shape)
    # Test sets repeat the same bounds (every draw on one class): solve each pair once.
    pairs, inverse = np.unique(np.stack([p_lower.ravel(), p_upper.ravel()], axis=1), axis=0, return_inverse=True)
    pl, pu, d = pairs[:, :1], pairs[:, 1:], grid[None, :]
    eps = _search_epsilons(pl, pu, d, search=search, max_eps=max_eps, tol=tol)
    valid = (eps > 0) & _robust(pl, pu, np.maximum(eps, 0.0), d)
    sizes = np.zeros(eps.shape)
    if np.any(valid):
        sizes[valid] = scale / _multipliers(mechanism, eps[valid], np.broadcast_to(d, eps.shape)[valid])
    return sizes.max(axis=1)[inverse.ravel()].reshape(shape)


def _bound_pair(p_lower: np.ndarray, p_upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two score bounds, checked: probabilities of one shape."""
    p_lower = _probabilities("p_lower", p_lower)
    p_upper = _probabilities("p_upper", p_upper)
    if p_lower.shape != p_upper.shape:
        raise v.invalid("p_upper", f"p_upper must have the shape of p_lower {p_lower.shape}, got {p_upper.shape}")
    return p_lower, p_upper


def _authors_scale(scale: float, authors_mixed_delta: AuthorsMixedDelta | None, mechanism: str) -> float:
    """σ/Δ, or σ/Δ as Phan et al.'s code takes it, L·c(ε_r, δ_ref) instead of L·c(ε_r, δ_r), with the authors' mixed
    δ."""
    if authors_mixed_delta is None:
        return scale
    if not isinstance(authors_mixed_delta, AuthorsMixedDelta):
        raise v.invalid_type(
            "authors_mixed_delta",
            f"authors_mixed_delta must be an AuthorsMixedDelta or None, got {authors_mixed_delta!r}",
        )
    return scale * authors_mixed_delta.factor(mechanism)


def _max_epsilon(max_epsilon: float | None, *, mechanism: str, search: str, allow_classical_above_one: bool) -> float:
    """The upper end of the ε' search, checked against what the mechanism and the search allow."""
    if max_epsilon is None:
        max_eps = 1.0 if mechanism == "classical" else math.inf
    else:
        max_eps = v.positive("max_epsilon", max_epsilon)
    if mechanism == "classical" and max_eps > 1.0 and not allow_classical_above_one:
        raise v.invalid(
            "max_epsilon",
            "max_epsilon must be <= 1 for the classical multiplier (it is not DP "
            f"above epsilon = 1), got {max_epsilon!r}; pass "
            "allow_classical_above_one=True only to reproduce published numbers",
        )
    if search == "pixeldp" and math.isinf(max_eps):
        raise v.invalid(
            "max_epsilon",
            "max_epsilon must be finite for search='pixeldp' (its bisection "
            f"brackets [0, max_epsilon]), got {max_epsilon!r}",
        )
    return max_eps


def _delta_grid(delta_grid: np.ndarray | None, mechanism: str) -> np.ndarray:
    """The δ' grid, checked: 1-D, non-empty, in (0, 1), and within the extended mechanism's validity."""
    grid = DEFAULT_DELTA_GRID if delta_grid is None else _real_array("delta_grid", delta_grid)
    if grid.ndim != 1 or grid.size == 0:
        raise v.invalid("delta_grid", f"delta_grid must be a non-empty 1-D array, got shape {grid.shape}")
    if np.any((grid <= 0) | (grid >= 1)):
        raise v.invalid(
            "delta_grid", f"delta_grid must lie in (0, 1), got e.g. {grid[(grid <= 0) | (grid >= 1)][:3].tolist()}"
        )
    if mechanism == "extended" and np.any(grid > EGM_MAX_DELTA):
        raise v.invalid(
            "delta_grid",
            f"delta_grid must be <= {EGM_MAX_DELTA} for the extended mechanism, got "
            f"e.g. {grid[grid > EGM_MAX_DELTA][:3].tolist()}",
        )
    return grid


def _search_epsilons(
    pl: np.ndarray, pu: np.ndarray, d: np.ndarray, *, search: str, max_eps: float, tol: float
) -> np.ndarray:
    """The ε' each (bound pair, δ') certifies, by one of the two searches of :func:`certified_radius`.

    * ``"exact"``: the condition is a quadratic in e^{ε'}, so its supremum has a closed form
      (:func:`_supremum_epsilon`); the returned ε' is ``tol`` below it (the condition is
      strict, the supremum itself is not certified) or ``max_eps`` when that already
      certifies. The caller verifies the result against :func:`robust`.
    * ``"pixeldp"``: the bisection of the PixelDP reference code — ε' bracketed in
      [0, max_eps], first test at the midpoint, the upper end never tested, stop when the
      bracket is narrower than ``tol`` (default 1e-3), keep the last certified ε'. It
      reproduces the published PixelDP sizes (docs/defenses/noise-layer.md §1) and is slightly smaller than
      the exact search. It needs a finite ``max_eps``.
    """
    if search == "exact":
        sup = _supremum_epsilon(pl, pu, d)
        return np.where(sup > max_eps, max_eps, sup - tol)
    lo = np.zeros((pl.shape[0], d.shape[1]))
    hi = np.full_like(lo, max_eps)
    width = max_eps
    while width >= tol:
        mid = 0.5 * (lo + hi)
        ok = _robust(pl, pu, mid, d)
        lo = np.where(ok, mid, lo)
        hi = np.where(ok, hi, mid)
        width *= 0.5
    return lo


# Result value
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
        SoundnessViolation(
            certificate=certificate, radius=float(r), certified_accuracy=float(c), robust_accuracy=float(e)
        )
        for r, c, e in zip(t.tolist(), cert.tolist(), emp.tolist())
        if c > e + tolerance
    ]
