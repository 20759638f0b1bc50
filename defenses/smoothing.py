"""Randomized smoothing as a defense (Cohen, Rosenfeld & Kolter 2019, "Certified Adversarial
Robustness via Randomized Smoothing", ICML).

The released model is a *base* classifier f, trained non-privately with Gaussian data
augmentation: every training batch is seen as x + e, e ~ N(0, σ²I) (§3.3 of the paper: f must
classify well under the noise it will be smoothed with). The defended classifier is the
smoothed g(x) = argmax_c P(f(x + e) = c), which Theorem 1 certifies: if the top class has
probability at least p_A > ½ under the noise, g is constant within the L2 radius
R = σ Φ⁻¹(p_A). ``dpaudit certify`` computes it with CERTIFY (n0 selection draws, n estimation
draws, a one-sided Clopper–Pearson lower bound on p_A at confidence 1 − α, abstention when
p_A ≤ ½), reading σ and its defaults from the record's
:class:`~dpaudit.results.certification_spec.SmoothingCertificationSpec` (docs/defenses/smoothing.md §3).

Smoothing certifies robustness, not privacy: the claim is non-private (ε = ∞). Inputs are in
[0, 1]; the noisy inputs are not clipped back, as in the paper.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from defenses._common import config_dict, model_id_for
from defenses.nonprivate import NonPrivateConfig, resolve_nonprivate_config, train_nonprivate
from defenses.registry import DEFENSES, DefenseSpec
from dpaudit import _validate as v
from dpaudit.checkpoint import GeneratorState
from dpaudit.options import option
from dpaudit.parts import PlotStyle
from dpaudit.results.certification_spec import SmoothingCertificationSpec
from dpaudit.results.record import TrainedModel
from dpaudit.seeding import torch_generator
from dpaudit.train_request import TrainRequest

__all__ = [
    "MAX_SMOOTHING_SIGMA",
    "SmoothingConfig",
    "certification_spec",
    "check_sigma",
    "gaussian_augmentation",
    "train_smoothing",
]


#: Largest σ accepted: 100 times the input range [0, 1]. Cohen et al. go up to σ = 1; far beyond,
#: the base classifier sees noise only and every certificate abstains, so a larger value is a typo.
MAX_SMOOTHING_SIGMA = 100.0


def check_sigma(name: str, value: Any) -> float:
    """Validates σ in (0, :data:`MAX_SMOOTHING_SIGMA`]; the message names ``name`` and the value."""
    sigma = v.positive(name, value)
    if sigma > MAX_SMOOTHING_SIGMA:
        raise v.invalid(
            name,
            f"{name} must be <= {MAX_SMOOTHING_SIGMA:g} (inputs lie in [0, 1]; the "
            f"paper uses 0.25 to 1), got {v.short(value)}",
        )
    return sigma


@dataclass(frozen=True, kw_only=True)
class SmoothingConfig(NonPrivateConfig):
    """Hyperparameters of a smoothing base classifier (the non-private baseline's SGD,
    :class:`defenses.nonprivate.NonPrivateConfig`).

    Attributes:
        smoothing_sigma: σ of the Gaussian noise, both the training augmentation and the
            smoothing that is certified (Cohen et al. use σ ∈ {0.25, 0.5, 1.0} on inputs in [0, 1]).
    """

    smoothing_sigma: float = option(
        0.25,
        help="std of the Gaussian input noise trained with and certified (Cohen et al. 2019)",
        metavar="SIGMA",
        check=check_sigma,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "smoothing_sigma", check_sigma("smoothing_sigma", self.smoothing_sigma))


def certification_spec(config: SmoothingConfig) -> SmoothingCertificationSpec:
    """What ``certify`` needs to certify a model trained with ``config`` (CERTIFY's defaults)."""
    if not isinstance(config, SmoothingConfig):
        raise v.invalid_type("config", f"config must be a SmoothingConfig, got {type(config).__name__}")
    return SmoothingCertificationSpec(sigma=config.smoothing_sigma)


def gaussian_augmentation(sigma: float, *, generator: torch.Generator) -> Any:
    """The augmentation x ↦ x + σ z, z ~ N(0, I) drawn from ``generator`` (on its device).

    Args:
        sigma: σ > 0.
        generator: where the noise comes from (a seed stream, so a run is reproducible).

    Returns:
        A function from a batch of inputs to the noised batch (same shape, device and dtype).
    """
    sigma = v.positive("sigma", sigma)

    def augment(x: torch.Tensor) -> torch.Tensor:
        z = torch.randn(x.shape, generator=generator, device=generator.device, dtype=x.dtype)
        return x + sigma * z.to(x.device)

    return augment


def train_smoothing(request: TrainRequest[SmoothingConfig], /) -> tuple[TrainedModel, nn.Module]:
    """Trains a smoothing base classifier: non-private SGD on Gaussian-augmented inputs.

    Args:
        request: as for :func:`defenses.nonprivate.train_nonprivate`, with a
            :class:`SmoothingConfig`.

    Returns:
        The record (``config["certification"]`` holds the smoothing spec ``certify`` reads)
        and the base classifier in eval mode. Its metrics are the base classifier's on clean
        inputs; the smoothed classifier's accuracy is what ``certify`` measures.

    Raises:
        TypeError: ``config`` is not a :class:`SmoothingConfig`.
        ValueError: ``model_options`` ask for a noise layer (smoothing noises the input, and a
            model may hold one noise layer only).
    """
    started = time.monotonic()
    config = request.config
    if not isinstance(config, SmoothingConfig):
        raise v.invalid_type("config", f"config must be a SmoothingConfig, got {type(config).__name__}")
    if request.model_options.get("noise_layer", False) is not False:
        raise v.invalid(
            "--defense",
            "--defense smoothing noises the input, not a layer; got model_options "
            f"noise_layer={request.model_options['noise_layer']!r}",
        )
    # Its own seed stream: the augmentation noise neither shifts the batch order nor the init.
    generator = torch_generator(request.seed, "smoothing-augmentation", device=torch.device(request.device))
    record, model = train_nonprivate(
        request,
        progress_label="smoothing",
        augment=gaussian_augmentation(config.smoothing_sigma, generator=generator),
        stateful=GeneratorState(generator),  # a resumed training continues the same noise stream
    )
    spec = certification_spec(config)
    stored = {**config_dict(config), "split_seed": request.splits.seed, "certification": spec.to_dict()}
    metrics = {**record.metrics, "smoothing_sigma": config.smoothing_sigma, "train_seconds": time.monotonic() - started}
    record = dataclasses.replace(
        record, model_id=model_id_for(request, defense="smoothing"), defense="smoothing", config=stored, metrics=metrics
    )
    return record, model


DEFENSES.register(
    DefenseSpec(
        name="smoothing",
        config_type=SmoothingConfig,
        train=train_smoothing,
        claim_kind="nonprivate",
        certification=certification_spec,
        resolve_defaults=resolve_nonprivate_config,
        summary="randomized smoothing: base model trained with Gaussian input noise, "
        "certified in L2 by CERTIFY (Cohen et al. 2019)",
        order=30,
        style=PlotStyle(colour="#882255", marker="v", dash=":"),
    )
)
