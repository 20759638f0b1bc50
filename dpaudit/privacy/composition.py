"""The ``naive`` and ``strong`` accountants: basic and advanced composition of per-step (ε, δ) bounds.

These are the looser analyses Jayaraman & Evans (2019, §3) compared with the moments and RDP
accountants, and the comparison of Abadi et al. (2016, Figure 2). Both start from the same
per-step bound of a (Poisson-sampled) Gaussian step with noise multiplier σ and sampling rate q,
given the per-step Gaussian δ_g:

1. ε0 = the exact ε of the un-sampled Gaussian mechanism at δ_g (Balle & Wang 2018, Theorem 8:
   the smallest ε with Φ(1/2σ − εσ) − e^ε Φ(−1/2σ − εσ) ≤ δ_g), valid for every ε0. The
   classical ε0 = √(2 ln(1.25/δ_g))/σ (Dwork & Roth 2014, Theorem A.1) is not used: it holds
   only for ε0 ≤ 1 and understates ε beyond (σ = 0.5, δ = 1e-5: 9.69 against the exact 9.997).
   Where δ_g is below ~1e-300 the tail bound δ(ε) ≤ P[L > ε], L ~ N(1/2σ², 1/σ²), gives
   ε0 = 1/2σ² − Φ⁻¹(δ_g)/σ instead, evaluated in log space (it is larger, so still valid).
2. Amplification by Poisson subsampling under add/remove-one (Li, Qardaji & Su 2012,
   Theorem 1; tight as a mechanism-agnostic bound, Balle, Barthe & Gaboardi 2018, Theorem 8):
   the sampled step is (ln(1 + q(e^ε0 − 1)), q·δ_g)-DP. The first-order q·ε0 used before (and
   in Abadi et al.'s comparison) is below this for every ε0 > 0, q < 1 (ln(1 + q(e^x − 1)) is
   concave in q), and far below it for large ε0 (q = 0.05, σ = 0.5, T = 1: 0.418 against the
   exact 5.52).

Then, over the T steps (and any further Gaussian parts of the event):

``naive``
    Basic composition (Dwork & Roth 2014, Theorem 3.16): ε = Σ ε_step at δ = Σ q·δ_g, the
    whole δ spent on the steps (δ_g = δ / Σ q).
``strong``
    Advanced composition (Dwork, Rothblum & Vadhan 2010, Theorem III.3, in its heterogeneous
    form): ε = √(2 ln(1/δ') Σ ε_step²) + Σ ε_step (e^{ε_step} − 1) at δ = δ' + Σ q·δ_g, with
    the split of δ between δ' and the δ_g's chosen numerically (any split is valid).

Both are valid upper bounds for every q ∈ (0, 1], σ > 0, T and δ ∈ (0, 1) — loose ones: at one
step advanced composition is far worse than basic, and both are far above PLD for long runs.
They *decline* (no number, :func:`decline_reason`) for events holding anything but
(Poisson-sampled) Gaussian steps, and under the replace-one relation, where the amplification
theorem above does not apply.
"""

from __future__ import annotations

import functools
import math

from dp_accounting import dp_event as dpe
from scipy import optimize, special

from dpaudit.privacy.gaussian import gaussian_epsilon

__all__ = ["decline_reason", "naive_epsilon", "strong_epsilon", "gaussian_step_epsilon", "amplified_epsilon"]

# Below this per-step δ_g the exact Gaussian curve is no longer representable as a double
# (gaussian_epsilon compares δ's, not their logs); the log-space tail bound takes over.
_LOG_TINY_DELTA = math.log(1e-300)


class _Unsupported(Exception):
    """An event part naive/strong composition cannot bound (a decline, not an error)."""


def _flatten_gaussians(event: dpe.DpEvent, count: int = 1) -> list[tuple[int, float, float]]:
    """(count, sampling rate, σ) for each Gaussian component of ``event``."""
    if isinstance(event, dpe.NoOpDpEvent):
        return []
    if isinstance(event, dpe.GaussianDpEvent):
        return [(count, 1.0, float(event.noise_multiplier))]
    if isinstance(event, dpe.PoissonSampledDpEvent) and isinstance(event.event, dpe.GaussianDpEvent):
        return [(count, float(event.sampling_probability), float(event.event.noise_multiplier))]
    if isinstance(event, dpe.SelfComposedDpEvent):
        return _flatten_gaussians(event.event, count * int(event.count))
    if isinstance(event, dpe.ComposedDpEvent):
        return [g for e in event.events for g in _flatten_gaussians(e, count)]
    raise _Unsupported(f"it composes (Poisson-sampled) Gaussian steps only, got {type(event).__name__}")


