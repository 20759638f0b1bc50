"""The trained-model record: claim, membership ground truth, configuration and metrics — no weights, no torch.

A :class:`TrainedModel` is what every defense returns and every attack consumes (DESIGN.md,
"Values and procedures"). On disk it is ``record.json`` (schema-versioned) beside
``model.safetensors`` in its own directory under ``RUN_DIR/records/``; the weights are read
and written by :mod:`dpaudit.weights`, so reports can read records without importing torch.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from dpaudit import _validate as v
from dpaudit._validate import sorted_id_set
from dpaudit.privacy.claims import NonPrivateClaim, PrivacyClaim, claim_from_dict
from dpaudit.specs import PlainSpec, spec_field, spec_from_dict
from dpaudit.store import SCHEMA_VERSION, read_json
from dpaudit.store import freeze as _freeze
from dpaudit.store import thaw as _thaw

__all__ = [
    "Membership",
    "TrainedModel",
    "RECORD_FILE",
    "WEIGHTS_FILE",
    "load_record",
    "resolve_record_dir",
    "make_model_id",
    "weights_digest",
]

RECORD_FILE = "record.json"
WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True, kw_only=True, eq=False)
class Membership(PlainSpec):
    """Membership ground truth of a trained model, by sample id.

    Attributes:
        members: ids the model trained on (canaries excluded).
        non_members: held-out ids from the same distribution, never trained on.
        population: ids left for shadow / reference models (never trained on by the target).
        canaries: ids of inserted canaries that were trained on (audits).
        owners: for a model learned by several data holders (DSSGD's participants), the owner
            of each member, aligned with the sorted ``members``; empty when one party trained.
    """

    members: np.ndarray
    non_members: np.ndarray
    population: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    canaries: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # Left out when empty: single-party records keep their exact bytes.
    owners: np.ndarray = spec_field(default_factory=lambda: np.zeros(0, dtype=np.int64), omit="empty")

    def __post_init__(self) -> None:
        for name in ("members", "non_members", "population", "canaries"):
            object.__setattr__(self, name, sorted_id_set(name, getattr(self, name)))
        seen: dict[str, np.ndarray] = {}
        for name in ("members", "non_members", "population", "canaries"):
            for other, arr in seen.items():
                overlap = np.intersect1d(arr, getattr(self, name))
                if overlap.size:
                    raise v.invalid("record", f"{name} and {other} share sample ids, e.g. {int(overlap[0])}")
            seen[name] = getattr(self, name)
        owners = np.asarray(self.owners)
        if owners.size and (
            owners.ndim != 1
            or owners.shape[0] != self.members.shape[0]
            or not np.issubdtype(owners.dtype, np.integer)
            or int(owners.min()) < 0
        ):
            raise v.invalid(
                "owners",
                "owners must hold one non-negative integer per member "
                f"({self.members.shape[0]}), got "
                f"{owners.shape[0] if owners.ndim == 1 else owners.shape} values",
            )
        owners = owners.astype(np.int64) if owners.size else np.zeros(0, dtype=np.int64)
        owners.setflags(write=False)
        object.__setattr__(self, "owners", owners)

    @classmethod
    def with_owners(cls, partitions: Any, **kwargs: Any) -> Membership:
        """The membership of a model trained by several parties: ``partitions[i]`` holds owner i's ids."""
        ids = [np.asarray(p, dtype=np.int64) for p in partitions]
        members = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
        owner = (
            np.concatenate([np.full(len(p), i, dtype=np.int64) for i, p in enumerate(ids)])
            if ids
            else np.zeros(0, dtype=np.int64)
        )
        order = np.argsort(members, kind="stable")
        return cls(members=members[order], owners=owner[order], **kwargs)

    def owned_by(self, owner: int) -> np.ndarray:
        """The member ids of ``owner`` (all members when the model has no owners recorded)."""
        if not self.owners.size:
            return self.members
        return self.members[self.owners == owner]


def _read_claim(data: Any) -> PrivacyClaim:
    try:
        return claim_from_dict(data)
    except ValueError as exc:
        raise v.invalid("claim", f"claim: {exc}") from None


def _read_membership(data: Any) -> Membership:
    if not isinstance(data, Mapping):
        raise v.invalid_type("membership", f"membership must be a mapping, got {v.short(data)}")
    return Membership.from_dict(data)


@dataclass(frozen=True, kw_only=True, eq=False)
class TrainedModel(PlainSpec):
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
        weights_sha256: SHA-256 (hex) of the weights file, filled in when the record is saved
            with its weights (:func:`dpaudit.weights.save_record`) and checked when they are
            loaded; ``None`` for a record not (yet) saved, or saved before digests existed.
        schema_version: version of the record format.
    """

    __spec_keys__: ClassVar[tuple[str, ...]] = (
        "schema_version",
        "model_id",
        "defense",
        "model_name",
        "model_options",
        "dataset",
        "input_shape",
        "num_classes",
        "config",
        "claim",
        "membership",
        "seed",
        "metrics",
        "provenance",
        "weights_sha256",
    )

    model_id: str
    defense: str
    model_name: str
    model_options: Mapping[str, Any] = field(default_factory=dict)
    dataset: str
    input_shape: tuple[int, ...]
    num_classes: int
    config: Mapping[str, Any] = field(default_factory=dict)
    claim: PrivacyClaim = spec_field(default_factory=NonPrivateClaim, decode=_read_claim)
    membership: Membership = spec_field(decode=_read_membership)
    seed: int
    metrics: Mapping[str, Any] = field(default_factory=dict)
    provenance: Mapping[str, Any] = field(default_factory=dict)
    weights_sha256: str | None = spec_field(default=None, omit="none")
    schema_version: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if (
            not isinstance(self.model_id, str)
            or not self.model_id
            or "/" in self.model_id
            or self.model_id.startswith(".")
        ):
            raise v.invalid("model_id", f"model_id must be a non-empty name without '/', got {v.short(self.model_id)}")
        for name in ("defense", "model_name", "dataset"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise TypeError(f"{name} must be a non-empty string, got {v.short(value)}")
        if not isinstance(self.claim, PrivacyClaim):
            raise v.invalid_type("claim", f"claim must be a PrivacyClaim, got {v.short(self.claim)}")
        if not isinstance(self.membership, Membership):
            raise v.invalid_type("membership", f"membership must be a Membership, got {v.short(self.membership)}")
        v.integer("seed", self.seed, minimum=0)
        v.integer("num_classes", self.num_classes, minimum=2)
        if (
            isinstance(self.input_shape, (str, bytes))
            or not isinstance(self.input_shape, (list, tuple))
            or not self.input_shape
        ):
            raise v.invalid_type(
                "input_shape",
                f"input_shape must be a non-empty list of positive integers, got {v.short(self.input_shape)}",
            )
        object.__setattr__(self, "input_shape", tuple(v.integer("input_shape", x, minimum=1) for x in self.input_shape))
        for name in ("model_options", "config", "metrics", "provenance"):
            if not isinstance(getattr(self, name), Mapping):
                raise TypeError(f"{name} must be a mapping, got {v.short(getattr(self, name))}")
            object.__setattr__(self, name, _freeze(getattr(self, name)))
        if self.weights_sha256 is not None and not _is_sha256(self.weights_sha256):
            raise v.invalid(
                "weights_sha256", f"weights_sha256 must be 64 lowercase hex digits, got {v.short(self.weights_sha256)}"
            )
        self._check_privacy_parameters()

    def _check_privacy_parameters(self) -> None:
        """The privacy parameters a record states outside its claim must be valid too.

        Reports take the δ at which to evaluate the claim from ``metrics``/``config``, and
        ``certify`` reads the noise layer's (ε_r, δ_r, L) from ``config["certification"]``;
        each is validated by its own type (:class:`CertificationSpec` for the latter), so a
        tampered value is refused on load instead of being reported.
        """
        from dpaudit.results.certification_spec import CertificationSpec

        for where in ("config", "metrics"):
            delta = getattr(self, where).get("delta")
            if delta is not None:
                v.open_unit(f"{where}.delta", delta)
        cert = self.config.get("certification")
        if cert is not None:
            if not isinstance(cert, Mapping):
                raise v.invalid_type("config", f"config.certification must be a mapping, got {v.short(cert)}")
            try:
                CertificationSpec.from_dict(_thaw(cert))
            except (ValueError, TypeError) as exc:
                raise v.invalid("config", f"config.certification: {exc}") from None

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> TrainedModel:
        """The record rebuilt from ``record.json``'s form, validating everything (the file may have been edited).

        The fields are read by their types (:class:`~dpaudit.specs.PlainSpec`); the claim is
        rebuilt through its kind's own validator (:func:`claim_from_dict`).

        Raises:
            ValueError: not an object, a missing field, or an invalid value (named, with the value).
            TypeError: a field of the wrong type (named, with the value).
        """
        if not isinstance(data, Mapping):
            raise v.invalid("record", f"record must be a JSON object, got {type(data).__name__}")
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise v.invalid("record", f"record schema_version must be {SCHEMA_VERSION}, got {v.short(version)}")
        missing = [
            k
            for k in (
                "model_id",
                "defense",
                "model_name",
                "dataset",
                "input_shape",
                "num_classes",
                "claim",
                "membership",
                "seed",
            )
            if k not in data
        ]
        if missing:
            raise v.invalid("record", f"record is missing the field {missing[0]!r}")
        return spec_from_dict(cls, data)


def _is_sha256(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def weights_digest(path: str | os.PathLike[str]) -> str:
    """SHA-256 (hex) of a file, read in chunks (what a record stores of its weights file)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def make_model_id(*, defense: str, dataset: str, model_name: str, seed: int, config: Mapping[str, object]) -> str:
    """Stable id: readable prefix plus a hash of the configuration, so reruns find their record."""
    digest = hashlib.sha256(json.dumps(_thaw(_freeze(config)), sort_keys=True, default=str).encode()).hexdigest()[:8]
    safe_model = model_name.replace(":", "_").replace("/", "_")
    return f"{defense}-{dataset}-{safe_model}-seed{seed}-{digest}"


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
        raise v.invalid(
            "target",
            "target must be a record directory, record.json or run directory with "
            f"one record; found none at {str(p)!r}",
        )
    names = ", ".join(r.name for r in records)
    raise v.invalid(
        "target", f"target {str(p)!r} holds {len(records)} records ({names}); name one: {str(p)}/records/NAME"
    )


def load_record(path: str | os.PathLike[str]) -> TrainedModel:
    """Loads and validates a record (see :func:`resolve_record_dir` for what ``path`` may be).

    Every field is checked (:meth:`TrainedModel.from_dict`), the claim through its kind's own
    validator; the weights are checked when they are loaded (:func:`dpaudit.weights.load_model`).

    Raises:
        ValueError: the record file is not valid JSON, not an object, or holds a missing,
            mistyped or invalid field; one line naming the file, the field and the value.
    """
    directory = resolve_record_dir(path)
    file = directory / RECORD_FILE
    data = read_json(file)
    try:
        return TrainedModel.from_dict(data)
    except (ValueError, TypeError) as exc:
        detail = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise v.invalid("record", f"record file {str(file)!r} is invalid: {detail}") from None
