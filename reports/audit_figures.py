"""The audit report's figures: score histograms, the ROC, ε_LB by guesses and by trials, ε_LB beside ε_UB.

Each takes stored results (and an optional matplotlib axes) and returns a figure; saving is left to
:mod:`reports.render`, the page that shows them to :mod:`reports.audit`. What each figure shows, and
why, is listed in that module's docstring. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import LogLocator

from dpaudit import _validate as v
from dpaudit.privacy.audit_stats import auc_interval, auc_score
from dpaudit.results.audit import AuditResult, EpsilonByTrials
from dpaudit.results.audit_details import OneRunDetails
from reports.figures import (
    FONT_PT,
    Looks,
    colour,
    eps_lb_text,
    eps_text,
    eps_ub_text,
    finish_axes,
    fit_page,
    legend_outside,
    new_axes,
    new_figure,
    plain_log_ticks,
    resolved_roc,
    roc_axes,
    style,
)

__all__ = [
    "split_scores",
    "score_histogram",
    "roc_figure",
    "guess_curve_figure",
    "ceiling_figure",
    "LAST_ITERATE_MEANING",
    "bounds_figure",
    "bounds_caption",
    "gap_segments",
]


def _axes(ax: Axes | None, size: tuple[float, float] = (6.0, 3.6)) -> tuple[MplFigure, Axes]:
    return new_axes(ax, size=size)


def split_scores(scores: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(IN scores, OUT scores) from an audit's ``scores.npz`` (multi-run, white-box or one-run)."""
    if "in_scores" in scores:
        return np.asarray(scores["in_scores"], dtype=float), np.asarray(scores["out_scores"], dtype=float)
    if "scores" in scores and "included" in scores:
        s, inc = np.asarray(scores["scores"], dtype=float), np.asarray(scores["included"], dtype=bool)
        return s[inc], s[~inc]
    raise v.invalid("scores", f"scores must hold in_scores/out_scores or scores/included, got keys {sorted(scores)}")


def score_histogram(
    in_scores: np.ndarray, out_scores: np.ndarray, *, ax: Axes | None = None, label: str = "score (higher = IN)"
) -> MplFigure:
    """Overlaid histograms of IN and OUT scores."""
    fig, ax = _axes(ax)
    both = np.concatenate([in_scores, out_scores])
    bins = np.histogram_bin_edges(both, bins=min(60, max(10, int(math.sqrt(both.size))))).tolist() if both.size else 10
    ax.hist(
        out_scores,
        bins=bins,
        alpha=0.55,
        label=f"OUT (n={out_scores.size})",
        color=colour("out"),
        density=True,
        histtype="stepfilled",
    )
    ax.hist(
        in_scores,
        bins=bins,
        alpha=0.55,
        label=f"IN (n={in_scores.size})",
        color=colour("in"),
        density=True,
        histtype="stepfilled",
    )
    ax.set_xlabel(label)
    ax.set_ylabel("density")
    legend_outside(ax)
    return fig


