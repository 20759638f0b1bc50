"""The report run: render every stored result of a run directory as HTML + Markdown, with an index.

``render_reports(run_dir)`` renders every registered report kind
(:data:`reports.kinds.REPORT_KINDS`, in index order): each kind loads its items from the
:class:`dpaudit.store.RunDir` and writes one page per item under ``RunDir.reports_dir()``. The
kinds of ``reports/`` write:

* ``compare-<name>.{html,md}`` per comparison (the defense × measure matrix and its figures, with
  the matrix as CSV and the summary as JSON);
* ``audit-<name>.{html,md}`` per audit (ε_LB beside ε_UB under every accountant, scores, ROC, and
  ε_LB with its ceiling against the number of trials, recomputed on prefixes of the scores);
* ``membership-<model>.{html,md}`` per attacked target (AUC, TPR@FPR, ε_LB, log–log ROC, the
  target's claimed ε under every accountant);
* ``certified.{html,md}`` (certified vs conventional accuracy vs radius; non-empty CSV tables);
* ``pate.{html,md}`` for PATE students (answers, data-dependent and data-independent ε, ε against
  queries answered, student accuracy against ε);
* ``inversion.{html,md}`` for model-inversion attacks (evaluator's attack accuracy, KNN distance,
  PSNR, members vs class average, inversion-based membership ε_LB beside the target's ε_UB, image
  grids per class, and the targets compared when there are several);
* ``index.{html,md}`` linking them all, one heading per kind.

Beside every page, each figure as PNG, SVG, PDF and its data as CSV, and each table as CSV and
LaTeX (:mod:`reports.exports`). ``format`` picks the pages: ``html`` (the default, as before:
HTML with a Markdown twin), ``md`` (Markdown only) or ``latex`` (a standalone ``.tex`` per page
and ``index.tex`` gathering them all).

It recomputes no verdict: violations, tightness and soundness are read from the stored results,
after :func:`_verify` has refused, before anything is written, a run whose stored files
contradict themselves or reach outside it (:mod:`dpaudit.app.runs.report_checks`) and any
record the verifier ``attack`` uses refuses (:func:`dpaudit.app.records.verify_record`, which
loads the defense registry and so torch). The pages themselves render without torch
(docs/architecture.md, "Import rule").
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit import _validate as v
from dpaudit.results import load_record
from dpaudit.store import RunDir

__all__ = ["ReportIndex", "NothingToRender", "render_reports"]


class NothingToRender(v.InvalidArgument):
    """The run directory holds no stored result any report could show."""

    argument = "run_dir"


@dataclass(frozen=True, kw_only=True)
class ReportIndex:
    """What :func:`render_reports` wrote: the index, every report kind's pages (HTML under the
    default format, else the format's ``.md`` or ``.tex``; figures and tables beside them), the
    tables and the stored violations.

    The pages of one kind are also an attribute named after it (``index.audits``,
    ``index.compare``, …): every registered kind has one, empty when the run held nothing of it.
    """

    #: ``index.html`` and ``index.md``; None where the format did not write them.
    index_html: Path | None = None
    index_md: Path | None = None
    #: The page format written (``html``, ``md`` or ``latex``; :data:`reports.render.REPORT_FORMATS`).
    format: str = "html"
    #: The index of the format written (``index.html``, ``index.md`` or ``index.tex``).
    index: Path | None = None
    #: (kind name, its HTML pages) per registered report kind, in index order.
    kinds: tuple[tuple[str, tuple[Path, ...]], ...] = ()
    tables: tuple[Path, ...] = ()
    #: Stored verdicts the reports show as violations (audits with ε_LB > ε_UB, unsound certificates), read, never
    #: recomputed.
    violations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.violations, tuple) or not all(isinstance(x, str) for x in self.violations):
            raise v.invalid_type("violations", f"violations must be a tuple of strings, got {self.violations!r}")
        if not isinstance(self.tables, tuple) or not all(isinstance(p, Path) for p in self.tables):
            raise v.invalid_type("tables", f"tables must be a tuple of Paths, got {self.tables!r}")
        if not isinstance(self.kinds, tuple) or not all(_is_kind_pages(entry) for entry in self.kinds):
            raise v.invalid_type(
                "kinds", f"kinds must be a tuple of (kind name, tuple of Paths) pairs, got {self.kinds!r}"
            )

    @property
    def pages(self) -> tuple[Path, ...]:
        """Every report page the index links (in the format written), in index order."""
        return tuple(page for _, pages in self.kinds for page in pages)

    def pages_of(self, kind: str) -> tuple[Path, ...]:
        """The pages of the report kind ``kind`` (in the format written).

        Raises:
            ValueError: no registered report kind is called ``kind``.
        """
        for name, pages in self.kinds:
            if name == kind:
                return pages
        raise v.invalid(
            "kind",
            "kind must name a report kind of this index "
            f"({', '.join(n for n, _ in self.kinds) or 'none'}), got {kind!r}",
        )

    def __getattr__(self, name: str) -> tuple[Path, ...]:
        # Only reached for names that are not fields: ``index.audits`` is pages_of("audits").
        for kind, pages in self.__dict__.get("kinds", ()):
            if kind == name:
                return pages
        raise AttributeError(
            f"{type(self).__name__!r} object has no attribute {name!r} (nor a report kind of that name)"
        )


def _is_kind_pages(entry: Any) -> bool:
    return (
        isinstance(entry, tuple)
        and len(entry) == 2
        and isinstance(entry[0], str)
        and isinstance(entry[1], tuple)
        and all(isinstance(p, Path) for p in entry[1])
    )


def _verify(run: RunDir) -> None:
    """Refuses, before anything is written, a run directory whose pages could lie
    (:func:`dpaudit.app.runs.report_checks.verify_run`: links out of the run, references that
    resolve elsewhere, results that contradict themselves), then every record a page shows,
    through the verifier ``attack`` uses (:func:`dpaudit.app.records.verify_record`): the pages
    would otherwise state an ε_UB, a dataset or a training the record's own run does not give."""
    from dpaudit.app.records import verify_record
    from dpaudit.app.runs.report_checks import verify_run

    referenced = verify_run(run)
    seen = set()
    for d in run.record_dirs():
        verify_record(load_record(d), d)
        seen.add(d)
    for d in referenced:  # a sub-model attacked (a PATE teacher, a DSSGD participant) is reported with its claim
        if d not in seen:
            verify_record(load_record(d), d)
            seen.add(d)


