"""``dpaudit audit``: empirical ε lower bounds set against a training's claimed ε.

Part of the application layer (docs/architecture.md, "Import rule"); the work is done by
:func:`dpaudit.app.runs.audit.run_audit`. Games (docs/audits/statistics.md §3–5): black-box ``multi-run`` (R trainings
with and R without a canary), black-box ``one-run`` (m canaries in one training; Steinke,
Nasr & Jagielski 2023) and ``white-box`` per-step Dirac-canary audits of DP-SGD (Nasr et al.
2021, 2023), whose compared claim is one un-sampled Gaussian step.

Exit status 3 when ε_LB > ε_UB, so users can gate their CI on ``dpaudit audit``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from dpaudit import _validate as v
from dpaudit.app.common import (
    EXIT_OK,
    EXIT_VIOLATION,
    UsageError,
    add_common,
    arg,
    delta_type,
    emit,
    fmt_eps,
    fmt_eps_lb,
    fmt_eps_ub,
)
from dpaudit.app.train_fn_flags import (
    TRAIN_FN_HELP,
    add_claim_flags,
    add_model_fn_flag,
    add_train_fn_flag,
    claim_from_args,
    pos_int,
)
from dpaudit.limits import LIMITS
from dpaudit.options import limit_action
from dpaudit.results.audit import AuditResult
from dpaudit.results.audit_details import OneRunDetails, ScoresDetails

__all__ = ["register"]

#: Training steps above this need --i-know (Abadi et al.'s longest MNIST run is ~10^5 steps).
MAX_STEPS = int(LIMITS["steps"].maximum)


#: One line defining the two numbers an audit prints (issue 10: the terminal output defines them).
EPSILON_DEFINITION = (
    "epsilon_lb = empirical lower bound at {confidence:.0%} confidence from "
    "the attack; epsilon_ub = the claim's accountant upper bound; a DP "
    "implementation is caught when epsilon_lb > epsilon_ub"
)


def ceiling_line(result: AuditResult) -> str:
    """The ceiling of an audit for a terminal: the number and what it is (issue 15, item 4)."""
    if result.ceiling is None:
        return "not recorded (result written before ceilings were reported)"
    d = result.details
    if result.method == "one-run":
        tried = len(d.guess_counts or ()) if isinstance(d, OneRunDetails) else 0
        design = (
            f"every guess right among {result.num_in + result.num_out} canaries, {tried or 'the'} guess counts tried"
        )
    else:
        n_in, n_out = (
            (d.bounding_num_in, d.bounding_num_out) if isinstance(d, ScoresDetails) else (result.num_in, result.num_out)
        )
        design = f"every IN scored above every OUT on the same {n_in} IN / {n_out} OUT"
    return (
        f"{fmt_eps_lb(result.ceiling)}  (the largest epsilon_lb this design can show: {design}; more trials raise it)"
    )


def _check_bounds_fit(args: argparse.Namespace, claim: Any) -> None:
    """Refuses a Gaussian-shaped bound for a claim that is not Gaussian-family, before any training (exit 2)."""
    from dpaudit.privacy.audit_bounds import resolve_bound

    if args.method == "multi-run":
        try:
            resolve_bound(args.bound, claim=claim)
        except ValueError as exc:
            raise UsageError(f"--bound {args.bound}: {exc}", argument="--bound") from None
    if args.method == "one-run" and args.one_run_bound == "fdp" and claim.trade_off_family != "gaussian":
        raise UsageError(
            "--one-run-bound fdp rejects a Gaussian trade-off curve, and the claim "
            f"of kind {claim.kind!r} is not Gaussian-family; use --one-run-bound "
            "steinke",
            argument="--one-run-bound",
        )


def _check_target(args: argparse.Namespace, claim: Any) -> None:
    """What is audited: a third-party ``--train-fn`` against its claim, or a ``--defense`` with its own (exit 2 on a
    mismatch)."""
    if args.train_fn is not None:
        from dpaudit.callables import resolve_callable

        resolve_callable(
            args.train_fn, argument="--train-fn"
        )  # a bad spec fails here, in one line, before any data loads
    if args.model_fn is not None:
        if args.train_fn is None or (args.init == "random" and args.canary != "blank"):
            raise UsageError(
                "--model-fn builds the starting architecture of a --train-fn audited "
                "with --init worst-case or --canary blank",
                argument="--model-fn",
            )
        from dpaudit.callables import resolve_callable

        resolve_callable(args.model_fn, argument="--model-fn")
    if args.train_fn is None:
        if claim is not None:
            raise UsageError(
                f"--claim/--claim-* apply to --train-fn; --defense {args.defense} builds its own claim",
                argument="--claim",
            )
        if (args.target_epsilon is None) == (args.noise_multiplier is None):
            raise UsageError(
                "give exactly one of --target-epsilon and --noise-multiplier (got "
                f"{args.target_epsilon!r} and {args.noise_multiplier!r})",
                argument="--target-epsilon",
            )
    else:
        if claim is None:
            raise UsageError(
                "--train-fn needs the claim it is audited against: --claim FILE or "
                "--claim-noise-multiplier/--claim-sampling-rate/--claim-num-steps",
                argument="--train-fn",
            )
        if args.threat == "white-box":
            raise UsageError(
                "--threat white-box needs a defense's white-box trainer hooks; audit "
                "--train-fn with --threat black-box",
                argument="--threat",
            )
        if args.target_epsilon is not None or args.noise_multiplier is not None:
            raise UsageError(
                "--target-epsilon/--noise-multiplier configure --defense; with "
                "--train-fn the claim comes from --claim/--claim-*",
                argument="--target-epsilon",
            )


def _check_game(args: argparse.Namespace) -> None:
    """The flags that apply to one game or one executor only, refused elsewhere (exit 2)."""
    if args.init != "random" and (args.threat != "black-box" or args.method != "multi-run"):
        raise UsageError(
            f"--init {args.init} applies to --threat black-box --method multi-run, "
            f"got --threat {args.threat} --method {args.method}",
            argument="--init",
        )
    if args.address is not None and args.executor != "ray":
        raise UsageError(
            f"--address={args.address!r} needs --executor ray, got --executor {args.executor}", argument="--address"
        )
    if args.ship_code and args.executor != "ray":
        raise UsageError(f"--ship-code needs --executor ray, got --executor {args.executor}", argument="--ship-code")
    if args.budget_seconds is not None and args.threat != "white-box":
        raise UsageError(
            "--budget-seconds applies to --threat white-box (trainings pooled until "
            f"the time is spent), got --threat {args.threat}",
            argument="--budget-seconds",
        )
    if args.strategy == "fixed" and (args.threat != "white-box" or args.score != "dirac"):
        raise UsageError(
            "--strategy fixed takes its threshold from the white-box Dirac claim "
            f"(C/2); got --threat {args.threat} --score {args.score}: use bonferroni "
            "or split",
            argument="--strategy",
        )


def _checked_claim(args: argparse.Namespace) -> Any:
    """The claim of a ``--train-fn`` (``None`` for a defense), after every check of the flags that needs no data (exit
    2)."""
    claim = claim_from_args(args)
    if args.one_run_bound is not None and args.method != "one-run":
        raise UsageError(
            f"--one-run-bound applies to --method one-run, got --method {args.method}", argument="--one-run-bound"
        )
    if claim is not None:
        _check_bounds_fit(args, claim)
    _check_target(args, claim)
    _check_game(args)
    return claim


def _spec_from_args(args: argparse.Namespace, claim: Any) -> Any:
    """The :class:`~dpaudit.app.runs.audit.AuditSpec` the flags describe, refused above :data:`MAX_STEPS` steps without
    ``--i-know``."""
    from dpaudit.app.runs.audit import AuditSpec

    spec = AuditSpec(
        defense=args.defense,
        train_fn=args.train_fn,
        model_fn=args.model_fn,
        claim=claim,
        dataset=args.dataset,
        model=args.model,
        threat=args.threat,
        method=args.method,
        target_epsilon=args.target_epsilon,
        noise_multiplier=args.noise_multiplier,
        delta=args.delta,
        clip_norm=args.clip_norm,
        sampling_rate=args.sampling_rate,
        epochs=args.epochs,
        num_steps=args.num_steps,
        learning_rate=args.learning_rate,
        num_members=args.num_members,
        num_trials=args.num_trials,
        num_canaries=args.num_canaries,
        one_run_bound=args.one_run_bound or "steinke",
        canary=args.canary,
        init=args.init,
        group_size=args.group_size,
        confidence=args.confidence,
        bound=args.bound,
        strategy=args.strategy,
        score=args.score,
        budget_seconds=args.budget_seconds,
        workers=args.num_workers,
        executor=args.executor,
        address=args.address,
        ship_code=args.ship_code,
        seed=args.seed,
        name=args.name,
        data_root=args.data_root,
        device=args.device,
        progress=not args.quiet,
        i_know=args.i_know,
    )
    if spec.resolved_num_steps > MAX_STEPS and not args.i_know:
        # A tiny --sampling-rate makes 1/q steps per epoch: refuse before minutes of silence.
        raise UsageError(
            f"--sampling-rate={spec.sampling_rate:g} with {spec.epochs or 10:g} "
            f"epochs is {spec.resolved_num_steps:.3g} steps per training, above the "
            f"limit {MAX_STEPS:,}; "
            "raise --sampling-rate, give --num-steps, or pass --i-know",
            argument="--sampling-rate",
        )
    return spec


def last_iterate_line(result: Any) -> str:
    """The last-iterate ε of an audit for a terminal (Steinke et al. 2024), or why there is none.

    It is the final model's exact ε for linear losses, hence a lower bound on the worst case over
    losses, and only a heuristic for other losses (the paper shows losses that exceed it): the
    line says so, and never calls it a cap or an upper bound.
    """
    li = getattr(result, "epsilon_last_iterate", None)
    if li is None:
        return "n/a (not a DP-SGD claim, or a result written before it was recorded)"
    return f"{fmt_eps(li)}  (final model only: exact for linear losses; a heuristic, not an upper bound, for others)"


def _result_lines(result: Any, directory: Path) -> list[str]:
    """The terminal summary of an audit result: both bounds, what they assume, the ceiling and the verdict."""
    fmt = fmt_eps_ub
    return [
        f"audit {directory.name}: {result.threat_model} "
        f"{'per-step Dirac game' if result.method == 'white-box' else result.method}, "
        f"{result.num_in} IN / {result.num_out} OUT observations",
        "  " + EPSILON_DEFINITION.format(confidence=result.confidence),
        f"  epsilon_lb  {fmt_eps_lb(result.epsilon_lb)}  ({result.bound}, "
        f"{result.confidence:.0%} confidence, delta={result.delta:g})",
        f"  assumption  {result.assumption}",
        f"  ceiling     {ceiling_line(result)}",
        f"  epsilon_ub  {fmt(result.epsilon_ub)}  (tightest: {result.accountant}; {result.claim_description})",
        "  epsilon_ub by accountant: "
        + (
            ", ".join(f"{k} {fmt(x)}" for k, x in result.epsilon_ub_by_accountant.items())
            or "none (no privacy mechanism)"
        ),
        f"  last-iterate {last_iterate_line(result)}",
        f"  tightness   {result.tightness:.3f}" + _estimate_text(result),
        "  VIOLATION: epsilon_lb > epsilon_ub — the implementation does not meet its claim"
        if result.violation
        else "  no violation",
        f"  results: {directory}",
    ]


def _estimate_text(result: Any) -> str:
    """The point estimate beside the tightness, by the report's rule (shown only when its interval excludes 0)."""
    from dpaudit.results.estimate_shown import shown_estimate

    shown = shown_estimate(result)
    if shown.value is not None:
        assert shown.low is not None and shown.high is not None and shown.level is not None  # shown with its interval
        return (
            f"   (point estimate, not a bound: {fmt_eps(shown.value)}; {shown.level:.0%} interval "
            f"[{fmt_eps(shown.low)}, {fmt_eps(shown.high)}])"
        )
    if shown.exists:
        return f"   (point estimate not shown: {shown.reason})"
    return ""


