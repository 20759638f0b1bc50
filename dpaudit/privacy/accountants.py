"""Privacy accountants: upper bounds ε_UB for a mechanism described as a ``dp_accounting`` event.

Five named accountants, from loosest to tightest on DP-SGD. Every one returns a valid upper
bound or *declines* (below); none prints a number its theorem does not support.

``naive``
    Basic composition (Dwork & Roth 2014, Theorem 3.16) of per-step bounds: every
    Poisson-sampled Gaussian step is (ln(1 + q(e^ε0 − 1)), q·δ_g)-DP, with ε0 the exact ε of the
    Gaussian mechanism at δ_g (Balle & Wang 2018, Theorem 8) amplified by Poisson subsampling
    (Li, Qardaji & Su 2012, Theorem 1; Balle, Barthe & Gaboardi 2018, Theorem 8); the T steps
    sum to ε = Σ ε_step at δ = Σ q·δ_g. The loosest analysis of the same noise, one of the four
    Jayaraman & Evans (2019, §3) compared. See :mod:`dpaudit.privacy.composition`.
``strong``
    Advanced composition of Dwork, Rothblum & Vadhan (2010, Theorem III.3) of the same per-step
    bounds, as Abadi et al. (2016, Figure 2) compare it, with the total δ split numerically
    between the per-step δ_g's and the composition slack δ'. (Abadi et al. amplified to the
    first-order (q·ε0, q·δ_g) and took the classical ε0 = √(2 ln(1.25/δ_g))/σ, valid for
    ε0 ≤ 1 only; both understate ε, so neither is used: at q = 0.01, σ = 4, T = 10^4 this
    accountant gives 16.8 where their analysis gave 9.35.)
``moments``
    Abadi et al.'s moments accountant (2016, Theorem 2): Rényi DP of the sampled Gaussian at
    integer orders α = λ + 1 ∈ {2, …, 33} with the standard tail-bound conversion
    ε = min_α RDP(α) + ln(1/δ)/(α − 1) (Mironov 2017, Proposition 3).
``rdp``
    The same RDP curve on a fine fractional grid, converted with the improved bound of
    Balle et al. (2020) / Canonne, Kamath & Steinke (2020). Fractional orders of the
    Poisson-sampled Gaussian use the signed series of Mironov, Talwar & Zhang (2019, §3.3),
    as Opacus and TF Privacy do (see :func:`_log_a_frac`).
``pld``
    Privacy loss distributions (Koskela et al. 2020; Doroshenko et al. 2022), the tightest in
    practice; ``dp_accounting``'s pessimistic estimate, so it stays an upper bound.

Declining: ``naive`` and ``strong`` bound compositions of (Poisson-sampled) Gaussian steps under
add/remove-one only. For any other event or relation :func:`compute_epsilon_detailed` returns an
:class:`EpsilonResult` with ``declined`` set, ``epsilon`` = ∞ (trivially valid, so a caller
that ignores the flag stays sound) and the reason in ``note``; :func:`compute_epsilon` raises
:class:`AccountantDeclined` (a ``ValueError``), so a claim's by-accountant mapping leaves the
accountant out and its headline bound picks among the others. The other accountants raise
``ValueError`` for events ``dp_accounting`` cannot analyse.

RDP and PLD come from ``dp_accounting``; what it lacks (the standard conversion on integer
orders, strong composition, calibration that never overshoots) is written here.

Bounded resources and extreme inputs (issue 11):

* PLD discretises the privacy loss on a grid of step :data:`PLD_DISCRETIZATION`; its length
  grows like (per-step loss range) / step and, under composition, with T. Before
  ``dp_accounting`` allocates anything, :func:`compute_epsilon_detailed` estimates the bytes
  the grid will need (:func:`pld_memory_estimate`); above :data:`PLD_MEMORY_BUDGET` it answers
  with the ``rdp`` bound instead, and says so (:class:`EpsilonResult`.computed_by and ``note``;
  :func:`compute_epsilon` additionally warns with :class:`PLDFallbackWarning`). The RDP bound
  is an upper bound too, only looser, so a fallback never understates ε.
* Noise multipliers above :data:`NOISE_MULTIPLIER_MAX` are evaluated at that value: more noise
  is a post-processing of less noise (add independent Gaussian noise), so ε(σ) is
  non-increasing and the bound at the smaller σ holds for the larger one. Below
  :data:`NOISE_MULTIPLIER_MIN` every accountant's bound exceeds ~1e300 and the floating-point
  arithmetic breaks down (NaN, or 0 from underflow), so ε_UB = ∞ is returned: a valid, if
  trivial, upper bound.
* Step counts above :data:`MAX_NUM_STEPS` are refused.
"""

