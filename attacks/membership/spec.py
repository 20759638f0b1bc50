"""What a membership attack is: its spec, the context it reads, the registry it joins.

An attack is one module that defines a frozen config dataclass (its fields declare their
command-line flags with :func:`dpaudit.options.option`), a function ``run(context, config) ->
MembershipResult`` (:class:`MembershipRun`) and registers a :class:`MembershipAttackSpec` with
``MEMBERSHIP_ATTACKS.register(...)``. Its needs are fields of the spec — which shadow pool, how
many models of it, population samples — never checks on its name elsewhere. The command line,
the application run, ``compare``'s grid and the contract suite iterate :data:`MEMBERSHIP_ATTACKS`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from attacks.membership.shadows import POOL_KINDS
from dpaudit import _validate as v
from dpaudit.limits import LIMITS
from dpaudit.options import option_specs
from dpaudit.parts import PlotStyle
from dpaudit.registry import Registry
from dpaudit.results import MembershipResult

__all__ = [
    "MEMBERSHIP_ATTACKS",
    "DEFAULT_NUM_SHADOWS",
    "SHADOW_LIMIT",
    "MembershipAttackSpec",
    "MembershipContext",
    "MembershipRun",
    "ShadowOutputs",
    "check_fields",
    "count",
    "default_configs",
    "expand_attacks",
]

#: Models in a shadow pool when no attack using it states a count.
DEFAULT_NUM_SHADOWS = 16


def count(name: str, value: Any) -> int:
    """A config field's check: a whole number of at least 1."""
    return v.integer(name, value, minimum=1)


def check_fields(config: Any) -> None:
    """Runs every option's validator on its field; the error names the field and the value."""
    for spec in option_specs(type(config)):
        value = getattr(config, spec.field)
        if value is not None and spec.check is not None:
            object.__setattr__(config, spec.field, spec.check(spec.field, value))


#: Shadow and reference counts above this need ``--i-know`` on the command line (the papers use
#: at most 256 for LiRA and 254 for RMIA; each model is one full training).
SHADOW_LIMIT = LIMITS["shadows"]


@dataclass(frozen=True, kw_only=True, eq=False)
class ShadowOutputs:
    """One shadow pool, evaluated on every id of the context's universe.

    Attributes:
        kind: ``online`` (queried ids plus population, each queried id IN for ~half the
            models) or ``offline`` (population only).
        pool_ids: sorted ids the models' training sets were drawn from.
        population_ids: sorted population samples z (RMIA).
        train_ids: per model, its sorted training ids.
        logits: ``(k, U, q, C)`` logits of each model on the universe, per query.
    """

    kind: str
    pool_ids: np.ndarray
    population_ids: np.ndarray
    train_ids: tuple[np.ndarray, ...]
    logits: np.ndarray

    @property
    def num_models(self) -> int:
        return len(self.train_ids)


@dataclass(frozen=True, kw_only=True, eq=False)
class MembershipContext:
    """Everything an attack may read about one target, computed once per run.

    Attributes:
        model_id: the target's id.
        sample_ids: ``(n,)`` sorted ids to score.
        is_member: ``(n,)`` their true membership.
        universe_ids: ``(U,)`` sorted ids every model was evaluated on (queried ids and pools).
        universe_labels: ``(U,)`` their classes.
        target_logits: ``(U, q, C)`` the target's logits per query augmentation.
        augmentations: the q query augmentations (``identity`` first).
        shadows: pool kind → :class:`ShadowOutputs` (only the pools the run's attacks need).
        seed: root seed of the run.
        metadata: facts copied into every result (dataset, defense, target metrics, shadow counts).
    """

    model_id: str
    sample_ids: np.ndarray
    is_member: np.ndarray
    universe_ids: np.ndarray
    universe_labels: np.ndarray
    target_logits: np.ndarray
    augmentations: tuple[str, ...]
    shadows: Mapping[str, ShadowOutputs] = field(default_factory=dict)
    seed: int = 0
    metadata: Mapping[str, object] = field(default_factory=dict)

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Positions of ``ids`` in :attr:`universe_ids`."""
        return np.searchsorted(self.universe_ids, ids)

    @property
    def query_positions(self) -> np.ndarray:
        return self.positions(self.sample_ids)

    @property
    def labels(self) -> np.ndarray:
        """``(n,)`` classes of the queried ids."""
        return self.universe_labels[self.query_positions]

    def query_logits(self) -> np.ndarray:
        """``(n, C)`` the target's logits on the queried ids, identity query."""
        return self.target_logits[self.query_positions, 0]

    def pool(self, kind: str, attack: str) -> ShadowOutputs:
        """The shadow pool ``kind``; a ValueError naming ``attack`` if the run trained none."""
        if kind not in self.shadows:
            raise v.invalid("attack", f"attack {attack!r} needs the {kind} shadow pool, which this context lacks")
        return self.shadows[kind]

    def result(
        self, attack: str, scores: np.ndarray, config: Mapping[str, object], **metadata: object
    ) -> MembershipResult:
        """A :class:`MembershipResult` for this context's queried ids."""
        return MembershipResult(
            attack=attack,
            model_id=self.model_id,
            sample_ids=self.sample_ids,
            scores=np.asarray(scores, dtype=np.float64),
            is_member=self.is_member,
            # Kept so a report can break the attack down by class (TF Privacy's per-class slices).
            labels=np.asarray(self.labels, dtype=np.int64),
            config={"seed": self.seed, **config},
            metadata={**self.metadata, **metadata},
        )


