"""The PATE student: a model trained on public data labelled by the noisy teacher vote.

Papernot et al. (2017, §2.3; 2018, §5) release only the *student*. It learns from a public,
unlabelled pool disjoint from every teacher's data: the few queries the aggregator answered
carry (noisy) labels, the rest of the pool carries none. Two modes:

* **supervised** — cross-entropy on the answered queries alone (each batch weakly augmented);
* **semi-supervised** — FixMatch (Sohn et al. 2020, "FixMatch: Simplifying Semi-Supervised
  Learning with Consistency and Confidence", NeurIPS). For every unlabelled example the model's
  prediction on a *weakly* augmented view becomes a hard pseudo-label when its largest class
  probability reaches ``confidence`` (τ); the model is then trained to predict that label on a
  *strongly* augmented view of the same example. The loss per step is

      ℓ = CE(labelled batch) + λ · (1/μB) Σ_u 1[max p(weak(u)) ≥ τ] · CE(strong(u), argmax p(weak(u)))

  with B labelled and μB unlabelled examples per step (μ = ``unlabeled_ratio``), SGD with
  Nesterov momentum and the cosine decay lr·cos(7πk / 16K) of Sohn et al. (§3, "Other
  details"). The papers' own students were semi-supervised GANs (2017) and virtual adversarial
  training (2018); FixMatch is a later, simpler method; with the
  defaults it reaches 97.9–98.3 % on MNIST from 286 noisy labels (2018 paper: 98.5 %).

**Epochs.** In both modes an epoch is one pass over the *labelled* examples (⌈n/B⌉ steps), so a
supervised and a semi-supervised student with the same config take the same number of optimiser
steps; in semi-supervised mode each step also draws the next μB unlabelled examples, cycling
through reshuffled passes of the pool (the metrics report how many passes that came to).

**Augmentations** (computed on the fly, from the student's own seeded stream):

* images ``(C, H, W)`` — weak: a random translation of up to ~8 % of the side (2 pixels on
  MNIST); strong: a random affine map (rotation, scale, shear, larger translation), then a
  cutout square filled with the image's mean, then Gaussian pixel noise, clipped to [0, 1];
* any other shape (tabular rows such as Adult's) — weak: small Gaussian feature noise; strong:
  feature dropout (each feature zeroed with some probability) and larger noise.

The model is trained in place and in train mode; zoo models hold no BatchNorm, so the weak
view's forward pass (without gradient) is not disturbed by batch statistics. Every random draw
comes from a generator derived from ``seed`` (:mod:`dpaudit.seeding`), and the global torch RNG
is forked around training, so calling this function never moves it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from dpaudit import _validate as v
from dpaudit.checkpoint import Checkpointer, checkpointer, global_rng_state, restore_global_rng
from dpaudit.progress import Progress
from dpaudit.seeding import derive_seed, torch_generator
from dpaudit.training import EPOCH_LIMIT, check_loss, shuffled_batches

__all__ = ["StudentConfig", "train_student", "weak_augment", "strong_augment"]


@dataclass(frozen=True, kw_only=True)
class StudentConfig:
    """Hyperparameters of the PATE student (defaults reach ≥ 97 % on MNIST with 286 labels).

    Attributes:
        epochs: passes over the *labelled* examples, in both modes (see the module docstring);
            with 286 labels and B = 32 the default is 1,800 steps.
        batch_size: labelled examples per step (B).
        learning_rate: initial SGD step size (decayed by lr·cos(7πk / 16K) over the K steps).
        momentum: Nesterov momentum in [0, 1) (0: plain SGD).
        weight_decay: L2 penalty on the parameters.
        semi_supervised: also learn from the unlabelled pool (FixMatch).
        unlabeled_weight: λ, the weight of the unlabelled (pseudo-label) loss.
        confidence: τ in (0, 1), the least largest-class probability on the weak view for an
            unlabelled example to get a pseudo-label.
        unlabeled_ratio: μ, unlabelled examples per labelled one in a step (Sohn et al. use 7;
            3 reaches the same MNIST accuracy in under half the time on a CPU).
    """

    epochs: int = 200
    batch_size: int = 32
    learning_rate: float = 0.03
    momentum: float = 0.9
    weight_decay: float = 5e-4
    semi_supervised: bool = False
    unlabeled_weight: float = 1.0
    confidence: float = 0.95
    unlabeled_ratio: int = 3

    def __post_init__(self) -> None:
        v.integer("epochs", self.epochs, minimum=1)
        if self.epochs > EPOCH_LIMIT.maximum:
            raise v.invalid("epochs", f"epochs must be <= {EPOCH_LIMIT.maximum:g}, got {self.epochs}")
        v.integer("batch_size", self.batch_size, minimum=1)
        v.positive("learning_rate", self.learning_rate)
        v.unit_interval_open_right("momentum", self.momentum)
        v.non_negative("weight_decay", self.weight_decay)
        if not isinstance(self.semi_supervised, bool):
            raise v.invalid_type(
                "semi_supervised", f"semi_supervised must be True or False, got {self.semi_supervised!r}"
            )
        v.non_negative("unlabeled_weight", self.unlabeled_weight)
        v.open_unit("confidence", self.confidence)
        v.integer("unlabeled_ratio", self.unlabeled_ratio, minimum=1)


# -- augmentations ------------------------------------------------------------------------------

#: Largest weak translation, as a fraction of the image side (Sohn et al. use 12.5 % on CIFAR;
#: digits sit centred in their frame, so a little less keeps them whole).
_SHIFT_FRACTION = 0.08
#: Strong affine ranges: rotation (degrees), scale, shear.
_ROTATE_DEG = 20.0
_SCALE = (0.85, 1.15)
_SHEAR = 0.25
#: Cutout square side as a fraction of the image side, and pixel noise of the strong view.
_CUTOUT_FRACTION = 0.3
_IMAGE_NOISE = 0.1
#: Tabular rows: noise of the weak and strong views, and the strong view's feature dropout.
_TABLE_WEAK_NOISE = 0.05
_TABLE_STRONG_NOISE = 0.15
_TABLE_DROPOUT = 0.2


def _is_image_batch(x: torch.Tensor) -> bool:
    return x.ndim == 4


def _uniform(n: int, generator: torch.Generator, device: torch.device, low: float, high: float) -> torch.Tensor:
    # Drawn on the CPU generator and moved, so the stream is the same on every device.
    return (low + (high - low) * torch.rand(n, generator=generator)).to(device)


def _affine(
    x: torch.Tensor,
    generator: torch.Generator,
    *,
    shift: float,
    rotate_deg: float,
    scale: tuple[float, float],
    shear: float,
) -> torch.Tensor:
    """Random affine maps of an image batch (N, C, H, W), one per image, sampled bilinearly."""
    n, _, h, w = x.shape
    dev = x.device
    angle = _uniform(n, generator, dev, -math.radians(rotate_deg), math.radians(rotate_deg))
    s = _uniform(n, generator, dev, *scale)
    sh = _uniform(n, generator, dev, -shear, shear)
    # affine_grid works in [-1, 1] coordinates: one pixel is 2 / side.
    tx = _uniform(n, generator, dev, -shift, shift) * (2.0 / w)
    ty = _uniform(n, generator, dev, -shift, shift) * (2.0 / h)
    cos, sin = torch.cos(angle), torch.sin(angle)
    theta = torch.stack([torch.stack([s * cos, -s * sin + sh, tx], 1), torch.stack([s * sin, s * cos, ty], 1)], 1).to(
        x.dtype
    )
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    # Edge replication: MNIST's border is black anyway, and natural images get no black frame.
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)


def _max_shift(x: torch.Tensor) -> float:
    return float(max(1, round(_SHIFT_FRACTION * min(x.shape[-2:]))))


def weak_augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The weak view: a random translation of images, small Gaussian noise on other rows.

    Args:
        x: a batch, ``(N, C, H, W)`` images or ``(N, ...)`` rows, values in [0, 1].
        generator: a CPU generator (the student's augmentation stream).

    Returns:
        A new tensor of the same shape, device and dtype.
    """
    if len(x) == 0:
        return x.clone()
    if _is_image_batch(x):
        return _affine(x, generator, shift=_max_shift(x), rotate_deg=0.0, scale=(1.0, 1.0), shear=0.0)
    noise = torch.randn(x.shape, generator=generator).to(device=x.device, dtype=x.dtype)
    return x + _TABLE_WEAK_NOISE * noise


