"""The comparison report: every defense of a grid under the same attacks (``dpaudit compare``).

Renders a stored :class:`~dpaudit.results.comparison.ComparisonResult` (it computes nothing
new): the verdict per defense, the defense × measure matrix with links to each row's
membership, certified and inversion reports, ε_UB under every accountant, the membership
measures on the most vulnerable samples beside the population averages (Aerni et al. 2024),
and the figures a reader would rather look at than read — privacy–utility curves (accuracy
against ε_UB and ε_LB on one axis, one colour and marker per setting, the Pareto front marked),
attack advantage against the (ε, δ)-DP ceiling (e^ε − 1 + 2δ)/(e^ε + 1) (Kairouz, Oh & Viswanath
2015, Thm 2.1; the form of Jayaraman & Evans 2019, Figure 1, whose e^ε − 1 is 1 above ε = ln 2),
and robust/certified accuracy against the radius. Tables also go to CSV and
the summary to JSON.

The matrix's cells, tables and CSV are built in :mod:`reports.compare_matrix`; this module adds the
figures and assembles the page.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import PercentFormatter

from dpaudit.privacy.audit_stats import advantage_ceiling
from dpaudit.results.comparison import ComparisonResult, ComparisonRow, load_comparison
from dpaudit.results.grid_verdicts import compare_verdict
from dpaudit.store import RunDir, atomic_write_json, atomic_write_text
from reports.compare_matrix import _csv, _matrix_tables, _membership_table, _strongest, matrix_rows
from reports.figures import (
    Looks,
    colour,
    finish_axes,
    legend_outside,
    new_axes,
    new_figure,
    plain_log_ticks,
    rate_text,
    setting_looks,
)
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import fmt_percent
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


def _drawn_as_curve(result: ComparisonResult, private: Sequence[ComparisonRow]) -> bool:
    """Whether the privacy-utility figure has a curve to draw: a family of two settings or more (its line through
    their ε_UB), or a Pareto front of two points. Otherwise every series would be one point, which a table reads
    better than an axes."""
    if any(len(rows) > 1 for _, rows in _family_curves(result, private)):
        return True
    return len(_pareto([(r.epsilon_ub_best, r.test_accuracy) for r in private])) > 1


def _percent_axis(axis: Any) -> None:
    """Accuracies on the axis as percentages, as every rate of the page is written."""
    axis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=None))


def privacy_utility_figure(result: ComparisonResult, *, ax: Axes | None = None) -> MplFigure | None:
    """Test accuracy against ε_UB (filled) and ε_LB (hollow), colour and marker per setting.

    Each family's settings are joined (solid through ε_UB, dashed through the positive ε_LB);
    the non-private baseline (ε = ∞) is a horizontal line; the Pareto front over the ε_UB points
    is drawn thick and grey behind them; error bars are the accuracy's spread over the repeats.
    ε_LB = 0 (no attack showed anything) has no place on a log axis: the settings it holds for are
    named in the caption (their accuracy is at their filled ε_UB marker), never drawn at an
    arbitrary left edge. With no curve to draw (every family one setting, no Pareto front of two
    points) there is no figure: the matrix above holds each setting's accuracy and ε.
    """
    private = [r for r in result.rows if r.epsilon_ub and math.isfinite(r.epsilon_ub_best)]
    if not private or not _drawn_as_curve(result, private):
        return None
    fig, ax = new_axes(ax, size=(8.0, 4.4))
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
    for r in private:
        lk = looks[r.label]
        # The legend entry is the marker alone; a bar is drawn (unlabelled) only where the repeats spread, so the
        # legend never shows an error-bar symbol the figure does not draw.
        ax.plot(
            [r.epsilon_ub_best],
            [r.test_accuracy],
            color=lk.color,
            marker=lk.marker,
            markersize=7,
            linestyle="none",
            label=r.label,
            zorder=3,
        )
        if r.test_accuracy_std > 0:
            ax.errorbar(
                [r.epsilon_ub_best],
                [r.test_accuracy],
                yerr=[r.test_accuracy_std],
                color=lk.color,
                linestyle="none",
                capsize=3,
                zorder=3,
            )
        if r.epsilon_lb <= 0:
            continue
        ax.plot(
            [r.epsilon_lb],
            [r.test_accuracy],
            color=lk.color,
            marker=lk.marker,
            markersize=7,
            markerfacecolor="white",
            linestyle="none",
            zorder=3,
        )
    # Filled and hollow are said in the caption: a legend entry stands only for an artist drawn.
    front = _pareto([(r.epsilon_ub_best, r.test_accuracy) for r in private])
    if len(front) > 1:  # one point is no band: a line of one point draws nothing
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
    ax.axhline(
        base.test_accuracy,
        color=colour("nonprivate"),
        linestyle=":",
        linewidth=1.5,
        label=f"non-private baseline ({fmt_percent(base.test_accuracy)})",
    )
    # The settings without evidence (ε_LB = 0) are named in the caption (:func:`_no_evidence_note`): a note on the
    # axes would sit on the markers.
    ax.margins(y=0.12)  # no marker on the frame
    _percent_axis(ax.yaxis)
    _finish(
        ax,
        xlabel=f"ε > 0 (δ = {result.delta:g}, log scale); ε_LB at {result.confidence:.0%} confidence",
        ylabel="test accuracy",
        title="Privacy–utility: accuracy against the guarantee (ε_UB) and the evidence (ε_LB)",
    )
    return fig


def _no_evidence_note(result: ComparisonResult) -> str:
    """The privacy-utility caption's sentence naming the settings whose attacks showed nothing (no hollow marker)."""
    nothing = [r.label for r in result.rows if r.epsilon_ub and math.isfinite(r.epsilon_ub_best) and r.epsilon_lb <= 0]
    if not nothing:
        return ""
    return f" No evidence (ε_LB = 0), so no hollow marker: {', '.join(nothing)}."


