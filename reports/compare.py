"""The comparison report: every defense of a grid under the same attacks (``dpaudit compare``).

Renders a stored :class:`~dpaudit.results.comparison.ComparisonResult` (it computes nothing
new): the verdict per defense, the defense × measure matrix with links to each row's
membership, certified and inversion reports, ε_UB under every accountant, the membership
measures on the most vulnerable samples beside the population averages (Aerni et al. 2024),
and the figures a reader would rather look at than read — privacy–utility curves (accuracy
against ε_UB and ε_LB on one axis, one colour and marker per setting, the Pareto front marked),
attack advantage against the DP ceiling e^ε − 1 (Yeom et al. 2018, Theorem 1; Jayaraman & Evans
2019, Figure 1), and robust/certified accuracy against the radius. Tables also go to CSV and
the summary to JSON.

The matrix's cells, tables and CSV are built in :mod:`reports.compare_matrix`; this module adds the
figures and assembles the page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure

from dpaudit.results.comparison import ComparisonResult, ComparisonRow, load_comparison
from dpaudit.results.verdicts import compare_verdict
from dpaudit.store import RunDir, atomic_write_json, atomic_write_text
from reports.compare_matrix import _csv, _matrix_tables, _membership_table, _strongest, matrix_rows
from reports.figures import (
    FONT_PT,
    Looks,
    colour,
    legend_outside,
    new_axes,
    new_figure,
    plain_log_ticks,
    rate_text,
    setting_looks,
    zero_and_log_axes,
)
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.render import Figure, Items, Section, WrittenReport, write_report_files
from reports.verdict_box import verdict_section

__all__ = [
    "advantage_figure",
    "compare_sections",
    "compare_page",
    "compare_stem",
    "load_comparisons",
    "privacy_utility_figure",
    "render_compare",
    "robustness_figure",
    "vulnerable_figure",
]


def compare_stem(name: str) -> str:
    return f"compare-{name}"


def load_comparisons(run: RunDir) -> list[ComparisonResult]:
    """Every comparison stored in the run, by name."""
    return [load_comparison(d) for d in run.compare_dirs()]


def _family_rows(result: ComparisonResult) -> dict[str, list[ComparisonRow]]:
    families: dict[str, list[ComparisonRow]] = {}
    for r in result.rows:
        if r.label != result.baseline:
            families.setdefault(r.family, []).append(r)
    return families


def _pareto(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points no other point beats in both smaller ε and higher accuracy, by ε."""
    front: list[tuple[float, float]] = []
    best = -math.inf
    for eps, acc in sorted(points, key=lambda p: (p[0], -p[1])):
        if acc > best:
            front.append((eps, acc))
            best = acc
    return front


def _family_curves(result: ComparisonResult, keep: Sequence[ComparisonRow]) -> list[tuple[str, list[ComparisonRow]]]:
    """Per defense family (baseline excluded): its rows among ``keep``, by ε_UB."""
    out = []
    for family, rows in _family_rows(result).items():
        members = sorted((r for r in rows if r in keep), key=lambda r: r.epsilon_ub_best)
        if members:
            out.append((family, members))
    return out


class _Look(NamedTuple):
    """A setting's colour, marker and line style in every figure of the report."""

    color: str
    marker: str
    linestyle: str


def _looks(rows: Sequence[ComparisonRow]) -> dict[str, _Look]:
    """Each setting's colour and marker: per setting, its family's hue ramp (reports.figures.setting_looks)."""
    return {
        label: _Look(color=str(look["color"]), marker=str(look["marker"]), linestyle=str(look["linestyle"]))
        for label, look in setting_looks([(r.label, r.family) for r in rows]).items()
    }


def _advantage(row: ComparisonRow) -> float:
    """The advantage of the row's strongest membership attack (the row must have one)."""
    _, m = _strongest(row)
    if m is None:
        raise ValueError(f"row {row.label!r} has no membership attack")
    return m.advantage


def _finish(ax: Axes, *, xlabel: str, ylabel: str, title: str) -> None:
    """The common end of the ε plots: log ε axis, labels, grid, legend beside the axes."""
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    legend_outside(ax)


def _utility_axes(ax: Axes | None) -> tuple[MplFigure, Axes | None, Axes]:
    """(figure, zero panel or None, log panel): a panel at ε = 0 when the figure is ours to lay out."""
    if ax is not None:
        fig, main = new_axes(ax)
        return fig, None, main
    fig = new_figure((8.0, 4.4))
    zero, main = zero_and_log_axes(fig, zero_label="ε_LB = 0\nno evidence")
    return fig, zero, main


