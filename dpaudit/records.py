"""Records of trained models: the claim, the membership ground truth and the weights.

A :class:`TrainedModel` is what every defense returns and every attack consumes (DESIGN.md,
"Values and procedures"). On disk it is ``record.json`` (schema-versioned) plus
``model.safetensors`` in its own directory under ``RUN_DIR/records/``. Weights never travel
as pickle: the suite writes safetensors, and a ``.pt`` file from elsewhere is read with
``torch.load(weights_only=True)``, which refuses arbitrary Python objects without running
them.

A model trained outside the suite is brought in as ``module:function`` (a function that
builds the ``nn.Module``) plus a weights file (:func:`load_external_model`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file as _load_safetensors
from safetensors.torch import save as _save_safetensors
from torch import nn

from dpaudit.store import freeze as _freeze
from dpaudit.store import thaw as _thaw
from dpaudit import _validate as v
from dpaudit.data import sorted_id_set
from dpaudit.claims import NonPrivateClaim, PrivacyClaim, claim_from_dict
from dpaudit.models import build_model
from dpaudit.store import SCHEMA_VERSION, atomic_write_bytes, atomic_write_json, read_json

__all__ = [
    "Membership",
    "TrainedModel",
    "UnsafeWeightsError",
    "RECORD_FILE",
    "WEIGHTS_FILE",
    "save_record",
    "load_record",
    "load_model",
    "load_weights",
    "load_external_model",
    "import_callable",
    "callable_attribute",
    "resolve_record_dir",
    "make_model_id",
]

RECORD_FILE = "record.json"
WEIGHTS_FILE = "model.safetensors"






@dataclass(frozen=True, kw_only=True, eq=False)
class Membership:
    """Membership ground truth of a trained model, by sample id.

    Attributes:
        members: ids the model trained on (canaries excluded).
        non_members: held-out ids from the same distribution, never trained on.
        population: ids left for shadow / reference models (never trained on by the target).
        canaries: ids of inserted canaries that were trained on (audits).
    """

    members: np.ndarray
    non_members: np.ndarray
    population: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    canaries: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        for name in ("members", "non_members", "population", "canaries"):
            object.__setattr__(self, name, sorted_id_set(name, getattr(self, name)))
        seen: dict[str, np.ndarray] = {}
        for name in ("members", "non_members", "population", "canaries"):
            for other, arr in seen.items():
                overlap = np.intersect1d(arr, getattr(self, name))
                if overlap.size:
                    raise ValueError(f"{name} and {other} share sample ids, e.g. {int(overlap[0])}")
            seen[name] = getattr(self, name)

    def to_dict(self) -> dict[str, list[int]]:
        return {k: getattr(self, k).tolist() for k in ("members", "non_members", "population", "canaries")}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Membership:
        return cls(**{k: data.get(k, []) for k in ("members", "non_members", "population", "canaries")})


@dataclass(frozen=True, kw_only=True, eq=False)
class TrainedModel:
    """A trained model as the suite knows it: everything but the weights themselves.

    Attributes:
        model_id: unique, stable name (also the record's directory name).
        defense: the defense that trained it ("nonprivate", "dpsgd", …).
        model_name: zoo name, or ``external:module:function`` for a model built elsewhere.
        model_options: keyword options of the architecture (e.g. ``pca_components``).
        dataset: dataset name the model was trained on.
        input_shape: shape of one input example.
        num_classes: number of outputs.
        config: the defense's hyperparameters as run.
        claim: the privacy claim (ε = ∞ for a non-private model, never ``None``).
        membership: which sample ids were members, non-members, population, canaries.
        seed: the root seed of the training run.
        metrics: measured numbers (train/test accuracy, loss, steps, time).
        provenance: versions, git revision, time.
        schema_version: version of the record format.
    """

    model_id: str
    defense: str
    model_name: str
    model_options: Mapping[str, Any] = field(default_factory=dict)
    dataset: str
    input_shape: tuple[int, ...]
    num_classes: int
    config: Mapping[str, Any] = field(default_factory=dict)
    claim: PrivacyClaim = field(default_factory=NonPrivateClaim)
    membership: Membership
    seed: int
    metrics: Mapping[str, Any] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.model_id, str) or not self.model_id or "/" in self.model_id or self.model_id.startswith("."):
            raise ValueError(f"model_id must be a non-empty name without '/', got {self.model_id!r}")
        if not isinstance(self.claim, PrivacyClaim):
            raise TypeError(f"claim must be a PrivacyClaim, got {self.claim!r}")
        if not isinstance(self.membership, Membership):
            raise TypeError(f"membership must be a Membership, got {self.membership!r}")
        v.integer("seed", self.seed, minimum=0)
        v.integer("num_classes", self.num_classes, minimum=2)
        object.__setattr__(self, "input_shape", tuple(int(x) for x in self.input_shape))
        for name in ("model_options", "config", "metrics", "provenance"):
            object.__setattr__(self, name, _freeze(getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (what ``record.json`` holds)."""
        return {
            "schema_version": self.schema_version,
            "model_id": self.model_id,
            "defense": self.defense,
            "model_name": self.model_name,
            "model_options": _thaw(self.model_options),
            "dataset": self.dataset,
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "config": _thaw(self.config),
            "claim": self.claim.to_dict(),
            "membership": self.membership.to_dict(),
            "seed": self.seed,
            "metrics": _thaw(self.metrics),
            "provenance": _thaw(self.provenance),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainedModel:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(f"record schema_version must be {SCHEMA_VERSION}, got {version!r}")
        try:
            return cls(
                model_id=data["model_id"],
                defense=data["defense"],
                model_name=data["model_name"],
                model_options=data.get("model_options", {}),
                dataset=data["dataset"],
                input_shape=tuple(data["input_shape"]),
                num_classes=data["num_classes"],
                config=data.get("config", {}),
                claim=claim_from_dict(data["claim"]),
                membership=Membership.from_dict(data["membership"]),
                seed=data["seed"],
                metrics=data.get("metrics", {}),
                provenance=data.get("provenance", {}),
            )
        except KeyError as exc:
            raise ValueError(f"record is missing the field {exc.args[0]!r}") from None

    def build(self) -> nn.Module:
        """A freshly initialised module of this record's architecture (zoo models only)."""
        if self.model_name.startswith("external:"):
            fn = import_callable(self.model_name.removeprefix("external:"), argument="model_name")
            return _call_builder(fn, self.model_name)
        return build_model(self.model_name, input_shape=self.input_shape, num_classes=self.num_classes, **_thaw(self.model_options))


def make_model_id(*, defense: str, dataset: str, model_name: str, seed: int, config: Mapping[str, Any]) -> str:
    """Stable id: readable prefix plus a hash of the configuration, so reruns find their record."""
    digest = hashlib.sha256(json.dumps(_thaw(_freeze(config)), sort_keys=True, default=str).encode()).hexdigest()[:8]
    safe_model = model_name.replace(":", "_").replace("/", "_")
    return f"{defense}-{dataset}-{safe_model}-seed{seed}-{digest}"


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


def resolve_record_dir(path: str | os.PathLike[str]) -> Path:
    """Finds the record directory that ``path`` points at.

    ``path`` may be a record directory, its ``record.json``, or a run directory that holds
    exactly one record.

    Raises:
        ValueError: nothing, or more than one record, found there (names the path).
    """
    p = Path(path)
    if p.is_file() and p.name == RECORD_FILE:
        return p.parent
    if (p / RECORD_FILE).is_file():
        return p
    records = sorted(q.parent for q in (p / "records").glob(f"*/{RECORD_FILE}")) if p.is_dir() else []
    if len(records) == 1:
        return records[0]
    if not records:
        raise ValueError(f"target must be a record directory, record.json or run directory with one record; found none at {str(p)!r}")
    names = ", ".join(r.name for r in records)
    raise ValueError(f"target {str(p)!r} holds {len(records)} records ({names}); name one: {str(p)}/records/NAME")


def load_record(path: str | os.PathLike[str]) -> TrainedModel:
    """Loads a record (see :func:`resolve_record_dir` for what ``path`` may be)."""
    directory = resolve_record_dir(path)
    return TrainedModel.from_dict(read_json(directory / RECORD_FILE))


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
    model = record.build()
    _load_into(model, load_weights(rdir / WEIGHTS_FILE), rdir / WEIGHTS_FILE)
    return model.to(device).eval()


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
