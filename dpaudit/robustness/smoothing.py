"""Randomized smoothing's certificate (Cohen, Rosenfeld & Kolter 2019, Theorem 1 and CERTIFY; torch-free).

R = σ Φ⁻¹(p_A), with p_A a one-sided Clopper–Pearson lower bound on the top class's
probability under Gaussian input noise; the top class is selected on separate draws.
"""

from __future__ import annotations

import numpy as np
from scipy import special, stats

from dpaudit import _validate as v
from dpaudit.robustness.score_bounds import _count_matrix

__all__ = ["smoothing_lower_bound", "smoothing_certify"]


# Randomized smoothing
def smoothing_lower_bound(n_a: int | np.ndarray, n: int | np.ndarray, *, confidence: float = 0.999) -> np.ndarray:
    """One-sided Clopper–Pearson lower bound p_A = BetaInv(1 − confidence; n_A, n − n_A + 1).

    Cohen, Rosenfeld & Kolter (2019), CERTIFY, whose failure probability α is
    ``1 − confidence``; 0 where n_A = 0.

    Args:
        n_a: counts of the guessed class (integers, 0 ≤ n_A ≤ n).
        n: numbers of draws (integers ≥ 1), broadcast against ``n_a``.
        confidence: probability in (0, 1) that the bound holds (0.999 is the paper's α = 0.001).

    Returns:
        Float array of the broadcast shape.
    """
    confidence = v.open_unit("confidence", confidence)
    n_a_arr = np.asarray(n_a)
    n_arr = np.asarray(n)
    for name, arr in (("n_a", n_a_arr), ("n", n_arr)):
        if arr.dtype == bool or arr.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold integers, got {arr!r}")
    n_a_arr, n_arr = np.broadcast_arrays(n_a_arr.astype(np.int64), n_arr.astype(np.int64))
    if np.any(n_arr < 1):
        raise v.invalid("n", f"n must be >= 1, got e.g. {n_arr[n_arr < 1][:3].tolist()}")
    if np.any((n_a_arr < 0) | (n_a_arr > n_arr)):
        raise v.invalid(
            "n_a", f"n_a must lie in [0, n], got e.g. {n_a_arr[(n_a_arr < 0) | (n_a_arr > n_arr)][:3].tolist()}"
        )
    bound = stats.beta.ppf(1.0 - confidence, np.maximum(n_a_arr, 1), n_arr - n_a_arr + 1)
    return np.asarray(np.where(n_a_arr > 0, bound, 0.0), dtype=np.float64)


def smoothing_certify(
    selection_counts: np.ndarray, estimation_counts: np.ndarray, *, sigma: float, confidence: float = 0.999
) -> tuple[np.ndarray, np.ndarray]:
    """CERTIFY of randomized smoothing (Cohen, Rosenfeld & Kolter 2019, Theorem 1, §3.2).

    Guesses c_A = argmax of the selection counts (n0 draws), bounds P(f(x + e) = c_A) from
    below with the independent estimation counts (n draws) by :func:`smoothing_lower_bound`,
    abstains when p_A ≤ ½ and otherwise certifies the L2 radius R = σ Φ⁻¹(p_A) (p_B = 1 − p_A).

    The counts may come from any randomized classifier: Gaussian noise on the input (the
    ``smoothing`` defense, where σ is the input noise's) or a noise layer after the first
    layer (PixelDP / HGM, where σ is the noise per unit of the layer's sensitivity, σ/Δ).

    Args:
        selection_counts: (n_points, k) class counts from the selection draws.
        estimation_counts: (n_points, k) class counts from fresh draws, same shape.
        sigma: standard deviation σ > 0 of the smoothing noise.
        confidence: probability 1 − α that each certificate holds (Cohen et al.'s α = 1 − confidence).

    Returns:
        ``(predictions, radii)``: int64 predictions (−1 = abstain) and float64 radii (0 where
        abstaining).

    Raises:
        ValueError: bad shapes, negative counts or empty rows.
    """
    selection = _count_matrix("selection_counts", selection_counts)
    estimation = _count_matrix("estimation_counts", estimation_counts)
    if estimation.shape != selection.shape:
        raise v.invalid(
            "estimation_counts",
            f"estimation_counts must have the shape of selection_counts {selection.shape}, got {estimation.shape}",
        )
    sigma = v.positive("sigma", sigma)
    guess = np.argmax(selection, axis=1)
    n_a = estimation[np.arange(selection.shape[0]), guess]
    p_a = smoothing_lower_bound(n_a, estimation.sum(axis=1), confidence=confidence)
    # CERTIFY returns c_A only when p_A > ½; at p_A = ½ the radius would be 0 and g(x) itself
    # may be a tie, so the paper abstains there too.
    certified = p_a > 0.5
    predictions = np.where(certified, guess, -1).astype(np.int64)
    radii = np.where(certified, sigma * special.ndtri(np.where(certified, p_a, 0.5)), 0.0)
    return predictions, radii