def _roc(in_scores: np.ndarray, out_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    thresholds = np.unique(np.concatenate([in_scores, out_scores]))[::-1]
    s_in, s_out = np.sort(in_scores), np.sort(out_scores)
    tpr = (s_in.size - np.searchsorted(s_in, thresholds, side="left")) / max(s_in.size, 1)
    fpr = (s_out.size - np.searchsorted(s_out, thresholds, side="left")) / max(s_out.size, 1)
    return np.concatenate([[0.0], fpr]), np.concatenate([[0.0], tpr])


def roc_figure(in_scores: np.ndarray, out_scores: np.ndarray, *, ax: Axes | None = None) -> MplFigure:
    """ROC of the threshold test on log–log axes, with the chance diagonal.

    Drawn from FPR = 1/OUT observations, the lowest FPR the sample resolves (:func:`resolved_roc`,
    the membership page's rule), with rates as percentages like the page's tables.
    """
    fig, ax = _axes(ax)
    s_in, s_out = np.asarray(in_scores, float), np.asarray(out_scores, float)
    fpr, tpr = _roc(s_in, s_out)
    x, y = resolved_roc(fpr, tpr, num_members=s_in.size, num_non_members=s_out.size)
    # The AUC is an estimate: shown with its 95 % bootstrap interval, the same one as the page's rates table.
    auc = auc_score(s_in, s_out)
    low, high = auc_interval(s_in, s_out, confidence=0.95)
    ax.plot(
        x,
        y,
        color=colour("epsilon_lb"),
        drawstyle="steps-post",
        label=f"threshold test (AUC {auc:.3f}, 95% CI [{low:.3f}, {high:.3f}])",
    )
    roc_axes(
        ax,
        fpr_floor=float(x[0]),
        tpr_floor=0.5 / max(s_in.size, 1),
        fpr_label="false-positive rate (from 1/OUT observations)",
    )
    legend_outside(ax)
    return fig


def guess_curve_figure(result: AuditResult, *, ax: Axes | None = None) -> MplFigure:
    """One-run audits: ε_LB of each guess count r (each point bounded on its own) vs ε_UB."""
    fig, ax = _axes(ax)
    curve = result.details.guess_curve if isinstance(result.details, OneRunDetails) else ()
    r = [p.num_guesses for p in curve]
    e = [p.epsilon_lb for p in curve]
    ax.plot(r, e, **{**style("epsilon_lb"), "marker": "o"}, label="ε_LB at r guesses")
    if math.isfinite(result.epsilon_ub):
        ax.axhline(result.epsilon_ub, ls="--", color=colour("epsilon_ub"), label=f"ε_UB ({result.accountant})")
    ax.axhline(result.epsilon_lb, ls=":", color=colour("epsilon_lb"), label="headline ε_LB (Bonferroni over k)")
    ax.set_xscale("log")
    ax.set_xlabel("number of guesses r")
    ax.set_ylabel("ε")
    legend_outside(ax)
    return fig


def ceiling_figure(curve: EpsilonByTrials, result: AuditResult, *, ax: Axes | None = None) -> MplFigure:
    """ε_LB (with ε_UB) and, in a panel of its own, its ceiling, against the number of observations.

    Two panels sharing the x axis: a ceiling far above ε_UB (a white-box audit's can be 50 where
    ε_UB is 2) would squash ε_LB and ε_UB against the bottom of one shared scale, so the ceiling
    gets a panel and a y scale of its own. With ``ax`` given, both go on it.
    """
    n = list(curve.num_observations)
    if ax is None:
        fig = new_figure((6.8, 5.0))
        top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2], "hspace": 0.12})
    else:
        fig, top = new_axes(ax)
        bottom = top
    ub = result.epsilon_ub if math.isfinite(result.epsilon_ub) else None
    top.plot(n, list(curve.epsilon_lb), **style("epsilon_lb"), label=f"ε_LB ({result.bound}, {result.confidence:.0%})")
    bottom.plot(n, list(curve.ceiling), **style("ceiling"), label="ceiling (a perfect attack on the same design)")
    for panel in {id(top): top, id(bottom): bottom}.values():
        if ub is not None:
            panel.axhline(
                ub,
                ls=":",
                lw=1.5,
                color=colour("epsilon_ub"),
                label=f"ε_UB = {eps_ub_text(ub)} ({result.accountant})" if panel is top else None,
            )
        panel.grid(True, alpha=0.3)
        finish_axes(panel)
    if len(n) > 1 and n[-1] / max(n[0], 1) >= 10:
        top.set_xscale("log")
        plain_log_ticks(bottom.xaxis, count=True)
    # ε ≥ 0; a little room below 0 so markers at ε_LB = 0 are drawn whole, and room above the highest of the
    # curve and ε_UB, so the ε_UB line is never drawn on the frame's edge.
    for panel, ys in ((top, curve.epsilon_lb), (bottom, curve.ceiling)):
        high = max([*(y for y in ys if math.isfinite(y)), *([ub] if ub is not None else []), 1e-3])
        if panel is bottom and bottom is top:
            high = max(high, *(y for y in curve.epsilon_lb if math.isfinite(y)))
        panel.set_ylim(-0.04 * high, 1.12 * high)
    top.set_ylabel("ε_LB and ε_UB")
    if bottom is not top:
        bottom.set_ylabel("ceiling")
    bottom.set_xlabel(f"number of {curve.unit} (IN + OUT)")
    handles, labels = top.get_legend_handles_labels()
    if bottom is not top:
        extra = bottom.get_legend_handles_labels()
        handles, labels = handles + extra[0], labels + extra[1]
    top.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
        fontsize=FONT_PT,
        frameon=False,
    )
    fig = fit_page(fig)
    if bottom.get_xscale() == "log":
        _thin_log_ticks(bottom.xaxis)
    return fig


