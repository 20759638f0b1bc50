"""Default sizes that fit a stated time budget on 2 CPU cores, computed from the architecture alone.

A default that takes more than a few minutes on the machine a newcomer has is a trap: Secure-SGD on
MNIST ran 8 epochs of per-example gradients for more than 10 minutes, and ``certify``'s 500 examples
× 2,000 noise draws on the same network projected 11. The sizes here are derived from public,
deterministic facts — the model's floating-point operations per example, counted on PyTorch's
``meta`` device, and the number of examples — against a stated throughput, so the same command
makes the same record (and the same model id) on every machine; a faster machine simply finishes
sooner.

:data:`REFERENCE_FLOPS_PER_SECOND` is the forward throughput of batched inference on 2 cores:
``certify``'s own measurement on the 2-core machine (issue 48: 500 hgm-cnn examples × 2,100
draws ≈ 24 TFLOP projected at 11 minutes, 37 GFLOP/s), taken down to 30 GFLOP/s for margin. A
training step costs three forward passes (forward, two backward products); per-example gradients
:data:`PER_EXAMPLE_GRADIENT_FACTOR` times that (measured 1.3–3× for the zoo models,
``scripts/bench_dpsgd.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from dpaudit import _validate as v

__all__ = [
    "REFERENCE_FLOPS_PER_SECOND",
    "TRAINING_STEP_FACTOR",
    "PER_EXAMPLE_GRADIENT_FACTOR",
    "forward_flops",
    "examples_within",
]

REFERENCE_FLOPS_PER_SECOND = 30e9
#: Forward + backward ≈ 3 forward passes.
TRAINING_STEP_FACTOR = 3.0
#: Per-example gradients against one gradient per batch (the middle of the measured 1.3–3×).
PER_EXAMPLE_GRADIENT_FACTOR = 2.0


def forward_flops(
    model_name: str, *, input_shape: Sequence[int], num_classes: int, model_options: Mapping[str, object] | None = None
) -> int:
    """Floating-point operations of one example's forward pass through the zoo model (counted, not run).

    The model is built and run on PyTorch's ``meta`` device (shapes only), under
    :class:`torch.utils.flop_counter.FlopCounterMode`; a noise layer's draws and additions are
    not counted (they are cheap beside the layers).
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from dpaudit.models import build_model

    options = {k: val for k, val in (model_options or {}).items() if k != "noise_layer"}
    with torch.device("meta"):
        model = build_model(model_name, input_shape=tuple(input_shape), num_classes=num_classes, **options)  # type: ignore[arg-type]
        x = torch.zeros((1, *input_shape))
    with FlopCounterMode(display=False) as counter:
        model(x)
    return max(1, int(counter.get_total_flops()))


def examples_within(seconds: float, *, flops_per_example: float) -> int:
    """How many units of ``flops_per_example`` fit ``seconds`` at :data:`REFERENCE_FLOPS_PER_SECOND` (at least 1)."""
    s = v.positive("seconds", seconds)
    f = v.positive("flops_per_example", flops_per_example)
    return max(1, math.floor(s * REFERENCE_FLOPS_PER_SECOND / f))
