"""Issue 43, part B: ``dpaudit report`` verifies everything it renders.

A hostile review edited stored files and re-rendered: a comparison row with ε_LB 999 against
ε_UB 3.19 appeared under "No violation" (exit 0); records with a tampered dataset, class count,
input shape or epochs rendered (exit 0) where ``attack`` refuses them (exit 2); a membership
result naming an absolute or ``../..`` model id made the page show another run's record; a
tampered link rendered ``<a href="javascript:…">``; the Markdown twin carried raw ``<script>``
from a grid label. Each case here damages a copy of a stored sample run (no training but the
hostile suite's one-epoch run, made once per session) and runs the real command line: exit 2,
one line naming the file and the field, no page written — or, for text, the page escapes it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.hostile.test_records import edit_record, one_line_error, record_dir
from tests.reports.conftest import build_compare_run, build_run


def _edit_json(path: Path, change: Any) -> Path:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return path


def _report(cli, run: Path) -> tuple[int, str, str]:
    """``dpaudit report RUN`` on a run whose earlier pages (``attack`` writes its own) are removed first."""
    shutil.rmtree(run / "reports", ignore_errors=True)
    return cli.run("report", str(run))


def _pages(run: Path) -> list[Path]:
    return sorted((run / "reports").glob("*.html")) if (run / "reports").is_dir() else []


@pytest.fixture
def compared(tmp_path: Path) -> Path:
    """The report suite's stored comparison: a baseline and a DP-SGD row stored as a violation."""
    return build_compare_run(tmp_path / "run").path


def _comparison(run: Path) -> Path:
    return run / "compare" / "grid" / "comparison.json"


# ---------------------------------------------------------------- results that contradict themselves
def _hide_violation(data: dict) -> None:
    # The review's edit: ε_LB 999 against ε_UB 3.19, and the verdict the banner is built from left at "no violation".
    row = data["rows"][1]
    row.update(epsilon_lb=999.0, epsilon_ub={"pld": 3.19, "rdp": 3.4}, verdict="no violation", findings=[])


def test_a_comparison_row_with_eps_lb_above_eps_ub_under_no_violation_is_refused(cli, compared):
    path = _edit_json(_comparison(compared), _hide_violation)
    code, _, err = _report(cli, compared)
    one_line_error(
        code,
        err,
        str(path),
        "rows[1] ('dpsgd-target_epsilon=1')",
        "verdict='no violation'",
        "epsilon_lb=999 > its tightest epsilon_ub=3.19",
    )
    assert not _pages(compared)


def test_a_comparison_row_below_its_own_attacks_eps_lb_is_refused(cli, compared):
    # The row's ε_LB is the maximum over its attacks: lowering it alone hides the violation the attack table still
    # shows.
    path = _edit_json(
        _comparison(compared), lambda d: d["rows"][1].update(epsilon_lb=0.1, verdict="no violation", findings=[])
    )
    code, _, err = _report(cli, compared)
    one_line_error(code, err, str(path), "epsilon_lb=0.1 below its attack 'loss''s epsilon_lb=1.5")
    assert not _pages(compared)


@pytest.fixture
def audited(tmp_path: Path) -> Path:
    """The report suite's stored audit (ε_LB 0.4 against the claim's ε_UB) with its DP-SGD record."""
    return build_run(tmp_path / "run", membership=False, certify=False).path


@pytest.mark.extended
def test_an_audit_storing_no_violation_beside_eps_lb_above_eps_ub_is_refused(cli, audited):
    path = _edit_json(
        audited / "audits" / "multi" / "result.json", lambda d: d.update(epsilon_lb=999.0, violation=False)
    )
    code, _, err = _report(cli, audited)
    one_line_error(code, err, str(path), "violation=false", "epsilon_lb=999 >")
    assert not _pages(audited)


def test_an_audit_whose_eps_ub_differs_from_its_own_accountants_is_refused(cli, audited):
    # ε_UB raised to 50 clears ε_LB on the banner while the accountant table still lists the claim's.
    path = _edit_json(audited / "audits" / "multi" / "result.json", lambda d: d.update(epsilon_ub=50.0))
    code, _, err = _report(cli, audited)
    one_line_error(code, err, str(path), "epsilon_ub=50 differs from epsilon_ub_by_accountant.")
    assert not _pages(audited)


# ------------------------------------------------------------------ records, as attack verifies them
TAMPERED_RECORDS = [
    ("dataset", "mnist", "input_shape=1x8x8 does not match dataset 'mnist' input shape 1x28x28"),
    ("num_classes", 12, "num_classes=12 does not match dataset 'digits' num_classes=10"),
    ("input_shape", [1, 9, 9], "input_shape=1x9x9 does not match dataset 'digits' input shape 1x8x8"),
    ("config.epochs", 2, "the id of its config, model options, seed and number of members"),
]


@pytest.mark.parametrize("field, value, shown", TAMPERED_RECORDS, ids=[t[0] for t in TAMPERED_RECORDS])
def test_report_refuses_a_record_attack_refuses(cli, reported, field, value, shown):
    def change(data: dict) -> dict:
        node, keys = data, field.split(".")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
        return data

    path = edit_record(reported, change)
    # What attack says of the record, report says too.
    code, _, err = cli.run(
        "attack",
        "membership",
        "--target",
        str(reported),
        "--attack",
        "loss",
        "--out",
        str(reported / "again"),
        "--quiet",
    )
    one_line_error(code, err, str(path), shown)
    code, _, err = _report(cli, reported)
    one_line_error(code, err, str(path), shown)
    assert not _pages(reported)


