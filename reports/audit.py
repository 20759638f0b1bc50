"""Audit figures and the audit report section: ε_LB beside ε_UB, with the evidence.

Plots follow docs/architecture.md ("Style"): each takes results (and an optional matplotlib axes) and
returns a figure; saving is left to :mod:`reports.render`. Shown:

* a table of ε_LB (method, bound, confidence, δ, observation counts) beside ε_UB under every
  accountant, with a violation banner when ε_LB > ε_UB;
* IN/OUT score histograms;
* the ROC curve on log–log axes (Carlini et al. 2022, "Membership Inference Attacks From
  First Principles", §III: the low-FPR regime is what privacy is about);
* for one-run audits, ε_LB against the number of guesses (Steinke, Nasr & Jagielski 2023, Fig. 2);
* ε_LB and its ceiling (the largest ε_LB the design could show: a perfect attack on the same
  counts) against the number of trials or canaries, recomputed on prefixes of the stored scores
  by :func:`dpaudit.privacy.audit_procedures.epsilon_lb_by_trials` and handed in as an
  :class:`~dpaudit.results.audit.EpsilonByTrials`: ε_LB far below a high ceiling is a weak
  attack; ε_LB at a low ceiling is a design that needs more trials;
* one sentence splitting the gap ε_UB − ε_LB into what the audit's size allows (the ceiling)
  and what the attack leaves, with what the last-iterate ε of Steinke et al. 2024 suggests
  beside it, worded as the linear-loss heuristic it is (:func:`gap_sentence`, from
  :attr:`~dpaudit.results.audit.AuditResult.gap`).

Bounds are written their safe way (:mod:`dpaudit.results.numbers`): ε_UB rounded up, ε_LB and
the ceiling (itself the ε_LB of a perfect attack) rounded down.

Torch-free: it renders from a stored :class:`~dpaudit.results.audit.AuditResult` and ``scores.npz``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure
from scipy.integrate import trapezoid

from dpaudit import _validate as v
from dpaudit.results.audit import AuditResult, EpsilonByTrials, load_audit_result
from dpaudit.results.audit_details import AuditDetails, OneRunDetails, WhiteBoxDetails, estimate_facts
from dpaudit.results.numbers import fmt_lower_bound, fmt_upper_bound
from dpaudit.results.verdicts import Verdict, audit_verdict
from dpaudit.store import RunDir, load_npz
from reports.figures import FONT_PT, Looks, colour, eps_lb_text, eps_text, eps_ub_text, finish_axes, fit_page, legend_outside, new_axes, new_figure, plain_log_ticks, style, zero_and_log_axes
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import epsilon_lb_cell, epsilon_ub_cell
from reports.render import Figure, Items, Section, Table, Text, accountant_table, format_number, write_report_files
from reports.verdict_box import verdict_section, with_status

__all__ = [
    "score_histogram",
    "roc_figure",
    "guess_curve_figure",
    "ceiling_figure",
    "bounds_figure",
    "bounds_caption",
    "bounds_table",
    "gap_sentence",
    "audit_section",
    "split_scores",
    "StoredAudit",
    "load_audits",
    "audit_page",
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


def score_histogram(in_scores: np.ndarray, out_scores: np.ndarray, *, ax: Axes | None = None, label: str = "score (higher = IN)") -> MplFigure:
    """Overlaid histograms of IN and OUT scores."""
    fig, ax = _axes(ax)
    both = np.concatenate([in_scores, out_scores])
    bins = np.histogram_bin_edges(both, bins=min(60, max(10, int(math.sqrt(both.size))))).tolist() if both.size else 10
    ax.hist(out_scores, bins=bins, alpha=0.55, label=f"OUT (n={out_scores.size})", color=colour("out"), density=True, histtype="stepfilled")
    ax.hist(in_scores, bins=bins, alpha=0.55, label=f"IN (n={in_scores.size})", color=colour("in"), density=True, histtype="stepfilled")
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
    """ROC of the threshold test on log–log axes, with the chance diagonal."""
    fig, ax = _axes(ax)
    fpr, tpr = _roc(np.asarray(in_scores, float), np.asarray(out_scores, float))
    floor = 0.5 / max(min(in_scores.size, out_scores.size), 1)
    auc = float(trapezoid(tpr, fpr))
    ax.plot(np.maximum(fpr, floor), np.maximum(tpr, floor), color=colour("epsilon_lb"), label=f"threshold test (AUC {auc:.3f})")
    grid = np.logspace(math.log10(floor), 0, 50)
    ax.plot(grid, grid, ls="--", color=colour("chance"), label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
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
            panel.axhline(ub, ls=":", lw=1.5, color=colour("epsilon_ub"), label=f"ε_UB = {eps_ub_text(ub)} ({result.accountant})" if panel is top else None)
        panel.grid(True, alpha=0.3)
        finish_axes(panel)
    if len(n) > 1 and n[-1] / max(n[0], 1) >= 10:
        top.set_xscale("log")
        plain_log_ticks(bottom.xaxis, count=True)
    # ε ≥ 0; a little room below 0 so markers at ε_LB = 0 are drawn whole, not cut by the axis.
    top.set_ylim(bottom=-0.03 * max(top.get_ylim()[1], 1e-3))
    top.set_ylabel("ε_LB and ε_UB")
    if bottom is not top:
        bottom.set_ylabel("ceiling")
    bottom.set_xlabel(f"number of {curve.unit} (IN + OUT)")
    handles, labels = top.get_legend_handles_labels()
    if bottom is not top:
        extra = bottom.get_legend_handles_labels()
        handles, labels = handles + extra[0], labels + extra[1]
    top.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=FONT_PT, frameon=False)
    return fit_page(fig)


def _last_iterate(result: AuditResult) -> float | None:
    """The last-iterate ε (Steinke et al. 2024), where the audit stored it."""
    value = result.epsilon_last_iterate
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


#: What the last-iterate ε is, wherever the report names it: exact for linear losses (so a lower
#: bound on the worst case over losses), a heuristic for others, never a cap or an upper bound.
LAST_ITERATE_MEANING = "exact for linear losses; a heuristic, not an upper bound, for others"


def bounds_figure(result: AuditResult, *, ax: Axes | None = None) -> MplFigure:
    """The audit's ε on one number line: ε_LB, the ceiling, the last-iterate ε and ε_UB.

    ε_UB is the accountant's bound on every model the training released; the last-iterate ε
    (Steinke et al. 2024, "The Last Iterate Advantage") is the final model's exact ε if the
    losses were linear, and only a heuristic for other losses, drawn where the result holds it;
    the ceiling is the largest ε_LB the audit's size allows; ε_LB is the evidence. The line is
    log-scaled when the positive values span a decade or more; ε_LB = 0 is a marker at 0 in a
    narrow panel of its own ("no evidence"), never at an arbitrary left edge of a log axis.
    Bounds are labelled their safe way: ε_UB rounded up, ε_LB and the ceiling down.
    """
    values: list[tuple[str, float, str]] = []
    if math.isfinite(result.epsilon_ub):
        values.append(("epsilon_ub", result.epsilon_ub, f"ε_UB {eps_ub_text(result.epsilon_ub)} ({result.accountant})"))
    last = _last_iterate(result)
    if last is not None:
        values.append(("epsilon_last_iterate", last, f"last-iterate ε {eps_text(last)}\n({LAST_ITERATE_MEANING})"))
    if result.ceiling is not None:
        values.append(("ceiling", result.ceiling, f"ceiling {eps_lb_text(result.ceiling)}"))
    lb_label = f"ε_LB {eps_lb_text(result.epsilon_lb)} ({result.confidence:.0%})"
    positive = [x for _, x, _ in values if x > 0] + ([result.epsilon_lb] if result.epsilon_lb > 0 else [])
    log = bool(positive) and max(positive) / min(positive) >= 10
    zero = None
    if ax is None and result.epsilon_lb <= 0 and positive:
        fig = new_figure((7.4, 2.3))
        zero, ax = zero_and_log_axes(fig, zero_label="0\nno evidence")
        if not log:
            ax.set_xscale("linear")
    else:
        fig, ax = new_axes(ax, size=(7.4, 2.3))
        if log:
            ax.set_xscale("log")
            plain_log_ticks(ax.xaxis)
    looks = Looks()
    for key, x, label in values:
        ax.plot([x], [0.0], **looks.method(key, linestyle="none"), markersize=10, label=label, zorder=3)
    lb_panel = ax if result.epsilon_lb > 0 or zero is None else zero
    lb_panel.plot([result.epsilon_lb], [0.0], **looks.method("epsilon_lb", linestyle="none"), markersize=10, label=lb_label if lb_panel is ax else None, zorder=4)
    if lb_panel is not ax:
        ax.plot([], [], **{**style("epsilon_lb"), "linestyle": "none"}, markersize=10, label=f"{lb_label}: no evidence, drawn at 0")
    if positive:
        lo, hi = min(positive), max(positive)
        ax.set_xlim(lo / 2, hi * 2) if log else ax.set_xlim(0 if zero is None else lo - 0.1 * (hi - lo + 1), hi * 1.1 + 0.05)
    for panel in (ax, zero) if zero is not None else (ax,):
        panel.set_ylim(-1, 1)
        panel.set_yticks([])
        panel.axhline(0.0, color="#999999", linewidth=0.8, zorder=1)
    ax.set_xlabel(f"ε at δ = {result.delta:g}" + (" (log scale)" if log else ""))
    legend_outside(ax)
    return fig


def bounds_caption(result: AuditResult) -> str:
    """What the gap between ε_LB and ε_UB is made of, in the figure's numbers; the last-iterate ε worded as the heuristic it is."""
    ub, lb, ceiling, last = result.epsilon_ub, result.epsilon_lb, result.ceiling, _last_iterate(result)
    parts = [f"ε_LB = {eps_lb_text(lb)}" + (" (no evidence)" if lb <= 0 else "") + f", ε_UB = {eps_ub_text(ub)} ({result.accountant})."]
    top = ub if math.isfinite(ub) else None
    if ceiling is not None:
        parts.append(
            f"Ceiling = {eps_lb_text(ceiling)}: the most this audit's size allows (a perfect attack on the same design)"
            + (f", {eps_text(max(top - ceiling, 0.0))} short of ε_UB." if top is not None and ceiling < top else ".")
        )
    reach = min(x for x in (top, ceiling) if x is not None) if (top is not None or ceiling is not None) else None
    if reach is not None and math.isfinite(reach):
        parts.append(f"The rest, {eps_text(max(reach - lb, 0.0))} between ε_LB and {eps_text(reach)}, is what the attack leaves.")
    if last is None:
        parts.append("No last-iterate ε (Steinke et al. 2024, defined for DP-SGD claims) is stored with this audit, so the line omits it.")
    elif top is not None and top - last <= 1e-9 * max(1.0, top):  # equal up to rounding (white-box: one step)
        parts.append("The last-iterate ε equals ε_UB: this audit observes every release the accountant bounds.")
    else:
        parts.append(
            f"The last-iterate ε = {eps_text(last)} (Steinke et al. 2024) is the final model's exact ε if the losses were linear, "
            "and a heuristic, not an upper bound, for other losses"
            + (
                f": the heuristic suggests that {eps_text(max(top - last, 0.0))} of ε_UB is out of sight of an audit of the final model, "
                "but a non-linear loss can leak more, so it does not cap what an attack can show."
                if top is not None
                else "."
            )
        )
        if lb > last:
            parts.append("ε_LB exceeds it: this training's final model leaks more than a linear loss would.")
    return " ".join(parts)


