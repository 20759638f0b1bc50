"""A record's claim rebuilt from the record's own configuration and metrics, per claim kind.

A stored record states its privacy claim beside the configuration that produced it and the
measured run (steps taken, calibrated σ, queries answered). The claim is what every ε_UB is
evaluated from, so a record whose claim says σ = 10 while its configuration ran σ = 1 must not
be audited or reported: its ε_UB would be 0.17 where the mechanism gives 3.90. Each claim kind
registers how its claim follows from ``(config, metrics, number of members)``, without torch
(reports verify records too), and :func:`check_record_claim` compares the rebuilt claim with the
stored one, naming the first field that differs.

A defense whose configuration type holds the schema rebuilds through that type: the type
implements :class:`ClaimConfig` and registers its loader with :func:`register_claim_config`, so
no key of the defense's schema is spelled here. DP-SGD's configuration
(:class:`defenses.dpsgd.config.DPSGDConfig`) is one: its module is torch-free and is discovered
by name, as every registry discovers its parts (:mod:`dpaudit.registry`). DSSGD's DP upload
is rebuilt from its parameters (Shokri & Shmatikov 2015, §5). PATE's data-dependent RDP curve
(Papernot et al. 2018, §4) cannot be rebuilt without the vote matrix: its aggregator, noise,
query counts and analysis are rebuilt from the configuration, and the ε it states is checked
against the ε the run measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from dpaudit import _validate as v
from dpaudit.privacy.claims import NonPrivateClaim, PrivacyClaim
from dpaudit.registry import Registry
from dpaudit.store import thaw

__all__ = [
    "RebuiltClaim",
    "ClaimRebuilder",
    "CLAIM_REBUILDERS",
    "ClaimRebuilderSpec",
    "ClaimConfig",
    "register_claim_rebuilder",
    "register_claim_config",
    "required",
    "agree",
    "format_number",
    "RELATIVE_TOLERANCE",
    "rebuild_claim",
    "check_record_claim",
]

RELATIVE_TOLERANCE = 1e-9


@dataclass(frozen=True, kw_only=True)
class RebuiltClaim:
    """The claim a record's configuration and metrics imply.

    Attributes:
        claim: the rebuilt claim (its description is not compared: it is prose).
        sources: for a claim field (by its path in :meth:`PrivacyClaim.to_dict`, e.g.
            ``event.event.event.noise_multiplier``, or by its last name), the record field it
            was rebuilt from (e.g. ``config noise_multiplier``), for error messages.
    """

    claim: PrivacyClaim
    sources: Mapping[str, str] = field(default_factory=dict)


#: ``rebuild(stored_claim, config, metrics, num_members) -> RebuiltClaim``; raises ``ValueError``
#: naming the field when the configuration and the metrics disagree with each other.
ClaimRebuilder = Callable[[PrivacyClaim, Mapping[str, object], Mapping[str, object], int], RebuiltClaim]


@dataclass(frozen=True)
class ClaimRebuilderSpec:
    """How claims of one kind are rebuilt from a record.

    Attributes:
        name: the claim kind (:attr:`PrivacyClaim.kind`).
        rebuild: the rebuild function.
    """

    name: str
    rebuild: ClaimRebuilder


@runtime_checkable
class ClaimConfig(Protocol):
    """A defense's configuration type that rebuilds the claim of a record it configured.

    The type owns its schema: it is built from the record's stored configuration by the loader
    given to :func:`register_claim_config` and answers with the claim that configuration,
    ``metrics`` and ``num_members`` imply.
    """

    def rebuild_claim(self, stored: PrivacyClaim, *, metrics: Mapping[str, object], num_members: int) -> RebuiltClaim:
        """The claim this configuration implies; ``ValueError`` naming the field when it and ``metrics`` disagree."""
        ...


#: Every claim kind's rebuilder, by kind. A kind registers its rebuilder beside its claim
#: (:func:`register_claim_rebuilder`) or beside the configuration type that rebuilds it
#: (:func:`register_claim_config`); the first lookup imports every module of
#: :mod:`dpaudit.privacy` and the torch-free configuration modules named here, by name, so
#: this module imports none of the kinds.
CLAIM_REBUILDERS: Registry[ClaimRebuilderSpec] = Registry(
    "claim rebuilder", argument="claim", discover=("dpaudit.privacy", "defenses.dpsgd.config")
)


def register_claim_rebuilder(kind: str) -> Callable[[ClaimRebuilder], ClaimRebuilder]:
    """Decorator: registers how claims of ``kind`` are rebuilt from a record's config and metrics."""

    def add(fn: ClaimRebuilder) -> ClaimRebuilder:
        CLAIM_REBUILDERS.register(ClaimRebuilderSpec(kind, fn))
        return fn

    return add


