"""The report-kind contract: one table of assertions over every registered report kind.

Parametrised over :data:`reports.kinds.REPORT_KINDS` at collection, so a kind that registers
itself in ``reports/`` is checked here as soon as it exists; its sample run comes from
``REPORT_SAMPLES`` in this folder's conftest. :func:`check_report_kind` is the contract itself,
for tests that bring a kind and a sample run of their own (``test_toy_report_kind.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from markupsafe import escape

from dpaudit.app.cli import main
from dpaudit.app.runs.report import render_reports
from dpaudit.results.verdicts import Verdict
from dpaudit.store import RunDir
from reports.kinds import REPORT_KINDS, ReportKind, ordered_kinds

KINDS = sorted(REPORT_KINDS)


def _report_json(run: RunDir, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    code = main(["report", str(run.path), "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out)


def check_report_kind(kind: ReportKind, run: RunDir, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[Path]:
    """What every report kind does, on a run directory that holds a sample of what it shows.

    An empty run gives it nothing to render (and is no error); the sample gives it at least one
    item; ``dpaudit report`` writes one non-empty HTML page with its Markdown twin per item,
    lists the pages under the kind's name, links each from both indexes under the kind's
    heading, and exits 3 exactly when a page reports a stored violation; every page opens with
    one verdict box, the one the kind's ``verdict`` judges its item to (:func:`check_verdict_boxes`);
    a second rendering writes the same bytes and :class:`~dpaudit.app.runs.report.ReportIndex`
    names the same pages. Returns the kind's HTML pages.
    """
    assert REPORT_KINDS[kind.name] is kind
    assert list(kind.load(RunDir(tmp_path / "empty").create(command="test"))) == []
    items = list(kind.load(run))
    assert items, f"the sample run {run.path} holds nothing report kind {kind.name!r} shows"
    code, payload = _report_json(run, capsys)
    pages = [Path(p) for p in payload[kind.name]]
    assert len(pages) == len(items) and all(p.parent == run.reports_dir() for p in pages)
    assert code == (3 if payload["violations"] else 0)
    index_html = Path(payload["index"]).read_text(encoding="utf-8")
    index_md = Path(payload["index"]).with_suffix(".md").read_text(encoding="utf-8")
    assert kind.group in index_html and kind.group in index_md
    for page in pages:
        assert page.suffix == ".html" and "<html" in page.read_text(encoding="utf-8").lower()
        assert page.with_suffix(".md").read_text(encoding="utf-8").strip()
        assert f'href="{page.name}"' in index_html
        assert f"({page.with_suffix('.md').name})" in index_md
    check_verdict_boxes(pages, Path(payload["index"]))
    # The box each page opens with is the kind's own verdict of its item, not one the page made up.
    for item, page in zip(items, pages, strict=True):
        verdict = kind.verdict(item)
        assert isinstance(verdict, Verdict), f"{kind.name}.verdict returned {type(verdict).__name__}, not a Verdict"
        html = page.read_text(encoding="utf-8")
        assert f'<p class="verdict-status">{escape(verdict.status)}</p>' in html, page
        assert escape(verdict.headline) in html, page
    first = {p.name: p.read_bytes() for p in run.reports_dir().iterdir()}
    index = render_reports(run)
    assert index.pages_of(kind.name) == getattr(index, kind.name) == tuple(pages)
    assert {p.name: p.read_bytes() for p in run.reports_dir().iterdir()} == first
    return pages


def check_verdict_boxes(pages: list[Path], index_html: Path) -> None:
    """Issue 34: every page opens with exactly one verdict box (HTML and Markdown), and the index names its status
    beside the link."""
    index = index_html.read_text(encoding="utf-8")
    for page in pages:
        html, md = page.read_text(encoding="utf-8"), page.with_suffix(".md").read_text(encoding="utf-8")
        assert html.count('class="verdict verdict-') == 1 and html.index('class="verdict verdict-') < html.index(
            "<h2>"
        ), page
        status = html.split('<p class="verdict-status">', 1)[1].split("</p>", 1)[0]
        assert (
            md.count("> **Verdict — ") == 1
            and f"> **Verdict — {status}.**" in md
            and md.index("> **Verdict") < md.index("\n## ")
        ), page
        assert f"— {status}</a>" in index, page


@pytest.mark.extended
@pytest.mark.parametrize("name", KINDS)
def test_report_kind_contract(name, report_samples, tmp_path, capsys):
    if name not in report_samples:
        pytest.fail(
            f"report kind {name!r} has no sample run: add a builder to REPORT_SAMPLES in tests/reports/conftest.py"
        )
    run = report_samples[name](tmp_path / "run")
    check_report_kind(REPORT_KINDS[name], run, tmp_path, capsys)


def test_the_index_keeps_its_order_and_every_kind_its_own_heading():
    kinds = [k.name for k in ordered_kinds()]
    # The order the index had before kinds registered themselves (stored runs re-render identically).
    builtin = ["compare", "audits", "membership", "certified", "pate", "inversion"]
    assert [k for k in kinds if k in builtin] == builtin
    assert len({k.group for k in ordered_kinds()}) == len(kinds)


@pytest.mark.extended
def test_a_compare_violation_is_reported_and_exits_3(report_samples, tmp_path, capsys):
    run = report_samples["compare"](tmp_path / "run")
    code, payload = _report_json(run, capsys)
    assert code == 3
    assert payload["violations"] == [
        "compare grid / dpsgd-target_epsilon=1: violation: epsilon_lb 1.5 > epsilon_ub 1 (pld)"
    ]


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("name", "two words", "identifier"),
        ("name", "tables", "uses for itself"),
        ("group", "", "group"),
        ("order", 1.5, "order"),
        ("load", None, "load"),
        ("verdict", "violation", "verdict"),
    ],
)
def test_a_malformed_kind_is_refused(field, value, match):
    fields = {
        "name": "toy",
        "group": "Toy",
        "order": 1,
        "load": lambda run: [],
        "verdict": lambda item: None,
        "render": lambda item, out: None,
    }
    with pytest.raises((ValueError, TypeError), match=match):
        ReportKind(**{**fields, field: value})
