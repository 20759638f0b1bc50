"""Membership-inference report: a metrics table, TPR at fixed FPRs and log–log ROC curves.

Presentation only (docs/architecture.md, "Style"): the metrics are derived from stored
:class:`dpaudit.results.MembershipResult` values by their own methods, :func:`plot_roc` takes
results and an optional axes and returns a figure, and :mod:`reports.render` writes the files.
ROC curves are drawn on log–log axes so the low-FPR regime that matters for privacy is visible
(Carlini et al. 2022, "Membership Inference Attacks From First Principles", §III-B); the tables
report AUC, balanced accuracy, TPR at each stored FPR and the honest ε lower bound
(``docs/audits/statistics.md`` §1–2, §7), beside the target's claimed ε under every accountant.

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

from dpaudit import _validate as v
from dpaudit.results import DEFAULT_FPRS, MembershipResult, TrainedModel, load_membership_result, load_record
from dpaudit.results.membership import tpr_unresolved
from dpaudit.results.verdicts import Verdict, membership_verdict, rank_attacks
from dpaudit.store import RunDir, safe_stem
from reports.figures import Looks, colour, legend_outside, new_axes
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import Shown, epsilon_lb_cell, fmt_number, fmt_percent, percent_cell, rate_cell
from reports.render import Figure, Items, Section, Table, Text, accountant_table, write_report_files
from reports.verdict_box import verdict_section, with_status

__all__ = [
    "plot_roc",
    "membership_table",
    "tpr_table",
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


def plot_roc(
    results: Mapping[str, MembershipResult] | Sequence[MembershipResult], *, ax: Axes | None = None
) -> MplFigure | None:
    """Log–log ROC curves of several attacks on one plot, each in its method's fixed style.

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
    floor = min(0.5 / max(r.num_non_members, 1) for r in items)
    looks = Looks()
    for i, r in enumerate(items):
        curve = r.roc()
        # FPR = 0 has no place on a log axis; pin it at the floor so the curve starts at the left edge.
        fpr = np.maximum(curve.fpr, floor)
        tpr = np.maximum(curve.tpr, floor)
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
            label=f"{r.attack} (AUC {r.auc():.3f})",
        )
    grid = np.logspace(np.log10(floor), 0, 50)
    ax.plot(grid, grid, linestyle="--", color=colour("chance"), linewidth=0.8, label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(floor, 1.0)
    ax.set_ylim(floor, 1.0)
    ax.set_xlabel("false-positive rate")
    ax.set_ylabel("true-positive rate")
    targets = sorted({r.model_id for r in items})
    ax.set_title("membership inference: " + (targets[0] if len(targets) == 1 else f"{len(targets)} targets"))
    ax.grid(True, which="major", linewidth=0.3)
    legend_outside(ax)
    return fig


def _auc(x: float) -> Shown:
    return Shown(x, f"{x:.3f}")


def membership_table(
    results: Mapping[str, MembershipResult] | Sequence[MembershipResult],
    *,
    delta: float = 1e-5,
    confidence: float = 0.95,
) -> Table:
    """One row per attack, strongest first (:func:`~dpaudit.results.verdicts.rank_attacks`): ε_LB, TPR at the lowest
    resolvable FPR, AUC, balanced accuracy, the counts."""
    rows = []
    for a in rank_attacks(_as_list(results), delta=delta, confidence=confidence):
        r = a.result
        tpr = (
            "n/a: no FPR ≤ 10% resolved"
            if a.tpr is None or a.fpr is None
            else rate_cell(round(a.tpr * r.num_members), r.num_members)
        )
        at = "—" if a.fpr is None else f"{a.fpr:.1%}".replace(".0%", "%")
        rows.append(
            [
                r.attack,
                epsilon_lb_cell(a.epsilon_lb),
                tpr,
                at,
                _auc(a.auc),
                percent_cell(r.balanced_accuracy()),
                f"{r.num_members} / {r.num_non_members}",
            ]
        )
    return Table(
        columns=[
            "attack",
            f"ε_LB (δ={delta:g}, {confidence:.0%})",
            "TPR at the lowest FPR resolved",
            "at FPR",
            "AUC",
            "balanced acc. (estimate)",
            "members / non-members",
        ],
        rows=rows,
        caption=(
            "Strongest attack first: by ε_LB, then TPR at the lowest FPR the "
            "non-members resolve (at least 1/FPR of them). "
            "ε_LB: Clopper–Pearson bound with a Bonferroni-corrected threshold "
            "choice, valid at the stated confidence. TPR as a share of the members."
        ),
    )


def tpr_table(
    results: Mapping[str, MembershipResult] | Sequence[MembershipResult], *, fprs: Sequence[float] = DEFAULT_FPRS
) -> Table:
    """TPR at each fixed FPR, read off the exact ROC curve of each attack.

    A rate at FPR f is shown only where at least ⌈1/f⌉ non-members resolve it
    (:func:`dpaudit.results.membership.min_non_members`); otherwise the cell says how many it
    needs. Rates are percentages of the members with the counts; the members / non-members
    each row rests on stand beside them.
    """
    rows = []
    for r in _as_list(results):
        cells = [
            tpr_unresolved(f, r.num_non_members) or rate_cell(round(r.tpr_at_fpr(f) * r.num_members), r.num_members)
            for f in fprs
        ]
        rows.append([r.attack, *cells, f"{r.num_members} / {r.num_non_members}"])
    return Table(
        columns=["attack", *(f"TPR @ {f:.1%} FPR" for f in fprs), "members / non-members"],
        rows=rows,
        caption="TPR at FPR f is read off the exact ROC curve; it needs at least 1/f "
        "non-members (the empirical FPR moves in steps of 1/non-members), so a "
        "rate the sample cannot resolve is n/a.",
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
    target_accuracy: float | None = None,
) -> list[Section]:
    """The report's sections: the verdict, the target (accuracy, claim ε per accountant), the attacks strongest first,
    TPR@FPR, ROC, configurations."""
    # Strongest first everywhere on the page: the tables, the ROC legend, the configurations.
    items = [a.result for a in rank_attacks(_as_list(results), delta=delta, confidence=confidence)]
    verdict = _verdict(items, epsilons=epsilons, delta=delta, confidence=confidence, target_accuracy=target_accuracy)
    claim: list[Any] = (
        [accountant_table(epsilons, delta=delta, description=claim_description)]
        if epsilons is not None
        else [Text(text="The target's record is not in this run directory, so its claim cannot be shown.")]
    )
    if target_accuracy is not None:
        claim.insert(0, Text(text=f"Test accuracy of the target: {fmt_percent(target_accuracy)}."))
    sections = [verdict_section(verdict), Section(title="Target: accuracy and privacy claim", blocks=claim)]
    if not items:
        sections.append(
            Section(title="Attacks", blocks=[Text(text="No membership-attack results are stored for this target.")])
        )
        return sections
    sections.append(
        Section(title="Attacks", blocks=[membership_table(items, delta=delta, confidence=confidence), tpr_table(items)])
    )
    sections.append(
        Section(
            title="ROC curves",
            blocks=[
                Figure(
                    figure=plot_roc(items),
                    name="roc",
                    caption="ROC curves of every attack, log–log axes",
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
    if epsilons is None and record_dir is not None:
        record = load_record(record_dir)
        epsilons, claim_description = record.claim.epsilons(delta=delta), record.claim.statement()
    accuracy = _accuracy(load_record(record_dir)) if record_dir is not None else None
    sections = membership_sections(
        items,
        epsilons=epsilons,
        claim_description=claim_description,
        delta=delta,
        confidence=confidence,
        target_accuracy=accuracy,
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
        target_accuracy: the target's test accuracy, from its record.
    """

    model_id: str
    results: tuple[MembershipResult, ...]
    epsilons: Mapping[str, float] | None = None
    claim_description: str = ""
    delta: float = 1e-5
    target_accuracy: float | None = None


def _accuracy(record: TrainedModel) -> float | None:
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
            )
        )
    return targets


def _verdict(
    results: Sequence[MembershipResult],
    *,
    epsilons: Mapping[str, float] | None,
    delta: float,
    confidence: float,
    target_accuracy: float | None,
) -> Verdict:
    # The tightest claimed ε is ε_UB; no accountant bounding the claim is ∞, no record in the run unknown.
    epsilon_ub = None if epsilons is None else (min(epsilons.values()) if epsilons else math.inf)
    return membership_verdict(
        results, delta=delta, confidence=confidence, epsilon_ub=epsilon_ub, target_accuracy=target_accuracy
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
    )


def membership_page(target: AttackedTarget, out: Path) -> Page:
    """Writes ``membership-<model_id>.{html,md}`` and its ROC figure into ``out``."""
    sections = membership_sections(
        target.results,
        epsilons=target.epsilons,
        claim_description=target.claim_description,
        delta=target.delta,
        target_accuracy=target.target_accuracy,
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
