"""The vote matrices PATE's analyses read, and the checks and helpers they share (torch-free).

A vote matrix has one row per student query and one column per class; entry ``[i, j]`` is the
number of teachers voting for class j on query i. Votes must be non-negative integer counts
(:func:`check_votes`): fractional (weighted) votes are refused, because the threshold step of
Papernot et al. (2018, Algorithm 1) rounds max(counts) and the smooth-sensitivity search walks
the votes one teacher at a time, so a fractional matrix has no well-defined answer there.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dpaudit import _validate as v

__all__ = [
    "GNMAX_ORDERS",
    "LNMAX_MOMENT_ORDERS",
    "PATE_COSTS",
    "AGGREGATOR_NAMES",
    "MIN_LAPLACE_SCALE",
    "MAX_QUERIES",
    "MAX_VOTE_CELLS",
    "BYTES_PER_CELL",
    "MAX_RELEASE_QUERIES",
    "PROGRESS_QUERIES",
    "check_votes",
]


#: RDP orders of the 2018 analysis: 2, 2.5, …, 100, then 99 log-spaced values up to 500.
GNMAX_ORDERS: tuple[float, ...] = tuple(
    [float(x) for x in np.arange(2.0, 100.25, 0.5)]
    + [float(x) for x in np.logspace(np.log10(100.0), np.log10(500.0), 100)[1:]]
)
#: Moment orders l of the 2017 moments accountant (its code uses l = 1..8).
LNMAX_MOMENT_ORDERS: tuple[int, ...] = tuple(range(1, 9))
#: What a :class:`PateEpsilon` charges: the answers given, or Confident-GNMax's expectation.
PATE_COSTS: tuple[str, ...] = ("realised", "expected")
#: The aggregators a vote matrix is analysed for (:func:`~dpaudit.privacy.pate.analysis.analyze_votes`).
AGGREGATOR_NAMES: tuple[str, ...] = ("gnmax", "confident-gnmax", "lnmax")
#: The smallest Laplace scale b the LNMax moments analysis can evaluate: it takes e^{2ε} of each
#: answer's ε = 2/b, which overflows a float once 4/b passes ln(float max) ≈ 709.8 (b ≈ 0.0056,
#: an answer that is (357, 0)-DP: no privacy worth analysing).
MIN_LAPLACE_SCALE = 4.0 / math.log(sys.float_info.max)
#: The documented limits of a whole-matrix analysis (``dpaudit pate analyze`` exceeds them only with
#: --i-know). Each query's data-dependent RDP is evaluated in turn (about a millisecond); the matrix
#: is held about three times (as read, as int64, as float64 rows); the smooth-sensitivity release
#: walks each query's local sensitivity (measured 10-20 ms a query for 50-250 teachers).
MAX_QUERIES = 100_000
MAX_VOTE_CELLS = 10_000_000
BYTES_PER_CELL = 24
MAX_RELEASE_QUERIES = 10_000
#: From this many queries (a release: this many divided by 10) an analysis is long enough to show its progress.
PROGRESS_QUERIES = 10_000


def check_votes(votes: Any, *, name: str = "votes", equal_totals: bool = True, allow_empty: bool = False) -> np.ndarray:
    """Validates a vote matrix and returns it as a read-only int64 array (queries × classes).

    Args:
        votes: array-like of shape (queries, classes); entry [i, j] is the number of teachers
            that voted for class j on query i.
        name: the argument named in error messages.
        equal_totals: require every row to sum to the same (non-zero) number of teachers, as
            the analysis does; the aggregators accept any rows.
        allow_empty: accept a matrix with no queries.

    Returns:
        A read-only 2-D int64 copy.

    Raises:
        ValueError: empty matrix, not 2-D, fewer than 2 classes, negative, non-finite or
            non-integer counts (fractional weighted votes are refused, see the module
            docstring), or rows whose totals (the number of teachers) differ.
        TypeError: not numeric.
    """
    if hasattr(votes, "detach") and hasattr(votes, "numpy"):  # a torch tensor, without importing torch
        votes = votes.detach().cpu().numpy()
    try:
        arr = np.asarray(votes)
    except ValueError as exc:  # ragged nested lists
        raise v.invalid(name, f"{name} must be a rectangular queries × classes matrix ({exc})") from None
    if arr.dtype.kind not in "iuf":
        raise v.invalid_type(name, f"{name} must hold numbers (integer vote counts), got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise v.invalid(name, f"{name} must be 2-D (queries × classes), got shape {arr.shape}")
    if arr.size == 0 and not (allow_empty and arr.ndim == 2 and arr.shape[1] >= 2):
        raise v.invalid(name, f"{name} must not be empty, got shape {arr.shape}")
    if arr.shape[1] < 2:
        raise v.invalid(name, f"{name} must have at least 2 classes (columns), got shape {arr.shape}")
    if arr.dtype.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise v.invalid(name, f"{name} must be finite, got {name}[{i}, {j}] = {arr[i, j]!r}")
        frac = arr != np.round(arr)
        if frac.any():
            i, j = np.argwhere(frac)[0]
            raise v.invalid(
                name,
                f"{name} must be integer counts (weighted votes are not supported), got "
                f"{name}[{i}, {j}] = {arr[i, j]!r}",
            )
        if np.abs(arr).max() > 2.0**53:
            raise v.invalid(name, f"{name} must be counts below 2**53, got max {np.abs(arr).max()!r}")
    neg = arr < 0
    if neg.any():
        i, j = np.argwhere(neg)[0]
        raise v.invalid(name, f"{name} must be >= 0, got {name}[{i}, {j}] = {arr[i, j]!r}")
    out = arr.astype(np.int64)
    totals = out.sum(axis=1)
    if not equal_totals or out.shape[0] == 0:
        out.setflags(write=False)
        return out
    if np.any(totals != totals[0]):
        i = int(np.argmax(totals != totals[0]))
        raise v.invalid(
            name,
            f"{name} rows must all sum to the number of teachers; row 0 sums to {totals[0]}, row {i} to {totals[i]}",
        )
    if totals[0] == 0:
        raise v.invalid(name, f"{name} must count at least one teacher, got rows summing to 0")
    out.setflags(write=False)
    return out


def _counts(counts: Any) -> np.ndarray:
    arr = np.asarray(counts)
    if arr.ndim != 1:
        raise v.invalid("counts", f"counts must be 1-D (one query's votes per class), got shape {arr.shape}")
    return check_votes(arr[None, :])[0]


#: Queries between two calls of an analysis's ``progress`` callback.
PROGRESS_EVERY = 1000


def _rows(arr: np.ndarray, progress: Callable[[int], None] | None, every: int = PROGRESS_EVERY) -> Iterator[np.ndarray]:
    """The rows of a vote matrix, calling ``progress(n)`` after every ``n`` rows (a long analysis is never silent)."""
    for start in range(0, arr.shape[0], every):
        yield from arr[start : start + every]
        if progress is not None:
            progress(min(every, arr.shape[0] - start))


def _orders(orders: Any, name: str = "orders") -> np.ndarray:
    arr = np.atleast_1d(np.asarray(orders, dtype=float))
    if arr.ndim != 1 or arr.size == 0:
        raise v.invalid(name, f"{name} must be a non-empty 1-D sequence of RDP orders, got {orders!r}")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 1.0):
        raise v.invalid(name, f"{name} must be finite RDP orders > 1, got {orders!r}")
    return arr


def _threshold_step(threshold: Any, threshold_sigma: Any) -> tuple[float, float]:
    """(T, σ1) of Confident-GNMax's threshold step, checked: T finite, σ1 > 0."""
    t = v.real("threshold", threshold)
    if not math.isfinite(t):
        raise v.invalid("threshold", f"threshold must be finite, got {threshold!r}")
    return t, v.positive("threshold_sigma", threshold_sigma)


