"""Model weights: safetensors out, ``weights_only`` torch loads in, and models rebuilt from records.

Weights never travel as pickle: the suite writes safetensors, and a ``.pt`` file from
elsewhere is read with ``torch.load(weights_only=True)``, which refuses arbitrary Python
objects without running them. A model trained outside the suite is brought in as
``module:function`` (a function that builds the ``nn.Module``) plus a weights file
(:func:`load_external_model`).
"""

from __future__ import annotations

import dataclasses
import hashlib
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

from dpaudit import _validate as v
from dpaudit.callables import resolve_callable
from dpaudit.models import build_model
from dpaudit.results.record import (
    RECORD_FILE,
    WEIGHTS_FILE,
    TrainedModel,
    load_record,
    resolve_record_dir,
    weights_digest,
)
from dpaudit.store import atomic_write_bytes, atomic_write_json
from dpaudit.store import thaw as _thaw

__all__ = [
    "UnsafeWeightsError",
    "build_module",
    "save_record",
    "load_model",
    "load_weights",
    "load_modules",
    "save_modules",
    "load_external_model",
]


def build_module(record: TrainedModel, *, external_builder: str | None = None) -> nn.Module:
    """A freshly initialised module of this record's architecture.

    Args:
        record: the record.
        external_builder: the ``module:function`` / ``file.py:function`` the caller itself was
            given (``--model-fn``). A record naming an external builder is built only when it
            names exactly this one: otherwise a hand-edited ``record.json`` could make loading
            import and call any function.

    Raises:
        ValueError: an external builder the caller did not vouch for, or a bad zoo model.
    """
    if record.model_name.startswith("external:"):
        named = record.model_name.removeprefix("external:")
        if named != external_builder:
            raise v.invalid(
                "model_fn",
                f"model_name {record.model_name!r} names an external builder; it is "
                f"built only for the attack given --model-fn {named!r}",
            )
        return _call_builder(resolve_callable(named, argument="model_name"), record.model_name)
    return build_model(
        record.model_name, input_shape=record.input_shape, num_classes=record.num_classes, **_thaw(record.model_options)
    )


