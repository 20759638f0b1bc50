"""Privacy claims: immutable descriptions of what a defense did to its training data.

A claim *describes* a mechanism once; ε is evaluated from it under a named accountant at a
given δ (DESIGN.md, "Values and procedures"). For DP-SGD the description is the
``dp_accounting`` event ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)`` of Abadi et al.
(2016, Algorithm 1); other mechanisms compose into the same event (DP-PCA adds a Gaussian
event). Claims serialise to JSON through a whitelist of event types, never through import
by name, so a claim file received from someone else cannot run code.

Claim kinds:

* :class:`DPClaim` — any mechanism expressible as a ``dp_accounting`` event;
* :class:`NonPrivateClaim` — explicitly no guarantee: ε = ∞ under every accountant.

Later defenses (PATE, HGM) register their own kinds with :func:`register_claim_kind`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import attr
from dp_accounting import dp_event as dpe

from dpaudit import _validate as v
from dpaudit.privacy.accountants import (
    ACCOUNTANTS,
    compute_epsilon,
    sampled_gaussian_event,
)

__all__ = [
    "EpsilonUpperBound",
    "PrivacyClaim",
    "DPClaim",
    "NonPrivateClaim",
    "dpsgd_claim",
    "claim_from_dict",
    "event_to_dict",
    "event_from_dict",
    "register_claim_kind",
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


def event_to_dict(event: dpe.DpEvent) -> dict[str, Any]:
    """JSON-able form of a ``dp_accounting`` event: ``{"type": ClassName, field: value, …}``."""
    name = type(event).__name__
    if name not in _EVENT_TYPES:
        raise TypeError(f"event of type {name!r} cannot be stored in a claim; supported: {', '.join(_EVENT_TYPES)}")
    out: dict[str, Any] = {"type": name}
    for f in attr.fields(type(event)):
        value = getattr(event, f.name)
        if isinstance(value, dpe.DpEvent):
            value = event_to_dict(value)
        elif isinstance(value, (list, tuple)):
            value = [event_to_dict(x) for x in value]
        out[f.name] = value
    return out


def event_from_dict(data: dict[str, Any]) -> dpe.DpEvent:
    """Inverse of :func:`event_to_dict`; only whitelisted event types are built."""
    if not isinstance(data, dict) or "type" not in data:
        raise ValueError(f"event must be a mapping with a 'type' key, got {data!r}")
    name = data["type"]
    if name not in _EVENT_TYPES:
        raise ValueError(f"unknown event type {name!r} in claim; supported: {', '.join(_EVENT_TYPES)}")
    cls = _EVENT_TYPES[name]
    kwargs: dict[str, Any] = {}
    for f in attr.fields(cls):
        if f.name not in data:
            raise ValueError(f"event {name!r} is missing field {f.name!r}")
        value = data[f.name]
        if isinstance(value, dict):
            value = event_from_dict(value)
        elif isinstance(value, list):
            value = [event_from_dict(x) for x in value]
        kwargs[f.name] = value
    return cls(**kwargs)


@dataclass(frozen=True, kw_only=True)
class EpsilonUpperBound:
    """A claim's ε_UB at one δ under every applicable accountant.

    Attributes:
        delta: the δ.
        by_accountant: accountant → ε_UB (empty for a claim without a privacy mechanism).
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
_EPSILONS: dict[tuple[str, float], dict[str, float]] = {}


@dataclass(frozen=True, kw_only=True)
class PrivacyClaim:
    """What a defense claims about its training data. Subclasses define :meth:`epsilon`.

    Attributes:
        neighbouring: the neighbouring relation the guarantee is stated for.
        description: a human-readable account of the mechanism ("DP-SGD q=0.01 σ=4 T=10000").
    """

    kind: ClassVar[str] = "abstract"
    data_dependent: ClassVar[bool] = False

    neighbouring: str = "add_or_remove_one"
    description: str = ""

    def __post_init__(self) -> None:
        v.choice("neighbouring", self.neighbouring, NEIGHBOURING_RELATIONS)
        if not isinstance(self.description, str):
            raise TypeError(f"description must be a string, got {self.description!r}")

    @property
    def is_private(self) -> bool:
        """Whether the claim asserts any finite guarantee."""
        return True

    def epsilon(self, *, delta: float, accountant: str = "pld") -> float:
        """ε_UB at ``delta`` under ``accountant`` (``math.inf`` when nothing is guaranteed)."""
        raise NotImplementedError

    #: The accountants that can analyse this kind of claim (none for a claim without a mechanism).
    accountants: ClassVar[tuple[str, ...]] = ACCOUNTANTS

    def epsilons(self, *, delta: float) -> dict[str, float]:
        """ε_UB at ``delta`` under every applicable accountant (in registry order).

        This is the one place ε_UB is evaluated; audits and reports show all of these numbers.
        An accountant that cannot analyse the claim's event (strong composition of a
        non-Gaussian event raises ``ValueError``) is left out of the mapping.

        Raises:
            ValueError: no applicable accountant can evaluate the claim.
        """
        delta = v.open_unit("delta", delta)
        key = (json.dumps(self.to_dict(), sort_keys=True, default=str), float(delta))
        if key not in _EPSILONS:
            values: dict[str, float] = {}
            for name in self.accountants:
                try:
                    values[name] = float(self.epsilon(delta=delta, accountant=name))
                except ValueError:
                    continue
            if self.accountants and not values:
                raise ValueError(f"no accountant among {', '.join(self.accountants)} can evaluate the claim {self.description!r}")
            if len(_EPSILONS) >= 256:
                _EPSILONS.clear()
            _EPSILONS[key] = values
        return dict(_EPSILONS[key])

    def upper_bound(self, *, delta: float) -> EpsilonUpperBound:
        """ε_UB at ``delta`` under every applicable accountant (:meth:`epsilons`), with the tightest named.

        Audits compare ε_LB against the tightest (the bound a careful user would quote);
        reports show every accountant's number.
        """
        values = self.epsilons(delta=delta)  # validates delta
        best = min(values, key=values.__getitem__) if values else "none"
        return EpsilonUpperBound(delta=delta, by_accountant=values, accountant=best, epsilon=values.get(best, math.inf))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "neighbouring": self.neighbouring,
            "data_dependent": self.data_dependent,
            "description": self.description,
        }


