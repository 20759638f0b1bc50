"""DSSGD report: a federation against its participants trained alone and against centralised training.

Distributed selective SGD (Shokri & Shmatikov, CCS 2015, §5) is worth its uploads when the
federation's model beats what each participant reaches alone and approaches centralised
training on the pooled data; its privacy is the DP claim of the uploads (none without the DP
upload: the server sees exact parameter changes). The page shows the verdict
(:func:`dssgd_verdict`, beside its kind), the accuracies, what was uploaded, the claim
under every accountant, where the participants' local records and the observed uploads are kept
(for ``dpaudit attack uploads`` and ``attack membership``), and the configuration.

Torch-free: it renders from the stored global record alone.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from matplotlib import patheffects
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import PercentFormatter

from dpaudit.parts import record_report_kind
from dpaudit.results import TrainedModel, load_record
from dpaudit.results.membership_rates import Estimate
from dpaudit.results.record_accuracy import (
    NO_COUNT_REASON,
    counted_test_accuracy,
    mean_accuracy_estimate,
    stored_test_examples,
)
from dpaudit.results.verdicts import Verdict, claim_text, record_delta
from dpaudit.store import RunDir, safe_stem
from reports.figures import Looks, finish_axes, new_axes
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import Shown, fmt_count, fmt_number, fmt_percent, interval_cell, percent_cell
from reports.render import Figure, Items, Section, Table, Text, accountant_table, write_report_files
from reports.train import config_items, metrics_table, record_counts, record_table
from reports.verdict_box import verdict_section, with_status

#: This kind's name: the report kind the DSSGD defense names for its federations.
KIND_NAME = "dssgd"

__all__ = [
    "accuracy_figure",
    "accuracy_table",
    "uploads_table",
    "dssgd_sections",
    "load_federations",
    "dssgd_page",
    "dssgd_verdict",
]

#: Metrics the accuracy and uploads tables show (the rest go to the metrics table).
_SHOWN = (
    "test_accuracy",
    "train_accuracy",
    "standalone_test_accuracy",
    "standalone_test_accuracy_min",
    "standalone_test_accuracy_max",
    "centralised_test_accuracy",
    "local_test_accuracy_mean",
    "local_test_examples",
    "chance_accuracy",
    "num_parameters",
    "uploads_per_turn",
    "download_count",
    "uploads_applied",
    "parameters_updated",
    "run_rounds",
    "seconds_per_round",
    "observed_upload_sizes_mean",
)


def _estimates(record: TrainedModel) -> dict[str, Estimate | None]:
    """Each accuracy of the table with its 95% interval, ``None`` where the record holds no count for it.

    The federation's and the centralised model's accuracies are counts of the whole test set
    (Clopper–Pearson); the standalone one is a mean over participants scored on that same test
    set (Hoeffding, valid whatever their errors share); the local models' mean likewise, over the
    first ``local_test_examples`` test examples (a record stored before that count was kept has none).
    """
    m = record.metrics
    n = stored_test_examples(m)
    alone, local = m.get("standalone_test_accuracy"), m.get("local_test_accuracy_mean")
    n_local = m.get("local_test_examples")
    return {
        "test_accuracy": counted_test_accuracy(m),
        "centralised_test_accuracy": counted_test_accuracy(m, "centralised_test_accuracy"),
        "standalone_test_accuracy": mean_accuracy_estimate(float(alone), n)
        if n is not None and isinstance(alone, (int, float))
        else None,
        "local_test_accuracy_mean": mean_accuracy_estimate(float(local), int(n_local))
        if isinstance(local, (int, float)) and isinstance(n_local, int) and n_local > 0
        else None,
    }


def _accuracy_cell(record: TrainedModel, key: str, estimates: dict[str, Estimate | None]) -> Any:
    """The accuracy with its interval, or the bare share and why it has none."""
    est = estimates.get(key)
    if est is not None:
        return interval_cell(est)
    x = float(record.metrics[key])
    why = (
        "no interval: the number of test examples the local models were scored on is not stored"
        if key == "local_test_accuracy_mean"
        else NO_COUNT_REASON
    )
    return Shown(x, f"{fmt_percent(x)} ({why})")


def accuracy_table(record: TrainedModel) -> Table:
    """The federation's test accuracy beside standalone, centralised, the participants' local models and chance, each
    estimated accuracy with its 95% interval."""
    m = record.metrics
    n = record.config.get("participants")
    est = _estimates(record)
    rows: list[list[Any]] = [
        [
            "federation (global model)",
            _accuracy_cell(record, "test_accuracy", est) if m.get("test_accuracy") is not None else "—",
            "the server's parameters after the last round",
        ]
    ]
    if m.get("standalone_test_accuracy") is not None:
        spread = (
            f"; {fmt_percent(m['standalone_test_accuracy_min'])}–{fmt_percent(m['standalone_test_accuracy_max'])}"
            if m.get("standalone_test_accuracy_min") is not None
            else ""
        )
        rows.append(
            [
                "standalone (each participant alone)",
                _accuracy_cell(record, "standalone_test_accuracy", est),
                f"mean over {n} participants{spread}",
            ]
        )
    if m.get("centralised_test_accuracy") is not None:
        rows.append(
            [
                "centralised (all data pooled)",
                _accuracy_cell(record, "centralised_test_accuracy", est),
                "the same model trained on the union of the partitions",
            ]
        )
    if m.get("local_test_accuracy_mean") is not None:
        rows.append(
            [
                "participants' final local models",
                _accuracy_cell(record, "local_test_accuracy_mean", est),
                "mean; each downloaded the global parameters"
                + (
                    f"; scored on the first {m['local_test_examples']} test examples"
                    if m.get("local_test_examples")
                    else ""
                ),
            ]
        )
    if m.get("chance_accuracy") is not None:
        rows.append(
            [
                "chance",
                percent_cell(m["chance_accuracy"]),
                "as the run stored it (near_chance flags a federation that did not learn)",
            ]
        )
    caption = (
        "Test accuracy after the last round"
        + ("; the baselines were not trained (--no-baselines). " if m.get("standalone_test_accuracy") is None else ". ")
        + "In brackets the 95% interval: Clopper–Pearson for one model's count of the test set, Hoeffding's for "
        "a mean over models scored on the same test examples (the standalone participants, the local models: "
        "their errors are not independent, so no binomial interval holds for it)."
    )
    return Table(columns=["model", "test accuracy [95% interval]", "what"], rows=rows, caption=caption)


def accuracy_figure(record: TrainedModel) -> MplFigure | None:
    """The federation's test accuracy as a bar beside standalone (its min–max over participants),
    centralised and the participants' local models, with chance as a line; ``None`` (the page says
    so) when the run trained no baseline to compare with."""
    m = record.metrics
    bars = [
        (label, m.get(key))
        for label, key in (
            ("federation", "test_accuracy"),
            ("standalone (mean)", "standalone_test_accuracy"),
            ("centralised", "centralised_test_accuracy"),
            ("local models (mean)", "local_test_accuracy_mean"),
        )
    ]
    shown = [(label, float(x)) for label, x in bars if x is not None]
    if len(shown) < 2:
        return None
    fig, ax = new_axes(size=(7.0, 0.5 + 0.45 * len(shown)))
    looks = Looks()
    est = _estimates(record)
    keys = {
        "federation": "test_accuracy",
        "centralised": "centralised_test_accuracy",
        "local models (mean)": "local_test_accuracy_mean",
    }
    lo, hi = m.get("standalone_test_accuracy_min"), m.get("standalone_test_accuracy_max")
    spread = (float(lo), float(hi)) if lo is not None and hi is not None else None
    for i, (label, x) in enumerate(shown):
        look = looks.method("dssgd" if i == 0 else label)
        ax.barh(i, x, color=look["color"], height=0.6)
        e = est.get(keys.get(label, ""))
        end = x
        if e is not None:
            # The accuracy's 95% interval (the table's) as a bar across the end.
            # A white halo keeps the bar visible over a dark bar (the centralised one is black).
            halo: list[patheffects.AbstractPathEffect] = [patheffects.withStroke(linewidth=3.2, foreground="white")]
            bar = ax.errorbar([x], [i], xerr=[[x - e.low], [e.high - x]], color="#222222", capsize=3, linewidth=1.2)
            for part in (*bar.lines[1], *bar.lines[2]):
                part.set_path_effects(halo)
            end = max(end, e.high)
        if label == "standalone (mean)" and spread is not None:
            ax.plot(list(spread), [i, i], color="#222222", linewidth=1.5)  # the participants' spread
            end = max(end, spread[1])
        # The value sits past whatever is drawn on its row, so no line runs through it.
        ax.text(end, i, f" {fmt_percent(x)}", va="center", fontsize=9.5)
    xlabel = "test accuracy"
    if m.get("chance_accuracy") is not None:
        chance = float(m["chance_accuracy"])
        ax.axvline(chance, color="#777777", linestyle=":", linewidth=1.2)
        # Named in the axis label: a text beside the line sat on the frame or on a tick label.
        xlabel += f" (dotted: chance, {fmt_percent(chance)})"
    ax.set_yticks(range(len(shown)), [label for label, _ in shown])
    ax.invert_yaxis()
    ax.set_xlim(0, 1.12)
    ax.set_xlabel(xlabel)
    ax.xaxis.set_major_formatter(PercentFormatter(xmax=1.0, decimals=0))  # as the labels and the table write it
    finish_axes(ax)
    fig.tight_layout()
    return fig


def uploads_table(record: TrainedModel) -> Table:
    """What each participant uploaded per turn, and what the server applied."""
    m, c = record.metrics, record.config
    params = int(m.get("num_parameters") or 0)
    rows: list[list[Any]] = [
        [
            "participants × rounds",
            f"{c.get('participants')} × {m.get('run_rounds', c.get('rounds'))} "
            f"({c.get('schedule')}, {m.get('engine', '?')} engine)",
        ],
        ["parameters", fmt_count(params)],
    ]
    if m.get("uploads_per_turn") is not None and params:
        rows.append(
            [
                "uploaded per turn (θ_u)",
                f"{fmt_count(m['uploads_per_turn'])} "
                f"({fmt_percent(m['uploads_per_turn'] / params)}, selection "
                f"{c.get('selection')})",
            ]
        )
    if m.get("download_count") is not None and params:
        rows.append(
            [
                "downloaded per turn (θ_d)",
                f"{fmt_count(m['download_count'])} ({fmt_percent(m['download_count'] / params)})",
            ]
        )
    if m.get("uploads_applied") is not None:
        rows.append(["uploads applied by the server", fmt_count(m["uploads_applied"])])
    if m.get("parameters_updated") is not None and params:
        rows.append(
            [
                "parameters ever updated",
                f"{fmt_count(m['parameters_updated'])} ({fmt_percent(m['parameters_updated'] / params)})",
            ]
        )
    if m.get("seconds_per_round") is not None:
        rows.append(
            ["seconds per round", Shown(float(m["seconds_per_round"]), fmt_number(float(m["seconds_per_round"])))]
        )
    return Table(columns=["", "value"], rows=rows)


def _participants(record_dir: Path, record: TrainedModel) -> list[str]:
    root = record_dir.parent / "dssgd-participants" / record.model_id
    found = sorted(p.name for p in root.glob("participant-*") if (p / "record.json").is_file()) if root.is_dir() else []
    lines = [
        f"participants' local records: {root} ({', '.join(found)})"
        if found
        else "the participants' local records were not kept"
    ]
    uploads = record_dir / "uploads.npz"
    lines.append(
        f"observed participant's uploads: {uploads} (attack them: dpaudit attack uploads --target {record_dir})"
        if uploads.is_file()
        else "no uploads were kept for the server-seat attacks"
    )
    return lines


def dssgd_verdict(record: TrainedModel) -> Verdict:
    """The federation's accuracy against standalone and centralised training, its uploads and its DP claim."""
    m, c = record.metrics, record.config
    delta = record_delta(record)
    acc = float(m.get("test_accuracy", math.nan))
    alone, central = m.get("standalone_test_accuracy"), m.get("centralised_test_accuracy")
    rounds = m.get("run_rounds", c.get("rounds"))
    participants = c.get("participants")
    eps = record.claim.epsilons(delta=delta)
    est = _estimates(record)

    def shown(key: str, x: object) -> str:
        e = est.get(key)
        return e.text() if e is not None else fmt_percent(float(x))  # type: ignore[arg-type]

    versus = (
        [f"{shown('standalone_test_accuracy', alone)} standalone (mean over participants)"] if alone is not None else []
    )
    versus += [f"{shown('centralised_test_accuracy', central)} centralised"] if central is not None else []
    lines = []
    if m.get("uploads_per_turn") is not None and m.get("num_parameters"):
        lines.append(
            f"Uploads: {fmt_count(m['uploads_per_turn'])} of {fmt_count(m['num_parameters'])} parameters per turn "
            f"({fmt_percent(m['uploads_per_turn'] / m['num_parameters'])}); "
            f"{fmt_count(m.get('uploads_applied', 0))} uploads applied."
        )
    lines.append(f"DP claim: {claim_text(eps, delta)}; {record.claim.statement()}.")
    if alone is not None and m.get("standalone_test_accuracy_min") is not None:
        lines.append(
            "Standalone participants range "
            f"{fmt_percent(m['standalone_test_accuracy_min'])}–{fmt_percent(m['standalone_test_accuracy_max'])}."
        )
    fed = counted_test_accuracy(m)
    shown_acc = fed.text() if fed is not None else fmt_percent(acc)
    head = f"{participants} participants, {rounds} rounds: the federation reaches {shown_acc} test accuracy" + (
        f" vs {' and '.join(versus)}" if versus else ""
    )
    privacy = f"; {claim_text(eps, delta)}" if eps else "; no DP guarantee (the uploads carry exact parameter changes)"
    if m.get("near_chance"):
        return Verdict(status="near chance", headline=f"Near chance: {head}{privacy}.", lines=tuple(lines), tone="warn")
    if alone is not None and acc <= float(alone):
        return Verdict(
            status="no gain", headline=f"No gain over training alone: {head}{privacy}.", lines=tuple(lines), tone="warn"
        )
    return Verdict(
        status="federation helps" if alone is not None else "trained",
        headline=f"{head[0].upper()}{head[1:]}{privacy}.",
        lines=tuple(lines),
        tone="info",
    )


