"""Model weights: safetensors out, ``weights_only`` torch loads in, and models rebuilt from records.

Weights never travel as pickle: the suite writes safetensors, and a ``.pt`` file from
elsewhere is read with ``torch.load(weights_only=True)``, which refuses arbitrary Python
objects without running them. A model trained outside the suite is brought in as
``module:function`` (a function that builds the ``nn.Module``) plus a weights file
(:func:`load_external_model`).
"""

from __future__ import annotations

import importlib
import os
import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file as _load_safetensors
from safetensors.torch import save as _save_safetensors
from torch import nn

from dpaudit.models import build_model
from dpaudit.results.record import (
    RECORD_FILE,
    WEIGHTS_FILE,
    TrainedModel,
    resolve_record_dir,
)
from dpaudit.store import atomic_write_bytes, atomic_write_json, read_json
from dpaudit.store import thaw as _thaw

__all__ = [
    "UnsafeWeightsError",
    "build_module",
    "save_record",
    "load_model",
    "load_weights",
    "load_external_model",
    "import_callable",
    "callable_attribute",
]


def build_module(record: TrainedModel) -> nn.Module:
    """A freshly initialised module of this record's architecture (zoo models only)."""
    if record.model_name.startswith("external:"):
        fn = import_callable(record.model_name.removeprefix("external:"), argument="model_name")
        return _call_builder(fn, record.model_name)
    return build_model(record.model_name, input_shape=record.input_shape, num_classes=record.num_classes, **_thaw(record.model_options))


def save_record(record: TrainedModel, model: nn.Module, directory: str | os.PathLike[str]) -> Path:
    """Writes ``record.json`` and ``model.safetensors`` into ``directory`` atomically.

    The weights are written first and the JSON last, so a directory whose ``record.json``
    exists is always complete.

    Returns:
        The record directory.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: t.detach().to("cpu").contiguous() for k, t in model.state_dict().items()}
    atomic_write_bytes(directory / WEIGHTS_FILE, _save_safetensors(state, metadata={"model_id": record.model_id}))
    atomic_write_json(directory / RECORD_FILE, record.to_dict())
    return directory


class UnsafeWeightsError(ValueError):
    """A weights file holds something other than tensors (e.g. pickled Python objects)."""


def load_weights(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """Reads a state dict from ``.safetensors``, or from a ``.pt``/``.pth`` with ``weights_only=True``.

    Raises:
        FileNotFoundError: no such file.
        UnsafeWeightsError: the file carries arbitrary Python objects; none of them is run.
        ValueError: the file is not a state dict of tensors.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file not found: {str(path)!r}")
    if path.suffix == ".safetensors":
        try:
            return _load_safetensors(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise ValueError(f"weights file {str(path)!r} is not a valid safetensors file: {exc}") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsafeWeightsError(
            f"refusing weights file {str(path)!r}: it contains Python objects that are not plain tensors "
            f"(loading it could run code). Save a state_dict or safetensors instead. Detail: {str(exc).splitlines()[0]}"
        ) from None
    except (RuntimeError, EOFError, OSError) as exc:
        raise ValueError(f"weights file {str(path)!r} could not be read as a torch state dict: {exc}") from None
    if isinstance(state, Mapping) and "state_dict" in state and isinstance(state["state_dict"], Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise ValueError(f"weights file {str(path)!r} must hold a state dict of tensors, got {type(state).__name__}")
    return dict(state)


def load_model(record_or_path: TrainedModel | str | os.PathLike[str], *, directory: str | os.PathLike[str] | None = None, device: str | torch.device = "cpu") -> nn.Module:
    """Rebuilds a record's module and loads its weights; returned in eval mode on ``device``."""
    if isinstance(record_or_path, TrainedModel):
        if directory is None:
            raise ValueError("directory is required when passing a TrainedModel")
        record, rdir = record_or_path, Path(directory)
    else:
        rdir = resolve_record_dir(record_or_path)
        record = TrainedModel.from_dict(read_json(rdir / RECORD_FILE))
    model = build_module(record)
    weights = rdir / WEIGHTS_FILE
    state = load_weights(weights)
    owner = _weights_owner(weights)
    if owner is not None and owner != record.model_id:
        # A weights file copied in from another record would otherwise load silently.
        raise ValueError(f"weights file {str(weights)!r} belongs to model {owner!r}, not to the record's model {record.model_id!r}")
    _load_into(model, state, weights)
    return model.to(device).eval()


def _weights_owner(path: Path) -> str | None:
    """The model id :func:`save_record` wrote into a safetensors file's metadata (``None`` if absent)."""
    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata() or {}
    owner = meta.get("model_id")
    return str(owner) if owner is not None else None


def _load_into(model: nn.Module, state: Mapping[str, torch.Tensor], source: Path) -> None:
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise ValueError(f"weights in {str(source)!r} do not fit the model: {str(exc).splitlines()[0]}") from None


def import_callable(spec: str, *, argument: str = "spec") -> Any:
    """Imports ``module:function`` (dotted attribute paths allowed after the colon).

    Raises:
        ValueError: malformed spec, module or attribute not found, or not callable.
    """
    if not isinstance(spec, str) or spec.count(":") != 1 or not all(spec.split(":")):
        raise ValueError(f"{argument} must look like 'module:function', got {spec!r}")
    module_name, attr_path = spec.split(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{argument}={spec!r}: cannot import module {module_name!r} ({exc})") from None
    return callable_attribute(obj, attr_path, label=f"{argument}={spec!r}")


def callable_attribute(obj: Any, attr_path: str, *, label: str) -> Any:
    """``obj.a.b`` for ``attr_path`` "a.b", which must be callable; errors start with ``label``.

    Raises:
        ValueError: an attribute is missing or the result is not callable.
    """
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"{label}: no attribute {attr_path!r} there")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{label} is not callable")
    return obj


def _call_builder(fn: Any, spec: str) -> nn.Module:
    model = fn()
    if not isinstance(model, nn.Module):
        raise ValueError(f"model builder {spec!r} must return a torch.nn.Module, got {type(model).__name__}")
    return model


def load_external_model(spec: str, weights: str | os.PathLike[str], *, device: str | torch.device = "cpu") -> nn.Module:
    """Builds a model with the zero-argument function ``module:function`` and loads ``weights``.

    Args:
        spec: ``module:function`` returning an ``nn.Module``.
        weights: ``.safetensors``, or ``.pt``/``.pth`` holding a state dict (read with
            ``weights_only=True``).
        device: where to put the model.

    Returns:
        The module in eval mode.
    """
    model = _call_builder(import_callable(spec, argument="model"), spec)
    _load_into(model, load_weights(weights), Path(weights))
    return model.to(device).eval()
