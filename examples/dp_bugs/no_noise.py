"""Opacus's engine with the noise silently off: ``noise_multiplier`` 0 where the claim says 3.

The bug: the noise multiplier reaches ``make_private`` as 0 — a configuration default the
author never overrode (``noise_multiplier=cfg.get("sigma", 0.0)``), while the report states the
σ = 3 of the experiment plan. Opacus clips and averages as usual and accounts with σ = 0 (ε = ∞),
but the claim a reader sees is computed from the plan. Training still works, better than with
noise, so nothing looks wrong. Opacus 1.6 accepts ``noise_multiplier=0`` without an error
(Yousefpour et al. 2021, "Opacus: User-Friendly Differential Privacy Library in PyTorch"; its own
tests use it to compare with non-private training), and the loop hides Opacus's warnings. It is the suite's first
planted Opacus bug
(``train_no_noise`` of the Opacus example under scripts/).

Leak: no noise, so the last iterate (Steinke, Jagielski, Nasr & Zhang 2024, "The Last Iterate
Advantage", linear loss) is Binomial(50, 0.1)·1 against 0: ε unbounded at δ = 1e-5 (the model
moves with the canary whenever it was sampled, probability 0.995), against the claimed ε ≈ 0.97.
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn

if (
    _here := str(Path(__file__).resolve().parent)
) not in sys.path:  # the path form loads this file alone; its helpers live beside it
    sys.path.insert(0, _here)

from _dpsgd import CLAIM, Dataset, State, model
from _opacus_dpsgd import OpacusDPSGD

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = "noise multiplier silently 0"
REPORTED = (
    "Opacus accepts noise_multiplier=0 without an error (Yousefpour et al. "
    "2021); planted in the suite's Opacus example (train_no_noise)"
)

CONFIG: dict[str, float] = {"max_grad_norm": 1.0}  # the author's run configuration: "sigma" never set


class NoNoise(OpacusDPSGD):
    noise_multiplier = CONFIG.get("sigma", 0.0)  # BUG: a default of 0 where the plan (and CLAIM) says 3


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """Opacus DP-SGD whose noise multiplier is 0 (claim: q = 0.1, σ = 3, T = 50)."""
    return NoNoise().train(dataset, seed=seed, initial_state=initial_state)
