"""How a DP-SGD run spends its budget, decided once before it sees any data beyond N (Abadi et al. 2016).

One function, :func:`plan_dpsgd`, decides how a run spends ``target_epsilon`` (the command line
and compare grids both go through it), and the plan's ``note`` says so before training:

* ``target_epsilon`` without ``noise_multiplier``: σ is calibrated so that exactly ``epochs``
  epochs (default ``DEFAULT_EPOCHS``) meet the target. σ has no default that could compete with
  the target: it is resolved to ``DEFAULT_NOISE_MULTIPLIER`` only when there is no target.
* ``target_epsilon`` and ``noise_multiplier`` without ``epochs``: the number of steps is the
  largest T whose ε (under ``accountant``, including DP-PCA) stays ≤ the target, computed once
  up front (:func:`dpaudit.privacy.calibration.calibrate_num_steps` or the same bisection on
  the composed event).
* all three: the run trains exactly ``epochs`` epochs if the budget allows them, and is refused
  (naming the steps the budget allows) otherwise; it never stops early in silence.

Otherwise σ and ``epochs`` are fixed. The claim (:func:`run_claim`) composes DP-PCA's Gaussian
event (§4) with the DP-SGD event ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)``.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

from dp_accounting import dp_event as dpe

from defenses.dp_defaults import defaults_note, resolve_dp_config
from defenses.dpsgd.config import DPSGDConfig
from dpaudit import _validate as v
from dpaudit.privacy.accountants import Question, rehearsal
from dpaudit.privacy.calibration import (
    calibrate_noise_multiplier,
    calibrate_num_steps,
    largest_num_steps,
    smallest_noise_multiplier,
)
from dpaudit.privacy.claims import DPClaim, dpsgd_claim

__all__ = [
    "DPSGDPlan",
    "accounting_questions",
    "plan_dpsgd",
    "announce_plan",
    "resolve_config",
    "pca_claim",
    "run_claim",
    "learning_rate_at",
]


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


def run_claim(config: DPSGDConfig, *, sampling_rate: float, noise_multiplier: float, num_steps: int) -> DPClaim:
    """The claim of a run of ``num_steps`` steps at (q, σ): the DP-SGD event, composed with DP-PCA's when there is
    one."""
    desc = (
        f"DP-SGD q={sampling_rate:g} sigma={noise_multiplier:g} T={num_steps} "
        f"C={config.clip_norm:g}{' per-layer' if config.per_layer else ''}"
    )
    if config.sampling != "poisson":
        desc += (
            " [non-private-accounting: lots drawn by fixed-size shuffling, but the "
            "accounting assumes Poisson sampling; this epsilon is NOT a valid "
            "guarantee for the run]"
        )
    claim = dpsgd_claim(
        sampling_rate=sampling_rate, noise_multiplier=noise_multiplier, num_steps=num_steps, description=desc
    )
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
        return run_claim(config, sampling_rate=q, noise_multiplier=sigma, num_steps=t).epsilon(
            delta=config.delta, accountant=config.accountant
        )

    pca = pca_claim(config)
    if pca is not None and pca.epsilon(delta=config.delta, accountant=config.accountant) >= target:
        raise v.invalid(
            "target_epsilon",
            f"target_epsilon={target!r} is already exceeded by DP-PCA alone (pca_noise={config.pca_noise!r})",
        )
    steps = largest_num_steps(eps, target=target, max_steps=cap)
    if steps == 0:
        raise v.invalid(
            "target_epsilon",
            f"target_epsilon={target!r} is exceeded by a single step at "
            f"noise_multiplier={sigma!r}, sampling_rate={q!r}",
        )
    return steps


def _calibrate_sigma_composed(config: DPSGDConfig, q: float, steps: int) -> float:
    """Smallest σ (to 0.1 %) with ε(PCA ∘ DP-SGD) ≤ target; keeps the upper end (never overshoots)."""
    target = float(config.target_epsilon)  # type: ignore[arg-type]

    def eps(sigma: float) -> float:
        return run_claim(config, sampling_rate=q, noise_multiplier=sigma, num_steps=steps).epsilon(
            delta=config.delta, accountant=config.accountant
        )

    pca = pca_claim(config)
    if pca is not None and pca.epsilon(delta=config.delta, accountant=config.accountant) >= target:
        raise v.invalid(
            "target_epsilon",
            f"target_epsilon={target!r} is already used up by DP-PCA alone (pca_noise={config.pca_noise!r})",
        )
    sigma = smallest_noise_multiplier(eps, target=target, tolerance=1e-3, max_sigma=1e5)
    if math.isinf(sigma):
        raise v.invalid("target_epsilon", f"target_epsilon={target!r} is unreachable with any noise_multiplier")
    return sigma


def resolve_config(
    config: DPSGDConfig, *, num_members: int, scale_invariant_first_layer: bool = False
) -> tuple[DPSGDConfig, str | None]:
    """``config`` with its unset lot size, learning rate, clip norm and epochs derived from N, ε, δ.

    Uses :func:`defenses.dp_defaults.resolve_dp_config` (rules and sources there); idempotent.
    The config's type is kept (Secure-SGD's config extends this one).

    Returns:
        (resolved config, the line saying what was derived, or ``None`` when nothing was).
    """
    if not isinstance(config, DPSGDConfig):
        raise v.invalid_type("config", f"config must be a DPSGDConfig, got {type(config).__name__}")
    n = v.integer("num_members", num_members, minimum=1)
    resolved, derived = resolve_dp_config(
        config, num_members=n, scale_invariant_first_layer=scale_invariant_first_layer
    )
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
            steps = calibrate_num_steps(
                target_epsilon=target,
                delta=config.delta,
                sampling_rate=q,
                noise_multiplier=sigma,
                accountant=config.accountant,
                max_steps=cap,
            )
        reach = (
            f"noise_multiplier={sigma:g} reaches target_epsilon={target:g} "
            f"(delta={config.delta:g}, {config.accountant}) after {steps} steps "
            f"({steps * q:.3g} epochs)"
        )
        if epoch_steps is None:
            note = (
                f"sigma = {sigma:g} reaches epsilon = {target:g} after {steps} steps "
                f"({steps * q:.3g} epochs); training stops there (leave "
                "--noise-multiplier unset and pass --epochs to calibrate sigma instead)"
            )
        elif steps < epoch_steps:
            # Stopping early would silently train a different run than the one asked for.
            raise v.invalid(
                "epochs",
                f"epochs={config.epochs:g} needs {epoch_steps} steps, but {reach}; lower "
                f"epochs to at most {steps * q:.3g}, "
                "raise noise_multiplier, or leave noise_multiplier unset to calibrate it for these epochs",
            )
        else:
            note = f"sigma = {sigma:g} and {config.epochs:g} epochs ({steps} steps) stay within epsilon = {target:g}"
    else:
        steps = int(epoch_steps)  # type: ignore[arg-type]
        if pca:
            sigma = _calibrate_sigma_composed(config, q, steps)
        else:
            sigma = calibrate_noise_multiplier(
                target_epsilon=target,
                delta=config.delta,
                sampling_rate=q,
                num_steps=steps,
                accountant=config.accountant,
            )
        note = (
            f"sigma = {sigma:.4g} calibrated so that {config.epochs:g} epochs "
            f"({steps} steps) spend epsilon = {target:g} at delta = {config.delta:g} "
            f"({config.accountant}); --epochs sets the length"
        )
    divisor = float(config.expected_lot_size) if config.expected_lot_size is not None else q * n
    # resolve_config derives C, and σ is set or calibrated above whenever a target is given (and
    # required by the config without one).
    assert sigma is not None and config.clip_norm is not None
    return DPSGDPlan(
        sampling_rate=q,
        noise_multiplier=float(sigma),
        num_steps=int(steps),
        steps_per_epoch=steps_per_epoch,
        expected_lot_size=divisor,
        noise_std=float(sigma) * float(config.clip_norm),
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


def accounting_questions(config: DPSGDConfig, *, num_members: int) -> list[Question]:
    """The costly ε evaluations a training with ``config`` on ``num_members`` members makes, found
    by rehearsing them (:func:`dpaudit.privacy.accountants.rehearsal`) for the run's estimate:
    the calibration of σ or of the steps under a target (:func:`plan_dpsgd`), the record's ε
    under ``config.accountant`` and the PLD bound ``train`` prints. Empty when the plan fails
    (the run stops there too)."""
    try:
        with rehearsal() as asked:
            plan = plan_dpsgd(config, num_members=num_members)
            claim = run_claim(
                config,
                sampling_rate=plan.sampling_rate,
                noise_multiplier=plan.noise_multiplier,
                num_steps=plan.num_steps,
            )
            for accountant in dict.fromkeys((config.accountant, "pld")):
                try:
                    claim.epsilon(delta=config.delta, accountant=accountant)
                except ValueError:  # declined: the run prints no number for it either
                    continue
    except ValueError:
        return []
    return asked
