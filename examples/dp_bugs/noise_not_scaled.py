"""Noise not scaled by the clipping norm: N(0, σ²) where DP-SGD needs N(0, σ²C²), with C = 10.

The bug: the author clips each example's gradient to C = 10 (a larger C trains faster on their
model) and adds ``noise_multiplier * torch.randn_like(g)``, forgetting the factor C that
Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar & Zhang 2016 ("Deep Learning with Differential
Privacy", Algorithm 1: N(0, σ²C²I)) put in. The effective noise multiplier is σ/C = 0.3 while
the claim says 3. No single public report is cited: the class is listed in this suite's issue on
the conformance battery, and it is one of the bugs planted in the suite's own DP-SGD (the
``noise-without-clip-norm`` variant, with C = 5).

Leak (last iterate, Steinke, Jagielski, Nasr & Zhang 2024, "The Last Iterate Advantage", linear
loss): Binomial(50, 0.1)·1 + N(0, 50·0.3²) against N(0, 50·0.3²): ε ≈ 29 at δ = 1e-5, against
the claimed ε ≈ 0.97.
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

BUG = "noise not scaled by C"
REPORTED = (
    "planted in the suite's own DP-SGD (noise-without-clip-norm); the noise is σC in Abadi et al. 2016, Algorithm 1"
)


class NoiseNotScaled(DPSGD):
    clip_norm = 10.0
    learning_rate = DPSGD.learning_rate / 10  # the author's step size for C = 10

    def noise(self, like: Grads, generator: torch.Generator) -> Grads:
        std = self.noise_multiplier  # BUG: σ, not σ·C
        return {k: std * torch.randn(v.shape, generator=generator) for k, v in like.items()}


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """DP-SGD with C = 10 and noise N(0, σ²) instead of N(0, σ²C²) (claim: q = 0.1, σ = 3, T = 50)."""
    return NoiseNotScaled().train(dataset, seed=seed, initial_state=initial_state)
