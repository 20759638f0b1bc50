"""Certified vs conventional accuracy reports (PixelDP, AGM, HGM, Secure-SGD, smoothing).

What a reader of Phan et al. (2019, Figs. 2–5) or Lecuyer et al. (2019, Fig. 3) looks for:

1. **certified accuracy against the perturbation radius** for every certified model (its own
   PixelDP-style certificate and the randomized-smoothing certificate of the same noise, Cohen
   et al. 2019; a ``smoothing`` model, trained with Gaussian input noise, has CERTIFY's
   certificate only), beside the conventional accuracy of the classifier each certificate covers
   (its prediction rule named, so the two read as one classifier) and the **empirical robust
   accuracy** under FGSM / I-FGSM / PGD / MIM on the same axes;
2. **conventional accuracy against the DP ε** of the training data, where records carry one;
3. the tables behind both, as CSV (a CSV with no rows is not written).

Soundness verdicts are read from what ``dpaudit certify`` stored (``soundness_violations`` in
its summary); this module only renders them. Torch-free: everything renders from stored JSON + NPZ.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure
from matplotlib.transforms import ScaledTranslation

from dpaudit import _validate as v
from dpaudit.results import EvasionResult, TrainedModel, load_evasion_result, load_record
from dpaudit.results.certification import CertificationResult, load_certification_result
from dpaudit.results.certify_summary import (
    UNNAMED_PREDICTION_RULE,
    SoundnessViolation,
    StoredCertifySummary,
    read_stored_summary,
)
from dpaudit.results.verdicts import Verdict, certified_verdict
from dpaudit.store import RunDir, atomic_write_text, read_json
from reports.certified_rows import CertifiedRow, RobustRow
from reports.figures import Looks, colour, legend_outside, new_axes, setting_looks
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import Shown, fmt_percent, fmt_upper_bound, rate_cell, rate_lb_cell, rate_ub_cell
from reports.render import Figure, Section, Table, Text, WrittenReport, accountant_table, write_report_files
from reports.verdict_box import verdict_section, with_status

__all__ = [
    "CertifiedRun",
    "AccuracyEpsilonRow",
    "CertifiedRow",
    "RobustRow",
    "load_certified_runs",
    "certified_figure",
    "comparison_figure",
    "accuracy_epsilon_figure",
    "certified_rows",
    "robust_rows",
    "accuracy_epsilon_rows",
    "certified_sections",
    "write_certified_tables",
    "write_certified_report",
    "render_certified",
    "CertifiedRuns",
    "load_certified",
    "certified_page",
]

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True, kw_only=True)
class CertifiedRun:
    """What ``dpaudit certify`` stored for one model (and its record, when the run holds it).

    ``summary`` is read typed (:func:`dpaudit.results.certify_summary.read_stored_summary`); a
    mapping given here is read the same way.
    """

    summary: StoredCertifySummary
    certificates: Mapping[str, CertificationResult]
    attacks: Mapping[str, EvasionResult]
    record: TrainedModel | None = field(default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.summary, StoredCertifySummary):
            object.__setattr__(self, "summary", read_stored_summary(self.summary))

    def prediction_rule(self, certificate: str) -> str:
        """The classifier ``certificate`` covers, in words, as ``certify`` stored it (its conventional accuracy is this
        rule's)."""
        cert = self.certificates.get(certificate)
        rule = cert.config.get("prediction_rule") if cert is not None else None
        if not rule:
            s = self.summary
            own = certificate != "smoothing" or s.mechanism == "smoothing"
            rule = s.prediction_rule if own else s.smoothing_prediction_rule
        return str(rule) if rule else UNNAMED_PREDICTION_RULE

    @property
    def label(self) -> str:
        """Defense, its robustness parameters (ε_r, L; r = 1 when HGM's noise is not redistributed; σ for smoothing) and
        DP ε."""
        s = self.summary
        parts = [s.defense]
        if s.robustness_epsilon is not None and s.attack_norm_bound is not None:
            parts.append(f"ε_r={s.robustness_epsilon:g} L={s.attack_norm_bound:g}")
        elif s.mechanism == "smoothing" and s.noise_std is not None:
            parts.append(f"σ={s.noise_std:g}")
        if s.defense in ("hgm", "secure-sgd") and s.redistribute is False:
            parts.append("r=1")
        eps = s.epsilon
        if eps is not None and math.isfinite(eps):
            parts.append(f"DP ε={fmt_upper_bound(eps, 2)}")
        return " ".join(parts)

    @property
    def radii(self) -> np.ndarray:
        """The perturbation radii the model was certified and attacked at."""
        return np.asarray(self.summary.radii, dtype=float)

    @property
    def soundness_violations(self) -> tuple[SoundnessViolation, ...]:
        """The violations ``certify`` stored (certificate, radius, certified and robust accuracy), in any stored
        form."""
        return self.summary.soundness_violations

    def strongest_robust_accuracy(self) -> np.ndarray | None:
        """Robust accuracy when an example counts as broken if *any* attack broke it."""
        if not self.attacks:
            return None
        success = np.zeros_like(next(iter(self.attacks.values())).success)
        for res in self.attacks.values():
            success = success | res.success
        return 1.0 - success.mean(axis=1)


def _record(run: RunDir, model_id: str) -> TrainedModel | None:
    path = run.record_dir(model_id)
    return load_record(path) if (path / "record.json").is_file() else None


def load_certified_runs(run_dir: str | Path | RunDir) -> list[CertifiedRun]:
    """Every model certified in the run (sorted by defense, then model id)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    out = []
    for d in run.certify_dirs():
        try:
            # Read typed here, so a malformed field is named with its file before anything renders.
            summary = read_stored_summary(read_json(d / SUMMARY_FILE))
        except ValueError as exc:
            raise v.invalid("summary", f"{str(d / SUMMARY_FILE)!r}: {exc}") from None
        certs = {
            p.stem.removeprefix("certify-"): load_certification_result(p) for p in sorted(d.glob("certify-*.json"))
        }
        radii = np.asarray(summary.radii, dtype=float)
        used = summary.attacks_run
        attacks = {}
        for p in sorted(d.glob("evasion-*.json")):
            res = load_evasion_result(p)
            # Only the attacks the summary's run used, at its radii: a result left by an earlier run
            # at other radii (or by a run with attacks when the last had none) is not this run's.
            same_radii = res.radii.shape == radii.shape and np.allclose(res.radii, radii)
            if same_radii and (used is None or res.attack in used):
                attacks[res.attack] = res
        out.append(
            CertifiedRun(summary=summary, certificates=certs, attacks=attacks, record=_record(run, summary.model_id))
        )
    return sorted(out, key=lambda r: (r.summary.defense, r.summary.model_id))


def certified_figure(run: CertifiedRun, *, ax: Axes | None = None) -> MplFigure | None:
    """One model: conventional accuracy, certified accuracy per certificate and robust accuracy per attack, against
    radius.

    Returns:
        The figure, or ``None`` when the model has neither a certificate nor an attack result.
    """
    if not run.certificates and not run.attacks:
        return None
    fig, ax = new_axes(ax, size=(7.5, 4.2))
    radii = run.radii
    looks = Looks()
    # Each certificate's conventional accuracy is that of the classifier it certifies (the same
    # predictions), drawn in the certificate's colour so the pair reads as one classifier.
    for name, cert in run.certificates.items():
        own = (
            name != "smoothing" or run.summary.mechanism == "smoothing"
        )  # a smoothing model's own certificate is solid
        st = looks.method(name, linestyle="-" if own else ":")
        ax.plot(radii, cert.certified_accuracy(radii), **st, linewidth=2, markersize=6, label=f"certified: {name}")
        ax.axhline(
            cert.conventional_accuracy,
            color=st["color"],
            linestyle=(0, (6, 2)),
            linewidth=1.0,
            alpha=0.7,
            label=f"conventional: {name}'s classifier {cert.conventional_accuracy:.3f}",
        )
    conv = run.summary.conventional_accuracy
    if not run.certificates and conv is not None and math.isfinite(conv):
        ax.axhline(
            conv,
            **looks.take(color=colour(run.summary.defense), marker="", linestyle=(0, (6, 2))),
            linewidth=1.0,
            alpha=0.7,
            label=f"conventional accuracy {conv:.3f}",
        )
    # Attacks often leave the same accuracy: each curve is dodged a few points sideways (display
    # space, so the data stay exact) to keep all of them visible.
    n = len(run.attacks)
    for i, (name, res) in enumerate(run.attacks.items()):
        dodge = ScaledTranslation((i - (n - 1) / 2) * 3.0 / 72, 0, fig.dpi_scale_trans)
        ax.plot(
            res.radii,
            res.robust_accuracy,
            **looks.method(name),
            markersize=5,
            markerfacecolor="none",
            label=f"robust under {name}",
            transform=ax.transData + dodge,
        )
    ax.set_xlabel(f"perturbation radius ({run.summary.norm or ''}); attack curves dodged sideways by a few points")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(run.label)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return fig


def comparison_figure(
    runs: Sequence[CertifiedRun], *, ax: Axes | None = None, include_smoothing: bool = True
) -> MplFigure | None:
    """Every model's certificates on one axes: colour and marker name the model, the line the certificate.

    A model's own certificate is solid, the randomized-smoothing certificate of its noise dotted,
    so PixelDP's smoothing curve and a smoothing model's curve differ in colour and marker, and
    a model's two curves share its colour (models of one defense: shades of its hue).

    Returns:
        The figure, or ``None`` when no model holds a certificate.
    """
    curves = [
        (run, name, cert)
        for run in runs
        for name, cert in run.certificates.items()
        if include_smoothing or name != "smoothing"
    ]
    if not curves:
        return None
    fig, ax = new_axes(ax, size=(8.0, 4.2))
    models = setting_looks([(run.summary.model_id, run.summary.defense) for run in runs if run.certificates])
    looks = Looks()
    for run, name, cert in curves:
        own = name != "smoothing" or run.summary.mechanism == "smoothing"
        st = looks.take(**{**models[run.summary.model_id], "linestyle": "-" if own else ":"})
        if not own:
            st["markerfacecolor"] = "white"
        ax.plot(
            run.radii, cert.certified_accuracy(run.radii), **st, label=f"{run.label} [{run.summary.model_id}]: {name}"
        )
    ax.set_xlabel("perturbation radius")
    ax.set_ylabel("certified accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return fig


@dataclass(frozen=True, kw_only=True)
class AccuracyEpsilonRow:
    """One record's conventional accuracy at its DP ε (a row of ``accuracy_vs_epsilon.csv``, columns in field order).

    Attributes:
        defense, model_id: the record.
        epsilon, delta: its DP ε at the δ its metrics state (``None`` when they state none).
        conventional_accuracy: of the classifier ``source`` names.
        source: where the accuracy comes from, with its prediction rule in words.
    """

    defense: str
    model_id: str
    epsilon: float
    delta: float | None
    conventional_accuracy: float
    source: str


def accuracy_epsilon_rows(records: Sequence[TrainedModel], runs: Sequence[CertifiedRun]) -> list[AccuracyEpsilonRow]:
    """(defense, model id, DP ε, δ, conventional accuracy) for every record with a finite ε.

    Conventional accuracy is that of the classifier the model's own certificate covers where the
    model was certified, else the record's test accuracy; ``source`` names the prediction rule
    either way (a noise-layer record's test accuracy is its expected-softmax argmax over a few
    noise draws, which is not the vote-count argmax a Clopper–Pearson certificate covers).
    """
    certified = {r.summary.model_id: r for r in runs}
    rows = []
    for rec in records:
        eps = rec.metrics.get("epsilon")
        if not isinstance(eps, (int, float)) or not math.isfinite(eps):
            continue
        run = certified.get(rec.model_id)
        acc = run.summary.conventional_accuracy if run is not None else rec.metrics.get("test_accuracy")
        if not isinstance(acc, (int, float)):
            continue
        rows.append(
            AccuracyEpsilonRow(
                defense=rec.defense,
                model_id=rec.model_id,
                epsilon=float(eps),
                delta=rec.metrics.get("delta"),
                conventional_accuracy=float(acc),
                source=f"certify: {run.summary.prediction_rule or UNNAMED_PREDICTION_RULE}"
                if run is not None
                else _record_rule(rec),
            )
        )
    return sorted(rows, key=lambda r: (r.defense, r.epsilon))


def _record_rule(rec: TrainedModel) -> str:
    """The prediction rule behind a record's test accuracy, in words."""
    draws = rec.metrics.get("test_accuracy_draws")
    return (
        f"record test accuracy: expected-softmax argmax over {draws} noise draws"
        if draws
        else "record test accuracy: the trained model on clean inputs"
    )


def accuracy_epsilon_figure(rows: Sequence[AccuracyEpsilonRow], *, ax: Axes | None = None) -> MplFigure | None:
    """Conventional accuracy against the training data's DP ε, one line per defense (``None`` without rows)."""
    if not rows:
        return None
    fig, ax = new_axes(ax, size=(7.0, 4.0))
    looks = Looks()
    for defense in sorted({r.defense for r in rows}):
        pts = sorted((r.epsilon, r.conventional_accuracy) for r in rows if r.defense == defense)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], **looks.method(defense), label=defense)
    ax.set_xscale("log")
    ax.set_xlabel("DP ε of the training data")
    ax.set_ylabel("conventional accuracy")
    ax.grid(alpha=0.3, which="both")
    legend_outside(ax)
    return fig