def _run_and_print(args: argparse.Namespace, spec: Any) -> int:
    """Runs the audit, renders its report (unless ``--no-report``) and prints the result; exit status 3 on a
    violation."""
    from dpaudit.app.runs.audit import run_audit
    from dpaudit.store import RunDir

    run = RunDir(args.out)
    result = run_audit(spec, run)
    directory = run.audit_dir(str(result.details.audit_name))
    report = None
    if not args.no_report:
        from dpaudit.app.runs.report import render_reports

        index = render_reports(run)
        report = next((p for p in index.audits if p.stem == f"audit-{directory.name}"), index.index_html)
    payload = {**result.to_dict(), "audit_dir": str(directory), "report": str(report) if report is not None else None}
    lines = _result_lines(result, directory)
    if not args.no_report:
        lines.append(f"  report:  {report}")
    emit(args, payload, "\n".join(lines))
    return EXIT_VIOLATION if result.violation else EXIT_OK


def _cmd_audit(args: argparse.Namespace) -> int:
    claim = _checked_claim(args)
    spec = _spec_from_args(args, claim)
    if args.dry_run:
        from dpaudit.app.plan import audit_plan, print_plan

        return print_plan(args, audit_plan(spec))
    return _run_and_print(args, spec)


def _add_target_flags(p: argparse.ArgumentParser) -> None:
    """What is audited: a registered defense or a third-party training function, on which data and model."""
    from dpaudit.app.runs.audit import audit_defenses
    from dpaudit.app.runs.audit.spec import audit_threats, black_box_games
    from dpaudit.data import DATASETS
    from dpaudit.models import MODELS

    who = p.add_mutually_exclusive_group()
    defenses = audit_defenses()
    who.add_argument(
        "--defense",
        choices=defenses,
        default=defenses[0] if defenses else None,
        help="a registered defense with a white-box trainer to audit (default %(default)s)",
    )
    add_train_fn_flag(who, help=f"{TRAIN_FN_HELP} (black-box only)")
    add_model_fn_flag(
        p,
        help="with --train-fn and --init worst-case (or --canary blank): a "
        "zero-argument function building the architecture your function trains, "
        "on which the start is crafted (default: --model from the zoo)",
    )
    p.add_argument("--dataset", choices=DATASETS, default="digits")
    p.add_argument(
        "--model", choices=tuple(MODELS), default="digits-mlp", help="zoo model for --defense (default digits-mlp)"
    )
    # The games are read from the audit-procedure registry when the parser is built, so a game registered since import
    # is offered too.
    p.add_argument(
        "--threat",
        choices=audit_threats(),
        default="black-box",
        help="black-box: final model only; white-box: every released update (default black-box)",
    )
    p.add_argument(
        "--method", choices=black_box_games(), default="multi-run", help="black-box game (default multi-run)"
    )


