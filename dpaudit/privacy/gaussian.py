"""Gaussian-mechanism calibrations and exact privacy curves.

Implements three ways of choosing the noise standard deviation σ for a Gaussian mechanism
with L2 sensitivity Δ at a target (ε, δ):

* the classical calibration of Dwork & Roth (2014, Theorem A.1), valid only for ε ≤ 1;
* the analytic Gaussian mechanism of Balle & Wang (2018, Theorem 8), which is exact: the
  mechanism is (ε, δ)-DP *iff* Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ) ≤ δ;
* the extended Gaussian mechanism of Phan et al. (2019, "Heterogeneous Gaussian Mechanism",
  Theorem 2), valid for every ε > 0.

It also exposes the exact δ(ε) curve of a Gaussian mechanism and the μ-GDP ↔ (ε, δ)
conversion (Dong, Roth & Su 2019, Corollary 2.13), which are the ground truth for the
statistical tests of empirical audits.

All functions work in log space where e^ε Φ(·) would otherwise overflow or cancel.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from dpaudit import _validate as v

__all__ = [
    "classical_sigma",
    "analytic_sigma",
    "extended_sigma",
    "gaussian_delta",
    "gaussian_epsilon",
    "gdp_delta",
    "gdp_epsilon",
    "GAUSSIAN_CALIBRATIONS",
    "calibrate_gaussian",
]

GAUSSIAN_CALIBRATIONS = ("classical", "analytic", "extended")

# Theorem 2 of Phan et al. needs s = ln(sqrt(2/pi)/delta) large enough for its tail bound;
# the reference (docs/privacy/accounting.md §5) states the condition as delta <= 0.484.
_EGM_MAX_DELTA = 0.484


def _log_diff_exp(a: float, b: float) -> float:
    """ln(e^a − e^b) for a ≥ b; −inf when equal."""
    if b == -math.inf or a - b > 700:
        return a
    if a <= b:
        return -math.inf
    return a + math.log(-math.expm1(b - a))


def _delta_for(mu: float, epsilon: float) -> float:
    """δ(ε) of the Gaussian mechanism with Δ/σ = mu (equivalently μ-GDP).

    δ(ε) = Φ(μ/2 − ε/μ) − e^ε Φ(−μ/2 − ε/μ); μ = 0 (no signal) gives 0, μ = ∞ (no noise) 1.
    """
    if mu == 0.0:
        return 0.0
    if math.isinf(mu):
        return 1.0 if math.isfinite(epsilon) else 0.0
    a = special.log_ndtr(mu / 2.0 - epsilon / mu)
    b = epsilon + special.log_ndtr(-mu / 2.0 - epsilon / mu)
    out = _log_diff_exp(float(a), float(b))
    return 0.0 if out == -math.inf else math.exp(out)


def gaussian_delta(*, epsilon: float, sigma: float, sensitivity: float = 1.0) -> float:
    """Exact δ at ``epsilon`` of the Gaussian mechanism N(0, σ²) with L2 sensitivity Δ.

    Balle & Wang (2018), Theorem 8: the tight privacy curve of the Gaussian mechanism.

    Args:
        epsilon: ε ≥ 0 at which to evaluate the curve.
        sigma: noise standard deviation σ > 0.
        sensitivity: L2 sensitivity Δ > 0.

    Returns:
        The smallest δ for which the mechanism is (ε, δ)-DP.
    """
    epsilon = v.non_negative("epsilon", epsilon)
    sigma = v.positive("sigma", sigma)
    sensitivity = v.positive("sensitivity", sensitivity)
    return _delta_for(_ratio(sensitivity, sigma), epsilon)


def gaussian_epsilon(*, delta: float, sigma: float, sensitivity: float = 1.0) -> float:
    """Exact ε at ``delta`` of the Gaussian mechanism (inverse of :func:`gaussian_delta`).

    Returns 0 when the mechanism is already (0, δ)-DP.
    """
    delta = v.open_unit("delta", delta)
    sigma = v.positive("sigma", sigma)
    sensitivity = v.positive("sensitivity", sensitivity)
    return _epsilon_for(_ratio(sensitivity, sigma), delta)


def _ratio(sensitivity: float, sigma: float) -> float:
    """Δ/σ without spurious overflow/underflow errors (inf and 0 are handled by :func:`_delta_for`)."""
    with np.errstate(all="ignore"):
        return float(np.float64(sensitivity) / np.float64(sigma))


def _epsilon_for(mu: float, delta: float) -> float:
    """ε with δ(ε) ≤ ``delta`` for Δ/σ = ``mu``; ∞ when that ε exceeds the float range.

    ε grows like μ²/2, so for μ beyond ~1e154 (σ below ~1e-154 Δ) no finite double bounds it.
    """
    if _delta_for(mu, 0.0) <= delta:
        return 0.0
    hi = 1.0
    while _delta_for(mu, hi) > delta:
        hi *= 2.0
        if hi > 1e308:  # doubling once more gives inf, where δ(ε) is NaN: no finite ε
            return math.inf
    try:
        eps = optimize.brentq(lambda e: _delta_for(mu, e) - delta, 0.0, hi, xtol=1e-13, rtol=1e-14)
    except (ValueError, RuntimeError) as exc:  # not expected: the bracket is checked above
        raise v.invalid(
            "delta", f"could not solve for epsilon at delta={delta!r}, sensitivity/sigma={mu!r}: {exc}"
        ) from None
    # Never report an ε whose δ exceeds the target: step up past the root if needed. The step
    # doubles, so this ends in at most ~1100 evaluations even where δ(ε) is flat at the
    # rounding level (target δ within a few ulps of δ(0), root ε ~ 1e-16); a fixed relative
    # step (as before) could need ~10^11 iterations there, i.e. hang.
    step = max(eps * 1e-16, 5e-324)
    while _delta_for(mu, eps) > delta:
        eps += step
        step *= 2.0
    return eps


def gdp_delta(*, epsilon: float, mu: float) -> float:
    """δ(ε) implied by μ-GDP (Dong, Roth & Su 2019, Corollary 2.13)."""
    epsilon = v.non_negative("epsilon", epsilon)
    mu = v.positive("mu", mu)
    return _delta_for(mu, epsilon)


def gdp_epsilon(*, mu: float, delta: float) -> float:
    """Smallest ε such that μ-GDP implies (ε, δ)-DP."""
    mu = v.positive("mu", mu)
    delta = v.open_unit("delta", delta)
    return _epsilon_for(mu, delta)


def classical_sigma(*, epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Classical Gaussian calibration σ = Δ √(2 ln(1.25/δ)) / ε.

    Dwork & Roth (2014), Theorem A.1. The proof only holds for ε < 1; PixelDP (Lecuyer et
    al. 2019) uses it up to ε = 1, so ε ∈ (0, 1] is accepted and larger ε is refused.

    Raises:
        ValueError: if ε > 1, where the formula no longer guarantees DP.
    """
    epsilon = v.positive("epsilon", epsilon)
    delta = v.open_unit("delta", delta)
    sensitivity = v.positive("sensitivity", sensitivity)
    if epsilon > 1.0:
        raise v.invalid(
            "epsilon",
            "epsilon must be <= 1 for the classical Gaussian calibration, got "
            f"{epsilon!r}; use the 'analytic' or 'extended' calibration",
        )
    return _finite_sigma(
        sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon, "classical", epsilon, delta, sensitivity
    )


