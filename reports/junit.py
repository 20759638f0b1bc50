"""The battery's verdicts as JUnit XML, the test-report format CI services display.

GitHub Actions (through test-report actions), GitLab (``artifacts:reports:junit``) and Jenkins
(the JUnit plugin) all read the Ant/Jenkins shape of JUnit XML: ``<testsuites>`` holding
``<testsuite>`` elements, each with ``<properties>`` and one ``<testcase>`` per test, a failed
test carrying ``<failure message= type=>``, a skipped one ``<skipped message=>``. ``dpaudit
check --junit FILE`` writes one suite, ``dpaudit.check``, with one test case per check:

* ``violated`` → ``<failure type="PrivacyViolation" message=FINDING>``, the numbers (ε_LB, ε_UB,
  ceiling, trainings) in its body — a merge gate fails on it;
* ``inconclusive`` → ``<skipped message=...>`` naming the ceiling the check could reach, which
  stayed at or below ε_UB (the check could not have shown a violation at its size);
* ``passed`` → an empty test case;
* a check whose training function failed (raised, exited, ran past the budget; its outcome's
  ``details.error``) → ``<error type="TrainingFailed" message=FINDING>``: nothing was checked,
  which a CI service must not show as skipped.

Every test case also carries the check's numbers and what it detects and misses in
``<system-out>``, and the suite's ``<properties>`` state the claim, δ, the confidence and ε_UB
(and each check's status, ε_LB and ceiling), so the file alone says what was tested against what.

Torch-free: it reads a stored :class:`~dpaudit.results.check.CheckReport`.
"""

from __future__ import annotations

import datetime
import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from dpaudit.results.check import CheckOutcome, CheckReport
from dpaudit.results.numbers import fmt_lower_bound, fmt_upper_bound
from dpaudit.store import atomic_write_bytes

__all__ = ["SUITE_NAME", "junit_xml", "write_junit"]

#: The suite's name and every test case's ``classname`` (CI services group test cases by it).
SUITE_NAME = "dpaudit.check"


def _num(x: float) -> str:
    """A number as XML text: ``inf`` spelled out, else up to six significant digits."""
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.6g}"


def _ub(x: float) -> str:
    """An upper bound (ε_UB) as XML text: six significant digits rounded up, no thousands separator."""
    return "inf" if math.isinf(x) else fmt_upper_bound(x, 6).replace(",", "")


def _lb(x: float) -> str:
    """A lower bound (ε_LB, a ceiling) as XML text: six significant digits rounded down, no thousands separator."""
    return "inf" if math.isinf(x) else fmt_lower_bound(x, 6).replace(",", "")


def _seconds(x: float) -> str:
    # xs:decimal (the schema's type for time): plain digits, never an exponent.
    return f"{max(0.0, x):.3f}"


def _numbers(o: CheckOutcome) -> str:
    return (
        f"epsilon_lb={_lb(o.epsilon_lb)} epsilon_ub={_ub(o.epsilon_ub)} "
        f"ceiling={_lb(o.ceiling)} confidence={_num(o.confidence)} "
        f"trainings={o.num_trials} seconds={_seconds(o.seconds)}"
    )


def _testcase(suite: ET.Element, o: CheckOutcome) -> None:
    case = ET.SubElement(suite, "testcase", {"classname": SUITE_NAME, "name": o.name, "time": _seconds(o.seconds)})
    if o.details.failed:
        error = ET.SubElement(case, "error", {"message": o.finding, "type": "TrainingFailed"})
        error.text = f"{o.finding}\n{_numbers(o)}\nThe training function failed, so this check tested nothing."
    elif o.status == "violated" and o.kind == "grey-box":
        # Read off the replayed trainings: the cause is the whole diagnosis, there is no ε_LB.
        failure = ET.SubElement(case, "failure", {"message": o.finding, "type": "PrivacyViolation"})
        failure.text = f"{o.finding}\nFound by replaying the training on neighbouring datasets (grey-box)."
    elif o.status == "violated":
        failure = ET.SubElement(case, "failure", {"message": o.finding, "type": "PrivacyViolation"})
        failure.text = (
            f"{o.finding}\n{_numbers(o)}\nThe training function leaks more than its "
            "claim allows: epsilon_lb > epsilon_ub at confidence "
            f"{_num(o.confidence)}."
        )
    elif o.status == "inconclusive":
        # A ceiling of 0 is a check that could not run; its finding says why.
        reach = (
            f" (ceiling {_lb(o.ceiling)} <= epsilon_ub {_ub(o.epsilon_ub)}: this "
            "check could not have shown a violation at this size)"
            if o.ceiling > 0
            else ""
        )
        message = o.finding + reach
        ET.SubElement(case, "skipped", {"message": message})
    out = ET.SubElement(case, "system-out")
    out.text = f"{o.finding}\n{_numbers(o)}\ndetects: {o.detects}\nmisses: {o.misses}\n"


def _properties(suite: ET.Element, report: CheckReport) -> None:
    props = ET.SubElement(suite, "properties")
    pairs: list[tuple[str, Any]] = [
        ("train_fn", report.train_fn),
        ("model_fn", report.model_fn or ""),
        ("claim", report.claim_description),
        ("delta", _num(report.delta)),
        ("confidence", _num(report.confidence)),
        ("epsilon_ub", "" if report.epsilon_ub is None else _ub(report.epsilon_ub)),
        ("budget_minutes", _num(report.budget_minutes)),
    ]
    for o in report.outcomes:
        pairs += [
            (f"{o.name}.status", o.status),
            (f"{o.name}.epsilon_lb", _lb(o.epsilon_lb)),
            (f"{o.name}.ceiling", _lb(o.ceiling)),
        ]
    for name, value in pairs:
        ET.SubElement(props, "property", {"name": name, "value": str(value)})


def junit_xml(report: CheckReport, *, timestamp: datetime.datetime | None = None) -> bytes:
    """The JUnit XML document of ``report`` (UTF-8, with an XML declaration).

    Args:
        report: the battery's verdicts.
        timestamp: when the battery ran (the suite's ``timestamp``, local time without a zone, as
            the format has it); omitted when ``None`` so the bytes depend on the report alone.
    """
    outcomes = report.outcomes
    counts = {
        "tests": str(len(outcomes)),
        "failures": str(sum(o.status == "violated" for o in outcomes)),
        "errors": str(sum(o.details.failed for o in outcomes)),
        "skipped": str(sum(o.status == "inconclusive" and not o.details.failed for o in outcomes)),
        "time": _seconds(report.seconds),
    }
    root = ET.Element("testsuites", {"name": "dpaudit check", **counts})
    attrs = {"name": SUITE_NAME, **counts}
    if timestamp is not None:
        attrs["timestamp"] = timestamp.replace(microsecond=0, tzinfo=None).isoformat()
    suite = ET.SubElement(root, "testsuite", attrs)
    _properties(suite, report)
    for o in outcomes:
        _testcase(suite, o)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


def write_junit(
    report: CheckReport, path: str | os.PathLike[str], *, timestamp: datetime.datetime | None = None
) -> Path:
    """Writes :func:`junit_xml` of ``report`` to ``path`` atomically; returns the path."""
    return atomic_write_bytes(Path(path).expanduser(), junit_xml(report, timestamp=timestamp))
