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
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure

from dpaudit.results.comparison import ComparisonResult, ComparisonRow, load_comparison
from dpaudit.results.membership import min_non_members
from dpaudit.results.verdicts import compare_verdict
from dpaudit.store import RunDir, atomic_write_json, atomic_write_text
from reports.figures import FONT_PT, Looks, colour, legend_outside, new_axes, new_figure, plain_log_ticks, rate_text, setting_looks, zero_and_log_axes
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import (
    Shown,
    epsilon_cell,
    epsilon_lb_cell,
    epsilon_ub_cell,
    fmt_rate,
    fmt_upper_bound,
    percent_cell,
    percent_lb_cell,
    percent_ub_cell,
)
from reports.render import Figure, Items, Link, Section, Table, WrittenReport, write_report_files
from reports.verdict_box import verdict_section

#: The matrix's column of the last-iterate ε (Steinke et al. 2024): a heuristic, never a cap or an upper bound.
LAST_ITERATE_COLUMN = "last-iterate ε (heuristic)"
#: The classifier the certified columns are about, and its accuracy without attack: certified
#: accuracy is read against this, never against "test acc." (the record's own prediction rule).
CERTIFIED_RULE_COLUMN = "certified classifier"
CERTIFIED_ACCURACY_COLUMN = "certified classifier: accuracy"
#: What a comparison stored before the certified classifier was recorded says about it.
NOT_RECORDED = "not recorded (compared before it was stored)"

__all__ = [
    "CERTIFIED_ACCURACY_COLUMN",
    "CERTIFIED_RULE_COLUMN",
    "LAST_ITERATE_COLUMN",
    "advantage_figure",
    "compare_sections",
    "compare_page",
    "compare_stem",
    "load_comparisons",
    "matrix_rows",
    "privacy_utility_figure",
    "render_compare",
    "robustness_figure",
    "vulnerable_figure",
]

_DASH = "—"


def compare_stem(name: str) -> str:
    return f"compare-{name}"


def load_comparisons(run: RunDir) -> list[ComparisonResult]:
    """Every comparison stored in the run, by name."""
    return [load_comparison(d) for d in run.compare_dirs()]


def _tpr(m: Mapping[str, Any] | None, fpr: str) -> Any:
    """A TPR cell: the rate, or why the non-members cannot resolve it (never a bare dash)."""
    if not m:
        return _DASH
    if fpr in m["tpr_at_fpr"] and m["tpr_at_fpr"][fpr] is None:
        return f"n/a: needs ≥ {min_non_members(float(fpr))} non-members"
    tpr, members = m["tpr_at_fpr"].get(fpr), m.get("num_members")
    if isinstance(tpr, (int, float)) and isinstance(members, int) and members > 0:
        # A share of the members, with its counts; the stored rate stays the cell's value (the CSV).
        return Shown(float(tpr), fmt_rate(round(float(tpr) * members), members))
    return _num(tpr)


def _pct(x: Any, cell: Any = percent_cell) -> Any:
    """An accuracy as a percentage (its value kept for the CSV), missing as an em dash; ``cell`` rounds a bound its safe way."""
    return cell(float(x)) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else _num(x)


def _num(x: Any, digits: int = 3) -> Any:
    """A cell: a number rounded, ∞ kept, anything missing as an em dash (never NaN or None)."""
    if x is None:
        return _DASH
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        x = float(x)
        if math.isnan(x):
            return _DASH
        if math.isinf(x):
            return "∞"
        return round(x, digits)
    return x


def _strongest(row: ComparisonRow) -> tuple[str | None, Mapping[str, Any]]:
    """The membership attack with the largest AUC (the row's strongest), and its measures."""
    if not row.membership:
        return None, {}
    name = max(row.membership, key=lambda a: row.membership[a]["auc"])
    return name, row.membership[name]