from __future__ import annotations

import functools
import math
import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import dp_accounting
import numpy as np
from dp_accounting import dp_event as dpe
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism as plm
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import fft, special

from dpaudit import _validate as v
from dpaudit.privacy import composition
from dpaudit.privacy.accountant_names import ACCOUNTANTS, MAX_NUM_STEPS

__all__ = [
    "ACCOUNTANTS",
    "MOMENTS_ORDERS",
    "RDP_ORDERS",
    "PLD_DISCRETIZATION",
    "PLD_MEMORY_BUDGET",
    "PLD_SOLVER_MEMORY_BUDGET",
    "NOISE_MULTIPLIER_MIN",
    "NOISE_MULTIPLIER_MAX",
    "MAX_NUM_STEPS",
    "AccountantDeclined",
    "EpsilonResult",
    "PLDFallbackWarning",
    "compute_epsilon",
    "compute_epsilon_detailed",
    "pld_memory_estimate",
    "calibrate_noise_multiplier",
    "calibrate_num_steps",
    "smallest_noise_multiplier",
    "largest_num_steps",
    "sampled_gaussian_event",
]


# Abadi et al. track moments for λ ≤ 32, i.e. RDP orders 2..33.
MOMENTS_ORDERS = tuple(range(2, 34))
# The customary grid (Opacus, TF Privacy) extended upward so that small-T / large-σ settings
# find their optimum inside the grid rather than at its end.
RDP_ORDERS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)) + [80, 96, 128, 192, 256, 384, 512, 1024])

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

#: The budget of each evaluation inside :func:`calibrate_noise_multiplier` and
#: :func:`calibrate_num_steps` (256 MiB): they evaluate ε 15-40 times, and a PLD evaluation
#: takes ~10 ms per MB of its budget, so this keeps a calibration to about a minute at worst.
PLD_SOLVER_MEMORY_BUDGET = 1 << 28

#: Noise multipliers outside [MIN, MAX] (module docstring): below, ε_UB = ∞; above, evaluated at MAX.
NOISE_MULTIPLIER_MIN = 1e-150
NOISE_MULTIPLIER_MAX = 1e100


class PLDFallbackWarning(RuntimeWarning):
    """:func:`compute_epsilon` answered a ``pld`` request with another accountant's (looser) bound."""


class AccountantDeclined(ValueError):
    """The accountant's formula does not apply to the event (see the module docstring); no number."""


@dataclass(frozen=True)
class EpsilonResult:
    """ε_UB and the accountant that actually produced it.

    Attributes:
        epsilon: the upper bound ε_UB (``math.inf`` for a non-private step, σ below
            :data:`NOISE_MULTIPLIER_MIN`, or a declined accountant).
        accountant: the accountant asked for.
        computed_by: the accountant whose bound ``epsilon`` is; differs from ``accountant``
            only when ``pld`` would have exceeded its memory budget (then ``rdp``).
        note: one line saying why ``computed_by`` differs, why ε_UB is infinite, or why the
            accountant declined; ``""`` otherwise.
        declined: the accountant's formula does not apply to the event: ``epsilon`` is no
            bound of that accountant (∞ as a placeholder) and must not be printed as one.
    """

    epsilon: float
    accountant: str
    computed_by: str
    note: str = ""
    declined: bool = False

    @property
    def fell_back(self) -> bool:
        """Whether another accountant than the one asked for produced ``epsilon``."""
        return self.computed_by != self.accountant


_NEIGHBOURING = {
    "add_or_remove_one": dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace_one": dp_accounting.NeighboringRelation.REPLACE_ONE,
}


def sampled_gaussian_event(*, sampling_rate: float, noise_multiplier: float, num_steps: int) -> dpe.DpEvent:
    """The DP-SGD event ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)`` (Abadi et al., Alg. 1)."""
    q = v.half_open_unit("sampling_rate", sampling_rate)
    sigma = v.positive("noise_multiplier", noise_multiplier)
    steps = v.integer("num_steps", num_steps, minimum=0)
    if steps > MAX_NUM_STEPS:
        raise v.invalid("num_steps", f"num_steps must be <= 10**18, got {steps!r}")
    inner: dpe.DpEvent = dpe.GaussianDpEvent(sigma)
    if q < 1.0:
        inner = dpe.PoissonSampledDpEvent(q, inner)
    return dpe.SelfComposedDpEvent(inner, steps)


