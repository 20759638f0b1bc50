"""How numbers are written for a reader: one rule per quantity, for every table and sentence.

ε to three significant digits (the accountants' own digits beyond that are noise next to the
bounds they are compared with), rates as percentages beside the counts they rest on, accuracies
as percentages, one symbol ∞ for an unbounded ε, and one precision for every other number in a
table. Pure and torch-free: the verdicts of :mod:`dpaudit.results.verdicts` word their sentences
with it and :mod:`reports.numbers` gives it to the reports.

A bound is rounded the safe way, never to nearest: an upper bound printed below its value, or a
lower bound printed above it, is a wrong bound. So each direction has its formatter:

* :func:`fmt_upper_bound` rounds up: ε_UB under any accountant, a PATE ε, a δ upper bound.
* :func:`fmt_lower_bound` rounds down: ε_LB, an audit's ceiling (itself the ε_LB of a perfect
  attack), a certified radius ("robust within r": printed larger, it would certify more than
  was computed).
* :func:`fmt_percent_lower_bound` / :func:`fmt_rate_lower_bound` round a share down: a certified
  accuracy, a lower bound on the robust accuracy; :func:`fmt_percent_upper_bound` /
  :func:`fmt_rate_upper_bound` round up the robust accuracy attacks left, an upper bound on it.
* :func:`fmt_epsilon` / :func:`fmt_number` / :func:`fmt_percent` / :func:`fmt_rate` round to
  nearest, for what is not a bound (a measured accuracy, an ε estimate, the last-iterate ε).

The rounding is done on the exact binary value of the float (:class:`decimal.Decimal`), so a
printed upper bound parsed back is never below the float it came from, whatever its magnitude:
2.694e-05 prints ``2.7e-05`` at two digits, not ``0.0000``. A float that is already short (0.6)
prints as itself in either direction: parsed back it is the same float. docs/cli.md states the rule for
users.
"""

from __future__ import annotations

import decimal
import math
from typing import Any

__all__ = [
    "INFINITY",
    "MISSING",
    "fmt_count",
    "fmt_epsilon",
    "fmt_lower_bound",
    "fmt_number",
    "fmt_percent",
    "fmt_percent_lower_bound",
    "fmt_percent_upper_bound",
    "fmt_rate",
    "fmt_rate_lower_bound",
    "fmt_rate_upper_bound",
    "fmt_upper_bound",
    "fmt_value",
]

#: The one symbol for an unbounded quantity (ε of a claim no accountant bounds).
INFINITY = "∞"
#: What a cell with no value shows (never "None" or "nan").
MISSING = "—"


#: The three ways a number is rounded: up for an upper bound, down for a lower one, to nearest for an estimate.
_UP, _DOWN, _NEAREST = decimal.ROUND_CEILING, decimal.ROUND_FLOOR, decimal.ROUND_HALF_EVEN
# Room for every float's exact decimal expansion (a subnormal has ~750 significant digits): with
# the default 28 digits, scaling the exact value would round it once before the directed rounding.
_EXACT = decimal.Context(prec=1100, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)


def _significant(x: float | decimal.Decimal, digits: int, rounding: str = _NEAREST) -> str:
    """``x`` to ``digits`` significant digits, rounded by ``rounding``; no exponent between 10⁻⁴ and 10⁶ (outside, as
    ``%g`` writes it: 1e-05).

    The rounding is of the float's exact value (``Decimal(x)`` holds it to the last bit), so
    ``_UP`` never prints below ``x`` and ``_DOWN`` never above it, at any magnitude, read back
    as a float; a float whose own shortest text is short enough prints as that text.
    """
    if x == 0:
        return "0"
    exact = x if isinstance(x, decimal.Decimal) else decimal.Decimal(x)
    if rounding != _NEAREST and not isinstance(x, decimal.Decimal):
        # A float whose shortest round-trip text has at most ``digits`` digits (0.6, whose exact
        # value is 0.59999999999999997…) prints as that text: read back, it is the very same
        # float, so the bound is neither raised nor lowered, and 0.6 does not read 0.599.
        short = decimal.Decimal(repr(x))
        if len(short.normalize(context=_EXACT).as_tuple().digits) <= digits:
            exact, rounding = short, _NEAREST
    # Quantizing to the last kept digit's place: the result has at most ``digits`` digits, or one
    # more digit when rounding carries (9.996 up → 10.0), which the rendering below re-reads.
    shown = exact.quantize(
        decimal.Decimal(1).scaleb(exact.adjusted() - digits + 1, context=_EXACT), rounding=rounding, context=_EXACT
    )
    magnitude = shown.adjusted()
    if magnitude >= 6 or magnitude < -4:
        mantissa = shown.scaleb(-magnitude, context=_EXACT).normalize(context=_EXACT)
        return f"{mantissa:f}e{magnitude:+03d}"
    text = f"{shown:,f}"
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