def _ceiling(eps: float) -> float:
    """Yeom et al. (2018), Theorem 1: an ε-DP model's membership advantage is at most e^ε − 1
    (and any advantage is at most 1)."""
    return 1.0 if eps > 1 else min(1.0, math.expm1(eps))


def _certifies(result: ComparisonResult) -> bool:
    """Some row certifies: the matrix then names the certified classifier and gives its accuracy."""
    return any(r.certified_accuracy for r in result.rows)


def _certified_classifier(row: ComparisonRow) -> list[Any]:
    """The certified classifier's name and accuracy without attack, the cells before "certified @ r"."""
    if not row.certified_accuracy:
        return ["does not certify", "does not certify"]
    rule = row.certified_prediction_rule or NOT_RECORDED
    accuracy = NOT_RECORDED if row.certified_conventional_accuracy is None else _pct(row.certified_conventional_accuracy)
    return [rule, accuracy]


def matrix_rows(result: ComparisonResult) -> tuple[list[str], list[list[Any]]]:
    """The defense × measure matrix as columns and cells (shared by the HTML table and the CSV).

    Where a row certifies, the certified accuracies follow the certified classifier's name and
    its own accuracy without attack: "test acc." is the record's prediction rule, which for a
    noise-layer defense or smoothing is another classifier than the one certified.
    """
    fprs = [f"{f:g}" for f in result.fprs]
    certifies = _certifies(result)
    columns = ["setting", "defense", "test acc.", "± (repeats)", "acc. loss", "ε_UB (tightest)", LAST_ITERATE_COLUMN, "ε_LB", "best attack", "strongest MIA", "AUC"]
    columns += [f"TPR @ {float(f):.1%} FPR" for f in fprs]
    columns += ["advantage", "ceiling min(e^ε−1, 1)", "inversion top-1"]
    columns += [f"robust @ {r:g}" for r in result.radii]
    # Only a grid with a certifying row has the two columns: one without keeps its matrix as it was.
    columns += [CERTIFIED_RULE_COLUMN, CERTIFIED_ACCURACY_COLUMN] if certifies else []
    columns += [f"certified @ {r:g}" for r in result.radii] + ["verdict"]
    rows = []
    for r in result.rows:
        attack, m = _strongest(r)
        ub = r.epsilon_ub_best
        # Bounds print their safe way: ε_UB and the advantage ceiling up, ε_LB and certified accuracy down.
        ub_cell: Any = epsilon_ub_cell(ub) if r.epsilon_ub else "∞ (no DP claim)"
        if r.epsilon_ub and r.epsilon_ub_data_dependent:
            ub_cell = f"{fmt_upper_bound(ub)} (data-dependent)"
        cells: list[Any] = [
            r.label,
            r.defense,
            _pct(r.test_accuracy),
            _num(r.test_accuracy_std),
            _num(r.accuracy_loss),
            ub_cell,
            epsilon_cell(r.epsilon_last_iterate),
            epsilon_lb_cell(r.epsilon_lb),
            r.best_attack or _DASH,
        ]
        cells += [attack or _DASH, _num(m.get("auc"))]
        cells += [_tpr(m, f) for f in fprs]
        cells += [_num(m.get("advantage")), Shown(_ceiling(ub), fmt_upper_bound(_ceiling(ub))) if r.epsilon_ub else 1.0, _num(r.inversion_top1)]
        cells += [_pct(r.robust_accuracy.get(f"{x:g}"), percent_ub_cell) for x in result.radii]
        cells += _certified_classifier(r) if certifies else []
        cells += [_pct(r.certified_accuracy.get(f"{x:g}"), percent_lb_cell) if r.certified_accuracy else "does not certify" for x in result.radii]
        cells.append(r.verdict)
        rows.append(cells)
    return columns, rows


def _csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(columns)
    for row in rows:
        w.writerow([c.text if isinstance(c, Link) else c for c in row])
    return buf.getvalue()


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