def _estimate_rows(result: AuditResult) -> list[list[Any]]:
    """The ε point estimate, only with its confidence interval and only when that interval excludes 0.

    An estimate at chance (AUC 0.49) can still read ε ≈ 1 (the best of many thresholds); shown
    bare it reads as leakage. Results stored without an interval show no estimate.
    """
    if result.epsilon_estimate is None:
        return []
    interval, stored_level, stored_kind = estimate_facts(result.details)
    if interval is None or len(interval) != 2:
        return [["ε estimate (not a bound)", "not shown", "stored without a confidence interval; a point estimate is shown only with one"]]
    low, high = float(interval[0]), math.inf if interval[1] is None else float(interval[1])
    level = float(result.confidence if stored_level is None else stored_level)
    if low <= 0:
        return [["ε estimate (not a bound)", "not shown", f"its {level:.0%} interval [0, {eps_text(high)}] includes 0: no evidence of leakage beyond chance"]]
    kind = stored_kind or "point estimate"
    return [["ε estimate (not a bound)", result.epsilon_estimate, f"{level:.0%} interval [{eps_text(low)}, {eps_text(high)}] at the estimate's own threshold; {kind}"]]


def bounds_table(result: AuditResult) -> Table:
    """ε_LB (with method, bound, confidence, δ and counts) beside ε_UB under each accountant."""
    rows: list[list[Any]] = [
        [
            "ε_LB (empirical lower bound)",
            epsilon_lb_cell(result.epsilon_lb),
            f"{result.method} / {result.bound} / {result.threshold_strategy}, {result.confidence:.0%} confidence, δ={result.delta:g}, {result.num_in} IN / {result.num_out} OUT"
            + (f", group size {result.group_size}" if result.group_size > 1 else ""),
        ]
    ]
    if result.ceiling is not None:
        rows.append(
            ["ceiling (largest ε_LB this design can show)", epsilon_lb_cell(result.ceiling), "the same counts, Bonferroni factor, confidence, δ and bound with a perfect attack; more trials raise it"]
        )
    else:
        rows.append(["ceiling (largest ε_LB this design can show)", None, "not recorded: this result was stored before ceilings were reported"])
    rows.append([f"ε_UB (tightest accountant: {result.accountant})", epsilon_ub_cell(result.epsilon_ub), result.claim_description])
    if result.epsilon_last_iterate is not None:
        rows.append(
            [
                f"last-iterate ε ({LAST_ITERATE_MEANING})",
                result.epsilon_last_iterate,
                "the final model's ε if the losses were linear (Steinke et al. 2024), so a lower bound on its worst case over losses; "
                "ε_UB minus it is what this heuristic suggests an audit of the final model cannot see",
            ]
        )
    rows += _estimate_rows(result)
    scored = result.details if isinstance(result.details, WhiteBoxDetails) else None
    comp = None if scored is None else scored.composed_estimate
    if comp:
        rows.append(["full-run ε estimate (not a bound)", comp.epsilon, f"CLT composition of μ_LB over T={comp.num_steps} steps at q={comp.sampling_rate:g}"])
    full = None if scored is None else scored.full_run_claim
    if full:
        rows.append([f"full-run ε_UB {full.accountant} (context)", epsilon_ub_cell(full.epsilon_ub), full.description])
        if full.epsilon_last_iterate is not None:
            rows.append(
                [
                    "full-run last-iterate ε (context)",
                    full.epsilon_last_iterate,
                    f"the run's final model (Steinke et al. 2024): {LAST_ITERATE_MEANING}",
                ]
            )
    rows.append(["tightness ε_LB / ε_UB", result.tightness, ""])
    return Table(columns=["quantity", "ε", "how"], rows=rows, caption=f"δ = {result.delta:g}; confidence {result.confidence:.0%}.")