def privacy_utility_figure(result: ComparisonResult, *, ax: Axes | None = None) -> MplFigure | None:
    """Test accuracy against ε_UB (filled) and ε_LB (hollow), colour and marker per setting.

    Each family's settings are joined (solid through ε_UB, dashed through the positive ε_LB);
    the non-private baseline (ε = ∞) is a horizontal line; the Pareto front over the ε_UB points
    is drawn thick and grey behind them; error bars are the accuracy's spread over the repeats.
    ε_LB = 0 (no attack showed anything) has no place on a log axis: it is drawn at 0 in a
    narrow panel of its own, "no evidence" — never at an arbitrary left edge, never joined to
    the log axis (with an ``ax`` given, it is said in a note on the axes instead).
    """
    private = [r for r in result.rows if r.epsilon_ub and math.isfinite(r.epsilon_ub_best)]
    if not private:
        return None
    fig, zero, ax = _utility_axes(ax)
    looks = _looks(private)
    for _family, rows in _family_curves(result, private):
        line = looks[rows[0].label].color  # the family's darkest shade
        ax.plot(
            [r.epsilon_ub_best for r in rows],
            [r.test_accuracy for r in rows],
            color=line,
            linewidth=1.0,
            alpha=0.7,
            zorder=1,
        )
        pos = [r for r in rows if r.epsilon_lb > 0]
        ax.plot(
            [r.epsilon_lb for r in pos],
            [r.test_accuracy for r in pos],
            color=line,
            linewidth=1.0,
            linestyle="--",
            alpha=0.7,
            zorder=1,
        )
    nothing = []
    for r in private:
        lk = looks[r.label]
        ax.errorbar(
            [r.epsilon_ub_best],
            [r.test_accuracy],
            yerr=[r.test_accuracy_std],
            color=lk.color,
            marker=lk.marker,
            markersize=7,
            linestyle="none",
            capsize=3,
            label=r.label,
            zorder=3,
        )
        where = ax if r.epsilon_lb > 0 else zero
        if where is None:
            nothing.append(r.label)
            continue
        where.plot(
            [r.epsilon_lb if r.epsilon_lb > 0 else 0.0],
            [r.test_accuracy],
            color=lk.color,
            marker=lk.marker,
            markersize=7,
            markerfacecolor="white",
            linestyle="none",
            zorder=3,
        )
    # What filled and hollow mean, once for every setting.
    ax.plot([], [], color="#000000", marker="o", linestyle="-", label="filled: ε_UB (guarantee)")
    ax.plot(
        [], [], color="#000000", marker="o", markerfacecolor="white", linestyle="--", label="hollow: ε_LB (evidence)"
    )
    front = _pareto([(r.epsilon_ub_best, r.test_accuracy) for r in private])
    if front:
        ax.plot(
            [p[0] for p in front],
            [p[1] for p in front],
            color="#bbbbbb",
            linewidth=7,
            alpha=0.6,
            zorder=0,
            solid_capstyle="round",
            label="Pareto front (ε_UB)",
        )
    base = result.row(result.baseline)
    for a in (ax, zero) if zero is not None else (ax,):
        a.axhline(
            base.test_accuracy,
            color=colour("nonprivate"),
            linestyle=":",
            linewidth=1.5,
            label=f"non-private baseline ({base.test_accuracy:.3f})" if a is ax else None,
        )
    if nothing:
        ax.text(
            0.01,
            0.02,
            "ε_LB = 0 (no evidence): " + ", ".join(nothing),
            transform=ax.transAxes,
            fontsize=FONT_PT,
            va="bottom",
        )
    if zero is not None:
        zero.set_ylabel("test accuracy")
        zero.grid(True, axis="y", alpha=0.3)
    _finish(
        ax,
        xlabel=f"ε > 0 (δ = {result.delta:g}, log scale); ε_LB at {result.confidence:.0%} confidence",
        ylabel="" if zero is not None else "test accuracy",
        title="Privacy–utility: accuracy against the guarantee (ε_UB) and the evidence (ε_LB)",
    )
    return fig


