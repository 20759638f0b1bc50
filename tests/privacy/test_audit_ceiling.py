"""Audit ceilings (issue 15, item 4): the largest ε_LB an audit's design could produce.

The ceiling is the same bound on the same counts (observations or canaries and guess counts,
Bonferroni factor, confidence, δ, group size) with a perfect attack, computed by one helper,
:func:`dpaudit.privacy.audit_procedures.audit_ceiling`, for every bound. Also: null scores give ε_LB = 0 for
every bound and threshold strategy (docs/audits/statistics.md §8, the |μ| failure mode of a public library).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpaudit.privacy.audit_procedures import audit_ceiling, audit_from_one_run, audit_from_scores
from dpaudit.privacy.audit_trials import epsilon_lb_by_trials
from dpaudit.privacy.claims import dpsgd_claim
from dpaudit.results.audit import AuditResult, load_audit_result, save_audit_result

DELTA = 1e-5
CLAIM = dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.1, num_steps=100)
#: Every (bound, threshold strategy) of the IN/OUT games, and every one-run bound.
SCORE_DESIGNS = [(b, s) for b in ("clopper-pearson", "gdp") for s in ("bonferroni", "split")]
ONE_RUN_BOUNDS = ("steinke", "fdp")


@pytest.mark.parametrize("n, expected", [(100, 3.28), (500, 4.91), (1000, 5.60), (5000, 7.21)])
def test_clopper_pearson_ceiling_matches_the_reference(n, expected):
    # docs/audits/statistics.md §1: zero errors, n observations per side, 95 %.
    assert (
        round(audit_ceiling(bound="clopper-pearson", delta=DELTA, confidence=0.95, num_in=n, num_out=n), 2) == expected
    )


def test_one_run_ceiling_matches_the_reference():
    # docs/audits/statistics.md §4: 100 guesses, all correct, 95 %, δ = 1e-5 → 3.49.
    assert (
        round(audit_ceiling(bound="one-run", delta=DELTA, confidence=0.95, num_in=50, num_out=50, guess_counts=[50]), 2)
        == 3.49
    )


def test_ceiling_divides_by_group_size_and_pays_the_bonferroni_factor():
    one = audit_ceiling(bound="gdp", delta=DELTA, confidence=0.95, num_in=200, num_out=200)
    assert audit_ceiling(
        bound="gdp", delta=DELTA, confidence=0.95, num_in=200, num_out=200, group_size=4
    ) == pytest.approx(one / 4)
    assert audit_ceiling(bound="gdp", delta=DELTA, confidence=0.95, num_in=200, num_out=200, num_tests=20) < one


def test_ceiling_refuses_bad_arguments_naming_them():
    with pytest.raises(ValueError, match="bound"):
        audit_ceiling(bound="best", delta=DELTA, confidence=0.95, num_in=10, num_out=10)
    with pytest.raises(ValueError, match="guess_counts"):
        audit_ceiling(bound="one-run", delta=DELTA, confidence=0.95, num_in=10, num_out=10, guess_counts=[11])
    with pytest.raises(ValueError, match="guess_counts"):
        audit_ceiling(bound="one-run-fdp", delta=DELTA, confidence=0.95, num_in=10, num_out=10)


@pytest.mark.parametrize("bound", ["clopper-pearson", "gdp", "one-run", "one-run-fdp"])
def test_ceiling_grows_with_the_number_of_trials(bound):
    sizes = [10, 30, 100, 300, 1000]
    if bound.startswith("one-run"):
        # m canaries, half IN, the default guess grid (2–50 % of m) scaled with m.
        values = [
            audit_ceiling(
                bound=bound,
                delta=DELTA,
                confidence=0.95,
                num_in=m // 2,
                num_out=m // 2,
                num_tests=5,
                guess_counts=sorted({max(1, int(m * f)) for f in (0.02, 0.05, 0.1, 0.2, 0.5)}),
            )
            for m in sizes
        ]
    else:
        values = [
            audit_ceiling(bound=bound, delta=DELTA, confidence=0.95, num_in=n, num_out=n, num_tests=20) for n in sizes
        ]
    assert all(b > a for a, b in zip(values, values[1:])), values


def _perfect(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    # Every IN above every OUT, with a wide gap (a split threshold lands inside it).
    return 100.0 + rng.random(n), rng.random(n)


@pytest.mark.parametrize("bound, strategy", SCORE_DESIGNS)
def test_a_perfect_attack_reaches_exactly_the_ceiling(bound, strategy):
    rng = np.random.default_rng(0)
    for n in (20, 100, 400):
        s_in, s_out = _perfect(n, rng)
        r = audit_from_scores(s_in, s_out, claim=CLAIM, delta=DELTA, bound=bound, strategy=strategy)
        assert r.ceiling is not None and r.ceiling > 0
        assert r.epsilon_lb == pytest.approx(r.ceiling, rel=1e-12), (n, r.epsilon_lb, r.ceiling)


@pytest.mark.parametrize("bound", ONE_RUN_BOUNDS)
def test_a_perfect_one_run_attack_reaches_exactly_the_ceiling(bound):
    rng = np.random.default_rng(1)
    for m in (50, 400):
        inc = rng.random(m) < 0.5
        r = audit_from_one_run(10.0 * inc + rng.random(m), inc, claim=CLAIM, delta=DELTA, bound=bound)
        assert r.ceiling is not None and r.ceiling > 0
        assert r.epsilon_lb == pytest.approx(r.ceiling, rel=1e-12), (m, r.epsilon_lb, r.ceiling)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31),
    n_in=st.integers(2, 150),
    n_out=st.integers(2, 150),
    shift=st.floats(0.0, 6.0),
    design=st.sampled_from(SCORE_DESIGNS),
    ties=st.booleans(),
)
def test_the_ceiling_bounds_every_attack(seed, n_in, n_out, shift, design, ties):
    rng = np.random.default_rng(seed)
    s_in, s_out = rng.normal(shift, 1, n_in), rng.normal(0, 1, n_out)
    if ties:  # coarse scores: many ties, few distinct thresholds
        s_in, s_out = np.round(s_in), np.round(s_out)
    bound, strategy = design
    r = audit_from_scores(
        s_in, s_out, claim=CLAIM, delta=DELTA, bound=bound, strategy=strategy, num_thresholds=int(rng.integers(1, 40))
    )
    assert r.ceiling is not None and r.epsilon_lb <= r.ceiling + 1e-9


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31), m=st.integers(4, 300), shift=st.floats(0.0, 8.0), bound=st.sampled_from(ONE_RUN_BOUNDS)
)
def test_the_one_run_ceiling_bounds_every_attack(seed, m, shift, bound):
    rng = np.random.default_rng(seed)
    inc = rng.random(m) < rng.uniform(0.1, 0.9)  # also unbalanced IN/OUT counts
    r = audit_from_one_run(rng.normal(0, 1, m) + shift * inc, inc, claim=CLAIM, delta=DELTA, bound=bound)
    assert r.ceiling is not None and r.epsilon_lb <= r.ceiling + 1e-9


# ----------------------------------------------------------------------------- null scores
@pytest.mark.parametrize("bound, strategy", SCORE_DESIGNS)
def test_identical_scores_give_zero_for_every_bound_and_strategy(bound, strategy):
    for n in (2, 10, 200):
        for value in (0.0, -3.5):
            r = audit_from_scores(
                np.full(n, value), np.full(n, value), claim=CLAIM, delta=DELTA, bound=bound, strategy=strategy
            )
            assert r.epsilon_lb == 0.0, (n, value, r.summary())


@pytest.mark.parametrize("bound", ONE_RUN_BOUNDS)
def test_identical_one_run_scores_give_zero_whatever_order_the_canaries_are_listed_in(bound):
    # Tied scores are guessed in a seeded random order, not in the caller's: listing the IN
    # canaries first must not turn identical scores into a perfect attack.
    inc = np.random.default_rng(2).random(400) < 0.5
    for order in (inc, np.sort(inc)[::-1], np.sort(inc)):
        r = audit_from_one_run(np.zeros(order.size), order, claim=CLAIM, delta=DELTA, bound=bound)
        assert r.epsilon_lb == 0.0, r.summary()


@pytest.mark.parametrize("bound, strategy", SCORE_DESIGNS)
def test_same_distribution_scores_stay_near_zero(bound, strategy):
    rng = np.random.default_rng(7)
    r = audit_from_scores(
        rng.normal(size=500), rng.normal(size=500), claim=CLAIM, delta=DELTA, bound=bound, strategy=strategy
    )
    assert r.epsilon_lb <= 0.1, r.summary()


@pytest.mark.parametrize("bound", ONE_RUN_BOUNDS)
def test_same_distribution_one_run_scores_stay_near_zero(bound):
    rng = np.random.default_rng(7)
    inc = rng.random(1000) < 0.5
    r = audit_from_one_run(rng.normal(size=1000), inc, claim=CLAIM, delta=DELTA, bound=bound)
    assert r.epsilon_lb <= 0.1, r.summary()


# ----------------------------------------------------------------------------- the stored value
def test_results_carry_the_ceiling_and_older_files_without_it_still_load(tmp_path):
    rng = np.random.default_rng(3)
    r = audit_from_scores(rng.normal(1, 1, 50), rng.normal(0, 1, 50), claim=CLAIM, delta=DELTA)
    save_audit_result(r, tmp_path / "new")
    stored = json.loads((tmp_path / "new" / "result.json").read_text())
    assert stored["ceiling"] == pytest.approx(r.ceiling) and 0 < stored["ceiling_fraction"] <= 1
    assert load_audit_result(tmp_path / "new").ceiling == pytest.approx(r.ceiling)
    # A result.json written before ceilings were reported: same schema version, no key.
    old = {k: x for k, x in stored.items() if k not in ("ceiling", "ceiling_fraction")}
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "result.json").write_text(json.dumps(old))
    back = load_audit_result(tmp_path / "old")
    assert back.ceiling is None and back.ceiling_fraction is None and back.epsilon_lb == pytest.approx(r.epsilon_lb)
    assert back.to_dict()["ceiling"] is None and "ceiling" not in back.summary()


def test_a_ceiling_below_epsilon_lb_is_refused():
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
    with pytest.raises(ValueError, match="ceiling must be >= epsilon_lb"):
        AuditResult(**base, ceiling=0.5)
    with pytest.raises(ValueError, match="ceiling"):
        AuditResult(**base, ceiling=-1.0)


# ----------------------------------------------------------------------------- ε_LB by trials
@pytest.mark.parametrize("bound, strategy", SCORE_DESIGNS)
def test_the_prefix_curve_ends_at_the_result_and_stays_under_its_ceiling(bound, strategy):
    rng = np.random.default_rng(4)
    s_in, s_out = rng.normal(1.5, 1, 300), rng.normal(0, 1, 300)
    r = audit_from_scores(s_in, s_out, claim=CLAIM, delta=DELTA, bound=bound, strategy=strategy)
    curve = epsilon_lb_by_trials(r, {"in_scores": s_in, "out_scores": s_out}, num_points=10)
    assert curve is not None and curve.unit == "trials" and 2 <= len(curve.num_observations) <= 11
    assert curve.num_observations[-1] == 600
    assert curve.epsilon_lb[-1] == pytest.approx(r.epsilon_lb) and curve.ceiling[-1] == pytest.approx(r.ceiling)
    assert all(lb <= c + 1e-9 for lb, c in zip(curve.epsilon_lb, curve.ceiling))


@pytest.mark.parametrize("bound", ONE_RUN_BOUNDS)
def test_the_one_run_prefix_curve_ends_at_the_result(bound):
    rng = np.random.default_rng(5)
    inc = rng.random(500) < 0.5
    scores = rng.normal(0, 1, 500) + 2 * inc
    r = audit_from_one_run(scores, inc, claim=CLAIM, delta=DELTA, bound=bound)
    curve = epsilon_lb_by_trials(r, {"scores": scores, "included": inc})
    assert curve is not None and curve.unit == "canaries" and curve.num_observations[-1] == 500
    assert curve.epsilon_lb[-1] == pytest.approx(r.epsilon_lb) and curve.ceiling[-1] == pytest.approx(r.ceiling)
    assert curve.ceiling[-1] > curve.ceiling[0]


def test_no_prefix_curve_without_scores_of_the_game():
    rng = np.random.default_rng(6)
    r = audit_from_scores(rng.normal(1, 1, 30), rng.normal(0, 1, 30), claim=CLAIM, delta=DELTA)
    assert epsilon_lb_by_trials(r, {"scores": np.zeros(3)}) is None
    assert epsilon_lb_by_trials(r, {"in_scores": np.zeros(0), "out_scores": np.zeros(3)}) is None
