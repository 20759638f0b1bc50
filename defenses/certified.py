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
  training data and the robustness parameters (ε_r, δ_r, L). Its defaults adapt to the model
  and input (both public): the sensitivity control by the first layer's kind
  (:func:`resolve_sensitivity_control`), L by the input size
  (:meth:`RobustnessConfig.resolved_attack_norm_bound`); the record stores the options as
  given, the resolved L in its certification spec and the control in ``metrics``.

The mathematics of the paper, not the quirks of its TensorFlow code (``certified.md`` §2):
the noise std is σ√r_k (not σ r_k); Δ_r is computed exactly for L2 attacks (not estimated from
the reshaped kernel); noise is drawn afresh at every forward pass; DP-SGD clips per example.
For Secure-SGD the pre-trained model behind r is trained on the split's *population* (ids the
DP-trained model never sees), because r shapes the training noise and so the released
parameters: computing it from the members would leak outside the DP claim.

**The authors' code as explicit options.** To reproduce the published numbers and see which
of them the mathematics supports, HGM and Secure-SGD take six ``authors_*`` options, all off
by default (:class:`AuthorsCodeOptions`; :data:`AUTHORS_QUIRKS` says what each does and
which guarantee it voids). A record trained with any of them on lists them under
``config["authors_quirks"]`` and in ``config["certification"]``, and its claim's description
names them, saying "NOT a valid guarantee" where the DP claim no longer holds (batch
clipping). ``dpaudit certify`` measures Δ_r on the released weights and draws fresh noise,
so its certificate stays the mathematics' verdict on a quirky model; the mixed δ (f) applies
only where it is passed explicitly (:class:`dpaudit.robustness.certification.AuthorsMixedDelta`).

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

from defenses._common import build_record, config_dict, model_id_for
from defenses.dpsgd import DPSGDConfig, announce_plan, learning_rate_at, plan_dpsgd, poisson_lot, train_dpsgd
from defenses.nonprivate import NonPrivateConfig, train_nonprivate
from dpaudit import _validate as v
from dpaudit.data import DatasetBundle, Splits
from dpaudit.models import build_model
from dpaudit.options import option
from dpaudit.privacy.claims import dpsgd_claim
from dpaudit.privacy.gaussian import calibrate_gaussian
from dpaudit.progress import Progress
from dpaudit.results.certification_spec import CertificationSpec
from dpaudit.results.record import TrainedModel
from dpaudit.robustness.certification import AUTHORS_REFERENCE_DELTA
from dpaudit.robustness.noise import (
    ATTACK_NORMS,
    NoiseLayer,
    SensitivityProjector,
    authors_heuristic_sensitivity,
    find_noise_layer,
    layer_sensitivity,
    orthogonalize,
    redistribution_from_gradients,
)
from dpaudit.seeding import derive_seed, numpy_rng, torch_generator
from dpaudit.training import EPOCH_LIMIT, SGDConfig, check_loss