def register_claim_config(kind: str, load: Callable[[Mapping[str, object]], ClaimConfig]) -> None:
    """Registers that claims of ``kind`` are rebuilt by the configuration ``load`` makes of a record's stored config.

    Args:
        kind: the claim kind (:attr:`PrivacyClaim.kind`).
        load: a stored configuration (a mapping, as ``record.json`` holds it) to the defense's
            configuration value; ``ValueError`` naming the field it cannot read.
    """

    def rebuild(
        stored: PrivacyClaim, config: Mapping[str, object], metrics: Mapping[str, object], num_members: int
    ) -> RebuiltClaim:
        return load(config).rebuild_claim(stored, metrics=metrics, num_members=num_members)

    CLAIM_REBUILDERS.register(ClaimRebuilderSpec(kind, rebuild))


def format_number(x: Any) -> str:
    """A number as error messages print it (floats by ``:g``)."""
    return f"{x:g}" if isinstance(x, float) else repr(x) if isinstance(x, str) else str(x)


def required(where: str, data: Mapping[str, object], key: str) -> Any:
    """``data[key]``, or a ValueError naming the record part (``where``) that lacks it."""
    if key not in data:
        raise ValueError(f"{where} is missing {key!r}, which the claim is rebuilt from")
    return data[key]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=RELATIVE_TOLERANCE, abs_tol=0.0) or a == b
    return bool(a == b)


def agree(what: str, value: Any, against: str, expected: Any) -> None:
    """Refuses ``value`` (named ``what``) unless it equals ``expected`` (named ``against``)."""
    if not _same(value, expected):
        raise ValueError(f"{what}={format_number(value)} does not match {against}={format_number(expected)}")


def rebuild_claim(
    stored: PrivacyClaim, *, config: Mapping[str, object], metrics: Mapping[str, object], num_members: int
) -> RebuiltClaim:
    """The claim of kind ``stored.kind`` that ``config`` and ``metrics`` imply.

    Raises:
        ValueError: no rebuilder for the kind, a field the rebuild needs is missing, or the
            configuration and the metrics disagree (named, with both values).
    """
    if stored.kind not in CLAIM_REBUILDERS:
        raise ValueError(
            f"claim kind {stored.kind!r} has no registered rebuilder, so the claim "
            "cannot be checked against the config; known: "
            f"{', '.join(CLAIM_REBUILDERS)}"
        )
    return CLAIM_REBUILDERS[stored.kind].rebuild(
        stored, thaw(config), thaw(metrics), v.integer("num_members", num_members, minimum=0)
    )


def _first_difference(stored: Any, rebuilt: Any, path: str) -> tuple[str, Any, Any] | None:
    if isinstance(stored, Mapping) and isinstance(rebuilt, Mapping):
        for key in [*rebuilt, *(k for k in stored if k not in rebuilt)]:
            if key == "description" and not path:
                continue
            if key not in stored or key not in rebuilt:
                return (f"{path}.{key}".lstrip("."), stored.get(key), rebuilt.get(key))
            found = _first_difference(stored[key], rebuilt[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(stored, (list, tuple)) and isinstance(rebuilt, (list, tuple)):
        if len(stored) != len(rebuilt):
            return (f"{path} length".lstrip("."), len(stored), len(rebuilt))
        for i, (a, b) in enumerate(zip(stored, rebuilt)):
            found = _first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if _same(stored, rebuilt) else (path.lstrip("."), stored, rebuilt)


def check_record_claim(
    stored: PrivacyClaim, *, config: Mapping[str, object], metrics: Mapping[str, object], num_members: int
) -> None:
    """Refuses a stored claim that differs from the one its record's config and metrics imply.

    Every field that ε_UB depends on is compared (numbers to a relative 1e-9); the description
    is prose and is not.

    Raises:
        ValueError: one line, ``claim FIELD=stored does not match SOURCE=rebuilt``.
    """
    rebuilt = rebuild_claim(stored, config=config, metrics=metrics, num_members=num_members)
    found = _first_difference(stored.to_dict(), rebuilt.claim.to_dict(), "")
    if found is None:
        return
    where, got, want = found
    leaf = where.rsplit(".", 1)[-1].split("[")[0]
    source = (
        rebuilt.sources.get(where)
        or rebuilt.sources.get(leaf)
        or f"the value rebuilt from its config and metrics, {leaf}"
    )
    raise ValueError(f"claim {where}={format_number(got)} does not match {source}={format_number(want)}")


@register_claim_rebuilder("nonprivate")
def _nonprivate(
    stored: PrivacyClaim, config: Mapping[str, object], metrics: Mapping[str, object], num_members: int
) -> RebuiltClaim:
    # ε = ∞ under every accountant: nothing in the config can make it smaller. Which defenses
    # may carry it is the defense registry's business (DefenseSpec.claim_kind_for).
    return RebuiltClaim(claim=NonPrivateClaim(neighbouring=stored.neighbouring, description=stored.description))
