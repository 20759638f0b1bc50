"""The noise layer of PixelDP / HGM: Gaussian noise after the first (affine) layer.

Lecuyer et al. (2019, "Certified Robustness to Adversarial Examples with Differential
Privacy", §3.2) make the scoring function (ε, δ)-DP with respect to small input changes by
adding Gaussian noise to the output h = W x + b of the network's first layer; Phan et al.
(2019, "Heterogeneous Gaussian Mechanism", Theorem 3) let the noise variance differ per
component: component k gets N(0, σ² r_k) with r_k > 0 and Σ_k r_k = K (K = number of
components). ``r = 1`` is the isotropic mechanism of PixelDP.

The noise layer stores the base standard deviation σ and the redistribution vector r as
buffers, so they travel with the weights (safetensors) and a reloaded model is the same
randomized function. Noise is drawn in training *and* evaluation: the certified prediction is
a property of the randomized function.

**Sensitivity.** The guarantee needs Δ_r = max ‖diag(r)^{-1/2} M δ‖₂ over input changes δ of
norm ≤ 1 (rescaling component k by 1/√r_k makes the noise isotropic; Phan et al. 2019,
Theorem 3), where M is the linear part of the *whole* block in front of the noise: the weight
W composed with whatever precedes it (a standardisation, a DP-PCA Projection P: M = W P). This
is an operator norm of diag(r)^{-1/2} M (Lecuyer et al. 2019, §3.3):

* ``l2``: the spectral norm, computed exactly as √λ_max of the Gram matrix Mᵀ diag(r)^{-1} M
  (built column by column through the block and its adjoint, so it works for any affine
  first layer: Linear, Conv1d/2d/3d with any stride and padding, a Projection in front). When
  the layer has fewer outputs K than inputs d (a linear classifier on 10,304-pixel faces), M
  itself is built, d forward columns, and λ_max taken of the K × K matrix
  diag(r)^{-1/2} M Mᵀ diag(r)^{-1/2}, which has the same nonzero eigenvalues: a 40 × 40
  eigenproblem instead of a 10,304 × 10,304 one (50 s each on a CPU core);
* ``l1``: the largest column L2 norm √(Gram_jj), exact: a convex function on the L1 ball is
  largest at a vertex ±e_j;
* ``linf``: an **upper bound**, √(Σ_k ‖M_k‖₁² / r_k) with M_k the rows of the effective M
  (Hölder: |M_k δ| ≤ ‖M_k‖₁ for ‖δ‖∞ ≤ 1). The exact value, the largest ‖diag(r)^{-1/2} M s‖₂
  over the 2^d sign vectors s, has no tractable form; the bound is reached when one s matches
  the signs of every row, and is at most √K times the exact value (s = sign(M_k) alone gives
  ‖M_k‖₁/√r_k). The row norms must be those of M: with a signed P in front, |W|·(P·1) is
  not ‖(W P)_k‖₁ and can fall far below the true sensitivity.

During training the sensitivity is kept ≤ 1 by a cheap projection (a few warm-started power
iterations, as in spectral normalisation); the final model's sensitivity is then measured
exactly, and the noise is scaled by it when it exceeds 1 — a certificate never rests on the
estimate.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

from dpaudit import _validate as v
from dpaudit.layers import Standardize
from dpaudit.seeding import torch_generator

__all__ = [
    "ATTACK_NORMS",
    "NoiseLayer",
    "authors_heuristic_sensitivity",
    "SensitivityProjector",
    "add_input_noise",
    "add_noise_layer",
    "find_noise_layer",
    "seeded_noise",
    "is_randomized",
    "layer_sensitivity",
    "orthogonalize",
    "redistribution_from_gradients",
]

ATTACK_NORMS = ("l2", "linf", "l1")
_LINEAR_TYPES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


class NoiseLayer(nn.Module):
    """h = layer(x) + σ √r ⊙ z, z ~ N(0, I): the first layer of a PixelDP / HGM network.

    Attributes:
        layer: the affine map in front of the noise (e.g. ``Conv2d`` or ``Flatten → Linear``).
        noise_std: buffer, the base standard deviation σ (0 = no noise).
        redistribution: buffer of h's shape (without batch), the vector r (Σ r = K).
        generator: optional ``torch.Generator`` the noise is drawn from (for reproducible
            Monte Carlo); ``None`` uses torch's default generator.
        enabled: set to ``False`` to evaluate the noise-free function (e.g. to compute r).
        fixed_noise: ``None`` (fresh noise at every forward pass, the mechanism), or one
            standard-normal draw of h's shape reused at every pass (:meth:`fix_noise`; the
            authors' code's training, quirk (c)). Not a buffer: a saved model never keeps it.
        output_scale: a constant the layer's output is multiplied by before the noise (1 = none):
            training's normalisation by 1/Δ_r, folded into the weights before release. Not saved.
    """

    # Declared so type checkers see buffers as tensors (nn.Module's __getattr__ says Tensor | Module).
    noise_std: torch.Tensor
    redistribution: torch.Tensor
    layer: nn.Module

    def __init__(self, layer: nn.Module, output_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.layer = layer
        self.register_buffer("noise_std", torch.tensor(0.0))
        self.register_buffer("redistribution", torch.ones(output_shape))
        self.generator: torch.Generator | None = None
        self.enabled = True
        self.fixed_noise: torch.Tensor | None = None
        # Training-time normalisation h = layer(x) / Δ_r (``normalize`` sensitivity control):
        # a plain float, never saved; the defense folds it into the weights before release.
        self.output_scale = 1.0

    @property
    def output_shape(self) -> tuple[int, ...]:
        return tuple(self.redistribution.shape)

    def set_noise(
        self, noise_std: float, redistribution: torch.Tensor | None = None, *, total: float | None = None
    ) -> None:
        """Installs σ and (optionally) r, validating r > 0 and Σ r = ``total``.

        Args:
            noise_std: σ ≥ 0.
            redistribution: r, of h's shape; ``None`` keeps the installed one.
            total: the sum r must have; ``None`` means K, the number of components (Phan et
                al. 2019, Theorem 3). Another total is only for reproducing the authors' code
                (docs/defenses/noise-layer.md §2 (a), (e)); the mechanism stays calibratable because Δ_r is
                measured with the r actually installed.
        """
        std = v.non_negative("noise_std", noise_std)
        if redistribution is not None:
            r = torch.as_tensor(redistribution, dtype=self.redistribution.dtype)
            if tuple(r.shape) != self.output_shape:
                raise v.invalid(
                    "redistribution", f"redistribution must have shape {self.output_shape}, got {tuple(r.shape)}"
                )
            if not bool(torch.isfinite(r).all()) or bool((r <= 0).any()):
                raise v.invalid("redistribution", "redistribution must be finite and > 0 everywhere")
            k = r.numel()
            wanted = float(k) if total is None else v.positive("total", total)
            got = float(r.sum())
            if not math.isclose(got, wanted, rel_tol=1e-4):
                what = f"the number of components {k}" if total is None else f"total={wanted!r}"
                raise v.invalid("redistribution", f"redistribution must sum to {what}, got {got!r}")
            self.redistribution.copy_(r.to(self.redistribution.device))
        self.noise_std.fill_(std)

    def fix_noise(self, enabled: bool) -> None:
        """Draws one z ~ N(0, I) of h's shape now and reuses it at every forward pass (or stops).

        The authors' TensorFlow code draws the noise layer's training noise once, before
        training, and feeds the same tensor at every step and to every example of a batch
        (docs/defenses/noise-layer.md §2 (c)). That is not the paper's mechanism, which draws fresh noise at
        every pass; it exists to reproduce their training. The draw comes from
        :attr:`generator` (torch's default when ``None``) and is still multiplied by the
        current σ √r, so a noise ramp or a recalibration keeps acting on it.

        Args:
            enabled: ``True`` draws and keeps z; ``False`` forgets it (fresh noise again).
        """
        if not isinstance(enabled, bool):
            raise v.invalid_type("enabled", f"enabled must be a bool, got {enabled!r}")
        if not enabled:
            self.fixed_noise = None
            return
        gen = self.generator
        device = gen.device if gen is not None else self.redistribution.device
        z = torch.randn((1, *self.output_shape), generator=gen, device=device, dtype=self.redistribution.dtype)
        self.fixed_noise = z.to(self.redistribution.device)

    def noise_scale(self) -> torch.Tensor:
        """Per-component standard deviation σ √r_k (shape of h)."""
        return self.noise_std * self.redistribution.sqrt()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.layer(x)
        return self.add_noise(h if self.output_scale == 1.0 else h * self.output_scale)

    def add_noise(self, h: torch.Tensor) -> torch.Tensor:
        """h + σ √r ⊙ z for a batch of first-layer outputs (identity when disabled or σ = 0)."""
        if not self.enabled or float(self.noise_std) == 0.0:
            return h
        if self.fixed_noise is not None:
            return h + self.fixed_noise.to(h.device, h.dtype) * self.noise_scale()
        gen = self.generator
        if gen is not None and gen.device != h.device:
            z = torch.randn(h.shape, generator=gen, device=gen.device, dtype=h.dtype).to(h.device)
        else:
            z = torch.randn(h.shape, generator=gen, device=h.device, dtype=h.dtype)
        return h + z * self.noise_scale()


def find_noise_layer(model: nn.Module) -> NoiseLayer | None:
    """The model's noise layer (``None`` if it has none; an error if it has several)."""
    found = [m for m in model.modules() if isinstance(m, NoiseLayer)]
    if len(found) > 1:
        raise v.invalid("model", f"a model may hold at most one NoiseLayer, found {len(found)}")
    return found[0] if found else None


@contextmanager
def seeded_noise(model: nn.Module, seed: int, *stream: str | int, device: str | torch.device = "cpu") -> Iterator[None]:
    """Within the block, ``model``'s noise layer (if any) draws from a generator derived from
    ``seed`` and ``stream``, so a seeded evaluation of a randomized model is reproducible without
    touching torch's global generator; the layer's own generator is restored afterwards.
    """
    noise = find_noise_layer(model)
    if noise is None:
        yield
        return
    previous = noise.generator
    noise.generator = torch_generator(seed, *stream, device=device)
    try:
        yield
    finally:
        noise.generator = previous


def is_randomized(model: nn.Module) -> bool:
    """Whether ``model``'s output is random (a noise layer with σ > 0 that is enabled).

    Attacks use this to switch to expectation over the noise (averaged gradients).
    """
    layer = find_noise_layer(model)
    return layer is not None and layer.enabled and float(layer.noise_std) > 0


def add_noise_layer(model: nn.Module, *, input_shape: tuple[int, ...]) -> nn.Sequential:
    """Wraps the prefix of a Sequential up to its first Linear/Conv in a :class:`NoiseLayer`.

    Everything in front of the first weight layer (Flatten, a PCA Projection) is affine, so
    the wrapped block is an affine map whose sensitivity :func:`layer_sensitivity` measures.

    Raises:
        ValueError: ``model`` is not a Sequential or has no Linear/Conv layer.
    """
    if not isinstance(model, nn.Sequential):
        raise v.invalid("model", f"noise_layer needs a Sequential zoo model, got {type(model).__name__}")
    mods = list(model)
    idx = next((i for i, m in enumerate(mods) if isinstance(m, _LINEAR_TYPES)), None)
    if idx is None:
        raise v.invalid("model", "noise_layer needs a model with a Linear or Conv layer")
    prefix = mods[: idx + 1]
    block = prefix[0] if len(prefix) == 1 else nn.Sequential(*prefix)
    with torch.no_grad():
        out_shape = tuple(block(torch.zeros(1, *input_shape)).shape[1:])
    return nn.Sequential(NoiseLayer(block, out_shape), *mods[idx + 1 :])


def add_input_noise(model: nn.Module, *, input_shape: tuple[int, ...], noise_std: float) -> nn.Sequential:
    """Randomized smoothing's classifier as a noise-layer model: x ↦ model(x + σ z), z ~ N(0, I).

    Cohen, Rosenfeld & Kolter (2019) smooth a base classifier f with Gaussian noise on the
    input. A :class:`NoiseLayer` around the identity is exactly that noise, so everything
    written for noise-layer models applies unchanged: :func:`~dpaudit.robustness.montecarlo.sample_scores`
    counts the votes CERTIFY needs, :func:`is_randomized` turns the evasion attacks to
    expectation over the noise, and :func:`layer_sensitivity` measures Δ = 1 in L2.

    Args:
        model: the base classifier f (without a noise layer of its own).
        input_shape: shape of one input (without batch).
        noise_std: σ > 0 of the input noise.

    Returns:
        ``Sequential(NoiseLayer(Identity), model)``, on the device of ``model``'s parameters.

    Raises:
        ValueError: σ is not finite and > 0, or ``model`` already holds a noise layer.
    """
    sigma = v.positive("noise_std", noise_std)
    if find_noise_layer(model) is not None:
        raise v.invalid(
            "model", "add_input_noise needs a base model without a noise layer; the model already holds one"
        )
    noise = NoiseLayer(nn.Identity(), tuple(int(d) for d in input_shape))
    noise.set_noise(sigma)
    param = next(iter(model.parameters()), None)
    if param is not None:
        noise.to(param.device)
    return nn.Sequential(noise, model)


def _weight_layer(block: nn.Module) -> nn.Linear | nn.Conv1d | nn.Conv2d | nn.Conv3d:
    mods = [m for m in block.modules() if isinstance(m, (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d))]
    if len(mods) != 1:
        raise v.invalid("model", f"the noise layer's block must hold exactly one Linear/Conv layer, found {len(mods)}")
    return mods[0]


def _linear_part(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """W x without the offset: block(x) − block(0) (the block is affine)."""
    return block(x) - block(torch.zeros_like(x[:1]))


def _basis_chunks(
    input_shape: tuple[int, ...], *, device: torch.device, dtype: torch.dtype, chunk: int
) -> Iterator[torch.Tensor]:
    """The standard basis of the input space, ``chunk`` vectors at a time, each of ``input_shape``."""
    d = int(math.prod(input_shape))
    for start in range(0, d, chunk):
        n = min(d, start + chunk) - start
        basis = torch.zeros(n, d, device=device, dtype=dtype)
        basis[torch.arange(n, device=device), torch.arange(start, start + n, device=device)] = 1.0
        yield basis.reshape(n, *input_shape)


def _gram(
    noise: NoiseLayer, input_shape: tuple[int, ...], *, redistribution: torch.Tensor, chunk: int = 256
) -> torch.Tensor:
    """Mᵀ diag(r)^{-1} M (d × d, float64), column by column through the block and its adjoint.

    M is the block's whole linear part (a Projection in front included), so the Gram matrix is
    that of the map the noise is added to, whatever sits in front of the weight.
    """
    block = noise.layer
    # The layer's buffers sit where its block does; a parameter-free block (the identity in
    # front of smoothing's input noise) has no parameter to ask.
    p = next(block.parameters(), noise.redistribution)
    inv_r = (1.0 / redistribution).to(p.device, p.dtype)
    cols = []
    for basis in _basis_chunks(input_shape, device=p.device, dtype=p.dtype, chunk=chunk):
        basis.requires_grad_(True)
        with torch.enable_grad():
            out = _linear_part(block, basis)
            (adj,) = torch.autograd.grad(out, basis, grad_outputs=(out * inv_r).detach())
        cols.append(adj.reshape(len(basis), -1).detach().to(torch.float64))
    return torch.cat(cols).T  # symmetric; rows or columns alike


def _weight_acts_on_input(block: nn.Module) -> bool:
    """Whether |W|·1 is M's row L1 norms: nothing signed sits between the input and the weight.

    True when the block is the weight layer itself, or a Sequential of Flatten / Identity /
    Standardize (a reshape or a positive scale x/std, whose offset :func:`_linear_part`
    removes) ending in it. A zero-padded Linear/Conv sends every input entry to an output
    component through at most one weight, so the entries of that output's row are those
    weights (or 0) and |W| applied to all-ones sums their absolute values exactly. Anything
    else in front, a PCA Projection P above all, mixes inputs with signs: |W|·(P·1) is then
    neither |W P|·1 nor a bound on it.
    """
    mods = list(block) if isinstance(block, nn.Sequential) else [block]
    *front, last = mods
    if not isinstance(last, _LINEAR_TYPES) or getattr(last, "padding_mode", "zeros") != "zeros":
        return False
    return all(type(m) in (nn.Flatten, nn.Identity) or (isinstance(m, Standardize) and m.std > 0) for m in front)


def _row_l1(noise: NoiseLayer, input_shape: tuple[int, ...], *, chunk: int = 256) -> torch.Tensor:
    """‖M_k‖₁ for every output component k of the block's linear part M (float64, h's shape).

    Exact in both paths. Fast path (:func:`_weight_acts_on_input`): the block with |W| applied
    to an all-ones input, one forward pass. Otherwise M's columns M e_j are pushed through the
    block ``chunk`` basis vectors at a time and |M_kj| summed over j: d forward passes, no more
    than the ``l2`` Gram matrix costs, and the d × K matrix is never held at once.
    """
    block = noise.layer
    p = next(block.parameters(), noise.redistribution)
    if _weight_acts_on_input(block):
        layer = _weight_layer(block)
        saved = layer.weight.data.clone()
        try:
            layer.weight.data.abs_()
            with torch.no_grad():
                rows = _linear_part(block, torch.ones(1, *input_shape, device=p.device, dtype=p.dtype))[0]
        finally:
            layer.weight.data.copy_(saved)
        return rows.abs().to(torch.float64)  # the abs only guards rounding: every term is ≥ 0
    # Keep one chunk's outputs to about 2^24 numbers, whatever K is.
    k = int(math.prod(noise.output_shape))
    step = max(1, min(chunk, 2**24 // max(k, 1)))
    rows = torch.zeros(noise.output_shape, device=p.device, dtype=torch.float64)
    with torch.no_grad():
        for basis in _basis_chunks(input_shape, device=p.device, dtype=p.dtype, chunk=step):
            rows += _linear_part(block, basis).abs().to(torch.float64).sum(0)
    return rows


def _weights_of(noise: NoiseLayer, redistribution: torch.Tensor | None) -> torch.Tensor:
    """The r a sensitivity is weighted by: the installed one, or a validated stand-in."""
    if redistribution is None:
        return noise.redistribution
    r = torch.as_tensor(redistribution, dtype=noise.redistribution.dtype, device=noise.redistribution.device)
    if tuple(r.shape) != noise.output_shape:
        raise v.invalid("redistribution", f"redistribution must have shape {noise.output_shape}, got {tuple(r.shape)}")
    if not bool(torch.isfinite(r).all()) or bool((r <= 0).any()):
        raise v.invalid("redistribution", "redistribution must be finite and > 0 everywhere")
    return r


#: Largest K·d for which :func:`layer_sensitivity` holds the block's matrix M explicitly (float64: 256 MB).
_MAX_EXPLICIT_ENTRIES = 2**25


def layer_sensitivity(
    noise: NoiseLayer, *, input_shape: tuple[int, ...], norm: str = "l2", redistribution: torch.Tensor | None = None
) -> float:
    """Δ_r of the noise layer's block for input changes of unit ``norm`` (see module docstring).

    Exact for ``l2`` (spectral norm) and ``l1`` (largest column norm); for ``linf`` the upper
    bound √(Σ_k ‖M_k‖₁² / r_k) over the rows of the block's effective matrix M (a Projection
    in front included): the row norms in the model's dtype, summed in float64.

    Args:
        noise: the model's noise layer.
        input_shape: shape of one input (without batch).
        norm: the attack norm, one of :data:`ATTACK_NORMS`.
        redistribution: weigh by this r instead of the installed one. Only the authors'-code
            reproduction uses it (docs/defenses/noise-layer.md §2 (a): their calibration assumes noise σ√r_k
            while the layer adds σ r_k); a certificate must use the installed r.
    """
    norm = v.choice("norm", norm, ATTACK_NORMS)
    weights = _weights_of(noise, redistribution)
    if norm == "linf":
        rows = _row_l1(noise, input_shape)
        r = weights.to(rows.device, torch.float64)
        return float(torch.sqrt((rows**2 / r).sum()))
    k, d = int(math.prod(noise.output_shape)), int(math.prod(input_shape))
    if k < d and k * d <= _MAX_EXPLICIT_ENTRIES:
        scaled = _scaled_matrix(noise, input_shape, redistribution=weights)  # d × K: row j is diag(r)^{-1/2} M e_j
        if norm == "l1":
            return float((scaled**2).sum(1).max().sqrt())
        return float(torch.linalg.eigvalsh(scaled.T @ scaled)[-1].clamp_min(0).sqrt())
    gram = _gram(noise, input_shape, redistribution=weights)
    if norm == "l1":
        return float(gram.diagonal().clamp_min(0).max().sqrt())
    return float(torch.linalg.eigvalsh(gram)[-1].clamp_min(0).sqrt())


def _scaled_matrix(
    noise: NoiseLayer, input_shape: tuple[int, ...], *, redistribution: torch.Tensor, chunk: int = 256
) -> torch.Tensor:
    """(diag(r)^{-1/2} M)ᵀ (d × K, float64): the block's linear part, one forward pass per ``chunk`` columns."""
    block = noise.layer
    p = next(block.parameters(), noise.redistribution)
    inv_sqrt_r = redistribution.to(p.device, torch.float64).rsqrt().reshape(-1)
    rows = []
    with torch.no_grad():
        for basis in _basis_chunks(input_shape, device=p.device, dtype=p.dtype, chunk=chunk):
            rows.append(_linear_part(block, basis).reshape(len(basis), -1).to(torch.float64) * inv_sqrt_r)
    return torch.cat(rows)


@torch.no_grad()
def orthogonalize(noise: NoiseLayer, *, scale: float | None = None) -> float:
    """Sets every singular value of the first layer's kernel matrix to ``scale`` (polar projection).

    The kernel matrix is the weight reshaped to (out × fan-in). Replacing it by ``scale``·Q, Q
    the orthogonal factor of its polar decomposition (the nearest matrix with equal singular
    values), keeps the directions it learned and flattens its spectrum. For a stride-1
    convolution with out ≥ fan-in, Qᵀ Q = I makes ‖W x‖² = Σ over output positions of
    ‖scale·patch‖², i.e. scale²·(kh·kw)·‖x‖² for an input whose support stays clear of the
    border: ‖W x‖ = Δ‖x‖, the best signal-to-noise ratio any first layer of sensitivity Δ can
    have. Applied after a DP-SGD step it is post-processing and costs no privacy.

    Q = M (MᵀM)^{-1/2} (or (M Mᵀ)^{-1/2} M when out < fan-in) through the eigendecomposition of
    the smaller Gram matrix, so a wide first layer costs (min dimension)³, not an SVD of M.

    Args:
        noise: the model's noise layer.
        scale: the common singular value; ``None`` takes the current mean singular value.

    Returns:
        The scale used (pass it back on later calls to keep Δ_r constant during training).
    """
    weight = _weight_layer(noise.layer).weight
    m = weight.detach().reshape(weight.shape[0], -1).to(torch.float64)
    tall = m.shape[0] >= m.shape[1]
    gram = m.T @ m if tall else m @ m.T
    eigvals, eigvecs = torch.linalg.eigh(gram)
    eigvals = eigvals.clamp_min(float(eigvals.max()) * 1e-12 + 1e-300)
    if scale is None:
        scale = float(eigvals.sqrt().mean())
    scale = v.positive("scale", scale)
    inv_sqrt = eigvecs @ torch.diag(eigvals.rsqrt()) @ eigvecs.T
    q = m @ inv_sqrt if tall else inv_sqrt @ m
    weight.copy_((scale * q).reshape(weight.shape).to(weight.dtype))
    return scale


@torch.no_grad()
def authors_heuristic_sensitivity(noise: NoiseLayer, *, redistribution: torch.Tensor | None = None) -> float:
    """The Δ_r estimate of Phan et al.'s TensorFlow code: σ_max(W) / √σ_max(R) (docs/defenses/noise-layer.md §2 (b)).

    Their code reshapes the first layer's kernel to a (C_out × fan-in) matrix and r to a
    (C × positions) matrix, and divides the kernel's largest singular value by the square
    root of r's. This is **not** the sensitivity of the layer: for a convolution the operator
    norm can exceed the reshaped kernel's largest singular value (every input pixel feeds up
    to kh·kw output positions), and 1/√σ_max(R) is not max_k 1/√r_k, so the estimate can be
    far below the exact Δ_r (l2) or the bound √(Σ_k ‖W_k‖₁² / r_k) (linf) — noise calibrated
    to it then does not meet (ε_r, δ_r) at L. It exists only to reproduce their numbers.

    For a Linear first layer the same reshapes give σ_max(W) / √‖r‖₂. A PCA Projection in
    front of the weight is ignored, as the authors' networks had none.

    Args:
        noise: the model's noise layer.
        redistribution: the r to use instead of the installed one (their calibration's r).

    Returns:
        The estimate (a float ≥ 0).
    """
    weight = _weight_layer(noise.layer).weight.detach().to(torch.float64)
    r = _weights_of(noise, redistribution).detach().to(torch.float64)
    kernel = torch.linalg.matrix_norm(weight.reshape(weight.shape[0], -1), ord=2)
    spread = torch.linalg.matrix_norm(r.reshape(r.shape[0], -1), ord=2)
    return float(kernel / spread.sqrt())


class SensitivityProjector:
    """Keeps Δ_r ≤ ``bound`` during training by rescaling the first layer's weight.

    ``l2``: a few warm-started power iterations on Wᵀ diag(r)^{-1} W per call (the estimate
    approaches Δ from below; the exact value is measured after training). ``l1``/``linf``:
    the exact value / bound is cheap and used directly.

    ``redistribution`` and ``heuristic`` exist only to reproduce the authors' code
    (docs/defenses/noise-layer.md §2 (a), (b)): weigh Δ_r by another r than the installed one, or replace it by
    :func:`authors_heuristic_sensitivity`.
    """

    def __init__(
        self,
        noise: NoiseLayer,
        *,
        input_shape: tuple[int, ...],
        norm: str = "l2",
        bound: float = 1.0,
        iterations: int = 2,
        redistribution: torch.Tensor | None = None,
        heuristic: bool = False,
    ) -> None:
        self.noise = noise
        self.input_shape = tuple(input_shape)
        self.norm = v.choice("norm", norm, ATTACK_NORMS)
        self.bound = v.positive("bound", bound)
        self.iterations = v.integer("iterations", iterations, minimum=1)
        if not isinstance(heuristic, bool):
            raise v.invalid_type("heuristic", f"heuristic must be a bool, got {heuristic!r}")
        self.heuristic = heuristic
        self.redistribution = None if redistribution is None else _weights_of(noise, redistribution)
        p = next(noise.layer.parameters())
        gen = torch.Generator(device="cpu").manual_seed(0)  # the start vector only affects convergence speed
        self._u = (
            F.normalize(torch.randn(1, *self.input_shape, generator=gen).reshape(1, -1), dim=1)
            .reshape(1, *self.input_shape)
            .to(p.device, p.dtype)
        )

    def estimate(self) -> float:
        if self.heuristic:
            return authors_heuristic_sensitivity(self.noise, redistribution=self.redistribution)
        if self.norm != "l2":
            return layer_sensitivity(
                self.noise, input_shape=self.input_shape, norm=self.norm, redistribution=self.redistribution
            )
        block = self.noise.layer
        inv_r = 1.0 / (self.noise.redistribution if self.redistribution is None else self.redistribution)
        u = self._u
        value = 0.0
        for _ in range(self.iterations):
            x = u.detach().requires_grad_(True)
            with torch.enable_grad():
                out = _linear_part(block, x)
                (adj,) = torch.autograd.grad(out, x, grad_outputs=(out * inv_r).detach())
            value = float(adj.reshape(-1).norm()) ** 0.5  # ‖G u‖ with ‖u‖ = 1 → λ_max from below
            u = (adj / adj.reshape(-1).norm().clamp_min(1e-30)).detach()
        self._u = u
        return value

    @torch.no_grad()
    def project(self) -> float:
        """Rescales the weight so the (estimated) sensitivity is ≤ bound; returns the estimate before."""
        est = self.estimate()
        if est > self.bound:
            _weight_layer(self.noise.layer).weight.mul_(self.bound / est)
        return est


def redistribution_from_gradients(
    gradients: torch.Tensor, *, inflation: float = 0.0, exponent: float = 1.0, total: float | None = None
) -> torch.Tensor:
    """HGM's noise redistribution vector r from forward derivatives (Phan et al. 2019, Eq. 7).

    Components whose loss gradient is consistently signed are the ones an attacker can push
    on; they get more noise. Per component k: a_k = |mean over examples of sign(∂L/∂h_k)|
    (in [0, 1]), raised to ``exponent``; the inflation rate β keeps every component noised,
    r_k ∝ a_k + β, normalised to Σ r = K (the total noise budget of the isotropic mechanism).

    Args:
        gradients: (n, *h_shape) per-example ∂L/∂h from a pre-trained model.
        inflation: β ≥ 0 (β → ∞ recovers r = 1). With β = 0 a component that is never
            pushed in a consistent direction would get r_k = 0; it is floored at 1e-3 · mean.
        exponent: the power applied to a_k (the authors use 2 on CIFAR-10).
        total: Σ r; ``None`` means K (Theorem 3). Another total only reproduces the authors'
            MNIST code, which normalises to 16·16·C for 28·28·C components (docs/defenses/noise-layer.md §2 (e)).

    Returns:
        r with h's shape, r > 0, Σ r = ``total`` (K by default).
    """
    beta = v.non_negative("inflation", inflation)
    power = v.positive("exponent", exponent)
    wanted = None if total is None else v.positive("total", total)
    if gradients.ndim < 2 or gradients.shape[0] == 0:
        raise v.invalid("gradients", f"gradients must be (n, *h_shape) with n >= 1, got shape {tuple(gradients.shape)}")
    a = torch.sign(gradients.detach().to(torch.float64)).mean(0).abs() ** power
    if float(a.max()) == 0.0 and beta == 0.0:
        ones = torch.ones(a.shape, dtype=torch.float32)
        return ones if wanted is None else ones * (wanted / ones.numel())
    scores = a + beta * (float(a.mean()) if float(a.mean()) > 0 else 1.0)
    scores = scores.clamp_min(1e-3 * float(scores.mean()))
    r = scores * ((scores.numel() if wanted is None else wanted) / scores.sum())
    return r.to(torch.float32)