__all__ = [
    "AUTHORS_QUIRKS",
    "AuthorsCodeOptions",
    "CERTIFIED_MECHANISMS",
    "authors_quirks",
    "RobustnessConfig",
    "PixelDPConfig",
    "AGMConfig",
    "HGMConfig",
    "SecureSGDConfig",
    "certification_spec",
    "compute_redistribution",
    "resolve_sensitivity_control",
    "auto_sensitivity_control",
    "scale_invariant_first_layer",
    "resolve_secure_sgd_config",
    "train_pixeldp",
    "train_agm",
    "train_hgm",
    "train_secure_sgd",
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
    sensitivity_control: str = option(
        "project",
        choices=SENSITIVITY_CONTROLS,
        help="keep the first layer's sensitivity <= 1 by projection, scale the noise to it, divide the layer's output by it, or keep the layer orthogonal (equal singular values) and scale the noise to it; auto: orthogonal for a convolutional first layer, normalize for a Linear one",
    )

    def _check_robustness(self, mechanism: str, max_epsilon: float | None) -> None:
        eps = v.positive("robustness_epsilon", self.robustness_epsilon)
        v.open_unit("robustness_delta", self.robustness_delta)
        if self.attack_norm_bound is not None or not self._derived_attack_norm_bound:
            v.positive("attack_norm_bound", self.attack_norm_bound)
        v.choice("attack_norm", self.attack_norm, ATTACK_NORMS)
        frac = v.real("noise_ramp_fraction", self.noise_ramp_fraction)
        if not 0.0 <= frac <= 1.0:
            raise v.invalid("noise_ramp_fraction", f"noise_ramp_fraction must lie in [0, 1], got {self.noise_ramp_fraction!r}")
        if not isinstance(self.redistribute, bool):
            raise v.invalid_type("redistribute", f"redistribute must be a bool, got {self.redistribute!r}")
        v.non_negative("inflation", self.inflation)
        v.positive("redistribution_exponent", self.redistribution_exponent)
        v.integer("redistribution_pretrain_epochs", self.redistribution_pretrain_epochs, minimum=1)
        v.integer("redistribution_examples", self.redistribution_examples, minimum=1)
        v.choice("sensitivity_control", self.sensitivity_control, SENSITIVITY_CONTROLS)
        if max_epsilon is not None and eps > max_epsilon:
            raise v.invalid("robustness_epsilon", f"robustness_epsilon must be <= {max_epsilon:g} for the {mechanism} calibration, got {self.robustness_epsilon!r}")
        try:
            calibrate_gaussian(epsilon=eps, delta=self.robustness_delta, method=mechanism)
        except ValueError as exc:  # e.g. δ_r > 0.484 for the extended mechanism; name the field the user set
            raise v.invalid("robustness_delta", f"robustness_delta={self.robustness_delta!r} / robustness_epsilon={eps!r} invalid for the {mechanism} calibration: {exc}") from None

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
            raise v.invalid("attack_norm_bound", "attack_norm_bound=None is derived from the input shape: resolve it with for_input(input_shape) first")
        return calibrate_gaussian(epsilon=self.robustness_epsilon, delta=self.robustness_delta, method=mechanism) * self.attack_norm_bound


#: The authors' TensorFlow code's behaviours (certified.md §2 (a)–(f)), by config field: the
#: label records and claims carry, and what it does to the guarantees. Every one is off by default.
AUTHORS_QUIRKS: dict[str, tuple[str, str]] = {
    "authors_noise_scale_r": (
        "noise-scale-r",
        "(a) noise std sigma*r_k instead of sigma*sqrt(r_k), calibrated as if it were sigma*sqrt(r_k): the noise layer does not meet its (eps_r, delta_r, L) as trained",
    ),
    "authors_heuristic_sensitivity": (
        "heuristic-sensitivity",
        "(b) Delta_r estimated from the reshaped kernel and r, not the layer's sensitivity: the noise may be below what (eps_r, delta_r, L) needs",
    ),
    "authors_fixed_training_noise": (
        "fixed-training-noise",
        "(c) one noise-layer draw reused at every training step (the released model draws fresh noise; no guarantee depends on the training draws)",
    ),
    "authors_batch_clipping": (
        "batch-clipping",
        "(d) each weight's batch-mean gradient is clipped to C (biases not at all) instead of each example's gradient, so one example can move the noisy sum by up to 2*L*C on the weights and without bound on the biases, where the accounting assumes C: this epsilon is NOT a valid guarantee for the run",
    ),
    "authors_redistribution_total": (
        "redistribution-total",
        "(e) r normalised to sum 16*16*C (the MNIST script's total) instead of K; Delta_r is measured with that r",
    ),
    "authors_mixed_delta": (
        "mixed-delta",
        f"(f) certified sizes scaled by c(eps_r, {AUTHORS_REFERENCE_DELTA:g})/c(eps_r, delta_r), a delta the noise was not calibrated at: such sizes are NOT certificates",
    ),
}

#: The positions per channel the authors' MNIST script normalises r to (16·16, a CIFAR-10 size).
_AUTHORS_POSITIONS = 16 * 16


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise v.invalid_type(name, f"{name} must be a bool, got {value!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class AuthorsCodeOptions:
    """Phan et al.'s TensorFlow code's behaviours as explicit options, all off by default.

    The paper's mathematics (Theorems 2–3, Algorithm 1) is what the defenses implement; these
    options reproduce what the authors' code (github.com/haiphanNJIT/SecureSGD) does instead,
    so a user can reproduce their numbers and see which the mathematics supports
    (certified.md §2). Records trained with any on name them (:func:`authors_quirks`).

    Attributes:
        authors_noise_scale_r: (a) component k gets noise std σ·r_k instead of σ·√r_k, while
            the calibration (Δ_r, the projection) still assumes σ·√r_k. Components with
            r_k < 1 are under-noised, so the layer does not meet (ε_r, δ_r) at L as trained.
            The layer stores r² so that the released model adds exactly this noise, and
            ``certify`` measures Δ with it: its certificate is honest about what was added.
        authors_heuristic_sensitivity: (b) Δ_r = σ_max(kernel as C_out × fan-in) /
            √σ_max(r as C × positions) (:func:`dpaudit.robustness.noise.authors_heuristic_sensitivity`)
            instead of the exact Δ_r (l2, l1) or the bound √(Σ_k ‖W_k‖₁² / r_k) (linf), for the
            projection and the noise during training and for the released σ. It is not an
            upper bound, so the noise may be too small for (ε_r, δ_r) at L; ``certify``
            measures the exact Δ_r again.
        authors_fixed_training_noise: (c) the noise layer's training noise is drawn once (one
            tensor of h's shape, shared by every example) and reused at every step, instead of
            fresh noise at every forward pass. The released model draws fresh noise. Neither
            guarantee rests on training draws (the DP claim is DP-SGD's; the certificate is
            about the released layer), but the model is not trained as the paper says.
        authors_redistribution_total: (e) r is normalised to Σ r = 16·16·C (C = channels of
            the first layer's output) — the MNIST script's total, 8,192 for its 28·28·32 = 25,088
            components — instead of Σ r = K (Theorem 3; the CIFAR-10 script uses K). Δ_r is
            measured with that r, so the calibration stays valid; only the total noise differs
            from the isotropic mechanism's. Needs a convolutional first layer.
        authors_mixed_delta: (f) certified sizes are scaled by c(ε_r, 1e-5)/c(ε_r, δ_r): the
            code certifies with the multiplier at δ = 1e-5 (its DP-SGD δ) while the noise is
            calibrated at δ_r. Stored in the record's certification spec as
            ``authors_reference_delta``; applied by
            :class:`dpaudit.robustness.certification.AuthorsMixedDelta`. Such sizes are **not
            certificates**.
    """

    _omit_when_default: ClassVar[tuple[str, ...]] = (
        "authors_noise_scale_r",
        "authors_heuristic_sensitivity",
        "authors_fixed_training_noise",
        "authors_redistribution_total",
        "authors_mixed_delta",
    )

    authors_noise_scale_r: bool = option(
        False, help="AUTHORS' CODE, not the paper: noise std sigma*r_k; the maths (Theorem 3) adds sigma*sqrt(r_k), so this under-noises components with r_k < 1 and voids eps_r/delta_r/L"
    )
    authors_heuristic_sensitivity: bool = option(
        False,
        help="AUTHORS' CODE, not the paper: Delta_r = sigma_max(reshaped kernel)/sqrt(sigma_max(reshaped r)); the maths uses the exact Delta_r (l2, l1) or the bound sqrt(sum_k ||W_k||_1^2/r_k) (linf); may under-noise",
    )
    authors_fixed_training_noise: bool = option(
        False, help="AUTHORS' CODE, not the paper: draw the noise layer's training noise once and reuse it every step; the maths draws fresh noise at every pass (the released model still does)"
    )
    authors_redistribution_total: bool = option(False, help="AUTHORS' CODE, not the paper: normalise r to sum 16*16*C (their MNIST total); Theorem 3 needs sum r_k = K (conv first layer only)")
    authors_mixed_delta: bool = option(
        False, help="AUTHORS' CODE, not the paper: certify with the multiplier at delta=1e-5 while the noise is calibrated at delta_r; the maths uses delta_r; inflated sizes, NOT certificates"
    )

    def _check_authors_options(self) -> None:
        for name in AUTHORS_QUIRKS:
            if hasattr(self, name):
                _flag(name, getattr(self, name))
        for name in ("authors_noise_scale_r", "authors_redistribution_total"):
            if getattr(self, name) and not getattr(self, "redistribute", False):
                raise v.invalid(name, f"{name}=True needs redistribute=True (it acts on the redistribution vector r), got redistribute={getattr(self, 'redistribute', None)!r}")


def authors_quirks(config: Any) -> tuple[str, ...]:
    """Labels of the authors'-code options switched on in ``config`` (``()`` for the mathematics)."""
    return tuple(label for name, (label, _) in AUTHORS_QUIRKS.items() if getattr(config, name, False) is True)


def _quirk_note(config: Any) -> str:
    """What a claim's description appends for the switched-on quirks ("" when none)."""
    notes = [f"{label}: {AUTHORS_QUIRKS[name][1]}" for name, (label, _) in AUTHORS_QUIRKS.items() if getattr(config, name, False) is True]
    return f" [authors' code, not the paper's mathematics: {'; '.join(notes)}]" if notes else ""


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
        help="attack radius L the noise is calibrated for (default 0.2*min(1, sqrt(d/784)) for d input values: Phan et al.'s 0.2 on 28x28, the same per-pixel size on smaller inputs)",
        metavar="L",
        check=v.positive,
    )
    redistribute: bool = True
    sensitivity_control: str = "auto"
    authors_batch_clipping: bool = option(
        False, help="AUTHORS' CODE, not the paper: clip each weight's batch-mean gradient to C, biases not at all; DP-SGD (the maths) clips each example's gradient; voids the DP guarantee"
    )

    def __post_init__(self) -> None:
        DPSGDConfig.__post_init__(self)
        self._check_robustness(*CERTIFIED_MECHANISMS["secure-sgd"])
        self._check_authors_options()
        if self.authors_batch_clipping and self.pca_components is not None:
            raise v.invalid("authors_batch_clipping", f"authors_batch_clipping=True does not support DP-PCA, got pca_components={self.pca_components!r}")


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
        r with the noise layer's output shape (r > 0, Σ r = K; Σ r = 16·16·C with the
        authors' ``authors_redistribution_total``).
    """
    ids = np.asarray(ids, dtype=np.int64)
    if len(ids) == 0:
        raise v.invalid("member_fraction", "the data for the redistribution vector is empty; use --member-fraction < 1 or redistribute=False")
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
    total = _authors_total(noise.output_shape) if getattr(config, "authors_redistribution_total", False) is True else None
    return redistribution_from_gradients(torch.cat(grads), inflation=config.inflation, exponent=config.redistribution_exponent, total=total)


def _authors_total(output_shape: tuple[int, ...]) -> float:
    """Σ r of the authors' MNIST script: 16·16 positions per channel (certified.md §2 (e))."""
    if len(output_shape) < 2:
        raise v.invalid("model", f"authors_redistribution_total=True needs a first layer with channels and positions (a convolution), got output shape {output_shape!r}")
    return float(_AUTHORS_POSITIONS * output_shape[0])


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


def auto_sensitivity_control(*, model_name: str, model_options: dict[str, Any] | None, input_shape: tuple[int, ...], num_classes: int, pca_components: int | None = None) -> str:
    """What ``auto`` resolves to on this architecture (:func:`resolve_sensitivity_control`).

    Builds the untrained model only to look at its first layer (public: the architecture).
    """
    options = {k: x for k, x in dict(model_options or {}).items() if k != "noise_layer"}
    if pca_components is not None:
        options.setdefault("pca_components", pca_components)
    noise = find_noise_layer(build_model(model_name, input_shape=tuple(input_shape), num_classes=num_classes, noise_layer=True, **options))
    assert noise is not None  # built with noise_layer=True
    return resolve_sensitivity_control("auto", noise)


def scale_invariant_first_layer(config: Any, *, model_name: str, model_options: dict[str, Any] | None, input_shape: tuple[int, ...], num_classes: int) -> bool:
    """Whether training ``config`` on this model normalises the first layer by its own scale.

    True when the sensitivity control is (or ``auto`` resolves to) ``normalize`` on the model's
    first layer: the layer then computes the same function for W and c·W, and the DP-SGD
    defaults raise the learning rate for it (:mod:`defenses.dp_defaults`, rule 5).
    """
    control = getattr(config, "sensitivity_control", None)
    if control == "auto":
        control = auto_sensitivity_control(model_name=model_name, model_options=model_options, input_shape=input_shape, num_classes=num_classes, pca_components=getattr(config, "pca_components", None))
    return control == "normalize"


def resolve_secure_sgd_config(
    config: SecureSGDConfig, *, num_members: int, model_name: str, model_options: dict[str, Any] | None, input_shape: tuple[int, ...], num_classes: int
) -> tuple[SecureSGDConfig, str | None]:
    """Secure-SGD's config with its unset DP-SGD defaults derived (rules 1-5 of :mod:`defenses.dp_defaults`).

    As :func:`defenses.dpsgd.resolve_config`, with rule 5 applied when the first layer is
    normalised (:func:`scale_invariant_first_layer`). ``dpaudit train`` and
    :func:`train_secure_sgd` both resolve through it, so the record's id carries the values that ran.
    """
    from defenses.dp_defaults import defaults_note, resolve_dp_config

    if not isinstance(config, SecureSGDConfig):
        raise v.invalid_type("config", f"config must be a SecureSGDConfig, got {type(config).__name__}")
    n = v.integer("num_members", num_members, minimum=1)
    scale_invariant = scale_invariant_first_layer(config, model_name=model_name, model_options=model_options, input_shape=input_shape, num_classes=num_classes)
    resolved, derived = resolve_dp_config(config, num_members=n, scale_invariant_first_layer=scale_invariant)
    note = defaults_note(resolved, derived, num_members=n)
    if note is not None and scale_invariant and "learning_rate" in derived:
        note += " (the lr is raised for the normalised first layer: rule 5 of defenses.dp_defaults)"
    return resolved, note


class _NoiseSchedule:
    """Installs the noise layer before training and keeps it calibrated after every step.

    σ = c(ε_r, δ_r)·L per unit of sensitivity. With ``project`` the first layer is rescaled to
    Δ_r ≤ 1 and the noise is σ; with ``scale-noise`` the noise is σ·Δ_r of the current weights
    (a warm power-iteration estimate during training, the exact value at the end).

    The authors'-code options change three things here (certified.md §2): (a) the layer holds
    r² (std σ r_k) while Δ_r is still weighted by r; (b) Δ_r is their heuristic; (c) one noise
    draw is reused until the last step.
    """

    def __init__(self, *, sigma: float, redistribution: torch.Tensor | None, config: RobustnessConfig, input_shape: tuple[int, ...], total_steps: int) -> None:
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
        return layer_sensitivity(self.noise, input_shape=self.input_shape, norm=self.config.attack_norm, redistribution=self.calibration_r)

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
            noise.set_noise(0.0, self.redistribution, total=_authors_total(noise.output_shape))
        else:
            noise.set_noise(0.0, self.redistribution)
        self.noise = noise
        if self.orthogonal:
            self.orthogonal_scale = orthogonalize(noise)
        self.projector = SensitivityProjector(noise, input_shape=self.input_shape, norm=self.config.attack_norm, iterations=2, redistribution=self.calibration_r, heuristic=self.heuristic)
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
            self._weighted_layer().weight.mul_(1.0 / delta)
            delta = self._sensitivity()
        if self.normalize and full_noise:
            # Release: fold h = g·(Wx + b)/Δ_r into the layer (W, b ← gW/Δ_r, gb/Δ_r), the same
            # function, now with Δ_r = g exactly and no training-time scale left on the layer.
            self.noise.output_scale = 1.0
            layer = self._weighted_layer()
            layer.weight.mul_(self.gain / delta)
            if getattr(layer, "bias", None) is not None:
                layer.bias.mul_(self.gain / delta)
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

    def start_fixed_noise(self) -> None:
        """(c): draw the one training noise tensor now (from the layer's generator) and reuse it."""
        assert self.noise is not None
        if self.fixed_noise:
            self.noise.fix_noise(True)


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
        raise v.invalid("--defense", f"--defense {defense} needs the noise layer; got model_options noise_layer={given!r}")
    mechanism, _ = CERTIFIED_MECHANISMS[defense]
    # The id and the stored config keep the options as given (a derived L stays None, so a rerun
    # finds the record); the calibration and the certification spec use the resolved values.
    given_config, config = config, config.for_input(bundle.input_shape)
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
        schedule.start_fixed_noise()

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
    model_id = model_id_for(defense=defense, bundle=bundle, model_name=model_name, model_options=model_options, config=given_config, splits=splits, seed=seed)
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
    stored = {**config_dict(given_config), "split_seed": splits.seed, "certification": spec.to_dict()}
    claim = record.claim
    quirks = authors_quirks(config)
    if quirks:
        # Never shown as the paper's mathematics: the record, its certification spec and the
        # claim's description (what `train` and the reports print) name every quirk.
        stored["authors_quirks"] = list(quirks)
        stored["certification"] = {**spec.to_dict(), "authors_quirks": list(quirks)}
        if getattr(config, "authors_mixed_delta", False) is True:
            stored["certification"]["authors_reference_delta"] = AUTHORS_REFERENCE_DELTA
        claim = dataclasses.replace(claim, description=claim.description + _quirk_note(config))
        # What `certify` will measure on the released layer, beside the Δ_r training used.
        metrics["first_layer_sensitivity_released"] = layer_sensitivity(noise, input_shape=bundle.input_shape, norm=config.attack_norm)
        metrics["redistribution_sum"] = float(noise.redistribution.double().sum())
    record = dataclasses.replace(record, model_id=model_id, defense=defense, model_options=full_options, config=stored, claim=claim, metrics=metrics)
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
            raise v.invalid_type("config", f"config must be a {config_type.__name__}, got {type(config).__name__}")
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


def _authors_batch_mean_gradient(
    model: nn.Module, params: dict[str, nn.Parameter], features: torch.Tensor, labels: torch.Tensor, *, clip_norm: float, physical_batch_size: int
) -> tuple[dict[str, torch.Tensor], float]:
    """The gradient the authors' code noises: ∇ of the lot's mean loss, each weight clipped as a whole.

    As their TensorFlow code does (certified.md §2 (d)): the gradient of the mean cross-entropy
    over the lot, every weight tensor (≥ 2 dimensions) rescaled to L2 norm ≤ ``clip_norm``
    (``tf.clip_by_norm``), biases left unclipped. No example's own gradient is ever clipped.

    Returns:
        ({name: clipped mean gradient}, Σ loss over the lot).
    """
    total = {name: torch.zeros_like(p) for name, p in params.items()}
    n = int(features.shape[0])
    loss_sum = 0.0
    for start in range(0, n, physical_batch_size):
        xb, yb = features[start : start + physical_batch_size], labels[start : start + physical_batch_size]
        loss = nn.functional.cross_entropy(model(xb), yb, reduction="sum")
        grads = torch.autograd.grad(loss, list(params.values()))
        for name, g in zip(params, grads):
            total[name].add_(g)
        loss_sum += float(loss.detach())
    for g in total.values():
        if n:
            g.div_(n)
        if g.ndim >= 2:
            g.mul_(clip_norm / torch.clamp(g.norm(), min=clip_norm))
    return total, loss_sum


def _train_dpsgd_authors_batch_clipping(
    *,
    bundle: DatasetBundle,
    splits: Splits,
    model_name: str,
    model_options: dict[str, Any] | None = None,
    config: SecureSGDConfig,
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: bool = True,
    prepare_model: Callable[[nn.Module], None] | None = None,
    after_step: Callable[[int, nn.Module], None] | None = None,
    progress_label: str = "dpsgd",
) -> tuple[TrainedModel, nn.Module]:
    """DP-SGD as the authors' code runs it (certified.md §2 (d)): the batch-mean gradient is clipped.

    Everything else follows :func:`defenses.dpsgd.train_dpsgd` with the same seed streams
    (initialisation, lots, noise), so the only difference from the default run is the
    clipping: each step releases :func:`_authors_batch_mean_gradient` + N(0, σ²C²)/L (L the
    public expected lot size). One example can move that by up to 2C through the weights and
    without bound through the unclipped biases, where the accounting assumes C/L: the claim
    carries the DP-SGD event for reference, and its description says the ε is NOT a valid
    guarantee for the run.
    """
    started = time.monotonic()
    device = torch.device(device)
    model_options = dict(model_options or {})
    members = bundle.all().subset(splits.members)
    n = len(members)
    plan = plan_dpsgd(config, num_members=n)
    announce_plan(plan, label=progress_label, enabled=progress)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "init"))  # the same initialisation as train_dpsgd
        model = build_model(model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes, **model_options)
    model.to(device).train()
    if prepare_model is not None:
        prepare_model(model)
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    opt = torch.optim.SGD(list(params.values()), lr=config.learning_rate, momentum=config.momentum, weight_decay=config.weight_decay)
    x, y = members.features.to(device), members.labels.to(device)
    lot_gen = torch_generator(seed, "lots")
    noise_gen = torch_generator(seed, "noise", device=device)
    noise_std = plan.noise_multiplier * config.clip_norm
    order: list[torch.Tensor] = []
    lot_sizes: list[int] = []
    loss_total = 0.0
    with Progress(plan.num_steps, f"train {progress_label} {model_name} on {bundle.name}", enabled=progress) as bar:
        for step in range(plan.num_steps):
            if config.sampling == "poisson":
                lot = poisson_lot(n, plan.sampling_rate, generator=lot_gen)
            else:
                if not order:
                    size = max(1, round(plan.sampling_rate * n))
                    order = list(torch.randperm(n, generator=lot_gen).split(size))
                    if len(order) > 1 and len(order[-1]) < size:
                        order.pop()  # fixed-size lots only, as train_dpsgd
                lot = order.pop(0)
            lot = lot.to(device)
            grads, loss_sum = _authors_batch_mean_gradient(model, params, x[lot], y[lot], clip_norm=config.clip_norm, physical_batch_size=config.physical_batch_size)
            lr = learning_rate_at(config, step / plan.steps_per_epoch)
            check_loss(loss_sum, step=step, epoch=step // plan.steps_per_epoch, learning_rate=lr, hint="or --clip-norm")
            for name, p in params.items():
                g = grads[name]
                g.add_(torch.randn(g.shape, generator=noise_gen, device=g.device, dtype=g.dtype), alpha=noise_std / plan.expected_lot_size)
                p.grad = g
            for group in opt.param_groups:
                group["lr"] = lr
            opt.step()
            if after_step is not None:
                after_step(step, model)
            lot_sizes.append(int(lot.numel()))
            loss_total += loss_sum
            bar.update(1, loss=loss_total / max(sum(lot_sizes), 1))
    for p in params.values():
        p.grad = None
    model.eval()
    desc = f"DP-SGD q={plan.sampling_rate:g} sigma={plan.noise_multiplier:g} T={plan.num_steps} C={config.clip_norm:g}"
    if config.sampling != "poisson":
        desc += " [non-private-accounting: lots drawn by fixed-size shuffling, but the accounting assumes Poisson sampling; this epsilon is NOT a valid guarantee for the run]"
    claim = dpsgd_claim(sampling_rate=plan.sampling_rate, noise_multiplier=plan.noise_multiplier, num_steps=plan.num_steps, description=desc)
    epsilon = claim.epsilon(delta=config.delta, accountant=config.accountant)
    record = build_record(
        defense="dpsgd",
        model=model,
        bundle=bundle,
        splits=splits,
        model_name=model_name,
        model_options=model_options,
        config=config,
        claim=claim,
        seed=seed,
        device=device,
        started=started,
        progress=progress,
        extra_metrics={
            "num_steps": plan.num_steps,
            "epochs_completed": plan.num_steps * plan.sampling_rate,
            "sampling_rate": plan.sampling_rate,
            "noise_multiplier": plan.noise_multiplier,
            "noise_std": noise_std,
            "expected_lot_size": plan.expected_lot_size,
            "mean_lot_size": float(sum(lot_sizes) / max(len(lot_sizes), 1)),
            "epsilon": epsilon,
            "epsilon_accountant": config.accountant,
            "delta": config.delta,
            "gradient_canary_steps": 0,
            "train_loss_mean": loss_total / max(sum(lot_sizes), 1),
        },
    )
    return record, model


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
    authors' code does (:func:`_train_dpsgd_authors_batch_clipping`); the claim then says its
    ε is NOT a valid guarantee. The other ``authors_*`` options act on the noise layer only
    and leave the DP claim intact (their description is appended all the same).

    Args:
        bundle, splits, model_name, model_options, seed, device, progress: as for
            :func:`defenses.dpsgd.train_dpsgd`.
        config: a :class:`SecureSGDConfig`.
    """
    if not isinstance(config, SecureSGDConfig):
        raise v.invalid_type("config", f"config must be a SecureSGDConfig, got {type(config).__name__}")
    config, _ = resolve_secure_sgd_config(config, num_members=len(splits.members), model_name=model_name, model_options=model_options, input_shape=bundle.input_shape, num_classes=bundle.num_classes)
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
        base_train=_train_dpsgd_authors_batch_clipping if config.authors_batch_clipping else train_dpsgd,
        total_steps=plan.num_steps,
        redistribution_ids=public,
        batch_size=max(1, round(plan.expected_lot_size)),
        learning_rate=config.learning_rate,
    )
