"""Many models at once: k independent models of one architecture trained as one computation.

Audits, shadow pools and teacher ensembles train hundreds of small models (an MLP or a small
CNN) that differ only in their data subset, seed and noise. Trained one at a time, each leaves
most of a CPU's vector units idle; here their parameters are stacked
(:func:`torch.func.stack_module_state`) and every step runs all k models through one
:func:`torch.func.vmap` of :func:`torch.func.functional_call`, so k small problems become one
that fills the hardware. The modes, and what each model's run is equivalent to:

* **non-private SGD** (:class:`BatchedSGD`): mini-batch SGD with momentum over the model's own
  members in seeded shuffled order, the mean cross-entropy of each batch: the loop of the
  non-private baseline (``defenses/nonprivate.py``);
* **DP-SGD** (:class:`BatchedDPSGD`, sampling rate q < 1): Abadi et al. (2016), Algorithm 1, per
  model: Poisson lots (each member in with probability q, its coin the keyed hash of its sample
  id, :mod:`dpaudit.sampling`), per-example clipping to C, Gaussian noise N(0, σ²C²) per
  coordinate drawn from the model's own generator, the noisy sum divided by the public expected
  lot size q·N (N the model's own number of members, or a given constant) — never the realised
  lot size;
* **full-batch DP-GD** (:class:`BatchedDPSGD` with q = 1): every member in every step (the
  worst-case audits of Annamalai & De Cristofaro 2024), the same clipping, noise and normaliser.

Each model's randomness comes from the streams its separate run uses (:mod:`dpaudit.seeding`):
``init`` seeds the initialisation (under :func:`torch.random.fork_rng`, as the trainers do),
``batches`` the shuffles, ``lots`` the Poisson keys and ``noise`` the Gaussian noise, so the
same seeds give the same models as k separate runs up to floating-point reordering
(``tests/core/test_batched.py`` checks it against the project's trainers).

**Memory.** Per-example gradients of k models take k · b · P numbers for b examples per pass
on the generic path; the layered path forms only its convolutions' (a Linear layer's norm needs
its input and output gradient alone), and non-private training none. :func:`plan_batches`
picks how many models train together (``models_per_chunk``) and how many examples each pass
holds from ``memory_budget`` bytes and what one example holds, and its ``note`` says so.
Chunks of models train one after another; the result does not depend on the chunking.

The page ``docs/batched.md`` shows the benchmark (``scripts/bench_batched.py``).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.func import grad, vmap
from torch.nn import functional as F

from dpaudit import _validate as v
from dpaudit.batched_compute import LayeredModels, StackedModels
from dpaudit.data import ArrayDataset
from dpaudit.progress import Progress
from dpaudit.sampling import keyed_uniforms, step_key
from dpaudit.seeding import derive_seed, torch_generator
from dpaudit.training import SGDConfig, check_loss, resolve_device

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "BatchPlan",
    "BatchedDPSGD",
    "BatchedRun",
    "BatchedSGD",
    "plan_batches",
    "train_batched",
    "train_batched_on_ids",
]

#: Bytes the per-example work of one chunk of models may take by default (1 GiB): a quarter of
#: a small CI machine's memory, and far below a GPU's.
DEFAULT_MEMORY_BUDGET = 2**30

# The most work memory one pass takes even under a larger budget: passes beyond a few tens of MiB
# stream through memory instead of cache (audit-cnn on 2 cores: 470 µs an example with 256
# examples a pass, 760 µs with 1,000).
_PASS_BYTES = 32 * 2**20

# Per-example gradients are held with their clipped copy and the activations of the backward
# pass; measured on digits-mlp and audit-cnn, the peak is about three times the gradients alone.
_WORK_FACTOR = 3


#: Non-private mini-batch SGD with momentum for every model: the non-private loop's own settings
#: (:class:`dpaudit.training.SGDConfig`), one type, so a shadow's or baseline's settings pass unchanged.
BatchedSGD = SGDConfig


@dataclass(frozen=True, kw_only=True)
class BatchedDPSGD:
    """DP-SGD with Poisson lots (q < 1) or full-batch DP-GD (q = 1), for every model.

    Privacy arguments are keyword-only; the values are the resolved ones a DP-SGD plan fixes
    before training (σ, q, the number of steps).

    Attributes:
        noise_multiplier: σ: noise std per coordinate of the clipped sum is σ·C.
        clip_norm: C, each example's whole-gradient L2 bound.
        sampling_rate: q in (0, 1]; 1 is full-batch DP-GD.
        num_steps: steps T.
        learning_rate: step size (a ``schedule`` passed to :func:`train_batched` overrides it per step).
        momentum: heavy-ball momentum in [0, 1) (post-processing of the released sums).
        weight_decay: L2 penalty (on parameters, not data: no privacy cost).
        expected_lot_size: the public divisor of the noisy sum; ``None``: q·N with N the model's
            own number of members (the rule of the project's DP-SGD).
    """

    noise_multiplier: float
    clip_norm: float
    sampling_rate: float
    num_steps: int
    learning_rate: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    expected_lot_size: float | None = None

    def __post_init__(self) -> None:
        v.non_negative("noise_multiplier", self.noise_multiplier)
        v.positive("clip_norm", self.clip_norm)
        q = v.real("sampling_rate", self.sampling_rate)
        if not 0 < q <= 1:
            raise v.invalid("sampling_rate", f"sampling_rate must lie in (0, 1], got {self.sampling_rate!r}")
        v.integer("num_steps", self.num_steps, minimum=1)
        v.positive("learning_rate", self.learning_rate)
        if not 0 <= v.real("momentum", self.momentum) < 1:
            raise v.invalid("momentum", f"momentum must lie in [0, 1), got {self.momentum!r}")
        v.non_negative("weight_decay", self.weight_decay)
        if self.expected_lot_size is not None:
            v.positive("expected_lot_size", self.expected_lot_size)


BatchedConfig = BatchedSGD | BatchedDPSGD


@dataclass(frozen=True, kw_only=True)
class BatchPlan:
    """How a batched run splits its k models and its examples to stay within the memory budget.

    Attributes:
        num_models: k.
        models_per_chunk: models trained together (chunks run one after another).
        examples_per_pass: most examples of each model in one forward/backward pass.
        num_parameters: P, trainable parameters of one model.
        bytes_per_example: estimated work memory of one model on one example.
        memory_budget: the budget in bytes.
        note: one line saying all of the above.
    """

    num_models: int
    models_per_chunk: int
    examples_per_pass: int
    num_parameters: int
    bytes_per_example: int
    memory_budget: int
    note: str


@dataclass(frozen=True, kw_only=True, eq=False)
class BatchedRun:
    """The k trained models (eval mode, in the order of the seeds) and what the run counted.

    Attributes:
        models: the trained models.
        plan: the chunking it ran with.
        num_steps: optimiser steps each model took.
        mean_lot_sizes: each model's mean lot (or batch) size.
        train_loss_means: each model's mean per-example training loss over its steps.
    """

    models: tuple[nn.Module, ...]
    plan: BatchPlan
    num_steps: tuple[int, ...]
    mean_lot_sizes: tuple[float, ...]
    train_loss_means: tuple[float, ...]


def _activation_numel(model: nn.Module, example: torch.Tensor) -> int:
    """Numbers every module outputs for one example (what a backward pass keeps per example)."""
    total = 0

    def hook(_m: nn.Module, _i: object, out: object) -> None:
        nonlocal total
        if isinstance(out, torch.Tensor):
            total += out.numel()

    # Leaves only: a container's output is its last child's, already counted.
    handles = [m.register_forward_hook(hook) for m in model.modules() if next(m.children(), None) is None]
    try:
        with torch.no_grad():
            model(example.unsqueeze(0))
    finally:
        for h in handles:
            h.remove()
    return total


def _layered_gradient_numel(model: nn.Module, example: torch.Tensor) -> int:
    """Numbers the layered path holds per example beyond the activations: each convolution's whole
    per-example gradient and its unfolded input (a Linear layer's gradient is never formed)."""
    total = 0

    def hook(module: nn.Module, _i: object, out: object) -> None:
        nonlocal total
        if isinstance(module, nn.Conv2d) and isinstance(out, torch.Tensor):
            spatial = out.shape[-2] * out.shape[-1]
            total += module.weight.numel() + module.weight[0].numel() * spatial
        elif isinstance(module, nn.Linear):
            total += module.in_features + module.out_features  # a and g of the example

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    try:
        with torch.no_grad():
            model(example.unsqueeze(0))
    finally:
        for h in handles:
            h.remove()
    return total


def plan_batches(
    model: nn.Module,
    example: torch.Tensor,
    *,
    num_models: int,
    max_examples: int,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    physical_batch_size: int = 1024,
    gradient_numel: int | None = None,
) -> BatchPlan:
    """How many models train together, and how many examples each pass holds, within ``memory_budget``.

    The per-example work of one model is estimated as its trainable parameters (its
    per-example gradient) plus the numbers its modules output for one example, times a
    measured factor for the copies a backward pass keeps, in 4-byte floats. One pass may take
    min(``memory_budget``, 32 MiB) — larger passes are slower on a CPU, not faster. Models come
    first (batching them is the point): a chunk holds as many models as fit with one example
    each, and a pass as many examples of each (at most ``max_examples`` and
    ``physical_batch_size``) as then fit. The models' parameters, gradients and momentum
    (a few copies of k·P numbers) are not counted: they are small beside the per-example work.

    Args:
        model: one model of the architecture.
        example: one input example (for the activation sizes).
        num_models: k.
        max_examples: the most examples a model uses in one step (its largest lot or batch).
        memory_budget: bytes.
        physical_batch_size: most examples per pass even when memory allows more.
        gradient_numel: the per-example gradient numbers one example holds; ``None``: all
            trainable parameters (the generic path, which forms every example's gradient). The
            layered path forms only its convolutions' (:func:`train_batched` says which), and
            non-private training none.

    Raises:
        ValueError: a non-positive count or budget.
    """
    k = v.integer("num_models", num_models, minimum=1)
    m = v.integer("max_examples", max_examples, minimum=1)
    budget = v.integer("memory_budget", memory_budget, minimum=1)
    v.integer("physical_batch_size", physical_batch_size, minimum=1)
    params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    held = params if gradient_numel is None else v.integer("gradient_numel", gradient_numel, minimum=0)
    per_example = 4 * _WORK_FACTOR * (held + _activation_numel(model, example))
    # One pass holds at most min(budget, _PASS_BYTES): models first, then examples per model.
    per_pass = min(budget, _PASS_BYTES)
    chunk = min(k, max(1, per_pass // per_example))
    b = min(m, physical_batch_size, max(1, per_pass // (per_example * chunk)))
    note = (
        f"batched: {k} model{'s' if k != 1 else ''} in chunks of {chunk}, {b} example{'s' if b != 1 else ''} "
        f"per pass ({params:,} parameters, ~{per_example * b * chunk / 2**20:.0f} MiB of "
        f"{budget / 2**20:.0f} MiB budget)"
    )
    return BatchPlan(
        num_models=k,
        models_per_chunk=chunk,
        examples_per_pass=b,
        num_parameters=params,
        bytes_per_example=per_example,
        memory_budget=budget,
        note=note,
    )


def _seeded_model(build: Callable[[], nn.Module], seed: int) -> nn.Module:
    # As the project's trainers initialise: the global generator seeded from the "init" stream,
    # inside fork_rng so the caller's global state is left as it was.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "init"))
        return build()


def _member_masks(members: torch.Tensor | np.ndarray | None, k: int, n: int) -> np.ndarray:
    if members is None:
        return np.ones((k, n), dtype=bool)
    mask = np.asarray(members.cpu() if isinstance(members, torch.Tensor) else members)
    if mask.dtype != bool or mask.shape != (k, n):
        raise v.invalid(
            "members",
            f"members must be a boolean mask of shape (models, examples) = ({k}, {n}), "
            f"got dtype {mask.dtype} and shape {mask.shape}",
        )
    empty = np.flatnonzero(~mask.any(1))
    if len(empty):
        raise v.invalid("members", f"members gives model {int(empty[0])} no example to train on")
    return mask


class _SGD:
    """torch.optim.SGD's update (dampening 0, no Nesterov) on stacked parameters, per model on or off.

    A model whose schedule has no batch at a step (fewer members, fewer steps) must not move —
    not even by momentum or weight decay — so the update is masked per model.
    """

    def __init__(self, params: dict[str, torch.Tensor], *, momentum: float, weight_decay: float) -> None:
        self.params, self.momentum, self.weight_decay = params, momentum, weight_decay
        self.bufs = {n: torch.zeros_like(p) for n, p in params.items()} if momentum else {}

    def step(self, grads: Mapping[str, torch.Tensor], *, lr: float, active: torch.Tensor | None) -> None:
        for n, p in self.params.items():
            d = grads[n]
            if self.weight_decay:
                d = d.add(p, alpha=self.weight_decay)
            if self.momentum:
                # torch.optim.SGD starts its buffer at the first gradient: momentum · 0 + d is d exactly.
                buf = self.bufs[n].mul(self.momentum).add_(d)
                self.bufs[n] = buf if active is None else torch.where(_expand(active, buf), buf, self.bufs[n])
                d = buf
            new = p.add(d, alpha=-lr)
            self.params[n] = new if active is None else torch.where(_expand(active, new), new, p)


def _expand(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.reshape(-1, *([1] * (like.dim() - 1)))


def _padded(rows: Sequence[torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Index rows of unequal length as one (k, m) index tensor and its (k, m) 0/1 validity weights."""
    m = max(1, max(len(r) for r in rows))
    index = torch.zeros((len(rows), m), dtype=torch.int64)
    valid = torch.zeros((len(rows), m))
    for j, r in enumerate(rows):
        index[j, : len(r)] = r
        valid[j, : len(r)] = 1.0
    return index.to(device), valid.to(device)


def _nonprivate_schedule(
    positions: Sequence[np.ndarray], seeds: Sequence[int], config: BatchedSGD
) -> list[list[torch.Tensor]]:
    """Each model's batches for the whole run, as pool indices: the baseline's shuffled order."""
    out = []
    for pos, seed in zip(positions, seeds):
        gen = torch_generator(seed, "batches")
        pos_t = torch.from_numpy(pos)
        batches = []
        for _ in range(config.epochs):
            order = torch.randperm(len(pos), generator=gen)
            batches += [pos_t[idx] for idx in order.split(config.batch_size)]
        out.append(batches)
    return out


def _train_chunk_nonprivate(
    stack: StackedModels,
    x: torch.Tensor,
    y: torch.Tensor,
    schedule: list[list[torch.Tensor]],
    *,
    config: BatchedSGD,
    seeds: Sequence[int],
    bar: Progress,
) -> tuple[list[int], list[float], list[float]]:
    k = len(schedule)
    device = x.device
    opt = _SGD(stack.params, momentum=config.momentum, weight_decay=config.weight_decay)
    steps = max(len(s) for s in schedule)
    forward = vmap(stack.logits, in_dims=(0, 0, 0))
    taken, sizes, loss_total = [0] * k, [0] * k, [0.0] * k
    for t in range(steps):
        rows = [s[t] if t < len(s) else torch.zeros(0, dtype=torch.int64) for s in schedule]
        index, valid = _padded(rows, device)
        counts = valid.sum(1)
        # No per-example gradients here: one vmapped forward (a convolution becomes a grouped one)
        # and autograd's backward of the models' summed mean losses, each model's own gradient.
        # Measured on audit-cnn (16 models, batches of 32): 0.33 CPU-s a model, the layered path 0.57-0.81.
        params = {n: p.detach().requires_grad_(True) for n, p in stack.params.items()}
        logits = forward(params, stack.fixed, x[index])
        losses = F.cross_entropy(logits.flatten(0, 1), y[index].flatten(), reduction="none").view(index.shape)
        per_model = (losses * valid).sum(1) / counts.clamp_min(1)
        grad_map = dict(zip(params, torch.autograd.grad(per_model.sum(), list(params.values()))))
        values = per_model.detach().cpu().tolist()
        for j in range(k):
            if rows[j].numel():
                check_loss(
                    values[j],
                    step=taken[j],
                    epoch=0,
                    learning_rate=config.learning_rate,
                    hint=f"(model {j}, seed {seeds[j]})",
                )
                taken[j] += 1
                sizes[j] += int(rows[j].numel())
                loss_total[j] += values[j] * int(rows[j].numel())
        active = (counts > 0) if bool((counts == 0).any()) else None
        opt.step(grad_map, lr=config.learning_rate, active=active)
        bar.update(1)
    stack.params = opt.params
    return taken, [s / max(n, 1) for s, n in zip(sizes, taken)], [lt / max(s, 1) for lt, s in zip(loss_total, sizes)]


def _train_chunk_dpsgd(
    stack: StackedModels,
    x: torch.Tensor,
    y: torch.Tensor,
    positions: Sequence[np.ndarray],
    ids: np.ndarray,
    *,
    config: BatchedDPSGD,
    seeds: Sequence[int],
    examples_per_pass: int,
    schedule: Callable[[int], float] | None,
    bar: Progress,
) -> tuple[list[int], list[float], list[float]]:
    k = len(positions)
    device = x.device
    full = config.sampling_rate >= 1.0
    lot_gens = [torch_generator(s, "lots") for s in seeds]
    noise_gens = [torch_generator(s, "noise", device=device) for s in seeds]
    scales = torch.tensor(
        [
            1.0 / (config.expected_lot_size if config.expected_lot_size is not None else config.sampling_rate * len(p))
            for p in positions
        ],
        device=device,
    )
    noise_std = config.noise_multiplier * config.clip_norm
    opt = _SGD(stack.params, momentum=config.momentum, weight_decay=config.weight_decay)

    def example_loss(params, fixed, xi, yi):  # one model, one example
        out = stack.logits(params, fixed, xi.unsqueeze(0))
        loss = F.cross_entropy(out, yi.unsqueeze(0))
        return loss, loss

    per_example = vmap(vmap(grad(example_loss, has_aux=True), in_dims=(None, None, 0, 0)), in_dims=(0, 0, 0, 0))
    members = np.zeros((k, len(ids)), dtype=bool)
    for j, pos in enumerate(positions):
        members[j, pos] = True
    sizes, loss_total = np.zeros(k, dtype=np.int64), np.zeros(k)
    fixed_lot = _lot_index(members, device) if full else None
    for t in range(config.num_steps):
        if fixed_lot is not None:
            index, valid, counts = fixed_lot
        else:
            # The lot of each separate run: one key per step from the model's "lots" stream, a
            # member in when the keyed hash of its sample id falls below q (all k models at once).
            keys = np.array([step_key(gen) for gen in lot_gens], dtype=np.uint64)[:, None]
            index, valid, counts = _lot_index(members & (keyed_uniforms(keys, ids) < config.sampling_rate), device)
        total = {n: torch.zeros_like(p) for n, p in stack.params.items()}
        loss_sums = torch.zeros(k, device=device)
        params = {n: p.detach() for n, p in stack.params.items()}
        for start in range(0, index.shape[1], examples_per_pass):
            idx = index[:, start : start + examples_per_pass]
            w = valid[:, start : start + examples_per_pass]
            if stack.layered is not None:
                sums, chunk_loss = stack.layered.sums(
                    params, x[idx], y[idx], w * scales[:, None], clip_norm=config.clip_norm
                )
                for n, g in sums.items():
                    total[n].add_(g)
                loss_sums += chunk_loss
                continue
            grads, losses = per_example(params, stack.fixed, x[idx], y[idx])
            sq = sum(g.flatten(2).pow(2).sum(2) for g in grads.values())
            # The project's clipping factor, with 1/L folded in: scale · C / max(‖g_i‖, C).
            factors = w * scales[:, None] * config.clip_norm / sq.sqrt().clamp_min(config.clip_norm)
            for n, g in grads.items():
                total[n].add_(torch.einsum("kb,kb...->k...", factors, g))
            loss_sums += (losses * w).sum(1)
        for acc in total.values():
            # Each model's noise from its own generator, parameter by parameter in the order its
            # separate run draws it.
            noise = torch.stack(
                [torch.randn(acc.shape[1:], generator=g, device=device, dtype=acc.dtype) for g in noise_gens]
            )
            acc.add_(noise * _expand(scales, noise) * noise_std)
        lr = schedule(t) if schedule is not None else config.learning_rate
        values = loss_sums.cpu().numpy()
        if not np.isfinite(values).all():
            j = int(np.flatnonzero(~np.isfinite(values))[0])
            check_loss(
                float(values[j]), step=t, epoch=0, learning_rate=lr, hint=f"or --clip-norm (model {j}, seed {seeds[j]})"
            )
        sizes += counts
        loss_total += values
        opt.step(total, lr=lr, active=None)
        bar.update(1)
    stack.params = opt.params
    steps = config.num_steps
    return [steps] * k, (sizes / steps).tolist(), (loss_total / np.maximum(sizes, 1)).tolist()


def _lot_index(lots: np.ndarray, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
    """A (k, N) lot mask as (k, m) ascending positions, their (k, m) 0/1 validity, and the (k,) lot sizes."""
    counts = lots.sum(1)
    m = max(1, int(counts.max()))
    order = np.argsort(~lots, axis=1, kind="stable")[:, :m]  # members of the lot first, in pool order
    valid = np.arange(m)[None, :] < counts[:, None]
    index = np.where(valid, order, 0)
    return (
        torch.from_numpy(index).to(device),
        torch.from_numpy(valid.astype(np.float32)).to(device),
        counts,
    )


def train_batched(
    build_model: Callable[[], nn.Module],
    features: torch.Tensor,
    labels: torch.Tensor,
    *,
    seeds: Sequence[int],
    config: BatchedConfig,
    members: torch.Tensor | np.ndarray | None = None,
    sample_ids: torch.Tensor | np.ndarray | None = None,
    initial_state: Mapping[str, torch.Tensor] | None = None,
    schedule: Callable[[int], float] | None = None,
    device: str | torch.device = "cpu",
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    physical_batch_size: int = 1024,
    progress: bool = False,
    label: str = "batched",
) -> BatchedRun:
    """Trains one model per seed on its members of a shared pool, all k as one computation.

    Args:
        build_model: builds one (untrained) model of the architecture; called once per seed under
            that seed's ``init`` stream, as the project's trainers do.
        features: the pool's inputs, shape (N, ...).
        labels: the pool's integer labels, shape (N,).
        seeds: one root seed per model (k = their number).
        config: :class:`BatchedSGD` (non-private) or :class:`BatchedDPSGD` (DP-SGD, or DP-GD at q = 1).
        members: boolean (k, N): which pool examples model j trains on (in pool order, which is
            the member order of its separate run); ``None``: all of them for every model.
        sample_ids: the pool's sample ids (Poisson coins are keyed by them); ``None``: 0..N-1.
        initial_state: parameters every model starts from instead of its seeded initialisation
            (a worst-case audit's crafted start).
        schedule: DP-SGD only: the learning rate of each step (e.g. the paper's linear decay).
        device: ``cpu``, ``cuda[:N]`` or ``auto``.
        memory_budget: bytes the per-example work of one chunk of models may take (:func:`plan_batches`).
        physical_batch_size: most examples of a model in one pass.
        progress: show progress and the plan's note on stderr.
        label: what the progress bar names.

    Returns:
        The trained models in the order of ``seeds`` (on ``device``, eval mode) and the counts.

    Raises:
        ValueError: no seeds, repeated seeds, mismatched shapes, a model without members, an
            unavailable device, or a diverged loss (:class:`dpaudit.training.TrainingDiverged`).
    """
    if not isinstance(config, (BatchedSGD, BatchedDPSGD)):
        raise v.invalid_type("config", f"config must be a BatchedSGD or BatchedDPSGD, got {type(config).__name__}")
    seeds = [v.integer("seeds", s, minimum=0) for s in seeds]
    if not seeds:
        raise v.invalid("seeds", "seeds must name at least one model, got none")
    dev = resolve_device(device)
    if not isinstance(features, torch.Tensor) or not isinstance(labels, torch.Tensor):
        raise v.invalid_type("features", "features and labels must be tensors")
    n = len(features)
    if labels.shape != (n,):
        raise v.invalid("labels", f"labels must have shape ({n},), got {tuple(labels.shape)}")
    k = len(seeds)
    mask = _member_masks(members, k, n)
    ids = np.arange(n, dtype=np.int64) if sample_ids is None else np.asarray(sample_ids, dtype=np.int64).reshape(-1)
    if ids.shape != (n,):
        raise v.invalid("sample_ids", f"sample_ids must have shape ({n},), got {ids.shape}")
    positions = [np.flatnonzero(row) for row in mask]
    template = _seeded_model(build_model, seeds[0])  # never the caller's global generator
    if isinstance(config, BatchedDPSGD):
        most = max(len(p) for p in positions)
        if config.sampling_rate < 1:  # a Poisson lot rarely exceeds its mean by 6 standard deviations
            most = min(most, math.ceil(config.sampling_rate * most + 6 * math.sqrt(most) + 1))
        # What each example holds: the layered path forms only its convolutions' gradients.
        held = _layered_gradient_numel(template, features[0]) if LayeredModels.build(template) is not None else None
    else:
        most = config.batch_size
        held = 0  # one backward pass of the summed losses: no per-example gradient
    plan = plan_batches(
        template,
        features[0],
        num_models=k,
        max_examples=most,
        memory_budget=memory_budget,
        physical_batch_size=physical_batch_size,
        gradient_numel=held,
    )
    if progress:
        print(plan.note, file=sys.stderr, flush=True)
    x, y = features.to(dev), labels.to(dev)
    steps_each = config.num_steps if isinstance(config, BatchedDPSGD) else None
    if isinstance(config, BatchedSGD):
        full_schedule = _nonprivate_schedule(positions, seeds, config)
        total_steps = sum(
            max(len(s) for s in full_schedule[c : c + plan.models_per_chunk])
            for c in range(0, k, plan.models_per_chunk)
        )
    else:
        total_steps = steps_each * math.ceil(k / plan.models_per_chunk)  # type: ignore[operator]
    models: list[nn.Module] = []
    taken: list[int] = []
    lots: list[float] = []
    losses: list[float] = []
    with Progress(total_steps, f"train {label} ({k} models)", enabled=progress) as bar:
        for c in range(0, k, plan.models_per_chunk):
            chunk_seeds = seeds[c : c + plan.models_per_chunk]
            starts = []
            for s in chunk_seeds:
                model = _seeded_model(build_model, s)
                if initial_state is not None:
                    model.load_state_dict({n_: torch.as_tensor(t) for n_, t in initial_state.items()}, strict=True)
                starts.append(model)
            stack = StackedModels(starts, dev)
            if isinstance(config, BatchedSGD):
                result = _train_chunk_nonprivate(
                    stack, x, y, full_schedule[c : c + len(chunk_seeds)], config=config, seeds=chunk_seeds, bar=bar
                )
            else:
                result = _train_chunk_dpsgd(
                    stack,
                    x,
                    y,
                    positions[c : c + len(chunk_seeds)],
                    ids,
                    config=config,
                    seeds=chunk_seeds,
                    examples_per_pass=plan.examples_per_pass,
                    schedule=schedule,
                    bar=bar,
                )
            models += [m.to(dev) for m in stack.unstack(template)]
            taken += result[0]
            lots += result[1]
            losses += result[2]
    return BatchedRun(
        models=tuple(models),
        plan=plan,
        num_steps=tuple(taken),
        mean_lot_sizes=tuple(lots),
        train_loss_means=tuple(losses),
    )


def train_batched_on_ids(
    build_model: Callable[[], nn.Module],
    dataset: ArrayDataset,
    id_sets: Sequence[np.ndarray],
    *,
    seeds: Sequence[int],
    config: BatchedConfig,
    schedule: Callable[[int], float] | None = None,
    device: str | torch.device = "cpu",
    label: str = "batched",
) -> BatchedRun:
    """:func:`train_batched` where model j trains on the examples of ``dataset`` whose ids are ``id_sets[j]``.

    The pool is the union of the sets in id order, so each model's members come in the order its
    own run (on ``dataset.subset(ids)``) sees them; Poisson coins are keyed by the ids.
    """
    if len(id_sets) != len(seeds):
        raise v.invalid("id_sets", f"id_sets must hold one set per seed ({len(seeds)}), got {len(id_sets)}")
    pool_ids = np.unique(np.concatenate([np.asarray(ids, dtype=np.int64).reshape(-1) for ids in id_sets]))
    pool = dataset.subset(pool_ids)
    members = np.stack([np.isin(pool_ids, ids) for ids in id_sets])
    return train_batched(
        build_model,
        pool.features,
        pool.labels,
        seeds=seeds,
        config=config,
        members=members,
        sample_ids=pool.ids,
        schedule=schedule,
        device=device,
        label=label,
    )
