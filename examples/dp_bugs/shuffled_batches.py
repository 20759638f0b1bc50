"""Fixed-size shuffled batches accounted as Poisson sampling.

The bug: the author trains on ``DataLoader(dataset, batch_size=144, shuffle=True)`` — every epoch
a random permutation cut into batches of 144 — and claims the Poisson-subsampled Gaussian with
q = 144/1437 = 0.1, the accounting of Poisson lots. Shuffling is not Poisson sampling: each
example is in exactly one lot per epoch, and a dataset of at most 144 records is one lot that
contains every record on every step. The accounting amplifies by a sampling that does not take
place. Reported in Opacus issue #80 (pytorch/opacus), which led Opacus to add Poisson sampling
(``DPDataLoader``, ``poisson_sampling=True``) as its default; the shuffled-batch gap is
quantified by Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha & Zhang 2024 ("How Private are DP-SGD
Implementations?").

Leak (last iterate, Steinke, Jagielski, Nasr & Zhang 2024, "The Last Iterate Advantage", linear
loss): on a dataset of ≤ 144 records the canary is in all 50 lots, 50·1 + N(0, 50·3²) against
N(0, 50·3²), μ = √50/3 ≈ 2.36-GDP: ε ≈ 12.3 at δ = 1e-5, against the claimed ε ≈ 0.97. (On a
large dataset it is in exactly 5 lots: μ ≈ 0.24, ε ≈ 0.87 — below the claim, so only small
datasets show it from the final model.)
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

if (
    _here := str(Path(__file__).resolve().parent)
) not in sys.path:  # the path form loads this file alone; its helpers live beside it
    sys.path.insert(0, _here)

from _dpsgd import CLAIM, DPSGD, Dataset, State, model

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = "shuffled batches accounted as Poisson"
REPORTED = "Opacus issue #80 (pytorch/opacus); Chua et al. 2024, How Private are DP-SGD Implementations?"


class ShuffledBatches(DPSGD):
    def lots(self, labels: torch.Tensor, generator: torch.Generator) -> Iterator[torch.Tensor]:
        def epoch() -> tuple[torch.Tensor, ...]:
            # BUG: a fresh permutation cut into batches of 144 — not Poisson lots at rate q
            return torch.randperm(len(labels), generator=generator).split(int(self.lot_size))

        batches = itertools.chain.from_iterable(epoch() for _ in itertools.repeat(None))
        return itertools.islice(batches, self.steps) if len(labels) else iter([labels[:0]] * self.steps)


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """DP-SGD on shuffled fixed-size batches, claimed as Poisson q = 0.1 (σ = 3, T = 50)."""
    return ShuffledBatches().train(dataset, seed=seed, initial_state=initial_state)
