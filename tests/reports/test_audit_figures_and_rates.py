"""The audit page's ceiling figure and rates (issue 46): tick labels that do not collide ("1,0002,000"), an ε_UB line
inside the frame, and an interval with counts on every estimated rate."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import pytest
from scipy import stats

from dpaudit.privacy.audit_stats import auc_interval, auc_score, clopper_pearson_interval
from dpaudit.results.audit import AuditResult, EpsilonByTrials
from dpaudit.results.audit_details import AuditDetails, WhiteBoxDetails
from reports.audit import rates_table
from reports.audit_figures import ceiling_figure, roc_figure


def _white_box() -> AuditResult:
    """A white-box audit's result as stored (Gaussian-DP bound at the bound's own threshold), built from its counts."""
    return AuditResult(
        epsilon_lb=2.17,
        confidence=0.95,
        method="white-box",
        bound="gdp",
        delta=1e-5,
        threshold_strategy="bonferroni",
        num_in=200,
        num_out=200,
        epsilon_ub=4.38,
        accountant="naive",
        threat_model="white-box",
        ceiling=21.8,
        details=WhiteBoxDetails(
            threshold=0.62,
            true_positives=131,
            false_positives=41,
            bounding_num_in=200,
            bounding_num_out=200,
            num_tests=20,
            num_thresholds=20,
            estimate_kind="gdp",
        ),
    )


def _long_curve(ub: float) -> EpsilonByTrials:
    """A white-box audit of 10,000 steps: prefixes from 10 to 20,000 observations (four decades)."""
    n = np.unique(np.geomspace(10, 20_000, 14).round().astype(int))
    lb = np.linspace(0.0, ub * 0.9, n.size)
    return EpsilonByTrials(
        unit="steps",
        num_observations=tuple(int(x) for x in n),
        num_in=tuple(int(x) // 2 for x in n),
        num_out=tuple(int(x) - int(x) // 2 for x in n),
        epsilon_lb=tuple(float(x) for x in lb),
        ceiling=tuple(float(x) for x in np.linspace(0.0, 60.0, n.size)),
    )


def _overlaps(fig, axis) -> list[tuple[str, str]]:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    lo, hi = sorted(axis.get_view_interval())
    labels = [
        t.label1
        for t in axis.get_major_ticks()
        if lo <= t.get_loc() <= hi and t.label1.get_visible() and t.label1.get_text()
    ]
    boxes = sorted(((lb.get_window_extent(renderer), lb.get_text()) for lb in labels), key=lambda b: b[0].x0)
    return [(a[1], b[1]) for a, b in zip(boxes, boxes[1:]) if a[0].x1 > b[0].x0]


def test_the_ceiling_figure_has_no_colliding_tick_labels_and_keeps_eps_ub_off_the_frame():
    result = _white_box()
    fig = ceiling_figure(_long_curve(result.epsilon_ub), result)
    try:
        top, bottom = fig.axes[:2]
        assert bottom.get_xscale() == "log" and _overlaps(fig, bottom.xaxis) == []
        # ε_UB (the highest value of the top panel here) sits clearly inside both panels' frames.
        for panel in (top, bottom):
            y0, y1 = panel.get_ylim()
            assert result.epsilon_ub < y1 - 0.05 * (y1 - y0), (panel.get_ylabel(), y0, y1)
    finally:
        plt.close(fig)


def test_clopper_pearson_interval_matches_the_beta_quantiles_and_covers():
    # The exact interval's ends are Beta quantiles (Clopper & Pearson 1934), and the interval covers at ≥ 95 %.
    assert clopper_pearson_interval(25, 200, confidence=0.95) == pytest.approx(
        (stats.beta.ppf(0.025, 25, 176), stats.beta.ppf(0.975, 26, 175))
    )
    assert clopper_pearson_interval(0, 10)[0] == 0.0 and clopper_pearson_interval(10, 10)[1] == 1.0
    rng = np.random.default_rng(1)
    n, p = 60, 0.3
    hits = rng.binomial(n, p, 400)
    covered = np.mean([lo <= p <= hi for lo, hi in (clopper_pearson_interval(int(k), n) for k in hits)])
    assert covered >= 0.95


def test_the_auc_interval_is_the_mann_whitney_auc_with_a_bootstrap_interval_that_covers():
    rng = np.random.default_rng(2)
    s_in, s_out = rng.normal(1, 1, 150), rng.normal(0, 1, 150)
    auc = auc_score(s_in, s_out)
    low, high = auc_interval(s_in, s_out)
    assert auc == pytest.approx(stats.mannwhitneyu(s_in, s_out).statistic / (150 * 150))
    true_auc = stats.norm.cdf(1 / np.sqrt(2))  # P(X_in > X_out) for N(1, 1) against N(0, 1)
    assert low < auc < high and low < true_auc < high and high - low < 0.2


def test_every_estimated_rate_on_the_audit_page_has_counts_and_an_interval():
    result = _white_box()
    d = result.details
    rng = np.random.default_rng(3)
    table = rates_table(result, rng.normal(1, 1, 200), rng.normal(0, 1, 200))
    rows = {r[0]: r for r in table.rows}
    assert set(rows) == {"TPR (IN guessed IN)", "FPR (OUT guessed IN)", "AUC"}
    low, high = clopper_pearson_interval(d.true_positives, d.bounding_num_in)
    tpr = rows["TPR (IN guessed IN)"]
    assert f"({d.true_positives}/{d.bounding_num_in})" in tpr[1]
    ends = [float(x.rstrip("%")) / 100 for x in tpr[2].strip("[]").split(", ")]
    assert ends[0] <= low and ends[1] >= high and ends[0] > low - 0.002 and ends[1] < high + 0.002
    assert rows["AUC"][2].startswith("[") and "200 IN / 200 OUT" in rows["AUC"][1]
    # No scores, no details that count anything: nothing estimated, no table.
    bare = dataclasses.replace(result, details=AuditDetails())
    assert rates_table(bare, np.zeros(0), np.zeros(0)) is None


@pytest.mark.extended  # draws a figure (about 1 s); the rates table above carries the same interval
def test_the_roc_legend_gives_the_auc_with_its_interval():
    rng = np.random.default_rng(4)
    s_in, s_out = rng.normal(1, 1, 100), rng.normal(0, 1, 100)
    fig = roc_figure(s_in, s_out)
    try:
        low, high = auc_interval(s_in, s_out)
        (text,) = [t.get_text() for t in fig.axes[0].get_legend().get_texts() if "AUC" in t.get_text()]
        assert f"95% CI [{low:.3f}, {high:.3f}]" in " ".join(text.split())  # the legend may wrap it
    finally:
        plt.close(fig)


@pytest.mark.extended  # draws a figure (about 1 s)
def test_the_audit_roc_is_drawn_only_where_the_out_observations_resolve_the_fpr_in_percent():
    # The first review: the audit ROC started at 0.5/IN = 4.1e-5, below 1/OUT = 8.1e-5, the lowest FPR
    # the OUT observations resolve; its ticks were powers of ten beside a page of percentages.
    rng = np.random.default_rng(5)
    s_in, s_out = rng.normal(1, 1, 400), rng.normal(0, 1, 250)
    fig = roc_figure(s_in, s_out)
    try:
        ax = fig.axes[0]
        (curve,) = [line for line in ax.get_lines() if "AUC" in line.get_label()]
        assert float(np.min(curve.get_xdata())) == pytest.approx(1 / 250)
        assert ax.get_xlim()[0] == pytest.approx(1 / 250) and ax.get_ylim()[0] == pytest.approx(0.5 / 400)
        # The first point is the best TPR of any threshold with at most one false positive.
        best = float(np.mean(s_in > np.sort(s_out)[-2]))  # flagged: above the second-highest OUT score
        assert float(curve.get_ydata()[0]) == pytest.approx(max(best, 0.5 / 400))
        fig.canvas.draw()
        labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
        assert labels and all(text.endswith("%") for text in labels)
    finally:
        plt.close(fig)


@pytest.mark.extended  # draws a figure
def test_roc_axes_of_four_decades_keep_one_percent_tick_a_decade_so_labels_do_not_collide():
    # The second review: an audit ROC from FPR 8e-5 printed "0.01%0.02%0.05%..." as one run of text.
    from reports.figures import new_axes, roc_axes

    fig, ax = new_axes(None, size=(7.0, 4.5))
    try:
        roc_axes(ax, fpr_floor=8e-5, tpr_floor=4e-5, fpr_label="FPR")
        fig.canvas.draw()
        low, high = ax.get_xlim()
        shown = [t for t in ax.xaxis.get_major_ticks() if low <= t.get_loc() <= high and t.label1.get_text()]
        assert [t.label1.get_text() for t in shown] == ["0.01%", "0.1%", "1%", "10%", "100%"]
        boxes = [t.label1.get_window_extent() for t in shown]
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))
    finally:
        plt.close(fig)
