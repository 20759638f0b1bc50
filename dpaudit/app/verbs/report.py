"""``dpaudit report RUN_DIR``: re-render a run directory's reports from its stored results.

Part of the application layer. Rendering needs no torch and recomputes nothing: it reads the
JSON + NPZ that ``certify`` (and the other verbs) stored. The certified-accuracy report
(certified vs conventional accuracy, robust accuracy under attack, accuracy against DP ε,
CSV tables) is written to ``RUN_DIR/reports/certified.html``; reports the other verbs
already wrote are listed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dpaudit.app.common import EXIT_OK, EXIT_VIOLATION, UsageError, emit

__all__ = ["register"]


def _cmd_report(args: argparse.Namespace) -> int:
    from reports.certified import (
        load_certified_runs,
        soundness_problems,
        write_certified_report,
    )

    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        raise UsageError(f"RUN_DIR {args.run_dir!r} is not a directory")
    runs = load_certified_runs(run_dir)
    has_records = any(run_dir.glob("records/*/record.json"))
    if not runs and not has_records:
        raise UsageError(f"RUN_DIR {args.run_dir!r} holds no records and no certify results (train or certify into it first)")
    path = write_certified_report(run_dir, runs=runs)
    problems = {r.summary["model_id"]: soundness_problems(r) for r in runs}
    others = sorted(str(p) for p in (run_dir / "reports").glob("*.html") if p != path)
    payload = {
        "report": str(path),
        "models": [r.summary["model_id"] for r in runs],
        "soundness_violations": {k: [list(x) for x in p] for k, p in problems.items() if p},
        "other_reports": others,
    }
    lines = [f"certified report for {len(runs)} model(s): {path}"]
    lines += [f"  {r.summary['model_id']}: conventional {r.summary['conventional_accuracy']:.4f}" for r in runs]
    if payload["soundness_violations"]:
        lines.append(f"  SOUNDNESS VIOLATION in {sorted(payload['soundness_violations'])}")
    lines += [f"  also: {o}" for o in others]
    emit(args, payload, "\n".join(lines))
    return EXIT_VIOLATION if payload["soundness_violations"] else EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``report`` to the ``dpaudit`` parser."""
    p = sub.add_parser("report", help="render a run directory's reports from stored results", description=__doc__.splitlines()[0])
    p.add_argument("run_dir", metavar="RUN_DIR", help="run directory written by train / certify / audit / attack")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=lambda a: _cmd_report(a))