def save_record(record: TrainedModel, model: nn.Module, directory: str | os.PathLike[str]) -> Path:
    """Writes ``record.json`` and ``model.safetensors`` into ``directory`` atomically.

    The weights are written first and the JSON last, so a directory whose ``record.json``
    exists is always complete. The record stores the SHA-256 of the weights file
    (``weights_sha256``), which :func:`load_model` checks.

    Returns:
        The record directory.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    state = {k: t.detach().to("cpu").contiguous() for k, t in model.state_dict().items()}
    blob = _save_safetensors(state, metadata={"model_id": record.model_id})
    atomic_write_bytes(directory / WEIGHTS_FILE, blob)
    stored = dataclasses.replace(record, weights_sha256=hashlib.sha256(blob).hexdigest())
    atomic_write_json(directory / RECORD_FILE, stored.to_dict())
    return directory


def save_modules(path: str | os.PathLike[str], modules: Mapping[str, nn.Module]) -> Path:
    """Writes several modules' weights into one safetensors file, atomically (keys ``NAME.param``).

    For models a run caches that are not records of their own (an inversion attack's evaluation
    classifier, GMI's generator and critic): one file per cached set, read back by
    :func:`load_modules`.
    """
    return save_weights(
        path, {f"{name}.{k}": t for name, module in modules.items() for k, t in module.state_dict().items()}
    )


def save_weights(path: str | os.PathLike[str], state: Mapping[str, torch.Tensor]) -> Path:
    """Writes one state dict as safetensors, atomically (read back with :func:`load_weights`)."""
    return atomic_write_bytes(
        Path(path), _save_safetensors({k: t.detach().to("cpu").contiguous() for k, t in state.items()})
    )


def weights_from_bytes(blob: bytes) -> dict[str, torch.Tensor]:
    """A state dict from safetensors bytes (what :func:`save_weights` writes), e.g. sent to a worker."""
    from safetensors.torch import load as _load_bytes

    if not isinstance(blob, bytes):
        raise v.invalid_type("blob", f"blob must be bytes of a safetensors file, got {type(blob).__name__}")
    try:
        return _load_bytes(blob)
    except (SafetensorError, ValueError) as exc:
        raise v.invalid("weights", f"not a valid safetensors blob ({len(blob)} bytes): {exc}") from None


def load_modules(path: str | os.PathLike[str], modules: Mapping[str, nn.Module]) -> None:
    """Loads what :func:`save_modules` wrote into freshly built ``modules`` (strict, no pickle).

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file does not hold exactly these modules' weights.
    """
    state = load_weights(path)
    for name, module in modules.items():
        prefix = f"{name}."
        _load_into(module, {k[len(prefix) :]: t for k, t in state.items() if k.startswith(prefix)}, Path(path))


class UnsafeWeightsError(v.InvalidArgument):
    """A weights file holds something other than tensors (e.g. pickled Python objects)."""

    argument = "weights"


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
            raise v.invalid("weights", f"weights file {str(path)!r} is not a valid safetensors file: {exc}") from None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise UnsafeWeightsError(
            f"refusing weights file {str(path)!r}: it contains Python objects that are not plain tensors "
            f"(loading it could run code). Save a state_dict or safetensors instead. Detail: {str(exc).splitlines()[0]}"
        ) from None
    except (RuntimeError, EOFError, OSError) as exc:
        raise v.invalid(
            "weights", f"weights file {str(path)!r} could not be read as a torch state dict: {exc}"
        ) from None
    if isinstance(state, Mapping) and "state_dict" in state and isinstance(state["state_dict"], Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        raise v.invalid(
            "weights", f"weights file {str(path)!r} must hold a state dict of tensors, got {type(state).__name__}"
        )
    return dict(state)


def load_model(
    record_or_path: TrainedModel | str | os.PathLike[str],
    *,
    directory: str | os.PathLike[str] | None = None,
    device: str | torch.device = "cpu",
    external_builder: str | None = None,
) -> nn.Module:
    """Rebuilds a record's module and loads its weights, verified; returned in eval mode on ``device``.

    The record is validated (:func:`dpaudit.results.record.load_record`); the weights file
    must exist, carry the record's model id in its metadata and, when the record states one,
    have the record's SHA-256. A record saved before digests existed (no ``weights_sha256``)
    is accepted on the model-id check alone: the digest guards against a file replaced or
    damaged after saving, and such a record simply predates the guard.

    Raises:
        ValueError: an invalid record, a missing, foreign or altered weights file, or weights
            that do not fit the architecture (one line naming the file).
    """
    if isinstance(record_or_path, TrainedModel):
        if directory is None:
            raise v.invalid("directory", "directory is required when passing a TrainedModel")
        record, rdir = record_or_path, Path(directory)
    else:
        rdir = resolve_record_dir(record_or_path)
        record = load_record(rdir)
    weights = rdir / WEIGHTS_FILE
    if not weights.is_file():
        raise v.invalid(
            "target",
            f"record {str(rdir / RECORD_FILE)!r} has no weights file "
            f"{str(weights)!r}; retrain it (dpaudit train ... --force) or restore "
            "the file",
        )
    owner = _weights_owner(weights)
    if owner is not None and owner != record.model_id:
        # A weights file copied in from another record would otherwise load silently.
        raise v.invalid(
            "target",
            f"weights file {str(weights)!r} belongs to model {owner!r}, not to the record's model {record.model_id!r}",
        )
    if record.weights_sha256 is not None:
        digest = weights_digest(weights)
        if digest != record.weights_sha256:
            raise v.invalid(
                "target",
                f"weights file {str(weights)!r} does not match its record (sha256 "
                f"{digest} != {record.weights_sha256}); retrain or restore it",
            )
    try:
        model = build_module(record, external_builder=external_builder)
    except (ValueError, TypeError) as exc:
        raise v.invalid("target", f"record file {str(rdir / RECORD_FILE)!r}: {exc}") from None
    state = load_weights(weights)
    _load_into(model, state, weights)
    return model.to(device).eval()


def _weights_owner(path: Path) -> str | None:
    """The model id :func:`save_record` wrote into a safetensors file's metadata (``None`` if absent)."""
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = fh.metadata() or {}
    except (SafetensorError, OSError, ValueError) as exc:
        raise v.invalid(
            "weights",
            f"weights file {str(path)!r} is not a valid safetensors file: "
            f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
        ) from None
    owner = meta.get("model_id")
    return str(owner) if owner is not None else None


def _load_into(model: nn.Module, state: Mapping[str, torch.Tensor], source: Path) -> None:
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise v.invalid(
            "weights", f"weights in {str(source)!r} do not fit the model: {str(exc).splitlines()[0]}"
        ) from None


def _call_builder(fn: Any, spec: str) -> nn.Module:
    model = fn()
    if not isinstance(model, nn.Module):
        raise v.invalid("model_fn", f"model builder {spec!r} must return a torch.nn.Module, got {type(model).__name__}")
    return model


def load_external_model(spec: str, weights: str | os.PathLike[str], *, device: str | torch.device = "cpu") -> nn.Module:
    """Builds a model with a zero-argument function and loads ``weights``.

    Args:
        spec: ``module:function`` or ``path/to/file.py:function`` returning an ``nn.Module``.
        weights: ``.safetensors``, or ``.pt``/``.pth`` holding a state dict (read with
            ``weights_only=True``).
        device: where to put the model.

    Returns:
        The module in eval mode.
    """
    model = _call_builder(resolve_callable(spec, argument="--model-fn"), spec)
    _load_into(model, load_weights(weights), Path(weights))
    return model.to(device).eval()
