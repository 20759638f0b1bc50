"""Model-inversion report: the evaluator's verdict, members vs class average, image grids, targets compared.

Presentation only (docs/architecture.md, "Style"). Everything shown is read from stored
:class:`dpaudit.results.InversionResult` values and the targets' records:

* the field's metrics (Zhang et al. 2020, "The Secret Revealer", §4.1): attack accuracy top-1 /
  top-5 by an independent evaluation classifier, the KNN distance in its feature space and PSNR,
  beside chance (1/N over the dataset's N classes);
* the seeds' question — does a reconstruction reveal *members* or only the class average? — as
  per-class pixel distances to the class mean, the nearest member and the nearest held-out
  non-member, and the inversion-based membership score's AUC, TPR at 1% FPR and honest ε_LB
  set against the target's claimed ε_UB;
* image grids: for each class the reconstruction of every attack (MI-Face, Fredrikson et al.
  2015; GMI) beside the class mean, the nearest member and the nearest non-member;
* when the run holds several targets (non-private, DP-SGD at several ε, …), one comparison
  table and one figure of attack accuracy and membership AUC per target.

Plotting functions take data and an optional axes (or figure size) and return a figure; only
:mod:`reports.render` saves files. Imports no torch and nothing from ``attacks``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure
from matplotlib.patches import Rectangle
from matplotlib.ticker import PercentFormatter

from dpaudit import _validate as v
from dpaudit.results import InversionResult, TrainedModel, load_inversion_result, load_record
from dpaudit.results.inversion import evaluator_check, stopping_text
from dpaudit.results.membership import tpr_unresolved
from dpaudit.results.membership_rates import MembershipRates, membership_rates, proportion
from dpaudit.results.record_accuracy import NO_COUNT_REASON, counted_test_accuracy
from dpaudit.results.verdicts import Verdict, inversion_verdict, most_severe
from dpaudit.store import RunDir, safe_stem
from reports.figures import FONT_PT, PAGE_WIDTH_IN, colour, fit_page, new_axes, style
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import (
    Shown,
    epsilon_lb_cell,
    epsilon_ub_cell,
    fmt_percent,
    fmt_upper_bound,
    interval_cell,
    percent_cell,
)
from reports.render import Figure, Items, Section, Table, Text, accountant_table, format_number, write_report_files
from reports.verdict_box import verdict_section, with_status

__all__ = [
    "InversionCounts",
    "InversionTarget",
    "load_inversion_targets",
    "image_grid",
    "comparison_figure",
    "metrics_tables",
    "comparison_table",
    "inversion_sections",
    "target_sections",
    "inversion_summary",
    "evaluator_text",
    "INVERSION_REPORT_STEM",
    "CLASSES_PER_BLOCK",
    "load_inverted_targets",
    "inversion_page",
]

#: File stem of the run's inversion page.
INVERSION_REPORT_STEM = "inversion"
#: Classes per image-grid figure: 40 face identities become four figures of ten columns each.
CLASSES_PER_BLOCK = 10
#: The FPR at which the membership table reads the TPR.
_FPR = 0.01


@dataclass(frozen=True, kw_only=True)
class InversionTarget:
    """The inversion results against one target, with its record when the run holds it.

    Attributes:
        model_id: the attacked model.
        results: one result per attack, sorted by attack name.
        record: the target's record, or ``None`` when it is not in the run directory.
        result_dir: where the results are stored.
    """

    model_id: str
    results: tuple[InversionResult, ...]
    record: TrainedModel | None
    result_dir: Path

    @property
    def delta(self) -> float:
        if self.record is None:
            return 1e-5
        return float(self.record.metrics.get("delta") or self.record.config.get("delta") or 1e-5)

    def epsilons(self) -> dict[str, float] | None:
        """The claim's ε_UB under every accountant, or ``None`` without a record."""
        return None if self.record is None else self.record.claim.epsilons(delta=self.delta)

    def epsilon_ub(self) -> float | None:
        """The tightest claimed ε (∞ for a claim no accountant bounds), ``None`` without a record."""
        eps = self.epsilons()
        if eps is None:
            return None
        return min(eps.values()) if eps else math.inf

    def num_dataset_classes(self) -> int | None:
        """N of the chance level 1/N: as the attack stored it, else the record's; ``None`` if unknown."""
        for r in self.results:
            n = r.metadata.get("num_dataset_classes")
            if isinstance(n, int) and n >= 1:
                return n
        return self.record.num_classes if self.record is not None else None

    def label(self) -> str:
        """The model id and, on a second line, its defense and ε: a figure axis label."""
        eps = self.epsilon_ub()
        if eps is None:
            return self.model_id
        defense = self.record.defense if self.record is not None else ""
        return f"{self.model_id}\n({defense}, ε={fmt_upper_bound(eps)})"