@dataclass(frozen=True, kw_only=True)
class DPClaim(PrivacyClaim):
    """A differential-privacy claim described by a ``dp_accounting`` event."""

    kind: ClassVar[str] = "dp"
    event: dpe.DpEvent = field(default_factory=dpe.NoOpDpEvent)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.event, dpe.DpEvent):
            raise TypeError(f"event must be a dp_accounting DpEvent, got {self.event!r}")
        event_to_dict(self.event)  # refuses events a record could not store

    def epsilon(self, *, delta: float, accountant: str = "pld") -> float:
        return compute_epsilon(self.event, delta=delta, accountant=accountant, neighbouring=self.neighbouring)

    def compose(self, other: DPClaim, *, description: str | None = None) -> DPClaim:
        """The claim for running this mechanism and then ``other`` on the same data."""
        if not isinstance(other, DPClaim):
            raise TypeError(f"other must be a DPClaim, got {other!r}")
        if other.neighbouring != self.neighbouring:
            raise ValueError(f"cannot compose claims under different neighbouring relations: {self.neighbouring!r} and {other.neighbouring!r}")
        desc = description if description is not None else " + ".join(d for d in (self.description, other.description) if d)
        return DPClaim(event=dpe.ComposedDpEvent([self.event, other.event]), neighbouring=self.neighbouring, description=desc)

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "event": event_to_dict(self.event)}


@dataclass(frozen=True, kw_only=True)
class NonPrivateClaim(PrivacyClaim):
    """No privacy mechanism ran: ε = ∞ under every accountant (explicit, never ``None``)."""

    kind: ClassVar[str] = "nonprivate"
    accountants: ClassVar[tuple[str, ...]] = ()
    description: str = "trained without a privacy mechanism"

    @property
    def is_private(self) -> bool:
        return False

    def epsilon(self, *, delta: float, accountant: str = "pld") -> float:
        v.open_unit("delta", delta)
        v.choice("accountant", accountant, ACCOUNTANTS)
        return math.inf


def dpsgd_claim(*, sampling_rate: float, noise_multiplier: float, num_steps: int, description: str | None = None) -> DPClaim:
    """Claim of DP-SGD with Poisson sampling (Abadi et al. 2016, Algorithm 1)."""
    event = sampled_gaussian_event(sampling_rate=sampling_rate, noise_multiplier=noise_multiplier, num_steps=num_steps)
    if description is None:
        description = f"DP-SGD q={sampling_rate:g} sigma={noise_multiplier:g} T={num_steps}"
    return DPClaim(event=event, description=description)


_CLAIM_KINDS: dict[str, type[PrivacyClaim]] = {"dp": DPClaim, "nonprivate": NonPrivateClaim}


def register_claim_kind(cls: type[PrivacyClaim]) -> type[PrivacyClaim]:
    """Class decorator that makes a new claim kind loadable by :func:`claim_from_dict`."""
    _CLAIM_KINDS[cls.kind] = cls
    return cls


def claim_from_dict(data: dict[str, Any]) -> PrivacyClaim:
    """Rebuilds a claim from :meth:`PrivacyClaim.to_dict` output (e.g. a claim JSON file)."""
    if not isinstance(data, dict):
        raise ValueError(f"claim must be a JSON object, got {data!r}")
    kind = data.get("kind")
    if kind not in _CLAIM_KINDS:
        raise ValueError(f"claim kind must be one of {', '.join(_CLAIM_KINDS)}; got {kind!r}")
    cls = _CLAIM_KINDS[kind]
    kwargs: dict[str, Any] = {k: data[k] for k in ("neighbouring", "description") if k in data}
    if cls is DPClaim:
        if "event" not in data:
            raise ValueError("claim of kind 'dp' is missing its 'event'")
        kwargs["event"] = event_from_dict(data["event"])
    elif hasattr(cls, "from_dict_fields"):
        kwargs.update(cls.from_dict_fields(data))
    return cls(**kwargs)
