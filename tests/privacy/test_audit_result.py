"""Audit results and the torch-free audit helpers of :mod:`dpaudit.privacy.audit_procedures` and
:mod:`dpaudit.privacy.audit_bounds` (docs/audits/statistics.md §1–5)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dpaudit.privacy.audit_bounds import composed_gdp_epsilon, gaussian_step_claim
from dpaudit.privacy.audit_procedures import audit_from_one_run, audit_from_scores
from dpaudit.privacy.claims import dpsgd_claim
from dpaudit.privacy.gaussian import gaussian_epsilon
from dpaudit.results.audit import AuditResult, load_audit_result, save_audit_result

DELTA = 1e-5


def _result(**kw):
    base = dict(
        epsilon_lb=1.0,
        confidence=0.95,
        method="multi-run",
        bound="gdp",
        delta=DELTA,
        threshold_strategy="bonferroni",
        num_in=10,
        num_out=10,
        epsilon_ub=2.0,
        accountant="pld",
    )
    return AuditResult(**{**base, **kw})


def test_audit_result_properties_and_round_trip(tmp_path):
    r = _result(epsilon_ub_by_accountant={"pld": 2.0, "rdp": 2.3}, epsilon_estimate=1.5, details={"a": [1, 2]})
    assert not r.violation and r.tightness == pytest.approx(0.5)
    assert _result(epsilon_lb=3.0).violation
    assert _result(epsilon_ub=math.inf).tightness == 0.0
    save_audit_result(r, tmp_path)
    back = load_audit_result(tmp_path)
    assert back.to_dict() == r.to_dict()
    inf = _result(epsilon_ub=math.inf)
    save_audit_result(inf, tmp_path / "x")
    assert json.loads((tmp_path / "x" / "result.json").read_text())["epsilon_ub"] == "inf"
    assert load_audit_result(tmp_path / "x").epsilon_ub == math.inf


@pytest.mark.parametrize(
    "kw",
    [
        dict(epsilon_lb=-1.0),
        dict(confidence=1.0),
        dict(method="nope"),
        dict(bound="x"),
        dict(delta=0.0),
        dict(num_in=-1),
        dict(threshold_strategy="best"),
        dict(epsilon_ub=-1.0),
        dict(method="one-run"),
    ],
)
def test_audit_result_validation(kw):
    with pytest.raises((ValueError, TypeError)):
        _result(**kw)


@pytest.mark.extended
def test_audit_from_scores_and_one_run_keep_estimates_apart():
    rng = np.random.default_rng(0)
    claim = gaussian_step_claim(noise_multiplier=1.0)
    r = audit_from_scores(
        rng.normal(1, 1, 3000),
        rng.normal(0, 1, 3000),
        claim=claim,
        delta=DELTA,
        method="white-box",
        threat_model="white-box",
    )
    # one un-sampled step: naive (basic composition of one exact Gaussian ε) ties with PLD
    assert r.accountant in ("naive", "pld") and r.epsilon_ub == pytest.approx(
        gaussian_epsilon(delta=DELTA, sigma=1.0), rel=1e-3
    )
    assert 0 < r.epsilon_lb < r.epsilon_ub and r.epsilon_estimate is not None
    inc = rng.random(400) < 0.5
    one = audit_from_one_run(
        rng.normal(size=400) + 5 * inc,
        inc,
        claim=dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.0, num_steps=100),
        delta=DELTA,
    )
    assert one.method == "one-run" and one.violation and one.details.guess_curve


def test_composed_estimate_matches_clt_formula():
    from dpaudit.privacy.gaussian import gdp_epsilon

    mu = 0.01 * math.sqrt(1000 * math.expm1(1.0))
    assert composed_gdp_epsilon(mu_step=1.0, sampling_rate=0.01, num_steps=1000, delta=DELTA) == pytest.approx(
        gdp_epsilon(mu=mu, delta=DELTA)
    )
    assert composed_gdp_epsilon(mu_step=0.0, sampling_rate=0.01, num_steps=10, delta=DELTA) == 0.0
