"""One DP-SGD step's release (Abadi et al. 2016, Algorithm 1, steps 2-3): clip, sum, add Gaussian noise.

:class:`ClippedRelease` is the default mechanism of the one training loop
(:func:`defenses.dpsgd.training.train_dpsgd`); a defense that trains through that loop with
another mechanism passes its own :class:`ReleaseFactory`. The pre-noise value of a step can be
observed (and replaced) through ``pre_noise`` — the neighbouring replay's :class:`StepObserver`
(docs/audits/replay.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from defenses.clipping import GradientClipper, clip_gradient
from defenses.dpsgd.config import DPSGDConfig
from defenses.dpsgd.plan import DPSGDPlan
from dpaudit import _validate as v

__all__ = [
    "ClippedRelease",
    "PreNoise",
    "Release",
    "ReleaseFactory",
    "StepObserver",
    "noisy_clipped_sum",
    "parameter_names",
]

PreNoise = Callable[[dict[str, torch.Tensor]], "dict[str, torch.Tensor] | None"]


class StepObserver(Protocol):
    """Sees each step's mechanism input before its noise (the neighbouring replay, docs/audits/replay.md).

    Called once per step with the step index, the release's pre-noise value — ``scale`` ·
    (Σ_{i∈lot} clip(g_i) + canary) with ``scale`` = 1 / the expected lot size, as the release
    computes it — and the sample ids of the lot. What it returns, if not ``None``, replaces
    that value before the noise is added (the replay substitutes a public value, so that both
    runs of a pair follow the same trajectory); ``None`` leaves the step as it was. An observer
    with a ``before_lot(step, lot_ids, model)`` method has it called before the lot's forward
    pass (Secure-SGD's replay keys the noise layer's per-example training noise there).
    """

    def __call__(
        self, step: int, clipped_sum: dict[str, torch.Tensor], lot_ids: np.ndarray
    ) -> dict[str, torch.Tensor] | None: ...


def noisy_clipped_sum(
    clipper: GradientClipper,
    features: torch.Tensor,
    labels: torch.Tensor,
    lot: torch.Tensor,
    *,
    noise_std: float,
    generator: torch.Generator,
    physical_batch_size: int = 1024,
    extra: dict[str, torch.Tensor] | None = None,
    scale: float = 1.0,
    pre_noise: PreNoise | None = None,
) -> tuple[dict[str, torch.Tensor], float]:
    """One lot's released quantity, times ``scale``: Σ_{i∈lot} clip(g_i) (+ ``extra``) + N(0, noise_std² I).

    Args:
        clipper: the clipping engine attached to the model.
        features: all members' features (indexed by ``lot``).
        labels: all members' labels.
        lot: positions of the lot's examples (may be empty).
        noise_std: σ·C, the noise std per coordinate of the (unscaled) sum.
        generator: noise randomness (on the parameters' device).
        physical_batch_size: most examples per forward/backward pass.
        extra: an already-clipped gradient added before the noise (a gradient canary).
        scale: constant multiplying the result (1 / expected lot size gives the update
            direction directly; folded into the clipping factors and the noise scale).
        pre_noise: receives ``scale`` · (Σ clip(g_i) + ``extra``) before the noise is added;
            what it returns, if not ``None``, replaces it (the neighbouring replay's observer,
            :class:`StepObserver`).

    Returns:
        ({parameter name: scale · noisy sum}, Σ loss over the lot).
    """
    total: dict[str, torch.Tensor] | None = None
    loss_sum = 0.0
    for chunk in lot.split(physical_batch_size):
        res = clipper.clipped_sum(features[chunk], labels[chunk], scale=scale)
        if total is None:
            total = res.grads
        else:
            for name, g in res.grads.items():
                total[name].add_(g)
        loss_sum += res.loss_sum
    if total is None:  # empty lot: the release is pure noise
        total = {name: torch.zeros_like(p) for name, p in clipper.parameters().items()}
    if extra is not None:
        for name, g in extra.items():
            total[name].add_(g, alpha=scale)
    if pre_noise is not None:
        replaced = pre_noise(total)
        if replaced is not None:
            total = replaced
    for t in total.values():
        t.add_(torch.randn(t.shape, generator=generator, device=t.device, dtype=t.dtype), alpha=noise_std * scale)
    return total, loss_sum


def parameter_names(model: nn.Module) -> list[str]:
    """Trainable parameter names in the order a flat canary gradient is split by."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def _canary_dict(
    value: dict[str, torch.Tensor] | torch.Tensor, params: dict[str, nn.Parameter]
) -> dict[str, torch.Tensor]:
    if isinstance(value, torch.Tensor):
        total = sum(p.numel() for p in params.values())
        if value.numel() != total:
            raise v.invalid(
                "canary_gradient",
                f"canary_gradient returned a flat tensor of {value.numel()} entries; the model has {total} parameters",
            )
        out, k = {}, 0
        for n, p in params.items():
            out[n] = value.reshape(-1)[k : k + p.numel()].reshape(p.shape).to(p.device, p.dtype)
            k += p.numel()
        return out
    if isinstance(value, dict):
        unknown = set(value) - set(params)
        if unknown:
            raise v.invalid("canary_gradient", f"canary_gradient names unknown parameters {sorted(unknown)!r}")
        return {n: value[n].to(p.device, p.dtype).reshape(p.shape) for n, p in params.items() if n in value}
    raise v.invalid_type(
        "canary_gradient",
        f"canary_gradient must return a dict of tensors, a flat tensor or None, got {type(value).__name__}",
    )