def _contains_non_private(event: dpe.DpEvent) -> bool:
    if isinstance(event, dpe.NonPrivateDpEvent):
        return True
    if isinstance(event, (dpe.SelfComposedDpEvent, dpe.PoissonSampledDpEvent)):
        return _contains_non_private(event.event)
    if isinstance(event, dpe.ComposedDpEvent):
        return any(_contains_non_private(e) for e in event.events)
    return False


# Fractional-order RDP of the Poisson-sampled Gaussian.
#
# dp_accounting (checked: 0.6.0) sums the series of Mironov, Talwar & Zhang (2019, §3.3) with
# |C(α, i)| in place of the generalised binomial coefficient, whose sign alternates for
# i > α + 1. That is a valid but loose upper bound (RDP up to ~10 % too large at α < 2), and
# when the all-positive series has not converged after 1000 terms it drops the order (∞),
# which at q = 0.1, σ = 0.8 removes α ≤ 1.6: ε(T = 5000, δ = 1e-5) came out 169.8 instead of
# 131.2. The signed series below is the one Opacus and TF Privacy evaluate; it is summed
# exactly (``math.fsum``) and refused (falling back to dp_accounting's bound) when the
# cancellation is too severe for double precision or the tail has not died out.
_FRAC_CHUNK = 512
_FRAC_MAX_TERMS = 1 << 17
_FRAC_TAIL = 32.0  # stop once the terms are below e^-32 (≤ e^-32 · A_α, since A_α ≥ 1)
_FRAC_MAX_CANCELLATION = 14.0  # refuse when the largest term exceeds the sum by more than e^14


def _log_a_frac(q: float, sigma: float, alpha: float) -> float | None:
    """ln A_α of the sampled Gaussian at fractional α, 0 < q < 1; ``None`` if unreliable.

    A_α = A0 + A1 with, summed over i = 0, 1, … with the signed generalised binomial C(α, i),
    A0 = Σ C(α,i) q^i (1−q)^{α−i} e^{(i²−i)/2σ²} ½erfc((i − z0)/(√2σ)) and
    A1 = Σ C(α,i) q^{α−i} (1−q)^i e^{(j²−j)/2σ²} ½erfc((z0 − j)/(√2σ)), j = α − i,
    z0 = σ² ln(1/q − 1) + ½ (accounting.md §1).
    """
    z0 = sigma**2 * math.log(1.0 / q - 1.0) + 0.5
    log_q, log_1mq = math.log(q), math.log1p(-q)
    inv_2s2 = 0.5 / sigma**2
    # C(α, i) has max(0, i − ⌊α⌋ − 1) negative factors (α − k, k > α).
    first_negative = math.floor(alpha) + 1
    lgamma_alpha = float(special.gammaln(alpha + 1.0))
    logs: list[np.ndarray] = []
    signs: list[np.ndarray] = []
    half = _FRAC_CHUNK // 2
    start = 0
    while start < _FRAC_MAX_TERMS:
        i = np.arange(start, start + _FRAC_CHUNK, dtype=float)
        j = alpha - i
        log_coef = lgamma_alpha - special.gammaln(i + 1.0) - special.gammaln(j + 1.0)
        sign = np.where((np.maximum(i - first_negative, 0.0) % 2) == 1, -1.0, 1.0)
        s0 = log_coef + i * log_q + j * log_1mq + (i * i - i) * inv_2s2 + special.log_ndtr((z0 - i) / sigma)
        s1 = log_coef + j * log_q + i * log_1mq + (j * j - j) * inv_2s2 + special.log_ndtr((j - z0) / sigma)
        logs += [s0, s1]
        signs += [sign, sign]
        start += _FRAC_CHUNK
        # A_α ≥ 1 (a Rényi divergence is ≥ 0), so terms below e^-TAIL are below e^-TAIL · A_α;
        # once they are also decreasing, the alternating tail is bounded by the first of them.
        tail_done = start > alpha + 2 and max(s0[-1], s1[-1]) < -_FRAC_TAIL and bool(np.all(np.diff(s0[-half:]) <= 0)) and bool(np.all(np.diff(s1[-half:]) <= 0))
        if tail_done:
            all_logs = np.concatenate(logs)
            top = float(np.max(all_logs))
            total = math.fsum(np.concatenate(signs) * np.exp(all_logs - top))
            if not total > 0:
                return None
            log_total = top + math.log(total)
            return None if top - log_total > _FRAC_MAX_CANCELLATION else log_total
    return None