def dssgd_sections(record: TrainedModel, record_dir: Path) -> list[Section]:
    """The page: verdict, accuracies, uploads, the DP claim, where the parts are kept, the record and its
    configuration."""
    delta = record_delta(record)
    claim = accountant_table(record.claim.epsilons(delta=delta), delta=delta, description=record.claim.statement())
    return [
        verdict_section(dssgd_verdict(record)),
        Section(
            title=_accuracy_title(record),
            blocks=[
                *_figure(record),
                accuracy_table(record),
                Text(
                    text="Accuracy per round is not stored by the run; the table is the "
                    "federation after its last round."
                ),
            ],
        ),
        Section(title="Uploads", blocks=[uploads_table(record), Items(items=_participants(record_dir, record))]),
        Section(title="DP claim of the uploads", blocks=[claim]),
        Section(
            title="Record",
            blocks=[record_table(record), metrics_table(record.metrics, skip=_SHOWN, counts=record_counts(record))],
        ),
        Section(title="Configuration", blocks=[config_items(record.config)]),
    ]


def _figure(record: TrainedModel) -> list[Figure]:
    """The accuracy figure, its caption naming only the bars the record measured (a run without
    baselines draws no standalone or centralised bar, so the caption does not describe them)."""
    fig = accuracy_figure(record)
    m = record.metrics
    parts = ["the federation"]
    if m.get("standalone_test_accuracy") is not None:
        parts.append("each participant alone (bar: mean; black line: lowest to highest participant)")
    if m.get("centralised_test_accuracy") is not None:
        parts.append("centralised training on the pooled data")
    if m.get("local_test_accuracy_mean") is not None:
        parts.append("the participants' final local models (mean)")
    listed = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
    caption = (
        f"Test accuracy after the last round: {listed}"
        + ("; dotted: chance" if m.get("chance_accuracy") is not None else "")
        + ". Capped bars: the 95% intervals of the table below (Clopper–Pearson for one model's test-set count, "
        "Hoeffding's for a mean over models), where the record holds the count."
    )
    return [] if fig is None else [Figure(figure=fig, name="accuracy", caption=caption)]


