"""How numbers are written for a reader: one rule per quantity, for every table and sentence.

ε to three significant digits (the accountants' own digits beyond that are noise next to the
bounds they are compared with), rates as percentages beside the counts they rest on, accuracies
as percentages, one symbol ∞ for an unbounded ε, and one precision for every other number in a
table. Pure and torch-free: the verdicts of :mod:`dpaudit.results.verdicts` word their sentences
with it and :mod:`reports.numbers` gives it to the reports.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["INFINITY", "MISSING", "fmt_epsilon", "fmt_rate", "fmt_percent", "fmt_number", "fmt_count", "fmt_value"]

#: The one symbol for an unbounded quantity (ε of a claim no accountant bounds).
INFINITY = "∞"
#: What a cell with no value shows (never "None" or "nan").
MISSING = "—"


def _significant(x: float, digits: int) -> str:
    """``x`` to ``digits`` significant digits, without an exponent between 10⁻³ and 10⁶ (outside, as ``%g`` writes it: 1e-05)."""
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    if magnitude >= 6 or magnitude < -3:
        return f"{x:.{digits}g}"
    decimals = max(digits - 1 - magnitude, 0)
    text = f"{round(x, decimals):,.{decimals}f}"
    # 1.50 → 1.5: trailing zeros after the point carry no digit of the value.
    return text.rstrip("0").rstrip(".") if "." in text else text


def _special(x: float) -> str | None:
    if math.isnan(x):
        return MISSING
    if math.isinf(x):
        return INFINITY if x > 0 else "−" + INFINITY
    return None


def fmt_epsilon(x: float | None, digits: int = 3) -> str:
    """ε (or any privacy parameter) to ``digits`` significant digits; ∞ when unbounded, — when absent.

    >>> fmt_epsilon(3.18674), fmt_epsilon(155.3732), fmt_epsilon(float("inf")), fmt_epsilon(0.0)
    ('3.19', '155', '∞', '0')
    """
    if x is None:
        return MISSING
    x = float(x)
    return _special(x) or _significant(x, digits)


def fmt_number(x: float | None, digits: int = 3) -> str:
    """Any other real number, to ``digits`` significant digits (one precision per table)."""
    return fmt_epsilon(x, digits)


def fmt_count(n: int) -> str:
    """A count with thousands separators: 4,810."""
    return f"{int(n):,}"


def _pct(share: float) -> str:
    pct = 100.0 * share
    if 0 < pct < 0.1:
        return f"{_significant(pct, 2)}%"
    return f"{pct:.1f}%"


def fmt_percent(x: float | None) -> str:
    """A share in [0, 1] (an accuracy) as a percentage with one decimal: 0.8194 → 81.9%."""
    if x is None:
        return MISSING
    x = float(x)
    return _special(x) or _pct(x)


def fmt_rate(count: int, total: int) -> str:
    """A rate as a percentage beside the counts it rests on: 25 of 200 → "12.5% (25/200)".

    A reader sees at once how coarse the rate is: with 200 draws one more hit moves it by 0.5 %.
    """
    count, total = int(count), int(total)
    if total <= 0:
        return f"{MISSING} (0 draws)"
    return f"{_pct(count / total)} ({count}/{total})"


def fmt_value(x: Any) -> str:
    """A table cell of unknown quantity: None → —, bools yes/no, floats by :func:`fmt_number`."""
    if x is None:
        return MISSING
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return fmt_number(x)
    return str(x)
