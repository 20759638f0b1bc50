"""The values a ``dpaudit compare`` grid's tables are read into: its own keys, and one per attack section.

:func:`~dpaudit.app.runs.compare.grid.parse_grid` checks every value of a table and builds
one of these; the jobs read its attributes, never keys. Each serialises (:class:`~dpaudit.specs.PlainSpec`)
to the JSON object the grid's jobs have always hashed into their keys (every key present,
``None`` included, except the audit's optional choices, present only when the grid gives them),
so the jobs of a grid stored before these types existed are found again, not redone. The
parser states the defaults of a key the grid leaves out; these values have none of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from dpaudit.specs import PlainSpec, spec_field

__all__ = ["AttackSections", "AuditSection", "EvasionSection", "InversionSection", "MembershipSection", "TopLevel"]


@dataclass(frozen=True, kw_only=True)
class TopLevel:
    """The grid's own keys (all but ``[[defenses]]`` and ``[attacks]``), checked."""

    name: str
    dataset: str
    model: str
    seeds: tuple[int, ...]
    device: str
    member_fraction: float
    delta: float
    confidence: float
    vulnerable_top_k: int


@dataclass(frozen=True, kw_only=True)
class MembershipSection(PlainSpec):
    """``[attacks.membership]``: the membership attacks every trained record faces.

    Attributes:
        attacks: registered membership attacks, in the grid's order.
        num_samples: samples each attack scores (``None``: the attack's default).
        num_shadows: shadow models per attack.
        shadows: ``shared`` (one non-private pool for every target) or ``target`` (each
            target's own recipe).
        shadow_epochs: the shared shadows' epochs (``None``: the baseline's default).
        num_population: the population the shadows are drawn from.
    """

    attacks: tuple[str, ...]
    num_samples: int | None
    num_shadows: int
    shadows: str
    shadow_epochs: int | None
    num_population: int


@dataclass(frozen=True, kw_only=True)
class EvasionSection(PlainSpec):
    """``[attacks.evasion]``: robust accuracy at each radius, certified where a defense certifies.

    Attributes:
        attacks: registered evasion attacks; the strongest at each radius counts.
        radii: the perturbation radii, sorted and distinct.
        norm: the norm of the radii (``l2`` or ``linf``).
        num_examples: test examples attacked (and certified).
        eot_samples: expectation-over-transformation samples (``None``: the attack's default).
        num_draws: certification draws (``None``: certify's default).
        certify: certify the records whose defense certifies.
    """

    attacks: tuple[str, ...]
    radii: tuple[float, ...]
    norm: str
    num_examples: int
    eot_samples: int | None
    num_draws: int | None
    certify: bool


@dataclass(frozen=True, kw_only=True)
class InversionSection(PlainSpec):
    """``[attacks.inversion]``: model inversion against every trained record.

    Attributes:
        attacks: registered inversion attacks (none that needs a prior).
        classes: the labels reconstructed (``None``: every class).
        evaluator_epochs: the evaluation classifier's epochs (``None``: its default).
        iterations: each attack's search bound, through the field the attack names for it
            (``None``: each attack's default).
    """

    attacks: tuple[str, ...]
    classes: tuple[int, ...] | None
    evaluator_epochs: int | None
    iterations: int | None


@dataclass(frozen=True, kw_only=True)
class AuditSection(PlainSpec):
    """``[attacks.audit]``: a canary audit of the algorithm each auditable setting trained.

    Attributes:
        method: the audit game (``one-run`` or ``multi-run``).
        threat, num_canaries, num_trials, canary: as ``dpaudit audit``'s flags; ``None`` (the
            grid does not give it): the audit's default, and absent from the job's key.
    """

    method: str
    threat: str | None = spec_field(default=None, omit="none")
    num_canaries: int | None = spec_field(default=None, omit="none")
    num_trials: int | None = spec_field(default=None, omit="none")
    canary: str | None = spec_field(default=None, omit="none")


class AttackSections(NamedTuple):
    """A grid's attack sections as the jobs read them (``None``: the grid has no such section)."""

    membership: MembershipSection | None
    evasion: EvasionSection | None
    inversion: InversionSection | None
    audit: AuditSection | None
