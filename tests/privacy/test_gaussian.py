"""Tests for dpaudit.privacy.gaussian: golden numbers (docs/privacy/accounting.md §5, §6), the exact privacy curve
against independent evaluations, calibration properties and bad-input contracts."""

from __future__ import annotations

import math

import pytest
from dp_accounting.pld import privacy_loss_mechanism
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from scipy import stats

from dpaudit.privacy import gaussian as g
from tests.privacy import accounting_reference as reference

PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

epsilons = st.floats(0.05, 20.0)
small_epsilons = st.floats(0.05, 1.0)
deltas = st.floats(1e-10, 0.3)
sigmas = st.floats(0.05, 50.0)
sensitivities = st.floats(0.01, 100.0)


# --------------------------------------------------------------------------------------------
# Golden numbers
# --------------------------------------------------------------------------------------------

AGM_TABLE = [
    (0.1, 1e-5, 30.749566),
    (0.5, 1e-5, 7.031827),
    (1.0, 1e-5, 3.730632),
    (2.0, 1e-5, 1.993812),
    (4.0, 1e-5, 1.081162),
    (8.0, 1e-5, 0.600229),
    (1.0, 1e-6, 4.224679),
    (1.0, 0.05, 1.332778),
    (4.0, 0.05, 0.545137),
    (0.5, 0.3, 0.865869),
]


@pytest.mark.parametrize(("epsilon", "delta", "expected"), AGM_TABLE)
def test_analytic_sigma_table(epsilon, delta, expected):
    # The table (docs/privacy/accounting.md) is the exact Gaussian profile's root, found here
    # independently of the module; the module reproduces it to 6 decimals.
    assert round(reference.analytic_sigma(epsilon, delta), 6) == expected
    assert round(g.analytic_sigma(epsilon=epsilon, delta=delta), 6) == expected


@pytest.mark.parametrize(("epsilon", "delta", "expected"), AGM_TABLE)
def test_analytic_sigma_scales_with_sensitivity(epsilon, delta, expected):
    assert g.analytic_sigma(epsilon=epsilon, delta=delta, sensitivity=2.5) == pytest.approx(2.5 * expected, abs=2e-6)


@pytest.mark.parametrize(
    ("epsilon", "delta", "expected"),
    [(1.0, 1e-5, 4.854241), (4.0, 1e-5, 1.285080), (1.0, 0.05, 2.549790), (4.0, 0.05, 0.754169)],
)
def test_extended_sigma_vectors(epsilon, delta, expected):
    assert round(g.extended_sigma(epsilon=epsilon, delta=delta), 6) == expected


@pytest.mark.parametrize(("mu", "expected"), [(0.5, 1.99), (1.0, 4.38), (2.0, 10.00)])
def test_gdp_epsilon_vectors(mu, expected):
    assert round(g.gdp_epsilon(mu=mu, delta=1e-5), 2) == expected


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-5), (0.5, 1e-6), (0.1, 0.01)])
def test_classical_sigma_formula(epsilon, delta):
    expected = math.sqrt(2 * math.log(1.25 / delta)) / epsilon
    assert g.classical_sigma(epsilon=epsilon, delta=delta) == pytest.approx(expected, rel=1e-15)
    assert g.classical_sigma(epsilon=epsilon, delta=delta, sensitivity=3.0) == pytest.approx(3 * expected, rel=1e-15)


# --------------------------------------------------------------------------------------------
# The exact privacy curve δ(ε)
# --------------------------------------------------------------------------------------------


@PROPS
@given(epsilon=st.floats(0.0, 10.0), sigma=st.floats(0.2, 20.0), sensitivity=sensitivities)
def test_gaussian_delta_matches_textbook_formula(epsilon, sigma, sensitivity):
    """Balle-Wang Thm 8 evaluated naively with scipy where it does not cancel catastrophically."""
    a = sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    b = -sensitivity / (2 * sigma) - epsilon * sigma / sensitivity
    naive = stats.norm.cdf(a) - math.exp(epsilon) * stats.norm.cdf(b)
    assume(naive > 1e-6)
    got = g.gaussian_delta(epsilon=epsilon, sigma=sigma, sensitivity=sensitivity)
    assert got == pytest.approx(naive, rel=1e-7, abs=1e-14)


