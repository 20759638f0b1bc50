"""The last-iterate ε of Steinke et al. (2024) against independent computations.

The reference numbers below were computed by direct quadrature, not by the module: the densities
p(x) = Σ_k Binom(k; T, q) φ((x − k)/s)/s and q(x) = φ(x/s)/s (s = σ√T) on 400,001 points over
[−14s, T + 14s], δ(ε) = max(∫ max(p − e^ε q, 0), ∫ max(q − e^ε p, 0)) by the trapezoid rule,
and ε(10⁻⁵) by root-finding on that quadrature.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event as dpe
from dp_accounting.pld import pld_privacy_accountant
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from dpaudit.privacy.audit_bounds import gaussian_step_claim
from dpaudit.privacy.claims import DPClaim, NonPrivateClaim, dpsgd_claim
from dpaudit.privacy.gaussian import gaussian_epsilon
from dpaudit.privacy.last_iterate import (
    claim_last_iterate_epsilon,
    dpsgd_parameters,
    last_iterate_delta,
    last_iterate_epsilon,
)

# (q, σ, T) → {ε: δ(ε) by quadrature}, and ε at δ = 1e-5 by quadrature.
QUADRATURE_DELTAS = {
    (0.1, 1.0, 10): {0.5: 1.9478806965e-02, 1.0: 2.2189000041e-03, 2.0: 2.0692481985e-05},
    (0.1, 3.0, 50): {0.5: 2.4084839619e-03, 1.0: 4.3585894379e-06},
    (0.05, 2.0, 100): {0.5: 3.5199319259e-03, 1.0: 1.2766344998e-05},
    (0.5, 0.8, 5): {0.5: 3.7669737265e-01, 1.0: 2.8419625897e-01},
}
QUADRATURE_EPSILONS = {(0.1, 1.0, 10): 2.153065231758, (0.1, 3.0, 50): 0.944194039195, (0.05, 2.0, 100): 1.018141993156}


def _quadrature_delta(q: float, sigma: float, steps: int, eps: float, n: int = 100_001) -> float:
    s = sigma * math.sqrt(steps)
    x = np.linspace(-14 * s, steps + 14 * s, n)
    k = np.arange(steps + 1)
    p = (stats.binom.pmf(k, steps, q)[:, None] * stats.norm.pdf(x[None, :], loc=k[:, None], scale=s)).sum(axis=0)
    g = stats.norm.pdf(x, scale=s)
    add = integrate.trapezoid(np.maximum(p - math.exp(eps) * g, 0.0), x)
    remove = integrate.trapezoid(np.maximum(g - math.exp(eps) * p, 0.0), x)
    return float(max(add, remove))


def _pld_epsilon(q: float, sigma: float, steps: int, delta: float, interval: float = 1e-4) -> float:
    """ε of the full transcript (every iterate released): dp_accounting's PLD, pessimistic."""
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=interval)
    inner: dpe.DpEvent = (
        dpe.GaussianDpEvent(sigma) if q == 1 else dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(sigma))
    )
    acc.compose(inner, steps)
    return float(acc.get_epsilon(delta))


@pytest.mark.parametrize(
    ("params", "eps", "expected"), [(p, e, d) for p, row in QUADRATURE_DELTAS.items() for e, d in row.items()]
)
def test_delta_matches_quadrature_vectors(params, eps, expected):
    q, sigma, steps = params
    assert last_iterate_delta(sampling_rate=q, noise_multiplier=sigma, num_steps=steps, epsilon=eps) == pytest.approx(
        expected, rel=1e-7
    )


@pytest.mark.parametrize(("params", "expected"), list(QUADRATURE_EPSILONS.items()))
def test_epsilon_matches_quadrature_vectors(params, expected):
    q, sigma, steps = params
    assert last_iterate_epsilon(sampling_rate=q, noise_multiplier=sigma, num_steps=steps, delta=1e-5) == pytest.approx(
        expected, abs=1e-8
    )


@pytest.mark.parametrize(("q", "sigma", "steps"), [(0.2, 1.5, 8), (0.7, 2.0, 3)])
def test_delta_matches_live_quadrature(q, sigma, steps):
    # Both directions matter here (the remove direction is the larger one at small ε for q = 0.7).
    for eps in (0.1, 0.7, 1.5):
        got = last_iterate_delta(sampling_rate=q, noise_multiplier=sigma, num_steps=steps, epsilon=eps)
        assert got == pytest.approx(_quadrature_delta(q, sigma, steps, eps), rel=1e-6)