def advantage_figure(result: ComparisonResult, *, ax: Axes | None = None) -> MplFigure | None:
    """Membership advantage (TPR − FPR, strongest attack) against ε_UB, under the (ε, δ)-DP ceiling; colour and marker
    per setting.

    The ceiling is the tight bound (e^ε − 1 + 2δ)/(e^ε + 1) (:func:`~dpaudit.privacy.audit_stats.advantage_ceiling`):
    Yeom et al.'s min(e^ε − 1, 1) is flat at 1 from ε = ln 2 on and would tell the settings of a grid apart nowhere.
    """
    rows = [r for r in result.rows if r.epsilon_ub and math.isfinite(r.epsilon_ub_best) and r.membership]
    if not rows:
        return None
    fig, ax = new_axes(ax, size=(7.5, 4.0))
    eps = np.array([r.epsilon_ub_best for r in rows])
    grid = np.geomspace(eps.min() / 2, eps.max() * 2, 200)
    ax.plot(
        grid,
        [advantage_ceiling(float(e), delta=result.delta) for e in grid],
        color=colour("ceiling"),
        linestyle="--",
        label="ceiling (e^ε − 1 + 2δ)/(e^ε + 1)",
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
    ax.set_ylim(-0.03, 1.05)  # an advantage of 0 is drawn whole, not on the frame
    _percent_axis(ax.yaxis)
    _finish(
        ax,
        xlabel=f"ε_UB (δ = {result.delta:g})",
        ylabel="membership advantage TPR − FPR",
        title="How much of the DP ceiling the strongest attack reaches",
    )
    return fig


def _vulnerable_rates(result: ComparisonResult) -> tuple[list[ComparisonRow], list[float], list[float]]:
    """(rows, population TPRs, most-vulnerable TPRs) at the grid's largest FPR; NaN where a rate is unresolved."""
    rows = [r for r in result.rows if r.vulnerable]
    fpr = f"{max(result.fprs):g}" if result.fprs else ""
    pop, vul = [], []
    for r in rows:
        attack, m = _strongest(r)
        # An unresolved rate (None) draws no bar rather than a made-up one.
        population = None if m is None else m.tpr_at_fpr.get(fpr)
        pop.append(math.nan if population is None else float(population))
        vulnerable = r.vulnerable.get(attack) if attack is not None else None
        rate = None if vulnerable is None else vulnerable.tpr_at_fpr.get(fpr)
        vul.append(math.nan if rate is None else float(rate))
    return rows, pop, vul


def vulnerable_figure(result: ComparisonResult, *, ax: Axes | None = None) -> MplFigure | None:
    """TPR at the largest FPR of the grid, population vs most vulnerable samples, per setting.

    A series whose every rate is unresolved (n/a in the table) draws no bar and has no legend entry;
    with no resolved rate at all there is no figure.
    """
    rows, pop, vul = _vulnerable_rates(result)
    drawn_pop, drawn_vul = bool(np.isfinite(pop).any()), bool(np.isfinite(vul).any())
    if not rows or not (drawn_pop or drawn_vul):
        return None
    fpr = max(result.fprs)
    fig, ax = new_axes(ax, size=(7.5, 0.5 + 0.45 * len(rows)))
    y = np.arange(len(rows))
    if drawn_pop:
        ax.barh(y - 0.2, pop, height=0.38, color=colour("out"), label="all queried samples")
    if drawn_vul:
        ax.barh(y + 0.2, vul, height=0.38, color=colour("in"), label=f"top {result.vulnerable_top_k} most vulnerable")
    ax.axvline(fpr, color=colour("chance"), linestyle=":", label=f"chance (TPR = FPR = {rate_text(fpr)})")
    ax.set_yticks(y, [r.label for r in rows])
    ax.invert_yaxis()
    _percent_axis(ax.xaxis)
    ax.set_xlabel(f"TPR at {fpr:.0%} FPR (strongest attack of each row)")
    ax.set_title("Average vs most vulnerable samples")
    legend_outside(ax)
    return fig


def _vulnerable_caption(result: ComparisonResult) -> str:
    """What the bars are, and which series is missing because its rates are unresolved."""
    _, pop, vul = _vulnerable_rates(result)
    fpr = max(result.fprs) if result.fprs else math.nan
    text = f"TPR at the grid's largest FPR ({fpr:.0%}) of each row's strongest attack."
    if np.isfinite(pop).any() and not np.isfinite(vul).any():
        text += (
            f" The {result.vulnerable_top_k} most vulnerable samples hold too few non-members to resolve this "
            "FPR (n/a in the table below), so only the population's bars are drawn."
        )
    return text


def _accuracy_curve(
    row: ComparisonRow, clean: float | None, by_radius: dict[str, float], radii: Sequence[float]
) -> tuple[list[float], list[float], list[float], list[float]]:
    """One classifier's accuracy against the radius, from its clean accuracy at 0 where recorded, with each point's
    interval (nan where the row stored no count)."""
    xs = ([0.0] if clean is not None else []) + [float(x) for x in radii]
    ys = ([clean] if clean is not None else []) + [by_radius.get(f"{x:g}", math.nan) for x in radii]
    lows, highs = [], []
    for y in ys:
        e = row.accuracy_estimate(y, evaluated=True) if y is not None and math.isfinite(y) else None
        lows.append(e.low if e is not None else math.nan)
        highs.append(e.high if e is not None else math.nan)
    return xs, [math.nan if y is None else float(y) for y in ys], lows, highs


#: Most curves a panel shades the intervals of: past it the bands cover each other (the tables keep every interval).
SHADED_CURVES = 4


def robustness_figure(result: ComparisonResult) -> MplFigure | None:
    """Robust accuracy of the attacked classifier and, where a row certifies, certified accuracy of the certified
    classifier, in two panels one above the other: each curve is one prediction rule, from its clean accuracy at
    radius 0, with its intervals shaded when the panel is not crowded; a setting has one look in both panels, and the
    legend beside the upper panel names every setting."""
    rows = [r for r in result.rows if r.robust_accuracy]
    if not rows or not result.radii:
        return None
    certifying = [r for r in rows if r.certified_accuracy]
    fig = new_figure((7.5, 7.5 if certifying else 4.0))
    panels = [("Robust accuracy of the attacked classifier (strongest attack)", rows, "robust")]
    if certifying:
        panels.append(("Certified accuracy of the certified classifier", certifying, "certified"))
    settings = _looks(rows)
    pool = Looks()  # one look per setting, taken once, so a setting looks the same in both panels
    look = {
        r.label: pool.take(
            color=settings[r.label].color, marker=settings[r.label].marker, linestyle=settings[r.label].linestyle
        )
        for r in rows
    }
    axes = [fig.add_subplot(len(panels), 1, i + 1) for i in range(len(panels))]
    for ax, (title, members, which) in zip(axes, panels, strict=True):
        for r in members:
            if which == "robust":
                curve = _accuracy_curve(r, r.attacked_clean_accuracy, dict(r.robust_accuracy), result.radii)
            else:
                curve = _accuracy_curve(r, r.certified_conventional_accuracy, dict(r.certified_accuracy), result.radii)
            xs, ys, lows, highs = curve
            ax.plot(xs, ys, **look[r.label], label=r.label)
            if len(members) <= SHADED_CURVES and np.isfinite(lows).any():
                ax.fill_between(xs, lows, highs, color=look[r.label]["color"], alpha=0.12, linewidth=0)
        ax.set_xlabel("attack radius (0: unattacked)")
        ax.set_ylabel("accuracy")
        ax.set_ylim(-0.02, 1.02)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        finish_axes(ax)
    fig.subplots_adjust(hspace=0.45)  # the upper panel's axis label clear of the lower panel's title
    legend_outside(axes[0])
    return fig


def _robustness_caption(result: ComparisonResult) -> str:
    """Which classifier each panel's curves are, and what the shading is."""
    text = (
        "Upper panel: the accuracy the strongest evasion attack leaves at each radius, of the classifier the attacks "
        "ran against (named in the table above), starting at its accuracy unattacked (radius 0)."
    )
    if any(r.certified_accuracy for r in result.rows):
        text += (
            " Lower panel: certified accuracy, of the classifier the certificate covers, starting at that classifier's "
            "accuracy unattacked; for a noise layer or smoothing it is another rule than the attacked one, so the "
            "two panels are not read against each other point by point."
        )
    crowded = len([r for r in result.rows if r.robust_accuracy]) > SHADED_CURVES
    return text + (
        " Shading: 95% intervals where the counts were stored"
        + (
            f", in a panel of at most {SHADED_CURVES} curves (the tables above give every interval)."
            if crowded
            else "."
        )
    )


def compare_sections(result: ComparisonResult, *, files: Sequence[str] = ()) -> list[Section]:
    """The report's sections (the index links it; ``files`` are the CSV/JSON written beside it)."""
    sections = [
        # Every finding of the grid, as the one box every page opens with (compare_verdict reads the stored rows).
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
                        "a setting whose attacks showed nothing (ε_LB = 0) has no hollow marker (0 is not on "
                        "the log axis); the family's line is solid "
                        "through its ε_UB points and dashed through its ε_LB points. The grey band, where "
                        "two or more settings make one, is the Pareto front over ε_UB. Error bars, where "
                        "drawn, are the accuracy's spread over the repeats." + _no_evidence_note(result)
                    ),
                    empty=(
                        "no row has a finite ε_UB"
                        if not any(r.epsilon_ub and math.isfinite(r.epsilon_ub_best) for r in result.rows)
                        else "no curve to draw: no family has two settings with a finite ε_UB and no setting "
                        "trades accuracy for ε against another, so each would be one point; the matrix above "
                        "gives every setting's accuracy, ε_UB and ε_LB"
                    ),
                ),
                Figure(
                    figure=advantage_figure(result),
                    name="advantage",
                    caption=(
                        "Membership advantage (TPR − FPR) of each setting's strongest attack against its ε_UB. "
                        "The dashed ceiling is the most any (ε, δ)-DP model allows, (e^ε − 1 + 2δ)/(e^ε + 1) "
                        f"at δ = {result.delta:g} (the tight bound of the hypothesis-testing view of DP; "
                        "Yeom et al.'s e^ε − 1 reaches 1 at ε = ln 2 and would be flat above it)."
                    ),
                    empty="no DP row was attacked",
                ),
            ],
        ),
    ]
    mem = _membership_table(result)
    if mem:
        sections.append(
            Section(
                title="Membership: average vs most vulnerable samples",
                blocks=[
                    Figure(
                        figure=vulnerable_figure(result),
                        name="vulnerable",
                        caption=_vulnerable_caption(result),
                        empty="no shadow-based attack ranked the samples, or no rate of it is resolved",
                    ),
                    *mem,
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
                        caption=_robustness_caption(result),
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
    # The index names the verdict beside the link: the same status the page's box leads with.
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
