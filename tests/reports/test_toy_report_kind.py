"""A report kind defined in a module of its own, with its verdict, appears in ``dpaudit report`` and passes the contract
suite.

The module is written into the test's temporary directory, imported, and registers itself the
way every kind in ``reports/`` does; nothing else changes to add it — its verdict lives beside it,
not in ``dpaudit/results/verdicts.py``. It lists the run's model records — stored results every
run has — beside the built-in trained-model page of each, and judges whether each claims a
privacy bound. It goes through the same contract as the built-in kinds, verdict box included.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from dpaudit.app.cli import main
from dpaudit.app.runs.report import render_reports
from dpaudit.store import RunDir
from reports.kinds import REPORT_KINDS, ReportKind
from tests.reports.conftest import NONPRIVATE_MODEL

MODULE = "toy_report_kind"
TOY_MODULE = '''
"""A toy report kind: the model records of a run, one row each, judged by whether each claims privacy."""

from dpaudit.results import load_record
from dpaudit.results.verdicts import Verdict
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.render import Section, Table, write_report_files
from reports.verdict_box import verdict_section, with_status


def load(run):
    records = tuple(load_record(d) for d in run.record_dirs())
    return [records] if records else []


def verdict(records):
    unclaimed = [r.model_id for r in records if not r.claim.epsilons(delta=1e-5)]
    if unclaimed:
        names = ", ".join(unclaimed)
        headline = f"{len(unclaimed)} of {len(records)} record(s) claim no privacy: {names}."
        return Verdict(status="unclaimed records", headline=headline, tone="warn")
    return Verdict(status="all claimed", headline=f"All {len(records)} record(s) claim a privacy bound.", tone="ok")


def render(records, out):
    rows = [[r.model_id, r.defense, r.claim.statement()] for r in records]
    table = Table(columns=["model", "defense", "claim"], rows=rows)
    sections = [BOX(verdict(records)), Section(title="Records", blocks=[table])]
    page = write_report_files(out, sections, title="The run's records", stem="toy-records").html
    return Page(html=page, link=with_status(f"toy: {len(records)} record(s)", sections))


BOX = verdict_section
KIND = REPORT_KINDS.register(
    ReportKind(name="toy_records", group="Toy: records", order=99, load=load, verdict=verdict, render=render)
)
'''


@contextmanager
def _toy_module(directory: Path, source: str = TOY_MODULE) -> Iterator[ReportKind]:
    """Imports the toy module from ``directory`` (it registers its kind) and unregisters the kind on exit."""
    path = directory / f"{MODULE}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(MODULE, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    try:
        spec.loader.exec_module(module)
        yield module.KIND
    finally:
        sys.modules.pop(MODULE, None)
        if REPORT_KINDS.get("toy_records") is getattr(module, "KIND", None):
            REPORT_KINDS.unregister("toy_records")


@pytest.fixture
def toy(tmp_path):
    (tmp_path / "module").mkdir()
    with _toy_module(tmp_path / "module") as kind:
        yield kind


@pytest.fixture
def records_only(tmp_path, write_record) -> RunDir:
    """A run holding one model record and no result (the built-in trained-model kind shows it too)."""
    run = RunDir(tmp_path / "run").create(command="test")
    write_record(run, "nonprivate")
    return run


def test_the_toy_kind_is_in_dpaudit_report_help(toy, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["report", "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the epilog
    assert "toy_records (Toy: records)" in out and "audits (" in out


def test_the_toy_kind_is_in_dpaudit_reports_output(toy, records_only, capsys):
    assert main(["report", str(records_only.path), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    page = records_only.reports_dir() / "toy-records.html"
    assert payload["toy_records"] == [str(page)]
    assert NONPRIVATE_MODEL in page.read_text(encoding="utf-8")
    index = Path(payload["index"])
    assert 'href="toy-records.html"' in index.read_text(encoding="utf-8") and "Toy: records" in index.read_text(
        encoding="utf-8"
    )
    # The nonprivate record claims no privacy: the toy's verdict says so, and the index names it beside the link.
    assert "[toy: 1 record(s) — unclaimed records](toy-records.md)" in index.with_suffix(".md").read_text(
        encoding="utf-8"
    )
    assert f"1 of 1 record(s) claim no privacy: {NONPRIVATE_MODEL}." in page.read_text(encoding="utf-8")
    # The plain listing names the page too, and the Python API has it under the kind's name.
    assert main(["report", str(records_only.path)]) == 0
    assert str(page) in capsys.readouterr().out
    assert render_reports(records_only).toy_records == (page,)


def test_the_toy_kind_passes_the_contract_suite(toy, records_only, monkeypatch, tmp_path, capsys):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # importlib mode keeps tests/ off sys.path
    from test_report_kind_contract import check_report_kind

    check_report_kind(toy, records_only, tmp_path, capsys)


def test_a_toy_kind_whose_page_omits_its_verdict_box_fails_the_contract(records_only, monkeypatch, tmp_path, capsys):
    # The same module with the box drawn as nothing: the contract the built-in kinds meet must refuse it.
    source = TOY_MODULE.replace("BOX = verdict_section", "BOX = lambda verdict: Section(title='Judgement', blocks=[])")
    (tmp_path / "module").mkdir()
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    from test_report_kind_contract import check_report_kind

    with _toy_module(tmp_path / "module", source) as kind, pytest.raises(AssertionError):
        check_report_kind(kind, records_only, tmp_path, capsys)


def test_a_kind_without_a_verdict_is_refused():
    with pytest.raises(TypeError, match="verdict"):
        ReportKind(
            name="toy_records", group="Toy: records", order=99, load=lambda run: [], render=lambda item, out: None
        )  # type: ignore[call-arg]


def test_the_toy_kind_is_gone_once_unregistered(records_only, tmp_path, capsys):
    with _toy_module(tmp_path) as kind:
        assert REPORT_KINDS["toy_records"] is kind
    assert "toy_records" not in REPORT_KINDS
    # Without it the same run renders only the built-in page of each record (issue 34), no toy page.
    assert main(["report", str(records_only.path)]) == 0
    out = capsys.readouterr().out
    assert "toy-records" not in out and "model-" in out
    assert "toy_records" not in dict(render_reports(records_only).kinds)
