"""Tests for dpaudit.privacy.pate: the test vectors of docs/defenses/pate.md §2-§4 and §6, property tests of the
RDP bounds, an independent re-implementation of the data-dependent analysis (direct formulas,
mpmath for q̃) compared on generated vote matrices, the smooth-sensitivity release, and the
bad-input contracts.

References: docs/defenses/pate.md; docs/privacy/accounting.md §2 (conversions).
"""

from __future__ import annotations

import json
import math
import re

import mpmath
import numpy as np
import pytest

from dpaudit.privacy.pate import analysis as pate_analysis
from dpaudit.privacy.pate import claim as pate_claim
from dpaudit.privacy.pate import mechanisms, smooth_sensitivity
from dpaudit.privacy.pate import votes as pate_votes

TEN = [200, 30, 10, 10, 0, 0, 0, 0, 0, 0]
ORDERS6 = [2, 5, 10, 20, 50, 100]


# --------------------------------------------------------------------------------------------
# Test vectors: LNMax (docs/defenses/pate.md §2)
# --------------------------------------------------------------------------------------------


def test_lnmax_q_bound_vector():
    assert mechanisms.lnmax_q_bound(TEN, laplace_scale=20) == pytest.approx(0.0017817, abs=5e-8)


def test_lnmax_moments_vector():
    alpha = mechanisms.lnmax_log_moments(TEN, laplace_scale=20)
    expected = [0.000375, 0.000769, 0.001185, 0.001625, 0.002091, 0.002586, 0.003114, 0.003677]
    np.testing.assert_allclose(alpha, expected, atol=6e-7)


def test_lnmax_hundred_queries_epsilon():
    res = pate_analysis.analyze_lnmax(np.tile(TEN, (100, 1)), laplace_scale=20, delta=1e-5)
    assert res.data_dependent.epsilon == pytest.approx(1.48508, abs=1e-5)
    assert res.data_dependent.order == 9.0  # moment l = 8 is RDP order 9
    assert res.data_dependent.data_dependent and not res.data_independent.data_dependent
    # ε = min_l (α(l) + ln(1/δ))/l over l = 1..8, computed by hand from the moments.
    alpha = 100 * mechanisms.lnmax_log_moments(TEN, laplace_scale=20)
    ls = np.arange(1, 9)
    assert res.data_dependent.epsilon == pytest.approx(float(np.min((alpha + math.log(1e5)) / ls)), rel=1e-12)
    assert res.data_dependent.epsilon_improved <= res.data_dependent.epsilon
    assert res.data_independent.epsilon >= res.data_dependent.epsilon


def test_lnmax_data_independent_moments_and_pure_epsilon():
    # §6 trap: scale b = 20 means γ = 0.05 and a per-query ε of 2γ = 0.1, not 1/b.
    assert mechanisms.lnmax_epsilon_per_query(laplace_scale=20) == pytest.approx(0.1)
    alpha = mechanisms.lnmax_log_moments(TEN, laplace_scale=20, data_dependent=False)
    ls = np.arange(1, 9)
    np.testing.assert_allclose(alpha, np.minimum(2 * 0.05**2 * ls * (ls + 1), 0.1 * ls))


def test_lnmax_moment_orders_parameter():
    a = mechanisms.lnmax_log_moments(TEN, laplace_scale=20, moment_orders=[2, 8])
    np.testing.assert_allclose(a, mechanisms.lnmax_log_moments(TEN, laplace_scale=20)[[1, 7]])
    res = pate_analysis.analyze_lnmax(np.tile(TEN, (100, 1)), laplace_scale=20, delta=1e-5, moment_orders=range(1, 5))
    assert res.data_dependent.order == 5.0


def test_lnmax_data_dependent_needs_small_q():
    # A near-tie: q is large, the data-dependent bound does not apply, the data-independent one is used.
    votes = [100, 99, 51]
    np.testing.assert_allclose(
        mechanisms.lnmax_log_moments(votes, laplace_scale=20),
        mechanisms.lnmax_log_moments(votes, laplace_scale=20, data_dependent=False),
    )


# --------------------------------------------------------------------------------------------
# Test vectors: GNMax and Confident-GNMax (docs/defenses/pate.md §3, §6)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("votes", "logq"),
    [
        (TEN, -5.7045),
        ([150, 50, 20, 10, 10, 5, 5, 0, 0, 0], -2.4646),
        ([250] + [0] * 9, -10.0192),
        ([200, 30, 20] + [0] * 7, -5.6599460),
    ],
)
def test_gnmax_log_q_vectors(votes, logq):
    assert mechanisms.gnmax_log_q(votes, sigma=40) == pytest.approx(logq, abs=5e-5 if logq != -5.6599460 else 5e-8)


