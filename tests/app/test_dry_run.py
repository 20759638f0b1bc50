"""``--dry-run`` on ``compare``, ``audit`` and ``attack membership``: the plan (jobs, estimated
CPU-hours and wall time here and on 8 and 64 workers, memory per job), exit 0, nothing trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpaudit.app.cli import main
from dpaudit.app.cost import RunPlan

GRID = """
name = "plan"
dataset = "digits"
model = "digits-mlp"
seeds = [0, 1]
[[defenses]]
defense = "nonprivate"
epochs = 3
[[defenses]]
defense = "dpsgd"
target_epsilon = 4.0
epochs = 3
lot_size = 64
[attacks.membership]
attacks = ["loss"]
num_samples = 100
"""


def _plan(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:
    assert main([*argv, "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dry_run"] is True and out["job_memory_bytes"] > 0 and set(out["wall_seconds"]) >= {"8", "64"}
    return out


@pytest.mark.extended
def test_compare_dry_run_counts_the_grid_jobs_and_trains_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    out = _plan(capsys, ["compare", "--config", str(grid), "--out", str(tmp_path / "run")])
    assert out["num_jobs"] == 2 * 2 * 2  # settings x seeds x (training + membership)
    assert out["job_seconds"] > 0 and out["wall_seconds"]["64"] <= out["wall_seconds"]["8"]
    assert not (tmp_path / "run").exists()
    # For people: the plan in a few lines.
    assert main(["compare", "--config", str(grid), "--out", str(tmp_path / "run"), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert (
        text.startswith("plan: 8 job(s): grid 'plan'")
        and "CPU-hours" in text
        and "on 64 workers" in text
        and "MB per job" in text
    )


def test_audit_dry_run_counts_the_trainings(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "audit",
        "--threat",
        "black-box",
        "--dataset",
        "digits",
        "--model",
        "digits-mlp",
        "--noise-multiplier",
        "1",
        "--num-steps",
        "50",
        "--num-trials",
        "6",
        "--out",
        str(tmp_path / "run"),
    ]
    out = _plan(capsys, argv)
    # Multi-run: a training with and one without the canaries per trial, 12 in all; the suite's
    # DP-SGD on digits-mlp trains them in batched groups, one side a group: two jobs.
    assert out["num_jobs"] == 2 and "12 trained in batched groups of up to 6" in out["what"]
    assert "a batched group of 6 trainings" in out["timed"]
    assert not (tmp_path / "run").exists()
    # Batching turned off (the Python API's batch_trials=False): one job per training.
    from dpaudit.app.plan import audit_plan
    from dpaudit.app.runs.audit import AuditSpec

    alone = audit_plan(
        AuditSpec(model="digits-mlp", noise_multiplier=1.0, num_steps=50, num_trials=6, batch_trials=False)
    )
    assert alone.num_jobs == 12 and "batched" not in alone.what


def test_attack_membership_dry_run_counts_the_shadow_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "target"
    assert (
        main(
            [
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
                str(target),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    out = _plan(
        capsys,
        [
            "attack",
            "membership",
            "--target",
            str(target),
            "--attack",
            "lira",
            "--num-shadows",
            "16",
            "--out",
            str(tmp_path / "attack"),
        ],
    )
    assert out["num_jobs"] == 16
    assert not (tmp_path / "attack").exists()


def test_the_wall_time_spreads_whole_jobs_over_the_workers() -> None:
    plan = RunPlan(what="jobs", num_jobs=10, job_seconds=60.0, job_memory_bytes=1, workers=2)
    assert plan.cpu_hours == pytest.approx(10 / 60)
    assert plan.wall_seconds(1) == pytest.approx(600 + 10 * 0.05)
    assert plan.wall_seconds(8) == pytest.approx(2 * 60 + 10 / 8 * 0.05)  # two rounds: 8 jobs, then 2
    assert plan.wall_seconds(64) == pytest.approx(60 + 10 / 64 * 0.05)  # one job's time is the floor


def test_a_long_run_note_gives_the_cpu_hours_and_the_wall_time_on_more_workers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dpaudit.app.cost import announce_if_long

    assert announce_if_long(
        1024 * 60.0 / 2, "training 1024 shadow models", hint="--num-shadows changes it", jobs=1024, job_seconds=60.0
    )
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert (
        "training 1024 shadow models is estimated to take about 9 h on this "
        "machine (1,024 jobs, about 17 CPU-hours; about 2 h on 8 workers, under "
        "1 h on 64 workers)" in err
    )


def test_ship_code_needs_the_ray_executor(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    assert main(["compare", "--config", str(grid), "--out", str(tmp_path / "run"), "--ship-code"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--ship-code needs --executor ray, got --executor local" in err[0]
