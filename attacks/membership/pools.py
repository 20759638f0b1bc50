"""Shadow pools: which models the attacks of a run need, training them, and evaluating every model once.

One pool is shared by every attack that names it (LiRA online and RMIA online use ``online``;
the shadow attack, LiRA offline and RMIA offline ``offline``); :func:`plan_pools` sizes each by
the largest count its attacks ask for. All models — target and shadows — are evaluated in
inference mode (``model.eval()``), the point Carlini et al. (2022) stress for BatchNorm models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from attacks.membership.queries import predict_queries
from attacks.membership.shadows import (
    POOL_KINDS,
    ShadowRecipe,
    ShadowRun,
    ShadowSpec,
    ShadowTraining,
    ensure_shadows,
    plan_shadows,
)
from attacks.membership.spec import DEFAULT_NUM_SHADOWS, MembershipAttackSpec, MembershipContext, ShadowOutputs
from dpaudit import _validate as v
from dpaudit.data import DatasetBundle
from dpaudit.progress import Progress
from dpaudit.results.record import TrainedModel
from dpaudit.seeding import numpy_rng

__all__ = ["PoolPlan", "plan_pools", "train_pools", "build_context"]


@dataclass(frozen=True, kw_only=True, eq=False)
class PoolPlan:
    """The ids of one shadow pool and its population samples z, before any model is trained."""

    kind: str
    num_models: int
    pool_ids: np.ndarray
    population_ids: np.ndarray
    users: tuple[str, ...]


def plan_pools(
    specs: Mapping[str, tuple[MembershipAttackSpec, Any]],
    *,
    record: TrainedModel,
    sample_ids: np.ndarray,
    seed: int,
    num_population: int,
    train_size: int,
) -> dict[str, PoolPlan]:
    """Which shadow pools the attacks need, how many models each, and their ids.

    One pool is shared by every attack that names it; its size is the largest count any of
    them asks for (RMIA's references are the first LiRA shadows of the same pool); an attack
    that takes the whole pool (count ``None``) does not size it.

    Args:
        specs: attack name → (its spec, its config).
        record: the target (``membership.population`` is the attacker's data).
        sample_ids: the queried ids.
        seed: root seed.
        num_population: population samples z (and the online pool's padding when an
            attack needs z).
        train_size: ids per shadow model.

    Raises:
        ValueError: an offline pool is needed but the record has fewer than 2 population ids.
    """
    population = np.setdiff1d(record.membership.population, sample_ids)
    pop_perm = numpy_rng(seed, "pools").permutation(population)
    out: dict[str, PoolPlan] = {}
    for kind in POOL_KINDS:
        users = [n for n, (s, _) in specs.items() if s.shadow_pool == kind]
        if not users:
            continue
        counts = [c for n in users if (c := specs[n][0].num_shadow_models(specs[n][1])) is not None]
        count = max(counts) if counts else DEFAULT_NUM_SHADOWS
        if kind == "online":
            # Padded with the population samples whether or not an attack in this call uses them,
            # so an attack's shadows (and its result) do not depend on which other attacks ran.
            pad = min(population.size, max(2 * train_size - sample_ids.size, num_population))
            z = np.sort(pop_perm[:pad])
            pool = np.union1d(sample_ids, z)
        else:
            if population.size < 2:
                raise v.invalid(
                    "target",
                    f"attack {users[0]!r} needs population data for shadow models, but the "
                    f"target's record has {population.size} population ids",
                )
            pool = np.sort(
                pop_perm[-min(population.size, 2 * train_size) :]
            )  # the other end of the permutation from the online padding
            z = np.sort(numpy_rng(seed, "z-offline").permutation(pool)[:num_population])
        out[kind] = PoolPlan(
            kind=kind,
            num_models=count,
            pool_ids=pool.astype(np.int64),
            population_ids=z.astype(np.int64),
            users=tuple(users),
        )
    return out


def train_pools(
    pools: Mapping[str, PoolPlan],
    *,
    record: TrainedModel,
    seed: int,
    train_size: int,
    training: ShadowTraining | None = None,
    recipe: ShadowRecipe | None = None,
    **ensure: Any,
) -> tuple[dict[str, list[tuple[np.ndarray, nn.Module]]], dict[str, tuple[ShadowSpec, ...]], ShadowRun]:
    """Plans every pool's shadows and loads or trains them in one batch
    (:func:`attacks.membership.shadows.ensure_shadows`).

    Args:
        pools: from :func:`plan_pools`.
        record: the target (architecture, dataset).
        seed: root seed.
        train_size: ids per shadow.
        training: plain-SGD hyperparameters (default: from the target's config).
        recipe: what ``ensure["trainer"]`` does instead, hashed into the shadows' ids.
        **ensure: keyword arguments of :func:`attacks.membership.shadows.ensure_shadows`.

    Returns:
        Pool kind → ``(train_ids, module)`` per model; pool kind → its specs; the shadow run.
    """
    plans = {
        k: tuple(
            plan_shadows(
                template=record,
                pool_ids=p.pool_ids,
                num_shadows=p.num_models,
                seed=seed,
                kind=k,
                train_size=train_size,
                training=training,
                recipe=recipe,
            )
        )
        for k, p in pools.items()
    }
    run = ensure_shadows([s for k in pools for s in plans[k]], **ensure)
    models: dict[str, list[tuple[np.ndarray, nn.Module]]] = {}
    i = 0
    for kind in pools:
        models[kind] = [
            (s.train_ids, mdl) for s, mdl in zip(plans[kind], run.models[i : i + len(plans[kind])], strict=True)
        ]
        i += len(plans[kind])
    return models, plans, run


def build_context(
    *,
    record: TrainedModel,
    model: nn.Module,
    bundle: DatasetBundle,
    sample_ids: np.ndarray,
    is_member: np.ndarray,
    seed: int,
    augmentations: Sequence[str],
    pools: Mapping[str, PoolPlan],
    shadow_models: Mapping[str, Sequence[tuple[np.ndarray, nn.Module]]],
    device: str = "cpu",
    metadata: Mapping[str, object] | None = None,
    progress: bool = False,
) -> MembershipContext:
    """Evaluates the target and every shadow model once on every id any attack needs.

    Args:
        shadow_models: pool kind → ``(train_ids, module)`` per model, in plan order.
        progress: report each shadow model evaluated on stderr (hundreds of shadows on a
            large pool take minutes).
    """
    everything = bundle.all()
    universe = np.unique(np.concatenate([sample_ids, *[p.pool_ids for p in pools.values()]])).astype(np.int64)
    where = torch.from_numpy(everything.positions(universe))
    feats = everything.features.index_select(0, where)
    labels = everything.labels[where].numpy().astype(np.int64)
    augs = tuple(augmentations)
    outputs = {}
    for kind, plan in pools.items():
        models = list(shadow_models[kind])
        predicted = []
        with Progress(
            len(models),
            f"{kind} shadow models on {universe.size} samples (evaluated)",
            enabled=progress and bool(models),
        ) as bar:
            for index, (_, mdl) in enumerate(models):
                predicted.append(predict_queries(mdl, feats, augs, device, seed=seed, stream=f"{kind}-shadow-{index}"))
                bar.update(1)
        logits = (
            np.stack(predicted) if models else np.zeros((0, universe.size, len(augs), bundle.num_classes), np.float32)
        )
        outputs[kind] = ShadowOutputs(
            kind=kind,
            pool_ids=plan.pool_ids,
            population_ids=plan.population_ids,
            train_ids=tuple(np.asarray(t, np.int64) for t, _ in models),
            logits=logits,
        )
    return MembershipContext(
        model_id=record.model_id,
        sample_ids=sample_ids,
        is_member=is_member,
        universe_ids=universe,
        universe_labels=labels,
        target_logits=predict_queries(model, feats, augs, device, seed=seed, stream="target"),
        augmentations=augs,
        shadows=outputs,
        seed=seed,
        metadata=dict(metadata or {}),
    )
