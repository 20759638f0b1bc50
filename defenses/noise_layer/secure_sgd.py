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

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from defenses.dp_defaults import defaults_note, resolve_dp_config
from defenses.dp_defaults import derived_learning_rate as derived_learning_rate_dp
from defenses.dpsgd.pca import PCAObserver
from defenses.dpsgd.plan import plan_dpsgd
from defenses.dpsgd.release import ClippedRelease, StepObserver
from defenses.dpsgd.replay import ReplayRecorder, dpsgd_released
from defenses.dpsgd.training import train_dpsgd
from defenses.noise_layer.authors import AuthorsBatchClipping, authors_batch_mean_gradient
from defenses.noise_layer.configs import CERTIFIED_MECHANISMS, SecureSGDConfig, certification_spec
from defenses.noise_layer.schedule import scale_invariant_first_layer
from defenses.noise_layer.training import train_certified
from defenses.registry import DEFENSES, DefenseSpec
from defenses.sgd_defaults import derived_batch_size, derived_learning_rate, first_layer_fan_in
from dpaudit import _validate as v
from dpaudit.compute_budget import (
    PER_EXAMPLE_GRADIENT_FACTOR,
    TRAINING_STEP_FACTOR,
    examples_within,
    forward_flops,
)
from dpaudit.data import Splits
from dpaudit.parts import PlotStyle
from dpaudit.replay import ReplayTrace
from dpaudit.results.record import TrainedModel
from dpaudit.robustness.noise import NoiseLayer, find_noise_layer
from dpaudit.seeding import torch_generator
from dpaudit.train_request import TrainRequest

__all__ = ["replay_secure_sgd", "resolve_secure_sgd_config", "train_secure_sgd"]


def resolve_secure_sgd_config(
    config: SecureSGDConfig,
    *,
    num_members: int,
    model_name: str,
    model_options: Mapping[str, object] | None,
    input_shape: tuple[int, ...],
    num_classes: int,
) -> tuple[SecureSGDConfig, str | None]:
    """Secure-SGD's config with its unset DP-SGD defaults derived (rules 1-5 of :mod:`defenses.dp_defaults`).

    As :func:`defenses.dpsgd.plan.resolve_config`, with rule 5 applied when the first layer is
    normalised (:func:`scale_invariant_first_layer`). ``dpaudit train`` and
    :func:`train_secure_sgd` both resolve through it, so the record's id carries the values that ran.
    """
    if not isinstance(config, SecureSGDConfig):
        raise v.invalid_type("config", f"config must be a SecureSGDConfig, got {type(config).__name__}")
    n = v.integer("num_members", num_members, minimum=1)
    scale_invariant = scale_invariant_first_layer(
        config, model_name=model_name, model_options=model_options, input_shape=input_shape, num_classes=num_classes
    )
    resolved, derived = resolve_dp_config(config, num_members=n, scale_invariant_first_layer=scale_invariant)
    resolved, capped = _within_time_budget(
        resolved,
        derived,
        num_members=n,
        model_name=model_name,
        model_options=model_options,
        input_shape=input_shape,
        num_classes=num_classes,
        scale_invariant=scale_invariant,
    )
    note = defaults_note(resolved, derived, num_members=n)
    if note is not None and capped:
        note += (
            f" (epochs capped at {resolved.epochs:g} so that the DP-SGD loop fits {TRAINING_BUDGET_SECONDS / 60:g} "
            "minutes on 2 CPU cores: dpaudit.compute_budget)"
        )
    if note is not None and scale_invariant and "learning_rate" in derived:
        note += " (the lr is raised for the normalised first layer: rule 5 of defenses.dp_defaults)"
    return resolved, note


#: The derived length's budget for the DP-SGD loop on 2 CPU cores (:mod:`dpaudit.compute_budget`). With
#: the noise-free pre-training and the record's evaluation (expected scores over 16 draws) a default
#: Secure-SGD run on MNIST then stays within 10 minutes.
TRAINING_BUDGET_SECONDS = 300.0


def _within_time_budget(
    config: SecureSGDConfig,
    derived: tuple[str, ...],
    *,
    num_members: int,
    model_name: str,
    model_options: Mapping[str, object] | None,
    input_shape: tuple[int, ...],
    num_classes: int,
    scale_invariant: bool,
) -> tuple[SecureSGDConfig, bool]:
    """A derived length capped (whole epochs, at least 1) so the loop fits ``TRAINING_BUDGET_SECONDS``; an explicit
    one is kept.

    Per example a step costs the forward pass × :data:`~dpaudit.compute_budget.TRAINING_STEP_FACTOR` ×
    :data:`~dpaudit.compute_budget.PER_EXAMPLE_GRADIENT_FACTOR`, counted from the architecture (public). A
    derived learning rate is derived again for the shorter run (rule 2 of :mod:`defenses.dp_defaults`
    depends on the length).
    """
    if "epochs" not in derived or config.epochs is None:
        return config, False
    per_example = (
        forward_flops(model_name, input_shape=input_shape, num_classes=num_classes, model_options=model_options)
        * TRAINING_STEP_FACTOR
        * PER_EXAMPLE_GRADIENT_FACTOR
    )
    budget = examples_within(TRAINING_BUDGET_SECONDS, flops_per_example=per_example)
    epochs = float(max(1, math.floor(budget / num_members)))
    if epochs >= float(config.epochs):
        return config, False
    fills: dict[str, Any] = {"epochs": epochs}
    if "learning_rate" in derived:
        lot = (
            config.lot_size if config.lot_size is not None else max(1, round((config.sampling_rate or 0) * num_members))
        )
        fills["learning_rate"] = derived_learning_rate_dp(
            target_epsilon=config.target_epsilon,
            delta=config.delta,
            num_members=num_members,
            lot_size=min(int(lot), num_members),
            epochs=epochs,
            scale_invariant_first_layer=scale_invariant,
        )
    return dataclasses.replace(config, **fills), True


