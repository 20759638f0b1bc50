"""``dpaudit train --defense pate --target-epsilon``: the budget says what it fixes before training, or refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

_BASE = ["train", "--defense", "pate", "--dataset", "digits", "--model", "digits-mlp", "--executor", "serial"]


def test_a_budget_the_given_sigma_and_queries_exceed_is_refused_naming_the_queries_it_allows(
    cli, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    code, _, err = cli.run(*_BASE, "--target-epsilon", "2", "--sigma", "10", "--queries", "300", "--out", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert (
        "--queries" in err and "at most 8" in err and "sigma=10.0" in err
    )  # GNMax at sigma 10: 8 queries spend epsilon 2
    assert not out.exists()  # refused before anything is written


@pytest.mark.extended
def test_a_budget_run_says_what_it_derived_before_training_and_claims_a_publishable_epsilon(
    cli, tmp_path: Path
) -> None:
    # Two teachers and one student epoch keep it short; sigma and the queries come from the budget.
    args = [
        "--teachers",
        "2",
        "--epochs",
        "1",
        "--student-epochs",
        "1",
        "--aggregator",
        "gnmax",
        "--target-epsilon",
        "8",
        "--json",
        "--out",
        str(tmp_path / "run"),
    ]
    code, out, err = cli.run(*_BASE, *args)
    assert code == 0, err
    assert "pate: sigma = " in err and "calibrated so that 20 queries (2 per class) spend target_epsilon = 8" in err
    payload = json.loads(out)
    assert payload["data_dependent"] is False  # the budget is met by the data-independent bound
    assert 0 < payload["epsilon"]["rdp"] <= 8.0
    assert payload["metrics"]["epsilon_planned_worst_case"] <= 8.0
    # The record left its derived values unset in the config: it verifies from what the run used.
    from dpaudit.app.records import load_verified_record

    record = load_verified_record(payload["record_path"])
    assert (
        record.config.get("sigma") is None
        and record.metrics["run_sigma"] > 0
        and record.metrics["run_aggregator"] == "gnmax"
    )
    # ... and its report names the noise the run used (the config's unset sigma once crashed it).
    code, _, err = cli.run("report", str(tmp_path / "run"))
    assert code == 0, err
    page = next((tmp_path / "run" / "reports").glob("pate*.md")).read_text()
    assert f"σ={record.metrics['run_sigma']:.4g}" in page


@pytest.mark.parametrize(
    ("extra", "needle"), [(["--aggregator", "lnmax"], "lnmax"), (["--sigma", "0.5"], "exceeded by a single query")]
)
def test_a_budget_that_cannot_apply_is_refused_in_one_line(cli, tmp_path: Path, extra: list[str], needle: str) -> None:
    code, _, err = cli.run(*_BASE, "--target-epsilon", "1", *extra, "--out", str(tmp_path / "run"))
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow  # 35 teachers of 200 epochs and a student: ~25 s of CPU
@pytest.mark.xfail(
    strict=True,
    reason=(
        "not reachable under a publishable bound: digits' 718 members give at "
        "most ~40 useful teachers, and epsilon = 2 at "
        "delta = 1e-5 buys ~20 GNMax answers at sigma ~16, about 60 % correct; "
        "the data-dependent bound does not help at "
        "vote counts this small (see defenses/pate/plan.py). Strict: it reports when a change makes it reachable."
    ),
)
def test_pate_with_default_flags_on_digits_reaches_85_percent_within_epsilon_2(cli, tmp_path: Path) -> None:
    code, out, err = cli.run(
        "train",
        "--defense",
        "pate",
        "--dataset",
        "digits",
        "--model",
        "digits-mlp",
        "--target-epsilon",
        "2",
        "--json",
        "--quiet",
        "--out",
        str(tmp_path / "run"),
    )
    assert code == 0, err
    payload = json.loads(out)
    assert payload["data_dependent"] is False and payload["epsilon"]["rdp"] <= 2.0  # always holds: the budget is met
    assert payload["metrics"]["test_accuracy"] >= 0.85
