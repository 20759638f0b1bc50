"""The noise layer's robustness parameters and the configs of PixelDP, AGM, HGM and Secure-SGD.

The calibrations: PixelDP's classical multiplier (Lecuyer et al. 2019, §3.2–3.3; ε_r ≤ 1), the
analytic Gaussian (Balle & Wang 2018, Thm 8) and HGM's extended multiplier (Phan et al. 2019,
Theorems 2–3). :func:`certification_spec` is what a trained record stores for ``certify``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from defenses.dpsgd.config import DPSGDConfig
from defenses.noise_layer.authors import AuthorsCodeOptions
from defenses.nonprivate import NonPrivateConfig
from dpaudit import _validate as v
from dpaudit.options import option
from dpaudit.privacy.gaussian import calibrate_gaussian
from dpaudit.results.certification_spec import CertificationSpec
from dpaudit.robustness.noise import ATTACK_NORMS
from dpaudit.training import EPOCH_LIMIT

__all__ = [
    "SENSITIVITY_CONTROLS",
    "REFERENCE_INPUT_SIZE",
    "CERTIFIED_MECHANISMS",
    "RobustnessConfig",
    "PixelDPConfig",
    "AGMConfig",
    "HGMConfig",
    "SecureSGDConfig",
    "certification_spec",
]

SENSITIVITY_CONTROLS = ("auto", "project", "scale-noise", "normalize", "orthogonal")

#: Phan et al.'s (2019, §6) attack norm bound L for 28×28 MNIST inputs in [0, 1], the input size
#: the default L keeps its per-pixel scale for (:meth:`RobustnessConfig.resolved_attack_norm_bound`).
REFERENCE_INPUT_SIZE = 28 * 28

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
            every step, noise fixed), ``scale-noise`` (leave the layer free and set the noise
            to c·L·Δ_r of the current weights) or ``normalize`` (leave the weights free, divide
            the layer's output by their Δ_r, noise fixed; the division is folded into the
            weights at release) or ``orthogonal`` (below). All four release the same mechanism.
            They differ in training: with ``scale-noise`` the step treats Δ_r as a constant, so
            growing the weights always looks like beating the noise, and under DP-SGD the first
            layer grows to Δ_r ≈ 10–15 while the later layers see a growing scale. Projecting
            after every step fights that growth with momentum still pointing outward, and
            diverged in our runs. ``normalize`` makes the function invariant to the weights'
            scale (as weight normalisation does), so their growth changes nothing downstream;
            it multiplies by the layer's initial Δ_r (a constant gain g) so the later layers see
            the activation scale they were initialised for, and releases sensitivity g with
            noise σ·g. ``orthogonal`` keeps every singular value of the first layer's kernel
            matrix (out × fan-in) equal to its initial mean after every step (a polar
            projection, post-processing of the DP update) and scales the noise to Δ_r. For a
            stride-1 convolution with at least as many output channels as kernel taps this
            makes the layer an isometry up to a constant on inputs away from the border
            (‖Wx‖ = Δ_r‖x‖, the most signal any layer of sensitivity Δ_r can pass to meet the
            noise), where a free layer's ‖Wx‖ is below Δ_r‖x‖. On MNIST's hgm-cnn at ε = 2 it
            lifts Secure-SGD from 4.9 points below DP-SGD (``scale-noise`` and ``normalize``)
            to above it (README). ``auto`` (Secure-SGD's default) picks ``orthogonal`` for a
            convolutional first layer and ``normalize`` for a Linear one, where holding the
            scale fixed makes every DP-SGD step's noise re-randomise the layer
            (:func:`resolve_sensitivity_control` has the rule and its measurements).
    """

    robustness_epsilon: float = option(
        1.0, help="epsilon_r of the noise layer's input-DP guarantee (pixeldp: <= 1)", metavar="EPS_R", check=v.positive
    )
    robustness_delta: float = option(0.05, help="delta_r of the noise layer", metavar="DELTA_R", check=v.open_unit)
    attack_norm_bound: float = option(
        0.1, help="attack radius L the noise is calibrated for", metavar="L", check=v.positive
    )
    attack_norm: str = option("l2", choices=ATTACK_NORMS, help="norm of the input changes certified against")
    noise_ramp_fraction: float = option(
        0.1,
        help="fraction of training over which the noise ramps up to full size",
        metavar="FRACTION",
        check=v.non_negative,
    )
    redistribute: bool = option(False, help="HGM heterogeneous noise from a pre-trained model's forward derivative")
    inflation: float = option(
        0.5, help="HGM inflation rate beta (large = uniform noise)", metavar="BETA", check=v.non_negative
    )
    redistribution_exponent: float = option(
        1.0, help="power on the forward-derivative scores (2 on CIFAR-10)", check=v.positive
    )
    redistribution_pretrain_epochs: int = option(
        2,
        help="epochs of the noise-free model the redistribution is computed from",
        metavar="N",
        check=v.positive,
        limit=EPOCH_LIMIT,
    )
    redistribution_examples: int = option(
        1000,
        help="examples whose forward derivatives are averaged for the redistribution",
        metavar="N",
        check=v.positive,
    )
    sensitivity_control: str = option(
        "project",
        choices=SENSITIVITY_CONTROLS,
        help="keep the first layer's sensitivity <= 1 by projection, scale the noise "
        "to it, divide the layer's output by it, or keep the layer orthogonal "
        "(equal singular values) and scale the noise to it; auto: orthogonal "
        "for a convolutional first layer, normalize for a Linear one",
    )

    def _check_robustness(self, mechanism: str, max_epsilon: float | None) -> None:
        eps = v.positive("robustness_epsilon", self.robustness_epsilon)
        v.open_unit("robustness_delta", self.robustness_delta)
        if self.attack_norm_bound is not None or not self._derived_attack_norm_bound:
            v.positive("attack_norm_bound", self.attack_norm_bound)
        v.choice("attack_norm", self.attack_norm, ATTACK_NORMS)
        frac = v.real("noise_ramp_fraction", self.noise_ramp_fraction)
        if not 0.0 <= frac <= 1.0:
            raise v.invalid(
                "noise_ramp_fraction", f"noise_ramp_fraction must lie in [0, 1], got {self.noise_ramp_fraction!r}"
            )
        if not isinstance(self.redistribute, bool):
            raise v.invalid_type("redistribute", f"redistribute must be a bool, got {self.redistribute!r}")
        v.non_negative("inflation", self.inflation)
        v.positive("redistribution_exponent", self.redistribution_exponent)
        v.integer("redistribution_pretrain_epochs", self.redistribution_pretrain_epochs, minimum=1)
        v.integer("redistribution_examples", self.redistribution_examples, minimum=1)
        v.choice("sensitivity_control", self.sensitivity_control, SENSITIVITY_CONTROLS)
        if max_epsilon is not None and eps > max_epsilon:
            raise v.invalid(
                "robustness_epsilon",
                f"robustness_epsilon must be <= {max_epsilon:g} for the {mechanism} "
                f"calibration, got {self.robustness_epsilon!r}",
            )
        try:
            calibrate_gaussian(epsilon=eps, delta=self.robustness_delta, method=mechanism)
        except ValueError as exc:  # e.g. δ_r > 0.484 for the extended mechanism; name the field the user set
            raise v.invalid(
                "robustness_delta",
                f"robustness_delta={self.robustness_delta!r} / "
                f"robustness_epsilon={eps!r} invalid for the {mechanism} calibration: "
                f"{exc}",
            ) from None

    #: Whether ``attack_norm_bound=None`` means "derived from the input size" (Secure-SGD).
    _derived_attack_norm_bound: ClassVar[bool] = False
    #: The paper's L on 28×28 inputs, which the derived default scales (Phan et al. 2019, §6).
    _reference_attack_norm_bound: ClassVar[float] = 0.2

    def resolved_attack_norm_bound(self, input_shape: tuple[int, ...]) -> float:
        """L as given, or (``None``) the paper's L scaled to inputs smaller than MNIST's.

        Phan et al. (2019, §6) calibrate L = 0.2 (L2) for 28×28 inputs in [0, 1] (and keep 0.2
        on 32×32×3 CIFAR-10). On d < 784 inputs the same L is a larger share of the image: the
        noise σ = c·L·Δ_r then drowns the signal of an 8×8 digit (‖x‖ ≈ 3.9 against ≈ 9.3 for
        MNIST). The derived L = 0.2·min(1, √(d/784)) keeps the root-mean-square change per
        pixel of the paper's MNIST setting (0.2/28): 0.057 on 8×8 digits, 0.2 from 28×28 up.
        It depends only on the input shape (public). On digits-mlp (Secure-SGD, ε = 2, lots
        of 64, 30 epochs, ``normalize``) L = 0.2 gives 0.54 test accuracy, L = 0.057 gives 0.81,
        against 0.83 for DP-SGD with the same lots, rate and epochs.
        """
        if self.attack_norm_bound is not None:
            return float(self.attack_norm_bound)
        size = int(np.prod(input_shape))
        return self._reference_attack_norm_bound * min(1.0, float(np.sqrt(size / REFERENCE_INPUT_SIZE)))

    def for_input(self, input_shape: tuple[int, ...]) -> Any:
        """This config with every input-derived default resolved (what training calibrates with)."""
        if self.attack_norm_bound is not None:
            return self
        return dataclasses.replace(self, attack_norm_bound=self.resolved_attack_norm_bound(input_shape))

    def noise_per_sensitivity(self, mechanism: str) -> float:
        """σ/Δ = c(ε_r, δ_r)·L: the base noise std for a first layer of sensitivity 1.

        Raises:
            ValueError: L is still to be derived from the input (call :meth:`for_input` first).
        """
        if self.attack_norm_bound is None:
            raise v.invalid(
                "attack_norm_bound",
                "attack_norm_bound=None is derived from the input shape: resolve it with for_input(input_shape) first",
            )
        return (
            calibrate_gaussian(epsilon=self.robustness_epsilon, delta=self.robustness_delta, method=mechanism)
            * self.attack_norm_bound
        )