def load_inversion_targets(run_dir: str | Path | RunDir) -> list[InversionTarget]:
    """Every target of the run with stored inversion results, sorted by claimed ε (none / ∞ last), then id."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    targets = []
    for d in run.inversion_dirs():
        results = sorted((load_inversion_result(p) for p in sorted(d.glob("inversion-*.json"))), key=lambda r: r.attack)
        if not results:
            continue
        model_id = results[0].model_id
        # A sub-model (a PATE teacher, a DSSGD participant) is a record in a cache under records/.
        found = run.find_record_dir(model_id)
        record = load_record(found) if found is not None else None
        targets.append(InversionTarget(model_id=model_id, results=tuple(results), record=record, result_dir=d))

    def order(t: InversionTarget) -> tuple[float, str]:
        eps = t.epsilon_ub()
        return (math.inf if eps is None else eps, t.model_id)

    return sorted(targets, key=order)


# ---------------------------------------------------------------------------- image grids
def _show(ax: Axes, image: np.ndarray) -> None:
    """Draws a (C, H, W) image in [0, 1] at its own aspect ratio: grey for one channel, RGB for three."""
    img = np.asarray(image, dtype=np.float32)
    # Small images (8×8 digits, 28×28 MNIST) are enlarged: nearest keeps their pixels crisp.
    interp = "nearest" if max(img.shape[1:]) <= 32 else "antialiased"
    if img.shape[0] == 1:
        ax.imshow(img[0], cmap="gray", vmin=0.0, vmax=1.0, interpolation=interp, aspect="equal")
    else:
        ax.imshow(np.clip(np.moveaxis(img[:3], 0, -1), 0.0, 1.0), interpolation=interp, aspect="equal")
    # A thin frame sets a light image off the white page (and makes the cell count as drawn for
    # reports.figures.has_data, which looks at patches, not images).
    h, w = img.shape[1:]
    ax.add_patch(Rectangle((-0.5, -0.5), w, h, fill=False, edgecolor="#888888", linewidth=0.6))


def _bare(ax: Axes) -> None:
    """No ticks and no frame, but keep the axis labels (``axis('off')`` would hide them)."""
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)


#: Text under each image: two short lines, 9 pt as the page shows the grid.
_CAPTION_PT = 9.0


def image_grid(
    results: Sequence[InversionResult], classes: Sequence[int] | None = None, *, cell: float = 0.95
) -> MplFigure | None:
    """One column per class; rows: class mean, then per attack its reconstruction, nearest member and nearest
    non-member.

    The nearest member / non-member are those of each attack's own reconstruction, so they are
    shown per attack; the class mean is the same for every attack and is drawn once.

    Args:
        results: the attacks' results against one target.
        classes: the labels to show (default: every class any result inverted), in order.
        cell: width of one image in inches; the height follows the images' aspect ratio.

    Returns:
        The figure, or ``None`` when there is nothing to draw.
    """
    items = [r for r in results if isinstance(r, InversionResult)]
    if len(items) != len(results):
        raise v.invalid_type("results", "results must hold InversionResult values")
    if not items:
        return None
    labels = sorted({int(c) for r in items for c in r.target_classes}) if classes is None else [int(c) for c in classes]
    if not labels:
        return None
    index = [{int(c): i for i, c in enumerate(r.target_classes)} for r in items]
    _, _, h, w = items[0].reconstructions.shape
    rows: list[tuple[str, Any]] = [("class mean", None)]
    for r in items:
        rows += [
            (f"{r.attack}:\nreconstruction", (r, "reconstructions")),
            (f"{r.attack}:\nnearest member", (r, "nearest_members")),
            (f"{r.attack}:\nnearest non-member", (r, "nearest_non_members")),
        ]
    # Room under each image for one small line of caption text, above the first row for the class.
    # Cells narrow so that the grid fits the page (a wider image is shrunk, its text with it).
    cell = min(cell, (PAGE_WIDTH_IN - 1.7) / (len(labels) * 1.08))
    img_h = cell * h / w
    fig = MplFigure(figsize=(1.7 + cell * len(labels) * 1.08, 0.45 + len(rows) * (img_h + 0.5)), layout="constrained")
    axes = fig.subplots(len(rows), len(labels), squeeze=False)
    for j, c in enumerate(labels):
        for i, (row_name, source) in enumerate(rows):
            ax = axes[i, j]
            _bare(ax)
            if i == 0:
                ax.set_title(f"class {c}", fontsize=FONT_PT)
            if j == 0:
                # Reconstruction rows are named in bold and in the attack's colour: each attack's block of rows stands
                # out.
                recon = source is not None and source[1] == "reconstructions"
                ax.set_ylabel(
                    row_name,
                    fontsize=FONT_PT - 1,
                    rotation=0,
                    ha="right",
                    va="center",
                    labelpad=4,
                    fontweight="bold" if recon else "normal",
                    color=colour(source[0].attack) if recon else "black",
                )
            if source is None:
                # The class mean of the members: the first result holding the class has it.
                owner = next(((r, ix[c]) for r, ix in zip(items, index, strict=True) if c in ix), None)
                if owner is None:
                    continue
                _show(ax, owner[0].class_means[owner[1]])
                ax.set_xlabel(" ", fontsize=_CAPTION_PT)
                continue
            r, field_name = source
            k = index[items.index(r)].get(c)
            if k is None:
                ax.set_xlabel("not\ninverted", fontsize=_CAPTION_PT)
                continue
            _show(ax, getattr(r, field_name)[k])
            if field_name == "reconstructions":
                guess = int(r.evaluator_top5[k, 0])
                ok = "✓" if guess == c else "✗"
                ax.set_xlabel(f"eval {guess} {ok}\nμ {r.distance_to_mean[k]:.3f}", fontsize=_CAPTION_PT)
            elif field_name == "nearest_members":
                ax.set_xlabel(f"#{int(r.nearest_member_ids[k])}\nd {r.distance_to_member[k]:.3f}", fontsize=_CAPTION_PT)
            else:
                ax.set_xlabel(
                    f"#{int(r.nearest_non_member_ids[k])}\nd {r.distance_to_non_member[k]:.3f}", fontsize=_CAPTION_PT
                )
    return fit_page(fig)


# ---------------------------------------------------------------------------- tables
def _tpr(rates: MembershipRates, result: InversionResult) -> Any:
    """TPR at 1 % FPR with its interval, or why the candidates' non-members cannot resolve it."""
    est = rates.tpr_at_fpr.get(f"{_FPR:g}")
    return tpr_unresolved(_FPR, result.membership.num_non_members) or (interval_cell(est) if est is not None else "—")


