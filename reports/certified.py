"""Certified vs conventional accuracy reports (PixelDP, AGM, HGM, Secure-SGD, smoothing).

What a reader of Phan et al. (2019, Figs. 2–5) or Lecuyer et al. (2019, Fig. 3) looks for:

1. **certified accuracy against the perturbation radius** for every certified model (its own
   PixelDP-style certificate and the randomized-smoothing certificate of the same noise, Cohen
   et al. 2019; a ``smoothing`` model, trained with Gaussian input noise, has CERTIFY's
   certificate only) and the **empirical robust accuracy** under FGSM / I-FGSM / PGD / MIM on
   the same axes. Every curve is one classifier's and starts at radius 0 at that classifier's
   accuracy (a certificate's conventional accuracy, an attack's clean accuracy); a table names
   each curve's prediction rule, since a certificate's rule (e.g. CERTIFY, which abstains) and
   the rule an attack ran against (a vote that never abstains) differ;
2. every accuracy beside its count and 95 % Clopper–Pearson interval, on the page, in the CSV
   and in the LaTeX tables; captions read from the artists drawn;
3. **conventional accuracy against the DP ε** of the training data, where records carry one;
4. the tables behind them, as CSV (a CSV with no rows is not written).

The verdict (:func:`~dpaudit.results.verdicts.certified_verdict`) reads what ``dpaudit certify``
stored (``soundness_violations`` in its summary) and each certificate's reach at the radii asked
("vacuous at these radii" when it certifies nothing there); this module only renders it.
Torch-free: everything renders from stored JSON + NPZ.
"""

from __future__ import annotations

import csv
import dataclasses
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit.results import EvasionResult, load_record
from dpaudit.results.certified_numbers import ACCURACY_CONFIDENCE, CountedAccuracy, counted_accuracy
from dpaudit.results.verdicts import Verdict, certified_verdict
from dpaudit.store import RunDir, atomic_write_text
from reports.certified_figures import (
    AccuracyEpsilonRow,
    accuracy_epsilon_figure,
    accuracy_epsilon_rows,
    certified_caption,
    certified_figure,
    comparison_caption,
    comparison_figure,
    line_style_words,
)
from reports.certified_rows import CertifiedRow, RobustRow
from reports.certified_runs import CertifiedRun, load_certified_runs
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import Shown, epsilon_lb_cell, epsilon_ub_cell, fmt_percent
from reports.render import Figure, Section, Table, Text, WrittenReport, accountant_table, write_report_files
from reports.verdict_box import verdict_section, with_status

__all__ = [
    "CertifiedRun",
    "AccuracyEpsilonRow",
    "CertifiedRow",
    "RobustRow",
    "load_certified_runs",
    "certified_figure",
    "certified_caption",
    "comparison_figure",
    "comparison_caption",
    "line_style_words",
    "classifier_table",
    "accuracy_table",
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


def certified_rows(runs: Sequence[CertifiedRun]) -> list[CertifiedRow]:
    """Long table: defense, model, certificate, radius (from 0), certified accuracy, conventional accuracy of the same
    classifier, its prediction rule, each accuracy with its count and 95 % Clopper–Pearson interval."""
    rows = []
    for run in runs:
        for name, cert in run.certificates.items():
            conv = counted_accuracy(cert.num_correct, cert.num_points)
            for radius, count in zip(run.curve_radii, cert.num_certified(run.curve_radii)):
                c = counted_accuracy(int(count), cert.num_points)
                rows.append(
                    CertifiedRow(
                        defense=run.summary.defense,
                        model_id=run.summary.model_id,
                        certificate=name,
                        norm=cert.norm,
                        radius=float(radius),
                        certified_accuracy=c.share,
                        conventional_accuracy=conv.share,
                        prediction_rule=run.prediction_rule(name),
                        num_points=cert.num_points,
                        certified_count=c.correct,
                        certified_ci_low=c.low,
                        certified_ci_high=c.high,
                        conventional_count=conv.correct,
                        conventional_ci_low=conv.low,
                        conventional_ci_high=conv.high,
                        confidence=ACCURACY_CONFIDENCE,
                    )
                )
    return rows


def _attack_points(res: EvasionResult) -> list[tuple[float, CountedAccuracy]]:
    """(radius, counted accuracy) of one attack from radius 0: the clean accuracy first, unless radius 0 was asked."""
    kept = (~res.success).sum(axis=1)
    points = [(float(r), counted_accuracy(int(k), res.num_examples)) for r, k in zip(res.radii, kept)]
    if res.radii[0] > 0:
        points.insert(0, (0.0, counted_accuracy(int(res.clean_correct.sum()), res.num_examples)))
    return points


def robust_rows(runs: Sequence[CertifiedRun]) -> list[RobustRow]:
    """Long table: defense, model, attack, radius (from 0), robust accuracy, clean accuracy of the attacked classifier
    and its prediction rule, each accuracy with its count and 95 % Clopper–Pearson interval."""
    rows = []
    for run in runs:
        for name, res in run.attacks.items():
            clean = counted_accuracy(int(res.clean_correct.sum()), res.num_examples)
            for radius, c in _attack_points(res):
                rows.append(
                    RobustRow(
                        defense=run.summary.defense,
                        model_id=run.summary.model_id,
                        attack=name,
                        norm=res.norm,
                        radius=radius,
                        robust_accuracy=c.share,
                        clean_accuracy=clean.share,
                        prediction_rule=run.attack_rule(name),
                        num_examples=res.num_examples,
                        robust_count=c.correct,
                        robust_ci_low=c.low,
                        robust_ci_high=c.high,
                        clean_count=clean.correct,
                        clean_ci_low=clean.low,
                        clean_ci_high=clean.high,
                        confidence=ACCURACY_CONFIDENCE,
                    )
                )
    return rows


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
                epsilon_ub_cell(s.epsilon),  # an upper bound: rounded up, as in the section titles
                s.robustness_epsilon,
                s.attack_norm_bound,
                s.noise_std,
                s.sensitivity,
                s.num_examples,
                s.num_draws,
                s.draws_per_second,
            ]
        )
    return Table(
        columns=["defense", "model", "DP ε", "ε_r", "L", "σ", "Δ_r", "examples", "draws", "draws/s"],
        rows=rows,
        caption=(
            "σ: base noise std of the noise layer (of the input noise for a "
            "smoothing model, whose ε_r and L are blank); "
            "Δ_r: its measured (r-weighted) sensitivity in the attack norm. Each model's "
            "accuracies, with the classifier each is of, are in its own section below."
        ),
    )


