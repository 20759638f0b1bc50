"""Fixed layers the zoo's networks carry: set once, never trained.

:class:`Projection` is a released (DP-)PCA projection (Abadi et al. 2016, §4);
:class:`Standardize` is a dataset's standardisation folded into the network. Both the model zoo
(:mod:`dpaudit.models`) and the noise layer's sensitivity analysis
(:mod:`dpaudit.robustness.noise`, which must recognise what sits in front of a weight) use them,
so they live apart from both.
"""

from __future__ import annotations

import torch
from torch import nn

from dpaudit import _validate as v

__all__ = ["Projection", "Standardize"]


class Projection(nn.Module):
    """A fixed linear projection x ↦ (x − mean) Pᵀ, e.g. (DP-)PCA onto k components.

    The projection and mean are buffers, not parameters: they are released once (with their
    own privacy cost) and not trained.
    """

    matrix: torch.Tensor
    mean: torch.Tensor

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.register_buffer("matrix", torch.eye(out_features, in_features))
        self.register_buffer("mean", torch.zeros(in_features))

    def set(self, matrix: torch.Tensor, mean: torch.Tensor | None = None) -> None:
        """Installs a projection matrix of shape (out_features, in_features)."""
        if tuple(matrix.shape) != tuple(self.matrix.shape):
            raise v.invalid("matrix", f"matrix must have shape {tuple(self.matrix.shape)}, got {tuple(matrix.shape)}")
        self.matrix.copy_(matrix)
        if mean is not None:
            self.mean.copy_(mean)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) @ self.matrix.T


class Standardize(nn.Module):
    """x ↦ (x − mean) / std with two fixed numbers: a dataset's standardisation inside the network.

    Folding the preprocessing into the model keeps every consumer (evaluation, attacks, reports)
    on the raw inputs the datasets provide. The two numbers are plain attributes, neither
    parameters nor buffers: they come from the record's ``model_options``, so the weights file
    and the flat parameter vector (what DSSGD shares) are those of the network alone.
    """

    def __init__(self, mean: float, std: float) -> None:
        super().__init__()
        self.mean = float(mean)
        self.std = float(std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def extra_repr(self) -> str:
        return f"mean={self.mean:g}, std={self.std:g}"
