"""A zoo network built from architecture options held as a mapping (a request's, spec's or record's ``model_options``).

The options travel as data (JSON in a record, plain values to a worker), so their values are only known to be
objects; :func:`dpaudit.models.build_model` takes one of them, ``noise_layer``, as a typed flag. This reads that one
flag out and checks it (as ``build_model`` would), so callers hand over the mapping without loosening its type.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import nn

from dpaudit import _validate as v
from dpaudit.models import build_model

__all__ = ["build_network"]


def build_network(
    model_name: str, *, input_shape: tuple[int, ...], num_classes: int, options: Mapping[str, object]
) -> nn.Module:
    """``build_model(model_name, input_shape=..., num_classes=..., **options)``, with ``options`` as typed as it is.

    Raises:
        TypeError: ``options["noise_layer"]`` is not a bool.
        ValueError: what :func:`~dpaudit.models.build_model` refuses (an unknown name or option, a bad value).
    """
    kwargs = dict(options)
    noise_layer = kwargs.pop("noise_layer", False)
    if not isinstance(noise_layer, bool):
        raise v.invalid_type("noise_layer", f"noise_layer must be a bool, got {noise_layer!r}")
    return build_model(model_name, input_shape=input_shape, num_classes=num_classes, noise_layer=noise_layer, **kwargs)
