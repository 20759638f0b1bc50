"""Result values of attacks: membership scores and the metrics derived from them.

A :class:`MembershipResult` holds what a membership-inference attack produced against one
target model — one score per queried sample id (higher = more likely a member, always) and
the true membership — plus the attack's configuration. Everything else (ROC curve, AUC,
balanced accuracy, TPR at a fixed FPR, the honest ε lower bound) is *derived* from the scores
by methods here and never stored apart, so a stored result cannot disagree with its metrics
(DESIGN.md, "Values and procedures").

Metrics follow Carlini et al. (2022), "Membership Inference Attacks From First Principles",
§III-B / §IV: the exact ROC curve over all thresholds, TPR at low FPR (0.1 %, 1 %) read off it,
and balanced accuracy at the best threshold. ε_LB comes from
:func:`dpaudit.audit_stats.bound_from_scores` (Clopper–Pearson with a Bonferroni-corrected
threshold choice; ``reference/audit.md`` §1–2), never from the best threshold on raw rates.

On disk a result is ``NAME.json`` (schema-versioned, human-readable) beside ``NAME.npz``
(``sample_ids``, ``scores``, ``is_member``); nothing is pickled. This module imports neither
torch nor anything from ``attacks`` so that reports can render stored results without them.

An :class:`EvasionResult` holds what a white-box evasion attack (``attacks.evasion``) found:
for each of K radii and n examples, whether the model was fooled within that radius, beside
the clean predictions; clean and robust accuracy are derived from these booleans. It is
stored the same way, as ``evasion-ATTACK-NORM.json`` beside ``evasion-ATTACK-NORM.npz``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.store import freeze as _freeze
from dpaudit.store import thaw as _thaw
from dpaudit import _validate as v
from dpaudit.audit_stats import ThresholdBound, bound_from_scores
from dpaudit.store import load_result_files, safe_stem, save_result_files

__all__ = [
    "RESULT_SCHEMA_VERSION",
    "DEFAULT_FPRS",
    "EVASION_NORMS",
    "EvasionResult",
    "MembershipResult",
    "RocCurve",
    "load_evasion_result",
    "load_membership_result",
    "save_evasion_result",
    "save_membership_result",
]

RESULT_SCHEMA_VERSION = 1
#: The false-positive rates at which TPR is reported (Carlini et al. 2022, §IV).
DEFAULT_FPRS: tuple[float, ...] = (0.001, 0.01)
_ARRAYS = ("sample_ids", "scores", "is_member")






def _readonly(arr: np.ndarray) -> np.ndarray:
    arr = np.array(arr, copy=True)
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, kw_only=True)
class RocCurve:
    """An exact ROC curve (every distinct score is a threshold).

    Attributes:
        fpr: false-positive rates, non-decreasing, from 0 to 1.
        tpr: true-positive rates, non-decreasing, from 0 to 1.
        thresholds: score thresholds (guess member when score ≥ threshold); the first is +inf.
    """

    fpr: np.ndarray
    tpr: np.ndarray
    thresholds: np.ndarray


@dataclass(frozen=True, kw_only=True, eq=False)
class MembershipResult:
    """Scores of one membership-inference attack against one target model.

    Attributes:
        attack: attack name (``"loss"``, ``"lira"``, ``"rmia-offline"``, …).
        model_id: id of the attacked (target) model.
        sample_ids: int64 ids of the queried samples, unique.
        scores: float64 membership scores, finite; higher = more likely a member.
        is_member: bool ground truth (True = the target trained on the sample).
        config: the attack's parameters as run (JSON-like).
        metadata: anything else worth keeping (timings, shadow ids, target metrics).
        schema_version: version of the stored format.

    Raises:
        TypeError: a field has the wrong type (e.g. float ids, non-bool membership).
        ValueError: shapes disagree, ids repeat, scores are not finite, or only one class
            (members or non-members) is present.
    """

    attack: str
    model_id: str
    sample_ids: np.ndarray
    scores: np.ndarray
    is_member: np.ndarray
    config: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = RESULT_SCHEMA_VERSION

    def __post_init__(self) -> None:
        for name in ("attack", "model_id"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise TypeError(f"{name} must be a non-empty string, got {value!r}")
        if self.schema_version != RESULT_SCHEMA_VERSION:
            raise ValueError(f"schema_version must be {RESULT_SCHEMA_VERSION}, got {self.schema_version!r}")
        ids = np.asarray(self.sample_ids)
        if ids.ndim != 1:
            raise ValueError(f"sample_ids must be 1-D, got shape {ids.shape}")
        if ids.size and ids.dtype.kind not in "iu":
            raise TypeError(f"sample_ids must hold integers, got dtype {ids.dtype}")
        ids = ids.astype(np.int64)
        if np.unique(ids).size != ids.size:
            raise ValueError("sample_ids must not repeat a sample id")
        scores = np.asarray(self.scores)
        if scores.dtype.kind not in "fiu" or scores.dtype == bool:
            raise TypeError(f"scores must be real numbers, got dtype {scores.dtype}")
        scores = scores.astype(np.float64)
        if scores.shape != ids.shape:
            raise ValueError(f"scores must have shape {ids.shape} (one per sample id), got {scores.shape}")
        if not np.all(np.isfinite(scores)):
            bad = scores[~np.isfinite(scores)][:3].tolist()
            raise ValueError(f"scores must be finite, got e.g. {bad}")
        member = np.asarray(self.is_member)
        if member.dtype != bool:
            raise TypeError(f"is_member must be a bool array, got dtype {member.dtype}")
        if member.shape != ids.shape:
            raise ValueError(f"is_member must have shape {ids.shape}, got {member.shape}")
        num_in = int(member.sum())
        if num_in == 0 or num_in == member.size:
            raise ValueError(f"is_member must contain both members and non-members, got {num_in} of {member.size} members")
        object.__setattr__(self, "sample_ids", _readonly(ids))
        object.__setattr__(self, "scores", _readonly(scores))
        object.__setattr__(self, "is_member", _readonly(member))
        for name in ("config", "metadata"):
            value = getattr(self, name)
            if not isinstance(value, Mapping):
                raise TypeError(f"{name} must be a mapping, got {type(value).__name__}")
            object.__setattr__(self, name, _freeze(value))

    # ------------------------------------------------------------------ derived metrics
    @property
    def num_members(self) -> int:
        return int(self.is_member.sum())

    @property
    def num_non_members(self) -> int:
        return int(self.is_member.size - self.is_member.sum())

    def roc(self) -> RocCurve:
        """The exact ROC curve from the scores (``sklearn.metrics.roc_curve``, all thresholds kept)."""
        from sklearn.metrics import roc_curve

        fpr, tpr, thr = roc_curve(self.is_member, self.scores, drop_intermediate=False)
        return RocCurve(fpr=_readonly(fpr), tpr=_readonly(tpr), thresholds=_readonly(thr))

    def auc(self) -> float:
        """Area under the ROC curve (0.5 = chance)."""
        from sklearn.metrics import roc_auc_score

        return float(roc_auc_score(self.is_member, self.scores))

    def balanced_accuracy(self) -> float:
        """Best balanced accuracy ½(TPR + 1 − FPR) over thresholds (Carlini et al. 2022, §IV).

        Chosen on the same scores, so it is an optimistic *estimate*, as in the literature.
        """
        curve = self.roc()
        return float(np.max(0.5 * (curve.tpr + 1.0 - curve.fpr)))

    def tpr_at_fpr(self, fpr: float) -> float:
        """The largest TPR over thresholds whose FPR is at most ``fpr`` (exact ROC).

        Args:
            fpr: the false-positive rate, in [0, 1].

        Raises:
            ValueError: ``fpr`` is outside [0, 1].
        """
        fpr = v.real("fpr", fpr)
        if not 0.0 <= fpr <= 1.0:
            raise ValueError(f"fpr must lie in [0, 1], got {fpr!r}")
        curve = self.roc()
        ok = curve.fpr <= fpr
        return float(curve.tpr[ok].max()) if ok.any() else 0.0

    def epsilon_bound(self, *, delta: float = 1e-5, confidence: float = 0.95, num_thresholds: int = 20) -> ThresholdBound:
        """ε_LB from these scores with an honest (Bonferroni) threshold choice.

        Members are the IN observations and non-members the OUT ones
        (``reference/audit.md`` §1–2; :func:`dpaudit.audit_stats.bound_from_scores`).

        Args:
            delta: δ at which the bound holds.
            confidence: confidence of the bound after threshold selection.
            num_thresholds: candidate thresholds (the Bonferroni factor).

        Returns:
            The bound with the chosen threshold and the counts behind it.
        """
        return bound_from_scores(
            self.scores[self.is_member], self.scores[~self.is_member], delta=delta, confidence=confidence, num_thresholds=num_thresholds
        )

    def summary(self, *, fprs: tuple[float, ...] = DEFAULT_FPRS, delta: float = 1e-5, confidence: float = 0.95) -> dict[str, Any]:
        """The metrics of the CLI's ``--json`` output, derived from the scores.

        Returns:
            ``{"auc", "balanced_accuracy", "tpr_at_fpr": {"0.001": …, "0.01": …}, "epsilon_lb",
            "delta", "confidence", "num_members", "num_non_members"}``.
        """
        return {
            "auc": self.auc(),
            "balanced_accuracy": self.balanced_accuracy(),
            "tpr_at_fpr": {f"{f:g}": self.tpr_at_fpr(f) for f in fprs},
            "epsilon_lb": self.epsilon_bound(delta=delta, confidence=confidence).epsilon_lb,
            "delta": delta,
            "confidence": confidence,
            "num_members": self.num_members,
            "num_non_members": self.num_non_members,
        }

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (arrays as lists), readable by :meth:`from_dict`."""
        return {
            "schema_version": self.schema_version,
            "attack": self.attack,
            "model_id": self.model_id,
            "sample_ids": self.sample_ids.tolist(),
            "scores": self.scores.tolist(),
            "is_member": self.is_member.tolist(),
            "config": _thaw(self.config),
            "metadata": _thaw(self.metadata),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MembershipResult:
        """Rebuilds a result written by :meth:`to_dict` (validated).

        Raises:
            TypeError: ``data`` is not a mapping.
            ValueError: a field is missing or the schema version is unknown.
        """
        v.mapping_with("data", data, ("attack", "model_id", *_ARRAYS))
        return cls(
            attack=data["attack"],
            model_id=data["model_id"],
            sample_ids=np.asarray(data["sample_ids"], dtype=np.int64),
            scores=np.asarray(data["scores"], dtype=np.float64),
            is_member=np.asarray(data["is_member"], dtype=bool),
            config=data.get("config", {}),
            metadata=data.get("metadata", {}),
            schema_version=data.get("schema_version", RESULT_SCHEMA_VERSION),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MembershipResult):
            return NotImplemented
        return (
            self.attack == other.attack
            and self.model_id == other.model_id
            and all(np.array_equal(getattr(self, a), getattr(other, a)) for a in _ARRAYS)
            and _thaw(self.config) == _thaw(other.config)
            and _thaw(self.metadata) == _thaw(other.metadata)
        )

    __hash__ = None  # type: ignore[assignment]


def _file_stem(attack: str) -> str:
    return safe_stem(attack, default="attack")


def save_membership_result(result: MembershipResult, directory: str | os.PathLike[str]) -> Path:
    """Writes ``ATTACK.npz`` (arrays) then ``ATTACK.json`` (the rest) atomically into ``directory``.

    The JSON is written last, so a JSON file that exists always has its arrays beside it.

    Returns:
        The path of the JSON file.
    """
    if not isinstance(result, MembershipResult):
        raise TypeError(f"result must be a MembershipResult, got {type(result).__name__}")
    meta = {k: val for k, val in result.to_dict().items() if k not in _ARRAYS}
    return save_result_files(directory, _file_stem(result.attack), arrays={a: getattr(result, a) for a in _ARRAYS}, meta=meta)


def load_membership_result(path: str | os.PathLike[str]) -> MembershipResult:
    """Loads a result written by :func:`save_membership_result` (NPZ read without pickle).

    Args:
        path: the JSON file.

    Raises:
        FileNotFoundError: the JSON or its NPZ is missing.
        ValueError: the files are malformed.
    """
    return MembershipResult.from_dict(load_result_files(path, _ARRAYS))



# ============================================================================= evasion

#: The perturbation norms of the evasion attacks (``attacks.evasion``).
EVASION_NORMS: tuple[str, ...] = ("linf", "l2")
_EVASION_ARRAYS = ("radii", "success", "clean_correct", "max_perturbation")
# A projected example is inside its ball up to float32 rounding of x + δ; anything beyond
# this slack is a broken projection, not rounding.
_PERTURBATION_ATOL = 1e-6
_PERTURBATION_RTOL = 1e-6


@dataclass(frozen=True, kw_only=True, eq=False)
class EvasionResult:
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

    attack: str
    norm: str
    radii: np.ndarray
    success: np.ndarray
    clean_correct: np.ndarray
    max_perturbation: np.ndarray
    config: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = RESULT_SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.attack, str) or not self.attack:
            raise TypeError(f"attack must be a non-empty string, got {self.attack!r}")
        v.choice("norm", self.norm, EVASION_NORMS)
        if self.schema_version != RESULT_SCHEMA_VERSION:
            raise ValueError(f"schema_version must be {RESULT_SCHEMA_VERSION}, got {self.schema_version!r}")
        radii = _real_array("radii", self.radii)
        if radii.ndim != 1 or radii.size == 0:
            raise ValueError(f"radii must be a non-empty 1-D array, got shape {radii.shape}")
        if not np.all(np.isfinite(radii)) or np.any(radii < 0):
            raise ValueError(f"radii must be finite and >= 0, got {_preview(radii)}")
        if np.any(np.diff(radii) <= 0):
            raise ValueError(f"radii must be strictly increasing, got {_preview(radii)}")
        clean = np.asarray(self.clean_correct)
        if clean.dtype != bool:
            raise TypeError(f"clean_correct must be a bool array, got dtype {clean.dtype}")
        if clean.ndim != 1 or clean.size == 0:
            raise ValueError(f"clean_correct must be a non-empty 1-D array, got shape {clean.shape}")
        success = np.asarray(self.success)
        if success.dtype != bool:
            raise TypeError(f"success must be a bool array, got dtype {success.dtype}")
        if success.shape != (radii.size, clean.size):
            raise ValueError(f"success must have shape {(radii.size, clean.size)} (radii × examples), got {success.shape}")
        if np.any(success[:-1] & ~success[1:]):
            k = int(np.argmax(np.any(success[:-1] & ~success[1:], axis=1)))
            raise ValueError(
                f"success must be monotone in the radius (fooled within {radii[k]:g} implies fooled within "
                f"{radii[k + 1]:g}), violated between rows {k} and {k + 1}"
            )
        if np.any(~clean & ~success[0]):
            raise ValueError("success must be True for every example with clean_correct False (the clean input lies in every ball)")
        max_pert = _real_array("max_perturbation", self.max_perturbation)
        if max_pert.shape != radii.shape:
            raise ValueError(f"max_perturbation must have shape {radii.shape} (one per radius), got {max_pert.shape}")
        if not np.all(np.isfinite(max_pert)) or np.any(max_pert < 0):
            raise ValueError(f"max_perturbation must be finite and >= 0, got {_preview(max_pert)}")
        over = max_pert > radii * (1 + _PERTURBATION_RTOL) + _PERTURBATION_ATOL
        if np.any(over):
            k = int(np.argmax(over))
            raise ValueError(f"max_perturbation must not exceed its radius, got {max_pert[k]!r} at radius {radii[k]!r}")
        object.__setattr__(self, "radii", _readonly(radii))
        object.__setattr__(self, "success", _readonly(success))
        object.__setattr__(self, "clean_correct", _readonly(clean))
        object.__setattr__(self, "max_perturbation", _readonly(max_pert))
        if not isinstance(self.config, Mapping):
            raise TypeError(f"config must be a mapping, got {type(self.config).__name__}")
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
            raise ValueError(f"radius must be one of the result's radii {self.radii.tolist()}, got {radius!r}")
        return float(1.0 - self.success[hit[0]].mean())

    def summary(self) -> dict[str, Any]:
        """The metrics of the CLI's ``--json`` output: ``{"attack", "norm", "num_examples",
        "clean_accuracy", "robust_accuracy": {"RADIUS": …}}`` (radii formatted with ``%g``)."""
        return {
            "attack": self.attack,
            "norm": self.norm,
            "num_examples": self.num_examples,
            "clean_accuracy": self.clean_accuracy,
            "robust_accuracy": {f"{r:g}": float(a) for r, a in zip(self.radii, self.robust_accuracy)},
        }

    # ------------------------------------------------------------------ (de)serialisation
    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (arrays as lists), readable by :meth:`from_dict`."""
        return {
            "schema_version": self.schema_version,
            "attack": self.attack,
            "norm": self.norm,
            "radii": self.radii.tolist(),
            "success": self.success.tolist(),
            "clean_correct": self.clean_correct.tolist(),
            "max_perturbation": self.max_perturbation.tolist(),
            "config": _thaw(self.config),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvasionResult:
        """Rebuilds a result written by :meth:`to_dict` (validated).

        Raises:
            TypeError: ``data`` is not a mapping.
            ValueError: a field is missing or the schema version is unknown.
        """
        v.mapping_with("data", data, ("attack", "norm", *_EVASION_ARRAYS))
        return cls(
            attack=data["attack"],
            norm=data["norm"],
            radii=np.asarray(data["radii"], dtype=np.float64),
            success=np.asarray(data["success"], dtype=bool),
            clean_correct=np.asarray(data["clean_correct"], dtype=bool),
            max_perturbation=np.asarray(data["max_perturbation"], dtype=np.float64),
            config=data.get("config", {}),
            schema_version=data.get("schema_version", RESULT_SCHEMA_VERSION),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EvasionResult):
            return NotImplemented
        return (
            self.attack == other.attack
            and self.norm == other.norm
            and all(
                getattr(self, a).shape == getattr(other, a).shape and np.array_equal(getattr(self, a), getattr(other, a))
                for a in _EVASION_ARRAYS
            )
            and _thaw(self.config) == _thaw(other.config)
        )

    __hash__ = None  # type: ignore[assignment]


def _real_array(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype == bool or arr.dtype.kind not in "fiu":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}")
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
        raise TypeError(f"result must be an EvasionResult, got {type(result).__name__}")
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
    return EvasionResult.from_dict(load_result_files(path, _EVASION_ARRAYS))