def _add_training_flags(p: argparse.ArgumentParser) -> None:
    """The DP-SGD setting each trial trains (its noise, clipping, sampling, length) and how many trials."""
    p.add_argument(
        "--target-epsilon",
        type=arg("--target-epsilon", v.positive),
        metavar="E",
        help="calibrate sigma so the audited claim has epsilon_ub = E (black-box: "
        "the whole training; white-box: one step)",
    )
    p.add_argument(
        "--noise-multiplier",
        type=arg("--noise-multiplier", v.positive),
        metavar="SIGMA",
        help="noise multiplier (instead of --target-epsilon)",
    )
    p.add_argument("--delta", type=delta_type, default=1e-5, help="delta of both bounds (default 1e-5)")
    p.add_argument(
        "--clip-norm", type=arg("--clip-norm", v.positive), default=1.0, help="DP-SGD clipping norm C (default 1)"
    )
    p.add_argument(
        "--sampling-rate",
        type=arg("--sampling-rate", v.half_open_unit),
        default=0.01,
        help="DP-SGD Poisson sampling rate q (default 0.01)",
    )
    steps = p.add_mutually_exclusive_group()
    limit_action(
        steps.add_argument(
            "--epochs", type=arg("--epochs", v.positive), help="DP-SGD epochs (1/q steps each; default 10)"
        ),
        LIMITS["epochs"],
    )
    limit_action(
        steps.add_argument("--num-steps", type=pos_int("--num-steps"), help="DP-SGD steps T (instead of --epochs)"),
        LIMITS["steps"],
    )
    p.add_argument(
        "--learning-rate",
        type=arg("--learning-rate", v.positive),
        default=0.1,
        help="DP-SGD learning rate (default 0.1)",
    )
    limit_action(
        p.add_argument(
            "--num-members",
            type=pos_int("--num-members"),
            help="training set size drawn from the dataset (default: half its training split)",
        ),
        LIMITS["members"],
    )
    limit_action(
        p.add_argument(
            "--num-trials",
            type=pos_int("--num-trials"),
            help="multi-run: trainings per side (default 50); white-box: independent runs pooled (default 1)",
        ),
        LIMITS["trials"],
    )


