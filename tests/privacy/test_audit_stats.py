"""Audit statistics: reference numbers (docs/audits/statistics.md §1, §4) and soundness on a Gaussian
mechanism whose ε is known exactly (docs/privacy/accounting.md §5-6)."""

import math

import numpy as np
import pytest

from dpaudit.privacy.audit_stats import (
    bound_from_scores,
    clopper_pearson_upper,
    epsilon_lb_from_counts,
    gdp_epsilon_lb_from_counts,
    gdp_observations_needed,
    one_run_bound_from_scores,
    one_run_epsilon_lb,
    point_estimate,
)
from dpaudit.privacy.gaussian import gdp_epsilon


@pytest.mark.parametrize(
    "n, ceiling", [(100, 3.28), (500, 4.91), (1000, 5.60), (5000, 7.21), (10_000, 7.90), (100_000, 10.21)]
)
def test_clopper_pearson_ceilings(n, ceiling):
    eps = epsilon_lb_from_counts(true_positives=n, num_in=n, false_positives=0, num_out=n, delta=1e-5, confidence=0.95)
    assert round(eps, 2) == ceiling


def test_clopper_pearson_example_and_raw_ratio():
    eps = epsilon_lb_from_counts(true_positives=500, num_in=1000, false_positives=10, num_out=1000, delta=1e-5)
    assert round(eps, 2) == 3.24
    assert round(math.log(0.5 / 0.01), 2) == 3.91  # what the uncorrected ratio would claim


def test_clopper_pearson_edges_defined():
    assert clopper_pearson_upper(5, 5, confidence=0.95) == 1.0
    assert 0 < clopper_pearson_upper(0, 5, confidence=0.95) < 1
    assert epsilon_lb_from_counts(true_positives=0, num_in=10, false_positives=10, num_out=10, delta=1e-5) == 0.0
    assert epsilon_lb_from_counts(
        true_positives=10, num_in=10, false_positives=0, num_out=10, delta=1e-5, group_size=2
    ) == pytest.approx(
        epsilon_lb_from_counts(true_positives=10, num_in=10, false_positives=0, num_out=10, delta=1e-5) / 2
    )


@pytest.mark.parametrize(
    "r, correct, m, delta, expected",
    [
        (100, 100, 100, 1e-5, 3.49),
        (1000, 1000, 1000, 1e-12, 5.81),
        (5000, 5000, 5000, 1e-5, 7.28),
        (1000, 800, 5000, 1e-5, 1.25),
        (1000, 900, 5000, 1e-5, 2.02),
    ],
)
def test_one_run_reference_numbers(r, correct, m, delta, expected):
    assert round(one_run_epsilon_lb(num_canaries=m, num_guesses=r, num_correct=correct, delta=delta), 2) == expected


def test_identical_distributions_give_about_zero():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=2000), rng.normal(size=2000)
    for method in ("clopper-pearson", "gdp"):
        for strategy in ("bonferroni", "split", "fixed"):
            threshold = 0.5 if strategy == "fixed" else None
            assert (
                bound_from_scores(a, b, delta=1e-5, method=method, strategy=strategy, threshold=threshold).epsilon_lb
                < 0.15
            )
    inc = rng.random(2000) < 0.5
    assert one_run_bound_from_scores(rng.normal(size=2000), inc, delta=1e-5)[0] < 0.15


MU = 1.0  # Gaussian mechanism with Δ/σ = 1: ε(δ = 1e-5) = 4.38 exactly
TRUE_EPS = gdp_epsilon(mu=MU, delta=1e-5)


@pytest.mark.extended
@pytest.mark.parametrize("method", ["clopper-pearson", "gdp"])
@pytest.mark.parametrize("strategy", ["bonferroni", "split", "fixed"])
def test_lower_bound_never_exceeds_true_epsilon(method, strategy):
    reps, n = 200, 2000
    rng = np.random.default_rng(1234)
    bounds = []
    # fixed: chosen before any score is drawn: the midpoint of the two means for GDP, a tail
    # threshold for the ratio bound (which is strongest where FPR is small)
    threshold = None if strategy != "fixed" else MU / 2 if method == "gdp" else 2.5 * MU
    for rep in range(reps):
        ins, outs = rng.normal(MU, 1.0, n), rng.normal(0.0, 1.0, n)
        bounds.append(
            bound_from_scores(
                ins, outs, delta=1e-5, method=method, strategy=strategy, seed=rep, threshold=threshold
            ).epsilon_lb
        )
    bounds = np.array(bounds)
    assert np.mean(bounds <= TRUE_EPS) >= 0.95
    assert np.median(bounds) > 0.2 * TRUE_EPS  # the test has power: bounds are not trivially 0


def test_gdp_bound_is_tight_with_a_perfect_threshold():
    # With exact rates at the optimal threshold the GDP bound recovers μ, hence ε.
    from scipy import stats

    n = 10**6
    t = MU / 2
    fpr, fnr = stats.norm.sf(t), stats.norm.cdf(t - MU)
    eps = gdp_epsilon_lb_from_counts(
        true_positives=int(n * (1 - fnr)), num_in=n, false_positives=int(n * fpr), num_out=n, delta=1e-5
    )
    assert 0.9 * TRUE_EPS < eps <= TRUE_EPS


