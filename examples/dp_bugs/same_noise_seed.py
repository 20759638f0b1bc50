"""The same noise every step and every run: a noise helper that seeds its own generator with a constant.

The bug: a helper ``gaussian_noise(shape)`` creates ``torch.Generator().manual_seed(0)`` on
every call (written "for reproducibility"), so step t's noise is the same vector z as every
other step's, in every run and under every seed. The noise in the final model is then
η/L·σC·T·z, a vector anyone can recompute from the code: the adversary subtracts it, and what
is left is the clipped gradients with no noise at all. (The seeding contract of the suite's
``--train-fn`` protocol asks for ``seed`` as the only source of randomness for exactly this
reason.) No single public report is cited: the class is listed in this suite's issue on the
conformance battery; the noise must be fresh and unpredictable, which is why Opacus offers a
``secure_mode`` with a cryptographically secure generator (Yousefpour et al. 2021, "Opacus:
User-Friendly Differential Privacy Library in PyTorch").

Leak: with the noise known, the last iterate (Steinke, Jagielski, Nasr & Zhang 2024, "The Last
Iterate Advantage", linear loss) is Binomial(50, 0.1)·1 + 0 against 0: ε unbounded (the model
differs from the canary-free one whenever the canary was sampled once, probability 0.995),
against the claimed ε ≈ 0.97. Two runs under different seeds draw different lots but the same
noise.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

if (
    _here := str(Path(__file__).resolve().parent)
) not in sys.path:  # the path form loads this file alone; its helpers live beside it
    sys.path.insert(0, _here)

from _dpsgd import CLAIM, DPSGD, Dataset, Grads, State, model

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = "same noise seed on every step"
REPORTED = "noise must be fresh and unpredictable: Opacus secure_mode (Yousefpour et al. 2021)"


class SameNoiseSeed(DPSGD):
    def noise(self, like: Grads, generator: torch.Generator) -> Grads:
        fresh = torch.Generator().manual_seed(0)  # BUG: a new generator seeded with a constant on every call
        std = self.noise_multiplier * self.clip_norm
        return {k: std * torch.randn(v.shape, generator=fresh) for k, v in like.items()}


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """DP-SGD whose noise is the same vector on every step of every run (claim: q = 0.1, σ = 3, T = 50)."""
    return SameNoiseSeed().train(dataset, seed=seed, initial_state=initial_state)
