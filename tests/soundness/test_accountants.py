"""Soundness of every registered accountant: the printed ε_UB is never below the true ε of DP-SGD.

The accountants come from the registry (:data:`~dpaudit.privacy.accountant_names.ACCOUNTANTS`),
read at collection: a newly registered accountant is checked with no edit here (see
``tests/privacy/test_toy_accountant.py``). An accountant may decline an event only where its own
``supports`` says it cannot bound it; one that gives δ at a given ε is checked for that too.

Random (q, σ, T, δ), including q near 1 and q = 1, σ down to 0.3, T = 1 and δ from 1e-12 to 0.1.
The reference is a *lower* bound on the true ε, independent of dpaudit: for q = 1 the exact
Gaussian-DP curve of T un-sampled steps (μ = √T/σ; Dong, Roth & Su 2019, Cor. 2.13) solved with
SciPy; for q < 1 ``dp_accounting``'s optimistic PLD (Koskela et al. 2020), which understates δ(ε)
at every discretisation, so no discretisation allowance is needed. The default run is
deterministic and takes seconds (coarse reference, T ≤ 12, and a memory budget that sends the
costly PLD grids, σ small or T large, to the accountant's declared fallback, whose number is then
the one checked; the headline test runs PLD itself at σ ≥ 1); the ``slow`` twins draw many more
examples over the full ranges with a finer reference and a larger budget.
"""

from __future__ import annotations

import functools
import logging
import math
import warnings

import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from dpaudit.privacy import accountants, events
from dpaudit.privacy.accountant_names import ACCOUNTANTS
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


@functools.lru_cache(maxsize=1024)  # each accountant's test draws the same examples
def reference_lower(q: float, sigma: float, steps: int, delta: float, interval: float) -> float:
    """A lower bound on the true ε of T Poisson-sampled Gaussian steps at δ."""
    if q == 1.0:
        return _gdp_epsilon(math.sqrt(steps) / sigma, delta)
    pld = pld_lib.from_gaussian_mechanism(
        sigma,
        value_discretization_interval=interval,
        sampling_prob=q,
        pessimistic_estimate=False,
        use_connect_dots=False,
    )
    if steps > 1:
        pld = pld.self_compose(steps)
    return float(pld.get_epsilon_for_delta(delta))


def reference_delta_lower(q: float, sigma: float, steps: int, epsilon: float, interval: float) -> float:
    """A lower bound on the true δ(ε) of T Poisson-sampled Gaussian steps."""
    if q == 1.0:
        mu = math.sqrt(steps) / sigma  # exact G_μ curve (Dong, Roth & Su 2019, Cor. 2.13)
        return float(
            stats.norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2)
        )
    pld = pld_lib.from_gaussian_mechanism(
        sigma,
        value_discretization_interval=interval,
        sampling_prob=q,
        pessimistic_estimate=False,
        use_connect_dots=False,
    )
    if steps > 1:
        pld = pld.self_compose(steps)
    return float(pld.get_delta_for_epsilon(epsilon))


def registered_accountants() -> list[str]:
    """The accountants the suite checks: every registered one, in listing order."""
    return list(ACCOUNTANTS.names())