def advantage_figure(result: ComparisonResult, *, ax: Axes | None = None) -> MplFigure | None:
    """Membership advantage (TPR − FPR, strongest attack) against ε_UB, under the ceiling e^ε − 1; colour and marker per
    setting."""
    rows = [r for r in result.rows if r.epsilon_ub and math.isfinite(r.epsilon_ub_best) and r.membership]
    if not rows:
        return None
    fig, ax = new_axes(ax, size=(7.5, 4.0))
    eps = np.array([r.epsilon_ub_best for r in rows])
    grid = np.geomspace(eps.min() / 2, eps.max() * 2, 200)
    ax.plot(
        grid,
        np.minimum(np.expm1(np.minimum(grid, 50.0)), 1.0),
        color=colour("ceiling"),
        linestyle="--",
        label="ceiling min(e^ε − 1, 1)",
    )
    looks = _looks(rows)
    for _family, members in _family_curves(result, rows):
        ax.plot(
            [r.epsilon_ub_best for r in members],
            [_advantage(r) for r in members],
            color=looks[members[0].label].color,
            linewidth=1.0,
            alpha=0.7,
            zorder=1,
        )
        for r in members:
            ax.plot(
                [r.epsilon_ub_best],
                [_advantage(r)],
                color=looks[r.label].color,
                marker=looks[r.label].marker,
                markersize=7,
                linestyle="none",
                label=r.label,
                zorder=3,
            )
    base = result.row(result.baseline)
    if base.membership:
        ax.axhline(_advantage(base), color=colour("nonprivate"), linestyle=":", label="non-private baseline")
    ax.set_ylim(0, 1.05)
    _finish(
        ax,
        xlabel=f"ε_UB (δ = {result.delta:g})",
        ylabel="membership advantage TPR − FPR",
        title="How much of the DP ceiling the strongest attack reaches",
    )
    return fig


