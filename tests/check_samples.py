"""Battery verdicts built from result values alone (no training), for the CLI, JUnit and report tests of ``dpaudit
check``."""

from __future__ import annotations

from pathlib import Path

from dpaudit.results.check import CheckOutcome, CheckReport, save_check_report
from dpaudit.store import RunDir

EPSILON_UB = 0.9712
CLAIM = "claimed by examples/dp_bugs/realised_lot_size.py:train: DP-SGD q=0.1 sigma=3 T=50"


def outcome(
    name: str, status: str, *, epsilon_lb: float, ceiling: float, seconds: float = 12.5, num_trials: int = 40
) -> CheckOutcome:
    """One check's verdict; its finding names the check and says what it found, as the battery's do."""
    verb = {"violated": ">", "passed": "<=", "inconclusive": "<="}[status]
    return CheckOutcome(
        name=name,
        status=status,
        finding=f"{name}: eps_LB {epsilon_lb:.3g} {verb} eps_UB {EPSILON_UB:.3g} at 98.3% ({status})",
        epsilon_lb=epsilon_lb,
        epsilon_ub=EPSILON_UB,
        ceiling=ceiling,
        confidence=0.983,
        num_trials=num_trials,
        seconds=seconds,
        detects=f"what {name} is designed to detect",
        misses=f"what {name} cannot see",
        details={"num_in": num_trials // 2, "num_out": num_trials // 2},
    )


def sample_report(*, violated: bool = True) -> CheckReport:
    """Three checks: ``worst-case`` violated (or passed), ``lot-size`` passed, ``reused-noise`` inconclusive."""
    first = (
        outcome("worst-case", "violated", epsilon_lb=4.1, ceiling=5.2)
        if violated
        else outcome("worst-case", "passed", epsilon_lb=0.2, ceiling=5.2)
    )
    return CheckReport(
        train_fn="examples/dp_bugs/realised_lot_size.py:train",
        model_fn=None,
        claim_description=CLAIM,
        delta=1e-5,
        confidence=0.95,
        budget_minutes=5.0,
        outcomes=(
            first,
            outcome("lot-size", "passed", epsilon_lb=0.31, ceiling=2.4, seconds=40.0),
            outcome("reused-noise", "inconclusive", epsilon_lb=0.0, ceiling=0.6, seconds=3.25, num_trials=8),
        ),
        seconds=55.75,
    )


def build_check_run(path: str | Path, *, violated: bool = True) -> RunDir:
    """A run directory holding one stored battery verdict (``checks/check.json``), as ``dpaudit check`` leaves it."""
    run = RunDir(path).create(command="test")
    save_check_report(sample_report(violated=violated), run.path / "checks")
    return run


def buggy_report() -> CheckReport:
    """The reviewer's case: one bug (the same noise seed on every step) that four checks flag — the grey-box noise
    check names the cause, three statistical checks are violated at their design's ceiling (saturated) — beside
    one check that passed."""
    grey = CheckOutcome(
        name="greybox-noise",
        status="violated",
        finding="greybox-noise: the Gaussian draw #2 repeats draw #1 value for value",
        epsilon_lb=0.0,
        epsilon_ub=EPSILON_UB,
        ceiling=0.0,
        confidence=0.983,
        num_trials=3,
        seconds=2.0,
        detects="noise that is not drawn, not added or reused",
        misses="noise of the wrong scale drawn afresh",
        kind="grey-box",
        cause="the Gaussian draw #2 repeats draw #1 value for value: the noise comes from a constant seed",
    )
    return CheckReport(
        train_fn="examples/dp_bugs/same_noise_seed.py:train",
        model_fn=None,
        claim_description=CLAIM,
        delta=1e-5,
        confidence=0.95,
        budget_minutes=5.0,
        outcomes=(
            grey,
            outcome("worst-case", "violated", epsilon_lb=10.3, ceiling=10.3, num_trials=400),
            outcome("lot-size", "passed", epsilon_lb=0.0, ceiling=2.4),
            outcome("sampling-rate", "violated", epsilon_lb=4.07, ceiling=4.07),
            outcome("state-leakage", "violated", epsilon_lb=4.02, ceiling=4.02),
        ),
        seconds=30.0,
    )


def build_buggy_check_run(path: str | Path) -> RunDir:
    """A run directory holding :func:`buggy_report` as ``dpaudit check`` leaves it."""
    run = RunDir(path).create(command="test")
    save_check_report(buggy_report(), run.path / "checks")
    return run
