"""The catalogue's shared Opacus DP-SGD (Opacus 1.6), with small overridable pieces.

The Opacus examples of ``examples/dp_bugs/`` are this loop with one piece done wrong (Yousefpour
et al. 2021, "Opacus: User-Friendly Differential Privacy Library in PyTorch"). The reference:
Poisson lots at rate q from ``opacus.data_loader.DPDataLoader`` (generator seeded with
``seed``), ``PrivacyEngine.make_private`` with ``poisson_sampling=False`` (the loader already
samples), per-example clipping to C, noise σC from a generator derived from ``seed``, the
optimizer's ``expected_batch_size`` set to the public constant of ``_dpsgd.py`` (Opacus's own
default is ``int(len(dataset) · q)``, which depends on the data), exactly ``STEPS`` steps, an
empty lot included (its backward still runs, so Opacus clips an empty batch and adds noise).
Same model, claim and hyper-parameters as ``_dpsgd.py``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import warnings
from collections.abc import Iterable, Iterator, Mapping

import torch
from _dpsgd import (
    CLIP_NORM,
    EXPECTED_LOT_SIZE,
    LEARNING_RATE,
    NOISE_MULTIPLIER,
    SAMPLING_RATE,
    STEPS,
    model,
    noise_seed,
)
from torch import nn

__all__ = ["OpacusDPSGD"]


@contextlib.contextmanager
def _quiet(name: str) -> Iterator[None]:
    """The logger ``name`` silenced below ERROR for the block, its level restored after."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


class OpacusDPSGD:
    """One Opacus DP-SGD configuration; subclasses override the piece their bug gets wrong."""

    sampling_rate: float = SAMPLING_RATE
    noise_multiplier: float = NOISE_MULTIPLIER
    clip_norm: float = CLIP_NORM
    steps: int = STEPS
    lot_size: int = EXPECTED_LOT_SIZE
    learning_rate: float = LEARNING_RATE

    def loader(self, dataset: torch.utils.data.Dataset, seed: int) -> torch.utils.data.DataLoader:
        """Poisson lots at rate q (Opacus's ``DPDataLoader``)."""
        from opacus.data_loader import DPDataLoader

        return DPDataLoader(dataset, sample_rate=self.sampling_rate, generator=torch.Generator().manual_seed(seed))

    def make_private(
        self, net: nn.Module, optimizer: torch.optim.Optimizer, loader: torch.utils.data.DataLoader, seed: int
    ) -> tuple[nn.Module, torch.optim.Optimizer, torch.utils.data.DataLoader]:
        """Opacus's engine on the model, the optimizer and the (already Poisson) loader."""
        from opacus import PrivacyEngine

        net, optimizer, loader = PrivacyEngine(accountant="prv").make_private(
            module=net,
            optimizer=optimizer,
            data_loader=loader,
            noise_multiplier=self.noise_multiplier,
            max_grad_norm=self.clip_norm,
            poisson_sampling=False,  # the loader already draws Poisson lots
            noise_generator=torch.Generator().manual_seed(noise_seed(seed)),
        )
        optimizer.expected_batch_size = self.lot_size  # public constant, not int(len(dataset) · q)
        return net, optimizer, loader

    def batches(
        self, loader: Iterable[tuple[torch.Tensor, torch.Tensor]]
    ) -> Iterable[tuple[torch.Tensor, torch.Tensor]]:
        """Exactly ``steps`` lots, however many epochs that takes."""
        return itertools.islice(itertools.chain.from_iterable(itertools.repeat(loader)), self.steps)

    def takes_step(self, optimizer: torch.optim.Optimizer, x: torch.Tensor) -> bool:
        """Whether the lot ``x`` gets a step: always (an empty lot's step adds the noise alone)."""
        return True

    def train(
        self, dataset: torch.utils.data.Dataset, *, seed: int, initial_state: Mapping[str, torch.Tensor] | None = None
    ) -> nn.Module:
        """Trains :func:`_dpsgd.model` with Opacus on ``dataset``; returns the plain module in eval mode."""
        with torch.random.fork_rng():  # the initial weights from ``seed``, the global stream left as it was
            torch.manual_seed(seed)
            net = model()
        if initial_state is not None:  # the auditor's start: public, so it costs no privacy
            net.load_state_dict(dict(initial_state))
        optimizer = torch.optim.SGD(net.parameters(), lr=self.learning_rate)
        with warnings.catch_warnings(), _quiet("opacus.data_loader"):
            # Opacus warns about its non-secure RNG, the seeded generator and the hooks' backward,
            # and logs every empty Poisson lot: expected on an auditor's tiny datasets.
            warnings.simplefilter("ignore")
            private, optimizer, loader = self.make_private(net, optimizer, self.loader(dataset, seed), seed)
            private.train()
            for x, y in self.batches(loader):
                if not self.takes_step(optimizer, x):
                    continue
                optimizer.zero_grad()
                # Sum over the lot / its size: the mean for a lot, 0 (not NaN) for an empty one,
                # whose backward still gives Opacus an empty batch to clip and noise.
                loss = nn.functional.cross_entropy(private(x), y, reduction="sum") / max(len(y), 1)
                loss.backward()
                optimizer.step()
        return net.eval()
