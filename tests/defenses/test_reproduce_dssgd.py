"""The DSSGD reproduction script runs end to end in quick mode and measures what it claims to."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reproduce_dssgd.py"


@pytest.mark.slow  # trains a dozen 2-round MNIST federations, shadows, two Ray federations (~2 min)
def test_reproduce_dssgd_quick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_data: Path) -> None:
    spec = importlib.util.spec_from_file_location("reproduce_dssgd", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "reproduce_dssgd", mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    out = tmp_path / "dssgd.json"
    argv = ["--quick", "--out", str(tmp_path / "run"), "--json", str(out), "--data-root", str(shared_data), "--quiet"]
    assert mod.main(argv) == 0
    measured = json.loads(out.read_text())
    rows = {(r["participants"], r["row"]): r for r in measured["accuracy"]}
    assert {(30, "centralised"), (30, "standalone"), (30, "theta_u=1"), (30, "theta_u=0.001")} <= set(rows)
    assert all(0.0 <= r["accuracy"] <= 1.0 for r in rows.values())
    (dp,) = measured["dp"]
    # the composed guarantee is c uploads x rounds of the per-parameter figure (pure composition)
    assert dp["epsilon_pure"] == pytest.approx(
        dp["epsilon_per_parameter"] * dp["uploads_per_turn"] * dp["rounds"], rel=1e-9
    )
    assert dp["epsilon_zcdp"] <= dp["epsilon_pure"]
    leak = {(r["examples_per_turn"], r["setting"]): r for r in measured["attacks"]["turn_leakage"]}
    assert leak[(1, "theta_u=1")]["best_ssim"] > 0.99 and leak[(1, "theta_u=1")]["recognised_share"] == 1.0
    assert leak[(1, "dp eps=1 (theta_u=0.1)")]["best_ssim"] < leak[(1, "theta_u=0.1")]["best_ssim"]
    assert {r["model"] for r in measured["attacks"]["membership"]} == {"global", "participant 0 (local)"}
    assert all(
        a["epsilon_lb"] <= float(a["epsilon_ub_turn"]) for a in measured["attacks"]["audit"]
    )  # JSON writes inf as "inf"
    assert [t["workers"] for t in measured["timing"]] == [1, 2] and measured["timing"][1]["speedup_per_round"] > 0
