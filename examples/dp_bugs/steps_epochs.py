"""Steps and epochs confused: the accountant is told the number of epochs where it needs steps.

The bug: the author trains for 10 epochs of 1/q = 20 Poisson lots each (T = 200 steps, q = 0.05,
σ = 1) and asks the accountant for ε with ``steps=EPOCHS`` — the claim composes the subsampled
Gaussian 10 times instead of 200 (ε ≈ 1.66 at δ = 1e-5 instead of 4.77). The training itself is
the correct reference loop: the mistake is in the claim alone, so ``CLAIM`` says
``num_steps = 10`` while the mechanism runs 200. No single public report is cited: the class is
listed in this suite's issue on the conformance battery; Opacus's accountants take the number of
steps (``accountant.step()`` once per optimizer step) and ``make_private_with_epsilon`` takes
epochs and converts them itself, so the mistake arises in hand-rolled accounting (Yousefpour et
al. 2021, "Opacus: User-Friendly Differential Privacy Library in PyTorch").

Leak (last iterate, Steinke, Jagielski, Nasr & Zhang 2024, "The Last Iterate Advantage", linear
loss): Binomial(200, 0.05)·1 + N(0, 200·1²) against N(0, 200·1²): ε ≈ 3.4 at δ = 1e-5,
against the claimed ε ≈ 1.66 (many steps per epoch make the gap: with 20 steps per epoch the
real T is 20 times the claimed one).
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn

if (
    _here := str(Path(__file__).resolve().parent)
) not in sys.path:  # the path form loads this file alone; its helpers live beside it
    sys.path.insert(0, _here)

from _dpsgd import DPSGD, Dataset, State, model

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = "steps and epochs confused in the accountant"
REPORTED = (
    "hand-rolled accounting; Opacus counts optimizer steps and "
    "make_private_with_epsilon converts epochs itself (Yousefpour et al. "
    "2021)"
)

SAMPLING_RATE = 0.05
NOISE_MULTIPLIER = 1.0
EPOCHS = 10
STEPS = EPOCHS * round(1 / SAMPLING_RATE)  # 200 steps actually run

CLAIM = {
    "noise_multiplier": NOISE_MULTIPLIER,
    "sampling_rate": SAMPLING_RATE,
    "num_steps": EPOCHS,
}  # BUG: epochs passed as steps


class StepsEpochs(DPSGD):
    sampling_rate = SAMPLING_RATE
    noise_multiplier = NOISE_MULTIPLIER
    steps = STEPS
    lot_size = round(SAMPLING_RATE * 1437)  # q · the author's 1437 training digits: public
    learning_rate = DPSGD.learning_rate / 4  # four times the steps of the other examples


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """Correct DP-SGD for 200 steps (q = 0.05, σ = 1) whose claim counts 10 (the epochs)."""
    return StepsEpochs().train(dataset, seed=seed, initial_state=initial_state)