def _claim_block(run: CertifiedRun) -> Any:
    if run.record is None:
        return Text(text="The model's record is not in this run directory, so its privacy claim cannot be shown.")
    delta = run.record.metrics.get("delta") or run.summary.delta or 1e-5
    return accountant_table(
        run.record.claim.epsilons(delta=float(delta)), delta=float(delta), description=run.record.claim.statement()
    )


def _cell(c: CountedAccuracy) -> Shown:
    """An accuracy beside its count ("82.5% (33/40)"); its value is the share (CSV, sorting)."""
    return Shown(c.share, c.text.split(";")[0] + ")")


def _ci_cell(c: CountedAccuracy) -> Shown:
    """Its interval, "67.2–92.7%"; its value is the lower end."""
    return Shown(c.low, c.interval_text)


def runs_verdict(runs: Sequence[CertifiedRun]) -> Verdict:
    """Unsound, vacuous at these radii, not checked or sound (:func:`~dpaudit.results.verdicts.certified_verdict`),
    from what ``certify`` stored for each model."""
    return certified_verdict(
        [
            (r.summary.model_id, [x.to_dict() for x in r.soundness_violations], bool(r.certificates and r.attacks))
            for r in runs
        ],
        reach=[x for r in runs for x in r.reach()],
        attacked=[x for r in runs for x in r.attacked()],
    )


def classifier_table(run: CertifiedRun) -> Table:
    """Every curve of the model's figure, the classifier it is of, and that classifier's accuracy at radius 0."""
    rows: list[list[Any]] = []
    for name, cert in run.certificates.items():
        c = counted_accuracy(cert.num_correct, cert.num_points)
        rows.append(
            [
                f"certified {name}",
                run.prediction_rule(name),
                _cell(c),
                _ci_cell(c),
                epsilon_lb_cell(cert.largest_certified_radius),  # a radius certified: rounded down
            ]
        )
    for name, res in run.attacks.items():
        c = counted_accuracy(int(res.clean_correct.sum()), res.num_examples)
        rows.append([f"robust under {name}", run.attack_rule(name), _cell(c), _ci_cell(c), None])
    return Table(
        columns=["curve", "classifier (prediction rule)", "accuracy at radius 0", "95% CI", "largest certified radius"],
        rows=rows,
        name=f"classifiers-{run.summary.model_id}",
        caption=(
            "Radius 0 is the conventional accuracy of a certificate's classifier (an abstention counts as "
            "wrong) and the clean accuracy of the classifier an attack ran against. A certificate's "
            "rule and an attack's rule can differ, so their radius-0 accuracies can differ; a robust "
            "accuracy reads against its own classifier's clean accuracy, never against another's. "
            f"Intervals: two-sided {ACCURACY_CONFIDENCE:.0%} Clopper–Pearson on the counts. Largest certified "
            "radius: over the correctly predicted test points."
        ),
    )


