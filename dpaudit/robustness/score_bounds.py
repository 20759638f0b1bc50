"""Bounds on a randomized classifier's expected scores from Monte Carlo draws (torch-free).

PixelDP's robustness condition (Lecuyer et al. 2019, Proposition 1) reads the expected scores
through bounds: Clopper–Pearson on argmax counts (:func:`count_bounds`), Hoeffding or empirical
Bernstein on softmax means (:func:`mean_bounds`), with a union bound over the classes.

Which bound a class gets (a lower bound for the predicted class, an upper bound for the others)
depends on which class is predicted. When the prediction is read from the same draws as the
bounds, that choice is made after seeing the counts, so every class needs *both* its bounds to
hold: 2k one-sided bounds, each at η/(2k), for a joint confidence 1 − η. Only when the predicted
class is chosen beforehand, on independent draws (Cohen et al. 2019's CERTIFY selects with n0
separate draws), are k one-sided bounds at η/k enough (docs/defenses/noise-layer.md §1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from dpaudit import _validate as v
from dpaudit.results.certification import _int_array, _readonly, _real_array

__all__ = ["BOUND_SELECTIONS", "SCORE_BOUNDS", "ScoreBounds", "count_bounds", "mean_bounds"]


#: Ways of bounding the expected scores from Monte Carlo draws.
SCORE_BOUNDS = ("clopper-pearson", "hoeffding", "bernstein")

#: Where the predicted class came from: the bounds' own draws, or independent draws chosen beforehand.
BOUND_SELECTIONS = ("same-draws", "separate-draws")


# Validation helpers
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
        raise v.invalid(
            name,
            f"{name} must count at least one draw per test point; rows {np.flatnonzero(empty)[:5].tolist()} are empty",
        )
    return counts


def _bound_level(confidence: float, num_classes: int, selection: str) -> float:
    """One-sided failure probability of each bound of the union, so that all hold with ``confidence``.

    η/(2k) when the predicted class is read from the bounds' own draws (both bounds of every
    class must hold, since which one is used is decided by the counts), η/k when it was fixed
    beforehand (one bound per class).
    """
    return (1.0 - confidence) / (num_classes * (2 if selection == "same-draws" else 1))


def _selected(selected: Any, num_points: int, num_classes: int) -> np.ndarray:
    """The classes chosen beforehand, checked: one class index per test point."""
    arr = _int_array("selected", selected, ndim=1)
    if arr.shape != (num_points,):
        raise v.invalid(
            "selected", f"selected must hold one class per test point, shape ({num_points},), got {arr.shape}"
        )
    if np.any((arr < 0) | (arr >= num_classes)):
        raise v.invalid(
            "selected",
            f"selected must hold class indices in [0, {num_classes}), got e.g. "
            f"{arr[(arr < 0) | (arr >= num_classes)][:3].tolist()}",
        )
    return arr


# Bounds on the expected scores
@dataclass(frozen=True, kw_only=True, eq=False)
class ScoreBounds:
    """Bounds on the expected scores that the robustness condition needs, per test point.

    The bounds of one test point hold jointly with probability ≥ ``confidence``, by a union
    bound whose terms depend on ``selection`` (:attr:`level`): with ``"same-draws"`` the top
    class was read from the bounds' own draws and each of the 2k one-sided bounds (both sides
    of every class) is at η/(2k); with ``"separate-draws"`` it was chosen beforehand on
    independent draws and each of the k one-sided bounds is at η/k (η = 1 − confidence).

    Attributes:
        top: (n,) int, the predicted class (the largest estimate, or the class chosen beforehand).
        lower: (n,) float, lower bound on E[A_top(x)].
        upper: (n,) float, upper bound on max_{i≠top} E[A_i(x)].
        method: one of :data:`SCORE_BOUNDS`.
        confidence: joint confidence 1 − η of the bounds of one test point.
        num_draws: Monte Carlo draws per test point.
        selection: where ``top`` came from, one of :data:`BOUND_SELECTIONS`.
    """

    top: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    method: str
    confidence: float
    num_draws: int
    selection: str = "same-draws"

    def __post_init__(self) -> None:
        v.choice("method", self.method, SCORE_BOUNDS)
        v.choice("selection", self.selection, BOUND_SELECTIONS)
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

    def level(self, num_classes: int) -> float:
        """The one-sided failure probability of each bound: η/(2k) (``"same-draws"``) or η/k."""
        return _bound_level(self.confidence, v.integer("num_classes", num_classes, minimum=2), self.selection)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ScoreBounds):
            return NotImplemented
        return (
            self.method == other.method
            and self.confidence == other.confidence
            and self.num_draws == other.num_draws
            and self.selection == other.selection
            and all(np.array_equal(getattr(self, a), getattr(other, a)) for a in ("top", "lower", "upper"))
        )

    __hash__ = None  # type: ignore[assignment]


def count_bounds(counts: np.ndarray, *, confidence: float = 0.95, selected: np.ndarray | None = None) -> ScoreBounds:
    """Clopper–Pearson bounds from argmax counts (PixelDP, Lecuyer et al. 2019, §3), jointly at ``confidence``.

    With η = 1 − confidence, k classes and a per-bound level a, each bound is a *one-sided*
    Clopper–Pearson bound:

    * lower = BetaInv(a; n_top, n − n_top + 1), 0 when n_top = 0;
    * upper = BetaInv(1 − a; n_2 + 1, n − n_2), 1 when n_2 = n, with n_2 the largest count
      among the other classes (the CP upper bound grows with the count, so it bounds every
      other class's probability once each class's own bound holds).

    Without ``selected`` the top class is the largest count of these same draws; which bound
    each class gets then depends on the counts, so both bounds of every class must hold and
    a = η/(2k) (a union over 2k one-sided bounds). With ``selected`` (classes chosen beforehand
    on independent draws, as CERTIFY's n0 selection draws) a = η/k, the PixelDP reference
    code's level: it reproduces the docs/defenses/noise-layer.md §1 vectors (n = 2000, k = 10,
    η = 0.05) to 5 decimals when class 0 is selected. Either way all bounds of a test point hold
    together with probability ≥ 1 − η.

    Args:
        counts: (n, k) non-negative integer counts of the argmax class over the draws; every
            row must sum to the same number of draws.
        confidence: joint confidence 1 − η, in (0, 1).
        selected: (n,) classes chosen on draws independent of ``counts``, or ``None`` to take
            the largest count.

    Returns:
        The bounds, with ``method="clopper-pearson"`` and ``selection`` saying which of the two
        cases applied; ties for the top class go to the lowest class index.

    Raises:
        TypeError: ``counts`` or ``selected`` does not hold integers.
        ValueError: bad shape, negative counts, empty rows, unequal row totals or a selected
            class out of range.
    """
    counts = _count_matrix("counts", counts)
    confidence = v.open_unit("confidence", confidence)
    totals = counts.sum(axis=1)
    if np.any(totals != totals[0]):
        raise v.invalid(
            "counts",
            f"counts must sum to the same number of draws in every row, got totals {np.unique(totals)[:5].tolist()}",
        )
    n = int(totals[0])
    rows = np.arange(counts.shape[0])
    selection = "same-draws" if selected is None else "separate-draws"
    top = np.argmax(counts, axis=1) if selected is None else _selected(selected, counts.shape[0], counts.shape[1])
    top_count = counts[rows, top]
    others = counts.copy()
    others[rows, top] = -1
    second = others.max(axis=1)
    level = _bound_level(confidence, counts.shape[1], selection)
    # Substitute harmless parameters where the bound is fixed by definition, so beta.ppf
    # never sees a zero shape parameter.
    lower = np.where(top_count > 0, stats.beta.ppf(level, np.maximum(top_count, 1), n - top_count + 1), 0.0)
    upper = np.where(second < n, stats.beta.ppf(1.0 - level, second + 1, np.maximum(n - second, 1)), 1.0)
    return ScoreBounds(
        top=top,
        lower=lower,
        upper=upper,
        method="clopper-pearson",
        confidence=confidence,
        num_draws=n,
        selection=selection,
    )


def mean_bounds(
    means: np.ndarray,
    *,
    num_draws: int,
    variances: np.ndarray | None = None,
    method: str = "hoeffding",
    confidence: float = 0.95,
    selected: np.ndarray | None = None,
) -> ScoreBounds:
    """Hoeffding or empirical-Bernstein bounds from mean softmax scores (PixelDP, §3), jointly at ``confidence``.

    With η = 1 − confidence, k classes, n draws and a per-bound level a (η/(2k) without
    ``selected``, η/k with it; see :func:`count_bounds`), each class gets a one-sided bound:

    * Hoeffding: E ± √(ln(1/a) / (2n));
    * empirical Bernstein (Maurer & Pontil 2009):
      E ± [√(2 V ln(2/a) / n) + 7 ln(2/a) / (3(n − 1))], V the unbiased sample variance.

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
        selected: (n_points,) classes chosen on draws independent of ``means``, or ``None``
            to take the largest mean.

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
    selection = "same-draws" if selected is None else "separate-draws"
    level = _bound_level(confidence, k, selection)
    if method == "hoeffding":
        width = np.full(means.shape, math.sqrt(math.log(1.0 / level) / (2.0 * num_draws)))
    else:
        if variances is None:
            raise v.invalid("variances", "variances must be given for method='bernstein', got None")
        var = _real_array("variances", variances)
        if var.shape != means.shape:
            raise v.invalid("variances", f"variances must have shape {means.shape} (like means), got {var.shape}")
        if np.any(var < 0):
            raise v.invalid("variances", f"variances must be >= 0, got e.g. {var[var < 0][:3].tolist()}")
        log_term = math.log(2.0 / level)
        width = np.sqrt(2.0 * var * log_term / num_draws) + 7.0 * log_term / (3.0 * (num_draws - 1))
    rows = np.arange(means.shape[0])
    top = np.argmax(means, axis=1) if selected is None else _selected(selected, means.shape[0], k)
    lower = means[rows, top] - width[rows, top]
    others = means + width
    others[rows, top] = -np.inf
    upper = others.max(axis=1)
    return ScoreBounds(
        top=top,
        lower=np.clip(lower, 0.0, 1.0),
        upper=np.clip(upper, 0.0, 1.0),
        method=method,
        confidence=confidence,
        num_draws=num_draws,
        selection=selection,
    )
