"""Steps counted differently under accumulation: noise on every micro-step, the accountant counting updates.

The bug, as reported in jax_privacy (issue #288, "steps counted differently under gradient
accumulation"): the accountant and the training loop count steps in different units. Here the
author plans 50 updates of 4 accumulated micro-batches and tells the accountant T = 50, but the
loop releases a noisy step on every micro-batch: 200 noisy steps at rate q. The loop is the
reference ``_dpsgd.py`` with one override (its number of steps), ``CLAIM`` the reference's.

Leak: 200 compositions of the subsampled Gaussian (q = 0.1, σ = 3; ε ≈ 2.2 at δ = 1e-5) against
the claimed 50 (ε ≈ 0.97) — a bookkeeping bug the final model shows only faintly; a grey-box
replay counts the steps.
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn

if (
    _here := str(Path(__file__).resolve().parent)
) not in sys.path:  # the path form loads this file alone; its helpers live beside it
    sys.path.insert(0, _here)

from _dpsgd import CLAIM, DPSGD, STEPS, Dataset, State, model

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = "steps counted differently under accumulation"
REPORTED = "jax_privacy issue #288 (the accountant and the budget check counted steps differently)"

ACCUMULATION = 4


class AccumulationSteps(DPSGD):
    steps = ACCUMULATION * STEPS  # BUG: a noisy step per micro-batch; CLAIM counts the 50 updates
    learning_rate = DPSGD.learning_rate / ACCUMULATION


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """DP-SGD taking 200 noisy micro-steps where the claim counts 50 (q = 0.1, σ = 3)."""
    return AccumulationSteps().train(dataset, seed=seed, initial_state=initial_state)
