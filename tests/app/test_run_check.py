"""The battery run: check.json, resumable trials, inconclusive checks that cannot run, spec validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpaudit.api import BatterySpec, CheckReport, RunDir, dpsgd_claim, load_check_report, run_check

DOUBLES = Path(__file__).resolve().parents[1] / "attacks" / "checks_doubles.py"
CLAIM = dpsgd_claim(sampling_rate=0.1, noise_multiplier=3.0, num_steps=50)


def spec(fn: str = "train", **over) -> BatterySpec:
    base = dict(
        train_fn=f"{DOUBLES}:{fn}",
        model_fn=f"{DOUBLES}:model",
        claim=CLAIM,
        checks=("worst-case",),
        trials=8,
        budget_minutes=5,
    )
    base.update(over)
    return BatterySpec(**base)


@pytest.mark.extended
def test_a_run_writes_check_json_and_a_rerun_reuses_its_trials(tmp_path, capsys):
    report = run_check(spec(), RunDir(tmp_path), progress=True)
    assert isinstance(report, CheckReport)
    (outcome,) = report.outcomes
    assert outcome.name == "worst-case" and outcome.num_trials == 8
    assert outcome.ceiling >= outcome.epsilon_lb and 0.0 < outcome.confidence < 1.0
    assert outcome.finding.startswith("worst-case: ")
    assert load_check_report(tmp_path / "checks").to_dict() == report.to_dict()
    assert len(list((tmp_path / "checks").glob("trials-*/worst-case/*/trials/trial-*.npz"))) == 8
    capsys.readouterr()
    again = run_check(spec(), RunDir(tmp_path), progress=True)
    assert "reusing 8 stored trials" in capsys.readouterr().err
    assert again.outcomes[0].epsilon_lb == outcome.epsilon_lb


def test_confidence_is_split_over_the_checks_run(tmp_path):
    report = run_check(spec(fn="train_no_initial_state", checks=()), RunDir(tmp_path), progress=False)
    names = [o.name for o in report.outcomes]
    assert names[-5:] == ["worst-case", "lot-size", "sampling-rate", "reused-noise", "state-leakage"]
    assert len(names) == 12 and all(n.startswith("greybox-") for n in names[:7])  # the grey-box checks run first
    assert all(o.confidence == pytest.approx(1 - 0.05 / 12) for o in report.outcomes)


def test_a_function_without_initial_state_is_inconclusive_with_ceiling_zero(tmp_path):
    report = run_check(spec(fn="train_no_initial_state"), RunDir(tmp_path), progress=False)
    (o,) = report.outcomes
    assert (o.status, o.ceiling, o.num_trials, report.exit_status) == ("inconclusive", 0.0, 0, 0)
    assert "initial_state" in o.finding and o.finding.startswith("worst-case: could not run")


def test_no_model_fn_is_inconclusive(tmp_path):
    (o,) = run_check(spec(model_fn=None), RunDir(tmp_path), progress=False).outcomes
    assert o.status == "inconclusive" and "--model-fn" in o.finding


@pytest.mark.extended
def test_missing_noise_exits_3_with_a_finding_naming_the_check(tmp_path):
    report = run_check(spec(fn="train_no_noise", trials=32), RunDir(tmp_path), progress=False)
    assert report.exit_status == 3
    (o,) = report.violations
    assert o.finding.startswith("worst-case: eps_LB ") and "95% family-wise)" in o.finding
    # An ε_LB at the design's ceiling says the leak is at least this much, and only then.
    assert o.saturated == ("(saturated: at least this much; " in o.finding)
    # Both bounds printed their safe way: ε_UB (0.97066…) rounded up, ε_LB rounded down.
    lb_text, ub_text = o.finding.removeprefix("worst-case: eps_LB ").split(" (")[0].split(" > eps_UB ")
    assert (
        float(ub_text) >= o.epsilon_ub
        and float(ub_text) == pytest.approx(0.971, abs=1e-3)
        and float(lb_text) <= o.epsilon_lb
    )


@pytest.mark.parametrize(
    ("over", "match"),
    [
        ({"checks": ("no-such-check",)}, "--checks"),
        ({"checks": ("worst-case", "worst-case")}, "checks must name each check once"),
        ({"train_fn": "nofunction"}, "train_fn"),
        ({"confidence": 1.5}, "confidence"),
        ({"budget_minutes": 0}, "budget_minutes"),
        ({"trials": 2}, "trials"),
        ({"num_workers": 0}, "num_workers"),
    ],
)
def test_spec_validation_names_the_argument(over, match):
    with pytest.raises(ValueError, match=match):
        spec(**over)
