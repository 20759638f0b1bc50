"""A DP-SGD run's history over its epochs — loss, test accuracy and ε — as a record stores it (torch-free).

The DP-SGD trainer keeps, per completed epoch, the steps taken so far, the epoch's mean training
loss and the test accuracy at its end, in the record's ``metrics["history"]`` (absent from records
trained before it was kept, and from runs shorter than one epoch). ε at each epoch is the claim of
the steps taken so far, recomputed here from the record's sampling rate and noise multiplier, the
way Opacus and TF Privacy log it per epoch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpaudit import _validate as v
from dpaudit.results.record import TrainedModel

__all__ = ["TrainingHistory", "training_history", "epsilon_by_epoch", "HISTORY_KEY"]

#: Where the trainer stores the history in a record's metrics.
HISTORY_KEY = "history"


@dataclass(frozen=True, kw_only=True)
class TrainingHistory:
    """Per completed epoch of one run.

    Attributes:
        epoch: 1, 2, … (one entry per completed epoch).
        steps: DP-SGD steps taken by the end of each epoch.
        train_loss: the epoch's mean training loss (on the parameters before each of its steps).
        test_accuracy: test accuracy at the end of each epoch (empty when not measured).
        test_examples: the test examples it was measured on (0 when not measured).
    """

    epoch: tuple[float, ...]
    steps: tuple[int, ...]
    train_loss: tuple[float, ...]
    test_accuracy: tuple[float, ...] = ()
    test_examples: int = 0

    def __post_init__(self) -> None:
        n = len(self.epoch)
        if n == 0:
            raise v.invalid("epoch", "a history holds at least one epoch, got none")
        for name in ("steps", "train_loss", "test_accuracy"):
            values = tuple(getattr(self, name))
            if values and len(values) != n:
                raise v.invalid(name, f"{name} must hold one entry per epoch ({n}), got {len(values)}")
            object.__setattr__(self, name, values)
        if len(self.train_loss) != n or len(self.steps) != n:
            raise v.invalid("train_loss", f"steps and train_loss must hold one entry per epoch ({n})")
        object.__setattr__(self, "steps", tuple(v.integer("steps", int(s), minimum=0) for s in self.steps))
        if any(b < a for a, b in zip(self.steps, self.steps[1:])):
            raise v.invalid("steps", f"steps must not decrease, got {list(self.steps)}")
        if self.test_accuracy and not all(0.0 <= a <= 1.0 for a in self.test_accuracy):
            raise v.invalid("test_accuracy", f"test_accuracy must lie in [0, 1], got {list(self.test_accuracy)}")
        object.__setattr__(self, "test_examples", v.integer("test_examples", self.test_examples, minimum=0))


def training_history(record: TrainedModel) -> TrainingHistory | None:
    """The record's history, or ``None`` when it stores none.

    Raises:
        ValueError: a stored history that is malformed (named field).
    """
    raw = record.metrics.get(HISTORY_KEY)
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise v.invalid_type(HISTORY_KEY, f"metrics.{HISTORY_KEY} must be a mapping, got {type(raw).__name__}")
    if not raw:
        return None

    def floats(key: str) -> tuple[float, ...]:
        return tuple(float(x) for x in raw.get(key, ()) or ())

    return TrainingHistory(
        epoch=floats("epoch"),
        steps=tuple(int(x) for x in raw.get("steps", ()) or ()),
        train_loss=floats("train_loss"),
        test_accuracy=floats("test_accuracy"),
        test_examples=int(raw.get("test_examples", 0) or 0),
    )


def epsilon_by_epoch(
    record: TrainedModel, history: TrainingHistory, *, delta: float, accountant: str = "rdp"
) -> tuple[float, ...] | None:
    """ε at ``delta`` of the steps taken by the end of each epoch, under ``accountant``.

    The DP-SGD claim of T steps at the record's sampling rate q and noise multiplier σ (Abadi et al.
    2016, Algorithm 1). ``None`` when the record lacks q or σ, or when its claim composes more than
    DP-SGD's steps (DP-PCA), which a per-epoch DP-SGD claim would leave out.
    """
    m: Mapping[str, Any] = record.metrics
    q, sigma = m.get("sampling_rate"), m.get("noise_multiplier")
    if not isinstance(q, (int, float)) or not isinstance(sigma, (int, float)) or sigma <= 0:
        return None
    if record.config.get("pca_components") is not None:
        return None
    from dpaudit.privacy.claims import dpsgd_claim

    out = []
    for t in history.steps:
        if t == 0:
            out.append(0.0)
            continue
        eps = dpsgd_claim(sampling_rate=float(q), noise_multiplier=float(sigma), num_steps=t).epsilon(
            delta=delta, accountant=accountant
        )
        out.append(float(eps) if math.isfinite(eps) else math.inf)
    return tuple(out)
