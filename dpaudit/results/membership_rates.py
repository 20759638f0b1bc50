"""Every estimated rate of a membership result, with its counts and a 95 % interval; the audit's power.

A membership report shows rates estimated from finitely many members and non-members: TPR at a
fixed FPR, the balanced accuracy and advantage of the best threshold, the AUC, the target's
train and held-out accuracy. On 100 examples each such rate moves by ±10 points between samples,
so none is shown bare (docs/attacks/membership.md, §1.5):

* a proportion (an accuracy, a TPR, an FPR) gets its two-sided Clopper–Pearson interval from its
  counts (:func:`dpaudit.privacy.audit_stats.clopper_pearson_interval`);
* a sum or difference of two independent proportions (balanced accuracy ½(TPR + TNR), advantage
  TPR − FPR, the generalisation gap train − held-out accuracy) combines the two Clopper–Pearson
  intervals, each at 1 − (1 − c)/2, end to end: both hold together with probability ≥ c (a
  union bound), so the combined interval does too;
* the AUC, which has no exact interval, gets a stratified percentile bootstrap
  (:func:`dpaudit.privacy.audit_stats.auc_interval`).

A rate read at a threshold chosen on the same scores (the best balanced accuracy) is optimistic;
its interval is conditional on that threshold, as in the literature (Carlini et al. 2022, §IV).

The power of a membership audit (:func:`membership_power`) is what it could have shown at its
size: the ε_LB a perfect attack (every member above every non-member) reaches on the same counts
and Bonferroni factor, and the lowest FPR the non-members resolve (one false positive in m is
1/m). A "no evidence" verdict states it, and is not reassuring when it is below the claim.

Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from dpaudit import _validate as v
from dpaudit.privacy.audit_stats import auc_interval, clopper_pearson_interval, perfect_attack_epsilon_lb
from dpaudit.results.membership import MembershipResult, tpr_unresolved
from dpaudit.results.numbers import fmt_percent, fmt_rate
from dpaudit.specs import PlainSpec

__all__ = [
    "Estimate",
    "proportion",
    "difference",
    "mean_of_two",
    "MembershipRates",
    "membership_rates",
    "ClassRates",
    "class_breakdown",
    "GeneralisationGap",
    "generalisation_gap",
    "MembershipPower",
    "membership_power",
    "NUM_THRESHOLDS",
]

#: The Bonferroni factor of a membership result's ε_LB (:meth:`MembershipResult.epsilon_bound`'s default).
NUM_THRESHOLDS = 20


@dataclass(frozen=True, kw_only=True)
class Estimate(PlainSpec):
    """An estimated rate with its two-sided interval.

    Attributes:
        value: the estimate.
        low, high: the interval's ends.
        confidence: the interval's coverage.
        method: ``clopper-pearson`` (a proportion), ``clopper-pearson-combined`` (two
            proportions combined, see the module docstring), ``bootstrap`` or ``hoeffding`` (a mean of
            several models' accuracies, :mod:`dpaudit.results.record_accuracy`).
        count: successes of a proportion (``None`` for a combined rate or an AUC).
        total: trials of a proportion (``None`` likewise).
    """

    value: float
    low: float
    high: float
    confidence: float
    method: str
    count: int | None = None
    total: int | None = None

    def interval_text(self, *, percent: bool = True) -> str:
        """The interval as every page and verdict writes it: "[16.9%, 34.4%]", or "[0.702, 0.835]" for a number."""
        if percent:
            return f"[{fmt_percent(self.low)}, {fmt_percent(self.high)}]".replace("-", "−")
        return f"[{self.low:.3f}, {self.high:.3f}]".replace("-", "−")

    def text(self, *, percent: bool = True) -> str:
        """The estimate, its counts (a proportion) and its interval: "25.0% (25/100) [16.9%, 34.4%]"."""
        if not percent:
            head = f"{self.value:.3f}"
        elif self.count is not None and self.total:
            head = fmt_rate(self.count, self.total)
        else:
            head = fmt_percent(self.value)
        return f"{head} {self.interval_text(percent=percent)}".replace("-", "−")


def proportion(count: int, total: int, *, confidence: float = 0.95) -> Estimate:
    """``count / total`` with its two-sided Clopper–Pearson interval.

    Raises:
        ValueError: counts out of range (named with the value).
    """
    count = v.integer("count", count, minimum=0)
    total = v.integer("total", total, minimum=1)
    low, high = clopper_pearson_interval(count, total, confidence=confidence)
    return Estimate(
        value=count / total,
        low=low,
        high=high,
        confidence=confidence,
        method="clopper-pearson",
        count=count,
        total=total,
    )


def _split(confidence: float) -> float:
    """The level of each of two intervals that hold together with probability ≥ ``confidence``."""
    return 1.0 - (1.0 - confidence) / 2


def difference(a: tuple[int, int], b: tuple[int, int], *, confidence: float = 0.95) -> Estimate:
    """a − b for two independent proportions given as (count, total): TPR − FPR, train − held-out accuracy."""
    ia = clopper_pearson_interval(*a, confidence=_split(confidence))
    ib = clopper_pearson_interval(*b, confidence=_split(confidence))
    return Estimate(
        value=a[0] / a[1] - b[0] / b[1],
        low=ia[0] - ib[1],
        high=ia[1] - ib[0],
        confidence=confidence,
        method="clopper-pearson-combined",
    )


def mean_of_two(a: tuple[int, int], b: tuple[int, int], *, confidence: float = 0.95) -> Estimate:
    """½(a + b) for two independent proportions given as (count, total): balanced accuracy ½(TPR + TNR)."""
    ia = clopper_pearson_interval(*a, confidence=_split(confidence))
    ib = clopper_pearson_interval(*b, confidence=_split(confidence))
    return Estimate(
        value=0.5 * (a[0] / a[1] + b[0] / b[1]),
        low=0.5 * (ia[0] + ib[0]),
        high=0.5 * (ia[1] + ib[1]),
        confidence=confidence,
        method="clopper-pearson-combined",
    )


@dataclass(frozen=True, kw_only=True)
class MembershipRates:
    """One attack's estimated rates, each with its interval.

    Attributes:
        tpr_at_fpr: ``"0.01"`` → TPR at that FPR (its count of members), ``None`` where the
            non-members cannot resolve the FPR (:func:`~dpaudit.results.membership.tpr_unresolved`).
        auc: the AUC with its bootstrap interval.
        threshold: the threshold of the best balanced accuracy (guess member when score ≥ it).
        true_positives, false_positives: members and non-members at or above it.
        balanced_accuracy: ½(TPR + TNR) there.
        advantage: TPR − FPR there (Yeom et al. 2018's membership advantage).
        num_members, num_non_members: the counts every rate rests on.
    """

    tpr_at_fpr: Mapping[str, Estimate | None]
    auc: Estimate
    threshold: float
    true_positives: int
    false_positives: int
    balanced_accuracy: Estimate
    advantage: Estimate
    num_members: int
    num_non_members: int


def _best_threshold(result: MembershipResult) -> tuple[float, int, int]:
    """(threshold, TP, FP) of the best balanced accuracy over the exact ROC's thresholds."""
    curve = result.roc()
    i = int(np.argmax(curve.tpr - curve.fpr))
    tp = int(round(curve.tpr[i] * result.num_members))
    fp = int(round(curve.fpr[i] * result.num_non_members))
    return float(curve.thresholds[i]), tp, fp


def membership_rates(
    result: MembershipResult,
    *,
    fprs: tuple[float, ...] = (0.001, 0.01),
    confidence: float = 0.95,
    num_resamples: int = 1000,
) -> MembershipRates:
    """The rates of ``result`` with their intervals (see the module docstring for how each is bounded)."""
    n_in, n_out = result.num_members, result.num_non_members
    tprs: dict[str, Estimate | None] = {}
    for f in fprs:
        if tpr_unresolved(f, n_out) is not None:
            tprs[f"{f:g}"] = None
        else:
            tprs[f"{f:g}"] = proportion(int(round(result.tpr_at_fpr(f) * n_in)), n_in, confidence=confidence)
    low, high = auc_interval(
        result.scores[result.is_member],
        result.scores[~result.is_member],
        confidence=confidence,
        num_resamples=num_resamples,
    )
    threshold, tp, fp = _best_threshold(result)
    return MembershipRates(
        tpr_at_fpr=tprs,
        auc=Estimate(value=result.auc(), low=low, high=high, confidence=confidence, method="bootstrap"),
        threshold=threshold,
        true_positives=tp,
        false_positives=fp,
        balanced_accuracy=mean_of_two((tp, n_in), (n_out - fp, n_out), confidence=confidence),
        advantage=difference((tp, n_in), (fp, n_out), confidence=confidence),
        num_members=n_in,
        num_non_members=n_out,
    )


@dataclass(frozen=True, kw_only=True)
class ClassRates:
    """One class's rates at the attack's overall best threshold.

    Attributes:
        label: the class.
        tpr: members of the class flagged (count of the class's members).
        fpr: non-members of the class flagged (count of its non-members); ``None`` without any.
        advantage: TPR − FPR; ``None`` when the class has no member or no non-member.
    """

    label: int
    tpr: Estimate | None
    fpr: Estimate | None
    advantage: Estimate | None


def class_breakdown(
    result: MembershipResult, *, threshold: float | None = None, confidence: float = 0.95
) -> tuple[ClassRates, ...] | None:
    """TPR, FPR and advantage per class at one threshold (TF Privacy's per-class slices); ``None`` without labels.

    One threshold for every class (by default the attack's best overall, :func:`membership_rates`)
    keeps the classes comparable and picks nothing per class, so a small class does not look
    vulnerable by the luck of its own best threshold.
    """
    if result.labels is None:
        return None
    if threshold is None:
        threshold, _, _ = _best_threshold(result)
    flagged = result.scores >= threshold
    rows = []
    for label in np.unique(result.labels):
        here = result.labels == label
        mem, non = here & result.is_member, here & ~result.is_member
        n_in, n_out = int(mem.sum()), int(non.sum())
        tp, fp = int((flagged & mem).sum()), int((flagged & non).sum())
        rows.append(
            ClassRates(
                label=int(label),
                tpr=proportion(tp, n_in, confidence=confidence) if n_in else None,
                fpr=proportion(fp, n_out, confidence=confidence) if n_out else None,
                advantage=difference((tp, n_in), (fp, n_out), confidence=confidence) if n_in and n_out else None,
            )
        )
    return tuple(rows)


@dataclass(frozen=True, kw_only=True)
class GeneralisationGap:
    """The target's train accuracy against its accuracy on held-out non-members, and the gap.

    The non-members are the held-out examples the attacks score, so this is the gap a
    loss-threshold attack turns into advantage (Yeom et al. 2018, Theorem 2).

    Attributes:
        train: accuracy on the members (the training set).
        held_out: accuracy on the non-members.
        gap: train − held-out accuracy.
    """

    train: Estimate
    held_out: Estimate
    gap: Estimate


def generalisation_gap(
    metrics: Mapping[str, object], *, num_members: int, num_non_members: int, confidence: float = 0.95
) -> GeneralisationGap | None:
    """The gap from a record's ``train_accuracy`` and ``non_member_accuracy``; ``None`` when either is missing.

    Args:
        metrics: the target record's metrics.
        num_members: the members the train accuracy was measured on.
        num_non_members: the non-members the held-out accuracy was measured on.
        confidence: the intervals' coverage.
    """

    def count(key: str, n: int) -> int | None:
        x = metrics.get(key)
        if isinstance(x, bool) or not isinstance(x, (int, float)) or n <= 0 or not 0.0 <= float(x) <= 1.0:
            return None
        return int(round(float(x) * n))

    train, held = count("train_accuracy", num_members), count("non_member_accuracy", num_non_members)
    if train is None or held is None:
        return None
    return GeneralisationGap(
        train=proportion(train, num_members, confidence=confidence),
        held_out=proportion(held, num_non_members, confidence=confidence),
        gap=difference((train, num_members), (held, num_non_members), confidence=confidence),
    )


@dataclass(frozen=True, kw_only=True)
class MembershipPower:
    """What a membership audit of this size could have shown.

    Attributes:
        ceiling: the ε_LB of a perfect attack on the same counts, δ, confidence and Bonferroni
            factor: no attack on this many members / non-members can show more.
        lowest_fpr: 1/non-members, the lowest FPR at which one false positive is resolved.
        num_members, num_non_members: the counts.
    """

    ceiling: float
    lowest_fpr: float
    num_members: int
    num_non_members: int


def membership_power(
    num_members: int,
    num_non_members: int,
    *,
    delta: float = 1e-5,
    confidence: float = 0.95,
    num_thresholds: int = NUM_THRESHOLDS,
) -> MembershipPower:
    """The power of a membership audit with these counts (see the module docstring)."""
    n_in = v.integer("num_members", num_members, minimum=1)
    n_out = v.integer("num_non_members", num_non_members, minimum=1)
    ceiling = perfect_attack_epsilon_lb(
        num_in=n_in, num_out=n_out, delta=delta, confidence=confidence, num_tests=num_thresholds
    )
    return MembershipPower(ceiling=ceiling, lowest_fpr=1.0 / n_out, num_members=n_in, num_non_members=n_out)
