"""MI-Face: white-box model inversion by gradient descent on the class confidence.

Fredrikson, Jha & Ristenpart (2015), "Model Inversion Attacks that Exploit Confidence
Information and Basic Countermeasures", CCS, Algorithm 1 (MI-Face). With f the model's softmax
and c(x) = 1 − f_label(x), starting from a neutral image x₀:

    for i = 1 … α:
        x_i ← Process(x_{i−1} − λ ∇c(x_{i−1}))
        stop if c(x_i) has not improved for β iterations       (patience window)
        stop if c(x_i) ≤ γ                                     (cost threshold)
    return the iterate with the lowest cost

**Convergence rule.** The patience test here is on the lowest cost so far, b_i = min_{j≤i} c(x_j),
measured as the objective the steps descend, L(b): −log(1 − b) by default, b itself with
``descend_on="cost"``. A class stops once its last β steps improved it by at most a fraction τ
(``tolerance``, default 1%) of what it was: L(b_{i−β}) − L(b_i) ≤ τ · L(b_{i−β}). With τ = 0
this is the paper's "has not improved for β iterations" on the best cost (it also stops a class
whose iterates oscillate, which the paper's "c(x_i) ≥ max of the last β costs" can keep
alive). With τ > 0 it also stops a class that still creeps but gains nearly nothing: under
steps on −log p a class seldom stops improving *at all*, so with τ = 0 nearly every class ran
to α. The measure is L and not c because while p is small, c = 1 − p hardly moves relative to
itself (p from 0.025 to 0.03 lowers c by 0.5%, −log p by 5%): a rule on c stopped the classes
of a faces-mlp after a median of 118 steps, at top-1 0.05 (``docs/attacks/inversion.md``).
By default the steps descend −log f_label rather than 1 − f_label (see
:attr:`MIFaceConfig.descend_on`); ``descend_on="cost"`` is the algorithm to the letter.

A popular toolbox stops when the cost is *above* the threshold; the paper (and this module)
stops when it is at or *below* γ, i.e. when the model is confident enough.

All target classes are inverted in one batched tensor: every iteration is a single forward
and backward pass over the K classes, and per-class stopping is a boolean mask that freezes
a finished class's iterate while the others keep descending.

**Default iteration budget.** Classes stop by the convergence rule; α only bounds a class
that never converges. Without an explicit ``max_iterations``, :func:`run_mi_face` times a few
steps on the given model and device first, and allows the paper's α = 10,000 steps only if
they fit ``SEARCH_SECONDS`` in all; otherwise it caps α to what fits, and says so on
stderr with the estimate. An explicit ``max_iterations`` is never capped (but its estimate is
printed when it exceeds the same budget). The cap applied is stored in the output's ``details``.

**Progress.** :func:`run_mi_face` reports ``progress(done, total)`` in *classes*: how many of
the K classes (times the restarts) have stopped, once every step, so a progress bar shows the
classes done and estimates the time left.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from attacks.inversion.base import RESTARTS_HELP, InversionOutput, check_classes
from attacks.inversion.spec import INVERSION_ATTACKS, InversionAttackSpec
from dpaudit import _validate as v
from dpaudit.limits import LIMITS
from dpaudit.options import option
from dpaudit.parts import PlotStyle
from dpaudit.seeding import derive_seed

__all__ = [
    "MIFaceConfig",
    "MIFaceOutput",
    "mi_face",
    "run_mi_face",
    "plan_iterations",
    "DEFAULT_ITERATIONS",
    "DEFAULT_TOLERANCE",
    "SEARCH_SECONDS",
]

#: α of the widely used implementation (``reference``: step 0.1, window 100, 10,000 iterations).
DEFAULT_ITERATIONS = 10_000
#: τ of the convergence rule: a class stops once β steps improved its best cost by at most 1%.
DEFAULT_TOLERANCE = 0.01
#: The default run's time budget for its searches, all classes and restarts together, on the
#: measured speed: every step is one batched pass over the classes, so a budget per class (once
#: two minutes a class, 80 minutes for the 40 ORL faces) let a default run take over an hour.
#: Three minutes leave a first run room for its evaluator's training within five (issue 47).
SEARCH_SECONDS = 180.0
#: Steps timed (after one warm-up) to estimate the cost of one step.
_TIMED_STEPS = 3

StopReason = Literal["threshold", "patience", "max_iterations"]
_PROCESSES = ("none", "denoise", "sharpen")
_OBJECTIVES = ("log-probability", "cost")


@dataclass(frozen=True, kw_only=True)
class MIFaceConfig:
    """Parameters of MI-Face (Fredrikson et al. 2015, Algorithm 1).

    Defaults follow the widely used implementation noted in ``docs/attacks/inversion.md`` §2
    (step 0.1, window 100, 10,000 iterations) except the threshold, which here is on the
    *cost*: γ = 0.01 means "stop once the target class has confidence ≥ 0.99".

    Attributes:
        max_iterations: α, the most gradient steps per class (≥ 1); ``None`` (default):
            ``DEFAULT_ITERATIONS``, capped by :func:`run_mi_face` so that the searches take at
            most ``SEARCH_SECONDS`` in all at the speed measured on the model.
        step_size: λ, the gradient-descent step (> 0, finite).
        patience: β, the window of the convergence rule, in iterations (≥ 1).
        tolerance: τ in [0, 1): stop a class once its best descended objective (−log p, or
            the cost with ``descend_on="cost"``) improved by at most this fraction over the
            last β iterations (module docstring); 0 is the paper's "not improved at all".
        cost_threshold: γ in [0, 1]; stop a class once its cost is ≤ γ.
        process: the paper's optional Process step applied after each step: ``"none"``;
            ``"denoise"``, a 3×3 mean filter over the last two (spatial) dimensions with
            edge replication; or ``"sharpen"``, an unsharp mask x + (x − mean3×3(x)). Both
            need an input of at least two dimensions; the result is clamped to [0, 1].
        start_value: the neutral start: every pixel set to this value in [0, 1] (mid-grey by
            default: from black, clamping at 0 leaves most of the image dark, and an evaluator
            cannot recognise it); ``None`` starts from uniform noise in [0, 1] drawn from the
            seed. A full start image may instead be passed to :func:`mi_face` as ``start``.
        descend_on: what the gradient steps descend. ``"cost"`` is Algorithm 1 to the letter:
            x ← x − λ∇c(x) with c = 1 − p. Its gradient is p·(…), which vanishes where the
            target class has p ≈ 0 — from a grey start on ORL faces, 33 of 40 classes of a
            softmax-regression target never moved. ``"log-probability"`` (default) steps
            along ∇(−log p) = ∇c / p instead: per class the same direction and the same
            minimisers, with a step that does not shrink with p. The patience window, the
            threshold γ on c and the best iterate are the paper's in both cases.
        restarts: how many times :func:`run_mi_face` inverts every class — the first from
            the neutral start, the others from seeded uniform noise — keeping per class the
            run with the lowest cost (the target's verdict; the attacker has nothing else).
    """

    max_iterations: int | None = option(
        None,
        kind=int,
        help="MI-Face: most gradient steps per class, alpha (default "
        f"{DEFAULT_ITERATIONS:,}, capped to about {SEARCH_SECONDS / 60:g} min "
        "in all at the speed measured on the model)",
        metavar="N",
        check=lambda n, x: v.integer(n, x, minimum=1),
        limit=LIMITS["inversion_steps"],
    )
    step_size: float = option(0.1, help="MI-Face: gradient step lambda", metavar="LAMBDA", check=v.positive)
    patience: int = option(
        100,
        help="MI-Face: window of the convergence rule in steps, beta (see --tolerance)",
        metavar="BETA",
        check=lambda n, x: v.integer(n, x, minimum=1),
    )
    tolerance: float = option(
        DEFAULT_TOLERANCE,
        help="MI-Face: stop a class once its best objective (-log p, or the cost with --descend-on cost) "
        "improved by at most this fraction over the last --patience steps, tau in [0, 1) "
        "(0: stop only when it has not improved at all)",
        metavar="TAU",
    )
    cost_threshold: float = option(
        0.01, help="MI-Face: stop a class once its cost 1 - p(class) is <= gamma", metavar="GAMMA"
    )
    process: str = option("none", help="MI-Face: Process step after each update", choices=_PROCESSES)
    start_value: float | None = option(
        0.5,
        kind=float,
        help="MI-Face: grey level of the neutral start in [0, 1] (restarts after the first start from seeded noise)",
        metavar="V",
    )
    descend_on: str = option(
        "log-probability",
        help="MI-Face: take gradient steps on -log p(class) (same minimisers, no "
        "vanishing gradient where p ~ 0) or on the paper's cost 1 - p(class)",
        choices=_OBJECTIVES,
    )
    restarts: int = option(
        1, help=RESTARTS_HELP, metavar="R", check=lambda n, x: v.integer(n, x, minimum=1), limit=LIMITS["restarts"]
    )

    def __post_init__(self) -> None:
        if self.max_iterations is None:
            pass
        elif isinstance(self.max_iterations, bool) or not isinstance(self.max_iterations, int):
            raise v.invalid_type("max_iterations", f"max_iterations must be an int, got {self.max_iterations!r}")
        elif self.max_iterations < 1:
            raise v.invalid("max_iterations", f"max_iterations must be >= 1, got {self.max_iterations}")
        if isinstance(self.patience, bool) or not isinstance(self.patience, int):
            raise v.invalid_type("patience", f"patience must be an int, got {self.patience!r}")
        if self.patience < 1:
            raise v.invalid("patience", f"patience must be >= 1, got {self.patience}")
        if not (isinstance(self.step_size, (int, float)) and math.isfinite(self.step_size)):
            raise v.invalid("step_size", f"step_size must be a finite number, got {self.step_size!r}")
        if self.step_size <= 0:
            raise v.invalid("step_size", f"step_size must be > 0, got {self.step_size}")
        if (
            isinstance(self.tolerance, bool)
            or not isinstance(self.tolerance, (int, float))
            or not 0.0 <= self.tolerance < 1.0
        ):
            raise v.invalid("tolerance", f"tolerance must be a number in [0, 1), got {self.tolerance!r}")
        if not (isinstance(self.cost_threshold, (int, float)) and 0.0 <= self.cost_threshold <= 1.0):
            raise v.invalid("cost_threshold", f"cost_threshold must be in [0, 1], got {self.cost_threshold!r}")
        if self.descend_on not in _OBJECTIVES:
            raise v.invalid("descend_on", f"descend_on must be one of {_OBJECTIVES}, got {self.descend_on!r}")
        if self.process not in _PROCESSES:
            raise v.invalid("process", f"process must be one of {_PROCESSES}, got {self.process!r}")
        if self.start_value is not None and not (
            isinstance(self.start_value, (int, float)) and 0.0 <= self.start_value <= 1.0
        ):
            raise v.invalid("start_value", f"start_value must be in [0, 1] or None, got {self.start_value!r}")


@dataclass(frozen=True)
class MIFaceOutput:
    """What MI-Face returns; arrays are read-only.

    Attributes:
        classes: the target labels, shape (K,).
        reconstructions: the lowest-cost iterate per class, float32 of shape
            (K, *input_shape), values in [0, 1].
        costs: the lowest cost c(x) = 1 − f_label(x) reached per class, shape (K,).
        iterations: gradient steps taken per class, shape (K,).
        stop_reasons: per class ``"threshold"``, ``"patience"`` (the convergence rule) or
            ``"max_iterations"``.
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


def _check_call(
    model: object, *, classes: object, input_shape: Any, config: object, seed: object
) -> tuple[list[int], tuple[int, ...]]:
    """The validated labels and input shape of a :func:`mi_face` call (the error names the argument)."""
    if not isinstance(model, nn.Module):
        raise v.invalid("model", f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(config, MIFaceConfig):
        raise v.invalid("config", f"config must be an MIFaceConfig, got {type(config).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise v.invalid("seed", f"seed must be an int, got {seed!r}")
    labels = check_classes(classes)
    try:
        shape = tuple(int(s) for s in input_shape)
    except (TypeError, ValueError):
        raise v.invalid("input_shape", f"input_shape must be a tuple of positive ints, got {input_shape!r}") from None
    if not shape or min(shape) < 1:
        raise v.invalid("input_shape", f"input_shape must be a non-empty tuple of positive ints, got {input_shape!r}")
    if config.process != "none" and len(shape) < 2:
        raise v.invalid(
            "input_shape", f"input_shape must have >= 2 dimensions for process={config.process!r}, got {shape}"
        )
    return labels, shape


def _start_images(
    start: np.ndarray | None,
    *,
    config: MIFaceConfig,
    num_classes: int,
    shape: tuple[int, ...],
    seed: int,
    device: torch.device,
) -> torch.Tensor:
    """The first iterate of every class: ``start``, a seeded uniform draw, or the constant ``config.start_value``."""
    k, dev = num_classes, device
    if start is not None:
        start_arr = np.asarray(start, dtype=np.float32)
        if start_arr.shape != shape:
            raise v.invalid("start", f"start must have shape input_shape={shape}, got {start_arr.shape}")
        if not np.all(np.isfinite(start_arr)) or start_arr.min() < 0 or start_arr.max() > 1:
            raise v.invalid("start", "start must hold finite values in [0, 1]")
        return torch.from_numpy(start_arr).to(dev).expand(k, *shape).clone()
    elif config.start_value is None:
        gen = torch.Generator().manual_seed(seed)
        return torch.rand((k, *shape), generator=gen, dtype=torch.float32).to(dev)
    else:
        return torch.full((k, *shape), float(config.start_value), dtype=torch.float32, device=dev)


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def mi_face(
    model: nn.Module,
    *,
    classes: object,
    input_shape: tuple[int, ...],
    config: MIFaceConfig,
    seed: int,
    device: str | torch.device = "cpu",
    start: np.ndarray | None = None,
    progress: Callable[[int, int], None] | None = None,
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
        progress: called after every step as ``progress(steps, classes_done)``: the steps
            taken so far and how many classes have stopped.

    Returns:
        The best iterate, its cost, the steps taken and the stop reason per class.

    Raises:
        ValueError: an argument (named in the message) is invalid, including a label the
            model's output does not have.
    """
    labels, shape = _check_call(model, classes=classes, input_shape=input_shape, config=config, seed=seed)
    dev = torch.device(device)
    k = len(labels)
    x = _start_images(start, config=config, num_classes=k, shape=shape, seed=seed, device=dev)

    target = torch.tensor(labels, dtype=torch.long, device=dev)
    log_objective = config.descend_on == "log-probability"
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.enable_grad():

            def cost_and_grad(xs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                # One forward/backward for all K classes; gradient w.r.t. the input only.
                xs = xs.detach().requires_grad_(True)
                logits = model(xs)
                if logits.ndim != 2 or logits.shape[0] != k:
                    raise v.invalid("model", f"model must return logits of shape (N, C), got {tuple(logits.shape)}")
                if max(labels) >= logits.shape[1]:
                    raise v.invalid(
                        "classes", f"classes must be < the model's {logits.shape[1]} outputs, got {max(labels)}"
                    )
                prob = torch.softmax(logits.double(), dim=1).gather(1, target[:, None])[:, 0]
                cost = 1.0 - prob
                # Both objectives share their minimisers and their per-class descent direction
                # (∇(−log p) = ∇(1 − p) / p); only the step length differs.
                descend = (
                    -torch.log_softmax(logits.double(), dim=1).gather(1, target[:, None])[:, 0]
                    if log_objective
                    else cost
                )
                (grad,) = torch.autograd.grad(descend.sum(), xs)
                return cost.detach(), grad.detach()

            cost, grad = cost_and_grad(x)
            best_x = x.clone()
            best_cost = cost.clone()
            # The best cost of the last β + 1 steps, a ring buffer: row i % (β + 1) holds step i's.
            window = config.patience + 1
            history = best_cost.new_empty((window, k))
            history[0] = _progress_measure(best_cost, log_objective)
            active = torch.ones(k, dtype=torch.bool, device=dev)
            steps = torch.zeros(k, dtype=torch.long, device=dev)
            reasons = ["max_iterations"] * k
            alpha = DEFAULT_ITERATIONS if config.max_iterations is None else config.max_iterations
            for it in range(alpha):
                mask = active.view(k, *([1] * len(shape)))
                stepped = _process(x - config.step_size * grad.to(x.dtype), config.process)
                x = torch.where(mask, stepped, x)
                steps += active.long()
                cost, grad = cost_and_grad(x)
                improved = active & (cost < best_cost)
                best_cost = torch.where(improved, cost, best_cost)
                best_x = torch.where(improved.view_as(mask), x, best_x)
                now = _progress_measure(best_cost, log_objective)
                history[(it + 1) % window] = now
                # The paper's test is cost ≤ γ (confident enough), checked before patience.
                hit = active & (cost <= config.cost_threshold)
                stalled = torch.zeros_like(active)
                if it + 1 >= config.patience:
                    # The best cost β steps ago: every class still active has taken all it + 1
                    # steps, so the global step count is its own.
                    before = history[(it + 1 - config.patience) % window]
                    stalled = active & ~hit & (before - now <= config.tolerance * before)
                for i in torch.nonzero(hit).flatten().tolist():
                    reasons[i] = "threshold"
                for i in torch.nonzero(stalled).flatten().tolist():
                    reasons[i] = "patience"
                active = active & ~hit & ~stalled
                if progress is not None:
                    # A class that reached α has stopped too.
                    progress(it + 1, k if it + 1 == alpha else k - int(active.sum()))
                if not bool(active.any()):
                    break
    finally:
        for module, was_training in modes:
            module.train(was_training)

    return MIFaceOutput(
        classes=_frozen(np.asarray(labels, dtype=np.int64)),
        reconstructions=_frozen(best_x.detach().cpu().numpy().astype(np.float32)),
        costs=_frozen(best_cost.cpu().numpy().astype(np.float64)),
        iterations=_frozen(steps.cpu().numpy().astype(np.int64)),
        stop_reasons=tuple(reasons),
    )


def _progress_measure(best_cost: torch.Tensor, log_objective: bool) -> torch.Tensor:
    """What the convergence rule compares: the descended objective at the best iterate (module docstring)."""
    if not log_objective:
        return best_cost
    return -torch.log((1.0 - best_cost).clamp_min(1e-300))


def _seconds_per_step(
    model: nn.Module, *, num_classes: int, input_shape: tuple[int, ...], device: str | torch.device
) -> float:
    """Wall time of one MI-Face step (one forward and backward over the classes), measured."""
    dev = torch.device(device)
    x = torch.full((num_classes, *input_shape), 0.5, dtype=torch.float32, device=dev)
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.enable_grad():
            times = []
            for _ in range(_TIMED_STEPS + 1):  # the first is a warm-up (allocations, kernels)
                started = time.perf_counter()
                xs = x.detach().requires_grad_(True)
                (grad,) = torch.autograd.grad(torch.log_softmax(model(xs).double(), dim=1)[:, 0].sum(), xs)
                if dev.type == "cuda":
                    torch.cuda.synchronize(dev)
                times.append(time.perf_counter() - started)
    finally:
        for module, was_training in modes:
            module.train(was_training)
    return float(min(times[1:]))


def plan_iterations(config: MIFaceConfig, *, seconds_per_step: float, num_classes: int) -> tuple[int, str | None]:
    """The steps per restart a run takes, and what to say about its duration.

    Without an explicit ``max_iterations``: ``DEFAULT_ITERATIONS``, capped so that all
    restarts fit ``SEARCH_SECONDS`` together. An explicit value is kept as given.

    Returns:
        (steps per restart, a line for stderr or ``None`` when the run is short).
    """
    budget = SEARCH_SECONDS
    per_restart = max(seconds_per_step, 1e-9) * config.restarts
    if config.max_iterations is not None:
        estimate = config.max_iterations * per_restart
        if estimate <= budget:
            return config.max_iterations, None
        return config.max_iterations, (
            f"mi-face: {config.max_iterations:,} steps x {config.restarts} "
            f"restart(s) at {seconds_per_step * 1e3:.3g} ms per step over "
            f"{num_classes} classes "
            f"is estimated to take up to {estimate / 60:.1f} min (classes that converge stop earlier)"
        )
    steps = max(1, min(DEFAULT_ITERATIONS, int(budget / per_restart)))
    estimate = steps * per_restart
    if steps == DEFAULT_ITERATIONS:
        return (
            steps,
            None
            if estimate < 10.0
            else f"mi-face: up to {steps:,} steps x {config.restarts} restart(s), "
            f"estimated at most {estimate / 60:.1f} min "
            f"({seconds_per_step * 1e3:.3g} ms per step)",
        )
    return steps, (
        f"mi-face: one step over {num_classes} classes takes "
        f"{seconds_per_step * 1e3:.3g} ms here, so the default "
        f"{DEFAULT_ITERATIONS:,} steps are capped at {steps:,} "
        f"(at most {estimate / 60:.1f} min); pass --max-iterations to choose"
    )


def run_mi_face(
    model: nn.Module,
    *,
    classes: object,
    input_shape: tuple[int, ...],
    config: MIFaceConfig,
    seed: int,
    device: str | torch.device = "cpu",
    prior: object = None,
    progress: Callable[[int, int], None] | None = None,
) -> InversionOutput:
    """MI-Face with ``config.restarts`` starts per class, as a registered inversion attack.

    Each restart inverts every class in one batched call (:func:`mi_face`); per class the
    restart with the lowest cost is kept. ``prior`` is unused (MI-Face needs no public data).
    Classes stop by the convergence rule; the default iteration cap is bounded by time
    (module docstring).

    Args:
        progress: ``progress(done, total)`` after every step: the classes stopped (by the
            threshold, the convergence rule or α) out of K times the restarts; when given,
            the duration estimate is also printed on stderr.

    Returns:
        The kept reconstructions with the target's confidence, and per-restart costs,
        iterations and stop reasons in ``details`` (with ``max_iterations``, the α applied).
    """
    if not isinstance(config, MIFaceConfig):
        raise v.invalid("config", f"config must be an MIFaceConfig, got {type(config).__name__}")
    labels = check_classes(classes)
    try:
        shape = tuple(int(s) for s in input_shape)
        seconds = _seconds_per_step(model, num_classes=len(labels), input_shape=shape, device=device)
    except Exception:  # a bad model or shape: mi_face below refuses it, naming the argument
        shape, seconds = input_shape, 0.0
    alpha, note = plan_iterations(config, seconds_per_step=seconds, num_classes=len(labels))
    if note is not None and progress is not None:
        print(note, file=sys.stderr, flush=True)
    planned = dataclasses.replace(config, max_iterations=alpha)
    k = len(labels)
    total = k * config.restarts  # progress counts classes stopped, over all restarts
    runs = []
    for r in range(config.restarts):
        start_cfg = planned if r == 0 else dataclasses.replace(planned, start_value=None)
        done = r * k
        step = None if progress is None else (lambda _i, stopped, done=done: progress(done + stopped, total))
        runs.append(
            mi_face(
                model,
                classes=labels,
                input_shape=shape,
                config=start_cfg,
                seed=derive_seed(seed, "mi-face", r),
                device=device,
                progress=step,
            )
        )
        if progress is not None:  # classes stopped by α are done all the same
            progress(done + k, total)
    costs = np.stack([o.costs for o in runs])  # (R, K)
    best = costs.argmin(axis=0)
    recon = np.stack([runs[best[i]].reconstructions[i] for i in range(k)]).astype(np.float32)
    return InversionOutput(
        classes=runs[0].classes,
        reconstructions=recon,
        target_confidence=np.clip(1.0 - costs[best, np.arange(k)], 0.0, 1.0),
        details={
            "restart_cost": costs.T.tolist(),
            "best_restart": best.tolist(),
            "iterations": np.stack([o.iterations for o in runs]).T.tolist(),
            "stop_reasons": [[o.stop_reasons[i] for o in runs] for i in range(k)],
            "max_iterations": alpha,
        },
    )


INVERSION_ATTACKS.register(
    InversionAttackSpec(
        name="mi-face",
        style=PlotStyle(colour="#0072B2", marker="o"),
        summary="gradient descent on 1 - p(class) from a neutral image (Fredrikson et al. 2015, Alg. 1)",
        config_type=MIFaceConfig,
        run=run_mi_face,
        iterations_field="max_iterations",
        progress_unit="classes",
    )
)
