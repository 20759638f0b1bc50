"""Bounds are printed the safe way (issue 42, part 3): an upper bound never below its value, a lower bound never above.

Every formatter is run on random floats over 1e-12 … 1e6, on exact binary halves, on decimal ties
at the last printed digit and on the floats just beside round numbers; the printed text is parsed
back as an exact decimal and compared with the float's exact value. The direction is the property;
closeness (at most one unit of the last printed digit away) keeps a formatter that printed "∞" for
everything from passing.
"""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dpaudit.results.numbers import (
    INFINITY,
    fmt_epsilon,
    fmt_lower_bound,
    fmt_percent,
    fmt_percent_lower_bound,
    fmt_percent_upper_bound,
    fmt_upper_bound,
)


def parse(text: str) -> Decimal:
    """The number a reader takes from a printed value: thousands separators and % dropped, ∞ as infinity."""
    text = text.replace(",", "").removesuffix("%")
    if text == INFINITY:
        return Decimal("Infinity")
    return Decimal(text)


def _unit(x: float, digits: int) -> Decimal:
    """One unit of the ``digits``-th significant digit of ``x`` (how far a correct rounding may move it)."""
    return Decimal(1).scaleb(Decimal(x).adjusted() - digits + 1)


def _ties(draw_digits: int) -> st.SearchStrategy[float]:
    """Floats written as a decimal tie at the last printed digit (1.235e-7 at three digits), over the magnitudes."""
    return st.builds(
        lambda k, e: float(f"{k}5e{e}"), st.integers(10 ** (draw_digits - 1), 10**draw_digits - 1), st.integers(-14, 4)
    )


magnitudes = st.floats(min_value=1e-12, max_value=1e6, allow_nan=False, allow_infinity=False)
binary_halves = st.builds(lambda k, j: (2 * k + 1) / 2**j, st.integers(0, 10**6), st.integers(1, 40))
beside_round = st.builds(
    lambda m, e, up: math.nextafter(m * 10.0**e, math.inf if up else -math.inf),
    st.integers(1, 999),
    st.integers(-12, 5),
    st.booleans(),
)
values = st.one_of(magnitudes, binary_halves, _ties(3), beside_round).filter(lambda x: 0 < x <= 1e7)


@settings(max_examples=150, deadline=None)
@given(x=values, digits=st.integers(1, 5))
@example(x=2.694392033855676e-05, digits=3)  # the naive ε of the issue, printed "0.0000"
@example(x=0.00020794110349686278, digits=3)  # its strong ε, printed "0.0002"
@example(x=0.125, digits=2)  # an exact half: to nearest it reads 0.12
def test_an_upper_bound_is_never_printed_below_its_value(x, digits):
    text = fmt_upper_bound(x, digits)
    shown = parse(text)
    # Read back as a float (how a reader or a script takes it), never below; as a decimal, never
    # below the float's exact value unless it is that very float's own text (0.6 for 0.59999…97).
    assert float(shown) >= x and (shown >= Decimal(x) or float(shown) == x), (x, text)
    assert abs(shown - Decimal(x)) <= _unit(x, digits)


@settings(max_examples=150, deadline=None)
@given(x=values, digits=st.integers(1, 5))
@example(x=0.9995, digits=3)
@example(x=0.375, digits=2)
def test_a_lower_bound_is_never_printed_above_its_value(x, digits):
    text = fmt_lower_bound(x, digits)
    shown = parse(text)
    assert float(shown) <= x and (shown <= Decimal(x) or float(shown) == x), (x, text)
    assert abs(Decimal(x) - shown) <= _unit(x, digits)


shares = st.one_of(
    st.floats(0.0, 1.0),
    st.floats(1e-12, 1e-3),
    binary_halves.map(lambda h: h / (1 + h)),
    st.builds(lambda k: k / 2000, st.integers(0, 2000)),
)


@settings(max_examples=150, deadline=None)
@given(share=shares)
@example(share=0.81995)  # to nearest 82.0%, above a lower bound of 81.995%
@example(share=0.0004999)
def test_percentages_of_bounds_round_their_own_way(share):
    exact = Decimal(share).scaleb(2)
    low, high = parse(fmt_percent_lower_bound(share)), parse(fmt_percent_upper_bound(share))
    assert low <= exact <= high, (share, fmt_percent_lower_bound(share), fmt_percent_upper_bound(share))
    # One decimal of a percent, or two significant digits below 0.1 %: never further than that.
    unit = Decimal("0.1") if exact >= Decimal("0.1") else Decimal(1).scaleb(exact.adjusted() - 1)
    assert high - low <= unit and parse(fmt_percent(share)) in (low, high)


@settings(max_examples=100, deadline=None)
@given(x=values)
def test_an_estimate_keeps_round_to_nearest(x):
    # A point estimate is not a bound: it sits on whichever side is nearer (within half a unit).
    assert abs(parse(fmt_epsilon(x)) - Decimal(x)) <= _unit(x, 3) / 2


@pytest.mark.parametrize("fmt", [fmt_upper_bound, fmt_lower_bound])
def test_infinity_zero_and_absent_read_the_same_in_both_directions(fmt):
    assert fmt(math.inf) == INFINITY and fmt(0.0) == "0" and fmt(None) == "—" and fmt(math.nan) == "—"


def test_tiny_bounds_keep_their_digits():
    # The numbers: 2.69e-05 and 2.08e-04 read 0.0000 and 0.0002 at four decimals.
    assert fmt_upper_bound(2.694392033855676e-05) == "2.7e-05"
    assert fmt_lower_bound(2.694392033855676e-05) == "2.69e-05"
    assert fmt_upper_bound(0.00020794110349686278) == "0.000208"
    assert fmt_upper_bound(4811.2) == "4,820" and fmt_lower_bound(4819.9) == "4,810"
    # A float that is its own short text reads as itself both ways (0.6 is 0.59999999999999997…).
    assert fmt_lower_bound(0.6, 4) == fmt_upper_bound(0.6, 4) == "0.6" and fmt_lower_bound(0.3) == "0.3"