def strong_augment(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The strong view: affine + cutout + noise for images, feature dropout + noise for rows.

    Args:
        x: a batch, ``(N, C, H, W)`` images or ``(N, ...)`` rows, values in [0, 1].
        generator: a CPU generator (the student's augmentation stream).

    Returns:
        A new tensor of the same shape, device and dtype.
    """
    if len(x) == 0:
        return x.clone()
    n = len(x)
    if _is_image_batch(x):
        h, w = x.shape[-2:]
        out = _affine(x, generator, shift=1.5 * _max_shift(x), rotate_deg=_ROTATE_DEG, scale=_SCALE, shear=_SHEAR)
        side = max(1, round(_CUTOUT_FRACTION * min(h, w)))
        cy = torch.randint(0, h, (n, 1, 1, 1), generator=generator).to(x.device)
        cx = torch.randint(0, w, (n, 1, 1, 1), generator=generator).to(x.device)
        rows = torch.arange(h, device=x.device).view(1, 1, h, 1)
        cols = torch.arange(w, device=x.device).view(1, 1, 1, w)
        hole = ((rows - cy).abs() * 2 < side) & ((cols - cx).abs() * 2 < side)
        fill = out.mean(dim=(1, 2, 3), keepdim=True)
        out = torch.where(hole, fill, out)
        noise = torch.randn(x.shape, generator=generator).to(device=x.device, dtype=x.dtype)
        return (out + _IMAGE_NOISE * noise).clamp(0.0, 1.0)
    keep = (torch.rand(x.shape, generator=generator) >= _TABLE_DROPOUT).to(device=x.device, dtype=x.dtype)
    noise = torch.randn(x.shape, generator=generator).to(device=x.device, dtype=x.dtype)
    return x * keep + _TABLE_STRONG_NOISE * noise


# -- input checks -------------------------------------------------------------------------------


def _check_features(name: str, x: object, *, allow_empty: bool = False) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise v.invalid_type(name, f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise v.invalid_type(name, f"{name} must be a floating-point tensor, got {x.dtype}")
    if x.ndim < 2:
        raise v.invalid(name, f"{name} must have shape (n, *input_shape), got {tuple(x.shape)}")
    if len(x) == 0 and not allow_empty:
        raise v.invalid(name, f"{name} must not be empty, got shape {tuple(x.shape)}")
    if x.numel() and not bool(torch.isfinite(x).all()):
        raise v.invalid(name, f"{name} must be finite (found NaN or infinity)")
    return x


def _check_labels(labels: object, n: int) -> torch.Tensor:
    if not isinstance(labels, torch.Tensor):
        raise v.invalid_type("labels", f"labels must be a torch.Tensor, got {type(labels).__name__}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise v.invalid_type("labels", f"labels must be an integer tensor, got {labels.dtype}")
    if labels.numel() == 0:
        raise v.invalid("labels", "labels must not be empty: the student needs at least one answered query")
    if tuple(labels.shape) != (n,):
        raise v.invalid("labels", f"labels must have shape ({n},) to match labeled_features, got {tuple(labels.shape)}")
    return labels.to(torch.int64)


class _UnlabeledStream:
    """Index chunks of ``size``, walking through reshuffled passes of ``range(n)`` without end.

    A class rather than a generator function so that a checkpoint can keep what is pending.
    """

    def __init__(self, n: int, size: int, generator: torch.Generator) -> None:
        self.n, self.size, self.generator = n, size, generator
        self.pending = torch.zeros(0, dtype=torch.int64)

    def __next__(self) -> torch.Tensor:
        while len(self.pending) < self.size:
            self.pending = torch.cat([self.pending, torch.randperm(self.n, generator=self.generator)])
        chunk, self.pending = self.pending[: self.size], self.pending[self.size :]
        return chunk


# -- training -----------------------------------------------------------------------------------


def train_student(
    model: nn.Module,
    *,
    labeled_features: torch.Tensor,
    labels: torch.Tensor,
    unlabeled_features: torch.Tensor | None,
    config: StudentConfig,
    seed: int,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> dict[str, float]:
    """Trains ``model`` in place as the PATE student (supervised, or FixMatch semi-supervised).

    Args:
        model: the student network, its output one logit per class (any zoo model).
        labeled_features: the answered queries, ``(n, *input_shape)``, values in [0, 1].
        labels: the aggregator's answers, int ``(n,)`` in ``[0, num_classes)`` (num_classes is
            the width of the model's output).
        unlabeled_features: the unanswered public pool, ``(m, *input_shape)``; required (m ≥ 1)
            when ``config.semi_supervised``, ignored otherwise.
        config: hyperparameters.
        seed: root seed of the student's streams (batch order, unlabelled order, augmentations,
            and any dropout of the model); the model's initial weights are the caller's.
        device: where to train (the model is moved there).
        progress: report epochs on stderr.

    Returns:
        Metrics of the training: ``supervised_loss`` and ``unlabeled_loss`` (means over the last
        epoch), ``mask_rate`` (fraction of the last epoch's unlabelled draws that passed the
        confidence threshold), ``pseudo_labels`` (how many that was), ``steps``, ``epochs`` and
        ``unlabeled_passes`` (how many times the pool was traversed); the unlabelled entries are
        0 in supervised mode.

    Raises:
        TypeError: an argument has the wrong type (config not a StudentConfig, non-tensor or
            non-integer labels).
        ValueError: empty labels, shapes that disagree, a label out of range, non-finite
            features, semi-supervised mode without unlabelled data, a negative seed.
        dpaudit.training.TrainingDiverged: the loss became NaN or infinite.
    """
    if not isinstance(config, StudentConfig):
        raise v.invalid_type("config", f"config must be a StudentConfig, got {type(config).__name__}")
    if not isinstance(model, nn.Module):
        raise v.invalid_type("model", f"model must be a torch.nn.Module, got {type(model).__name__}")
    seed = v.integer("seed", seed, minimum=0)
    x_lab = _check_features("labeled_features", labeled_features)
    y_lab = _check_labels(labels, len(x_lab))
    x_unl: torch.Tensor | None = None
    if config.semi_supervised:
        if unlabeled_features is None:
            raise v.invalid(
                "unlabeled_features", "unlabeled_features must be given when config.semi_supervised is True"
            )
        x_unl = _check_features("unlabeled_features", unlabeled_features)
        if tuple(x_unl.shape[1:]) != tuple(x_lab.shape[1:]):
            raise v.invalid(
                "unlabeled_features",
                "unlabeled_features must have examples of shape "
                f"{tuple(x_lab.shape[1:])} like labeled_features, got "
                f"{tuple(x_unl.shape[1:])}",
            )
    dev = torch.device(device)
    # Only this device's generator needs saving: the CPU one always is.
    cuda_devices = [dev.index if dev.index is not None else torch.cuda.current_device()] if dev.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda_devices):
        # Anything inside that draws from the global RNG (dropout) does so from the student's seed,
        # and the caller's global state is restored on the way out.
        torch.manual_seed(derive_seed(seed, "student", "global"))
        model.to(dev)
        x_lab = x_lab.to(dev)
        y_lab = y_lab.to(dev)
        with torch.no_grad():
            width = model(x_lab[:1]).shape[-1]
        low, high = int(y_lab.min()), int(y_lab.max())
        if low < 0 or high >= width:
            raise v.invalid(
                "labels", f"labels must lie in [0, {width}) (the model's {width} outputs), got range [{low}, {high}]"
            )
        return _train(
            model,
            x_lab,
            y_lab,
            x_unl.to(dev) if x_unl is not None else None,
            config=config,
            seed=seed,
            progress=progress,
        )


def _student_checkpoint(
    model: nn.Module, x_lab: torch.Tensor, y_lab: torch.Tensor, *, config: StudentConfig, seed: int, total: int
) -> Checkpointer | None:
    """The student's checkpointer under :func:`dpaudit.checkpoint.checkpoints_in` (``None`` outside one)."""
    what = f"the PATE student's training ({len(x_lab)} labels)"
    return checkpointer(
        "pate student",
        what=what,
        total=total,
        identity=(what, repr(config), seed, model.state_dict(), x_lab, y_lab),
    )


def _train(
    model: nn.Module,
    x_lab: torch.Tensor,
    y_lab: torch.Tensor,
    x_unl: torch.Tensor | None,
    *,
    config: StudentConfig,
    seed: int,
    progress: bool,
) -> dict[str, float]:
    semi = x_unl is not None
    batch_gen = torch_generator(seed, "student", "labeled-batches")
    unl_gen = torch_generator(seed, "student", "unlabeled-batches")
    aug_gen = torch_generator(seed, "student", "augment")
    steps_per_epoch = -(-len(x_lab) // config.batch_size)
    total_steps = config.epochs * steps_per_epoch
    unl_size = config.unlabeled_ratio * config.batch_size
    stream = _UnlabeledStream(len(x_unl), unl_size, unl_gen) if x_unl is not None else None
    opt = torch.optim.SGD(
        model.parameters(),
        lr=config.learning_rate,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
        nesterov=config.momentum > 0,
    )
    model.train()
    ckpt = _student_checkpoint(model, x_lab, y_lab, config=config, seed=seed, total=total_steps)
    # The loop's counters: steps, the checkpoint's epoch and batches done in it, the epoch's sums.
    step, first_epoch, skip = 0, 0, 0
    sums: list[float] = [0.0, 0.0, 0, 0, 0]
    resumed = ckpt.resume() if ckpt is not None else None
    if resumed is not None:
        state = resumed.state
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        batch_gen.set_state(state["epoch_generator"])  # the epoch's shuffle is drawn again below
        unl_gen.set_state(state["unlabeled_generator"])
        aug_gen.set_state(state["augment_generator"])
        if stream is not None:
            stream.pending = state["pending"]
        restore_global_rng(state["global_rng"])
        step, first_epoch, skip = int(state["step"]), int(state["epoch"]), int(state["position"])
        sums = list(state["sums"])
    sup_total = unl_total = 0.0
    sup_count = drawn = used = 0
    mode = "semi-supervised" if semi else "supervised"
    with Progress(config.epochs, f"train PATE student ({mode}, {len(x_lab)} labels)", enabled=progress) as bar:
        if first_epoch:
            bar.update(first_epoch)
        for epoch in range(first_epoch, config.epochs):
            epoch_generator = batch_gen.get_state()
            sup_total = unl_total = 0.0
            sup_count = drawn = used = 0
            if epoch == first_epoch and skip:
                sup_total, unl_total = float(sums[0]), float(sums[1])
                sup_count, drawn, used = int(sums[2]), int(sums[3]), int(sums[4])
            for position, idx in enumerate(shuffled_batches(len(x_lab), config.batch_size, generator=batch_gen)):
                if epoch == first_epoch and position < skip:
                    continue  # done before the checkpoint
                # FixMatch's schedule: decays to cos(7π/16) ≈ 0.2 of the initial rate, never to 0.
                for group in opt.param_groups:
                    group["lr"] = config.learning_rate * math.cos(7 * math.pi * step / (16 * total_steps))
                idx = idx.to(x_lab.device)
                sup_loss = F.cross_entropy(model(weak_augment(x_lab[idx], aug_gen)), y_lab[idx])
                loss = sup_loss
                unl_value = 0.0
                if x_unl is not None and stream is not None:
                    xu = x_unl[next(stream).to(x_unl.device)]
                    weak, strong = weak_augment(xu, aug_gen), strong_augment(xu, aug_gen)
                    with torch.no_grad():
                        conf, pseudo = F.softmax(model(weak), dim=1).max(dim=1)
                    mask = conf >= config.confidence
                    n_used = int(mask.sum())
                    if n_used:
                        # Only confident examples contribute, but the mean is over all μB draws
                        # (Sohn et al.'s normalisation), so a step with few pseudo-labels moves little.
                        unl_loss = F.cross_entropy(model(strong[mask]), pseudo[mask], reduction="sum") / len(xu)
                        loss = loss + config.unlabeled_weight * unl_loss
                        unl_value = unl_loss.item()
                    drawn += len(xu)
                    used += n_used
                value = loss.item()
                # Before the update: a NaN loss means NaN gradients, and a NaN student must never be released.
                check_loss(value, step=step, epoch=epoch, learning_rate=config.learning_rate)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                step += 1
                sup_total += sup_loss.item() * len(idx)
                sup_count += len(idx)
                unl_total += unl_value
                if ckpt is not None and ckpt.due() and step < total_steps:
                    ckpt.save(
                        step,
                        {
                            "model": model.state_dict(),
                            "optimizer": opt.state_dict(),
                            "epoch_generator": epoch_generator,
                            "unlabeled_generator": unl_gen.get_state(),
                            "augment_generator": aug_gen.get_state(),
                            "pending": stream.pending if stream is not None else torch.zeros(0, dtype=torch.int64),
                            "global_rng": global_rng_state(),
                            "step": step,
                            "epoch": epoch,
                            "position": position + 1,
                            "sums": [sup_total, unl_total, sup_count, drawn, used],
                        },
                    )
            info: dict[str, object] = {"loss": sup_total / max(sup_count, 1)}
            if semi:
                info["mask"] = used / max(drawn, 1)
            bar.update(1, **info)
    if ckpt is not None:
        ckpt.finish()
    model.eval()
    return {
        "supervised_loss": sup_total / max(sup_count, 1),
        "unlabeled_loss": unl_total / steps_per_epoch if semi else 0.0,
        "mask_rate": used / drawn if drawn else 0.0,
        "pseudo_labels": float(used),
        "steps": float(step),
        "epochs": float(config.epochs),
        "unlabeled_passes": step * unl_size / len(x_unl) if x_unl is not None else 0.0,
    }