def _chance(target: InversionTarget) -> Any:
    n = target.num_dataset_classes()
    if n is None:
        return f"1/{target.results[0].num_classes}"
    return percent_cell(1.0 / n)


def _rate(correct: np.ndarray, confidence: float = 0.95) -> Any:
    """The share of the classes inverted that the evaluator labels right, with its count and Clopper–Pearson
    interval."""
    return interval_cell(proportion(int(correct.sum()), int(correct.size), confidence=confidence))


def _chance_share(target: InversionTarget) -> float:
    return 1.0 / (target.num_dataset_classes() or target.results[0].num_classes)


def evaluator_text(target: InversionTarget, *, confidence: float = 0.95) -> Text:
    """The evaluators' accuracy with its interval, and whether the rule trusts them
    (:func:`~dpaudit.results.inversion.evaluator_check`)."""
    parts = []
    for r in target.results:
        c = evaluator_check(r, chance=_chance_share(target), confidence=confidence)
        if c is None:
            parts.append(f"{r.attack}: the evaluator's accuracy is not stored.")
            continue
        shown = (
            interval_cell(proportion(round(c.accuracy * c.num_tested), c.num_tested, confidence=confidence)).text
            + " of held-out images"
            if c.num_tested is not None
            else f"{fmt_percent(c.accuracy)} (the number of held-out images it was tested on is not stored)"
        )
        judged = (
            "too weak: its top-1 cannot judge the reconstructions, and the verdict is withheld"
            if c.too_weak
            else "trusted"
        )
        parts.append(f"{r.attack}: evaluator accuracy {shown}; chance {fmt_percent(c.chance)}; {judged}.")
    return Text(
        text="Evaluation classifier: "
        + " ".join(parts)
        + f" Rule: {confidence:.0%} Clopper–Pearson lower end above (1 + chance)/2, halfway from chance to perfect."
    )


