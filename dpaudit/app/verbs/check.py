"""``dpaudit check``: the conformance battery — targeted audits of a DP training function, one verdict each.

Part of the application layer (docs/architecture.md, "Import rule"); the work is done by
:func:`dpaudit.app.runs.check.run_check`, which plays every registered check (``CHECKS``,
``attacks/audit/checks/``) against ``--train-fn`` within ``--budget-minutes``, each at a
Bonferroni share of ``--confidence``. Each check is designed to expose one class of
implementation bug cheaply (docs/audits/check.md) and ends ``passed`` (it could have shown
ε_LB > ε_UB and did not), ``violated`` (ε_LB > ε_UB: the code leaks more than it claims) or
``inconclusive`` (its design could not reach ε_UB at the size it ran; the ceiling says how far
it could see).

Exit status 3 when a check is violated, with one line per violated check (its finding) on
stdout, so a repository can gate merges on ``dpaudit check``; exit status 2 when no check got a
training through (every training the battery asked for failed: nothing was checked), naming the
first failure. The training function is third-party code: whatever it prints goes to stderr,
and its ``sys.exit`` is its failure, never the command's exit status (:func:`dpaudit.callables.call_user`). ``--junit
FILE`` writes one JUnit
test case per check for CI services to display (:mod:`reports.junit`).
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import Any

from dpaudit import _validate as v
from dpaudit.app.common import EXIT_OK, EXIT_VIOLATION, UsageError, add_common, arg, delta_type, emit, path_problem
from dpaudit.app.train_fn_flags import (
    add_claim_flags,
    add_model_fn_flag,
    add_train_fn_flag,
    claim_from_args,
    pos_int,
    resolve_callables,
)
from dpaudit.limits import LIMITS
from dpaudit.options import limit_action

__all__ = ["register"]

#: The status words as the terminal shows them; a violation is the one a reader must not miss. A
#: check whose training function failed is inconclusive, shown as ``error``.
_SHOWN = {"violated": "VIOLATED", "passed": "passed", "inconclusive": "inconclusive", "error": "error"}


def _check_list(text: str) -> tuple[str, ...]:
    """``--checks a,b``: names separated by commas, none empty, none twice (membership is checked against the registry
    later)."""
    names = tuple(part.strip() for part in text.split(","))
    if not text.strip() or any(not n for n in names):
        raise argparse.ArgumentTypeError(f"--checks must be check names separated by commas, got {text!r}")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"--checks names {', '.join(twice)} more than once (got {text!r})")
    return names


def _junit_path(text: str) -> str:
    """``--junit FILE``: a regular file to (over)write, or none yet, in a directory that takes new files.

    Never a directory, a device (``/dev/null``), a FIFO or a file in ``/proc``: the shared output
    check (:func:`dpaudit.app.cli.output_problem`) refuses them before any training.
    """
    from dpaudit.app.cli import output_problem

    if not text.strip():
        raise argparse.ArgumentTypeError(f"--junit must name a file, got {text!r}")
    problem = path_problem(Path(text).expanduser())
    if problem is not None:  # a name too long to repeat in full
        raise argparse.ArgumentTypeError(f"--junit={v.short(text)} {problem}")
    problem = output_problem(text, directory=False)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"--junit={text!r} {problem}")
    return text


def registered_checks() -> tuple[str, ...]:
    """The checks the battery offers, in the order it runs them (read from the registry, never listed here)."""
    from attacks.audit.checks import CHECKS

    return tuple(CHECKS.names())


def _chosen_checks(args: argparse.Namespace) -> tuple[str, ...]:
    known = registered_checks()
    if args.checks is None:
        return known
    unknown = [n for n in args.checks if n not in known]
    if unknown:
        raise UsageError(
            f"--checks: no check called {', '.join(map(repr, unknown))}; the registered checks are {', '.join(known)}",
            argument="--checks",
        )
    return tuple(args.checks)


def _spec_from_args(args: argparse.Namespace) -> Any:
    """The :class:`~dpaudit.app.runs.check.BatterySpec` the flags describe, after every check that needs no training
    (exit 2)."""
    claim = claim_from_args(args)
    if claim is None:
        raise UsageError(
            "--train-fn needs the claim it is checked against: --claim FILE or "
            "--claim-noise-multiplier/--claim-sampling-rate/--claim-num-steps",
            argument="--claim",
        )
    resolve_callables(args)
    if getattr(args, "dataset_size_public", False):
        import dataclasses

        claim = dataclasses.replace(claim, dataset_size_public=True)
    checks = _chosen_checks(args)
    from dpaudit.app.runs import check as check_run

    return check_run.BatterySpec(
        train_fn=args.train_fn,
        model_fn=args.model_fn,
        claim=claim,
        delta=args.delta,
        confidence=args.confidence,
        budget_minutes=args.budget_minutes,
        checks=checks,
        dataset=args.dataset,
        seed=args.seed,
        num_workers=args.num_workers,
        data_root=args.data_root,
        i_know=getattr(args, "i_know", False),
    )


def _eps(x: float) -> str:
    # ε_UB, an upper bound: rounded up, never printed below its value.
    from dpaudit.app.common import fmt_eps_ub

    return fmt_eps_ub(x)


def _ceiling(x: float) -> str:
    # The ceiling is the ε_LB of a perfect attack: rounded down, like every lower bound.
    from dpaudit.app.common import fmt_eps_lb

    return fmt_eps_lb(x)


def result_lines(report: Any, *, check_dir: Path) -> list[str]:
    """The terminal summary: what was checked against what, one line per check led by its status, where the results are.

    A violated check's line is its finding after ``VIOLATED``, so ``grep VIOLATED`` lists exactly the violations.
    """
    ub = report.epsilon_ub
    lines = [
        f"check {report.train_fn}: {len(report.outcomes)} check(s) in "
        f"{report.seconds:.1f} s (budget {report.budget_minutes:g} min), "
        f"{report.confidence:.0%} family-wise confidence, delta={report.delta:g}",
        f"  claim       {report.claim_description}" + ("" if ub is None else f" (eps_UB {_eps(ub)})"),
    ]
    width = max(len(s) for s in _SHOWN.values())
    for o in report.outcomes:
        # A ceiling of 0 is a check that could not run; its finding says why.
        extra = (
            f" [ceiling {_ceiling(o.ceiling)} <= eps_UB: this check could not have shown a violation at this size]"
            if o.status == "inconclusive" and o.ceiling > 0
            else ""
        )
        lines.append(f"  {_SHOWN['error' if o.details.failed else o.status]:<{width}}  {o.finding}{extra}")
    violated = report.violations
    from dpaudit.results.check import diagnosis

    ranked = diagnosis(report)
    if ranked:
        # One diagnosis: the root cause first (a grey-box finding outranks the statistical ones that follow from it).
        lines.append(f"  DIAGNOSIS: {ranked[0].cause or ranked[0].finding}")
        if len(ranked) > 1:
            lines.append(f"  also fired (ranked): {', '.join(o.name for o in ranked[1:])}")
    if violated:
        found = (
            "found eps_LB > eps_UB"
            if all(o.kind == "statistical" for o in violated)
            else "found the mechanism differs from its claim"
        )
        lines.append(f"  VIOLATION: {len(violated)} check(s) {found} — the implementation does not meet its claim")
    else:
        lines.append(
            "  no violation"
            + (
                " (some checks inconclusive: raise --budget-minutes to let them reach eps_UB)"
                if any(o.status == "inconclusive" for o in report.outcomes)
                else ""
            )
        )
    lines.append(f"  results: {check_dir}")
    return lines


def _cmd_check(args: argparse.Namespace) -> int:
    spec = _spec_from_args(args)
    from dpaudit.app.runs import check as check_run
    from dpaudit.store import RunDir

    run = RunDir(args.out)
    started = datetime.datetime.now()
    report = check_run.run_check(spec, run, progress=not args.quiet)
    check_dir = run.path / "checks"
    lines = result_lines(report, check_dir=check_dir)
    payload: dict[str, object] = {**report.to_dict(), "check_dir": str(check_dir), "report": None, "junit": None}
    if args.junit is not None:
        from reports.junit import write_junit

        payload["junit"] = str(write_junit(report, args.junit, timestamp=started))
        lines.append(f"  junit:   {payload['junit']}")
    if not args.no_report:
        from dpaudit.app.runs.report import render_reports

        index = render_reports(run)
        pages = index.pages_of("checks")
        payload["report"] = str(pages[0] if pages else index.index_html)
        lines.append(f"  report:  {payload['report']}")
    failed = check_run.training_failed(report)
    if failed:
        # Nothing was checked: a CI gate must not read this as "no violation" (check.json and the
        # JUnit file, written above, mark the checks as errors).
        raise UsageError(
            f"--train-fn {spec.train_fn}: no check got a training through "
            f"({len(failed)} of {len(report.outcomes)} failed; results in "
            f"{check_dir}): {failed[0].details.reason}",
            argument="--train-fn",
        )
    if (
        report.outcomes
        and not report.violated
        and all(o.num_trials == 0 or (o.kind == "grey-box" and o.status == "inconclusive") for o in report.outcomes)
    ):
        # No check ran a single training (no --model-fn, no initial_state keyword): nothing was
        # checked, so a CI gate must not read it as a pass either.
        raise UsageError(
            f"--train-fn {spec.train_fn}: no check could run ({len(report.outcomes)} "
            f"of {len(report.outcomes)} could not; results in {check_dir}): "
            # The first game's reason (no --model-fn, no initial_state) says what to add.
            f"{next((o.finding for o in report.outcomes if o.kind == 'statistical'), report.outcomes[0].finding)}",
            argument="--train-fn",
        )
    emit(args, payload, "\n".join(lines))
    return EXIT_VIOLATION if report.violated else EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``check`` to the ``dpaudit`` parser."""
    from dpaudit.data import DATASETS

    p = sub.add_parser(
        "check",
        help="conformance battery: targeted audits that expose DP-training bugs, one verdict per check",
        description=(
            "Check a DP training function against its claim with a battery of "
            "targeted audits, each designed to expose one class of "
            "implementation bug cheaply (a saturated worst-case start for missing "
            "noise or clipping, a zero-gradient canary for normalisers "
            "that depend on the lot, a lone rare-class canary for samplers off "
            "their rate, reference trainings for reused noise seeds, "
            "per-tensor statistics for un-noised parameters and buffers; docs/audits/check.md). Each check reports "
            "passed, violated (epsilon_lb > epsilon_ub at its share of "
            "--confidence) or inconclusive (the largest epsilon_lb its design "
            "could reach, its ceiling, stays at or below epsilon_ub). Exit status 3 "
            "when a check is violated, one line per violated check on stdout."
        ),
    )
    add_train_fn_flag(
        p,
        required=True,
        help="third-party train(dataset, *, seed, initial_state=None) -> nn.Module, "
        "as module:function or path/to/file.py:function (required)",
    )
    add_model_fn_flag(
        p,
        help="a zero-argument function building the architecture --train-fn trains, "
        "on which the checks craft their worst-case start "
        "(without it, the checks that need that start are inconclusive and say so)",
    )
    add_claim_flags(p)
    p.add_argument(
        "--dataset-size-public",
        action="store_true",
        help="the claim treats the dataset size as public (as Opacus does): a normaliser that depends on "
        "len(dataset) alone, such as int(len(dataset) * q), is then not a finding",
    )
    p.add_argument("--delta", type=delta_type, default=1e-5, help="delta of every epsilon (default 1e-5)")
    p.add_argument(
        "--confidence",
        type=arg("--confidence", v.open_unit),
        default=0.95,
        help="family-wise confidence of the battery, split over the checks by Bonferroni (default 0.95)",
    )
    limit_action(
        p.add_argument(
            "--budget-minutes",
            type=arg("--budget-minutes", v.positive),
            default=5.0,
            metavar="M",
            help="wall-clock budget shared by the checks (default 5)",
        ),
        LIMITS["budget_minutes"],
    )
    p.add_argument(
        "--checks",
        type=_check_list,
        metavar="NAME[,NAME...]",
        help="run only these checks (default: every registered check, in run order; docs/audits/check.md lists them)",
    )
    p.add_argument(
        "--dataset",
        choices=DATASETS,
        default="digits",
        help="the dataset the checks draw records from (default digits)",
    )
    limit_action(
        p.add_argument(
            "--num-workers",
            type=pos_int("--num-workers"),
            default=1,
            help="parallel worker processes for the trainings (default 1: in this process)",
        ),
        LIMITS["workers"],
    )
    junit = p.add_argument(
        "--junit",
        type=_junit_path,
        metavar="FILE",
        help="also write the verdicts as JUnit XML, one test case per check (GitHub, GitLab and Jenkins display it)",
    )
    from dpaudit.app.cli import OUTPUT_FILE

    setattr(junit, OUTPUT_FILE, True)  # checked again just before the work, beside --out
    p.add_argument("--no-report", action="store_true", help="skip the HTML/Markdown report")
    add_common(p, out=True, seed=True, data_root=True, quiet=True)
    p.set_defaults(func=lambda a: _cmd_check(a))
