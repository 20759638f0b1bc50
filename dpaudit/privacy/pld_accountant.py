"""The privacy-loss-distribution accountant ``pld`` and its memory budget (torch-free).

Privacy loss distributions (Koskela et al. 2020; Doroshenko et al. 2022) are the tightest
accountant in practice; ``dp_accounting``'s pessimistic estimate keeps the result an upper
bound. PLD discretises the privacy loss on a grid of step :data:`PLD_DISCRETIZATION`; its
length grows like (per-step loss range) / step and, under composition, with T, so
:func:`pld_memory_estimate` predicts the bytes the grid will need before ``dp_accounting``
allocates anything (:func:`~dpaudit.privacy.accountants.compute_epsilon_detailed` falls back to
``rdp`` above :data:`PLD_MEMORY_BUDGET`).
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
from dp_accounting import dp_event as dpe
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm
from scipy import fft

from dpaudit import _validate as v
from dpaudit.privacy.events import DP_ACCOUNTING_RELATIONS, clamp_sigma, drop_empty

__all__ = ["PLD_DISCRETIZATION", "PLD_MEMORY_BUDGET", "pld_delta", "pld_epsilon", "pld_memory_estimate", "pld_supports"]

# PLD discretisation: 1e-4 in the privacy-loss domain keeps ε within ~0.1 % of the exact
# curve for DP-SGD-sized compositions while composing 10^4 steps in about a second.
PLD_DISCRETIZATION = 1e-4

#: Bytes the PLD accountant may use (1 GiB). Above it ``pld`` falls back to ``rdp`` (module
#: docstring). Peak use measured on dp_accounting 0.6.0 stays below the estimate.
PLD_MEMORY_BUDGET = 1 << 30
# Bytes per grid point, measured (ru_maxrss, dp_accounting 0.6.0) with about 2x headroom: building
# one step's PMF goes through a Python dict (~100-190 B per point); a self-composition holds
# complex FFT buffers, the power, the inverse and the rolled copy (~60 B per output point).
_PLD_BYTES_PER_STEP_POINT = 200
_PLD_BYTES_PER_COMPOSED_POINT = 80
# Grid points of the coarse one-step PMF used to predict dp_accounting's truncation bounds.
_PLD_PROBE_POINTS = 4000


def _release_fft_plans() -> None:
    """Evicts the large FFT plans ``dp_accounting``'s compositions leave in SciPy's plan cache.

    pocketfft (behind ``scipy.fft``) keeps the 16 most recently used plans per transform kind;
    a plan for a PLD grid of n points holds O(n) twiddle factors (~190 MB at n ≈ 6e6), so a
    calibration that composes at many different T kept growing by that much per evaluation
    (1.8 GB after eight, measured with scipy 1.17). Planning 17 tiny transforms of each kind
    pushes the large plans out of the LRU cache.
    """
    for n in range(64, 64 + 17):
        x = np.zeros(n)
        fft.ifft(fft.fft(x))
        fft.irfft(fft.rfft(x), n)


def pld_epsilon(event: dpe.DpEvent, delta: float, neighbouring: str, *, interval: float = PLD_DISCRETIZATION) -> float:
    """ε at ``delta`` of the pessimistic PLD on a grid of step ``interval`` (a coarser grid is only
    used to time the accountant: its cost grows with the grid's length, :func:`pld_memory_estimate`)."""
    acc = pld_privacy_accountant.PLDAccountant(
        neighboring_relation=DP_ACCOUNTING_RELATIONS[neighbouring], value_discretization_interval=interval
    )
    if not acc.supports(event):
        raise v.invalid("accountant", f"accountant 'pld' does not support the event {event!r}")
    try:
        acc.compose(event)
        return float(acc.get_epsilon(delta))
    finally:
        del acc
        _release_fft_plans()


def pld_delta(event: dpe.DpEvent, epsilon: float, neighbouring: str) -> float:
    """δ at ``epsilon`` of the pessimistic PLD (an upper bound on the true δ(ε))."""
    acc = pld_privacy_accountant.PLDAccountant(
        neighboring_relation=DP_ACCOUNTING_RELATIONS[neighbouring], value_discretization_interval=PLD_DISCRETIZATION
    )
    if not acc.supports(event):
        raise v.invalid("accountant", f"accountant 'pld' does not support the event {event!r}")
    try:
        acc.compose(event)
        return float(min(1.0, acc.get_delta(epsilon)))
    finally:
        del acc
        _release_fft_plans()


def pld_supports(event: dpe.DpEvent, neighbouring: str) -> bool:
    """Whether ``dp_accounting``'s PLD accountant can analyse ``event`` under ``neighbouring``."""
    return bool(
        pld_privacy_accountant.PLDAccountant(neighboring_relation=DP_ACCOUNTING_RELATIONS[neighbouring]).supports(event)
    )


def _pld_gaussian_parts(event: dpe.DpEvent, count: int = 1) -> list[tuple[int, float, float, bool]] | None:
    """(count, q, σ, Poisson-sampled?) per Gaussian part, as ``PLDAccountant`` walks ``event``;
    ``None`` if the event holds anything else (then no estimate is made)."""
    if isinstance(event, dpe.NoOpDpEvent):
        return []
    if isinstance(event, dpe.GaussianDpEvent):
        return [(count, 1.0, float(event.noise_multiplier), False)]
    if isinstance(event, dpe.PoissonSampledDpEvent) and isinstance(event.event, dpe.GaussianDpEvent):
        q = float(event.sampling_probability)
        return [] if q == 0.0 else [(count, q, float(event.event.noise_multiplier), True)]
    if isinstance(event, dpe.SelfComposedDpEvent):
        return _pld_gaussian_parts(event.event, count * int(event.count))
    if isinstance(event, dpe.ComposedDpEvent):
        out: list[tuple[int, float, float, bool]] = []
        for e in event.events:
            part = _pld_gaussian_parts(e, count)
            if part is None:
                return None
            out += part
        return out
    return None


def _dense_probs(pmf: object) -> np.ndarray | None:
    # dp_accounting keeps the probabilities of a dense PMF in ``_probs``; a sparse one converts.
    dense = pmf.to_dense_pmf() if hasattr(pmf, "to_dense_pmf") else pmf
    probs = getattr(dense, "_probs", None)
    return None if probs is None else np.asarray(probs, dtype=float)


def _pld_part_bytes(count: int, q: float, sigma: float, sampled: bool, interval: float, neighbouring: str) -> float:
    """Estimated peak bytes of one Gaussian part of a PLD computation (see :func:`pld_memory_estimate`)."""
    if not sampled:  # PLDAccountant folds T unsampled Gaussians into one with σ/√T
        sigma, count = sigma / math.sqrt(count), 1
    if not sigma > 0 or not math.isfinite(1.0 / sigma**2):
        return math.inf
    relation = DP_ACCOUNTING_RELATIONS[neighbouring]
    if relation == dp_accounting.NeighboringRelation.REPLACE_ONE:
        adjacencies = [plm.AdjacencyType.REPLACE]
    else:
        adjacencies = [plm.AdjacencyType.REMOVE] + ([plm.AdjacencyType.ADD] if q < 1.0 else [])
    # One step's grid, from the same loss bounds dp_accounting's connect-the-dots uses.
    spans = []
    with np.errstate(all="ignore"):
        for adjacency in adjacencies:
            bounds = plm.GaussianPrivacyLoss(sigma, sampling_prob=q, adjacency_type=adjacency).connect_dots_bounds()
            lo, hi = bounds.epsilon_lower, bounds.epsilon_upper
            if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
                return math.inf
            spans.append(hi - lo)
    step_points = [s / interval + 2.0 for s in spans]
    total = _PLD_BYTES_PER_STEP_POINT * sum(step_points)
    if count == 1:
        return total + _PLD_BYTES_PER_COMPOSED_POINT * sum(step_points)
    if total > PLD_MEMORY_BUDGET:  # hopeless already: skip the probe, bound without truncation
        return total + _PLD_BYTES_PER_COMPOSED_POINT * sum(step_points) * count
    # The T-fold self-composition keeps the points inside dp_accounting's Chernoff truncation
    # bounds (common.compute_self_convolve_bounds). Their width in loss units barely depends on
    # the step, so they are computed on a coarse grid of ~_PLD_PROBE_POINTS points and rescaled.
    coarse = max(interval, max(spans) / _PLD_PROBE_POINTS)
    with np.errstate(all="ignore"):
        pld = pld_lib.from_gaussian_mechanism(
            sigma, value_discretization_interval=coarse, sampling_prob=q, neighboring_relation=relation
        )
    pmfs = [pld._pmf_remove] + ([pld._pmf_add] if len(adjacencies) == 2 else [])  # no public accessor
    for pmf, points in zip(pmfs, step_points):
        probs = _dense_probs(pmf)
        if probs is None:  # unknown internals: assume no truncation at all
            composed = points * count
        else:
            lo_b, hi_b = pld_common.compute_self_convolve_bounds(probs, count, 1e-15)
            composed = max((hi_b - lo_b + 1) * coarse / interval, points) * 1.25 + points
        total += _PLD_BYTES_PER_COMPOSED_POINT * composed
    return total


def pld_memory_estimate(
    event: dpe.DpEvent, *, neighbouring: str = "add_or_remove_one", interval: float = PLD_DISCRETIZATION
) -> float | None:
    """Estimated peak memory (bytes) of ``dp_accounting``'s PLD accountant on ``event``.

    ``dp_accounting`` (0.6.0) builds each step's privacy-loss PMF on a grid of step ``interval``
    spanning the connect-the-dots loss bounds (Doroshenko et al. 2022), then self-composes it T
    times with an FFT over the range its Chernoff bound keeps (tail mass 1e-15). Both lengths
    are predicted here without allocating them: the first from the loss bounds, the second
    from the same Chernoff bound evaluated on a coarse PMF. Measured peaks stay below the
    estimate (tests/privacy/test_accountants.py).

    Returns:
        bytes, possibly ``math.inf``; ``None`` for events holding anything but (Poisson-sampled)
        Gaussian steps, which are not estimated.
    """
    neighbouring = v.choice("neighbouring", neighbouring, tuple(DP_ACCOUNTING_RELATIONS))
    parts = _pld_gaussian_parts(clamp_sigma(drop_empty(event)))
    if parts is None:
        return None
    return float(sum(_pld_part_bytes(c, q, s, sampled, interval, neighbouring) for c, q, s, sampled in parts if c > 0))