def _looks(rows: Sequence[ComparisonRow]) -> dict[str, dict[str, Any]]:
    """Each setting's colour and marker: per setting, its family's hue ramp (reports.figures.setting_looks)."""
    return setting_looks([(r.label, r.family) for r in rows])


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
        line = looks[rows[0].label]["color"]  # the family's darkest shade
        ax.plot([r.epsilon_ub_best for r in rows], [r.test_accuracy for r in rows], color=line, linewidth=1.0, alpha=0.7, zorder=1)
        pos = [r for r in rows if r.epsilon_lb > 0]
        ax.plot([r.epsilon_lb for r in pos], [r.test_accuracy for r in pos], color=line, linewidth=1.0, linestyle="--", alpha=0.7, zorder=1)
    nothing = []
    for r in private:
        lk = looks[r.label]
        ax.errorbar([r.epsilon_ub_best], [r.test_accuracy], yerr=[r.test_accuracy_std], color=lk["color"], marker=lk["marker"], markersize=7, linestyle="none", capsize=3, label=r.label, zorder=3)
        where = ax if r.epsilon_lb > 0 else zero
        if where is None:
            nothing.append(r.label)
            continue
        where.plot([r.epsilon_lb if r.epsilon_lb > 0 else 0.0], [r.test_accuracy], color=lk["color"], marker=lk["marker"], markersize=7, markerfacecolor="white", linestyle="none", zorder=3)
    # What filled and hollow mean, once for every setting.
    ax.plot([], [], color="#000000", marker="o", linestyle="-", label="filled: ε_UB (guarantee)")
    ax.plot([], [], color="#000000", marker="o", markerfacecolor="white", linestyle="--", label="hollow: ε_LB (evidence)")
    front = _pareto([(r.epsilon_ub_best, r.test_accuracy) for r in private])
    if front:
        ax.plot([p[0] for p in front], [p[1] for p in front], color="#bbbbbb", linewidth=7, alpha=0.6, zorder=0, solid_capstyle="round", label="Pareto front (ε_UB)")
    base = result.row(result.baseline)
    for a in (ax, zero) if zero is not None else (ax,):
        a.axhline(base.test_accuracy, color=colour("nonprivate"), linestyle=":", linewidth=1.5, label=f"non-private baseline ({base.test_accuracy:.3f})" if a is ax else None)
    if nothing:
        ax.text(0.01, 0.02, "ε_LB = 0 (no evidence): " + ", ".join(nothing), transform=ax.transAxes, fontsize=FONT_PT, va="bottom")
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
    """Membership advantage (TPR − FPR, strongest attack) against ε_UB, under the ceiling e^ε − 1; colour and marker per setting."""
    rows = [r for r in result.rows if r.epsilon_ub and math.isfinite(r.epsilon_ub_best) and r.membership]
    if not rows:
        return None
    fig, ax = new_axes(ax, size=(7.5, 4.0))
    eps = np.array([r.epsilon_ub_best for r in rows])
    grid = np.geomspace(eps.min() / 2, eps.max() * 2, 200)
    ax.plot(grid, np.minimum(np.expm1(np.minimum(grid, 50.0)), 1.0), color=colour("ceiling"), linestyle="--", label="ceiling min(e^ε − 1, 1)")
    looks = _looks(rows)
    for _family, members in _family_curves(result, rows):
        ax.plot([r.epsilon_ub_best for r in members], [_strongest(r)[1]["advantage"] for r in members], color=looks[members[0].label]["color"], linewidth=1.0, alpha=0.7, zorder=1)
        for r in members:
            ax.plot([r.epsilon_ub_best], [_strongest(r)[1]["advantage"]], color=looks[r.label]["color"], marker=looks[r.label]["marker"], markersize=7, linestyle="none", label=r.label, zorder=3)
    base = result.row(result.baseline)
    if base.membership:
        ax.axhline(_strongest(base)[1]["advantage"], color=colour("nonprivate"), linestyle=":", label="non-private baseline")
    ax.set_ylim(0, 1.05)
    _finish(ax, xlabel=f"ε_UB (δ = {result.delta:g})", ylabel="membership advantage TPR − FPR", title="How much of the DP ceiling the strongest attack reaches")
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
        pop.append(m["tpr_at_fpr"][fpr] if m and m["tpr_at_fpr"][fpr] is not None else np.nan)
        vul.append(r.vulnerable[attack]["tpr_at_fpr"][fpr] if attack is not None and attack in r.vulnerable and r.vulnerable[attack]["tpr_at_fpr"][fpr] is not None else np.nan)
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
        ax.plot(radii, [r.robust_accuracy.get(f"{x:g}", math.nan) for x in radii], **looks.take(**st), label=f"{r.label}: robust")
        if r.certified_accuracy:
            ax.plot(radii, [r.certified_accuracy.get(f"{x:g}", math.nan) for x in radii], **looks.take(**{**st, "linestyle": ":"}), markerfacecolor="white", label=f"{r.label}: certified")
    ax.set_xlabel("attack radius")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Robust accuracy (strongest attack) and certified accuracy")
    ax.grid(True, alpha=0.3)
    legend_outside(ax)
    return fig