def _accuracy_title(record: TrainedModel) -> str:
    """The accuracy section's title, naming what the run measured beside the federation."""
    m = record.metrics
    beside = [
        name
        for name, key in (
            ("training alone", "standalone_test_accuracy"),
            ("centralised", "centralised_test_accuracy"),
            ("the local models", "local_test_accuracy_mean"),
        )
        if m.get(key) is not None
    ]
    return "Federation" + (f" against {' and '.join(beside)}" if beside else "")


def load_federations(run: RunDir) -> list[tuple[TrainedModel, Path]]:
    """Every record at the top of the run's records whose defense has this kind show it (DSSGD's global records), by
    name."""
    if not run.subdir("records").is_dir():
        return []
    return [(r, d) for d in run.record_dirs() if record_report_kind((r := load_record(d)).defense, d) == KIND_NAME]


def dssgd_page(item: tuple[TrainedModel, Path], out: Path) -> Page:
    """Writes ``dssgd-<model_id>.{html,md}`` into ``out``."""
    record, record_dir = item
    stem = "dssgd-" + safe_stem(record.model_id, default="federation").removeprefix("dssgd-")
    sections = dssgd_sections(record, record_dir)
    page = write_report_files(out, sections, title=f"DSSGD federation {record.model_id}", stem=stem, kind="dssgd").html
    return Page(html=page, link=with_status(record.model_id, sections))


REPORT_KINDS.register(
    ReportKind(
        name=KIND_NAME,
        group="Federated learning (DSSGD)",
        order=70,
        load=load_federations,
        verdict=lambda item: dssgd_verdict(item[0]),
        render=dssgd_page,
    )
)
