"""Training with the noise layer: HGM's redistribution vector, then any base training with the layer installed.

The redistribution r (Phan et al. 2019, Eq. 7) comes from the forward derivative of a noise-free
model pre-trained on ids the caller names; :func:`train_certified` installs the calibrated noise
layer in a base training (non-private SGD for PixelDP/AGM/HGM, the one DP-SGD loop for
Secure-SGD) through its ``prepare_model``/``after_step`` hooks (:class:`NoiseSchedule`), and
turns the base record into the defense's: its id, the stored certification spec, the quirks.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from defenses._common import config_dict, model_id_for
from defenses.noise_layer.authors import authors_quirks, authors_total, quirk_note
from defenses.noise_layer.configs import CERTIFIED_MECHANISMS, RobustnessConfig, certification_spec
from defenses.noise_layer.schedule import NoiseSchedule
from defenses.nonprivate import NonPrivateConfig, train_nonprivate
from dpaudit import _validate as v
from dpaudit.checkpoint import stage_result
from dpaudit.data import Splits
from dpaudit.results.record import TrainedModel
from dpaudit.robustness.certification import AUTHORS_REFERENCE_DELTA
from dpaudit.robustness.noise import NoiseLayer, find_noise_layer, layer_sensitivity, redistribution_from_gradients
from dpaudit.seeding import numpy_rng, torch_generator
from dpaudit.train_request import TrainRequest

__all__ = ["compute_redistribution", "train_certified"]


def compute_redistribution(
    request: TrainRequest[RobustnessConfig],
    /,
    *,
    ids: np.ndarray,
    batch_size: int,
    learning_rate: float,
) -> torch.Tensor:
    """HGM's r: pre-train a noise-free copy on ``ids``, then score ∂L/∂h (Phan et al. 2019, Eq. 7).

    Args:
        request: the defense's training (its resolved config; its model options without the
            noise layer, which the pre-training adds).
        ids: the ids r is computed from (never the members under DP).
        batch_size, learning_rate: of the noise-free pre-training.

    Returns:
        r with the noise layer's output shape (r > 0, Σ r = K; Σ r = 16·16·C with the
        authors' ``authors_redistribution_total``). Under :func:`dpaudit.checkpoint.checkpoints_in`
        it is kept until the training's record is written, so a rerun of an interrupted training
        reuses it instead of pre-training again (and a pre-training interrupted itself resumes).
    """
    ids = np.asarray(ids, dtype=np.int64)
    identity = (
        "redistribution",
        repr(request.config),
        request.model_name,
        dict(request.model_options),
        request.bundle.name,
        request.seed,
        ids,
        batch_size,
        learning_rate,
    )
    r = stage_result(
        "redistribution",
        what="the redistribution vector (noise-free pre-training)",
        identity=identity,
        compute=lambda: _compute_redistribution(request, ids=ids, batch_size=batch_size, learning_rate=learning_rate),
    )
    return r.to(torch.device(request.device))


def _compute_redistribution(
    request: TrainRequest[RobustnessConfig], *, ids: np.ndarray, batch_size: int, learning_rate: float
) -> torch.Tensor:
    bundle, config, seed = request.bundle, request.config, request.seed
    device = torch.device(request.device)
    if len(ids) == 0:
        raise v.invalid(
            "member_fraction",
            "the data for the redistribution vector is empty; use --member-fraction < 1 or redistribute=False",
        )
    empty = np.zeros(0, dtype=np.int64)
    pre_splits = Splits(
        dataset=bundle.name,
        seed=seed,
        members=np.sort(ids),
        non_members=empty,
        population=empty,
        test=np.asarray(bundle.test.ids, dtype=np.int64),
    )
    pretrain = NonPrivateConfig(
        epochs=config.redistribution_pretrain_epochs, batch_size=batch_size, learning_rate=learning_rate
    )
    options = {**request.model_options, "noise_layer": True}
    pre_request = TrainRequest(
        bundle=bundle,
        splits=pre_splits,
        model_name=request.model_name,
        model_options=options,
        config=pretrain,
        seed=seed + 1,
        device=device,
        progress=request.progress,
    )
    _, pre = train_nonprivate(pre_request, progress_label="redistribution pretrain")
    noise = find_noise_layer(pre)
    assert noise is not None  # built with noise_layer=True
    pick = numpy_rng(seed, "redistribution").choice(
        len(ids), size=min(len(ids), config.redistribution_examples), replace=False
    )
    part = bundle.all().subset(np.sort(ids[pick]))
    x, y = part.features.to(device), part.labels.to(device)
    assert isinstance(pre, nn.Sequential)  # add_noise_layer builds a Sequential
    rest = nn.Sequential(*list(pre)[1:])
    pre.eval()
    grads = []
    for xb, yb in zip(x.split(256), y.split(256)):
        h = noise.layer(xb).detach().requires_grad_(True)
        loss = nn.functional.cross_entropy(rest(h), yb, reduction="sum")  # no layer mixes examples: row i is ∂ℓ_i/∂h_i
        (g,) = torch.autograd.grad(loss, h)
        grads.append(g.cpu())
    total = (
        authors_total(noise.output_shape) if getattr(config, "authors_redistribution_total", False) is True else None
    )
    return redistribution_from_gradients(
        torch.cat(grads), inflation=config.inflation, exponent=config.redistribution_exponent, total=total
    )


def _hooks(
    schedule: NoiseSchedule, *, total_steps: int, seed: int, device: torch.device
) -> tuple[Callable[[nn.Module], None], Callable[[int, nn.Module], None]]:
    """The base training's ``prepare_model`` and ``after_step``: install the layer, keep it calibrated."""

    def prepare(model: nn.Module) -> None:
        schedule.prepare(model)
        # The training noise comes from its own seed stream (not torch's global generator), so a
        # run is reproducible and two defenses with the same seed see the same noise draws.
        find_noise_layer(model).generator = torch_generator(seed, "noise-layer", device=device)  # type: ignore[union-attr]
        schedule.start_fixed_noise()

    def after_step(step: int, model: nn.Module) -> None:
        schedule.after_step(step, model)
        if step + 1 >= total_steps:
            schedule.finish()  # the released first layer has exactly Δ_r ≤ 1

    return prepare, after_step