@functools.lru_cache(maxsize=512)
def _sampled_gaussian_rdp(q: float, sigma: float, orders: tuple[float, ...]) -> np.ndarray:
    """RDP curve (add/remove one) of a single Poisson-sampled Gaussian step (read-only)."""
    out = np.full(len(orders), np.nan)
    if 0.0 < q < 1.0 and sigma > 0.0:
        for k, alpha in enumerate(orders):
            if not float(alpha).is_integer():
                log_a = _log_a_frac(q, sigma, float(alpha))
                if log_a is not None:
                    out[k] = log_a / (alpha - 1.0)
    rest = [k for k in range(len(orders)) if np.isnan(out[k])]
    if rest:  # integer orders (exact, all terms positive), edge cases and refused orders
        acc = rdp_privacy_accountant.RdpAccountant(orders=[orders[k] for k in rest], neighboring_relation=_NEIGHBOURING["add_or_remove_one"])
        acc.compose(dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(sigma)))
        out[rest] = acc.rdp
    out.setflags(write=False)
    return out


def _add_remove_rdp(event: dpe.DpEvent, orders: tuple[float, ...]) -> np.ndarray:
    if isinstance(event, dpe.PoissonSampledDpEvent) and isinstance(event.event, dpe.GaussianDpEvent):
        return _sampled_gaussian_rdp(float(event.sampling_probability), float(event.event.noise_multiplier), tuple(orders))
    if isinstance(event, dpe.SelfComposedDpEvent):
        if event.count == 0:
            return np.zeros(len(orders))
        return float(event.count) * _add_remove_rdp(event.event, orders)
    if isinstance(event, dpe.ComposedDpEvent):
        total = np.zeros(len(orders))
        for e in event.events:
            total = total + _add_remove_rdp(e, orders)
        return total
    acc = rdp_privacy_accountant.RdpAccountant(orders=list(orders), neighboring_relation=_NEIGHBOURING["add_or_remove_one"])
    acc.compose(event)
    return np.asarray(acc.rdp, dtype=float)


def _drop_empty(event: dpe.DpEvent) -> dpe.DpEvent:
    """Replaces zero-fold self-compositions by ``NoOpDpEvent`` (dp_accounting's PLD refuses count 0)."""
    if isinstance(event, dpe.SelfComposedDpEvent):
        return dpe.NoOpDpEvent() if event.count == 0 else dpe.SelfComposedDpEvent(_drop_empty(event.event), event.count)
    if isinstance(event, dpe.ComposedDpEvent):
        return dpe.ComposedDpEvent([_drop_empty(e) for e in event.events])
    return event


def _rdp_curve(event: dpe.DpEvent, orders: tuple[float, ...], neighbouring: str) -> np.ndarray:
    acc = rdp_privacy_accountant.RdpAccountant(orders=list(orders), neighboring_relation=_NEIGHBOURING[neighbouring])
    if not acc.supports(event):
        raise v.invalid("accountant", f"accountant 'rdp'/'moments' does not support the event {event!r}")
    if neighbouring == "add_or_remove_one":
        return _add_remove_rdp(event, orders)
    acc.compose(event)
    return acc.rdp


def _warn_if_edge(orders: tuple[float, ...], best: int, name: str) -> None:
    if best in (0, len(orders) - 1) and len(orders) > 1:
        warnings.warn(
            f"{name}: the optimal RDP order {orders[best]} lies at the end of the order grid; the bound is valid but may be loose",
            RuntimeWarning,
            stacklevel=3,
        )


def _moments_epsilon(event: dpe.DpEvent, delta: float, neighbouring: str) -> float:
    rdp = _rdp_curve(event, MOMENTS_ORDERS, neighbouring)
    if np.all(rdp == 0):  # zero Rényi divergence: the outputs do not depend on the data
        return 0.0
    orders = np.asarray(MOMENTS_ORDERS, dtype=float)
    eps = rdp + math.log(1.0 / delta) / (orders - 1.0)
    best = int(np.argmin(eps))
    _warn_if_edge(MOMENTS_ORDERS, best, "moments")
    return float(max(eps[best], 0.0))