def _accountant_table(result: ComparisonResult) -> Table | None:
    names: list[str] = []
    for r in result.rows:
        names += [a for a in r.epsilon_ub if a not in names]
    if not names:
        return None
    rows = [
        [r.label, *(_DASH if r.epsilon_ub.get(a) is None else epsilon_ub_cell(r.epsilon_ub[a]) for a in names), "yes" if r.epsilon_ub_data_dependent else "no"] for r in result.rows if r.epsilon_ub
    ]
    return Table(
        columns=["setting", *names, "data-dependent"], rows=rows, caption=f"ε_UB at δ = {result.delta:g} under every accountant that can analyse the row's claim (the same noise, four analyses)."
    )


def _counts(m: Mapping[str, Any] | None) -> str:
    """The members / non-members a row's rates rest on (a dash for results stored before they were kept)."""
    if not m or "num_non_members" not in m:
        return _DASH
    return f"{m['num_members']} / {m['num_non_members']}"


def _membership_table(result: ComparisonResult) -> Table | None:
    fprs = [f"{f:g}" for f in result.fprs]
    rows = []
    for r in result.rows:
        for attack, m in r.membership.items():
            v = r.vulnerable.get(attack, {})
            rows.append(
                [
                    r.label,
                    attack,
                    _num(m["auc"]),
                    _num(m["advantage"]),
                    *(_tpr(m, f) for f in fprs),
                    _DASH if m.get("epsilon_lb") is None else epsilon_lb_cell(m["epsilon_lb"]),
                    _num(v.get("auc")),
                    *(_tpr(v, f) for f in fprs),
                    _counts(m),
                    _counts(v),
                ]
            )
    if not rows:
        return None
    cols = [
        "setting",
        "attack",
        "AUC",
        "advantage",
        *(f"TPR @ {float(f):.1%}" for f in fprs),
        "ε_LB",
        "AUC (vulnerable)",
        *(f"TPR @ {float(f):.1%} (vulnerable)" for f in fprs),
        "members / non-members",
        "(vulnerable)",
    ]
    return Table(
        columns=cols,
        rows=rows,
        caption=(
            f"Population measures (every queried sample, mean over repeats; ε_LB is the largest over repeats) beside the same measures on the {result.vulnerable_top_k} most vulnerable "
            "samples, ranked by how far their IN and OUT shadow statistics lie apart — the shadows alone decide, never the target, so the subset's rates are honest."
        ),
    )