def test_gnmax_rdp_table():
    np.testing.assert_allclose(
        mechanisms.gnmax_rdp(TEN, sigma=40, orders=[10, 20, 50]), [0.001135, 0.001926, 0.016202], atol=6e-7
    )
    np.testing.assert_allclose(
        mechanisms.gnmax_rdp(TEN, sigma=40, orders=[10, 20, 50], data_dependent=False), [0.00625, 0.0125, 0.03125]
    )
    spread = [150, 50, 20, 10, 10, 5, 5, 0, 0, 0]
    np.testing.assert_array_equal(
        mechanisms.gnmax_rdp(spread, sigma=40, orders=[10, 20, 50]),
        mechanisms.gnmax_rdp_data_independent(sigma=40, orders=[10, 20, 50]),
    )
    unanimous = mechanisms.gnmax_rdp([250] + [0] * 9, sigma=40, orders=[10, 20, 50])
    np.testing.assert_allclose(unanimous[:2], [2.3e-5, 5.3e-5], atol=6e-7)
    assert unanimous[2] == pytest.approx(0.002083, abs=6e-7)


def test_gnmax_rdp_extra_orders():
    rdp = mechanisms.gnmax_rdp([200, 30, 20] + [0] * 7, sigma=40, orders=ORDERS6)
    np.testing.assert_allclose(rdp, [8.7966e-4, 9.701e-4, 1.18035e-3, 1.99555e-3, 1.64482e-2, 0.0625], rtol=1e-4)
    assert rdp[-1] == 100 / 40**2  # the data-independent bound takes over at λ = 100


def test_gnmax_tiny_q_in_log_space():
    # erfc underflows to 0 in double precision for gaps like this; the log-space bound does not.
    logq = mechanisms.gnmax_log_q([250, 0], sigma=1)
    assert math.isfinite(logq) and logq < -15000
    assert 0.0 <= mechanisms.gnmax_rdp([250, 0], sigma=1, orders=[2.0])[0] < 1e-10
    assert mechanisms.gnmax_rdp_from_log_q(-math.inf, sigma=40, orders=ORDERS6).tolist() == [0.0] * 6


def test_confident_gnmax_vector():
    p = math.exp(mechanisms.threshold_log_answer_probability(TEN, threshold=200, threshold_sigma=150))
    assert p == pytest.approx(0.5, abs=1e-12)
    rdp1 = mechanisms.threshold_rdp(TEN, threshold=200, threshold_sigma=150, orders=[20])[0]
    rdp2 = mechanisms.gnmax_rdp(TEN, sigma=40, orders=[20])[0]
    assert rdp1 == pytest.approx(4.4444e-4, abs=1e-8)
    assert rdp1 == pytest.approx(20 / (2 * 150**2))  # the data-independent λ/(2σ1²)
    assert rdp2 == pytest.approx(0.0019263, abs=1e-7)
    expected = mechanisms.confident_gnmax_expected_rdp(TEN, threshold=200, threshold_sigma=150, sigma=40, orders=[20])[
        0
    ]
    assert expected == pytest.approx(0.0014076, abs=1e-7)
    res = pate_analysis.analyze_confident_gnmax(
        np.tile(TEN, (4, 1)), threshold=200, threshold_sigma=150, sigma=40, delta=1e-5, orders=[20]
    )
    assert res.rdp_data_dependent[0] == pytest.approx(4 * expected, rel=1e-12)
    assert res.data_dependent.cost == "expected" and res.data_independent.cost == "realised"
    assert res.data_dependent.expected_answered == pytest.approx(2.0)
    assert res.data_dependent.aggregator == "confident-gnmax"


def test_confident_gnmax_answered_mask():
    votes = np.tile(TEN, (4, 1))
    answered = np.array([True, False, False, True])
    res = pate_analysis.analyze_confident_gnmax(
        votes, threshold=200, threshold_sigma=150, sigma=40, delta=1e-5, orders=[20], answered=answered
    )
    rdp1 = mechanisms.threshold_rdp(TEN, threshold=200, threshold_sigma=150, orders=[20])[0]
    rdp2 = mechanisms.gnmax_rdp(TEN, sigma=40, orders=[20])[0]
    assert res.rdp_data_dependent[0] == pytest.approx(4 * rdp1 + 2 * rdp2)
    assert res.data_dependent.cost == "realised"
    assert res.rdp_data_independent[0] == pytest.approx(4 * 20 / (2 * 150**2) + 2 * 20 / 40**2)


def test_threshold_data_dependent_far_from_threshold():
    # Votes far above T: P_ans ≈ 1 and the threshold step costs far less than λ/(2σ1²).
    rdp = mechanisms.threshold_rdp([250, 0, 0], threshold=50, threshold_sigma=50, orders=[10.0])[0]
    assert 0 <= rdp < 0.01 * 10 / (2 * 50**2)


