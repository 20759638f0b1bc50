"""The last-iterate ε of DP-SGD (Steinke et al. 2024): exact for linear losses, a heuristic for others.

Steinke, Nasr, Ganesh, Balle, Choquette-Choo, Jagielski, Hayes, Thakurta, Smith & Terzis (2024),
"The Last Iterate Advantage: Empirical Auditing and Principled Heuristic Analysis of Differentially
Private SGD" (ICLR 2025), Theorem 1 and Heuristic 1: when every loss is linear, the final model of
T steps of Poisson-sampled DP-SGD (rate q, noise multiplier σ, clip norm normalised to 1) is a
post-processing of the scalar S = Σ_t (B_t + Z_t), B_t ~ Bernoulli(q), Z_t ~ N(0, σ²), for the
added or removed example, and that scalar is as informative as the whole final model. So the
final model is (ε, δ)-DP (add or remove one) exactly when

    δ ≥ max(H_{e^ε}(P ‖ Q), H_{e^ε}(Q ‖ P)),  P = Binomial(T, q) + N(0, Tσ²),  Q = N(0, Tσ²),

with H_α(P ‖ Q) = ∫ max(p − α q, 0) the hockey-stick divergence. So this ε is the final model's
*exact* ε for linear losses, and therefore a *lower* bound on the final model's worst-case ε over
all losses. The heuristic takes it as the privacy of the last iterate on any loss; for losses
that are not linear it is not an upper bound (the paper's §4 gives losses whose final model
leaks more), so it caps neither ε_UB nor what an audit of the final model can show. ε_UB (every
iterate released, the accountants) minus it is what the heuristic suggests a final-model
adversary cannot see, not an established share (docs/privacy/accounting.md §7).

Computation: with s = σ√T and w_k the Binomial(T, q) pmf, the privacy loss
L(x) = ln Σ_k w_k exp((k x − k²/2)/s²) is increasing in x (every mixture mean k ≥ 0), so each
direction is a sum of normal tail terms at the root of L(x) = ±ε:

    H(P ‖ Q) = Σ_k w_k Φ̄((x₊ − k)/s) − e^ε Φ̄(x₊/s),   L(x₊) = ε,
    H(Q ‖ P) = Φ(x₋/s) − e^ε Σ_k w_k Φ((x₋ − k)/s),    L(x₋) = −ε (0 when −ε ≤ ln w_0),

evaluated in log space; ε(δ) is found by root-finding on δ(ε), which decreases in ε. At q = 1
this is the Gaussian mechanism with μ = √T/σ (Balle & Wang 2018, Theorem 8). Torch-free.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from dp_accounting import dp_event as dpe
from scipy import optimize, special, stats

from dpaudit import _validate as v
from dpaudit.privacy.claims import DPClaim
from dpaudit.privacy.gaussian import gaussian_delta, gaussian_epsilon

__all__ = [
    "MAX_LAST_ITERATE_STEPS",
    "last_iterate_delta",
    "last_iterate_epsilon",
    "dpsgd_parameters",
    "claim_last_iterate_epsilon",
]

#: Largest T evaluated: the Binomial support kept has ~120√(Tq(1−q)) + 200 points (≤ 4·10⁵ here).
MAX_LAST_ITERATE_STEPS = 10**7
# Binomial mass kept: mean ± _TAIL_SDS standard deviations plus _TAIL_PAD counts. The mass left
# out is below e^-100 (Chernoff), far under any δ an audit states.
_TAIL_SDS = 60.0
_TAIL_PAD = 100


def _checked(sampling_rate: float, noise_multiplier: float, num_steps: int) -> tuple[float, float, int]:
    q = v.half_open_unit("sampling_rate", sampling_rate)
    sigma = v.positive("noise_multiplier", noise_multiplier)
    steps = v.integer("num_steps", num_steps, minimum=0)
    if steps > MAX_LAST_ITERATE_STEPS:
        raise v.invalid(
            "num_steps", f"num_steps must be <= {MAX_LAST_ITERATE_STEPS:,} for the last-iterate epsilon, got {steps!r}"
        )
    return q, sigma, steps


class _Pair:
    """P = Binomial(T, q) + N(0, s²) against Q = N(0, s²), in units of s (so both have unit variance)."""

    def __init__(self, q: float, sigma: float, steps: int) -> None:
        scale = sigma * math.sqrt(steps)
        if q == 1.0:
            ks = np.array([float(steps)])
            logw = np.zeros(1)
        else:
            mean, sd = steps * q, math.sqrt(steps * q * (1.0 - q))
            lo = max(0, math.floor(mean - _TAIL_SDS * sd) - _TAIL_PAD)
            hi = min(steps, math.ceil(mean + _TAIL_SDS * sd) + _TAIL_PAD)
            k = np.arange(lo, hi + 1)
            logw = stats.binom.logpmf(k, steps, q)
            keep = np.isfinite(logw)
            ks, logw = k[keep].astype(float), logw[keep]
        self.a = ks / scale  # the mixture means in units of s
        self.logw = logw
        # ln w_0 when k = 0 is in the support: L(x) tends to it as x → −∞.
        self.log_w0 = float(logw[0]) if ks[0] == 0 else -math.inf

    def loss(self, u: float) -> float:
        """L at x = u·s: ln p/q, increasing in u."""
        return float(special.logsumexp(self.logw + self.a * u - 0.5 * self.a * self.a))

    def root(self, target: float) -> float:
        """The u with L(u) = target (target above ln w_0).

        Brackets from bounds on L: L(u) ≥ ln w_K + a_K u − a_K²/2 for the largest mean a_K, and
        for u ≤ 0, L(u) ≤ ln(w_0 + e^{a₊ u}) with a₊ the smallest positive mean.
        """
        a_top, a_pos = float(self.a[-1]), float(self.a[self.a > 0][0])
        hi = max(1.0, (target - float(self.logw[-1]) + 0.5 * a_top * a_top) / a_top + 1.0)
        lo = min(-1.0, _log_diff_exp(target, self.log_w0) / a_pos - 1.0)
        while self.loss(lo) >= target:  # rounding only
            lo = 2.0 * lo
        while self.loss(hi) <= target:
            hi = 2.0 * hi
        return float(optimize.brentq(lambda u: self.loss(u) - target, lo, hi, xtol=1e-13, rtol=1e-15, maxiter=500))

    def log_delta_add(self, eps: float) -> float:
        """ln H_{e^ε}(P ‖ Q) (−∞ when 0)."""
        u = self.root(eps)
        log_p = float(special.logsumexp(self.logw + special.log_ndtr(self.a - u)))
        log_q = eps + float(special.log_ndtr(-u))
        return _log_diff_exp(log_p, log_q)

    def log_delta_remove(self, eps: float) -> float:
        """ln H_{e^ε}(Q ‖ P) (−∞ when 0: no outcome has q/p > e^ε)."""
        if -eps <= self.log_w0:
            return -math.inf
        u = self.root(-eps)
        log_q = float(special.log_ndtr(u))
        log_p = eps + float(special.logsumexp(self.logw + special.log_ndtr(u - self.a)))
        return _log_diff_exp(log_q, log_p)

    def log_delta(self, eps: float) -> float:
        return max(self.log_delta_add(eps), self.log_delta_remove(eps))


def _separated(sigma: float, steps: int) -> bool:
    """√T/σ beyond 1e150: squares of the means overflow; P's shifted components are disjoint from Q."""
    return math.sqrt(steps) > 1e150 * sigma