class Release(Protocol):
    """One DP-SGD step's mechanism: a lot in, the noisy gradient sum the optimiser applies out.

    Attributes:
        noise_std: the noise std per coordinate of the unscaled sum (σ times the sensitivity).
    """

    noise_std: float

    def parameters(self) -> dict[str, nn.Parameter]:
        """The parameters the release covers (name → parameter), which the optimiser steps."""
        ...

    def __call__(
        self, features: torch.Tensor, labels: torch.Tensor, lot: torch.Tensor, *, canary: Any
    ) -> tuple[dict[str, torch.Tensor], float]:
        """({name: noisy sum / expected lot size}, Σ loss over the lot) for the lot's positions.

        ``canary`` is what ``canary_gradient`` returned for this step (``None``: no canary).
        """
        ...

    def close(self) -> None:
        """Releases what the mechanism attached to the model (hooks)."""
        ...


class ReleaseFactory(Protocol):
    """Builds a :class:`Release` on the model once it is ready to train (after ``prepare_model``)."""

    def __call__(
        self, model: nn.Module, *, config: DPSGDConfig, plan: DPSGDPlan, generator: torch.Generator
    ) -> Release: ...


class ClippedRelease:
    """Algorithm 1's release: per-example clipping (flat or per layer), a clipped canary, Gaussian noise."""

    def __init__(self, model: nn.Module, *, config: DPSGDConfig, plan: DPSGDPlan, generator: torch.Generator) -> None:
        assert config.clip_norm is not None  # resolve_config derives C before any run
        self._clip_norm = config.clip_norm
        self.clipper = GradientClipper(
            model, clip_norm=config.clip_norm, per_layer=config.per_layer, method=config.clipping_method
        )
        self._params = self.clipper.parameters()
        self._layer_groups = [
            [self.clipper._full(layer, local) for local in layer.params] for layer in self.clipper.layers
        ]
        self._config = config
        self._scale = 1.0 / plan.expected_lot_size
        self._generator = generator
        self.noise_std = plan.noise_multiplier * self.clipper.sensitivity
        #: :func:`noisy_clipped_sum`'s ``pre_noise`` for the next call; set by the loop only
        #: when a :class:`StepObserver` is attached.
        self.pre_noise: PreNoise | None = None

    def parameters(self) -> dict[str, nn.Parameter]:
        return self._params

    def __call__(
        self, features: torch.Tensor, labels: torch.Tensor, lot: torch.Tensor, *, canary: Any
    ) -> tuple[dict[str, torch.Tensor], float]:
        extra = None
        if canary is not None:
            # One more record under the same claim: clipped exactly like one example's gradient.
            extra = clip_gradient(
                _canary_dict(canary, self._params),
                clip_norm=self._clip_norm,
                layer_groups=self._layer_groups if self.clipper.layer_clip_norms else None,
                layer_clip_norms=self.clipper.layer_clip_norms,
            )
        # The 1/L of the update is folded into the clipping factors and the noise scale.
        return noisy_clipped_sum(
            self.clipper,
            features,
            labels,
            lot,
            noise_std=self.noise_std,
            generator=self._generator,
            physical_batch_size=self._config.physical_batch_size,
            extra=extra,
            scale=self._scale,
            pre_noise=self.pre_noise,
        )

    def close(self) -> None:
        self.clipper.close()