# -------------------------------------------------------------- references resolved inside the run only
@pytest.fixture
def elsewhere(reported: Path, tmp_path: Path) -> Path:
    """Another run's record (a copy of the same non-private one), outside the run reported."""
    other = Path(shutil.copytree(record_dir(reported), tmp_path / "other-run" / "records" / record_dir(reported).name))
    return other


def _membership_result(run: Path) -> Path:
    (only,) = sorted((run / "attacks" / "membership").glob("*/*.json"))
    return only


@pytest.mark.parametrize("how", ["absolute", "dotdot", "glob"])
def test_a_membership_result_naming_a_model_outside_the_run_is_refused(cli, reported, elsewhere, how):
    # A glob pattern would pick whichever sub-model record the lookup's glob meets first.
    target = {"absolute": str(elsewhere), "dotdot": os.path.relpath(elsewhere, reported / "records"), "glob": "*"}[how]
    path = _edit_json(_membership_result(reported), lambda d: d.update(model_id=target))
    code, _, err = _report(cli, reported)
    one_line_error(
        code, err, str(path), f"model_id={target!r} is not a plain model id", "only inside the run directory"
    )
    assert not _pages(reported)


def test_a_membership_result_naming_another_target_than_its_directory_is_refused(cli, reported):
    path = _edit_json(
        _membership_result(reported), lambda d: d.update(model_id="dpsgd-digits-digits-mlp-seed0-00000000")
    )
    code, _, err = _report(cli, reported)
    one_line_error(code, err, str(path), "does not match its directory")


def test_a_record_linked_in_from_outside_the_run_is_refused(cli, reported, elsewhere):
    inside = record_dir(reported)
    shutil.rmtree(inside)
    inside.symlink_to(elsewhere, target_is_directory=True)
    code, _, err = _report(cli, reported)
    one_line_error(code, err, str(inside), "is a symbolic link to", "outside the run directory")
    assert not _pages(reported)


# ----------------------------------------------------------------------- links and text on the pages
@pytest.mark.parametrize(
    "href",
    ["javascript:alert(1)", "../../../../etc/passwd", "/etc/passwd", "https://example.org/x.html", "a/../../b.html"],
)
def test_a_tampered_link_is_refused(cli, compared, href):
    path = _edit_json(_comparison(compared), lambda d: d["rows"][1].update(links={"membership": href}))
    code, _, err = _report(cli, compared)
    one_line_error(
        code, err, str(path), "rows[1].links.membership=", "is not a relative path inside the run's reports folder"
    )
    assert not _pages(compared)


LABEL = "<script>alert(1)</script> | `code` [x](javascript:y) & co"


@pytest.mark.extended
def test_grid_labels_are_escaped_in_the_markdown_twin_as_in_the_html(cli, compared):
    path = _edit_json(_comparison(compared), lambda d: d["rows"][1].update(label=LABEL))
    code, _, err = _report(cli, compared)
    assert code == 3, err  # the row's stored violation stands
    html = (compared / "reports" / "compare-grid.html").read_text(encoding="utf-8")
    md = (compared / "reports" / "compare-grid.md").read_text(encoding="utf-8")
    assert "<script>" not in html and "&lt;script&gt;" in html
    # In the twin's own text: no unescaped tag opener, no unescaped link bracket.
    assert not re.search(r"(?<!\\)<script", md) and not re.search(r"(?<!\\)\]\(javascript:", md), path
    # Every table row of the twin keeps its column count: the label's pipe is escaped, not a new cell.
    for table in re.findall(r"(?:^\|.*\|\n)+", md, flags=re.M):
        widths = {len(re.split(r"(?<!\\)\|", line)) for line in table.splitlines()}
        assert len(widths) == 1, table
    # A CommonMark renderer (an independent reading of the twin) shows the label as text: no tag, no link, no code.
    markdown_it = pytest.importorskip("markdown_it")
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").render(md)
    assert "<script>" not in rendered and 'href="javascript:' not in rendered and "<code>code</code>" not in rendered
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rendered


def test_a_certify_summary_hiding_a_soundness_violation_is_refused(cli, tmp_path):
    # The stored certificates claim more than the stored attacks leave; the summary says none does.
    from dpaudit.results import CertificationResult, save_certification_result

    run = build_run(tmp_path / "run", audits=False, membership=False).path
    (d,) = sorted((run / "certify").iterdir())
    labels = np.arange(30) % 10
    for p in d.glob("certify-*"):
        p.unlink()
    save_certification_result(
        CertificationResult(
            method="hgm",
            norm="l2",
            labels=labels,
            predictions=labels.copy(),
            radii=np.full(30, 0.35),
            num_draws=100,
            confidence=0.95,
            config={},
        ),
        d,
    )
    code, _, err = _report(cli, run)
    # Every example certified at 0.35, yet the attacks broke 10 of 30 at 0.3: certified 100% > robust 66.7%.
    one_line_error(
        code,
        err,
        str(d / "summary.json"),
        "stores soundness_violations=[]",
        "'hgm' certifies 1.000 at radius 0.3 > 0.667",
    )
    assert not _pages(run)
