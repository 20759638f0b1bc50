"""The battery's result types: the status rule, validation, and their JSON round trip."""

from __future__ import annotations

import json
import math

import pytest

from dpaudit.results.check import (
    CHECK_FILE,
    CheckOutcome,
    CheckReport,
    check_status,
    load_check_report,
    save_check_report,
)


def outcome(**over):
    base = dict(
        name="worst-case",
        status="violated",
        finding="worst-case: eps_LB 4.1 > eps_UB 0.97 (95% family-wise): noise is weaker than claimed",
        epsilon_lb=4.1,
        epsilon_ub=0.97,
        ceiling=6.0,
        confidence=0.99,
        num_trials=80,
        seconds=3.5,
        detects="noise bugs",
        misses="normaliser bugs",
        details={"records": 5, "by_size": {"a": [1, 2]}},
    )
    base.update(over)
    return CheckOutcome(**base)


def report(*outcomes):
    return CheckReport(
        train_fn="examples/dp_bugs/no_noise.py:train",
        model_fn="examples/dp_bugs/no_noise.py:model",
        claim_description="DP-SGD q=0.1 sigma=3 T=50",
        delta=1e-5,
        confidence=0.95,
        budget_minutes=5.0,
        outcomes=outcomes or (outcome(),),
        seconds=12.0,
    )


@pytest.mark.parametrize(
    ("lb", "ub", "ceiling", "status"),
    [
        (4.1, 0.97, 6.0, "violated"),
        (0.5, 0.97, 6.0, "passed"),
        (0.5, 0.97, 0.9, "inconclusive"),
        (0.0, 0.97, 0.0, "inconclusive"),
        (0.97, 0.97, 2.0, "passed"),
        (1.0, math.inf, 3.0, "inconclusive"),
    ],
)
def test_status_rule(lb, ub, ceiling, status):
    assert check_status(epsilon_lb=lb, epsilon_ub=ub, ceiling=ceiling) == status


def test_outcome_enforces_the_status_rule():
    with pytest.raises(ValueError, match="status must be 'passed'"):
        outcome(epsilon_lb=0.2, status="violated")
    with pytest.raises(ValueError, match="status must be 'inconclusive'"):
        outcome(epsilon_lb=0.2, ceiling=0.5, status="passed")
    assert outcome(epsilon_lb=0.2, ceiling=0.5, status="inconclusive").status == "inconclusive"


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("status", "failed", "status"),
        ("finding", "worst-case: a\nb", "one line"),
        ("finding", "eps_LB 4 > 1", "name the check"),
        ("epsilon_lb", -1.0, "epsilon_lb"),
        ("epsilon_lb", math.nan, "epsilon_lb"),
        ("ceiling", 3.0, "ceiling must be >= epsilon_lb"),
        ("confidence", 1.0, "confidence"),
        ("num_trials", -1, "num_trials"),
        ("seconds", -0.1, "seconds"),
        ("detects", "", "detects"),
        ("epsilon_ub", -0.5, "epsilon_ub"),
    ],
)
def test_outcome_rejects_bad_values(field, value, match):
    with pytest.raises(ValueError, match=match):
        outcome(**{field: value})


def test_outcome_is_immutable():
    o = outcome()
    with pytest.raises(AttributeError):
        o.status = "passed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        o.details["records"] = 6  # type: ignore[index]


def test_report_verdict_and_exit_status():
    passed = outcome(name="lot-size", finding="lot-size: fine", epsilon_lb=0.1, status="passed")
    assert report(passed).exit_status == 0 and not report(passed).violated
    both = report(passed, outcome())
    assert both.violated and both.exit_status == 3
    assert [o.name for o in both.violations] == ["worst-case"]
    assert both.outcome("lot-size") is passed
    with pytest.raises(ValueError, match="name must be one of the checks run"):
        both.outcome("reused-noise")


def test_report_rejects_duplicate_checks_and_bad_values():
    with pytest.raises(ValueError, match="duplicates"):
        report(outcome(), outcome())
    with pytest.raises(ValueError, match="budget_minutes"):
        CheckReport(
            train_fn="a:b",
            model_fn=None,
            claim_description="",
            delta=1e-5,
            confidence=0.95,
            budget_minutes=0,
            outcomes=(),
            seconds=0,
        )
    with pytest.raises(TypeError, match="CheckOutcome"):
        CheckReport(
            train_fn="a:b",
            model_fn=None,
            claim_description="",
            delta=1e-5,
            confidence=0.95,
            budget_minutes=1,
            outcomes=({"name": "x"},),
            seconds=0,
        )


def test_round_trip_through_check_json(tmp_path):
    inconclusive = outcome(
        name="state-leakage",
        finding="state-leakage: could not run: no --model-fn",
        epsilon_lb=0.0,
        ceiling=0.0,
        status="inconclusive",
        epsilon_ub=math.inf,
    )
    r = report(outcome(), inconclusive)
    path = save_check_report(r, tmp_path)
    assert path == tmp_path / CHECK_FILE
    data = json.loads(path.read_text())
    assert data["schema_version"] == 1 and data["exit_status"] == 3 and data["violated"] is True
    back = load_check_report(tmp_path)
    assert back.to_dict() == r.to_dict()
    assert back.outcome("state-leakage").epsilon_ub == math.inf
    assert load_check_report(path).to_dict() == r.to_dict()
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write left no temporary file


def test_from_dict_rejects_other_schema_versions_and_missing_keys():
    data = report().to_dict()
    with pytest.raises(ValueError, match="schema_version"):
        CheckReport.from_dict({**data, "schema_version": 99})
    del data["outcomes"][0]["misses"]
    with pytest.raises(ValueError, match="missing keys"):
        CheckReport.from_dict(data)
    with pytest.raises(ValueError, match="missing keys"):
        CheckReport.from_dict({"schema_version": 1})
