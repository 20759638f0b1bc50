"""Differentially private PCA in front of DP-SGD (Abadi et al. 2016, §4 "Differentially private PCA"; §5.1).

A Poisson sample (rate ``pca_sampling_rate``) of the members, each flattened and scaled to unit
L2 norm, forms A = XᵀX. Adding or removing one example changes A by xxᵀ, of Frobenius norm
‖x‖² = 1, so releasing A's upper triangle plus iid N(0, σ_p²) noise (mirrored to keep A
symmetric) is a Gaussian mechanism with noise multiplier σ_p = ``pca_noise``. The top-k
eigenvectors of the noisy A are installed in the model's :class:`~dpaudit.models.Projection`;
the cost enters the claim through :func:`defenses.dpsgd.plan.pca_claim`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from defenses.dpsgd.sampling import keyed_uniforms, step_key
from dpaudit import _validate as v
from dpaudit.layers import Projection

__all__ = ["PCAObserver", "dp_pca", "find_projection"]

#: Sees DP-PCA's mechanism input before its noise — the upper triangle (diagonal included) of
#: A = XᵀX, float64 — and may return a replacement (the neighbouring replay, docs/audits/replay.md).
PCAObserver = Callable[[torch.Tensor], "torch.Tensor | None"]


def find_projection(model: nn.Module) -> Projection:
    """The model's one Projection layer, which DP-PCA fills."""
    found = [m for m in model.modules() if isinstance(m, Projection)]
    if len(found) != 1:
        raise v.invalid(
            "model",
            "DP-PCA needs a model with exactly one Projection layer (e.g. "
            f"abadi-mnist with pca_components), found {len(found)}",
        )
    return found[0]


@torch.no_grad()
def dp_pca(
    features: torch.Tensor,
    *,
    num_components: int,
    noise: float,
    sampling_rate: float = 1.0,
    generator: torch.Generator,
    ids: np.ndarray | None = None,
    observer: PCAObserver | None = None,
) -> torch.Tensor:
    """DP-PCA of Abadi et al. (2016, §4): top-k eigenvectors of a noisy XᵀX.

    Args:
        features: (N, …) private examples (flattened here).
        num_components: k.
        noise: σ_p; the upper triangle of XᵀX gets iid N(0, σ_p²), mirrored (sensitivity 1
            after scaling each example to unit L2 norm).
        sampling_rate: Poisson rate of the sample used (1 = all).
        generator: randomness for the sample and the noise (CPU).
        ids: the examples' sample ids (default 0..N-1); an example's coin in the sample depends
            only on the generator's key and its id, so a neighbour draws the same sample up to
            the one record (:mod:`defenses.dpsgd.sampling`).
        observer: sees the upper triangle of A before the noise (:data:`PCAObserver`).

    Returns:
        (k, d) projection matrix whose rows are the top-k eigenvectors.
    """
    k = v.integer("num_components", num_components, minimum=1)
    sigma_p = v.positive("noise", noise)
    q = v.half_open_unit("sampling_rate", sampling_rate)
    x = features.reshape(features.shape[0], -1).to(torch.float64)
    d = x.shape[1]
    if k > d:
        raise v.invalid("num_components", f"num_components must be <= the input dimension {d}, got {k}")
    if q < 1.0:
        pos = np.arange(x.shape[0], dtype=np.int64) if ids is None else np.asarray(ids, dtype=np.int64).reshape(-1)
        if len(pos) != x.shape[0]:
            raise v.invalid("ids", f"ids must name every example ({x.shape[0]}), got {len(pos)}")
        keep = torch.from_numpy(keyed_uniforms(step_key(generator), pos) < q)
        x = x[keep.to(x.device)]
    norms = x.norm(dim=1, keepdim=True)
    x = x / norms.clamp_min(1e-12)  # zero rows stay zero
    a = x.T @ x
    if observer is not None:
        # The mechanism's input is the upper triangle (the noise is drawn there and mirrored).
        replaced = observer(torch.triu(a))
        if replaced is not None:
            a = torch.triu(replaced) + torch.triu(replaced, diagonal=1).T
    upper = torch.triu(torch.randn(d, d, generator=generator, dtype=torch.float64) * sigma_p).to(a.device)
    a = a + upper + torch.triu(upper, diagonal=1).T
    _, vecs = torch.linalg.eigh(a)  # ascending eigenvalues
    return vecs[:, -k:].flip(1).T.contiguous().to(torch.float32)
