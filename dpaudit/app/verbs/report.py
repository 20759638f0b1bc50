"""``dpaudit report RUN_DIR``: render every stored result of a run directory, with an index page.

Part of the application layer: parses, calls :func:`dpaudit.app.runs.report.render_reports`
and prints the index path. Before anything is written the run is verified (records through the
verifier ``attack`` uses, results that contradict themselves, references and links that leave
the run: :mod:`dpaudit.app.runs.report_checks`; exit 2 naming the file and field). Rendering
itself needs no torch and recomputes nothing: every registered
report kind (comparisons, audits, membership attacks, certify results, PATE students, model
inversion, …) is rendered from what the other verbs stored, as HTML and Markdown under
``RUN_DIR/reports/``; ``--json`` lists the pages under each kind's name. ``--format`` picks
the pages: ``html`` (the default: HTML with its Markdown twin, as before), ``md`` (Markdown
only) or ``latex`` (a standalone ``.tex`` per page, ``index.tex`` gathering them all); every
format writes each figure as PNG, SVG, PDF and data CSV, and each table as CSV and LaTeX. Exit status 3 when a
stored result carries a violation verdict (an audit with ε_LB > ε_UB, a certificate stored as
unsound, a compared defense whose bounds contradict each other).
"""

from __future__ import annotations

import argparse

from dpaudit.app.common import EXIT_OK, EXIT_VIOLATION, UsageError, emit

# The formats reports.render writes (REPORT_FORMATS there), listed here so --help needs no matplotlib import.
REPORT_FORMATS = ("html", "md", "latex")

__all__ = ["register"]


def _cmd_report(args: argparse.Namespace) -> int:
    from dpaudit.app.runs.report import NothingToRender, render_reports

    try:
        index = render_reports(args.run_dir, format=args.format)
    except NothingToRender as exc:
        raise UsageError(str(exc), argument="RUN_DIR") from None
    except ValueError as exc:
        raise UsageError(f"RUN_DIR {args.run_dir!r}: {exc}", argument="RUN_DIR") from None
    # One key per registered report kind (its pages), so a new kind appears without an edit here.
    payload = {
        "index": str(index.index),
        "format": index.format,
        **{kind: [str(p) for p in pages] for kind, pages in index.kinds},
        "tables": [str(p) for p in index.tables],
        "violations": list(index.violations),
    }
    lines = [f"reports: {index.index}"]
    lines += [f"  {p}" for p in index.pages]
    lines += [f"  VIOLATION {v}" for v in index.violations]
    emit(args, payload, "\n".join(lines))
    # Exit 3 repeats the stored verdicts (docs/architecture.md, "Command line"), so CI can gate on a re-render too.
    return EXIT_VIOLATION if index.violations else EXIT_OK


def _kinds_epilog() -> str:
    """The registered report kinds, in index order (read from the registry, never listed here)."""
    from reports.kinds import ordered_kinds

    return "report kinds, in index order: " + "; ".join(f"{kind.name} ({kind.group})" for kind in ordered_kinds())


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``report`` to the ``dpaudit`` parser."""
    p = sub.add_parser(
        "report",
        help="render a run directory's reports from stored results",
        description=__doc__.splitlines()[0],
        epilog=_kinds_epilog(),
    )
    p.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        help="run directory written by audit / attack membership|inversion / certify / train",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument(
        "--format",
        choices=REPORT_FORMATS,
        default="html",
        help="page format: html (with its Markdown twin; default), md (Markdown "
        "only) or latex (a standalone .tex per page and index.tex); "
        "every format writes figures as PNG, SVG, PDF and data CSV, tables as CSV and LaTeX",
    )
    p.set_defaults(func=lambda a: _cmd_report(a))