@PROPS
@given(epsilon=st.floats(0.0, 30.0), sigma=st.floats(0.05, 20.0))
def test_gaussian_delta_matches_dp_accounting(epsilon, sigma):
    reference = privacy_loss_mechanism.GaussianPrivacyLoss(standard_deviation=sigma, sensitivity=1.0)
    expected = reference.get_delta_for_epsilon(epsilon)
    got = g.gaussian_delta(epsilon=epsilon, sigma=sigma)
    assert got == pytest.approx(expected, rel=1e-6, abs=1e-15)


@pytest.mark.parametrize("sigma", [0.1, 0.5, 1.0, 3.0, 30.0])
def test_gaussian_delta_at_zero_is_total_variation(sigma):
    mu = 1.0 / sigma
    assert g.gaussian_delta(epsilon=0.0, sigma=sigma) == pytest.approx(2 * stats.norm.cdf(mu / 2) - 1, rel=1e-10)


@PROPS
@given(e1=st.floats(0.0, 30.0), e2=st.floats(0.0, 30.0), sigma=sigmas)
def test_gaussian_delta_is_a_decreasing_probability(e1, e2, sigma):
    lo, hi = sorted((e1, e2))
    d_lo = g.gaussian_delta(epsilon=lo, sigma=sigma)
    d_hi = g.gaussian_delta(epsilon=hi, sigma=sigma)
    assert 0.0 <= d_hi <= d_lo <= 1.0


@PROPS
@given(epsilon=st.floats(0.0, 20.0), sigma=sigmas, sensitivity=sensitivities)
def test_gaussian_epsilon_inverts_gaussian_delta(epsilon, sigma, sensitivity):
    delta = g.gaussian_delta(epsilon=epsilon, sigma=sigma, sensitivity=sensitivity)
    # Near δ = 1 the curve is flat (|dδ/dε| ~ 1e-11 and less): ε is ill-conditioned there.
    assume(1e-12 < delta < 0.5)
    back = g.gaussian_epsilon(delta=delta, sigma=sigma, sensitivity=sensitivity)
    assert g.gaussian_delta(epsilon=back, sigma=sigma, sensitivity=sensitivity) <= delta
    assert back == pytest.approx(epsilon, rel=1e-6, abs=1e-6)


@PROPS
@given(delta=deltas, sigma=sigmas)
def test_gaussian_epsilon_is_tight(delta, sigma):
    eps = g.gaussian_epsilon(delta=delta, sigma=sigma)
    assert eps >= 0.0
    assert g.gaussian_delta(epsilon=eps, sigma=sigma) <= delta
    if eps > 0:  # the next ε below would violate δ
        assert g.gaussian_delta(epsilon=max(eps * (1 - 1e-6) - 1e-9, 0.0), sigma=sigma) > delta


@pytest.mark.parametrize("tiny", [1e-17, 1e-16, 1e-15, 1e-12])
@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0, 50.0])
def test_gaussian_epsilon_terminates_next_to_delta_at_zero(tiny, sigma):
    """Regression: a target δ a few ulps below δ(0) (true ε ~ 1e-16) used to hang."""
    delta = g.gaussian_delta(epsilon=tiny, sigma=sigma)
    eps = g.gaussian_epsilon(delta=delta, sigma=sigma)
    assert g.gaussian_delta(epsilon=eps, sigma=sigma) <= delta
    assert eps <= 1e-9


def test_analytic_sigma_guarantee_holds_after_scaling_by_sensitivity():
    """Regression: σ was checked at Δ = 1 and then scaled; Δ/(Δσ) rounding overshot δ by an ulp."""
    sigma = g.analytic_sigma(epsilon=0.05, delta=0.0625, sensitivity=7.0)
    assert g.gaussian_delta(epsilon=0.05, sigma=sigma, sensitivity=7.0) <= 0.0625


