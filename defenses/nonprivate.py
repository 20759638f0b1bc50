"""The non-private baseline: plain mini-batch SGD (with momentum) and no privacy mechanism.

The reference row of every comparison: its claim is explicitly non-private (ε = ∞), and its
accuracy is what the private defenses give up utility against.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from defenses._common import build_record
from defenses.registry import DEFENSES, DefenseSpec
from defenses.sgd_defaults import (
    BATCH_SIZE,
    DERIVED_AT_INIT,
    EPOCHS,
    LEARNING_RATE,
    resolve_sgd_config,
    sgd_defaults_note,
)
from dpaudit import _validate as v
from dpaudit.checkpoint import Checkpointer, checkpointer, global_rng_state, restore_global_rng
from dpaudit.models import build_model
from dpaudit.options import option
from dpaudit.parts import PlotStyle
from dpaudit.privacy.claims import NonPrivateClaim
from dpaudit.progress import Progress
from dpaudit.results.record import TrainedModel
from dpaudit.seeding import derive_seed, torch_generator
from dpaudit.train_request import TrainRequest
from dpaudit.training import BATCH_LIMIT, EPOCH_LIMIT, SGDConfig, check_loss, shuffled_batches

__all__ = ["NonPrivateConfig", "resolve_nonprivate_config", "train_nonprivate"]


@dataclass(frozen=True, kw_only=True)
class NonPrivateConfig(SGDConfig):
    """Hyperparameters of the non-private baseline (see :class:`dpaudit.training.SGDConfig`).

    ``epochs``, ``batch_size`` and ``learning_rate`` left unset (``None``) are derived for each
    run from public facts — N, the input and the model's first layer
    (:func:`defenses.sgd_defaults.resolve_sgd_config`). Until then they read as the fixed values
    (10, 64, 0.05), so a config is never half-built; the values derived for a run are resolved
    where ``dpaudit train`` resolves every defense's defaults (the defense's ``resolve_defaults``),
    before the model id is digested, so the record carries what ran. A direct call of
    :func:`train_nonprivate` (a shadow model, a noise-layer defense's base training) trains the
    config as given.
    """

    epochs: int = option(
        None,
        kind=int,
        help="passes over the training set (default: 10, more on a small training set: at least 5 steps per class)",
        metavar="N",
        check=v.positive,
        limit=EPOCH_LIMIT,
    )
    batch_size: int = option(
        None,
        kind=int,
        help="examples per SGD step (default: 64, halved until at most N/4)",
        metavar="B",
        check=v.positive,
        limit=BATCH_LIMIT,
    )
    learning_rate: float = option(
        None,
        help="SGD step size (default: 0.05, times sqrt(784 / the first layer's fan-in) when that is below 1)",
        metavar="LR",
        check=v.positive,
    )

    def __post_init__(self) -> None:
        # Filled with the fixed values now (every reader sees a number) and remembered, outside the
        # fields, as derivable: resolution replaces them with the public-facts values.
        unset = []
        for name, value in (("epochs", EPOCHS), ("batch_size", BATCH_SIZE), ("learning_rate", LEARNING_RATE)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
                unset.append(name)
        object.__setattr__(self, DERIVED_AT_INIT, tuple(unset))
        super().__post_init__()


def resolve_nonprivate_config(
    config: NonPrivateConfig,
    *,
    num_members: int,
    model_name: str | None = None,
    model_options: Mapping[str, object] | None = None,
    bundle: Any = None,
) -> tuple[NonPrivateConfig, str | None]:
    """The config with its unset SGD defaults derived (:mod:`defenses.sgd_defaults`) and the line saying so."""
    resolved, derived = resolve_sgd_config(
        config,
        num_members=num_members,
        model_name=model_name,
        input_shape=None if bundle is None else tuple(bundle.input_shape),
        num_classes=None if bundle is None else int(bundle.num_classes),
        model_options=model_options,
    )
    return resolved, sgd_defaults_note(resolved, derived, num_members=num_members)


class _Resume:
    """A checkpoint of the loop (:mod:`dpaudit.checkpoint`): model, optimiser, batch order, hooks' state.

    Saved mid-epoch too: it keeps the batch generator's state at the epoch's start (the rerun
    draws the same shuffle again and skips the batches done) and the epoch's running loss.
    """

    def __init__(self, checkpoint: Checkpointer, *, stateful: Any = None) -> None:
        self.checkpoint = checkpoint
        self.stateful = stateful

    def state(
        self,
        model: nn.Module,
        opt: torch.optim.Optimizer,
        *,
        epoch_generator: torch.Tensor,
        step: int,
        epoch: int,
        position: int,
        total: float,
        count: int,
    ) -> dict[str, Any]:
        return {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "epoch_generator": epoch_generator,
            "global_rng": global_rng_state(),
            "epoch_loss": [float(total), int(count)],
            "hooks": self.stateful.state_dict() if self.stateful is not None else {},
            "step": int(step),
            "epoch": int(epoch),
            "position": int(position),
        }

    def restore(self, model: nn.Module, opt: torch.optim.Optimizer, generator: torch.Generator) -> dict[str, Any]:
        """Loads the last checkpoint, if any; returns the loop's counters (all 0 without one)."""
        resumed = self.checkpoint.resume()
        if resumed is None:
            return _FRESH
        state = resumed.state
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        generator.set_state(state["epoch_generator"])
        restore_global_rng(state["global_rng"])
        if self.stateful is not None:
            self.stateful.load_state_dict(state["hooks"])
        return {
            "step": int(state["step"]),
            "epoch": int(state["epoch"]),
            "position": int(state["position"]),
            "epoch_loss": list(state["epoch_loss"]),
        }


_FRESH: dict[str, Any] = {"step": 0, "epoch": 0, "position": 0, "epoch_loss": [0.0, 0]}


def _train_epochs(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    config: NonPrivateConfig,
    generator: torch.Generator,
    augment: Callable[[torch.Tensor], torch.Tensor] | None,
    after_step: Callable[[int, nn.Module], None] | None,
    bar: Progress,
    resume: _Resume | None = None,
) -> None:
    """``config.epochs`` passes of minibatch SGD over (x, y) in seeded shuffled order (resumed from a checkpoint)."""
    loss_fn = nn.CrossEntropyLoss()
    counters = resume.restore(model, opt, generator) if resume is not None else _FRESH
    step = counters["step"]
    # The checkpoint's epoch (its shuffle drawn again from the generator state at its start) and the
    # batches of it already done; an epoch finished at the checkpoint is walked through and skipped.
    first_epoch, skip = counters["epoch"], counters["position"]
    if step:
        bar.update(step)  # the steps done before the checkpoint
    for epoch in range(first_epoch, config.epochs):
        epoch_generator = generator.get_state()  # the shuffle below is drawn again on a resumed rerun
        total, count = counters["epoch_loss"] if epoch == first_epoch and skip else (0.0, 0)
        for position, idx in enumerate(shuffled_batches(len(x), config.batch_size, generator=generator)):
            if epoch == first_epoch and position < skip:
                continue  # done before the checkpoint
            idx = idx.to(x.device)
            opt.zero_grad(set_to_none=True)
            inputs = x[idx] if augment is None else augment(x[idx])
            loss = loss_fn(model(inputs), y[idx])
            value = loss.item()
            # Before the step: a NaN loss means NaN gradients, and the model must never be saved.
            check_loss(value, step=step, epoch=epoch, learning_rate=config.learning_rate)
            loss.backward()
            opt.step()
            if after_step is not None:
                after_step(step, model)
            step += 1
            total += value * len(idx)
            count += len(idx)
            if resume is not None:
                resume.checkpoint.maybe_save(
                    step,
                    functools.partial(
                        resume.state,
                        model,
                        opt,
                        epoch_generator=epoch_generator,
                        step=step,
                        epoch=epoch,
                        position=position + 1,
                        total=total,
                        count=count,
                    ),
                )
            # Per step, not per epoch: one epoch of a CNN on MNIST is minutes on a CPU.
            bar.update(1, loss=total / max(count, 1))


def train_nonprivate(
    request: TrainRequest[NonPrivateConfig],
    /,
    *,
    prepare_model: Callable[[nn.Module], None] | None = None,
    after_step: Callable[[int, nn.Module], None] | None = None,
    progress_label: str = "nonprivate",
    augment: Callable[[torch.Tensor], torch.Tensor] | None = None,
    stateful: Any = None,
) -> tuple[TrainedModel, nn.Module]:
    """Trains a zoo model on the request's members with non-private SGD.

    Args:
        request: what to train (its ``config`` a :class:`NonPrivateConfig`); the seed's
            initialisation and batch order are independent streams.
        prepare_model: called once with the built model (on the device) before training,
            e.g. to install a noise layer's σ and r.
        after_step: called with (step index, model) after every optimiser step, e.g. to
            project the first layer back to sensitivity ≤ 1 (PixelDP).
        progress_label: the defense named on the progress bar (a wrapping defense passes its own).
        augment: maps each batch's inputs to what the model is trained on (labels unchanged),
            e.g. Gaussian data augmentation for randomized smoothing (Cohen et al. 2019);
            ``None`` trains on the inputs as they are. Evaluation never sees it.
        stateful: state the hooks or ``augment`` keep across steps (an object with
            ``state_dict()`` and ``load_state_dict()``: a noise schedule, the augmentation's
            generator), saved in the checkpoints.

    Under :func:`dpaudit.checkpoint.checkpoints_in` (every ``train_or_load``), the loop saves
    its state at most every checkpoint interval, and a rerun resumes from it to the same model
    (bit-identical on a CPU).

    Returns:
        The record and the trained module (in eval mode).
    """
    started = time.monotonic()
    bundle, config, seed = request.bundle, request.config, request.seed
    device = torch.device(request.device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "init"))  # inside fork_rng: global state restored after
        model = build_model(
            request.model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes, **request.model_options
        )
    model.to(device).train()
    if prepare_model is not None:
        prepare_model(model)
    opt = torch.optim.SGD(
        model.parameters(), lr=config.learning_rate, momentum=config.momentum, weight_decay=config.weight_decay
    )
    members = bundle.all().subset(request.splits.members)
    x, y = members.features.to(device), members.labels.to(device)
    gen = torch_generator(seed, "batches")
    steps = config.epochs * -(-len(x) // config.batch_size)
    what = f"{progress_label} training of {request.model_name} on {bundle.name}"
    ckpt = checkpointer(
        progress_label,
        what=what,
        total=steps,
        identity=(what, repr(config), seed, model.state_dict(), request.splits.members),
    )
    resume = _Resume(ckpt, stateful=stateful) if ckpt is not None else None
    with Progress(
        config.epochs * -(-len(x) // config.batch_size),
        f"train {progress_label} {request.model_name} on {bundle.name}",
        enabled=request.progress,
    ) as bar:
        _train_epochs(
            model,
            opt,
            x,
            y,
            config=config,
            generator=gen,
            augment=augment,
            after_step=after_step,
            bar=bar,
            resume=resume,
        )
    if ckpt is not None:
        ckpt.finish()
    model.eval()
    record = build_record(
        request,
        defense="nonprivate",
        model=model,
        claim=NonPrivateClaim(),
        started=started,
        extra_metrics={"num_steps": steps},
    )
    return record, model


DEFENSES.register(
    DefenseSpec(
        name="nonprivate",
        config_type=NonPrivateConfig,
        train=train_nonprivate,
        claim_kind="nonprivate",
        resolve_defaults=resolve_nonprivate_config,
        chance_hint="--learning-rate, --epochs or --batch-size",
        summary="non-private SGD baseline (ε = ∞)",
        order=0,
        style=PlotStyle(colour="#6B6B6B", marker="X"),
    )
)
