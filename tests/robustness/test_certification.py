"""Tests for dpaudit.robustness.certification: golden numbers (docs/defenses/noise-layer.md §1,
docs/defenses/smoothing.md §3; docs/privacy/accounting.md §5),
a scalar reference for the vectorised certified-size search, monotonicity and coverage
properties, the result value's contract and bad-input errors."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import optimize

from dpaudit.privacy.gaussian import analytic_sigma, classical_sigma, extended_sigma
from dpaudit.results import certification as certification_result
from dpaudit.results import certify_summary
from dpaudit.robustness import certification, multipliers, score_bounds, smoothing

PROPS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# --------------------------------------------------------------------------------------------
# docs/defenses/noise-layer.md §1: n = 2000 draws, 10 classes, η = 0.05, L = 0.1, ε = 1, δ = 0.05
# --------------------------------------------------------------------------------------------
PIXELDP_ROWS = [
    # top counts, p_lb, p_ub, L' classical ε' ≤ 1, L' classical ε' ≤ 4, L' extended ε' > 0
    ((2000, 0, 0), 0.99735, 0.00265, 0.14356, 0.24747, 0.22591),
    ((1900, 100, 0), 0.93609, 0.06391, 0.11812, 0.12206, 0.12070),
    ((1600, 300, 100), 0.77600, 0.17165, 0.06503, 0.06503, 0.06674),
    ((1200, 700, 100), 0.57132, 0.37806, 0.01523, 0.01523, 0.01593),
]


def _counts(rows=PIXELDP_ROWS, num_classes=10):
    counts = np.zeros((len(rows), num_classes), dtype=np.int64)
    for i, row in enumerate(rows):
        counts[i, :3] = row[0]
    return counts


@pytest.fixture(scope="module")
def pixeldp_bounds():
    # The vectors bound class 0 as chosen beforehand (one-sided at η/k, the PixelDP code's level).
    return score_bounds.count_bounds(_counts(), confidence=0.95, selected=np.zeros(len(PIXELDP_ROWS), dtype=np.int64))


def _classical_scale():
    return 0.1 * multipliers.noise_multiplier("classical", epsilon=1.0, delta=0.05)


def _extended_scale():
    return 0.1 * multipliers.noise_multiplier("extended", epsilon=1.0, delta=0.05)


def test_count_bounds_vectors(pixeldp_bounds):
    b = pixeldp_bounds
    assert np.round(b.lower, 5).tolist() == [row[1] for row in PIXELDP_ROWS]
    assert np.round(b.upper, 5).tolist() == [row[2] for row in PIXELDP_ROWS]
    assert b.top.tolist() == [0, 0, 0, 0]
    assert (
        b.num_draws == 2000
        and b.method == "clopper-pearson"
        and b.confidence == 0.95
        and b.selection == "separate-draws"
    )


@pytest.mark.parametrize(("selected", "level"), [(np.zeros(1, dtype=np.int64), 0.05 / 10), (None, 0.05 / 20)])
def test_count_bounds_are_one_sided_at_eta_over_k(selected, level):
    # When all n draws fall on one class the Clopper–Pearson bounds have a closed form: the
    # one-sided lower bound at level a solves p^n = a, so p = a^(1/n), and the upper bound of a
    # class seen 0 times solves (1 − p)^n = a. With the class fixed beforehand a = η/k (0.99735,
    # the vectors' first row); with the top class taken from the same draws a = η/(2k) (0.99701).
    n = 2000
    counts = np.zeros((1, 10), dtype=np.int64)
    counts[0, 0] = n
    b = score_bounds.count_bounds(counts, confidence=0.95, selected=selected)
    assert b.top.tolist() == [0]
    assert b.lower[0] == pytest.approx(level ** (1 / n), rel=1e-12)
    assert b.upper[0] == pytest.approx(1 - level ** (1 / n), rel=1e-9)
    assert b.selection == ("same-draws" if selected is None else "separate-draws")


def test_pixeldp_search_reproduces_classical_columns(pixeldp_bounds):
    b = pixeldp_bounds
    unit = certification.certified_radius(
        b.lower, b.upper, noise_per_sensitivity=_classical_scale(), mechanism="classical", search="pixeldp"
    )
    four = certification.certified_radius(
        b.lower,
        b.upper,
        noise_per_sensitivity=_classical_scale(),
        mechanism="classical",
        search="pixeldp",
        max_epsilon=4.0,
        allow_classical_above_one=True,
    )
    assert np.round(unit, 5).tolist() == [row[3] for row in PIXELDP_ROWS]
    assert np.round(four, 5).tolist() == [row[4] for row in PIXELDP_ROWS]


def test_exact_search_reproduces_extended_column(pixeldp_bounds):
    b = pixeldp_bounds
    sizes = certification.certified_radius(
        b.lower, b.upper, noise_per_sensitivity=_extended_scale(), mechanism="extended"
    )
    assert np.round(sizes, 5).tolist() == [row[5] for row in PIXELDP_ROWS]


def test_extended_column_needs_egm_calibrated_noise(pixeldp_bounds):
    # The EGM column is not the classical noise read through the EGM multiplier.
    b = pixeldp_bounds
    sizes = certification.certified_radius(
        b.lower, b.upper, noise_per_sensitivity=_classical_scale(), mechanism="extended"
    )
    assert round(float(sizes[0]), 5) != PIXELDP_ROWS[0][5]


def test_exact_search_is_at_least_pixeldp_and_close(pixeldp_bounds):
    b = pixeldp_bounds
    for max_eps in (1.0, 4.0):
        kw = dict(
            noise_per_sensitivity=_classical_scale(),
            mechanism="classical",
            max_epsilon=max_eps,
            allow_classical_above_one=True,
        )
        exact = certification.certified_radius(b.lower, b.upper, **kw)
        coarse = certification.certified_radius(b.lower, b.upper, search="pixeldp", **kw)
        assert np.all(exact >= coarse)
        np.testing.assert_allclose(exact, coarse, rtol=1.5e-3)


def _reference_radius(p_lower, p_upper, *, scale, mechanism, max_epsilon=math.inf):
    """Scalar reference: brentq for the largest ε' per δ', the scalar calibrations for c."""
    sigma = {"classical": classical_sigma, "analytic": analytic_sigma, "extended": extended_sigma}[mechanism]
    best = 0.0
    for delta in certification.DEFAULT_DELTA_GRID:

        def margin(eps):
            return p_lower - math.exp(2 * eps) * p_upper - (1 + math.exp(eps)) * delta

        if margin(0.0) <= 0:
            continue
        if margin(max_epsilon if math.isfinite(max_epsilon) else 50.0) > 0:
            eps = max_epsilon
        else:
            eps = optimize.brentq(margin, 0.0, min(max_epsilon, 50.0), xtol=1e-13) - 1e-6
        if eps <= 0:
            continue
        best = max(best, scale / sigma(epsilon=eps, delta=float(delta)))
    return best


@pytest.mark.parametrize("mechanism", ["classical", "analytic", "extended"])
def test_exact_search_matches_scalar_reference(mechanism):
    p_lower = np.array([0.999, 0.9, 0.7, 0.55, 0.4, 0.3])
    p_upper = np.array([0.0, 0.05, 0.2, 0.3, 0.35, 0.31])
    scale = 0.3
    got = certification.certified_radius(p_lower, p_upper, noise_per_sensitivity=scale, mechanism=mechanism)
    max_eps = 1.0 if mechanism == "classical" else math.inf
    want = [
        _reference_radius(a, b, scale=scale, mechanism=mechanism, max_epsilon=max_eps) for a, b in zip(p_lower, p_upper)
    ]
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-12)
    assert got[-1] == 0.0  # p_lb barely above p_ub: nothing certifies


def test_certified_radius_keeps_shape_and_handles_duplicates():
    p_lower = np.array([[0.9, 0.9], [0.2, 0.9]])
    p_upper = np.array([[0.05, 0.05], [0.5, 0.05]])
    out = certification.certified_radius(p_lower, p_upper, noise_per_sensitivity=1.0, mechanism="extended")
    assert out.shape == (2, 2) and out.dtype == np.float64
    assert out[0, 0] == out[0, 1] == out[1, 1] > 0 and out[1, 0] == 0.0
    assert certification.certified_radius(
        np.array([]), np.array([]), noise_per_sensitivity=1.0, mechanism="extended"
    ).shape == (0,)


def test_certified_radius_scales_linearly_with_noise():
    p_lower, p_upper = np.array([0.95, 0.7]), np.array([0.03, 0.2])
    one = certification.certified_radius(p_lower, p_upper, noise_per_sensitivity=1.0, mechanism="analytic")
    three = certification.certified_radius(p_lower, p_upper, noise_per_sensitivity=3.0, mechanism="analytic")
    np.testing.assert_allclose(three, 3 * one, rtol=1e-12)


def test_certified_radius_respects_max_epsilon_for_unbounded_mechanisms():
    p_lower, p_upper = np.array([0.999]), np.array([0.0005])
    free = certification.certified_radius(p_lower, p_upper, noise_per_sensitivity=1.0, mechanism="extended")
    capped = certification.certified_radius(
        p_lower, p_upper, noise_per_sensitivity=1.0, mechanism="extended", max_epsilon=1.0
    )
    assert capped[0] < free[0]
    # With ε' capped at 1, the largest size is reached at the largest δ' that still certifies.
    want = max(
        1.0 / extended_sigma(epsilon=1.0, delta=float(d))
        for d in certification.DEFAULT_DELTA_GRID
        if certification.robust(p_lower, p_upper, epsilon=1.0, delta=d)[0]
    )
    assert capped[0] == pytest.approx(want, rel=1e-12)


probs = st.floats(0.0, 1.0)


@PROPS
@given(a=probs, b=probs, extra=st.floats(0.0, 0.5), mechanism=st.sampled_from(multipliers.CERTIFICATION_MECHANISMS))
def test_radius_monotone_in_bounds(a, b, extra, mechanism):
    p_lower, p_upper = max(a, b), min(a, b)
    kw = dict(noise_per_sensitivity=0.5, mechanism=mechanism)
    base = certification.certified_radius(np.array([p_lower]), np.array([p_upper]), **kw)[0]
    higher = certification.certified_radius(np.array([min(1.0, p_lower + extra)]), np.array([p_upper]), **kw)[0]
    lower_ub = certification.certified_radius(np.array([p_lower]), np.array([max(0.0, p_upper - extra)]), **kw)[0]
    assert base >= 0.0
    assert higher >= base - 1e-12 and lower_ub >= base - 1e-12


@PROPS
@given(top=st.integers(1000, 2000), moved=st.integers(0, 300))
def test_moving_draws_to_the_top_class_never_shrinks_the_radius(top, moved):
    n = 2000
    second = n - top
    moved = min(moved, second)
    counts = np.array([[top, second] + [0] * 8, [top + moved, second - moved] + [0] * 8])
    b = score_bounds.count_bounds(counts)
    sizes = certification.certified_radius(
        b.lower, b.upper, noise_per_sensitivity=_extended_scale(), mechanism="extended"
    )
    assert sizes[1] >= sizes[0]


# --------------------------------------------------------------------------------------------
# The robustness condition
# --------------------------------------------------------------------------------------------
def test_robust_vectorised_matches_scalar_and_broadcasts():
    rng = np.random.default_rng(0)
    p_lower = rng.uniform(0, 1, 50)
    p_upper = rng.uniform(0, 0.5, 50)
    eps = np.array([0.1, 0.5, 1.0, 3.0])[:, None]
    out = certification.robust(p_lower, p_upper, epsilon=eps, delta=0.01)
    assert out.shape == (4, 50) and out.dtype == bool
    for i, e in enumerate(eps[:, 0]):
        for j in range(50):
            want = p_lower[j] > math.exp(2 * e) * p_upper[j] + (1 + math.exp(e)) * 0.01
            assert out[i, j] == want
    # Monotone: if certified at ε it is certified at every smaller ε.
    assert np.all(out[1:] <= out[:-1])


def test_robust_edge_cases():
    assert certification.robust(np.array([0.5]), np.array([0.0]), epsilon=800.0, delta=0.0).tolist() == [True]
    assert certification.robust(np.array([0.5]), np.array([0.5]), epsilon=0.0, delta=0.0).tolist() == [False]
    assert certification.robust(0.9, 0.05, epsilon=np.array([0.1, 2.0]), delta=np.array([0.01, 0.01])).tolist() == [
        True,
        False,
    ]


# --------------------------------------------------------------------------------------------
# Score bounds
# --------------------------------------------------------------------------------------------
def test_count_bounds_edges_and_ties():
    b = score_bounds.count_bounds(np.array([[0, 5, 5], [10, 0, 0], [3, 3, 4]]))
    assert b.top.tolist() == [1, 0, 2] and b.selection == "same-draws"
    # All draws on one class: closed forms a^(1/n) and 1 − a^(1/n), a = η/(2k) (top read from these draws).
    assert b.lower[1] == pytest.approx((0.05 / 6) ** (1 / 10)) and b.upper[1] == pytest.approx(
        1 - (0.05 / 6) ** (1 / 10)
    )
    assert b.lower[0] < b.upper[0] and b.lower[2] < b.upper[2]  # too few draws to separate
    assert not b.top.flags.writeable and not b.lower.flags.writeable


def test_mean_bounds_hoeffding_formula():
    means = np.array([[0.7, 0.2, 0.1], [0.999, 0.001, 0.0]])
    b = score_bounds.mean_bounds(means, num_draws=1000, confidence=0.95)
    width = math.sqrt(math.log(2 * 3 / 0.05) / 2000)  # each side at η/(2k): the top comes from these means
    np.testing.assert_allclose(b.lower, [0.7 - width, 0.999 - width])
    np.testing.assert_allclose(b.upper, [0.2 + width, 0.001 + width])
    assert b.method == "hoeffding" and b.num_draws == 1000


def test_mean_bounds_bernstein_formula_and_widest_runner_up():
    means = np.array([[0.6, 0.22, 0.18]])
    variances = np.array([[0.01, 0.0, 0.24]])
    n, k, eta = 500, 3, 0.05
    b = score_bounds.mean_bounds(means, num_draws=n, variances=variances, method="bernstein", confidence=1 - eta)
    log_term = math.log(2 * (2 * k) / eta)  # Maurer–Pontil's ln(2/a) at a = η/(2k)

    def width(var):
        return math.sqrt(2 * var * log_term / n) + 7 * log_term / (3 * (n - 1))

    assert b.lower[0] == pytest.approx(0.6 - width(0.01))
    # Class 2 has a lower mean but a much wider interval: it defines the upper bound.
    assert b.upper[0] == pytest.approx(0.18 + width(0.24))
    assert b.upper[0] > 0.22 + width(0.0)


def test_mean_bounds_clip_into_unit_interval():
    b = score_bounds.mean_bounds(np.array([[0.02, 0.01]]), num_draws=10)
    assert b.lower[0] == 0.0 and 0 < b.upper[0] <= 1.0


def test_count_bounds_cover_at_the_stated_confidence():
    rng = np.random.default_rng(7)
    p = np.array([0.55, 0.3, 0.1, 0.05])
    counts = rng.multinomial(300, p, size=2000)
    b = score_bounds.count_bounds(counts, confidence=0.9)
    other = np.array([np.max(np.delete(p, t)) for t in b.top])
    covered = (b.lower <= p[b.top]) & (b.upper >= other)
    assert covered.mean() >= 0.9


def test_hoeffding_bounds_cover_at_the_stated_confidence():
    rng = np.random.default_rng(8)
    p = np.array([0.5, 0.35, 0.15])
    draws = rng.multinomial(1, p, size=(1000, 200))  # one-hot scores, 200 draws per point
    b = score_bounds.mean_bounds(draws.mean(axis=1), num_draws=200, confidence=0.9)
    other = np.array([np.max(np.delete(p, t)) for t in b.top])
    assert ((b.lower <= p[b.top]) & (b.upper >= other)).mean() >= 0.9


# --------------------------------------------------------------------------------------------
# Noise multipliers (docs/privacy/accounting.md §5)
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mechanism", "epsilon", "delta", "expected"),
    [
        ("extended", 1.0, 1e-5, 4.854241),
        ("extended", 4.0, 1e-5, 1.285080),
        ("extended", 1.0, 0.05, 2.549790),
        ("extended", 4.0, 0.05, 0.754169),
        ("analytic", 1.0, 1e-5, 3.730632),
        ("analytic", 1.0, 0.05, 1.332778),
        ("analytic", 4.0, 0.05, 0.545137),
        ("classical", 1.0, 0.05, round(math.sqrt(2 * math.log(25.0)), 6)),
    ],
)
def test_noise_multiplier_vectors(mechanism, epsilon, delta, expected):
    assert round(multipliers.noise_multiplier(mechanism, epsilon=epsilon, delta=delta), 6) == expected


def test_noise_multiplier_refuses_classical_above_one():
    with pytest.raises(ValueError, match="epsilon"):
        multipliers.noise_multiplier("classical", epsilon=2.0, delta=0.05)
    with pytest.raises(ValueError, match="mechanism"):
        multipliers.noise_multiplier("laplace", epsilon=1.0, delta=0.05)


# --------------------------------------------------------------------------------------------
# Randomized smoothing (docs/defenses/smoothing.md §3)
# --------------------------------------------------------------------------------------------
SMOOTHING_ROWS = [
    (100000, 0.99993092, 3.81146),
    (99900, 0.99865099, 3.00020),
    (99000, 0.98898934, 2.29000),
    (90000, 0.89703650, 1.26484),
    (75000, 0.74574684, 0.66117),
    (60000, 0.59520105, 0.24094),
]


@pytest.mark.parametrize(("n_a", "p_a", "radius"), SMOOTHING_ROWS)
def test_smoothing_lower_bound_vectors(n_a, p_a, radius):
    assert round(float(smoothing.smoothing_lower_bound(n_a, 100000, confidence=0.999)), 8) == p_a


def test_smoothing_certify_vectors_and_abstention():
    n = 100000
    n_a = np.array([row[0] for row in SMOOTHING_ROWS] + [50000, 0])
    k = 3
    estimation = np.zeros((n_a.size, k), dtype=np.int64)
    guess = np.arange(n_a.size) % k
    estimation[np.arange(n_a.size), guess] = n_a
    estimation[np.arange(n_a.size), (guess + 1) % k] = n - n_a
    selection = np.zeros_like(estimation)
    selection[np.arange(n_a.size), guess] = 100
    sigma = 0.5
    predictions, radii = smoothing.smoothing_certify(selection, estimation, sigma=sigma, confidence=0.999)
    assert predictions.dtype == np.int64 and radii.dtype == np.float64
    assert predictions[:6].tolist() == guess[:6].tolist() and predictions[6:].tolist() == [-1, -1]
    assert np.round(radii[:6] / sigma, 5).tolist() == [row[2] for row in SMOOTHING_ROWS]
    assert radii[6:].tolist() == [0.0, 0.0]


def test_smoothing_lower_bound_is_vectorised():
    out = smoothing.smoothing_lower_bound(np.array([0, 10, 10]), np.array([10, 10, 20]))
    assert out.shape == (3,) and out[0] == 0.0 and 0.5 < out[1] < 1.0 and out[2] < out[1]


# --------------------------------------------------------------------------------------------
# Bad input names the argument and the value
# --------------------------------------------------------------------------------------------
def test_classical_refuses_max_epsilon_above_one_without_the_flag():
    with pytest.raises(ValueError, match=r"max_epsilon.*4\.0"):
        certification.certified_radius(
            np.array([0.9]), np.array([0.05]), noise_per_sensitivity=1.0, mechanism="classical", max_epsilon=4.0
        )


@pytest.mark.parametrize(
    ("kwargs", "exc", "pattern"),
    [
        (dict(p_lower=np.array([1.2])), ValueError, r"p_lower.*1\.2"),
        (dict(p_upper=np.array([0.1, 0.2])), ValueError, "p_upper"),
        (dict(p_lower=np.array([np.nan])), ValueError, "p_lower"),
        (dict(noise_per_sensitivity=0.0), ValueError, r"noise_per_sensitivity.*0\.0"),
        (dict(mechanism="laplace"), ValueError, "mechanism.*laplace"),
        (dict(search="grid"), ValueError, "search.*grid"),
        (dict(max_epsilon=-1.0), ValueError, "max_epsilon"),
        (dict(tolerance=0.0), ValueError, "tolerance"),
        (dict(delta_grid=np.array([0.1, 0.6])), ValueError, r"delta_grid.*0\.6"),
        (dict(delta_grid=np.array([0.0, 0.1]), mechanism="analytic"), ValueError, "delta_grid"),
        (dict(search="pixeldp"), ValueError, "max_epsilon"),
        (dict(allow_classical_above_one="yes"), TypeError, "allow_classical_above_one"),
    ],
)
def test_certified_radius_bad_input(kwargs, exc, pattern):
    args = dict(p_lower=np.array([0.9]), p_upper=np.array([0.05]), noise_per_sensitivity=1.0, mechanism="extended")
    args.update(kwargs)
    with pytest.raises(exc, match=pattern):
        certification.certified_radius(args.pop("p_lower"), args.pop("p_upper"), **args)


def test_score_bound_functions_bad_input():
    with pytest.raises(ValueError, match="counts.*same number of draws"):
        score_bounds.count_bounds(np.array([[1, 2], [3, 4]]))
    with pytest.raises(ValueError, match="counts.*non-negative"):
        score_bounds.count_bounds(np.array([[-1, 2]]))
    with pytest.raises(TypeError, match="counts.*integers"):
        score_bounds.count_bounds(np.array([[0.5, 0.5]]))
    with pytest.raises(ValueError, match="counts.*shape"):
        score_bounds.count_bounds(np.array([[10], [10]]))
    with pytest.raises(ValueError, match=r"confidence.*1\.0"):
        score_bounds.count_bounds(np.array([[1, 2]]), confidence=1.0)
    with pytest.raises(ValueError, match="variances.*None"):
        score_bounds.mean_bounds(np.array([[0.6, 0.4]]), num_draws=10, method="bernstein")
    with pytest.raises(ValueError, match="method.*clopper-pearson"):
        score_bounds.mean_bounds(np.array([[0.6, 0.4]]), num_draws=10, method="clopper-pearson")
    with pytest.raises(ValueError, match="means"):
        score_bounds.mean_bounds(np.array([[0.6, 1.4]]), num_draws=10)
    with pytest.raises(ValueError, match="num_draws"):
        score_bounds.mean_bounds(np.array([[0.6, 0.4]]), num_draws=1, variances=np.zeros((1, 2)), method="bernstein")
    with pytest.raises(ValueError, match="epsilon"):
        certification.robust(0.9, 0.1, epsilon=-1.0, delta=0.1)
    with pytest.raises(ValueError, match="delta"):
        certification.robust(0.9, 0.1, epsilon=1.0, delta=1.0)
    with pytest.raises(ValueError, match="broadcast"):
        certification.robust(np.ones(3), np.zeros(2), epsilon=1.0, delta=0.1)


def test_smoothing_bad_input():
    with pytest.raises(ValueError, match="sigma"):
        smoothing.smoothing_certify(np.array([[1, 0]]), np.array([[1, 0]]), sigma=0.0)
    with pytest.raises(ValueError, match="estimation_counts.*shape"):
        smoothing.smoothing_certify(np.array([[1, 0]]), np.array([[1, 0, 0]]), sigma=1.0)
    with pytest.raises(ValueError, match="selection_counts.*empty"):
        smoothing.smoothing_certify(np.array([[0, 0]]), np.array([[1, 0]]), sigma=1.0)
    with pytest.raises(ValueError, match="n_a"):
        smoothing.smoothing_lower_bound(11, 10)
    with pytest.raises(TypeError, match="n_a"):
        smoothing.smoothing_lower_bound(1.5, 10)
    with pytest.raises(ValueError, match=r"confidence.*1\.5"):
        smoothing.smoothing_lower_bound(5, 10, confidence=1.5)


# --------------------------------------------------------------------------------------------
# CertificationResult
# --------------------------------------------------------------------------------------------
def _result(**kw):
    args = dict(
        method="pixeldp",
        norm="l2",
        labels=np.array([0, 1, 2, 1, 0, 3]),
        predictions=np.array([0, 1, 2, 0, -1, 3]),
        radii=np.array([0.3, 0.1, 0.0, 0.5, 0.0, 0.2]),
        num_draws=2000,
        confidence=0.95,
        config={"mechanism": "classical", "sigma": 0.25, "sizes": [0.1, 0.2]},
    )
    args.update(kw)
    return certification_result.CertificationResult(**args)


def test_certified_accuracy_semantics():
    r = _result()
    assert r.conventional_accuracy == pytest.approx(4 / 6)
    acc = r.certified_accuracy([0.0, 0.05, 0.1, 0.2, 0.3, 0.31])
    np.testing.assert_allclose(acc, [4 / 6, 3 / 6, 3 / 6, 2 / 6, 1 / 6, 0.0])
    assert acc[0] == r.conventional_accuracy
    assert np.all(np.diff(acc) <= 0)
    one = r.certified_accuracy(0.1)
    assert isinstance(one, np.ndarray) and one.shape == (1,)
    summary = r.summary([0.1, 0.2])
    assert summary.certified_accuracy == {"0.1": 0.5, "0.2": pytest.approx(1 / 3)} and summary.num_abstained == 1
    assert summary.conventional_accuracy == r.conventional_accuracy and summary.num_points == 6


@PROPS
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 3), st.floats(0.0, 2.0)), min_size=1, max_size=30),
    st.lists(st.floats(0.0, 3.0), min_size=1),
)
def test_certified_accuracy_non_increasing(points, sizes):
    labels = np.array([p[0] for p in points])
    predictions = np.array([p[1] for p in points])
    radii = np.array([0.0 if p[1] == -1 else p[2] for p in points])
    r = _result(labels=labels, predictions=predictions, radii=radii)
    order = np.sort(np.array(sizes))
    acc = r.certified_accuracy(order)
    assert np.all(np.diff(acc) <= 0) and np.all(acc <= r.conventional_accuracy)
    assert r.certified_accuracy([0.0])[0] == r.conventional_accuracy


def test_result_round_trip(tmp_path):
    r = _result()
    assert certification_result.CertificationResult.from_dict(r.to_dict()) == r
    path = certification_result.save_certification_result(r, tmp_path)
    assert path.name == "certify-pixeldp.json" and (tmp_path / "certify-pixeldp.npz").is_file()
    loaded = certification_result.load_certification_result(path)
    assert loaded == r and loaded.config["sizes"] == (0.1, 0.2)
    assert loaded != _result(radii=np.array([0.3, 0.1, 0.0, 0.5, 0.0, 0.25]))


def test_result_is_immutable_and_validated():
    r = _result()
    for name in ("labels", "predictions", "radii"):
        assert not getattr(r, name).flags.writeable
    with pytest.raises(AttributeError):
        r.method = "hgm"  # type: ignore[misc]
    with pytest.raises(ValueError, match="abstains"):
        _result(radii=np.array([0.3, 0.1, 0.0, 0.5, 0.1, 0.2]))
    with pytest.raises(ValueError, match="norm.*l3"):
        _result(norm="l3")
    with pytest.raises(ValueError, match="radii.*shape"):
        _result(radii=np.zeros(3))
    with pytest.raises(ValueError, match="radii"):
        _result(radii=np.array([0.3, 0.1, 0.0, -0.5, 0.0, 0.2]))
    with pytest.raises(TypeError, match="labels"):
        _result(labels=np.array([0.0, 1, 2, 1, 0, 3]))
    with pytest.raises(ValueError, match="predictions"):
        _result(predictions=np.array([0, 1, 2, 0, -2, 3]))
    with pytest.raises(ValueError, match="sizes"):
        r.certified_accuracy([-0.1])
    with pytest.raises(ValueError, match="missing"):
        certification_result.CertificationResult.from_dict({"method": "x"})


# --------------------------------------------------------------------------------------------
# Soundness
# --------------------------------------------------------------------------------------------
def test_soundness_violations_flags_a_planted_violation():
    radii = [0.0, 0.1, 0.2, 0.3]
    certified = np.array([0.9, 0.7, 0.5, 0.2])
    empirical = np.array([0.95, 0.72, 0.45, 0.19])
    found = certification.soundness_violations(certified, empirical, radii=radii, certificate="hgm")
    assert found == [
        certify_summary.SoundnessViolation(certificate="hgm", radius=0.2, certified_accuracy=0.5, robust_accuracy=0.45),
        certify_summary.SoundnessViolation(certificate="hgm", radius=0.3, certified_accuracy=0.2, robust_accuracy=0.19),
    ]
    assert [
        x.radius
        for x in certification.soundness_violations(
            certified, empirical, radii=radii, certificate="hgm", tolerance=0.02
        )
    ] == [0.2]
    assert (
        certification.soundness_violations(certified, np.minimum(empirical + 0.1, 1.0), radii=radii, certificate="hgm")
        == []
    )
    assert found[0].to_dict() == {
        "certificate": "hgm",
        "radius": 0.2,
        "certified_accuracy": 0.5,
        "robust_accuracy": 0.45,
    }
    assert certify_summary.SoundnessViolation.from_dict(found[0].to_dict()) == found[0]
    with pytest.raises(ValueError, match="robust_accuracy.*shape"):
        certification.soundness_violations(certified, empirical[:2], radii=radii, certificate="hgm")
    with pytest.raises(ValueError, match="tolerance"):
        certification.soundness_violations(certified, empirical, radii=radii, certificate="hgm", tolerance=-0.1)
    with pytest.raises(ValueError, match="certified_accuracy"):
        certify_summary.SoundnessViolation(certificate="hgm", radius=0.1, certified_accuracy=1.5, robust_accuracy=0.1)


@pytest.mark.extended
def test_module_does_not_import_torch():
    code = (
        "import sys, dpaudit.robustness.certification, "
        "dpaudit.robustness.multipliers, dpaudit.robustness.score_bounds, "
        "dpaudit.robustness.smoothing; sys.exit('torch' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