def _rdp_epsilon(event: dpe.DpEvent, delta: float, neighbouring: str) -> float:
    rdp = _rdp_curve(event, RDP_ORDERS, neighbouring)
    eps, order = rdp_privacy_accountant.compute_epsilon(RDP_ORDERS, rdp, delta)
    if 0 < eps < math.inf and order in RDP_ORDERS:
        _warn_if_edge(RDP_ORDERS, RDP_ORDERS.index(order), "rdp")
    return float(eps)


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


def _pld_epsilon(event: dpe.DpEvent, delta: float, neighbouring: str) -> float:
    acc = pld_privacy_accountant.PLDAccountant(neighboring_relation=_NEIGHBOURING[neighbouring], value_discretization_interval=PLD_DISCRETIZATION)
    if not acc.supports(event):
        raise v.invalid("accountant", f"accountant 'pld' does not support the event {event!r}")
    try:
        acc.compose(event)
        return float(acc.get_epsilon(delta))
    finally:
        del acc
        _release_fft_plans()


_DISPATCH: dict[str, Callable[[dpe.DpEvent, float, str], float]] = {
    "naive": lambda e, d, _n: composition.naive_epsilon(e, d),
    "moments": _moments_epsilon,
    "rdp": _rdp_epsilon,
    "pld": _pld_epsilon,
    "strong": lambda e, d, _n: composition.strong_epsilon(e, d),
}


# --------------------------------------------------------------------------------------------
# Extreme inputs and the PLD memory budget (module docstring)
# --------------------------------------------------------------------------------------------


def _check_counts(event: dpe.DpEvent) -> None:
    """Refuses self-composition counts above :data:`MAX_NUM_STEPS` (float conversions overflow)."""
    if isinstance(event, dpe.SelfComposedDpEvent):
        if isinstance(event.count, numbers.Integral) and not isinstance(event.count, bool) and int(event.count) > MAX_NUM_STEPS:
            raise v.invalid("event", f"event count (num_steps) must be <= 10**18, got {event.count!r}")
        _check_counts(event.event)
    elif isinstance(event, dpe.PoissonSampledDpEvent):
        _check_counts(event.event)
    elif isinstance(event, dpe.ComposedDpEvent):
        for e in event.events:
            _check_counts(e)


def _smallest_active_sigma(event: dpe.DpEvent, active: bool = True) -> float:
    """Smallest σ among Gaussian steps that run at least once with a non-zero sampling rate."""
    if isinstance(event, dpe.GaussianDpEvent):
        return float(event.noise_multiplier) if active else math.inf
    if isinstance(event, dpe.PoissonSampledDpEvent):
        return _smallest_active_sigma(event.event, active and event.sampling_probability > 0)
    if isinstance(event, dpe.SelfComposedDpEvent):
        return _smallest_active_sigma(event.event, active and int(event.count) > 0)
    if isinstance(event, dpe.ComposedDpEvent):
        return min((_smallest_active_sigma(e, active) for e in event.events), default=math.inf)
    return math.inf


def _clamp_sigma(event: dpe.DpEvent) -> dpe.DpEvent:
    """``event`` with every σ above :data:`NOISE_MULTIPLIER_MAX` lowered to it (a valid bound, see module docstring)."""
    if isinstance(event, dpe.GaussianDpEvent):
        return dpe.GaussianDpEvent(NOISE_MULTIPLIER_MAX) if event.noise_multiplier > NOISE_MULTIPLIER_MAX else event
    if isinstance(event, dpe.PoissonSampledDpEvent):
        return dpe.PoissonSampledDpEvent(event.sampling_probability, _clamp_sigma(event.event))
    if isinstance(event, dpe.SelfComposedDpEvent):
        return dpe.SelfComposedDpEvent(_clamp_sigma(event.event), event.count)
    if isinstance(event, dpe.ComposedDpEvent):
        return dpe.ComposedDpEvent([_clamp_sigma(e) for e in event.events])
    return event


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
    relation = _NEIGHBOURING[neighbouring]
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
        pld = pld_lib.from_gaussian_mechanism(sigma, value_discretization_interval=coarse, sampling_prob=q, neighboring_relation=relation)
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