def render_reports(run_dir: str | os.PathLike[str] | RunDir, *, format: str = "html") -> ReportIndex:
    """Renders every stored result of ``run_dir``, one page per item of every report kind, and the index page.

    Args:
        run_dir: a run directory written by train / audit / attack / certify / compare.
        format: the pages' format: ``html`` (HTML with its Markdown twin), ``md`` or ``latex``.

    Returns:
        The files written, per kind.

    Raises:
        ValueError: ``run_dir`` is not a directory, ``format`` is not a report format, or a
            record or result in it contradicts itself, or a reference, link or symbolic link in
            it leads outside it (one line naming the file and field, before anything is written).
        NothingToRender: no report kind finds anything to show in it.
    """
    from dpaudit.parts import catalogue_from_registries, using_parts
    from reports.render import REPORT_FORMATS

    if format not in REPORT_FORMATS:
        raise v.invalid("format", f"format must be one of {', '.join(REPORT_FORMATS)}, got {format!r}")
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    if not run.path.is_dir():
        raise v.invalid("run_dir", f"run_dir must be a directory, got {str(run.path)!r}")
    _verify(run)  # before any loader reads a file a reference names
    # The parts' files, report kinds and looks, read once here: the pages then read no registry.
    with using_parts(catalogue_from_registries()):
        return _render(run, format=format)


def _render(run: RunDir, *, format: str) -> ReportIndex:
    from reports.kinds import ordered_kinds
    from reports.render import PAGE_SUFFIX, report_format, write_index_files

    found = [(kind, list(kind.load(run))) for kind in ordered_kinds()]
    if not any(items for _, items in found):
        raise NothingToRender(
            f"run_dir {str(run.path)!r} holds no trained model and no audit, "
            "membership-attack, certify, PATE, DSSGD or model-inversion results to "
            "render "
            "(run dpaudit train, audit, attack membership, attack inversion or certify into it first)"
        )
    out = run.reports_dir()
    out.mkdir(parents=True, exist_ok=True)
    with report_format(format):
        written = [(kind, [kind.render(item, out) for item in items]) for kind, items in found]
        groups = [(kind.group, [(page.link, page.html.name) for page in pages]) for kind, pages in written if pages]
        tables = tuple(table for _, pages in written for page in pages for table in page.tables)
        indexes = write_index_files(
            out, title=f"Reports of {run.path.name}", groups=groups, files=[p.name for p in tables]
        )
    by_suffix = {p.suffix: p for p in indexes}
    return ReportIndex(
        index_html=by_suffix.get(".html"),
        index_md=by_suffix.get(".md"),
        format=format,
        index=indexes[0],
        # A kind names its page by the HTML path; the page written is that stem in the format chosen.
        kinds=tuple(
            (kind.name, tuple(page.html.with_suffix(PAGE_SUFFIX[format]) for page in pages)) for kind, pages in written
        ),
        tables=tables,
        violations=tuple(line for _, pages in written for page in pages for line in page.violations),
    )
