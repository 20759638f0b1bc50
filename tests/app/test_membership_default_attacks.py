"""``attack membership`` without ``--attack`` runs the shadow-free attacks (issue 48, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attacks.membership import MEMBERSHIP_ATTACKS
from dpaudit.app.cli import main
from dpaudit.app.verbs.attack import default_membership_attacks


def test_the_default_is_every_attack_without_a_shadow_pool() -> None:
    # The registry's own pool field, read independently of the helper's capability property.
    assert default_membership_attacks() == [n for n, s in MEMBERSHIP_ATTACKS.items() if s.shadow_pool is None]
    assert set(default_membership_attacks()) == {"loss", "confidence", "entropy", "modified-entropy"}


@pytest.mark.extended  # trains a small target, then attacks it
def test_attack_membership_without_attack_runs_the_default_set(tmp_path: Path, capsys) -> None:
    target = tmp_path / "target"
    argv = ["train", "--defense", "nonprivate", "--dataset", "digits", "--model", "digits-mlp"]
    assert main([*argv, "--epochs", "1", "--out", str(target), "--quiet"]) == 0
    capsys.readouterr()
    out_dir = tmp_path / "attack"
    assert main(["attack", "membership", "--target", str(target), "--out", str(out_dir), "--quiet", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert sorted(out["attacks"]) == sorted(default_membership_attacks())
    assert not list(out_dir.rglob("shadow*")), "no shadow model is trained by default"
