"""Membership-inference report: a metrics table and log–log ROC curves of every attack.

Presentation only (DESIGN.md, "Style"): the metrics are derived from stored
:class:`dpaudit.results.MembershipResult` values by their own methods, plotting functions take
results and an optional axes and return a figure, and only :func:`write_membership_report`
writes files. ROC curves are drawn on log–log axes so the low-FPR regime that matters for
privacy is visible (Carlini et al. 2022, §III-B); the table reports AUC, balanced accuracy,
TPR at FPR 0.1 % and 1 % and the honest ε lower bound (``reference/audit.md`` §1–2, §7).

Imports no torch and nothing from ``attacks``: a report renders from stored results alone.
Matplotlib runs on the Agg canvas (``matplotlib.figure.Figure``, no pyplot state).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from dpaudit.results import MembershipResult
from dpaudit.store import atomic_write_bytes, atomic_write_text

__all__ = ["plot_roc", "membership_table", "membership_section", "write_membership_report"]


def _as_list(results: Mapping[str, MembershipResult] | Sequence[MembershipResult]) -> list[MembershipResult]:
    items = list(results.values()) if isinstance(results, Mapping) else list(results)
    if not items:
        raise ValueError("results must hold at least one MembershipResult")
    for r in items:
        if not isinstance(r, MembershipResult):
            raise TypeError(f"results must hold MembershipResult values, got {type(r).__name__}")
    return items


def plot_roc(results: Mapping[str, MembershipResult] | Sequence[MembershipResult], *, ax: Axes | None = None) -> Figure:
    """Log–log ROC curves of several attacks on one plot.

    Args:
        results: the attacks' results (usually against the same target).
        ax: axes to draw into; a new figure is made when ``None``.

    Returns:
        The figure holding the axes.
    """
    items = _as_list(results)
    if ax is None:
        fig = Figure(figsize=(5.0, 4.5))
        ax = fig.add_subplot(1, 1, 1)
    fig = ax.figure
    floor = min(0.5 / max(r.num_non_members, 1) for r in items)
    for r in items:
        curve = r.roc()
        # FPR = 0 has no place on a log axis; pin it at the floor so the curve starts at the left edge.
        fpr = np.maximum(curve.fpr, floor)
        tpr = np.maximum(curve.tpr, floor)
        ax.plot(fpr, tpr, label=f"{r.attack} (AUC {r.auc():.3f}, TPR@0.1% {r.tpr_at_fpr(0.001):.3f})", linewidth=1.2)
    grid = np.logspace(np.log10(floor), 0, 50)
    ax.plot(grid, grid, linestyle="--", color="grey", linewidth=0.8, label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(floor, 1.0)
    ax.set_ylim(floor, 1.0)
    ax.set_xlabel("false-positive rate")
    ax.set_ylabel("true-positive rate")
    targets = sorted({r.model_id for r in items})
    ax.set_title("membership inference: " + (targets[0] if len(targets) == 1 else f"{len(targets)} targets"), fontsize=8)
    ax.legend(fontsize=6, loc="lower right")
    ax.grid(True, which="major", linewidth=0.3)
    return fig


def membership_table(results: Mapping[str, MembershipResult] | Sequence[MembershipResult], *, delta: float = 1e-5, confidence: float = 0.95) -> str:
    """A Markdown table: one row per attack with AUC, balanced accuracy, TPR@FPR and ε_LB."""
    items = _as_list(results)
    rows = [
        f"| attack | AUC | balanced acc. | TPR @ 0.1% FPR | TPR @ 1% FPR | ε_LB (δ={delta:g}, {confidence:.0%}) | members / non-members |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in items:
        s = r.summary(delta=delta, confidence=confidence)
        rows.append(
            f"| {r.attack} | {s['auc']:.4f} | {s['balanced_accuracy']:.4f} | {s['tpr_at_fpr']['0.001']:.4f} | "
            f"{s['tpr_at_fpr']['0.01']:.4f} | {s['epsilon_lb']:.3f} | {s['num_members']} / {s['num_non_members']} |"
        )
    return "\n".join(rows)


def membership_section(results: Mapping[str, MembershipResult] | Sequence[MembershipResult], *, figure: str | None = None, delta: float = 1e-5, confidence: float = 0.95) -> str:
    """The Markdown section: heading, table, the ROC figure (by relative path) and notes."""
    items = _as_list(results)
    targets = sorted({r.model_id for r in items})
    lines = [f"## Membership inference — {', '.join(targets)}", "", membership_table(items, delta=delta, confidence=confidence), ""]
    if figure:
        lines += [f"![log-log ROC curves]({figure})", ""]
    lines += [
        "Scores: higher = member. TPR at a fixed FPR is read off the exact ROC curve; balanced accuracy "
        "uses the best threshold on the same scores (an estimate). ε_LB is a Clopper–Pearson bound with a "
        "Bonferroni-corrected threshold choice, valid at the stated confidence.",
        "",
    ]
    for r in items:
        config = ", ".join(f"{k}={_short(val)}" for k, val in r.config.items())
        lines.append(f"- `{r.attack}`: {config}")
    return "\n".join(lines) + "\n"


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (tuple, list)):
        return "/".join(map(str, value))
    return str(value)


def write_membership_report(
    results: Mapping[str, MembershipResult] | Sequence[MembershipResult],
    run_dir: str | os.PathLike[str],
    *,
    delta: float = 1e-5,
    confidence: float = 0.95,
) -> Path:
    """Writes ``membership-<model_id>.md`` and its ROC figure (PNG) into ``RUN_DIR/reports/``.

    Returns:
        The Markdown file.
    """
    items = _as_list(results)
    targets = sorted({r.model_id for r in items})
    stem = "membership-" + (targets[0] if len(targets) == 1 else "several")
    reports = Path(run_dir) / "reports"
    fig = plot_roc(items)
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=150, bbox_inches="tight")
    atomic_write_bytes(reports / f"{stem}.png", buf.getvalue())
    text = membership_section(items, figure=f"{stem}.png", delta=delta, confidence=confidence)
    return atomic_write_text(reports / f"{stem}.md", text)
