"""Shadow models trained as a defense trains its target: one at a time, or many as one batched computation.

The membership run (:mod:`dpaudit.app.runs.membership`) hands these to the shadow pools
(:func:`attacks.membership.shadows.ensure_shadows`): a shadow is trained by the target's own
defense and recipe, so the attack's reference models match the target's training.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit import _validate as v
from dpaudit.train_request import TrainRequest

if TYPE_CHECKING:
    pass

#: Per queried sample, its vulnerability judged from the shadows (see attacks.membership.sample_vulnerability).
__all__ = ["batch_shadow_with_defense", "defense_config", "train_shadow_with_defense"]


def train_shadow_with_defense(spec: Any, *, bundle: Any, device: str) -> tuple[Any, Any]:
    """Trains one shadow with the defense and config its ``recipe`` names (a picklable executor trainer).

    The shadow sees exactly ``spec.train_ids`` as members; the defense's own training loop,
    privacy mechanism and hyper-parameters apply, as they did to the target.
    """
    import torch

    from defenses import DEFENSES

    recipe = spec.recipe
    if recipe.defense is None or recipe.config is None:
        raise v.invalid("recipe", f"shadow {spec.shadow_id!r} has no defense to train with (plain SGD trains it)")
    defense = DEFENSES[recipe.defense]
    config = defense_config(defense.config_type, recipe.config)
    with torch.random.fork_rng(devices=[]):  # library code never moves the global RNG
        request = _shadow_request(spec, bundle, config, device)
        record, model = defense.train(request)
    # The cache is keyed by the shadow's id, so the record carries it rather than the defense's own.
    return dataclasses.replace(record, model_id=spec.shadow_id), model.eval()


def _shadow_model(spec: Any) -> Any:
    """One (untrained) model of ``spec``'s architecture, built without moving the global RNG."""
    import torch

    from attacks.membership.shadows import _build

    with torch.random.fork_rng(devices=[]):
        return _build(spec)


def batch_shadow_with_defense(spec: Any, *, bundle: Any) -> Any:
    """How a shadow of a defense's recipe trains batched (:data:`attacks.membership.shadows.ShadowBatcher`), or None.

    The batched trainer (:mod:`dpaudit.batched`) has the non-private baseline's loop and
    DP-SGD's with Poisson lots (full-batch DP-GD at q = 1), each model from its own seed's
    streams; a recipe that needs anything else — another defense, DP-PCA, per-layer clipping,
    shuffled lots, a noise layer — trains one at a time (:func:`train_shadow_with_defense`), and
    so does a DP-SGD shadow of a model that batching makes slower
    (:func:`defenses.dpsgd.batched.batching_pays`).
    The plan (σ calibrated to a budget, q, steps, the learning-rate schedule) and the record
    are the one-at-a-time run's.
    """
    from attacks.membership import ShadowBatch
    from defenses import DEFENSES
    from defenses.dpsgd.batched import batched_dpsgd
    from defenses.dpsgd.config import DPSGDConfig
    from defenses.nonprivate import NonPrivateConfig

    recipe = spec.recipe
    if recipe.defense is None or recipe.config is None or recipe.defense not in DEFENSES:
        return None
    # The registered spec's config type says which loop the defense trains with: exactly the
    # baseline's or DP-SGD's (a defense that extends DP-SGD's config adds a mechanism of its own).
    config_type = DEFENSES[recipe.defense].config_type
    if config_type not in (NonPrivateConfig, DPSGDConfig):
        return None
    if dict(spec.model_options).get("noise_layer") or spec.model_name.startswith("external:"):
        return None
    if config_type is NonPrivateConfig:
        config = defense_config(NonPrivateConfig, recipe.config)
        return ShadowBatch(config=config, record=_batched_nonprivate_record)
    config = defense_config(DPSGDConfig, recipe.config)
    batched = batched_dpsgd(config, num_members=int(spec.train_ids.size), model=_shadow_model(spec))
    if batched is None:
        return None
    return ShadowBatch(config=batched.config, schedule=batched.schedule, record=_batched_dpsgd_record)


def _shadow_request(spec: Any, bundle: Any, config: Any, device: str) -> Any:
    """The request :func:`train_shadow_with_defense` trains ``spec`` with."""
    from dpaudit.data import Splits

    none = np.zeros(0, dtype=np.int64)
    splits = Splits(
        dataset=bundle.name,
        seed=spec.seed,
        members=spec.train_ids,
        non_members=none,
        population=none,
        test=bundle.test.ids.numpy(),
    )
    return TrainRequest(
        bundle=bundle,
        splits=splits,
        model_name=spec.model_name,
        model_options=spec.model_options,
        config=config,
        seed=spec.seed,
        device=device,
        progress=False,
    )


def _batched_nonprivate_record(
    spec: Any, model: Any, *, bundle: Any, device: str, seconds: float, stats: Mapping[str, float]
) -> Any:
    """The record :func:`defenses.nonprivate.train_nonprivate` writes, for a batched shadow."""
    import time

    from defenses._common import build_record
    from defenses.nonprivate import NonPrivateConfig
    from dpaudit.privacy.claims import NonPrivateClaim

    config = defense_config(NonPrivateConfig, spec.recipe.config)
    record = build_record(
        _shadow_request(spec, bundle, config, device),
        defense="nonprivate",
        model=model,
        claim=NonPrivateClaim(),
        started=time.monotonic() - seconds,
        extra_metrics={"num_steps": int(stats["num_steps"])},
    )
    return dataclasses.replace(record, model_id=spec.shadow_id)


def _batched_dpsgd_record(
    spec: Any, model: Any, *, bundle: Any, device: str, seconds: float, stats: Mapping[str, float]
) -> Any:
    """The record :func:`defenses.dpsgd.training.train_dpsgd` writes, for a batched shadow (claim from its steps)."""
    import time

    from defenses._common import build_record
    from defenses.dpsgd.config import DPSGDConfig
    from defenses.dpsgd.plan import plan_dpsgd, resolve_config, run_claim

    config = defense_config(DPSGDConfig, spec.recipe.config)
    m = int(spec.train_ids.size)
    plan = plan_dpsgd(config, num_members=m)
    config, _ = resolve_config(config, num_members=m)
    steps = int(stats["num_steps"])
    claim = run_claim(config, sampling_rate=plan.sampling_rate, noise_multiplier=plan.noise_multiplier, num_steps=steps)
    record = build_record(
        _shadow_request(spec, bundle, config, device),
        defense="dpsgd",
        model=model,
        claim=claim,
        started=time.monotonic() - seconds,
        extra_metrics={
            "num_steps": steps,
            "epochs_completed": steps * plan.sampling_rate,
            "sampling_rate": plan.sampling_rate,
            "noise_multiplier": plan.noise_multiplier,
            "noise_std": plan.noise_std,
            "expected_lot_size": plan.expected_lot_size,
            "mean_lot_size": float(stats["mean_lot_size"]),
            "epsilon": claim.epsilon(delta=config.delta, accountant=config.accountant),
            "epsilon_accountant": config.accountant,
            "delta": config.delta,
            "gradient_canary_steps": 0,
            "train_loss_mean": float(stats["train_loss_mean"]),
        },
    )
    return dataclasses.replace(record, model_id=spec.shadow_id)


def defense_config(config_type: type, stored: Mapping[str, object]) -> Any:
    """The defense config a record states (keys that are not fields, e.g. ``split_seed``, are dropped)."""
    names = {f.name for f in dataclasses.fields(config_type) if f.init}
    return config_type(**{k: (tuple(val) if isinstance(val, list) else val) for k, val in stored.items() if k in names})