def _links_table(result: ComparisonResult) -> Table | None:
    rows = []
    for r in result.rows:
        if r.links:
            rows.append([r.label, ", ".join(r.model_ids), *[Link(text=k, href=h) for k, h in sorted(r.links.items())]])
    if not rows:
        return None
    width = max(len(x) for x in rows)
    rows = [x + [_DASH] * (width - len(x)) for x in rows]
    return Table(columns=["setting", "trained models", *[f"report {i + 1}" for i in range(width - 2)]], rows=rows, caption="The reports each row's numbers come from.")


def _matrix_tables(result: ComparisonResult) -> list[Any]:
    """The defense × measure matrix as tables: privacy, then evasion and inversion, the drill-down links, ε_UB per accountant."""
    columns, rows = matrix_rows(result)
    # The matrix is wide: privacy columns in one table, evasion and inversion in a second (the
    # CSV has every column). Spread over repeats and the ceiling ride in the cells beside them.
    split = columns.index("inversion top-1")
    col = {c: i for i, c in enumerate(columns)}
    privacy_cols = [
        "setting",
        "test acc. (± sd)",
        "acc. loss",
        "ε_UB (tightest)",
        LAST_ITERATE_COLUMN,
        "ε_LB",
        "best attack",
        "strongest MIA",
        "AUC",
        *columns[col["AUC"] + 1 : col["advantage"]],
        "advantage (ceiling)",
    ]
    privacy_rows = []
    for r in rows:
        acc = r[col["test acc."]]
        sd = r[col["± (repeats)"]]
        privacy_rows.append(
            [
                r[0],
                f"{acc} (± {sd})" if isinstance(sd, float) and sd > 0 else acc,
                *(r[col[c]] for c in ("acc. loss", "ε_UB (tightest)", LAST_ITERATE_COLUMN, "ε_LB", "best attack", "strongest MIA", "AUC")),
                *r[col["AUC"] + 1 : col["advantage"]],
                f"{r[col['advantage']]} (≤ {r[col['ceiling min(e^ε−1, 1)']]})" if r[col["advantage"]] != _DASH else _DASH,
            ]
        )
    attack_cols = ["setting", *columns[split:-1]]
    attack_rows = [[r[0], *r[split:-1]] for r in rows]
    attack_caption = (
        "Inversion: top-1 accuracy of an evaluation classifier on the reconstructions. Robust accuracy: the strongest evasion attack at each radius; certified where the defense certifies."
    )
    accuracy_note = ""
    if _certifies(result):
        # Certified accuracy is only read against the accuracy of the classifier it certifies.
        which = (
            " The certified columns are about the certified classifier, named in its column (for a noise layer the vote-count or expected-softmax argmax "
            "over the certification draws, for smoothing Cohen et al.'s CERTIFY with abstentions counted wrong); its accuracy without attack, on the same "
            "test subset, is given beside them, and certified accuracy at any radius is at most it. Test accuracy in the first table is the record's own "
            "prediction rule, a different classifier for the noise-layer defenses and smoothing."
        )
        attack_caption += which
        accuracy_note = (
            " Test acc. is the accuracy of each record's own prediction rule on the whole test set (for a noise-layer defense the argmax of the expected scores over "
            "its noise draws, for smoothing the base model on clean inputs), not of the classifier the certified columns describe: that one's accuracy is beside them."
        )
    return [
        Table(
            columns=privacy_cols,
            rows=privacy_rows,
            caption=(
                f"Mean over {len(result.rows[0].model_ids)} repeat(s). Accuracy loss is against the non-private baseline ({result.baseline}). ε_LB is the best over every attack "
                f"and repeat, valid jointly at {result.confidence:.0%} (Bonferroni); membership attacks' ε_LB are Clopper–Pearson bounds, which assume nothing of the "
                "trade-off curve, and an audit's names its own assumption; the strongest MIA is the one with the largest AUC. Advantage = max over thresholds of TPR − FPR; "
                "an ε-DP model's is at most e^ε − 1 (Yeom et al. 2018). The last-iterate ε (Steinke et al. 2024; DP-SGD claims, — for other defenses) is the final model's exact ε "
                "if the losses were linear, and a heuristic, not an upper bound, for other losses: ε_UB minus it is what that heuristic suggests releasing only the final "
                "model hides, not an established share. ε_UB and the advantage ceiling are rounded up, ε_LB down."
                f"{accuracy_note}"
            ),
        ),
        *(
            [
                Table(
                    columns=attack_cols,
                    rows=attack_rows,
                    caption=attack_caption,
                )
            ]
            if any(r.inversion_top1 is not None or r.robust_accuracy for r in result.rows)
            else []
        ),
        *([t] if (t := _links_table(result)) else []),
        *([t] if (t := _accountant_table(result)) else []),
    ]


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
                        "Accuracy against ε, one colour and marker per setting (a family's settings share a hue, dark to light): filled markers at ε_UB, hollow at ε_LB; "
                        "a setting whose attacks showed nothing (ε_LB = 0) is drawn at 0 in the narrow 'no evidence' panel, not on the log axis. The grey band is the Pareto front over ε_UB."
                    ),
                    empty="no row has a finite ε_UB",
                ),
                Figure(figure=advantage_figure(result), name="advantage", caption="Membership advantage of the strongest attack against the DP ceiling.", empty="no DP row was attacked"),
            ],
        ),
    ]
    mem = _membership_table(result)
    if mem is not None:
        sections.append(
            Section(
                title="Membership: average vs most vulnerable samples",
                blocks=[Figure(figure=vulnerable_figure(result), name="vulnerable", caption="TPR at the grid's largest FPR.", empty="no shadow-based attack ranked the samples"), mem],
            )
        )
    if result.radii:
        sections.append(Section(title="Robustness", blocks=[Figure(figure=robustness_figure(result), name="robustness", caption="Evasion and certification at the grid's radii.")]))
    if files:
        sections.append(Section(title="Tables", blocks=[Items(items=list(files))]))
    return sections


