"""The catalogue's shared reference DP-SGD, in plain PyTorch, with small overridable pieces.

Every plain-PyTorch example of ``examples/dp_bugs/`` is this loop with exactly one piece done
wrong, so a bug module shows only the lines that differ. The reference (Abadi, Chu, Goodfellow,
McMahan, Mironov, Talwar & Zhang 2016, "Deep Learning with Differential Privacy", Algorithm 1):

* ``STEPS`` lots, each drawn by Poisson sampling at rate ``SAMPLING_RATE`` from a
  ``torch.Generator`` seeded with ``seed`` (the number of steps never depends on the dataset);
* per-example gradients with ``torch.func`` (``functional_call`` + ``vmap`` + ``grad``);
* each example's gradient clipped to L2 norm ``CLIP_NORM``;
* Gaussian noise N(0, σ²C²) added to the clipped sum on *every* step, an empty lot included,
  from a second generator derived from ``seed``;
* the noisy sum divided by ``EXPECTED_LOT_SIZE``, a public constant (q times the size of the
  author's real dataset: the 1437 training digits), never by ``len(dataset)`` or the realised
  lot size;
* a plain SGD step.

Its claim is :data:`CLAIM`: the Poisson-subsampled Gaussian mechanism with q = 0.1, σ = 3,
composed over T = 50 steps (ε ≈ 0.97 at δ = 1e-5 by the PLD accountant). The training
functions follow the suite's ``--train-fn`` protocol:
``train(dataset, *, seed, initial_state=None) -> nn.Module``, with ``seed`` the only source of
randomness and ``initial_state`` an auditor's chosen start for :func:`model`'s architecture.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

__all__ = [
    "CLAIM",
    "CLIP_NORM",
    "DPSGD",
    "Dataset",
    "Grads",
    "State",
    "EXPECTED_LOT_SIZE",
    "NOISE_MULTIPLIER",
    "SAMPLING_RATE",
    "STEPS",
    "mlp",
    "model",
    "noise_seed",
]

SAMPLING_RATE = 0.1
NOISE_MULTIPLIER = 3.0
STEPS = 50
CLIP_NORM = 1.0
EXPECTED_LOT_SIZE = 144  # round(q · 1437): the author's real training set, a public constant
LEARNING_RATE = 1.0
HIDDEN = 64
FEATURES = 64  # digits: an 8×8 image, flattened
CLASSES = 10

CLAIM = {"noise_multiplier": NOISE_MULTIPLIER, "sampling_rate": SAMPLING_RATE, "num_steps": STEPS}

Grads = dict[str, torch.Tensor]
State = Mapping[str, torch.Tensor]  # an initial state dict
Dataset = torch.utils.data.Dataset  # an ArrayDataset: .features, .labels, .num_classes


def mlp(*, hidden: int = HIDDEN) -> nn.Module:
    """The digits MLP every plain example trains: 64 → ``hidden`` → ReLU → 10."""
    return nn.Sequential(nn.Flatten(), nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, CLASSES))


def model() -> nn.Module:
    """The architecture the examples train on digits (for ``--model-fn``)."""
    return mlp()


def noise_seed(seed: int) -> int:
    """The noise generator's seed: derived from ``seed``, apart from the sampling stream's."""
    return (seed * 1_000_003 + 0x5EED) % 2**63


class DPSGD:
    """One DP-SGD configuration; subclasses override the one piece their bug gets wrong.

    Class attributes are the public hyper-parameters; the methods, in the order one step calls
    them: :meth:`lots`, :meth:`inputs`, :meth:`per_example_grads`, :meth:`clipped_sum`,
    :meth:`noise`, :meth:`normaliser`, :meth:`apply`.
    """

    sampling_rate: float = SAMPLING_RATE
    noise_multiplier: float = NOISE_MULTIPLIER
    clip_norm: float = CLIP_NORM
    steps: int = STEPS
    lot_size: float = EXPECTED_LOT_SIZE
    learning_rate: float = LEARNING_RATE

    def build(self) -> nn.Module:
        """A fresh model (the architecture ``initial_state`` must fit)."""
        return model()

    # -- sampling ---------------------------------------------------------------------------
    def lots(self, labels: torch.Tensor, generator: torch.Generator) -> Iterator[torch.Tensor]:
        """``steps`` Poisson lots: each record independently with probability q."""
        n = len(labels)
        for _ in range(self.steps):
            yield torch.nonzero(torch.rand(n, generator=generator) < self.sampling_rate).flatten()

    def inputs(self, x: torch.Tensor, y: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The examples one lot trains on (the lot itself: no augmentation)."""
        return x, y

    # -- gradients --------------------------------------------------------------------------
    def per_example_grads(self, net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> Grads:
        """Name → (B, *shape): each example's gradient of its own loss."""
        params = {k: p.detach() for k, p in net.named_parameters()}
        if len(x) == 0:
            return {k: p.new_zeros((0, *p.shape)) for k, p in params.items()}
        buffers = dict(net.named_buffers())

        def loss_one(prm: Grads, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            return nn.functional.cross_entropy(
                functional_call(net, (prm, buffers), (xi.unsqueeze(0),)), yi.unsqueeze(0)
            )

        out: Grads = vmap(grad(loss_one), in_dims=(None, 0, 0))(params, x, y)
        return out

    def clipped_sum(self, grads: Grads) -> Grads:
        """Σ_i g_i · min(1, C/‖g_i‖): each example's whole gradient clipped to C, then summed."""
        flat = torch.cat([g.flatten(1) for g in grads.values()], dim=1)
        scale = (self.clip_norm / (flat.norm(dim=1) + 1e-12)).clamp(max=1.0)
        return {k: torch.einsum("b,b...->...", scale, g) for k, g in grads.items()}

    # -- the release ------------------------------------------------------------------------
    def noise(self, like: Grads, generator: torch.Generator) -> Grads:
        """N(0, σ²C²) per coordinate, from the seed-derived noise stream."""
        std = self.noise_multiplier * self.clip_norm
        return {k: std * torch.randn(v.shape, generator=generator) for k, v in like.items()}

    def normaliser(self, lot_size: int) -> float:
        """The public expected lot size: a constant, whatever the lot or the dataset."""
        return float(self.lot_size)

    def apply(self, net: nn.Module, release: Grads, x: torch.Tensor, y: torch.Tensor) -> None:
        """The SGD step θ ← θ − η · release."""
        with torch.no_grad():
            for k, p in net.named_parameters():
                p -= self.learning_rate * release[k]

    # -- the run ----------------------------------------------------------------------------
    def step(self, net: nn.Module, x: torch.Tensor, y: torch.Tensor, noise_gen: torch.Generator) -> None:
        """One private step on the lot ``(x, y)`` (which may be empty)."""
        summed = self.clipped_sum(self.per_example_grads(net, x, y))
        noise = self.noise(summed, noise_gen)
        norm = self.normaliser(len(x))
        self.apply(net, {k: (summed[k] + noise[k]) / norm for k in summed}, x, y)

    def train(
        self, dataset: torch.utils.data.Dataset, *, seed: int, initial_state: Mapping[str, torch.Tensor] | None = None
    ) -> nn.Module:
        """Trains :meth:`build`'s model on ``dataset`` (an ``ArrayDataset``); returns it in eval mode."""
        with torch.random.fork_rng():  # the initial weights from ``seed``, the global stream left as it was
            torch.manual_seed(seed)
            net = self.build()
        if initial_state is not None:  # the auditor's start: public, so it costs no privacy
            net.load_state_dict(dict(initial_state))
        net.train()
        features, labels = dataset.features, dataset.labels
        sample_gen = torch.Generator().manual_seed(seed)
        noise_gen = torch.Generator().manual_seed(noise_seed(seed))
        for lot in self.lots(labels, sample_gen):
            x, y = self.inputs(features[lot], labels[lot], sample_gen)
            self.step(net, x, y, noise_gen)
        return net.eval()
