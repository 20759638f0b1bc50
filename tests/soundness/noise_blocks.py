"""Random small noise-layer blocks for the soundness properties (sensitivities and certificates).

A block is what :func:`dpaudit.robustness.noise.add_noise_layer` wraps: an optional
standardisation, an optional signed projection (Flatten → :class:`~dpaudit.layers.Projection`
→ reshape, the DP-PCA front of ``abadi-mnist``), then one Linear or Conv1d/2d/3d layer with
random stride, padding, dilation and padding mode. Everything is float64, so a comparison with
brute force tests the mathematics, not float32 rounding.

The reference matrix M is the block's linear part pushed through the identity *here*, by the
definition block(x) − block(0), independently of the library's own paths (|W|·1, the adjoint).
Not a test module: the two soundness files import it as ``tests.soundness.noise_blocks``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import strategies as st
from torch import nn

from dpaudit.layers import Projection, Standardize
from dpaudit.robustness.noise import NoiseLayer

_CONVS = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}
_MAX_SIZE = {1: 9, 2: 5, 3: 3}


@dataclass(frozen=True)
class BlockSpec:
    """What one drawn block is made of (hypothesis shows it when a property fails)."""

    kind: str  # "linear", "conv1d", "conv2d", "conv3d"
    layer_input: tuple[int, ...]  # shape the weight layer sees
    out_features: int  # Linear outputs or Conv channels
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    padding_mode: str
    projection_input: tuple[int, ...] | None  # raw input shape when a projection is in front
    standardize: bool
    nonnegative: bool  # |W|: the L∞ bound is then reached by the all-ones sign vector
    seed: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        return self.projection_input if self.projection_input is not None else self.layer_input


@st.composite
def block_specs(draw: st.DrawFn) -> BlockSpec:
    kind = draw(st.sampled_from(["linear", "conv1d", "conv2d", "conv3d"]))
    if kind == "linear":
        layer_input: tuple[int, ...] = (draw(st.integers(1, 12)),)
        out = draw(st.integers(1, 8))
        kernel = stride = padding = dilation = ()
        mode = "zeros"
    else:
        dims = int(kind[-2])
        channels = draw(st.integers(1, 3 if dims < 3 else 1))
        sizes, kernel_l, stride_l, pad_l, dil_l = [], [], [], [], []
        for _ in range(dims):
            size = draw(st.integers(1, _MAX_SIZE[dims]))
            pad = draw(st.integers(0, 2))
            dil = draw(st.integers(1, 2))
            kmax = (size + 2 * pad - 1) // dil + 1  # the kernel must fit the padded input
            sizes.append(size)
            pad_l.append(pad)
            dil_l.append(dil)
            kernel_l.append(draw(st.integers(1, min(3, kmax))))
            stride_l.append(draw(st.integers(1, 3)))
        layer_input = (channels, *sizes)
        out = draw(st.integers(1, 3))
        kernel, stride, padding, dilation = tuple(kernel_l), tuple(stride_l), tuple(pad_l), tuple(dil_l)
        mode = draw(st.sampled_from(["zeros", "zeros", "circular", "reflect"]))
        # Torch's limits: reflection needs padding < size, circular padding <= size.
        if (mode == "reflect" and any(p >= s for p, s in zip(padding, sizes))) or (
            mode == "circular" and any(p > s for p, s in zip(padding, sizes))
        ):
            mode = "zeros"
    projection_input = None
    if draw(st.booleans()):
        raw = draw(st.integers(1, 14))
        projection_input = (raw,) if draw(st.booleans()) else (1, 1, raw)
    return BlockSpec(
        kind=kind,
        layer_input=layer_input,
        out_features=out,
        kernel=kernel,
        stride=stride,
        padding=padding,
        dilation=dilation,
        padding_mode=mode,
        projection_input=projection_input,
        standardize=draw(st.booleans()),
        nonnegative=draw(st.integers(0, 3)) == 0,
        seed=draw(st.integers(0, 2**31 - 1)),
    )


@dataclass(frozen=True)
class Built:
    noise: NoiseLayer
    input_shape: tuple[int, ...]
    matrix: torch.Tensor  # M, (K, d) float64: the block's linear part
    redistribution: torch.Tensor  # r, (K,) float64, Σ r = K

    @property
    def weighted(self) -> torch.Tensor:
        """diag(r)^{-1/2} M: the matrix whose operator norms the sensitivities are."""
        return self.matrix / self.redistribution.sqrt()[:, None]


def build(spec: BlockSpec, *, noise_std: float = 1.0) -> Built:
    """The noise layer of ``spec`` with random weights and a random r (Σ r = K)."""
    g = torch.Generator().manual_seed(spec.seed)
    mods: list[nn.Module] = []
    if spec.standardize:
        mods.append(Standardize(float(torch.randn(1, generator=g)), float(torch.rand(1, generator=g)) + 0.1))
    if spec.projection_input is not None:
        raw = math.prod(spec.projection_input)
        proj = Projection(raw, math.prod(spec.layer_input))
        proj.set(torch.randn(proj.matrix.shape, generator=g), torch.randn(raw, generator=g))
        mods += [nn.Flatten(), proj]
        if spec.kind != "linear":
            mods.append(nn.Unflatten(1, spec.layer_input))
    if spec.kind == "linear":
        if spec.projection_input is None:
            mods.append(nn.Flatten())
        mods.append(nn.Linear(spec.layer_input[0], spec.out_features))
    else:
        conv = _CONVS[len(spec.kernel)]
        mods.append(
            conv(
                spec.layer_input[0],
                spec.out_features,
                spec.kernel,
                stride=spec.stride,
                padding=spec.padding,
                dilation=spec.dilation,
                padding_mode=spec.padding_mode,
            )
        )
    block = nn.Sequential(*mods).double()
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64))
        weight = mods[-1].weight
        if spec.nonnegative:
            weight.abs_()
        shape = spec.input_shape
        d = math.prod(shape)
        eye = torch.eye(d, dtype=torch.float64).reshape(d, *shape)
        out = block(eye) - block(torch.zeros(1, *shape, dtype=torch.float64))
    out_shape = tuple(out.shape[1:])
    matrix = out.reshape(d, -1).T.contiguous()
    noise = NoiseLayer(block, out_shape).double()
    k = matrix.shape[0]
    r = torch.rand(k, generator=g, dtype=torch.float64) * 3 + 0.05
    r = r * (k / r.sum())
    noise.set_noise(noise_std, r.reshape(out_shape))
    return Built(noise=noise, input_shape=shape, matrix=matrix, redistribution=noise.redistribution.reshape(-1).clone())


def sign_vectors(
    matrix: torch.Tensor, *, exhaustive_up_to: int = 12, num_random: int = 256, ascent_steps: int = 10, seed: int = 0
) -> torch.Tensor:
    """Corners of the unit L∞ ball worth trying on the weighted matrix A (rows are vectors).

    All 2^d corners when d ≤ ``exhaustive_up_to`` (then the best of them *is* the exact
    L∞ → L2 norm); otherwise every row's own sign pattern and random corners, each improved by
    sign ascent s ← sign(Aᵀ A s), which never decreases ‖A s‖₂ (the objective is convex).
    """
    d = matrix.shape[1]
    if d <= exhaustive_up_to:
        idx = torch.arange(2**d)
        bits = (idx[:, None] >> torch.arange(d)[None, :]) & 1
        return bits.to(torch.float64) * 2 - 1
    g = torch.Generator().manual_seed(seed)
    signs = torch.cat(
        [
            torch.where(matrix >= 0, 1.0, -1.0).to(torch.float64),
            torch.randint(0, 2, (num_random, d), generator=g).to(torch.float64) * 2 - 1,
        ]
    )
    for _ in range(ascent_steps):
        step = (signs @ matrix.T) @ matrix
        signs = torch.where(step >= 0, 1.0, -1.0).to(torch.float64)
    return signs
