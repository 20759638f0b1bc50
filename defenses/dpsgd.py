"""DP-SGD with the moments accountant, and DP-PCA preprocessing (Abadi et al. 2016).

Implements Algorithm 1 of Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar & Zhang, "Deep
Learning with Differential Privacy" (CCS 2016):

1. **Lots.** Each step draws a lot by Poisson sampling: every member is included
   independently with probability q = L/N (§3.1, "Lots"; the lot size varies). A
   fixed-size shuffling mode exists only as an explicitly labelled option
   (``sampling="shuffle-non-private-accounting"``): the accounting assumes Poisson
   sampling, so its claim says the guarantee does not strictly hold.
2. **Clip.** Each example's gradient is clipped to L2 norm C (``clip_norm``), or each layer
   to C_l = C/√(#layers) with ``per_layer`` (§3.1 "Per-layer and time-dependent
   parameters"), computed without per-example gradients by :mod:`defenses.clipping`.
3. **Noise.** The clipped sum gets N(0, σ²C²I) once per lot (σ = ``noise_multiplier``; with
   per-layer clipping C is the total sensitivity √(Σ C_l²)), and is divided by the *public*
   expected lot size q·N — never the realised lot size, which depends on the data.
4. **Descend.** Plain or momentum SGD (momentum only post-processes the released noisy
   gradients), with the paper's schedule: linear decay from ``learning_rate`` to
   ``final_learning_rate`` over ``lr_decay_epochs`` epochs, then constant (§5.1).

**Budget.** One function, :func:`plan_dpsgd`, decides how a run spends ``target_epsilon``
(the command line and compare grids both go through it), and the plan's ``note`` says so
before training:

* ``target_epsilon`` without ``noise_multiplier``: σ is calibrated so that exactly
  ``epochs`` epochs (default ``DEFAULT_EPOCHS``) meet the target. σ has no default that
  could compete with the target: it is resolved to ``DEFAULT_NOISE_MULTIPLIER`` only when
  there is no target.
* ``target_epsilon`` and ``noise_multiplier`` without ``epochs``: the number of steps is the
  largest T whose ε (under ``accountant``, including DP-PCA) stays ≤ the target, computed
  once up front (:func:`dpaudit.privacy.accountants.calibrate_num_steps` or the same bisection
  on the composed event).
* all three: the run trains exactly ``epochs`` epochs if the budget allows them, and is
  refused (naming the steps the budget allows) otherwise; it never stops early in silence.

Otherwise σ and ``epochs`` are fixed. The record's claim is built from the steps actually
taken (counted, not planned).

**Defaults.** Lot size, learning rate, clip norm and (with a target and no σ) the number of
epochs that the user left unset are derived from public facts only — N, ε, δ — by
:mod:`defenses.dp_defaults` (each rule with its source there); :func:`plan_dpsgd` and
:func:`train_dpsgd` resolve them first and say which on stderr, and the record stores the
resolved values, so its id and claim are those of a run that named them.

**DP-PCA** (§4 "Differentially private PCA"; §5.1): a Poisson sample (rate
``pca_sampling_rate``) of the members, each flattened and scaled to unit L2 norm, forms
A = XᵀX. Adding or removing one example changes A by xxᵀ, of Frobenius norm ‖x‖² = 1, so
releasing A's upper triangle plus iid N(0, σ_p²) noise (mirrored to keep A symmetric) is a
Gaussian mechanism with noise multiplier σ_p = ``pca_noise``. The top-k eigenvectors of the
noisy A are installed in the model's :class:`~dpaudit.models.Projection`. Its cost enters the
claim as ``Gaussian(σ_p)`` (``PoissonSampled(q_p, Gaussian(σ_p))`` when q_p < 1), composed
with the DP-SGD event.

**White-box hooks** (for audits in the threat model of §2: the adversary sees every update):

* ``on_step(step_index, noisy_update, lot_size)`` receives, after every step, the released
  quantity Σ_i clip(g_i) + N(0, σ²C²I) as ``{parameter name: tensor}`` (before division by
  the expected lot size) and the realised lot size. The tensors are fresh and not reused.
* ``canary_gradient(step_index) -> {name: tensor} | flat tensor | None`` injects an extra
  per-step "gradient canary" (Nasr et al. 2021, "Adversary Instantiation", §4; Jagielski et
  al. 2020) into the clipped sum *before* the noise. It is clipped exactly like one
  example's gradient (flat or per layer), so it is one more record under the same claim.
  A flat tensor is split over parameters in :func:`parameter_names` order.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from dp_accounting import dp_event as dpe
from torch import nn

from defenses._common import build_record, bundle_for_members
from defenses.clipping import CLIPPING_METHODS, GradientClipper, clip_gradient
from defenses.dp_defaults import CLIP_NORM, DEFAULT_EPOCHS, DERIVED_AT_INIT, LEARNING_RATE, defaults_note, derived_lot_size, resolve_dp_config
from dpaudit import _validate as v
from dpaudit.data import ArrayDataset, DatasetBundle, Splits
from dpaudit.layers import Projection
from dpaudit.models import build_model
from dpaudit.options import option
from dpaudit.privacy.accountant_names import ACCOUNTANTS
from dpaudit.privacy.calibration import calibrate_noise_multiplier, calibrate_num_steps, largest_num_steps, smallest_noise_multiplier
from dpaudit.privacy.claims import DPClaim, PrivacyClaim, dpsgd_claim
from dpaudit.progress import Progress
from dpaudit.results.record import TrainedModel
from dpaudit.seeding import derive_seed, torch_generator
from dpaudit.training import BATCH_LIMIT, EPOCH_LIMIT, check_loss

__all__ = [
    "SAMPLING_MODES",
    "DPSGDConfig",
    "DPSGDPlan",
    "DPSGDTrainer",
    "train_dpsgd",
    "plan_dpsgd",
    "announce_plan",
    "DEFAULT_NOISE_MULTIPLIER",
    "DEFAULT_EPOCHS",
    "resolve_config",
    "dp_pca",
    "pca_claim",
    "learning_rate_at",
    "noisy_clipped_sum",
    "parameter_names",
    "poisson_lot",
]

SAMPLING_MODES = ("poisson", "shuffle-non-private-accounting")
#: σ of a run without ``target_epsilon`` and without ``noise_multiplier``. With a target, σ is
#: calibrated instead: a default σ would silently turn the target into a step budget.
DEFAULT_NOISE_MULTIPLIER = 1.1

OnStep = Callable[[int, dict[str, torch.Tensor], int], None]
CanaryGradient = Callable[[int], "dict[str, torch.Tensor] | torch.Tensor | None"]
OnEpoch = Callable[[int, nn.Module], None]


def _optional(name: str, value: Any, check: Callable[[str, Any], Any]) -> None:
    if value is not None:
        check(name, value)


@dataclass(frozen=True, kw_only=True)
class DPSGDConfig:
    """Hyperparameters of DP-SGD (+ DP-PCA); every privacy argument is keyword-only.

    Attributes:
        noise_multiplier: σ, noise std / clipping norm. ``None`` with ``target_epsilon`` set
            means: calibrate σ so that ``epochs`` epochs meet the target; ``None`` without a
            target is stored as ``DEFAULT_NOISE_MULTIPLIER`` (so the config, and the model id
            digested from it, are those of a run that named σ = 1.1).
        clip_norm: C, the per-example L2 bound (total bound with ``per_layer``). ``None``:
            derived (:mod:`defenses.dp_defaults`, rule 1).
        lot_size: expected lot size L; the sampling rate is q = L / N (N = number of
            members). Give this or ``sampling_rate``, not both.
        sampling_rate: q directly, in (0, 1]. With neither given, L is derived from N
            (:mod:`defenses.dp_defaults`, rule 3).
        expected_lot_size: the public divisor of the noisy sum; ``None`` → q·N.
        target_epsilon: privacy budget ε: calibrates σ for ``epochs``; with
            ``noise_multiplier`` set, train for as many steps as the budget allows, or with
            ``epochs`` too, exactly those epochs if the budget allows them (else refused).
        delta: δ of the budget and of the reported ε.
        accountant: accountant of the budget (one of ``dpaudit.privacy.accountants.ACCOUNTANTS``).
        epochs: number of epochs (expected passes, 1/q steps each). ``None`` means
            ``DEFAULT_EPOCHS`` without a target; with ``target_epsilon`` and no
            ``noise_multiplier``, derived from ε (:mod:`defenses.dp_defaults`, rule 4); with
            both, as many steps as the budget allows.
        learning_rate: initial learning rate lr0. ``None``: derived (rule 2).
        final_learning_rate: floor of the linear decay; ``None`` → constant learning rate.
        lr_decay_epochs: epochs over which the rate decays linearly to the floor.
        momentum: heavy-ball momentum (0 = plain SGD).
        weight_decay: L2 penalty (applied to parameters, not data: no privacy cost).
        per_layer: clip each layer (a module's own parameters, e.g. a Linear's weight and
            bias together) to C/√(#layers) instead of the whole gradient to C; the total
            sensitivity, and so the noise σ·C, is unchanged.
        sampling: ``poisson`` (private) or ``shuffle-non-private-accounting`` (fixed-size
            lots from a shuffle; the claim's accounting does not strictly apply).
        pca_components: k for DP-PCA into the model's Projection (``None`` = no PCA).
        pca_noise: σ_p of DP-PCA (required with ``pca_components``).
        pca_sampling_rate: Poisson rate of the sample DP-PCA uses (1 = all members).
        clipping_method: ``auto`` / ``hooks`` / ``vmap`` (see :mod:`defenses.clipping`).
        physical_batch_size: most examples per forward/backward pass (lots are split; exact).
    """

    noise_multiplier: float | None = option(
        None,
        help=f"sigma = noise std / clip norm (default {DEFAULT_NOISE_MULTIPLIER} without --target-epsilon, calibrated with it); with --target-epsilon: train until the budget is spent, or --epochs if the budget allows",
        metavar="SIGMA",
        check=v.positive,
    )
    clip_norm: float | None = option(None, help="per-example L2 clipping norm C (default derived: 1)", metavar="C", check=v.positive)
    lot_size: int | None = option(
        None, kind=int, help="expected lot size L (sampling rate q = L / members); or give --sampling-rate (default derived from the number of members)", metavar="L", check=v.positive
    )
    sampling_rate: float | None = option(None, help="Poisson sampling rate q in (0, 1] (default: --lot-size derived from the number of members)", metavar="Q", check=v.half_open_unit)
    expected_lot_size: float | None = option(None, help="public divisor of the noisy sum (default q x members)", metavar="L", check=v.positive)
    target_epsilon: float | None = option(
        None, help="privacy budget epsilon at --delta: calibrates sigma for --epochs; with --noise-multiplier, the number of steps (says which before training)", metavar="EPS", check=v.positive
    )
    delta: float = option(1e-5, help="delta of the budget and of the reported epsilon", check=v.open_unit)
    accountant: str = option("pld", choices=ACCOUNTANTS, help="accountant of the budget")
    epochs: float | None = option(
        None,
        kind=float,
        help="epochs (1/q steps each); default 10, or derived from --target-epsilon, or as many as the budget allows with --target-epsilon and --noise-multiplier",
        metavar="N",
        check=v.positive,
        limit=EPOCH_LIMIT,
    )
    learning_rate: float | None = option(None, help="initial learning rate (default derived: 0.5)", metavar="LR", check=v.positive)
    final_learning_rate: float | None = option(None, help="floor of the linear learning-rate decay (default: constant rate)", metavar="LR", check=v.positive)
    lr_decay_epochs: float = option(10.0, help="epochs over which the rate decays to the floor", metavar="N", check=v.positive)
    momentum: float = option(0.0, help="heavy-ball momentum in [0, 1)", check=v.unit_interval_open_right)
    weight_decay: float = option(0.0, help="L2 penalty on the parameters", check=v.non_negative)
    per_layer: bool = option(False, help="clip each layer to C / sqrt(#layers) instead of the whole gradient to C")
    sampling: str = option("poisson", choices=SAMPLING_MODES, help="lot sampling (shuffle lots do not meet the claim's accounting)")
    pca_components: int | None = option(None, kind=int, help="DP-PCA projection to K components (models with a Projection, e.g. abadi-mnist)", metavar="K", check=v.positive)
    pca_noise: float | None = option(None, help="DP-PCA noise multiplier (with --pca-components)", metavar="SIGMA_P", check=v.positive)
    pca_sampling_rate: float = option(1.0, help="Poisson rate of the sample DP-PCA uses", metavar="Q", check=v.half_open_unit)
    clipping_method: str = option("auto", choices=CLIPPING_METHODS, help="per-example gradient engine")
    physical_batch_size: int = option(1024, help="most examples per forward/backward pass (lots are split; exact)", metavar="B", check=v.positive, limit=BATCH_LIMIT)

    def __post_init__(self) -> None:
        _optional("noise_multiplier", self.noise_multiplier, v.positive)
        _optional("clip_norm", self.clip_norm, v.positive)
        _optional("learning_rate", self.learning_rate, v.positive)
        # C and lr depend on no fact a config lacks (rules 1-2 of defenses.dp_defaults), so they are
        # derived here: every reader (Secure-SGD's pretraining, the claim's text) sees a value.
        # Which ones were derived is remembered, outside the fields, for the defaults note.
        derived = []
        for name, value in (("clip_norm", CLIP_NORM), ("learning_rate", LEARNING_RATE)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
                derived.append(name)
        object.__setattr__(self, DERIVED_AT_INIT, tuple(derived))
        if self.lot_size is not None and self.sampling_rate is not None:
            raise v.invalid("lot_size", f"give lot_size or sampling_rate, not both; got lot_size={self.lot_size!r}, sampling_rate={self.sampling_rate!r}")
        _optional("lot_size", self.lot_size, lambda n, x: v.integer(n, x, minimum=1))
        _optional("sampling_rate", self.sampling_rate, v.half_open_unit)
        _optional("expected_lot_size", self.expected_lot_size, v.positive)
        _optional("target_epsilon", self.target_epsilon, v.positive)
        v.open_unit("delta", self.delta)
        v.choice("accountant", self.accountant, ACCOUNTANTS)
        _optional("epochs", self.epochs, v.positive)
        if self.target_epsilon is None and self.noise_multiplier is None:
            # Resolved before the config is digested: a run that never named σ keeps its model id.
            object.__setattr__(self, "noise_multiplier", DEFAULT_NOISE_MULTIPLIER)
        if self.epochs is None and self.target_epsilon is None:
            # With a target, None means derived from ε (no σ) or budget mode (σ given).
            object.__setattr__(self, "epochs", DEFAULT_EPOCHS)
        _optional("final_learning_rate", self.final_learning_rate, v.positive)
        v.positive("lr_decay_epochs", self.lr_decay_epochs)
        if not 0 <= v.real("momentum", self.momentum) < 1:
            raise v.invalid("momentum", f"momentum must lie in [0, 1), got {self.momentum!r}")
        v.non_negative("weight_decay", self.weight_decay)
        if not isinstance(self.per_layer, bool):
            raise v.invalid_type("per_layer", f"per_layer must be a bool, got {self.per_layer!r}")
        v.choice("sampling", self.sampling, SAMPLING_MODES)
        _optional("pca_components", self.pca_components, lambda n, x: v.integer(n, x, minimum=1))
        _optional("pca_noise", self.pca_noise, v.positive)
        if (self.pca_components is None) != (self.pca_noise is None):
            raise v.invalid("pca_components", f"pca_components and pca_noise go together (DP-PCA needs both), got pca_components={self.pca_components!r}, pca_noise={self.pca_noise!r}")
        v.half_open_unit("pca_sampling_rate", self.pca_sampling_rate)
        v.choice("clipping_method", self.clipping_method, CLIPPING_METHODS)
        v.integer("physical_batch_size", self.physical_batch_size, minimum=1)

    def rate(self, num_members: int) -> float:
        """The sampling rate q for ``num_members`` members."""
        n = v.integer("num_members", num_members, minimum=1)
        if self.sampling_rate is not None:
            return float(self.sampling_rate)
        if self.lot_size is None:
            return derived_lot_size(n) / n
        if self.lot_size > n:  # type: ignore[operator]
            raise v.invalid("lot_size", f"lot_size must be <= the number of members ({n}), got {self.lot_size!r}")
        return self.lot_size / n  # type: ignore[operator]


@dataclass(frozen=True, kw_only=True)
class DPSGDPlan:
    """What a DP-SGD run will do, fixed before it sees any data beyond N.

    Attributes:
        sampling_rate: q.
        noise_multiplier: σ (given or calibrated).
        num_steps: steps to take.
        steps_per_epoch: round(1/q) (for the schedule and epoch callbacks).
        expected_lot_size: the divisor q·N (or as configured).
        noise_std: σ·C per coordinate of the noisy sum.
        note: with a target ε, one line saying how it is spent (σ calibrated for the epochs,
            or the steps a given σ allows); ``None`` without a target.
        defaults: one line naming the values derived from public facts
            (:func:`resolve_config`); ``None`` when the config named them all.
    """

    sampling_rate: float
    noise_multiplier: float
    num_steps: int
    steps_per_epoch: int
    expected_lot_size: float
    noise_std: float
    note: str | None = None
    defaults: str | None = None


def pca_claim(config: DPSGDConfig) -> DPClaim | None:
    """The claim of DP-PCA alone (``None`` without PCA)."""
    if config.pca_components is None:
        return None
    sigma_p = float(config.pca_noise)  # type: ignore[arg-type]
    event: dpe.DpEvent = dpe.GaussianDpEvent(sigma_p)
    desc = f"DP-PCA k={config.pca_components} sigma_p={sigma_p:g}"
    if config.pca_sampling_rate < 1.0:
        event = dpe.PoissonSampledDpEvent(config.pca_sampling_rate, event)
        desc += f" q_p={config.pca_sampling_rate:g}"
    return DPClaim(event=event, description=desc)


def _claim(config: DPSGDConfig, *, sampling_rate: float, noise_multiplier: float, num_steps: int) -> DPClaim:
    desc = f"DP-SGD q={sampling_rate:g} sigma={noise_multiplier:g} T={num_steps} C={config.clip_norm:g}{' per-layer' if config.per_layer else ''}"
    if config.sampling != "poisson":
        desc += " [non-private-accounting: lots drawn by fixed-size shuffling, but the accounting assumes Poisson sampling; this epsilon is NOT a valid guarantee for the run]"
    claim = dpsgd_claim(sampling_rate=sampling_rate, noise_multiplier=noise_multiplier, num_steps=num_steps, description=desc)
    pca = pca_claim(config)
    if pca is None:
        return claim
    if num_steps == 0:  # dp_accounting's PLD cannot compose zero steps
        return DPClaim(event=pca.event, description=f"{pca.description} + {desc}")
    return pca.compose(claim)


def _max_steps_composed(config: DPSGDConfig, q: float, sigma: float, cap: int) -> int:
    """Largest T ≤ cap with ε(PCA ∘ DP-SGD_T) ≤ target (bisection; never overshoots)."""
    target = float(config.target_epsilon)  # type: ignore[arg-type]

    def eps(t: int) -> float:
        return _claim(config, sampling_rate=q, noise_multiplier=sigma, num_steps=t).epsilon(delta=config.delta, accountant=config.accountant)

    pca = pca_claim(config)
    if pca is not None and pca.epsilon(delta=config.delta, accountant=config.accountant) >= target:
        raise v.invalid("target_epsilon", f"target_epsilon={target!r} is already exceeded by DP-PCA alone (pca_noise={config.pca_noise!r})")
    steps = largest_num_steps(eps, target=target, max_steps=cap)
    if steps == 0:
        raise v.invalid("target_epsilon", f"target_epsilon={target!r} is exceeded by a single step at noise_multiplier={sigma!r}, sampling_rate={q!r}")
    return steps


def _calibrate_sigma_composed(config: DPSGDConfig, q: float, steps: int) -> float:
    """Smallest σ (to 0.1 %) with ε(PCA ∘ DP-SGD) ≤ target; keeps the upper end (never overshoots)."""
    target = float(config.target_epsilon)  # type: ignore[arg-type]

    def eps(sigma: float) -> float:
        return _claim(config, sampling_rate=q, noise_multiplier=sigma, num_steps=steps).epsilon(delta=config.delta, accountant=config.accountant)

    pca = pca_claim(config)
    if pca is not None and pca.epsilon(delta=config.delta, accountant=config.accountant) >= target:
        raise v.invalid("target_epsilon", f"target_epsilon={target!r} is already used up by DP-PCA alone (pca_noise={config.pca_noise!r})")
    sigma = smallest_noise_multiplier(eps, target=target, tolerance=1e-3, max_sigma=1e5)
    if math.isinf(sigma):
        raise v.invalid("target_epsilon", f"target_epsilon={target!r} is unreachable with any noise_multiplier")
    return sigma


def resolve_config(config: DPSGDConfig, *, num_members: int, scale_invariant_first_layer: bool = False) -> tuple[DPSGDConfig, str | None]:
    """``config`` with its unset lot size, learning rate, clip norm and epochs derived from N, ε, δ.

    Uses :func:`defenses.dp_defaults.resolve_dp_config` (rules and sources there); idempotent.
    The config's type is kept (Secure-SGD's config extends this one).

    Returns:
        (resolved config, the line saying what was derived, or ``None`` when nothing was).
    """
    if not isinstance(config, DPSGDConfig):
        raise v.invalid_type("config", f"config must be a DPSGDConfig, got {type(config).__name__}")
    n = v.integer("num_members", num_members, minimum=1)
    resolved, derived = resolve_dp_config(config, num_members=n, scale_invariant_first_layer=scale_invariant_first_layer)
    return resolved, defaults_note(resolved, derived, num_members=n)


def plan_dpsgd(config: DPSGDConfig, *, num_members: int) -> DPSGDPlan:
    """Resolves q, σ and the number of steps for ``num_members`` members (see module docstring).

    Unset defaults are derived first (:func:`resolve_config`); the plan's ``defaults`` says which.

    The one place that decides how a run spends its budget: ``dpaudit train``, compare grids,
    shadow models and audits all plan through it, so the same keys give the same plan.

    Raises:
        ValueError: the budget cannot be met (e.g. one step already exceeds it), or
            ``epochs`` need more steps than ``target_epsilon`` allows at the given
            ``noise_multiplier`` (the message names how many it allows).
    """
    n = v.integer("num_members", num_members, minimum=1)
    config, defaults = resolve_config(config, num_members=n)
    q = config.rate(n)
    steps_per_epoch = max(1, round(1.0 / q))
    epoch_steps = None if config.epochs is None else max(1, round(config.epochs * steps_per_epoch))
    sigma = config.noise_multiplier
    pca = config.pca_components is not None
    note = None
    target = config.target_epsilon
    if target is None:
        steps = int(epoch_steps)  # type: ignore[arg-type]
    elif sigma is not None:
        cap = epoch_steps if epoch_steps is not None else 10**7
        if pca:
            steps = _max_steps_composed(config, q, sigma, cap)
        else:
            steps = calibrate_num_steps(target_epsilon=target, delta=config.delta, sampling_rate=q, noise_multiplier=sigma, accountant=config.accountant, max_steps=cap)
        reach = f"noise_multiplier={sigma:g} reaches target_epsilon={target:g} (delta={config.delta:g}, {config.accountant}) after {steps} steps ({steps * q:.3g} epochs)"
        if epoch_steps is None:
            note = f"sigma = {sigma:g} reaches epsilon = {target:g} after {steps} steps ({steps * q:.3g} epochs); training stops there (leave --noise-multiplier unset and pass --epochs to calibrate sigma instead)"
        elif steps < epoch_steps:
            # Stopping early would silently train a different run than the one asked for.
            raise v.invalid(
                "epochs",
                f"epochs={config.epochs:g} needs {epoch_steps} steps, but {reach}; lower epochs to at most {steps * q:.3g}, "
                "raise noise_multiplier, or leave noise_multiplier unset to calibrate it for these epochs",
            )
        else:
            note = f"sigma = {sigma:g} and {config.epochs:g} epochs ({steps} steps) stay within epsilon = {target:g}"
    else:
        steps = int(epoch_steps)  # type: ignore[arg-type]
        if pca:
            sigma = _calibrate_sigma_composed(config, q, steps)
        else:
            sigma = calibrate_noise_multiplier(target_epsilon=target, delta=config.delta, sampling_rate=q, num_steps=steps, accountant=config.accountant)
        note = f"sigma = {sigma:.4g} calibrated so that {config.epochs:g} epochs ({steps} steps) spend epsilon = {target:g} at delta = {config.delta:g} ({config.accountant}); --epochs sets the length"
    divisor = float(config.expected_lot_size) if config.expected_lot_size is not None else q * n
    return DPSGDPlan(
        sampling_rate=q,
        noise_multiplier=float(sigma),
        num_steps=int(steps),
        steps_per_epoch=steps_per_epoch,  # type: ignore[arg-type]
        expected_lot_size=divisor,
        noise_std=float(sigma) * float(config.clip_norm),  # type: ignore[arg-type]
        note=note,
        defaults=defaults,
    )


def announce_plan(plan: DPSGDPlan, *, label: str = "dpsgd", enabled: bool = True) -> None:
    """Says on stderr, before training, which values were derived and how the budget is spent."""
    if enabled and plan.defaults is not None:
        print(f"{label} {plan.defaults}", file=sys.stderr, flush=True)
    if enabled and plan.note is not None:
        print(f"{label} budget: {plan.note}", file=sys.stderr, flush=True)


def learning_rate_at(config: DPSGDConfig, epoch: float) -> float:
    """The paper's schedule: linear from lr0 to the floor over ``lr_decay_epochs``, then flat."""
    if config.learning_rate is None:
        raise v.invalid("learning_rate", "learning_rate is unset: resolve the config first (resolve_config)")
    if config.final_learning_rate is None:
        return config.learning_rate
    frac = min(1.0, max(0.0, epoch) / config.lr_decay_epochs)
    return config.learning_rate + (config.final_learning_rate - config.learning_rate) * frac


def poisson_lot(num_members: int, sampling_rate: float, *, generator: torch.Generator) -> torch.Tensor:
    """Positions (0..N-1) of one Poisson lot: each included independently with prob. q."""
    return torch.nonzero(torch.rand(num_members, generator=generator) < sampling_rate).reshape(-1)


def _find_projection(model: nn.Module) -> Projection:
    found = [m for m in model.modules() if isinstance(m, Projection)]
    if len(found) != 1:
        raise v.invalid("model", f"DP-PCA needs a model with exactly one Projection layer (e.g. abadi-mnist with pca_components), found {len(found)}")
    return found[0]


@torch.no_grad()
def dp_pca(features: torch.Tensor, *, num_components: int, noise: float, sampling_rate: float = 1.0, generator: torch.Generator) -> torch.Tensor:
    """DP-PCA of Abadi et al. (2016, §4): top-k eigenvectors of a noisy XᵀX.

    Args:
        features: (N, …) private examples (flattened here).
        num_components: k.
        noise: σ_p; the upper triangle of XᵀX gets iid N(0, σ_p²), mirrored (sensitivity 1
            after scaling each example to unit L2 norm).
        sampling_rate: Poisson rate of the sample used (1 = all).
        generator: randomness for the sample and the noise (CPU).

    Returns:
        (k, d) projection matrix whose rows are the top-k eigenvectors.
    """
    k = v.integer("num_components", num_components, minimum=1)
    sigma_p = v.positive("noise", noise)
    q = v.half_open_unit("sampling_rate", sampling_rate)
    x = features.reshape(features.shape[0], -1).to(torch.float64)
    d = x.shape[1]
    if k > d:
        raise v.invalid("num_components", f"num_components must be <= the input dimension {d}, got {k}")
    if q < 1.0:
        keep = torch.rand(x.shape[0], generator=generator) < q
        x = x[keep.to(x.device)]
    norms = x.norm(dim=1, keepdim=True)
    x = x / norms.clamp_min(1e-12)  # zero rows stay zero
    a = x.T @ x
    upper = torch.triu(torch.randn(d, d, generator=generator, dtype=torch.float64) * sigma_p).to(a.device)
    a = a + upper + torch.triu(upper, diagonal=1).T
    _, vecs = torch.linalg.eigh(a)  # ascending eigenvalues
    return vecs[:, -k:].flip(1).T.contiguous().to(torch.float32)


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
    for t in total.values():
        t.add_(torch.randn(t.shape, generator=generator, device=t.device, dtype=t.dtype), alpha=noise_std * scale)
    return total, loss_sum


def parameter_names(model: nn.Module) -> list[str]:
    """Trainable parameter names in the order a flat canary gradient is split by."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def _canary_dict(value: dict[str, torch.Tensor] | torch.Tensor, params: dict[str, nn.Parameter]) -> dict[str, torch.Tensor]:
    if isinstance(value, torch.Tensor):
        total = sum(p.numel() for p in params.values())
        if value.numel() != total:
            raise v.invalid("canary_gradient", f"canary_gradient returned a flat tensor of {value.numel()} entries; the model has {total} parameters")
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
    raise v.invalid_type("canary_gradient", f"canary_gradient must return a dict of tensors, a flat tensor or None, got {type(value).__name__}")


def load_initial_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Loads ``state`` into ``model`` strictly, or says which names or shapes disagree.

    Raises:
        ValueError: the state does not fit the architecture (missing, unexpected or
            mis-shaped entries, named).
    """
    if not isinstance(state, Mapping):
        raise v.invalid_type("initial_state", f"initial_state must be a mapping of parameter names to tensors, got {type(state).__name__}")
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = sorted(f"{k}: {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in set(own) & set(state) if tuple(state[k].shape) != tuple(own[k].shape))
    if missing or unexpected or shapes:
        parts = [f"missing {missing}" if missing else "", f"unexpected {unexpected}" if unexpected else "", f"shapes differ ({'; '.join(shapes)})" if shapes else ""]
        raise v.invalid("initial_state", f"initial_state does not fit the model: {', '.join(p for p in parts if p)}")
    model.load_state_dict({k: torch.as_tensor(t) for k, t in state.items()}, strict=True)


def train_dpsgd(
    *,
    bundle: DatasetBundle,
    splits: Splits,
    model_name: str,
    model_options: dict[str, Any] | None = None,
    config: DPSGDConfig = DPSGDConfig(),
    seed: int = 0,
    device: torch.device | str = "cpu",
    progress: bool = True,
    on_step: OnStep | None = None,
    canary_gradient: CanaryGradient | None = None,
    on_epoch: OnEpoch | None = None,
    prepare_model: Callable[[nn.Module], None] | None = None,
    after_step: Callable[[int, nn.Module], None] | None = None,
    progress_label: str = "dpsgd",
    initial_state: Mapping[str, torch.Tensor] | None = None,
) -> tuple[TrainedModel, nn.Module]:
    """Trains a zoo model on the split's members with DP-SGD (+ DP-PCA).

    Args:
        bundle: the dataset.
        splits: membership split; only ``splits.members`` are trained on (N = their number).
        model_name: zoo architecture.
        model_options: architecture options; ``pca_components`` is filled in from the config.
        config: hyperparameters and privacy parameters.
        seed: root seed; initialisation, DP-PCA, lots and noise use independent streams.
        device: where to train.
        progress: report progress on stderr.
        on_step: white-box hook ``(step_index, noisy_update, lot_size)`` (module docstring).
        canary_gradient: per-step gradient canary ``step_index -> dict | flat tensor | None``.
        on_epoch: ``(epoch_index, model)`` after every ``steps_per_epoch`` steps (evaluation).
        prepare_model: called once with the built model (on ``device``, after DP-PCA) before
            training, e.g. to install a noise layer (Secure-SGD).
        after_step: ``(step_index, model)`` after every optimiser step; it may only
            post-process the released parameters (e.g. rescale a layer), which costs no privacy.
        progress_label: the defense named on the progress bar (a wrapping defense passes its own).
        initial_state: parameters (and buffers) to start from instead of the seeded random
            initialisation, e.g. an auditor's crafted worst-case start (Annamalai & De
            Cristofaro 2024); loaded strictly, before DP-PCA. Public: it costs no privacy
            as long as it does not depend on the members.

    Returns:
        The record (claim from the steps actually taken) and the trained module (eval mode).

    Raises:
        ValueError: inconsistent options (e.g. a PCA config for a model without Projection),
            or a budget that cannot be met.
    """
    started = time.monotonic()
    if not isinstance(config, DPSGDConfig):
        raise v.invalid_type("config", f"config must be a DPSGDConfig, got {type(config).__name__}")
    model_options = dict(model_options or {})
    if config.pca_components is not None:
        given = model_options.setdefault("pca_components", config.pca_components)
        if given != config.pca_components:
            raise v.invalid("model_options", f"model_options pca_components={given!r} disagrees with config.pca_components={config.pca_components!r}")
    device = torch.device(device)
    members = bundle.all().subset(splits.members)
    n = len(members)
    plan = plan_dpsgd(config, num_members=n)
    announce_plan(plan, label=progress_label, enabled=progress)
    config, _ = resolve_config(config, num_members=n)  # the record stores the values that ran

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "init"))  # inside fork_rng: global state restored after
        model = build_model(model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes, **model_options)
    if initial_state is not None:
        load_initial_state(model, initial_state)
    if config.pca_components is not None:
        proj = _find_projection(model)
        matrix = dp_pca(
            members.features,
            num_components=config.pca_components,
            noise=float(config.pca_noise),  # type: ignore[arg-type]
            sampling_rate=config.pca_sampling_rate,
            generator=torch_generator(seed, "pca"),
        )
        proj.set(matrix)
    model.to(device).train()
    if prepare_model is not None:
        prepare_model(model)
    clipper = GradientClipper(model, clip_norm=config.clip_norm, per_layer=config.per_layer, method=config.clipping_method)
    params = clipper.parameters()
    layer_groups = [[clipper._full(layer, local) for local in layer.params] for layer in clipper.layers]
    opt = torch.optim.SGD(list(params.values()), lr=config.learning_rate, momentum=config.momentum, weight_decay=config.weight_decay)
    x, y = members.features.to(device), members.labels.to(device)
    lot_gen = torch_generator(seed, "lots")
    noise_gen = torch_generator(seed, "noise", device=device)
    noise_std = plan.noise_multiplier * clipper.sensitivity

    steps_taken = 0
    lot_sizes: list[int] = []
    canary_steps = 0
    order: list[torch.Tensor] = []
    loss_total, loss_count = 0.0, 0
    try:
        with Progress(plan.num_steps, f"train {progress_label} {model_name} on {bundle.name}", enabled=progress) as bar:
            for step in range(plan.num_steps):
                if config.sampling == "poisson":
                    lot = poisson_lot(n, plan.sampling_rate, generator=lot_gen)
                else:
                    if not order:
                        size = max(1, round(plan.sampling_rate * n))
                        order = list(torch.randperm(n, generator=lot_gen).split(size))
                        if len(order) > 1 and len(order[-1]) < size:
                            order.pop()  # fixed-size lots only
                    lot = order.pop(0)
                lot = lot.to(device)
                extra = None
                if canary_gradient is not None:
                    canary = canary_gradient(step)
                    if canary is not None:
                        extra = clip_gradient(
                            _canary_dict(canary, params),
                            clip_norm=config.clip_norm,
                            layer_groups=layer_groups if clipper.layer_clip_norms else None,
                            layer_clip_norms=clipper.layer_clip_norms,
                        )
                        canary_steps += 1
                # The 1/L of the update is folded into the clipping factors and the noise scale.
                update, loss_sum = noisy_clipped_sum(
                    clipper,
                    x,
                    y,
                    lot,
                    noise_std=noise_std,
                    generator=noise_gen,
                    physical_batch_size=config.physical_batch_size,
                    extra=extra,
                    scale=1.0 / plan.expected_lot_size,
                )
                # The loss is computed on the parameters before this step's update: NaN here means the
                # previous steps diverged, and nothing of this run may become a record.
                check_loss(loss_sum, step=step, epoch=step // plan.steps_per_epoch, learning_rate=learning_rate_at(config, step / plan.steps_per_epoch), hint="or --clip-norm")
                loss_total += loss_sum
                loss_count += int(lot.numel())
                if on_step is not None:  # the released sum itself, before the division by L
                    on_step(step, {name: t.detach() * plan.expected_lot_size for name, t in update.items()}, int(lot.numel()))
                lr = learning_rate_at(config, step / plan.steps_per_epoch)
                for group in opt.param_groups:
                    group["lr"] = lr
                for name, p in params.items():
                    p.grad = update[name]
                opt.step()
                if after_step is not None:
                    after_step(step, model)
                steps_taken += 1
                lot_sizes.append(int(lot.numel()))
                bar.update(1, loss=loss_total / max(loss_count, 1))
                if on_epoch is not None and steps_taken % plan.steps_per_epoch == 0:
                    on_epoch(steps_taken // plan.steps_per_epoch - 1, model)
                    model.train()
    finally:
        clipper.close()
    for p in params.values():
        p.grad = None
    model.eval()

    claim = _claim(config, sampling_rate=plan.sampling_rate, noise_multiplier=plan.noise_multiplier, num_steps=steps_taken)
    epsilon = claim.epsilon(delta=config.delta, accountant=config.accountant)
    if config.target_epsilon is not None and epsilon > config.target_epsilon * (1 + 1e-9):
        raise RuntimeError(f"internal error: DP-SGD spent epsilon={epsilon!r} > target_epsilon={config.target_epsilon!r}")
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
            "num_steps": steps_taken,
            "epochs_completed": steps_taken * plan.sampling_rate,
            "sampling_rate": plan.sampling_rate,
            "noise_multiplier": plan.noise_multiplier,
            "noise_std": noise_std,
            "expected_lot_size": plan.expected_lot_size,
            "mean_lot_size": float(sum(lot_sizes) / max(len(lot_sizes), 1)),
            "epsilon": epsilon,
            "epsilon_accountant": config.accountant,
            "delta": config.delta,
            "gradient_canary_steps": canary_steps,
            "train_loss_mean": loss_total / max(loss_count, 1),
        },
    )
    return record, model