def test_order_grid():
    grid = pate_votes.GNMAX_ORDERS
    assert grid[0] == 2.0 and grid[:3] == (2.0, 2.5, 3.0)
    assert 100.0 in grid and grid.index(100.0) == 196
    assert grid[-1] == pytest.approx(500.0)
    assert all(b > a for a, b in zip(grid, grid[1:]))
    tail = np.diff(np.log(grid[196:]))
    np.testing.assert_allclose(tail, tail[0])  # log-spaced after 100


def test_conversions():
    orders = np.array(pate_votes.GNMAX_ORDERS)
    rdp = 50 * orders / 40.0**2
    eps, order = pate_analysis.rdp_to_epsilon(orders, rdp, delta=1e-5)
    brute = rdp + math.log(1e5) / (orders - 1)
    assert eps == pytest.approx(brute.min()) and order == orders[np.argmin(brute)]
    eps_i, order_i = pate_analysis.rdp_to_epsilon(orders, rdp, delta=1e-5, conversion="improved")
    improved = rdp + np.log((orders - 1) / orders) - (math.log(1e-5) + np.log(orders)) / (orders - 1)
    assert eps_i == pytest.approx(improved.min()) and order_i == orders[np.argmin(improved)]
    assert eps_i < eps


# --------------------------------------------------------------------------------------------
# Smooth sensitivity (docs/defenses/pate.md §4, §6)
# --------------------------------------------------------------------------------------------


def test_local_sensitivity_unit_vector():
    ls = smooth_sensitivity.gnmax_local_sensitivities([10, 0, 0], sigma=0.5, order=1.5, num_teachers=10)
    assert ls.shape == (10,)
    # docs/defenses/pate.md §6: the published rtol 1e-8 fails by 2e-8 with current numpy/scipy; 1e-7 holds.
    np.testing.assert_allclose(ls[:4], [3.13503646e-17, 1.60178280e-08, 5.90681786e-03, 5.99981308], rtol=1e-7)
    np.testing.assert_allclose(ls[4:], 5.99981308, rtol=1e-7)
    # Keyword-only σ and order: the argument swap of the reference wrapper cannot happen.
    with pytest.raises(TypeError):
        smooth_sensitivity.gnmax_local_sensitivities([10, 0, 0], 0.5, 1.5)  # type: ignore[misc]


def test_local_sensitivity_reference_vector():
    ls = smooth_sensitivity.gnmax_local_sensitivities([1000, 500, 300, 200, 0], sigma=250, order=10, num_teachers=2000)
    assert ls.shape == (2000,)
    assert np.all(ls[:298] == 0.0)
    np.testing.assert_allclose(ls[298:300], [2.77693450548e-7, 2.10853979548e-6], rtol=1e-7)
    np.testing.assert_allclose(ls[300:], 2.73113623988e-6, rtol=1e-7)


def test_local_sensitivity_default_teachers():
    assert smooth_sensitivity.gnmax_local_sensitivities([10, 0, 0], sigma=0.5, order=1.5).shape == (10,)


def test_smooth_sensitivity_and_gnss():
    ls = np.array([1.0, 5.0, 3.0])
    assert smooth_sensitivity.smooth_sensitivity(ls, beta=0.1) == pytest.approx(5 * math.exp(-0.1))
    assert smooth_sensitivity.smooth_sensitivity(ls, beta=2.0) == pytest.approx(1.0)
    lam, beta, s = 10.0, 0.02, 5.0
    expected = lam * math.exp(2 * beta) / s**2 + (beta * lam - 0.5 * math.log(1 - 2 * lam * beta)) / (lam - 1)
    assert smooth_sensitivity.gnss_rdp(beta=beta, sigma_ss=s, order=lam) == pytest.approx(expected)
    with pytest.raises(ValueError, match="order"):
        smooth_sensitivity.gnss_rdp(beta=0.1, sigma_ss=s, order=5.0)  # 1/(2β) = 5 is outside (1, 5)


