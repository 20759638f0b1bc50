"""Trained-model report: a record no other page shows — its claim (ε_UB per accountant), metrics and configuration.

``dpaudit train`` alone leaves a run directory with a record and nothing else; this kind gives
such a record a page: the verdict (:func:`train_verdict`: what was
trained, its accuracy and its claim), the claim's ε under every accountant at the record's δ,
the measured metrics and the configuration. A record that another page already shows — a
membership, inversion or certify target, a compared setting, a PATE student, a DSSGD
federation — gets no page here: its own page states the same claim beside the evidence, and a
second page of the same record would only repeat it.

Torch-free: it renders from the stored record alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import MaxNLocator, PercentFormatter

from dpaudit.parts import defense_parts, record_report_kind
from dpaudit.privacy.audit_stats import clopper_pearson_interval
from dpaudit.results import TrainedModel, load_record
from dpaudit.results.history import HISTORY_KEY, TrainingHistory, epsilon_by_epoch, training_history
from dpaudit.results.record_accuracy import NO_COUNT_REASON, counted_share, counted_test_accuracy
from dpaudit.results.verdicts import Verdict, claim_text, record_delta
from dpaudit.store import RunDir, safe_stem, thaw
from reports.figures import colour, fit_page, new_figure, style
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import Shown, fmt_count, fmt_number, fmt_percent, fmt_upper_bound, interval_cell
from reports.render import Figure, Items, Section, Table, accountant_table, write_report_files
from reports.verdict_box import verdict_section, with_status

#: This kind's name: the page of every record no other kind shows.
KIND_NAME = "models"

__all__ = [
    "record_table",
    "record_counts",
    "metrics_table",
    "config_items",
    "shown_elsewhere",
    "load_trained_models",
    "train_sections",
    "train_page",
    "train_verdict",
    "artefacts_table",
    "history_figure",
]


def record_table(record: TrainedModel) -> Table:
    """What was trained: model, dataset, defense, members, seed, provenance."""
    prov = record.provenance
    rows: list[list[Any]] = [
        ["model id", record.model_id],
        ["defense", record.defense],
        ["model", record.model_name],
        ["dataset", f"{record.dataset} (input {'×'.join(map(str, record.input_shape))}, {record.num_classes} classes)"],
        [
            "members / non-members",
            f"{fmt_count(len(record.membership.members))} / {fmt_count(len(record.membership.non_members))}",
        ],
        ["seed", str(record.seed)],
    ]
    if prov.get("time"):
        rows.append(
            ["trained", f"{prov['time']} (git {str(prov.get('git_revision', '?'))[:12]}, {prov.get('device', '?')})"]
        )
    return Table(columns=["", "value"], rows=rows)


def _metric_cell(key: str, value: Any, metrics: Mapping[str, object] | None = None) -> Any:
    # Accuracies read as percentages; a claim's ε (an upper bound) rounded up; every other metric to one precision.
    if key == "test_accuracy" and metrics is not None:
        # With its counts and 95% Clopper–Pearson interval where the record holds them (stored by build_record).
        est = counted_test_accuracy(metrics)
        if est is not None:
            return interval_cell(est)
        return Shown(float(value), f"{fmt_percent(float(value))} ({NO_COUNT_REASON})")
    if key in ("test_examples", "test_correct"):
        return Shown(float(value), fmt_count(int(value)))
    if key.endswith("accuracy") or "accuracy_" in key:
        return Shown(float(value), fmt_percent(float(value)))
    if key == "epsilon" or key.startswith("epsilon_"):
        return Shown(float(value), fmt_upper_bound(float(value)))
    return Shown(float(value), fmt_number(float(value)))


def record_counts(record: TrainedModel) -> dict[str, int]:
    """The examples each of a record's accuracies counts: the members for the train accuracy, the
    non-members for the non-member accuracy (the test accuracy's count is in its metrics)."""
    return {
        "train_accuracy": len(record.membership.members),
        "non_member_accuracy": len(record.membership.non_members),
    }


def metrics_table(
    metrics: Mapping[str, object], *, skip: tuple[str, ...] = (), counts: Mapping[str, int] | None = None
) -> Table:
    """Every scalar metric the training stored (accuracies as percentages); an accuracy whose
    examples ``counts`` gives (:func:`record_counts`) with its count and Clopper–Pearson interval."""
    rows = []
    for key, value in sorted(metrics.items()):
        if key in skip or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        est = counted_share(value, (counts or {}).get(key))
        rows.append(
            [key.replace("_", " "), interval_cell(est) if est is not None else _metric_cell(key, value, metrics)]
        )
    return Table(
        columns=["metric", "value"],
        rows=rows,
        caption="As stored by dpaudit train in the record's metrics; an accuracy with its count and 95% "
        "Clopper–Pearson interval [low, high] where the record holds how many examples it counts (the test "
        "set's size, the members, the non-members).",
    )


def config_items(config: Mapping[str, object]) -> Items:
    """The configuration as asked, one key per line (unset keys left out)."""
    items = [
        f"{k} = {fmt_number(v) if isinstance(v, float) else v}"
        for k, v in sorted(thaw(config).items())
        if v is not None
    ]
    return Items(items=items or ["defaults"])


def _claim_block(record: TrainedModel) -> Any:
    delta = record_delta(record)
    return accountant_table(record.claim.epsilons(delta=delta), delta=delta, description=record.claim.statement())


_METRICS = (
    ("train_accuracy", "train accuracy"),
    ("non_member_accuracy", "non-member accuracy"),
    ("test_accuracy", "test accuracy"),
)


def _accuracy_text(record: TrainedModel, key: str) -> str:
    """One of the record's accuracies with its count and 95% Clopper–Pearson interval: the train accuracy is over
    the members, the non-member accuracy over the non-members, the test accuracy over the stored test-set size."""
    m = record.metrics
    if key == "test_accuracy":
        est = counted_test_accuracy(m)
        return est.text() if est is not None else f"{fmt_percent(float(m[key]))} ({NO_COUNT_REASON})"
    est = counted_share(m[key], record_counts(record)[key])
    # No count of these examples (a record of another evaluation): no interval made up.
    return est.text() if est is not None else fmt_percent(float(m[key]))


def train_verdict(record: TrainedModel) -> Verdict:
    """The record, its claim (ε_UB under every accountant at its δ) and its metrics."""
    delta = record_delta(record)
    eps = record.claim.epsilons(delta=delta)
    m = record.metrics
    accs = [f"{name} {_accuracy_text(record, key)}" for key, name in _METRICS if isinstance(m.get(key), (int, float))]
    what = (
        f"{record.defense} {record.model_name} on {record.dataset}, {fmt_count(len(record.membership.members))} members"
    )
    lines = [f"Claim: {record.claim.statement()}."]
    if eps:
        lines.append(
            "ε at δ = "
            + f"{delta:g}: "
            + ", ".join(f"{name} {fmt_upper_bound(e)}" for name, e in sorted(eps.items(), key=lambda kv: kv[1]))
            + "."
        )
    if accs:
        lines.append(", ".join(accs).capitalize() + ".")
    lines.append(f"Record {record.model_id} (seed {record.seed}).")
    est = counted_test_accuracy(m)
    test = (
        f": {est.text()} test accuracy"
        if est is not None
        else f": {fmt_percent(float(m['test_accuracy']))} test accuracy ({NO_COUNT_REASON})"
        if isinstance(m.get("test_accuracy"), (int, float))
        else ""
    )
    if eps:
        return Verdict(
            status="private",
            headline=f"{what}{test}; claims {claim_text(eps, delta)}.",
            lines=tuple(lines),
            tone="info",
        )
    return Verdict(
        status="no privacy claim", headline=f"{what}{test}; no privacy claim (ε = ∞).", lines=tuple(lines), tone="warn"
    )


def artefacts_table(record: TrainedModel, record_dir: Path) -> Table | None:
    """The files the record's defense declares beside its weights (:attr:`~defenses.registry.DefenseSpec.artefacts`),
    and whether this record holds each; ``None`` for a defense that declares none."""
    spec = defense_parts(record.defense)
    if spec is None or not spec.artefacts:
        return None
    rows = [[a.name, a.what, "yes" if a.present(record_dir) else "missing"] for a in spec.artefacts]
    return Table(
        columns=["file", "what it holds", "present"],
        rows=rows,
        caption=f"As the {record.defense} defense declares them; paths relative to the record's directory.",
    )


#: The accountant of the per-epoch ε curve: RDP, cheap at every epoch; the run's own accountant gives the last point.
CURVE_ACCOUNTANT = "rdp"


def _accuracy_interval(history: TrainingHistory) -> tuple[np.ndarray, np.ndarray]:
    """Clopper–Pearson 95 % intervals of each epoch's test accuracy, from its correct count."""
    n = history.test_examples
    ends = [clopper_pearson_interval(round(a * n), n, confidence=0.95) for a in history.test_accuracy]
    return np.array([e[0] for e in ends]), np.array([e[1] for e in ends])


def history_figure(record: TrainedModel, history: TrainingHistory) -> MplFigure:
    """Loss, test accuracy (with 95 % intervals) and ε against the epoch, one panel each, sharing the epoch axis."""
    panels = 2 + bool(history.test_accuracy)
    fig = new_figure((7.0, 1.9 * panels + 0.6))
    axes = fig.subplots(panels, 1, sharex=True)
    epochs = np.asarray(history.epoch)
    loss_ax, *rest = axes
    loss_ax.plot(epochs, history.train_loss, marker="o", color=colour("out"))
    loss_ax.set_ylabel("training loss")
    if history.test_accuracy:
        acc_ax = rest.pop(0)
        acc = np.asarray(history.test_accuracy)
        low, high = _accuracy_interval(history)
        acc_ax.errorbar(epochs, acc, yerr=[acc - low, high - acc], marker="o", capsize=3, color=colour("in"))
        acc_ax.set_ylabel("test accuracy")
        acc_ax.set_ylim(0, 1.05)
        acc_ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))  # the page's accuracies are percentages
    eps_ax = rest.pop(0)
    delta = record_delta(record)
    curve = epsilon_by_epoch(record, history, delta=delta, accountant=CURVE_ACCOUNTANT)
    if curve is not None:
        eps_ax.plot(epochs, curve, **{**style("epsilon_ub"), "marker": "o"})
    final = record.metrics.get("epsilon")
    accountant = str(record.metrics.get("epsilon_accountant", "") or "")
    if isinstance(final, (int, float)) and accountant and accountant != CURVE_ACCOUNTANT:
        eps_ax.plot([epochs[-1]], [final], marker="D", linestyle="none", color=colour("epsilon_lb"), markersize=7)
    eps_ax.set_ylabel(f"ε at δ = {delta:g}")
    shown = [x for x in (*(curve or ()), final if isinstance(final, (int, float)) else 0.0) if np.isfinite(x)]
    eps_ax.set_ylim(0, 1.12 * max([*shown, 1e-3]))  # room above the last point: never on the frame
    eps_ax.set_xlabel("epoch")
    eps_ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # only completed epochs are recorded
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fit_page(fig)


