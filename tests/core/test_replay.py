"""The neighbouring replay's comparison (dpaudit/replay.py) on hand-built traces.

Every expected number is computed by hand in the test (a norm of a small difference), never
read back from the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.replay import MechanismInput, ReplayTrace, compare_traces, neighbours


def _trace(
    inputs: list[tuple[str, list[float], float, str]] | None = None, released: dict | None = None, defense: str = "toy"
) -> ReplayTrace:
    return ReplayTrace(
        defense=defense,
        mechanism_inputs=tuple(
            MechanismInput(name=n, value=np.array(x), sensitivity=s, norm=norm) for n, x, s, norm in inputs or []
        ),
        released=released or {},
    )


def test_identical_traces_hold_with_ratio_zero() -> None:
    run = _trace([("step 0: sum", [1.0, 2.0], 1.0, "l2")], {"steps": 3})
    verdict = compare_traces(run, run)
    assert verdict.holds and verdict.findings == () and verdict.max_ratio == 0.0
    assert verdict.num_mechanism_inputs == 1
    assert "holds" in verdict.summary()


# (norm, the difference (3, -4, 12), its norm by hand)
NORM_CASES = [("l1", 3 + 4 + 12), ("l2", math.sqrt(9 + 16 + 144)), ("linf", 12)]


@pytest.mark.parametrize(("norm", "size"), NORM_CASES)
def test_sensitivity_is_measured_in_the_stated_norm(norm: str, size: float) -> None:
    run = _trace([("q", [0.0, 0.0, 0.0], 100.0, norm)])
    moved = _trace([("q", [3.0, -4.0, 12.0], 100.0, norm)])
    verdict = compare_traces(run, moved)
    assert verdict.holds
    assert verdict.max_ratio == pytest.approx(size / 100.0, rel=1e-12)
    # Just below the measured change, the same move is a finding that reports both numbers.
    tight = compare_traces(
        _trace([("q", [0.0, 0.0, 0.0], size * 0.99, norm)]), _trace([("q", [3.0, -4.0, 12.0], size * 0.99, norm)])
    )
    assert not tight.holds
    (finding,) = tight.findings
    assert finding.kind == "sensitivity" and finding.name == "q"
    assert finding.measured == pytest.approx(size, rel=1e-12) and finding.allowed == pytest.approx(size * 0.99)
    assert "q moved by" in tight.summary()


def test_a_change_equal_to_the_sensitivity_holds() -> None:
    # |(0.6, 0.8)| = 1 exactly at sensitivity 1: the bound is inclusive.
    verdict = compare_traces(_trace([("s", [0.0, 0.0], 1.0, "l2")]), _trace([("s", [0.6, 0.8], 1.0, "l2")]))
    assert verdict.holds and verdict.max_ratio == pytest.approx(1.0)


def test_a_zero_sensitivity_input_that_moves_has_infinite_ratio() -> None:
    verdict = compare_traces(_trace([("z", [1.0], 0.0, "l2")]), _trace([("z", [1.5], 0.0, "l2")]))
    assert not verdict.holds and verdict.max_ratio == math.inf
    assert verdict.findings[0].measured == pytest.approx(0.5)


def test_different_inputs_are_a_control_flow_finding() -> None:
    run = _trace([("step 0", [0.0], 1.0, "l2"), ("step 1", [0.0], 1.0, "l2")])
    shorter = _trace([("step 0", [0.5], 1.0, "l2")])
    verdict = compare_traces(run, shorter)
    kinds = [f.kind for f in verdict.findings]
    assert kinds == ["control-flow"]
    assert verdict.findings[0].name == "step 1" and verdict.findings[0].measured == math.inf
    assert "2 inputs on D, 1 on D′" in verdict.findings[0].message
    # The inputs both runs share are still compared: step 0 moved by 0.5 of 1.
    assert verdict.max_ratio == pytest.approx(0.5)


def test_reordered_inputs_are_a_control_flow_finding() -> None:
    a = _trace([("x", [0.0], 1.0, "l2"), ("y", [0.0], 1.0, "l2")])
    b = _trace([("y", [0.0], 1.0, "l2"), ("x", [0.0], 1.0, "l2")])
    verdict = compare_traces(a, b)
    assert [f.kind for f in verdict.findings] == ["control-flow"] and verdict.findings[0].name == "x"


def test_an_input_of_another_shape_is_an_infinite_sensitivity_finding() -> None:
    verdict = compare_traces(_trace([("v", [0.0, 0.0], 5.0, "l2")]), _trace([("v", [0.0, 0.0, 0.0], 5.0, "l2")]))
    assert [f.kind for f in verdict.findings] == ["sensitivity"] and verdict.findings[0].measured == math.inf


def test_released_values_must_be_identical() -> None:
    run = _trace(released={"mean": [0.25, 0.5], "steps": 10})
    verdict = compare_traces(run, _trace(released={"mean": [0.25, 0.75], "steps": 10}))
    (finding,) = verdict.findings
    assert finding.kind == "released" and finding.name == "mean"
    assert finding.measured == pytest.approx(0.25) and finding.allowed == 0.0
    assert "leaks" in verdict.summary()
    assert compare_traces(run, _trace(released={"mean": [0.25, 0.5], "steps": 10})).holds


def test_released_value_present_in_one_run_only() -> None:
    verdict = compare_traces(_trace(released={"a": 1, "b": 2}), _trace(released={"a": 1, "c": 3}))
    assert [(f.kind, f.name) for f in verdict.findings] == [("released", "b"), ("released", "c")]
    assert "only by the run on D:" in verdict.findings[0].message
    assert "only by the run on D′" in verdict.findings[1].message
    assert all(f.measured == math.inf for f in verdict.findings)


def test_released_value_of_another_shape() -> None:
    verdict = compare_traces(_trace(released={"p": [1.0, 2.0]}), _trace(released={"p": [1.0, 2.0, 3.0]}))
    assert [f.kind for f in verdict.findings] == ["released"] and "shape" in verdict.findings[0].message


def test_summary_counts_the_other_findings() -> None:
    verdict = compare_traces(_trace(released={"a": 1, "b": 2}), _trace(released={"a": 0, "b": 0}))
    assert verdict.summary().endswith("(and 1 more)")


def test_traces_of_different_defenses_are_refused() -> None:
    with pytest.raises(ValueError, match="neighbour"):
        compare_traces(_trace(defense="a"), _trace(defense="b"))


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"name": "", "value": [1.0], "sensitivity": 1.0}, "name"),
        ({"name": "x", "value": [1.0], "sensitivity": -1.0}, "sensitivity"),
        ({"name": "x", "value": [1.0], "sensitivity": math.inf}, "sensitivity"),
        ({"name": "x", "value": [1.0], "sensitivity": 1.0, "norm": "l3"}, "norm"),
        ({"name": "x", "value": [math.nan], "sensitivity": 1.0}, "finite"),
    ],
)
def test_mechanism_input_validation(kwargs: dict, argument: str) -> None:
    with pytest.raises(ValueError, match=argument):
        MechanismInput(**kwargs)


def test_trace_validation_and_immutability() -> None:
    with pytest.raises(ValueError, match="unique"):
        _trace([("x", [0.0], 1.0, "l2"), ("x", [1.0], 1.0, "l2")])
    with pytest.raises(ValueError, match="defense"):
        _trace(defense="")
    with pytest.raises(ValueError, match="finite"):
        _trace(released={"r": [np.inf]})
    trace = _trace([("x", [0.0], 1.0, "l2")], {"r": [1.0]})
    with pytest.raises(ValueError):
        trace.mechanism_inputs[0].value[0] = 5.0  # read-only copy
    with pytest.raises(ValueError):
        trace.released["r"][0] = 5.0


def test_neighbours() -> None:
    assert neighbours([5, 1, 3], removed=3) == (1, 5)
    assert neighbours([5, 1, 3], added=2) == (1, 2, 3, 5)
    with pytest.raises(ValueError, match="removed"):
        neighbours([1, 2], removed=7)
    with pytest.raises(ValueError, match="added"):
        neighbours([1, 2], added=2)
    with pytest.raises(ValueError, match="exactly one"):
        neighbours([1, 2])
    with pytest.raises(ValueError, match="exactly one"):
        neighbours([1, 2], removed=1, added=3)