def _confidence_cell(confidence: np.ndarray) -> str:
    """The target's probability of each class on its reconstruction: a mean is no rate estimate, so its spread."""
    c = np.asarray(confidence, dtype=float)
    return f"{fmt_percent(float(c.mean()))} ({fmt_percent(float(c.min()))}–{fmt_percent(float(c.max()))})"


def metrics_tables(target: InversionTarget, *, confidence: float = 0.95) -> list[Table]:
    """The evaluator's verdict and the members-vs-class-average numbers, one row per attack each."""
    delta = target.delta
    eps_ub = target.epsilon_ub()
    n = target.num_dataset_classes()
    verdict_rows, member_rows = [], []
    for r in target.results:
        s = r.metrics(fprs=(_FPR,), delta=delta, confidence=confidence)
        rates = membership_rates(r.membership, fprs=(_FPR,), confidence=confidence)
        verdict_rows.append(
            [
                r.attack,
                _rate(r.top1_correct(), confidence),
                _rate(r.top5_correct(), confidence),
                _chance(target),
                s.knn_distance,
                s.psnr,
                _confidence_cell(r.target_confidence),
                f"{r.num_classes}",
            ]
        )
        k = r.num_classes
        member_rows.append(
            [
                r.attack,
                s.distance_to_mean,
                s.distance_to_member,
                s.distance_to_non_member,
                f"{int(r.closer_to_member().sum())}/{k}",
                f"{int(r.closer_to_mean().sum())}/{k}",
                interval_cell(rates.auc, percent=False),
                _tpr(rates, r),
                f"{r.membership.num_members} / {r.membership.num_non_members}",
                epsilon_lb_cell(s.membership.epsilon_lb),  # bounds their safe way: ε_LB down, ε_UB up
                "—" if eps_ub is None else epsilon_ub_cell(eps_ub),
            ]
        )
    chance_note = (
        f"chance = 1/N over the dataset's N = {n} classes (top-5 chance {min(5, n) / n:.3g})"
        if n is not None
        else "chance = 1/K over the K classes inverted (the dataset's class count is not stored)"
    )
    verdict = Table(
        columns=[
            "attack",
            "top-1",
            "top-5",
            "chance (top-1)",
            "KNN distance",
            "PSNR dB",
            "target's confidence",
            "classes",
        ],
        rows=verdict_rows,
        caption=(
            "Judged by an independent evaluation classifier (another architecture, "
            "trained on the private data, never the target; its own accuracy is stated above). "
            "Top-1 / top-5 as shares of the classes inverted, with 95% Clopper–Pearson intervals. "
            "Top-5: the true class among the evaluator's five most likely labels for the kept restart. "
            + chance_note
            + ". KNN distance: in the evaluator's feature space, to the nearest "
            "member of the class; PSNR against that member; "
            "the target's confidence: its softmax probability of the class on the reconstruction, as a percentage, "
            "the mean with the least and most over the classes. All means over the classes inverted."
        ),
    )
    members = Table(
        columns=[
            "attack",
            "dist. to mean",
            "to member",
            "to non-member",
            "nearer member",
            "nearer mean",
            "membership AUC",
            f"TPR @ {_FPR:.0%} FPR",
            "members / non-members",
            "ε_LB",
            "target's ε_UB",
        ],
        rows=member_rows,
        caption=(
            "Distances: pixel RMS from the reconstruction to the members' class "
            "mean, the nearest member and the nearest held-out non-member, means "
            "over classes. "
            "Nearer member: classes whose reconstruction is nearer its nearest "
            "member than its nearest non-member; nearer mean: nearer the class mean "
            "than any member. "
            "Membership score of a candidate: −distance to its class's reconstruction; its AUC with a "
            f"{confidence:.0%} bootstrap interval, TPR with its Clopper–Pearson interval; "
            f"ε_LB at δ={delta:g}, {confidence:.0%} confidence: Clopper–Pearson "
            "bound with a Bonferroni-corrected threshold choice, set against the "
            "claimed ε_UB (tightest accountant)."
        ),
    )
    return [verdict, members]


