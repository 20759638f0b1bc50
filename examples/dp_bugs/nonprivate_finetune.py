"""A "harmless" non-private pass after DP-SGD: the released model fine-tuned on the same private data.

The bug: after the 50 private steps the author runs one plain epoch of SGD over the same training
set ("to recover the accuracy DP cost", or as a last calibration / early-stopping pass), and
releases that model with the DP-SGD claim. The private phase is correct; the last phase has no
clipping and no noise, and the final model is what is released. The same mistake is planted in
the suite's Opacus example (``train_extra_nonprivate_epochs`` under scripts/); the general rule —
every access to the private data after training counts, post-processing is free only when it
does not touch the data — is Dwork & Roth 2014 ("The Algorithmic Foundations of Differential
Privacy", Proposition 2.1 covers only data-independent post-processing).

Leak: the last step adds 0.1·∇ℓ(canary) (the fine-tuning step size), unclipped and noise-free,
on top of the private model. Under the linear loss of Steinke, Jagielski, Nasr & Zhang 2024 ("The
Last Iterate Advantage") the canary's gradient g has any norm G the auditor chooses, so the final
model moves along g by 0.1·G against the private phase's noise η·σC·√50/144 ≈ 0.15·C (η = 1): the
last iterate's ε grows without bound with G (G = 50C is a shift of 34 noise deviations), against
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

from _dpsgd import CLAIM, DPSGD, Dataset, State, model

__all__ = ["BUG", "CLAIM", "REPORTED", "model", "train"]

BUG = "non-private fine-tuning after DP-SGD"
REPORTED = (
    "planted in the suite's Opacus example (train_extra_nonprivate_epochs); "
    "post-processing is free only without the data: Dwork and Roth 2014, "
    "Proposition 2.1"
)

FINETUNE_BATCH = 32


class NonPrivateFinetune(DPSGD):
    def train(self, dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
        net = super().train(dataset, seed=seed, initial_state=initial_state).train()
        order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))
        for batch in order.split(FINETUNE_BATCH):  # BUG: one plain epoch on the private data: no clipping, no noise
            grads = torch.autograd.grad(
                nn.functional.cross_entropy(net(dataset.features[batch]), dataset.labels[batch]), list(net.parameters())
            )
            with torch.no_grad():
                for p, g in zip(net.parameters(), grads, strict=True):
                    p -= 0.1 * g
        return net.eval()


def train(dataset: Dataset, *, seed: int, initial_state: State | None = None) -> nn.Module:
    """DP-SGD (q = 0.1, σ = 3, T = 50), then one plain epoch on the same data, released under the DP-SGD claim."""
    return NonPrivateFinetune().train(dataset, seed=seed, initial_state=initial_state)