def _labels_overlap(axis: Any) -> bool:
    """Whether two of the axis's visible major tick labels overlap, as drawn."""
    renderer = axis.axes.figure.canvas.get_renderer()
    # Lays out the ticks in view (positions and texts) as a draw would, without drawing the figure.
    ticks = axis._update_ticks()
    boxes = [t.label1.get_window_extent(renderer) for t in ticks if t.label1.get_visible() and t.label1.get_text()]
    boxes.sort(key=lambda b: b.x0)
    return any(a.x1 + 2 > b.x0 for a, b in zip(boxes, boxes[1:]))


def _thin_log_ticks(axis: Any) -> None:
    """Drop the 2s, then the 5s, of a log axis's 1-2-5 ticks while two labels overlap ("1,0002,000" reads as
    one number): the labels stay plain numbers, fewer of them."""
    for subs in ((1.0, 2.0, 5.0), (1.0, 5.0), (1.0,)):
        axis.set_major_locator(LogLocator(base=10, subs=subs))
        if not _labels_overlap(axis):
            return


def _last_iterate(result: AuditResult) -> float | None:
    """The last-iterate ε (Steinke et al. 2024), where the audit stored it."""
    value = result.epsilon_last_iterate
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


#: What the last-iterate ε is, wherever the report names it: exact for linear losses (so a lower
#: bound on the worst case over losses), a heuristic for others, never a cap or an upper bound.
LAST_ITERATE_MEANING = "exact for linear losses; a heuristic, not an upper bound, for others"


#: The colours of the audit gap's pieces on the bounds figure (Okabe–Ito, apart from the markers' own).
_GAP_COLOURS = {"attack": "#56B4E9", "size": "#BBBBBB", "violation": "#D55E00"}


def gap_segments(result: AuditResult) -> list[tuple[str, float, float, str]]:
    """The pieces of the audit's ε axis the bounds figure draws as bars: (key, from, to, legend label).

    * "violation": ε_LB above a finite ε_UB — the stretch by which the evidence breaks the claim;
    * "attack": from ε_LB up to the nearer of ε_UB and the ceiling — what the attack leaves;
    * "size": from the ceiling up to ε_UB, when the ceiling is below it — what no attack of this
      audit's size could show.

    Pieces of no length are left out; an audit with none (no finite ε_UB and no ceiling) has only
    ε_LB to show, a number the table gives.
    """
    ub, lb, ceiling = result.epsilon_ub, result.epsilon_lb, result.ceiling
    finite_ub = math.isfinite(ub)
    out: list[tuple[str, float, float, str]] = []
    if finite_ub and lb > ub:
        out.append(("violation", ub, lb, "ε_LB above ε_UB: the claim is broken"))
        return out
    tops = [(x, name) for x, name in ((ub if finite_ub else None, "ε_UB"), (ceiling, "ceiling")) if x is not None]
    tops = [(x, name) for x, name in tops if math.isfinite(x)]
    if tops and min(tops)[0] > lb:
        top, name = min(tops)
        out.append(("attack", lb, top, f"left by the attack (ε_LB to {name})"))
    if ceiling is not None and finite_ub and max(ceiling, lb) < ub:
        out.append(("size", max(ceiling, lb), ub, "beyond this audit's size (ceiling to ε_UB)"))
    return out


