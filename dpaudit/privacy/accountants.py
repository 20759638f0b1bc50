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
    as Opacus and TF Privacy do (:mod:`dpaudit.privacy.rdp_accountant`).
``pld``
    Privacy loss distributions (Koskela et al. 2020; Doroshenko et al. 2022), the tightest in
    practice; ``dp_accounting``'s pessimistic estimate, so it stays an upper bound.

The accountants are the entries of the registry :data:`ACCOUNTANTS`
(:mod:`dpaudit.privacy.accountant_names`), one module each under
:mod:`dpaudit.privacy.accounting`; each declares which events it supports, as
``dp_accounting``'s ``supports(event)`` does, and how it computes ε (and δ where it can). This
module applies what they share around that.

Declining: an accountant that does not support an event (``naive`` and ``strong``: anything but
(Poisson-sampled) Gaussian steps under add/remove-one; ``moments``, ``rdp``, ``pld``: what
``dp_accounting`` cannot analyse) gets no number. :func:`compute_epsilon_detailed` returns an
:class:`EpsilonResult` with ``declined`` set, ``epsilon`` = ∞ (trivially valid, so a caller
that ignores the flag stays sound) and the reason in ``note``; :func:`compute_epsilon` raises
:class:`AccountantDeclined` (a ``ValueError``), so a claim's by-accountant mapping leaves the
accountant out and its headline bound picks among the others.

RDP and PLD come from ``dp_accounting``; what it lacks (the standard conversion on integer
orders, strong composition, calibration that never overshoots) is written here, one module per
family: :mod:`~dpaudit.privacy.composition` (``naive``, ``strong``),
:mod:`~dpaudit.privacy.rdp_accountant` (``moments``, ``rdp``), :mod:`~dpaudit.privacy.pld_accountant`
(``pld``), with the events they read in :mod:`~dpaudit.privacy.events` and the calibrations in
:mod:`~dpaudit.privacy.calibration`.

Bounded resources and extreme inputs (issue 11):

* PLD discretises the privacy loss on a grid of step :data:`~dpaudit.privacy.pld_accountant.PLD_DISCRETIZATION`; its
  length
  grows like (per-step loss range) / step and, under composition, with T. Before
  ``dp_accounting`` allocates anything, :func:`compute_epsilon_detailed` estimates the bytes
  the grid will need (:func:`~dpaudit.privacy.pld_accountant.pld_memory_estimate`); above
  :data:`~dpaudit.privacy.pld_accountant.PLD_MEMORY_BUDGET` it answers
  with its fallback's (``rdp``) bound instead, and says so (:class:`EpsilonResult`.computed_by and ``note``;
  :func:`compute_epsilon` additionally warns with :class:`PLDFallbackWarning`). The RDP bound
  is an upper bound too, only looser, so a fallback never understates ε.
* Noise multipliers above :data:`NOISE_MULTIPLIER_MAX` are evaluated at that value: more noise
  is a post-processing of less noise (add independent Gaussian noise), so ε(σ) is
  non-increasing and the bound at the smaller σ holds for the larger one. Below
  :data:`NOISE_MULTIPLIER_MIN` every accountant's bound exceeds ~1e300 and the floating-point
  arithmetic breaks down (NaN, or 0 from underflow), so ε_UB = ∞ is returned: a valid, if
  trivial, upper bound.
* Step counts above :data:`MAX_NUM_STEPS` are refused.

One evaluation per question: :func:`compute_epsilon_detailed` remembers its answers for the
process (keyed by the event's parameters, δ, the accountant's functions, the relation and
whether the evaluation fits the memory budget), so a run that asks the same ε twice —
``train`` stores the claim's ε in the record and then prints every accountant's bound; a σ
calibration ends on the σ the claim then states — pays for the PLD grid once (seconds per
evaluation on a small DP-SGD training).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from dp_accounting import dp_event as dpe

from dpaudit import _validate as v
from dpaudit.privacy.accountant_names import ACCOUNTANTS, MAX_NUM_STEPS, AccountantSpec
from dpaudit.privacy.events import (
    DP_ACCOUNTING_RELATIONS,
    NOISE_MULTIPLIER_MIN,
    check_counts,
    clamp_sigma,
    contains_non_private,
    drop_empty,
    smallest_active_sigma,
)
from dpaudit.privacy.pld_accountant import PLD_MEMORY_BUDGET

