"""DP-SGD's registration: the train function, its white-box adapter, defaults, budget check and replay.

Kept apart from :mod:`defenses.dpsgd.training` because the neighbouring replay
(:mod:`defenses.dpsgd.replay`, docs/audits/replay.md) runs the training loop itself: the loop
cannot also import the replay without an import cycle.
"""

from __future__ import annotations

from typing import Any

from defenses.dpsgd.config import DPSGDConfig
from defenses.dpsgd.plan import plan_dpsgd, resolve_config
from defenses.dpsgd.replay import replay_dpsgd
from defenses.dpsgd.training import DPSGDTrainer, train_dpsgd
from defenses.registry import DEFENSES, DefenseSpec
from dpaudit.data import Splits
from dpaudit.parts import PlotStyle


def _check_budget(config: DPSGDConfig, *, splits: Splits, **_: Any) -> None:
    """With ε, σ and the epochs all given, refuses epochs the budget cannot pay for (naming the steps it allows)."""
    if None not in (config.target_epsilon, config.noise_multiplier, config.epochs):
        plan_dpsgd(config, num_members=len(splits.members))


def _resolve_defaults(config: DPSGDConfig, *, num_members: int, **_: Any) -> tuple[DPSGDConfig, str | None]:
    return resolve_config(config, num_members=num_members)


DEFENSES.register(
    DefenseSpec(
        name="dpsgd",
        config_type=DPSGDConfig,
        train=train_dpsgd,
        claim_kind="dp",
        audit_trainer=DPSGDTrainer,
        per_example_gradients=True,
        resolve_defaults=_resolve_defaults,
        check_budget=_check_budget,
        replay=replay_dpsgd,
        chance_hint="--lot-size, --learning-rate, --epochs or --clip-norm (or a larger --target-epsilon)",
        summary="DP-SGD with Poisson lots, per-example clipping and Gaussian noise (+ DP-PCA) (Abadi et al. 2016)",
        order=10,
        style=PlotStyle(colour="#D55E00", marker="P"),
    )
)
