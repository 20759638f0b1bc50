"""Soundness of every accountant: the printed ε_UB is never below the true ε of DP-SGD.

Random (q, σ, T, δ), including q near 1 and q = 1, σ down to 0.3, T = 1 and δ from 1e-12 to 0.1.
The reference is a *lower* bound on the true ε, independent of dpaudit: for q = 1 the exact
Gaussian-DP curve of T un-sampled steps (μ = √T/σ; Dong, Roth & Su 2019, Cor. 2.13) solved with
SciPy; for q < 1 ``dp_accounting``'s optimistic PLD (Koskela et al. 2020), which understates δ(ε)
at every discretisation, so no discretisation allowance is needed. The default run is
deterministic and takes seconds (coarse reference, T ≤ 12, PLD only at σ ≥ 1); the ``slow``
twins draw many more examples over the full ranges with a finer reference.
"""

from __future__ import annotations

import logging
import math
import warnings

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from dpaudit.privacy import accountant_names, accountants, events
from dpaudit.privacy.claims import dpsgd_claim

logging.getLogger("absl").setLevel(logging.ERROR)
logging.getLogger().setLevel(logging.ERROR)  # dp_accounting's root-logger notes on PLD options

# Rounding in the accountants' and the reference's own arithmetic, not a discretisation allowance.
_TOLERANCE = 1e-9

sampling_rates = st.one_of(st.floats(1e-3, 0.9), st.floats(0.9, 0.999), st.just(1.0))
deltas = st.floats(-12.0, -1.0).map(lambda e: 10.0**e)


def _gdp_epsilon(mu: float, delta: float) -> float:
    """ε of μ-GDP at δ: the root of Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) = δ."""

    def excess(e: float) -> float:
        # in logs: e^ε Φ(·) overflows for the large ε of σ = 0.3, T = 100
        a, b = stats.norm.logcdf(-e / mu + mu / 2), e + stats.norm.logcdf(-e / mu - mu / 2)
        return (a + math.log1p(-math.exp(b - a)) if b < a else -math.inf) - math.log(delta)

    if excess(0.0) <= 0:
        return 0.0
    hi = 1.0
    while excess(hi) > 0:
        hi *= 2.0
    return optimize.brentq(excess, 0.0, hi, xtol=1e-12)


def reference_lower(q: float, sigma: float, steps: int, delta: float, interval: float) -> float:
    """A lower bound on the true ε of T Poisson-sampled Gaussian steps at δ."""
    if q == 1.0:
        return _gdp_epsilon(math.sqrt(steps) / sigma, delta)
    pld = pld_lib.from_gaussian_mechanism(sigma, value_discretization_interval=interval, sampling_prob=q, pessimistic_estimate=False, use_connect_dots=False)
    if steps > 1:
        pld = pld.self_compose(steps)
    return float(pld.get_epsilon_for_delta(delta))


def _check_accountants(q: float, sigma: float, steps: int, delta: float, names: tuple[str, ...], interval: float) -> None:
    event = events.sampled_gaussian_event(sampling_rate=q, noise_multiplier=sigma, num_steps=steps)
    truth = reference_lower(q, sigma, steps, delta, interval)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # edge-of-grid notes, PLD fallbacks: still bounds
        for name in names:
            res = accountants.compute_epsilon_detailed(event, delta=delta, accountant=name)
            assert not res.declined, res.note  # DP-SGD is within every accountant's formula
            assert res.epsilon >= truth - _TOLERANCE * max(1.0, truth), (name, res.epsilon, truth)


def _check_headline(q: float, sigma: float, steps: int, delta: float, interval: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bound = dpsgd_claim(sampling_rate=q, noise_multiplier=sigma, num_steps=steps).upper_bound(delta=delta)
    truth = reference_lower(q, sigma, steps, delta, interval)
    assert set(bound.by_accountant) == set(accountant_names.ACCOUNTANTS)
    assert bound.epsilon == min(bound.by_accountant.values())
    assert bound.epsilon >= truth - _TOLERANCE * max(1.0, truth), (bound, truth)


_FAST_ACCOUNTANTS = ("naive", "strong", "moments", "rdp")


@settings(max_examples=20, deadline=None, derandomize=True)
@given(q=sampling_rates, sigma=st.floats(0.3, 5.0), steps=st.integers(1, 12), delta=deltas)
def test_accountants_are_never_below_the_true_epsilon(q, sigma, steps, delta):
    _check_accountants(q, sigma, steps, delta, _FAST_ACCOUNTANTS, interval=1e-2)


@pytest.mark.slow
@settings(max_examples=400, deadline=None, derandomize=True)
@given(q=sampling_rates, sigma=st.floats(0.3, 8.0), steps=st.one_of(st.integers(1, 20), st.integers(1, 200)), delta=deltas)
def test_accountants_are_never_below_the_true_epsilon_many(q, sigma, steps, delta):
    _check_accountants(q, sigma, steps, delta, _FAST_ACCOUNTANTS, interval=1e-3)


# The headline runs every accountant, PLD included (~1 s at σ = 1, several at σ = 0.3).
@settings(max_examples=3, deadline=None, derandomize=True)
@given(q=sampling_rates, sigma=st.floats(1.0, 5.0), steps=st.integers(1, 5), delta=deltas)
def test_headline_upper_bound_is_never_below_the_true_epsilon(q, sigma, steps, delta):
    _check_headline(q, sigma, steps, delta, interval=1e-2)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True)
@given(q=sampling_rates, sigma=st.floats(0.3, 8.0), steps=st.integers(1, 50), delta=deltas)
def test_headline_upper_bound_is_never_below_the_true_epsilon_many(q, sigma, steps, delta):
    _check_headline(q, sigma, steps, delta, interval=1e-3)
