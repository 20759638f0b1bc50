"""Membership-inference report: metrics with intervals, the audit's power, score histograms, per-class rates, ROC.

Presentation only (docs/architecture.md, "Style"): the metrics are derived from stored
:class:`dpaudit.results.MembershipResult` values by their own methods, :func:`plot_roc` takes
results and an optional axes and returns a figure, and :mod:`reports.render` writes the files.
ROC curves are drawn on log–log axes so the low-FPR regime that matters for privacy is visible
(Carlini et al. 2022, "Membership Inference Attacks From First Principles", §III-B); the tables
report AUC, balanced accuracy, advantage, TPR at each stored FPR — each with its 95 % interval
and counts (:mod:`dpaudit.results.membership_rates`) — and the honest ε lower bound
(``docs/audits/statistics.md`` §1–2, §7), beside the target's claimed ε under every accountant and
its generalisation gap. A ROC curve is drawn only where the non-members resolve the FPR (at or
above 1/non-members): nothing is plotted where the tables say "n/a". As ML Privacy Meter and TF
Privacy show them: member vs non-member score histograms per attack, and the strongest attack's
TPR / advantage per class when the result holds the examples' labels.

Imports no torch and nothing from ``attacks``: a report renders from stored results alone.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import PercentFormatter

from dpaudit import _validate as v
from dpaudit.privacy.rate_intervals import auc_interval
from dpaudit.results import DEFAULT_FPRS, MembershipResult, TrainedModel, load_membership_result, load_record
from dpaudit.results.membership import tpr_unresolved
from dpaudit.results.membership_rates import (
    Estimate,
    GeneralisationGap,
    MembershipRates,
    class_breakdown,
    generalisation_gap,
    membership_rates,
)
from dpaudit.results.record_accuracy import NO_COUNT_REASON, counted_test_accuracy
from dpaudit.results.verdicts import VERDICT_FPRS, Verdict, lowest_resolvable_fpr, membership_verdict, rank_attacks
from dpaudit.store import RunDir, safe_stem
from reports.figures import (
    FONT_PT,
    PAGE_WIDTH_IN,
    Looks,
    colour,
    fit_page,
    legend_outside,
    new_axes,
    resolved_roc,
    roc_axes,
)
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import epsilon_lb_cell, fmt_number, fmt_percent, interval_cell
from reports.render import Figure, Items, Section, Table, Text, accountant_table, write_report_files
from reports.verdict_box import verdict_section, with_status

__all__ = [
    "plot_roc",
    "plot_score_histograms",
    "membership_table",
    "tpr_table",
    "threshold_table",
    "class_table",
    "gap_table",
    "membership_sections",
    "write_membership_report",
    "membership_report_stem",
    "AttackedTarget",
    "load_attacked_targets",
    "membership_page",
]


def _as_list(results: Mapping[str, MembershipResult] | Sequence[MembershipResult]) -> list[MembershipResult]:
    items = list(results.values()) if isinstance(results, Mapping) else list(results)
    for r in items:
        if not isinstance(r, MembershipResult):
            raise v.invalid_type("results", f"results must hold MembershipResult values, got {type(r).__name__}")
    return items


def _auc_ends(r: MembershipResult) -> str:
    """The AUC's 95% bootstrap interval, the same (seeded) one as the attacks table's."""
    low, high = auc_interval(r.scores[r.is_member], r.scores[~r.is_member], confidence=0.95)
    return f"{low:.3f}, {high:.3f}"


def plot_roc(
    results: Mapping[str, MembershipResult] | Sequence[MembershipResult], *, ax: Axes | None = None
) -> MplFigure | None:
    """Log–log ROC curves of several attacks on one plot, each in its method's fixed style.

    Each curve starts at FPR = 1/non-members, the lowest FPR its non-members resolve (one false
    positive): below it the empirical ROC is a single step the tables call "n/a", so it is not
    drawn. When attacks resolve different lowest FPRs, the band that only some of them resolve is
    shaded grey. A TPR of 0 sits on the axis' floor (half a member).

    Args:
        results: the attacks' results (usually against the same target).
        ax: axes to draw into; a new figure is made when ``None``.

    Returns:
        The figure holding the axes, or ``None`` when there is no result to draw.
    """
    items = _as_list(results)
    if not items:
        return None
    fig, ax = new_axes(ax, size=(7.0, 4.5))
    x_floor = min(1.0 / r.num_non_members for r in items)
    x_common = max(1.0 / r.num_non_members for r in items)
    y_floor = min(0.5 / r.num_members for r in items)
    looks = Looks()
    for i, r in enumerate(items):
        curve = r.roc()
        # Opened by the TPR at FPR 1/m (the best threshold with at most one false positive): the ROC's
        # lower points at that same FPR would only draw a spike down to the floor.
        fpr, tpr = resolved_roc(curve.fpr, curve.tpr, num_members=r.num_members, num_non_members=r.num_non_members)
        # Curves of attacks that rank alike lie on each other: earlier ones are drawn wider and
        # below, and markers sit at even distances along the (log-scaled) curve, so each stays visible.
        ax.plot(
            fpr,
            tpr,
            **looks.method(r.attack),
            markevery=0.07,
            markersize=5,
            linewidth=max(1.0, 3.2 - 0.6 * i),
            zorder=2 + i,
            drawstyle="steps-post",
            label=f"{r.attack} (AUC {r.auc():.3f} [{_auc_ends(r)}])",
        )
    if x_common > x_floor:
        ax.axvspan(
            x_floor, x_common, color=colour("chance"), alpha=0.15, linewidth=0, label="FPR some attacks cannot resolve"
        )
    roc_axes(ax, fpr_floor=x_floor, tpr_floor=y_floor, fpr_label="false-positive rate (from 1/non-members)")
    targets = sorted({r.model_id for r in items})
    ax.set_title("membership inference: " + (targets[0] if len(targets) == 1 else f"{len(targets)} targets"))
    ax.grid(True, which="major", linewidth=0.3)
    legend_outside(ax)
    return fig


#: Panels per row of the score histograms.
_HIST_COLUMNS = 3
#: Members are hatched as well as filled: a grey-scale print tells them from the dashed non-member outline.
_HATCH = "///"


def plot_score_histograms(
    results: Mapping[str, MembershipResult] | Sequence[MembershipResult], *, bins: int = 30
) -> MplFigure | None:
    """Member vs non-member score histograms, one panel per attack (ML Privacy Meter's view of an attack).

    Each side is normalised to its own count (a bar is the share of members, or of non-members,
    in the bin), so unequal numbers of members and non-members do not tilt the picture. Bins span
    the 1st–99th score percentiles. Members
    are a filled, hatched histogram and non-members a dashed outline: the two read apart in
    grey-scale as well as in colour.

    Returns:
        The figure, or ``None`` when there is no result.
    """
    items = _as_list(results)
    if not items:
        return None
    cols = min(_HIST_COLUMNS, len(items))
    rows = math.ceil(len(items) / cols)
    fig = MplFigure(figsize=(min(PAGE_WIDTH_IN, 2.9 * cols + 0.6), 2.5 * rows + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    handles: list[Any] = []
    for ax, r in zip(axes, items, strict=False):
        # Bins over the 1st–99th percentiles: a loss's few extreme values would put every other score in one bin.
        lo, hi = (float(q) for q in np.quantile(r.scores, [0.01, 0.99]))
        scores = np.clip(r.scores, lo, hi) if hi > lo else r.scores
        members, non_members = scores[r.is_member], scores[~r.is_member]
        edges = np.histogram_bin_edges(scores, bins=bins)
        _, _, filled = ax.hist(
            members,
            bins=edges,
            weights=np.full(members.size, 1.0 / members.size),
            histtype="stepfilled",
            facecolor=colour(r.attack),
            alpha=0.45,
            hatch=_HATCH,
            edgecolor="black",
            linewidth=0.6,
            label="members (filled, hatched)",
        )
        _, _, outline = ax.hist(
            non_members,
            bins=edges,
            weights=np.full(non_members.size, 1.0 / non_members.size),
            histtype="step",
            color="black",
            linestyle="--",
            linewidth=1.4,
            label="non-members (dashed outline)",
        )
        handles = handles or [filled[0], outline[0]]
        ax.set_title(f"{r.attack}: {r.num_members} / {r.num_non_members}", fontsize=FONT_PT)
        ax.set_xlabel("score (higher = member; 1st–99th pct.)", fontsize=FONT_PT)
        ax.tick_params(labelsize=FONT_PT)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    for ax in axes[len(items) :]:
        ax.set_visible(False)
    for ax in axes[::cols]:
        if ax.get_visible():
            ax.set_ylabel("share per bin", fontsize=FONT_PT)
    # One legend for every panel, above them: the panels' data stays uncovered.
    fig.legend(
        handles, [h.get_label() for h in handles], loc="outside upper center", ncols=2, fontsize=FONT_PT, frameon=False
    )
    return fit_page(fig)


def _rates_of(
    items: Sequence[MembershipResult], rates: Mapping[int, MembershipRates] | None, fprs: Sequence[float]
) -> dict[int, MembershipRates]:
    """Each result's rates (keyed by ``id``), computed once unless given."""
    if rates is not None:
        return dict(rates)
    return {id(r): membership_rates(r, fprs=tuple(fprs)) for r in items}


def _bound_test(r: MembershipResult, *, delta: float, confidence: float) -> str:
    """The threshold test behind the attack's ε_LB, as the counts it flags: which side the bound rests on."""
    b = r.epsilon_bound(delta=delta, confidence=confidence)
    return f"{b.true_positives}/{b.num_in} vs {b.false_positives}/{b.num_out}"


def membership_table(
    results: Mapping[str, MembershipResult] | Sequence[MembershipResult],
    *,
    delta: float = 1e-5,
    confidence: float = 0.95,
    rates: Mapping[int, MembershipRates] | None = None,
) -> Table:
    """One row per attack, strongest first (:func:`~dpaudit.results.verdicts.rank_attacks`): ε_LB, TPR at the lowest
    resolvable FPR and the AUC with their intervals, the counts."""
    ranked = rank_attacks(_as_list(results), delta=delta, confidence=confidence)
    fprs = sorted({a.fpr for a in ranked if a.fpr is not None} | set(DEFAULT_FPRS))
    known = _rates_of([a.result for a in ranked], rates, fprs)
    rows = []
    for a in ranked:
        r = a.result
        est = known[id(r)].tpr_at_fpr.get(f"{a.fpr:g}") if a.fpr is not None else None
        if est is None and a.fpr is not None:  # rates computed for other FPRs: the one asked for here
            est = membership_rates(r, fprs=(a.fpr,), confidence=confidence).tpr_at_fpr[f"{a.fpr:g}"]
        tpr: Any = "n/a: no FPR ≤ 10% resolved" if est is None else interval_cell(est)
        at = "—" if a.fpr is None else f"{a.fpr:.1%}".replace(".0%", "%")
        rows.append(
            [
                r.attack,
                epsilon_lb_cell(a.epsilon_lb),
                tpr,
                at,
                interval_cell(known[id(r)].auc, percent=False),
                _bound_test(r, delta=delta, confidence=confidence),
                f"{r.num_members} / {r.num_non_members}",
            ]
        )
    return Table(
        columns=[
            "attack",
            f"ε_LB (δ={delta:g}, {confidence:.0%})",
            "TPR at the lowest standard FPR resolved",
            "at FPR",
            "AUC",
            "ε_LB's test: flagged members vs non-members",
            "members / non-members",
        ],
        rows=rows,
        caption=(
            "Strongest attack first: by ε_LB, then TPR at the lowest of the standard FPRs "
            f"({', '.join(f'{f:.1%}'.replace('.0%', '%') for f in VERDICT_FPRS)}) the "
            'non-members resolve (at least 1/FPR of them), named in "at FPR". '
            "ε_LB: Clopper–Pearson bound with a Bonferroni-corrected threshold "
            "choice, valid at the stated confidence; the test it rests on flags the members and non-members counted "
            "in its column, and the bound compares the flagged shares (TPR against FPR) or, for a test that flags "
            "nearly everyone, the unflagged ones (1 − FPR against 1 − TPR): an attack with an AUC near ½ can reach "
            "its ε_LB on the few samples it does not flag. TPR as a share of the members with its "
            f"{confidence:.0%} Clopper–Pearson interval in brackets; AUC with its {confidence:.0%} "
            "bootstrap interval (1,000 stratified resamples)."
        ),
    )


def tpr_table(
    results: Mapping[str, MembershipResult] | Sequence[MembershipResult],
    *,
    fprs: Sequence[float] = DEFAULT_FPRS,
    rates: Mapping[int, MembershipRates] | None = None,
) -> Table:
    """TPR at each fixed FPR, read off the exact ROC curve of each attack, with its interval.

    A rate at FPR f is shown only where at least ⌈1/f⌉ non-members resolve it
    (:func:`dpaudit.results.membership.min_non_members`); otherwise the cell says how many it
    needs. Rates are percentages of the members with the counts and their 95 % Clopper–Pearson
    interval; the members / non-members each row rests on stand beside them.
    """
    items = _as_list(results)
    known = _rates_of(items, rates, fprs)
    rows = []
    for r in items:
        by_fpr = known[id(r)].tpr_at_fpr
        cells: list[Any] = []
        for f in fprs:
            note = tpr_unresolved(f, r.num_non_members)
            est = by_fpr.get(f"{f:g}")
            if note is None and est is None:
                est = membership_rates(r, fprs=(f,)).tpr_at_fpr[f"{f:g}"]
            cells.append(note or interval_cell(est))
        rows.append([r.attack, *cells, f"{r.num_members} / {r.num_non_members}"])
    return Table(
        columns=["attack", *(f"TPR @ {f:.1%} FPR" for f in fprs), "members / non-members"],
        rows=rows,
        caption="TPR at FPR f is read off the exact ROC curve, with its 95% Clopper–Pearson interval "
        "over the members; it needs at least 1/f non-members (the empirical FPR moves in steps of "
        "1/non-members), so a rate the sample cannot resolve is n/a.",
    )


def threshold_table(
    results: Mapping[str, MembershipResult] | Sequence[MembershipResult],
    *,
    rates: Mapping[int, MembershipRates] | None = None,
) -> Table:
    """Each attack at its best threshold: members and non-members flagged, balanced accuracy and advantage with
    intervals."""
    items = _as_list(results)
    known = _rates_of(items, rates, DEFAULT_FPRS)
    rows = []
    for r in items:
        x = known[id(r)]
        rows.append(
            [
                r.attack,
                f"{x.true_positives}/{x.num_members}",
                f"{x.false_positives}/{x.num_non_members}",
                interval_cell(x.balanced_accuracy),
                interval_cell(x.advantage),
            ]
        )
    return Table(
        columns=["attack", "members flagged", "non-members flagged", "balanced accuracy", "advantage (TPR − FPR)"],
        rows=rows,
        caption="At each attack's best threshold (the highest balanced accuracy), chosen on the same scores: "
        "an optimistic estimate, as in the literature. Brackets: 95% intervals combining the "
        "Clopper–Pearson intervals of TPR and FPR (each at 97.5%, so both hold together) at that threshold "
        "as if it were fixed in advance: they do not cover what choosing it on the same scores adds, so the "
        "upper ends are optimistic too; the ε_LB of the table above, whose threshold search is corrected "
        "(Bonferroni), is the rate to rely on.",
    )


def class_table(result: MembershipResult) -> Table | None:
    """The attack's TPR, FPR and advantage per class at its best overall threshold; ``None`` without labels."""
    rows_of = class_breakdown(result)
    if rows_of is None:
        return None
    rows = [
        [
            str(c.label),
            interval_cell(c.tpr) if c.tpr is not None else "— (no member)",
            interval_cell(c.fpr) if c.fpr is not None else "— (no non-member)",
            interval_cell(c.advantage) if c.advantage is not None else "—",
        ]
        for c in rows_of
    ]
    return Table(
        columns=["class", "TPR (members flagged)", "FPR (non-members flagged)", "advantage (TPR − FPR)"],
        rows=rows,
        caption=f"{result.attack}, the strongest attack, per class of the examples (TF Privacy's per-class "
        "breakdown), at its one best overall threshold, so no class gets a threshold of its own. "
        "Brackets: 95% Clopper–Pearson intervals (advantage: the two combined, each at 97.5%).",
    )


def gap_table(gap: GeneralisationGap) -> Table:
    """The target's accuracy on its members and on the non-members, and the gap, with intervals."""
    return Table(
        columns=["the target's accuracy on", "rate [95% interval]"],
        rows=[
            ["members (training set)", interval_cell(gap.train)],
            ["non-members (held out)", interval_cell(gap.held_out)],
            ["generalisation gap (members − non-members)", interval_cell(gap.gap)],
        ],
        caption="A gap between the accuracy on the training set and on held-out non-members is what "
        "loss-based attacks turn into membership advantage (Yeom et al. 2018). Brackets: 95% "
        "Clopper–Pearson intervals; the gap's combines the two, each at 97.5%.",
    )


def _short(value: Any) -> str:
    if isinstance(value, float):
        return fmt_number(value)
    if isinstance(value, (tuple, list)):
        return "/".join(map(str, value))
    return str(value)


def membership_sections(
    results: Mapping[str, MembershipResult] | Sequence[MembershipResult],
    *,
    epsilons: Mapping[str, float] | None = None,
    claim_description: str = "",
    delta: float = 1e-5,
    confidence: float = 0.95,
    target_accuracy: float | Estimate | None = None,
    gap: GeneralisationGap | None = None,
) -> list[Section]:
    """The report's sections: the verdict, the target (generalisation gap, claim ε per accountant), the attacks
    strongest first with intervals, score histograms, the strongest attack per class, ROC, configurations."""
    # Strongest first everywhere on the page: the tables, the ROC legend, the configurations.
    items = [a.result for a in rank_attacks(_as_list(results), delta=delta, confidence=confidence)]
    verdict = _verdict(
        items, epsilons=epsilons, delta=delta, confidence=confidence, target_accuracy=target_accuracy, gap=gap
    )
    claim: list[Any] = (
        [accountant_table(epsilons, delta=delta, description=claim_description)]
        if epsilons is not None
        else [Text(text="The target's record is not in this run directory, so its claim cannot be shown.")]
    )
    if gap is not None:
        claim.insert(0, gap_table(gap))
    elif isinstance(target_accuracy, Estimate):
        claim.insert(
            0,
            Text(
                text=f"Test accuracy of the target: {target_accuracy.text()} ({target_accuracy.confidence:.0%} "
                "Clopper–Pearson interval; its record holds no train and non-member accuracies, so no "
                "generalisation gap)."
            ),
        )
    elif target_accuracy is not None:
        claim.insert(
            0,
            Text(
                text=f"Test accuracy of the target: {fmt_percent(target_accuracy)} (its record holds no train and "
                f"non-member accuracies, so no generalisation gap; {NO_COUNT_REASON})."
            ),
        )
    sections = [verdict_section(verdict), Section(title="Target: accuracy and privacy claim", blocks=claim)]
    if not items:
        sections.append(
            Section(title="Attacks", blocks=[Text(text="No membership-attack results are stored for this target.")])
        )
        return sections
    fprs = sorted({f for r in items if (f := lowest_resolvable_fpr(r.num_non_members)) is not None} | set(DEFAULT_FPRS))
    rates = {id(r): membership_rates(r, fprs=tuple(fprs), confidence=confidence) for r in items}
    sections.append(
        Section(
            title="Attacks",
            blocks=[
                membership_table(items, delta=delta, confidence=confidence, rates=rates),
                tpr_table(items, rates=rates),
                threshold_table(items, rates=rates),
            ],
        )
    )
    sections.append(
        Section(
            title="Scores of members and non-members",
            blocks=[
                Figure(
                    figure=plot_score_histograms(items),
                    name="scores",
                    caption="Each attack's scores: members filled and hatched, non-members a dashed outline, each "
                    "as a share of its own count. The further apart, the easier membership is to tell.",
                    empty="no attack results to draw",
                )
            ],
        )
    )
    by_class = class_table(items[0])
    sections.append(
        Section(
            title=f"Per class: {items[0].attack}",
            blocks=[
                by_class
                if by_class is not None
                else Text(
                    text=f"{items[0].attack}'s stored result holds no labels of the examples (stored before attacks "
                    "kept them), so it cannot be broken down by class."
                )
            ],
        )
    )
    sections.append(
        Section(
            title="ROC curves",
            blocks=[
                Figure(
                    figure=plot_roc(items),
                    name="roc",
                    caption="ROC curves of every attack, log–log axes, from FPR = 1/non-members, the lowest FPR "
                    "the non-members resolve (below it the tables say n/a, and nothing is drawn)",
                    empty="no attack results to draw",
                )
            ],
        )
    )
    configs = [
        f"{r.attack}: " + (", ".join(f"{k}={_short(v)}" for k, v in r.config.items()) or "defaults") for r in items
    ]
    prints = {k: str(val)[:16] for r in items for k, val in dict(r.metadata.get("fingerprints") or {}).items()}
    if prints:
        configs.append(
            "target fingerprints (SHA-256): "
            + "; ".join(f"{k.removesuffix('_sha256')} {val}" for k, val in sorted(prints.items()))
        )
    sections.append(Section(title="Attack configurations", blocks=[Items(items=configs)]))
    return sections


def membership_report_stem(model_id: str) -> str:
    """The file stem of the membership report of ``model_id``."""
    return "membership-" + safe_stem(model_id, default="target")


def write_membership_report(
    results: Mapping[str, MembershipResult] | Sequence[MembershipResult],
    run_dir: str | os.PathLike[str] | RunDir,
    *,
    epsilons: Mapping[str, float] | None = None,
    claim_description: str = "",
    delta: float = 1e-5,
    confidence: float = 0.95,
) -> Path:
    """Writes ``membership-<model_id>.{html,md}`` and its ROC figure into the run's reports directory; returns the HTML
    path.

    Raises:
        ValueError: ``results`` is empty or covers more than one target.
    """
    items = _as_list(results)
    targets = sorted({r.model_id for r in items})
    if len(targets) != 1:
        raise v.invalid("results", f"results must be against exactly one target, got {targets}")
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    record_dir = run.find_record_dir(targets[0])  # also a sub-model's (a PATE teacher, a DSSGD participant)
    record = load_record(record_dir) if record_dir is not None else None
    if epsilons is None and record is not None:
        epsilons, claim_description = record.claim.epsilons(delta=delta), record.claim.statement()
    sections = membership_sections(
        items,
        epsilons=epsilons,
        claim_description=claim_description,
        delta=delta,
        confidence=confidence,
        target_accuracy=_accuracy(record) if record is not None else None,
        gap=_gap(record) if record is not None else None,
    )
    return write_report_files(
        run.reports_dir(),
        sections,
        title=f"Membership inference against {targets[0]}",
        stem=membership_report_stem(targets[0]),
        kind="membership",
    ).html


@dataclass(frozen=True, kw_only=True)
class AttackedTarget:
    """The membership attacks against one target of a run directory, with the target's claim.

    Attributes:
        model_id: the target.
        results: every attack's stored result, by file name.
        epsilons: the claim's ε under every accountant at ``delta``; ``None`` when the run
            directory does not hold the target's record.
        claim_description: the claim's statement.
        delta: the δ of those ε (the record's, else 1e-5).
        target_accuracy: the target's test accuracy, from its record (with its interval where the
            record holds its count).
        gap: the target's train vs non-member accuracy, from its record (``None`` when it holds neither).
    """

    model_id: str
    results: tuple[MembershipResult, ...]
    epsilons: Mapping[str, float] | None = None
    claim_description: str = ""
    delta: float = 1e-5
    target_accuracy: float | Estimate | None = None
    gap: GeneralisationGap | None = None


def _gap(record: TrainedModel) -> GeneralisationGap | None:
    return generalisation_gap(
        record.metrics,
        num_members=len(record.membership.members),
        num_non_members=len(record.membership.non_members),
    )


def _accuracy(record: TrainedModel) -> float | Estimate | None:
    """The record's test accuracy: with its interval where the record holds its count, else the bare share."""
    est = counted_test_accuracy(record.metrics)
    if est is not None:
        return est
    acc = record.metrics.get("test_accuracy")
    return float(acc) if isinstance(acc, (int, float)) and not isinstance(acc, bool) else None


def load_attacked_targets(run: RunDir) -> list[AttackedTarget]:
    """Every target of the run with stored membership results, by name, with its record's claim."""
    targets = []
    for d in run.membership_dirs():
        results = tuple(load_membership_result(p) for p in sorted(d.glob("*.json")))
        if not results:
            continue
        model_id = results[0].model_id
        # A sub-model (a PATE teacher, a DSSGD participant) is a record in a cache under records/.
        found = run.find_record_dir(model_id)
        if found is None:
            targets.append(AttackedTarget(model_id=model_id, results=results))
            continue
        record = load_record(found)
        delta = float(record.metrics.get("delta") or record.config.get("delta") or 1e-5)
        targets.append(
            AttackedTarget(
                model_id=model_id,
                results=results,
                epsilons=record.claim.epsilons(delta=delta),
                claim_description=record.claim.statement(),
                delta=delta,
                target_accuracy=_accuracy(record),
                gap=_gap(record),
            )
        )
    return targets


def _verdict(
    results: Sequence[MembershipResult],
    *,
    epsilons: Mapping[str, float] | None,
    delta: float,
    confidence: float,
    target_accuracy: float | Estimate | None,
    gap: GeneralisationGap | None = None,
) -> Verdict:
    # The tightest claimed ε is ε_UB; no accountant bounding the claim is ∞, no record in the run unknown.
    epsilon_ub = None if epsilons is None else (min(epsilons.values()) if epsilons else math.inf)
    return membership_verdict(
        results, delta=delta, confidence=confidence, epsilon_ub=epsilon_ub, target_accuracy=target_accuracy, gap=gap
    )


def target_verdict(target: AttackedTarget) -> Verdict:
    """A membership page's verdict: :func:`~dpaudit.results.verdicts.membership_verdict` of the target's attacks against
    its claim."""
    return _verdict(
        _as_list(target.results),
        epsilons=target.epsilons,
        delta=target.delta,
        confidence=0.95,
        target_accuracy=target.target_accuracy,
        gap=target.gap,
    )


def membership_page(target: AttackedTarget, out: Path) -> Page:
    """Writes ``membership-<model_id>.{html,md}`` and its ROC figure into ``out``."""
    sections = membership_sections(
        target.results,
        epsilons=target.epsilons,
        claim_description=target.claim_description,
        delta=target.delta,
        target_accuracy=target.target_accuracy,
        gap=target.gap,
    )
    stem = membership_report_stem(target.model_id)
    page = write_report_files(
        out, sections, title=f"Membership inference against {target.model_id}", stem=stem, kind="membership"
    ).html
    return Page(html=page, link=with_status(stem.removeprefix("membership-"), sections))


REPORT_KINDS.register(
    ReportKind(
        name="membership",
        group="Membership inference",
        order=30,
        load=load_attacked_targets,
        verdict=target_verdict,
        render=membership_page,
    )
)