def test_release_is_seeded_and_consistent():
    votes = np.tile(TEN, (20, 1))
    votes[::3] = [180, 50, 10, 10, 0, 0, 0, 0, 0, 0]
    kw = dict(sigma=40.0, delta=1e-5, beta=0.01, sigma_ss=5.0)
    a = smooth_sensitivity.release_gnmax_epsilon(votes, seed=3, **kw)
    b = smooth_sensitivity.release_gnmax_epsilon(votes, seed=3, **kw)
    c = smooth_sensitivity.release_gnmax_epsilon(votes, seed=4, **kw)
    assert a == b and a.epsilon_noisy_estimate != c.epsilon_noisy_estimate
    assert a.reproducible and not a.private and a.seed == 3
    lam = a.order
    assert a.order_rule == "public" and lam == smooth_sensitivity.release_order(
        sigma=40.0, num_answered=20, delta=1e-5, beta=0.01, sigma_ss=5.0
    )
    # The private inputs, recomputed from the public building blocks: the noisy RDP is their sum.
    rdp = float(np.sum([mechanisms.gnmax_rdp(r, sigma=40.0, orders=[lam])[0] for r in votes]))
    ss = smooth_sensitivity.smooth_sensitivity(
        sum(smooth_sensitivity.gnmax_local_sensitivities(row, sigma=40.0, order=lam) for row in votes), beta=0.01
    )
    assert ss > 0
    assert a.rdp_noisy_estimate == pytest.approx(max(0.0, rdp + ss * float(np.random.default_rng(3).normal(0.0, 5.0))))
    assert a.rdp_release == pytest.approx(smooth_sensitivity.gnss_rdp(beta=0.01, sigma_ss=5.0, order=lam))
    assert a.epsilon_noisy_estimate == pytest.approx(a.rdp_noisy_estimate + a.rdp_release + math.log(1e5) / (lam - 1))
    assert 1 < lam < 50 and a.data_dependent and a.sanitised and (a.beta, a.sigma_ss) == (0.01, 5.0)
    fixed = smooth_sensitivity.release_gnmax_epsilon(votes, seed=3, order=20.0, **kw)
    assert fixed.order == 20.0 and fixed.order_rule == "given"
    with pytest.raises(ValueError, match="order"):
        smooth_sensitivity.release_gnmax_epsilon(votes, seed=3, order=60.0, **kw)


def test_a_negative_noisy_rdp_is_clipped_at_zero():
    # A seed whose draw is negative; with σ_ss huge it swamps the RDP, and RDP is never negative.
    seed = next(s for s in range(100) if np.random.default_rng(s).normal() < 0)
    r = smooth_sensitivity.release_gnmax_epsilon(
        np.tile(TEN, (5, 1)), sigma=40.0, delta=1e-5, beta=0.01, sigma_ss=1e6, seed=seed
    )
    assert r.rdp_noisy_estimate == 0.0 and r.epsilon_noisy_estimate == pytest.approx(
        r.rdp_release + math.log(1e5) / (r.order - 1)
    )


# --------------------------------------------------------------------------------------------
# Properties (seeded random loops)
# --------------------------------------------------------------------------------------------


def _random_votes(rng: np.random.Generator, teachers: int, classes: int) -> np.ndarray:
    # Dirichlet-multinomial: from near-unanimous to flat histograms.
    p = rng.dirichlet(np.full(classes, rng.choice([0.05, 0.3, 1.0, 5.0])))
    return rng.multinomial(teachers, p)


def test_data_dependent_never_above_data_independent():
    rng = np.random.default_rng(0)
    orders = np.array(pate_votes.GNMAX_ORDERS)
    for _ in range(150):
        classes = int(rng.choice([2, 3, 10, 100]))
        counts = _random_votes(rng, 250, classes)
        sigma = float(rng.choice([1.0, 5.0, 20.0, 40.0, 100.0]))
        dep = mechanisms.gnmax_rdp(counts, sigma=sigma)
        assert np.all(dep <= orders / sigma**2) and np.all(dep >= 0)
        s1 = float(rng.choice([50.0, 150.0]))
        thr = mechanisms.threshold_rdp(counts, threshold=float(rng.integers(50, 300)), threshold_sigma=s1)
        assert np.all(thr <= orders / (2 * s1**2)) and np.all(thr >= 0)
        b = float(rng.choice([5.0, 20.0, 50.0]))
        lm = mechanisms.lnmax_log_moments(counts, laplace_scale=b)
        assert np.all(lm <= mechanisms.lnmax_log_moments(counts, laplace_scale=b, data_dependent=False))


@pytest.mark.parametrize("sigma", [5.0, 40.0, 100.0])
def test_rdp_monotone_in_vote_gap(sigma):
    # Moving votes from the runner-up to the leader widens the gap: the cost never grows.
    orders = [2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 300.0]
    for classes in (2, 3, 10):
        prev_g = prev_t = prev_l = None
        for lead in range(125, 251, 5):
            counts = [lead, 250 - lead] + [0] * (classes - 2)
            g = mechanisms.gnmax_rdp(counts, sigma=sigma, orders=orders)
            t = mechanisms.threshold_rdp(counts, threshold=100, threshold_sigma=sigma, orders=orders)
            lm = mechanisms.lnmax_log_moments(counts, laplace_scale=sigma)
            if prev_g is not None:
                assert np.all(g <= prev_g * (1 + 1e-12))
                assert np.all(t <= prev_t * (1 + 1e-12))
                assert np.all(lm <= prev_l * (1 + 1e-12))
            prev_g, prev_t, prev_l = g, t, lm