def test_gaussian_epsilon_is_zero_when_already_zero_dp():
    # σ = 100: δ(0) = 2Φ(1/200) − 1 ≈ 0.004 < 0.01.
    assert g.gaussian_epsilon(delta=0.01, sigma=100.0) == 0.0


@PROPS
@given(epsilon=st.floats(0.0, 20.0), mu=st.floats(0.02, 20.0))
def test_gdp_delta_is_gaussian_delta_with_sigma_one_over_mu(epsilon, mu):
    assert g.gdp_delta(epsilon=epsilon, mu=mu) == pytest.approx(
        g.gaussian_delta(epsilon=epsilon, sigma=1.0 / mu), rel=1e-9, abs=1e-300
    )
    # Only the ratio Δ/σ matters.
    assert g.gdp_delta(epsilon=epsilon, mu=mu) == pytest.approx(
        g.gaussian_delta(epsilon=epsilon, sigma=3.0, sensitivity=3.0 * mu), rel=1e-9, abs=1e-300
    )


@PROPS
@given(mu=st.floats(0.02, 20.0), delta=deltas)
def test_gdp_epsilon_and_gdp_delta_are_consistent(mu, delta):
    eps = g.gdp_epsilon(mu=mu, delta=delta)
    assert eps == pytest.approx(g.gaussian_epsilon(delta=delta, sigma=1.0 / mu), rel=1e-9, abs=1e-12)
    assert g.gdp_delta(epsilon=eps, mu=mu) <= delta
    if eps > 0:
        assert g.gdp_delta(epsilon=eps, mu=mu) == pytest.approx(delta, rel=1e-5)


# --------------------------------------------------------------------------------------------
# Calibrations
# --------------------------------------------------------------------------------------------


