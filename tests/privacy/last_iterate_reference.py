"""A second implementation of the last-iterate privacy curve, by direct quadrature.

Steinke et al. (2024) reduce the last iterate of DP-SGD on a linear loss to a pair of
one-dimensional distributions: with s = σ√T, P = K + N(0, s²) with K ~ Binomial(T, q), and
Q = N(0, s²). This module integrates their densities on a grid with the trapezoid rule; it shares
no code with ``dpaudit.privacy.last_iterate`` (which evaluates the curve another way), so tests can
hold the module against it.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import integrate, optimize, stats

# Binomial masses below this are dropped from the top of K: far below any δ a test asks about.
_TAIL = 1e-18


def _densities(q: float, sigma: float, steps: int, points: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grid and the two densities on it; K is cut above its last value of mass over 1e-18,
    which keeps the grid to where both densities live (K ≤ ~200 for q = 0.01, T = 10,000)."""
    s = sigma * math.sqrt(steps)
    mass = stats.binom.pmf(np.arange(steps + 1), steps, q)
    k_max = int(np.nonzero(mass > _TAIL)[0].max())
    k = np.arange(k_max + 1)
    x = np.linspace(-14 * s, k_max + 14 * s, points)
    p = (mass[: k_max + 1, None] * stats.norm.pdf(x[None, :], loc=k[:, None], scale=s)).sum(axis=0)
    return x, p, stats.norm.pdf(x, scale=s)


def _delta(x: np.ndarray, p: np.ndarray, g: np.ndarray, epsilon: float) -> float:
    add = integrate.trapezoid(np.maximum(p - math.exp(epsilon) * g, 0.0), x)
    remove = integrate.trapezoid(np.maximum(g - math.exp(epsilon) * p, 0.0), x)
    return float(max(add, remove))


def quadrature_delta(q: float, sigma: float, steps: int, epsilon: float, *, points: int = 20_001) -> float:
    """δ(ε) = max(∫ (p − e^ε q)₊, ∫ (q − e^ε p)₊) of the last iterate, by the trapezoid rule."""
    return _delta(*_densities(q, sigma, steps, points), epsilon)


def quadrature_epsilon(q: float, sigma: float, steps: int, delta: float, *, points: int = 20_001) -> float:
    """The ε at which the quadrature δ(ε) falls to ``delta`` (δ(ε) decreases in ε)."""
    grid = _densities(q, sigma, steps, points)
    high = 1.0
    while _delta(*grid, high) > delta:  # widen the bracket until δ(high) is below the target
        high *= 2.0
    return float(optimize.brentq(lambda eps: _delta(*grid, eps) - delta, 0.0, high, xtol=1e-10, rtol=1e-12))
