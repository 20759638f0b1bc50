"""Correct DP-SGD with Opacus 1.6: Poisson ``DPDataLoader`` and a constant ``expected_batch_size``.

Poisson lots at q = 0.1 (``DPDataLoader`` with a generator seeded with ``seed``), per-example
clipping to C = 1 and noise σC with σ = 3 by Opacus's ``DPOptimizer`` (noise generator derived
from ``seed``), the noisy sum divided by the public expected lot size 144 — set on the optimizer,
since ``make_private`` would otherwise use ``int(len(dataset) · q)`` — and exactly 50 steps,
empty lots included (Yousefpour et al. 2021, "Opacus: User-Friendly Differential Privacy Library
in PyTorch"). The loop is ``_opacus_dpsgd.py`` beside this file, unchanged. Same final-model
privacy as ``correct_plain.py`` (last iterate ε ≈ 0.94, just below the claimed 0.97 at δ = 1e-5).
"""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn

if (
    _here := str(Path(__file__).resolve().parent)
) not in sys.path:  # the path form loads this file alone; its helper lives beside it
    sys.path.insert(0, _here)

from _dpsgd import CLAIM, Dataset, State, model
from _opacus_dpsgd import OpacusDPSGD

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = ""
REPORTED = "the reference: Yousefpour et al. 2021, Opacus: User-Friendly Differential Privacy Library in PyTorch"


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """Correct Opacus DP-SGD (q = 0.1, σ = 3, C = 1, T = 50)."""
    return OpacusDPSGD().train(dataset, seed=seed, initial_state=initial_state)