def train_certified(
    defense: str,
    request: TrainRequest[Any],
    /,
    *,
    base_train: Callable[..., tuple[TrainedModel, nn.Module]],
    total_steps: int,
    redistribution_ids: np.ndarray,
    batch_size: int,
    learning_rate: float,
) -> tuple[TrainedModel, nn.Module]:
    """Trains ``base_train`` with ``defense``'s noise layer and returns the defense's record.

    Args:
        defense: a noise-layer defense (a key of :data:`defenses.noise_layer.configs.CERTIFIED_MECHANISMS`).
        request: the training asked for; its config is the defense's (a
            :class:`~defenses.noise_layer.configs.RobustnessConfig`).
        base_train: the training the layer is installed in; it takes the request and
            ``prepare_model``, ``after_step``, ``progress_label`` and ``stateful`` (the schedule,
            whose state its checkpoints keep: :mod:`dpaudit.checkpoint`).
        total_steps: the steps ``base_train`` will take (the noise ramp and the last projection).
        redistribution_ids: the ids HGM's r is computed from (never the members under DP).
        batch_size, learning_rate: of the noise-free pre-training behind r.
    """
    started = time.monotonic()
    device = torch.device(request.device)
    model_options = request.options()
    given = model_options.pop("noise_layer", True)
    if given is not True:
        raise v.invalid(
            "--defense", f"--defense {defense} needs the noise layer; got model_options noise_layer={given!r}"
        )
    mechanism, _ = CERTIFIED_MECHANISMS[defense]
    # The id and the stored config keep the options as given (a derived L stays None, so a rerun
    # finds the record); the calibration and the certification spec use the resolved values.
    # The noise layer is implied by the defense: the id hashes the options without it.
    asked = dataclasses.replace(request, model_options=model_options)
    config = request.config.for_input(request.bundle.input_shape)
    sigma = config.noise_per_sensitivity(mechanism)
    r = None
    if config.redistribute:
        r = compute_redistribution(
            dataclasses.replace(asked, config=config),
            ids=redistribution_ids,
            batch_size=batch_size,
            learning_rate=learning_rate,
        )
    schedule = NoiseSchedule(
        sigma=sigma, redistribution=r, config=config, input_shape=request.bundle.input_shape, total_steps=total_steps
    )
    prepare, after_step = _hooks(schedule, total_steps=total_steps, seed=request.seed, device=device)
    layered = dataclasses.replace(asked, model_options={**model_options, "noise_layer": True}, config=config)
    record, model = base_train(
        layered, progress_label=defense, prepare_model=prepare, after_step=after_step, stateful=schedule
    )
    noise = find_noise_layer(model)
    assert noise is not None
    noise.generator = None  # a released model draws fresh noise; certification seeds its own stream
    sensitivity = schedule.finish()
    # The id is computed from the options as given (the noise layer is implied by the defense),
    # so the CLI finds the record again on a rerun.
    model_id = model_id_for(asked, defense=defense)
    metrics = {
        **record.metrics,
        "noise_std": float(noise.noise_std),
        "first_layer_sensitivity": sensitivity,
        "noise_multiplier_robustness": sigma / config.attack_norm_bound,
        "redistribution_min": float(noise.redistribution.min()),
        "redistribution_max": float(noise.redistribution.max()),
        "train_seconds": time.monotonic() - started,
        "sensitivity_control": schedule.control,  # what ``auto`` resolved to on this model
    }
    record = dataclasses.replace(
        record,
        model_id=model_id,
        defense=defense,
        model_options={**model_options, "noise_layer": True},
        metrics=metrics,
    )
    return _with_certification(
        record,
        defense,
        config=config,
        given_config=request.config,
        noise=noise,
        split_seed=request.splits.seed,
        input_shape=request.bundle.input_shape,
    ), model


def _with_certification(
    record: TrainedModel,
    defense: str,
    *,
    config: Any,
    given_config: Any,
    noise: NoiseLayer,
    split_seed: int,
    input_shape: tuple[int, ...],
) -> TrainedModel:
    """The record's stored config with the certification spec ``certify`` reads, and every authors' quirk named."""
    spec = certification_spec(defense, config)
    stored = {**config_dict(given_config), "split_seed": split_seed, "certification": spec.to_dict()}
    claim, metrics = record.claim, dict(record.metrics)
    quirks = authors_quirks(config)
    if quirks:
        # Never shown as the paper's mathematics: the record, its certification spec and the
        # claim's description (what `train` and the reports print) name every quirk.
        stored["authors_quirks"] = list(quirks)
        stored["certification"] = {**spec.to_dict(), "authors_quirks": list(quirks)}
        if getattr(config, "authors_mixed_delta", False) is True:
            stored["certification"]["authors_reference_delta"] = AUTHORS_REFERENCE_DELTA
        claim = dataclasses.replace(claim, description=claim.description + quirk_note(config))
        # What `certify` will measure on the released layer, beside the Δ_r training used.
        metrics["first_layer_sensitivity_released"] = layer_sensitivity(
            noise, input_shape=input_shape, norm=config.attack_norm
        )
        metrics["redistribution_sum"] = float(noise.redistribution.double().sum())
    return dataclasses.replace(record, config=stored, claim=claim, metrics=metrics)
