"""Privacy claims: immutable descriptions of what a defense did to its training data.

A claim *describes* a mechanism once; ε is evaluated from it under a named accountant at a
given δ (docs/architecture.md, "Values and results"). For DP-SGD the description is the
``dp_accounting`` event ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)`` of Abadi et al.
(2016, Algorithm 1); other mechanisms compose into the same event (DP-PCA adds a Gaussian
event). Claims serialise to JSON through a whitelist of event types, never through import
by name, so a claim file received from someone else cannot run code.

Claim kinds:

* :class:`DPClaim` — any mechanism expressible as a ``dp_accounting`` event;
* :class:`NonPrivateClaim` — explicitly no guarantee: ε = ∞ under every accountant;
Every other kind lives beside its mathematics and registers itself in :data:`CLAIM_KINDS`
(PATE's in :mod:`dpaudit.privacy.pate.claim`, DSSGD's in :mod:`dpaudit.privacy.dssgd`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import attr
from dp_accounting import dp_event as dpe

from dpaudit import _validate as v
from dpaudit.privacy.accountant_names import ACCOUNTANTS
from dpaudit.privacy.accountants import compute_epsilon, rehearsing
from dpaudit.privacy.events import sampled_gaussian_event
from dpaudit.registry import Registry
from dpaudit.specs import PlainSpec, spec_field
from dpaudit.store import JsonObject, JsonValue

__all__ = [
    "EpsilonUpperBound",
    "PrivacyClaim",
    "DPClaim",
    "NonPrivateClaim",
    "dpsgd_claim",
    "claim_from_dict",
    "check_claim_size",
    "event_to_dict",
    "event_from_dict",
    "check_event",
    "CLAIM_KINDS",
    "claim_kind",
    "NEIGHBOURING_RELATIONS",
]

NEIGHBOURING_RELATIONS = ("add_or_remove_one", "replace_one")

# Event types a claim file may contain. Anything else in a JSON claim is refused.
_EVENT_TYPES: dict[str, type[dpe.DpEvent]] = {
    cls.__name__: cls
    for cls in (
        dpe.NoOpDpEvent,
        dpe.NonPrivateDpEvent,
        dpe.GaussianDpEvent,
        dpe.LaplaceDpEvent,
        dpe.SelfComposedDpEvent,
        dpe.ComposedDpEvent,
        dpe.PoissonSampledDpEvent,
        dpe.SampledWithReplacementDpEvent,
        dpe.SampledWithoutReplacementDpEvent,
    )
}


def event_to_dict(event: dpe.DpEvent) -> JsonObject:
    """JSON-able form of a ``dp_accounting`` event: ``{"type": ClassName, field: value, …}``."""
    name = type(event).__name__
    if name not in _EVENT_TYPES:
        raise v.invalid_type(
            "event", f"event of type {name!r} cannot be stored in a claim; supported: {', '.join(_EVENT_TYPES)}"
        )
    out: JsonObject = {"type": name}
    for f in attr.fields(type(event)):
        value = getattr(event, f.name)
        if isinstance(value, dpe.DpEvent):
            value = event_to_dict(value)
        elif isinstance(value, (list, tuple)):
            value = [event_to_dict(x) for x in value]
        out[f.name] = value
    return out


def event_from_dict(data: JsonValue, *, path: str = "event") -> dpe.DpEvent:
    """Inverse of :func:`event_to_dict`; only whitelisted event types are built.

    Only the structure is checked here (types, fields, nesting); whether the parameters
    describe a mechanism at all is :func:`check_event`'s job, which every :class:`DPClaim`
    runs on construction.

    Args:
        data: the JSON form.
        path: where ``data`` sits in the claim (named in errors, e.g. ``event.event.count``).
    """
    if not isinstance(data, dict) or "type" not in data:
        raise v.invalid("claim", f"{path} must be a mapping with a 'type' key, got {v.short(data)}")
    name = data["type"]
    if not isinstance(name, str) or name not in _EVENT_TYPES:
        raise v.invalid("claim", f"unknown event type {v.short(name)} at {path}; supported: {', '.join(_EVENT_TYPES)}")
    cls = _EVENT_TYPES[name]
    kwargs: dict[str, object] = {}
    for f in attr.fields(cls):
        if f.name not in data:
            raise v.invalid("claim", f"event {name!r} at {path} is missing field {f.name!r}")
        value = data[f.name]
        if isinstance(value, dict):
            kwargs[f.name] = event_from_dict(value, path=f"{path}.{f.name}")
        elif isinstance(value, list):
            kwargs[f.name] = [event_from_dict(x, path=f"{path}.{f.name}[{i}]") for i, x in enumerate(value)]
        else:  # a parameter: check_event judges it once the event is built
            kwargs[f.name] = value
    return cls(**kwargs)


def check_event(event: dpe.DpEvent, *, path: str = "event") -> None:
    """Refuses an event whose parameters describe no valid mechanism.

    A claim file edited by hand (or damaged) must not be accounted as if it were a
    guarantee: σ ≤ 0 or NaN would make every accountant answer nonsense (or a tiny ε),
    a sampling probability outside (0, 1] is no probability, a step count must be a
    whole number ≥ 0. Messages name the field by its path in the claim and the value.

    Raises:
        ValueError: an invalid parameter (named with its path).
        TypeError: a parameter of the wrong type, or an event that cannot be stored.
    """
    if not isinstance(event, dpe.DpEvent):
        raise v.invalid_type("claim", f"{path} must be a dp_accounting DpEvent, got {v.short(event)}")
    if isinstance(event, (dpe.GaussianDpEvent, dpe.LaplaceDpEvent)):
        v.positive(f"{path}.noise_multiplier", event.noise_multiplier)
    elif isinstance(event, dpe.SelfComposedDpEvent):
        v.integer(f"{path}.count", event.count, minimum=0)
        check_event(event.event, path=f"{path}.event")
    elif isinstance(event, dpe.PoissonSampledDpEvent):
        v.half_open_unit(f"{path}.sampling_probability", event.sampling_probability)
        check_event(event.event, path=f"{path}.event")
    elif isinstance(event, (dpe.SampledWithReplacementDpEvent, dpe.SampledWithoutReplacementDpEvent)):
        size = v.integer(f"{path}.source_dataset_size", event.source_dataset_size, minimum=1)
        sample = v.integer(f"{path}.sample_size", event.sample_size, minimum=1)
        if isinstance(event, dpe.SampledWithoutReplacementDpEvent) and sample > size:
            raise v.invalid(
                "claim",
                f"{path}.sample_size must be <= source_dataset_size ({size}) without replacement, got {sample!r}",
            )
        check_event(event.event, path=f"{path}.event")
    elif isinstance(event, dpe.ComposedDpEvent):
        if not isinstance(event.events, (list, tuple)):
            raise v.invalid_type("claim", f"{path}.events must be a list of events, got {v.short(event.events)}")
        for i, inner in enumerate(event.events):
            check_event(inner, path=f"{path}.events[{i}]")
    elif not isinstance(event, (dpe.NoOpDpEvent, dpe.NonPrivateDpEvent)):
        event_to_dict(event)  # raises TypeError naming the unsupported type


def _gaussian_shape(event: dpe.DpEvent) -> bool | None:
    """``None``: the event's curve is not Gaussian-shaped; else whether it is exactly G_μ.

    Exact: Gaussian events, their (self-)compositions, no-ops and Poisson sampling at q = 1.
    Approximate (central limit, Dong, Roth & Su 2022, Thm 3.5): Poisson sampling at q < 1.
    """
    if isinstance(event, (dpe.GaussianDpEvent, dpe.NoOpDpEvent)):
        return True
    if isinstance(event, dpe.SelfComposedDpEvent):
        return _gaussian_shape(event.event)
    if isinstance(event, dpe.ComposedDpEvent):
        shapes = [_gaussian_shape(e) for e in event.events]
        return None if any(x is None for x in shapes) else all(shapes)
    if isinstance(event, dpe.PoissonSampledDpEvent):
        inner = _gaussian_shape(event.event)
        return None if inner is None else inner and event.sampling_probability == 1
    return None


@dataclass(frozen=True, kw_only=True)
class EpsilonUpperBound:
    """A claim's ε_UB at one δ under every applicable accountant.

    Attributes:
        delta: the δ.
        by_accountant: accountant → ε_UB, every entry a valid upper bound (empty for a claim
            without a privacy mechanism). An accountant that declined or cannot analyse the
            event (``naive``/``strong`` on a non-Gaussian event) has no entry: never NaN or None.
        accountant: the accountant giving the tightest bound (``"none"`` when there is none).
        epsilon: the tightest ε_UB (``math.inf`` without a mechanism).
    """

    delta: float
    by_accountant: Mapping[str, float]
    accountant: str
    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_accountant", dict(self.by_accountant))


# ε_UB per (claim JSON, δ): claims are immutable values and ε_UB a pure function of them, and
# PLD costs up to a second while seeded repetitions audit the same claim many times.
_EPSILONS: dict[tuple[str, float, tuple[str, ...]], dict[str, float]] = {}


@dataclass(frozen=True, kw_only=True)
class PrivacyClaim(PlainSpec):
    """What a defense claims about its training data. Subclasses define :meth:`epsilon`.

    Stored by the type-derived codec (:class:`~dpaudit.specs.PlainSpec`): the kind, the
    neighbouring relation, whether ε is data-dependent and sanitised (derived, written for
    readers of the file, not read back), the description, then each kind's own fields
    (``__spec_keys__``). ``from_dict`` rebuilds through the constructor, so a claim read from
    a file passes exactly the checks a claim built in code does: a hand-edited record with
    σ = −1.1 is refused rather than accounted.

    Attributes:
        neighbouring: the neighbouring relation the guarantee is stated for.
        description: a human-readable account of the mechanism ("DP-SGD q=0.01 σ=4 T=10000").
        dataset_size_public: ``True`` when the guarantee treats |D| as public (as the DP-SGD
            literature and Opacus do: q is derived from it), so a normaliser that depends on the
            dataset size alone is no leak; ``None`` (not stored): not declared, |D| is private.
    """

    __spec_keys__: ClassVar[tuple[str, ...]] = ("kind", "neighbouring", "data_dependent", "sanitised", "description")
    kind: ClassVar[str] = "abstract"

    neighbouring: str = "add_or_remove_one"
    description: str = ""
    dataset_size_public: bool | None = spec_field(default=None, omit="none")

    def __post_init__(self) -> None:
        v.choice("neighbouring", self.neighbouring, NEIGHBOURING_RELATIONS)
        if self.dataset_size_public is not None and not isinstance(self.dataset_size_public, bool):
            raise v.invalid_type(
                "dataset_size_public",
                f"dataset_size_public must be true, false or absent, got {self.dataset_size_public!r}",
            )
        if not isinstance(self.description, str):
            raise v.invalid_type("description", f"description must be a string, got {self.description!r}")

    @property
    def is_private(self) -> bool:
        """Whether the claim asserts any finite guarantee."""
        return True

    @property
    def data_dependent(self) -> bool:
        """Whether ε was computed from the private data itself (PATE's data-dependent analysis).

        Such an ε is private information; reports say so, and whether it was released with
        smooth sensitivity (:attr:`sanitised`).
        """
        return False

    @property
    def sanitised(self) -> bool:
        """Whether a data-dependent ε was released through smooth sensitivity (Papernot et al. 2018, §4.2)."""
        return False

    @property
    def trade_off_family(self) -> str | None:
        """The family the claim's trade-off curve belongs to, or ``None`` when no family is known.

        ``"gaussian"``: the curve is (or is approximated by) a Gaussian-DP curve G_μ (Dong, Roth &
        Su 2022, Def. 2.7), so one (FPR, FNR) point pins μ and the GDP estimator of Nasr et al.
        (2023, §4) and the Gaussian f-DP one-run bound of Mahloujifar, Melis & Chaudhuri (2025)
        apply. ``None``: the audit must use a bound valid for every (ε, δ)-DP mechanism
        (Clopper–Pearson, Steinke et al. 2023). Kinds without a Gaussian event (PATE's argmax of
        noisy votes, Laplace/SVT releases, no mechanism at all) keep the default ``None``:
        a Gaussian curve fitted to their scores can exceed their true ε.
        """
        return None

    @property
    def trade_off_exact(self) -> bool:
        """Whether the claim's curve is *exactly* in :attr:`trade_off_family` (not a central-limit approximation)."""
        return False

    def statement(self) -> str:
        """The description as reports and terminals print it: says when ε is data-dependent and whether it was
        sanitised."""
        if not self.data_dependent:
            return self.description
        how = (
            "released with smooth sensitivity as a noisy estimate (not a bound)"
            if self.sanitised
            else "not sanitised, so it is itself private information"
        )
        return f"{self.description} — ε is data-dependent (computed from the private data), {how}"

    def epsilon(self, *, delta: float, accountant: str = "pld") -> float:
        """ε_UB at ``delta`` under ``accountant`` (``math.inf`` when nothing is guaranteed)."""
        raise NotImplementedError

    #: The accountants that may analyse this kind of claim, in listing order: every registered
    #: one (:data:`~dpaudit.privacy.accountant_names.ACCOUNTANTS`, read at each use, so a newly
    #: registered accountant joins) for an event-based claim; a claim kind with its own analysis
    #: names its own; none for a claim without a mechanism.
    accountants: ClassVar[Collection[str]] = ACCOUNTANTS

    def epsilons(self, *, delta: float) -> dict[str, float]:
        """ε_UB at ``delta`` under every applicable accountant (in registry order).

        This is the one place ε_UB is evaluated; audits and reports show all of these numbers.
        An accountant that cannot analyse the claim's event or declines it (strong composition
        of a non-Gaussian event raises :class:`~dpaudit.privacy.accountants.AccountantDeclined`,
        a ``ValueError``) is left out of the mapping.

        Raises:
            ValueError: no applicable accountant can evaluate the claim.
        """
        delta = v.open_unit("delta", delta)
        key = (json.dumps(self.to_dict(), sort_keys=True, default=str), float(delta), tuple(self.accountants))
        if key not in _EPSILONS:
            values: dict[str, float] = {}
            for name in self.accountants:
                try:
                    values[name] = float(self.epsilon(delta=delta, accountant=name))
                except ValueError:
                    continue
            if self.accountants and not values:
                raise v.invalid(
                    "claim",
                    f"no accountant among {', '.join(self.accountants)} can evaluate the claim {self.description!r}",
                )
            if rehearsing():  # stand-in answers (accountants.rehearsal) are remembered nowhere
                return values
            if len(_EPSILONS) >= 256:
                _EPSILONS.clear()
            _EPSILONS[key] = values
        return dict(_EPSILONS[key])

    def upper_bound(self, *, delta: float) -> EpsilonUpperBound:
        """ε_UB at ``delta`` under every applicable accountant (:meth:`epsilons`), with the tightest named.

        Audits compare ε_LB against the tightest (the bound a careful user would quote);
        reports show every accountant's number. Every value is a valid upper bound (declining
        accountants are absent), so the minimum is one too.
        """
        values = self.epsilons(delta=delta)  # validates delta
        best = min(values, key=values.__getitem__) if values else "none"
        return EpsilonUpperBound(delta=delta, by_accountant=values, accountant=best, epsilon=values.get(best, math.inf))


@dataclass(frozen=True, kw_only=True)
class DPClaim(PrivacyClaim):
    """A differential-privacy claim described by a ``dp_accounting`` event."""

    kind: ClassVar[str] = "dp"
    # A stored claim without its event reads as None, which the constructor refuses: a missing
    # event must never be accounted as the no-op event (ε = 0).
    event: dpe.DpEvent = spec_field(
        default_factory=dpe.NoOpDpEvent, absent=None, encode=event_to_dict, decode=event_from_dict
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.event, dpe.DpEvent):
            raise v.invalid_type("event", f"event must be a dp_accounting DpEvent, got {self.event!r}")
        event_to_dict(self.event)  # refuses events a record could not store
        check_event(self.event)  # σ > 0, q in (0, 1], whole step counts: else no guarantee is described

    def epsilon(self, *, delta: float, accountant: str = "pld") -> float:
        return compute_epsilon(self.event, delta=delta, accountant=accountant, neighbouring=self.neighbouring)

    @property
    def trade_off_family(self) -> str | None:
        """``"gaussian"`` for compositions of (Poisson-sampled) Gaussian events, else ``None``.

        Un-sampled Gaussian steps compose exactly into G_μ with μ = √(Σ μ_i²) (Dong, Roth & Su
        2022, Cor. 3.3). Poisson-sampled steps (DP-SGD) are in the family only approximately: T
        composed C_q(G_μ) tend to G_μ' with μ' = q√(T(e^{μ²} − 1)) (their Thm 3.5), the
        approximation under which Nasr et al. (2023, §4) audit DP-SGD with μ-GDP;
        :attr:`trade_off_exact` says which. Laplace, non-private and other sampling schemes: ``None``.
        """
        return "gaussian" if _gaussian_shape(self.event) is not None else None

    @property
    def trade_off_exact(self) -> bool:
        return bool(_gaussian_shape(self.event))

    def compose(self, other: DPClaim, *, description: str | None = None) -> DPClaim:
        """The claim for running this mechanism and then ``other`` on the same data."""
        if not isinstance(other, DPClaim):
            raise v.invalid_type("other", f"other must be a DPClaim, got {other!r}")
        if other.neighbouring != self.neighbouring:
            raise ValueError(
                "cannot compose claims under different neighbouring relations: "
                f"{self.neighbouring!r} and {other.neighbouring!r}"
            )
        desc = (
            description
            if description is not None
            else " + ".join(d for d in (self.description, other.description) if d)
        )
        return DPClaim(
            event=dpe.ComposedDpEvent([self.event, other.event]), neighbouring=self.neighbouring, description=desc
        )


@dataclass(frozen=True, kw_only=True)
class NonPrivateClaim(PrivacyClaim):
    """No privacy mechanism ran: ε = ∞ under every accountant (explicit, never ``None``)."""

    kind: ClassVar[str] = "nonprivate"
    accountants: ClassVar[Collection[str]] = ()
    description: str = "trained without a privacy mechanism"

    @property
    def is_private(self) -> bool:
        return False

    def epsilon(self, *, delta: float, accountant: str = "pld") -> float:
        v.open_unit("delta", delta)
        v.choice("accountant", accountant, ACCOUNTANTS.names())
        return math.inf


def dpsgd_claim(
    *, sampling_rate: float, noise_multiplier: float, num_steps: int, description: str | None = None
) -> DPClaim:
    """Claim of DP-SGD with Poisson sampling (Abadi et al. 2016, Algorithm 1)."""
    event = sampled_gaussian_event(sampling_rate=sampling_rate, noise_multiplier=noise_multiplier, num_steps=num_steps)
    if description is None:
        description = f"DP-SGD q={sampling_rate:g} sigma={noise_multiplier:g} T={num_steps}"
    return DPClaim(event=event, description=description)


#: Every claim kind, by :attr:`PrivacyClaim.kind`. A kind registers itself where its mathematics
#: is defined (``@CLAIM_KINDS.register``); the first lookup imports every module of
#: :mod:`dpaudit.privacy`, so a record of any kind loads in a process that never imported its
#: defense, and this module imports none of them.
CLAIM_KINDS: Registry[type[PrivacyClaim]] = Registry(
    "claim kind", argument="claim", key=lambda cls: cls.kind, discover=("dpaudit.privacy",)
)
CLAIM_KINDS.register(DPClaim)
CLAIM_KINDS.register(NonPrivateClaim)


def claim_kind(name: str) -> type[PrivacyClaim]:
    """The claim class registered under ``name`` (``"dp"``, ``"nonprivate"``, …).

    Raises:
        ValueError: no claim kind of that name.
    """
    if name not in CLAIM_KINDS:
        raise v.invalid("claim", f"claim kind must be one of {', '.join(CLAIM_KINDS)}; got {name!r}")
    return CLAIM_KINDS[name]


def check_claim_size(data: Any, *, argument: str = "claim", i_know: bool = False) -> int:
    """Refuses a claim's JSON form that nests deeper, or holds more events, than the documented limits.

    Counted without recursion and before any event is built, so that a hostile claim file (an
    event list 10,000 deep, or 100,000 composed events that every accountant would walk for
    minutes) is one line naming ``argument``. The event count is
    :data:`~dpaudit.limits.LIMITS` ``["composed_events"]`` (exceeded only with ``i_know``).

    Returns:
        The number of events its compositions hold (the items of every ``events`` list).
    """
    from dpaudit.limits import LIMITS, check_depth, describe_number

    check_depth(argument, data)
    composed, stack = 0, [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("events"), list):  # a ComposedDpEvent's list: one mechanism each
                composed += len(item["events"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    limit = LIMITS["composed_events"]
    if composed > limit.maximum and not i_know:
        raise v.invalid(
            argument,
            f"{argument} composes {composed:,} events, above the limit "
            f"{describe_number(limit.maximum)} ({limit.why}); pass --i-know "
            "(i_know=True) to run it anyway",
        )
    return composed


def claim_from_dict(data: JsonValue) -> PrivacyClaim:
    """Rebuilds a claim from :meth:`PrivacyClaim.to_dict` output (e.g. a claim JSON file).

    Dispatches on ``kind`` to that kind's :meth:`PrivacyClaim.from_dict`, which validates
    every parameter; wrong types are reported as ``ValueError`` too (the data came from a
    file, not from code).

    Raises:
        ValueError: unknown kind, missing field or invalid parameter (named, with its value).
    """
    if not isinstance(data, dict):
        raise v.invalid("claim", f"claim must be a JSON object, got {v.short(data)}")
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in CLAIM_KINDS:
        raise v.invalid("claim", f"claim kind must be one of {', '.join(CLAIM_KINDS)}; got {v.short(kind)}")
    try:
        return CLAIM_KINDS[kind].from_dict(data)
    except TypeError as exc:
        raise v.invalid("claim", str(exc)) from None
