"""The multiplier c(ε, δ) of a Gaussian calibration, σ = c·Δ, for the certificates (torch-free).

``classical``: c = √(2 ln(1.25/δ))/ε, DP for ε ≤ 1 only (Dwork & Roth 2014, Theorem A.1), as
PixelDP calibrates (Lecuyer et al. 2019); ``extended``: the heterogeneous Gaussian mechanism's
multiplier for ε > 0 unbounded (Phan et al. 2019, Theorems 2–3); ``analytic``: the exact
multiplier (Balle & Wang 2018, Theorem 8). Vectorised over (ε, δ) grids.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special, stats

from dpaudit import _validate as v
from dpaudit.privacy.gaussian import calibrate_gaussian

__all__ = ["CERTIFICATION_MECHANISMS", "EGM_MAX_DELTA", "noise_multiplier"]


#: Calibrations whose multiplier c(ε, δ) (σ = c·Δ) a noise layer may have used.
CERTIFICATION_MECHANISMS = ("classical", "analytic", "extended")
#: Theorem 2 of Phan et al. needs δ ≤ 0.484 (docs/privacy/accounting.md §5); mirrors dpaudit.privacy.gaussian.
EGM_MAX_DELTA = 0.484


# Noise multipliers
def noise_multiplier(mechanism: str, *, epsilon: float, delta: float) -> float:
    """The multiplier c(ε, δ) of a Gaussian calibration: σ = c·Δ.

    Args:
        mechanism: one of :data:`CERTIFICATION_MECHANISMS`.
        epsilon: ε > 0 (≤ 1 for ``"classical"``).
        delta: δ in (0, 1) (≤ 0.484 for ``"extended"``).

    Returns:
        σ of the calibration at sensitivity 1 (:func:`dpaudit.privacy.gaussian.calibrate_gaussian`).

    Raises:
        ValueError: unknown mechanism or (ε, δ) outside the calibration's validity.
    """
    mechanism = v.choice("mechanism", mechanism, CERTIFICATION_MECHANISMS)
    return calibrate_gaussian(epsilon=epsilon, delta=delta, sensitivity=1.0, method=mechanism)


def _log_gaussian_delta(mu: np.ndarray, epsilon: np.ndarray) -> np.ndarray:
    """ln δ(ε) of the Gaussian mechanism with Δ/σ = mu (Balle & Wang 2018, Thm 8), vectorised."""
    a = special.log_ndtr(mu / 2.0 - epsilon / mu)
    b = epsilon + special.log_ndtr(-mu / 2.0 - epsilon / mu)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = a + np.log1p(-np.exp(np.minimum(b - a, 0.0)))
    return np.where(b < a, out, -np.inf)


def _analytic_multipliers(epsilon: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Smallest σ (Δ = 1) with δ(ε; σ) ≤ δ, over whole arrays (analytic Gaussian mechanism).

    Safeguarded Newton on t = ln σ for f(t) = ln δ(ε; e^{-t}) − ln δ_target, using
    dδ/dμ = φ(μ/2 − ε/μ) (the two Gaussian terms of the derivative coincide), with a
    bisection step whenever Newton leaves the bracket. The answer is then nudged up until the
    condition holds as evaluated, so the mechanism is never under-noised: an under-estimated
    c would over-state the certified size.
    """
    epsilon, delta = np.broadcast_arrays(np.asarray(epsilon, dtype=np.float64), np.asarray(delta, dtype=np.float64))
    log_target = np.log(delta)
    lo = np.full(epsilon.shape, -30.0)  # σ = e^-30: δ(ε) ≈ 1, fails every target δ < 1
    hi = np.full(epsilon.shape, 30.0)  # σ = e^30: δ(ε) ≈ 0, meets every target
    # EGM's σ is always at least AGM's (docs/privacy/accounting.md §5): a close start from above.
    s = np.log(math.sqrt(2.0 / math.pi) / np.minimum(delta, EGM_MAX_DELTA))
    t = np.where(delta <= EGM_MAX_DELTA, np.log((np.sqrt(s) + np.sqrt(s + epsilon)) / (math.sqrt(2.0) * epsilon)), 0.0)

    def excess(t: np.ndarray) -> np.ndarray:
        return _log_gaussian_delta(np.exp(-t), epsilon) - log_target

    for _ in range(200):
        f = excess(t)
        ok = f <= 0
        hi = np.where(ok, np.minimum(hi, t), hi)
        lo = np.where(ok, lo, np.maximum(lo, t))
        mu = np.exp(-t)
        with np.errstate(over="ignore", invalid="ignore"):
            step = f * np.exp(f + log_target - np.log(mu) - stats.norm.logpdf(mu / 2.0 - epsilon / mu))
            t_new = t + step
        # A converged Newton iterate sits on the bracket's end (t = hi), so test convergence
        # before falling back to bisection.
        done = np.abs(step) <= 1e-13 * np.maximum(1.0, np.abs(t))
        inside = np.isfinite(t_new) & (t_new > lo) & (t_new < hi)
        t = np.where(done, t, np.where(inside, t_new, 0.5 * (lo + hi)))
        if np.all(done):
            break
    # Step up past the root where rounding left t on the wrong side; the step doubles, so
    # this ends quickly (and at the bracket's end at worst).
    bump = 4e-16 * np.maximum(1.0, np.abs(t))
    for _ in range(200):
        bad = excess(t) > 0
        if not np.any(bad):
            break
        t = np.where(bad, np.minimum(t + bump, hi), t)
        bump = bump * 2.0
    return np.exp(t)


def _multipliers(mechanism: str, epsilon: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """c(ε, δ) over broadcast arrays (ε > 0); the caller enforces each formula's validity."""
    if mechanism == "classical":
        return np.sqrt(2.0 * np.log(1.25 / delta)) / epsilon
    if mechanism == "extended":
        s = np.log(math.sqrt(2.0 / math.pi) / delta)
        return (np.sqrt(s) + np.sqrt(s + epsilon)) / (math.sqrt(2.0) * epsilon)
    return _analytic_multipliers(epsilon, delta)
