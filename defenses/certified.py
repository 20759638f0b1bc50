"""Certified defenses with a noise layer: PixelDP, AGM, HGM and Secure-SGD.

All four share one mechanism (:class:`dpaudit.robustness.noise.NoiseLayer`): Gaussian noise added to the
output of the network's first layer, calibrated so that the randomized scores are
(ε_r, δ_r)-DP with respect to input changes of size ≤ L (the attack norm bound). What differs
is the calibration and the shape of the noise:

* **PixelDP** (Lecuyer et al. 2019, §3.2–3.3): the classical multiplier
  c = √(2 ln(1.25/δ_r))/ε_r (so ε_r ≤ 1), isotropic noise σ = c·L·Δ with the first layer's
  sensitivity Δ kept ≤ 1 by projection after every step (their Parseval / normalised
  columns), noise ramped up over the first steps of training.
* **AGM**: the same with the analytic Gaussian calibration (Balle & Wang 2018, Thm 8).
* **HGM** (Phan et al. 2019, Theorems 2–3, Eq. 6–8): the extended multiplier (any ε_r > 0)
  and heterogeneous noise N(0, σ² r_k) with a redistribution vector r (Σ r = K) computed from
  the forward derivative of a pre-trained model (Eq. 7, inflation rate β); the sensitivity
  is the r-weighted Δ_r = ‖diag(r)^{-1/2} W‖ (:func:`dpaudit.robustness.noise.layer_sensitivity`).
* **Secure-SGD** (Phan et al. 2019, Algorithm 1): the HGM noise layer trained with DP-SGD
  (:func:`defenses.dpsgd.train_dpsgd`), so the record carries both the DP claim for the
  training data and the robustness parameters (ε_r, δ_r, L).

The mathematics of the paper, not the quirks of its TensorFlow code (``certified.md`` §2):
the noise std is σ√r_k (not σ r_k); Δ_r is computed exactly for L2 attacks (not estimated from
the reshaped kernel); noise is drawn afresh at every forward pass; DP-SGD clips per example.
For Secure-SGD the pre-trained model behind r is trained on the split's *population* (ids the
DP-trained model never sees), because r shapes the training noise and so the released
parameters: computing it from the members would leak outside the DP claim.

The certificate never rests on training-time estimates: the final first layer is projected
with its exact sensitivity, and :mod:`dpaudit.certify_runner` measures Δ_r again on the loaded
model.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from defenses._common import config_dict, model_id_for
from defenses.dpsgd import DPSGDConfig, plan_dpsgd, train_dpsgd
from defenses.nonprivate import NonPrivateConfig, train_nonprivate
from dpaudit import _validate as v
from dpaudit.data import DatasetBundle, Splits
from dpaudit.options import option
from dpaudit.privacy.gaussian import calibrate_gaussian
from dpaudit.results.certification import CertificationSpec
from dpaudit.results.record import TrainedModel
from dpaudit.robustness.noise import (
    ATTACK_NORMS,
    NoiseLayer,
    SensitivityProjector,
    find_noise_layer,
    layer_sensitivity,
    redistribution_from_gradients,
)
from dpaudit.seeding import numpy_rng, torch_generator
from dpaudit.training import EPOCH_LIMIT, SGDConfig

__all__ = [
    "CERTIFIED_MECHANISMS",
    "RobustnessConfig",
    "PixelDPConfig",
    "AGMConfig",
    "HGMConfig",
    "SecureSGDConfig",
    "certification_spec",
    "compute_redistribution",
    "train_pixeldp",
    "train_agm",
    "train_hgm",
    "train_secure_sgd",
]

SENSITIVITY_CONTROLS = ("project", "scale-noise")

#: defense → (Gaussian calibration of the noise, largest ε' its certification may use).
CERTIFIED_MECHANISMS: dict[str, tuple[str, float | None]] = {
    "pixeldp": ("classical", 1.0),
    "agm": ("analytic", None),
    "hgm": ("extended", None),
    "secure-sgd": ("extended", None),
}


@dataclass(frozen=True, kw_only=True)
class RobustnessConfig:
    """The noise layer's robustness parameters (shared by the four defenses).

    Attributes:
        robustness_epsilon: ε_r of the input-DP guarantee.
        robustness_delta: δ_r.
        attack_norm_bound: L, the attack size the noise is calibrated for.
        attack_norm: norm of input changes (``l2`` exact sensitivity; ``linf`` a valid but
            loose bound; ``l1`` exact).
        noise_ramp_fraction: fraction of the training steps over which the noise grows
            linearly from 0 to its full size (PixelDP's ramp); 0 = full noise from the start.
        redistribute: use HGM's heterogeneous noise (r from a pre-trained model); off = r = 1.
        inflation: β of the redistribution (r_k ∝ a_k + β·mean(a); large β → uniform).
        redistribution_exponent: power on the forward-derivative scores (2 on CIFAR-10).
        redistribution_pretrain_epochs: epochs of the noise-free model r is computed from.
        redistribution_examples: examples whose ∂L/∂h are averaged for r.
        sensitivity_control: ``project`` (PixelDP: rescale the first layer to Δ_r ≤ 1 after
            every step, noise fixed) or ``scale-noise`` (leave the layer free and set the noise
            to c·L·Δ_r of the current weights). Both release the same mechanism; projecting a
            layer whose updates are DP-SGD noise made training diverge in our runs, so
            Secure-SGD scales the noise instead.
    """

    robustness_epsilon: float = option(1.0, help="epsilon_r of the noise layer's input-DP guarantee (pixeldp: <= 1)", metavar="EPS_R", check=v.positive)
    robustness_delta: float = option(0.05, help="delta_r of the noise layer", metavar="DELTA_R", check=v.open_unit)
    attack_norm_bound: float = option(0.1, help="attack radius L the noise is calibrated for", metavar="L", check=v.positive)
    attack_norm: str = option("l2", choices=ATTACK_NORMS, help="norm of the input changes certified against")
    noise_ramp_fraction: float = option(0.1, help="fraction of training over which the noise ramps up to full size", metavar="FRACTION", check=v.non_negative)
    redistribute: bool = option(False, help="HGM heterogeneous noise from a pre-trained model's forward derivative")
    inflation: float = option(0.5, help="HGM inflation rate beta (large = uniform noise)", metavar="BETA", check=v.non_negative)
    redistribution_exponent: float = option(1.0, help="power on the forward-derivative scores (2 on CIFAR-10)", check=v.positive)
    redistribution_pretrain_epochs: int = option(2, help="epochs of the noise-free model the redistribution is computed from", metavar="N", check=v.positive, limit=EPOCH_LIMIT)
    redistribution_examples: int = option(1000, help="examples whose forward derivatives are averaged for the redistribution", metavar="N", check=v.positive)
    sensitivity_control: str = option("project", choices=SENSITIVITY_CONTROLS, help="keep the first layer's sensitivity <= 1 by projection, or scale the noise to it")

    def _check_robustness(self, mechanism: str, max_epsilon: float | None) -> None:
        eps = v.positive("robustness_epsilon", self.robustness_epsilon)
        v.open_unit("robustness_delta", self.robustness_delta)
        v.positive("attack_norm_bound", self.attack_norm_bound)
        v.choice("attack_norm", self.attack_norm, ATTACK_NORMS)
        frac = v.real("noise_ramp_fraction", self.noise_ramp_fraction)
        if not 0.0 <= frac <= 1.0:
            raise ValueError(f"noise_ramp_fraction must lie in [0, 1], got {self.noise_ramp_fraction!r}")
        if not isinstance(self.redistribute, bool):
            raise TypeError(f"redistribute must be a bool, got {self.redistribute!r}")
        v.non_negative("inflation", self.inflation)
        v.positive("redistribution_exponent", self.redistribution_exponent)
        v.integer("redistribution_pretrain_epochs", self.redistribution_pretrain_epochs, minimum=1)
        v.integer("redistribution_examples", self.redistribution_examples, minimum=1)
        v.choice("sensitivity_control", self.sensitivity_control, SENSITIVITY_CONTROLS)
        if max_epsilon is not None and eps > max_epsilon:
            raise ValueError(f"robustness_epsilon must be <= {max_epsilon:g} for the {mechanism} calibration, got {self.robustness_epsilon!r}")
        try:
            calibrate_gaussian(epsilon=eps, delta=self.robustness_delta, method=mechanism)
        except ValueError as exc:  # e.g. δ_r > 0.484 for the extended mechanism; name the field the user set
            raise ValueError(f"robustness_delta={self.robustness_delta!r} / robustness_epsilon={eps!r} invalid for the {mechanism} calibration: {exc}") from None

    def noise_per_sensitivity(self, mechanism: str) -> float:
        """σ/Δ = c(ε_r, δ_r)·L: the base noise std for a first layer of sensitivity 1."""
        return calibrate_gaussian(epsilon=self.robustness_epsilon, delta=self.robustness_delta, method=mechanism) * self.attack_norm_bound


@dataclass(frozen=True, kw_only=True)
class _CertifiedSGDConfig(NonPrivateConfig, RobustnessConfig):
    """SGD (see :class:`dpaudit.training.SGDConfig`) plus the noise layer of ``_defense``."""

    _defense: ClassVar[str]

    def __post_init__(self) -> None:
        SGDConfig.__post_init__(self)
        self._check_robustness(*CERTIFIED_MECHANISMS[self._defense])


@dataclass(frozen=True, kw_only=True)
class PixelDPConfig(_CertifiedSGDConfig):
    """PixelDP: SGD + noise layer with the classical calibration (ε_r ≤ 1). Defaults: Lecuyer et al."""

    _defense: ClassVar[str] = "pixeldp"


@dataclass(frozen=True, kw_only=True)
class AGMConfig(_CertifiedSGDConfig):
    """PixelDP's network with the analytic Gaussian calibration."""

    _defense: ClassVar[str] = "agm"


@dataclass(frozen=True, kw_only=True)
class HGMConfig(_CertifiedSGDConfig):
    """HGM_PixelDP: extended calibration, redistributed noise. Defaults: Phan et al.'s MNIST run."""

    _defense: ClassVar[str] = "hgm"
    robustness_epsilon: float = 4.0
    attack_norm_bound: float = 0.2
    redistribute: bool = True


@dataclass(frozen=True, kw_only=True)
class SecureSGDConfig(DPSGDConfig, RobustnessConfig):
    """Secure-SGD: the HGM noise layer trained with DP-SGD (every DP-SGD field applies)."""

    robustness_epsilon: float = 4.0
    attack_norm_bound: float = 0.2
    redistribute: bool = True
    sensitivity_control: str = "scale-noise"

    def __post_init__(self) -> None:
        DPSGDConfig.__post_init__(self)
        self._check_robustness(*CERTIFIED_MECHANISMS["secure-sgd"])


def certification_spec(defense: str, config: RobustnessConfig) -> CertificationSpec:
    """What a certifier needs to know about a trained model beyond its weights."""
    mechanism, max_eps = CERTIFIED_MECHANISMS[defense]
    return CertificationSpec(
        mechanism=mechanism,
        max_epsilon=max_eps,
        attack_norm=config.attack_norm,
        robustness_epsilon=config.robustness_epsilon,
        robustness_delta=config.robustness_delta,
        attack_norm_bound=config.attack_norm_bound,
        noise_per_sensitivity=config.noise_per_sensitivity(mechanism),
        redistribute=bool(config.redistribute),
    )


def compute_redistribution(
    *,
    bundle: DatasetBundle,
    ids: np.ndarray,
    model_name: str,
    model_options: dict[str, Any],
    config: RobustnessConfig,
    batch_size: int,
    learning_rate: float,
    seed: int,
    device: torch.device,
    progress: bool,
) -> torch.Tensor:
    """HGM's r: pre-train a noise-free copy on ``ids``, then score ∂L/∂h (Phan et al. 2019, Eq. 7).

    Returns:
        r with the noise layer's output shape (r > 0, Σ r = K).
    """
    ids = np.asarray(ids, dtype=np.int64)
    if len(ids) == 0:
        raise ValueError("the data for the redistribution vector is empty; use --member-fraction < 1 or redistribute=False")
    empty = np.zeros(0, dtype=np.int64)
    pre_splits = Splits(dataset=bundle.name, seed=seed, members=np.sort(ids), non_members=empty, population=empty, test=np.asarray(bundle.test.ids, dtype=np.int64))
    _, pre = train_nonprivate(
        bundle=bundle,
        splits=pre_splits,
        model_name=model_name,
        model_options={**model_options, "noise_layer": True},
        config=NonPrivateConfig(epochs=config.redistribution_pretrain_epochs, batch_size=batch_size, learning_rate=learning_rate),
        seed=seed + 1,
        device=device,
        progress=progress,
        progress_label="redistribution pretrain",
    )
    noise = find_noise_layer(pre)
    assert noise is not None  # built with noise_layer=True
    pick = numpy_rng(seed, "redistribution").choice(len(ids), size=min(len(ids), config.redistribution_examples), replace=False)
    part = bundle.all().subset(np.sort(ids[pick]))
    x, y = part.features.to(device), part.labels.to(device)
    rest = nn.Sequential(*list(pre)[1:])
    pre.eval()
    grads = []
    for xb, yb in zip(x.split(256), y.split(256)):
        h = noise.layer(xb).detach().requires_grad_(True)
        loss = nn.functional.cross_entropy(rest(h), yb, reduction="sum")  # no layer mixes examples: row i is ∂ℓ_i/∂h_i
        (g,) = torch.autograd.grad(loss, h)
        grads.append(g.cpu())
    return redistribution_from_gradients(torch.cat(grads), inflation=config.inflation, exponent=config.redistribution_exponent)


class _NoiseSchedule:
    """Installs the noise layer before training and keeps it calibrated after every step.

    σ = c(ε_r, δ_r)·L per unit of sensitivity. With ``project`` the first layer is rescaled to
    Δ_r ≤ 1 and the noise is σ; with ``scale-noise`` the noise is σ·Δ_r of the current weights
    (a warm power-iteration estimate during training, the exact value at the end).
    """

    def __init__(self, *, sigma: float, redistribution: torch.Tensor | None, config: RobustnessConfig, input_shape: tuple[int, ...], total_steps: int) -> None:
        self.sigma = sigma
        self.redistribution = redistribution
        self.config = config
        self.project = config.sensitivity_control == "project"
        self.input_shape = input_shape
        self.total_steps = max(1, total_steps)
        self.ramp_steps = int(round(config.noise_ramp_fraction * self.total_steps))
        self.noise: NoiseLayer | None = None
        self.projector: SensitivityProjector | None = None
        self.final_sensitivity = float("nan")

    def _std_at(self, step: int) -> float:
        if self.ramp_steps == 0:
            return self.sigma
        return self.sigma * min(1.0, max(0, step + 1) / self.ramp_steps)

    def prepare(self, model: nn.Module) -> None:
        noise = find_noise_layer(model)
        if noise is None:
            raise ValueError("certified defenses need a model built with noise_layer=True")
        noise.set_noise(0.0, self.redistribution)
        self.noise = noise
        self.projector = SensitivityProjector(noise, input_shape=self.input_shape, norm=self.config.attack_norm, iterations=2)
        step = self.projector.project if self.project else self.projector.estimate
        for _ in range(10):  # converge the warm start (and, when projecting, start inside the ball)
            step()
        delta = self.finish(full_noise=False)
        noise.noise_std.fill_(self._std_at(-1) * (1.0 if self.project else delta))

    def after_step(self, step: int, model: nn.Module) -> None:
        assert self.noise is not None and self.projector is not None
        if self.project:
            self.projector.project()
            self.noise.noise_std.fill_(self._std_at(step))
        else:
            self.noise.noise_std.fill_(self._std_at(step) * self.projector.estimate())

    @torch.no_grad()
    def finish(self, *, full_noise: bool = True) -> float:
        """Exact calibration of the released layer; returns its Δ_r (≤ 1 when projecting)."""
        assert self.noise is not None
        delta = layer_sensitivity(self.noise, input_shape=self.input_shape, norm=self.config.attack_norm)
        if self.project and delta > 1.0:
            weight = next(m for m in self.noise.layer.modules() if isinstance(getattr(m, "weight", None), nn.Parameter)).weight
            weight.mul_(1.0 / delta)
            delta = layer_sensitivity(self.noise, input_shape=self.input_shape, norm=self.config.attack_norm)
        self.final_sensitivity = delta
        if full_noise:
            # σ per unit of the measured sensitivity, never less: a run shorter than the ramp
            # still releases the calibrated mechanism.
            self.noise.noise_std.fill_(self.sigma * max(delta, 1.0) if self.project else self.sigma * delta)
        return delta


def _train_certified(
    defense: str,
    *,
    bundle: DatasetBundle,
    splits: Splits,
    model_name: str,
    model_options: dict[str, Any] | None,
    config: Any,
    seed: int,
    device: torch.device | str,
    progress: bool,
    base_train: Callable[..., tuple[TrainedModel, nn.Module]],
    total_steps: int,
    redistribution_ids: np.ndarray,
    batch_size: int,
    learning_rate: float,
) -> tuple[TrainedModel, nn.Module]:
    started = time.monotonic()
    device = torch.device(device)
    model_options = dict(model_options or {})
    given = model_options.pop("noise_layer", True)
    if given is not True:
        raise ValueError(f"--defense {defense} needs the noise layer; got model_options noise_layer={given!r}")
    mechanism, _ = CERTIFIED_MECHANISMS[defense]
    sigma = config.noise_per_sensitivity(mechanism)
    r = None
    if config.redistribute:
        r = compute_redistribution(
            bundle=bundle,
            ids=redistribution_ids,
            model_name=model_name,
            model_options=model_options,
            config=config,
            batch_size=batch_size,
            learning_rate=learning_rate,
            seed=seed,
            device=device,
            progress=progress,
        )
    schedule = _NoiseSchedule(sigma=sigma, redistribution=r, config=config, input_shape=bundle.input_shape, total_steps=total_steps)

    def after_step(step: int, model: nn.Module) -> None:
        schedule.after_step(step, model)
        if step + 1 >= total_steps:
            schedule.finish()  # the released first layer has exactly Δ_r ≤ 1

    def prepare(model: nn.Module) -> None:
        schedule.prepare(model)
        # The training noise comes from its own seed stream (not torch's global generator), so a
        # run is reproducible and two defenses with the same seed see the same noise draws.
        find_noise_layer(model).generator = torch_generator(seed, "noise-layer", device=device)  # type: ignore[union-attr]

    record, model = base_train(
        bundle=bundle,
        splits=splits,
        model_name=model_name,
        model_options={**model_options, "noise_layer": True},
        config=config,
        seed=seed,
        device=device,
        progress=progress,
        progress_label=defense,
        prepare_model=prepare,
        after_step=after_step,
    )
    noise = find_noise_layer(model)
    assert noise is not None
    noise.generator = None  # a released model draws fresh noise; certification seeds its own stream
    sensitivity = schedule.finish()
    spec = certification_spec(defense, config)
    full_options = {**model_options, "noise_layer": True}
    # The id is computed from the options as given (the noise layer is implied by the defense),
    # so the CLI finds the record again on a rerun.
    model_id = model_id_for(defense=defense, bundle=bundle, model_name=model_name, model_options=model_options, config=config, splits=splits, seed=seed)
    metrics = {
        **record.metrics,
        "noise_std": float(noise.noise_std),
        "first_layer_sensitivity": sensitivity,
        "noise_multiplier_robustness": sigma / config.attack_norm_bound,
        "redistribution_min": float(noise.redistribution.min()),
        "redistribution_max": float(noise.redistribution.max()),
        "train_seconds": time.monotonic() - started,
    }
    record = dataclasses.replace(
        record,
        model_id=model_id,
        defense=defense,
        model_options=full_options,
        config={**config_dict(config), "split_seed": splits.seed, "certification": spec.to_dict()},
        metrics=metrics,
    )
    return record, model


def _sgd_steps(config: SGDConfig, num_members: int) -> int:
    return config.epochs * -(-num_members // config.batch_size)


def _make_nonprivate_trainer(defense: str, config_type: type) -> Callable[..., tuple[TrainedModel, nn.Module]]:
    def train(
        *,
        bundle: DatasetBundle,
        splits: Splits,
        model_name: str,
        model_options: dict[str, Any] | None = None,
        config: Any = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
        progress: bool = True,
    ) -> tuple[TrainedModel, nn.Module]:
        config = config_type() if config is None else config
        if not isinstance(config, config_type):
            raise TypeError(f"config must be a {config_type.__name__}, got {type(config).__name__}")
        return _train_certified(
            defense,
            bundle=bundle,
            splits=splits,
            model_name=model_name,
            model_options=model_options,
            config=config,
            seed=seed,
            device=device,
            progress=progress,
            base_train=train_nonprivate,
            total_steps=_sgd_steps(config, len(splits.members)),
            redistribution_ids=splits.members,
            batch_size=config.batch_size,
            learning_rate=config.learning_rate,
        )

    train.__name__ = f"train_{defense.replace('-', '_')}"
    train.__doc__ = (
        f"Trains a zoo model with the {defense} noise layer (see the module docstring).\n\n"
        "Args:\n    bundle, splits, model_name, model_options, seed, device, progress: as for\n"
        "        :func:`defenses.nonprivate.train_nonprivate`.\n"
        f"    config: a :class:`{config_type.__name__}`.\n\n"
        "Returns:\n    The record (config carries the certification parameters) and the module.\n"
    )
    return train


train_pixeldp = _make_nonprivate_trainer("pixeldp", PixelDPConfig)
train_agm = _make_nonprivate_trainer("agm", AGMConfig)
train_hgm = _make_nonprivate_trainer("hgm", HGMConfig)


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

    Args:
        bundle, splits, model_name, model_options, seed, device, progress: as for
            :func:`defenses.dpsgd.train_dpsgd`.
        config: a :class:`SecureSGDConfig`.
    """
    if not isinstance(config, SecureSGDConfig):
        raise TypeError(f"config must be a SecureSGDConfig, got {type(config).__name__}")
    plan = plan_dpsgd(config, num_members=len(splits.members))
    public = splits.population if len(splits.population) else splits.non_members
    return _train_certified(
        "secure-sgd",
        bundle=bundle,
        splits=splits,
        model_name=model_name,
        model_options=model_options,
        config=config,
        seed=seed,
        device=device,
        progress=progress,
        base_train=train_dpsgd,
        total_steps=plan.num_steps,
        redistribution_ids=public,
        batch_size=max(1, round(plan.expected_lot_size)),
        learning_rate=config.learning_rate,
    )