def pld_memory_estimate(event: dpe.DpEvent, *, neighbouring: str = "add_or_remove_one", interval: float = PLD_DISCRETIZATION) -> float | None:
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
    neighbouring = v.choice("neighbouring", neighbouring, tuple(_NEIGHBOURING))
    parts = _pld_gaussian_parts(_clamp_sigma(_drop_empty(event)))
    if parts is None:
        return None
    return float(sum(_pld_part_bytes(c, q, s, sampled, interval, neighbouring) for c, q, s, sampled in parts if c > 0))


def _rdp_supports(event: dpe.DpEvent, neighbouring: str) -> bool:
    return bool(rdp_privacy_accountant.RdpAccountant(neighboring_relation=_NEIGHBOURING[neighbouring]).supports(event))


def _fmt_bytes(n: float) -> str:
    return "an unbounded amount of memory" if not math.isfinite(n) else f"~{n / 1e9:.3g} GB"


def compute_epsilon_detailed(
    event: dpe.DpEvent,
    *,
    delta: float,
    accountant: str = "pld",
    neighbouring: str = "add_or_remove_one",
    memory_budget: float = PLD_MEMORY_BUDGET,
) -> EpsilonResult:
    """ε at ``delta`` under the named accountant, with the accountant that actually produced it.

    Like :func:`compute_epsilon`, but never warns: a ``pld`` request whose grid would exceed
    ``memory_budget`` bytes (:func:`pld_memory_estimate`) is answered by ``rdp``, reported in
    :attr:`EpsilonResult.computed_by` and :attr:`EpsilonResult.note`.

    Args:
        event: a ``dp_accounting`` DpEvent describing everything that touched the data.
        delta: target δ ∈ (0, 1).
        accountant: one of :data:`ACCOUNTANTS`.
        neighbouring: ``add_or_remove_one`` (the DP-SGD analysis) or ``replace_one``.
        memory_budget: bytes the PLD accountant may use (default :data:`PLD_MEMORY_BUDGET`).

    An accountant whose formula does not apply (``naive``/``strong`` on anything but
    Poisson-sampled Gaussian steps under add/remove-one) declines: the result has ``declined``
    set, ``epsilon`` = ∞ and the reason in ``note``.

    Raises:
        ValueError: unknown accountant or neighbouring relation, δ outside (0, 1), a step count
            above :data:`MAX_NUM_STEPS`, or an event ``moments``/``rdp``/``pld`` cannot analyse.
    """
    delta = v.open_unit("delta", delta)
    accountant = v.choice("accountant", accountant, ACCOUNTANTS)
    neighbouring = v.choice("neighbouring", neighbouring, tuple(_NEIGHBOURING))
    memory_budget = v.positive("memory_budget", memory_budget, allow_inf=True)
    if not isinstance(event, dpe.DpEvent):
        raise v.invalid_type("event", f"event must be a dp_accounting DpEvent, got {event!r}")
    _check_counts(event)
    if _contains_non_private(event):
        return EpsilonResult(math.inf, accountant, accountant)
    event = _drop_empty(event)
    if accountant in ("strong", "naive"):
        reason = composition.decline_reason(event, neighbouring)
        if reason:
            return EpsilonResult(math.inf, accountant, accountant, reason, declined=True)
    smallest = _smallest_active_sigma(event)
    if smallest < NOISE_MULTIPLIER_MIN:
        note = f"noise multiplier {smallest:g} < {NOISE_MULTIPLIER_MIN:g}: epsilon exceeds the floating-point range, reported as inf"
        return EpsilonResult(math.inf, accountant, accountant, note)
    event = _clamp_sigma(event)
    if accountant == "pld":
        need = pld_memory_estimate(event, neighbouring=neighbouring)
        if need is not None and need > memory_budget:
            if not _rdp_supports(event, neighbouring):
                raise v.invalid("accountant", f"accountant 'pld' would need {_fmt_bytes(need)} for this event (budget {memory_budget / 1e9:.3g} GB), and 'rdp' cannot analyse it under {neighbouring}")
            note = f"pld would need {_fmt_bytes(need)} (budget {memory_budget / 1e9:.3g} GB); using rdp instead"
            return EpsilonResult(_rdp_epsilon(event, delta, neighbouring), accountant, "rdp", note)
        eps = _pld_epsilon(event, delta, neighbouring)
        if math.isinf(eps) and _rdp_supports(event, neighbouring):
            # The event is private (checked above), so an infinite PLD bound means δ lies below
            # the mass dp_accounting's truncations move to +∞ (~1e-15): RDP still resolves it.
            rdp = _rdp_epsilon(event, delta, neighbouring)
            if math.isfinite(rdp):
                note = f"pld cannot resolve delta={delta:g} (below its truncated tail mass); using rdp instead"
                return EpsilonResult(rdp, accountant, "rdp", note)
        return EpsilonResult(eps, accountant, accountant)
    return EpsilonResult(_DISPATCH[accountant](event, delta, neighbouring), accountant, accountant)


