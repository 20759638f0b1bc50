"""Every audit result carries the last-iterate ε of its claim and splits ε_UB − ε_LB (issue 33, item 3).

Issue 42, part 4: the last-iterate ε is exact for linear losses and a heuristic for others, so the
split rests on bounds alone (design + attack) and ε_UB − last-iterate rides beside it, never
capping what the attack leaves.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpaudit.privacy.audit_bounds import gaussian_step_claim
from dpaudit.privacy.audit_procedures import audit_from_one_run, audit_from_scores
from dpaudit.privacy.claims import NonPrivateClaim, dpsgd_claim
from dpaudit.privacy.last_iterate import last_iterate_epsilon
from dpaudit.results.audit import AuditResult, load_audit_result, save_audit_result
from tests.privacy.last_iterate_reference import quadrature_epsilon

DELTA = 1e-5
CLAIM = dpsgd_claim(sampling_rate=0.1, noise_multiplier=3.0, num_steps=50)
# Quadrature (tests/privacy/test_last_iterate.py): ε(1e-5) of q = 0.1, σ = 3, T = 50.
LAST_ITERATE = 0.944194039195


def _scores(seed=0, n=200):
    rng = np.random.default_rng(seed)
    return rng.normal(1.0, 1.0, n), rng.normal(0.0, 1.0, n)


def test_scores_audit_carries_the_last_iterate_epsilon_and_round_trips(tmp_path):
    s_in, s_out = _scores()
    r = audit_from_scores(s_in, s_out, claim=CLAIM, delta=DELTA)
    assert r.epsilon_last_iterate == pytest.approx(LAST_ITERATE, abs=1e-8)
    assert r.epsilon_last_iterate < r.epsilon_ub
    save_audit_result(r, tmp_path)
    stored = json.loads((tmp_path / "result.json").read_text())
    assert stored["epsilon_last_iterate"] == pytest.approx(LAST_ITERATE, abs=1e-8)
    assert stored["gap"]["last_iterate_heuristic"] == pytest.approx(r.epsilon_ub - LAST_ITERATE, abs=1e-8)
    back = load_audit_result(tmp_path)
    assert back.epsilon_last_iterate == r.epsilon_last_iterate and back.to_dict() == r.to_dict()


def test_one_run_audit_carries_it_too():
    rng = np.random.default_rng(1)
    inc = rng.random(400) < 0.5
    r = audit_from_one_run(rng.normal(0, 1, 400) + inc, inc, claim=CLAIM, delta=DELTA)
    assert r.epsilon_last_iterate == pytest.approx(LAST_ITERATE, abs=1e-8)


def test_claims_outside_the_family_have_none():
    s_in, s_out = _scores()
    r = audit_from_scores(s_in, s_out, claim=NonPrivateClaim(), delta=DELTA)
    assert r.epsilon_last_iterate is None
    assert r.gap["last_iterate_heuristic"] is None
    # The white-box game compares one un-sampled step: nothing is hidden from it.
    w = audit_from_scores(
        s_in,
        s_out,
        claim=gaussian_step_claim(noise_multiplier=1.0),
        delta=DELTA,
        method="white-box",
        threat_model="white-box",
    )
    assert w.epsilon_last_iterate == pytest.approx(w.epsilon_ub, rel=1e-6)
    assert w.gap["last_iterate_heuristic"] == pytest.approx(0.0, abs=1e-5)


def test_results_stored_before_it_load_with_none(tmp_path):
    s_in, s_out = _scores()
    data = audit_from_scores(s_in, s_out, claim=CLAIM, delta=DELTA).to_dict()
    for key in ("epsilon_last_iterate", "gap"):
        del data[key]
    old = AuditResult.from_dict(data)
    assert old.epsilon_last_iterate is None
    assert old.gap["design"] is not None


def _result(ub, li, ceiling, lb):
    return AuditResult(
        epsilon_lb=lb,
        confidence=0.95,
        method="multi-run",
        bound="clopper-pearson",
        delta=DELTA,
        threshold_strategy="bonferroni",
        num_in=10,
        num_out=10,
        epsilon_ub=ub,
        accountant="pld",
        ceiling=ceiling,
        epsilon_last_iterate=li,
    )


@pytest.mark.parametrize(
    ("ub", "li", "ceiling", "lb", "expected"),
    [
        (
            2.0,
            1.5,
            1.0,
            0.4,
            {"last_iterate_heuristic": 0.5, "design": 1.0, "attack": 0.6},
        ),  # ceiling below the heuristic
        (
            2.0,
            1.5,
            3.0,
            0.4,
            {"last_iterate_heuristic": 0.5, "design": 0.0, "attack": 1.6},
        ),  # the design could show it all
        (2.0, None, 1.0, 0.4, {"last_iterate_heuristic": None, "design": 1.0, "attack": 0.6}),  # no heuristic
        (
            2.0,
            1.0,
            3.0,
            1.2,
            {"last_iterate_heuristic": 1.0, "design": 0.0, "attack": 0.8},
        ),  # ε_LB above the heuristic: no negative share
        (2.0, 1.5, None, 0.4, {"last_iterate_heuristic": 0.5, "design": 0.0, "attack": 1.6}),  # no ceiling recorded
    ],
)
def test_gap_splits_the_whole_gap_on_bounds_alone(ub, li, ceiling, lb, expected):
    gap = _result(ub, li, ceiling, lb).gap
    for key, value in expected.items():
        assert gap[key] == (None if value is None else pytest.approx(value))
    # The two shares rest on ε_UB, the ceiling and ε_LB and add up to the whole gap; the heuristic is not a third share.
    assert gap["design"] + gap["attack"] == pytest.approx(ub - lb)
    assert (gap["epsilon_ub"], gap["epsilon_last_iterate"], gap["ceiling"], gap["epsilon_lb"]) == (ub, li, ceiling, lb)


@settings(max_examples=60, deadline=None)
@given(
    ub=st.floats(0.01, 50.0),
    li_share=st.one_of(st.none(), st.floats(0.0, 1.0)),
    above_lb=st.one_of(st.none(), st.floats(0.0, 80.0)),
    lb_share=st.floats(0.0, 1.0),
)
def test_the_last_iterate_caps_nothing(ub, li_share, above_lb, lb_share):
    # Issue 42, part 4: the last-iterate ε is no upper bound for non-linear losses, so the shares
    # must not move with it: with or without it, and wherever it lies, design and attack are the same.
    lb = lb_share * ub
    ceiling = None if above_lb is None else lb + above_lb  # a perfect attack bounds every attack
    li = None if li_share is None else li_share * ub
    gap, plain = _result(ub, li, ceiling, lb).gap, _result(ub, None, ceiling, lb).gap
    assert (gap["design"], gap["attack"]) == (plain["design"], plain["attack"])
    assert gap["design"] >= 0 and gap["attack"] >= -1e-12  # no violation here: nothing negative
    assert gap["attack"] <= (ub if ceiling is None else min(ub, ceiling)) - lb + 1e-12


@pytest.mark.parametrize("bad", [-0.1, math.nan, "x"])
def test_bad_last_iterate_is_refused(bad):
    with pytest.raises((ValueError, TypeError), match="epsilon_last_iterate"):
        AuditResult(
            epsilon_lb=0.1,
            confidence=0.95,
            method="multi-run",
            bound="gdp",
            delta=DELTA,
            threshold_strategy="bonferroni",
            num_in=1,
            num_out=1,
            epsilon_ub=1.0,
            accountant="pld",
            epsilon_last_iterate=bad,
        )


def test_abadi_setting_values():
    # The setting of Abadi et al. (2016): q = 0.01, σ = 4, T = 10,000 at δ = 1e-5. With σ this large
    # the sum of 10,000 steps is nearly Gaussian either way, so the last iterate gains little.
    # The reference is the direct quadrature of tests/privacy/last_iterate_reference.py (0.93086).
    li = last_iterate_epsilon(sampling_rate=0.01, noise_multiplier=4.0, num_steps=10_000, delta=DELTA)
    ub = dpsgd_claim(sampling_rate=0.01, noise_multiplier=4.0, num_steps=10_000).epsilon(delta=DELTA)
    assert li == pytest.approx(quadrature_epsilon(0.01, 4.0, 10_000, DELTA), abs=1e-5) and li < ub