def bounds_figure(result: AuditResult, *, ax: Axes | None = None) -> MplFigure | None:
    """The audit's ε on one number line: ε_LB, the ceiling, the last-iterate ε and ε_UB, and the gap between them.

    ε_UB is the accountant's bound on every model the training released; the last-iterate ε
    (Steinke et al. 2024, "The Last Iterate Advantage") is the final model's exact ε if the
    losses were linear, and only a heuristic for other losses, drawn where the result holds it;
    the ceiling is the largest ε_LB the audit's size allows; ε_LB is the evidence. The gap is
    drawn as bars of real extent (:func:`gap_segments`): what the attack leaves, what the audit's
    size hides, or by how much the evidence breaks the claim. The line is log-scaled when ε_LB > 0
    and the values span a decade or more; ε_LB = 0 keeps it linear, so that 0 is on it, marked
    "no evidence" — never an arbitrary left edge of a log axis. Bounds are labelled their safe way:
    ε_UB rounded up, ε_LB and the ceiling down.

    Returns:
        The figure, or ``None`` when the audit has nothing but ε_LB to place (no finite ε_UB, no
        ceiling): one number is the table's, not an axes'.
    """
    segments = gap_segments(result)
    if not segments:
        return None
    values: list[tuple[str, float, str]] = []
    if math.isfinite(result.epsilon_ub):
        values.append(("epsilon_ub", result.epsilon_ub, f"ε_UB {eps_ub_text(result.epsilon_ub)} ({result.accountant})"))
    last = _last_iterate(result)
    if last is not None:
        values.append(("epsilon_last_iterate", last, f"last-iterate ε {eps_text(last)}\n({LAST_ITERATE_MEANING})"))
    if result.ceiling is not None:
        values.append(("ceiling", result.ceiling, f"ceiling {eps_lb_text(result.ceiling)}"))
    lb = result.epsilon_lb
    lb_label = f"ε_LB {eps_lb_text(lb)} ({result.confidence:.0%})" + (": no evidence" if lb <= 0 else "")
    positive = [x for _, x, _ in values if x > 0] + ([lb] if lb > 0 else [])
    log = lb > 0 and max(positive) / min(positive) >= 10
    fig, ax = new_axes(ax, size=(7.4, 2.3))
    if log:
        ax.set_xscale("log")
        plain_log_ticks(ax.xaxis)
    for key, lo, hi, label in segments:
        ax.plot(
            [lo, hi],
            [0.0, 0.0],
            color=_GAP_COLOURS[key],
            linewidth=9,
            solid_capstyle="butt",
            alpha=0.8,
            label=label,
            zorder=2,
        )
    looks = Looks()
    # Each marker in its own lane above or below the gap bar, at its own x: equal values (ε_LB 1.88, ε_UB 2 and
    # the last-iterate ε 2 of a tight audit) would otherwise hide one another, ε_UB first (review, issue 46).
    lanes = dict(zip(("epsilon_ub", "epsilon_last_iterate", "ceiling"), (0.6, 0.3, -0.3), strict=True))
    for key, x, label in values:
        ax.plot([x], [lanes[key]], **looks.method(key, linestyle="none"), markersize=10, label=label, zorder=3)
    ax.plot([lb], [-0.6], **looks.method("epsilon_lb", linestyle="none"), markersize=10, label=lb_label, zorder=4)
    lo, hi = min(positive + [lb]), max(positive + [lb])
    if log:
        ax.set_xlim(lo / 2, hi * 2)
    else:
        pad = 0.08 * (hi - min(lo, 0.0)) + 0.02
        ax.set_xlim(min(lo, 0.0) - pad, hi + pad)
    ax.set_ylim(-1, 1)
    ax.set_yticks([])
    ax.set_xlabel(f"ε at δ = {result.delta:g}" + (" (log scale)" if log else ""))
    legend_outside(ax)
    return fig


def bounds_caption(result: AuditResult) -> str:
    """What the gap between ε_LB and ε_UB is made of, in the figure's numbers; the last-iterate ε worded as the
    heuristic it is."""
    ub, lb, ceiling, last = result.epsilon_ub, result.epsilon_lb, result.ceiling, _last_iterate(result)
    parts = [
        f"ε_LB = {eps_lb_text(lb)}"
        + (" (no evidence)" if lb <= 0 else "")
        + f", ε_UB = {eps_ub_text(ub)} ({result.accountant})."
    ]
    top = ub if math.isfinite(ub) else None
    if ceiling is not None:
        parts.append(
            f"Ceiling = {eps_lb_text(ceiling)}: the most this audit's size allows (a perfect attack on the same design)"
            + (f", {eps_text(max(top - ceiling, 0.0))} short of ε_UB." if top is not None and ceiling < top else ".")
        )
    reach = min(x for x in (top, ceiling) if x is not None) if (top is not None or ceiling is not None) else None
    if reach is not None and math.isfinite(reach):
        parts.append(
            f"The rest, {eps_text(max(reach - lb, 0.0))} between ε_LB and {eps_text(reach)}, is what the attack leaves."
        )
    if last is None:
        parts.append(
            "No last-iterate ε (Steinke et al. 2024, defined for DP-SGD claims) is "
            "stored with this audit, so the line omits it."
        )
    elif top is not None and top - last <= 1e-9 * max(1.0, top):  # equal up to rounding (white-box: one step)
        parts.append("The last-iterate ε equals ε_UB: this audit observes every release the accountant bounds.")
    else:
        parts.append(
            f"The last-iterate ε = {eps_text(last)} (Steinke et al. 2024) is the "
            "final model's exact ε if the losses were linear, "
            "and a heuristic, not an upper bound, for other losses"
            + (
                f": the heuristic suggests that {eps_text(max(top - last, 0.0))} of ε_UB "
                "is out of sight of an audit of the final model, "
                "but a non-linear loss can leak more, so it does not cap what an attack can show."
                if top is not None
                else "."
            )
        )
        if lb > last:
            parts.append("ε_LB exceeds it: this training's final model leaks more than a linear loss would.")
    return " ".join(parts)