def accuracy_table(run: CertifiedRun) -> Table:
    """Accuracy of every curve at every radius (from 0), beside its count and 95 % interval."""
    curves: list[tuple[str, list[tuple[float, CountedAccuracy]]]] = [
        (
            f"certified {name}",
            [
                (float(r), counted_accuracy(int(k), cert.num_points))
                for r, k in zip(run.curve_radii, cert.num_certified(run.curve_radii))
            ],
        )
        for name, cert in run.certificates.items()
    ]
    curves += [(f"robust under {name}", _attack_points(res)) for name, res in run.attacks.items()]
    if len(run.attacks) > 1:
        first = next(iter(run.attacks.values()))
        broken = np.zeros_like(first.success)
        for res in run.attacks.values():
            broken = broken | res.success
        kept = (~broken).sum(axis=1)
        pts = [(float(r), counted_accuracy(int(k), first.num_examples)) for r, k in zip(first.radii, kept)]
        if first.radii[0] > 0:
            clean = np.ones(first.num_examples, dtype=bool)
            for res in run.attacks.values():
                clean &= res.clean_correct
            pts.insert(0, (0.0, counted_accuracy(int(clean.sum()), first.num_examples)))
        curves.append(("robust under all attacks", pts))
    rows = [
        [Shown(r, f"{r:g}"), label, _cell(c), _ci_cell(c)]
        for r in sorted({r for _, pts in curves for r, _ in pts})
        for label, pts in curves
        for rr, c in pts
        if rr == r
    ]
    return Table(
        columns=["radius", "curve", "accuracy", "95% CI"],
        rows=rows,
        name=f"accuracy-{run.summary.model_id}",
        caption=(
            "Certified accuracy is a lower bound on the robust accuracy of the certificate's classifier, "
            "and an attack's robust accuracy an upper bound on that of the classifier it ran against "
            "(the classifiers are named in the table above). Robust under all attacks: an example counts "
            "as broken if any attack broke it."
        ),
    )


def certified_sections(
    runs: Sequence[CertifiedRun], eps_rows: Sequence[AccuracyEpsilonRow], csv_files: Sequence[Path] = ()
) -> list[Section]:
    """The certified report's sections: verdict, overview, one section per model, accuracy vs ε."""
    overview: list[Any] = []
    # The verdict is judged in the core from what certify stored; the page draws the box.
    verdict = runs_verdict(runs)
    if runs:
        overview.append(_run_table(runs))
        fig = comparison_figure(runs)
        overview.append(
            Figure(
                figure=fig,
                name="comparison",
                caption=comparison_caption(fig),
                empty="no model in this run holds a certificate (none has a noise layer)",
            )
        )
    else:
        overview.append(Text(text="No certified models in this run directory (run dpaudit certify first)."))
    sections = [verdict_section(verdict), Section(title="Certified accuracy", blocks=overview)]
    for run in runs:
        blocks: list[Any] = [_claim_block(run)]
        fig = certified_figure(run)
        blocks.append(
            Figure(
                figure=fig,
                name=f"model-{run.summary.model_id}",
                caption=certified_caption(fig),
                empty="no certificate and no attack result stored for this model",
            )
        )
        if run.certificates or run.attacks:
            blocks += [classifier_table(run), accuracy_table(run)]
        sections.append(Section(title=f"{run.label} — {run.summary.model_id}", blocks=blocks))
    eps_table = Table(
        columns=["defense", "model", "ε", "δ", "conv. acc", "95% CI", "source"],
        rows=[
            [
                r.defense,
                r.model_id,
                r.epsilon,
                r.delta,
                _cell(counted_accuracy(r.correct, r.num_points))
                if r.correct is not None and r.num_points
                else Shown(r.conventional_accuracy, fmt_percent(r.conventional_accuracy)),
                _ci_cell(counted_accuracy(r.correct, r.num_points)) if r.correct is not None and r.num_points else None,
                r.source,
            ]
            for r in eps_rows
        ],
        caption=(
            "A certified model's accuracy is its own certificate's classifier's, with its count and "
            f"{ACCURACY_CONFIDENCE:.0%} Clopper–Pearson interval; an uncertified record's is its test accuracy, "
            "over the test-set size the record keeps beside it — a record stored before that size was kept "
            "has no interval (—)."
        ),
    )
    sections.append(
        Section(
            title="Conventional accuracy against DP ε",
            blocks=[
                Figure(
                    figure=accuracy_epsilon_figure(eps_rows),
                    name="accuracy-vs-epsilon",
                    caption="Conventional accuracy against the training data's ε (at each record's δ)",
                    # The figure is left out for two reasons: say the one that holds (the table
                    # below gives the ε of every record that has one).
                    empty=(
                        "one DP ε per defense in this run: a curve needs two of one defense, so the table below "
                        "gives each record's accuracy at its ε"
                        if eps_rows
                        else "no record in this run has a finite DP ε"
                    ),
                ),
                *([eps_table] if eps_rows else []),
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