@dataclass(frozen=True, kw_only=True)
class _CertifiedSGDConfig(NonPrivateConfig, RobustnessConfig):
    """SGD (see :class:`dpaudit.training.SGDConfig`) plus the noise layer of ``_defense``."""

    _defense: ClassVar[str]

    def __post_init__(self) -> None:
        NonPrivateConfig.__post_init__(self)  # fills the unset SGD fields, then checks them
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
class HGMConfig(_CertifiedSGDConfig, AuthorsCodeOptions):
    """HGM_PixelDP: extended calibration, redistributed noise. Defaults: Phan et al.'s MNIST run.

    The ``authors_*`` fields (:class:`AuthorsCodeOptions`) reproduce the authors' code; off by default.
    """

    _defense: ClassVar[str] = "hgm"
    robustness_epsilon: float = 4.0
    attack_norm_bound: float = 0.2
    redistribute: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_authors_options()


@dataclass(frozen=True, kw_only=True)
class SecureSGDConfig(DPSGDConfig, RobustnessConfig, AuthorsCodeOptions):
    """Secure-SGD: the HGM noise layer trained with DP-SGD (every DP-SGD field applies).

    The ``authors_*`` fields (:class:`AuthorsCodeOptions`, and ``authors_batch_clipping``)
    reproduce the authors' code; off by default.

    Attributes:
        authors_batch_clipping: (d) the DP-SGD part clips, as the authors' code does, the
            gradient of the lot's *mean* loss — each weight tensor to L2 norm C, biases
            unclipped — and adds N(0, σ²C²)/L, instead of clipping each example's gradient.
            One example can then move the noisy sum by up to 2·L·C through the weights and
            without bound through the biases, where the accounting assumes C, so the DP-SGD
            ε does **not** hold: the claim's description says it is NOT a valid guarantee.
            Poisson or shuffled lots as configured; no DP-PCA.
    """

    _omit_when_default: ClassVar[tuple[str, ...]] = (*AuthorsCodeOptions._omit_when_default, "authors_batch_clipping")

    _derived_attack_norm_bound: ClassVar[bool] = True

    robustness_epsilon: float = 4.0
    attack_norm_bound: float | None = option(  # type: ignore[assignment]
        None,
        help="attack radius L the noise is calibrated for (default 0.2*min(1, "
        "sqrt(d/784)) for d input values: Phan et al.'s 0.2 on 28x28, the same "
        "per-pixel size on smaller inputs)",
        metavar="L",
        check=v.positive,
    )
    redistribute: bool = True
    sensitivity_control: str = "auto"
    authors_batch_clipping: bool = option(
        False,
        help="AUTHORS' CODE, not the paper: clip each weight's batch-mean gradient "
        "to C, biases not at all; DP-SGD (the maths) clips each example's "
        "gradient; voids the DP guarantee",
    )

    def __post_init__(self) -> None:
        DPSGDConfig.__post_init__(self)
        self._check_robustness(*CERTIFIED_MECHANISMS["secure-sgd"])
        self._check_authors_options()
        if self.authors_batch_clipping and self.pca_components is not None:
            raise v.invalid(
                "authors_batch_clipping",
                f"authors_batch_clipping=True does not support DP-PCA, got pca_components={self.pca_components!r}",
            )
        if self.authors_batch_clipping and self.per_layer:
            # The authors' code clips each weight's batch-mean gradient as a whole: there is no layer-wise per-example
            # clipping to apply.
            raise v.invalid(
                "authors_batch_clipping",
                f"authors_batch_clipping=True does not support per-layer clipping, got per_layer={self.per_layer!r}",
            )


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
