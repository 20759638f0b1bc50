"""Closed forms for the accountants' test vectors, written from the papers and sharing no code with ``dpaudit.privacy``.

* :func:`one_step_epsilon`: the exact ε of one Poisson-sampled Gaussian step under add/remove.
  With P = (1 − q)N(0, σ²) + qN(1, σ²) and Q = N(0, σ²) the privacy loss is monotone in the
  output, so δ(ε) = P(L > ε) − e^ε Q(L > ε) is a sum of normal tails at one cut point per
  direction (Balle & Wang 2018, Theorem 8, for the un-sampled case).
* :func:`moments_epsilon`: Abadi et al.'s (2016) moments accountant, i.e. the Rényi DP of the
  sampled Gaussian at integer orders α, ln(Σ_k C(α, k)(1 − q)^{α−k} q^k e^{(k² − k)/(2σ²)})/(α − 1)
  (Mironov, Talwar & Zhang 2019, §3.3), composed over T steps and converted with
  ε = min_α T·RDP(α) + ln(1/δ)/(α − 1) over α ∈ {2, …, 33} (Mironov 2017, Proposition 3).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special, stats


def one_step_epsilon(q: float, sigma: float, delta: float) -> float:
    """The exact ε at ``delta`` of one Poisson-sampled Gaussian step of sensitivity 1."""

    def delta_of(eps: float) -> float:
        # P against Q: the loss ln((1 − q) + q e^{(2x − 1)/(2σ²)}) exceeds ε above one cut point.
        x = sigma**2 * math.log((math.exp(eps) - (1 - q)) / q) + 0.5
        add = (
            (1 - q) * stats.norm.sf(x / sigma)
            + q * stats.norm.sf((x - 1) / sigma)
            - math.exp(eps) * stats.norm.sf(x / sigma)
        )
        # Q against P: the loss exceeds ε below a cut point, which exists only when e^{−ε} > 1 − q.
        ratio = (math.exp(-eps) - (1 - q)) / q
        remove = 0.0
        if ratio > 0:
            x2 = sigma**2 * math.log(ratio) + 0.5
            remove = stats.norm.cdf(x2 / sigma) - math.exp(eps) * (
                (1 - q) * stats.norm.cdf(x2 / sigma) + q * stats.norm.cdf((x2 - 1) / sigma)
            )
        return max(add, remove)

    return float(optimize.brentq(lambda e: delta_of(e) - delta, 1e-9, 100.0, xtol=1e-13))


def moments_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
    """The moments accountant's ε of T Poisson-sampled Gaussian steps, on orders 2 … 33."""
    best = math.inf
    for alpha in range(2, 34):
        k = np.arange(alpha + 1)
        log_binom = special.gammaln(alpha + 1) - special.gammaln(k + 1) - special.gammaln(alpha - k + 1)
        log_terms = log_binom + (alpha - k) * math.log1p(-q) + k * math.log(q) + (k * k - k) / (2 * sigma**2)
        rdp = float(special.logsumexp(log_terms)) / (alpha - 1)
        best = min(best, steps * rdp + math.log(1 / delta) / (alpha - 1))
    return best


def analytic_sigma(epsilon: float, delta: float) -> float:
    """The smallest σ whose Gaussian mechanism (sensitivity 1) is (ε, δ)-DP, from its exact privacy profile.

    δ(ε; σ) = Φ(1/(2σ) − εσ) − e^ε Φ(−1/(2σ) − εσ) (Balle & Wang 2018, Theorem 8) falls as σ
    grows, so σ is the root of δ(ε; σ) = δ.
    """

    def excess(log_sigma: float) -> float:
        s = math.exp(log_sigma)
        return (
            float(stats.norm.cdf(0.5 / s - epsilon * s) - math.exp(epsilon) * stats.norm.cdf(-0.5 / s - epsilon * s))
            - delta
        )

    return math.exp(optimize.brentq(excess, math.log(1e-3), math.log(1e4), xtol=1e-14))
