"""The verdicts of the conformance battery and of a comparison grid, computed from stored results (torch-free).

Beside :mod:`dpaudit.results.verdicts` (the shared :class:`~dpaudit.results.verdicts.Verdict` and
the single-run kinds), these two judge many outcomes at once:

* a conformance battery: one diagnosis when a check is violated (a grey-box cause before the
  statistical evidence that follows from it), a check's ε_LB above ε_UB, or no check that could
  have shown one;
* a comparison: every row whose evidence is a finding — its stored verdict (ε_LB > ε_UB, an
  unsound certificate) or leakage at all (ε_LB > 0) — the most severe first.
"""

from __future__ import annotations

import math
from typing import Any

from dpaudit.results.check import CheckReport
from dpaudit.results.comparison import ComparisonResult, ComparisonRow
from dpaudit.results.membership_rates import MembershipPower, membership_power
from dpaudit.results.numbers import (
    fmt_lower_bound,
    fmt_percent,
    fmt_upper_bound,
)
from dpaudit.results.verdicts import Verdict

__all__ = ["check_lb_text", "check_verdict", "compare_verdict", "row_power"]


# -------------------------------------------------------------------------------------- checks
def check_lb_text(outcome: Any) -> str:
    """A statistical check's ε_LB as a page shows it: rounded down, and labelled when it is saturated.

    A saturated ε_LB equals its design's ceiling: the check could show no more, so the leak is at
    least this much and may be far larger ("≥ 10.3, saturated: at its design's ceiling").
    """
    lb = fmt_lower_bound(outcome.epsilon_lb)
    return f"≥ {lb}, saturated: at its design's ceiling" if outcome.saturated else lb


def _check_violation(o: Any) -> str:
    """One violated check in words: a grey-box check's cause, a statistical check's ε_LB against ε_UB."""
    if o.kind == "grey-box":
        return f"{o.name}: {o.cause or o.finding}"
    return f"{o.name}: ε_LB {check_lb_text(o)} > ε_UB {fmt_upper_bound(o.epsilon_ub)}"


def check_verdict(report: CheckReport) -> Verdict:
    """The conformance battery: one diagnosis when any check is violated, else no violation or inconclusive.

    Violated checks are ranked by :func:`~dpaudit.results.check.diagnosis` (a grey-box cause first, then
    statistical checks below their ceiling, then saturated ones); the headline names the first as the
    diagnosis and the others as what it most likely also explains, so one bug is not reported as four.
    A passed check's ceiling is said for what it is — the largest ε_LB its design could show at the
    size it ran, a best case — never as its power to detect a given bug.
    """
    ub = report.epsilon_ub
    ub_text = "—" if ub is None else fmt_upper_bound(ub)
    passed = [o for o in report.outcomes if o.status == "passed"]
    unsure = [o for o in report.outcomes if o.status == "inconclusive"]
    lines = [
        f"passed: {o.name}: {o.cause}"  # a grey-box check: read off the replay, no ε_LB
        if o.kind == "grey-box"
        else f"passed: {o.name}: found ε_LB {fmt_lower_bound(o.epsilon_lb)} ≤ ε_UB {ub_text}; its design's ceiling "
        f"(the ε_LB a perfect attack on its {o.num_trials} trainings would reach) is "
        f"{fmt_lower_bound(o.ceiling)} > ε_UB, a best case, not its chance of flagging a given bug"
        for o in passed
    ]
    # A ceiling of 0 is a check that could not run at all; its finding says why.
    lines += [
        f"inconclusive: {o.name}: its design's ceiling {fmt_lower_bound(o.ceiling)} ≤ ε_UB {ub_text}: it could not "
        "have shown a violation at this size; more budget raises the ceiling"
        if o.ceiling > 0
        else f"inconclusive: {o.finding}"
        for o in unsure
    ]
    if report.violations:
        from dpaudit.results.check import diagnosis

        lead, *also = diagnosis(report)
        headline = f"Diagnosis: {_check_violation(lead)}."
        if also:
            headline += (
                f" {len(also)} other check{'s' if len(also) > 1 else ''} also fired, most likely on the same bug "
                f"(rerun after fixing it): {', '.join(o.name for o in also)}."
            )
        violated = [f"violated{' (diagnosis)' if o is lead else ''}: {_check_violation(o)}" for o in (lead, *also)]
        return Verdict(status="violation", headline=headline, lines=(*violated, *lines), tone="alert")
    if not report.outcomes:
        return Verdict(status="inconclusive", headline="The battery ran no check.", tone="warn")
    if not passed:
        return Verdict(
            status="inconclusive",
            headline=f"Inconclusive: no check's design could reach ε_UB = {ub_text} at the size it ran.",
            lines=tuple(lines),
            tone="warn",
        )
    replays = sum(o.kind == "grey-box" for o in passed)
    games = len(passed) - replays
    parts = []
    if replays:
        plural = replays != 1
        whose = "their" if plural else "its"
        parts.append(f"{replays} grey-box replay{'s' if plural else ''} found none of {whose} bug classes")
    if games:
        plural = games != 1
        parts.append(f"{games} statistical check{'s' if plural else ''} with a ceiling above ε_UB found ε_LB ≤ ε_UB")
    ran = ", ".join(parts)
    headline = f"No violation at {report.confidence:.0%} family-wise confidence against ε_UB = {ub_text}: {ran}"
    if unsure:
        # What did not run is not evidence of absence: the box is amber, and says how much of the battery it rests on.
        headline += (
            f"; {len(unsure)} of {len(report.outcomes)} checks could not show a violation at the size they ran "
            "(inconclusive, below), so this rests on the others only."
        )
    else:
        headline += " (how often each check flags a given bug is measured in docs/audits/check.md)."
    return Verdict(status="no violation", headline=headline, lines=tuple(lines), tone="warn" if unsure else "ok")