def test_unanimous_votes_cost_least():
    rng = np.random.default_rng(1)
    for classes in (3, 10):
        unanimous = [250] + [0] * (classes - 1)
        for sigma in (10.0, 40.0):
            best = mechanisms.gnmax_rdp(unanimous, sigma=sigma)
            best_l = mechanisms.lnmax_log_moments(unanimous, laplace_scale=20)
            for _ in range(30):
                counts = _random_votes(rng, 250, classes)
                assert np.all(best <= mechanisms.gnmax_rdp(counts, sigma=sigma) * (1 + 1e-12))
                assert np.all(best_l <= mechanisms.lnmax_log_moments(counts, laplace_scale=20) * (1 + 1e-12))


def test_rdp_additive_over_queries():
    rng = np.random.default_rng(2)
    rows = [_random_votes(rng, 250, 10) for _ in range(5)]
    for k in (1, 7, 40):
        res = pate_analysis.analyze_gnmax(np.tile(rows[0], (k, 1)), sigma=40, delta=1e-5)
        np.testing.assert_allclose(res.rdp_data_dependent, k * mechanisms.gnmax_rdp(rows[0], sigma=40), rtol=1e-12)
        np.testing.assert_allclose(res.rdp_data_independent, k * np.array(pate_votes.GNMAX_ORDERS) / 1600, rtol=1e-12)
    mixed = pate_analysis.analyze_gnmax(np.array(rows), sigma=40, delta=1e-5)
    np.testing.assert_allclose(
        mixed.rdp_data_dependent, sum(mechanisms.gnmax_rdp(r, sigma=40) for r in rows), rtol=1e-12
    )
    conf = pate_analysis.analyze_confident_gnmax(
        np.array(rows), threshold=150, threshold_sigma=100, sigma=40, delta=1e-5
    )
    total = sum(mechanisms.confident_gnmax_expected_rdp(r, threshold=150, threshold_sigma=100, sigma=40) for r in rows)
    np.testing.assert_allclose(conf.rdp_data_dependent, total, rtol=1e-12)


# --------------------------------------------------------------------------------------------
# Independent re-implementation (direct formulas) on generated vote matrices
# --------------------------------------------------------------------------------------------

mpmath.mp.dps = 40
REF_ORDERS = np.concatenate([np.arange(2, 100.5, 0.5), np.exp(np.linspace(math.log(100), math.log(500), 100))[1:]])


def _ref_q(counts: np.ndarray, sigma: float) -> float:
    top = int(np.argmax(counts))
    q = mpmath.mpf(0)
    for i, n in enumerate(counts):
        if i != top:
            q += mpmath.erfc(mpmath.mpf(int(counts[top] - n)) / (2 * sigma)) / 2
    return float(min(q, 1 - mpmath.mpf(1) / len(counts)))


def _ref_rdp(q: float, sigma: float) -> np.ndarray:
    """Theorem 6 with Proposition 10, written out directly (no log space)."""
    lam = REF_ORDERS
    ind = lam / sigma**2
    if q == 0:
        return np.zeros_like(lam)
    mu2 = sigma * math.sqrt(math.log(1 / q))
    mu1 = mu2 + 1
    e1, e2 = mu1 / sigma**2, mu2 / sigma**2
    ok = mu2 > 1 and q * math.exp(e2) < 1
    ok = ok and math.log(q) <= (mu2 - 1) * e2 - mu2 * (math.log(mu1 / (mu1 - 1)) + math.log(mu2 / (mu2 - 1)))
    if not ok:
        return ind
    a = (1 - q) / (1 - (q * math.exp(e2)) ** ((mu2 - 1) / mu2))
    b = math.exp(e1) / q ** (1 / (mu1 - 1))
    with np.errstate(over="ignore"):
        dep = np.log((1 - q) * a ** (lam - 1) + q * b ** (lam - 1)) / (lam - 1)
    return np.where(lam < mu1, np.minimum(dep, ind), ind)


def _ref_epsilon(rdp: np.ndarray, delta: float) -> float:
    return float(np.min(rdp + math.log(1 / delta) / (REF_ORDERS - 1)))


