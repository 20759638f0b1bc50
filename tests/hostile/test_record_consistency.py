"""Issue 31, item 3: a record inconsistent with itself is refused before any work.

A claim edited against its config (σ = 10 beside a config that ran σ = 1 was audited with ε_UB
0.17 where the run gives 3.90), a config edited after training, a record directory renamed, a
dataset relabelled or a class count changed: each is refused by the command line with exit 2 and
one line naming the record file, the field and both values, and by the Python runs API with a
``ValueError`` saying the same. ``report`` reads the same verified record, so a run directory
cannot show two ε_UB for one model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.test_records import one_line_error

DPSGD = {
    "epochs": 1.0,
    "sampling_rate": 0.05,
    "noise_multiplier": 1.0,
}  # as the CLI parses --epochs 1 (the id hashes 1.0, not 1)
TRAIN_ARGS = (
    "--defense",
    "dpsgd",
    "--model",
    "digits-mlp",
    "--dataset",
    "digits",
    "--epochs",
    "1",
    "--sampling-rate",
    "0.05",
    "--noise-multiplier",
    "1",
    "--seed",
    "0",
    "--quiet",
)


@pytest.fixture(scope="session")
def dpsgd_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with one tiny DP-SGD digits record (σ = 1, q = 0.05, one epoch) and a stored membership result on it."""
    import numpy as np

    from dpaudit.app.runs.train import TrainSpec, default_config, train_or_load
    from dpaudit.results import MembershipResult, save_membership_result
    from dpaudit.store import RunDir

    run = RunDir(tmp_path_factory.mktemp("consistency") / "run")
    done = train_or_load(
        TrainSpec(
            defense="dpsgd",
            model="digits-mlp",
            dataset="digits",
            config=default_config("dpsgd", **DPSGD),
            seed=0,
            progress=False,
        ),
        run,
    )
    # What `report` renders with the record's ε_UB beside it (scores made up: the record is refused before they are
    # read).
    member = np.arange(40) < 20
    result = MembershipResult(
        attack="loss",
        model_id=done.record.model_id,
        sample_ids=np.arange(40),
        scores=member + np.linspace(0, 1, 40),
        is_member=member,
    )
    save_membership_result(result, run.membership_dir(done.record.model_id))
    return run.path


@pytest.fixture
def run(dpsgd_run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(dpsgd_run, tmp_path / "run"))


def _record_dir(run: Path) -> Path:
    (only,) = sorted(p for p in (run / "records").iterdir() if p.is_dir())
    return only


def _edit(run: Path, change: Any) -> Path:
    path = _record_dir(run) / "record.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    return path


def _python_refuses(run: Path, tmp_path: Path, *needles: str) -> None:
    """The runs API refuses the record too (a membership attack: the cheapest run that loads one)."""
    from attacks.membership import MEMBERSHIP_ATTACKS
    from dpaudit.app.runs.membership import MembershipSpec, run_membership
    from dpaudit.store import RunDir

    spec = MembershipSpec(
        attacks={"loss": MEMBERSHIP_ATTACKS["loss"].config_type()}, target=run, executor="serial", progress=False
    )
    with pytest.raises(ValueError) as exc:
        run_membership(spec, RunDir(tmp_path / "out"))
    for needle in needles:
        assert needle in str(exc.value), str(exc.value)


def _attack(cli, run: Path) -> tuple[int, str, str]:
    return cli.run(
        "attack", "membership", "--target", str(run), "--attack", "loss", "--out", str(run / "again"), "--quiet"
    )


def _sigma(data: dict) -> None:
    data["claim"]["event"]["event"]["event"]["noise_multiplier"] = 10.0


@pytest.mark.extended
def test_a_claim_edited_against_its_config_is_refused(cli, run, tmp_path):
    path = _edit(run, _sigma)
    needle = "claim event.event.event.noise_multiplier=10 does not match config noise_multiplier=1"
    code, _, err = _attack(cli, run)
    one_line_error(code, err, str(path), needle, f"(model id {_record_dir(run).name})")
    assert not (run / "again").exists()
    _python_refuses(run, tmp_path, str(path), needle)


@pytest.mark.extended
def test_report_and_reuse_read_the_same_verified_record(cli, run):
    # The stored attack was made with σ = 1; a re-render with σ = 10 would show a second ε_UB.
    path = _edit(run, _sigma)
    code, _, err = cli.run("report", str(run))
    one_line_error(code, err, str(path), "noise_multiplier=10 does not match config noise_multiplier=1")
    assert not any((run / "reports").iterdir())  # refused before any page is written
    code, _, err = cli.run("train", *TRAIN_ARGS, "--out", str(run))
    one_line_error(code, err, str(path), "noise_multiplier=10")


@pytest.mark.extended
def test_config_epochs_edited_is_refused(cli, run, tmp_path):
    path = _edit(run, lambda d: d["config"].update(epochs=2))
    code, _, err = _attack(cli, run)
    one_line_error(code, err, str(path), "metrics num_steps=20 does not match config epochs=2")
    _python_refuses(run, tmp_path, "config epochs=2")


def test_a_config_edit_the_claim_does_not_see_is_refused_by_the_model_id(cli, run, tmp_path):
    # The learning rate is no part of the claim, but the model id hashes it (0.25: not the derived default 0.5).
    path = _edit(run, lambda d: d["config"].update(learning_rate=0.25))
    code, _, err = _attack(cli, run)
    line = one_line_error(
        code, err, str(path), f"model_id='{_record_dir(run).name}' does not match 'dpsgd-digits-digits-mlp-seed0-"
    )
    assert "the id of its config" in line
    _python_refuses(run, tmp_path, "model_id=")


def test_a_renamed_record_directory_is_refused(cli, run, tmp_path):
    old = _record_dir(run)
    new = old.rename(old.parent / "renamed")
    code, _, err = _attack(cli, new)
    one_line_error(
        code, err, str(new / "record.json"), f"directory name 'renamed' does not match model_id='{old.name}'"
    )
    _python_refuses(new, tmp_path, "directory name 'renamed'")


def test_a_dataset_relabelled_with_the_wrong_input_shape_is_refused_before_inversion(cli, run, tmp_path):
    path = _edit(run, lambda d: d.update(dataset="mnist"))
    needle = "input_shape=1x8x8 does not match dataset 'mnist' input shape 1x28x28"
    code, _, err = cli.run(
        "attack",
        "inversion",
        "--target",
        str(run),
        "--attack",
        "mi-face",
        "--classes",
        "0",
        "--out",
        str(run / "again"),
        "--quiet",
    )
    one_line_error(code, err, str(path), needle)
    assert not (run / "again").exists()
    _python_refuses(run, tmp_path, needle)


def test_a_wrong_class_count_is_refused(cli, run, tmp_path):
    path = _edit(run, lambda d: d.update(num_classes=12))
    code, _, err = _attack(cli, run)
    one_line_error(code, err, str(path), "num_classes=12 does not match dataset 'digits' num_classes=10")
    _python_refuses(run, tmp_path, "num_classes=12")


def test_a_claim_of_another_kind_than_the_defense_states_is_refused(cli, run):
    path = _edit(run, lambda d: d.update(claim={"kind": "nonprivate"}))
    code, _, err = _attack(cli, run)
    one_line_error(code, err, str(path), "claim kind='nonprivate' does not match 'dp'")


def test_the_unedited_record_passes(run):
    from dpaudit.app.records import load_verified_record

    assert load_verified_record(run).model_id == _record_dir(run).name