def _record_accuracy_cell(metrics: Mapping[str, object]) -> Any:
    """The target's test accuracy with its count and Clopper–Pearson interval, or bare and saying why not."""
    est = counted_test_accuracy(metrics)
    if est is not None:
        return interval_cell(est)
    acc = float(metrics["test_accuracy"])  # type: ignore[arg-type]
    return Shown(acc, f"{fmt_percent(acc)} ({NO_COUNT_REASON})")


def comparison_table(targets: Sequence[InversionTarget], *, confidence: float = 0.95) -> Table:
    """One row per target × attack: claim, the target's accuracy, the evaluator's verdict, membership."""
    rows = []
    chance = ", ".join(
        sorted({f"1/{n}" if n is not None else "1/K" for n in (t.num_dataset_classes() for t in targets)})
    )
    for t in targets:
        eps = t.epsilon_ub()
        acc = t.record.metrics.get("test_accuracy") if t.record is not None else None
        for r in t.results:
            s = r.metrics(fprs=(_FPR,), delta=t.delta, confidence=confidence)
            rates = membership_rates(r.membership, fprs=(_FPR,), confidence=confidence)
            rows.append(
                [
                    t.model_id,
                    "—" if eps is None else eps,
                    _record_accuracy_cell(t.record.metrics) if t.record is not None and acc is not None else "—",
                    r.attack,
                    _rate(r.top1_correct(), confidence),
                    _rate(r.top5_correct(), confidence),
                    s.knn_distance,
                    s.psnr,
                    interval_cell(rates.auc, percent=False),
                    epsilon_lb_cell(s.membership.epsilon_lb),
                ]
            )
    return Table(
        columns=[
            "target",
            "ε_UB",
            "test acc.",
            "attack",
            "top-1",
            "top-5",
            "KNN dist.",
            "PSNR dB",
            "memb. AUC",
            "ε_LB",
        ],
        rows=rows,
        caption=(
            "Targets in order of claimed ε_UB (tightest accountant; non-private "
            "last), with their test accuracy (as the record states it; no test-set size is recorded, so no "
            "interval). Top-1 / top-5: attack accuracy by the "
            f"independent evaluator (chance: {chance}), with 95% Clopper–Pearson intervals over the classes. "
            "Memb. AUC (95% bootstrap interval) / ε_LB: the "
            f"inversion-based membership score at δ of each target, {confidence:.0%} "
            "confidence."
        ),
    )