def _log_diff_exp(a: float, b: float) -> float:
    """ln(e^a − e^b), −∞ when a ≤ b (rounding can make a tiny true difference negative)."""
    if a <= b:
        return -math.inf
    if b == -math.inf:
        return a
    return a + math.log(-math.expm1(b - a))


def last_iterate_delta(*, sampling_rate: float, noise_multiplier: float, num_steps: int, epsilon: float) -> float:
    """δ(ε) of the last iterate of DP-SGD: exact for linear losses, a heuristic (not an upper bound) for others.

    Steinke et al. (2024), "The Last Iterate Advantage", Theorem 1 / Heuristic 1:
    δ(ε) = max(H_{e^ε}(P ‖ Q), H_{e^ε}(Q ‖ P)) with P = Binomial(T, q) + N(0, Tσ²) and
    Q = N(0, Tσ²), add-or-remove-one neighbours, clip norm normalised to 1.

    Args:
        sampling_rate: the Poisson sampling rate q in (0, 1].
        noise_multiplier: σ > 0 (noise standard deviation over the clip norm).
        num_steps: T ≥ 0 (at most :data:`MAX_LAST_ITERATE_STEPS`).
        epsilon: ε ≥ 0.

    Returns:
        The smallest δ for which the final model is (ε, δ)-DP when the losses are linear (for
        other losses a heuristic value: some non-linear losses need a larger δ).
    """
    q, sigma, steps = _checked(sampling_rate, noise_multiplier, num_steps)
    eps = v.non_negative("epsilon", epsilon)
    if steps == 0:
        return 0.0
    if math.isinf(eps):
        return 0.0
    if _separated(sigma, steps):
        # P's components with k ≥ 1 are disjoint from Q: δ(ε) = P(B ≥ 1) = 1 − (1 − q)^T.
        return 1.0 if q == 1.0 else -math.expm1(steps * math.log1p(-q))
    if gaussian_delta(epsilon=eps, sigma=sigma / math.sqrt(steps)) == 0.0:
        return 0.0  # the dominating Gaussian (μ = √T/σ) already has δ = 0 in double precision
    out = _Pair(q, sigma, steps).log_delta(eps)
    return 0.0 if out == -math.inf else min(1.0, math.exp(out))