def _add_canary_flags(p: argparse.ArgumentParser) -> None:
    """The black-box games' canaries, the one-run bound and where every training starts."""
    from dpaudit.app.runs.audit import CANARY_KINDS, INIT_KINDS

    limit_action(
        p.add_argument(
            "--num-canaries",
            type=arg("--num-canaries", lambda n, x: v.integer(n, x, minimum=2), int),
            default=100,
            help="one-run: number of canaries m (default 100)",
        ),
        LIMITS["canaries"],
    )
    p.add_argument(
        "--one-run-bound",
        choices=("steinke", "fdp"),
        default=None,
        help="one-run: steinke (Steinke et al. 2023, valid for any mechanism; the "
        "default) or fdp (Mahloujifar et al. 2025: "
        "rejects a Gaussian trade-off curve; much tighter, a lower bound only "
        "for mechanisms with a Gaussian-shaped curve)",
    )
    p.add_argument(
        "--canary",
        choices=CANARY_KINDS,
        default="clipbkd",
        help="multi-run input canary: clipbkd (Jagielski et al. 2020; the default), "
        "mislabelled, or blank (one all-zero input, labelled with the class the "
        "starting model finds least likely)",
    )
    p.add_argument(
        "--init",
        choices=INIT_KINDS,
        default="random",
        help="multi-run: where every training starts: random (the trainer's own "
        "initialisation; the default) or worst-case "
        "(Annamalai & De Cristofaro 2024: --model pre-trained non-privately on "
        "non-member records, passed as initial_state=; "
        "use with --sampling-rate 1 and --canary blank for their full-batch DP-GD audit)",
    )
    limit_action(
        p.add_argument(
            "--group-size",
            type=pos_int("--group-size"),
            default=1,
            help="multi-run: canary copies k (epsilon_lb is divided by k)",
        ),
        LIMITS["group_size"],
    )


