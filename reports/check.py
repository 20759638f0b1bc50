"""The conformance battery's report: the verdict of every check ``dpaudit check`` ran, from its ``check.json``.

What a reader deciding whether a DP training function meets its claim looks for:

1. **the verdict** first — one diagnosis when checks were violated (the violated check ranked
   first by :func:`~dpaudit.results.check.diagnosis`, a grey-box cause before the statistical
   evidence that follows from it, a saturated ε_LB labelled "at least this much"), which passed
   (their design could have shown a violation and did not), and which were
   inconclusive, with the ceiling each could reach (the largest ε_LB its design allows at the size
   it ran, at or below ε_UB: it could not have shown a violation);
2. **one row per check**: status, ε_LB, ε_UB, ceiling, trainings, seconds, and what the check is
   designed to detect and cannot detect (docs/audits/check.md);
3. **one figure**: ε_LB of every check as a bar against ε_UB, each check's ceiling as a marker, so
   the distance between evidence and claim and between evidence and what the design allows can
   be read on one axis.

Verdicts are read from the stored report, never recomputed. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure

from dpaudit.results.check import CHECK_FILE, CheckOutcome, CheckReport, diagnosis, load_check_report
from dpaudit.results.grid_verdicts import check_verdict
from dpaudit.store import RunDir
from reports.figures import colour, legend_outside, new_axes, style
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import Shown, epsilon_lb_cell, epsilon_ub_cell, fmt_lower_bound, fmt_upper_bound
from reports.render import Figure, Items, Section, Table, write_report_files
from reports.verdict_box import verdict_section, with_status

__all__ = ["CHECKS_DIR", "StoredCheck", "load_checks", "check_figure", "check_sections", "check_page"]

#: Where ``dpaudit check`` keeps its results under the run directory (``check.json`` and one folder per check).
CHECKS_DIR = "checks"
_STATUS_COLOUR = {"violated": colour("epsilon_lb"), "passed": "#7F7F7F", "inconclusive": "#BBBBBB"}


@dataclass(frozen=True, kw_only=True)
class StoredCheck:
    """One battery run of a run directory, as its page shows it.

    Attributes:
        path: its ``check.json``.
        report: the stored verdicts.
    """

    path: Path
    report: CheckReport


def load_checks(run: RunDir) -> list[StoredCheck]:
    """The battery verdict stored in the run (``checks/check.json``), or none."""
    path = run.path / CHECKS_DIR / CHECK_FILE
    return [StoredCheck(path=path, report=load_check_report(path))] if path.is_file() else []


def _eps(x: float) -> str:
    """An ε_UB for the page, rounded up."""
    return fmt_upper_bound(float(x))


def _eps_lb(x: float) -> str:
    """An ε_LB for the page, rounded down."""
    return fmt_lower_bound(float(x))


def check_figure(outcomes: Sequence[CheckOutcome], *, ax: Axes | None = None) -> MplFigure | None:
    """ε_LB of every check as a horizontal bar, ε_UB as a vertical line, each ceiling as a marker (``None`` without
    checks).

    A bar is red where the check was violated and grey otherwise; infinite values (an ε_UB no
    accountant bounds, an unbounded ceiling) are drawn at the right edge with an arrow-head marker.
    """
    if not outcomes:
        return None
    finite = [x for o in outcomes for x in (o.epsilon_lb, o.ceiling, o.epsilon_ub) if math.isfinite(x)]
    right = max([*finite, 1e-3]) * 1.15
    fig, ax = new_axes(ax, size=(7.5, 0.55 * len(outcomes) + 1.6))
    ys = list(range(len(outcomes)))[::-1]  # the first check on top, as in the table
    labels = {"violated": "ε_LB, violated (> ε_UB)", "passed": "ε_LB, passed", "inconclusive": "ε_LB, inconclusive"}
    for y, o in zip(ys, outcomes):
        # The first bar of each status that is drawn (ε_LB > 0) carries the legend entry: a bar of width 0 draws
        # nothing, so it keys nothing.
        ax.barh(
            y,
            min(o.epsilon_lb, right),
            height=0.55,
            color=_STATUS_COLOUR[o.status],
            alpha=0.9,
            label=labels.pop(o.status, None) if o.epsilon_lb > 0 else None,
        )
        # A saturated ε_LB is its design's ceiling: the leak is at least this much, never "this much".
        ax.annotate(
            f"≥ {_eps_lb(o.epsilon_lb)} ({o.status}, saturated)"
            if o.saturated
            else f"{_eps_lb(o.epsilon_lb)} ({o.status})",
            (min(o.epsilon_lb, right), y),
            xytext=(4, 7),
            textcoords="offset points",
            fontsize=8,
            va="bottom",
        )
    ceil_style = style("ceiling")
    ceilings = [min(o.ceiling, right) for o in outcomes]
    ax.plot(
        ceilings,
        ys,
        linestyle="none",
        marker=ceil_style["marker"],
        color=ceil_style["color"],
        markersize=8,
        markerfacecolor="none",
        markeredgewidth=1.8,
        label="ceiling (largest ε_LB the check's design allows)",
    )
    ub = outcomes[0].epsilon_ub
    if math.isfinite(ub):
        ax.axvline(
            ub,
            color=colour("epsilon_ub"),
            linestyle="--",
            linewidth=1.4,
            label=f"ε_UB = {fmt_upper_bound(ub)} (the claim)",
        )
    ax.set_yticks(ys)
    ax.set_yticklabels([o.name for o in outcomes])
    ax.set_xlim(0, right)
    ax.set_ylim(-0.7, len(outcomes) - 0.3)
    ax.set_xlabel("ε at the battery's δ (ε_LB at each check's confidence)")
    ax.grid(axis="x", alpha=0.3)
    legend_outside(ax)
    return fig


def _outcome_table(report: CheckReport) -> Table:
    # Bounds print their safe way, as in the verdict box above the table: ε_LB and the ceiling (the
    # ε_LB of a perfect attack) rounded down, ε_UB up; a saturated ε_LB says it is a floor.
    # The diagnosis is marked where it has to be told apart from other violated checks.
    ranked = diagnosis(report)
    lead = ranked[0] if len(ranked) > 1 else None
    rows = [
        [
            o.name,
            ("VIOLATED (diagnosis)" if o is lead else "VIOLATED") if o.violated else o.status,
            # A grey-box check has no ε_LB or ceiling: its verdict is read off the replayed trainings.
            "—"
            if o.kind == "grey-box"
            # Saturated: the caption says what it means; the cell stays short.
            else (
                Shown(o.epsilon_lb, f"≥ {_eps_lb(o.epsilon_lb)} (saturated)")
                if o.saturated
                else epsilon_lb_cell(o.epsilon_lb)
            ),
            epsilon_ub_cell(o.epsilon_ub),
            "—" if o.kind == "grey-box" else epsilon_lb_cell(o.ceiling),
            o.num_trials,
            o.seconds,
            o.detects,
            o.misses,
        ]
        for o in report.outcomes
    ]
    return Table(
        columns=["check", "status", "ε_LB", "ε_UB", "ceiling", "trainings", "seconds", "detects", "misses"],
        rows=rows,
        caption=(
            "ε_LB holds at each check's confidence (the battery's, split by "
            "Bonferroni); ceiling: the largest ε_LB the check's design could show "
            "at the size it ran "
            "(a perfect attack on the same counts) — a best case, not the check's chance of flagging a given bug. "
            "A statistical check is violated iff ε_LB > ε_UB, "
            "passed iff not violated and ceiling > ε_UB, otherwise inconclusive; an ε_LB marked saturated "
            "equals its ceiling, so the leak is at least that much. The diagnosis is the violated check "
            "ranked first (a grey-box cause before statistical evidence); the others most likely show the same bug."
            + (
                " A grey-box check (—) has no ε_LB: it compares the trainings on D and on D plus one record,"
                " replayed with the same randomness, with the claim, and is violated when they differ from it."
                if any(o.kind == "grey-box" for o in report.outcomes)
                else ""
            )
        ),
    )


def _battery_table(report: CheckReport) -> Table:
    rows = [
        ["training function", report.train_fn],
        ["model builder", report.model_fn or "— (the zoo model of the dataset)"],
        ["claim", report.claim_description],
        ["δ", f"{report.delta:g}"],
        ["ε_UB at δ", "—" if report.epsilon_ub is None else _eps(report.epsilon_ub)],
        ["family-wise confidence", f"{report.confidence:g} (each check at its Bonferroni share)"],
        ["budget", f"{report.budget_minutes:g} minutes"],
        ["wall time", f"{report.seconds:.1f} seconds"],
    ]
    return Table(columns=["what", "value"], rows=rows)


def check_sections(report: CheckReport) -> list[Section]:
    """The battery page's sections: the verdict, the checks (table, figure, findings), what was checked against what."""
    checks: list[Any] = [
        _outcome_table(report),
        Figure(
            figure=check_figure([o for o in report.outcomes if o.kind != "grey-box"]),
            name="epsilon",
            caption="ε_LB per statistical check (bars, coloured by status as the legend says) against "
            "the claim's ε_UB (dashed line) and each check's ceiling (open "
            "triangles), the most its design could show at the size it ran; a bar that reaches its "
            "triangle is saturated (at least this much)",
            empty="the battery ran no statistical check (grey-box checks have no ε_LB to draw)",
        ),
    ]
    if report.outcomes:
        checks.append(Items(items=[o.finding for o in report.outcomes]))
    return [
        verdict_section(check_verdict(report)),
        Section(title="Checks", blocks=checks),
        Section(title="What was checked", blocks=[_battery_table(report)]),
    ]


def check_page(item: StoredCheck, out: Path) -> Page:
    """Writes ``check.{html,md}`` and its figure into ``out``; the violated checks' findings are the page's
    violations."""
    report = item.report
    sections = check_sections(report)
    written = write_report_files(
        out, sections, title=f"Conformance checks of {report.train_fn}", stem="check", kind="check"
    )
    counts = {s: sum(o.status == s for o in report.outcomes) for s in ("violated", "passed", "inconclusive")}
    tally = ", ".join(f"{n} {s}" for s, n in counts.items() if n) if report.outcomes else "no check ran"
    link = with_status(f"{report.train_fn} ({tally})", sections)
    return Page(html=written.html, link=link, violations=tuple(f"check {o.finding}" for o in report.violations))


REPORT_KINDS.register(
    ReportKind(
        name="checks",
        group="Conformance checks",
        order=25,
        load=load_checks,
        verdict=lambda item: check_verdict(item.report),
        render=check_page,
    )
)
