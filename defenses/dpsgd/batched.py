"""DP-SGD's training loop as the batched trainer (:mod:`dpaudit.batched`) runs it, where that pays.

Audits and shadow pools train many DP-SGD models of one recipe that differ only in their
members and seed. :func:`batched_dpsgd` says how one such model trains inside a batched group
— σ, q, the number of steps and the learning-rate schedule fixed by the same plan as a run of
:func:`defenses.dpsgd.training.train_dpsgd` on the same members (Abadi et al. 2016,
Algorithm 1) — or ``None`` when the recipe needs something the batched trainer does not have
(DP-PCA, per-layer clipping, shuffled lots) or when batching would make it slower.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from defenses.dpsgd.config import DPSGDConfig
from defenses.dpsgd.plan import learning_rate_at, plan_dpsgd, resolve_config
from dpaudit.batched import BatchedDPSGD

__all__ = ["BATCHED_DP_MAX_PARAMETERS", "BatchedRecipe", "LearningRateSchedule", "batched_dpsgd", "batching_pays"]

#: DP-SGD models train batched only up to this many parameters, and without convolutions:
#: batching shares per-step overhead, which dominates small models (digits-mlp, 25,386
#: parameters: 6.4x more models per CPU-second, docs/batched.md), while a larger model's step is
#: arithmetic that batching does not remove (abadi-mnist, 795,010 parameters, lots of 512: 0.187
#: CPU-s per shadow-step batched against about 0.07 one at a time, scripts/bench_lira_shadows.py),
#: and the convolutions' per-example gradients are slower batched (audit-cnn's DP-GD: 0.5x).
BATCHED_DP_MAX_PARAMETERS = 100_000


@dataclass(frozen=True)
class LearningRateSchedule:
    """The learning rate of each step of a resolved DP-SGD config (picklable: it travels to workers).

    Attributes:
        config: the resolved config (its learning rate set).
        steps_per_epoch: the plan's steps per epoch, which turn a step into the epoch the decay reads.
    """

    config: DPSGDConfig
    steps_per_epoch: int

    def __call__(self, step: int) -> float:
        return learning_rate_at(self.config, step / self.steps_per_epoch)


@dataclass(frozen=True, kw_only=True)
class BatchedRecipe:
    """How a DP-SGD model trains in a batched group.

    Attributes:
        config: the batched trainer's DP-SGD mode (σ, C, q, T, learning rate, momentum, decay, divisor).
        schedule: the learning rate of each step.
    """

    config: BatchedDPSGD
    schedule: LearningRateSchedule


def batching_pays(model: nn.Module) -> bool:
    """Whether DP-SGD models of ``model``'s architecture train faster batched (:data:`BATCHED_DP_MAX_PARAMETERS`)."""
    size = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return size <= BATCHED_DP_MAX_PARAMETERS and not any(isinstance(m, nn.Conv2d) for m in model.modules())


def batched_dpsgd(config: DPSGDConfig, *, num_members: int, model: nn.Module) -> BatchedRecipe | None:
    """The batched mode equal to a :func:`~defenses.dpsgd.training.train_dpsgd` run, or None.

    Args:
        config: the DP-SGD config of the one-at-a-time run.
        num_members: its number of members (the plan's q, σ and steps may depend on it).
        model: one model of the architecture (only its size and layers are read).

    Returns:
        The batched recipe; ``None`` for DP-PCA, per-layer clipping, shuffled lots, or a model
        that batching makes slower (:func:`batching_pays`).
    """
    if config.pca_components is not None or config.per_layer or config.sampling != "poisson":
        return None
    if not batching_pays(model):
        return None
    plan = plan_dpsgd(config, num_members=num_members)
    resolved, _ = resolve_config(config, num_members=num_members)
    # resolve_config derives C and the learning rate where the config left them unset.
    assert resolved.clip_norm is not None and resolved.learning_rate is not None
    return BatchedRecipe(
        config=BatchedDPSGD(
            noise_multiplier=plan.noise_multiplier,
            clip_norm=resolved.clip_norm,
            sampling_rate=plan.sampling_rate,
            num_steps=plan.num_steps,
            learning_rate=resolved.learning_rate,
            momentum=resolved.momentum,
            weight_decay=resolved.weight_decay,
            expected_lot_size=plan.expected_lot_size,
        ),
        schedule=LearningRateSchedule(resolved, plan.steps_per_epoch),
    )
