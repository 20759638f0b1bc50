"""What every model-inversion attack returns, and the checks they share.

An inversion attack (``attacks.inversion``) takes a white-box classifier and a set of target
classes and returns one reconstruction per class: the input it believes most typical of that
class. :class:`InversionOutput` is that answer, before any evaluation; judging the
reconstructions (evaluation classifier, KNN distance, PSNR, member-vs-class-average) is the
evaluator's job (:mod:`attacks.inversion.evaluate`), so every attack is scored the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from dpaudit import _validate as v

__all__ = ["RESTARTS_HELP", "InversionOutput", "check_classes", "eval_mode", "target_confidence"]


#: The help of ``--restarts``, shared by every attack that restarts (a flag means one thing).
RESTARTS_HELP = "random restarts per class; the restart the target scores highest is kept"


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.array(a)  # a private copy: the caller's array may change afterwards
    a.setflags(write=False)
    return a


@dataclass(frozen=True, kw_only=True)
class InversionOutput:
    """One reconstruction per target class, as an attack produced it; arrays are read-only.

    Attributes:
        classes: (K,) int64 target labels.
        reconstructions: (K, *input_shape) float32 in [0, 1]; for a multi-restart attack the
            restart the *target* scores highest (the attacker never sees the evaluator).
        target_confidence: (K,) float64, the target's softmax probability of the class on the
            kept reconstruction.
        details: JSON-like diagnostics of the attack (iterations, stop reasons, per-restart
            scores, timings), stored with the result.
    """

    classes: np.ndarray
    reconstructions: np.ndarray
    target_confidence: np.ndarray
    details: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        classes = np.asarray(self.classes)
        recon = np.asarray(self.reconstructions)
        conf = np.asarray(self.target_confidence, dtype=np.float64)
        if classes.ndim != 1 or not np.issubdtype(classes.dtype, np.integer):
            raise v.invalid(
                "classes", f"classes must be a 1-d integer array, got {classes.dtype} of shape {classes.shape}"
            )
        if recon.ndim < 2 or recon.shape[0] != classes.shape[0]:
            raise v.invalid(
                "reconstructions",
                f"reconstructions must have shape (K, ...) with K = {classes.shape[0]} classes, got {recon.shape}",
            )
        if recon.dtype != np.float32:
            raise v.invalid("reconstructions", f"reconstructions must be float32, got {recon.dtype}")
        if not np.all(np.isfinite(recon)) or recon.min(initial=0.0) < 0.0 or recon.max(initial=0.0) > 1.0:
            raise v.invalid("reconstructions", "reconstructions must be finite and in [0, 1]")
        if conf.shape != classes.shape or not np.all((conf >= 0) & (conf <= 1)):
            raise v.invalid(
                "target_confidence", f"target_confidence must be (K,) probabilities, got shape {conf.shape}"
            )
        object.__setattr__(self, "classes", _frozen(classes.astype(np.int64)))
        object.__setattr__(self, "reconstructions", _frozen(recon))
        object.__setattr__(self, "target_confidence", _frozen(conf))


def check_classes(classes: object) -> list[int]:
    """The target labels as a list of distinct non-negative ints.

    Raises:
        ValueError: ``classes`` is empty, not integral, negative or repeats a label.
    """
    try:
        values = [int(c) for c in classes]  # type: ignore[attr-defined]
        ok = all(float(c) == int(c) for c in classes)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise v.invalid("classes", f"classes must be a sequence of non-negative ints, got {classes!r}") from None
    if not ok or not values or min(values) < 0:
        raise v.invalid("classes", f"classes must be a non-empty sequence of non-negative ints, got {classes!r}")
    if len(set(values)) != len(values):
        raise v.invalid("classes", f"classes must not repeat a label, got {values}")
    return values


class eval_mode:
    """Puts a model in eval mode for a block and restores every module's flag afterwards.

    Attacks must leave the target as they found it (the contract suite checks it).
    """

    def __init__(self, model: nn.Module) -> None:
        self._model = model
        self._modes: list[tuple[nn.Module, bool]] = []

    def __enter__(self) -> nn.Module:
        self._modes = [(m, m.training) for m in self._model.modules()]
        self._model.eval()
        return self._model

    def __exit__(self, *exc: object) -> None:
        for module, was_training in self._modes:
            module.train(was_training)


@torch.no_grad()
def target_confidence(model: nn.Module, x: torch.Tensor, labels: torch.Tensor, *, batch_size: int = 256) -> np.ndarray:
    """The model's softmax probability of ``labels[i]`` on ``x[i]`` (float64, shape (K,))."""
    out = []
    with eval_mode(model):
        for i in range(0, x.shape[0], batch_size):
            logits = model(x[i : i + batch_size])
            prob = torch.softmax(logits.double(), dim=1).gather(1, labels[i : i + batch_size, None])[:, 0]
            out.append(prob.cpu())
    return torch.cat(out).numpy().astype(np.float64)
