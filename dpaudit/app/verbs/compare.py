"""``dpaudit compare``: every defense of a grid under the same attacks, one report.

Reads a TOML grid (:func:`dpaudit.app.runs.compare.load_grid`; an example is
``examples/compare-digits.toml``), trains every defense setting and repeat, attacks every trained
record with the grid's membership, evasion and inversion attacks (certifying where a defense
certifies), audits DP settings with canaries, and writes the defense × measure matrix with the
privacy–utility curves as a report (HTML, Markdown, CSV, JSON). Jobs run on the local process
pool or on Ray (``--executor ray --address ADDR``); each finished job is stored at once, so a
rerun does only what is missing and says how much it reused.

Every value of the grid is checked before any job starts, by the validator of the flag it stands
for, and every size against the documented limit of that flag or config field; the whole grid
may make at most 1,000 jobs and take at most an hour by the estimate. Beyond a limit it runs
only with ``--i-know`` (:mod:`dpaudit.app.runs.grid_checks`).

Exit status: 0, or 3 when a row's ε_LB exceeds its ε_UB or a certificate is unsound (a finding,
as with ``dpaudit audit``); 2 for a bad grid (one line naming the key).
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from dpaudit.app.common import EXIT_OK, EXIT_VIOLATION, add_common, check_executor_flags, emit, path_type

__all__ = ["register"]


def _num(x: Any, digits: int = 3, rounding: str = "nearest") -> str:
    """A cell of the terminal table: ``digits`` decimals to nearest, or an ε bound at ``digits`` + 1 significant digits
    rounded its safe way.

    ``rounding`` is "up" for an upper bound (ε_UB), "down" for a lower one (ε_LB), "nearest" for
    a measurement or an estimate.
    """
    from dpaudit.results.numbers import fmt_lower_bound, fmt_upper_bound

    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "∞"
    if rounding == "up":
        return fmt_upper_bound(x, digits + 1)
    if rounding == "down":
        return fmt_lower_bound(x, digits + 1)
    return f"{x:.{digits}f}"


def _cmd_compare(args: argparse.Namespace) -> int:
    from dpaudit.app.runs.compare import CompareSpec, GridError, load_grid, run_compare
    from dpaudit.app.runs.report import render_reports
    from dpaudit.store import RunDir

    check_executor_flags(args)
    try:
        # A dry run answers to the same limits and checks as the run it stands for (with --i-know,
        # a plan above them is shown): a plan that prints must be a run that starts.
        grid = load_grid(args.config, i_know=args.i_know)
        if args.device is not None:
            import dataclasses

            grid = dataclasses.replace(grid, device=args.device)
        workers = 1 if args.executor == "serial" else args.num_workers
        if args.dry_run:
            from dpaudit.app.plan import print_plan
            from dpaudit.app.runs.compare.limits import check_plan, grid_plan

            check_plan(grid, i_know=args.i_know, data_root=args.data_root, workers=workers, progress=False)
            return print_plan(args, grid_plan(grid, data_root=args.data_root, workers=workers, executor=args.executor))
        spec = CompareSpec(
            grid=grid,
            executor=args.executor,
            num_workers=args.num_workers,
            address=args.address,
            ship_code=args.ship_code,
            data_root=args.data_root,
            progress=not args.quiet,
            command="dpaudit compare",
            i_know=args.i_know,
        )
    except GridError as exc:  # every value and size is checked before any job starts
        # --json names the grid's key (``defenses[0].epochs``) where the error has one
        raise GridError(f"--config {args.config}: {exc}", argument=exc.argument or "--config") from None
    run = RunDir(args.out)
    result = run_compare(spec, run)
    index = render_reports(run)
    report = index.compare[0] if getattr(index, "compare", None) else index.index_html
    lines = [
        f"compared {len(result.rows)} defense settings on {result.dataset} "
        f"({len(grid.seeds)} repeat(s)); jobs: {result.jobs_run} run, "
        f"{result.jobs_reused} reused from {run.path}",
        f"  {'setting':<28}{'test acc':>9}{'acc loss':>9}{'eps_UB':>9}{'eps_LI':>8}{'eps_LB':>8}  best attack",
    ]
    for r in result.rows:
        ub = _num(r.epsilon_ub_best, 2, "up") + ("*" if r.epsilon_ub_data_dependent else "")
        lines.append(
            "  "
            f"{r.label:<28}{_num(r.test_accuracy):>9}{_num(r.accuracy_loss):>9}"
            f"{ub:>9}{_num(r.epsilon_last_iterate, 2):>8}"
            f"{_num(r.epsilon_lb, 2, 'down'):>8} "
            f" {r.best_attack or '—'}  [{r.verdict}]"
        )
    lines.append(
        "  eps_LI: the final model's last-iterate ε (Steinke et al. 2024; "
        "DP-SGD rows): exact for linear losses, a heuristic, not an upper "
        "bound, for others"
    )
    if any(r.epsilon_ub_data_dependent for r in result.rows):
        lines.append("  * data-dependent ε: computed from the private data")
    for r in result.violations:
        lines.append(f"  FINDING {r.label}: " + "; ".join(r.findings))
    lines.append(f"  report: {report}")
    emit(
        args,
        {**result.summary(), "jobs_run": result.jobs_run, "jobs_reused": result.jobs_reused, "report": str(report)},
        "\n".join(lines),
    )
    return EXIT_VIOLATION if result.exit_status else EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``compare`` to the ``dpaudit`` parser."""
    p = sub.add_parser(
        "compare",
        help="every defense of a grid under the same attacks: privacy evidence, guarantees and utility side by side",
        description=(
            "Trains every defense setting of a TOML grid, attacks each trained "
            "model with the same membership, evasion and inversion attacks "
            "(certifying where a defense certifies; canary audits for DP settings), "
            "and reports the defense x measure matrix with privacy-utility "
            "curves (Jayaraman & Evans 2019; Aerni et al. 2024). Every grid value "
            "is checked before any job starts, by the same validator and documented "
            "limit as the flag it stands for (e.g. a setting's epochs as train "
            "--epochs, attacks.membership.num_shadows as attack membership "
            "--num-shadows); "
            "a grid of more than 1,000 jobs, or one estimated to take more than an hour, needs --i-know. "
            "Exit status 3 if a row's eps_LB exceeds its eps_UB or a certificate is unsound."
        ),
    )
    p.add_argument(
        "--config",
        required=True,
        type=path_type("--config", must_exist="file"),
        metavar="GRID.toml",
        help="the grid (see examples/compare-digits.toml)",
    )
    add_common(p, out=True, data_root=True, quiet=True, executor="jobs")
    p.add_argument("--device", help="override the grid's device (cpu, cuda[:N])")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (jobs, estimated CPU-hours, wall time here and on 8 and "
        "64 workers, memory per job) and exit without training",
    )
    p.set_defaults(func=lambda a: _cmd_compare(a))