def gap_sentence(result: AuditResult) -> str:
    """One sentence splitting ε_UB − ε_LB (:attr:`AuditResult.gap`): the design's share, the attack's, and what the last-iterate heuristic suggests.

    The design's share is what the ceiling cannot reach, the attack's the rest below it; both
    rest on bounds alone. The last-iterate ε of Steinke et al. (2024, "The Last Iterate
    Advantage", Theorem 1 / Heuristic 1) is the final model's exact ε for linear losses and a
    heuristic for others, so ε_UB minus it is worded as what that heuristic suggests, never as an
    established share, and it caps nothing. ε_UB is written rounded up, ε_LB and the ceiling
    rounded down (:mod:`dpaudit.results.numbers`); the shares, differences of bounds, to nearest.
    """
    g, f = result.gap, format_number
    ub_text, lb_text = fmt_upper_bound(result.epsilon_ub), fmt_lower_bound(result.epsilon_lb)
    if math.isinf(result.epsilon_ub):
        return "No gap to split: the claim guarantees nothing (ε_UB = ∞)."
    if result.violation:
        return f"No gap to split: ε_LB = {lb_text} exceeds ε_UB = {ub_text}, a violation."
    total = f"Gap ε_UB − ε_LB = {f(result.epsilon_ub - result.epsilon_lb)} (ε_UB = {ub_text}, ε_LB = {lb_text})"
    if result.ceiling is None:  # stored before ceilings: the design's share is unknown, not 0
        split = f"what the audit's size allows is not separated from what the attack leaves (its ceiling was not recorded), {f(g['attack'])} in all"
    else:
        split = f"{f(g['design'])} is what the audit's size allows (its ceiling is {fmt_lower_bound(result.ceiling)}) and {f(g['attack'])} is what the attack leaves"
    li = result.epsilon_last_iterate
    if li is None:
        heuristic = " No last-iterate ε is defined for this claim (not DP-SGD) or it was not recorded."
    elif result.threat_model == "white-box":
        heuristic = " The threat model hides nothing: the white-box game observes every step, and ε_UB is one step's."
    else:
        heuristic = (
            f" The last-iterate ε of Steinke et al. 2024 is {f(li)} ({LAST_ITERATE_MEANING}): "
            f"if this training's losses behaved like linear ones, {f(g['last_iterate_heuristic'])} of ε_UB would be out of sight of an attack on the final model alone; "
            "that is what the heuristic suggests, not an established share, and it caps nothing."
        )
        if result.epsilon_lb > li:
            heuristic += f" ε_LB exceeds the last-iterate ε by {f(result.epsilon_lb - li)}: this training's final model leaks more than a linear loss would."
    return f"{total}: {split}.{heuristic}"


