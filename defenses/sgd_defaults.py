"""Training defaults for plain (non-private) SGD derived from public facts only: N, the input and the model.

The non-private baseline's fixed values (10 epochs, batches of 64, learning rate 0.05) were set
on MNIST-sized problems. On the AT&T faces they learned nothing: 140 members for 40 classes make
3 steps an epoch (30 steps in all), and a first layer that reads 10,304 pixels takes steps
13 times the size a 784-pixel one does at the same rate (softmax regression diverged to a
training loss of 73; the faces MLP stayed at ln 40). Three rules, the same kind of public facts
the DP-SGD defaults use (:mod:`defenses.dp_defaults`), fix that and leave MNIST-, digits- and
Adult-sized runs exactly as they were. The rules and the measurements behind them are on the
docs page "Non-private baseline", section "Defaults from public facts"
(``docs/defenses/nonprivate.md``).

1. **Batch size** — :data:`BATCH_SIZE`, halved (powers of two) until it is at most N/4, so that an
   epoch has at least four steps (DP-SGD's lot size has the same cap, rule 3).
2. **Learning rate** — :data:`LEARNING_RATE` × min(1, √(:data:`REFERENCE_FAN_IN` / fan-in)),
   fan-in being the number of inputs of one unit of the model's first weighted layer. A step
   changes a unit's pre-activation by lr·‖x‖²·(its error); for inputs in [0, 1], ‖x‖² grows
   with the fan-in. The full 1/fan-in correction is the stability bound of the worst input;
   its square root is what measured best on faces (docs page).
3. **Epochs** — :data:`EPOCHS`, raised until the run has :data:`STEPS_PER_CLASS` steps per class
   (K classes: 5·K steps). Each output unit learns from the steps its class appears in; with 40
   classes and 5 steps an epoch, faces' 10 epochs gave each class about one example per step for
   50 steps in all, and its MLP stayed at chance (200 steps: test accuracy 0.67).

:func:`resolve_sgd_config` fills only the fields a config left unset (``None``) and says which, so
an explicit flag always wins.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from dpaudit import _validate as v

__all__ = [
    "EPOCHS",
    "BATCH_SIZE",
    "LEARNING_RATE",
    "REFERENCE_FAN_IN",
    "STEPS_PER_CLASS",
    "DERIVED_AT_INIT",
    "derived_batch_size",
    "derived_learning_rate",
    "derived_epochs",
    "first_layer_fan_in",
    "resolve_sgd_config",
    "sgd_defaults_note",
]

#: The fixed values these rules start from (and keep wherever no rule applies).
EPOCHS = 10
BATCH_SIZE = 64
LEARNING_RATE = 0.05
#: Rule 2: the fan-in the base rate was set on (MNIST's 28 × 28 pixels).
REFERENCE_FAN_IN = 784
#: Rule 3: the fewest steps a default run takes, per class (digits: 50, well under its 120).
STEPS_PER_CLASS = 5
#: The attribute (not a field) in which a config remembers the fields it filled with the fixed
#: values at construction, so that resolution may still derive them.
DERIVED_AT_INIT = "_sgd_derived_at_init"

T = TypeVar("T")


def derived_batch_size(num_members: int) -> int:
    """Rule 1: ``BATCH_SIZE`` halved until it is at most N/4 (at least 1). Non-decreasing in N."""
    n = v.integer("num_members", num_members, minimum=1)
    size = BATCH_SIZE
    while size > 1 and size > n / 4:
        size //= 2
    return size


def derived_learning_rate(fan_in: int | None) -> float:
    """Rule 2: ``LEARNING_RATE`` × min(1, √(``REFERENCE_FAN_IN`` / fan_in)); the base rate without a fan-in."""
    if fan_in is None:
        return LEARNING_RATE
    f = v.integer("fan_in", fan_in, minimum=1)
    return LEARNING_RATE * min(1.0, math.sqrt(REFERENCE_FAN_IN / f))


def derived_epochs(*, num_members: int, batch_size: int, num_classes: int) -> int:
    """Rule 3: ``EPOCHS``, or the fewest whole epochs with ``STEPS_PER_CLASS`` × K steps of ``batch_size``."""
    n = v.integer("num_members", num_members, minimum=1)
    b = v.integer("batch_size", batch_size, minimum=1)
    k = v.integer("num_classes", num_classes, minimum=1)
    per_epoch = -(-n // b)
    return max(EPOCHS, -(-(STEPS_PER_CLASS * k) // per_epoch))


def first_layer_fan_in(
    model_name: str, *, input_shape: Sequence[int], num_classes: int, model_options: Mapping[str, object] | None = None
) -> int | None:
    """Inputs of one unit of the model's first weighted layer (Linear: in_features; Conv: C·k·k).

    Built on PyTorch's ``meta`` device (shapes only): the architecture is public, no example is
    read. ``None`` for a model without such a layer.
    """
    import torch
    from torch import nn

    from dpaudit.models import build_model

    options: dict[str, Any] = {k: val for k, val in (model_options or {}).items() if k != "noise_layer"}
    with torch.device("meta"):
        model = build_model(model_name, input_shape=tuple(input_shape), num_classes=num_classes, **options)
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)) and module.weight.requires_grad:
            return int(module.weight[0].numel())
    return None


def resolve_sgd_config(
    config: T,
    *,
    num_members: int,
    model_name: str | None = None,
    input_shape: Sequence[int] | None = None,
    num_classes: int | None = None,
    model_options: Mapping[str, object] | None = None,
) -> tuple[T, tuple[str, ...]]:
    """``config`` with the SGD fields it left unset derived by rules 1-3, and their names.

    Idempotent: a resolved config (every field set) comes back unchanged with no names. Works
    on any dataclass with ``epochs``, ``batch_size`` and ``learning_rate`` that remembers what
    it filled at construction under :data:`DERIVED_AT_INIT` (the non-private baseline's config
    and randomized smoothing's, which extends it).

    Args:
        config: the config as asked.
        num_members: N.
        model_name, input_shape, num_classes, model_options: the model and the task (rules 2
            and 3; without them the base rate and ``EPOCHS`` are kept).

    Returns:
        (resolved config, names of the fields that were derived).
    """
    n = v.integer("num_members", num_members, minimum=1)
    unset = tuple(getattr(config, DERIVED_AT_INIT, ()))
    if not unset:
        return config, ()
    fills: dict[str, int | float] = {}
    if "batch_size" in unset:
        fills["batch_size"] = derived_batch_size(n)
    if "learning_rate" in unset:
        fan_in = (
            first_layer_fan_in(
                model_name, input_shape=input_shape, num_classes=int(num_classes), model_options=model_options
            )
            if model_name is not None and input_shape is not None and num_classes is not None
            else None
        )
        fills["learning_rate"] = derived_learning_rate(fan_in)
    if "epochs" in unset:
        batch = int(fills.get("batch_size", config.batch_size) or BATCH_SIZE)  # type: ignore[attr-defined]
        fills["epochs"] = (
            EPOCHS
            if num_classes is None
            else derived_epochs(num_members=n, batch_size=min(batch, n), num_classes=int(num_classes))
        )
    # replace() builds a config whose fields are all set: resolving it again derives nothing.
    names = tuple(k for k in ("epochs", "batch_size", "learning_rate") if k in fills)
    return dataclasses.replace(config, **fills), names  # type: ignore[type-var]


def sgd_defaults_note(config: Any, derived: Sequence[str], *, num_members: int) -> str | None:
    """One line saying which values were derived and from what (``None`` when nothing was)."""
    if not derived:
        return None
    flags = {"epochs": "--epochs", "batch_size": "--batch-size", "learning_rate": "--learning-rate"}
    text = {
        "epochs": lambda: f"epochs {config.epochs}",
        "batch_size": lambda: f"batch size {config.batch_size}",
        "learning_rate": lambda: f"lr {config.learning_rate:.4g}",
    }
    parts = ", ".join(text[name]() for name in derived)
    return (
        f"defaults: {parts} — derived from N={num_members} and the model's first layer; "
        f"pass {', '.join(flags[name] for name in derived)} to override"
    )
