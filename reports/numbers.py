"""Numbers in reports: one rule per quantity for every table cell and sentence.

The rules live in the core (:mod:`dpaudit.results.numbers`, so the verdicts word their sentences
alike); this module gives them to the reports and adds :class:`Shown`, a table cell that keeps
its value (for CSV and sorting) but prints as the quantity it is: a rate beside its counts, an
accuracy as a percentage. :func:`format_cell` is what every table cell goes through.
"""

from __future__ import annotations

from typing import Any

from dpaudit.results.numbers import (
    INFINITY,
    MISSING,
    fmt_count,
    fmt_epsilon,
    fmt_lower_bound,
    fmt_number,
    fmt_percent,
    fmt_percent_lower_bound,
    fmt_percent_upper_bound,
    fmt_rate,
    fmt_rate_lower_bound,
    fmt_rate_upper_bound,
    fmt_upper_bound,
    fmt_value,
)

__all__ = [
    "INFINITY",
    "MISSING",
    "Shown",
    "fmt_count",
    "fmt_epsilon",
    "fmt_lower_bound",
    "fmt_number",
    "fmt_percent",
    "fmt_rate",
    "fmt_upper_bound",
    "format_cell",
    "epsilon_cell",
    "epsilon_ub_cell",
    "epsilon_lb_cell",
    "percent_lb_cell",
    "percent_ub_cell",
    "rate_lb_cell",
    "rate_ub_cell",
    "percent_cell",
    "rate_cell",
    "IntervalCell",
    "interval_cell",
]


class Shown(float):
    """A number that prints as ``text``: a cell keeps its value (CSV, sorting) and reads as its quantity."""

    text: str

    def __new__(cls, value: float, text: str) -> Shown:
        obj = super().__new__(cls, value)
        obj.text = text
        return obj

    def __str__(self) -> str:
        return self.text

    # repr is the value's: csv writes a float cell by repr, so a CSV keeps the number and a page its text.
    __repr__ = float.__repr__


def epsilon_cell(x: float | None) -> Shown | None:
    """An ε that is not a bound (an estimate, the last-iterate ε) to three significant digits, to nearest; ``None``
    stays a missing cell."""
    return None if x is None else Shown(float(x), fmt_epsilon(x))


def epsilon_ub_cell(x: float | None) -> Shown | None:
    """An upper bound (ε_UB) to three significant digits rounded up (∞ when unbounded); ``None`` stays a missing
    cell."""
    return None if x is None else Shown(float(x), fmt_upper_bound(x))


def epsilon_lb_cell(x: float | None) -> Shown | None:
    """A lower bound (ε_LB, a ceiling, a certified radius) to three significant digits rounded down; ``None`` stays a
    missing cell."""
    return None if x is None else Shown(float(x), fmt_lower_bound(x))


def percent_lb_cell(x: float | None) -> Shown | None:
    """A share that is a lower bound (a certified accuracy) as a percentage rounded down."""
    return None if x is None else Shown(float(x), fmt_percent_lower_bound(x))


def percent_ub_cell(x: float | None) -> Shown | None:
    """A share that is an upper bound (the robust accuracy attacks left: the true one is at most that) as a percentage
    rounded up."""
    return None if x is None else Shown(float(x), fmt_percent_upper_bound(x))


def percent_cell(x: float | None) -> Shown | None:
    """A share in [0, 1] (an accuracy) as a percentage."""
    return None if x is None else Shown(float(x), fmt_percent(x))


def rate_cell(count: int, total: int) -> Shown:
    """A rate beside its counts: "12.5% (25/200)"; its value is the share."""
    return Shown(count / total if total else float("nan"), fmt_rate(count, total))


def rate_lb_cell(count: int, total: int) -> Shown:
    """A rate that is a lower bound (a certified accuracy) beside its counts, rounded down; its value is the share."""
    return Shown(count / total if total else float("nan"), fmt_rate_lower_bound(count, total))


def rate_ub_cell(count: int, total: int) -> Shown:
    """A rate that is an upper bound (the robust accuracy attacks left) beside its counts, rounded up; its value is the
    share."""
    return Shown(count / total if total else float("nan"), fmt_rate_upper_bound(count, total))


def format_cell(x: Any) -> str:
    """Any table cell: a :class:`Shown` as its text, other numbers by :func:`fmt_value` (∞, —, 3 significant digits)."""
    if isinstance(x, Shown):
        return x.text
    return fmt_value(x)


class IntervalCell(Shown):
    """An estimated rate as a cell: its value (CSV, sorting), its text with the interval, and the interval itself.

    ``low``, ``high`` and ``confidence`` travel with the cell, so an export (the LaTeX blocks)
    can set the interval its own way; ``count`` / ``total`` are the counts of a proportion.
    """

    low: float
    high: float
    confidence: float
    count: int | None
    total: int | None


def interval_cell(estimate: Any, *, percent: bool = True) -> IntervalCell:
    """A :class:`dpaudit.results.membership_rates.Estimate` as a cell: "25.0% (25/100) [16.9%, 34.4%]".

    ``percent=False`` writes a number that is not a share (an AUC) to three decimals: "0.772 [0.705, 0.838]".
    """
    e = estimate
    text = e.text(percent=percent)
    cell = IntervalCell(float(e.value), text)
    cell.low, cell.high, cell.confidence = float(e.low), float(e.high), float(e.confidence)
    cell.count, cell.total = e.count, e.total
    return cell