def _covered_lines(details: AuditDetails) -> list[str]:
    """What the fingerprints cover: the local modules the user's code imports, the dataset's files."""
    lines = []
    for key, flag in (("train_fn", "--train-fn"), ("model_fn", "--model-fn")):
        modules, unresolved = details.covered_modules(key)
        if modules:
            lines.append(f"{flag} imports, covered by its fingerprint: " + "; ".join(f"{file} {sha[:16]}" for _, (file, sha) in sorted(modules.items())))
        if unresolved:
            lines.append(f"{flag} imports not found, not covered: {', '.join(unresolved)}")
    files = details.dataset_files
    if files:
        lines.append("dataset files (MD5, reuse is keyed on them): " + "; ".join(f"{f} {str(md5)[:16]}" for f, md5 in sorted(files.items())))
    return lines


def _evidence_lines(result: AuditResult) -> list[str]:
    """What the audit was: threat model, game, bound and its assumption, canary, start, score, fingerprints, coverage."""
    lines = [
        f"threat model: {result.threat_model}; game: {result.method}; bound: {result.bound} ({result.threshold_strategy})",
        f"assumption of the bound: {result.assumption}" + ("" if result.assumption.startswith("none") else " — epsilon_lb is a lower bound only for mechanisms with this trade-off curve"),
    ]
    if result.method == "white-box":
        lines.append(
            "compared claim: one un-sampled Gaussian step — the auditor inserts the Dirac gradient canary itself, so whenever it is IN it is certainly in the lot; each step is one observation of that mechanism"
        )
        canary = result.details.canary_coordinate
        if canary:
            lines.append(f"canary coordinate: {canary.parameter}[{canary.index}], magnitude {format_number(canary.magnitude)}; {canary.reason}")
    elif result.details.canary_name is not None:
        lines.append(f"canary: {result.details.canary_name}" + (f" × {result.group_size} copies" if result.group_size and result.group_size > 1 else ""))
    if result.method == "multi-run":
        # Where the trainings started decides how strong the game can be (Annamalai & De Cristofaro 2024).
        if result.details.init == "worst-case":
            lines.append("start: worst-case: every training, IN and OUT, began from the model pre-trained non-privately on records that are not members (Annamalai & De Cristofaro 2024)")
        else:
            lines.append("start: the trainer's own seeded initialisation (random)")
    lines.append(f"score: {result.details.score or 'n/a'}")
    # What the stored trials were keyed on: a rerun reuses them only when these match.
    prints = {k: val[:16] for k, val in result.details.fingerprints.items()}
    if prints:
        lines.append("fingerprints (SHA-256, reuse is keyed on them): " + "; ".join(f"{k} {val}" for k, val in sorted(prints.items())))
    lines += _covered_lines(result.details)
    lines.append("an ε estimate is a point estimate, never a bound: it is shown only with its confidence interval, and only when that interval excludes 0; ε_LB is the bound")
    return lines