def certified_rows(runs: Sequence[CertifiedRun]) -> list[CertifiedRow]:
    """Long table: defense, model, certificate, radius, certified accuracy, conventional accuracy of the same
    classifier, its prediction rule."""
    return [
        CertifiedRow(
            defense=run.summary.defense,
            model_id=run.summary.model_id,
            certificate=name,
            norm=cert.norm,
            radius=float(radius),
            certified_accuracy=float(acc),
            conventional_accuracy=float(cert.conventional_accuracy),
            prediction_rule=run.prediction_rule(name),
        )
        for run in runs
        for name, cert in run.certificates.items()
        for radius, acc in zip(run.radii, cert.certified_accuracy(run.radii))
    ]


def robust_rows(runs: Sequence[CertifiedRun]) -> list[RobustRow]:
    """Long table: defense, model, attack, radius, robust accuracy, clean accuracy."""
    return [
        RobustRow(
            defense=run.summary.defense,
            model_id=run.summary.model_id,
            attack=name,
            norm=res.norm,
            radius=float(radius),
            robust_accuracy=float(acc),
            clean_accuracy=float(res.clean_accuracy),
        )
        for run in runs
        for name, res in run.attacks.items()
        for radius, acc in zip(res.radii, res.robust_accuracy)
    ]


def _csv(rows: Sequence[CertifiedRow | RobustRow | AccuracyEpsilonRow]) -> str:
    """The rows as CSV, one column per field of their type (in field order)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[f.name for f in dataclasses.fields(rows[0])])
    writer.writeheader()
    writer.writerows(dataclasses.asdict(r) for r in rows)
    return buf.getvalue()


def write_certified_tables(
    directory: Path, runs: Sequence[CertifiedRun], eps_rows: Sequence[AccuracyEpsilonRow]
) -> list[Path]:
    """Writes the CSV tables that have rows (a table without rows is neither written nor listed); removes stale empty
    ones."""
    written = []
    tables: tuple[tuple[str, Sequence[CertifiedRow | RobustRow | AccuracyEpsilonRow]], ...] = (
        ("certified_accuracy.csv", certified_rows(runs)),
        ("robust_accuracy.csv", robust_rows(runs)),
        ("accuracy_vs_epsilon.csv", eps_rows),
    )
    for name, rows in tables:
        path = directory / name
        if rows:
            written.append(atomic_write_text(path, _csv(rows)))
        elif path.is_file() and path.stat().st_size == 0:
            path.unlink()  # left by older versions, which always wrote the file
    return written


def _run_table(runs: Sequence[CertifiedRun]) -> Table:
    rows = []
    for run in runs:
        s = run.summary
        rows.append(
            [
                s.defense,
                s.model_id,
                s.epsilon,
                s.robustness_epsilon,
                s.attack_norm_bound,
                s.noise_std,
                s.sensitivity,
                s.conventional_accuracy,
                s.prediction_rule or UNNAMED_PREDICTION_RULE,
                s.num_examples,
                s.num_draws,
                s.draws_per_second,
            ]
        )
    return Table(
        columns=[
            "defense",
            "model",
            "DP ε",
            "ε_r",
            "L",
            "σ",
            "Δ_r",
            "conv. acc",
            "prediction rule",
            "examples",
            "draws",
            "draws/s",
        ],
        rows=rows,
        caption=(
            "σ: base noise std of the noise layer (of the input noise for a "
            "smoothing model, whose ε_r and L are blank); "
            "Δ_r: its measured (r-weighted) sensitivity in the attack norm; conv. "
            "acc: accuracy of the classifier the model's own certificate covers, "
            "named by its prediction rule: the same classifier as the certified "
            "accuracy, which at radius 0 never exceeds it."
        ),
    )


def _claim_block(run: CertifiedRun) -> Any:
    if run.record is None:
        return Text(text="The model's record is not in this run directory, so its privacy claim cannot be shown.")
    delta = run.record.metrics.get("delta") or run.summary.delta or 1e-5
    return accountant_table(
        run.record.claim.epsilons(delta=float(delta)), delta=float(delta), description=run.record.claim.statement()
    )


def _share(accuracy: float, n: int, cell: Any = rate_cell) -> Shown:
    # ``cell`` rounds a bound its safe way: a certified accuracy down, a robust accuracy left by attacks up.
    return cell(round(accuracy * n), n)


def runs_verdict(runs: Sequence[CertifiedRun]) -> Verdict:
    """Sound or unsound (:func:`~dpaudit.results.verdicts.certified_verdict`), from what ``certify`` stored for each
    model."""
    return certified_verdict(
        [
            (r.summary.model_id, [x.to_dict() for x in r.soundness_violations], bool(r.certificates and r.attacks))
            for r in runs
        ]
    )


def certified_sections(
    runs: Sequence[CertifiedRun], eps_rows: Sequence[AccuracyEpsilonRow], csv_files: Sequence[Path] = ()
) -> list[Section]:
    """The certified report's sections: stored soundness verdicts, overview, one section per model, accuracy vs ε."""
    overview: list[Any] = []
    # Sound / unsound is judged in the core from what certify stored; the page draws the box.
    verdict = runs_verdict(runs)
    if runs:
        overview.append(_run_table(runs))
        overview.append(
            Figure(
                figure=comparison_figure(runs),
                name="comparison",
                caption="Certified accuracy against radius: colour and marker name the model; "
                "solid: its own certificate, dotted with hollow markers: randomized "
                "smoothing of the same noise (a smoothing model: CERTIFY on its input "
                "noise, solid)",
                empty="no model in this run holds a certificate (none has a noise layer)",
            )
        )
    else:
        overview.append(Text(text="No certified models in this run directory (run dpaudit certify first)."))
    sections = [verdict_section(verdict), Section(title="Certified accuracy", blocks=overview)]
    for run in runs:
        blocks: list[Any] = [_claim_block(run)]
        blocks.append(
            Figure(
                figure=certified_figure(run),
                name=f"model-{run.summary.model_id}",
                caption="Certified accuracy (filled markers, one line per certificate), the "
                "conventional accuracy of the classifier each certificate covers "
                "(dashed horizontal, in the certificate's colour) and empirical robust "
                "accuracy under each attack (open markers)",
                empty="no certificate and no attack result stored for this model",
            )
        )
        if run.certificates:
            blocks.append(
                Text(
                    text="Each certificate's conventional accuracy is that of the classifier it certifies: "
                    + "; ".join(
                        f"certified {n}: conventional accuracy "
                        f"{fmt_percent(c.conventional_accuracy)} of the same classifier "
                        f"({run.prediction_rule(n)})"
                        for n, c in run.certificates.items()
                    )
                    + "."
                )
            )
        robust = run.strongest_robust_accuracy()
        rows = []
        for j, radius in enumerate(run.radii):
            row: list[Any] = [float(radius)]
            # Accuracies as percentages of the test points they rest on (one more point moves them by 1/n).
            row += [
                _share(float(c.certified_accuracy([radius])[0]), c.labels.size, rate_lb_cell)
                for c in run.certificates.values()
            ]
            row += [_share(float(r.robust_accuracy[j]), r.success.shape[1], rate_ub_cell) for r in run.attacks.values()]
            row.append(
                None
                if robust is None
                else _share(float(robust[j]), next(iter(run.attacks.values())).success.shape[1], rate_ub_cell)
            )
            rows.append(row)
        if rows and (run.certificates or run.attacks):
            blocks.append(
                Table(
                    columns=[
                        "radius",
                        *(f"certified {n}" for n in run.certificates),
                        *(f"robust {n}" for n in run.attacks),
                        "robust (all attacks)",
                    ],
                    rows=rows,
                )
            )
        sections.append(Section(title=f"{run.label} — {run.summary.model_id}", blocks=blocks))
    sections.append(
        Section(
            title="Conventional accuracy against DP ε",
            blocks=[
                Figure(
                    figure=accuracy_epsilon_figure(eps_rows),
                    name="accuracy-vs-epsilon",
                    caption="Conventional accuracy against the training data's ε (at each record's δ)",
                    empty="no record in this run has a finite DP ε",
                ),
                *(
                    [
                        Table(
                            columns=["defense", "model", "ε", "δ", "conv. acc", "source"],
                            rows=[
                                [r.defense, r.model_id, r.epsilon, r.delta, r.conventional_accuracy, r.source]
                                for r in eps_rows
                            ],
                        )
                    ]
                    if eps_rows
                    else []
                ),
            ],
        )
    )
    if csv_files:
        sections.append(
            Section(
                title="Tables",
                blocks=[Text(text="CSV beside this report: " + ", ".join(p.name for p in csv_files) + ".")],
            )
        )
    return sections