def _write(out: Path, result: ComparisonResult) -> tuple[WrittenReport, list[Path]]:
    out.mkdir(parents=True, exist_ok=True)
    stem = compare_stem(result.name)
    columns, rows = matrix_rows(result)
    tables = [atomic_write_text(out / f"{stem}-matrix.csv", _csv(columns, rows)), atomic_write_json(out / f"{stem}.json", result.summary())]
    written = write_report_files(
        out,
        compare_sections(result, files=[p.name for p in tables]),
        title=f"Defenses under attack: {result.name} ({result.dataset})",
        stem=stem,
        kind="report",
        intro=f"{len(result.rows)} defense settings trained on {result.dataset}, attacked with the same attacks. Jobs: {result.jobs_run} run, {result.jobs_reused} reused; {result.seconds:.0f} s.",
    )
    return written, tables


def render_compare(run: RunDir, result: ComparisonResult) -> tuple[WrittenReport, list[Path]]:
    """Writes the report (HTML + Markdown + figures) and its tables (CSV matrix, JSON summary)."""
    return _write(run.reports_dir(), result)


def compare_page(result: ComparisonResult, out: Path) -> Page:
    """Writes ``compare-<name>.{html,md}``, its figures and tables into ``out``; the rows' stored verdicts are its violations."""
    written, tables = _write(out, result)
    violations = tuple(f"compare {result.name} / {r.label}: {r.verdict}: {'; '.join(r.findings)}" for r in result.violations)
    # The index names the verdict beside the link (compare_verdict only words the rows' stored verdicts).
    link = f"{result.name}: {len(result.rows)} defense settings on {result.dataset} — {compare_verdict(result).status}"
    return Page(html=written.html, link=link, tables=tuple(tables), violations=violations)


REPORT_KINDS.register(ReportKind(name="compare", group="Defenses compared under attack", order=10, load=load_comparisons, render=compare_page))
