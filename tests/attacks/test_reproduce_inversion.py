"""The inversion reproduction script runs end to end in quick mode and reports what it claims to."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reproduce_inversion.py"


@pytest.mark.slow  # trains two face targets, an evaluator and a tiny GAN, inverts 20 identities twice (~1-2 min)
def test_reproduce_inversion_quick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dpaudit.data import dataset_info

    if not next(i for i in dataset_info() if i.name == "faces-1-20").available:
        pytest.skip("the ORL faces are not under the data root")
    spec = importlib.util.spec_from_file_location("reproduce_inversion", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "reproduce_inversion", mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    out = tmp_path / "inversion.json"
    argv = ["--quick", "--only", "faces-1-20", "--out", str(tmp_path / "run"), "--json", str(out), "--quiet"]
    assert mod.main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {r["target"] for r in rows} >= {"softmax, non-private", "softmax, DP-SGD eps=1"}
    for row in rows:
        assert set(row["attacks"]) == {"mi-face", "gmi"}
        for a in row["attacks"].values():
            assert 0.0 <= a["attack_accuracy_top1"] <= a["attack_accuracy_top5"] <= 1.0
            assert a["chance"] == pytest.approx(1 / 20)
            assert a["membership"]["epsilon_lb"] <= (row["epsilon_ub"] if row["defense"] == "dpsgd" else float("inf"))
    run = tmp_path / "run"
    assert (run / "reports" / "inversion.html").is_file()
    # One evaluator and one GAN for the whole setting, reused by every target.
    cached = sorted(p.name.split("-")[0] for p in (run / "attacks" / "inversion" / "models").iterdir())
    assert cached == ["evaluator", "gan"]