# ---------------------------------------------------------------------------- comparison figure
def comparison_figure(targets: Sequence[InversionTarget], *, axes: Sequence[Axes] | None = None) -> MplFigure | None:
    """Attack accuracy top-1 (left) and inversion-based membership AUC (right) per target, one marker per attack.

    Targets are rows (in order of claimed ε, top to bottom), so their ids stay readable however
    many there are; points are not joined, since neighbouring rows are unrelated models. Each
    attack keeps its fixed colour and marker (:func:`reports.figures.style`); each row's chance
    top-1 (1/classes of its dataset) is a grey bar, chance AUC a dashed line.

    Returns:
        The figure, or ``None`` when no target has a result.
    """
    targets = [t for t in targets if t.results]
    if not targets:
        return None
    n = len(targets)
    if axes is None:
        fig = MplFigure(figsize=(PAGE_WIDTH_IN - 2.2, 1.6 + 0.4 * n), layout="constrained")
        left, right = fig.subplots(1, 2, sharey=True)
    else:
        fig, left = new_axes(axes[0])
        right = axes[1]
    y = np.arange(n)[::-1].astype(float)  # first target on top
    attacks = sorted({r.attack for t in targets for r in t.results})
    for i, attack in enumerate(attacks):
        pts = [(y[j], r) for j, t in enumerate(targets) for r in t.results if r.attack == attack]
        # Attacks on one row sit slightly apart, so equal values stay visible.
        ys = np.array([yy for yy, _ in pts]) + (i - (len(attacks) - 1) / 2) * 0.18
        kw = {**style(attack), "markersize": 7, "linestyle": "none"}
        left.plot([r.attack_accuracy_top1 for _, r in pts], ys, label=attack, **kw)
        right.plot([r.membership.auc() for _, r in pts], ys, label=attack, **kw)
        # Each point's 95% interval as a bar through it (Clopper–Pearson over the classes; bootstrap for the AUC).
        top1 = [proportion(int(r.top1_correct().sum()), r.num_classes) for _, r in pts]
        aucs = [membership_rates(r.membership, fprs=()).auc for _, r in pts]
        for ax, est in ((left, top1), (right, aucs)):
            ax.hlines(ys, [e.low for e in est], [e.high for e in est], color=kw["color"], linewidth=1.2, zorder=1)
    for j, t in enumerate(targets):
        classes = t.num_dataset_classes()
        if classes:
            left.plot(
                [1.0 / classes] * 2,
                [y[j] - 0.35, y[j] + 0.35],
                color=colour("chance"),
                linewidth=2.0,
                label="chance top-1 (1/classes)" if j == 0 else None,
            )
    right.axvline(0.5, linestyle="--", color=colour("chance"), linewidth=0.9, label="chance AUC (0.5)")
    left.set_yticks(y, [t.label() for t in targets], fontsize=FONT_PT)
    # The target names take most of the width: titles and labels on two short lines, so the two
    # panels' texts do not run into each other (the second review saw them overprinted).
    for ax, xlabel in ((left, "top-1 (evaluator)"), (right, "membership AUC\n(inversion score)")):
        ax.set_xlim(-0.04, 1.05)  # a point at 0 is drawn whole, not cut by the frame
        ax.set_ylim(-0.6, n - 0.4)
        ax.set_xlabel(xlabel, fontsize=FONT_PT)
        ax.grid(True, axis="x", linewidth=0.3)
    left.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))  # as the tables write top-1
    left.set_title("attack accuracy\nper target", fontsize=FONT_PT)
    right.set_title("do reconstructions\nreveal members?", fontsize=FONT_PT)
    handles, labels = [], []
    for ax in (left, right):
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    right.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=FONT_PT, frameon=False)
    for ax in (left, right):
        ax.tick_params(labelsize=FONT_PT)
    return fit_page(fig) if axes is None else fig


# ---------------------------------------------------------------------------- page
def _config_line(result: InversionResult) -> str:
    # The stored config is free-form JSON: its "attack" part is read only when it is an object.
    attack = result.config.get("attack")
    if not isinstance(attack, Mapping):
        attack = {}
    parts = [f"{k}={format_number(v) if isinstance(v, float) else v}" for k, v in attack.items()]
    seconds = result.metadata.get("seconds")
    tail = f"; {float(seconds):.3g} s" if isinstance(seconds, (int, float)) else ""
    stop = stopping_text(result)
    return f"{result.attack}: " + (", ".join(parts) or "defaults") + tail + (f". {stop}" if stop else "")


