"""Null calibration: no ε_LB procedure flags an ideal mechanism that meets its claim more often than 1 − confidence.

The simulation lives in ``scripts/null_calibration.py`` (the full table, ≥ 1,000 simulations per
cell, is the slow twin here); the default run checks a few cells at 200 simulations with fixed
seeds, against a binomial tolerance, so a miscalibrated procedure fails and a sound one never
flakes. Also the regression for issue 29 defect 4: GDP bounds are used only for claims whose
trade-off curve is Gaussian-family, and every result names the assumption it made.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest
from dp_accounting import dp_event as dpe
from scipy import stats

from dpaudit.privacy.audit_bounds import gaussian_step_claim
from dpaudit.privacy.audit_procedures import audit_from_one_run, audit_from_scores
from dpaudit.privacy.claims import DPClaim, NonPrivateClaim, dpsgd_claim
from dpaudit.privacy.dssgd import dssgd_svt_claim
from dpaudit.privacy.pate.claim import PATEClaim

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "null_calibration.py"
CONFIDENCE = 0.95
LAPLACE = DPClaim(event=dpe.LaplaceDpEvent(1.0), description="Laplace eps=1")


def _script():
    if "null_calibration" in sys.modules:
        return sys.modules["null_calibration"]
    spec = importlib.util.spec_from_file_location("null_calibration", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["null_calibration"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _most_violations(simulations: int) -> int:
    """Violations a procedure at exactly 1 − confidence exceeds with probability < 0.1 %: above it, miscalibrated."""
    return int(stats.binom.ppf(0.999, simulations, 1.0 - CONFIDENCE))


def _non_gaussian_claims():
    pate = PATEClaim(
        aggregator="gnmax",
        parameters={"sigma": 40.0},
        num_queries=100,
        num_answered=100,
        orders=(2.0, 8.0, 32.0),
        rdp=(0.1, 0.4, 1.6),
    )
    dssgd = dssgd_svt_claim(
        epsilon_per_parameter=1.0, bound=0.001, threshold=0.0001, uploads_per_round=10, num_rounds=5, num_parameters=100
    )
    mixed = DPClaim(
        event=dpe.ComposedDpEvent([dpe.GaussianDpEvent(2.0), dpe.LaplaceDpEvent(3.0)]),
        description="Gaussian then Laplace",
    )
    return [LAPLACE, mixed, NonPrivateClaim(), pate, dssgd]


# ----------------------------------------------------------------------------- defect 4
def test_default_bound_on_ideal_laplace_scores_stays_below_its_epsilon():
    """Issue 29, defect 4: the default audit fitted a Gaussian curve to a pure ε = 1 Laplace
    mechanism's ideal scores (20,000 per side) and reported ε_LB 4.38, a false violation."""
    rng = np.random.default_rng(0)
    s_in, s_out = rng.laplace(1.0, 1.0, 20_000), rng.laplace(0.0, 1.0, 20_000)
    result = audit_from_scores(s_in, s_out, claim=LAPLACE, delta=1e-5)
    assert result.epsilon_lb <= 1.0 and not result.violation
    assert result.bound == "clopper-pearson" and result.assumption == "none (Clopper-Pearson)"
    assert result.to_dict()["assumption"] == "none (Clopper-Pearson)"
    assert result.epsilon_lb > 0.8  # Clopper–Pearson still sees most of it (0.96)


@pytest.mark.parametrize("claim", _non_gaussian_claims(), ids=lambda c: c.kind)
def test_gaussian_shaped_bounds_are_refused_for_other_claims(claim):
    from dpaudit.privacy.audit_bounds import resolve_bound

    assert claim.trade_off_family is None
    assert resolve_bound("auto", claim=claim) == "clopper-pearson"
    scores = np.linspace(0, 1, 20)
    with pytest.raises(ValueError, match=rf"bound='gdp'.*kind '{claim.kind}'"):
        audit_from_scores(scores, scores, claim=claim, delta=1e-5, bound="gdp")
    with pytest.raises(ValueError, match=rf"bound='fdp'.*kind '{claim.kind}'"):
        audit_from_one_run(scores, np.arange(20) % 2 == 0, claim=claim, delta=1e-5, bound="fdp")