def vulnerable_figure(result: ComparisonResult, *, ax: Axes | None = None) -> MplFigure | None:
    """TPR at the largest FPR of the grid, population vs most vulnerable samples, per setting."""
    rows = [r for r in result.rows if r.vulnerable]
    if not rows:
        return None
    fpr = f"{max(result.fprs):g}"
    fig, ax = new_axes(ax, size=(7.5, 0.5 + 0.45 * len(rows)))
    y = np.arange(len(rows))
    pop, vul = [], []
    for r in rows:
        attack, m = _strongest(r)
        # An unresolved rate (None) draws no bar rather than a made-up one.
        population = None if m is None else m.tpr_at_fpr[fpr]
        pop.append(np.nan if population is None else population)
        vulnerable = r.vulnerable.get(attack) if attack is not None else None
        rate = None if vulnerable is None else vulnerable.tpr_at_fpr[fpr]
        vul.append(np.nan if rate is None else rate)
    ax.barh(y - 0.2, pop, height=0.38, color=colour("out"), label="all queried samples")
    ax.barh(y + 0.2, vul, height=0.38, color=colour("in"), label=f"top {result.vulnerable_top_k} most vulnerable")
    ax.axvline(float(fpr), color=colour("chance"), linestyle=":", label=f"chance (TPR = FPR = {rate_text(float(fpr))})")
    ax.set_yticks(y, [r.label for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel(f"TPR at {float(fpr):.0%} FPR (strongest attack of each row)")
    ax.set_title("Average vs most vulnerable samples")
    legend_outside(ax)
    return fig


def robustness_figure(result: ComparisonResult, *, ax: Axes | None = None) -> MplFigure | None:
    """Robust accuracy (solid) and certified accuracy (dotted) against the radius, per setting."""
    rows = [r for r in result.rows if r.robust_accuracy]
    if not rows or not result.radii:
        return None
    fig, ax = new_axes(ax, size=(7.5, 4.0))
    radii = list(result.radii)
    settings = _looks(rows)
    looks = Looks()
    for r in rows:
        # Colour and marker per setting (its family's hue ramp); robust solid, certified dotted and hollow.
        st = settings[r.label]
        ax.plot(
            radii,
            [r.robust_accuracy.get(f"{x:g}", math.nan) for x in radii],
            **looks.take(color=st.color, marker=st.marker, linestyle=st.linestyle),
            label=f"{r.label}: robust",
        )
        if r.certified_accuracy:
            ax.plot(
                radii,
                [r.certified_accuracy.get(f"{x:g}", math.nan) for x in radii],
                **looks.take(color=st.color, marker=st.marker, linestyle=":"),
                markerfacecolor="white",
                label=f"{r.label}: certified",
            )
    ax.set_xlabel("attack radius")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Robust accuracy (strongest attack) and certified accuracy")
    ax.grid(True, alpha=0.3)
    legend_outside(ax)
    return fig


def compare_sections(result: ComparisonResult, *, files: Sequence[str] = ()) -> list[Section]:
    """The report's sections (the index links it; ``files`` are the CSV/JSON written beside it)."""
    sections = [
        # The rows' stored verdicts, as the one box every page opens with (compare_verdict only words them).
        verdict_section(compare_verdict(result)),
        Section(title="Defense × measure", blocks=_matrix_tables(result)),
        Section(
            title="Privacy–utility curves",
            blocks=[
                Figure(
                    figure=privacy_utility_figure(result),
                    name="privacy-utility",
                    caption=(
                        "Accuracy against ε, one colour and marker per setting (a family's "
                        "settings share a hue, dark to light): filled markers at ε_UB, hollow "
                        "at ε_LB; "
                        "a setting whose attacks showed nothing (ε_LB = 0) is drawn at 0 in the "
                        "narrow 'no evidence' panel, not on the log axis. The grey band is the "
                        "Pareto front over ε_UB."
                    ),
                    empty="no row has a finite ε_UB",
                ),
                Figure(
                    figure=advantage_figure(result),
                    name="advantage",
                    caption="Membership advantage of the strongest attack against the DP ceiling.",
                    empty="no DP row was attacked",
                ),
            ],
        ),
    ]
    mem = _membership_table(result)
    if mem is not None:
        sections.append(
            Section(
                title="Membership: average vs most vulnerable samples",
                blocks=[
                    Figure(
                        figure=vulnerable_figure(result),
                        name="vulnerable",
                        caption="TPR at the grid's largest FPR.",
                        empty="no shadow-based attack ranked the samples",
                    ),
                    mem,
                ],
            )
        )
    if result.radii:
        sections.append(
            Section(
                title="Robustness",
                blocks=[
                    Figure(
                        figure=robustness_figure(result),
                        name="robustness",
                        caption="Evasion and certification at the grid's radii.",
                    )
                ],
            )
        )
    if files:
        sections.append(Section(title="Tables", blocks=[Items(items=list(files))]))
    return sections


def _write(out: Path, result: ComparisonResult) -> tuple[WrittenReport, list[Path]]:
    out.mkdir(parents=True, exist_ok=True)
    stem = compare_stem(result.name)
    columns, rows = matrix_rows(result)
    tables = [
        atomic_write_text(out / f"{stem}-matrix.csv", _csv(columns, rows)),
        atomic_write_json(out / f"{stem}.json", result.summary()),
    ]
    written = write_report_files(
        out,
        compare_sections(result, files=[p.name for p in tables]),
        title=f"Defenses under attack: {result.name} ({result.dataset})",
        stem=stem,
        kind="report",
        intro=f"{len(result.rows)} defense settings trained on {result.dataset}, "
        f"attacked with the same attacks. Jobs: {result.jobs_run} run, "
        f"{result.jobs_reused} reused; {result.seconds:.0f} s.",
    )
    return written, tables


def render_compare(run: RunDir, result: ComparisonResult) -> tuple[WrittenReport, list[Path]]:
    """Writes the report (HTML + Markdown + figures) and its tables (CSV matrix, JSON summary)."""
    return _write(run.reports_dir(), result)


def compare_page(result: ComparisonResult, out: Path) -> Page:
    """Writes ``compare-<name>.{html,md}``, its figures and tables into ``out``; the rows' stored verdicts are its
    violations."""
    written, tables = _write(out, result)
    violations = tuple(
        f"compare {result.name} / {r.label}: {r.verdict}: {'; '.join(r.findings)}" for r in result.violations
    )
    # The index names the verdict beside the link (compare_verdict only words the rows' stored verdicts).
    link = f"{result.name}: {len(result.rows)} defense settings on {result.dataset} — {compare_verdict(result).status}"
    return Page(html=written.html, link=link, tables=tuple(tables), violations=violations)


REPORT_KINDS.register(
    ReportKind(
        name="compare",
        group="Defenses compared under attack",
        order=10,
        load=load_comparisons,
        verdict=compare_verdict,
        render=compare_page,
    )
)