def _ceiling_caption(result: AuditResult, unit: str) -> str:
    """The ceiling plot's caption; for one-run audits, why the ceiling can fall as canaries are added."""
    text = (
        f"ε_LB with ε_UB (top) and, on a scale of its own, its ceiling (bottom: a perfect attack on the same design) against the number of {unit}: "
        "each point audits the first n observations as the full audit did."
    )
    if result.method == "one-run":
        text += (
            " The ceiling need not rise with n: each prefix pays a Bonferroni factor over its own guess counts (the audit's counts scaled to the prefix, "
            "equal ones merged, so a longer prefix can pay for more of them), and a prefix's IN/OUT split is random, so a perfect attack that guesses k "
            "canaries OUT among fewer than k OUT ones must get some wrong. Both change from one prefix to the next."
        )
    return text


def audit_section(
    result: AuditResult,
    scores: Mapping[str, np.ndarray] | None = None,
    *,
    title: str = "Audit",
    trials_curve: EpsilonByTrials | None = None,
    no_trials_curve: str = "no IN/OUT scores were stored for this audit",
) -> Section:
    """The report section of one audit: bounds, ε per accountant, evidence, figures (the verdict box is :func:`audit_page`'s).

    Args:
        result: the stored audit result.
        scores: its ``scores.npz``, if stored.
        title: the section title.
        trials_curve: ε_LB and the ceiling on prefixes of the scores (computed by the caller).
        no_trials_curve: what the report says in place of that plot when it is ``None``.
    """
    # The verdict (violation / no violation / inconclusive) is the page's box: audit_verdict, drawn by audit_page.
    blocks: list[Any] = []
    blocks.append(Text(text=gap_sentence(result)))
    blocks.append(bounds_table(result))
    blocks.append(Figure(figure=bounds_figure(result), name="bounds", caption="The audit on one line. " + bounds_caption(result)))
    epsilons = dict(result.epsilon_ub_by_accountant) or ({result.accountant: result.epsilon_ub} if math.isfinite(result.epsilon_ub) else {})
    blocks.append(accountant_table(epsilons, delta=result.delta, description=result.claim_description, compared=result.accountant))
    blocks.append(Items(items=_evidence_lines(result)))
    s_in, s_out = split_scores(scores) if scores else (np.zeros(0), np.zeros(0))
    drawable = bool(s_in.size and s_out.size)
    why = "no IN/OUT scores were stored for this audit" if not scores else "one of the IN/OUT score sets is empty"
    blocks.append(Figure(figure=score_histogram(s_in, s_out) if drawable else None, name="scores", caption="IN and OUT scores (higher = IN)", empty=why))
    blocks.append(Figure(figure=roc_figure(s_in, s_out) if drawable else None, name="roc", caption="ROC of the threshold test, log–log axes", empty=why))
    blocks.append(
        Figure(
            figure=ceiling_figure(trials_curve, result) if trials_curve is not None else None,
            name="ceiling",
            caption=_ceiling_caption(result, trials_curve.unit if trials_curve else "observations"),
            empty=no_trials_curve,
        )
    )
    if result.method == "one-run":
        blocks.append(
            Figure(
                figure=guess_curve_figure(result) if isinstance(result.details, OneRunDetails) and result.details.guess_curve else None,
                name="guesses",
                caption=(
                    "One-run ε_LB against the number of guesses r: each point is a bound on its own, at the stated confidence for that r alone; "
                    "the curve's highest point is not a bound (choosing it needs the Bonferroni factor the headline ε_LB pays), so a point above ε_UB is no violation"
                ),
                empty="the audit stored no guess curve",
            )
        )
    return Section(title=title, blocks=blocks)


