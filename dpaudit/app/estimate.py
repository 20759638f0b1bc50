"""How long a run will take, said before it starts when it is more than an hour (issue 11).

The estimate is measured, not guessed: the model is built and a few forward/backward passes on
a small batch are timed on the chosen device, then multiplied by the number of examples the run
will push through the model. It is rough (data loading, evaluation and accounting are left out;
DP-SGD's per-example gradients are counted as a fixed factor), which is why only runs beyond
an hour are announced, in whole units, and why the message says "about".
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["LONG_RUN_SECONDS", "PER_EXAMPLE_GRADIENT_FACTOR", "seconds_per_example", "describe_duration"]

#: Runs expected to take longer than this are announced before they start.
LONG_RUN_SECONDS = 3600.0
#: DP-SGD computes one gradient per example (vmap or hooks) instead of one per batch; measured
#: at 1.3–3× a plain step for the zoo models (scripts/bench_dpsgd.py), so 3 is the cautious side.
PER_EXAMPLE_GRADIENT_FACTOR = 3.0
_BATCH = 64


@functools.lru_cache(maxsize=16)
def _time_per_example(
    model_name: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    device: str,
    options: tuple[tuple[str, Any], ...],
    backward: bool,
) -> float:
    import torch

    from dpaudit.models import build_model

    model = build_model(model_name, input_shape=input_shape, num_classes=num_classes, **dict(options)).to(device)
    x = torch.randn(_BATCH, *input_shape, device=device)
    y = torch.zeros(_BATCH, dtype=torch.long, device=device)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> None:
        if backward:
            model.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
        else:
            with torch.no_grad():
                model(x)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    step()  # warm-up: allocation and kernel selection are not the steady state
    times = []
    for _ in range(3):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return sorted(times)[1] / _BATCH


def seconds_per_example(
    model_name: str,
    *,
    input_shape: tuple[int, ...],
    num_classes: int,
    device: str = "cpu",
    model_options: Mapping[str, object] | None = None,
    backward: bool = True,
) -> float:
    """Measured seconds one example costs in a forward (and backward) pass of a zoo model.

    Returns 0.0 for a model that cannot be built here (an external builder): no estimate is
    better than a wrong one.
    """
    try:
        return _time_per_example(
            model_name,
            tuple(int(s) for s in input_shape),
            int(num_classes),
            str(device),
            tuple(sorted((model_options or {}).items())),
            backward,
        )
    except (ValueError, TypeError, KeyError, RuntimeError):
        return 0.0


def describe_duration(seconds: float) -> str:
    """``about 3 h`` / ``about 2 days`` for an announcement."""
    hours = seconds / 3600.0
    if hours < 48:
        return f"about {hours:.0f} h" if hours >= 1.5 else "about 1 h"
    return f"about {hours / 24:.0f} days"