@pytest.mark.extended
def test_gaussian_claims_keep_gdp_and_name_the_approximation():
    step = gaussian_step_claim(noise_multiplier=1.0)
    dpsgd = dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.0, num_steps=100)
    composed = DPClaim(
        event=dpe.ComposedDpEvent([dpe.GaussianDpEvent(1.0), dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(2.0), 3)])
    )
    assert (step.trade_off_family, step.trade_off_exact) == ("gaussian", True)
    assert (composed.trade_off_family, composed.trade_off_exact) == ("gaussian", True)
    assert (dpsgd.trade_off_family, dpsgd.trade_off_exact) == ("gaussian", False)
    rng = np.random.default_rng(1)
    s_in, s_out = rng.normal(1.0, 1.0, 500), rng.normal(0.0, 1.0, 500)
    exact = audit_from_scores(s_in, s_out, claim=step, delta=1e-5)
    approx = audit_from_scores(s_in, s_out, claim=dpsgd, delta=1e-5)
    assert exact.bound == approx.bound == "gdp"
    assert exact.assumption == "gaussian trade-off (GDP)"
    assert approx.assumption.startswith("gaussian trade-off (GDP); approximate for Poisson-sampled steps")
    one_run = audit_from_one_run(np.r_[s_in, s_out], np.arange(1000) < 500, claim=step, delta=1e-5, bound="steinke")
    assert one_run.assumption == "none (Steinke et al. one-run)" and "assumes none" in one_run.summary()


def test_cli_refuses_gdp_for_a_non_gaussian_claim_with_exit_2(tmp_path, capsys):
    from dpaudit.app.cli import main

    claim = tmp_path / "claim.json"
    claim.write_text(json.dumps(LAPLACE.to_dict()))
    base = [
        "audit",
        "--train-fn",
        "scripts/opacus_train_fn.py:train",
        "--claim",
        str(claim),
        "--out",
        str(tmp_path / "run"),
        "--json",
    ]
    capsys.readouterr()
    assert main([*base, "--bound", "gdp"]) == 2
    out = capsys.readouterr()
    assert "--bound" in out.err and "kind 'dp'" in out.err and out.err.count("\n") == 1
    assert json.loads(out.out)["argument"] == "--bound"
    assert main([*base, "--method", "one-run", "--one-run-bound", "fdp"]) == 2
    assert "--one-run-bound" in capsys.readouterr().err


# ----------------------------------------------------------------------------- null calibration
#: Default-suite cells: (procedure, mechanism, simulations) at 500 observations per side / 500
#: canaries; the one-run bounds bisect per simulation, so they get fewer.
QUICK_CELLS = [
    ("multi-run CP", "laplace", 200),
    ("multi-run CP", "randomized-response", 200),
    ("multi-run GDP", "gaussian", 200),
    ("multi-run GDP", "sampled-gaussian", 200),
    ("one-run Steinke", "laplace", 100),
    ("one-run f-DP", "gaussian", 100),
    ("membership", "randomized-response", 200),
    ("compare max", "laplace", 100),
]


def _check(cell) -> None:
    assert cell.applicable
    assert cell.violations <= _most_violations(cell.simulations), (
        f"{cell.procedure} x {cell.mechanism}: {cell.violations}/{cell.simulations} false violations"
    )
    assert 0.0 <= cell.mean_ratio <= 1.5 and math.isfinite(cell.mean_ratio)


@pytest.mark.extended
@pytest.mark.parametrize("procedure, mechanism, simulations", QUICK_CELLS)
def test_false_violation_rate_at_most_one_minus_confidence(procedure, mechanism, simulations):
    nc = _script()
    mech = next(m for m in nc.mechanisms() if m.name == mechanism)
    _check(nc.run_cell(procedure, mech, simulations=simulations, num_observations=500, num_canaries=500, seed=0))


def test_gaussian_shaped_procedures_are_not_applied_to_other_mechanisms():
    nc = _script()
    laplace = next(m for m in nc.mechanisms() if m.name == "laplace")
    cell = nc.run_cell("multi-run GDP", laplace, simulations=10, num_observations=50, num_canaries=50, seed=0)
    assert not cell.applicable and "n/a" in cell.reason


def test_the_tolerance_catches_a_miscalibrated_procedure():
    """The check has teeth: GDP on the Laplace mechanism (the old default) flags it nearly always."""
    nc = _script()
    laplace = next(m for m in nc.mechanisms() if m.name == "laplace")
    rng = np.random.default_rng(0)
    lbs = nc.multi_run("gdp")(laplace, rng, 50, 2000, 0)
    assert int(np.sum(lbs > laplace.epsilon)) > _most_violations(50)


@pytest.mark.slow
def test_full_null_calibration_table(tmp_path):
    nc = _script()
    out = tmp_path / "null.json"
    assert nc.main(["--simulations", "1000", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert not data["miscalibrated"]
    for cell in data["cells"]:
        if cell["applicable"]:
            assert cell["violations"] <= _most_violations(cell["simulations"]), cell
