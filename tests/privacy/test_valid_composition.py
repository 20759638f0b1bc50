"""Issue 29: ``naive`` and ``strong`` printed ε below the true ε, and so did the headline ε_UB.

They charged each Poisson-sampled Gaussian step (q·ε0, q·δ_g) with the classical
ε0 = √(2 ln(1.25/δ_g))/σ: the first-order q·ε0 is below the amplification ln(1 + q(e^ε0 − 1)),
and the classical ε0 holds for ε0 ≤ 1 only. Every accountant and the headline
``PrivacyClaim.upper_bound`` are checked here against an independent lower bound on the true ε:
``dp_accounting``'s *optimistic* PLD (a lower bound at any discretisation), or, for un-sampled
Gaussian steps, the exact Gaussian-DP curve solved here with SciPy.
"""

from __future__ import annotations

import functools
import logging
import math

import pytest
from dp_accounting import dp_event as dpe
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import optimize, stats

from dpaudit.privacy import accountants, calibration, events
from dpaudit.privacy.audit_bounds import gaussian_step_claim
from dpaudit.privacy.claims import DPClaim, dpsgd_claim
from tests.privacy.accounting_reference import one_step_epsilon

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*optimal RDP order.*:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:Optimal order is the.*:UserWarning"),
]
logging.getLogger("absl").setLevel(logging.ERROR)

DELTA = 1e-5
# (q, σ, T) of the issue; exact ε at δ = 1e-5: 5.52, 6.28, 8.34
SAMPLED = [(0.05, 0.5, 1), (0.2, 0.7, 3), (0.1, 0.6, 10)]
UNSAMPLED = [0.5, 0.3]  # one Gaussian step: the white-box per-step claim


def _gdp_epsilon(mu: float, delta: float) -> float:
    """ε of μ-GDP at δ: δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth & Su 2019, Cor. 2.13)."""

    def excess(e: float) -> float:
        return stats.norm.cdf(-e / mu + mu / 2) - math.exp(e) * stats.norm.cdf(-e / mu - mu / 2) - delta

    return optimize.brentq(excess, 0.0, 500.0, xtol=1e-12)


@functools.cache
def reference_lower(q: float, sigma: float, steps: int, delta: float) -> float:
    """A lower bound on the true ε: exact GDP (q = 1) or dp_accounting's optimistic PLD."""
    if q == 1.0:
        return _gdp_epsilon(math.sqrt(steps) / sigma, delta)
    pld = pld_lib.from_gaussian_mechanism(
        sigma, value_discretization_interval=1e-3, sampling_prob=q, pessimistic_estimate=False, use_connect_dots=False
    )
    if steps > 1:
        pld = pld.self_compose(steps)
    return float(pld.get_epsilon_for_delta(delta))


@pytest.mark.extended
@pytest.mark.parametrize(("q", "sigma", "steps"), SAMPLED + [(1.0, s, 1) for s in UNSAMPLED])
@pytest.mark.parametrize("accountant", ["naive", "strong", "moments", "rdp"])
def test_no_accountant_is_below_the_true_epsilon(accountant, q, sigma, steps):
    # was naive 0.418 / 4.06 / 8.07 / 9.69 / 16.15 against 5.52 / 6.28 / 8.34 / 9.997 / 19.13
    # and strong 2.38 at q = 0.05, σ = 0.5, T = 1
    got = accountants.compute_epsilon(
        events.sampled_gaussian_event(sampling_rate=q, noise_multiplier=sigma, num_steps=steps),
        delta=DELTA,
        accountant=accountant,
    )
    assert got >= reference_lower(q, sigma, steps, DELTA) - 1e-9