@dataclass(frozen=True, kw_only=True)
class StoredAudit:
    """One audit of a run directory, as its page shows it.

    Attributes:
        name: the audit's directory name.
        result: its stored result.
        scores: its ``scores.npz`` (empty when none was stored).
        trials_curve: ε_LB and the ceiling on prefixes of the scores, or ``None``.
        no_trials_curve: why there is no such curve, for the page.
    """

    name: str
    result: AuditResult
    scores: Mapping[str, np.ndarray] = field(default_factory=dict)
    trials_curve: EpsilonByTrials | None = None
    no_trials_curve: str = "no scores were stored for this audit"


def _trials_curve(result: AuditResult, scores: Mapping[str, np.ndarray]) -> tuple[EpsilonByTrials | None, str]:
    """ε_LB and the ceiling on prefixes of the stored scores (the core computes; the report draws)."""
    from dpaudit.privacy.audit_procedures import epsilon_lb_by_trials

    if not scores:
        return None, "no scores were stored for this audit"
    try:
        curve = epsilon_lb_by_trials(result, scores)
    except ValueError as exc:  # a stored result the prefixes cannot be audited for; the rest of the report stands
        return None, f"ε_LB against the number of trials could not be recomputed from the stored scores: {exc}"
    return curve, "the stored scores are not IN/OUT observations of a game this plot covers"


