"""The check page leads with one diagnosis, labels saturated ε_LB and states a passed check's ceiling as what it is
(issue 46): the reviewer's buggy function (one bug, four violated checks, three at their design's ceiling)."""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import pytest

from dpaudit.app.runs.report import render_reports
from dpaudit.results.check import diagnosis
from dpaudit.results.grid_verdicts import check_verdict
from reports.check import _outcome_table, check_figure
from tests.check_samples import buggy_report, build_buggy_check_run


def test_the_verdict_leads_with_the_one_diagnosis_and_names_the_rest_as_the_same_bug():
    report = buggy_report()
    verdict = check_verdict(report)
    assert verdict.status == "violation" and verdict.tone == "alert"
    # One diagnosis: the grey-box cause, the only one of the four that names the faulty step.
    assert verdict.headline.startswith("Diagnosis: greybox-noise: the Gaussian draw #2 repeats draw #1")
    statistical = [o.name for o in report.violations if o.kind == "statistical"]
    assert len(statistical) == 3 and all(o.saturated for o in report.violations if o.kind == "statistical")
    assert "3 other checks also fired" in verdict.headline and all(n in verdict.headline for n in statistical)
    # The others are not four causes: no second "Diagnosis", and each statistical one says it is at its ceiling.
    assert verdict.headline.count("Diagnosis") == 1
    violated = [x for x in verdict.lines if x.startswith("violated")]
    assert [x.split(":")[0] for x in violated] == ["violated (diagnosis)", "violated", "violated", "violated"]
    assert [x.split(": ")[1] for x in violated] == [o.name for o in diagnosis(report)]
    for line in violated[1:]:
        assert "saturated: at its design's ceiling" in line and "ε_LB ≥ " in line


def test_a_passed_checks_ceiling_is_not_presented_as_its_power():
    verdict = check_verdict(buggy_report())
    (passed,) = [x for x in verdict.lines if x.startswith("passed")]
    assert "could reach" not in passed
    assert "ceiling" in passed and "2.4" in passed and "not its chance of flagging a given bug" in passed


def test_the_table_marks_the_diagnosis_and_every_saturated_lower_bound():
    report = buggy_report()
    table = _outcome_table(report)
    status = {r[0]: r[1] for r in table.rows}
    lb = {r[0]: str(getattr(r[2], "text", r[2])) for r in table.rows}
    assert status["greybox-noise"] == "VIOLATED (diagnosis)" and status["worst-case"] == "VIOLATED"
    assert {n for n, text in lb.items() if "saturated" in text} == {o.name for o in report.outcomes if o.saturated}
    assert lb["worst-case"] == "≥ 10.3 (saturated)" and lb["lot-size"] == "0"


@pytest.mark.extended  # renders the page with its figure (about 2 s idle)
def test_the_page_says_how_a_grey_box_check_is_violated_and_labels_saturated_values(tmp_path):
    run = build_buggy_check_run(tmp_path / "run")
    (page,) = render_reports(run).pages_of("checks")
    html = page.read_text(encoding="utf-8")
    intro = re.search(r'<p class="kind-note">(.*?)</p>', html, re.S).group(1)
    assert "grey-box check has no ε_LB" in intro and "deterministic finding" in intro
    table = html[html.index("<table") : html.index("</table>")]
    body = table[table.index("<tbody") :]
    assert "VIOLATED (diagnosis)" in body and body.count("saturated") == 3
    md = (run.reports_dir() / "check.md").read_text(encoding="utf-8")
    assert "deterministic finding" in md and "| worst-case | VIOLATED | ≥ 10.3 (saturated) |" in md


def test_the_figure_labels_a_saturated_bar_and_keys_only_bars_it_draws():
    outcomes = [o for o in buggy_report().outcomes if o.kind == "statistical"]
    fig = check_figure(outcomes)
    try:
        texts = [t.get_text() for t in fig.axes[0].texts]
        assert [("saturated" in t) for t in texts] == [o.saturated for o in outcomes]
        assert texts[0].startswith("≥ 10.3")
        # lot-size passed with ε_LB 0: its bar has no width, so "ε_LB, passed" is not in the legend.
        legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        assert not any("passed" in t for t in legend) and any("violated" in t for t in legend)
    finally:
        plt.close(fig)


def test_a_clean_battery_whose_statistical_checks_could_not_run_is_amber_and_says_so():
    # The reviewer's correct function: every grey-box replay passed, every statistical check ran no
    # training (ceiling 0). Green "no violation, 7 of 12 could have shown one" overstated the evidence.
    import dataclasses

    report = buggy_report()
    outcomes = tuple(
        dataclasses.replace(o, status="passed", epsilon_lb=0.0)
        if o.kind == "grey-box"
        else dataclasses.replace(o, status="inconclusive", epsilon_lb=0.0, ceiling=0.0, num_trials=0)
        for o in report.outcomes
    )
    quiet = dataclasses.replace(report, outcomes=outcomes)
    assert not quiet.violations
    grey = sum(o.kind == "grey-box" for o in outcomes)
    verdict = check_verdict(quiet)
    assert (verdict.status, verdict.tone) == ("no violation", "warn")
    assert f"{grey} grey-box replay" in verdict.headline and "statistical check" not in verdict.headline.split(";")[0]
    assert f"{len(outcomes) - grey} of {len(outcomes)} checks could not show a violation" in verdict.headline
    ran = dataclasses.replace(
        quiet,
        outcomes=tuple(
            o if o.kind == "grey-box" else dataclasses.replace(o, status="passed", ceiling=2.4, num_trials=100)
            for o in outcomes
        ),
    )
    assert check_verdict(ran).tone == "ok"