__all__ = [
    "ACCOUNTANTS",
    "MAX_NUM_STEPS",
    "AccountantDeclined",
    "AccountantSpec",
    "EpsilonResult",
    "PLDFallbackWarning",
    "Question",
    "clear_epsilon_cache",
    "compute_delta",
    "compute_epsilon",
    "compute_epsilon_detailed",
    "rehearsal",
    "rehearsing",
]


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


#: A warning an evaluation raised: message, category, file, line (replayed with its answer).
_Warned = tuple[Warning | str, type[Warning], str, int]
#: Answers of :func:`compute_epsilon_detailed` in this process (see the module docstring), with
#: the warnings their evaluation raised.
_EPSILON_CACHE: dict[tuple[object, ...], tuple[EpsilonResult, tuple[_Warned, ...]]] = {}
#: The once-per-location registry of replayed warnings (as a module's own registry would be).
_REPLAYED: dict[str | tuple[str, type[Warning], int], int] = {}
#: Entries kept before the oldest go (a calibration makes a few dozen; each entry is small).
_EPSILON_CACHE_SIZE = 1024


@dataclass(frozen=True, kw_only=True)
class Question:
    """An ε a run would ask of an accountant whose cost grows with a grid (:func:`rehearsal`).

    Attributes:
        event: the prepared event; delta: δ; accountant: the accountant's name;
        neighbouring: the relation.
    """

    event: dpe.DpEvent
    delta: float
    accountant: str
    neighbouring: str


#: The questions of the rehearsal in progress (None: none is).
_REHEARSAL: dict[tuple[object, ...], Question] | None = None


@contextmanager
def rehearsal() -> Iterator[list[Question]]:
    """Runs a caller's planning without paying for its costly ε evaluations, to learn which it asks.

    Inside the block, a question to an accountant whose cost grows with a grid (one with a
    ``memory_estimate``: ``pld``) that this process has not answered yet is recorded, once per
    distinct question, and answered by the accountant's fallback (``rdp``: milliseconds) — so a
    σ calibration walks about the evaluations the run will make. Those stand-in answers are
    remembered nowhere. The yielded list holds the questions once the block ends (what
    :mod:`dpaudit.app.estimate` prices). Not re-entrant.
    """
    global _REHEARSAL
    if _REHEARSAL is not None:
        raise RuntimeError("rehearsals do not nest")
    asked: list[Question] = []
    _REHEARSAL = {}
    try:
        yield asked
    finally:
        asked.extend(_REHEARSAL.values())
        _REHEARSAL = None


def rehearsing() -> bool:
    """Whether a :func:`rehearsal` is in progress (its stand-in answers must not be remembered)."""
    return _REHEARSAL is not None


def clear_epsilon_cache() -> None:
    """Forgets every remembered ε (tests that time or count the accountants' work call it)."""
    _EPSILON_CACHE.clear()