@pytest.mark.parametrize(
    ("sigma", "steps", "delta"), [(1.0, 1, 1e-5), (2.0, 9, 1e-5), (4.0, 10_000, 1e-5), (0.7, 30, 1e-3)]
)
def test_full_batches_are_the_gaussian_mechanism(sigma, steps, delta):
    # q = 1: S = T + N(0, Tσ²), the Gaussian mechanism with μ = √T/σ (Balle & Wang 2018, Thm 8).
    expected = gaussian_epsilon(delta=delta, sigma=sigma / math.sqrt(steps))
    assert last_iterate_epsilon(
        sampling_rate=1.0, noise_multiplier=sigma, num_steps=steps, delta=delta
    ) == pytest.approx(expected, rel=1e-9)


@pytest.mark.extended
@pytest.mark.parametrize(
    ("q", "sigma", "delta"), [(0.01, 1.0, 1e-5), (0.1, 0.8, 1e-5), (0.5, 2.0, 1e-6), (0.3, 0.5, 1e-3)]
)
def test_one_step_is_the_subsampled_gaussian(q, sigma, delta):
    # T = 1: nothing is hidden; the last iterate is the one release, whose tight ε dp_accounting's PLD gives.
    got = last_iterate_epsilon(sampling_rate=q, noise_multiplier=sigma, num_steps=1, delta=delta)
    assert got == pytest.approx(_pld_epsilon(q, sigma, 1, delta), rel=1e-6)


def test_monotone_in_rate_and_noise_and_in_steps_beyond_the_first_few():
    def eps(q=0.05, sigma=1.0, steps=100):
        return last_iterate_epsilon(sampling_rate=q, noise_multiplier=sigma, num_steps=steps, delta=1e-5)

    by_steps = [eps(steps=t) for t in (5, 10, 100, 1000, 10_000)]
    by_rate = [eps(q=q) for q in (0.001, 0.01, 0.05, 0.2, 1.0)]
    by_noise = [eps(sigma=s) for s in (8.0, 4.0, 2.0, 1.0, 0.5)]
    for seq in (by_steps, by_rate, by_noise):
        assert all(b > a for a, b in zip(seq, seq[1:])), seq


def test_not_monotone_in_the_first_steps():
    # A property of the heuristic, not of the code: at q = 0.05, σ = 1 a second and third step
    # dilute the one sampled contribution (its mean 1 over a noise scale σ√T) faster than the
    # chance of a second sampling adds signal. Quadrature (module docstring) gives δ(0.95) =
    # 1.5706546862e-05 at T = 1 and 5.9331560615e-06 at T = 3.
    one = last_iterate_delta(sampling_rate=0.05, noise_multiplier=1.0, num_steps=1, epsilon=0.95)
    three = last_iterate_delta(sampling_rate=0.05, noise_multiplier=1.0, num_steps=3, epsilon=0.95)
    assert one == pytest.approx(1.5706546862e-05, rel=1e-7) and three == pytest.approx(5.9331560615e-06, rel=1e-7)
    assert last_iterate_epsilon(
        sampling_rate=0.05, noise_multiplier=1.0, num_steps=3, delta=1e-5
    ) < last_iterate_epsilon(sampling_rate=0.05, noise_multiplier=1.0, num_steps=1, delta=1e-5)


@pytest.mark.extended
@pytest.mark.parametrize(("q", "sigma", "steps"), [(0.01, 4.0, 10_000), (0.1, 3.0, 50), (0.01, 1.0, 1000)])
def test_below_the_full_transcript(q, sigma, steps):
    assert last_iterate_epsilon(sampling_rate=q, noise_multiplier=sigma, num_steps=steps, delta=1e-5) <= _pld_epsilon(
        q, sigma, steps, 1e-5
    )


@pytest.mark.extended
def test_far_below_the_full_transcript_when_steps_hide_a_weak_signal():
    # Small σ and many steps: each step alone leaks a lot, the final sum little (the paper's Fig. 1 regime).
    li = last_iterate_epsilon(sampling_rate=0.01, noise_multiplier=0.6, num_steps=1000, delta=1e-5)
    assert li < 0.5 * _pld_epsilon(0.01, 0.6, 1000, 1e-5)


