"""The PATE report: what each student's answers cost (ε against queries answered) and bought (accuracy).

Reads PATE student records and the ``pate.npz`` saved beside each (:mod:`defenses.pate.defense`:
the queries, which were answered, and ε after each query); never the record's ``private/``
folder (votes, noise, partitions, the un-sanitised data-dependent ε of a run that claims
another bound), whose values are not for publication. Every ε shown says
whether it is data-dependent (computed from the private votes, as Papernot et al. 2017 and 2018
report it; realised: Confident-GNMax charged for the queries it answered) and whether it was
released with smooth sensitivity, as a noisy estimate; a data-dependent ε that was not sanitised
is itself private information, and the page says so.

No torch: reports render from stored results alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure

from dpaudit import _validate as v
from dpaudit.parts import record_report_kind
from dpaudit.privacy.pate.claim import settings_used
from dpaudit.results.membership_rates import Estimate
from dpaudit.results.record import TrainedModel, load_record
from dpaudit.results.record_accuracy import (
    counted_share,
    counted_test_accuracy,
    mean_accuracy_estimate,
    stored_test_examples,
)
from dpaudit.results.verdicts import Verdict, record_delta
from dpaudit.store import RunDir, load_npz, thaw
from reports.figures import DASH_CYCLE, MARKER_CYCLE, SERIES_COLOURS, eps_ub_text, legend_outside, new_axes
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import fmt_percent, fmt_upper_bound
from reports.render import Figure, Section, Table, Text, write_report_files
from reports.verdict_box import verdict_section, with_status

#: This kind's name: the report kind the PATE defense names for its students.
KIND_NAME = "pate"

__all__ = [
    "pate_verdict",
    "students_verdict",
    "PateRun",
    "PateRow",
    "PublishedRow",
    "load_pate_runs",
    "pate_label",
    "pate_rows",
    "epsilon_answers_figure",
    "accuracy_epsilon_figure",
    "accuracy_epsilon_sentence",
    "pate_sections",
    "load_pate_students",
    "pate_page",
]


@dataclass(frozen=True, kw_only=True)
class PateRun:
    """A PATE student's record with its stored answers.

    Attributes:
        record: the student's record (its claim is the PATE claim).
        answered: bool per query, which were answered.
        epsilon_curve: ε (at the record's δ) after each query.
        record_dir: where it is stored.
    """

    record: TrainedModel
    answered: np.ndarray
    epsilon_curve: np.ndarray
    record_dir: Path

    @property
    def delta(self) -> float:
        return float(self.record.config.get("delta") or 1e-5)


def load_pate_runs(run_dir: str | Path | RunDir) -> list[PateRun]:
    """Every record of the run its defense has this kind show (PATE students with their ``pate.npz``), sorted by model
    id."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    out = []
    for d in run.record_dirs():
        record = load_record(d)
        if record_report_kind(record.defense, d) != KIND_NAME:
            continue
        arrays = load_npz(d / "pate.npz")
        out.append(
            PateRun(
                record=record,
                answered=np.asarray(arrays["answered"], dtype=bool),
                epsilon_curve=np.asarray(arrays.get("epsilon_curve", ()), dtype=float),
                record_dir=d,
            )
        )
    return out


def _answers_label(record: TrainedModel) -> str:
    c = settings_used(thaw(record.config), record.metrics)
    # Only the aggregator's own parameters are set (a GNMax run has no threshold).
    noise = {
        # 4 significant digits: a calibrated sigma (4.37109…) reads as 4.371 in a legend.
        "lnmax": lambda: f"b={c['laplace_scale']:.4g}",
        "gnmax": lambda: f"σ={c['sigma']:.4g}",
        "confident-gnmax": lambda: f"T={c['threshold']:.4g} σ1={c['threshold_sigma']:.4g} σ2={c['sigma']:.4g}",
    }[str(c["aggregator"])]()
    return f"{record.dataset} {c['aggregator']} {noise}, teachers {c['epochs']:g} ep."


def pate_label(record: TrainedModel) -> str:
    """A short name: dataset, aggregator and its noise, and the student's mode."""
    return (
        f"{_answers_label(record)}, "
        f"{'semi-sup.' if thaw(record.config).get('semi_supervised') else 'supervised'} "
        "student"
    )


@dataclass(frozen=True, kw_only=True)
class PateRow:
    """One student of the PATE table: its answers, their ε and the student's accuracy.

    Counts and accuracies are the record's metrics as stored (``None`` where a record lacks one).

    Attributes:
        label: :func:`pate_label` of the record.
        model_id: the student's record.
        teachers: the teachers that voted.
        queries: queries the student asked.
        answered: queries answered.
        answer_accuracy: share of the answered labels that are correct.
        epsilon: the claim's ε at ``delta`` (RDP accountant).
        epsilon_data_dependent_realised: the data-dependent ε of the answered queries (private;
            ``None`` when the record keeps it only under ``private/``).
        epsilon_data_dependent_realised_improved: the same by the improved conversion.
        epsilon_data_independent: the data-independent ε of the same answers.
        epsilon_noisy_estimate: the smooth-sensitivity release of the data-dependent ε.
        data_dependent: whether the claim is data-dependent.
        sanitised: whether it was released with smooth sensitivity.
        delta: the record's δ.
        student_accuracy: the student's test accuracy.
        teacher_accuracy_mean: the teachers' mean test accuracy (records that keep it public).
        test_examples: the test-set size the student's record holds (``None`` for a record stored
            before it was kept): the count behind the accuracies' intervals.
    """

    label: str
    model_id: str
    teachers: int | None
    queries: int | None
    answered: int | None
    answer_accuracy: float | None
    epsilon: float
    epsilon_data_dependent_realised: float | None
    epsilon_data_dependent_realised_improved: float | None
    epsilon_data_independent: float | None
    epsilon_noisy_estimate: float | None
    data_dependent: bool
    sanitised: bool
    delta: float
    student_accuracy: float | None
    teacher_accuracy_mean: float | None
    test_examples: int | None = None

    def student_estimate(self) -> Estimate | None:
        """The student's test accuracy with its 95% Clopper–Pearson interval (``None`` without the count)."""
        if self.student_accuracy is None or self.test_examples is None:
            return None
        return counted_test_accuracy({"test_accuracy": self.student_accuracy, "test_examples": self.test_examples})

    def teacher_estimate(self) -> Estimate | None:
        """The teachers' mean accuracy on the same test set with Hoeffding's 95% interval (their errors are not
        independent: :func:`~dpaudit.results.record_accuracy.mean_accuracy_estimate`)."""
        if self.teacher_accuracy_mean is None or self.test_examples is None:
            return None
        return mean_accuracy_estimate(float(self.teacher_accuracy_mean), self.test_examples)

    def answer_estimate(self) -> Estimate | None:
        """The share of answered labels that are correct, with its Clopper–Pearson interval over the answers."""
        return counted_share(self.answer_accuracy, self.answered)  # no share of the answers: no interval made up


@dataclass(frozen=True, kw_only=True)
class PublishedRow:
    """A number a paper reports, drawn beside the measured students (hollow) and listed in its own table.

    Attributes:
        label: what the row is (e.g. the paper and dataset).
        epsilon: the ε the paper reports.
        accuracy: the student accuracy it reports.
        answered: the queries it answered (``None``: not reported).
        source: where the number comes from.
    """

    label: str
    epsilon: float
    accuracy: float
    answered: int | None = None
    source: str = ""

    @classmethod
    def from_mapping(cls, row: Mapping[str, object]) -> PublishedRow:
        """A row given as a mapping (a script's table): ``label``, ``epsilon``, ``accuracy``, optional ``answered``
        and ``source``.

        Raises:
            ValueError: a key it does not know, or one it needs is missing.
            TypeError: a value of the wrong type (each named).
        """
        known = ("label", "epsilon", "accuracy", "answered", "source")
        unknown = sorted(str(k) for k in row if k not in known)
        if unknown:
            raise v.invalid("published", f"published rows take {', '.join(known)}, got unknown {unknown}")
        missing = [k for k in known[:3] if k not in row]
        if missing:
            raise v.invalid("published", f"published row {v.short(dict(row))} is missing {missing[0]!r}")
        label, epsilon, accuracy = row["label"], row["epsilon"], row["accuracy"]
        answered, source = row.get("answered"), row.get("source", "")
        if not isinstance(label, str) or not isinstance(source, str):
            raise v.invalid_type("published", f"published label and source must be text, got {v.short(dict(row))}")
        if not isinstance(epsilon, (int, float)) or not isinstance(accuracy, (int, float)):
            raise v.invalid_type(
                "published", f"published epsilon and accuracy must be numbers, got {v.short(dict(row))}"
            )
        if answered is not None and not isinstance(answered, int):
            raise v.invalid_type("published", f"published answered must be an integer, got {v.short(answered)}")
        return cls(label=label, epsilon=epsilon, accuracy=accuracy, answered=answered, source=source)


def _published_rows(published: Sequence[PublishedRow | Mapping[str, object]]) -> list[PublishedRow]:
    return [p if isinstance(p, PublishedRow) else PublishedRow.from_mapping(p) for p in published]


def pate_rows(runs: Sequence[PateRun]) -> list[PateRow]:
    """One row per student: the aggregator, answers, its ε (claimed, realised data-dependent, released,
    data-independent) and the student's accuracy."""
    rows = []
    for r in runs:
        m, claim = r.record.metrics, r.record.claim
        rows.append(
            PateRow(
                label=pate_label(r.record),
                model_id=r.record.model_id,
                teachers=m.get("num_teachers"),
                queries=m.get("num_queries"),
                answered=m.get("num_answered"),
                answer_accuracy=m.get("answer_accuracy"),
                epsilon=claim.epsilon(delta=r.delta, accountant="rdp"),
                # Records stored before the realised cost was named so hold the same value under
                # the old key (training always charged the answered queries).
                epsilon_data_dependent_realised=m.get(
                    "epsilon_data_dependent_realised", m.get("epsilon_data_dependent")
                ),
                epsilon_data_dependent_realised_improved=m.get(
                    "epsilon_data_dependent_realised_improved", m.get("epsilon_data_dependent_improved")
                ),
                epsilon_data_independent=m.get("epsilon_data_independent"),
                epsilon_noisy_estimate=m.get("epsilon_noisy_estimate", m.get("epsilon_smooth_sensitivity")),
                data_dependent=claim.data_dependent,
                sanitised=claim.sanitised,
                delta=r.delta,
                student_accuracy=m.get("test_accuracy"),
                teacher_accuracy_mean=m.get("teacher_test_accuracy_mean"),
                test_examples=stored_test_examples(m),
            )
        )
    return rows


def epsilon_answers_figure(runs: Sequence[PateRun], *, ax: Axes | None = None) -> MplFigure | None:
    """ε after each query against the number of queries answered so far, one line per student."""
    if not runs:
        return None
    fig, ax = new_axes(ax, size=(7.5, 4.0))
    # Students of the same answers (a semi-supervised and a supervised one) share one curve: one line, both named.
    groups: dict[tuple[str, bytes], list[PateRun]] = {}
    for r in runs:
        if r.epsilon_curve.shape != r.answered.shape:
            continue  # written before the curve was stored: in the table, not on this plot
        groups.setdefault((_answers_label(r.record), r.epsilon_curve.tobytes()), []).append(r)
    for i, ((label, _), members) in enumerate(groups.items()):
        r = members[0]
        modes = sorted({"semi-sup." if thaw(m.record.config).get("semi_supervised") else "supervised" for m in members})
        # Colour, dash and end marker change from line to line, so no two lines look alike in print;
        # shorter curves are drawn on top, so a long one never hides a short one that follows it.
        x = np.cumsum(r.answered)
        colour, mark, dash = _look(i)
        ax.plot(
            x,
            r.epsilon_curve,
            color=colour,
            linestyle=dash,
            linewidth=1.6,
            zorder=3 + 1.0 / max(int(x[-1]) if len(x) else 1, 1),
            marker=mark,
            markevery=[len(x) - 1],
            label=f"{label}, {' and '.join(modes)} student{'s' if len(modes) > 1 else ''}",
        )
    ax.set_xlabel("queries answered")
    # The plotted curve is the one the record publishes: its claim's own analysis (a private
    # data-dependent curve is never published, so never drawn).
    analyses = sorted(
        {str(thaw(r.record.config).get("analysis", "data-independent")) for m in groups.values() for r in m}
    )
    ax.set_ylabel(
        f"ε claimed ({analyses[0]} analysis)" if len(analyses) == 1 else "ε claimed (each student's analysis)"
    )
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return fig


def accuracy_epsilon_figure(
    rows: Sequence[PateRow], *, published: Sequence[PublishedRow] = (), ax: Axes | None = None
) -> MplFigure | None:
    """Student accuracy against ε: measured students (filled) and published rows (hollow, only where given).

    Returns:
        The figure, or ``None`` when there are fewer than two points: one point on axes zoomed
        around it says nothing a sentence would not (:func:`accuracy_epsilon_sentence`).
    """
    # A student without a measured accuracy has no point here (the table says "—").
    points = [
        (row.epsilon, row.student_accuracy, f"measured: {row.label}", "full", row.student_estimate())
        for row in rows
        if row.student_accuracy is not None
    ]
    points += [(pub.epsilon, pub.accuracy, f"published: {pub.label}", "none", None) for pub in published]
    if len(points) < 2:
        return None
    fig, ax = new_axes(ax, size=(7.5, 4.0))
    # Points that coincide are drawn largest first, so each stays visible around the next.
    seen: dict[tuple[float, float], int] = {}
    for i, (x, y, label, fill, est) in enumerate(points):
        key = (round(float(x), 6), round(float(y), 6))
        dup = seen.get(key, 0)
        seen[key] = dup + 1
        colour, mark, _ = _look(i)
        if est is not None:
            # A measured student's 95% Clopper–Pearson interval (a published row has none to draw).
            ax.errorbar(
                [x], [y], yerr=[[y - est.low], [est.high - y]], color=colour, linestyle="none", elinewidth=0.8, zorder=1
            )
        ax.plot(
            [x],
            [y],
            linestyle="none",
            marker=mark,
            color=colour,
            markersize=max(12 - 4 * dup, 4),
            zorder=2 + dup,
            label=label,
            # Hollow for a published row; None is matplotlib's own default (filled in the line's colour).
            markerfacecolor="none" if fill == "none" else None,
        )
    ax.margins(0.12)  # no marker cut by the frame
    ax.set_xlabel("ε of the student's labels")
    ax.set_ylabel("student test accuracy")
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return fig


def accuracy_epsilon_sentence(rows: Sequence[PateRow], published: Sequence[PublishedRow] = ()) -> str:
    """What the accuracy-against-ε plot would show, in words, when it has fewer than two points."""
    points = [
        f"{r.label}: ε = {eps_ub_text(r.epsilon)}, test accuracy "
        f"{_shown(r.student_estimate(), r.student_accuracy)} (measured here)"
        for r in rows
    ]
    points += [f"{p.label}: ε = {eps_ub_text(p.epsilon)}, accuracy {_pct(p.accuracy)} (published)" for p in published]
    return ("one student only — " + points[0] + "; a single point is not plotted") if points else "no student to plot"


def _look(i: int) -> tuple[str, str, str]:
    """(colour, marker, dash) of the i-th series from the style module's cycles: no two of the first 48 alike."""
    n = len(SERIES_COLOURS)
    return SERIES_COLOURS[i % n], MARKER_CYCLE[i % len(MARKER_CYCLE)], DASH_CYCLE[(i // n) % len(DASH_CYCLE)]


def _eps(x: Any) -> str:
    """A PATE ε (every one an upper bound, data-dependent or not) rounded up."""
    return fmt_upper_bound(None if x is None else float(x))


def _pct(x: Any) -> str:
    return fmt_percent(None if x is None else float(x))


def _shown(est: Estimate | None, x: Any) -> str:
    """An accuracy with its count and interval where known, else as a bare percentage."""
    return est.text() if est is not None else _pct(x)


def _fmt(x: Any) -> Any:
    return "—" if x is None else x


def _noise_note(record: TrainedModel) -> str:
    """A warning when the aggregator's noise was seeded (its answers are then not private)."""
    source = record.metrics.get("aggregator_noise")
    if isinstance(source, str) and "not private" in source:
        return (
            " NOT PRIVATE: the aggregator's noise was drawn from "
            f"{source.split(':')[0]} (reproducible: anyone with the seed can remove "
            "it)."
        )
    return ""


def pate_sections(
    runs: Sequence[PateRun], *, published: Sequence[PublishedRow | Mapping[str, object]] = ()
) -> list[Section]:
    """The PATE page: a table of students, ε against answers, accuracy against ε, and what ε means.

    Args:
        runs: the students.
        published: numbers the papers report, as :class:`PublishedRow` values or mappings of its fields.

    Raises:
        ValueError, TypeError: a published row :meth:`PublishedRow.from_mapping` refuses.
    """
    rows = pate_rows(runs)
    papers = _published_rows(published)
    table = Table(
        columns=[
            "student",
            "teachers (their mean acc.)",
            "answered / asked",
            "label acc.",
            "ε data-dep., realised, private (improved conv.)",
            "ε released (noisy estimate, smooth sens.)",
            "ε data-indep.",
            "student acc.",
        ],
        rows=[
            [
                r.label,
                # Teachers' accuracy is private since records keep it under private/ (older ones show it).
                f"{r.teachers}"
                + (
                    " (accuracy kept private)"
                    if r.teacher_accuracy_mean is None
                    else f" ({_shown(r.teacher_estimate(), r.teacher_accuracy_mean)})"
                ),
                f"{r.answered} / {r.queries}",
                _shown(r.answer_estimate(), r.answer_accuracy),
                (
                    f"{_eps(r.epsilon_data_dependent_realised)} ({_eps(r.epsilon_data_dependent_realised_improved)})"
                    if r.epsilon_data_dependent_realised is not None
                    else "kept private"
                ),
                _eps(r.epsilon_noisy_estimate) if r.sanitised else "not released",
                _eps(r.epsilon_data_independent),
                _shown(r.student_estimate(), r.student_accuracy),
            ]
            for r in rows
        ],
        caption=(
            "ε at δ = "
            + ", ".join(sorted({f"{r.delta:g}" for r in rows}))
            + " by the standard RDP conversion (the improved conversion in brackets). 'Realised': "
            "Confident-GNMax's GNMax step is charged to the queries it answered "
            "(not the expectation over the threshold step of the 2018 scripts). A "
            "data-dependent "
            "ε is computed from the private votes and is not for publication ('kept "
            "private': the record holds it only under private/, as the claim is "
            "another bound); "
            "the released ε is its smooth-sensitivity release, a noisy estimate (not a bound). "
            "Each record claims the data-dependent ε unless its statement below "
            "says otherwise. 'label acc.': share of the answered labels that are "
            "correct. Accuracies with their 95% interval in brackets: Clopper–Pearson for the student's "
            "count of the test set and the answered labels, Hoeffding's for the teachers' mean (scored on "
            "the same test examples, their errors are not independent); none where the record was stored "
            "before it kept its test-set size. The teachers' accuracy is a statistic of the private data: a record "
            "keeps it under private/, and the table shows it only for records stored before that."
        ),
    )
    statements = [
        Text(text=f"{pate_label(r.record)}: {r.record.claim.statement()}{_noise_note(r.record)}") for r in runs
    ]
    accuracy = accuracy_epsilon_figure(rows, published=papers)
    blocks: list[Any] = [table, *statements]
    if papers:
        blocks.append(
            Table(
                columns=["published row", "answered", "ε", "accuracy", "source"],
                rows=[[p.label, _fmt(p.answered), p.epsilon, p.accuracy, p.source] for p in papers],
                caption="Numbers reported by the papers (recalled in docs/defenses/pate.md §2–§3).",
            )
        )
    return [
        verdict_section(students_verdict(runs)),
        Section(title="Students and their privacy cost", blocks=blocks),
        Section(
            title="ε against queries answered",
            blocks=[
                Figure(
                    figure=epsilon_answers_figure(runs),
                    name="pate-epsilon-answered",
                    caption="Each answered query adds RDP; Confident-GNMax's unanswered queries "
                    "cost only the threshold step.",
                )
            ],
        ),
        Section(
            title="Student accuracy against ε",
            blocks=[
                Figure(
                    figure=accuracy,
                    name="pate-accuracy-epsilon",
                    # The caption names only what is drawn: hollow markers only where published numbers were given.
                    caption="Student test accuracy against ε"
                    + (
                        ("; filled: measured here" + ("; hollow: published (docs/defenses/pate.md)" if papers else ""))
                        if accuracy
                        else ""
                    ),
                    empty=accuracy_epsilon_sentence(rows, papers),
                )
            ],
        ),
    ]


# ------------------------------------------------------------------------------------- verdict
def _answers_text(m: Mapping[str, object]) -> str:
    """The share of correct answers with its count and interval where the number answered is stored."""
    value = m["answer_accuracy"]
    est = counted_share(value, m.get("num_answered"))  # a share of the answers, as training stores it
    return est.text() if est is not None else fmt_percent(float(value) if isinstance(value, (int, float)) else None)


def pate_verdict(students: Sequence[TrainedModel]) -> Verdict:
    """The most accurate student: its accuracy and ε, data-dependent beside data-independent."""
    if not students:
        return Verdict(status="no students", headline="No PATE student is stored.", tone="info")
    best = max(students, key=lambda s: (float(s.metrics.get("test_accuracy") or 0.0), s.model_id))
    delta = record_delta(best)
    claim, m = best.claim, best.metrics
    eps = claim.epsilon(delta=delta, accountant="rdp")
    indep = m.get("epsilon_data_independent")
    dependent = bool(getattr(claim, "data_dependent", False))
    sanitised = bool(getattr(claim, "sanitised", False))
    analysis = "data-dependent analysis" if dependent else "data-independent analysis"
    lines = [
        f"{best.model_id}: {m.get('num_answered', '?')} of "
        f"{m.get('num_queries', '?')} queries answered by "
        f"{m.get('num_teachers', '?')} teachers"
        + (f", {_answers_text(m)} of the answers correct." if m.get("answer_accuracy") is not None else "."),
    ]
    if indep is not None:
        lines.append(
            f"Data-independent analysis of the same answers: ε = {fmt_upper_bound(float(indep))} at δ = {delta:g}."
        )
    if len(students) > 1:
        lines.append(f"{len(students)} students in this run; the table below lists each.")
    counted = counted_test_accuracy(m)
    acc = counted.text() if counted is not None else fmt_percent(m.get("test_accuracy"))
    headline = (
        f"The most accurate student reaches {acc} test accuracy at ε = "
        f"{fmt_upper_bound(eps)} (δ = {delta:g}, {analysis}"
    )
    if dependent and not sanitised:
        lines.append(
            "A data-dependent ε is computed from the private votes: publishing it "
            "is itself not private unless sanitised (smooth sensitivity)."
        )
        return Verdict(
            status="data-dependent ε", headline=headline + ", not sanitised).", lines=tuple(lines), tone="warn"
        )
    if dependent:
        return Verdict(
            status="data-dependent ε, sanitised", headline=headline + ", sanitised).", lines=tuple(lines), tone="info"
        )
    return Verdict(status="data-independent ε", headline=headline + ").", lines=tuple(lines), tone="info")


def students_verdict(runs: Sequence[PateRun]) -> Verdict:
    """The PATE page's verdict: :func:`pate_verdict` of the run's students."""
    return pate_verdict([r.record for r in runs])


def load_pate_students(run: RunDir) -> list[tuple[PateRun, ...]]:
    """The run's PATE students as the one item of the PATE report (none when it holds none)."""
    runs = tuple(load_pate_runs(run)) if run.subdir("records").is_dir() else ()
    return [runs] if runs else []


def pate_page(runs: tuple[PateRun, ...], out: Path) -> Page:
    """Writes ``pate.{html,md}`` and its figures into ``out``."""
    sections = pate_sections(runs)
    page = write_report_files(out, sections, title="PATE students", stem="pate", kind="report").html
    return Page(html=page, link=with_status(f"PATE students ({len(runs)})", sections))


REPORT_KINDS.register(
    ReportKind(
        name=KIND_NAME, group="PATE", order=50, load=load_pate_students, verdict=students_verdict, render=pate_page
    )
)