def _add_bound_flags(p: argparse.ArgumentParser) -> None:
    """How ε_LB is bounded: confidence, the bound, the honest threshold choice and the white-box score and budget."""
    p.add_argument(
        "--confidence",
        type=arg("--confidence", v.open_unit),
        default=0.95,
        help="confidence of epsilon_lb (default 0.95)",
    )
    p.add_argument(
        "--bound",
        choices=("auto", "gdp", "clopper-pearson"),
        default="auto",
        help="multi-run/white-box bound: auto (the default) is gdp (Nasr et al. "
        "2023, assumes a Gaussian trade-off curve) when the claim is "
        "Gaussian-family (DP-SGD, Gaussian steps), else clopper-pearson (no "
        "assumption); gdp on any other claim is refused",
    )
    p.add_argument(
        "--strategy",
        choices=("bonferroni", "split", "fixed"),
        default=None,
        help="honest threshold choice: bonferroni (pay for every candidate "
        "threshold; the black-box default), split (choose on one half, "
        "bound on the other) or fixed (white-box Dirac game: one threshold at "
        "C/2, halfway between the claimed OUT and IN means; its default)",
    )
    p.add_argument(
        "--budget-seconds",
        type=arg("--budget-seconds", v.positive),
        metavar="S",
        help="white-box: pool trainings of --num-steps (default 2,000) steps until S "
        "seconds are spent, instead of a fixed length; a rerun reuses the "
        "stored ones and adds more",
    )
    p.add_argument(
        "--score",
        choices=("dirac", "norm"),
        default="dirac",
        help="white-box score: the canary coordinate, or minus the update's norm (default dirac)",
    )


