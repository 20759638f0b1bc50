"""``dpaudit check --junit``: the file validates against the common JUnit schema and says what CI services display.

The schema (``junit.xsd`` beside this file) is the Ant/Jenkins JUnit shape GitLab, Jenkins and the
GitHub test-report actions read, with the attributes dpaudit promises made required. The tests
below also break a valid file in the ways a writer could (a failure without a message, a test
case without a name, …) and require the schema to refuse each, so the validation can fail.
"""

from __future__ import annotations

import datetime
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

xmlschema = pytest.importorskip("xmlschema", reason="the JUnit schema check needs xmlschema (the test extra)")

from reports.junit import SUITE_NAME, junit_xml, write_junit  # noqa: E402
from tests.check_samples import outcome, sample_report  # noqa: E402

SCHEMA_FILE = Path(__file__).with_name("junit.xsd")


@pytest.fixture(scope="module")
def schema():
    return xmlschema.XMLSchema(str(SCHEMA_FILE))


def _suite(root: ET.Element) -> ET.Element:
    (suite,) = root.findall("testsuite")
    return suite


@pytest.mark.extended
def test_the_written_file_validates_and_has_one_testcase_per_check(schema, tmp_path):
    report = sample_report()
    path = write_junit(report, tmp_path / "results.xml", timestamp=datetime.datetime(2026, 1, 31, 12, 0, 5, 123))
    schema.validate(str(path))  # raises with the first violation of the schema
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    suite = _suite(root)
    assert suite.get("name") == SUITE_NAME and suite.get("timestamp") == "2026-01-31T12:00:05"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [o.name for o in report.outcomes]
    assert {c.get("classname") for c in cases} == {"dpaudit.check"}
    assert [float(c.get("time")) for c in cases] == [o.seconds for o in report.outcomes]
    # the counts CI services show agree with the test cases (XSD 1.0 cannot say this)
    for element in (root, suite):
        assert int(element.get("tests")) == len(cases) == 3
        assert int(element.get("failures")) == len(suite.findall("testcase/failure")) == 1
        assert int(element.get("skipped")) == len(suite.findall("testcase/skipped")) == 1
        assert int(element.get("errors")) == 0
        assert float(element.get("time")) == report.seconds


def test_a_violated_check_is_a_failure_with_its_finding_and_numbers():
    report = sample_report()
    root = ET.fromstring(junit_xml(report))
    (case,) = [c for c in _suite(root).findall("testcase") if c.find("failure") is not None]
    violated = report.outcome("worst-case")
    failure = case.find("failure")
    assert case.get("name") == "worst-case"
    assert failure.get("message") == violated.finding and failure.get("type") == "PrivacyViolation"
    for text in ("epsilon_lb=4.1", "epsilon_ub=0.9712", "ceiling=5.2", "trainings=40"):
        assert text in failure.text


def test_an_inconclusive_check_is_skipped_with_its_ceiling_and_a_passed_one_is_plain():
    root = ET.fromstring(junit_xml(sample_report()))
    cases = {c.get("name"): c for c in _suite(root).findall("testcase")}
    skipped = cases["reused-noise"].find("skipped")
    assert skipped is not None and "ceiling 0.6" in skipped.get("message") and "reused-noise" in skipped.get("message")
    passed = cases["lot-size"]
    assert passed.find("failure") is None and passed.find("skipped") is None
    assert "detects: what lot-size is designed to detect" in passed.find("system-out").text


def test_the_properties_state_the_claim_delta_confidence_and_epsilon_ub():
    report = sample_report()
    root = ET.fromstring(junit_xml(report))
    props = {p.get("name"): p.get("value") for p in _suite(root).find("properties")}
    assert props["claim"] == report.claim_description
    assert float(props["delta"]) == report.delta and float(props["confidence"]) == report.confidence
    assert float(props["epsilon_ub"]) == report.epsilon_ub
    assert props["worst-case.status"] == "violated" and float(props["worst-case.epsilon_lb"]) == 4.1


def test_markup_in_a_finding_is_escaped_and_read_back_unchanged(schema):
    base = outcome("worst-case", "violated", epsilon_lb=4.1, ceiling=5.2)
    finding = 'worst-case: eps_LB 4.1 > eps_UB 0.97 & "<script>" at 95%'
    tricky = type(base)(**{**base.to_dict(), "finding": finding})
    report = type(sample_report())(**{**_report_fields(), "outcomes": (tricky,)})
    data = junit_xml(report)
    schema.validate(data.decode("utf-8"))
    assert ET.fromstring(data).find("testsuite/testcase/failure").get("message") == finding


