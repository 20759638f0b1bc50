"""Training plumbing shared by every defense: devices, batching, evaluation.

Kept in the core so that defenses differ only in what makes them private (how gradients are
clipped and noised, how labels are aggregated), not in how they loop over data.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from dpaudit import _validate as v
from dpaudit.limits import LIMITS
from dpaudit.options import option

__all__ = [
    "SGDConfig",
    "TrainWorkspace",
    "TrainingDiverged",
    "check_loss",
    "resolve_device",
    "shuffled_batches",
    "evaluate",
    "predict_logits",
]


class TrainingDiverged(v.InvalidArgument):
    """The training loss stopped being a finite number (too large a step size, most often).

    A ``ValueError``: the cause is the user's hyperparameters, so the command line reports
    it in one line with exit status 2; the trainer raises it before anything is saved, so a
    diverged model never becomes a record.
    """


def check_loss(loss: float, *, step: int, epoch: int, learning_rate: float, hint: str = "") -> None:
    """Raises :class:`TrainingDiverged` when ``loss`` is NaN or infinite.

    Trainers check every step's loss before they apply its update: once the loss is NaN
    the gradients and then the parameters are too, and every further step only hides
    where it went wrong.

    Args:
        loss: the step's loss (mean or sum, any finite scale).
        step: the step index (from 0).
        epoch: the epoch index (from 0).
        learning_rate: the step size in use (named in the advice).
        hint: further advice specific to the trainer (e.g. ``"or --clip-norm"``).
    """
    if not math.isfinite(loss):
        extra = f" {hint}" if hint else ""
        raise TrainingDiverged(
            f"training diverged: loss became {loss} at step {step} (epoch {epoch}); "
            f"lower --learning-rate (now {learning_rate:g}){extra}"
        )


#: Documented size limits of the training flags (``--i-know`` exceeds them on the command line):
#: the longest published runs in the suite's scope are a few hundred epochs, and a batch beyond
#: 65,536 examples no longer fits a GPU for the zoo's image models.
EPOCH_LIMIT = LIMITS["epochs"]
BATCH_LIMIT = LIMITS["batch_size"]


@dataclass(frozen=True, kw_only=True)
class SGDConfig:
    """Hyperparameters of plain (non-private) mini-batch SGD with momentum.

    Shared by the non-private baseline defense and by shadow / reference models of attacks.

    Attributes:
        epochs: passes over the training set.
        batch_size: examples per step.
        learning_rate: SGD step size.
        momentum: heavy-ball momentum (0 for plain SGD).
        weight_decay: L2 penalty.
    """

    epochs: int = option(10, help="passes over the training set", metavar="N", check=v.positive, limit=EPOCH_LIMIT)
    batch_size: int = option(64, help="examples per SGD step", metavar="B", check=v.positive, limit=BATCH_LIMIT)
    learning_rate: float = option(0.05, help="SGD step size", metavar="LR", check=v.positive)
    momentum: float = option(0.9, help="heavy-ball momentum in [0, 1)", check=v.unit_interval_open_right)
    weight_decay: float = option(0.0, help="L2 penalty on the parameters", check=v.non_negative)

    def __post_init__(self) -> None:
        v.integer("epochs", self.epochs, minimum=1)
        v.integer("batch_size", self.batch_size, minimum=1)
        v.positive("learning_rate", self.learning_rate)
        if not 0 <= v.real("momentum", self.momentum) < 1:
            raise v.invalid("momentum", f"momentum must lie in [0, 1), got {self.momentum!r}")
        v.non_negative("weight_decay", self.weight_decay)


@dataclass(frozen=True, kw_only=True)
class TrainWorkspace:
    """Where a defense that trains sub-models (PATE's teachers) keeps them, and where they train.

    Passed by the application layer to defenses registered with ``uses_workspace=True``; a
    defense called without one (e.g. to train a shadow model of an attack) trains its sub-models
    in its own process and keeps nothing.

    Attributes:
        record_dir: the directory the record will be saved in; the defense may write its own
            artifacts there first (PATE: the vote matrix and the aggregator's answers).
        cache_dir: a cache shared by every record of the run (PATE: one record per teacher, so
            students with another aggregator reuse the same teachers).
        executor: ``local``, ``ray`` or ``serial`` (:func:`dpaudit.executors.make_executor`).
        num_workers: parallel workers (``None``: the executor's default).
        address: Ray cluster address.
        ship_code: Ray sends this checkout's packages to the workers (:mod:`dpaudit.cluster`).
        data_root: the data root, passed on to workers that reload the dataset by name.
    """

    record_dir: Path
    cache_dir: Path
    executor: str = "local"
    num_workers: int | None = None
    address: str | None = None
    ship_code: bool = False
    data_root: str | None = None


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``auto`` → CUDA when available, else CPU; an unavailable explicit device is an error.

    Raises:
        ValueError: ``device`` names CUDA on a machine without it, or is not a device string.
    """
    if isinstance(device, torch.device):
        return device
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise v.invalid("device", f"device must be 'auto', 'cpu' or 'cuda[:N]', got {device!r}") from None
    if dev.type not in ("cpu", "cuda"):
        # The suite trains and attacks on a CPU or a CUDA GPU only: 'meta' holds no values and an
        # 'mps' or 'xpu' build is untested here, and either would fail mid-run rather than now.
        raise v.invalid("device", f"device must be 'auto', 'cpu' or 'cuda[:N]', got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise v.invalid("device", f"device={device!r} requested but CUDA is not available on this machine")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise v.invalid(
            "device", f"device={device!r} names GPU {dev.index}, but this machine has {torch.cuda.device_count()}"
        )
    return dev


def shuffled_batches(num_examples: int, batch_size: int, *, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Index tensors of one epoch of shuffled mini-batches (the last may be smaller)."""
    v.integer("batch_size", batch_size, minimum=1)
    order = torch.randperm(num_examples, generator=generator)
    yield from order.split(batch_size)


@torch.no_grad()
def predict_logits(
    model: nn.Module, features: torch.Tensor, *, device: torch.device | str = "cpu", batch_size: int = 1024
) -> torch.Tensor:
    """Logits of ``model`` on ``features`` in inference mode, batched, returned on the CPU."""
    was_training = model.training
    model.eval()
    out = [model(chunk.to(device)).float().cpu() for chunk in features.split(batch_size)]
    model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0)


@torch.no_grad()
def evaluate(
    model: nn.Module,
    features: torch.Tensor,
    labels: torch.Tensor,
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 1024,
) -> dict[str, float]:
    """Accuracy and mean cross-entropy of ``model`` on (features, labels)."""
    if len(features) == 0:
        return {"accuracy": float("nan"), "loss": float("nan")}
    logits = predict_logits(model, features, device=device, batch_size=batch_size)
    loss = nn.functional.cross_entropy(logits, labels.cpu()).item()
    acc = (logits.argmax(1) == labels.cpu()).float().mean().item()
    return {"accuracy": acc, "loss": loss}