def _never_above(q: float, sigma: float, steps: int, delta: float) -> None:
    li = last_iterate_epsilon(sampling_rate=q, noise_multiplier=sigma, num_steps=steps, delta=delta)
    assert li <= _pld_epsilon(q, sigma, steps, delta, interval=1e-3) + 1e-6
    assert li <= gaussian_epsilon(delta=delta, sigma=sigma / math.sqrt(steps)) + 1e-9


_params = (
    st.floats(min_value=1e-3, max_value=1.0),
    st.floats(min_value=0.5, max_value=10.0),
    st.integers(min_value=1, max_value=60),
    st.sampled_from([1e-7, 1e-5, 1e-3]),
)


@settings(max_examples=6, deadline=None, derandomize=True)
@given(*_params)
def test_never_above_the_full_transcript(q, sigma, steps, delta):
    _never_above(q, sigma, steps, delta)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, derandomize=True)
@given(*_params)
def test_never_above_the_full_transcript_many(q, sigma, steps, delta):
    _never_above(q, sigma, steps, delta)


def test_inverse_of_delta():
    eps = last_iterate_epsilon(sampling_rate=0.02, noise_multiplier=1.2, num_steps=500, delta=1e-6)
    assert last_iterate_delta(sampling_rate=0.02, noise_multiplier=1.2, num_steps=500, epsilon=eps) == pytest.approx(
        1e-6, rel=1e-6
    )


def test_edges():
    assert last_iterate_epsilon(sampling_rate=0.5, noise_multiplier=1.0, num_steps=0, delta=1e-5) == 0.0
    assert last_iterate_epsilon(sampling_rate=0.5, noise_multiplier=1e300, num_steps=10, delta=1e-5) == 0.0
    assert last_iterate_epsilon(sampling_rate=0.5, noise_multiplier=1e-200, num_steps=10, delta=1e-5) == math.inf
    # Disjoint components: δ is the chance the example was ever sampled.
    assert last_iterate_delta(sampling_rate=0.5, noise_multiplier=1e-200, num_steps=10, epsilon=3.0) == pytest.approx(
        1 - 0.5**10
    )


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"sampling_rate": 0.0}, "sampling_rate"),
        ({"sampling_rate": 1.5}, "sampling_rate"),
        ({"noise_multiplier": 0.0}, "noise_multiplier"),
        ({"noise_multiplier": float("nan")}, "noise_multiplier"),
        ({"num_steps": -1}, "num_steps"),
        ({"num_steps": 2.5}, "num_steps"),
        ({"num_steps": 10**8}, "num_steps"),
        ({"delta": 0.0}, "delta"),
        ({"delta": 1.0}, "delta"),
    ],
)
def test_bad_input_names_the_argument(kwargs, name):
    args = {"sampling_rate": 0.1, "noise_multiplier": 1.0, "num_steps": 10, "delta": 1e-5, **kwargs}
    with pytest.raises((ValueError, TypeError), match=name):
        last_iterate_epsilon(**args)


def test_claims_of_the_dpsgd_family_only():
    claim = dpsgd_claim(sampling_rate=0.1, noise_multiplier=3.0, num_steps=50)
    assert dpsgd_parameters(claim.event) == (0.1, 3.0, 50)
    assert claim_last_iterate_epsilon(claim, delta=1e-5) == pytest.approx(QUADRATURE_EPSILONS[(0.1, 3.0, 50)], abs=1e-8)
    full = dpsgd_claim(sampling_rate=1.0, noise_multiplier=2.0, num_steps=9)
    assert dpsgd_parameters(full.event) == (1.0, 2.0, 9)
    # The white-box game's claim, one un-sampled step: nothing is hidden, last iterate = ε_UB.
    step = gaussian_step_claim(noise_multiplier=1.0)
    assert claim_last_iterate_epsilon(step, delta=1e-5) == pytest.approx(step.upper_bound(delta=1e-5).epsilon, rel=1e-6)
    assert claim_last_iterate_epsilon(NonPrivateClaim(), delta=1e-5) is None
    composed = claim.compose(DPClaim(event=dpe.GaussianDpEvent(5.0)))
    assert claim_last_iterate_epsilon(composed, delta=1e-5) is None
    assert claim_last_iterate_epsilon(DPClaim(event=dpe.LaplaceDpEvent(1.0)), delta=1e-5) is None
    replace = DPClaim(event=claim.event, neighbouring="replace_one")
    assert claim_last_iterate_epsilon(replace, delta=1e-5) is None
