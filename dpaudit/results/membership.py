"""Membership-inference results: scores per sample id and everything derived from them.

A :class:`MembershipResult` holds what a membership-inference attack produced against one
target model — one score per queried sample id (higher = more likely a member, always) and
the true membership — plus the attack's configuration. ROC curve, AUC, balanced accuracy,
TPR at a fixed FPR and the honest ε lower bound are *derived* from the scores and never
stored apart (DESIGN.md, "Values and procedures"). Metrics follow Carlini et al. (2022),
§III-B / §IV; ε_LB comes from :func:`dpaudit.privacy.audit_stats.bound_from_scores`
(Clopper–Pearson with a Bonferroni-corrected threshold choice; ``reference/audit.md`` §1–2).

On disk a result is ``NAME.json`` (schema-versioned) beside ``NAME.npz`` (``sample_ids``,
``scores``, ``is_member`` and, when the attack recorded them, ``labels``); nothing is pickled, and
nothing here imports torch. A result stored before labels were kept loads with ``labels=None``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from dpaudit import _validate as v
from dpaudit.privacy.audit_stats import ThresholdBound, bound_from_scores
from dpaudit.specs import PlainSpec, spec_field
from dpaudit.store import freeze as _freeze
from dpaudit.store import load_result_files, safe_stem, save_result_files
from dpaudit.store import thaw as _thaw

__all__ = [
    "RESULT_SCHEMA_VERSION",
    "DEFAULT_FPRS",
    "MembershipResult",
    "MembershipSummary",
    "RocCurve",
    "load_membership_result",
    "save_membership_result",
    "min_non_members",
    "tpr_unresolved",
]

RESULT_SCHEMA_VERSION = 1
#: The false-positive rates at which TPR is reported (Carlini et al. 2022, §IV).
DEFAULT_FPRS: tuple[float, ...] = (0.001, 0.01)
_ARRAYS = ("sample_ids", "scores", "is_member")
#: Arrays a result holds only when the attack recorded them (a stored result may lack them).
_OPTIONAL_ARRAYS = ("labels",)


def min_non_members(fpr: float) -> int:
    """The fewest non-members at which an FPR of ``fpr`` is resolved: ⌈1/fpr⌉.

    With m non-members the empirical FPR moves in steps of 1/m, so below m = 1/f the only
    threshold with FPR ≤ f is the one that flags no non-member at all, and "TPR at FPR f" is
    really TPR at FPR 0 (Carlini et al. 2022, §IV, report TPR at 0.1 % FPR on ≥ 25,000
    non-members).

    Raises:
        ValueError: ``fpr`` is not in (0, 1].
    """
    f = v.real("fpr", fpr)
    if not 0.0 < f <= 1.0:
        raise v.invalid("fpr", f"fpr must lie in (0, 1], got {fpr!r}")
    return max(1, int(np.ceil(1.0 / f - 1e-9)))


def tpr_unresolved(fpr: float, num_non_members: int) -> str | None:
    """Why TPR at ``fpr`` cannot be shown for ``num_non_members`` (``None`` when it can).

    Returns:
        ``"n/a: needs ≥ N non-members (has M)"``, the cell text every report and the CLI show
        in place of the rate, or ``None``.
    """
    need = min_non_members(fpr)
    return None if num_non_members >= need else f"n/a: needs ≥ {need} non-members (has {num_non_members})"


def check_header(result: Any) -> None:
    """The fields every attack result starts with: a non-empty ``attack`` and ``model_id``, a known schema.

    Raises:
        TypeError: ``attack`` or ``model_id`` is not a non-empty string.
        ValueError: ``schema_version`` is not :data:`RESULT_SCHEMA_VERSION`.
    """
    for name in ("attack", "model_id"):
        value = getattr(result, name)
        if not isinstance(value, str) or not value:
            raise TypeError(f"{name} must be a non-empty string, got {value!r}")
    if result.schema_version != RESULT_SCHEMA_VERSION:
        raise v.invalid(None, f"schema_version must be {RESULT_SCHEMA_VERSION}, got {result.schema_version!r}")


def freeze_mappings(result: Any, names: tuple[str, ...] = ("config", "metadata")) -> None:
    """Replaces a frozen result's JSON-like mapping fields by deep read-only copies.

    Raises:
        TypeError: a field is not a mapping.
    """
    for name in names:
        value = getattr(result, name)
        if not isinstance(value, Mapping):
            raise TypeError(f"{name} must be a mapping, got {type(value).__name__}")
        object.__setattr__(result, name, _freeze(value))


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


@dataclass(frozen=True, kw_only=True)
class MembershipSummary(PlainSpec):
    """The metrics of one membership result (:meth:`MembershipResult.metrics`), derived from its scores.

    Its plain form (``to_dict``, keys in field order) is the CLI's ``--json`` output of an attack.

    Attributes:
        auc: area under the ROC curve.
        balanced_accuracy: the best balanced accuracy over thresholds.
        tpr_at_fpr: ``"0.001"`` → TPR at that FPR; ``None`` where the non-members cannot resolve it.
        tpr_at_fpr_notes: the keys of ``tpr_at_fpr`` that are ``None`` → why (``"n/a: needs ≥ …"``).
        epsilon_lb: ε_LB at ``delta`` and ``confidence``.
        delta: δ of the bound.
        confidence: confidence of the bound.
        num_members: members scored.
        num_non_members: non-members scored.
    """

    auc: float
    balanced_accuracy: float
    tpr_at_fpr: Mapping[str, float | None]
    tpr_at_fpr_notes: Mapping[str, str]
    epsilon_lb: float
    delta: float
    confidence: float
    num_members: int
    num_non_members: int


@dataclass(frozen=True, kw_only=True, eq=False)
class MembershipResult(PlainSpec):
    """Scores of one membership-inference attack against one target model.

    Attributes:
        attack: attack name (``"loss"``, ``"lira"``, ``"rmia-offline"``, …).
        model_id: id of the attacked (target) model.
        sample_ids: int64 ids of the queried samples, unique.
        scores: float64 membership scores, finite; higher = more likely a member.
        is_member: bool ground truth (True = the target trained on the sample).
        labels: int64 class of each queried sample, or ``None`` (results stored before attacks
            recorded labels); it gives the per-class breakdown of a report.
        config: the attack's parameters as run (JSON-like).
        metadata: anything else worth keeping (timings, shadow ids, target metrics).
        schema_version: version of the stored format.

    Raises:
        TypeError: a field has the wrong type (e.g. float ids, non-bool membership).
        ValueError: shapes disagree, ids repeat, scores are not finite, or only one class
            (members or non-members) is present.
    """

    __spec_keys__: ClassVar[tuple[str, ...]] = ("schema_version",)  # then the fields in order

    attack: str
    model_id: str
    sample_ids: np.ndarray = spec_field(dtype=np.int64)
    scores: np.ndarray = spec_field(dtype=np.float64)
    is_member: np.ndarray = spec_field(dtype=bool)
    labels: np.ndarray | None = spec_field(default=None, omit="none", dtype=np.int64)
    config: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = RESULT_SCHEMA_VERSION

    def __post_init__(self) -> None:
        check_header(self)
        ids = np.asarray(self.sample_ids)
        if ids.ndim != 1:
            raise v.invalid("sample_ids", f"sample_ids must be 1-D, got shape {ids.shape}")
        if ids.size and ids.dtype.kind not in "iu":
            raise v.invalid_type("sample_ids", f"sample_ids must hold integers, got dtype {ids.dtype}")
        ids = ids.astype(np.int64)
        if np.unique(ids).size != ids.size:
            raise v.invalid("sample_ids", "sample_ids must not repeat a sample id")
        scores = np.asarray(self.scores)
        if scores.dtype.kind not in "fiu" or scores.dtype == bool:
            raise v.invalid_type("scores", f"scores must be real numbers, got dtype {scores.dtype}")
        scores = scores.astype(np.float64)
        if scores.shape != ids.shape:
            raise v.invalid("scores", f"scores must have shape {ids.shape} (one per sample id), got {scores.shape}")
        if not np.all(np.isfinite(scores)):
            bad = scores[~np.isfinite(scores)][:3].tolist()
            raise v.invalid("scores", f"scores must be finite, got e.g. {bad}")
        member = np.asarray(self.is_member)
        if member.dtype != bool:
            raise v.invalid_type("is_member", f"is_member must be a bool array, got dtype {member.dtype}")
        if member.shape != ids.shape:
            raise v.invalid("is_member", f"is_member must have shape {ids.shape}, got {member.shape}")
        num_in = int(member.sum())
        if num_in == 0 or num_in == member.size:
            raise v.invalid(
                "is_member",
                f"is_member must contain both members and non-members, got {num_in} of {member.size} members",
            )
        if self.labels is not None:
            labels = np.asarray(self.labels)
            if labels.shape != ids.shape or (labels.size and labels.dtype.kind not in "iu"):
                raise v.invalid(
                    "labels", f"labels must be integers of shape {ids.shape}, got {labels.dtype} {labels.shape}"
                )
            object.__setattr__(self, "labels", _readonly(labels.astype(np.int64)))
        object.__setattr__(self, "sample_ids", _readonly(ids))
        object.__setattr__(self, "scores", _readonly(scores))
        object.__setattr__(self, "is_member", _readonly(member))
        freeze_mappings(self)

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
            raise v.invalid("fpr", f"fpr must lie in [0, 1], got {fpr!r}")
        curve = self.roc()
        ok = curve.fpr <= fpr
        return float(curve.tpr[ok].max()) if ok.any() else 0.0

    def epsilon_bound(
        self, *, delta: float = 1e-5, confidence: float = 0.95, num_thresholds: int = 20
    ) -> ThresholdBound:
        """ε_LB from these scores with an honest (Bonferroni) threshold choice.

        Members are the IN observations and non-members the OUT ones
        (``reference/audit.md`` §1–2; :func:`dpaudit.privacy.audit_stats.bound_from_scores`).

        Args:
            delta: δ at which the bound holds.
            confidence: confidence of the bound after threshold selection.
            num_thresholds: candidate thresholds (the Bonferroni factor).

        Returns:
            The bound with the chosen threshold and the counts behind it.
        """
        return bound_from_scores(
            self.scores[self.is_member],
            self.scores[~self.is_member],
            delta=delta,
            confidence=confidence,
            num_thresholds=num_thresholds,
        )

    def metrics(
        self, *, fprs: tuple[float, ...] = DEFAULT_FPRS, delta: float = 1e-5, confidence: float = 0.95
    ) -> MembershipSummary:
        """The metrics derived from the scores, typed; :meth:`summary` is their plain form.

        A TPR at an FPR f that fewer than ⌈1/f⌉ non-members cannot resolve
        (:func:`min_non_members`) is ``None``, and ``tpr_at_fpr_notes`` says why.
        """
        notes = {f"{f:g}": note for f in fprs if (note := tpr_unresolved(f, self.num_non_members)) is not None}
        return MembershipSummary(
            auc=self.auc(),
            balanced_accuracy=self.balanced_accuracy(),
            # A rate the sample cannot resolve is null, and ``tpr_at_fpr_notes`` says why.
            tpr_at_fpr={f"{f:g}": (None if f"{f:g}" in notes else self.tpr_at_fpr(f)) for f in fprs},
            tpr_at_fpr_notes=notes,
            epsilon_lb=self.epsilon_bound(delta=delta, confidence=confidence).epsilon_lb,
            delta=delta,
            confidence=confidence,
            num_members=self.num_members,
            num_non_members=self.num_non_members,
        )

    def summary(
        self, *, fprs: tuple[float, ...] = DEFAULT_FPRS, delta: float = 1e-5, confidence: float = 0.95
    ) -> dict[str, Any]:
        """The metrics of the CLI's ``--json`` output, derived from the scores (:meth:`metrics`' plain form).

        Returns:
            ``{"auc", "balanced_accuracy", "tpr_at_fpr": {"0.001": …, "0.01": …},
            "tpr_at_fpr_notes", "epsilon_lb", "delta", "confidence", "num_members",
            "num_non_members"}``. A TPR at an FPR f that fewer than ⌈1/f⌉ non-members cannot
            resolve (:func:`min_non_members`) is ``None``, and ``tpr_at_fpr_notes`` maps its
            key to the reason (``"n/a: needs ≥ 1000 non-members (has 359)"``); the key is
            always present, so a reader never mistakes a missing rate for an unasked one.
        """
        return self.metrics(fprs=fprs, delta=delta, confidence=confidence).to_dict()

    # ------------------------------------------------------------------ (de)serialisation
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MembershipResult):
            return NotImplemented
        return (
            self.attack == other.attack
            and self.model_id == other.model_id
            and all(np.array_equal(getattr(self, a), getattr(other, a)) for a in _ARRAYS)
            and (
                np.array_equal(self.labels, other.labels)
                if self.labels is not None and other.labels is not None
                else self.labels is None and other.labels is None
            )
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
        raise v.invalid_type("result", f"result must be a MembershipResult, got {type(result).__name__}")
    meta = {k: val for k, val in result.to_dict().items() if k not in (*_ARRAYS, *_OPTIONAL_ARRAYS)}
    arrays = {a: getattr(result, a) for a in (*_ARRAYS, *_OPTIONAL_ARRAYS) if getattr(result, a) is not None}
    return save_result_files(directory, _file_stem(result.attack), arrays=arrays, meta=meta)


def load_membership_result(path: str | os.PathLike[str]) -> MembershipResult:
    """Loads a result written by :func:`save_membership_result` (NPZ read without pickle).

    Args:
        path: the JSON file.

    Raises:
        FileNotFoundError: the JSON or its NPZ is missing.
        ValueError: the files are malformed.
    """
    stored = load_result_files(path, (*_ARRAYS, *_OPTIONAL_ARRAYS))
    return MembershipResult.from_dict({k: x for k, x in stored.items() if k != "arrays"})  # "arrays" names the NPZ file
