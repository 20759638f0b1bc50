"""Gradient accumulation that clips the accumulated sum: the standard accumulation recipe, then a clip.

The bug: the author fits a lot of L = 144 in memory with gradient accumulation — micro-batches
of 16, ``(loss / ACCUMULATION_STEPS).backward()`` for each, with the public constant
ACCUMULATION_STEPS = 9 — and only then clips the accumulated gradient to C
(``clip_grad_norm_``) and adds N(0, σ²C²)/L, the noise for an average of per-example clipped
gradients. The clip bounds the accumulated lot, not an example: a canary alone in its
micro-batch contributes g/9 before the clip, while the noise is σC/144, so its sensitivity
relative to the noise is 144/9 = 16 times the claimed one (for ‖g‖ ≤ 9C; more with lot-mates
that cancel). Per-example clipping inside each micro-batch is what Opacus's virtual steps do
(Yousefpour et al. 2021, "Opacus: User-Friendly Differential Privacy Library in PyTorch",
``BatchMemoryManager``); the clip of the sum is the per-batch flaw of Tramèr, Terzis, Steinke,
Song, Jagielski & Carlini 2022 ("Debugging Differential Privacy: A Case Study for Privacy
Auditing", §3), reached by way of accumulation.

Leak (last iterate, Steinke, Jagielski, Nasr & Zhang 2024, "The Last Iterate Advantage", linear
loss, ‖g‖ = 9C): Binomial(50, 0.1)·16 + N(0, 50·3²) against N(0, 50·3²): ε ≈ 73 at
δ = 1e-5 (already ‖g‖ = 2.25C, s = 4, gives ε ≈ 6.0), against the claimed ε ≈ 0.97.
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

BUG = "accumulation clips the accumulated sum"
REPORTED = (
    "Tramèr et al. 2022, Debugging Differential Privacy: A Case Study for "
    "Privacy Auditing, §3 (the clip of a sum); Opacus BatchMemoryManager "
    "(the correct accumulation)"
)

MICRO_BATCH = 16
ACCUMULATION_STEPS = 9  # 144 / 16: the lot the author means, in micro-batches


class AccumulationClipping(DPSGD):
    def clipped_sum(self, grads: Grads) -> Grads:
        acc = {k: torch.zeros(g.shape[1:]) for k, g in grads.items()}
        n = next(iter(grads.values())).shape[0]
        for start in range(0, n, MICRO_BATCH):  # one (loss / ACCUMULATION_STEPS).backward() per micro-batch
            size = min(MICRO_BATCH, n - start)
            for k, g in grads.items():
                acc[k] += g[start : start + size].sum(0) / size / ACCUMULATION_STEPS
        norm = torch.sqrt(sum(a.pow(2).sum() for a in acc.values()))
        scale = min(1.0, self.clip_norm / (float(norm) + 1e-12))  # BUG: clip_grad_norm_ on the accumulated gradient
        return {k: a * scale * self.lot_size for k, a in acc.items()}  # so that ÷ L gives clip(acc) + N(0, σ²C²)/L


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """DP-SGD with gradient accumulation that clips the accumulated gradient (claim: q = 0.1, σ = 3, T = 50)."""
    return AccumulationClipping().train(dataset, seed=seed, initial_state=initial_state)