# -------------------------------------------------------------------------------------- compare
def _compare_row(r: Any) -> str:
    acc = f", accuracy {fmt_percent(r.test_accuracy)}" if not math.isnan(r.test_accuracy) else ""
    if not r.epsilon_ub or not math.isfinite(r.epsilon_ub_best):
        return "no DP claim on the training data" + acc
    shown = (
        f"ε_LB {fmt_lower_bound(r.epsilon_lb)} by {r.best_attack}"
        if r.best_attack
        else "no attack showed leakage: ε_LB 0"
    )
    return f"{shown} vs ε_UB {fmt_upper_bound(r.epsilon_ub_best)}{acc}"


#: The kinds of a compare row's finding, most severe first: a stored violation or unsound certificate (alert), a
#: certificate that certifies nothing at any radius of the grid, and membership leakage (both cautions).
FINDING_KINDS = ("violation", "vacuous", "leak")


def _vacuous_radii(r: ComparisonRow) -> bool:
    """The row certifies and its certificate is 0 % at every positive radius of the grid."""
    positive = [a for x, a in r.certified_accuracy.items() if float(x) > 0]
    return bool(positive) and max(positive) == 0.0


def _compare_finding(r: ComparisonRow) -> tuple[str, str] | None:
    """A row's finding as (kind, sentence), kind one of :data:`FINDING_KINDS`, or ``None`` when its evidence shows
    nothing.

    A stored violation (ε_LB > ε_UB, an unsound certificate) is an alert; a positive ε_LB within the
    claim, or against no claim at all (the non-private baseline), is membership leakage, a caution:
    the membership page of the same row calls it "leaks membership". So is a certificate of 0 % at
    every radius the grid asked: "certified ≤ robust" then holds for any model, and the
    certified page calls it "vacuous at these radii".
    """
    if r.verdict != "no violation":
        why = f" — {'; '.join(r.findings)}" if r.findings else ""
        return "violation", f"{r.label}: {r.verdict} ({_compare_row(r)}){why}."
    if r.epsilon_lb > 0:
        by = f" by {r.best_attack}" if r.best_attack else ""
        if not r.epsilon_ub or not math.isfinite(r.epsilon_ub_best):
            return (
                "leak",
                f"{r.label}: leaks membership, ε_LB {fmt_lower_bound(r.epsilon_lb)}{by} (no DP claim bounds it).",
            )
        return "leak", (
            f"{r.label}: leaks membership, ε_LB {fmt_lower_bound(r.epsilon_lb)}{by}, within its claim "
            f"ε_UB {fmt_upper_bound(r.epsilon_ub_best)}."
        )
    if _vacuous_radii(r):
        radii = ", ".join(x for x in r.certified_accuracy if float(x) > 0)
        unattacked = (
            f", against {fmt_percent(r.certified_conventional_accuracy)} for that classifier unattacked"
            if r.certified_conventional_accuracy is not None
            else ""
        )
        return "vacuous", (
            f"{r.label}: certificate vacuous at these radii: it certifies 0% at every radius asked "
            f"({radii}){unattacked} — the grid's radii lie beyond what it can certify, so it says nothing there."
        )
    return None


def row_power(row: ComparisonRow, *, delta: float, confidence: float) -> MembershipPower | None:
    """What the row's membership attacks could have shown: a perfect attack's ε_LB on the largest member /
    non-member counts any of its attacks scored (:func:`~dpaudit.results.membership_rates.membership_power`).

    It is a best case: the grid's ε_LB is also split over attacks and repeats (Bonferroni), which
    only lowers it, so a row whose power is already at or below its ε_UB could not have shown a
    violation. ``None`` for a row attacked by no membership attack, or stored before the counts were kept.
    """
    counts = {(m.num_members, m.num_non_members) for m in row.membership.values()}
    known = [(a, b) for a, b in counts if isinstance(a, int) and isinstance(b, int) and a > 0 and b > 0]
    if not known:
        return None
    return max((membership_power(a, b, delta=delta, confidence=confidence) for a, b in known), key=lambda p: p.ceiling)