def target_sections(target: InversionTarget, *, confidence: float = 0.95, prefix: str = "") -> list[Section]:
    """One target's sections: its claim, the metrics tables with the findings, and the image grids."""
    name = prefix or target.model_id
    eps = target.epsilons()
    claim: Any = (
        accountant_table(
            eps, delta=target.delta, description=target.record.claim.statement() if target.record is not None else ""
        )
        if eps is not None
        else Text(text="The target's record is not in this run directory, so its claim cannot be shown.")
    )
    metrics: list[Any] = [
        evaluator_text(target, confidence=confidence),
        *metrics_tables(target, confidence=confidence),
        Items(items=[r.finding() for r in target.results]),
    ]
    sections = [
        Section(title=f"{name}: privacy claim", blocks=[claim]),
        Section(title=f"{name}: metrics", blocks=metrics),
    ]
    labels = sorted({int(c) for r in target.results for c in r.target_classes})
    stem = safe_stem(target.model_id, default="target")
    grids: list[Any] = []
    for start in range(0, len(labels), CLASSES_PER_BLOCK):
        block = labels[start : start + CLASSES_PER_BLOCK]
        grids.append(
            Figure(
                figure=image_grid(target.results, block),
                name=f"{stem}-grid-{start // CLASSES_PER_BLOCK}",
                caption=f"Classes {block[0]}–{block[-1]}: each attack's reconstruction (the "
                "evaluator's top-1 label, ✓ if right; μ: RMS distance to the class "
                "mean), "
                "the class mean of the members, and the member and held-out non-member "
                "nearest the reconstruction (#sample id; d: RMS distance).",
                empty="no reconstruction stored",
            )
        )
    grids.append(Items(items=[_config_line(r) for r in target.results]))
    sections.append(Section(title=f"{name}: reconstructions", blocks=grids))
    return sections


def targets_verdict(targets: Sequence[InversionTarget], *, confidence: float = 0.95) -> Verdict:
    """The inversion page's verdict: the most severe of its targets'
    :func:`~dpaudit.results.verdicts.inversion_verdict`."""
    verdicts = [
        (
            t.model_id,
            inversion_verdict(
                t.results,
                delta=t.delta,
                confidence=confidence,
                epsilon_ub=t.epsilon_ub(),
                num_dataset_classes=t.num_dataset_classes(),
            ),
        )
        for t in targets
    ]
    return most_severe(verdicts)


def inversion_sections(targets: Sequence[InversionTarget], *, confidence: float = 0.95) -> list[Section]:
    """The run's inversion page: targets compared (when several), then one group of sections per target."""
    if not targets:
        return [
            Section(title="Model inversion", blocks=[Text(text="No model-inversion results are stored in this run.")])
        ]
    sections: list[Section] = [verdict_section(targets_verdict(targets, confidence=confidence))]
    if len(targets) > 1:
        sections.append(
            Section(
                title="Targets compared",
                blocks=[
                    comparison_table(targets, confidence=confidence),
                    Figure(
                        figure=comparison_figure(targets),
                        name="compare",
                        caption="Left: share of classes whose reconstruction the evaluator labels "
                        "correctly; right: AUC of the inversion-based membership score; the bar through "
                        "each point is its 95% interval (Clopper–Pearson over the classes; bootstrap for "
                        "the AUC). Grey bar and dashed line: chance.",
                        empty="no target has inversion results",
                    ),
                ],
            )
        )
    for t in targets:
        sections += target_sections(t, confidence=confidence)
    return sections


@dataclass(frozen=True, kw_only=True)
class InversionCounts:
    """What the index link of the inversion page says: how many targets, which attacks (sorted)."""

    targets: int
    attacks: tuple[str, ...]


def inversion_summary(targets: Sequence[InversionTarget]) -> InversionCounts:
    """Counts for the index link text."""
    return InversionCounts(targets=len(targets), attacks=tuple(sorted({r.attack for t in targets for r in t.results})))


def load_inverted_targets(run: RunDir) -> list[tuple[InversionTarget, ...]]:
    """The run's inversion targets as the one item of the inversion report (none when it holds none)."""
    targets = tuple(load_inversion_targets(run))
    return [targets] if targets else []


def inversion_page(targets: tuple[InversionTarget, ...], out: Path) -> Page:
    """Writes ``inversion.{html,md}`` and its image grids into ``out``."""
    sections = inversion_sections(targets)
    page = write_report_files(out, sections, title="Model inversion", stem=INVERSION_REPORT_STEM, kind="inversion").html
    counts = inversion_summary(targets)
    return Page(
        html=page,
        link=with_status(f"model inversion ({', '.join(counts.attacks)}) against {counts.targets} target(s)", sections),
    )


REPORT_KINDS.register(
    ReportKind(
        name="inversion",
        group="Model inversion",
        order=60,
        load=load_inverted_targets,
        verdict=targets_verdict,
        render=inversion_page,
    )
)