def check_accountant(
    name: str,
    q: float,
    sigma: float,
    steps: int,
    delta: float,
    *,
    interval: float,
    memory_budget: float,
    sampled_delta: bool = True,
) -> None:
    """The registered accountant ``name`` is sound on T Poisson-sampled Gaussian steps (or declines where it says it
    cannot).

    ``sampled_delta=False`` checks δ(ε) only at q = 1, where the reference is a closed form (the
    PLD reference for q < 1 costs as much again).
    """
    spec = ACCOUNTANTS[name]
    event = events.sampled_gaussian_event(sampling_rate=q, noise_multiplier=sigma, num_steps=steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # edge-of-grid notes, PLD fallbacks: still bounds
        res = accountants.compute_epsilon_detailed(event, delta=delta, accountant=name, memory_budget=memory_budget)
        assert res.declined == (not spec.supports(event)), (
            name,
            res.note,
        )  # declines only what it says it cannot bound
        if res.declined:
            return
        truth = reference_lower(q, sigma, steps, delta, interval)
        assert res.epsilon >= truth - _TOLERANCE * max(1.0, truth), (name, res.computed_by, res.epsilon, truth)
        if spec.delta is None or res.fell_back or not 0.0 < truth < math.inf or (q < 1.0 and not sampled_delta):
            return
        # δ at half the true ε: the true δ there exceeds the target δ, so a δ bound that
        # understated it would show.
        at = truth / 2.0
        bound = accountants.compute_delta(event, epsilon=at, accountant=name, memory_budget=memory_budget)
    true_delta = reference_delta_lower(q, sigma, steps, at, interval)
    assert bound >= true_delta - _TOLERANCE, (name, at, bound, true_delta)


# Bytes an accountant with a memory estimate (PLD) may use in the default tier: beyond, its
# declared fallback answers, and that number is the one checked (it is what would be printed).
_DEFAULT_TIER_BYTES = 5e6
_SLOW_TIER_BYTES = 2e8


def _check_headline(q: float, sigma: float, steps: int, delta: float, interval: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bound = dpsgd_claim(sampling_rate=q, noise_multiplier=sigma, num_steps=steps).upper_bound(delta=delta)
    truth = reference_lower(q, sigma, steps, delta, interval)
    event = events.sampled_gaussian_event(sampling_rate=q, noise_multiplier=sigma, num_steps=steps)
    assert list(bound.by_accountant) == [name for name in registered_accountants() if ACCOUNTANTS[name].supports(event)]
    assert bound.epsilon == min(bound.by_accountant.values())
    for name, eps in bound.by_accountant.items():  # every accountant's number, PLD's at full budget
        assert eps >= truth - _TOLERANCE * max(1.0, truth), (name, eps, truth)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "accountant" in metafunc.fixturenames:
        metafunc.parametrize("accountant", registered_accountants())


@pytest.mark.extended
@settings(max_examples=20, deadline=None, derandomize=True)
@given(q=sampling_rates, sigma=st.floats(0.3, 5.0), steps=st.integers(1, 12), delta=deltas)
@example(q=1.0, sigma=2.0, steps=3, delta=1e-5)  # the exact reference, within every built-in budget
def test_accountants_are_never_below_the_true_epsilon(accountant, q, sigma, steps, delta):
    check_accountant(
        accountant, q, sigma, steps, delta, interval=1e-2, memory_budget=_DEFAULT_TIER_BYTES, sampled_delta=False
    )


@pytest.mark.slow
@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    q=sampling_rates, sigma=st.floats(0.3, 8.0), steps=st.one_of(st.integers(1, 20), st.integers(1, 200)), delta=deltas
)
def test_accountants_are_never_below_the_true_epsilon_many(accountant, q, sigma, steps, delta):
    check_accountant(accountant, q, sigma, steps, delta, interval=1e-3, memory_budget=_SLOW_TIER_BYTES)


# The headline runs every accountant, PLD included (~1 s at σ = 1, several at σ = 0.3).
@pytest.mark.extended
@settings(max_examples=3, deadline=None, derandomize=True)
@given(q=sampling_rates, sigma=st.floats(1.0, 5.0), steps=st.integers(1, 5), delta=deltas)
def test_headline_upper_bound_is_never_below_the_true_epsilon(q, sigma, steps, delta):
    _check_headline(q, sigma, steps, delta, interval=1e-2)


@pytest.mark.slow
@settings(max_examples=60, deadline=None, derandomize=True)
@given(q=sampling_rates, sigma=st.floats(0.3, 8.0), steps=st.integers(1, 50), delta=deltas)
def test_headline_upper_bound_is_never_below_the_true_epsilon_many(q, sigma, steps, delta):
    _check_headline(q, sigma, steps, delta, interval=1e-3)
