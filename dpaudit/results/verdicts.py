"""The verdict of every report page, computed from stored results (torch-free).

A report page opens with one :class:`Verdict`: a status a reader can act on, one headline
sentence, a few supporting lines, and a tone for the box it is drawn in. The verdicts are judged
here, in the core, from the stored result and record values, so every page (and any other
consumer) states the same judgement and a report only draws it:

* an audit: a violation when ε_LB > ε_UB; inconclusive when the design's ceiling (the ε_LB a
  perfect attack on the same counts would reach) is at most ε_UB, so no attack could have shown
  a violation; otherwise no violation (Jagielski, Ullman & Oprea 2020, §5; Nasr et al. 2021, §4);
* membership inference: the strongest attack by ε_LB, then by TPR at the lowest false-positive
  rate the non-members resolve (Carlini et al. 2022, §III-B), against the target's claim;
* certified robustness: sound when no certificate claims more accuracy at a radius than an
  attack left at that radius (Lecuyer et al. 2019, §3; Cohen et al. 2019, Theorem 1);
* model inversion: whether the reconstructions identify members (their membership score has a
  positive ε_LB), recover only the class (the evaluator's top-1 above chance) or nothing
  (Zhang et al. 2020, §4.1);
* a conformance battery and a comparison: in :mod:`dpaudit.results.grid_verdicts`.

A report kind (:class:`reports.kinds.ReportKind`) carries its own verdict function: a kind whose
judgement only its page states keeps it beside itself (the PATE students, the DSSGD federation and
the trained-model pages: ``reports/pate.py``, ``reports/dssgd.py``, ``reports/train.py``), so a new
kind edits nothing here; this module keeps the shared :class:`Verdict`, its helpers
(:func:`record_delta`, :func:`claim_text`, :func:`most_severe`) and the verdicts above, which
other consumers (``--json``, JUnit, ``compare``) read as well.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dpaudit import _validate as v
from dpaudit.results.audit import AuditResult
from dpaudit.results.certified_numbers import counted_accuracy
from dpaudit.results.certify_summary import AttackedClassifier, CertificateReach, SoundnessViolation
from dpaudit.results.inversion import InversionResult, evaluator_check, stopping_text
from dpaudit.results.membership import MembershipResult, tpr_unresolved
from dpaudit.results.membership_rates import (
    Estimate,
    GeneralisationGap,
    membership_power,
    membership_rates,
    proportion,
)
from dpaudit.results.numbers import (
    fmt_lower_bound,
    fmt_percent,
    fmt_percent_lower_bound,
    fmt_percent_upper_bound,
    fmt_rate,
    fmt_upper_bound,
)
from dpaudit.results.record import TrainedModel
from dpaudit.specs import spec_from_dict

__all__ = [
    "TONES",
    "Verdict",
    "AttackStrength",
    "audit_verdict",
    "membership_verdict",
    "rank_attacks",
    "lowest_resolvable_fpr",
    "certified_verdict",
    "inversion_verdict",
    "claim_text",
    "record_delta",
    "most_severe",
]

#: Box colours: a finding against the claim, all well, a caution (inconclusive, leakage), a plain statement.
TONES = ("alert", "ok", "warn", "info")
#: The false-positive rates a membership verdict reads the TPR at, lowest first.
VERDICT_FPRS = (0.001, 0.01, 0.1)


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What a report page concludes, before any evidence.

    Attributes:
        status: the verdict in a few words ("violation", "no violation", "inconclusive", "sound", …).
        headline: one sentence stating it with its numbers.
        lines: a few supporting facts, one sentence each.
        tone: the box colour, one of :data:`TONES`.
    """

    status: str
    headline: str
    lines: tuple[str, ...] = ()
    tone: str = "info"

    def __post_init__(self) -> None:
        for name in ("status", "headline"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise v.invalid(name, f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        object.__setattr__(self, "lines", tuple(self.lines))
        if not all(isinstance(x, str) for x in self.lines):
            raise v.invalid_type("lines", f"lines must be strings, got {self.lines!r}")
        v.choice("tone", self.tone, TONES)


def record_delta(record: TrainedModel) -> float:
    """The δ a record's claim is stated at (its metrics', else its config's, else 10⁻⁵)."""
    return float(record.metrics.get("delta") or record.config.get("delta") or 1e-5)


def claim_text(epsilons: Mapping[str, float], delta: float) -> str:
    """The claim in words: its tightest ε_UB at ``delta`` and the accountant that gives it."""
    if not epsilons:
        return f"no accountant bounds its claim (ε = ∞ at δ = {delta:g})"
    best = min(epsilons, key=epsilons.__getitem__)
    return (
        f"ε_UB = {fmt_upper_bound(epsilons[best])} at δ = {delta:g} ({best}, the "
        f"tightest of {len(epsilons)} "
        f"accountant{'s' if len(epsilons) > 1 else ''})"
    )


#: Tones from the most to the least severe: a page of several verdicts leads with the first.
_SEVERITY = ("alert", "warn", "info", "ok")


def most_severe(verdicts: Sequence[tuple[str, Verdict]]) -> Verdict:
    """One verdict for a page of several subjects: the most severe, naming its subject, with the others as lines.

    Args:
        verdicts: (subject, its verdict) pairs, e.g. per target of an inversion page.
    """
    if not verdicts:
        raise v.invalid("verdicts", "verdicts must hold at least one (subject, Verdict) pair, got none")
    if len(verdicts) == 1:
        return verdicts[0][1]
    subject, lead = min(verdicts, key=lambda sv: _SEVERITY.index(sv[1].tone))
    others = tuple(f"{name}: {x.headline}" for name, x in verdicts if name != subject)
    return Verdict(
        status=lead.status, headline=f"{subject}: {lead.headline}", lines=(*lead.lines, *others), tone=lead.tone
    )


# ---------------------------------------------------------------------------------------- audit
def audit_verdict(result: AuditResult) -> Verdict:
    """Violation, no violation, or inconclusive (the design's ceiling ≤ ε_UB: no attack could show a violation)."""
    lb, ub = fmt_lower_bound(result.epsilon_lb), fmt_upper_bound(result.epsilon_ub)
    at = f"at {result.confidence:.0%} confidence, δ = {result.delta:g}"
    lines = [
        f"{result.method} audit, {result.threat_model}, {result.bound} bound: "
        f"{result.num_in} IN / {result.num_out} OUT observations."
    ]
    if result.ceiling is not None:
        lines.append(f"Ceiling (ε_LB of a perfect attack on the same counts): {fmt_lower_bound(result.ceiling)}.")
    else:
        lines.append("The ceiling was not recorded (result stored before ceilings were reported).")
    if math.isfinite(result.epsilon_ub) and result.epsilon_ub > 0:
        lines.append(f"Tightness ε_LB / ε_UB = {result.tightness:.2f}.")
    if result.violation:
        return Verdict(
            status="violation",
            headline=f"Violation: ε_LB = {lb} > ε_UB = {ub} ({result.accountant}) {at}. The "
            "implementation does not meet its claim.",
            lines=tuple(lines),
            tone="alert",
        )
    if not math.isfinite(result.epsilon_ub):
        return Verdict(
            status="no claim",
            headline="Nothing to violate: the claim states no privacy (ε_UB = ∞); ε_LB = "
            f"{lb} {at} measures the leakage.",
            lines=tuple(lines),
            tone="info",
        )
    if result.ceiling is not None and result.ceiling <= result.epsilon_ub:
        return Verdict(
            status="inconclusive",
            headline=(
                f"Inconclusive: ε_LB = {lb} ≤ ε_UB = {ub} ({result.accountant}), but "
                "even a perfect attack on this design reaches only "
                f"ε_LB = {fmt_lower_bound(result.ceiling)} ≤ ε_UB: it could not have "
                "shown a violation. More trials raise the ceiling."
            ),
            lines=tuple(lines),
            tone="warn",
        )
    return Verdict(
        status="no violation",
        headline=f"No violation: ε_LB = {lb} ≤ ε_UB = {ub} ({result.accountant}) {at}.",
        lines=tuple(lines),
        tone="ok",
    )


# ----------------------------------------------------------------------------------- membership
def lowest_resolvable_fpr(num_non_members: int, fprs: Sequence[float] = VERDICT_FPRS) -> float | None:
    """The lowest FPR of ``fprs`` the non-members resolve (at least 1/f of them), or ``None``."""
    ok = [f for f in fprs if tpr_unresolved(f, num_non_members) is None]
    return min(ok) if ok else None


@dataclass(frozen=True, kw_only=True)
class AttackStrength:
    """One membership attack's standing: ε_LB, TPR at the lowest resolvable FPR, AUC.

    Attributes:
        result: the stored result.
        epsilon_lb: its ε_LB at the verdict's δ and confidence.
        fpr: the lowest FPR its non-members resolve (``None``: not even 10 %).
        tpr: its TPR there (``None`` with ``fpr``).
        auc: its AUC.
    """

    result: MembershipResult
    epsilon_lb: float
    fpr: float | None
    tpr: float | None
    auc: float

    def tpr_text(self) -> str:
        """TPR as a percentage of the members, at its FPR: "12.5% (25/200) at 1% FPR"."""
        if self.fpr is None or self.tpr is None:
            return f"TPR at a low FPR not resolved ({self.result.num_non_members} non-members resolve no FPR below 10%)"
        n = self.result.num_members
        return f"TPR {fmt_rate(round(self.tpr * n), n)} at {self.fpr:.1%} FPR".replace(".0% FPR", "% FPR")


def rank_attacks(
    results: Sequence[MembershipResult], *, delta: float = 1e-5, confidence: float = 0.95
) -> list[AttackStrength]:
    """The attacks, strongest first: by ε_LB, then TPR at the lowest resolvable FPR, then AUC, then name."""
    ranked = []
    for r in results:
        fpr = lowest_resolvable_fpr(r.num_non_members)
        ranked.append(
            AttackStrength(
                result=r,
                epsilon_lb=float(r.epsilon_bound(delta=delta, confidence=confidence).epsilon_lb),
                fpr=fpr,
                tpr=None if fpr is None else float(r.tpr_at_fpr(fpr)),
                auc=float(r.auc()),
            )
        )
    # Attacks read at different FPRs compare the lower FPR's TPR first (the harder regime).
    return sorted(
        ranked,
        key=lambda a: (-a.epsilon_lb, a.fpr if a.fpr is not None else 2.0, -(a.tpr or 0.0), -a.auc, a.result.attack),
    )


def _interval(e: Estimate) -> str:
    """A rate's interval as the pages print it: "[17.1%, 34.4%]"."""
    return e.interval_text()


def membership_verdict(
    results: Sequence[MembershipResult],
    *,
    delta: float = 1e-5,
    confidence: float = 0.95,
    epsilon_ub: float | None = None,
    target_accuracy: float | Estimate | None = None,
    gap: GeneralisationGap | None = None,
) -> Verdict:
    """The strongest attack's ε_LB (and TPR at the lowest resolvable FPR) against the target's ε_UB, with the power.

    "No evidence" (no attack shows ε_LB > 0) always states what the audit could have shown: the
    ε_LB a perfect attack reaches on the same counts (:func:`~dpaudit.results.membership_rates.membership_power`).
    It is green only when that ceiling is above the claim's ε_UB (the audit could have shown a
    violation and did not); amber when it is not (no attack on this many members / non-members
    could have), and plain when the claim is unknown.

    Args:
        results: the attacks against one target.
        delta: δ of ε_LB and ε_UB.
        confidence: confidence of ε_LB and of every interval.
        epsilon_ub: the target's tightest claimed ε (∞ without a mechanism); ``None``: unknown.
        target_accuracy: the target's test accuracy, when its record is in the run: with its interval
            where the record holds its count (:func:`~dpaudit.results.record_accuracy.counted_test_accuracy`).
        gap: the target's train vs held-out accuracy, when its record holds them.
    """
    if not results:
        return Verdict(status="no attacks", headline="No membership attack against this target is stored.", tone="info")
    best = rank_attacks(results, delta=delta, confidence=confidence)[0]
    r = best.result
    rates = membership_rates(r, fprs=() if best.fpr is None else (best.fpr,), confidence=confidence)
    # The audit's power is its best design: the attack with the most members / non-members.
    power = max(
        (membership_power(x.num_members, x.num_non_members, delta=delta, confidence=confidence) for x in results),
        key=lambda p: p.ceiling,
    )
    if gap is not None:
        acc = (
            f"; the target's accuracy is {fmt_percent(gap.train.value)} on its members and "
            f"{fmt_percent(gap.held_out.value)} on non-members"
        )
    else:
        shown = (
            None
            if target_accuracy is None
            else target_accuracy.text()
            if isinstance(target_accuracy, Estimate)
            else fmt_percent(target_accuracy)
        )
        acc = f"; the target's test accuracy is {shown}" if shown is not None else ""
    claim = (
        "an unknown claim (no record in this run)"
        if epsilon_ub is None
        else f"the claimed ε_UB = {fmt_upper_bound(epsilon_ub)}"
    )
    tpr = rates.tpr_at_fpr.get(f"{best.fpr:g}") if best.fpr is not None else None
    auc = f"AUC {rates.auc.text(percent=False)}"
    lines = [
        f"{r.attack}: {best.tpr_text()}" + (f" {_interval(tpr)}" if tpr is not None else "") + f", {auc}, "
        f"on {r.num_members} members / {r.num_non_members} non-members ({confidence:.0%} intervals).",
        f"Power: on {power.num_members} members / {power.num_non_members} non-members a perfect attack reaches "
        f"ε_LB = {fmt_lower_bound(power.ceiling)} at most, and the lowest FPR resolved is "
        f"1/{power.num_non_members} = {fmt_percent(power.lowest_fpr)}.",
    ]
    if gap is not None:
        lines.append(
            f"Generalisation gap: accuracy {gap.train.text()} on members vs {gap.held_out.text()} on "
            f"non-members, gap {gap.gap.text()}."
        )
    lines.append(
        f"ε_LB: Clopper–Pearson at {confidence:.0%} confidence with a Bonferroni-corrected threshold, "
        f"δ = {delta:g}; attacks ranked by ε_LB, then TPR at the lowest FPR resolved."
    )
    lb = fmt_lower_bound(best.epsilon_lb)
    if epsilon_ub is not None and best.epsilon_lb > epsilon_ub:
        return Verdict(
            status="violation",
            headline=f"Violation: the strongest attack, {r.attack}, shows ε_LB = {lb} > {claim}{acc}.",
            lines=tuple(lines),
            tone="alert",
        )
    if best.epsilon_lb > 0:
        return Verdict(
            status="leaks membership",
            headline=f"Membership leaks: the strongest attack, {r.attack}, shows ε_LB = {lb} (≤ {claim}){acc}.",
            lines=tuple(lines),
            tone="warn",
        )
    ceiling = fmt_lower_bound(power.ceiling)
    if epsilon_ub is not None and math.isinf(epsilon_ub):
        return Verdict(
            status="no evidence",
            headline=f"No evidence of membership leakage from a model that claims no privacy (ε_UB = ∞): no attack "
            f"shows ε_LB > 0 at {confidence:.0%} confidence, where a perfect attack on these counts would show "
            f"ε_LB = {ceiling}; the strongest, {r.attack}, has {auc}{acc}.",
            lines=tuple(lines),
            tone="info",
        )
    if epsilon_ub is not None and power.ceiling <= epsilon_ub:
        return Verdict(
            status="no evidence",
            headline=f"No evidence, but too small to show a violation: no attack shows ε_LB > 0 at {confidence:.0%} "
            f"confidence, and on {power.num_members} members / {power.num_non_members} non-members even a perfect "
            f"attack reaches only ε_LB = {ceiling} ≤ {claim}; the strongest, {r.attack}, has {auc}{acc}. "
            "More members and non-members raise the ceiling.",
            lines=tuple(lines),
            tone="warn",
        )
    return Verdict(
        status="no evidence",
        headline="No evidence of membership leakage: no attack shows ε_LB > 0 at "
        f"{confidence:.0%} confidence, where a perfect attack on these counts would show ε_LB = {ceiling} "
        f"(against {claim}); the strongest, {r.attack}, has {auc}{acc}.",
        lines=tuple(lines),
        tone="ok" if epsilon_ub is not None else "info",
    )


# ------------------------------------------------------------------------------------ certified
def _violation(x: SoundnessViolation | Mapping[str, object]) -> SoundnessViolation:
    # A mapping is read (and validated) as the value certify stored it from.
    return x if isinstance(x, SoundnessViolation) else spec_from_dict(SoundnessViolation, x)


def certified_verdict(
    models: Sequence[tuple[str, Sequence[SoundnessViolation | Mapping[str, object]], bool]],
    *,
    reach: Sequence[CertificateReach] = (),
    attacked: Sequence[AttackedClassifier] = (),
) -> Verdict:
    """Unsound, vacuous at these radii, not checked or sound, from what certify stored.

    Certified accuracy bounds the robust accuracy of the classifier a certificate covers from
    below, and an attack's robust accuracy bounds it from above, so the check compares like with
    like only when both sides name their classifier: the lines name the certificate's prediction
    rule and the attacked one, with the attacked classifier's clean accuracy.

    Args:
        models: per certified model, (model id, its stored soundness violations — each a
            :class:`~dpaudit.results.certify_summary.SoundnessViolation` or its stored mapping —
            and whether it was checked at all: certificates and attacks both stored).
        reach: every certificate's certified accuracy at the radii asked and the largest radius it
            certifies; a certificate that certifies 0 % at every non-zero radius asked makes the
            verdict "vacuous at these radii" (amber): "certified ≤ robust" holds there for any
            certificate, sound or not, and the verdict names the radius it does reach.
        attacked: the classifier each attack ran against, with its clean accuracy.

    Raises:
        ValueError: a stored violation lacks a field or holds an invalid value (named).
    """
    bad = [(m, _violation(x)) for m, violations, _ in models for x in violations]
    checked = [m for m, _, ok in models if ok]
    if bad:
        lines = tuple(
            f"{m}: {x.certificate} at radius "
            f"{fmt_lower_bound(x.radius, 4)} certifies "
            f"{fmt_percent_lower_bound(x.certified_accuracy)} "
            f"> {fmt_percent_upper_bound(x.robust_accuracy)} the attacks left."
            for m, x in bad
        )
        return Verdict(
            status="unsound",
            headline=f"Unsound: {len(bad)} certificate(s) claim more accuracy at a radius "
            "than an attack left there — a bug in the certificate or its noise.",
            lines=lines,
            tone="alert",
        )
    by_model: dict[str, list[CertificateReach]] = {}
    for r in reach:
        by_model.setdefault(r.model_id, []).append(r)
    # Per certificate: a model whose own certificate certifies nothing is not vouched for by the
    # smoothing certificate of its noise beside it (another classifier's guarantee).
    vacuous = [r for r in reach if r.vacuous]
    if vacuous:
        said = [
            f"{r.model_id}: its {r.certificate} certificate certifies 0% at every radius asked "
            f"({', '.join(f'{x:g}' for x in r.radii if x > 0)}); the largest radius it certifies on a correctly "
            f"predicted test point is {fmt_lower_bound(r.largest_radius, 3)}"
            + (" (it certifies none)." if r.largest_radius == 0 else ": ask for radii at or below it.")
            for r in vacuous
        ]
        empty = {(r.model_id, r.certificate) for r in vacuous}
        said += [
            _classifier_line(m, [r for r in by_model.get(m, ()) if (m, r.certificate) not in empty], attacked)
            for m in checked
            if any((m, r.certificate) not in empty for r in by_model.get(m, ()))
        ]
        names = ", ".join(f"{r.model_id}'s {r.certificate}" for r in vacuous)
        largest = max(r.largest_radius for r in vacuous)
        return Verdict(
            status="vacuous at these radii",
            headline=f"Vacuous at these radii: {names} certif{'ies' if len(vacuous) == 1 else 'y'} nothing at any "
            f"non-zero radius asked (largest certified radius {fmt_lower_bound(largest, 3)}), so "
            '"certified ≤ robust" is no evidence of soundness there.',
            lines=tuple(said),
            tone="warn",
        )
    if not checked:
        return Verdict(
            status="not checked",
            headline="Not checked: no model has both certificates and attack results stored, "
            "so soundness cannot be judged.",
            tone="info",
        )
    return Verdict(
        status="sound",
        headline="Sound: at every radius, certified accuracy ≤ the robust accuracy the "
        f"strongest attack left ({len(checked)} "
        f"model{'s' if len(checked) > 1 else ''} checked; each line names the classifier on either side).",
        lines=(
            f"Models checked: {', '.join(checked)}.",
            *(_classifier_line(m, by_model.get(m, ()), attacked) for m in checked),
        ),
        tone="ok",
    )


def _classifier_line(model_id: str, reach: Sequence[CertificateReach], attacked: Sequence[AttackedClassifier]) -> str:
    """One model's two sides of the soundness check, each classifier named, the attacked one with its clean
    accuracy."""
    certs = "; ".join(f"{r.certificate} certifies {r.prediction_rule}" for r in reach) or "no certificate read"
    rules: dict[str, list[AttackedClassifier]] = {}
    for a in attacked:
        if a.model_id == model_id:
            rules.setdefault(a.prediction_rule, []).append(a)
    hits = "; ".join(
        f"{', '.join(a.attack for a in group)} attacked {rule}, clean accuracy "
        + " / ".join(dict.fromkeys(counted_accuracy(a.clean_correct, a.num_examples).text for a in group))
        for rule, group in rules.items()
    )
    return f"{model_id}: {certs}" + (f"; {hits}." if hits else ".")


# ------------------------------------------------------------------------------------ inversion
def inversion_verdict(
    results: Sequence[InversionResult],
    *,
    delta: float = 1e-5,
    confidence: float = 0.95,
    epsilon_ub: float | None = None,
    num_dataset_classes: int | None = None,
) -> Verdict:
    """Identifies members, class only, nothing — or withheld when the evaluator is too weak to judge.

    In order:

    1. withheld ("evaluator too weak") when the evaluator that judged an attack fails
       :func:`~dpaudit.results.inversion.evaluator_check` (the lower end of its accuracy's
       Clopper–Pearson interval not above (1 + chance)/2): its top-1 cannot tell a failed
       reconstruction from a failed judge;
    2. a violation when the reconstructions' membership score shows ε_LB > ε_UB (a valid bound
       on the claim, whatever the images look like);
    3. "class only" when most classes' reconstructions are nearer the class mean than any member
       (the page's member-vs-class-average table): they show the class, not the members, and a
       small positive membership ε_LB does not overrule that;
    4. "identifies members" when the membership score's ε_LB > 0;
    5. "class only" when the evaluator's top-1 is above chance (the lower end of its
       Clopper–Pearson interval over the classes inverted above 1/N);
    6. nothing recovered.

    Args:
        results: the inversions of one target.
        delta: δ of the membership score's ε_LB.
        confidence: confidence of that ε_LB and of every interval.
        epsilon_ub: the target's tightest claimed ε, when its record is in the run.
        num_dataset_classes: N of chance 1/N (else the classes inverted).
    """
    if not results:
        return Verdict(status="no attacks", headline="No model-inversion result is stored.", tone="info")
    scored = [(r, float(r.membership.epsilon_bound(delta=delta, confidence=confidence).epsilon_lb)) for r in results]
    r, lb = max(scored, key=lambda s: (s[1], s[0].attack_accuracy_top1))
    n = num_dataset_classes or r.num_classes
    chance = 1.0 / n
    top = max(results, key=lambda x: x.attack_accuracy_top1)
    k = top.num_classes
    top1 = proportion(int(top.top1_correct().sum()), k, confidence=confidence)
    near_mean = int(r.closer_to_mean().sum())
    lines = [
        f"{top.attack}: the evaluator recognises "
        f"{top1.text()} of the "
        f"reconstructions' classes (top-1; chance {fmt_percent(chance)}).",
        f"{r.attack}: nearer the class mean than any member in {near_mean}/{r.num_classes} classes; "
        "membership score of the reconstructions ε_LB = "
        f"{fmt_lower_bound(lb)} at {confidence:.0%} confidence (δ = {delta:g}), "
        f"AUC {r.membership.auc():.3f}"
        f" on {r.membership.num_members} members / {r.membership.num_non_members} non-members"
        # An AUC well above ½ with ε_LB = 0 is a sample too small to tell, not evidence: say so beside the finding
        # sentences.
        + (" — too few for the AUC to be evidence of membership." if lb == 0 and r.membership.auc() >= 0.6 else "."),
    ]
    lines += [text for x in results if (text := stopping_text(x)) is not None]
    checks = [(x, c) for x in results if (c := evaluator_check(x, chance=chance, confidence=confidence)) is not None]
    for x, c in checks:
        interval = (
            f" [{fmt_percent(c.low)}, {fmt_percent(c.high)}] on {c.num_tested} held-out images"
            if c.low is not None and c.high is not None
            else " (the number of images it was tested on is not stored)"
        )
        lines.append(
            f"{x.attack}'s evaluator: accuracy {fmt_percent(c.accuracy)}{interval}: "
            + ("too weak." if c.too_weak else "trusted.")
        )
    if checks:
        lines.append(f"Evaluator rule: {checks[0][1].rule()}.")
    if epsilon_ub is not None:
        lines.append(
            f"The target claims ε_UB = {fmt_upper_bound(epsilon_ub)}"
            + (" — below this ε_LB: a violation of the claim." if lb > epsilon_ub else ".")
        )
    weak = [(x, c) for x, c in checks if c.too_weak]
    if weak:
        x, c = weak[0]
        shown = fmt_percent(c.accuracy) + (
            f" [{fmt_percent(c.low)}, {fmt_percent(c.high)}] on {c.num_tested} held-out images"
            if c.low is not None and c.high is not None
            else ""
        )
        return Verdict(
            status="withheld",
            headline=f"Verdict withheld: evaluator too weak: accuracy {shown}, chance {fmt_percent(chance)}, "
            f"not above the {fmt_percent(c.needed)} it needs; the top-1 of "
            f"{', '.join(sorted({w.attack for w, _ in weak}))} cannot tell a failed reconstruction "
            "from a failed judge.",
            lines=tuple(lines),
            tone="warn",
        )
    if epsilon_ub is not None and lb > epsilon_ub:
        return Verdict(
            status="violation",
            headline=f"Violation: {r.attack}'s reconstructions score members above held-out images of their class "
            f"with ε_LB = {fmt_lower_bound(lb)} > ε_UB = {fmt_upper_bound(epsilon_ub)}"
            + (
                f", although {near_mean} of {r.num_classes} look nearer the class mean than any member."
                if near_mean > r.num_classes / 2
                else "."
            ),
            lines=tuple(lines),
            tone="alert",
        )
    if near_mean > r.num_classes / 2:
        return Verdict(
            status="class only",
            headline=f"Class only: {r.attack}'s reconstructions show the class, not the members: "
            f"{near_mean} of {r.num_classes} are nearer the class mean than any member"
            + (
                f" (the membership score's ε_LB = {fmt_lower_bound(lb)} does not single out members)."
                if lb > 0
                else "."
            ),
            lines=tuple(lines),
            tone="info",
        )
    if lb > 0:
        return Verdict(
            status="identifies members",
            headline=f"Identifies members: {r.attack}'s reconstructions sit nearer training "
            "members than held-out images of their class (ε_LB = "
            f"{fmt_lower_bound(lb)}; nearer the class mean in only {near_mean} of {r.num_classes} classes).",
            lines=tuple(lines),
            tone="warn",
        )
    if top1.low > chance:
        return Verdict(
            status="class only",
            headline=f"Class only: {top.attack} recovers what a class looks like to the evaluator (top-1 "
            f"{fmt_percent(top1.value)} {_interval(top1)} against chance "
            f"{fmt_percent(chance)}), not which images were members; in pixel distance only {near_mean} of "
            f"{r.num_classes} are nearer the class mean than any member, too few to call them the class average.",
            lines=tuple(lines),
            tone="info",
        )
    return Verdict(
        status="nothing",
        headline="Nothing recovered: the evaluator recognises no class above chance at "
        f"{confidence:.0%} confidence (top-1 {fmt_percent(top1.value)} {_interval(top1)}, chance "
        f"{fmt_percent(chance)}) and no reconstruction points to members.",
        lines=tuple(lines),
        tone="ok",
    )