@dataclass(frozen=True, kw_only=True)
class DPSGDTrainer:
    """The suite's DP-SGD (:func:`defenses.dpsgd.train_dpsgd`) as an auditable training function.

    Picklable; ``train`` follows the third-party protocol and ``__call__`` exposes the
    white-box hooks. The config must fix σ and the sampling rate (not a lot size, not a
    target ε) and a public ``expected_lot_size``, so that adding a canary changes neither
    the claim nor the normaliser (dividing by q·N with N counting the canary would itself be
    a data-dependent normaliser).

    Attributes:
        config: a :class:`defenses.dpsgd.DPSGDConfig`.
        model_name: zoo architecture.
        model_options: its options.
        device: where to train.
    """

    config: Any
    model_name: str = "digits-mlp"
    model_options: Mapping[str, Any] = field(default_factory=dict)
    device: str = "cpu"

    def build_model(self, dataset: ArrayDataset) -> nn.Module:
        return build_model(self.model_name, input_shape=dataset.input_shape, num_classes=dataset.num_classes, **dict(self.model_options))

    def claim(self, num_members: int) -> PrivacyClaim:
        plan = plan_dpsgd(self.config, num_members=num_members)
        clip_norm = resolve_config(self.config, num_members=num_members)[0].clip_norm
        return dpsgd_claim(
            sampling_rate=plan.sampling_rate,
            noise_multiplier=plan.noise_multiplier,
            num_steps=plan.num_steps,
            description=f"DP-SGD q={plan.sampling_rate:g} sigma={plan.noise_multiplier:.4g} T={plan.num_steps} C={clip_norm:g}",
        )

    def __call__(
        self,
        dataset: ArrayDataset,
        *,
        seed: int,
        on_step: Callable[..., None] | None = None,
        canary_gradient: Callable[[int], Any] | None = None,
        initial_state: Mapping[str, torch.Tensor] | None = None,
    ) -> nn.Module:
        bundle, splits = bundle_for_members(dataset)
        _, model = train_dpsgd(
            bundle=bundle,
            splits=splits,
            model_name=self.model_name,
            model_options=dict(self.model_options),
            config=self.config,
            seed=seed,
            device=self.device,
            progress=False,
            on_step=on_step,
            canary_gradient=canary_gradient,
            initial_state=initial_state,
        )
        return model

    def train(self, dataset: ArrayDataset, *, seed: int, initial_state: Mapping[str, torch.Tensor] | None = None) -> nn.Module:
        """The third-party protocol, with its optional ``initial_state`` (worst-case-start audits)."""
        return self(dataset, seed=seed, initial_state=initial_state)