def analytic_sigma(*, epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest σ making N(0, σ²) with sensitivity Δ (ε, δ)-DP (analytic Gaussian mechanism).

    Balle & Wang (2018), Theorem 8, solved for equality with a scalar root finder. The
    returned σ always satisfies the condition (δ(ε; σ) ≤ δ): it never under-noises.
    """
    epsilon = v.positive("epsilon", epsilon)
    delta = v.open_unit("delta", delta)
    sensitivity = v.positive("sensitivity", sensitivity)

    def excess(log_sigma: float) -> float:
        return math.log(max(_delta_for(math.exp(-log_sigma), epsilon), 1e-320)) - math.log(delta)

    # ln σ/Δ lies in [-360, 700] for every valid (ε, δ): σ/Δ ≈ 1/√(2ε) ≥ 1e-155 as ε ≤ 1.8e308,
    # and ≈ 1/(δ√(2π)) ≤ 1e300 as δ(0) ≈ 1/(σ√(2π)) must fall below δ ≥ 5e-324.
    lo, hi = -10.0, 10.0
    while excess(lo) < 0 and lo > -700.0:
        lo -= 10.0
    while excess(hi) > 0 and hi < 700.0:
        hi += 10.0
    try:
        log_sigma = optimize.brentq(excess, lo, hi, xtol=1e-14, rtol=1e-15)
    except (ValueError, RuntimeError) as exc:
        raise v.invalid(
            "epsilon",
            f"could not solve the analytic Gaussian calibration for epsilon={epsilon!r}, delta={delta!r}: {exc}",
        ) from None
    # Check the guarantee on the scaled σ, exactly as gaussian_delta evaluates it: checking at
    # Δ = 1 and then scaling lets rounding of Δ/(Δσ) ≠ 1/σ overshoot δ by an ulp.
    sigma = _finite_sigma(sensitivity * math.exp(log_sigma), "analytic", epsilon, delta, sensitivity)
    while _delta_for(_ratio(sensitivity, sigma), epsilon) > delta:
        sigma = _finite_sigma(sigma * (1 + 1e-13), "analytic", epsilon, delta, sensitivity)
    return sigma


def _finite_sigma(sigma: float, method: str, epsilon: float, delta: float, sensitivity: float) -> float:
    """``sigma`` if it is a positive finite double; else a one-line error naming the inputs."""
    if not (0.0 < sigma < math.inf):
        raise v.invalid(
            "epsilon",
            f"the {method} Gaussian sigma for epsilon={epsilon!r}, delta={delta!r}, "
            f"sensitivity={sensitivity!r} is {sigma!r}, outside the floating-point "
            "range; rescale the sensitivity",
        )
    return sigma


def extended_sigma(*, epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Extended Gaussian mechanism σ = Δ(√s + √(s+ε))/(√2 ε), s = ln(√(2/π)/δ).

    Phan et al. (2019), Theorem 2: valid for every ε > 0 (unlike the classical formula).
    The heterogeneous mechanism (Theorem 3) uses the same σ with noise σ²r_k per component.
    """
    epsilon = v.positive("epsilon", epsilon)
    delta = v.open_unit("delta", delta)
    sensitivity = v.positive("sensitivity", sensitivity)
    if delta > _EGM_MAX_DELTA:
        raise v.invalid(
            "delta", f"delta must be <= {_EGM_MAX_DELTA} for the extended Gaussian mechanism, got {delta!r}"
        )
    s = math.log(math.sqrt(2.0 / math.pi) / delta)
    return _finite_sigma(
        sensitivity * (math.sqrt(s) + math.sqrt(s + epsilon)) / (math.sqrt(2.0) * epsilon),
        "extended",
        epsilon,
        delta,
        sensitivity,
    )


def calibrate_gaussian(*, epsilon: float, delta: float, sensitivity: float = 1.0, method: str = "analytic") -> float:
    """σ for a Gaussian mechanism under the named calibration (see module docstring)."""
    method = v.choice("method", method, GAUSSIAN_CALIBRATIONS)
    fn = {"classical": classical_sigma, "analytic": analytic_sigma, "extended": extended_sigma}[method]
    return fn(epsilon=epsilon, delta=delta, sensitivity=sensitivity)