@pytest.mark.extended
@pytest.mark.parametrize(
    "claim_args",
    [
        pytest.param((0.05, 0.5, 1), id="sampled-q0.05-s0.5-T1"),
        pytest.param((1.0, 0.5, 1), id="unsampled-s0.5"),
        pytest.param((0.2, 0.7, 3), id="sampled-q0.2-s0.7-T3", marks=pytest.mark.slow),
        pytest.param((0.1, 0.6, 10), id="sampled-q0.1-s0.6-T10", marks=pytest.mark.slow),
        pytest.param((1.0, 0.3, 1), id="unsampled-s0.3", marks=pytest.mark.slow),
    ],
)
def test_headline_upper_bound_is_not_below_the_true_epsilon(claim_args):
    q, sigma, steps = claim_args
    # the white-box per-step claim is built by gaussian_step_claim (an un-sampled GaussianDpEvent)
    claim = (
        gaussian_step_claim(noise_multiplier=sigma)
        if q == 1.0
        else dpsgd_claim(sampling_rate=q, noise_multiplier=sigma, num_steps=steps)
    )
    bound = claim.upper_bound(delta=DELTA)
    truth = reference_lower(q, sigma, steps, DELTA)
    assert bound.epsilon >= truth - 1e-9  # was naive's 0.418 (truth 5.52) and 9.69 (truth 9.997)
    assert all(e >= truth - 1e-9 for e in bound.by_accountant.values()), bound.by_accountant
    # the bound is also tight here: amplification by Poisson sampling is exact for one step
    assert bound.epsilon <= truth + 5e-3


def test_naive_and_strong_numbers_of_issue_29():
    # One step: basic composition is the exact amplified Gaussian (5.5169), against its closed form.
    event = events.sampled_gaussian_event(sampling_rate=0.05, noise_multiplier=0.5, num_steps=1)
    assert accountants.compute_epsilon(event, delta=DELTA, accountant="naive") == pytest.approx(
        one_step_epsilon(0.05, 0.5, DELTA), rel=1e-9
    )
    assert accountants.compute_epsilon(dpe.GaussianDpEvent(0.5), delta=DELTA, accountant="naive") == pytest.approx(
        _gdp_epsilon(2.0, DELTA), rel=1e-9
    )
    assert accountants.compute_epsilon(dpe.GaussianDpEvent(0.3), delta=DELTA, accountant="naive") == pytest.approx(
        _gdp_epsilon(1 / 0.3, DELTA), rel=1e-9
    )


# --------------------------------------------------------------------------------------------
# Declining: no number where the formula does not apply
# --------------------------------------------------------------------------------------------

_LAPLACE = dpe.ComposedDpEvent(
    [events.sampled_gaussian_event(sampling_rate=0.01, noise_multiplier=2.0, num_steps=10), dpe.LaplaceDpEvent(1.0)]
)


@pytest.mark.parametrize("accountant", ["naive", "strong"])
def test_composition_declines_a_non_gaussian_event(accountant):
    res = accountants.compute_epsilon_detailed(_LAPLACE, delta=DELTA, accountant=accountant)
    assert res.declined and res.epsilon == math.inf and "Gaussian" in res.note
    with pytest.raises(accountants.AccountantDeclined, match=f"{accountant}.*declines.*Gaussian"):
        accountants.compute_epsilon(_LAPLACE, delta=DELTA, accountant=accountant)
    res = accountants.compute_epsilon_detailed(
        events.sampled_gaussian_event(sampling_rate=0.01, noise_multiplier=2.0, num_steps=10),
        delta=DELTA,
        accountant=accountant,
        neighbouring="replace_one",
    )
    assert res.declined and "replace_one" in res.note


def test_headline_picks_among_accountants_that_did_not_decline():
    bound = DPClaim(event=_LAPLACE).upper_bound(delta=DELTA)
    assert set(bound.by_accountant) == {"moments", "rdp", "pld"}
    assert bound.epsilon == min(bound.by_accountant.values()) and math.isfinite(bound.epsilon)


# --------------------------------------------------------------------------------------------
# Calibration under naive / strong (Jayaraman & Evans' NC and AC columns)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("accountant", ["naive", "strong"])
def test_calibration_under_composition_is_valid_and_never_overshoots(accountant):
    q, steps, target = 0.05, 20, 10.0
    sigma = calibration.calibrate_noise_multiplier(
        target_epsilon=target, delta=DELTA, sampling_rate=q, num_steps=steps, accountant=accountant
    )
    event = events.sampled_gaussian_event(sampling_rate=q, noise_multiplier=sigma, num_steps=steps)
    assert target * 0.99 < accountants.compute_epsilon(event, delta=DELTA, accountant=accountant) <= target
    assert reference_lower(q, sigma, steps, DELTA) <= target  # the σ found really gives ε ≤ target
