"""Deliberately broken DP-SGD variants: the test that an audit pipeline actually works.

Used only by tests and demos. Each variant is a small hand-written DP-SGD loop (Abadi et al.
2016, Alg. 1: Poisson lots, per-example clipping, Gaussian noise σC, division by the public
expected lot size L = qN) with exactly one planted bug, while it keeps making the correct
claim ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)``. A sound audit must flag every one
of them (ε_LB > ε_UB) and never flag the ``none`` variant. The bugs (docs/audits/statistics.md §6):

``no-clipping``
    per-example gradients are not clipped: the sensitivity is unbounded.
``batch-clipping``
    the lot's *mean* gradient is clipped to C instead of each example's gradient (seen in
    published code): the noisy sum's sensitivity becomes ≈ 2·L·C, not C.
``noise-without-clip-norm``
    the noise is N(0, σ²) instead of N(0, σ²C²): off by the factor C (default C = 5).
``noise-halved``
    the noise is N(0, (σC/2)²): σ lowered 2× while the claim keeps σ.
``lot-size-sensitivity``
    per-example gradients of the *mean* loss (each already divided by L) are clipped to C and
    the sum rescaled by L, so each example's contribution may reach L·C — the per-layer
    sensitivity error of Backpropagation Clipping (Tramèr, Terzis, Steinke, Song, Jagielski
    & Carlini 2022, "Debugging Differential Privacy: A Case Study for Privacy Auditing", §3).
``realised-lot-size``
    the noisy sum is divided by the realised lot size |B| instead of the public expected L:
    the normaliser depends on the data and leaks the lot's cardinality (docs/audits/statistics.md §6).

Every variant supports the white-box hooks of :func:`defenses.dpsgd.training.train_dpsgd`:
``canary_gradient(step)`` adds one more "example's gradient" (treated by the same — possibly
broken — clipping), and ``on_step(step, release, lot_size)`` receives the released update
multiplied by the public constant L (for the correct variant: Σ clip(g_i) + N(0, σ²C²I)).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from dpaudit import _validate as v
from dpaudit.data import ArrayDataset
from dpaudit.privacy.claims import DPClaim, dpsgd_claim
from dpaudit.seeding import derive_seed, torch_generator

__all__ = [
    "PLANTED_BUGS",
    "PlantedConfig",
    "PlantedDPSGD",
    "planted",
    "train_correct",
    "train_no_clipping",
    "train_batch_clipping",
    "train_noise_without_clip_norm",
    "train_noise_halved",
    "train_lot_size_sensitivity",
    "train_realised_lot_size",
]

PLANTED_BUGS = (
    "none",
    "no-clipping",
    "batch-clipping",
    "noise-without-clip-norm",
    "noise-halved",
    "lot-size-sensitivity",
    "realised-lot-size",
)


@dataclass(frozen=True, kw_only=True)
class PlantedConfig:
    """Privacy and training parameters of the planted-bug loops (keyword-only).

    Attributes:
        noise_multiplier: σ claimed (and, except for the noise bug, used).
        clip_norm: C; > 1 so that forgetting to multiply the noise by C matters.
        sampling_rate: Poisson rate q.
        num_steps: T.
        learning_rate: SGD step size.
        hidden: width of the one-hidden-layer MLP.
    """

    noise_multiplier: float = 4.0
    clip_norm: float = 5.0
    sampling_rate: float = 0.05
    num_steps: int = 300
    learning_rate: float = 0.1
    hidden: int = 32

    def __post_init__(self) -> None:
        v.positive("noise_multiplier", self.noise_multiplier)
        v.positive("clip_norm", self.clip_norm)
        v.half_open_unit("sampling_rate", self.sampling_rate)
        v.integer("num_steps", self.num_steps, minimum=1)
        v.positive("learning_rate", self.learning_rate)
        v.integer("hidden", self.hidden, minimum=1)


def _clip(g: torch.Tensor, bound: float) -> torch.Tensor:
    """Rows of ``g`` scaled to L2 norm ≤ ``bound``."""
    norms = g.norm(dim=1, keepdim=True)
    return g * (bound / norms.clamp_min(1e-12)).clamp(max=1.0)


@dataclass(frozen=True, kw_only=True)
class PlantedDPSGD:
    """A DP-SGD loop with the planted ``bug`` (``"none"`` = correct); picklable.

    Attributes:
        bug: one of :data:`PLANTED_BUGS`.
        config: parameters (the claim is built from them, whatever the bug does).
    """

    bug: str = "none"
    config: PlantedConfig = field(default_factory=PlantedConfig)

    def __post_init__(self) -> None:
        v.choice("bug", self.bug, PLANTED_BUGS)
        if not isinstance(self.config, PlantedConfig):
            raise v.invalid_type("config", f"config must be a PlantedConfig, got {type(self.config).__name__}")

    def claim(self) -> DPClaim:
        """The claim the variant makes: correct DP-SGD accounting for (q, σ, T)."""
        c = self.config
        desc = (
            f"DP-SGD q={c.sampling_rate:g} sigma={c.noise_multiplier:g} "
            f"T={c.num_steps} C={c.clip_norm:g} [planted bug: {self.bug}]"
        )
        return dpsgd_claim(
            sampling_rate=c.sampling_rate, noise_multiplier=c.noise_multiplier, num_steps=c.num_steps, description=desc
        )

    def build_model(self, dataset: ArrayDataset, *, seed: int = 0) -> nn.Module:
        """The MLP trained on ``dataset`` (initialised from the ``init`` stream of ``seed``)."""
        d = int(math.prod(dataset.input_shape))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "init"))
            return nn.Sequential(
                nn.Flatten(),
                nn.Linear(d, self.config.hidden),
                nn.ReLU(),
                nn.Linear(self.config.hidden, dataset.num_classes),
            )

    def train(
        self, dataset: ArrayDataset, *, seed: int, initial_state: Mapping[str, torch.Tensor] | None = None
    ) -> nn.Module:
        """The third-party protocol ``train(dataset, *, seed[, initial_state]) -> nn.Module``."""
        return self(dataset, seed=seed, initial_state=initial_state)

    def __call__(
        self,
        dataset: ArrayDataset,
        *,
        seed: int,
        on_step: Callable[[int, dict[str, torch.Tensor], int], None] | None = None,
        canary_gradient: Callable[[int], Mapping[str, torch.Tensor] | None] | None = None,
        initial_state: Mapping[str, torch.Tensor] | None = None,
    ) -> nn.Module:
        """Trains with the planted bug; hooks and ``initial_state`` as in
        :func:`defenses.dpsgd.training.train_dpsgd`."""
        from torch.func import functional_call, grad, vmap

        if not isinstance(dataset, ArrayDataset):
            raise v.invalid_type("dataset", f"dataset must be an ArrayDataset, got {type(dataset).__name__}")
        cfg, bug = self.config, self.bug
        model = self.build_model(dataset, seed=seed)
        if initial_state is not None:
            from defenses.dpsgd.training import load_initial_state

            load_initial_state(model, initial_state)
        names = [n for n, _ in model.named_parameters()]
        shapes = {n: p.shape for n, p in model.named_parameters()}
        sizes = [p.numel() for p in model.parameters()]
        x, y = dataset.features, dataset.labels
        n = len(dataset)
        big_l = cfg.sampling_rate * n  # the public expected lot size
        c, sigma = cfg.clip_norm, cfg.noise_multiplier
        noise_std = sigma if bug == "noise-without-clip-norm" else sigma * c / 2 if bug == "noise-halved" else sigma * c
        lot_gen, noise_gen = torch_generator(seed, "lots"), torch_generator(seed, "noise")

        def loss_one(prm: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            return nn.functional.cross_entropy(functional_call(model, prm, (xi.unsqueeze(0),)), yi.unsqueeze(0))

        per_example = vmap(grad(loss_one), in_dims=(None, 0, 0))
        model.train()
        for step in range(cfg.num_steps):
            lot = torch.nonzero(torch.rand(n, generator=lot_gen) < cfg.sampling_rate).reshape(-1)
            params = {k: p.detach() for k, p in model.named_parameters()}
            rows = []
            if lot.numel():
                g = per_example(params, x[lot], y[lot])
                rows.append(torch.cat([g[k].reshape(lot.numel(), -1) for k in names], dim=1))
            if canary_gradient is not None:
                canary = canary_gradient(step)
                if canary is not None:  # one more example's gradient, treated like the others
                    rows.append(
                        torch.cat(
                            [
                                canary[k].reshape(1, -1).float() if k in canary else torch.zeros(1, shapes[k].numel())
                                for k in names
                            ],
                            dim=1,
                        )
                    )
            grads = torch.cat(rows) if rows else torch.zeros(0, sum(sizes))
            size = grads.shape[0]  # the realised lot size (with the canary)
            if bug == "no-clipping":
                total = grads.sum(0)
            elif bug == "batch-clipping":
                total = big_l * _clip(grads.sum(0, keepdim=True) / big_l, c)[0]
            elif bug == "lot-size-sensitivity":
                total = big_l * _clip(grads / big_l, c).sum(0)
            else:
                total = _clip(grads, c).sum(0)
            noisy = total + torch.randn(total.shape, generator=noise_gen) * noise_std
            divisor = max(size, 1) if bug == "realised-lot-size" else big_l
            update = noisy / divisor
            if on_step is not None:  # the released update times the public constant L
                parts = (update * big_l).split(sizes)
                on_step(step, {k: t.reshape(shapes[k]).clone() for k, t in zip(names, parts)}, int(lot.numel()))
            with torch.no_grad():
                for p, u in zip(model.parameters(), update.split(sizes)):
                    p.sub_(cfg.learning_rate * u.reshape(p.shape))
        model.eval()
        return model


def planted(bug: str, **config: Any) -> PlantedDPSGD:
    """The variant with ``bug`` and the given :class:`PlantedConfig` fields."""
    return PlantedDPSGD(bug=bug, config=PlantedConfig(**config))


def train_correct(
    dataset: ArrayDataset, *, seed: int, initial_state: Mapping[str, torch.Tensor] | None = None
) -> nn.Module:
    """The correct loop (default config): must never be flagged."""
    return PlantedDPSGD(bug="none").train(dataset, seed=seed, initial_state=initial_state)


def train_no_clipping(
    dataset: ArrayDataset, *, seed: int, initial_state: Mapping[str, torch.Tensor] | None = None
) -> nn.Module:
    """Planted bug: per-example gradients not clipped."""
    return PlantedDPSGD(bug="no-clipping").train(dataset, seed=seed, initial_state=initial_state)


def train_batch_clipping(
    dataset: ArrayDataset, *, seed: int, initial_state: Mapping[str, torch.Tensor] | None = None
) -> nn.Module:
    """Planted bug: the lot's mean gradient clipped instead of each example's."""
    return PlantedDPSGD(bug="batch-clipping").train(dataset, seed=seed, initial_state=initial_state)


def train_noise_without_clip_norm(
    dataset: ArrayDataset, *, seed: int, initial_state: Mapping[str, torch.Tensor] | None = None
) -> nn.Module:
    """Planted bug: noise N(0, σ²) instead of N(0, σ²C²)."""
    return PlantedDPSGD(bug="noise-without-clip-norm").train(dataset, seed=seed, initial_state=initial_state)


def train_noise_halved(
    dataset: ArrayDataset, *, seed: int, initial_state: Mapping[str, torch.Tensor] | None = None
) -> nn.Module:
    """Planted bug: σ lowered 2× while the claim keeps it."""
    return PlantedDPSGD(bug="noise-halved").train(dataset, seed=seed, initial_state=initial_state)


def train_lot_size_sensitivity(
    dataset: ArrayDataset, *, seed: int, initial_state: Mapping[str, torch.Tensor] | None = None
) -> nn.Module:
    """Planted bug: sensitivity off by the lot size (Backpropagation Clipping)."""
    return PlantedDPSGD(bug="lot-size-sensitivity").train(dataset, seed=seed, initial_state=initial_state)


def train_realised_lot_size(
    dataset: ArrayDataset, *, seed: int, initial_state: Mapping[str, torch.Tensor] | None = None
) -> nn.Module:
    """Planted bug: division by the realised (data-dependent) lot size."""
    return PlantedDPSGD(bug="realised-lot-size").train(dataset, seed=seed, initial_state=initial_state)
