"""Model zoo: the architectures the source papers train, built by name.

* ``abadi-mnist`` — Abadi et al. (2016), §5.1: an optional (DP-)PCA projection of the
  flattened image, one hidden layer of 1,000 ReLU units, softmax over 10 classes.
* ``hgm-cnn`` — the MNIST network of Phan et al. (2019, §6) and PixelDP (Lecuyer et al. 2019):
  conv 5×5×32, max-pool, conv 5×5×64, max-pool, FC 256, FC 10.
* ``cifar10-cnn`` — the CIFAR-10 network of Phan et al. (2019, §6): conv 3×3×128,
  conv 5×5×128, conv 5×5×256 (pooled), FC 256, with GroupNorm.
* ``digits-mlp`` — a small MLP for scikit-learn's 8×8 digits, the embedded default.
* ``faces-mlp`` — Fredrikson et al. (2015, §5)'s face-recognition MLP (3,000 sigmoid
  hidden units) for the AT&T faces, the classic model-inversion target.
* ``tabular-mlp`` — a two-layer MLP for tabular data (UCI Adult).

None uses BatchNorm: its statistics mix examples of a batch, which breaks per-example
gradient clipping in DP-SGD. GroupNorm normalises within an example instead.

Sizes are bounded: :func:`build_model` first builds the architecture on PyTorch's ``meta``
device (shapes only, no memory) and refuses one with more than :data:`MAX_MODEL_PARAMETERS`
parameter and buffer elements, so an option such as ``hidden=10**12`` (a record's
``model_options`` edited by hand) is an error naming the option, not an allocation of terabytes.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from dpaudit import _validate as v
from dpaudit.robustness.noise import add_noise_layer

__all__ = ["MODELS", "MAX_MODEL_PARAMETERS", "ModelSpec", "build_model", "count_parameters", "Projection"]

#: Most parameter + buffer elements a zoo model may have: 2**31 (8 GiB as float32, already
#: far beyond any architecture of the source papers; the largest default, cifar10-cnn on
#: 32×32 inputs, has about 5 million).
MAX_MODEL_PARAMETERS = 2**31


class Projection(nn.Module):
    """A fixed linear projection x ↦ (x − mean) Pᵀ, e.g. (DP-)PCA onto k components.

    The projection and mean are buffers, not parameters: they are released once (with their
    own privacy cost) and not trained.
    """

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.register_buffer("matrix", torch.eye(out_features, in_features))
        self.register_buffer("mean", torch.zeros(in_features))

    def set(self, matrix: torch.Tensor, mean: torch.Tensor | None = None) -> None:
        """Installs a projection matrix of shape (out_features, in_features)."""
        if tuple(matrix.shape) != tuple(self.matrix.shape):
            raise ValueError(f"matrix must have shape {tuple(self.matrix.shape)}, got {tuple(matrix.shape)}")
        self.matrix.copy_(matrix)
        if mean is not None:
            self.mean.copy_(mean)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) @ self.matrix.T


def _flat(shape: tuple[int, ...]) -> int:
    return int(math.prod(shape))


def _abadi_mnist(input_shape: tuple[int, ...], num_classes: int, *, pca_components: int | None = None, hidden: int = 1000) -> nn.Module:
    hidden = v.integer("hidden", hidden, minimum=1)
    d = _flat(input_shape)
    layers: list[nn.Module] = [nn.Flatten()]
    if pca_components is not None:
        k = v.integer("pca_components", pca_components, minimum=1)
        if k > d:
            raise ValueError(f"pca_components must be <= the input dimension {d}, got {k}")
        layers.append(Projection(d, k))
        d = k
    layers += [nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, num_classes)]
    return nn.Sequential(*layers)


def _conv_out(size: int, kernel: int, pad: int) -> int:
    return size + 2 * pad - kernel + 1


def _hgm_cnn(input_shape: tuple[int, ...], num_classes: int, *, hidden: int = 256) -> nn.Module:
    if len(input_shape) != 3:
        raise ValueError(f"hgm-cnn needs image inputs (C, H, W), got input_shape={input_shape!r}")
    hidden = v.integer("hidden", hidden, minimum=1)
    c, h, w = input_shape
    # 'same' padding as in the TensorFlow original, two 2×2 pools.
    h2, w2 = h // 2 // 2, w // 2 // 2
    return nn.Sequential(
        nn.Conv2d(c, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * h2 * w2, hidden),
        nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )


def _cifar10_cnn(input_shape: tuple[int, ...], num_classes: int, *, width: int = 128, hidden: int = 256) -> nn.Module:
    if len(input_shape) != 3:
        raise ValueError(f"cifar10-cnn needs image inputs (C, H, W), got input_shape={input_shape!r}")
    width = v.integer("width", width, minimum=4)  # GroupNorm needs at least one group of width // 4
    hidden = v.integer("hidden", hidden, minimum=1)
    c, h, w = input_shape
    return nn.Sequential(
        nn.Conv2d(c, width, 3, padding=1),
        nn.GroupNorm(min(32, width // 4), width),
        nn.ReLU(),
        nn.Conv2d(width, width, 5, padding=2),
        nn.GroupNorm(min(32, width // 4), width),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 5, padding=2),
        nn.GroupNorm(min(32, width // 2), 2 * width),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(2 * width * (h // 4) * (w // 4), hidden),
        nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )


def _mlp(input_shape: tuple[int, ...], num_classes: int, *, hidden: int = 128, activation: str = "relu") -> nn.Module:
    hidden = v.integer("hidden", hidden, minimum=1)
    act = {"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[v.choice("activation", activation, ("relu", "tanh", "sigmoid"))]
    return nn.Sequential(nn.Flatten(), nn.Linear(_flat(input_shape), hidden), act(), nn.Linear(hidden, num_classes))


def _faces_mlp(input_shape: tuple[int, ...], num_classes: int, *, hidden: int = 3000, activation: str = "sigmoid") -> nn.Module:
    return _mlp(input_shape, num_classes, hidden=hidden, activation=activation)


def _tabular_mlp(input_shape: tuple[int, ...], num_classes: int, *, hidden: int = 64) -> nn.Module:
    hidden = v.integer("hidden", hidden, minimum=1)
    d = _flat(input_shape)
    return nn.Sequential(nn.Flatten(), nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A zoo entry: the builder and what it is meant for."""

    name: str
    builder: Callable[..., nn.Module]
    summary: str


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        ModelSpec(name="abadi-mnist", builder=_abadi_mnist, summary="[PCA k →] 1000 ReLU → classes (Abadi et al. 2016)"),
        ModelSpec(name="hgm-cnn", builder=_hgm_cnn, summary="conv5×5×32, pool, conv5×5×64, pool, FC256, FC (Phan et al. 2019)"),
        ModelSpec(name="cifar10-cnn", builder=_cifar10_cnn, summary="conv3×3×128, conv5×5×128, conv5×5×256 + GroupNorm, FC256 (Phan et al. 2019)"),
        ModelSpec(name="digits-mlp", builder=_mlp, summary="64 → 128 ReLU → 10, for 8×8 digits"),
        ModelSpec(name="faces-mlp", builder=_faces_mlp, summary="3000 sigmoid hidden units (Fredrikson et al. 2015)"),
        ModelSpec(name="tabular-mlp", builder=_tabular_mlp, summary="two 64-unit ReLU layers, for tabular data"),
    )
}