def compute_epsilon(event: dpe.DpEvent, *, delta: float, accountant: str = "pld", neighbouring: str = "add_or_remove_one") -> float:
    """ε at ``delta`` of the mechanism described by ``event`` under the named accountant.

    ``pld`` falls back to ``rdp`` (a looser upper bound) when its grid would exceed
    :data:`PLD_MEMORY_BUDGET`, and then warns with :class:`PLDFallbackWarning`; use
    :func:`compute_epsilon_detailed` to learn which accountant answered without a warning.

    Args:
        event: a ``dp_accounting`` DpEvent describing everything that touched the data.
        delta: target δ ∈ (0, 1).
        accountant: one of :data:`ACCOUNTANTS`.
        neighbouring: ``add_or_remove_one`` (the DP-SGD analysis) or ``replace_one``.

    Returns:
        ε_UB as a float; ``math.inf`` if the event contains a non-private step or a noise
        multiplier below :data:`NOISE_MULTIPLIER_MIN`.

    Raises:
        AccountantDeclined: the accountant's formula does not apply to the event (a ValueError).
        ValueError: unknown accountant or neighbouring relation, δ outside (0, 1), a step count
            above :data:`MAX_NUM_STEPS`, or an event the accountant cannot analyse.
    """
    result = compute_epsilon_detailed(event, delta=delta, accountant=accountant, neighbouring=neighbouring)
    if result.declined:
        raise AccountantDeclined(f"accountant {result.accountant!r} declines: {result.note}")
    if result.fell_back:
        warnings.warn(result.note, PLDFallbackWarning, stacklevel=2)
    return result.epsilon


def _bound(result: EpsilonResult) -> float:
    """``result.epsilon``; a declined accountant is an error in a calibration (no ε to aim at)."""
    if result.declined:
        raise AccountantDeclined(f"accountant {result.accountant!r} declines: {result.note}")
    return result.epsilon


def calibrate_noise_multiplier(
    *,
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    num_steps: int,
    accountant: str = "pld",
    tolerance: float = 1e-3,
    memory_budget: float = PLD_SOLVER_MEMORY_BUDGET,
) -> float:
    """Smallest noise multiplier σ (to ``tolerance`` relative) with ε(σ) ≤ ``target_epsilon``.

    Bisection on σ, keeping the upper end of the bracket, so the returned σ never overshoots
    the target: ``compute_epsilon`` at the returned σ is always ≤ ``target_epsilon``. The
    search does not go below σ ≈ 1e-3 (:func:`smallest_noise_multiplier`).

    With ``accountant="pld"``, an evaluation whose grid would exceed ``memory_budget`` bytes
    uses ``rdp`` instead (see :func:`compute_epsilon_detailed`). That happens for small σ
    only (the grid shrinks as σ grows), so ε stays monotone in σ, and since the RDP bound is
    the larger, the returned σ still satisfies the PLD bound ≤ ``target_epsilon``.

    Every accountant bounds DP-SGD at every σ (``naive`` and ``strong`` use the exact Gaussian
    ε0, valid for all ε0, rather than declining where the classical formula fails), so each
    finds its own σ; an accountant that declined would raise :class:`AccountantDeclined`.
    """
    target = v.positive("target_epsilon", target_epsilon)
    delta = v.open_unit("delta", delta)
    v.half_open_unit("sampling_rate", sampling_rate)
    steps = v.integer("num_steps", num_steps, minimum=1)
    accountant = v.choice("accountant", accountant, ACCOUNTANTS)
    tolerance = v.positive("tolerance", tolerance)

    def eps(sigma: float) -> float:
        event = sampled_gaussian_event(sampling_rate=sampling_rate, noise_multiplier=sigma, num_steps=steps)
        return _bound(compute_epsilon_detailed(event, delta=delta, accountant=accountant, memory_budget=memory_budget))

    sigma = smallest_noise_multiplier(eps, target=target, tolerance=tolerance)
    if math.isinf(sigma):
        raise v.invalid("target_epsilon", f"target_epsilon={target!r} is unreachable at delta={delta!r} with any noise multiplier")
    return sigma