def _history_caption(record: TrainedModel, history: TrainingHistory) -> str:
    accountant = str(record.metrics.get("epsilon_accountant", "") or "")
    parts = [
        "Per completed epoch: the epoch's mean training loss (on the parameters before each step)",
    ]
    if history.test_accuracy:
        parts.append(
            f"the test accuracy at its end on {fmt_count(history.test_examples)} test examples, with 95% "
            "Clopper–Pearson intervals"
        )
    parts.append(
        f"and the claim's ε for the steps taken so far under the {CURVE_ACCOUNTANT.upper()} accountant (line)"
        + (
            f"; the diamond is the final ε under the run's own accountant ({accountant}), the one the record claims"
            if accountant and accountant != CURVE_ACCOUNTANT
            else ""
        )
    )
    text = ", ".join(parts) + "."
    if record.config.get("pca_components") is not None:
        text += " No ε curve: the claim composes DP-PCA with the steps, which a per-epoch DP-SGD claim leaves out."
    return text


def _history_section(record: TrainedModel) -> Section | None:
    """Loss, accuracy and ε over training, when the record stores a history (DP-SGD records trained since it is
    kept)."""
    history = training_history(record)
    if history is None:
        return None
    return Section(
        title="Training history",
        blocks=[
            Figure(
                figure=history_figure(record, history),
                name="history",
                caption=_history_caption(record, history),
            )
        ],
    )