def build_model(name: str, *, input_shape: tuple[int, ...], num_classes: int, noise_layer: bool = False, **kwargs: object) -> nn.Module:
    """Builds the zoo model ``name`` for inputs of ``input_shape`` and ``num_classes`` outputs.

    Args:
        name: one of :data:`MODELS`.
        input_shape: shape of one example, e.g. (1, 28, 28).
        num_classes: number of output logits.
        noise_layer: wrap the first layer in a :class:`~dpaudit.robustness.noise.NoiseLayer` (PixelDP /
            HGM; its σ starts at 0 and is set by the defense).
        **kwargs: architecture options of that model (e.g. ``pca_components`` for abadi-mnist).

    Raises:
        ValueError: unknown name or option, an invalid option value, an input shape the
            architecture cannot take, or a model larger than :data:`MAX_MODEL_PARAMETERS`
            (counted before anything is allocated).
    """
    name = v.choice("model", name, MODELS)
    if not isinstance(noise_layer, bool):
        raise TypeError(f"noise_layer must be a bool, got {noise_layer!r}")
    count, shape, num_classes = _count(name, input_shape=input_shape, num_classes=num_classes, options=kwargs)
    if count > MAX_MODEL_PARAMETERS:
        raise ValueError(
            f"model {name!r} with options {_options_text(kwargs)} and input_shape {shape} would have about {count:.3g} parameters "
            f"({_bytes_text(4 * count)} as float32); the limit is MAX_MODEL_PARAMETERS = {MAX_MODEL_PARAMETERS} ({_bytes_text(4 * MAX_MODEL_PARAMETERS)})"
        )
    model = MODELS[name].builder(shape, num_classes, **kwargs)
    return add_noise_layer(model, input_shape=shape) if noise_layer else model