@pytest.mark.extended
def test_one_run_never_exceeds_true_epsilon():
    reps, m = 200, 1000
    rng = np.random.default_rng(99)
    bounds = []
    for _ in range(reps):
        inc = rng.random(m) < 0.5
        scores = rng.normal(0.0, 1.0, m) + MU * inc
        bounds.append(one_run_bound_from_scores(scores, inc, delta=1e-5)[0])
    bounds = np.array(bounds)
    assert np.mean(bounds <= TRUE_EPS) >= 0.95
    assert np.median(bounds) > 0.1 * TRUE_EPS


def test_point_estimate_is_labelled_and_can_exceed_the_bound():
    rng = np.random.default_rng(5)
    ins, outs = rng.normal(MU, 1, 300), rng.normal(0, 1, 300)
    bound = bound_from_scores(ins, outs, delta=1e-5).epsilon_lb
    assert point_estimate(ins, outs, delta=1e-5) > bound


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"delta": 0}, "delta"),
        ({"confidence": 1.0}, "confidence"),
        ({"method": "magic"}, "method"),
        ({"strategy": "best"}, "strategy"),
        ({"num_thresholds": 0}, "num_thresholds"),
        ({"group_size": 0}, "group_size"),
        ({"strategy": "fixed"}, "threshold is given exactly when strategy='fixed'"),
        ({"threshold": 0.5}, "threshold is given exactly when strategy='fixed'"),
        ({"strategy": "fixed", "threshold": float("nan")}, "threshold"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = {"delta": 1e-5, **kwargs}
    with pytest.raises(ValueError, match=match):
        bound_from_scores([1.0, 2.0], [0.0, 1.0], **args)


def test_bad_scores_and_counts():
    with pytest.raises(ValueError, match="in_scores"):
        bound_from_scores([], [1.0], delta=1e-5)
    with pytest.raises(ValueError, match="out_scores"):
        bound_from_scores([1.0], [float("nan")], delta=1e-5)
    with pytest.raises(ValueError, match="true_positives"):
        epsilon_lb_from_counts(true_positives=11, num_in=10, false_positives=0, num_out=10, delta=1e-5)
    with pytest.raises(ValueError, match="num_correct"):
        one_run_epsilon_lb(num_canaries=10, num_guesses=4, num_correct=5, delta=1e-5)


def test_fixed_threshold_pays_nothing_and_beats_bonferroni_on_a_gaussian_game():
    rng = np.random.default_rng(7)
    ins, outs = rng.normal(0.5, 1.0, 20_000), rng.normal(0.0, 1.0, 20_000)
    fixed = bound_from_scores(ins, outs, delta=1e-5, method="gdp", strategy="fixed", threshold=0.25)
    bonf = bound_from_scores(ins, outs, delta=1e-5, method="gdp", strategy="bonferroni")
    assert fixed.num_tests == 1 and fixed.threshold == 0.25
    assert fixed.true_positives == int((ins >= 0.25).sum()) and fixed.false_positives == int((outs >= 0.25).sum())
    assert fixed.epsilon_lb > bonf.epsilon_lb


@pytest.mark.extended
@pytest.mark.parametrize("mu", [0.27, 0.5, 0.93])
def test_gdp_observations_needed_reaches_the_ratio_in_simulation(mu):
    delta, ratio = 1e-5, 0.9
    n = gdp_observations_needed(mu=mu, delta=delta, ratio=ratio)
    # fewer observations are needed for a larger mu, more for a higher ratio
    assert (
        gdp_observations_needed(mu=2 * mu, delta=delta, ratio=ratio)
        < n
        < gdp_observations_needed(mu=mu, delta=delta, ratio=0.95)
    )
    eps = gdp_epsilon(mu=mu, delta=delta)
    rng = np.random.default_rng(11)
    ratios = []
    for _ in range(20):
        ins, outs = rng.normal(mu, 1.0, n // 2), rng.normal(0.0, 1.0, n // 2)
        ratios.append(
            bound_from_scores(ins, outs, delta=delta, method="gdp", strategy="fixed", threshold=mu / 2).epsilon_lb / eps
        )
    # the rule targets the expected ratio: the simulated median sits near it, and every draw above 0.8
    assert abs(np.median(ratios) - ratio) < 0.03 and min(ratios) > 0.8 and max(ratios) < 1.0


def test_gdp_observations_needed_caps_and_checks():
    assert gdp_observations_needed(mu=0.01, delta=1e-5, most=50_000) == 50_000
    with pytest.raises(ValueError, match="ratio"):
        gdp_observations_needed(mu=1.0, delta=1e-5, ratio=1.0)
    with pytest.raises(ValueError, match="mu"):
        gdp_observations_needed(mu=0.0, delta=1e-5)