@pytest.mark.extended
@pytest.mark.parametrize(
    ("sigma", "classes", "queries", "teachers", "threshold", "sigma1", "seed"),
    [
        (20.0, 10, 10, 250, None, None, 0),
        (40.0, 10, 200, 250, None, None, 1),
        (100.0, 3, 200, 2000, None, None, 2),
        (40.0, 100, 10, 250, None, None, 3),
        (40.0, 10, 200, 250, 200.0, 150.0, 4),
        (20.0, 3, 200, 250, 150.0, 100.0, 5),
        (100.0, 100, 10, 2000, 1200.0, 300.0, 6),
    ],
)
def test_agrees_with_independent_implementation(sigma, classes, queries, teachers, threshold, sigma1, seed):
    rng = np.random.default_rng(seed)
    # Mostly confident teachers (as on MNIST), so that the data-dependent bound matters.
    votes = np.array(
        [
            rng.multinomial(teachers, rng.dirichlet(np.full(classes, rng.choice([0.01, 0.05, 0.5]))))
            for _ in range(queries)
        ]
    )
    total = np.zeros_like(REF_ORDERS)
    expected_answered = 0.0
    for row in votes:
        if threshold is None:
            total += _ref_rdp(_ref_q(row, sigma), sigma)
            continue
        p_ans = float(mpmath.erfc((threshold - int(row.max())) / (sigma1 * mpmath.sqrt(2))) / 2)
        expected_answered += p_ans
        total += _ref_rdp(min(p_ans, 1 - p_ans), math.sqrt(2) * sigma1) + p_ans * _ref_rdp(_ref_q(row, sigma), sigma)
    if threshold is None:
        res = pate_analysis.analyze_gnmax(votes, sigma=sigma, delta=1e-5)
    else:
        res = pate_analysis.analyze_confident_gnmax(
            votes, threshold=threshold, threshold_sigma=sigma1, sigma=sigma, delta=1e-5
        )
        assert res.data_dependent.expected_answered == pytest.approx(expected_answered, rel=1e-9)
    assert res.data_dependent.epsilon == pytest.approx(_ref_epsilon(total, 1e-5), rel=1e-3)
    np.testing.assert_allclose(res.rdp_data_dependent, total, rtol=1e-3, atol=1e-12)
    # The comparison is not vacuous: the votes lower ε below the data-independent bound.
    assert res.data_dependent.epsilon < 0.97 * res.data_independent.epsilon


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("votes", "needle"),
    [
        ([[3, -1, 0]], "votes"),
        ([[1.5, 0.5]], "integer"),
        ([[np.nan, 2.0]], "finite"),
        ([[np.inf, 2.0]], "finite"),
        ([[4], [4]], "2 classes"),
        ([[3, 1], [2, 1]], "sum"),
        (np.zeros((0, 3)), "empty"),
        ([1, 2, 3], "2-D"),
        ([[0, 0], [0, 0]], "teacher"),
    ],
)
def test_check_votes_refuses(votes, needle):
    with pytest.raises(ValueError, match=needle):
        pate_votes.check_votes(votes)


def test_check_votes_accepts_integral_floats_read_only():
    out = pate_votes.check_votes(np.array([[3.0, 1.0], [0.0, 4.0]]))
    assert out.dtype == np.int64 and out.tolist() == [[3, 1], [0, 4]]
    assert not out.flags.writeable
    with pytest.raises(TypeError, match="votes"):
        pate_votes.check_votes([["a", "b"]])


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda: pate_analysis.analyze_gnmax([TEN], sigma=0, delta=1e-5), "sigma"),
        (lambda: pate_analysis.analyze_gnmax([TEN], sigma=40, delta=1.0), "delta"),
        (lambda: pate_analysis.analyze_gnmax([TEN], sigma=40, delta=1e-5, orders=[1.0, 2.0]), "orders"),
        (lambda: pate_analysis.analyze_lnmax([TEN], laplace_scale=-1, delta=1e-5), "laplace_scale"),
        (lambda: pate_analysis.analyze_lnmax([TEN], laplace_scale=20, delta=1e-5, moment_orders=[0]), "moment_orders"),
        (
            lambda: pate_analysis.analyze_confident_gnmax(
                [TEN], threshold=math.inf, threshold_sigma=1, sigma=1, delta=1e-5
            ),
            "threshold",
        ),
        (
            lambda: pate_analysis.analyze_confident_gnmax([TEN], threshold=1, threshold_sigma=0, sigma=1, delta=1e-5),
            "threshold_sigma",
        ),
        (
            lambda: pate_analysis.analyze_confident_gnmax(
                [TEN], threshold=1, threshold_sigma=1, sigma=1, delta=1e-5, answered=[1]
            ),
            "answered",
        ),
        (lambda: mechanisms.gnmax_rdp_from_log_q(0.5, sigma=1), "log_q"),
        (lambda: smooth_sensitivity.gnmax_local_sensitivities([10, 0, 0], sigma=0.5, order=1.0), "order"),
        (
            lambda: smooth_sensitivity.gnmax_local_sensitivities([10, 0, 0], sigma=0.5, order=1.5, num_teachers=5),
            "num_teachers",
        ),
        (lambda: smooth_sensitivity.smooth_sensitivity([1.0, -1.0], beta=0.1), "local_sensitivities"),
        (lambda: smooth_sensitivity.smooth_sensitivity([1.0], beta=0), "beta"),
        (lambda: pate_analysis.rdp_to_epsilon([2.0], [0.1], delta=1e-5, conversion="pld"), "conversion"),
        (lambda: mechanisms.gnmax_log_q([[1, 2]], sigma=1), "counts"),
    ],
)
def test_bad_arguments_name_themselves(call, needle):
    with pytest.raises(ValueError, match=needle):
        call()