def count_parameters(name: str, *, input_shape: tuple[int, ...], num_classes: int, **kwargs: object) -> int:
    """Parameter and buffer elements the zoo model ``name`` would have, counted without allocating.

    The architecture is built on PyTorch's ``meta`` device, which records shapes but holds no
    data, so even an absurd option costs nothing to measure.

    Raises:
        ValueError: as :func:`build_model` (except the size limit).
    """
    name = v.choice("model", name, MODELS)
    return _count(name, input_shape=input_shape, num_classes=num_classes, options=kwargs)[0]


def _count(name: str, *, input_shape: tuple[int, ...], num_classes: int, options: dict[str, object]) -> tuple[int, tuple[int, ...], int]:
    num_classes = v.integer("num_classes", num_classes, minimum=2)
    try:
        shape = tuple(v.integer("input_shape", x, minimum=1) for x in input_shape)
    except (TypeError, ValueError):
        raise ValueError(f"input_shape must be a non-empty tuple of positive ints, got {input_shape!r}") from None
    if not shape:
        raise ValueError(f"input_shape must be a non-empty tuple of positive ints, got {input_shape!r}")
    builder = MODELS[name].builder
    try:
        inspect.signature(builder).bind(shape, num_classes, **options)
    except TypeError as exc:  # unknown keyword for this architecture
        raise ValueError(f"model {name!r} does not accept options {sorted(options)!r}: {exc}") from None
    try:
        with torch.device("meta"):
            skeleton = builder(shape, num_classes, **options)
    except (TypeError, ValueError, RuntimeError, ArithmeticError) as exc:
        # Every integer option of the zoo counts units (hidden units, channels, components),
        # each with at least one parameter. A size torch cannot even represent (a product past
        # 2**63) makes it fail here; such an option is named with that lower bound.
        for key, value in options.items():
            if isinstance(value, int) and not isinstance(value, bool) and value > MAX_MODEL_PARAMETERS:
                raise ValueError(
                    f"model {name!r}: option {key}={value!r} gives at least {value:.3g} parameters (at least {_bytes_text(4 * value)} as float32); "
                    f"the limit is MAX_MODEL_PARAMETERS = {MAX_MODEL_PARAMETERS} ({_bytes_text(4 * MAX_MODEL_PARAMETERS)})"
                ) from None
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "overflow" in detail.lower():
            raise ValueError(
                f"model {name!r} with options {_options_text(options)} and input_shape {shape} would have more parameters than a 64-bit count holds; "
                f"the limit is MAX_MODEL_PARAMETERS = {MAX_MODEL_PARAMETERS} ({_bytes_text(4 * MAX_MODEL_PARAMETERS)})"
            ) from None
        if isinstance(exc, (TypeError, ValueError)):  # our validators: they name the option and value
            raise type(exc)(f"model {name!r}: {detail}") from None
        raise ValueError(f"model {name!r} cannot be built with options {_options_text(options)} and input_shape {shape}: {detail}") from None
    count = sum(t.numel() for t in skeleton.parameters()) + sum(t.numel() for t in skeleton.buffers())
    return int(count), shape, num_classes


def _options_text(options: dict[str, object]) -> str:
    text = repr(dict(options))
    return text if len(text) <= 120 else text[:117] + "..."


def _bytes_text(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} PB"
