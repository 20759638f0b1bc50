"""The PATE reproduction script runs end to end in quick mode and measures what it claims to."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reproduce_pate.py"


@pytest.mark.slow  # trains 20 teachers and two students, attacks them and plays the audit game (~40 s)
def test_reproduce_pate_quick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("reproduce_pate", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "reproduce_pate", mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    out = tmp_path / "pate.json"
    argv = [
        "--quick",
        "--out",
        str(tmp_path / "run"),
        "--json",
        str(out),
        "--only",
        "digits-confident-gnmax-semi,digits-gnmax-semi",
    ]
    assert (
        mod.main(
            [
                *argv,
                "--attack-samples",
                "150",
                "--shadows",
                "2",
                "--audit-seeds",
                "2",
                "--audit-trials",
                "50000",
                "--quiet",
            ]
        )
        == 0
    )
    measured = json.loads(out.read_text())
    rows = measured["rows"]
    assert set(rows) == {"digits-confident-gnmax-semi", "digits-gnmax-semi"}
    # the second row reused the first row's teachers
    assert rows["digits-gnmax-semi"]["teachers_trained"] == 0
    for row in rows.values():
        assert 0 < row["answered"] <= row["queries"] and row["epsilon"] <= row["epsilon_data_independent"]
        assert row["data_dependent"] is True and row["sanitised"] is False
    # every planted aggregator bug is flagged and the correct aggregators never are
    for audit in measured["audits"]:
        assert audit["flagged"] == (0 if audit["planted_bug"] == "none" else audit["seeds"]), audit
    # the attacked student's ε_LB never exceeds its claim
    attacks = measured["attacks"]
    assert all(s["epsilon_lb"] <= attacks["epsilon_ub_student"] for s in attacks["student"].values())
    assert Path(measured["report"]).is_file()
    # a rerun trains nothing
    assert mod.main([*argv, "--no-attacks", "--quiet"]) == 0
    assert all(r["reused"] for r in json.loads(out.read_text())["rows"].values())
