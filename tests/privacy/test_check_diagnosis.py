"""Grey-box outcomes, the one diagnosis per bug, the saturated label and the dataset-size declaration."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET

import pytest

from dpaudit.privacy.claims import claim_from_dict, dpsgd_claim
from dpaudit.results.check import CheckOutcome, CheckReport, diagnosis, load_check_report, save_check_report
from tests.privacy.test_check_result import outcome, report


def grey(name: str, status: str = "violated", cause: str = "the training took 200 steps where T = 10") -> CheckOutcome:
    return CheckOutcome(
        name=name,
        status=status,
        finding=f"{name}: {cause}",
        epsilon_lb=0.0,
        epsilon_ub=0.97,
        ceiling=0.0,
        confidence=0.99,
        num_trials=3,
        seconds=1.0,
        detects="d",
        misses="m",
        kind="grey-box",
        cause=cause,
    )


def test_a_grey_box_outcome_has_its_own_status_and_round_trips(tmp_path):
    o = grey("greybox-steps")
    assert o.violated and not o.saturated  # ε_LB 0 ≤ ε_UB, yet violated: the replay decided
    with pytest.raises(ValueError, match="status"):
        outcome(status="passed")  # a statistical outcome still follows the ε rule
    with pytest.raises(ValueError, match="kind"):
        grey("greybox-steps").__class__(**{**o.to_dict(), "kind": "oracle"})
    path = save_check_report(report(o), tmp_path)
    back = load_check_report(path).outcome("greybox-steps")
    assert (back.kind, back.cause, back.status) == ("grey-box", o.cause, "violated")


def test_the_diagnosis_names_a_grey_box_cause_before_the_statistical_checks_that_follow_from_it():
    saturated = outcome(name="sampling-rate", epsilon_lb=6.0, ceiling=6.0, finding="sampling-rate: eps_LB 6 > 0.97")
    below = outcome(name="worst-case", epsilon_lb=4.1, ceiling=6.0)
    passed = grey("greybox-noise", status="passed", cause="noise on every step")
    steps = grey("greybox-steps")
    r = report(saturated, below, passed, steps)
    assert [o.name for o in diagnosis(r)] == ["greybox-steps", "worst-case", "sampling-rate"]
    assert saturated.saturated and not below.saturated
    assert r.to_dict()["diagnosis"] == ["greybox-steps", "worst-case", "sampling-rate"]
    assert CheckReport.from_dict(r.to_dict()).violated


def test_junit_carries_the_grey_box_cause_as_the_failure_message():
    from reports.junit import junit_xml

    cause = "the normaliser is 1 on 19 records and 2 on 20: the dataset size leaks through it"
    root = ET.fromstring(junit_xml(report(grey("greybox-normaliser", cause=cause), grey("greybox-state", "passed"))))
    cases = {c.get("name"): c for c in root.iter("testcase")}
    failure = cases["greybox-normaliser"].find("failure")
    assert failure is not None and failure.get("message") == f"greybox-normaliser: {cause}"
    assert cases["greybox-state"].find("failure") is None and cases["greybox-state"].find("skipped") is None


def test_a_claim_declares_the_dataset_size_public_and_keeps_old_claims_bytes():
    claim = dpsgd_claim(sampling_rate=0.1, noise_multiplier=3.0, num_steps=50)
    assert "dataset_size_public" not in claim.to_dict()  # stored claims and their keys unchanged
    public = dataclasses.replace(claim, dataset_size_public=True)
    assert claim_from_dict(public.to_dict()).dataset_size_public is True
    with pytest.raises(ValueError, match="dataset_size_public"):
        dataclasses.replace(claim, dataset_size_public="yes")
