"""Model-inversion results: one reconstruction per target class, judged by an independent evaluator.

An :class:`InversionResult` holds what one inversion attack (MI-Face, Fredrikson et al. 2015;
GMI, Zhang et al. 2020) recovered from one target model, and how it is judged:

* as the field measures it (Zhang et al. 2020, §4.1): an *evaluation classifier* of another
  architecture, trained on the private data and never the target, ranks each reconstruction —
  attack accuracy top-1 / top-5 is the share of classes whose label is the evaluator's first /
  among its first five for the kept restart; the KNN distance is the distance in the
  evaluator's feature space to the nearest private (member) image of the class, and PSNR is
  measured against that image;
* as the seeds ask (does inversion reveal *members* or only the class average?): per class the
  pixel-space RMS distance of the reconstruction to the class mean of the members, to the
  nearest member and to the nearest held-out non-member of the class; and a membership score
  per candidate, −distance to its class's reconstruction, held as a :class:`MembershipResult`
  so AUC, TPR at low FPR and an honest ε_LB come from the membership machinery.

The images a report shows beside the numbers (class mean, nearest member, nearest non-member)
are stored too, so a report renders from the stored result without recomputing anything. On
disk: ``inversion-ATTACK.json`` beside ``inversion-ATTACK.npz``; nothing here imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit import _validate as v
from dpaudit.results.membership import (
    DEFAULT_FPRS,
    RESULT_SCHEMA_VERSION,
    MembershipResult,
    MembershipSummary,
    _file_stem,
    _readonly,
    check_header,
    freeze_mappings,
)
from dpaudit.specs import PlainSpec, spec_field
from dpaudit.store import JsonObject, load_result_files, save_result_files
from dpaudit.store import thaw as _thaw

__all__ = [
    "EvaluatorCheck",
    "InversionResult",
    "InversionSummary",
    "SearchStops",
    "evaluator_check",
    "inversion_stem",
    "load_inversion_result",
    "save_inversion_result",
    "stopping_text",
]

_IMAGES = ("reconstructions", "class_means", "nearest_members", "nearest_non_members")
_PER_CLASS = (
    "target_confidence",
    "knn_distance",
    "psnr",
    "distance_to_mean",
    "distance_to_member",
    "distance_to_non_member",
)
_IDS = ("target_classes", "knn_ids", "nearest_member_ids", "nearest_non_member_ids")
_MEMBERSHIP_ARRAYS = ("sample_ids", "scores", "is_member")
_ARRAYS = (*_IMAGES, *_PER_CLASS, *_IDS, "evaluator_top5", *(f"membership_{a}" for a in _MEMBERSHIP_ARRAYS))


@dataclass(frozen=True, kw_only=True)
class InversionSummary(PlainSpec):
    """The metrics of one inversion result (:meth:`InversionResult.metrics`).

    Its plain form (``to_dict``, keys in field order) is the CLI's ``--json`` output of an attack.
    Distances and PSNR are means over the classes (PSNR over its finite values; ∞ when none is).

    Attributes:
        attack_accuracy_top1, attack_accuracy_top5: shares of classes the evaluator labels right.
        knn_distance: mean feature-space distance to the nearest member of the class.
        psnr: mean PSNR (dB) against that member.
        membership: the inversion-based membership score's metrics.
        distance_to_mean, distance_to_member, distance_to_non_member: mean pixel RMS distances.
        closer_to_member: share of classes nearer the nearest member than the nearest non-member.
        closer_to_mean: share of classes nearer the class mean than any member.
        num_classes: classes inverted.
        finding: the one-sentence reading (:meth:`InversionResult.finding`).
    """

    attack_accuracy_top1: float
    attack_accuracy_top5: float
    knn_distance: float
    psnr: float
    membership: MembershipSummary
    distance_to_mean: float
    distance_to_member: float
    distance_to_non_member: float
    closer_to_member: float
    closer_to_mean: float
    num_classes: int
    finding: str


@dataclass(frozen=True, kw_only=True, eq=False)
class InversionResult:
    """One inversion attack against one target model, with the evaluator's verdict.

    Attributes:
        attack: attack name (``"mi-face"``, ``"gmi"``).
        model_id: id of the attacked model.
        target_classes: (K,) int64 labels that were inverted, distinct.
        reconstructions: (K, C, H, W) float32 in [0, 1], the kept reconstruction per class.
        target_confidence: (K,) the target's softmax probability of the class on it.
        evaluator_top5: (K, k) int64, the evaluator's k = min(5, classes) most likely labels
            for each reconstruction, most likely first.
        knn_distance: (K,) L2 distance in the evaluator's feature space to the nearest member
            of the class; ``knn_ids`` (K,) names that member.
        psnr: (K,) peak signal-to-noise ratio (dB, peak 1) of the reconstruction against the
            ``knn_ids`` image.
        distance_to_mean, distance_to_member, distance_to_non_member: (K,) pixel RMS
            distances to the members' class mean, the nearest member and the nearest held-out
            non-member of the class (``nearest_member_ids`` / ``nearest_non_member_ids``).
        class_means, nearest_members, nearest_non_members: (K, C, H, W) float32 images for
            the report.
        membership: the inversion-based membership score (−distance of a candidate to its
            class's reconstruction) over members and non-members of the target classes.
        config: attack, evaluator and prior parameters as run (JSON-like).
        metadata: timings, evaluator accuracy, attack diagnostics (JSON-like).
        schema_version: version of the stored format.

    Raises:
        TypeError: a field has the wrong type.
        ValueError: shapes disagree, values are out of range, or labels repeat.
    """

    attack: str
    model_id: str
    target_classes: np.ndarray
    reconstructions: np.ndarray
    target_confidence: np.ndarray
    evaluator_top5: np.ndarray
    knn_distance: np.ndarray
    knn_ids: np.ndarray
    psnr: np.ndarray
    distance_to_mean: np.ndarray
    distance_to_member: np.ndarray
    distance_to_non_member: np.ndarray
    nearest_member_ids: np.ndarray
    nearest_non_member_ids: np.ndarray
    class_means: np.ndarray
    nearest_members: np.ndarray
    nearest_non_members: np.ndarray
    membership: MembershipResult
    config: Mapping[str, object] = field(default_factory=dict)
    metadata: Mapping[str, object] = field(default_factory=dict)
    schema_version: int = RESULT_SCHEMA_VERSION

    def __post_init__(self) -> None:
        check_header(self)
        classes = _ints("target_classes", self.target_classes)
        if classes.ndim != 1 or classes.size == 0:
            raise v.invalid(
                "target_classes", f"target_classes must be a non-empty 1-d array, got shape {classes.shape}"
            )
        if np.unique(classes).size != classes.size or classes.min() < 0:
            raise v.invalid(
                "target_classes", f"target_classes must be distinct non-negative labels, got {classes.tolist()}"
            )
        k = classes.size
        object.__setattr__(self, "target_classes", _readonly(classes))
        shape: tuple[int, ...] | None = None
        for name in _IMAGES:
            img = np.asarray(getattr(self, name))
            if img.dtype != np.float32:
                raise TypeError(f"{name} must be float32, got {img.dtype}")
            if img.ndim != 4 or img.shape[0] != k:
                raise ValueError(f"{name} must have shape (K={k}, C, H, W), got {img.shape}")
            if shape is not None and img.shape != shape:
                raise ValueError(f"{name} must have the shape of reconstructions {shape}, got {img.shape}")
            shape = img.shape
            if not np.all(np.isfinite(img)) or img.min() < 0.0 or img.max() > 1.0:
                raise ValueError(f"{name} must hold finite values in [0, 1]")
            object.__setattr__(self, name, _readonly(img))
        for name in _PER_CLASS:
            arr = np.asarray(getattr(self, name), dtype=np.float64)
            if arr.shape != (k,):
                raise ValueError(f"{name} must have shape ({k},), got {arr.shape}")
            # PSNR is +inf for an exact copy of the image; every other value is finite.
            if np.any(np.isnan(arr)) or (name != "psnr" and not np.all(np.isfinite(arr))):
                raise ValueError(f"{name} must be finite, got {arr[:5].tolist()}")
            object.__setattr__(self, name, _readonly(arr))
        conf = self.target_confidence
        if conf.min() < 0 or conf.max() > 1:
            raise v.invalid("target_confidence", "target_confidence must hold probabilities in [0, 1]")
        for name in ("knn_distance", "distance_to_mean", "distance_to_member", "distance_to_non_member"):
            if getattr(self, name).min() < 0:
                raise ValueError(f"{name} must be >= 0")
        for name in _IDS[1:]:
            ids = _ints(name, getattr(self, name))
            if ids.shape != (k,):
                raise ValueError(f"{name} must have shape ({k},), got {ids.shape}")
            object.__setattr__(self, name, _readonly(ids))
        top = _ints("evaluator_top5", self.evaluator_top5)
        if top.ndim != 2 or top.shape[0] != k or not 1 <= top.shape[1] <= 5:
            raise v.invalid("evaluator_top5", f"evaluator_top5 must have shape (K={k}, 1..5), got {top.shape}")
        object.__setattr__(self, "evaluator_top5", _readonly(top))
        if not isinstance(self.membership, MembershipResult):
            raise v.invalid_type(
                "membership", f"membership must be a MembershipResult, got {type(self.membership).__name__}"
            )
        freeze_mappings(self)

    # ------------------------------------------------------------------ derived metrics
    @property
    def num_classes(self) -> int:
        return int(self.target_classes.size)

    def top1_correct(self) -> np.ndarray:
        """(K,) bool: the evaluator's most likely label is the target class."""
        return np.asarray(self.evaluator_top5[:, 0] == self.target_classes)

    def top5_correct(self) -> np.ndarray:
        """(K,) bool: the target class is among the evaluator's (up to) five most likely labels."""
        return np.asarray((self.evaluator_top5 == self.target_classes[:, None]).any(axis=1))

    @property
    def attack_accuracy_top1(self) -> float:
        return float(self.top1_correct().mean())

    @property
    def attack_accuracy_top5(self) -> float:
        return float(self.top5_correct().mean())

    def closer_to_member(self) -> np.ndarray:
        """(K,) bool: the reconstruction is nearer its nearest member than its nearest non-member.

        A minimum over more images is smaller by chance alone, so when a class has more members
        than held-out images this leans towards "member"; the membership AUC and ε_LB, which
        score every candidate on its own, are the unbiased evidence.
        """
        return np.asarray(self.distance_to_member < self.distance_to_non_member)

    def closer_to_mean(self) -> np.ndarray:
        """(K,) bool: the reconstruction is nearer the class mean than any single member."""
        return np.asarray(self.distance_to_mean < self.distance_to_member)

    def finding(self, *, delta: float = 1e-5, confidence: float = 0.95) -> str:
        """One sentence: does the inversion reveal members, or only the class average?

        A reconstruction nearer the class mean than any member in most classes recovers the class
        average, whatever its membership score. Otherwise "leaks membership" needs evidence: the
        membership score's ε_LB > 0 at ``confidence`` (Clopper–Pearson). An AUC of 0.6 or more on
        too few candidates to bound anything is said to point towards members, never to leak them,
        so the sentence agrees with the page's verdict.
        """
        k = self.num_classes
        near_member = int(self.closer_to_member().sum())
        near_mean = int(self.closer_to_mean().sum())
        auc = self.membership.auc()
        if near_mean > k / 2:
            # Most reconstructions are nearer the class average than any member: whatever the
            # membership score says, they show the class (the page's verdict reads the same).
            verdict = "recovers a class average, not members"
        elif auc >= 0.6 and self.membership.epsilon_bound(delta=delta, confidence=confidence).epsilon_lb > 0:
            verdict = "leaks membership: reconstructions sit nearer members than held-out images of their class"
        elif auc >= 0.6:
            verdict = (
                "points towards members, but too few candidates for evidence "
                f"(membership ε_LB = 0 at {confidence:.0%} confidence)"
            )
        else:
            # Pixel distances alone: the page's verdict may still call the reconstructions the class
            # when the evaluator recognises it, which this sentence must not deny.
            verdict = (
                "in pixel distance, nearer neither the class average than every member nor members than held-out images"
            )
        return (
            f"{self.attack}: {verdict} — nearer the class mean than any member for {near_mean}/{k} classes, "
            f"nearer the nearest member than the nearest non-member for {near_member}/{k}, membership AUC {auc:.3f}"
        )

    def summary(
        self, *, fprs: tuple[float, ...] = DEFAULT_FPRS, delta: float = 1e-5, confidence: float = 0.95
    ) -> JsonObject:
        """The CLI's ``--json`` output: :meth:`metrics` as a plain JSON object (keys in field order)."""
        return self.metrics(fprs=fprs, delta=delta, confidence=confidence).to_dict()

    def metrics(
        self, *, fprs: tuple[float, ...] = DEFAULT_FPRS, delta: float = 1e-5, confidence: float = 0.95
    ) -> InversionSummary:
        """The metrics of the result, typed; :meth:`summary` is their plain form."""
        psnr = self.psnr[np.isfinite(self.psnr)]
        return InversionSummary(
            attack_accuracy_top1=self.attack_accuracy_top1,
            attack_accuracy_top5=self.attack_accuracy_top5,
            knn_distance=float(self.knn_distance.mean()),
            psnr=float(psnr.mean()) if psnr.size else float("inf"),
            membership=self.membership.metrics(fprs=fprs, delta=delta, confidence=confidence),
            distance_to_mean=float(self.distance_to_mean.mean()),
            distance_to_member=float(self.distance_to_member.mean()),
            distance_to_non_member=float(self.distance_to_non_member.mean()),
            closer_to_member=float(self.closer_to_member().mean()),
            closer_to_mean=float(self.closer_to_mean().mean()),
            num_classes=self.num_classes,
            finding=self.finding(),
        )

    # ------------------------------------------------------------------ (de)serialisation
    def arrays(self) -> dict[str, np.ndarray]:
        """Every array of the result, by its NPZ name."""
        out = {name: getattr(self, name) for name in (*_IMAGES, *_PER_CLASS, *_IDS, "evaluator_top5")}
        out.update({f"membership_{a}": getattr(self.membership, a) for a in _MEMBERSHIP_ARRAYS})
        return out

    def meta(self) -> JsonObject:
        """The JSON part (everything but the arrays): :class:`_StoredMeta`'s plain form."""
        return _StoredMeta(
            schema_version=self.schema_version,
            attack=self.attack,
            model_id=self.model_id,
            membership=_StoredMembership(
                attack=self.membership.attack, config=self.membership.config, metadata=self.membership.metadata
            ),
            config=self.config,
            metadata=self.metadata,
        ).to_dict()

    @classmethod
    def from_parts(cls, meta: Mapping[str, object], arrays: Mapping[str, np.ndarray]) -> InversionResult:
        """Rebuilds a result from :meth:`meta` and :meth:`arrays` (validated).

        ``meta`` may also hold the arrays and the name of their NPZ file (what
        :func:`dpaudit.store.load_result_files` returns); those keys are read past.

        Raises:
            ValueError: a field or an array is missing, a key names no field, or the schema
                version is unknown.
        """
        missing = [a for a in _ARRAYS if a not in arrays]
        if missing:
            raise v.invalid("arrays", f"arrays must include {', '.join(missing)}")
        stored = _StoredMeta.from_dict({k: x for k, x in meta.items() if k != "arrays" and k not in _ARRAYS})
        membership = MembershipResult(
            attack=stored.membership.attack,
            model_id=stored.model_id,
            sample_ids=np.asarray(arrays["membership_sample_ids"], dtype=np.int64),
            scores=np.asarray(arrays["membership_scores"], dtype=np.float64),
            is_member=np.asarray(arrays["membership_is_member"], dtype=bool),
            config=stored.membership.config,
            metadata=stored.membership.metadata,
        )
        return cls(
            attack=stored.attack,
            model_id=stored.model_id,
            target_classes=np.asarray(arrays["target_classes"]),
            reconstructions=np.asarray(arrays["reconstructions"]),
            target_confidence=np.asarray(arrays["target_confidence"]),
            evaluator_top5=np.asarray(arrays["evaluator_top5"]),
            knn_distance=np.asarray(arrays["knn_distance"]),
            knn_ids=np.asarray(arrays["knn_ids"]),
            psnr=np.asarray(arrays["psnr"]),
            distance_to_mean=np.asarray(arrays["distance_to_mean"]),
            distance_to_member=np.asarray(arrays["distance_to_member"]),
            distance_to_non_member=np.asarray(arrays["distance_to_non_member"]),
            nearest_member_ids=np.asarray(arrays["nearest_member_ids"]),
            nearest_non_member_ids=np.asarray(arrays["nearest_non_member_ids"]),
            class_means=np.asarray(arrays["class_means"]),
            nearest_members=np.asarray(arrays["nearest_members"]),
            nearest_non_members=np.asarray(arrays["nearest_non_members"]),
            membership=membership,
            config=stored.config,
            metadata=stored.metadata,
            schema_version=stored.schema_version,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InversionResult):
            return NotImplemented
        mine, theirs = self.arrays(), other.arrays()
        return self.meta() == other.meta() and all(np.array_equal(mine[a], theirs[a]) for a in _ARRAYS)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, kw_only=True)
