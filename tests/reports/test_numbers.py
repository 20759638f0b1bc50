"""Numbers by quantity in every table and sentence (issue 34, item 1): ε to 3 significant digits, rates with their
counts, one ∞."""

from __future__ import annotations

import math

import pytest

from reports.numbers import Shown, epsilon_cell, fmt_epsilon, fmt_percent, fmt_rate, format_cell, rate_cell
from reports.render import Table, format_number


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (3.18674, "3.19"),
        (155.3732, "155"),
        (1.5, "1.5"),
        (0.0, "0"),
        (0.001393, "0.00139"),
        (4810.0, "4,810"),
        (1e-5, "1e-05"),
        (math.inf, "∞"),
        (None, "—"),
        (math.nan, "—"),
    ],
)
def test_epsilon_to_three_significant_digits(x, text):
    assert fmt_epsilon(x) == text


def test_rates_are_percentages_beside_their_counts():
    assert (
        fmt_rate(25, 200) == "12.5% (25/200)"
        and fmt_rate(1, 2000) == "0.05% (1/2000)"
        and fmt_rate(0, 0) == "— (0 draws)"
    )
    assert fmt_percent(0.8194444) == "81.9%"
    cell = rate_cell(25, 200)
    assert isinstance(cell, float) and float(cell) == 0.125 and format_cell(cell) == "12.5% (25/200)"


def test_one_precision_and_one_infinity_in_every_table_cell():
    # 0.516 / 0.5159 / 0.001393 in one table was the complaint: every float cell now reads to 3 significant digits.
    assert [format_number(x) for x in (0.516, 0.5159, 0.001393)] == ["0.516", "0.516", "0.00139"]
    assert format_number(math.inf) == "∞" and format_number(math.nan) == "—" and format_number(None) == "—"
    assert format_number(epsilon_cell(math.inf)) == "∞" and isinstance(epsilon_cell(2.0), Shown)
    Table(columns=["a"], rows=[[rate_cell(1, 3)]])  # a Shown cell is an ordinary number to the table