@dataclass(frozen=True, kw_only=True)
class CertifiedRuns:
    """Every model certified in a run directory, and every record's accuracy against its DP ε (one page).

    Attributes:
        runs: what ``dpaudit certify`` stored per model (:func:`load_certified_runs`).
        eps_rows: conventional accuracy against ε (:func:`accuracy_epsilon_rows`).
    """

    runs: tuple[CertifiedRun, ...]
    eps_rows: tuple[AccuracyEpsilonRow, ...] = ()


def _certified(run: RunDir, runs: Sequence[CertifiedRun]) -> CertifiedRuns:
    records = [load_record(d) for d in run.record_dirs()]
    return CertifiedRuns(runs=tuple(runs), eps_rows=tuple(accuracy_epsilon_rows(records, runs)))


def load_certified(run: RunDir) -> list[CertifiedRuns]:
    """The run's certified models as the one item of the certified report (none when nothing was certified)."""
    runs = load_certified_runs(run)
    return [_certified(run, runs)] if runs else []


def _write(out: Path, item: CertifiedRuns) -> tuple[WrittenReport, list[Path], str]:
    out.mkdir(parents=True, exist_ok=True)
    csv_files = write_certified_tables(out, item.runs, item.eps_rows)
    sections = certified_sections(item.runs, item.eps_rows, csv_files)
    written = write_report_files(
        out, sections, title="Certified vs conventional accuracy", stem="certified", kind="certified"
    )
    return written, csv_files, with_status(f"certified vs conventional accuracy ({len(item.runs)} model(s))", sections)