class _StoredMembership(PlainSpec):
    """The JSON part of an inversion's membership score (its arrays are in the NPZ, its target is the result's)."""

    attack: str
    # Free-form JSON, written plain (thawed) and read back as stored.
    config: Mapping[str, object] = spec_field(default_factory=dict, encode=_thaw)
    metadata: Mapping[str, object] = spec_field(default_factory=dict, encode=_thaw)


@dataclass(frozen=True, kw_only=True)
class _StoredMeta(PlainSpec):
    """The JSON file of an :class:`InversionResult`: everything but its arrays, in the stored key order."""

    schema_version: int = RESULT_SCHEMA_VERSION
    attack: str
    model_id: str
    membership: _StoredMembership
    config: Mapping[str, object] = spec_field(default_factory=dict, encode=_thaw)
    metadata: Mapping[str, object] = spec_field(default_factory=dict, encode=_thaw)


def _ints(name: str, values: Any) -> np.ndarray:
    arr = np.asarray(values)
    if arr.size and arr.dtype.kind not in "iu":
        raise v.invalid_type(name, f"{name} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def inversion_stem(attack: str) -> str:
    """The file stem of an attack's stored result: ``inversion-ATTACK``."""
    return "inversion-" + _file_stem(attack)


def save_inversion_result(result: InversionResult, directory: str | os.PathLike[str]) -> Path:
    """Writes ``inversion-ATTACK.npz`` then ``inversion-ATTACK.json`` atomically into ``directory``.

    Returns:
        The path of the JSON file.
    """
    if not isinstance(result, InversionResult):
        raise v.invalid_type("result", f"result must be an InversionResult, got {type(result).__name__}")
    return save_result_files(directory, inversion_stem(result.attack), arrays=result.arrays(), meta=result.meta())


def load_inversion_result(path: str | os.PathLike[str]) -> InversionResult:
    """Loads a result written by :func:`save_inversion_result` (NPZ read without pickle).

    Raises:
        FileNotFoundError: the JSON or its NPZ is missing.
        ValueError: the files are malformed.
    """
    data = load_result_files(path, _ARRAYS)
    arrays = {name: value for name, value in data.items() if isinstance(value, np.ndarray)}
    return InversionResult.from_parts(data, arrays)


@dataclass(frozen=True, kw_only=True)
class EvaluatorCheck:
    """Whether the evaluation classifier is good enough for its top-1 to judge an inversion.

    Attributes:
        accuracy: its accuracy on held-out images (as the attack stored it).
        num_tested: the held-out images it was measured on (``None``: not stored, results from
            before the count was kept; the rule then reads the accuracy itself).
        low, high: the accuracy's two-sided Clopper–Pearson interval (``None`` without the count).
        chance: 1/N over the dataset's N classes.
        needed: the accuracy the rule asks for: (1 + chance)/2, halfway from chance to perfect.
        too_weak: the lower end (else the accuracy) is not above ``needed``.
    """

    accuracy: float
    num_tested: int | None
    low: float | None
    high: float | None
    chance: float
    needed: float
    too_weak: bool

    def rule(self) -> str:
        """The rule in words, for a verdict or a caption."""
        return (
            "an evaluator is trusted when the lower end of its 95% Clopper–Pearson interval is above "
            f"{self.needed:.1%}, halfway from chance to perfect"
        )


def evaluator_check(result: InversionResult, *, chance: float, confidence: float = 0.95) -> EvaluatorCheck | None:
    """Is the evaluator that judged ``result`` good enough? ``None`` when its accuracy was not stored.

    Top-1 attack accuracy is the evaluator's label agreeing with the inverted class (Zhang et al.
    2020, §4.1). An evaluator of accuracy a labels even a perfect reconstruction — a real image of
    the class — right only about a of the time, so top-1 measures the attack and the evaluator
    together. Below (1 + chance)/2, halfway from guessing to perfect, the evaluator errs on real
    images at least half as often as a guesser: a miss is as likely the evaluator's as the
    attack's, and top-1 can say neither "the class was recovered" nor "nothing was". The rule
    reads the lower end of the accuracy's Clopper–Pearson interval, so an evaluator tested on a
    few images does not pass by luck; the threshold is (1 + chance)/2 rather than a multiple of
    chance so that it stays below 1 for two classes (2 × ½ would ask for a perfect evaluator).

    Args:
        result: an inversion result whose metadata holds ``evaluator_accuracy`` and, when
            stored, ``evaluator_num_tested``.
        chance: 1/N over the dataset's N classes.
        confidence: the interval's coverage.
    """
    from dpaudit.privacy.audit_stats import clopper_pearson_interval

    acc = result.metadata.get("evaluator_accuracy")
    if isinstance(acc, bool) or not isinstance(acc, (int, float)) or not 0.0 <= float(acc) <= 1.0:
        return None
    n = result.metadata.get("evaluator_num_tested")
    num = int(n) if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None
    low = high = None
    if num is not None:
        low, high = clopper_pearson_interval(int(round(float(acc) * num)), num, confidence=confidence)
    needed = (1.0 + chance) / 2
    return EvaluatorCheck(
        accuracy=float(acc),
        num_tested=num,
        low=low,
        high=high,
        chance=chance,
        needed=needed,
        too_weak=(low if low is not None else float(acc)) <= needed,
    )


@dataclass(frozen=True)
class SearchStops:
    """How an optimisation attack's searches ended, typed from the diagnostics it stored.

    Attributes:
        iterations: iterations each search ran, all searches flattened (restarts included).
        stop_reasons: why each search stopped, in the same order (empty when not stored).
        max_iterations: the iteration budget of one search, when the attack stored it.
    """

    iterations: tuple[float, ...]
    stop_reasons: tuple[str, ...]
    max_iterations: int | None

    @classmethod
    def from_result(cls, result: InversionResult) -> SearchStops | None:
        """The stored diagnostics as a value, or ``None`` when the attack stored no usable iteration counts."""
        details = result.metadata.get("details")
        if not isinstance(details, Mapping):
            return None
        try:
            counts = np.asarray(details.get("iterations"), dtype=float).ravel()
        except (TypeError, ValueError):
            return None
        if counts.size == 0 or not np.isfinite(counts).all():
            return None
        reasons = details.get("stop_reasons")
        flat = (
            tuple(str(x) for row in reasons for x in (row if isinstance(row, (list, tuple)) else [row]))
            if isinstance(reasons, (list, tuple))
            else ()
        )
        cap = details.get("max_iterations")
        budget = int(cap) if isinstance(cap, (int, float)) and not isinstance(cap, bool) else None
        return cls(iterations=tuple(float(c) for c in counts), stop_reasons=flat, max_iterations=budget)


def stopping_text(result: InversionResult) -> str | None:
    """How the attack's searches ended, in words, from the diagnostics it stored (``None`` when it stored none).

    An optimisation attack that stops at its cost threshold after a step or two returns little more
    than its start image: top-1 and "class only" then describe the stopping rule as much as the
    model, so the page says so (MI-Face, Fredrikson et al. 2015, Alg. 1: stop when the cost falls
    below a threshold, or after a budget of iterations).
    """
    stops = SearchStops.from_result(result)
    if stops is None:
        return None
    counts, cap = np.asarray(stops.iterations), stops.max_iterations
    median = float(np.median(counts))
    allowed = f" of the {cap} allowed" if cap is not None else ""
    text = (
        f"{result.attack} stopped after {int(counts.min())}–{int(counts.max())} iterations per search "
        f"(median {median:g}){allowed}"
    )
    if stops.stop_reasons:
        flat = list(stops.stop_reasons)
        tally = {why: flat.count(why) for why in dict.fromkeys(flat)}
        text += "; why: " + ", ".join(f"{why} ×{n}" for why, n in tally.items())
    if cap is not None and median <= max(2.0, 0.01 * float(cap)):
        text += (
            " — an early stop: the reconstructions are the start image after a few steps, so what this page says "
            "of them describes that stopping rule as much as the model"
        )
    return text + "."