def calibrate_num_steps(
    *,
    target_epsilon: float,
    delta: float,
    sampling_rate: float,
    noise_multiplier: float,
    accountant: str = "pld",
    max_steps: int = 10**7,
    memory_budget: float = PLD_SOLVER_MEMORY_BUDGET,
) -> int:
    """Largest number of steps T ≤ ``max_steps`` with ε(T) ≤ ``target_epsilon`` (never overshooting).

    Returns ``max_steps`` itself when even ``max_steps`` steps stay within the target: callers
    should compare the result with ``max_steps`` to tell "the largest T" from "the cap".
    With ``accountant="pld"``, evaluations beyond ``memory_budget`` use ``rdp`` (as in
    :func:`calibrate_noise_multiplier`; the grid grows with T, so ε stays monotone in T).

    Raises:
        ValueError: if even one step exceeds the target, or ``max_steps`` > :data:`MAX_NUM_STEPS`.
    """
    target = v.positive("target_epsilon", target_epsilon)
    delta = v.open_unit("delta", delta)
    v.half_open_unit("sampling_rate", sampling_rate)
    v.positive("noise_multiplier", noise_multiplier)
    accountant = v.choice("accountant", accountant, ACCOUNTANTS)
    max_steps = v.integer("max_steps", max_steps, minimum=1)
    if max_steps > MAX_NUM_STEPS:
        raise v.invalid("max_steps", f"max_steps must be <= 10**18, got {max_steps!r}")

    def eps(steps: int) -> float:
        event = sampled_gaussian_event(sampling_rate=sampling_rate, noise_multiplier=noise_multiplier, num_steps=steps)
        return _bound(compute_epsilon_detailed(event, delta=delta, accountant=accountant, memory_budget=memory_budget))

    steps = largest_num_steps(eps, target=target, max_steps=max_steps)
    if steps == 0:
        raise v.invalid("target_epsilon", f"target_epsilon={target!r} is exceeded by a single step at noise_multiplier={noise_multiplier!r}, sampling_rate={sampling_rate!r}")
    return steps


def smallest_noise_multiplier(epsilon_of: Callable[[float], float], *, target: float, tolerance: float = 1e-3, max_sigma: float = 1e6) -> float:
    """Smallest σ (to ``tolerance`` relative) with ``epsilon_of(σ)`` ≤ ``target``, for any
    mechanism whose ε decreases in σ; ``math.inf`` when even ``max_sigma`` overshoots.

    Bisection keeping the upper end of the bracket, so the result never overshoots.
    """
    lo, hi = 0.0, 1.0
    while epsilon_of(hi) > target:
        lo, hi = hi, hi * 2.0
        if hi > max_sigma:
            return math.inf
    if lo == 0.0:
        lo = hi / 2.0
        while lo > 1e-3 and epsilon_of(lo) <= target:
            hi, lo = lo, lo / 2.0
    while (hi - lo) / hi > tolerance:
        mid = 0.5 * (lo + hi)
        if epsilon_of(mid) <= target:
            hi = mid
        else:
            lo = mid
    return hi


def largest_num_steps(epsilon_of: Callable[[int], float], *, target: float, max_steps: int) -> int:
    """Largest T ≤ ``max_steps`` with ``epsilon_of(T)`` ≤ ``target`` for ε increasing in T;
    0 when a single step already overshoots (never overshooting)."""
    if epsilon_of(1) > target:
        return 0
    lo, hi = 1, 2
    while hi <= max_steps and epsilon_of(hi) <= target:
        lo, hi = hi, hi * 2
    if hi > max_steps:
        if epsilon_of(max_steps) <= target:
            return max_steps
        hi = max_steps
    while hi - lo > 1:  # invariant: epsilon_of(lo) <= target < epsilon_of(hi)
        mid = (lo + hi) // 2
        if epsilon_of(mid) <= target:
            lo = mid
        else:
            hi = mid
    return lo
