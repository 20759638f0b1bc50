"""MI-Face: white-box model inversion by gradient descent on the class confidence.

Fredrikson, Jha & Ristenpart (2015), "Model Inversion Attacks that Exploit Confidence
Information and Basic Countermeasures", CCS, Algorithm 1 (MI-Face). With f the model's softmax
and c(x) = 1 − f_label(x), starting from a neutral image x₀:

    for i = 1 … α:
        x_i ← Process(x_{i−1} − λ ∇c(x_{i−1}))
        stop if c(x_i) has not improved for β iterations       (patience window)
        stop if c(x_i) ≤ γ                                     (cost threshold)
    return the iterate with the lowest cost

A popular toolbox stops when the cost is *above* the threshold; the paper (and this module)
stops when it is at or *below* γ, i.e. when the model is confident enough.

All target classes are inverted in one batched tensor: every iteration is a single forward
and backward pass over the K classes, and per-class stopping is a boolean mask that freezes
a finished class's iterate while the others keep descending.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["MIFaceConfig", "MIFaceOutput", "mi_face"]

StopReason = Literal["threshold", "patience", "max_iterations"]
_PROCESSES = ("none", "denoise", "sharpen")


@dataclass(frozen=True)
class MIFaceConfig:
    """Parameters of MI-Face (Fredrikson et al. 2015, Algorithm 1).

    Defaults follow the widely used implementation noted in ``reference/attacks.md`` §2
    (step 0.1, window 100, 10,000 iterations) except the threshold, which here is on the
    *cost*: γ = 0.01 means "stop once the target class has confidence ≥ 0.99".

    Attributes:
        max_iterations: α, the most gradient steps per class (≥ 1).
        step_size: λ, the gradient-descent step (> 0, finite).
        patience: β, stop a class once its best cost has not improved for this many
            iterations (≥ 1).
        cost_threshold: γ in [0, 1]; stop a class once its cost is ≤ γ.
        process: the paper's optional Process step applied after each step: ``"none"``;
            ``"denoise"``, a 3×3 mean filter over the last two (spatial) dimensions with
            edge replication; or ``"sharpen"``, an unsharp mask x + (x − mean3×3(x)). Both
            need an input of at least two dimensions; the result is clamped to [0, 1].
        start_value: the neutral start: every pixel set to this value in [0, 1]; ``None``
            starts from uniform noise in [0, 1] drawn from the seed. A full start image may
            instead be passed to :func:`mi_face` as ``start``.
    """

    max_iterations: int = 10_000
    step_size: float = 0.1
    patience: int = 100
    cost_threshold: float = 0.01
    process: str = "none"
    start_value: float | None = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.max_iterations, bool) or not isinstance(self.max_iterations, int):
            raise TypeError(f"max_iterations must be an int, got {self.max_iterations!r}")
        if self.max_iterations < 1:
            raise ValueError(f"max_iterations must be >= 1, got {self.max_iterations}")
        if isinstance(self.patience, bool) or not isinstance(self.patience, int):
            raise TypeError(f"patience must be an int, got {self.patience!r}")
        if self.patience < 1:
            raise ValueError(f"patience must be >= 1, got {self.patience}")
        if not (isinstance(self.step_size, (int, float)) and math.isfinite(self.step_size)):
            raise ValueError(f"step_size must be a finite number, got {self.step_size!r}")
        if self.step_size <= 0:
            raise ValueError(f"step_size must be > 0, got {self.step_size}")
        if not (isinstance(self.cost_threshold, (int, float)) and 0.0 <= self.cost_threshold <= 1.0):
            raise ValueError(f"cost_threshold must be in [0, 1], got {self.cost_threshold!r}")
        if self.process not in _PROCESSES:
            raise ValueError(f"process must be one of {_PROCESSES}, got {self.process!r}")
        if self.start_value is not None and not (isinstance(self.start_value, (int, float)) and 0.0 <= self.start_value <= 1.0):
            raise ValueError(f"start_value must be in [0, 1] or None, got {self.start_value!r}")


@dataclass(frozen=True)
class MIFaceOutput:
    """What MI-Face returns; arrays are read-only.

    Attributes:
        classes: the target labels, shape (K,).
        reconstructions: the lowest-cost iterate per class, float32 of shape
            (K, *input_shape), values in [0, 1].
        costs: the lowest cost c(x) = 1 − f_label(x) reached per class, shape (K,).
        iterations: gradient steps taken per class, shape (K,).
        stop_reasons: per class ``"threshold"``, ``"patience"`` or ``"max_iterations"``.
    """

    classes: np.ndarray
    reconstructions: np.ndarray
    costs: np.ndarray
    iterations: np.ndarray
    stop_reasons: tuple[str, ...]


def _mean3x3(x: torch.Tensor) -> torch.Tensor:
    # Flatten leading dims so any (..., H, W) input is filtered per channel.
    shape = x.shape
    flat = x.reshape(-1, 1, shape[-2], shape[-1])
    padded = F.pad(flat, (1, 1, 1, 1), mode="replicate")
    return F.avg_pool2d(padded, kernel_size=3, stride=1).reshape(shape)


def _process(x: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "denoise":
        x = _mean3x3(x)
    elif kind == "sharpen":
        x = 2.0 * x - _mean3x3(x)
    return x.clamp(0.0, 1.0)


def _check_classes(classes: object) -> list[int]:
    try:
        values = [int(c) for c in classes]  # type: ignore[attr-defined]
        ok = all(float(c) == int(c) for c in classes)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise ValueError(f"classes must be a sequence of non-negative ints, got {classes!r}") from None
    if not ok or not values or min(values) < 0:
        raise ValueError(f"classes must be a non-empty sequence of non-negative ints, got {classes!r}")
    if len(set(values)) != len(values):
        raise ValueError(f"classes must not repeat a label, got {values}")
    return values


def mi_face(
    model: nn.Module,
    *,
    classes: object,
    input_shape: tuple[int, ...],
    config: MIFaceConfig,
    seed: int,
    device: str | torch.device = "cpu",
    start: np.ndarray | None = None,
) -> MIFaceOutput:
    """Invert every class in ``classes`` with MI-Face (Fredrikson et al. 2015, Alg. 1).

    The model is run in eval mode and left as it was found: per-module training flags are
    restored, its parameters are not changed, and gradients are taken only with respect to
    the input (``torch.autograd.grad``), so no ``.grad`` accumulates on its parameters. The
    model must already live on ``device``.

    Args:
        model: a classifier returning logits of shape (N, num_classes).
        classes: the target labels (distinct non-negative ints), inverted together.
        input_shape: one input's shape without the batch dimension, e.g. (1, 112, 92).
        config: the attack's parameters.
        seed: seeds the random start (``config.start_value=None``); the attack is otherwise
            deterministic.
        device: where to run.
        start: optional neutral start image of shape ``input_shape`` in [0, 1] (e.g. the
            mean public image); overrides ``config.start_value``.

    Returns:
        The best iterate, its cost, the steps taken and the stop reason per class.

    Raises:
        ValueError: an argument (named in the message) is invalid, including a label the
            model's output does not have.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(config, MIFaceConfig):
        raise ValueError(f"config must be an MIFaceConfig, got {type(config).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int, got {seed!r}")
    labels = _check_classes(classes)
    try:
        shape = tuple(int(s) for s in input_shape)
    except (TypeError, ValueError):
        raise ValueError(f"input_shape must be a tuple of positive ints, got {input_shape!r}") from None
    if not shape or min(shape) < 1:
        raise ValueError(f"input_shape must be a non-empty tuple of positive ints, got {input_shape!r}")
    if config.process != "none" and len(shape) < 2:
        raise ValueError(f"input_shape must have >= 2 dimensions for process={config.process!r}, got {shape}")
    dev = torch.device(device)
    k = len(labels)
    if start is not None:
        start_arr = np.asarray(start, dtype=np.float32)
        if start_arr.shape != shape:
            raise ValueError(f"start must have shape input_shape={shape}, got {start_arr.shape}")
        if not np.all(np.isfinite(start_arr)) or start_arr.min() < 0 or start_arr.max() > 1:
            raise ValueError("start must hold finite values in [0, 1]")
        x = torch.from_numpy(start_arr).to(dev).expand(k, *shape).clone()
    elif config.start_value is None:
        gen = torch.Generator().manual_seed(seed)
        x = torch.rand((k, *shape), generator=gen, dtype=torch.float32).to(dev)
    else:
        x = torch.full((k, *shape), float(config.start_value), dtype=torch.float32, device=dev)

    target = torch.tensor(labels, dtype=torch.long, device=dev)
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.enable_grad():

            def cost_and_grad(xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                # One forward/backward for all K classes; gradient w.r.t. the input only.
                xs = xs.detach().requires_grad_(True)
                logits = model(xs)
                if logits.ndim != 2 or logits.shape[0] != k:
                    raise ValueError(f"model must return logits of shape (N, C), got {tuple(logits.shape)}")
                if max(labels) >= logits.shape[1]:
                    raise ValueError(f"classes must be < the model's {logits.shape[1]} outputs, got {max(labels)}")
                prob = torch.softmax(logits.double(), dim=1).gather(1, target[:, None])[:, 0]
                cost = 1.0 - prob
                (grad,) = torch.autograd.grad(cost.sum(), xs)
                return cost.detach(), grad.detach()

            cost, grad = cost_and_grad(x)
            best_x = x.clone()
            best_cost = cost.clone()
            since_best = torch.zeros(k, dtype=torch.long, device=dev)
            active = torch.ones(k, dtype=torch.bool, device=dev)
            steps = torch.zeros(k, dtype=torch.long, device=dev)
            reasons = ["max_iterations"] * k
            for _ in range(config.max_iterations):
                mask = active.view(k, *([1] * len(shape)))
                stepped = _process(x - config.step_size * grad.to(x.dtype), config.process)
                x = torch.where(mask, stepped, x)
                steps += active.long()
                cost, grad = cost_and_grad(x)
                improved = active & (cost < best_cost)
                best_cost = torch.where(improved, cost, best_cost)
                best_x = torch.where(improved.view_as(mask), x, best_x)
                since_best = torch.where(improved, torch.zeros_like(since_best), since_best + active.long())
                # The paper's test is cost ≤ γ (confident enough), checked before patience.
                hit = active & (cost <= config.cost_threshold)
                stalled = active & ~hit & (since_best >= config.patience)
                for i in torch.nonzero(hit).flatten().tolist():
                    reasons[i] = "threshold"
                for i in torch.nonzero(stalled).flatten().tolist():
                    reasons[i] = "patience"
                active = active & ~hit & ~stalled
                if not bool(active.any()):
                    break
    finally:
        for module, was_training in modes:
            module.train(was_training)

    def frozen(a: np.ndarray) -> np.ndarray:
        a.setflags(write=False)
        return a

    return MIFaceOutput(
        classes=frozen(np.asarray(labels, dtype=np.int64)),
        reconstructions=frozen(best_x.detach().cpu().numpy().astype(np.float32)),
        costs=frozen(best_cost.cpu().numpy().astype(np.float64)),
        iterations=frozen(steps.cpu().numpy().astype(np.int64)),
        stop_reasons=tuple(reasons),
    )