def load_audits(run: RunDir) -> list[StoredAudit]:
    """Every finished audit of the run, by name, with its scores and its ε_LB-against-trials curve."""
    audits = []
    for d in run.audit_dirs():
        result = load_audit_result(d)
        scores = load_npz(d / "scores.npz") if (d / "scores.npz").is_file() else {}
        curve, why = _trials_curve(result, scores)
        audits.append(StoredAudit(name=d.name, result=result, scores=scores, trials_curve=curve, no_trials_curve=why))
    return audits


def stored_audit_verdict(audit: StoredAudit) -> Verdict:
    """The audit page's verdict: :func:`~dpaudit.results.verdicts.audit_verdict` of the stored result."""
    return audit_verdict(audit.result)


def audit_page(audit: StoredAudit, out: Path) -> Page:
    """Writes ``audit-<name>.{html,md}`` and its figures into ``out``."""
    result = audit.result
    section = audit_section(result, audit.scores, title="Bounds and evidence", trials_curve=audit.trials_curve, no_trials_curve=audit.no_trials_curve)
    sections = [verdict_section(stored_audit_verdict(audit)), section]
    page = write_report_files(out, sections, title=f"Audit {audit.name}", stem=f"audit-{audit.name}", kind="audit").html
    violations = (f"audit {audit.name}: epsilon_lb {fmt_lower_bound(result.epsilon_lb, 4)} > epsilon_ub {fmt_upper_bound(result.epsilon_ub, 4)} ({result.accountant})",) if result.violation else ()
    return Page(html=page, link=with_status(audit.name, sections), violations=violations)


REPORT_KINDS.register(ReportKind(name="audits", group="Audits", order=20, load=load_audits, verdict=stored_audit_verdict, render=audit_page))
