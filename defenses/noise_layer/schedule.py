"""Installing the noise layer before training and keeping it calibrated after every step.

σ = c(ε_r, δ_r)·L per unit of the first layer's sensitivity Δ_r (Lecuyer et al. 2019, §3.3;
Phan et al. 2019, Eq. 6–8). The sensitivity controls (``project``, ``scale-noise``,
``normalize``, ``orthogonal``, ``auto``) are described on
:class:`defenses.noise_layer.configs.RobustnessConfig`; :func:`resolve_sensitivity_control`
has the rule ``auto`` follows and its measurements.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from defenses.noise_layer.authors import authors_total
from defenses.noise_layer.configs import SENSITIVITY_CONTROLS, RobustnessConfig
from dpaudit import _validate as v
from dpaudit.models import build_model
from dpaudit.robustness.noise import (
    NoiseLayer,
    SensitivityProjector,
    authors_heuristic_sensitivity,
    find_noise_layer,
    layer_sensitivity,
    orthogonalize,
)

__all__ = ["NoiseSchedule", "resolve_sensitivity_control", "auto_sensitivity_control", "scale_invariant_first_layer"]


def resolve_sensitivity_control(control: str, noise: NoiseLayer) -> str:
    """The sensitivity control ``auto`` stands for on this model's first layer (others as given).

    ``auto`` → ``orthogonal`` when the noise layer's affine map is a convolution, ``normalize``
    otherwise (a Linear first layer: MLPs, a PCA projection in front). Why (measured, Secure-SGD
    on digits-mlp, ε = 2, δ = 1e-5; the module docstring has the controls):

    * ``orthogonal`` and ``project`` hold the first layer's scale fixed, and the polar/norm
      projection after every DP-SGD step discards the part of the update that would have
      grown it. Plain DP-SGD lets the weights' norm grow with the accumulated noise (∝ √t),
      so each new step's noise is a shrinking share of them and the signal adds up; with the
      scale held at s, every step's noise, lr/(1 − momentum)·σ·C/L·√(#weights), stays a fixed
      share of ‖W‖_F = s·√(min(out, fan-in)). For digits-mlp's 64 → 128 Linear at the old DP-SGD
      defaults (lots of 7.2, σ = 0.96, C = 4, lr 0.1) that share is 0.80 per step: the layer is
      re-randomised at every step and never learns (test accuracy 0.12 with the robustness
      noise, 0.15 without it, i.e. L = 1e-4; with the DP noise off, 0.86). It is 0.31–0.33 with
      lots of 64 (L = 0.2) or 128 (L = 0.057): ``orthogonal`` 0.44 and 0.61 against
      ``normalize`` 0.54 and 0.83.
      hgm-cnn's 32 × 25 kernel on MNIST (lots of 250, σ = 0.88, C = 1, lr 0.1, momentum 0.9)
      has a share of 0.035, and ``orthogonal`` trains (0.896 against DP-SGD's 0.884; README).
    * Even with lots of 64 (share 0.31) and with the projection applied lazily (to the
      unprojected running sum of updates, so the noise accumulates as in DP-SGD),
      ``orthogonal`` reached only 0.76 at L = 0.057 where ``normalize`` reached 0.81: a Linear
      first layer with equal singular values cannot weight its input directions (pixels that
      carry no class information pass as strongly as those that do), which a convolution's
      later layers do instead.
    * ``normalize`` and ``scale-noise`` leave the weights free. ``normalize`` measured best or
      within a point: 0.33 against 0.28 at the old defaults, 0.54 against 0.49 with lots of 64
      (L = 0.2), 0.833 against 0.839 with lots of 128 (L = 0.057; DP-SGD 0.881 with the same
      lots, rate and epochs), and ``scale-noise`` lets Δ_r grow to 9–46, so the released
      noise grows with it. The same order holds for abadi-mnist's 784 → 1000 Linear on MNIST
      (30,000 members, lots of 250, lr 0.1, momentum 0.9, C = 1, 3 epochs, r = 1):
      ``normalize`` 0.869, ``orthogonal`` 0.828 (and 6× slower), DP-SGD 0.900.

    Args:
        control: one of :data:`SENSITIVITY_CONTROLS`.
        noise: the model's noise layer.

    Returns:
        ``project``, ``scale-noise``, ``normalize`` or ``orthogonal``.
    """
    control = v.choice("sensitivity_control", control, SENSITIVITY_CONTROLS)
    if control != "auto":
        return control
    conv = any(isinstance(m, nn.modules.conv._ConvNd) for m in noise.layer.modules())
    return "orthogonal" if conv else "normalize"


def auto_sensitivity_control(
    *,
    model_name: str,
    model_options: Mapping[str, object] | None,
    input_shape: tuple[int, ...],
    num_classes: int,
    pca_components: int | None = None,
) -> str:
    """What ``auto`` resolves to on this architecture (:func:`resolve_sensitivity_control`).

    Builds the untrained model only to look at its first layer (public: the architecture).
    """
    options = {k: x for k, x in dict(model_options or {}).items() if k != "noise_layer"}
    if pca_components is not None:
        options.setdefault("pca_components", pca_components)
    noise = find_noise_layer(
        build_model(model_name, input_shape=tuple(input_shape), num_classes=num_classes, noise_layer=True, **options)
    )
    assert noise is not None  # built with noise_layer=True
    return resolve_sensitivity_control("auto", noise)


def scale_invariant_first_layer(
    config: Any,
    *,
    model_name: str,
    model_options: Mapping[str, object] | None,
    input_shape: tuple[int, ...],
    num_classes: int,
) -> bool:
    """Whether training ``config`` on this model normalises the first layer by its own scale.

    True when the sensitivity control is (or ``auto`` resolves to) ``normalize`` on the model's
    first layer: the layer then computes the same function for W and c·W, and the DP-SGD
    defaults raise the learning rate for it (:mod:`defenses.dp_defaults`, rule 5).
    """
    control = getattr(config, "sensitivity_control", None)
    if control == "auto":
        control = auto_sensitivity_control(
            model_name=model_name,
            model_options=model_options,
            input_shape=input_shape,
            num_classes=num_classes,
            pca_components=getattr(config, "pca_components", None),
        )
    return control == "normalize"


class NoiseSchedule:
    """Installs the noise layer before training and keeps it calibrated after every step.

    σ = c(ε_r, δ_r)·L per unit of sensitivity. With ``project`` the first layer is rescaled to
    Δ_r ≤ 1 and the noise is σ; with ``scale-noise`` the noise is σ·Δ_r of the current weights
    (a warm power-iteration estimate during training, the exact value at the end).

    The authors'-code options change three things here (docs/defenses/noise-layer.md §2): (a) the layer holds
    r² (std σ r_k) while Δ_r is still weighted by r; (b) Δ_r is their heuristic; (c) one noise
    draw is reused until the last step.
    """

    def __init__(
        self,
        *,
        sigma: float,
        redistribution: torch.Tensor | None,
        config: RobustnessConfig,
        input_shape: tuple[int, ...],
        total_steps: int,
    ) -> None:
        self.sigma = sigma
        self.redistribution = redistribution
        self.config = config
        self.control = config.sensitivity_control  # ``auto`` is resolved against the model in prepare()
        self.project = self.normalize = self.orthogonal = False
        self.orthogonal_scale: float | None = None  # ``orthogonal``: the kernel's common singular value
        self.input_shape = input_shape
        self.total_steps = max(1, total_steps)
        self.ramp_steps = int(round(config.noise_ramp_fraction * self.total_steps))
        self.noise: NoiseLayer | None = None
        self.projector: SensitivityProjector | None = None
        self.final_sensitivity = float("nan")
        self.gain = 1.0  # ``normalize``: the first layer's Δ_r at initialisation (set by prepare)
        self.heuristic = getattr(config, "authors_heuristic_sensitivity", False) is True
        self.fixed_noise = getattr(config, "authors_fixed_training_noise", False) is True
        # (a): the layer multiplies z by σ√(installed) = σ r_k, while the calibration weighs Δ_r by r.
        self.squared = redistribution is not None and getattr(config, "authors_noise_scale_r", False) is True
        self.calibration_r = redistribution if self.squared else None

    def _sensitivity(self) -> float:
        assert self.noise is not None
        if self.heuristic:
            return authors_heuristic_sensitivity(self.noise, redistribution=self.calibration_r)
        return layer_sensitivity(
            self.noise, input_shape=self.input_shape, norm=self.config.attack_norm, redistribution=self.calibration_r
        )

    def _std_at(self, step: int) -> float:
        if self.ramp_steps == 0:
            return self.sigma
        return self.sigma * min(1.0, max(0, step + 1) / self.ramp_steps)

    def prepare(self, model: nn.Module) -> None:
        noise = find_noise_layer(model)
        if noise is None:
            raise v.invalid("model", "certified defenses need a model built with noise_layer=True")
        self.control = resolve_sensitivity_control(self.control, noise)
        self.project = self.control == "project"
        self.normalize = self.control == "normalize"
        self.orthogonal = self.control == "orthogonal"
        if self.squared:
            assert self.redistribution is not None
            installed = self.redistribution.double() ** 2
            noise.set_noise(0.0, installed, total=float(installed.sum()))
        elif self.redistribution is not None and getattr(self.config, "authors_redistribution_total", False) is True:
            noise.set_noise(0.0, self.redistribution, total=authors_total(noise.output_shape))
        else:
            noise.set_noise(0.0, self.redistribution)
        self.noise = noise
        if self.orthogonal:
            self.orthogonal_scale = orthogonalize(noise)
        self.projector = SensitivityProjector(
            noise,
            input_shape=self.input_shape,
            norm=self.config.attack_norm,
            iterations=2,
            redistribution=self.calibration_r,
            heuristic=self.heuristic,
        )
        step = self.projector.project if self.project else self.projector.estimate
        for _ in range(10):  # converge the warm start (and, when projecting, start inside the ball)
            step()
        delta = self.finish(full_noise=False)
        if self.normalize:
            # The gain keeps the layer's initial output scale (the one the later layers were
            # initialised for): h = g·(Wx + b)/Δ_r + g·σ·z with g = Δ_r at initialisation. Dividing by
            # Δ_r alone shrank every activation by g (≈ 5 for hgm-cnn) and cost 4 points under
            # DP-SGD even without noise. The mechanism is the same: sensitivity g, noise σ·g.
            self.gain = delta
            noise.output_scale = self.gain / delta
        noise.noise_std.fill_(self._std_at(-1) * (1.0 if self.project else self.gain if self.normalize else delta))

    def after_step(self, step: int, model: nn.Module) -> None:
        assert self.noise is not None and self.projector is not None
        if self.project:
            self.projector.project()
            self.noise.noise_std.fill_(self._std_at(step))
        elif self.normalize:
            self.noise.output_scale = self.gain / self.projector.estimate()
            self.noise.noise_std.fill_(self._std_at(step) * self.gain)
        else:
            if self.orthogonal:
                orthogonalize(self.noise, scale=self.orthogonal_scale)
            self.noise.noise_std.fill_(self._std_at(step) * self.projector.estimate())

    @torch.no_grad()
    def finish(self, *, full_noise: bool = True) -> float:
        """Exact calibration of the released layer; returns its Δ_r (≤ 1 when projecting).

        With the authors' (a)/(b) options, the Δ_r their calibration uses (not the exact one).
        """
        assert self.noise is not None
        delta = self._sensitivity()
        if self.project and delta > 1.0:
            weight = self._weighted_layer().weight
            assert isinstance(weight, torch.Tensor)  # _weighted_layer picks the module whose weight is a Parameter
            weight.mul_(1.0 / delta)
            delta = self._sensitivity()
        if self.normalize and full_noise:
            # Release: fold h = g·(Wx + b)/Δ_r into the layer (W, b ← gW/Δ_r, gb/Δ_r), the same
            # function, now with Δ_r = g exactly and no training-time scale left on the layer.
            self.noise.output_scale = 1.0
            layer = self._weighted_layer()
            weight, bias = layer.weight, getattr(layer, "bias", None)
            assert isinstance(weight, torch.Tensor)
            weight.mul_(self.gain / delta)
            if bias is not None:
                bias.mul_(self.gain / delta)
            delta = self._sensitivity()
        self.final_sensitivity = delta
        if full_noise:
            # σ per unit of the measured sensitivity, never less: a run shorter than the ramp
            # still releases the calibrated mechanism.
            self.noise.noise_std.fill_(self.sigma * max(delta, 1.0) if self.project else self.sigma * delta)
            # (c) ends with training: the released model draws fresh noise.
            self.noise.fix_noise(False)
        return delta

    def _weighted_layer(self) -> nn.Module:
        """The module of the noise layer's affine map that holds its weight (Linear or Conv)."""
        assert self.noise is not None
        return next(m for m in self.noise.layer.modules() if isinstance(getattr(m, "weight", None), nn.Parameter))

    def state_dict(self) -> dict[str, Any]:
        """What the schedule and its layer carry from one step to the next, besides the model's tensors.

        The power iteration's warm start, the layer's training-time scale, its noise generator and
        the authors' fixed noise draw: a training resumed from a checkpoint
        (:mod:`dpaudit.checkpoint`) continues with exactly these. What :meth:`prepare` derives from
        the initial model (the control, the gain) is derived again on the rerun.
        """
        assert self.noise is not None and self.projector is not None
        generator = self.noise.generator
        return {
            "warm_start": self.projector._u.detach().cpu(),
            "output_scale": float(self.noise.output_scale),
            "fixed_noise": [] if self.noise.fixed_noise is None else [self.noise.fixed_noise.detach().cpu()],
            "generator": [] if generator is None else [generator.get_state()],
            "final_sensitivity": float(self.final_sensitivity),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Puts back what :meth:`state_dict` saved (after :meth:`prepare` on the rerun's model)."""
        assert self.noise is not None and self.projector is not None
        u = self.projector._u
        self.projector._u = state["warm_start"].to(u.device, u.dtype)
        self.noise.output_scale = float(state["output_scale"])
        fixed = state["fixed_noise"]
        self.noise.fixed_noise = fixed[0].to(self.noise.redistribution.device) if fixed else None
        if state["generator"] and self.noise.generator is not None:
            self.noise.generator.set_state(state["generator"][0])
        self.final_sensitivity = float(state["final_sensitivity"])

    def start_fixed_noise(self) -> None:
        """(c): draw the one training noise tensor now (from the layer's generator) and reuse it."""
        assert self.noise is not None
        if self.fixed_noise:
            self.noise.fix_noise(True)