@PROPS
@given(epsilon=epsilons, delta=deltas, sensitivity=st.sampled_from([1.0, 0.1, 7.0]))
def test_analytic_sigma_is_private_and_minimal(epsilon, delta, sensitivity):
    sigma = g.analytic_sigma(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
    assert g.gaussian_delta(epsilon=epsilon, sigma=sigma, sensitivity=sensitivity) <= delta
    # Theorem 8 is an iff: a hair less noise is no longer (ε, δ)-DP.
    assert g.gaussian_delta(epsilon=epsilon, sigma=sigma * (1 - 1e-7), sensitivity=sensitivity) > delta


@PROPS
@given(epsilon=small_epsilons, delta=deltas)
def test_classical_sigma_is_at_least_analytic(epsilon, delta):
    classical = g.classical_sigma(epsilon=epsilon, delta=delta)
    assert classical >= g.analytic_sigma(epsilon=epsilon, delta=delta)
    assert g.gaussian_delta(epsilon=epsilon, sigma=classical) <= delta


@PROPS
@given(epsilon=epsilons, delta=deltas)
def test_extended_sigma_is_at_least_analytic(epsilon, delta):
    """EGM is valid for every ε (so it satisfies the exact condition) and looser than AGM."""
    extended = g.extended_sigma(epsilon=epsilon, delta=delta)
    assert extended >= g.analytic_sigma(epsilon=epsilon, delta=delta)
    assert g.gaussian_delta(epsilon=epsilon, sigma=extended) <= delta


def test_classical_is_not_private_at_large_epsilon():
    # Why classical_sigma refuses ε > 1 (docs/privacy/accounting.md §5: at ε = 16 it is no longer DP).
    sigma = math.sqrt(2 * math.log(1.25 / 1e-5)) / 16
    assert g.gaussian_delta(epsilon=16, sigma=sigma) > 1e-5


@pytest.mark.parametrize("epsilon", [1.0000001, 1.5, 16.0])
def test_classical_refuses_epsilon_above_one(epsilon):
    with pytest.raises(ValueError) as info:
        g.classical_sigma(epsilon=epsilon, delta=1e-5)
    assert "epsilon" in str(info.value) and repr(epsilon) in str(info.value)
    with pytest.raises(ValueError, match="epsilon"):
        g.calibrate_gaussian(epsilon=epsilon, delta=1e-5, method="classical")


def test_classical_accepts_epsilon_one():
    assert g.classical_sigma(epsilon=1.0, delta=1e-5) > 0


@pytest.mark.parametrize("delta", [0.4841, 0.5, 0.9])
def test_extended_refuses_large_delta(delta):
    with pytest.raises(ValueError) as info:
        g.extended_sigma(epsilon=1.0, delta=delta)
    assert "delta" in str(info.value) and repr(delta) in str(info.value)


@pytest.mark.parametrize(
    ("method", "fn"),
    [("classical", g.classical_sigma), ("analytic", g.analytic_sigma), ("extended", g.extended_sigma)],
)
@pytest.mark.parametrize(("epsilon", "delta", "sensitivity"), [(0.5, 1e-5, 1.0), (1.0, 0.01, 2.5)])
def test_calibrate_gaussian_dispatch(method, fn, epsilon, delta, sensitivity):
    assert g.calibrate_gaussian(epsilon=epsilon, delta=delta, sensitivity=sensitivity, method=method) == fn(
        epsilon=epsilon, delta=delta, sensitivity=sensitivity
    )


def test_calibrate_gaussian_default_is_analytic():
    assert g.calibrate_gaussian(epsilon=2.0, delta=1e-5) == g.analytic_sigma(epsilon=2.0, delta=1e-5)
    assert g.GAUSSIAN_CALIBRATIONS == ("classical", "analytic", "extended")


# --------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------

NAN, INF = math.nan, math.inf
OPEN_UNIT = [(0.0, ValueError), (1.0, ValueError), (-1e-3, ValueError), (2.0, ValueError), (NAN, ValueError),
             (INF, ValueError), (True, TypeError), ("1e-5", TypeError), (None, TypeError)]  # fmt: skip
POSITIVE = [(0.0, ValueError), (-1.0, ValueError), (NAN, ValueError), (INF, ValueError), (-INF, ValueError),
            (True, TypeError), ("1", TypeError), (None, TypeError)]  # fmt: skip
NON_NEGATIVE = [(-1e-9, ValueError), (NAN, ValueError), (INF, ValueError), (False, TypeError), ("0", TypeError),
                (None, TypeError)]  # fmt: skip
METHOD = [("gauss", ValueError), ("Analytic", ValueError), ("", ValueError), (None, ValueError), (1, ValueError)]

_CALIB = {"epsilon": POSITIVE, "delta": OPEN_UNIT, "sensitivity": POSITIVE}
PUBLIC = {
    "gaussian_delta": (g.gaussian_delta, {"epsilon": 1.0, "sigma": 1.0, "sensitivity": 1.0},
                       {"epsilon": NON_NEGATIVE, "sigma": POSITIVE, "sensitivity": POSITIVE}),
    "gaussian_epsilon": (g.gaussian_epsilon, {"delta": 1e-5, "sigma": 1.0, "sensitivity": 1.0},
                         {"delta": OPEN_UNIT, "sigma": POSITIVE, "sensitivity": POSITIVE}),
    "gdp_delta": (g.gdp_delta, {"epsilon": 1.0, "mu": 1.0}, {"epsilon": NON_NEGATIVE, "mu": POSITIVE}),
    "gdp_epsilon": (g.gdp_epsilon, {"mu": 1.0, "delta": 1e-5}, {"mu": POSITIVE, "delta": OPEN_UNIT}),
    "classical_sigma": (g.classical_sigma, {"epsilon": 0.5, "delta": 1e-5, "sensitivity": 1.0}, _CALIB),
    "analytic_sigma": (g.analytic_sigma, {"epsilon": 0.5, "delta": 1e-5, "sensitivity": 1.0}, _CALIB),
    "extended_sigma": (g.extended_sigma, {"epsilon": 0.5, "delta": 1e-5, "sensitivity": 1.0}, _CALIB),
    "calibrate_gaussian": (g.calibrate_gaussian, {"epsilon": 0.5, "delta": 1e-5, "sensitivity": 1.0,
                                                  "method": "analytic"}, {**_CALIB, "method": METHOD}),
}  # fmt: skip
BAD_CASES = [
    pytest.param(fname, arg, bad, exc, id=f"{fname}-{arg}-{bad!r}")
    for fname, (_, _, table) in PUBLIC.items()
    for arg, bads in table.items()
    for bad, exc in bads
]


@pytest.mark.parametrize(("fname", "arg", "bad", "exc"), BAD_CASES)
def test_bad_input_is_rejected_with_name_and_value(fname, arg, bad, exc):
    fn, good, _ = PUBLIC[fname]
    with pytest.raises(exc) as info:
        fn(**{**good, arg: bad})
    message = str(info.value)
    assert arg in message
    assert repr(bad) in message


@pytest.mark.parametrize("method", ["classical", "analytic", "extended"])
@pytest.mark.parametrize(("arg", "bad", "exc"), [("epsilon", NAN, ValueError), ("delta", 1.0, ValueError),
                                                 ("sensitivity", "2", TypeError)])  # fmt: skip
def test_calibrate_gaussian_validates_for_every_method(method, arg, bad, exc):
    kwargs = {"epsilon": 0.5, "delta": 1e-5, "sensitivity": 1.0, "method": method, arg: bad}
    with pytest.raises(exc) as info:
        g.calibrate_gaussian(**kwargs)
    assert arg in str(info.value) and repr(bad) in str(info.value)


@pytest.mark.parametrize("fname", list(PUBLIC))
def test_good_inputs_of_bad_input_table_work(fname):
    fn, good, _ = PUBLIC[fname]
    assert math.isfinite(fn(**good))


# --------------------------------------------------------------------------------------------
# Issue 11: extreme values (findings 6 and 9)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [1e-300, 1e-160])
def test_gaussian_epsilon_without_representable_answer_is_inf(sigma):
    # was "The function value at x=inf is NaN; solver cannot continue." (ε ≈ 1/(2σ²) > 1.8e308)
    assert g.gaussian_epsilon(delta=1e-5, sigma=sigma) == math.inf
    eps = g.gaussian_epsilon(delta=1e-5, sigma=1e-150)  # huge, but still a double
    assert 4e299 < eps < 6e299 and g.gaussian_delta(epsilon=eps, sigma=1e-150) <= 1e-5


def test_gaussian_delta_at_extreme_ratios():
    assert g.gaussian_delta(epsilon=1.0, sigma=1e-300, sensitivity=1e300) == 1.0  # Δ/σ overflows: no noise
    assert g.gaussian_delta(epsilon=1.0, sigma=1e300, sensitivity=1e-300) == 0.0  # Δ/σ underflows: no signal
    assert g.gaussian_epsilon(delta=1e-5, sigma=1e300, sensitivity=1e-300) == 0.0
    sigma = g.analytic_sigma(epsilon=1e300, delta=1e-5)  # a huge ε needs a tiny, still positive, σ
    assert 0 < sigma < 1e-149 and g.gaussian_delta(epsilon=1e300, sigma=sigma) <= 1e-5


@pytest.mark.parametrize("method", ["classical", "analytic", "extended"])
def test_sigma_outside_the_float_range_is_a_one_line_error_naming_the_inputs(method):
    with pytest.raises(ValueError) as info:
        g.calibrate_gaussian(epsilon=1e-3, delta=1e-5, sensitivity=1e308, method=method)
    message = str(info.value)
    assert "sensitivity=1e+308" in message and "epsilon=0.001" in message and "\n" not in message


def test_analytic_sigma_with_denormal_delta_is_a_clear_error():
    with pytest.raises(ValueError, match="delta=5e-324"):
        g.analytic_sigma(epsilon=1e-300, delta=5e-324)
