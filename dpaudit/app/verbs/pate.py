"""``dpaudit pate analyze``: the privacy analysis of a PATE vote matrix from any implementation;
``dpaudit pate audit``: the audit game of an aggregator (ε_LB from repeated answers on neighbouring votes);
``dpaudit pate attack``: membership inference on a PATE student's aggregator.

This module parses the flags, builds the spec and prints what the run returns; the work is
:mod:`dpaudit.app.runs.pate` (:func:`~dpaudit.app.runs.pate.analyze_vote_file`,
:func:`~dpaudit.app.runs.pate.audit_aggregator`, :func:`~dpaudit.app.runs.pate.attack_aggregator`)
and the mathematics :mod:`dpaudit.privacy.pate` (Papernot et al. 2017 for LNMax's moments
analysis, 2018 for GNMax's data-dependent RDP, Confident-GNMax's realised or expected cost, and
the smooth-sensitivity release of a data-dependent ε). Every ε printed says whether it depends
on the votes, whether it was sanitised, and whether it is a realised or an expected cost. A
release prints publishable values only: its noisy estimate and public parameters, never the
private ε, its order or the smooth sensitivity; its noise comes from the operating system's
entropy unless ``--seed`` is given, which the output then marks as reproducible and not private.

Building the parser stays torch-free (the runs are imported when a command runs); ``pate audit``
exits 3 when ε_LB > ε_UB, as ``dpaudit audit``.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from dpaudit import _validate as v
from dpaudit.app.common import (
    EXIT_OK,
    EXIT_VIOLATION,
    UsageError,
    add_common,
    arg,
    check_record,
    delta_type,
    emit,
    fmt_eps_lb,
    fmt_eps_ub,
    path_type,
    positive_int,
    seed_type,
)
from dpaudit.options import limit_action
from dpaudit.privacy.pate.votes import (
    AGGREGATOR_NAMES,
    BYTES_PER_CELL,
    MAX_QUERIES,
    MAX_RELEASE_QUERIES,
    MAX_VOTE_CELLS,
    MIN_LAPLACE_SCALE,
    PROGRESS_QUERIES,
)

if TYPE_CHECKING:
    from dpaudit.app.runs.pate import VoteAnalysis

__all__ = ["register"]

AGGREGATORS = AGGREGATOR_NAMES
#: ``--planted-bug`` values; the same as ``defenses.pate.planted.PLANTED_PATE_BUGS`` (a test checks),
#: written out so that ``--help`` does not import the defenses (and torch).
PLANTED_BUGS = ("none", "noise-scale-too-small", "threshold-without-noise")
#: Noise draws (trials × (classes + 1) per side) above this need --i-know.
MAX_DRAWS = 10**9


def _gb(num_bytes: float) -> str:
    return f"{num_bytes / 1e9:.1f} GB" if num_bytes >= 1e9 else f"{num_bytes / 1e6:.0f} MB"


def _aggregator(args: argparse.Namespace) -> str:
    """The aggregator: as given, or implied by the noise flags (one of them only)."""
    implied = (
        "lnmax" if args.laplace_scale is not None else "confident-gnmax" if args.threshold is not None else "gnmax"
    )
    name = args.aggregator or implied
    if name == "lnmax":
        if args.laplace_scale is None:
            raise UsageError(
                "--aggregator lnmax needs --laplace-scale B (b = 1/gamma; the 2017 MNIST setting is 20)",
                argument="--laplace-scale",
            )
        for flag, value in (
            ("--sigma", args.sigma),
            ("--threshold", args.threshold),
            ("--threshold-sigma", args.threshold_sigma),
        ):
            if value is not None:
                raise UsageError(f"{flag}={value!r} does not apply to --aggregator lnmax", argument=flag)
        return name
    if args.laplace_scale is not None:
        raise UsageError(
            f"--laplace-scale={args.laplace_scale!r} applies to --aggregator lnmax, not {name}",
            argument="--laplace-scale",
        )
    if args.sigma is None:
        raise UsageError(
            f"--aggregator {name} needs --sigma S (the GNMax noise; 40 in the 2018 MNIST setting)", argument="--sigma"
        )
    if name == "confident-gnmax" and (args.threshold is None or args.threshold_sigma is None):
        raise UsageError(
            "--aggregator confident-gnmax needs --threshold T and --threshold-sigma S1", argument="--threshold"
        )
    if name == "gnmax" and (args.threshold is not None or args.threshold_sigma is not None):
        raise UsageError("--threshold/--threshold-sigma apply to --aggregator confident-gnmax", argument="--threshold")
    return name


def _asks_release(args: argparse.Namespace, name: str) -> bool:
    """Whether the flags ask for the smooth-sensitivity release, its flags checked against each other."""
    beta, sigma_ss, order = args.smooth_sensitivity_beta, args.smooth_sensitivity_sigma, args.smooth_sensitivity_order
    if (beta is None) != (sigma_ss is None):
        raise UsageError(
            "--smooth-sensitivity-beta and --smooth-sensitivity-sigma go together", argument="--smooth-sensitivity-beta"
        )
    if beta is None:
        for flag, value in (("--smooth-sensitivity-order", order), ("--seed", args.seed)):
            if value is not None:
                raise UsageError(
                    f"{flag}={value!r} applies to the smooth-sensitivity release (--smooth-sensitivity-beta/-sigma)",
                    argument=flag,
                )
        return False
    if order is not None and not 1.0 < order < 1.0 / (2.0 * beta):
        raise UsageError(
            f"--smooth-sensitivity-order={order:g} must lie in (1, 1/(2*beta)) = (1, "
            f"{1.0 / (2.0 * beta):g}) (Papernot et al. 2018, Theorem 23)",
            argument="--smooth-sensitivity-order",
        )
    if name == "lnmax":
        raise UsageError(
            "the smooth-sensitivity release is defined for GNMax and Confident-GNMax, not --aggregator lnmax",
            argument="--smooth-sensitivity-beta",
        )
    return True


def _cmd_analyze(args: argparse.Namespace) -> int:
    from dpaudit.app.runs.pate import AnalyzeSpec, ReleaseSpec, analyze_vote_file

    name = _aggregator(args)
    asks_release = _asks_release(args, name)
    release = (
        ReleaseSpec(
            beta=args.smooth_sensitivity_beta,
            sigma_ss=args.smooth_sensitivity_sigma,
            order=args.smooth_sensitivity_order,
            seed=args.seed,
        )
        if asks_release
        else None
    )
    if args.answered is not None and name != "confident-gnmax":
        raise UsageError(f"--answered applies to --aggregator confident-gnmax, not {name}", argument="--answered")
    if release is not None and name == "confident-gnmax" and args.answered is None:
        raise UsageError(
            "--smooth-sensitivity-* with --aggregator confident-gnmax needs "
            "--answered (which queries the mechanism answered)",
            argument="--answered",
        )
    spec = AnalyzeSpec(
        votes=args.votes,
        aggregator=name,
        delta=args.delta,
        sigma=args.sigma,
        threshold=args.threshold,
        threshold_sigma=args.threshold_sigma,
        laplace_scale=args.laplace_scale,
        answered=args.answered,
        release=release,
        i_know=args.i_know,
    )
    result = analyze_vote_file(spec)
    emit(args, result.to_dict(), "\n".join(_analysis_lines(result)))
    return EXIT_OK


def _analysis_lines(result: VoteAnalysis) -> list[str]:
    """What ``pate analyze`` prints: the public values, then the release or the private analysis, each marked as what it
    is."""
    ind = result.data_independent
    lines = [
        f"PATE {result.aggregator}: {result.num_queries} queries, "
        f"{result.num_teachers} teachers, {result.num_classes} classes, "
        f"delta={result.delta:g}",
        f"  epsilon, data-independent        {fmt_eps_ub(ind.epsilon)}  (order {ind.order:g})",
    ]
    release, dep = result.release, result.data_dependent
    if release is not None:
        # A release prints only what may be published: the data-dependent ε, its order and the
        # expected answer count depend on the votes, so they are left out (run without the
        # --smooth-sensitivity-* flags for the private analysis).
        rule = (
            "given by --smooth-sensitivity-order" if release.order_rule == "given" else "fixed from public parameters"
        )
        lines += [
            f"  epsilon, released (noisy estimate, smooth sensitivity)  {fmt_eps_ub(release.epsilon_noisy_estimate)}",
            f"    order {release.order:g} ({rule}), beta={release.beta:g}, "
            f"sigma_ss={release.sigma_ss:g}; includes the release's own RDP cost "
            f"{release.rdp_release:.4g} at that order (GNSS, Papernot et al. 2018, "
            "Thm 23)",
            "    a noisy estimate of the data-dependent epsilon, not a bound",
        ]
        if release.reproducible:
            lines.append(
                "  REPRODUCIBLE, NOT PRIVATE: the release noise was drawn from --seed "
                f"{release.seed}; anyone with the seed can remove it. Do not publish "
                "this value."
            )
        else:
            lines.append(
                "  release noise from the operating system's entropy: the value above "
                "may be published (the private data-dependent epsilon is not shown)"
            )
        return lines
    assert dep is not None  # a private analysis keeps its data-dependent bound
    if dep.cost == "expected":
        label = "epsilon, data-dependent, EXPECTED over the threshold step (not a bound for any one run)"
    elif result.aggregator == "confident-gnmax":
        label = f"epsilon, data-dependent, realised ({result.num_answered} answered queries)"
    else:
        label = "epsilon, data-dependent, realised (every query answered)"
    lines += [
        f"  {label}",
        f"    {fmt_eps_ub(dep.epsilon)}  (order {dep.order:g}; improved "
        f"conversion {fmt_eps_ub(dep.epsilon_improved)}) — PRIVATE: computed "
        "from the votes, not for publication",
    ]
    if dep.cost == "expected":
        lines.append(
            "    the realised cost of a run exceeds it when more costly queries "
            "pass the threshold; pass --answered for the realised cost"
        )
    if result.aggregator == "confident-gnmax":
        answered = "" if result.num_answered is None else f" (answered: {result.num_answered})"
        lines.append(f"  expected answered queries        {dep.expected_answered:.1f}{answered} — private")
    if result.aggregator == "lnmax":
        lines.append(
            "  the data-dependent epsilon depends on the private votes and is not sanitised: do not publish it as is"
        )
    else:
        lines.append(
            "  a data-dependent epsilon depends on the private votes: publish only "
            "its smooth-sensitivity release (--smooth-sensitivity-beta/-sigma)"
        )
    return lines


def _cmd_audit(args: argparse.Namespace) -> int:
    from dpaudit.app.runs.pate import AggregatorAuditSpec, audit_aggregator

    name = _aggregator(args)
    bug = args.planted_bug
    if bug == "threshold-without-noise" and name != "confident-gnmax":
        raise UsageError(
            f"--planted-bug={bug} applies to --aggregator confident-gnmax, not {name}", argument="--planted-bug"
        )
    if name == "confident-gnmax" and args.threshold > args.num_teachers:
        raise UsageError(
            f"--threshold={args.threshold:g} must be <= --num-teachers "
            f"({args.num_teachers}): the game puts the largest count at T",
            argument="--threshold",
        )
    draws = 2 * args.trials * (args.num_classes + 1)
    if draws > MAX_DRAWS and not args.i_know:
        raise UsageError(
            f"--trials={args.trials} with --num-classes={args.num_classes} draws "
            f"{draws:,} noise values, above {MAX_DRAWS:,}; pass --i-know to run it "
            "anyway",
            argument="--trials",
        )
    params = {"lnmax": {"laplace_scale": args.laplace_scale}, "gnmax": {"sigma": args.sigma}}.get(
        name, {"threshold": args.threshold, "threshold_sigma": args.threshold_sigma, "sigma": args.sigma}
    )
    spec = AggregatorAuditSpec(
        aggregator=name,
        parameters=tuple(params.items()),
        planted_bug=bug,
        num_teachers=args.num_teachers,
        num_classes=args.num_classes,
        trials=args.trials,
        delta=args.delta,
        confidence=args.confidence,
        seed=args.seed,
    )
    audit = audit_aggregator(spec)
    result, info = audit.result, audit.details
    lines = [
        f"PATE audit of {name} ({', '.join(f'{k}={x:g}' for k, x in params.items())}), planted bug: {bug}",
        f"  game: {args.trials:,} answers on each of D = {info.votes} and D' = "
        f"{info.neighbour_votes} (one teacher's vote moved)",
        f"  epsilon_lb  {fmt_eps_lb(result.epsilon_lb)}  ({info.event}; "
        f"clopper-pearson, {result.confidence:.0%} confidence over "
        f"{info.num_tests} tests, delta={result.delta:g})",
        "  ceiling     "
        f"{'not recorded' if result.ceiling is None else fmt_eps_lb(result.ceiling)} "
        f" (the largest epsilon_lb {args.trials:,} answers per side can show: "
        "the event always on D, never on D'; more --trials raise it)",
        f"  epsilon_ub  {fmt_eps_ub(result.epsilon_ub)}  ({result.accountant}: "
        f"{', '.join(f'{k} {fmt_eps_ub(x)}' for k, x in result.epsilon_ub_by_accountant.items())}; "
        "one answered query, data-independent)",
        "  VIOLATION: epsilon_lb > epsilon_ub — the aggregator does not meet its claim"
        if result.violation
        else "  no violation",
    ]
    emit(args, audit.to_dict(), "\n".join(lines))
    return EXIT_VIOLATION if result.violation else EXIT_OK


def _cmd_attack(args: argparse.Namespace) -> int:
    from dpaudit.app.runs.pate import attack_aggregator, handles_record
    from dpaudit.app.runs.report import render_reports
    from dpaudit.store import RunDir

    record = check_record("--target", args.target)
    if not handles_record(record):
        raise UsageError(
            f"--target is a {record.defense!r} record; the aggregator attack needs a "
            "PATE student (trained with --defense pate)",
            argument="--target",
        )
    run = RunDir(args.out)
    result = attack_aggregator(
        target=args.target,
        run=run,
        repeats=args.repeats,
        num_samples=args.num_samples,
        seed=args.seed,
        data_root=args.data_root,
        device=args.device,
        progress=not args.quiet,
    )
    index = render_reports(run)
    report = next((p for p in index.membership if result.model_id in p.name), index.index_html)
    summary = result.summary(delta=args.delta)
    covered = (
        "one answer per example: what the claim covers"
        if args.repeats == 1
        else f"{args.repeats} answers per example: more than the claim covers (each answer costs privacy)"
    )
    payload = {
        "attack": result.attack,
        "target": result.model_id,
        "repeats": args.repeats,
        "covered_by_claim": args.repeats == 1,
        **summary,
        "report": str(report),
    }
    lines = [
        f"membership inference on the aggregator of {result.model_id} "
        f"({result.num_members} members, {result.num_non_members} non-members; "
        f"{covered})",
        f"  AUC {summary['auc']:.4f}  balanced accuracy "
        f"{summary['balanced_accuracy']:.4f}  TPR@1% "
        f"{'n/a' if summary['tpr_at_fpr']['0.01'] is None else format(summary['tpr_at_fpr']['0.01'], '.4f')} "
        f" epsilon_lb {fmt_eps_lb(summary['epsilon_lb'])}",
        *(f"  TPR@1%: {note}" for f, note in summary["tpr_at_fpr_notes"].items() if f == "0.01"),
        f"  report: {report}",
    ]
    emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _laplace_scale(name: str, value: float) -> float:
    """A positive ``--laplace-scale`` no smaller than :data:`MIN_LAPLACE_SCALE` (below it the analysis overflows)."""
    b = v.positive(name, value)
    if b < MIN_LAPLACE_SCALE:
        raise v.invalid(
            name,
            f"{name}={value!r} is below {MIN_LAPLACE_SCALE:.4g}: each answer would "
            f"be (2/b = {2 / b:.4g}, 0)-DP, beyond what the moments analysis can "
            "evaluate in floating point",
        )
    return b


def _noise_flags(a: argparse.ArgumentParser) -> None:
    a.add_argument(
        "--sigma", type=arg("--sigma", v.positive), metavar="S", help="GNMax noise sigma (sigma2 of Confident-GNMax)"
    )
    a.add_argument("--threshold", type=arg("--threshold", v.positive), metavar="T", help="Confident-GNMax threshold T")
    a.add_argument(
        "--threshold-sigma",
        type=arg("--threshold-sigma", v.positive),
        metavar="S1",
        help="Confident-GNMax threshold noise sigma1",
    )
    a.add_argument(
        "--laplace-scale",
        type=arg("--laplace-scale", _laplace_scale),
        metavar="B",
        help=f"LNMax Laplace scale b = 1/gamma (each answer is (2/b, 0)-DP; at least {MIN_LAPLACE_SCALE:.4g})",
    )


def _add_analyze(kinds: argparse._SubParsersAction) -> None:
    """Adds ``pate analyze``: the privacy analysis of a vote matrix."""
    a = kinds.add_parser(
        "analyze",
        help="data-independent and data-dependent epsilon of a vote matrix",
        description=(
            "The privacy analysis of a PATE vote matrix (queries x classes, integer "
            "counts; every row sums to the number of teachers) "
            "from any implementation: LNMax's moments analysis (2017), GNMax's "
            "data-dependent RDP (2018, Theorem 6 with Proposition 10), "
            "Confident-GNMax's threshold step and expected cost, on the 2018 order "
            "grid with the standard and the improved conversion; "
            "optionally the smooth-sensitivity release of the data-dependent "
            "epsilon (GNSS). A data-dependent epsilon is private: it is "
            "marked as such, and only its sanitised release is safe to publish. "
            "Without --answered, Confident-GNMax's data-dependent "
            "epsilon is the expected cost over the threshold step, not a bound for "
            "the run; with it, the realised cost. The release "
            "prints only publishable values (its noisy estimate, the "
            "data-independent bound and the release's public parameters); its "
            "noise comes from the operating system's entropy unless --seed makes it reproducible (and not private). "
            f"Limits (exceeded only with --i-know): {MAX_QUERIES:,} queries (about 1 "
            f"ms each), {MAX_VOTE_CELLS:,} counts (about {BYTES_PER_CELL} bytes each "
            "in memory), "
            f"and for the release {MAX_RELEASE_QUERIES:,} queries (10-20 ms each); "
            f"from {PROGRESS_QUERIES:,} queries (the release: "
            f"{PROGRESS_QUERIES // 10:,}) "
            "the progress is shown on stderr."
        ),
    )
    a.add_argument(
        "--votes",
        required=True,
        type=path_type("--votes", must_exist="file"),
        metavar="VOTES.npy",
        help=f"vote matrix, .npy of shape queries x classes (at most {MAX_QUERIES:,} "
        f"queries and {MAX_VOTE_CELLS:,} counts, about "
        f"{_gb(MAX_VOTE_CELLS * BYTES_PER_CELL)} "
        f"of memory, and for the smooth-sensitivity release at most {MAX_RELEASE_QUERIES:,} queries, without --i-know)",
    )
    a.add_argument(
        "--aggregator",
        choices=AGGREGATORS,
        help="default: lnmax with --laplace-scale, confident-gnmax with --threshold, else gnmax",
    )
    _noise_flags(a)
    a.add_argument(
        "--answered",
        type=path_type("--answered", must_exist="file"),
        metavar="MASK.npy",
        help="Confident-GNMax: boolean .npy, which queries were answered",
    )
    a.add_argument("--delta", type=delta_type, default=1e-5, help="delta (default 1e-5)")
    a.add_argument(
        "--smooth-sensitivity-beta",
        type=arg("--smooth-sensitivity-beta", v.positive),
        metavar="BETA",
        help="beta of the smooth-sensitivity release",
    )
    a.add_argument(
        "--smooth-sensitivity-sigma",
        type=arg("--smooth-sensitivity-sigma", v.positive),
        metavar="S_SS",
        help="sigma_ss of the smooth-sensitivity release",
    )
    a.add_argument(
        "--smooth-sensitivity-order",
        type=arg("--smooth-sensitivity-order", v.positive),
        metavar="LAMBDA",
        help="RDP order of the release, fixed in advance without the votes (default: "
        "chosen from public parameters: queries, answered count, sigmas, delta, "
        "beta, sigma_ss)",
    )
    a.add_argument(
        "--seed",
        type=seed_type,
        default=None,
        help="seed of the release noise: makes the release reproducible and NOT "
        "private (default: the operating system's entropy, as a private release "
        "needs)",
    )
    a.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    a.add_argument(
        "--i-know",
        action="store_true",
        help="accept a vote matrix above the documented limits of --votes (long runs, large memory)",
    )
    a.set_defaults(func=_cmd_analyze)


def _add_audit(kinds: argparse._SubParsersAction) -> None:
    """Adds ``pate audit``: the audit game of an aggregator."""
    u = kinds.add_parser(
        "audit",
        help="audit game of an aggregator: epsilon_lb from repeated answers on neighbouring votes",
        description=(
            "Audit a PATE aggregator: answer one query --trials times on each of "
            "two vote histograms that differ by one teacher's vote "
            "(a tie of the top two classes; for Confident-GNMax the largest count "
            "at T), bound epsilon from below from how often each "
            "answer (a label, or not answered) occurs (Clopper-Pearson at "
            "--confidence, Bonferroni over every candidate event), and set "
            "it against the aggregator's per-query epsilon_ub at --delta (LNMax: "
            "pure 2/b; GNMax: data-independent RDP; Confident-GNMax: "
            "threshold step plus GNMax). --planted-bug audits a deliberately broken "
            "aggregator instead. Exit status 3 when epsilon_lb > epsilon_ub."
        ),
    )
    u.add_argument(
        "--aggregator",
        choices=AGGREGATORS,
        help="default: lnmax with --laplace-scale, confident-gnmax with --threshold, else gnmax",
    )
    _noise_flags(u)
    u.add_argument(
        "--num-teachers",
        type=positive_int("--num-teachers", 2),
        default=250,
        metavar="N",
        help="teachers voting (default 250)",
    )
    limit_action(
        u.add_argument(
            "--num-classes", type=positive_int("--num-classes", 2), default=10, metavar="K", help="classes (default 10)"
        ),
        10**4,
        "each class is one noise draw per trial",
    )
    limit_action(
        u.add_argument(
            "--trials",
            type=positive_int("--trials"),
            default=100_000,
            metavar="N",
            help="answers drawn on each histogram (default 100000)",
        ),
        10**7,
        "each trial is one noisy answer per histogram",
    )
    u.add_argument("--delta", type=delta_type, default=1e-5, help="delta of both bounds (default 1e-5)")
    u.add_argument(
        "--confidence",
        type=arg("--confidence", v.open_unit),
        default=0.95,
        help="confidence of epsilon_lb (default 0.95)",
    )
    u.add_argument(
        "--planted-bug",
        choices=PLANTED_BUGS,
        default="none",
        help="audit a deliberately broken aggregator (default none: the real one)",
    )
    u.add_argument("--seed", type=seed_type, default=0, help="root seed of the noise (default 0)")
    u.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    u.set_defaults(func=_cmd_audit)


def _add_attack(kinds: argparse._SubParsersAction) -> None:
    """Adds ``pate attack``: membership inference on a PATE student's aggregator."""
    t = kinds.add_parser(
        "attack",
        help="membership inference on a PATE student's aggregator answers",
        description=(
            "Label-only membership inference on the noisy aggregator of a PATE "
            "student trained with `dpaudit train --defense pate`: "
            "every teacher labels the student's members (the private set) and "
            "non-members, the record's own aggregator answers each "
            "(--repeats times), and an example scores the share of answers equal to "
            "its label. The result is stored and reported "
            "with the student's other membership results. Attack the student itself, or one teacher "
            "(RUN_DIR/records/pate-teachers/ID), with `dpaudit attack membership --target`."
        ),
    )
    t.add_argument(
        "--target",
        required=True,
        type=path_type("--target", must_exist="any"),
        metavar="RECORD_DIR",
        help="a PATE student's record directory (or its record.json)",
    )
    limit_action(
        t.add_argument(
            "--repeats",
            type=positive_int("--repeats"),
            default=1,
            metavar="K",
            help="answers per example (default 1: what the claim covers)",
        ),
        10_000,
        "each repeat is one noisy answer per example",
    )
    limit_action(
        t.add_argument(
            "--num-samples",
            type=positive_int("--num-samples"),
            metavar="N",
            help="at most N members and N non-members (seeded subsample)",
        ),
        10**7,
        "every teacher labels each",
    )
    t.add_argument("--delta", type=delta_type, default=1e-5, help="delta of the epsilon lower bound (default 1e-5)")
    add_common(t, out=True, seed=True, data_root=True, device="cpu", quiet=True)
    t.set_defaults(func=_cmd_attack)


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``pate`` (with ``analyze``, ``audit`` and ``attack``) to the ``dpaudit`` parser."""
    p = sub.add_parser(
        "pate",
        help="PATE: the privacy analysis of a teacher-vote matrix and the audit of an aggregator",
        description="PATE (Papernot et al. 2017, 2018) tools.",
    )
    kinds = p.add_subparsers(dest="pate_kind", metavar="KIND", parser_class=type(p))
    kinds.required = True
    _add_analyze(kinds)
    _add_audit(kinds)
    _add_attack(kinds)