def test_results_are_frozen():
    res = pate_analysis.analyze_gnmax([TEN], sigma=40, delta=1e-5)
    with pytest.raises(AttributeError):
        res.data_dependent.epsilon = 0.0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        res.orders = ()  # type: ignore[misc]


def test_lemma9_condition_is_checked():
    # σ = 0.5: at ln q̃ = −4.1 we have μ2 > 1 and q̃ e^{ε2} < 1, yet ln q̃ exceeds Lemma 9's limit
    # (≈ −5.1); at −4.41 all conditions hold. On outcomes the data-dependent bound is never below
    # λ/σ² where only this condition fails (searched over σ and q̃), so the check is tested directly.
    assert mechanisms._theorem6_valid(-4.1, 0.5)[0] is False
    assert mechanisms._theorem6_valid(-4.41, 0.5)[0] is True
    assert mechanisms._theorem6_valid(-3.0, 0.5)[0] is False  # μ2 < 1


@pytest.mark.parametrize(("top", "beta"), [(20, 0.05), (12, 0.3), (3, 1.0)])
def test_threshold_smooth_sensitivity_brute_force(top, beta):
    # The threshold RDP depends on the votes through the max count m only, and one teacher moves m
    # by at most one: SS_β = max over m' of e^{−β|m' − m|} · max(|r(m'±1) − r(m')|).
    teachers, t, s1, lam = 24, 15.0, 3.0, 5.0
    # r(m): P_ans depends on m − T only, so evaluate a one-vote histogram at threshold T + 1 − m.
    r = [
        mechanisms.threshold_rdp([1, 0], threshold=t + 1 - m, threshold_sigma=s1, orders=[lam])[0]
        for m in range(teachers + 1)
    ]
    local = [
        max(abs(r[m] - r[m - 1]) if m > 0 else 0.0, abs(r[m + 1] - r[m]) if m < teachers else 0.0)
        for m in range(teachers + 1)
    ]
    brute = max(math.exp(-beta * abs(m - top)) * local[m] for m in range(teachers + 1))
    counts = [top] + [1] * (teachers - top) + [0] * top  # max count = top
    ls = smooth_sensitivity.threshold_local_sensitivities(counts, threshold=t, threshold_sigma=s1, order=lam)
    assert ls.shape == (teachers,) and ls[0] == pytest.approx(local[top])
    assert smooth_sensitivity.smooth_sensitivity(ls, beta=beta) == pytest.approx(brute, rel=1e-12)
    assert max(local) > 0


def test_confident_release():
    rng = np.random.default_rng(7)
    votes = np.array([rng.multinomial(250, rng.dirichlet(np.full(10, 0.05))) for _ in range(30)])
    answered = rng.random(30) < 0.5
    kw = dict(
        threshold=200.0, threshold_sigma=150.0, sigma=40.0, answered=answered, delta=1e-5, beta=0.0329, sigma_ss=6.23
    )
    a = smooth_sensitivity.release_confident_gnmax_epsilon(votes, seed=1, **kw)
    assert a == smooth_sensitivity.release_confident_gnmax_epsilon(votes, seed=1, **kw)
    assert a.aggregator == "confident-gnmax" and a.order < 1 / (2 * 0.0329)
    public = smooth_sensitivity.release_order(
        sigma=40.0,
        num_answered=int(answered.sum()),
        num_queries=30,
        threshold_sigma=150.0,
        delta=1e-5,
        beta=0.0329,
        sigma_ss=6.23,
    )
    assert a.order == public and a.order_rule == "public"
    expected = sum(mechanisms.threshold_rdp(r, threshold=200, threshold_sigma=150, orders=[a.order])[0] for r in votes)
    expected += sum(mechanisms.gnmax_rdp(r, sigma=40, orders=[a.order])[0] for r in votes[answered])
    ls = sum(
        smooth_sensitivity.threshold_local_sensitivities(r, threshold=200, threshold_sigma=150, order=a.order)
        for r in votes
    )
    ls = ls + sum(
        smooth_sensitivity.gnmax_local_sensitivities(r, sigma=40, order=a.order, num_teachers=250)
        for r in votes[answered]
    )
    noise = float(np.random.default_rng(1).normal(0.0, 6.23))
    assert a.rdp_noisy_estimate == pytest.approx(
        max(0.0, expected + smooth_sensitivity.smooth_sensitivity(ls, beta=0.0329) * noise), rel=1e-9
    )
    assert a.epsilon_noisy_estimate == pytest.approx(
        a.rdp_noisy_estimate + a.rdp_release + math.log(1e5) / (a.order - 1)
    )
    with pytest.raises(ValueError, match="answered"):
        smooth_sensitivity.release_confident_gnmax_epsilon(votes, seed=1, **{**kw, "answered": answered[:3]})


