"""``--target-epsilon`` with ``--defense dssgd``, from the command line and from a compare grid."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dpaudit.app.records import load_verified_record

_TRAIN = [
    "train",
    "--defense",
    "dssgd",
    "--dataset",
    "digits",
    "--model",
    "digits-mlp",
    "--participants",
    "3",
    "--no-baselines",
]


def _uploads_per_turn() -> int:
    """c = round(theta_u x parameters) of digits-mlp at theta_u = 0.1 (481 for its 4,810 parameters)."""
    from dpaudit.models import build_model

    n = sum(p.numel() for p in build_model("digits-mlp", input_shape=(1, 8, 8), num_classes=10).parameters())
    return round(0.1 * n)


_C = _uploads_per_turn()
_ROUNDS = math.floor(2 / (_C * 0.001))  # the most rounds epsilon 2 pays at dp_epsilon 0.001


def _record(out: Path):
    (rdir,) = [p for p in (out / "records").glob("dssgd-*") if p.name != "dssgd-participants"]
    return load_verified_record(rdir)


def test_target_epsilon_calibrates_dp_epsilon_for_the_rounds_and_says_so(cli, tmp_path: Path) -> None:
    code, _, err = cli.run(*_TRAIN, "--rounds", "2", "--target-epsilon", "2", "--out", str(tmp_path))
    assert code == 0, err
    assert (
        f"dssgd budget: dp_epsilon = {2 / (_C * 2):.4g} calibrated so that {_C} "
        "uploads per turn x 2 rounds spend epsilon = 2" in err
    )
    record = _record(tmp_path)  # verifies: the claim is rebuilt from the asked config
    assert record.config["target_epsilon"] == 2.0 and record.config["dp_epsilon"] is None
    assert math.isclose(record.metrics["run_dp_epsilon"] * _C * 2, 2.0, rel_tol=1e-12)
    assert record.claim.kind == "dssgd-svt" and math.isclose(
        record.claim.epsilon(delta=1e-5, accountant="pure"), 2.0, rel_tol=1e-9
    )


def test_target_and_dp_epsilon_train_the_most_rounds_the_budget_allows(cli, tmp_path: Path) -> None:
    code, _, err = cli.run(*_TRAIN, "--target-epsilon", "2", "--dp-epsilon", "0.001", "--out", str(tmp_path))
    assert code == 0, err
    assert (
        f"dssgd budget: dp_epsilon 0.001 reaches epsilon 2 after {_ROUNDS} rounds" in err
        and "pass --rounds to calibrate dp_epsilon instead" in err
    )
    record = _record(tmp_path)
    assert record.config["rounds"] is None and record.metrics["run_rounds"] == _ROUNDS
    assert record.claim.epsilon(delta=1e-5, accountant="pure") <= 2.0


def test_rounds_the_budget_cannot_pay_are_refused_before_anything_is_written(cli, tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, stdout, err = cli.run(
        *_TRAIN, "--target-epsilon", "2", "--dp-epsilon", "0.001", "--rounds", "20", "--out", str(out)
    )
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err
    assert "--rounds" in err and f"lower rounds to at most {_ROUNDS}" in err
    assert not out.exists()
    code, _, err = cli.run(*_TRAIN, "--target-epsilon", "2", "--dp-epsilon", "0.01", "--out", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--dp-epsilon" in err and f"at most {2 / _C:.4g}" in err


def test_a_tampered_run_dp_epsilon_is_refused(cli, tmp_path: Path) -> None:
    code, _, err = cli.run(*_TRAIN, "--rounds", "2", "--target-epsilon", "2", "--quiet", "--out", str(tmp_path))
    assert code == 0, err
    (rdir,) = [p for p in (tmp_path / "records").glob("dssgd-*") if p.name != "dssgd-participants"]
    data = json.loads((rdir / "record.json").read_text())
    data["metrics"]["run_dp_epsilon"] *= 2
    (rdir / "record.json").write_text(json.dumps(data))
    code, _, err = cli.run(
        "attack", "membership", "--target", str(rdir), "--attack", "loss", "--out", str(tmp_path), "--quiet"
    )
    assert code != 0 and "run_dp_epsilon" in err


@pytest.mark.extended
def test_a_compare_grid_plans_a_dssgd_budget(tmp_path: Path) -> None:
    from dpaudit.app.runs.compare import CompareSpec, load_grid, run_compare
    from dpaudit.store import RunDir

    grid = tmp_path / "grid.toml"
    grid.write_text(
        'name = "dssgd-budget"\ndataset = "digits"\nmodel = "digits-mlp"\nseeds '
        '= [0]\n\n[[defenses]]\ndefense = "dssgd"\ntarget_epsilon = '
        "2\nparticipants = 3\nrounds = 2\nbaselines = false\n"
    )
    run_compare(CompareSpec(grid=load_grid(grid), executor="serial", progress=False), RunDir(tmp_path / "run"))
    record = _record(tmp_path / "run")
    assert record.config["target_epsilon"] == 2 and record.metrics["run_rounds"] == 2
    assert math.isclose(record.claim.epsilon(delta=1e-5, accountant="pure"), 2.0, rel_tol=1e-9)
