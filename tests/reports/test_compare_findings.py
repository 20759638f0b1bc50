"""The compare report states every finding of its grid, and its figures and tables show only what they hold (issue 46).

The sample grid (tests/reports/conftest.py) holds the reviewer's case: a non-private baseline whose attack shows
ε_LB 0.94 (a finding: membership leaks), a DP-SGD row stored as a violation and a DP-SGD row whose attacks show
nothing; 100 non-members per row (TPR at 0.1 % FPR unresolved) and 20 most vulnerable samples that resolve no FPR.
"""

from __future__ import annotations

import dataclasses
import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.lines import Line2D

from dpaudit.privacy.audit_stats import advantage_ceiling
from dpaudit.results.comparison import load_comparison
from dpaudit.results.grid_verdicts import compare_verdict
from reports.compare import advantage_figure, privacy_utility_figure, vulnerable_figure
from reports.compare_matrix import _matrix_tables, _membership_table


@pytest.fixture
def grid(tmp_path, report_samples):
    run = report_samples["compare"](tmp_path / "run")
    return load_comparison(run.compare_dirs()[0])


def test_the_verdict_lists_every_finding_of_the_grid_and_takes_the_most_severe_colour(grid):
    verdict = compare_verdict(grid)
    assert verdict.status == "violation" and verdict.tone == "alert"
    # The violation leads, then the baseline's leakage (what the membership page calls "leaks membership").
    assert verdict.lines[0].startswith("dpsgd-target_epsilon=1: violation")
    assert verdict.lines[1].startswith("nonprivate: leaks membership") and "0.94" in verdict.lines[1]
    assert "nonprivate" in verdict.headline and "0.94" in verdict.headline
    assert verdict.lines[2].startswith("dpsgd-target_epsilon=8: no finding")


def test_leakage_without_a_violation_is_a_caution_not_a_green_no_violation(grid):
    fine = dataclasses.replace(
        grid, rows=tuple(dataclasses.replace(r, verdict="no violation", findings=()) for r in grid.rows)
    )
    verdict = compare_verdict(fine)
    assert verdict.status == "leaks membership" and verdict.tone == "warn"
    leaking = {r.label for r in fine.rows if r.epsilon_lb > 0}
    assert leaking == {"nonprivate", "dpsgd-target_epsilon=1"}
    assert all(label in verdict.headline for label in leaking)
    quiet = dataclasses.replace(
        fine, rows=tuple(dataclasses.replace(r, epsilon_lb=0.0, best_attack=None) for r in fine.rows)
    )
    # No finding at all: "no violation", amber here, as the ε_UB = 8 row's attacks on 100 / 100 could not have shown
    # a violation (test_record_intervals.py checks that power statement).
    assert (compare_verdict(quiet).status, compare_verdict(quiet).tone) == ("no violation", "warn")


def _brute_force_ceiling(eps: float, delta: float) -> float:
    """max over FPR of the largest TPR an (ε, δ)-DP test allows, minus FPR, on a fine grid (the privacy region)."""
    fpr = np.linspace(0.0, 1.0, 200_001)
    tpr = np.minimum.reduce([np.ones_like(fpr), math.exp(eps) * fpr + delta, 1 - math.exp(-eps) * (1 - delta - fpr)])
    return float((tpr - fpr).max())


@pytest.mark.parametrize("eps", [0.1, 0.7, 1.0, 2.0, 4.0])
def test_the_advantage_ceiling_is_the_tight_one_and_informative_above_ln2(eps):
    assert advantage_ceiling(eps, delta=1e-5) == pytest.approx(_brute_force_ceiling(eps, 1e-5), abs=1e-4)
    assert advantage_ceiling(eps, delta=1e-5) < 0.99  # min(e^ε − 1, 1) is 1 for all of ε ≥ ln 2


def test_the_advantage_figure_draws_that_ceiling(grid):
    fig = advantage_figure(grid)
    try:
        (line,) = [x for x in fig.axes[0].get_lines() if "ceiling" in str(x.get_label())]
        x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
        assert np.allclose(y, [advantage_ceiling(e, delta=grid.delta) for e in x])
        # min(e^ε − 1, 1) is flat at 1 from ε = 0.69 on; this one is at 0.76 at ε = 2 and still rising.
        assert y[(x >= 1) & (x <= 2)].max() < 0.8 and np.all(np.diff(y) > 0)
    finally:
        plt.close(fig)


def _drawn(handle) -> bool:
    if isinstance(handle, ErrorbarContainer):
        return False  # an error-bar glyph in a legend stands for a bar; the legend keys markers only
    if isinstance(handle, BarContainer):
        return any(np.isfinite(p.get_width()) and p.get_width() > 0 for p in handle.patches)
    if isinstance(handle, Line2D):
        x = np.asarray(handle.get_xdata(), dtype=float)
        return x.size > 1 or (x.size == 1 and handle.get_marker() not in (None, "None", "", " "))
    return True


@pytest.mark.parametrize(
    "draw",
    [
        privacy_utility_figure,
        # Its legend was already honest; its ceiling is tested above. Kept in the extended tier for the record.
        pytest.param(advantage_figure, marks=pytest.mark.extended),
        vulnerable_figure,
    ],
)
def test_every_legend_entry_stands_for_an_artist_drawn(grid, draw):
    fig = draw(grid)
    assert fig is not None
    try:
        for ax in fig.axes:
            legend = ax.get_legend()
            if legend is None:
                continue
            for text in legend.get_texts():
                # The legend's own copy of the handle: find the axes' artist with the same label.
                label = text.get_text()
                artists = [a for a in [*ax.get_lines(), *ax.containers] if a.get_label() == label]
                assert artists and all(_drawn(a) for a in artists), label
    finally:
        plt.close(fig)


def test_the_membership_tables_leave_out_columns_no_row_resolves_and_keep_cells_short(grid):
    tables = _membership_table(grid)
    assert len(tables) == 2  # population, then the most vulnerable samples
    for table in tables:
        for j, column in enumerate(table.columns):
            cells = [str(getattr(r[j], "text", r[j])) for r in table.rows]
            assert not all(c == "n/a" or c == "—" for c in cells), column
            # An unresolved cell is short; a resolved rate is as long as its count and interval make it (issue 46).
            assert all(len(c) <= 16 for c in cells if c.startswith("n/a") or c == "—"), (column, cells)
            if column.startswith(("TPR", "AUC", "advantage")):
                assert all("[" in c for c in cells if c[0].isdigit()), (column, cells)  # every rate with its interval
        # 100 non-members cannot resolve 0.1 %: that column is gone (and named in the caption).
        assert not any("0.1%" in c for c in table.columns) and "TPR @ 0.1%" in table.caption
    assert not any("TPR" in c for c in tables[1].columns)  # 10 non-members resolve none of 0.1 %, 1 %, 10 %
    matrix = _matrix_tables(grid)[0]
    assert "TPR @ 0.1% FPR" not in matrix.columns and "TPR @ 1.0% FPR" in matrix.columns
