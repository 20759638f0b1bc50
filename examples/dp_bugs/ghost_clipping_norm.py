"""Ghost clipping that ignores ``max_grad_norm``: examples clipped to 1.0, noise calibrated for the user's C.

The bug, as shipped in Opacus (PR #664, "Fix max_grad_norm in fast gradient clipping"): the
privacy engine did not hand the clipping norm to the fast-gradient-clipping ("ghost") module,
which clipped every example to its own default of 1.0, while the optimizer added noise σ·C for
the norm the user asked for. With C = 0.1 the noise is calibrated for a sensitivity of 0.1 while
one example moves the sum by up to 1.0: the effective noise multiplier is σ/10. The loop is the
reference ``_dpsgd.py`` with C = 0.1 and one override: the clipping uses 1.0.

Leak: the subsampled Gaussian with noise multiplier 0.3 instead of 3 over T = 50 steps (ε in
the tens at δ = 1e-5) against the claimed ε ≈ 0.97. A grey-box replay measures the per-step
sensitivity directly: 1.0 against the C = noise std / σ = 0.1 the noise is calibrated for.
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

BUG = "ghost clipping ignores max_grad_norm"
REPORTED = "Opacus PR #664 (fast gradient clipping clipped at 1.0 whatever max_grad_norm was)"

MODULE_DEFAULT_NORM = 1.0  # the ghost-clipping module's own default, used instead of clip_norm


class GhostClippingNorm(DPSGD):
    clip_norm = 0.1  # the user's max_grad_norm: the optimizer's noise is σ · 0.1

    def clipped_sum(self, grads: Grads) -> Grads:
        flat = torch.cat([g.flatten(1) for g in grads.values()], dim=1)
        # BUG: each example clipped to the module's default norm, not to self.clip_norm
        scale = (MODULE_DEFAULT_NORM / (flat.norm(dim=1) + 1e-12)).clamp(max=1.0)
        return {k: torch.einsum("b,b...->...", scale, g) for k, g in grads.items()}


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """DP-SGD whose noise is for C = 0.1 while examples are clipped to 1.0 (claim: q = 0.1, σ = 3, T = 50)."""
    return GhostClippingNorm().train(dataset, seed=seed, initial_state=initial_state)