# ----------------------------------------------------------------------------- the PATE claim kind
def _mnist_like_votes(queries: int = 100) -> np.ndarray:
    return np.array([[200, 30, 10, 10, 0, 0, 0, 0, 0, 0]] * queries, dtype=np.int64)


def test_pate_claim_states_the_analysis_and_round_trips() -> None:
    from dpaudit.privacy.claims import claim_from_dict

    votes = _mnist_like_votes()
    analysis = pate_analysis.analyze_gnmax(votes, sigma=40.0, delta=1e-5)
    claim = pate_claim.pate_claim(analysis, parameters={"sigma": 40.0}, num_answered=100)
    assert claim.data_dependent and not claim.sanitised and claim.accountants == ("rdp",)
    assert claim.epsilon(delta=1e-5) == pytest.approx(analysis.data_dependent.epsilon)
    assert claim.epsilon_improved(delta=1e-5) == pytest.approx(analysis.data_dependent.epsilon_improved)
    bound = claim.upper_bound(delta=1e-5)
    assert bound.accountant == "rdp" and bound.epsilon == pytest.approx(analysis.data_dependent.epsilon)
    data = claim.to_dict()
    assert data["kind"] == "pate" and data["data_dependent"] is True and data["sanitised"] is False
    assert claim_from_dict(json.loads(json.dumps(data))) == claim
    independent = pate_claim.pate_claim(analysis, parameters={"sigma": 40.0}, num_answered=100, data_dependent=False)
    assert not independent.data_dependent and independent.epsilon(delta=1e-5) == pytest.approx(
        analysis.data_independent.epsilon
    )


@pytest.mark.extended
def test_pate_claim_of_a_smooth_sensitivity_release_is_marked_sanitised() -> None:
    from dpaudit.privacy.claims import claim_from_dict

    votes = _mnist_like_votes(640)
    analysis = pate_analysis.analyze_gnmax(votes, sigma=40.0, delta=1e-5)
    release = smooth_sensitivity.release_gnmax_epsilon(
        votes, sigma=40.0, delta=1e-5, beta=0.0329, sigma_ss=15.0, seed=0
    )
    claim = pate_claim.pate_claim(analysis, parameters={"sigma": 40.0}, num_answered=640, release=release)
    assert claim.data_dependent and claim.sanitised and claim.orders == (release.order,)
    assert claim.epsilon(delta=1e-5) == pytest.approx(release.epsilon_noisy_estimate)
    assert claim_from_dict(claim.to_dict()).to_dict()["sanitised"] is True


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"aggregator": "bogus"}, "aggregator"),
        ({"parameters": {"sigma": -1.0}}, "parameters.sigma"),
        ({"parameters": {"laplace_scale": 20.0}}, "parameters of gnmax"),
        ({"num_answered": 101}, "num_answered"),
        ({"rdp": [float("nan")] * 3}, "rdp[0]"),
        ({"orders": [1.0, 2.0, 3.0]}, "every order > 1"),
        (
            {"analysis": "data-independent", "smooth_sensitivity": {"beta": 0.1, "sigma_ss": 1.0}},
            "data-dependent analysis only",
        ),
    ],
)
def test_a_tampered_pate_claim_is_refused(change: dict, needle: str) -> None:
    from dpaudit.privacy.claims import claim_from_dict

    good = {
        "kind": "pate",
        "aggregator": "gnmax",
        "parameters": {"sigma": 40.0},
        "num_queries": 100,
        "num_answered": 100,
        "orders": [2.0, 3.0, 4.0],
        "rdp": [0.1, 0.2, 0.3],
        "analysis": "data-dependent",
    }
    with pytest.raises((ValueError, TypeError), match=re.escape(needle)):
        claim_from_dict({**good, **change})


def test_a_pate_claim_says_in_words_when_its_epsilon_is_data_dependent() -> None:
    votes = _mnist_like_votes()
    analysis = pate_analysis.analyze_gnmax(votes, sigma=40.0, delta=1e-5)
    dependent = pate_claim.pate_claim(analysis, parameters={"sigma": 40.0}, num_answered=100)
    assert "data-dependent" in dependent.statement() and "not sanitised" in dependent.statement()
    release = smooth_sensitivity.release_gnmax_epsilon(
        votes, sigma=40.0, delta=1e-5, beta=0.0329, sigma_ss=15.0, seed=0
    )
    assert (
        "released with smooth sensitivity"
        in pate_claim.pate_claim(analysis, parameters={"sigma": 40.0}, num_answered=100, release=release).statement()
    )
    independent = pate_claim.pate_claim(analysis, parameters={"sigma": 40.0}, num_answered=100, data_dependent=False)
    assert independent.statement() == independent.description and "data-dependent" not in independent.statement()