def _resolved(request: TrainRequest[SecureSGDConfig]) -> SecureSGDConfig:
    """The request's config with the defaults it left unset derived (TypeError for another config type)."""
    config, bundle = request.config, request.bundle
    if not isinstance(config, SecureSGDConfig):
        raise v.invalid_type("config", f"config must be a SecureSGDConfig, got {type(config).__name__}")
    num_members = len(request.splits.members)
    resolved, _ = resolve_secure_sgd_config(
        config,
        num_members=num_members,
        model_name=request.model_name,
        model_options=request.model_options,
        input_shape=bundle.input_shape,
        num_classes=bundle.num_classes,
    )
    return resolved


def train_secure_sgd(
    request: TrainRequest[SecureSGDConfig],
    /,
    *,
    observer: StepObserver | None = None,
    pca_observer: PCAObserver | None = None,
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
        request: as for :func:`defenses.dpsgd.training.train_dpsgd`, with a :class:`SecureSGDConfig`.
        observer, pca_observer: passed to the DP-SGD loop (the neighbouring replay,
            :func:`replay_secure_sgd`).
    """
    config = _resolved(request)
    plan = plan_dpsgd(config, num_members=len(request.splits.members))
    splits = request.splits
    assert config.learning_rate is not None  # resolve_secure_sgd_config derives it
    public = splits.population if len(splits.population) else splits.non_members
    return train_certified(
        "secure-sgd",
        dataclasses.replace(request, config=config),
        base_train=functools.partial(
            train_dpsgd,
            release=_ObservableAuthorsBatchClipping if config.authors_batch_clipping else ClippedRelease,
            observer=observer,
            pca_observer=pca_observer,
        ),
        total_steps=plan.num_steps,
        redistribution_ids=public,
        # The noise-free pre-training behind r is plain SGD on public ids: it takes the non-private
        # defaults' rules (defenses.sgd_defaults), not DP-SGD's lot and rate. DP-SGD's rate is
        # sized for a clipped, noised mean gradient of norm <= C; on the raw gradient of a
        # 512-example lot with momentum it left MNIST's pre-training at loss 2.347 > ln 10.
        batch_size=derived_batch_size(len(public)),
        learning_rate=derived_learning_rate(
            first_layer_fan_in(
                request.model_name,
                input_shape=request.bundle.input_shape,
                num_classes=request.bundle.num_classes,
                model_options=request.model_options,
            )
        ),
    )


class _ObservableAuthorsBatchClipping(AuthorsBatchClipping):
    """The authors' batch clipping with a ``pre_noise`` callback, so the replay sees what it noises.

    Without a callback it is :class:`AuthorsBatchClipping` itself. With one, the pre-noise value
    is the same clipped batch-mean gradient, handed to the callback before the same noise
    N(0, σ²C²)/L is added; the replay compares it against the C / L the accounting assumes.
    """

    pre_noise: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor] | None] | None = None

    def __call__(
        self, features: torch.Tensor, labels: torch.Tensor, lot: torch.Tensor, *, canary: Any
    ) -> tuple[dict[str, torch.Tensor], float]:
        if self.pre_noise is None:
            return super().__call__(features, labels, lot, canary=canary)
        if canary is not None:
            raise v.invalid(
                "canary_gradient",
                "the authors' batch clipping has no per-example clipping a gradient "
                "canary could be clipped like; got a canary",
            )
        grads, loss_sum = authors_batch_mean_gradient(
            self._model,
            self._params,
            features[lot],
            labels[lot],
            clip_norm=self._clip_norm,
            physical_batch_size=self._physical_batch_size,
        )
        replaced = self.pre_noise(grads)
        if replaced is not None:
            grads = replaced
        for g in grads.values():
            g.add_(
                torch.randn(g.shape, generator=self._generator, device=g.device, dtype=g.dtype),
                alpha=self.noise_std / self._expected_lot_size,
            )
        return grads, loss_sum


class _NoiseLayerRecorder(ReplayRecorder):
    """DP-SGD's replay recorder, with the noise layer's training noise keyed by sample id during each lot.

    The noise layer draws each example's training noise by its position in the batch, so one
    record more or less would hand every later example of a lot another draw: the same law, but
    no longer the same randomness per record, and the lots' sums could not be compared. During
    the replay each example's draw is keyed by (seed, step, its sample id) instead — the same
    N(0, I) per example per step — and fresh draws resume after the lot. With the authors'
    fixed training noise (c), one draw already serves every example, and it is left alone.
    """

    def __init__(self, *, clip_norm: float, expected_lot_size: float, seed: int, max_lot: int) -> None:
        super().__init__(clip_norm=clip_norm, expected_lot_size=expected_lot_size)
        self._seed, self._max_lot = seed, max_lot
        self._layer: NoiseLayer | None = None

    def before_lot(self, step: int, lot_ids: np.ndarray, model: nn.Module) -> None:
        layer = find_noise_layer(model)
        if layer is None or layer.fixed_noise is not None:
            return
        if len(lot_ids) > self._max_lot:
            raise v.invalid(
                "physical_batch_size",
                "the replay keys the noise layer's draws over one forward pass per lot; "
                f"physical_batch_size must be >= the lot ({len(lot_ids)}), got "
                f"{self._max_lot}",
            )
        draws = [
            torch.randn(
                (1, *layer.output_shape),
                generator=torch_generator(self._seed, "replay-noise-layer", step, int(i)),
                dtype=layer.redistribution.dtype,
            )
            for i in lot_ids
        ]
        layer.fixed_noise = torch.cat(draws).to(layer.redistribution.device) if draws else None
        self._layer = layer

    def __call__(self, step: int, clipped_sum: dict[str, torch.Tensor], lot_ids: np.ndarray) -> dict[str, torch.Tensor]:
        if self._layer is not None:
            self._layer.fixed_noise, self._layer = None, None  # fresh draws again after the lot
        return super().__call__(step, clipped_sum, lot_ids)


def replay_secure_sgd(request: TrainRequest[SecureSGDConfig], /) -> ReplayTrace:
    """The neighbouring replay of Secure-SGD (:attr:`defenses.registry.DefenseSpec.replay`).

    Secure-SGD's DP claim is DP-SGD's, so its mechanism inputs are the DP-SGD loop's (each
    step's clipped sum with sensitivity C / L, DP-PCA's covariance), recorded by the same
    :class:`~defenses.dpsgd.replay.ReplayRecorder` through :func:`train_secure_sgd` itself,
    with the noise layer's per-example training noise keyed by sample id (same law; see
    :class:`_NoiseLayerRecorder`).
    Its released values are DP-SGD's (:func:`~defenses.dpsgd.replay.dpsgd_released`, the
    model including the noise layer's redistribution r and noise scale) plus the first layer's
    sensitivity the noise layer was calibrated with: r comes from public ids only, so none may
    differ. With ``authors_batch_clipping`` the recorded value is the clipped batch-mean
    gradient, which one example can move by more than C / L: the replay reports it.
    """
    resolved = _resolved(request)
    plan = plan_dpsgd(resolved, num_members=len(request.splits.members))
    recorder = _NoiseLayerRecorder(
        clip_norm=float(resolved.clip_norm),  # type: ignore[arg-type]
        expected_lot_size=plan.expected_lot_size,
        seed=request.seed,
        max_lot=resolved.physical_batch_size,
    )
    record, model = train_secure_sgd(
        dataclasses.replace(request, progress=False), observer=recorder, pca_observer=recorder.pca
    )
    released = dpsgd_released(record, model, config=resolved)
    released["first-layer sensitivity"] = np.asarray(record.metrics["first_layer_sensitivity"], dtype=np.float64)
    released["noise-layer noise std"] = np.asarray(record.metrics["noise_std"], dtype=np.float64)
    return ReplayTrace(defense="secure-sgd", mechanism_inputs=tuple(recorder.inputs), released=released)


def _resolve_defaults(
    config: SecureSGDConfig,
    *,
    num_members: int,
    model_name: str | None = None,
    model_options: Mapping[str, object] | None = None,
    bundle: Any = None,
) -> tuple[SecureSGDConfig, str | None]:
    if model_name is None or bundle is None:
        raise v.invalid(
            "model", "resolving Secure-SGD's defaults needs the model and the dataset (model_name=, bundle=)"
        )
    return resolve_secure_sgd_config(
        config,
        num_members=num_members,
        model_name=model_name,
        model_options=model_options,
        input_shape=tuple(bundle.input_shape),
        num_classes=int(bundle.num_classes),
    )


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
        replay=replay_secure_sgd,
        chance_hint="--sensitivity-control (auto picks by the first layer), "
        "--attack-norm-bound, --lot-size, --learning-rate or --epochs",
        summary="HGM noise layer + DP-SGD: DP for the training data and certified robustness (Phan et al. 2019)",
        order=23,
        style=PlotStyle(colour="#CC79A7", marker="^"),
    )
)
