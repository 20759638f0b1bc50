"""Secure-SGD (Phan et al. 2019, Algorithm 1): the HGM noise layer trained with DP-SGD.

The DP-SGD part is the one loop of :func:`defenses.dpsgd.training.train_dpsgd` (with the
authors' batch clipping, the same loop with another release), so the record carries both the
DP claim for the training data and the robustness parameters (ε_r, δ_r, L). Its defaults adapt
to the model and input (both public): the sensitivity control by the first layer's kind
(:func:`defenses.noise_layer.schedule.resolve_sensitivity_control`), L by the input size
(:meth:`defenses.noise_layer.configs.RobustnessConfig.resolved_attack_norm_bound`), the
learning rate by whether the first layer is normalised (:mod:`defenses.dp_defaults`, rule 5).
Registers ``secure-sgd``.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from defenses.dp_defaults import defaults_note, resolve_dp_config
from defenses.dpsgd.plan import plan_dpsgd
from defenses.dpsgd.training import train_dpsgd
from defenses.noise_layer.authors import AuthorsBatchClipping
from defenses.noise_layer.configs import CERTIFIED_MECHANISMS, SecureSGDConfig, certification_spec
from defenses.noise_layer.schedule import scale_invariant_first_layer
from defenses.noise_layer.training import train_certified
from defenses.registry import DEFENSES, DefenseSpec
from dpaudit import _validate as v
from dpaudit.data import DatasetBundle, Splits
from dpaudit.results.record import TrainedModel

__all__ = ["resolve_secure_sgd_config", "train_secure_sgd"]


def resolve_secure_sgd_config(
    config: SecureSGDConfig, *, num_members: int, model_name: str, model_options: dict[str, Any] | None, input_shape: tuple[int, ...], num_classes: int
) -> tuple[SecureSGDConfig, str | None]:
    """Secure-SGD's config with its unset DP-SGD defaults derived (rules 1-5 of :mod:`defenses.dp_defaults`).

    As :func:`defenses.dpsgd.plan.resolve_config`, with rule 5 applied when the first layer is
    normalised (:func:`scale_invariant_first_layer`). ``dpaudit train`` and
    :func:`train_secure_sgd` both resolve through it, so the record's id carries the values that ran.
    """
    if not isinstance(config, SecureSGDConfig):
        raise v.invalid_type("config", f"config must be a SecureSGDConfig, got {type(config).__name__}")
    n = v.integer("num_members", num_members, minimum=1)
    scale_invariant = scale_invariant_first_layer(config, model_name=model_name, model_options=model_options, input_shape=input_shape, num_classes=num_classes)
    resolved, derived = resolve_dp_config(config, num_members=n, scale_invariant_first_layer=scale_invariant)
    note = defaults_note(resolved, derived, num_members=n)
    if note is not None and scale_invariant and "learning_rate" in derived:
        note += " (the lr is raised for the normalised first layer: rule 5 of defenses.dp_defaults)"
    return resolved, note


def train_secure_sgd(
    *,
    bundle: DatasetBundle,
    splits: Splits,
    model_name: str,
    model_options: dict[str, Any] | None = None,
    config: SecureSGDConfig = SecureSGDConfig(),
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> tuple[TrainedModel, nn.Module]:
    """Secure-SGD (Phan et al. 2019, Algorithm 1): HGM noise layer + DP-SGD on the parameters.

    The DP claim (ε, δ for the training data) comes from DP-SGD unchanged: the noise layer
    and the projection of the first layer only post-process or randomize the forward pass,
    and r is computed from the split's population (never from the members). The record's
    config carries the robustness parameters (ε_r, δ_r, L) under ``certification``.

    With ``authors_batch_clipping`` the DP-SGD part clips the batch-mean gradient as the
    authors' code does (:class:`~defenses.noise_layer.authors.AuthorsBatchClipping`, run by the
    one DP-SGD loop through its ``release`` hook); the claim then says its
    ε is NOT a valid guarantee. The other ``authors_*`` options act on the noise layer only
    and leave the DP claim intact (their description is appended all the same).

    Args:
        bundle, splits, model_name, model_options, seed, device, progress: as for
            :func:`defenses.dpsgd.training.train_dpsgd`.
        config: a :class:`SecureSGDConfig`.
    """
    if not isinstance(config, SecureSGDConfig):
        raise v.invalid_type("config", f"config must be a SecureSGDConfig, got {type(config).__name__}")
    config, _ = resolve_secure_sgd_config(config, num_members=len(splits.members), model_name=model_name, model_options=model_options, input_shape=bundle.input_shape, num_classes=bundle.num_classes)
    plan = plan_dpsgd(config, num_members=len(splits.members))
    public = splits.population if len(splits.population) else splits.non_members
    return train_certified(
        "secure-sgd",
        bundle=bundle,
        splits=splits,
        model_name=model_name,
        model_options=model_options,
        config=config,
        seed=seed,
        device=device,
        progress=progress,
        base_train=functools.partial(train_dpsgd, release=AuthorsBatchClipping) if config.authors_batch_clipping else train_dpsgd,
        total_steps=plan.num_steps,
        redistribution_ids=public,
        batch_size=max(1, round(plan.expected_lot_size)),
        learning_rate=config.learning_rate,
    )


def _resolve_defaults(
    config: SecureSGDConfig, *, num_members: int, model_name: str | None = None, model_options: dict[str, Any] | None = None, bundle: Any = None
) -> tuple[SecureSGDConfig, str | None]:
    if model_name is None or bundle is None:
        raise v.invalid("model", "resolving Secure-SGD's defaults needs the model and the dataset (model_name=, bundle=)")
    return resolve_secure_sgd_config(config, num_members=num_members, model_name=model_name, model_options=model_options, input_shape=tuple(bundle.input_shape), num_classes=int(bundle.num_classes))


def _check_budget(config: SecureSGDConfig, *, splits: Splits, **_: Any) -> None:
    """As DP-SGD: with ε, σ and the epochs all given, refuses epochs the budget cannot pay for."""
    if None not in (config.target_epsilon, config.noise_multiplier, config.epochs):
        plan_dpsgd(config, num_members=len(splits.members))


DEFENSES.register(
    DefenseSpec(
        name="secure-sgd",
        config_type=SecureSGDConfig,
        train=train_secure_sgd,
        claim_kind="dp",
        certification=lambda config: certification_spec("secure-sgd", config),
        certified_mechanism=CERTIFIED_MECHANISMS["secure-sgd"],
        derived_options=("noise_layer",),
        per_example_gradients=True,
        resolve_defaults=_resolve_defaults,
        check_budget=_check_budget,
        chance_hint="--sensitivity-control (auto picks by the first layer), --attack-norm-bound, --lot-size, --learning-rate or --epochs",
        summary="HGM noise layer + DP-SGD: DP for the training data and certified robustness (Phan et al. 2019)",
        order=23,
    )
)