class MembershipRun(Protocol):
    """What a membership attack provides: scores for the context's queried ids (higher = member)."""

    def __call__(self, context: MembershipContext, config: Any, /) -> MembershipResult: ...


@dataclass(frozen=True, kw_only=True)
class MembershipAttackSpec:
    """One registered membership-inference attack.

    Attributes:
        name: registry key and CLI choice.
        summary: one line, citing the paper.
        config_type: frozen dataclass whose fields are declared with :func:`dpaudit.options.option`
            (the CLI flags are generated from them).
        run: ``run(context, config) -> MembershipResult`` (scores: higher = member).
        shadow_pool: ``online``, ``offline`` or ``None`` (no shadow models).
        shadow_count_field: the config field saying how many models of the pool it uses.
        population_samples: whether the attack needs population samples z (RMIA).
        style: its colour, marker and dash in every figure (:class:`dpaudit.parts.PlotStyle`);
            ``None``: chosen by a stable hash of its name.
    """

    name: str
    summary: str
    config_type: type
    run: MembershipRun
    shadow_pool: str | None = None
    shadow_count_field: str | None = None
    population_samples: bool = False
    style: PlotStyle | None = None

    def __post_init__(self) -> None:
        if self.shadow_pool is not None:
            v.choice("shadow_pool", self.shadow_pool, POOL_KINDS)
            if self.shadow_count_field is None:
                raise ValueError(f"attack {self.name!r}: shadow_pool={self.shadow_pool!r} needs shadow_count_field")

    def num_shadow_models(self, config: Any) -> int | None:
        """Models of :attr:`shadow_pool` this attack uses under ``config``: 0 without a pool, ``None`` for "the whole
        pool"."""
        if self.shadow_pool is None or self.shadow_count_field is None:
            return 0
        count = getattr(config, self.shadow_count_field)
        return None if count is None else int(count)

    @property
    def needs_shadows(self) -> bool:
        """Whether the attack reads shadow models (so a run trains its pool first)."""
        return self.shadow_pool is not None


#: Every membership-inference attack, in registration order; each registers itself in its own
#: module of this package. The CLI choices and flags, the runs, ``compare`` and the reports read it.
MEMBERSHIP_ATTACKS: Registry[MembershipAttackSpec] = Registry(
    "membership attack", argument="--attack", discover=("attacks.membership",)
)


def expand_attacks(attacks: str | Sequence[str]) -> list[str]:
    """Registry names, in order, without repeats; ``all`` stands for every registered attack.

    Raises:
        ValueError: an unknown name, or none.
    """
    names = [attacks] if isinstance(attacks, str) else list(attacks)
    out: list[str] = []
    for name in names:
        if name == "all":
            out += [a for a in MEMBERSHIP_ATTACKS if a not in out]
            continue
        v.choice("attack", name, (*MEMBERSHIP_ATTACKS, "all"))
        if name not in out:
            out.append(name)
    if not out:
        raise v.invalid("attacks", "attacks must name at least one attack")
    return out


def default_configs(
    names: Sequence[str], *, configs: Mapping[str, object] | None = None, num_shadows: int | None = None
) -> dict[str, object]:
    """Config per attack: given ones as they are, the rest from their type's defaults.

    ``num_shadows`` (if given) sets the shadow-count field of every defaulted config.
    """
    configs = dict(configs or {})
    unknown = set(configs) - set(names)
    if unknown:
        raise v.invalid("configs", f"configs names attack(s) not run: {sorted(unknown)}")
    out: dict[str, object] = {}
    for name in names:
        spec = MEMBERSHIP_ATTACKS[name]
        if name in configs:
            out[name] = configs[name]
            continue
        kwargs = {spec.shadow_count_field: num_shadows} if num_shadows is not None and spec.shadow_count_field else {}
        out[name] = spec.config_type(**kwargs)
    return out
