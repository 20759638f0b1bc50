"""Evasion results: for each radius and example, whether an attack fooled the model.

An :class:`EvasionResult` holds what a white-box evasion attack (``attacks.evasion``) found:
for each of K radii and n examples, whether the model was fooled within that radius, beside
the clean predictions; clean and robust accuracy are derived from these booleans. On disk it
is ``evasion-ATTACK-NORM.json`` beside ``evasion-ATTACK-NORM.npz``; nothing here imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from dpaudit import _validate as v
from dpaudit.results.membership import RESULT_SCHEMA_VERSION, _file_stem, _readonly
from dpaudit.specs import PlainSpec, spec_field
from dpaudit.store import freeze as _freeze
from dpaudit.store import load_result_files, save_result_files
from dpaudit.store import thaw as _thaw

__all__ = ["EVASION_NORMS", "EvasionFigures", "EvasionResult", "load_evasion_result", "save_evasion_result"]

# ============================================================================= evasion

#: The perturbation norms of the evasion attacks (``attacks.evasion``).
EVASION_NORMS: tuple[str, ...] = ("linf", "l2")
_EVASION_ARRAYS = ("radii", "success", "clean_correct", "max_perturbation")
# A projected example is inside its ball up to float32 rounding of x + δ; anything beyond
# this slack is a broken projection, not rounding.
_PERTURBATION_ATOL = 1e-6
_PERTURBATION_RTOL = 1e-6


@dataclass(frozen=True, kw_only=True, eq=False)
class EvasionResult(PlainSpec):
    """What one white-box evasion attack found against one model, at K radii.

    ``success[k, i]`` says that example ``i`` is misclassified by some input within distance
    ``radii[k]`` (in ``norm``) of it. Because a point inside a smaller ball is inside every
    larger one, success is monotone in the radius, and a clean misclassified example counts
    as a success at every radius (the clean input is in every ball); both are validated, so
    robust accuracy is non-increasing in the radius and never above clean accuracy.

    Attributes:
        attack: attack name (``"fgsm"``, ``"ifgsm"``, ``"pgd"``, ``"mim"``, …).
        norm: the perturbation norm, one of :data:`EVASION_NORMS`.
        radii: (K,) float64 radii, finite, >= 0 and strictly increasing.
        success: (K, n) bool, the model is fooled within ``radii[k]``.
        clean_correct: (n,) bool, the model is right on the unperturbed example.
        max_perturbation: (K,) float64, the largest measured ``norm`` of ``x_adv - x`` over the
            examples the attack produced at each radius (≤ the radius: the attack's contract).
        config: the attack's hyperparameters as run (JSON-like; EOT samples, timings, …).
        schema_version: version of the stored format.

    Raises:
        TypeError: a field has the wrong type (e.g. a non-bool success matrix).
        ValueError: shapes disagree, radii are not increasing, success is not monotone in the
            radius or misses a clean error, or a perturbation exceeds its radius.
    """

    __spec_keys__: ClassVar[tuple[str, ...]] = ("schema_version",)  # then the fields in order

    attack: str
    norm: str
    radii: np.ndarray = spec_field(dtype=np.float64)
    success: np.ndarray = spec_field(dtype=bool)
    clean_correct: np.ndarray = spec_field(dtype=bool)
    max_perturbation: np.ndarray = spec_field(dtype=np.float64)
    # Stored thawed (plain dicts and lists), as the frozen copy cannot be written as JSON.
    config: Mapping[str, object] = spec_field(default_factory=dict, encode=_thaw)
    schema_version: int = RESULT_SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.attack, str) or not self.attack:
            raise v.invalid_type("attack", f"attack must be a non-empty string, got {self.attack!r}")
        v.choice("norm", self.norm, EVASION_NORMS)
        if self.schema_version != RESULT_SCHEMA_VERSION:
            raise v.invalid(
                "schema_version", f"schema_version must be {RESULT_SCHEMA_VERSION}, got {self.schema_version!r}"
            )
        radii = _real_array("radii", self.radii)
        if radii.ndim != 1 or radii.size == 0:
            raise v.invalid("radii", f"radii must be a non-empty 1-D array, got shape {radii.shape}")
        if not np.all(np.isfinite(radii)) or np.any(radii < 0):
            raise v.invalid("radii", f"radii must be finite and >= 0, got {_preview(radii)}")
        if np.any(np.diff(radii) <= 0):
            raise v.invalid("radii", f"radii must be strictly increasing, got {_preview(radii)}")
        clean = np.asarray(self.clean_correct)
        if clean.dtype != bool:
            raise v.invalid_type("clean_correct", f"clean_correct must be a bool array, got dtype {clean.dtype}")
        if clean.ndim != 1 or clean.size == 0:
            raise v.invalid("clean_correct", f"clean_correct must be a non-empty 1-D array, got shape {clean.shape}")
        success = np.asarray(self.success)
        if success.dtype != bool:
            raise v.invalid_type("success", f"success must be a bool array, got dtype {success.dtype}")
        if success.shape != (radii.size, clean.size):
            raise v.invalid(
                "success", f"success must have shape {(radii.size, clean.size)} (radii × examples), got {success.shape}"
            )
        if np.any(success[:-1] & ~success[1:]):
            k = int(np.argmax(np.any(success[:-1] & ~success[1:], axis=1)))
            raise v.invalid(
                "success",
                f"success must be monotone in the radius (fooled within {radii[k]:g} "
                f"implies fooled within {radii[k + 1]:g}), violated between rows {k} and "
                f"{k + 1}",
            )
        if np.any(~clean & ~success[0]):
            raise v.invalid(
                "success",
                "success must be True for every example with clean_correct False (the clean input lies in every ball)",
            )
        max_pert = _real_array("max_perturbation", self.max_perturbation)
        if max_pert.shape != radii.shape:
            raise v.invalid(
                "max_perturbation",
                f"max_perturbation must have shape {radii.shape} (one per radius), got {max_pert.shape}",
            )
        if not np.all(np.isfinite(max_pert)) or np.any(max_pert < 0):
            raise v.invalid("max_perturbation", f"max_perturbation must be finite and >= 0, got {_preview(max_pert)}")
        over = max_pert > radii * (1 + _PERTURBATION_RTOL) + _PERTURBATION_ATOL
        if np.any(over):
            k = int(np.argmax(over))
            raise v.invalid(
                "max_perturbation",
                f"max_perturbation must not exceed its radius, got {max_pert[k]!r} at radius {radii[k]!r}",
            )
        object.__setattr__(self, "radii", _readonly(radii))
        object.__setattr__(self, "success", _readonly(success))
        object.__setattr__(self, "clean_correct", _readonly(clean))
        object.__setattr__(self, "max_perturbation", _readonly(max_pert))
        if not isinstance(self.config, Mapping):
            raise v.invalid_type("config", f"config must be a mapping, got {type(self.config).__name__}")
        object.__setattr__(self, "config", _freeze(self.config))

    # ------------------------------------------------------------------ derived metrics
    @property
    def num_examples(self) -> int:
        """n, the number of attacked examples."""
        return int(self.clean_correct.size)

    @property
    def clean_accuracy(self) -> float:
        """Accuracy on the unperturbed examples."""
        return float(self.clean_correct.mean())

    @property
    def robust_accuracy(self) -> np.ndarray:
        """(K,) accuracy under the attack at each radius (non-increasing, ≤ clean accuracy)."""
        return _readonly(1.0 - self.success.mean(axis=1))

    def robust_accuracy_at(self, radius: float) -> float:
        """Robust accuracy at one of the result's radii.

        Args:
            radius: a radius of :attr:`radii` (matched up to floating-point rounding).

        Raises:
            ValueError: ``radius`` is not one of the radii.
        """
        r = v.real("radius", radius)
        hit = np.flatnonzero(np.isclose(self.radii, r, rtol=1e-9, atol=1e-12))
        if hit.size == 0:
            raise v.invalid("radius", f"radius must be one of the result's radii {self.radii.tolist()}, got {radius!r}")
        return float(1.0 - self.success[hit[0]].mean())

    def summary(self) -> EvasionFigures:
        """The headline metrics (their ``to_dict`` is the CLI's ``--json`` form)."""
        return EvasionFigures(
            attack=self.attack,
            norm=self.norm,
            num_examples=self.num_examples,
            clean_accuracy=self.clean_accuracy,
            robust_accuracy={f"{r:g}": float(a) for r, a in zip(self.radii, self.robust_accuracy)},
        )

    # ------------------------------------------------------------------ (de)serialisation
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EvasionResult):
            return NotImplemented
        return (
            self.attack == other.attack
            and self.norm == other.norm
            and all(
                getattr(self, a).shape == getattr(other, a).shape
                and np.array_equal(getattr(self, a), getattr(other, a))
                for a in _EVASION_ARRAYS
            )
            and _thaw(self.config) == _thaw(other.config)
        )

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, kw_only=True)
class EvasionFigures(PlainSpec):
    """An evasion result's headline metrics (:meth:`EvasionResult.summary`).

    Attributes:
        attack, norm: the attack and the norm of its radii.
        num_examples: examples attacked.
        clean_accuracy: accuracy on the unperturbed examples.
        robust_accuracy: radius (formatted with ``%g``) -> accuracy under the attack.
    """

    attack: str
    norm: str
    num_examples: int
    clean_accuracy: float
    robust_accuracy: Mapping[str, float]