def train_sections(record: TrainedModel, record_dir: Path | None = None) -> list[Section]:
    """The page: the verdict, what was trained, the claim, the metrics, the configuration, and the defense's own files
    beside the weights (when ``record_dir`` is given and it declares any)."""
    sections = [
        verdict_section(train_verdict(record)),
        Section(title="Record", blocks=[record_table(record)]),
        Section(title="Privacy claim", blocks=[_claim_block(record)]),
        *([h] if (h := _history_section(record)) is not None else []),
        Section(
            title="Metrics",
            blocks=[metrics_table(record.metrics, skip=(HISTORY_KEY,), counts=record_counts(record))],
        ),
        Section(title="Configuration", blocks=[config_items(record.config)]),
    ]
    files = None if record_dir is None else artefacts_table(record, record_dir)
    if files is not None:
        sections.append(Section(title="Files beside the weights", blocks=[files]))
    return sections


def shown_elsewhere(run: RunDir) -> set[str]:
    """Model ids (as file stems) another report kind already gives a page with the record's claim."""
    from reports.compare import load_comparisons

    stems = {d.name for d in (*run.membership_dirs(), *run.inversion_dirs(), *run.certify_dirs())}
    stems |= {safe_stem(m, default="target") for c in load_comparisons(run) for row in c.rows for m in row.model_ids}
    return stems


def load_trained_models(run: RunDir) -> list[tuple[TrainedModel, Path]]:
    """Every top-level record of the run that no other report kind shows, by name."""
    if not run.subdir("records").is_dir():
        return []
    covered = shown_elsewhere(run)
    out = []
    for d in run.record_dirs():
        record = load_record(d)
        # A defense's own report kind pages its records (DSSGD federations, PATE students), not this one.
        if record_report_kind(record.defense, d) not in (None, KIND_NAME):
            continue
        if (
            safe_stem(record.model_id, default="target") in covered
            or safe_stem(record.model_id, default="model") in covered
        ):
            continue
        out.append((record, d))
    return out


def train_page(item: tuple[TrainedModel, Path], out: Path) -> Page:
    """Writes ``model-<model_id>.{html,md}`` into ``out``."""
    record, record_dir = item
    stem = "model-" + safe_stem(record.model_id, default="model")
    sections = train_sections(record, record_dir)
    page = write_report_files(out, sections, title=f"Trained model {record.model_id}", stem=stem, kind="train").html
    return Page(html=page, link=with_status(record.model_id, sections))


REPORT_KINDS.register(
    ReportKind(
        name=KIND_NAME,
        group="Trained models",
        order=80,
        load=load_trained_models,
        verdict=lambda item: train_verdict(item[0]),
        render=train_page,
    )
)
