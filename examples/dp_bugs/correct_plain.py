"""Correct DP-SGD in plain PyTorch: the reference every bug of the catalogue departs from.

Poisson lots at q = 0.1 from a generator seeded with ``seed``, per-example gradients with
``torch.func``, each clipped to C = 1, Gaussian noise σC with σ = 3 on every step (empty lots
included), the noisy sum divided by the public constant expected lot size 144, 50 SGD steps
(Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar & Zhang 2016, "Deep Learning with
Differential Privacy", Algorithm 1). The loop is ``_dpsgd.py`` beside this file, unchanged.

Its final model's privacy under a linear loss (Steinke, Jagielski, Nasr & Zhang 2024, "The
Last Iterate Advantage"): Binomial(50, 0.1)·1 + N(0, 50·3²) against N(0, 50·3²), about
ε ≈ 0.94 at δ = 1e-5, just below the claimed ε ≈ 0.97 (with q·T = 5 expected participations the
final model hides little); a battery must never flag it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn

if (
    _here := str(Path(__file__).resolve().parent)
) not in sys.path:  # the path form loads this file alone; its helper lives beside it
    sys.path.insert(0, _here)

from _dpsgd import CLAIM, DPSGD, Dataset, State, model

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = ""
REPORTED = "the reference: Abadi et al. 2016, Deep Learning with Differential Privacy, Algorithm 1"


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """Correct Poisson DP-SGD (q = 0.1, σ = 3, C = 1, T = 50)."""
    return DPSGD().train(dataset, seed=seed, initial_state=initial_state)
