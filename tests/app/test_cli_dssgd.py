"""DSSGD from the command line and the app layer: train, then attack from the server's and the participants' seats."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from dpaudit.results.record import load_record

_TRAIN = [
    "train", "--defense", "dssgd", "--dataset", "digits", "--model", "digits-mlp", "--participants", "3",
    "--rounds", "2", "--upload-fraction", "0.1", "--no-baselines", "--quiet", "--json",
]  # fmt: skip


@pytest.fixture(scope="module")
def dssgd_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    from dpaudit.app.cli import main

    out = tmp_path_factory.mktemp("dssgd") / "run"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main([*_TRAIN, "--out", str(out)]) == 0
    return out, json.loads(buf.getvalue())


def test_global_record_names_each_members_owner_and_keeps_the_observed_uploads(dssgd_run) -> None:
    _, payload = dssgd_run
    rdir = Path(payload["record_path"])
    record = load_record(rdir)
    owners = record.membership.owners
    assert owners.shape == record.membership.members.shape and set(np.unique(owners)) == {0, 1, 2}
    with np.load(rdir / "uploads.npz", allow_pickle=False) as z:
        assert int(z["participant"]) == 0 and z["sizes"].size == 2  # one upload per round
        assert np.array_equal(np.sort(z["member_ids"]), np.sort(record.membership.owned_by(0)))
        assert z["sizes"].max() <= round(0.1 * int(z["num_parameters"]))


@pytest.mark.extended
def test_attack_uploads_stores_a_membership_result_and_reports_it(dssgd_run, cli) -> None:
    out, payload = dssgd_run
    code, stdout, err = cli.run(
        "attack", "uploads", "--target", payload["record_path"], "--out", str(out), "--quiet", "--json"
    )
    assert code == 0, err
    s = json.loads(stdout)
    assert s["turns"] == 2 and s["participant"] == 0
    assert 0.0 <= s["membership_auc"] <= 1.0 and -1.0 <= s["best_ssim_max"] <= 1.0
    assert Path(s["report"]).is_file() and "dssgd-uploads" in Path(s["report"]).read_text()


@pytest.mark.extended
def test_attack_uploads_refuses_a_record_of_another_defense(cli, tmp_path) -> None:
    code, _, err = cli.run(
        "train",
        "--defense",
        "nonprivate",
        "--dataset",
        "digits",
        "--model",
        "digits-mlp",
        "--epochs",
        "1",
        "--out",
        str(tmp_path),
        "--quiet",
    )
    assert code == 0, err
    code, _, err = cli.run("attack", "uploads", "--target", str(tmp_path), "--out", str(tmp_path))
    assert code == 2 and "nonprivate" in err and "dssgd" in err and len(err.strip().splitlines()) == 1


@pytest.mark.extended
def test_a_participants_local_record_is_attacked_like_any_record(dssgd_run, cli) -> None:
    out, payload = dssgd_run
    local = sorted((out / "records" / "dssgd-participants").glob("*/participant-001"))
    assert local, "no local record of participant 1"
    code, stdout, err = cli.run(
        "attack", "membership", "--target", str(local[0]), "--attack", "loss", "--out", str(out), "--quiet", "--json"
    )
    assert code == 0, err
    record = load_record(local[0])
    assert record.membership.members.size == int(
        np.sum(load_record(Path(payload["record_path"])).membership.owners == 1)
    )


def test_one_example_turn_is_reconstructed_unless_the_dp_upload_hides_it() -> None:
    from dpaudit.app.runs.dssgd import turn_leakage

    rows = {
        r.setting: r
        for r in turn_leakage(
            dataset="digits",
            model="digits-mlp",
            examples_per_turn=1,
            upload_fractions=(1.0, 0.1),
            dp_epsilons=(1.0,),
            turns=6,
        )
    }
    full, dp = rows["theta_u=1"], rows["dp eps=1 (theta_u=0.1)"]
    assert full.best_ssim > 0.99 and full.recognised_share == 1.0 and full.membership_auc == 1.0
    assert dp.best_ssim < 0.5 and dp.recognised_share < 0.5
    assert full.example_reconstruction.shape == (2, 1, 8, 8)


@pytest.mark.extended
def test_upload_audit_finds_the_canary_without_dp_and_stays_below_the_turns_claim_with_it() -> None:
    from dpaudit.app.runs.dssgd import audit_upload

    # 2 % of digits-mlp's 4,810 parameters: the ~96 uploaded entries 1 % of the old 9,610 gave.
    plain = audit_upload(
        dataset="digits",
        model="digits-mlp",
        partition_size=50,
        upload_fraction=0.02,
        dp_epsilon=None,
        trials=200,
        progress=False,
    )
    assert plain.epsilon_lb > 1.0
    private = audit_upload(
        dataset="digits",
        model="digits-mlp",
        partition_size=50,
        upload_fraction=0.02,
        dp_epsilon=1.0,
        trials=200,
        progress=False,
    )
    assert private.epsilon_lb <= private.epsilon_ub and private.details.epsilon_per_parameter == 1.0


@pytest.mark.extended
def test_reports_find_a_participants_record_for_its_claim(dssgd_run, cli) -> None:
    from dpaudit.store import RunDir

    out, payload = dssgd_run
    local = sorted((out / "records" / "dssgd-participants").glob("*/participant-002"))[0]
    record = load_record(local)
    run = RunDir(out)
    assert run.find_record_dir(record.model_id) == local
    assert run.find_record_dir(load_record(Path(payload["record_path"])).model_id) == Path(payload["record_path"])
    assert run.find_record_dir("no-such-model") is None
    code, _, err = cli.run(
        "attack", "membership", "--target", str(local), "--attack", "loss", "--out", str(out), "--quiet"
    )
    assert code == 0, err
    page = (out / "reports").glob(f"membership-{record.model_id}*.html")
    assert "participant 2" in next(page).read_text()


def test_the_dp_upload_says_what_its_per_parameter_epsilon_adds_up_to_before_training(cli, tmp_path) -> None:
    # --dp-epsilon is the paper's figure per uploaded parameter per turn: the total it implies is said up front.
    argv = [
        "train",
        "--defense",
        "dssgd",
        "--dataset",
        "digits",
        "--model",
        "digits-mlp",
        "--participants",
        "2",
        "--rounds",
        "1",
        "--upload-fraction",
        "0.01",
    ]
    code, out, err = cli.run(*argv, "--dp-epsilon", "0.5", "--no-baselines", "--json", "--out", str(tmp_path / "run"))
    assert code == 0, err
    line = next(x for x in err.splitlines() if x.startswith("dssgd budget:"))
    payload = json.loads(out)
    assert "--dp-epsilon 0.5 is spent per uploaded parameter per turn" in line and "for 1 rounds" in line
    assert f"epsilon = {payload['epsilon']['pure']:g} (pure composition" in line
