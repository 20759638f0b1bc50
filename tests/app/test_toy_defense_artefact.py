"""A defense that keeps a file of its own beside its weights declares it in its one module, and the reports follow the
declaration.

The toy module below registers a defense whose records hold ``trace.json`` (its loss per step)
and, in a second variant, names a report kind of its own — as PATE declares ``pate.npz`` and its
``pate`` page. Nothing outside the module names the toy: the trained-model page lists the
declared file and says whether the record holds it, and a record the toy's report kind shows (it
holds the required file) is kept off the trained-model page; without the file, or once the toy
is unregistered, it is back there. Records are written as a training leaves them (``record.json``
beside the artefact), so no training runs here.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from defenses import DEFENSES
from defenses.registry import DefenseSpec
from dpaudit.app.runs.report import render_reports
from dpaudit.parts import Artefact, PlotStyle, defense_parts, part_style, record_report_kind
from dpaudit.store import RunDir, atomic_write_json, safe_stem
from reports.figures import colour, style
from reports.train import load_trained_models
from tests.reports.conftest import _record as write_record
from tests.reports.conftest import trained, with_true_id

MODULE = "toy_traced_defense_of_a_test"
TOY_MODULE = '''
"""A toy defense that keeps its loss per step beside the weights (a test's own)."""

from dataclasses import dataclass

from defenses.nonprivate import train_nonprivate
from defenses.registry import DEFENSES, DefenseSpec
from dpaudit.parts import Artefact, PlotStyle


@dataclass(frozen=True, kw_only=True)
class TracedConfig:
    epochs: int = 1


SPEC = DEFENSES.register(
    DefenseSpec(
        name="traced",
        summary="a test's own defense with a file of its own",
        config_type=TracedConfig,
        train=train_nonprivate,
        claim_kind="nonprivate",
        artefacts=(Artefact(name="trace.json", what="the training loss after each step", required=True),),
        report_kind=REPORT_KIND,
        style=PlotStyle(colour="#117733", marker="p", dash="--"),
    )
)
'''


@contextmanager
def _toy(directory: Path, *, report_kind: str | None) -> Iterator[DefenseSpec]:
    """Imports the toy module (it registers ``traced``) and unregisters it on exit."""
    path = directory / f"{MODULE}.py"
    path.write_text(f"REPORT_KIND = {report_kind!r}\n" + TOY_MODULE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(MODULE, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    try:
        spec.loader.exec_module(module)
        yield module.SPEC
    finally:
        sys.modules.pop(MODULE, None)
        if "traced" in DEFENSES:
            DEFENSES.unregister("traced")


def _write(run: RunDir, *, with_trace: bool, seed: int) -> Path:
    """A toy record as its training leaves it: ``record.json``, and ``trace.json`` beside it when ``with_trace``."""
    record = with_true_id(dataclasses.replace(trained("traced", metrics={"test_accuracy": 0.9}), seed=seed))
    d = run.record_dir(record.model_id)
    atomic_write_json(d / "record.json", record.to_dict())
    if with_trace:
        atomic_write_json(d / "trace.json", {"loss": [2.3, 1.1, 0.7]})
    return d


def test_the_toy_declares_its_file_and_the_core_reads_it_by_name(tmp_path):
    with _toy(tmp_path, report_kind=None) as spec:
        assert DEFENSES["traced"] is spec and defense_parts("traced") is spec
        (artefact,) = spec.artefacts
        assert artefact.name == "trace.json" and artefact.required
        # Its plot style is its spec's, in every figure.
        assert part_style("traced") == PlotStyle(colour="#117733", marker="p", dash="--")
        assert colour("Traced") == "#117733" and style("traced") == {
            "color": "#117733",
            "marker": "p",
            "linestyle": "--",
        }
    assert defense_parts("traced") is None and part_style("traced") is None


def test_the_trained_model_page_lists_the_declared_file(tmp_path):
    run = RunDir(tmp_path / "run").create(command="test")
    with _toy(tmp_path, report_kind=None):
        held = _write(run, with_trace=True, seed=0)
        index = render_reports(run)
    page = run.reports_dir() / f"model-{safe_stem(held.name, default='model')}.html"
    assert index.models == (page,)
    html = page.read_text(encoding="utf-8")
    assert "Files beside the weights" in html and "trace.json" in html and "the training loss after each step" in html
    # A record of a defense that declares no file has no such section (the built-in pages keep their bytes).
    dp = RunDir(tmp_path / "dp").create(command="test")
    write_record(dp, "nonprivate")
    (nonprivate_page,) = render_reports(dp).models
    assert "Files beside the weights" not in nonprivate_page.read_text(encoding="utf-8")


def test_a_record_its_report_kind_shows_is_kept_off_the_trained_model_page(tmp_path):
    run = RunDir(tmp_path / "run").create(command="test")
    with _toy(tmp_path, report_kind="traces"):
        held = _write(run, with_trace=True, seed=0)
        bare = _write(run, with_trace=False, seed=1)
        assert record_report_kind("traced", held) == "traces"
        # Without the required file the record is one for the generic page, as a PATE record without pate.npz.
        assert record_report_kind("traced", bare) is None
        assert [d for _, d in load_trained_models(run)] == [bare]
    # Once the toy is gone nothing claims either record: both are on the trained-model page.
    assert record_report_kind("traced", held) is None
    assert sorted(d for _, d in load_trained_models(run)) == sorted([held, bare])


def test_the_built_in_defenses_declare_their_files_and_pages():
    # What the PATE and DSSGD reports and runs used to recognise by the defense's name.
    assert {a.name for a in DEFENSES["pate"].artefacts} == {"pate.npz", "pate.json", "private/"}
    assert [a.name for a in DEFENSES["pate"].artefacts if a.required] == ["pate.npz"]
    assert [a.name for a in DEFENSES["dssgd"].artefacts] == ["uploads.npz"]
    assert (DEFENSES["pate"].report_kind, DEFENSES["dssgd"].report_kind) == ("pate", "dssgd")
    assert (DEFENSES["pate"].run_module, DEFENSES["dssgd"].run_module) == (
        "dpaudit.app.runs.pate",
        "dpaudit.app.runs.dssgd",
    )


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("artefacts", (Artefact(name="a.npz", what="x"), Artefact(name="a.npz", what="y")), "once"),
        ("artefacts", (Artefact(name="record.json", what="x"),), "own files"),
        ("artefacts", ("pate.npz",), "Artefact"),
        ("report_kind", "two words", "report_kind"),
        ("run_module", "defenses.pate", "run_module"),
        ("style", {"colour": "#000000"}, "PlotStyle"),
    ],
)
def test_a_malformed_declaration_is_refused(field, value, match):
    fields = {
        "name": "bad",
        "summary": "s",
        "config_type": object,
        "train": lambda **kw: None,
        "claim_kind": "nonprivate",
    }
    with pytest.raises((ValueError, TypeError), match=match):
        DefenseSpec(**{**fields, field: value})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "../up.npz", "what": "x"}, "inside the record"),
        ({"name": "/abs.npz", "what": "x"}, "inside the record"),
        ({"name": "", "what": "x"}, "name"),
        ({"name": "a.npz", "what": ""}, "what"),
    ],
)
def test_a_malformed_artefact_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Artefact(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"colour": "red", "marker": "o"}, "colour"),
        ({"colour": "#000000", "marker": ""}, "marker"),
        ({"colour": "#000000", "marker": "o", "dash": "~"}, "dash"),
    ],
)
def test_a_malformed_plot_style_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PlotStyle(**kwargs)