def certified_page(item: CertifiedRuns, out: Path) -> Page:
    """Writes ``certified.{html,md}``, its figures and non-empty CSV tables into ``out``."""
    # The soundness verdicts are the ones ``certify`` stored; the page only shows them.
    violations = tuple(
        f"certify {cr.summary.model_id}: {len(cr.soundness_violations)} soundness violation(s)"
        for cr in item.runs
        if cr.soundness_violations
    )
    written, csv_files, link = _write(out, item)
    return Page(html=written.html, link=link, tables=tuple(csv_files), violations=violations)


def write_certified_report(run_dir: str | Path | RunDir, *, runs: Sequence[CertifiedRun] | None = None) -> Path:
    """Writes ``certified.{html,md}``, its figures and non-empty CSV tables into the run's reports directory; returns
    the HTML path."""
    return render_certified(run_dir, runs=runs)[0].html


def render_certified(
    run_dir: str | Path | RunDir, *, runs: Sequence[CertifiedRun] | None = None
) -> tuple[WrittenReport, list[Path]]:
    """Writes the certified report and its CSV tables; returns (the report's files, the CSV files)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    written, csv_files, _ = _write(
        run.reports_dir(), _certified(run, load_certified_runs(run) if runs is None else list(runs))
    )
    return written, csv_files


REPORT_KINDS.register(
    ReportKind(
        name="certified",
        group="Certified robustness",
        order=40,
        load=load_certified,
        verdict=lambda item: runs_verdict(item.runs),
        render=certified_page,
    )
)
