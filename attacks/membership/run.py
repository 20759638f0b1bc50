"""Running membership attacks: the registered attacks on one context, and the in-process entry point.

The command line goes through :func:`dpaudit.app.runs.membership.run_membership`;
:func:`run_membership_attacks` serves scripts and tests that hold a model in memory.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from torch import nn

from attacks.membership.pools import build_context, plan_pools, train_pools
from attacks.membership.queries import check_query, choose_augmentations
from attacks.membership.shadows import ShadowSpec, ShadowTraining
from attacks.membership.spec import MEMBERSHIP_ATTACKS, MembershipContext, default_configs, expand_attacks
from dpaudit import _validate as v
from dpaudit.data import DatasetBundle
from dpaudit.executors.jobs import Executor
from dpaudit.results import MembershipResult
from dpaudit.results.record import TrainedModel

__all__ = ["run_attacks", "run_membership_attacks", "membership_attack"]


def run_attacks(context: MembershipContext, configs: Mapping[str, object]) -> dict[str, MembershipResult]:
    """Runs each named attack's registered ``run`` on ``context``, timing each.

    Args:
        context: what the attacks read.
        configs: attack name → its config, an instance of the attack's registered ``config_type``
            (checked here, so one registry's config types need no common base).
    """
    out: dict[str, MembershipResult] = {}
    for name, config in configs.items():
        spec = MEMBERSHIP_ATTACKS[name]
        if not isinstance(config, spec.config_type):
            raise TypeError(
                f"config of attack {name!r} must be a {spec.config_type.__name__}, got {type(config).__name__}"
            )
        t0 = time.monotonic()
        result = spec.run(context, config)
        if not isinstance(result, MembershipResult):
            raise TypeError(f"attack {name!r} must return a MembershipResult, got {type(result).__name__}")
        out[name] = dataclasses.replace(result, metadata={**result.metadata, "attack_seconds": time.monotonic() - t0})
    return out


# ----------------------------------------------------------------------------- library entry point
def run_membership_attacks(
    attacks: str | Sequence[str],
    *,
    record: TrainedModel,
    model: nn.Module,
    bundle: DatasetBundle,
    configs: Mapping[str, object] | None = None,
    sample_ids: np.ndarray | Sequence[int] | None = None,
    is_member: np.ndarray | Sequence[bool] | None = None,
    seed: int = 0,
    num_shadows: int | None = None,
    num_queries: int | None = None,
    num_population: int = 1000,
    train_size: int | None = None,
    training: ShadowTraining | None = None,
    shadow_directory: str | os.PathLike[str] | None = None,
    executor: Executor | None = None,
    data_root: str | os.PathLike[str] | None = None,
    device: str = "cpu",
    progress: bool = True,
    on_shadow_trained: Callable[[ShadowSpec, TrainedModel], None] | None = None,
) -> dict[str, MembershipResult]:
    """Runs registered attacks against one target in-process; shadows are trained once and shared.

    The command line goes through :func:`dpaudit.app.runs.membership.run_membership`; this
    entry point serves scripts and tests that hold a model in memory.

    Args:
        attacks: names from :data:`MEMBERSHIP_ATTACKS`, or ``"all"``.
        record: the target's record.
        model: the target module.
        bundle: its dataset.
        configs: attack name → config (default: the config type's defaults).
        sample_ids, is_member: what to score (default: the record's members and non-members).
        seed: root seed.
        num_shadows: shortcut that sets the shadow count (``num_shadows``, RMIA's
            ``num_references``) of every default config.
        num_queries: query augmentations (default: 2 where an augmentation exists, else 1).
        num_population: RMIA's population samples z.
        train_size: ids per shadow (default: the target's number of members).
        training: shadow SGD hyperparameters (default: from the target's config).
        shadow_directory: cache of trained shadows, or ``None``.
        executor, data_root, device, progress, on_shadow_trained: as for
            :func:`attacks.membership.shadows.ensure_shadows`.

    Returns:
        ``{attack: MembershipResult}`` in the order requested.
    """
    started = time.monotonic()
    names = expand_attacks(attacks)
    seed = v.integer("seed", seed, minimum=0)
    num_population = v.integer("num_population", num_population, minimum=1)
    if not isinstance(record, TrainedModel):
        raise v.invalid_type("record", f"record must be a TrainedModel, got {type(record).__name__}")
    if not isinstance(model, nn.Module):
        raise v.invalid_type("model", f"model must be a torch.nn.Module, got {type(model).__name__}")
    chosen = default_configs(names, configs=configs, num_shadows=num_shadows)
    ids, member = check_query(record, bundle, sample_ids, is_member)
    augs = choose_augmentations(bundle, num_queries)
    m = v.integer(
        "train_size", train_size if train_size is not None else max(len(record.membership.members), 1), minimum=1
    )
    pools = plan_pools(
        {n: (MEMBERSHIP_ATTACKS[n], c) for n, c in chosen.items()},
        record=record,
        sample_ids=ids,
        seed=seed,
        num_population=num_population,
        train_size=m,
    )
    shadow_meta: dict[str, int] = {}
    models: dict[str, list[tuple[np.ndarray, nn.Module]]] = {}
    if pools:
        models, _, run = train_pools(
            pools,
            record=record,
            seed=seed,
            train_size=m,
            training=training,
            directory=shadow_directory,
            executor=executor,
            data_root=data_root,
            device=device,
            progress=progress,
            on_trained=on_shadow_trained,
        )
        shadow_meta = {"shadows_trained": len(run.trained), "shadows_reused": len(run.reused)}
    meta = {
        "target_metrics": {k: val for k, val in record.metrics.items() if isinstance(val, (int, float))},
        "dataset": bundle.name,
        "defense": record.defense,
        **shadow_meta,
    }
    context = build_context(
        record=record,
        model=model,
        bundle=bundle,
        sample_ids=ids,
        is_member=member,
        seed=seed,
        augmentations=augs,
        pools=pools,
        shadow_models=models,
        device=device,
        metadata=meta,
    )
    results = run_attacks(context, chosen)
    total = time.monotonic() - started
    return {n: dataclasses.replace(r, metadata={**r.metadata, "total_seconds": total}) for n, r in results.items()}


def membership_attack(attack: str, **kwargs: Any) -> MembershipResult:
    """One attack; see :func:`run_membership_attacks` for the arguments.

    Raises:
        ValueError: ``attack`` is not registered in :data:`MEMBERSHIP_ATTACKS`.
    """
    attack = v.choice("attack", attack, MEMBERSHIP_ATTACKS)
    return run_membership_attacks([attack], **kwargs)[attack]
