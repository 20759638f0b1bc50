"""The f-DP one-run bound (Mahloujifar, Melis & Chaudhuri 2025): reproduction, soundness, refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize, stats

from dpaudit.privacy.audit_bounds import gaussian_step_claim
from dpaudit.privacy.audit_procedures import audit_from_one_run
from dpaudit.privacy.audit_stats import one_run_bound_from_scores, one_run_epsilon_lb
from dpaudit.privacy.fdp_one_run import (
    _least_type_one_error,
    curve_epsilon,
    fdp_one_run_bound_from_scores,
    fdp_one_run_epsilon_lb,
    fdp_one_run_mu_lb,
    fdp_one_run_rejects,
    gaussian_tradeoff,
    idealised_gaussian_counts,
    subsampled_gaussian_tradeoff,
)
from dpaudit.privacy.gaussian import gdp_epsilon
from dpaudit.results.audit import AuditResult

DELTA = 1e-5

# ------------------------------------------------------------------ the idealised table
# (μ, m, guesses per side k tried, published f-DP, published Steinke, our expected-count f-DP, Steinke).
# The k grid brackets the optimum of each bound (scripts/reproduce_fdp_one_run.py sweeps wider).
# Our figures use the expected counts, so they do not depend on a random stream. The recursion is
# the authors' step for step (see test_index_shift_is_what_keeps_the_test_sound); the published
# f-DP column sits 6–11 % above the expected-count figures because the paper's protocol picks the
# guess count after seeing a simulated run, and the bound moves by ~0.7 in ε per wrong guess among
# the top scores. Averaged over seeded runs with the count picked that way the rows come within
# −5.5 / −3.5 / +4.0 / +2.6 % (standard error 1–6 %): scripts/reproduce_fdp_one_run.py, docs/results/audits.md.
IDEALISED = [
    (2.0, 10**5, (1500, 2000, 2500, 3000, 3500, 4000), 8.16, 4.99, 7.42, 4.89),
    (1.0, 10**5, (300, 400, 500, 600, 700, 800), 3.61, 2.61, 3.35, 2.67),
    (0.5, 10**5, (300, 400, 500, 600, 700), 1.59, 1.33, 1.50, 1.30),
    (0.25, 10**6, (700, 1000, 1300, 8000, 10000, 12000), 0.82, 0.61, 0.73, 0.61),
]


@pytest.mark.parametrize("mu,m,ks,pub_fdp,pub_steinke,ours_fdp,ours_steinke", IDEALISED)
def test_idealised_table(mu, m, ks, pub_fdp, pub_steinke, ours_fdp, ours_steinke):
    best_f = best_s = 0.0
    for k in ks:
        r, c = idealised_gaussian_counts(mu=mu, num_canaries=m, num_guesses_per_side=k)
        best_f = max(best_f, fdp_one_run_epsilon_lb(num_canaries=m, num_guesses=r, num_correct=c, delta=DELTA))
        best_s = max(best_s, one_run_epsilon_lb(num_canaries=m, num_guesses=r, num_correct=c, delta=DELTA))
    true_eps = gdp_epsilon(mu=mu, delta=DELTA)
    # Our expected-count figures (golden, 2 %).
    assert best_f == pytest.approx(ours_fdp, rel=0.02)
    assert best_s == pytest.approx(ours_steinke, rel=0.02)
    # Against the published table: Steinke within 3 %, f-DP below it by at most 12 % (see above).
    assert best_s == pytest.approx(pub_steinke, rel=0.03)
    assert 0.88 * pub_fdp <= best_f <= pub_fdp
    # The paper's point: f-DP is tighter than Steinke, and neither exceeds the truth.
    assert best_s < best_f < true_eps


def test_perfect_guesses_give_a_finite_ceiling_that_grows_with_r():
    ceilings = [
        fdp_one_run_epsilon_lb(num_canaries=10**5, num_guesses=r, num_correct=r, delta=DELTA) for r in (100, 1000, 5000)
    ]
    assert all(math.isfinite(c) for c in ceilings)
    assert ceilings[0] < ceilings[1] < ceilings[2]
    # …and beats Steinke's ceiling at the same counts (docs/audits/statistics.md §4: r = 1000 → 5.81 at m = r = 5000).
    assert ceilings[1] > one_run_epsilon_lb(num_canaries=10**5, num_guesses=1000, num_correct=1000, delta=DELTA)


# ------------------------------------------------------------------ soundness
def _gaussian_run(rng: np.random.Generator, mu: float, m: int) -> tuple[np.ndarray, np.ndarray]:
    included = rng.random(m) < 0.5
    return mu * included + rng.standard_normal(m), included


@pytest.mark.extended
@pytest.mark.parametrize("mu", [1.0, 3.0])
def test_sound_over_repetitions(mu):
    """ε_LB ≤ true ε in ≥ 95 % of 200 seeded runs of a Gaussian mechanism of known μ."""
    m, reps = 400, 200
    true_eps = gdp_epsilon(mu=mu, delta=DELTA)
    rng = np.random.default_rng(20250715)
    over_fdp = over_steinke = 0
    for _ in range(reps):
        scores, included = _gaussian_run(rng, mu, m)
        eps_f, mu_lb, _, _ = fdp_one_run_bound_from_scores(scores, included, delta=DELTA, guess_counts=(5, 10, 20, 50))
        eps_s, _, _ = one_run_bound_from_scores(scores, included, delta=DELTA, guess_counts=(5, 10, 20, 50))
        over_fdp += eps_f > true_eps or mu_lb > mu
        over_steinke += eps_s > true_eps
    assert over_fdp <= 0.05 * reps
    assert over_steinke <= 0.05 * reps


def test_rejection_rate_at_the_true_curve_is_at_most_the_level():
    """The test itself: G_μ for the true μ is rejected in ≤ 1 − confidence of runs (few guesses, high precision)."""
    mu, m, k, reps = 2.0, 400, 10, 300
    rng = np.random.default_rng(7)
    rejected = 0
    for _ in range(reps):
        scores, included = _gaussian_run(rng, mu, m)
        order = np.argsort(-scores)
        correct = int(included[order[:k]].sum() + (~included[order[m - k :]]).sum())
        rejected += fdp_one_run_rejects(mu=mu, num_canaries=m, num_guesses=2 * k, num_correct=correct, confidence=0.8)
    assert rejected <= 0.2 * reps + 3 * math.sqrt(0.2 * 0.8 * reps)


def _rejects_without_shift(mu: float, m: int, r: int, c: int, level: float) -> bool:
    """The recursion with the f-DP constraint applied to the same level (no index shift)."""
    correct, wrong = level * c / m, level * (r - c) / m
    for j in range(c, -1, -1):
        if j == r:  # runs with every guess correct carry no wrong mass to add
            continue
        ratio = j / (r - j)
        if wrong >= stats.norm.cdf(stats.norm.ppf(correct) - mu):
            continue
        if ratio == 0:  # j = 0: wrong mass only
            wrong = float(stats.norm.cdf(stats.norm.ppf(correct) - mu))
            continue
        top = (1.0 - correct) / ratio

        def gap(x: float, ratio: float = ratio) -> float:
            return wrong + x - float(stats.norm.cdf(stats.norm.ppf(min(correct + ratio * x, 1.0)) - mu))

        if gap(top) < 0:
            return True
        x = optimize.brentq(gap, 0.0, top, xtol=1e-300, rtol=1e-13)
        correct, wrong = correct + ratio * x, wrong + x
        if correct + wrong > r / m:
            return True
    return correct + wrong > r / m


def test_index_shift_is_what_keeps_the_test_sound():
    """Each canary's own guess is part of "≥ j correct", so f-DP ties level j to level j − 1.

    Applying the constraint within one level looks tighter but rejects the true curve far more
    often than the level allows; the shifted recursion (ours, the paper's) does not.
    """
    mu, m, k, level, reps = 2.0, 400, 10, 0.2, 200
    rng = np.random.default_rng(11)
    ours = unshifted = 0
    for _ in range(reps):
        scores, included = _gaussian_run(rng, mu, m)
        order = np.argsort(-scores)
        correct = int(included[order[:k]].sum() + (~included[order[m - k :]]).sum())
        ours += fdp_one_run_rejects(mu=mu, num_canaries=m, num_guesses=2 * k, num_correct=correct, confidence=1 - level)
        unshifted += _rejects_without_shift(mu, m, 2 * k, correct, level)
    assert ours <= level * reps
    assert unshifted > 2 * level * reps


# ------------------------------------------------------------------ null scores
def test_null_scores_give_zero_for_both_bounds():
    m = 2000
    grid = stats.norm.ppf((np.arange(m // 2) + 0.5) / (m // 2))
    scores = np.repeat(grid, 2)  # every IN score has an identical OUT twin
    included = np.tile([True, False], m // 2)
    claim = gaussian_step_claim(noise_multiplier=1.0)
    for bound in ("steinke", "fdp"):
        assert audit_from_one_run(scores, included, claim=claim, delta=DELTA, bound=bound).epsilon_lb == 0.0
    constant = np.zeros(m)
    assert fdp_one_run_bound_from_scores(constant, included, delta=DELTA)[0] == 0.0
    assert one_run_bound_from_scores(constant, included, delta=DELTA)[0] == 0.0
    # Listing the canaries IN-first must not turn tied scores into a perfect attack.
    in_first = np.sort(included)[::-1]
    assert fdp_one_run_bound_from_scores(constant, in_first, delta=DELTA)[0] == 0.0
    assert one_run_bound_from_scores(constant, in_first, delta=DELTA)[0] == 0.0


def test_null_random_scores_rarely_positive():
    rng = np.random.default_rng(3)
    positive = 0
    for _ in range(40):
        included = rng.random(600) < 0.5
        scores = rng.standard_normal(600)  # IN and OUT identically distributed
        positive += fdp_one_run_bound_from_scores(scores, included, delta=DELTA)[0] > 0
    assert positive <= 4


def test_chance_level_counts_give_zero():
    assert fdp_one_run_mu_lb(num_canaries=1000, num_guesses=200, num_correct=100) == 0.0
    assert fdp_one_run_mu_lb(num_canaries=1000, num_guesses=200, num_correct=0) == 0.0
    assert fdp_one_run_mu_lb(num_canaries=1000, num_guesses=0, num_correct=0) == 0.0


# ------------------------------------------------------------------ the curves
def test_subsampled_curve_is_a_symmetric_tradeoff_and_q1_is_gaussian():
    xs = np.linspace(0.0, 1.0, 41)
    for q in (0.05, 0.3, 1.0):
        f = np.array([subsampled_gaussian_tradeoff(x, mu=1.5, sampling_rate=q) for x in xs])
        assert np.all(np.diff(f) <= 1e-12) and np.all(f <= 1 - xs + 1e-12)
        assert np.all(np.diff(f, 2) >= -1e-9)  # convex
        # symmetric: f(f(x)) = x
        back = np.array([subsampled_gaussian_tradeoff(y, mu=1.5, sampling_rate=q) for y in f])
        np.testing.assert_allclose(back, xs, atol=1e-7)
    np.testing.assert_allclose(
        [subsampled_gaussian_tradeoff(x, mu=1.0, sampling_rate=1.0) for x in xs],
        [gaussian_tradeoff(x, mu=1.0) for x in xs],
    )


@pytest.mark.parametrize("curve,q", [("gaussian", 1.0), ("subsampled-gaussian", 0.2)])
def test_least_type_one_error_inverts_the_curve(curve, q):
    least = _least_type_one_error(curve, 1.2, q)
    for y in (1e-8, 1e-3, 0.1, 0.5, 0.9, 0.999):
        expected = subsampled_gaussian_tradeoff(1 - y, mu=1.2, sampling_rate=q)
        assert least(y) == pytest.approx(expected, rel=1e-6, abs=1e-12)


def test_subsampled_epsilon_matches_amplification_and_is_below_gaussian():
    mu, q = 2.0, 0.1
    eps = curve_epsilon(mu=mu, delta=DELTA, curve="subsampled-gaussian", sampling_rate=q)
    inner = gdp_epsilon(mu=mu, delta=DELTA / q)
    assert eps == pytest.approx(math.log1p(q * math.expm1(inner)))
    assert 0 < eps < gdp_epsilon(mu=mu, delta=DELTA)
    assert curve_epsilon(mu=mu, delta=0.5, curve="subsampled-gaussian", sampling_rate=0.1) == 0.0


def test_mu_lb_monotone_in_correct_guesses_and_confidence():
    mus = [fdp_one_run_mu_lb(num_canaries=5000, num_guesses=500, num_correct=c) for c in (300, 400, 450, 490, 500)]
    assert mus == sorted(mus) and mus[0] > 0
    loose = fdp_one_run_mu_lb(num_canaries=5000, num_guesses=500, num_correct=450, confidence=0.5)
    strict = fdp_one_run_mu_lb(num_canaries=5000, num_guesses=500, num_correct=450, confidence=0.99)
    assert strict < loose
    assert fdp_one_run_mu_lb(num_canaries=5000, num_guesses=500, num_correct=450, num_tests=10) < mus[2]


# ------------------------------------------------------------------ wiring
@pytest.mark.extended
def test_audit_from_one_run_default_unchanged_and_fdp_labelled():
    rng = np.random.default_rng(0)
    scores, included = _gaussian_run(rng, 3.0, 1000)
    claim = gaussian_step_claim(noise_multiplier=1 / 3)
    default = audit_from_one_run(scores, included, claim=claim, delta=DELTA)
    assert default.bound == "one-run" and default.details.one_run_bound == "steinke"
    assert default.epsilon_lb == one_run_bound_from_scores(scores, included, delta=DELTA)[0]
    fdp = audit_from_one_run(scores, included, claim=claim, delta=DELTA, bound="fdp")
    assert fdp.method == "one-run" and fdp.bound == "one-run-fdp"
    assert fdp.details.one_run_bound == "fdp" and fdp.details.tradeoff_curve == "gaussian" and fdp.details.mu_lb > 0
    assert default.epsilon_lb < fdp.epsilon_lb < gdp_epsilon(mu=3.0, delta=DELTA)
    again = AuditResult.from_dict(fdp.to_dict())
    assert again.bound == "one-run-fdp" and again.epsilon_lb == fdp.epsilon_lb


# ------------------------------------------------------------------ refusals
@pytest.mark.parametrize(
    "kwargs,name",
    [
        (dict(num_canaries=100, num_guesses=10, num_correct=11), "num_correct"),
        (dict(num_canaries=100, num_guesses=101, num_correct=1), "num_guesses"),
        (dict(num_canaries=0, num_guesses=0, num_correct=0), "num_canaries"),
        (dict(num_canaries=100, num_guesses=10, num_correct=5, confidence=1.5), "confidence"),
        (dict(num_canaries=100, num_guesses=10, num_correct=5, num_tests=0), "num_tests"),
        (dict(num_canaries=100, num_guesses=10, num_correct=5, curve="laplace"), "curve"),
        (dict(num_canaries=100, num_guesses=10, num_correct=5, sampling_rate=0.5), "sampling_rate"),
        (
            dict(num_canaries=100, num_guesses=10, num_correct=5, curve="subsampled-gaussian", sampling_rate=0.0),
            "sampling_rate",
        ),
        (dict(num_canaries=100, num_guesses=10.5, num_correct=5), "num_guesses"),
    ],
)
def test_bad_arguments_named(kwargs, name):
    with pytest.raises((ValueError, TypeError), match=name):
        fdp_one_run_mu_lb(**kwargs)


def test_bad_arguments_named_elsewhere():
    scores, included = np.arange(10.0), np.arange(10) % 2 == 0
    claim = gaussian_step_claim(noise_multiplier=1.0)
    with pytest.raises(ValueError, match="delta"):
        fdp_one_run_epsilon_lb(num_canaries=10, num_guesses=2, num_correct=2, delta=0.0)
    with pytest.raises(ValueError, match="bound"):
        audit_from_one_run(scores, included, claim=claim, delta=DELTA, bound="tight")
    with pytest.raises(ValueError, match="curve"):
        audit_from_one_run(scores, included, claim=claim, delta=DELTA, curve="subsampled-gaussian", sampling_rate=0.1)
    with pytest.raises(ValueError, match="guess_counts"):
        fdp_one_run_bound_from_scores(scores, included, delta=DELTA, guess_counts=(6,))
    with pytest.raises(ValueError, match="included"):
        fdp_one_run_bound_from_scores(scores, included[:5], delta=DELTA)
    with pytest.raises(TypeError, match="included"):
        fdp_one_run_bound_from_scores(scores, np.arange(10), delta=DELTA)
    with pytest.raises(ValueError, match="scores"):
        fdp_one_run_bound_from_scores(np.r_[scores[:-1], np.nan], included, delta=DELTA)
    with pytest.raises(ValueError, match="mu"):
        fdp_one_run_rejects(mu=-1.0, num_canaries=10, num_guesses=2, num_correct=2)
    with pytest.raises(ValueError, match="num_guesses_per_side"):
        idealised_gaussian_counts(mu=1.0, num_canaries=10, num_guesses_per_side=6)


def test_cli_refuses_one_run_bound_without_one_run(tmp_path, capsys):
    from dpaudit.app.cli import main

    rc = main(
        ["audit", "--target-epsilon", "2", "--one-run-bound", "fdp", "--out", str(tmp_path / "run"), "--no-report"]
    )
    assert rc == 2
    err = capsys.readouterr().err
    assert "--one-run-bound" in err and len(err.strip().splitlines()) == 1


def test_run_spec_refuses_one_run_bound_without_one_run():
    from dpaudit.app.runs.audit import AuditSpec

    with pytest.raises(ValueError, match="one_run_bound"):
        AuditSpec(target_epsilon=2.0, one_run_bound="fdp")
    with pytest.raises(ValueError, match="one_run_bound"):
        AuditSpec(target_epsilon=2.0, method="one-run", one_run_bound="tight")
    assert AuditSpec(target_epsilon=2.0, method="one-run", one_run_bound="fdp").one_run_bound == "fdp"
