"""Figures that misled a reader (issue 34), each checked on the figure's own data, not its pixels.

* the white-box ceiling (≫ ε_UB) no longer shares a scale with ε_LB and ε_UB;
* the audit's ε on one number line, ε_LB = 0 drawn at 0 as "no evidence", ε last iterate
  drawn only where the result holds it and the caption says when it does not;
* the privacy–utility plot draws ε_LB = 0 at 0 in a panel of its own, never at a log axis'
  left edge joined to the ε_UB marker;
* the PATE accuracy plot with one point is a sentence, and "published" is named only when drawn;
* the certified comparison tells PixelDP's smoothing curve from a smoothing model's;
* the ε point estimate appears only with its interval, never when the interval includes 0.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from matplotlib.colors import to_hex

from dpaudit.privacy.audit_bounds import gaussian_step_claim
from dpaudit.privacy.audit_procedures import audit_from_scores
from dpaudit.privacy.audit_trials import epsilon_lb_by_trials
from dpaudit.privacy.estimate_interval import estimate_interval
from reports.audit import _estimate_rows, bounds_caption, bounds_figure, ceiling_figure
from reports.certified import comparison_figure, load_certified_runs
from reports.compare import _no_evidence_note, privacy_utility_figure
from reports.pate import accuracy_epsilon_figure, load_pate_runs, pate_rows, pate_sections
from reports.render import Figure
from tests.reports.conftest import build_pate_run
from tests.reports.figure_runs import build_big_compare_run, build_certified_run


@pytest.fixture(scope="module")
def white_box():
    """A white-box GDP audit of 400 steps: its ceiling (≈ 27) is six times ε_UB (≈ 4.4)."""
    rng = np.random.default_rng(3)
    s_in, s_out = rng.normal(1.0, 1.0, 400), rng.normal(0.0, 1.0, 400)
    result = audit_from_scores(
        s_in,
        s_out,
        claim=gaussian_step_claim(noise_multiplier=1.0),
        delta=1e-5,
        method="white-box",
        threat_model="white-box",
    )
    return result, epsilon_lb_by_trials(result, {"in_scores": s_in, "out_scores": s_out})


def _lines(ax):
    return {line.get_label(): line for line in ax.get_lines()}


def test_the_ceiling_has_its_own_panel_and_does_not_squash_the_bounds(white_box):
    result, curve = white_box
    assert result.ceiling > 4 * result.epsilon_ub  # the case that squashed the plot
    fig = ceiling_figure(curve, result)
    top, bottom = fig.axes
    assert not any("ceiling" in label for label in _lines(top)), "the ceiling is drawn with the bounds"
    assert any(np.allclose(line.get_ydata(), curve.ceiling) for line in bottom.get_lines())
    lb = next(line for label, line in _lines(top).items() if label.startswith("ε_LB"))
    assert np.allclose(lb.get_ydata(), curve.epsilon_lb)
    # The bounds' scale is set by ε_LB and ε_UB: ε_UB sits in the top fifth, not at the bottom.
    y0, y1 = top.get_ylim()
    assert y1 < 1.2 * max(result.epsilon_ub, max(curve.epsilon_lb)) and (result.epsilon_ub - y0) / (y1 - y0) > 0.8


def test_the_one_run_ceiling_caption_says_why_it_can_fall():
    from dataclasses import replace

    from reports.audit import _ceiling_caption

    result = audit_from_scores(np.ones(20), np.zeros(20), claim=gaussian_step_claim(noise_multiplier=1.0), delta=1e-5)
    one_run = replace(result, method="one-run", bound="one-run", threshold_strategy="top-bottom")
    assert "need not rise" in _ceiling_caption(one_run, "canaries") and "Bonferroni" in _ceiling_caption(
        one_run, "canaries"
    )
    assert "need not rise" not in _ceiling_caption(result, "trials")


def test_bounds_line_shows_every_epsilon_and_no_evidence_at_zero(white_box):
    result, _ = white_box
    fig = bounds_figure(result)
    xs = {
        label.split(" ")[0] + (" last" if "last" in label else ""): line.get_xdata()[0]
        for label, line in _lines(fig.axes[-1]).items()
        if len(line.get_xdata())
    }
    assert (
        xs["ε_UB"] == pytest.approx(result.epsilon_ub)
        and xs["ceiling"] == pytest.approx(result.ceiling)
        and xs["ε_LB"] == pytest.approx(result.epsilon_lb)
    )
    assert fig.axes[-1].get_xscale() == "log"  # 2.6 to 27: a decade
    assert "equals ε_UB" in bounds_caption(result)  # white-box: the last iterate of one step is ε_UB
    assert "No last-iterate ε" in bounds_caption(dataclasses.replace(result, epsilon_last_iterate=None))
    # The gap is drawn with a real extent: from ε_LB up to the ceiling or ε_UB, whichever is nearer (issue 46's linter:
    # no axes of single points).
    (gap,) = [line for label, line in _lines(fig.axes[-1]).items() if label.startswith("left by the attack")]
    assert list(gap.get_xdata()) == pytest.approx([result.epsilon_lb, min(result.ceiling, result.epsilon_ub)])
    # ε_LB = 0: a marker at 0 on a linear line (0 is on it), nothing at a log axis' edge.
    nothing = audit_from_scores(np.zeros(50), np.zeros(50), claim=gaussian_step_claim(noise_multiplier=1.0), delta=1e-5)
    assert nothing.epsilon_lb == 0
    (main,) = bounds_figure(nothing).axes
    assert main.get_xscale() == "linear" and main.get_xlim()[0] < 0.0
    lb = next(line for label, line in _lines(main).items() if label.startswith("ε_LB"))
    assert list(lb.get_xdata()) == [0.0] and "no evidence" in lb.get_label()
    assert "no evidence" in bounds_caption(nothing)
    # Nothing but ε_LB to place (no finite ε_UB, no ceiling): one number is the table's, no figure.
    alone = dataclasses.replace(result, epsilon_ub=math.inf, ceiling=None)
    assert bounds_figure(alone) is None
    # With the last iterate stored (issue 33), it is drawn, labelled for what it is (issue 42), and
    # the gap split rests on the bounds: the heuristic's reading rides beside it, capping nothing.
    stored = dataclasses.replace(result, epsilon_last_iterate=2.0)
    labels = _lines(bounds_figure(stored).axes[-1])
    assert any(
        "last-iterate ε" in label and "exact for linear losses" in label and line.get_xdata()[0] == 2.0
        for label, line in labels.items()
    )
    caption = bounds_caption(stored)
    assert (
        "heuristic suggests" in caption
        and "does not cap" in caption
        and "what the attack leaves" in caption
        and "threat model hides" not in caption
    )


def test_privacy_utility_draws_no_evidence_at_zero_never_at_a_log_edge(tmp_path):
    from dpaudit.results.comparison import load_comparison

    result = load_comparison(build_big_compare_run(tmp_path / "run").compare_dir("big"))
    zero_rows = [r for r in result.rows if r.epsilon_ub and r.epsilon_lb == 0]
    assert zero_rows
    # No panel at ε = 0 (its markers were an axes of single points): the caption names the settings without evidence.
    (main,) = privacy_utility_figure(result).axes
    note = _no_evidence_note(result)  # the sentence the figure's caption ends with
    assert all(r.label in note.split("No evidence (ε_LB = 0)")[1] for r in zero_rows)
    smallest = min(
        min(r.epsilon_ub_best for r in result.rows if r.epsilon_ub),
        min(r.epsilon_lb for r in result.rows if r.epsilon_lb > 0),
    )
    for line in main.get_lines():
        if line.get_transform() != main.transData:
            continue  # the baseline: a horizontal line across the axes
        assert all(x >= smallest - 1e-12 for x in line.get_xdata()), (
            f"{line.get_label()} has a point left of every ε: an arbitrary edge"
        )
    assert main.get_xscale() == "log"


def test_a_single_pate_student_is_a_sentence_and_published_is_named_only_when_drawn(tmp_path):
    runs = load_pate_runs(build_pate_run(tmp_path / "run"))
    rows = pate_rows(runs)
    assert len(rows) == 1 and accuracy_epsilon_figure(rows) is None
    fig_block = [
        b for s in pate_sections(runs) for b in s.blocks if isinstance(b, Figure) and b.name == "pate-accuracy-epsilon"
    ][0]
    assert fig_block.figure is None and "one student only" in fig_block.empty and "published" not in fig_block.caption
    published = [{"label": "Papernot et al. 2018, MNIST", "epsilon": 1.97, "accuracy": 0.985}]
    with_pub = [
        b
        for s in pate_sections(runs, published=published)
        for b in s.blocks
        if isinstance(b, Figure) and b.name == "pate-accuracy-epsilon"
    ][0]
    assert with_pub.figure is not None and "hollow: published" in with_pub.caption
    hollow = [line for line in with_pub.figure.axes[0].get_lines() if line.get_markerfacecolor() == "none"]
    assert [line.get_label() for line in hollow] == ["published: Papernot et al. 2018, MNIST"]


def test_certified_comparison_tells_pixeldp_smoothing_from_the_smoothing_model(tmp_path):
    runs = load_certified_runs(build_certified_run(tmp_path / "run"))
    fig = comparison_figure(runs)
    # Each curve is an error-bar series (its certified count's interval), drawn model by model,
    # certificate by certificate.
    order = [(r.summary.defense, name) for r in runs for name in r.certificates]
    lines = {key: c.lines[0] for key, c in zip(order, fig.axes[0].containers, strict=True)}
    pixeldp_smooth, pixeldp_own = lines[("pixeldp", "smoothing")], lines[("pixeldp", "pixeldp")]
    model_smooth = lines[("smoothing", "smoothing")]
    # The legend names a model once: no model id where the labels differ, no certificate its label names.
    labels = [c.get_label() for c in fig.axes[0].containers]
    assert not any(r.summary.model_id in text for r in runs for text in labels)
    assert len(set(labels)) == len(labels)
    assert (
        to_hex(pixeldp_smooth.get_color()) != to_hex(model_smooth.get_color())
        and pixeldp_smooth.get_marker() != model_smooth.get_marker()
    )
    assert to_hex(pixeldp_smooth.get_color()) == to_hex(pixeldp_own.get_color())  # one model, one colour
    assert pixeldp_smooth.get_linestyle() != pixeldp_own.get_linestyle()


def test_estimate_shown_only_with_an_interval_that_excludes_zero():
    rng = np.random.default_rng(0)
    claim = gaussian_step_claim(noise_multiplier=1.0)
    chance = audit_from_scores(
        rng.normal(0, 1, 200), rng.normal(0, 1, 200), claim=claim, delta=1e-5, bound="clopper-pearson"
    )
    assert chance.epsilon_estimate > 0.3  # the best of many thresholds reads as leakage at chance
    low, high = chance.details.estimate_interval
    assert low == 0.0 and (high is None or high > chance.epsilon_estimate)
    [row] = _estimate_rows(chance)
    assert row[1] == "not shown" and "includes 0" in row[2]
    strong = audit_from_scores(
        rng.normal(3, 1, 200), rng.normal(0, 1, 200), claim=claim, delta=1e-5, bound="clopper-pearson"
    )
    low, high = strong.details.estimate_interval
    assert 0 < low <= strong.epsilon_estimate <= (math.inf if high is None else high)
    [row] = _estimate_rows(strong)
    assert row[1] == strong.epsilon_estimate and "95% interval" in row[2]


def test_estimate_interval_covers_the_estimate_and_reaches_zero_at_chance():
    rng = np.random.default_rng(1)
    for bound in ("clopper-pearson", "gdp"):
        low, high = estimate_interval(rng.normal(0, 1, 100), rng.normal(0, 1, 100), bound=bound, delta=1e-5)
        assert low == 0.0 and high > 0
        low, high = estimate_interval(rng.normal(4, 1, 300), rng.normal(0, 1, 300), bound=bound, delta=1e-5)
        assert 0 < low < high