def _add_executor_flags(p: argparse.ArgumentParser) -> None:
    """Where the trials run: workers, the executor and a Ray cluster."""
    from dpaudit.executors import EXECUTORS

    limit_action(
        p.add_argument(
            "--num-workers",
            type=pos_int("--num-workers"),
            default=1,
            help="parallel worker processes for trials (default 1: in this process)",
        ),
        LIMITS["workers"],
    )
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="where trials run: local (a process pool of --num-workers; the "
        "default), serial (in this process) or ray (a local Ray of "
        "--num-workers CPUs, or the cluster at --address)",
    )
    p.add_argument(
        "--address", metavar="ADDR", help="Ray cluster address (with --executor ray; default: start a local Ray)"
    )
    p.add_argument(
        "--ship-code",
        action="store_true",
        help="with --executor ray: send this checkout's packages to every node (Ray "
        "runtime_env py_modules) instead of using the dpaudit installed there; "
        "torch and the other dependencies must still be installed on each node",
    )


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``audit`` to the ``dpaudit`` parser."""
    p = sub.add_parser(
        "audit",
        help="empirical epsilon lower bound of a training procedure vs its claimed epsilon",
        description=(
            "Audit a DP training procedure: play a distinguishing game with canaries and bound epsilon from below "
            "(epsilon_lb, at --confidence, with an honest threshold choice), then set it against the claim's upper "
            "bound (epsilon_ub) under every applicable accountant, comparing with "
            "the tightest. Exit status 3 when epsilon_lb > epsilon_ub. Games: "
            "black-box multi-run "
            "(--num-trials trainings with and without one canary), black-box "
            "one-run (--num-canaries m canaries in one training, "
            "Steinke et al. 2023), and white-box (Dirac gradient canary inserted at "
            "random steps of DP-SGD; the compared "
            "claim is ONE un-sampled Gaussian step, the mechanism each step's release is about the canary)."
        ),
    )
    _add_target_flags(p)
    _add_training_flags(p)
    _add_canary_flags(p)
    _add_bound_flags(p)
    add_claim_flags(p)
    _add_executor_flags(p)
    add_common(p, out=True, seed=True, data_root=True, device="cpu", quiet=True)
    p.add_argument(
        "--name",
        metavar="NAME",
        help="audit name under RUN_DIR/audits/ (default: derived from the configuration; reruns resume)",
    )
    p.add_argument("--no-report", action="store_true", help="skip the HTML/Markdown report")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (jobs, estimated CPU-hours, wall time here and on 8 and "
        "64 workers, memory per job) and exit without training",
    )
    p.set_defaults(func=lambda a: _cmd_audit(a))
