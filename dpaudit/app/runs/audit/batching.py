"""Which audits train their trials batched: the project's DP-SGD on a model batching speeds up.

The multi-run game (:func:`attacks.audit.procedures.multi_run_audit`) trains its trials in
batched groups when it is given a batcher that maps its training function to the batched
trainer's loop. The one this layer gives maps the project's own DP-SGD
(:class:`defenses.dpsgd.training.DPSGDTrainer`, the audit's trainer of ``--defense dpsgd``):
same plan, same streams, so a trial is the same model either way up to floating-point
reordering. A third-party training function is never batched: its loop is its own.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from attacks.audit.batched_trials import TrialBatch, TrialBatcher
from defenses.dpsgd.training import DPSGDTrainer
from dpaudit.app.estimate import Estimate
from dpaudit.data import ArrayDataset

__all__ = ["GroupEstimate", "batch_dpsgd_trials", "may_batch_trials", "trial_batcher", "trial_group_estimate"]


def batch_dpsgd_trials(*, trainer: DPSGDTrainer, dataset: ArrayDataset) -> TrialBatch | None:
    """How ``trainer`` trains on ``dataset`` (one trial's members) in a batched group, or None.

    None for a noise-layer model, and where :func:`defenses.dpsgd.batched.batched_dpsgd` says
    none (DP-PCA, per-layer clipping, shuffled lots, a model batching makes slower).
    """
    import torch

    from defenses.dpsgd.batched import batched_dpsgd

    if dict(trainer.model_options).get("noise_layer"):
        return None
    with torch.random.fork_rng(devices=[]):  # only its size and layers are read
        model = trainer.build_model(dataset)
    recipe = batched_dpsgd(trainer.config, num_members=len(dataset), model=model)
    if recipe is None:
        return None
    return TrialBatch(
        config=recipe.config,
        build_model=functools.partial(trainer.build_model, dataset),
        schedule=recipe.schedule,
        device=trainer.device,
    )


def trial_batcher(trainer: object | None) -> TrialBatcher | None:
    """The batcher of an audit whose trials ``trainer`` trains (None: a third-party function, or another loop)."""
    if type(trainer) is not DPSGDTrainer:  # a subclass may train differently
        return None
    return functools.partial(batch_dpsgd_trials, trainer=trainer)


def may_batch_trials(spec: Any) -> bool:
    """Whether an audit's trials may train batched: a multi-run game of the suite's own trainer, not turned off."""
    game = (spec.threat, spec.method)
    return bool(spec.batch_trials) and spec.train_fn is None and game == ("black-box", "multi-run")


def trial_group_estimate(spec: Any, members: ArrayDataset, *, num_steps: int, threads: int) -> GroupEstimate | None:
    """How many trainings a batched group of the audit holds and how long one takes here, or None (one per job).

    The group is timed as it will run (:func:`dpaudit.app.estimate.time_group`): the batched
    trainer on ``members`` with the audit's DP-SGD plan, as many models as a group holds. σ does not
    change the time, so an audit calibrated to a target ε is timed at σ = 1 rather than paying
    the calibration twice.
    """
    from attacks.audit.batched_trials import TRIALS_PER_BATCH
    from dpaudit.app.estimate import time_group
    from dpaudit.app.runs.audit.trainer import audit_trainer
    from dpaudit.batched import BatchedDPSGD, train_batched

    if not may_batch_trials(spec):
        return None
    if spec.noise_multiplier is None:
        spec = dataclasses.replace(spec, noise_multiplier=1.0, target_epsilon=None)
    trainer, _ = audit_trainer(spec, num_members=len(members), num_steps=num_steps)
    batcher = trial_batcher(trainer)
    batch = None if batcher is None else batcher(dataset=members)
    if batch is None or not isinstance(batch.config, BatchedDPSGD):
        return None
    config = batch.config
    size = min(TRIALS_PER_BATCH, spec.resolved_num_trials)

    def run(steps: int) -> object:
        return train_batched(
            batch.build_model,
            members.features,
            members.labels,
            seeds=list(range(size)),
            config=dataclasses.replace(config, num_steps=steps),
            sample_ids=members.ids,
            schedule=batch.schedule,
            device=batch.device,
        )

    timed = time_group(run, steps=num_steps, threads=threads, what=f"a batched group of {size} trainings")
    return GroupEstimate(size=size, job=timed)


@dataclass(frozen=True, kw_only=True)
class GroupEstimate:
    """An audit's batched trials: models a group and one group's time.

    Attributes:
        size: trainings in one group.
        job: one group's time here.
    """

    size: int
    job: Estimate