def last_iterate_epsilon(*, sampling_rate: float, noise_multiplier: float, num_steps: int, delta: float) -> float:
    """ε(δ) of the last iterate of DP-SGD: exact for linear losses, a heuristic for others (the inverse of
    :func:`last_iterate_delta`).

    Steinke et al. (2024), "The Last Iterate Advantage", Theorem 1 / Heuristic 1: the tight ε of
    the pair P = Binomial(T, q) + N(0, Tσ²), Q = N(0, Tσ²) in both directions. At q = 1 it is the
    Gaussian mechanism with μ = √T/σ (Balle & Wang 2018, Theorem 8). Never above the ε of the
    full transcript (every iterate released): the last iterate is a post-processing of it.
    Being exact for linear losses, it is a lower bound on the final model's worst-case ε over
    losses; it is not an upper bound for other losses (Steinke et al. give losses that exceed it),
    so it caps nothing an audit of the final model may show.

    Args:
        sampling_rate: the Poisson sampling rate q in (0, 1].
        noise_multiplier: σ > 0.
        num_steps: T ≥ 0 (at most :data:`MAX_LAST_ITERATE_STEPS`).
        delta: δ in (0, 1).

    Returns:
        The smallest ε ≥ 0 with δ(ε) ≤ ``delta`` (0 when already (0, δ)-DP; ``math.inf`` when no
        double bounds it).
    """
    q, sigma, steps = _checked(sampling_rate, noise_multiplier, num_steps)
    delta = v.open_unit("delta", delta)
    if steps == 0:
        return 0.0
    # The Gaussian mechanism with the largest mean, μ = √T/σ, dominates every component of P
    # (joint convexity of the hockey-stick divergence), so its ε brackets the root from above.
    hi = gaussian_epsilon(delta=delta, sigma=sigma / math.sqrt(steps))
    if math.isinf(hi) or _separated(sigma, steps):
        return math.inf
    if hi == 0.0:
        return 0.0
    pair = _Pair(q, sigma, steps)
    target = math.log(delta)
    if pair.log_delta(0.0) <= target:
        return 0.0
    hi = hi * (1.0 + 1e-9) + 1e-12
    while pair.log_delta(hi) > target:  # rounding only (q = 1 is exactly that Gaussian)
        hi *= 2.0
    return float(optimize.brentq(lambda e: pair.log_delta(e) - target, 0.0, hi, xtol=1e-12, rtol=1e-12, maxiter=500))


def dpsgd_parameters(event: dpe.DpEvent) -> tuple[float, float, int] | None:
    """(q, σ, T) when ``event`` is DP-SGD's ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)``, else ``None``.

    Full batches (no sampling event: q = 1) and a single step (no composition: T = 1) count;
    a composition with anything else (DP-PCA, Laplace steps) does not: the heuristic models one
    run of DP-SGD.
    """
    steps = 1
    if isinstance(event, dpe.SelfComposedDpEvent):
        steps, event = int(event.count), event.event
    q = 1.0
    if isinstance(event, dpe.PoissonSampledDpEvent):
        q, event = float(event.sampling_probability), event.event
    if isinstance(event, dpe.GaussianDpEvent):
        return q, float(event.noise_multiplier), steps
    return None


def claim_last_iterate_epsilon(claim: object, *, delta: float) -> float | None:
    """The last-iterate ε (:func:`last_iterate_epsilon`; exact for linear losses, a heuristic for others) of a
    DP-SGD-family claim at ``delta``, else ``None``.

    DP-SGD family: a :class:`~dpaudit.privacy.claims.DPClaim` whose event is (q, σ, T) of DP-SGD
    (:func:`dpsgd_parameters`) under add-or-remove-one neighbours (the relation the heuristic is
    stated for). ``None`` for every other claim (PATE, DSSGD, non-private, DP-PCA composed in, a
    replace-one claim) and for T beyond :data:`MAX_LAST_ITERATE_STEPS`.
    """
    delta = v.open_unit("delta", delta)
    if not isinstance(claim, DPClaim) or claim.neighbouring != "add_or_remove_one":
        return None
    params = dpsgd_parameters(claim.event)
    if params is None or params[2] > MAX_LAST_ITERATE_STEPS:
        return None
    return _cached_epsilon(*params, delta)


# Audits of one claim are repeated (seeds, prefixes, soundness tests): the value is a pure function.
@functools.lru_cache(maxsize=256)
def _cached_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
    return last_iterate_epsilon(sampling_rate=q, noise_multiplier=sigma, num_steps=steps, delta=delta)
