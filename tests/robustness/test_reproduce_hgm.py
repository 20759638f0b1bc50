"""The HGM reproduction script runs end to end (tiny settings) and its comparisons are computed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reproduce_hgm.py"


@pytest.mark.slow  # trains several models and certifies each: the full certify reproduction
def test_reproduce_hgm_quick_tiny(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("reproduce_hgm", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    out = tmp_path / "hgm.json"
    code = mod.main(
        [
            "--quick",
            "--out",
            str(tmp_path / "run"),
            "--json",
            str(out),
            "--only",
            "pixeldp,hgm-matched-r1",
            "--num-members",
            "800",
            "--epochs",
            "8",
            "--draws",
            "60",
            "--num-examples",
            "30",
            "--eot-samples",
            "1",
        ]
    )
    printed = capsys.readouterr().out
    measured = json.loads(out.read_text())
    assert code == 0, printed  # 1 would mean a soundness violation
    assert set(measured["models"]) == {"pixeldp", "hgm-matched-r1"}
    assert "hgm-matched-r1_minus_pixeldp" in measured
    for row in measured["models"].values():  # every comparison rests on measured, stored numbers
        assert 0.0 <= row["conventional_accuracy"] <= 1.0 and row["soundness_violations"] == []
        assert 0.0 <= row["matched_test_accuracy"] <= 1.0
    assert (tmp_path / "run" / "reports" / "certified.html").is_file()
    assert "hgm-matched-r1 vs PixelDP" in printed