def fmt_upper_bound(x: float | None, digits: int = 3) -> str:
    """An upper bound (ε_UB, δ) to ``digits`` significant digits, rounded *up*; ∞ when unbounded, — when absent.

    Printed below its value an upper bound would be wrong, so the last digit is rounded up and
    tiny values keep their digits instead of reading 0.

    >>> fmt_upper_bound(3.18174), fmt_upper_bound(2.694392033855676e-05)
    ('3.19', '2.7e-05')
    >>> fmt_upper_bound(2.0), fmt_upper_bound(float("inf"))
    ('2', '∞')
    """
    if x is None:
        return MISSING
    x = float(x)
    return _special(x) or _significant(x, digits, _UP)


def fmt_lower_bound(x: float | None, digits: int = 3) -> str:
    """A lower bound (ε_LB, a certified radius) to ``digits`` significant digits, rounded *down*; ∞, — as elsewhere.

    Printed above its value a lower bound would claim more than was shown (an ε_LB) or
    certified (a radius), so the last digit is rounded down.

    >>> fmt_lower_bound(3.18974), fmt_lower_bound(0.0099999), fmt_lower_bound(0.0)
    ('3.18', '0.00999', '0')
    """
    if x is None:
        return MISSING
    x = float(x)
    return _special(x) or _significant(x, digits, _DOWN)


def fmt_number(x: float | None, digits: int = 3) -> str:
    """Any other real number, to ``digits`` significant digits (one precision per table)."""
    return fmt_epsilon(x, digits)


def fmt_count(n: int) -> str:
    """A count with thousands separators: 4,810."""
    return f"{int(n):,}"


def _pct(share: float | decimal.Decimal, rounding: str = _NEAREST) -> str:
    # × 100 by moving the decimal point of the exact value: a float product could round across the bound.
    pct = (share if isinstance(share, decimal.Decimal) else decimal.Decimal(share)).scaleb(2, context=_EXACT)
    if 0 < pct < decimal.Decimal("0.1"):
        return f"{_significant(pct, 2, rounding)}%"
    return f"{pct.quantize(decimal.Decimal('0.1'), rounding=rounding, context=_EXACT):f}%"


def fmt_percent(x: float | None) -> str:
    """A share in [0, 1] (an accuracy) as a percentage with one decimal: 0.8194 → 81.9%."""
    if x is None:
        return MISSING
    x = float(x)
    return _special(x) or _pct(x)


def fmt_percent_lower_bound(x: float | None) -> str:
    """A share that is a lower bound (a certified accuracy) as a percentage, rounded *down*: 0.8199 → 81.9%."""
    if x is None:
        return MISSING
    x = float(x)
    return _special(x) or _pct(x, _DOWN)


def fmt_percent_upper_bound(x: float | None) -> str:
    """A share that is an upper bound (a robust accuracy left by attacks) as a percentage, rounded *up*: 0.8191 →
    82.0%."""
    if x is None:
        return MISSING
    x = float(x)
    return _special(x) or _pct(x, _UP)


def fmt_rate(count: int, total: int) -> str:
    """A rate as a percentage beside the counts it rests on: 25 of 200 → "12.5% (25/200)".

    A reader sees at once how coarse the rate is: with 200 draws one more hit moves it by 0.5 %.
    """
    return _rate(count, total, _NEAREST)


def fmt_rate_lower_bound(count: int, total: int) -> str:
    """A rate that is a lower bound (a certified accuracy) beside its counts, the percentage rounded down: 2 of 3 →
    "66.6% (2/3)"."""
    return _rate(count, total, _DOWN)


def fmt_rate_upper_bound(count: int, total: int) -> str:
    """A rate that is an upper bound (the robust accuracy attacks left) beside its counts, the percentage rounded up: 1
    of 3 → "33.4% (1/3)"."""
    return _rate(count, total, _UP)


def _rate(count: int, total: int, rounding: str) -> str:
    count, total = int(count), int(total)
    if total <= 0:
        return f"{MISSING} (0 draws)"
    # The share as an exact fraction's decimal (count / total in floating point could round across the bound).
    share = (
        decimal.Decimal(count).scaleb(0, context=_EXACT) / decimal.Decimal(total)
        if rounding != _NEAREST
        else count / total
    )
    return f"{_pct(share, rounding)} ({count}/{total})"


def fmt_value(x: Any) -> str:
    """A table cell of unknown quantity: None → —, bools yes/no, floats by :func:`fmt_number`."""
    if x is None:
        return MISSING
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return fmt_number(x)
    return str(x)
