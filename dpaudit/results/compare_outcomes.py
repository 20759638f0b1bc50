"""What each job of ``dpaudit compare`` hands back, and the matrix condensed from it.

A grid's jobs (one training per setting and seed, then membership, evasion and inversion per
trained record, and one canary audit per auditable setting) exchange the frozen values of this
module; each is stored as its job's JSON outcome (:meth:`to_dict` / :meth:`from_dict`, the
stored shape unchanged since the outcomes were plain mappings, so stored grids keep their jobs).
:func:`condense` turns them into the defense × measure matrix, a
:class:`~dpaudit.results.comparison.ComparisonResult`, with the measures of Jayaraman & Evans
(USENIX Security 2019, §4) and Aerni et al. (CCS 2024).

Torch-free: the application layer runs the jobs; this module only reads what they measured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from dpaudit.results.comparison import ComparisonResult, ComparisonRow, PooledMeasures, mean_std
from dpaudit.results.numbers import fmt_lower_bound, fmt_upper_bound
from dpaudit.specs import PlainSpec, spec_field

__all__ = [
    "COMPARE_FPRS",
    "AuditOutcome",
    "EvasionOutcome",
    "InversionOutcome",
    "MembershipMeasures",
    "MembershipOutcome",
    "SeedOutcomes",
    "SettingOutcomes",
    "TrainedOutcome",
    "condense",
]

#: FPRs the TPRs are read at (Carlini et al. 2022, §III: the low-FPR regime that matters).
COMPARE_FPRS = (0.001, 0.01)


@dataclass(frozen=True, kw_only=True)
class TrainedOutcome(PlainSpec):
    """One trained (setting, seed): what the matrix and the evaluation jobs need of the record.

    Attributes:
        model_id: the trained record's id.
        test_accuracy: its test accuracy (nan when not measured).
        epsilon_ub: accountant → ε at the grid's δ (``{"none": inf}`` for a non-private record).
        data_dependent: the ε depends on the private data (PATE without smooth sensitivity).
        epsilon_last_iterate: the claim's last-iterate ε at the grid's δ (Steinke et al. 2024,
            Theorem 1 / Heuristic 1); ``None`` outside the DP-SGD family and in outcomes
            stored before it was recorded.
        record_dir: where the record is stored (read by the evaluation jobs).
        num_members: the record's training-set size.
        reused: the record was found in the run rather than trained by this job.
        test_examples: the size of the test set ``test_accuracy`` was measured on (``None`` for a
            record stored before it was kept, and in outcomes stored before it was recorded).
    """

    # Stored in this order; the optional keys are absent when None, so stored outcomes keep their shape.
    model_id: str
    record_dir: str = ""
    test_accuracy: float
    epsilon_ub: Mapping[str, float]
    data_dependent: bool = False
    num_members: int | None = spec_field(default=None, omit="none")
    epsilon_last_iterate: float | None = spec_field(default=None, omit="none")
    reused: bool = False
    test_examples: int | None = spec_field(default=None, omit="none")


@dataclass(frozen=True, kw_only=True)
class MembershipMeasures(PlainSpec):
    """One membership attack's measures on one record (population or its vulnerable samples).

    Attributes:
        auc: area under the ROC curve.
        advantage: TPR − FPR at the best balanced threshold (2 · balanced accuracy − 1).
        tpr_at_fpr: FPR → TPR there (``None`` where the non-members cannot resolve the FPR).
        epsilon_lb: the ε lower bound at the row's Bonferroni level.
        num_samples: scored samples.
        num_members, num_non_members: the members and non-members among them (``None`` in
            outcomes stored before they were recorded).
        auc_low, auc_high: the AUC's bootstrap interval; advantage_low, advantage_high: the
            advantage's (Clopper–Pearson on the TPR and FPR counts at its threshold, combined).
            Each at ``interval_confidence``: the row's confidence split over the grid's repeats
            (Bonferroni), so that the repeats' means of the ends bound the mean of the true
            values jointly. ``None`` in outcomes stored before they were recorded.
    """

    auc: float
    advantage: float
    tpr_at_fpr: Mapping[float, float | None]
    epsilon_lb: float
    num_samples: int
    num_members: int | None = spec_field(default=None, omit="none")
    num_non_members: int | None = spec_field(default=None, omit="none")
    auc_low: float | None = spec_field(default=None, omit="none")
    auc_high: float | None = spec_field(default=None, omit="none")
    advantage_low: float | None = spec_field(default=None, omit="none")
    advantage_high: float | None = spec_field(default=None, omit="none")
    interval_confidence: float | None = spec_field(default=None, omit="none")


def _stored_measures(measures: Mapping[str, MembershipMeasures | None]) -> dict[str, object]:
    # An attack with nothing measurable is stored as an empty mapping (the outcomes' shape since they were plain dicts).
    return {a: (m.to_dict() if m else {}) for a, m in measures.items()}


def _read_measures(data: Mapping[str, Mapping[str, object]]) -> dict[str, MembershipMeasures | None]:
    return {a: (MembershipMeasures.from_dict(m) if m else None) for a, m in data.items()}


def _read_vulnerable(data: Mapping[str, Mapping[str, object]]) -> dict[str, MembershipMeasures]:
    return {a: m for a, m in _read_measures(data).items() if m is not None}


@dataclass(frozen=True, kw_only=True)
class MembershipOutcome(PlainSpec):
    """Every membership attack of the grid against one record.

    Attributes:
        membership: attack → its population measures (``None``: the scored samples were all
            members or all non-members, so nothing could be measured).
        vulnerable: attack → the same measures on the most vulnerable samples (attacks with
            nothing measurable there are left out).
        result_dir: where ``attack membership`` stored the results.
    """

    membership: Mapping[str, MembershipMeasures | None] = spec_field(encode=_stored_measures, decode=_read_measures)
    vulnerable: Mapping[str, MembershipMeasures] = spec_field(
        default_factory=dict, encode=_stored_measures, decode=_read_vulnerable
    )
    result_dir: str = ""


@dataclass(frozen=True, kw_only=True)
class EvasionOutcome(PlainSpec):
    """Evasion against one record.

    Attributes:
        robust_accuracy: radius (``f"{r:g}"``) → accuracy left by the strongest attack there.
        certified_accuracy: radius → certified accuracy (empty when the model does not certify).
        unsound: each certificate that claimed more than an attack left, in words.
        certified: the record was certified (its defense certifies and the grid asked).
        conventional_accuracy: the certified subset's accuracy without attack of the classifier
            the certificate covers (``prediction_rule``), not of the record's own prediction
            rule (certified only).
        prediction_rule: that classifier, in words, as the certify summary names it
            (``None`` when not certified, and in outcomes stored before it was recorded).
        attacked_prediction_rule: the classifier the evasion attacks ran against, in words
            (:func:`~dpaudit.results.certify_summary.attacked_prediction_rule`): the one
            ``robust_accuracy`` is about, for a noise layer or smoothing neither the record's own
            rule nor the certificate's. ``None`` in outcomes stored before it was recorded.
        attacked_clean_correct: that classifier's correct clean predictions (the fewest over the
            attacks, :func:`~dpaudit.app.runs.certify_attacks.attacked_classifier`);
        num_examples: out of the test examples attacked (and certified). ``None`` likewise.
    """

    # Stored in this order; the optional keys are absent when None, so stored outcomes keep their shape.
    robust_accuracy: Mapping[str, float]
    certified_accuracy: Mapping[str, float] = field(default_factory=dict)
    conventional_accuracy: float | None = spec_field(default=None, omit="none")
    prediction_rule: str | None = spec_field(default=None, omit="none")
    unsound: tuple[str, ...] = ()
    certified: bool = False
    attacked_prediction_rule: str | None = spec_field(default=None, omit="none")
    attacked_clean_correct: int | None = spec_field(default=None, omit="none")
    num_examples: int | None = spec_field(default=None, omit="none")


@dataclass(frozen=True, kw_only=True)
class InversionOutcome(PlainSpec):
    """Model inversion against one record: attack → top-1 accuracy of the evaluation classifier, over ``num_classes``
    inverted classes (``None`` in outcomes stored before it was recorded)."""

    inversion_top1: Mapping[str, float]
    num_classes: int | None = spec_field(default=None, omit="none")


@dataclass(frozen=True, kw_only=True)
class AuditOutcome(PlainSpec):
    """A canary audit of the algorithm that trained a setting's first record.

    Attributes:
        epsilon_lb: the audit's ε lower bound.
        epsilon_ub: the trained claim's ε it is compared with.
        method: the game, its threat model and the bound's assumption, in words.
        accountant: the accountant of ``epsilon_ub``.
        delta: δ of both (``None`` in outcomes stored before it was recorded: the grid's).
        confidence: the confidence of ``epsilon_lb``.
        trained: σ, q, the steps, C, the learning rate and the members' count it ran.
    """

    epsilon_lb: float
    epsilon_ub: float
    accountant: str | None = None
    delta: float | None = None
    method: str
    confidence: float | None = None
    trained: Mapping[str, int | float] = field(default_factory=dict)  # counts stay ints


@dataclass(frozen=True, kw_only=True)
class SeedOutcomes:
    """One repeat of a setting: its training and what each evaluation measured (``None``: not run)."""

    seed: int
    trained: TrainedOutcome
    membership: MembershipOutcome | None = None
    evasion: EvasionOutcome | None = None
    inversion: InversionOutcome | None = None


@dataclass(frozen=True, kw_only=True)
class SettingOutcomes:
    """One defense setting of the grid with every outcome of its jobs: a row of the matrix.

    Attributes:
        label, defense, family, parameters: the setting (see :class:`ComparisonRow`).
        repeats: one :class:`SeedOutcomes` per seed, in the grid's order.
        audit: its canary audit (``None``: not audited).
        links: its drill-down reports (the application layer knows which are rendered).
    """

    label: str
    defense: str
    family: str
    parameters: Mapping[str, object]
    repeats: tuple[SeedOutcomes, ...]
    audit: AuditOutcome | None = None
    links: Mapping[str, str] = field(default_factory=dict)


def _mean_rate(rates: Sequence[float | None]) -> float | None:
    """Mean rate over repeats; None (unresolved) if any repeat could not resolve it."""
    known = [float(r) for r in rates if r is not None]
    return None if len(known) != len(rates) else mean_std(known)[0]


def _fewest(counts: Sequence[int | None]) -> int | None:
    """The smallest count over the repeats; None unless every repeat recorded it."""
    known = [c for c in counts if c is not None]
    return min(known) if known and len(known) == len(counts) else None


def _mean_of_all(ends: Sequence[float | None]) -> float | None:
    """The mean over the repeats (an interval's end, an accuracy), ``None`` unless every repeat recorded it."""
    return mean_std([float(e) for e in ends if e is not None])[0] if ends and None not in ends else None


def _pooled(runs: Sequence[MembershipMeasures]) -> PooledMeasures:
    """One attack's measures over the repeats: means, the largest ε_LB, the smallest counts, and the means of the
    repeats' interval ends (each repeat's interval at its Bonferroni share of the confidence: they hold together, so
    the means of their ends bound the mean of the true values)."""
    auc, auc_std = mean_std([r.auc for r in runs])
    return PooledMeasures(
        auc_low=_mean_of_all([r.auc_low for r in runs]),
        auc_high=_mean_of_all([r.auc_high for r in runs]),
        advantage_low=_mean_of_all([r.advantage_low for r in runs]),
        advantage_high=_mean_of_all([r.advantage_high for r in runs]),
        auc=auc,
        auc_std=auc_std,
        advantage=mean_std([r.advantage for r in runs])[0],
        tpr_at_fpr={str(f): _mean_rate([r.tpr_at_fpr[f] for r in runs]) for f in runs[0].tpr_at_fpr},
        epsilon_lb=max(r.epsilon_lb for r in runs),
        num_samples=runs[0].num_samples,
        num_members=_fewest([r.num_members for r in runs]),
        num_non_members=_fewest([r.num_non_members for r in runs]),
    )


@dataclass
class _RowEvidence:
    """What a row's evaluations found, gathered before its verdict."""

    membership: dict[str, PooledMeasures] = field(default_factory=dict)
    vulnerable: dict[str, PooledMeasures] = field(default_factory=dict)
    candidates: list[tuple[float, str]] = field(default_factory=list)
    robust: dict[str, list[float]] = field(default_factory=dict)
    certified: dict[str, list[float]] = field(default_factory=dict)
    # The certified classifier's own accuracy and name, one entry per certified repeat (None: not recorded).
    conventional: list[float | None] = field(default_factory=list)
    rules: list[str | None] = field(default_factory=list)
    # The attacked classifier's name and clean accuracy, and the examples attacked, one entry per attacked repeat.
    attacked_rules: list[str | None] = field(default_factory=list)
    attacked_clean: list[float | None] = field(default_factory=list)
    evaluated: list[int | None] = field(default_factory=list)
    inversion: float | None = None
    # Every top-1 accuracy the row's best is the largest of, and the classes each was over (None: not recorded).
    inversion_all: list[float] = field(default_factory=list)
    inversion_classes: list[int | None] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    unsound: bool = False


def _gather_membership(s: SettingOutcomes, attacks: Sequence[str], ev: _RowEvidence) -> None:
    runs = [r.membership for r in s.repeats if r.membership is not None]
    for attack in attacks:
        population = [m for m in (o.membership.get(attack) for o in runs) if m]
        if population:
            ev.membership[attack] = _pooled(population)
            ev.candidates.extend((m.epsilon_lb, attack) for m in population)
        vulnerable = [m for m in (o.vulnerable.get(attack) for o in runs) if m]
        if vulnerable:
            ev.vulnerable[attack] = _pooled(vulnerable)


def _gather_audit(audit: AuditOutcome, *, delta: float, ev: _RowEvidence) -> None:
    # The audit's ε_LB is at the setting's δ; it bounds ε at the grid's δ (the row's) too
    # when that δ is no larger, since ε(δ) only falls as δ grows.
    if (audit.delta if audit.delta is not None else delta) >= delta:
        ev.candidates.append((audit.epsilon_lb, audit.method))
    if audit.epsilon_lb > audit.epsilon_ub:
        ev.findings.append(
            f"{audit.method}: ε_LB {fmt_lower_bound(audit.epsilon_lb)} > its claim's "
            f"ε_UB {fmt_upper_bound(audit.epsilon_ub)}"
        )


def _gather_evaluations(s: SettingOutcomes, ev: _RowEvidence) -> None:
    for rep in s.repeats:
        e = rep.evasion
        if e:
            for r, a in e.robust_accuracy.items():
                ev.robust.setdefault(r, []).append(a)
            if e.robust_accuracy:
                ev.attacked_rules.append(e.attacked_prediction_rule)
                n, correct = e.num_examples, e.attacked_clean_correct
                ev.attacked_clean.append(correct / n if n and correct is not None else None)
                ev.evaluated.append(n)
            for r, a in e.certified_accuracy.items():
                ev.certified.setdefault(r, []).append(a)
            if e.certified_accuracy:
                ev.conventional.append(e.conventional_accuracy)
                ev.rules.append(e.prediction_rule)
            if e.unsound:
                ev.unsound = True
                ev.findings.extend(f"seed {rep.seed}: certificate unsound: {u}" for u in e.unsound)
        i = rep.inversion
        if i and i.inversion_top1:
            ev.inversion_all.extend(i.inversion_top1.values())
            ev.inversion_classes.extend([i.num_classes] * len(i.inversion_top1))
            best = max(i.inversion_top1.values())
            ev.inversion = best if ev.inversion is None else max(ev.inversion, best)


def _classifier(accuracies: Sequence[float | None], rules: Sequence[str | None]) -> tuple[float | None, str | None]:
    """A classifier's accuracy (mean over the repeats that evaluated it) and its name, the repeats' rules each once.

    Each is ``None`` unless every such repeat recorded it: a mean over only some repeats would not
    be the accuracy of the classifier whose other accuracies are averaged over all of them.
    """
    rule = "; ".join(dict.fromkeys(r for r in rules if r is not None)) if rules and None not in rules else None
    return _mean_of_all(accuracies), rule


def same_value(values: Sequence[int | None]) -> int | None:
    """The one value every repeat recorded (a size), or ``None`` when one is missing or they differ."""
    known = set(values)
    return next(iter(known)) if len(known) == 1 and None not in known else None


def _row(
    s: SettingOutcomes, *, baseline_accuracy: float, delta: float, membership_attacks: Sequence[str] | None
) -> ComparisonRow:
    trained = [r.trained for r in s.repeats]
    acc, acc_std = mean_std([t.test_accuracy for t in trained])
    eps_ub = {k: float(e) for k, e in trained[0].epsilon_ub.items() if k != "none"}
    private = bool(eps_ub)
    ev = _RowEvidence()
    if membership_attacks is not None:
        _gather_membership(s, membership_attacks, ev)
    if s.audit:
        _gather_audit(s.audit, delta=delta, ev=ev)
    best_lb, best_attack = max(ev.candidates, default=(0.0, None))
    if best_lb <= 0.0:
        best_attack = None  # no attack showed anything: no attack "achieved" ε_LB = 0
    _gather_evaluations(s, ev)
    certified_conventional, certified_rule = _classifier(ev.conventional, ev.rules)
    attacked_clean, attacked_rule = _classifier(ev.attacked_clean, ev.attacked_rules)
    violated = private and best_lb > min(eps_ub.values())
    if violated:
        ev.findings.insert(
            0, f"ε_LB {fmt_lower_bound(best_lb)} ({best_attack}) > ε_UB {fmt_upper_bound(min(eps_ub.values()))}"
        )
    verdict = "no violation"
    if violated or (s.audit and s.audit.epsilon_lb > s.audit.epsilon_ub):
        verdict = "violation"
    elif ev.unsound:
        verdict = "certificate unsound"
    return ComparisonRow(
        label=s.label,
        defense=s.defense,
        family=s.family,
        parameters=dict(s.parameters),
        model_ids=tuple(t.model_id for t in trained),
        test_accuracy=acc,
        test_accuracy_std=acc_std,
        accuracy_loss=baseline_accuracy - acc,
        epsilon_ub=eps_ub if private else {},
        epsilon_ub_data_dependent=bool(trained[0].data_dependent),
        epsilon_last_iterate=trained[0].epsilon_last_iterate if private else None,
        epsilon_lb=float(best_lb),
        best_attack=best_attack,
        membership=ev.membership,
        vulnerable=ev.vulnerable,
        inversion_top1=ev.inversion,
        robust_accuracy={r: mean_std(a)[0] for r, a in ev.robust.items()},
        certified_accuracy={r: mean_std(a)[0] for r, a in ev.certified.items()},
        certified_conventional_accuracy=certified_conventional,
        certified_prediction_rule=certified_rule,
        test_examples=same_value([t.test_examples for t in trained]),
        attacked_prediction_rule=attacked_rule,
        attacked_clean_accuracy=attacked_clean,
        evaluated_examples=same_value(ev.evaluated),
        inversion_classes=same_value(ev.inversion_classes),
        inversion_candidates=len(ev.inversion_all) or None,
        verdict=verdict,
        findings=tuple(ev.findings),
        links=dict(s.links),
    )


def condense(
    settings: Sequence[SettingOutcomes],
    *,
    name: str,
    dataset: str,
    baseline: str,
    delta: float,
    confidence: float,
    membership_attacks: Sequence[str] | None = None,
    radii: Sequence[float] = (),
    vulnerable_top_k: int = 0,
    grid: Mapping[str, object] | None = None,
    seconds: float = 0.0,
    jobs_run: int = 0,
    jobs_reused: int = 0,
) -> ComparisonResult:
    """The defense × measure matrix from the jobs' outcomes (no training, no I/O).

    Args:
        settings: every setting with its outcomes, the baseline among them.
        name, dataset: the grid's.
        baseline: the label of the non-private baseline every accuracy loss refers to.
        delta: δ of every ε; confidence: the joint confidence of each row's ε_LB.
        membership_attacks: the grid's membership attacks, in its order (``None``: no
            membership section, and no vulnerable-sample measures).
        radii: the evasion radii; vulnerable_top_k: the vulnerable samples' count.
        grid: the grid as read, for provenance.
        seconds, jobs_run, jobs_reused: what the run cost.
    """
    base = next(s for s in settings if s.label == baseline)
    base_acc, _ = mean_std([r.trained.test_accuracy for r in base.repeats])
    rows = tuple(
        _row(s, baseline_accuracy=base_acc, delta=delta, membership_attacks=membership_attacks) for s in settings
    )
    return ComparisonResult(
        name=name,
        dataset=dataset,
        rows=rows,
        baseline=baseline,
        delta=delta,
        confidence=confidence,
        fprs=COMPARE_FPRS,
        radii=tuple(radii),
        vulnerable_top_k=vulnerable_top_k if membership_attacks is not None else 0,
        grid=dict(grid or {}),
        seconds=seconds,
        jobs_run=jobs_run,
        jobs_reused=jobs_reused,
    )