def decline_reason(event: dpe.DpEvent, neighbouring: str) -> str:
    """Why ``naive``/``strong`` cannot bound ``event`` under ``neighbouring``; ``""`` if they can."""
    if neighbouring != "add_or_remove_one":
        return f"it is defined for add_or_remove_one only (Poisson amplification), got neighbouring={neighbouring!r}"
    try:
        _flatten_gaussians(event)
    except _Unsupported as exc:
        return str(exc)
    return ""


@functools.lru_cache(maxsize=4096)
def gaussian_step_epsilon(sigma: float, log_delta_g: float) -> float:
    """ε0 of one un-sampled Gaussian step (sensitivity 1, noise σ) at δ_g = e^``log_delta_g``.

    Exact (Balle & Wang 2018, Theorem 8) for δ_g ≥ 1e-300; below, the tail bound of the module
    docstring. δ_g ≥ 1 gives 0: every mechanism is (0, 1)-DP.
    """
    if log_delta_g >= 0.0:
        return 0.0
    if log_delta_g > _LOG_TINY_DELTA:
        return gaussian_epsilon(delta=math.exp(log_delta_g), sigma=sigma)
    mu = 1.0 / sigma
    return mu * mu / 2.0 - mu * float(special.ndtri_exp(log_delta_g))


def amplified_epsilon(eps0: float, q: float) -> float:
    """ln(1 + q(e^ε0 − 1)): the ε of an (ε0, ·)-DP step run on a Poisson sample of rate q."""
    if q >= 1.0 or math.isinf(eps0):
        return eps0
    if eps0 <= 1.0:
        return math.log1p(q * math.expm1(eps0))
    # = ε0 + ln(q + (1 − q) e^{−ε0}); no overflow of e^ε0 for large ε0
    return eps0 + math.log(q + (1.0 - q) * math.exp(-eps0))


def _groups(event: dpe.DpEvent) -> list[tuple[int, float, float]]:
    return [g for g in _flatten_gaussians(event) if g[0] > 0 and g[1] > 0.0]


def naive_epsilon(event: dpe.DpEvent, delta: float) -> float:
    """Basic composition of the per-step bounds (module docstring); the caller checks :func:`decline_reason`."""
    groups = _groups(event)
    if not groups:
        return 0.0
    log_delta_g = math.log(delta) - math.log(sum(n * q for n, q, _ in groups))
    total = math.fsum(n * amplified_epsilon(gaussian_step_epsilon(sigma, log_delta_g), q) for n, q, sigma in groups)
    return total if math.isfinite(total) else math.inf


def strong_epsilon(event: dpe.DpEvent, delta: float) -> float:
    """Advanced composition of the per-step bounds (module docstring); the caller checks :func:`decline_reason`."""
    groups = _groups(event)
    if not groups:
        return 0.0
    # Expected number of sampled steps: the δ_g's cost Σ q·δ_g after amplification.
    log_delta, log_weight = math.log(delta), math.log(sum(n * q for n, q, _ in groups))

    def epsilon_for(frac: float) -> float:
        # In logs: δ' = frac·δ and δ_g = (1 − frac)·δ/weight underflow to 0 for δ near 5e-324.
        log_inv_slack = -(math.log(frac) + log_delta)  # ln 1/δ' of the composition theorem
        log_delta_g = math.log1p(-frac) + log_delta - log_weight
        eps_sq, eps_lin = 0.0, 0.0
        for n, q, sigma in groups:
            eps = amplified_epsilon(gaussian_step_epsilon(sigma, log_delta_g), q)
            if eps > 700.0:  # e^ε overflows; the bound is astronomically large anyway
                return math.inf
            eps_sq += n * eps**2
            eps_lin += n * eps * math.expm1(eps)
        total = math.sqrt(2.0 * log_inv_slack * eps_sq) + eps_lin
        return total if math.isfinite(total) else math.inf

    if math.isinf(epsilon_for(0.5)) and math.isinf(epsilon_for(1e-6)):
        return math.inf  # overflowing at every split: the optimiser would see only inf
    # Every split gives a valid bound; res.fun is the bound at the split the optimiser found.
    res = optimize.minimize_scalar(epsilon_for, bounds=(1e-6, 1 - 1e-6), method="bounded", options={"xatol": 1e-9})
    return float(res.fun)