def test_an_all_passing_battery_has_no_failure(schema):
    data = junit_xml(sample_report(violated=False))
    schema.validate(data.decode("utf-8"))
    root = ET.fromstring(data)
    assert root.get("failures") == "0" and root.find(".//failure") is None


def test_a_check_whose_training_failed_is_an_error_not_skipped(schema):
    """Issue 43: a battery whose trainings all failed read as skipped tests (nothing failed in CI)."""
    import dataclasses

    from dpaudit.results.check import CheckReport

    failed = dataclasses.replace(
        outcome("lot-size", "inconclusive", epsilon_lb=0.0, ceiling=0.0, num_trials=0),
        finding="lot-size: the training failed: the training function t.py:train raised SystemExit: 0 in trial 0",
        details={
            "reason": "the training function t.py:train raised SystemExit: 0 in trial 0",
            "error": "training failed",
        },
    )
    base = sample_report(violated=False)
    report = CheckReport(**{**_report_fields(), "outcomes": (base.outcomes[0], failed, base.outcomes[2])})
    data = junit_xml(report)
    schema.validate(data.decode("utf-8"))
    root = ET.fromstring(data)
    (case,) = [c for c in root.iter("testcase") if c.get("name") == "lot-size"]
    error = case.find("error")
    assert error is not None and error.get("type") == "TrainingFailed" and "SystemExit: 0" in error.get("message", "")
    assert case.find("skipped") is None
    assert (root.get("errors"), root.get("skipped"), root.get("failures")) == (
        "1",
        "1",
        "0",
    )  # reused-noise is still skipped


def _report_fields() -> dict:
    r = sample_report()
    return {
        "train_fn": r.train_fn,
        "model_fn": r.model_fn,
        "claim_description": r.claim_description,
        "delta": r.delta,
        "confidence": r.confidence,
        "budget_minutes": r.budget_minutes,
        "seconds": r.seconds,
    }


def _broken(break_it) -> str:
    root = ET.fromstring(junit_xml(sample_report()))
    break_it(root)
    return ET.tostring(root, encoding="unicode")


@pytest.mark.parametrize(
    "break_it",
    [
        pytest.param(lambda r: r.find(".//failure").attrib.pop("message"), id="failure-without-message"),
        pytest.param(lambda r: r.find(".//failure").attrib.pop("type"), id="failure-without-type"),
        pytest.param(lambda r: r.find(".//skipped").attrib.pop("message"), id="skipped-without-message"),
        pytest.param(lambda r: r.find(".//testcase").attrib.pop("name"), id="testcase-without-name"),
        pytest.param(lambda r: r.find(".//testcase").attrib.pop("classname"), id="testcase-without-classname"),
        pytest.param(lambda r: r.find(".//testcase").set("time", "1e3"), id="time-with-exponent"),
        pytest.param(lambda r: r.find(".//testcase").set("time", "-1"), id="negative-time"),
        pytest.param(lambda r: r.find("testsuite").attrib.pop("name"), id="suite-without-name"),
        pytest.param(lambda r: r.find("testsuite").set("failures", "one"), id="count-not-a-number"),
        pytest.param(lambda r: r.find(".//property").attrib.pop("value"), id="property-without-value"),
        pytest.param(
            lambda r: r.find(".//testcase").insert(0, ET.Element("failure", {"message": "m", "type": "t"})),
            id="two-outcomes-in-one-case",
        ),
        pytest.param(
            lambda r: r.find("testsuite").append(ET.Element("testcase_", {"name": "x"})), id="unknown-element"
        ),
    ],
)
def test_the_schema_refuses_a_broken_file(schema, break_it):
    assert not schema.is_valid(_broken(break_it))


def test_the_cli_file_validates(schema, cli, monkeypatch, tmp_path):
    """What ``dpaudit check --junit`` writes (with a fake battery; the real one is tested with the checks)."""
    import dpaudit.app.runs.check as check_run
    from dpaudit.results.check import save_check_report

    def fake(spec, run, *, progress=True):
        save_check_report(sample_report(), Path(run.path) / "checks")
        return sample_report()

    monkeypatch.setattr(check_run, "run_check", fake)
    train = tmp_path / "t.py"
    train.write_text("def train(dataset, *, seed, initial_state=None):\n    return None\n")
    junit = tmp_path / "results.xml"
    code, _, err = cli.run(
        "check",
        "--train-fn",
        f"{train}:train",
        "--claim-noise-multiplier",
        "3",
        "--claim-sampling-rate",
        "0.1",
        "--claim-num-steps",
        "50",
        "--junit",
        str(junit),
        "--no-report",
        "--quiet",
        "--out",
        str(tmp_path / "run"),
    )
    assert code == 3, err
    schema.validate(str(junit))
    assert _suite(ET.parse(junit).getroot()).get("timestamp")  # the CLI says when the battery ran
