"""A multi-run audit's trials trained many at once (:func:`dpaudit.batched.train_batched`).

A black-box multi-run game (Jagielski et al. 2020, §4) trains hundreds of models that differ
only in their seed and in whether the canaries are among their members. When its training
function is one whose loop the batched trainer has (the project's own DP-SGD on a small
model), the caller passes a :data:`TrialBatcher` that says how that loop trains batched, and
the missing trials of each side train in groups of :data:`TRIALS_PER_BATCH` as one
computation. The pool is the clean data followed by the canaries; each model's members are
the clean data and the canaries its trial includes, in the order
:func:`~attacks.audit.canaries.with_canaries` gives its separate run; each model draws its
initialisation, lots and noise from its own seed's streams. So a trial trained in a group
equals the one trained alone with the same seed up to floating-point reordering
(``tests/attacks/test_batched_trials.py``) and stores the same file; a resumed audit trains
only the missing trials, grouped the same way whatever the number of workers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from attacks.audit.canaries import loss_scores, with_canaries
from attacks.audit.trials import TrialFailed, load_dataset_like
from dpaudit import _validate as v
from dpaudit.batched import BatchedDPSGD, BatchedSGD, train_batched
from dpaudit.data import ArrayDataset

__all__ = [
    "TRIALS_PER_BATCH",
    "TrialBatch",
    "TrialBatcher",
    "batches_every_side",
    "black_box_trial_group",
    "trial_groups",
]

#: Most trials one batched job trains: an interrupted audit loses at most this many per worker
#: (seconds of work for a small model). A step's overhead is shared by the group: digits-mlp's
#: DP-SGD trained 8.0x more models per CPU-second than one at a time in groups of 32, 6.4x in
#: groups of 16 (scripts/bench_batched.py, docs/batched.md).
TRIALS_PER_BATCH = 32


@dataclass(frozen=True, kw_only=True, eq=False)
class TrialBatch:
    """How a trial's training runs inside a batched group.

    Attributes:
        config: the batched trainer's mode and hyperparameters, as the training function's own run.
        build_model: builds one untrained model of the training function's architecture.
        schedule: the learning rate of each step, or ``None`` for the config's constant one.
        device: where the group trains.
    """

    config: BatchedSGD | BatchedDPSGD
    build_model: Callable[[], nn.Module]
    schedule: Callable[[int], float] | None = None
    device: str = "cpu"


#: ``batcher(*, dataset) -> TrialBatch | None``: how the audit's training function trains on
#: ``dataset`` (one trial's members) in a batched group — the same loop, plan and streams — or
#: ``None`` when it cannot (the trials then train one at a time). Picklable (a module-level
#: function or a ``functools.partial`` of one): it is called again in the worker that trains a group.
TrialBatcher = Callable[..., "TrialBatch | None"]


def trial_groups(missing: Sequence[int], sides: Mapping[int, bool]) -> list[tuple[int, ...]]:
    """The missing trials in groups of at most :data:`TRIALS_PER_BATCH`, each of one side, in index order.

    A side's trials share their number of members, which the training's plan may depend on; the
    grouping depends on nothing else, so every executor trains the same groups.
    """
    groups: list[tuple[int, ...]] = []
    for side in (True, False):
        chosen = [i for i in missing if sides[i] is side]
        groups += [tuple(chosen[j : j + TRIALS_PER_BATCH]) for j in range(0, len(chosen), TRIALS_PER_BATCH)]
    return groups


def batches_every_side(batcher: TrialBatcher | None, dataset: Any, canaries: ArrayDataset) -> bool:
    """Whether ``batcher`` trains both sides of the game batched (IN: every canary included; OUT: none)."""
    if batcher is None:
        return False
    data = load_dataset_like(dataset)
    return all(
        batcher(dataset=with_canaries(data, canaries, np.full(len(canaries), side))) is not None
        for side in (True, False)
    )


def black_box_trial_group(
    *,
    batcher: TrialBatcher,
    dataset: Any,
    canaries: ArrayDataset,
    includes: Sequence[Sequence[bool]] | np.ndarray,
    seeds: Sequence[int],
    indices: Sequence[int],
    initial_state: bytes | None = None,
) -> list[dict[str, np.ndarray]]:
    """Executor job: the trials ``indices`` trained as one batched computation; each one's scores.

    Args:
        batcher: how the audit's training function trains batched (:data:`TrialBatcher`).
        dataset: the clean training data (or a loader of it).
        canaries: the canaries, scored on every final model.
        includes: for each trial, which canaries join its members (all trials have the same count).
        seeds: each trial's training seed.
        indices: the trials' indices, named in errors.
        initial_state: safetensors bytes of a start every model shares (a worst-case-start audit).

    Returns:
        For each trial, in order, what :func:`attacks.audit.trials.black_box_trial` returns for it.

    Raises:
        TrialFailed: the group could not be trained batched, or its training failed.
    """
    data = load_dataset_like(dataset)
    masks = np.asarray(includes, dtype=bool).reshape(len(seeds), len(canaries))
    if len(indices) != len(seeds) or len(set(masks.sum(axis=1).tolist())) != 1:
        raise v.invalid("includes", "a batched group's trials must be listed once each and include as many canaries")
    first = f"trials {indices[0]}-{indices[-1]} (seeds {seeds[0]}-{seeds[-1]})"
    batch = batcher(dataset=with_canaries(data, canaries, masks[0]))
    if batch is None:
        raise TrialFailed(f"the training function has no batched mode for {first}", indices[0], seeds[0])
    pool = with_canaries(data, canaries)
    members = np.concatenate([np.ones((len(seeds), len(data)), dtype=bool), masks], axis=1)
    start: Mapping[str, torch.Tensor] | None = None
    if initial_state is not None:
        from dpaudit.weights import weights_from_bytes

        start = weights_from_bytes(initial_state)
    try:
        run = train_batched(
            batch.build_model,
            pool.features,
            pool.labels,
            seeds=list(seeds),
            config=batch.config,
            members=members,
            sample_ids=pool.ids,
            initial_state=start,
            schedule=batch.schedule,
            device=batch.device,
            label="audit trials",
        )
    except (ValueError, RuntimeError) as exc:  # a diverged loss, memory: the group's trials are not kept
        raise TrialFailed(f"batched training of {first} failed: {exc}", indices[0], seeds[0]) from exc
    return [
        {"scores": loss_scores(model, canaries.features, canaries.labels), "included": mask, "seed": np.array(seed)}
        for model, mask, seed in zip(run.models, masks, seeds, strict=True)
    ]