def _order(order: Any) -> float:
    """One RDP order: finite and > 1."""
    lam = v.real("order", order)
    if not (lam > 1.0 and math.isfinite(lam)):
        raise v.invalid("order", f"order must be a finite RDP order > 1, got {order!r}")
    return lam


def _num_teachers(counts: np.ndarray, num_teachers: Any) -> int:
    """The length of a local-sensitivity vector: the teachers, at least the votes cast."""
    total = int(counts.sum())
    teachers = total if num_teachers is None else v.integer("num_teachers", num_teachers, minimum=1)
    if teachers < total:
        raise v.invalid("num_teachers", f"num_teachers must be >= the votes cast ({total}), got {num_teachers!r}")
    return teachers


def _release_orders(orders: Any, beta: float) -> np.ndarray:
    """The orders at which a smooth-sensitivity release with ``beta`` is defined (λ < 1/(2β))."""
    grid = _orders(orders)
    grid = grid[grid < 1.0 / (2.0 * beta)]
    if grid.size == 0:
        raise v.invalid("beta", f"beta must leave some order of the grid below 1/(2*beta), got beta={beta!r}")
    return grid


def _log1mexp(x: float) -> float:
    """ln(1 − e^x) for x ≤ 0, accurate near both ends (Mächler 2012)."""
    if x >= 0.0:
        return -math.inf
    return math.log(-math.expm1(x)) if x > -math.log(2.0) else math.log1p(-math.exp(x))
