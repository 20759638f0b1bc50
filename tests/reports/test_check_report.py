"""The ``checks`` report kind: the battery's verdict box, one row per check, the ε figure, and ``dpaudit report`` on a
check run."""

from __future__ import annotations

import json
import re

import pytest

from dpaudit.app.cli import main
from dpaudit.app.runs.report import render_reports
from reports.check import check_figure, load_checks
from reports.kinds import REPORT_KINDS
from tests.browser import assert_clean
from tests.check_samples import EPSILON_UB, build_check_run, sample_report


def _page(run) -> str:
    (page,) = render_reports(run).pages_of("checks")
    return page.read_text(encoding="utf-8")


def test_the_verdict_box_names_the_violated_check_in_red_before_the_table(tmp_path):
    html = _page(build_check_run(tmp_path / "run"))
    box = re.search(r'<section class="verdict verdict-alert"[^>]*>(.*?)</section>', html, re.S)
    assert box is not None, "no red verdict box"
    headline = re.search(r'<p class="verdict-headline">(.*?)</p>', box.group(1), re.S)
    assert headline is not None and "worst-case" in headline.group(1) and ">violation<" in box.group(1)
    # the passed and the inconclusive check are not named as violations
    assert "lot-size" not in headline.group(1) and "reused-noise" not in headline.group(1)
    assert html.index('class="verdict verdict-alert"') < html.index("<table")
    assert "inconclusive: reused-noise" in html and "ceiling 0.6" in html


def test_a_run_without_violation_has_no_red_box_and_is_amber_while_a_check_is_inconclusive(tmp_path):
    # The sample's reused-noise check is inconclusive: the all-clear rests on the other checks only, so it
    # is amber and says so (a green box is for a battery every check of which could have shown a violation).
    html = _page(build_check_run(tmp_path / "run", violated=False))
    assert 'class="verdict verdict-warn"' in html and 'class="verdict verdict-alert"' not in html
    assert "No violation" in html and "1 of 3 checks could not show a violation" in html


def test_one_row_per_check_with_every_column(tmp_path):
    run = build_check_run(tmp_path / "run")
    html = _page(run)
    table = html[html.index("<table") : html.index("</table>")]
    header = re.findall(r"<th(?: [^>]*)?>(.*?)</th>", table)
    assert header == ["check", "status", "ε_LB", "ε_UB", "ceiling", "trainings", "seconds", "detects", "misses"]
    rows = re.findall(r"<tr><td[^>]*>([^<]*)</td>", table)
    assert rows == ["worst-case", "lot-size", "reused-noise"]
    assert "what lot-size is designed to detect" in table and "what reused-noise cannot see" in table
    md = (run.reports_dir() / "check.md").read_text(encoding="utf-8")
    assert "| worst-case | VIOLATED | 4.1 |" in md and "| reused-noise | inconclusive |" in md


def test_the_figure_draws_one_bar_per_check_the_claim_and_each_ceiling():
    outcomes = sample_report().outcomes
    fig = check_figure(outcomes)
    ax = fig.axes[0]
    bars = [p for p in ax.patches]
    assert [round(b.get_width(), 6) for b in bars] == [o.epsilon_lb for o in outcomes]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    ub = next(ln for label, ln in lines.items() if label.startswith("ε_UB"))
    assert list(ub.get_xdata()) == [EPSILON_UB, EPSILON_UB]
    ceiling = next(ln for label, ln in lines.items() if label.startswith("ceiling"))
    assert list(ceiling.get_xdata()) == [o.ceiling for o in outcomes]
    by_height = sorted(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels())), reverse=True)
    assert [name for _, name in by_height] == [o.name for o in outcomes]  # the first check on top, as in the table
    assert check_figure(()) is None


def test_dpaudit_report_on_a_check_run_renders_the_page_and_exits_3(tmp_path, capsys):
    run = build_check_run(tmp_path / "run")
    code = main(["report", str(run.path), "--json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 3
    assert payload["checks"] == [str(run.reports_dir() / "check.html")]
    assert payload["violations"] == [f"check {sample_report().outcome('worst-case').finding}"]
    assert (run.reports_dir() / "check-epsilon.png").is_file()
    assert REPORT_KINDS["checks"].group in (run.reports_dir() / "index.html").read_text(encoding="utf-8")


def test_a_passing_check_run_reports_exit_0(tmp_path, capsys):
    run = build_check_run(tmp_path / "run", violated=False)
    assert main(["report", str(run.path)]) == 0
    assert "check.html" in capsys.readouterr().out


def test_a_corrupt_check_json_is_one_line_naming_the_file(tmp_path, capsys):
    run = build_check_run(tmp_path / "run")
    path = run.path / "checks" / "check.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "delta": -1}))
    with pytest.raises(ValueError, match="delta"):
        load_checks(run)


@pytest.mark.extended
def test_the_page_renders_cleanly_in_chromium(tmp_path, check_page):
    run = build_check_run(tmp_path / "run")
    (page,) = render_reports(run).pages_of("checks")
    report = check_page(page)
    assert_clean(report)
    assert report.num_images == 1 and report.num_cells > 0


def test_a_check_that_could_not_run_says_why_not_what_size_it_needed(tmp_path):
    from dpaudit.results.check import CheckReport, save_check_report
    from dpaudit.store import RunDir
    from tests.check_samples import outcome

    base = outcome("worst-case", "inconclusive", epsilon_lb=0.0, ceiling=0.0, num_trials=0)
    cannot = type(base)(**{**base.to_dict(), "finding": "worst-case: could not run: no --model-fn"})
    fields = {
        k: v
        for k, v in sample_report().to_dict().items()
        if k in ("train_fn", "model_fn", "claim_description", "delta", "confidence", "budget_minutes", "seconds")
    }
    run = RunDir(tmp_path / "run").create(command="test")
    save_check_report(CheckReport(**fields, outcomes=(cannot,)), run.path / "checks")
    html = _page(run)
    assert "inconclusive: worst-case: could not run: no --model-fn" in html and "more budget" not in html


def test_the_table_rounds_each_bound_its_safe_way_like_the_verdict_box():
    """ε_LB 3.6458 and a ceiling of 10.2974 once read 3.65 and 10.3 in the table under a verdict box
    saying 3.64 and 10.2: a lower bound printed above its value. ε_UB 0.97082 reads 0.971 (up)."""
    from dataclasses import replace

    from reports.check import _outcome_table
    from tests.check_samples import outcome

    report = replace(sample_report(), outcomes=(outcome("lot-size", "violated", epsilon_lb=3.6458, ceiling=10.2974),))
    (row,) = _outcome_table(report).rows
    lb, ub, ceiling = (str(getattr(c, "text", c)) for c in row[2:5])
    assert (lb, ceiling) == ("3.64", "10.2")
    assert float(lb) <= 3.6458 and float(ceiling) <= 10.2974 and float(ub) >= report.outcomes[0].epsilon_ub