def _cache_key(
    event: dpe.DpEvent, delta: float, spec: AccountantSpec, neighbouring: str, over_budget: bool
) -> tuple[object, ...] | None:
    """What an answer depends on: the event's parameters (its ``repr``: class names and exact
    field values), δ, the accountant's and its fallback's functions (a re-registered or patched
    accountant is asked afresh), the relation and whether the evaluation exceeds the memory
    budget (which accountant answers: two budgets both above the need share one answer, as a σ
    calibration's solver budget and the record's default do); ``None`` when it cannot be keyed."""
    fallback = ACCOUNTANTS[spec.fallback] if spec.fallback is not None else None
    try:
        key = (
            repr(event),
            float(delta),
            spec.name,
            spec.epsilon,
            spec.decline,
            spec.memory_estimate,
            None if fallback is None else (fallback.epsilon, fallback.decline),
            neighbouring,
            bool(over_budget),
        )
        hash(key)
    except (TypeError, ValueError):
        return None
    return key


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

    Like :func:`compute_epsilon`, but never warns: a request whose evaluation would exceed
    ``memory_budget`` bytes (``pld``: :func:`~dpaudit.privacy.pld_accountant.pld_memory_estimate`)
    is answered by the accountant's fallback (``rdp``), reported in
    :attr:`EpsilonResult.computed_by` and :attr:`EpsilonResult.note`.

    Args:
        event: a ``dp_accounting`` DpEvent describing everything that touched the data.
        delta: target δ ∈ (0, 1).
        accountant: the name of a registered accountant (:data:`ACCOUNTANTS`).
        neighbouring: ``add_or_remove_one`` (the DP-SGD analysis) or ``replace_one``.
        memory_budget: bytes the accountant may use (default :data:`PLD_MEMORY_BUDGET`).

    An accountant that does not support the event (:meth:`AccountantSpec.supports`; ``naive``
    and ``strong`` bound Poisson-sampled Gaussian steps under add/remove-one only) declines:
    the result has ``declined`` set, ``epsilon`` = ∞ and the reason in ``note``.

    Raises:
        ValueError: unknown accountant or neighbouring relation, δ outside (0, 1), a step count
            above :data:`MAX_NUM_STEPS`, or an evaluation beyond ``memory_budget`` that no
            fallback can answer.
    """
    delta = v.open_unit("delta", delta)
    spec = _spec(accountant)
    event, early = _prepare(event, spec, neighbouring, memory_budget)
    if early is not None:
        return early
    need = spec.memory_estimate(event, neighbouring) if spec.memory_estimate is not None else None
    over_budget = need is not None and need > memory_budget
    key = _cache_key(event, delta, spec, neighbouring, over_budget)
    if key is not None and key in _EPSILON_CACHE:
        result, warned = _EPSILON_CACHE[key]
        _replay(warned)
        return result
    if _REHEARSAL is not None and spec.memory_estimate is not None and spec.fallback is not None and not over_budget:
        fallback = ACCOUNTANTS[spec.fallback]
        if fallback.supports(event, neighbouring):
            if key is not None:
                _REHEARSAL.setdefault(
                    key, Question(event=event, delta=delta, accountant=spec.name, neighbouring=neighbouring)
                )
            # Named as the accountant's own answer: a stand-in is no fallback to warn about.
            return EpsilonResult(fallback.epsilon(event, delta, neighbouring), spec.name, spec.name)
    # Every warning is recorded and then shown through the caller's filters, now and on each
    # later answer of the same question (an edge-of-grid warning is the answer's, not the work's).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _evaluate(event, delta, spec, neighbouring, memory_budget, need)
    warned = tuple((w.message, w.category, w.filename, w.lineno) for w in caught)
    if key is not None:
        if len(_EPSILON_CACHE) >= _EPSILON_CACHE_SIZE:
            del _EPSILON_CACHE[next(iter(_EPSILON_CACHE))]  # the oldest (dicts keep insertion order)
        _EPSILON_CACHE[key] = (result, warned)
    _replay(warned)
    return result


def _replay(warned: tuple[_Warned, ...]) -> None:
    """Shows an evaluation's warnings as if raised again where they were (the caller's filters apply)."""
    for message, category, filename, lineno in warned:
        warnings.warn_explicit(message, category, filename, lineno, registry=_REPLAYED)


def _evaluate(
    event: dpe.DpEvent, delta: float, spec: AccountantSpec, neighbouring: str, memory_budget: float, need: float | None
) -> EpsilonResult:
    """The accountant's answer for a prepared event whose evaluation would need ``need`` bytes
    (:func:`compute_epsilon_detailed`'s work)."""
    fallback = ACCOUNTANTS[spec.fallback] if spec.fallback is not None else None
    if need is not None and need > memory_budget:
        if fallback is None or not fallback.supports(event, neighbouring):
            after = f", and {fallback.name!r} cannot analyse it under {neighbouring}" if fallback is not None else ""
            raise v.invalid(
                "accountant",
                f"accountant {spec.name!r} would need {_fmt_bytes(need)} for this event "
                f"(budget {memory_budget / 1e9:.3g} GB){after}",
            )
        note = (
            f"{spec.name} would need {_fmt_bytes(need)} (budget "
            f"{memory_budget / 1e9:.3g} GB); using {fallback.name} instead"
        )
        return EpsilonResult(fallback.epsilon(event, delta, neighbouring), spec.name, fallback.name, note)
    eps = spec.epsilon(event, delta, neighbouring)
    if math.isinf(eps) and spec.unresolved and fallback is not None and fallback.supports(event, neighbouring):
        # The event is private (checked above), so an infinite bound means δ lies below what
        # the accountant resolves (PLD: the mass dp_accounting's truncations move to +∞, ~1e-15).
        other = fallback.epsilon(event, delta, neighbouring)
        if math.isfinite(other):
            note = f"{spec.name} cannot resolve delta={delta:g} ({spec.unresolved}); using {fallback.name} instead"
            return EpsilonResult(other, spec.name, fallback.name, note)
    return EpsilonResult(eps, spec.name, spec.name)


def _spec(accountant: object) -> AccountantSpec:
    """The registered accountant named ``accountant`` (the message lists every registered name)."""
    name = v.choice("accountant", accountant, ACCOUNTANTS.names())
    return ACCOUNTANTS[name]


def _prepare(
    event: object, spec: AccountantSpec, neighbouring: str, memory_budget: float
) -> tuple[dpe.DpEvent, EpsilonResult | None]:
    """What every accountant shares before its own analysis: validation, then the answers that
    need none (non-private → ∞, a declined event, σ below the floor → ∞); else the normalised event."""
    v.choice("neighbouring", neighbouring, tuple(DP_ACCOUNTING_RELATIONS))
    v.positive("memory_budget", memory_budget, allow_inf=True)
    if not isinstance(event, dpe.DpEvent):
        raise v.invalid_type("event", f"event must be a dp_accounting DpEvent, got {event!r}")
    check_counts(event)
    if contains_non_private(event):
        return event, EpsilonResult(math.inf, spec.name, spec.name)
    event = drop_empty(event)
    reason = spec.decline_reason(event, neighbouring)
    if reason:
        return event, EpsilonResult(math.inf, spec.name, spec.name, reason, declined=True)
    smallest = smallest_active_sigma(event)
    if smallest < NOISE_MULTIPLIER_MIN:
        note = (
            f"noise multiplier {smallest:g} < {NOISE_MULTIPLIER_MIN:g}: epsilon "
            "exceeds the floating-point range, reported as inf"
        )
        return event, EpsilonResult(math.inf, spec.name, spec.name, note)
    return clamp_sigma(event), None


def compute_epsilon(
    event: dpe.DpEvent, *, delta: float, accountant: str = "pld", neighbouring: str = "add_or_remove_one"
) -> float:
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


def compute_delta(
    event: dpe.DpEvent,
    *,
    epsilon: float,
    accountant: str = "pld",
    neighbouring: str = "add_or_remove_one",
    memory_budget: float = PLD_MEMORY_BUDGET,
) -> float:
    """δ at ``epsilon`` of the mechanism described by ``event``, for accountants that give one.

    The counterpart of :func:`compute_epsilon`: an upper bound on the δ(ε) of the mechanism
    (1 for a non-private step or a noise multiplier below :data:`NOISE_MULTIPLIER_MIN`, trivially
    valid). An evaluation beyond ``memory_budget`` is answered by the accountant's fallback,
    with a :class:`PLDFallbackWarning`.

    Args:
        event: a ``dp_accounting`` DpEvent describing everything that touched the data.
        epsilon: ε ≥ 0.
        accountant: a registered accountant whose entry has a ``delta`` (``moments``, ``rdp``, ``pld``).
        neighbouring: ``add_or_remove_one`` or ``replace_one``.
        memory_budget: bytes the accountant may use.

    Raises:
        AccountantDeclined: the accountant does not support the event (a ValueError).
        ValueError: unknown accountant, one without a δ analysis, ε < 0 or not finite, an
            unknown relation, or a step count above :data:`MAX_NUM_STEPS`.
    """
    epsilon = v.non_negative("epsilon", epsilon)
    spec = _spec(accountant)
    if spec.delta is None:
        with_delta = ", ".join(name for name in ACCOUNTANTS.names() if ACCOUNTANTS[name].delta is not None)
        raise v.invalid(
            "accountant",
            f"accountant {spec.name!r} gives no delta for a given epsilon (those "
            f"that do: {with_delta}); got accountant={accountant!r}",
        )
    event, early = _prepare(event, spec, neighbouring, memory_budget)
    if early is not None:
        if early.declined:
            raise AccountantDeclined(f"accountant {spec.name!r} declines: {early.note}")
        return 1.0  # no privacy, or σ below the floor: only the trivial δ is certain
    need = spec.memory_estimate(event, neighbouring) if spec.memory_estimate is not None else None
    if need is not None and need > memory_budget:
        fallback = ACCOUNTANTS[spec.fallback] if spec.fallback is not None else None
        if fallback is None or fallback.delta is None or not fallback.supports(event, neighbouring):
            raise v.invalid(
                "accountant",
                f"accountant {spec.name!r} would need {_fmt_bytes(need)} for this event "
                f"(budget {memory_budget / 1e9:.3g} GB), and no fallback gives its delta",
            )
        warnings.warn(
            f"{spec.name} would need {_fmt_bytes(need)} (budget "
            f"{memory_budget / 1e9:.3g} GB); using {fallback.name} instead",
            PLDFallbackWarning,
            stacklevel=2,
        )
        return fallback.delta(event, epsilon, neighbouring)
    return spec.delta(event, epsilon, neighbouring)