def _real_array(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype == bool or arr.dtype.kind not in "fiu":
        raise v.invalid_type(name, f"{name} must hold real numbers, got dtype {arr.dtype}")
    return arr.astype(np.float64)


def _preview(arr: np.ndarray, k: int = 6) -> str:
    items = arr.ravel()[:k].tolist()
    return f"{items}{' …' if arr.size > k else ''}"


def save_evasion_result(result: EvasionResult, directory: str | os.PathLike[str]) -> Path:
    """Writes ``evasion-ATTACK-NORM.npz`` then ``.json`` atomically into ``directory``.

    The JSON is written last, so a JSON file that exists always has its arrays beside it.

    Returns:
        The path of the JSON file.

    Raises:
        TypeError: ``result`` is not an :class:`EvasionResult`.
    """
    if not isinstance(result, EvasionResult):
        raise v.invalid_type("result", f"result must be an EvasionResult, got {type(result).__name__}")
    meta = {k: val for k, val in result.to_dict().items() if k not in _EVASION_ARRAYS}
    stem = _file_stem(f"evasion-{result.attack}-{result.norm}")
    return save_result_files(directory, stem, arrays={a: getattr(result, a) for a in _EVASION_ARRAYS}, meta=meta)


def load_evasion_result(path: str | os.PathLike[str]) -> EvasionResult:
    """Loads a result written by :func:`save_evasion_result` (NPZ read without pickle).

    Args:
        path: the JSON file.

    Raises:
        FileNotFoundError: the JSON or its NPZ is missing.
        ValueError: the files are malformed.
    """
    stored = load_result_files(path, _EVASION_ARRAYS)
    return EvasionResult.from_dict({k: x for k, x in stored.items() if k != "arrays"})  # "arrays" names the NPZ file
