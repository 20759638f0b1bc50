"""The comparison of defenses under the same attacks: one row per trained defense setting.

``dpaudit compare`` trains every defense setting of a grid (each with its repeats), runs the
grid's attacks, certificates and audits on every trained record, and condenses what they
measured into a :class:`ComparisonResult`: a defense × measure matrix. The measures follow
Jayaraman & Evans (USENIX Security 2019, §4): accuracy loss against the non-private baseline,
ε_UB under each accountant of the same noise, attack advantage TPR − FPR against the DP
ceiling e^ε − 1 (Yeom et al. 2018, Theorem 1), and membership at low FPR (Carlini et al. 2022,
§III); and Aerni et al. (CCS 2024): the same membership measures on the most vulnerable samples
beside the population average. Torch-free; stored as ``comparison.json``.

A row's verdict:

* ``violation``: ε_LB > ε_UB — the empirical lower bound, valid at the stated confidence,
  exceeds the accountant's upper bound, so the implementation leaks more than it claims
  (``dpaudit compare`` exits 3, like ``dpaudit audit``);
* ``certificate unsound``: a certificate claims more robust accuracy than an attack leaves
  (also exit 3);
* ``no violation``: neither.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from dpaudit import _validate as v
from dpaudit.results.membership_rates import Estimate, proportion
from dpaudit.results.record_accuracy import repeats_accuracy_estimate
from dpaudit.specs import PlainSpec, spec_field
from dpaudit.store import JsonObject, JsonValue, freeze, load_value, save_value, thaw

__all__ = [
    "COMPARISON_FILE",
    "COMPARISON_SCHEMA_VERSION",
    "VERDICTS",
    "ComparisonResult",
    "ComparisonRow",
    "PooledMeasures",
    "load_comparison",
    "mean_std",
    "save_comparison",
]

COMPARISON_SCHEMA_VERSION = 1
COMPARISON_FILE = "comparison.json"
#: A row's verdict, in order of severity.
VERDICTS = ("no violation", "violation", "certificate unsound")


def _mapping(name: str, value: object) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise v.invalid_type(name, f"{name} must be a mapping, got {type(value).__name__}")
    frozen: Mapping[str, object] = freeze(dict(value))
    return frozen


def _real_or_nan(name: str, value: object) -> float:
    if value is None:
        return math.nan
    return v.real(name, value)


@dataclass(frozen=True, kw_only=True)
class PooledMeasures(PlainSpec):
    """One membership attack's measures on one row, pooled over the row's repeats.

    Stored as the JSON object a row's ``membership`` / ``vulnerable`` entry has always held,
    key order included; the counts are absent from comparisons stored before they were kept.

    Attributes:
        auc: mean area under the ROC curve; auc_std: its spread over the repeats.
        advantage: mean TPR − FPR at the best balanced threshold.
        tpr_at_fpr: FPR (as written, ``"0.01"``) → mean TPR there (``None`` where some repeat's
            non-members could not resolve that FPR).
        epsilon_lb: the largest ε lower bound over the repeats.
        num_samples: scored samples; num_members, num_non_members: the smallest counts over the
            repeats (each ``None`` when not recorded).
        auc_low, auc_high, advantage_low, advantage_high: the AUC's and the advantage's intervals,
            jointly at the comparison's 95 % over the repeats (the means of the repeats' ends, each
            at its Bonferroni share); ``None`` when some repeat did not record them.
    """

    auc: float
    auc_std: float
    advantage: float
    tpr_at_fpr: Mapping[str, float | None]
    epsilon_lb: float
    num_samples: int | None = spec_field(default=None, omit="none")
    num_members: int | None = spec_field(default=None, omit="none")
    num_non_members: int | None = spec_field(default=None, omit="none")
    auc_low: float | None = spec_field(default=None, omit="none")
    auc_high: float | None = spec_field(default=None, omit="none")
    advantage_low: float | None = spec_field(default=None, omit="none")
    advantage_high: float | None = spec_field(default=None, omit="none")

    def auc_estimate(self) -> Estimate | None:
        """The AUC with its interval (``None`` when not recorded)."""
        if self.auc_low is None or self.auc_high is None:
            return None
        return Estimate(value=self.auc, low=self.auc_low, high=self.auc_high, confidence=0.95, method="bootstrap")

    def advantage_estimate(self) -> Estimate | None:
        """The advantage with its interval (``None`` when not recorded)."""
        if self.advantage_low is None or self.advantage_high is None:
            return None
        return Estimate(
            value=self.advantage,
            low=self.advantage_low,
            high=self.advantage_high,
            confidence=0.95,
            method="clopper-pearson-combined",
        )

    def __post_init__(self) -> None:
        if not isinstance(self.tpr_at_fpr, Mapping):
            raise v.invalid_type("tpr_at_fpr", f"tpr_at_fpr must be a mapping, got {type(self.tpr_at_fpr).__name__}")
        # JSON keys are strings: an FPR given as a float is kept as the key it is stored under.
        object.__setattr__(self, "tpr_at_fpr", MappingProxyType({str(k): t for k, t in self.tpr_at_fpr.items()}))


def _measures(name: str, value: object) -> Mapping[str, PooledMeasures]:
    if not isinstance(value, Mapping):
        raise v.invalid_type(name, f"{name} must be a mapping, got {type(value).__name__}")
    for attack, m in value.items():
        if not isinstance(m, PooledMeasures):
            raise v.invalid_type(name, f"{name}[{attack!r}] must be a PooledMeasures, got {type(m).__name__}")
    return MappingProxyType({str(a): m for a, m in value.items()})


@dataclass(frozen=True, kw_only=True)
class ComparisonRow(PlainSpec):
    """One defense setting of the grid, over its repeats.

    Attributes:
        label: the setting's unique name in the grid (e.g. ``dpsgd-target_epsilon=1``).
        defense: the registry key (:data:`defenses.DEFENSES`).
        family: the curve it belongs to (``dpsgd``, ``pate``, ``certified``, ``dssgd``, …).
        parameters: the grid values of this setting (free-form JSON, frozen: lists as tuples).
        model_ids: one trained record per repeat.
        test_accuracy: mean test accuracy over the repeats.
        test_accuracy_std: its standard deviation over the repeats (0 for one repeat).
        accuracy_loss: the baseline's mean test accuracy minus this row's (Jayaraman & Evans'
            "accuracy loss", absolute, in [−1, 1]).
        epsilon_ub: accountant → ε upper bound at ``delta`` (∞ for a non-private row; empty
            for a defense without a DP claim on its training data).
        epsilon_ub_data_dependent: the ε depends on the private data (PATE without smooth
            sensitivity): it is then itself private and marked as such.
        epsilon_last_iterate: the last-iterate ε at ``delta`` of the row's claim (Steinke et al.
            2024, "The Last Iterate Advantage", Theorem 1 / Heuristic 1): the final model alone
            under the linear-loss heuristic, a prediction and not a bound; ε_UB minus it is what
            the black-box threat model hides. ``None`` outside the DP-SGD family and in
            comparisons stored before it was recorded.
        epsilon_lb: the best empirical lower bound over every attack and repeat, valid jointly
            at ``confidence`` (Bonferroni over the bounds it is the maximum of); 0 when none.
        best_attack: the attack that achieved ``epsilon_lb`` (``None`` when no attack ran).
        membership: attack → its population measures over the repeats (:class:`PooledMeasures`).
        vulnerable: attack → the same measures on the most vulnerable samples (empty when the
            grid has no shadow-based attack to rank them).
        inversion_top1: top-1 accuracy of an evaluation classifier on the inversions (``None``
            when no inversion attack ran).
        robust_accuracy: radius → accuracy left by the strongest evasion attack.
        certified_accuracy: radius → certified accuracy (empty for a defense that does not
            certify).
        certified_conventional_accuracy: accuracy without attack of the classifier the
            certificate covers, mean over the repeats: the accuracy ``certified_accuracy`` is to
            be read against (``test_accuracy`` is the record's own prediction rule, another
            classifier for noise-layer defenses and smoothing). ``None`` for a row that does not
            certify and in comparisons stored before it was recorded.
        certified_prediction_rule: that classifier, in words, as ``dpaudit certify`` names it
            (``None`` likewise).
        test_examples: the test-set size ``test_accuracy`` rests on (``None`` when a repeat's
            record did not keep it, and in comparisons stored before it was recorded).
        attacked_prediction_rule: the classifier the evasion attacks ran against, in words: the
            one ``robust_accuracy`` is read against (for a noise layer or smoothing another rule
            than the record's own and the certificate's). ``None`` when not recorded.
        attacked_clean_accuracy: that classifier's accuracy on the unperturbed examples attacked,
            mean over the repeats (``None`` likewise).
        inversion_classes: the classes each inversion attack inverted (its top-1 accuracy is a
            share of them); inversion_candidates: how many top-1 accuracies (attacks × repeats)
            ``inversion_top1`` is the largest of. ``None`` when not recorded
            (:meth:`inversion_estimate`).
        evaluated_examples: the test examples each repeat's evasion attacks and certificates ran
            on (``None`` likewise); with ``test_examples``, what every accuracy's interval rests on
            (:meth:`accuracy_estimate`).
        verdict: one of :data:`VERDICTS`.
        findings: what made the verdict (empty for ``no violation``).
        links: report name → path relative to the run's reports folder (drill-down).
    """

    label: str
    defense: str
    family: str
    parameters: Mapping[str, object] = spec_field(default_factory=dict, encode=thaw)
    model_ids: tuple[str, ...] = ()
    test_accuracy: float = math.nan
    test_accuracy_std: float = 0.0
    accuracy_loss: float = 0.0
    epsilon_ub: Mapping[str, float] = field(default_factory=dict)
    epsilon_ub_data_dependent: bool = False
    epsilon_last_iterate: float | None = None
    epsilon_lb: float = 0.0
    best_attack: str | None = None
    membership: Mapping[str, PooledMeasures] = field(default_factory=dict)
    vulnerable: Mapping[str, PooledMeasures] = field(default_factory=dict)
    inversion_top1: float | None = None
    robust_accuracy: Mapping[str, float] = field(default_factory=dict)
    certified_accuracy: Mapping[str, float] = field(default_factory=dict)
    verdict: str = "no violation"
    findings: tuple[str, ...] = ()
    links: Mapping[str, str] = field(default_factory=dict)
    # Stored last, and absent when not recorded, so that comparisons stored before them keep their bytes.
    certified_conventional_accuracy: float | None = spec_field(default=None, omit="none")
    certified_prediction_rule: str | None = spec_field(default=None, omit="none")
    test_examples: int | None = spec_field(default=None, omit="none")
    attacked_prediction_rule: str | None = spec_field(default=None, omit="none")
    attacked_clean_accuracy: float | None = spec_field(default=None, omit="none")
    evaluated_examples: int | None = spec_field(default=None, omit="none")
    inversion_classes: int | None = spec_field(default=None, omit="none")
    inversion_candidates: int | None = spec_field(default=None, omit="none")

    def __post_init__(self) -> None:
        for name in ("label", "defense", "family"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise TypeError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        object.__setattr__(self, "model_ids", tuple(str(m) for m in self.model_ids))
        object.__setattr__(self, "test_accuracy", _real_or_nan("test_accuracy", self.test_accuracy))
        object.__setattr__(self, "test_accuracy_std", v.non_negative("test_accuracy_std", self.test_accuracy_std))
        object.__setattr__(self, "accuracy_loss", v.real("accuracy_loss", self.accuracy_loss))
        object.__setattr__(self, "epsilon_lb", v.non_negative("epsilon_lb", self.epsilon_lb))
        if not isinstance(self.epsilon_ub_data_dependent, bool):
            raise v.invalid_type(
                "epsilon_ub_data_dependent",
                f"epsilon_ub_data_dependent must be a bool, got {self.epsilon_ub_data_dependent!r}",
            )
        v.choice("verdict", self.verdict, VERDICTS)
        if self.inversion_top1 is not None:
            object.__setattr__(self, "inversion_top1", v.real("inversion_top1", self.inversion_top1))
        for name in ("certified_conventional_accuracy", "attacked_clean_accuracy"):
            if getattr(self, name) is not None:
                accuracy = v.real(name, getattr(self, name))
                if not 0.0 <= accuracy <= 1.0:
                    raise v.invalid(name, f"{name} must lie in [0, 1], got {accuracy!r}")
                object.__setattr__(self, name, accuracy)
        for name in ("certified_prediction_rule", "attacked_prediction_rule"):
            rule = getattr(self, name)
            if rule is not None and (not isinstance(rule, str) or not rule):
                raise v.invalid_type(name, f"{name} must be a non-empty string, got {rule!r}")
        for name in ("test_examples", "evaluated_examples", "inversion_classes", "inversion_candidates"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, v.integer(name, getattr(self, name), minimum=1))
        if self.epsilon_last_iterate is not None:
            object.__setattr__(
                self, "epsilon_last_iterate", v.non_negative("epsilon_last_iterate", self.epsilon_last_iterate)
            )
        for name in ("membership", "vulnerable"):
            object.__setattr__(self, name, _measures(name, getattr(self, name)))
        for name in (
            "parameters",
            "epsilon_ub",
            "robust_accuracy",
            "certified_accuracy",
            "links",
        ):
            object.__setattr__(self, name, _mapping(name, getattr(self, name)))
        object.__setattr__(self, "findings", tuple(str(f) for f in self.findings))

    def accuracy_estimate(self, accuracy: float | None, *, evaluated: bool) -> Estimate | None:
        """One of the row's accuracies (mean over its repeats) with its interval, or ``None`` without its count.

        Args:
            accuracy: ``test_accuracy`` (``evaluated=False``: measured on the test set) or an
                accuracy measured on the evasion subset (``evaluated=True``: robust, certified,
                the attacked or certified classifier's clean accuracy).
            evaluated: which of the two sizes it rests on.

        One repeat gives a Clopper–Pearson interval on its count, several Hoeffding's
        (:func:`~dpaudit.results.record_accuracy.repeats_accuracy_estimate`), at 95 %.
        """
        if accuracy is None:
            return None
        examples = self.evaluated_examples if evaluated else self.test_examples
        return repeats_accuracy_estimate(accuracy, examples, repeats=max(1, len(self.model_ids)))

    def inversion_estimate(self) -> Estimate | None:
        """The best inversion top-1 accuracy with its count and a Clopper–Pearson interval at 95 % split over the
        ``inversion_candidates`` accuracies it is the largest of (Bonferroni: the largest of several estimates is
        selected, so its interval must hold for all of them); ``None`` when the counts were not recorded."""
        top1, k, n = self.inversion_top1, self.inversion_classes, self.inversion_candidates
        if top1 is None or k is None or n is None:
            return None
        correct = round(top1 * k)
        if abs(top1 * k - correct) > 0.01:
            return None
        e = proportion(correct, k, confidence=1.0 - 0.05 / n)
        return Estimate(
            value=e.value, low=e.low, high=e.high, confidence=0.95, method=e.method, count=e.count, total=e.total
        )

    @property
    def epsilon_ub_best(self) -> float:
        """The tightest ε_UB over the accountants (∞ without a DP claim)."""
        finite = [float(e) for e in self.epsilon_ub.values()]
        return min(finite) if finite else math.inf


@dataclass(frozen=True, kw_only=True)
class ComparisonResult(PlainSpec):
    """Every defense setting of one grid under the same attacks.

    Attributes:
        name: the grid's name.
        dataset: the dataset every defense trained on.
        rows: one :class:`ComparisonRow` per setting, the baseline first.
        baseline: the label of the non-private baseline row.
        delta: δ of every ε (upper and lower bounds).
        confidence: joint confidence of each row's ε_LB.
        fprs: the FPRs the TPRs are read at.
        radii: the evasion / certification radii.
        vulnerable_top_k: how many samples the vulnerable-sample measures use.
        grid: the grid as read (free-form JSON, frozen), for provenance.
        seconds: wall time of the whole comparison (this run: reused jobs cost nothing).
        jobs_run: jobs computed in this run; jobs_reused: jobs found in the run store.
    """

    __spec_keys__ = (
        "schema_version",
        "name",
        "dataset",
        "baseline",
        "delta",
        "confidence",
        "fprs",
        "radii",
        "vulnerable_top_k",
        "grid",
        "seconds",
        "jobs_run",
        "jobs_reused",
        "rows",
    )

    name: str
    dataset: str
    rows: tuple[ComparisonRow, ...]
    baseline: str
    delta: float
    confidence: float
    fprs: tuple[float, ...]
    radii: tuple[float, ...] = ()
    vulnerable_top_k: int = 0
    grid: Mapping[str, object] = spec_field(default_factory=dict, encode=thaw)
    seconds: float = 0.0
    jobs_run: int = 0
    jobs_reused: int = 0
    schema_version: int = COMPARISON_SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.schema_version != COMPARISON_SCHEMA_VERSION:
            raise v.invalid(
                "schema_version", f"schema_version must be {COMPARISON_SCHEMA_VERSION}, got {self.schema_version!r}"
            )
        rows = tuple(self.rows)
        if not rows or not all(isinstance(r, ComparisonRow) for r in rows):
            raise v.invalid_type("rows", "rows must be a non-empty sequence of ComparisonRow")
        labels = [r.label for r in rows]
        if len(set(labels)) != len(labels):
            raise ValueError(f"row labels must be unique, got {labels}")
        if self.baseline not in labels:
            raise v.invalid("baseline", f"baseline must be one of the row labels {labels}, got {self.baseline!r}")
        object.__setattr__(self, "rows", rows)
        v.open_unit("delta", self.delta)
        v.open_unit("confidence", self.confidence)
        object.__setattr__(self, "fprs", tuple(v.open_unit("fprs", f) for f in self.fprs))
        object.__setattr__(self, "radii", tuple(v.non_negative("radii", r) for r in self.radii))
        object.__setattr__(self, "vulnerable_top_k", v.integer("vulnerable_top_k", self.vulnerable_top_k, minimum=0))
        object.__setattr__(self, "grid", _mapping("grid", self.grid))

    def row(self, label: str) -> ComparisonRow:
        for r in self.rows:
            if r.label == label:
                return r
        raise KeyError(f"no row {label!r}; rows: {', '.join(r.label for r in self.rows)}")

    @property
    def violations(self) -> tuple[ComparisonRow, ...]:
        """Rows whose verdict is a finding (ε_LB > ε_UB, or an unsound certificate)."""
        return tuple(r for r in self.rows if r.verdict != "no violation")

    @property
    def exit_status(self) -> int:
        """3 when any row is a finding (as ``dpaudit audit``), else 0."""
        return 3 if self.violations else 0

    def summary(self) -> JsonObject:
        """The CLI's ``--json`` shape: ``{"defenses": {label: {...}}}``."""
        out: JsonObject = {}
        for r in self.rows:
            row: JsonObject = {
                "defense": r.defense,
                "test_accuracy": r.test_accuracy,
                "accuracy_loss": r.accuracy_loss,
                "epsilon_ub": thaw(r.epsilon_ub),
                "epsilon_ub_data_dependent": r.epsilon_ub_data_dependent,
                "epsilon_last_iterate": r.epsilon_last_iterate,
                "epsilon_lb": r.epsilon_lb,
                "best_attack": r.best_attack,
                "membership": {
                    a: {"auc": m.auc, "advantage": m.advantage, "tpr_at_fpr": _rates(m)}
                    for a, m in r.membership.items()
                },
                "vulnerable": {a: {"auc": m.auc, "tpr_at_fpr": _rates(m)} for a, m in r.vulnerable.items()},
                "inversion_top1": r.inversion_top1,
                "robust_accuracy": thaw(r.robust_accuracy),
                "certified_accuracy": thaw(r.certified_accuracy),
                "verdict": r.verdict,
            }
            if r.certified_conventional_accuracy is not None:
                row["certified_conventional_accuracy"] = r.certified_conventional_accuracy
            if r.certified_prediction_rule is not None:
                row["certified_prediction_rule"] = r.certified_prediction_rule
            out[r.label] = row
        return {
            "name": self.name,
            "dataset": self.dataset,
            "delta": self.delta,
            "confidence": self.confidence,
            "defenses": out,
        }


def _rates(m: PooledMeasures) -> JsonValue:
    return {f: t for f, t in m.tpr_at_fpr.items()}


def save_comparison(result: ComparisonResult, directory: str | os.PathLike[str]) -> Path:
    """Writes ``comparison.json`` into ``directory`` atomically; returns its path."""
    return save_value(result, directory, COMPARISON_FILE, kind=ComparisonResult)


def load_comparison(path: str | os.PathLike[str]) -> ComparisonResult:
    """Reads ``comparison.json`` (or the directory holding it)."""
    result: ComparisonResult = load_value(path, COMPARISON_FILE, kind=ComparisonResult)
    return result


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and (population) standard deviation; (nan, 0) for no values."""
    vals = [float(x) for x in values]
    if not vals:
        return math.nan, 0.0
    m = sum(vals) / len(vals)
    return m, math.sqrt(sum((x - m) ** 2 for x in vals) / len(vals))