def _power_line(row: ComparisonRow, power: MembershipPower | None) -> str:
    """One DP row's power in words, against its ε_UB."""
    if power is None:
        return f"{row.label}: power not recorded (no membership counts stored with this comparison)."
    size = f"a perfect attack on {power.num_members} members / {power.num_non_members} non-members"
    ub = row.epsilon_ub_best
    if power.ceiling > ub:
        return (
            f"{row.label}: could have shown ε_LB up to {fmt_lower_bound(power.ceiling)} ({size}), above its "
            f"ε_UB {fmt_upper_bound(ub)}: a violation was within reach."
        )
    return (
        f"{row.label}: could have shown ε_LB at most {fmt_lower_bound(power.ceiling)} ({size}), not above its "
        f"ε_UB {fmt_upper_bound(ub)}: no attack of this size could have shown a violation."
    )


def compare_verdict(result: ComparisonResult) -> Verdict:
    """Every finding of the grid, the most severe first; the box takes the most severe one's colour.

    A row's evidence is a finding when its stored verdict is one (a violation, an unsound
    certificate: alert) or when its attacks show leakage at all (ε_LB > 0, within its claim or
    against none: "leaks membership", a caution). Rows without a finding follow, one line each.
    """
    found = [(r, f) for r in result.rows if (f := _compare_finding(r)) is not None]
    # Every DP row without a finding states its power: the ε_LB its attacks could have shown at their size.
    private = [r for r in result.rows if r.epsilon_ub and math.isfinite(r.epsilon_ub_best)]
    powers = {r.label: row_power(r, delta=result.delta, confidence=result.confidence) for r in private}
    quiet = [r for r in private if all(r is not x for x, _ in found)]
    power_lines = tuple(f"Power: {_power_line(r, powers[r.label])}" for r in quiet)
    of = {kind: [r for r, (k, _) in found if k == kind] for kind in FINDING_KINDS}
    alerts, vacuous, leaks = of["violation"], of["vacuous"], of["leak"]
    lines = (
        *(text for kind in FINDING_KINDS for _, (k, text) in found if k == kind),
        *(f"{r.label}: no finding ({_compare_row(r)})." for r in result.rows if all(r is not x for x, _ in found)),
    )
    leak_names = ", ".join(f"{r.label} (ε_LB {fmt_lower_bound(r.epsilon_lb)})" for r in leaks)
    vacuous_names = ", ".join(r.label for r in vacuous)
    cautions = " ".join(
        (
            *([f"Membership also leaks in {leak_names}."] if leaks else []),
            *([f"Certificates vacuous at the grid's radii: {vacuous_names}."] if vacuous else []),
        )
    )
    if alerts:
        names = ", ".join(f"{r.label} ({r.verdict})" for r in alerts)
        return Verdict(
            status="violation",
            headline=f"{len(alerts)} of {len(result.rows)} settings contradict their claim: {names}."
            + (f" {cautions}" if cautions else ""),
            lines=(*lines, *power_lines),
            tone="alert",
        )
    if leaks or vacuous:
        parts = []
        if leaks:
            parts.append(
                f"membership leaks in {len(leaks)} of {len(result.rows)} settings: {leak_names} — within its claim "
                "or against no claim"
            )
        if vacuous:
            many = len(vacuous) > 1
            parts.append(
                f"{len(vacuous)} certificate{'s' if many else ''} certif{'y' if many else 'ies'} nothing at any "
                f"radius of the grid: {vacuous_names}"
            )
        return Verdict(
            status="leaks membership" if leaks else "vacuous at these radii",
            headline="No violation, but " + "; and ".join(parts) + ".",
            lines=(*lines, *power_lines),
            tone="warn",
        )
    # "No violation" is green only when every DP row could have shown a violation (its power above its ε_UB) and did
    # not.
    weak = [r for r in private if (p := powers[r.label]) is not None and p.ceiling <= r.epsilon_ub_best]
    unknown = [r for r in private if powers[r.label] is None]
    headline = (
        f"No violation: in all {len(result.rows)} settings no attack showed leakage (ε_LB = 0), and no "
        "certificate claims more than an attack leaves."
    )
    if weak:
        names = ", ".join(
            f"{r.label} (at most ε_LB {fmt_lower_bound(powers[r.label].ceiling)} vs ε_UB "  # type: ignore[union-attr]
            f"{fmt_upper_bound(r.epsilon_ub_best)})"
            for r in weak
        )
        headline += (
            f" Not reassuring for {len(weak)} of {len(private)} DP settings: at this size their attacks could not "
            f"have shown a violation — {names}."
        )
        tone = "warn"
    elif unknown:
        headline += " The power of " + ", ".join(r.label for r in unknown) + " was not recorded."
        tone = "info"
    elif private:
        least = min(private, key=lambda r: powers[r.label].ceiling - r.epsilon_ub_best)  # type: ignore[union-attr]
        headline += (
            f" Every DP setting's attacks could have shown a violation at this size (the closest: {least.label}, "
            f"up to ε_LB {fmt_lower_bound(powers[least.label].ceiling)} vs ε_UB "  # type: ignore[union-attr]
            f"{fmt_upper_bound(least.epsilon_ub_best)})."
        )
        tone = "ok"
    else:
        tone = "info"
    return Verdict(status="no violation", headline=headline, lines=(*lines, *power_lines), tone=tone)
