"""Per-batch clipping: the lot's mean gradient is clipped to C instead of each example's gradient.

The bug: the author writes DP-SGD with one ordinary backward pass — ``loss.mean().backward()``,
``clip_grad_norm_(model.parameters(), C)`` — and then adds N(0, σ²C²)/L to the clipped mean,
the noise that would be right for the *average of per-example clipped gradients*. Clipping the
lot's gradient bounds the lot, not an example: a canary alone in its lot moves the update by up
to C (its own gradient, clipped) while the noise is only σC/L, so its sensitivity relative to
the noise is L = 144 times the claimed one (2L with anti-aligned lot-mates). This is the flaw
Tramèr, Terzis, Steinke, Song, Jagielski & Carlini 2022 ("Debugging Differential Privacy: A Case
Study for Privacy Auditing", §3) found in a published method, whose sensitivity analysis missed
the factor of the batch size.

Leak (last iterate, Steinke, Jagielski, Nasr & Zhang 2024, "The Last Iterate Advantage", linear
loss): Binomial(50, 0.1)·s + N(0, 50·3²) with s = min(‖g‖/C, 1)·144 — for any canary whose
gradient reaches norm C, s = 144 and ε is unbounded at δ = 1e-5 (already s = 4 gives ε ≈ 6.0),
against the claimed ε ≈ 0.97.
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

BUG = "per-batch clipping"
REPORTED = (
    "Tramèr, Terzis, Steinke, Song, Jagielski, Carlini 2022, Debugging "
    "Differential Privacy: A Case Study for Privacy Auditing, §3"
)


class PerBatchClipping(DPSGD):
    def clipped_sum(self, grads: Grads) -> Grads:
        n = max(next(iter(grads.values())).shape[0], 1)
        mean = {k: g.sum(0) / n for k, g in grads.items()}  # BUG: the lot's mean gradient (one backward pass) ...
        norm = torch.sqrt(sum(m.pow(2).sum() for m in mean.values()))
        scale = min(1.0, self.clip_norm / (float(norm) + 1e-12))  # BUG: ... clipped as a whole to C
        return {k: m * scale * self.lot_size for k, m in mean.items()}  # so that ÷ L gives clip(mean) + N(0, σ²C²)/L


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """DP-SGD that clips the lot's mean gradient to C instead of each example's (claim: q = 0.1, σ = 3, T = 50)."""
    return PerBatchClipping().train(dataset, seed=seed, initial_state=initial_state)
