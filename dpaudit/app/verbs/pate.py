"""``dpaudit pate analyze``: the privacy analysis of a PATE vote matrix from any implementation;
``dpaudit pate audit``: the audit game of an aggregator (ε_LB from repeated answers on neighbouring votes).

Papernot et al. (2017) for LNMax's moments analysis, (2018) for GNMax's data-dependent RDP
(Theorem 6 with Proposition 10), Confident-GNMax's realised cost (``--answered``) or expected
cost, and the smooth-sensitivity release of a data-dependent ε (§4.2, Theorem 23, Appendix C).
The mathematics is :mod:`dpaudit.privacy.pate`; this verb reads the votes, picks the analysis
and prints it. Every ε it prints says whether it depends on the votes, whether it was sanitised,
and whether it is a realised or an expected cost. A release prints publishable values only: its
noisy estimate and public parameters, never the private ε, its order or the smooth sensitivity;
its noise comes from the operating system's entropy unless ``--seed`` is given, which the output
then marks as reproducible and not private. Torch-free.

``pate attack`` runs the label-only membership attack on a PATE student's aggregator
(:func:`dpaudit.app.runs.pate.attack_aggregator`): the teachers answer the student's members and
non-members through the record's own noisy aggregator, and the result joins the student's other
membership results and report.

``pate audit`` plays :func:`attacks.audit.pate.pate_audit` against the real aggregator of
:mod:`defenses.pate.aggregators` or a planted bug of :mod:`defenses.pate.planted` (imported
when it runs, so building the parser stays torch-free); exit status 3 when ε_LB > ε_UB, as
``dpaudit audit``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from dpaudit import _validate as v
from dpaudit.app.common import EXIT_OK, EXIT_VIOLATION, UsageError, add_common, arg, check_record, delta_type, emit, fmt_eps_lb, fmt_eps_ub, path_type, positive_int, seed_type
from dpaudit.options import limit_action
from dpaudit.results.audit_details import PateAuditDetails

__all__ = ["register"]

AGGREGATORS = ("gnmax", "confident-gnmax", "lnmax")
#: ``--planted-bug`` values; the same as ``defenses.pate.planted.PLANTED_PATE_BUGS`` (a test checks),
#: written out so that ``--help`` does not import the defenses (and torch).
PLANTED_BUGS = ("none", "noise-scale-too-small", "threshold-without-noise")
#: Noise draws (trials × (classes + 1) per side) above this need --i-know.
MAX_DRAWS = 10**9
#: ``pate analyze``'s documented limits (exceeded only with --i-know). Each query's data-dependent
#: RDP is evaluated in turn (about a millisecond); the matrix is held about three times (as read,
#: as int64, as float64 rows); the smooth-sensitivity release walks each query's local
#: sensitivity (measured 10-20 ms a query for 50-250 teachers).
MAX_QUERIES = 100_000
MAX_VOTE_CELLS = 10_000_000
BYTES_PER_CELL = 24
MAX_RELEASE_QUERIES = 10_000
#: The smallest ``--laplace-scale`` b the LNMax moments analysis can evaluate: it takes
#: e^{2ε} of each answer's ε = 2/b, which overflows a float once 4/b passes ln(float max) ≈ 709.8
#: (b ≈ 0.0056, an answer that is (357, 0)-DP: no privacy worth analysing).
MIN_LAPLACE_SCALE = 4.0 / math.log(sys.float_info.max)
#: From this many queries (the release: this many divided by 10) the analysis shows its progress.
PROGRESS_QUERIES = 10_000


def _load_array(flag: str, path: str, *, ndim: int) -> Any:
    """The array of a ``.npy`` file, refused from its header (before any loading) unless it has ``ndim`` dimensions."""
    import numpy as np

    from dpaudit.limits import check_npy

    try:
        check_npy(flag, path, ndim=ndim)
    except ValueError as exc:
        raise UsageError(str(exc), argument=flag) from None
    try:
        return np.load(Path(path), allow_pickle=False)
    except ValueError as exc:  # an object array (a pickle) or a malformed header
        raise UsageError(f"{flag}={path!r} is not a plain .npy array ({str(exc).splitlines()[0]})", argument=flag) from None
    except (OSError, EOFError) as exc:
        raise UsageError(f"{flag}={path!r} cannot be read as .npy ({exc})", argument=flag) from None


def _npy_shape(path: str) -> tuple[int, ...] | None:
    """The shape a .npy header declares, read without loading the array (``None`` if unreadable:
    :func:`_load_array` then says why)."""
    import numpy as np

    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, _ = header(f)
    except (OSError, ValueError, EOFError):
        return None
    return tuple(int(n) for n in shape)


def _gb(num_bytes: float) -> str:
    return f"{num_bytes / 1e9:.1f} GB" if num_bytes >= 1e9 else f"{num_bytes / 1e6:.0f} MB"


def _check_votes_size(path: str, shape: tuple[int, ...] | None, *, release: bool) -> None:
    """Refuses a vote matrix above the documented limits, from its header, before loading it."""
    if shape is None or len(shape) != 2:
        return
    queries, classes = shape
    if release and queries > MAX_RELEASE_QUERIES:
        raise UsageError(
            f"--votes={path!r} holds {queries:,} queries, above the limit {MAX_RELEASE_QUERIES:,} of the smooth-sensitivity release "
            "(each query's local sensitivity is walked over the teachers, 10-20 ms each); pass --i-know to run it anyway",
            argument="--votes",
        )
    if queries > MAX_QUERIES:
        raise UsageError(
            f"--votes={path!r} holds {queries:,} queries, above the limit {MAX_QUERIES:,} (each query's data-dependent RDP is evaluated in turn, about 1 ms each); pass --i-know to run it anyway",
            argument="--votes",
        )
    if queries * classes > MAX_VOTE_CELLS:
        raise UsageError(
            f"--votes={path!r} holds {queries:,} x {classes:,} = {queries * classes:,} counts, above the limit {MAX_VOTE_CELLS:,} "
            f"(the analysis holds about {BYTES_PER_CELL} bytes per count: {_gb(queries * classes * BYTES_PER_CELL)}); pass --i-know to run it anyway",
            argument="--votes",
        )


class _LazyProgress:
    """Progress on stderr for an analysis of many queries, started at the first query done (so an
    error found before the work stays the one line on stderr)."""

    def __init__(self, queries: int, *, release: bool) -> None:
        self.queries = queries
        self.enabled = queries >= (PROGRESS_QUERIES // 10 if release else PROGRESS_QUERIES)
        self.bar: Any = None

    def update(self, n: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from dpaudit.progress import Progress

            self.bar = Progress(self.queries, "pate analyze: queries")
        self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _aggregator(args: argparse.Namespace) -> str:
    """The aggregator: as given, or implied by the noise flags (one of them only)."""
    implied = "lnmax" if args.laplace_scale is not None else "confident-gnmax" if args.threshold is not None else "gnmax"
    name = args.aggregator or implied
    if name == "lnmax":
        if args.laplace_scale is None:
            raise UsageError("--aggregator lnmax needs --laplace-scale B (b = 1/gamma; the 2017 MNIST setting is 20)", argument="--laplace-scale")
        for flag, value in (("--sigma", args.sigma), ("--threshold", args.threshold), ("--threshold-sigma", args.threshold_sigma)):
            if value is not None:
                raise UsageError(f"{flag}={value!r} does not apply to --aggregator lnmax", argument=flag)
        return name
    if args.laplace_scale is not None:
        raise UsageError(f"--laplace-scale={args.laplace_scale!r} applies to --aggregator lnmax, not {name}", argument="--laplace-scale")
    if args.sigma is None:
        raise UsageError(f"--aggregator {name} needs --sigma S (the GNMax noise; 40 in the 2018 MNIST setting)", argument="--sigma")
    if name == "confident-gnmax" and (args.threshold is None or args.threshold_sigma is None):
        raise UsageError("--aggregator confident-gnmax needs --threshold T and --threshold-sigma S1", argument="--threshold")
    if name == "gnmax" and (args.threshold is not None or args.threshold_sigma is not None):
        raise UsageError("--threshold/--threshold-sigma apply to --aggregator confident-gnmax", argument="--threshold")
    return name


def _release(pate: Any, name: str, votes: Any, args: argparse.Namespace, answered: Any, beta: float, sigma_ss: float, progress: Any = None) -> Any:
    """The smooth-sensitivity release of the data-dependent ε (2018, §4.2), for GNMax or Confident-GNMax."""
    common = {"delta": args.delta, "beta": beta, "sigma_ss": sigma_ss, "seed": args.seed, "order": args.smooth_sensitivity_order, "progress": progress}
    if name == "gnmax":
        return pate.release_gnmax_epsilon(votes, sigma=args.sigma, **common)
    if answered is None:
        raise UsageError("--smooth-sensitivity-* with --aggregator confident-gnmax needs --answered (which queries the mechanism answered)", argument="--answered")
    return pate.release_confident_gnmax_epsilon(votes, threshold=args.threshold, threshold_sigma=args.threshold_sigma, sigma=args.sigma, answered=answered, **common)


def _analysis_lines(name: str, dep: Any, answered: Any) -> tuple[dict[str, Any], list[str]]:
    """The data-dependent ε for the researcher: JSON keys and lines, named by what it charges."""
    if dep.cost == "expected":
        key, label = "epsilon_data_dependent_expected", "epsilon, data-dependent, EXPECTED over the threshold step (not a bound for any one run)"
    elif name == "confident-gnmax":
        key, label = "epsilon_data_dependent_realised", f"epsilon, data-dependent, realised ({int(answered.sum())} answered queries)"
    else:
        key, label = "epsilon_data_dependent_realised", "epsilon, data-dependent, realised (every query answered)"
    payload = {key: dep.epsilon, f"{key}_improved": dep.epsilon_improved, "order": dep.order, "cost": dep.cost}
    lines = [f"  {label}", f"    {fmt_eps_ub(dep.epsilon)}  (order {dep.order:g}; improved conversion {fmt_eps_ub(dep.epsilon_improved)}) — PRIVATE: computed from the votes, not for publication"]
    if dep.cost == "expected":
        lines.append("    the realised cost of a run exceeds it when more costly queries pass the threshold; pass --answered for the realised cost")
    return payload, lines


def _cmd_analyze(args: argparse.Namespace) -> int:
    from dpaudit.privacy.pate import analysis as pate_analysis
    from dpaudit.privacy.pate.votes import check_votes

    name = _aggregator(args)
    smooth = (args.smooth_sensitivity_beta, args.smooth_sensitivity_sigma)
    if (smooth[0] is None) != (smooth[1] is None):
        raise UsageError("--smooth-sensitivity-beta and --smooth-sensitivity-sigma go together", argument="--smooth-sensitivity-beta")
    if smooth[0] is None:
        for flag, value in (("--smooth-sensitivity-order", args.smooth_sensitivity_order), ("--seed", args.seed)):
            if value is not None:
                raise UsageError(f"{flag}={value!r} applies to the smooth-sensitivity release (--smooth-sensitivity-beta/-sigma)", argument=flag)
    order = args.smooth_sensitivity_order
    if smooth[0] is not None and order is not None and not 1.0 < order < 1.0 / (2.0 * smooth[0]):
        raise UsageError(
            f"--smooth-sensitivity-order={order:g} must lie in (1, 1/(2*beta)) = (1, {1.0 / (2.0 * smooth[0]):g}) (Papernot et al. 2018, Theorem 23)", argument="--smooth-sensitivity-order"
        )
    if smooth[0] is not None and name == "lnmax":
        raise UsageError("the smooth-sensitivity release is defined for GNMax and Confident-GNMax, not --aggregator lnmax", argument="--smooth-sensitivity-beta")
    if args.answered is not None and name != "confident-gnmax":
        raise UsageError(f"--answered applies to --aggregator confident-gnmax, not {name}", argument="--answered")
    if not args.i_know:
        _check_votes_size(args.votes, _npy_shape(args.votes), release=smooth[0] is not None)
    try:
        votes = check_votes(_load_array("--votes", args.votes, ndim=2), name="--votes")
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc), argument="--votes") from None
    answered = None
    if args.answered is not None:
        import numpy as np

        answered = np.asarray(_load_array("--answered", args.answered, ndim=1))
        if answered.dtype != bool or answered.shape != (votes.shape[0],):
            raise UsageError(f"--answered must be a boolean .npy of shape ({votes.shape[0]},) (one entry per query), got {answered.dtype} {answered.shape}", argument="--answered")
    bar = _LazyProgress(int(votes.shape[0]), release=smooth[0] is not None)
    try:
        return _analyze(pate_analysis, args, name, votes, answered, smooth, bar.update)
    finally:
        bar.close()


def _analyze(pate: Any, args: argparse.Namespace, name: str, votes: Any, answered: Any, smooth: tuple[Any, Any], progress: Any) -> int:
    analysis: Any
    if name == "lnmax":
        analysis = pate.analyze_lnmax(votes, laplace_scale=args.laplace_scale, delta=args.delta, progress=None if smooth[0] is not None else progress)
    elif name == "gnmax":
        analysis = pate.analyze_gnmax(votes, sigma=args.sigma, delta=args.delta, progress=None if smooth[0] is not None else progress)
    else:
        analysis = pate.analyze_confident_gnmax(
            votes, threshold=args.threshold, threshold_sigma=args.threshold_sigma, sigma=args.sigma, delta=args.delta, answered=answered, progress=None if smooth[0] is not None else progress
        )
    ind = analysis.data_independent
    # Public: the shape of the votes, δ, the data-independent bound (a function of the public
    # parameters and of the answered count, itself the mechanism's public output).
    payload: dict[str, Any] = {
        "aggregator": name,
        "num_queries": int(votes.shape[0]),
        "num_teachers": int(votes[0].sum()),
        "num_classes": int(votes.shape[1]),
        "delta": args.delta,
        "epsilon_data_independent": ind.epsilon,
        "order_data_independent": ind.order,
    }
    if answered is not None:
        payload["num_answered"] = int(answered.sum())
    lines = [
        f"PATE {name}: {votes.shape[0]} queries, {int(votes[0].sum())} teachers, {votes.shape[1]} classes, delta={args.delta:g}",
        f"  epsilon, data-independent        {fmt_eps_ub(ind.epsilon)}  (order {ind.order:g})",
    ]
    if smooth[0] is not None:
        # A release prints only what may be published: the data-dependent ε, its order and the
        # expected answer count depend on the votes, so they are left out (run without the
        # --smooth-sensitivity-* flags for the private analysis).
        part, part_lines = _released(args, name, votes, answered, smooth, progress)
    else:
        part, part_lines = _private(name, analysis.data_dependent, answered)
    payload.update(part)
    lines += part_lines
    emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _released(args: argparse.Namespace, name: str, votes: Any, answered: Any, smooth: tuple[Any, Any], progress: Any) -> tuple[dict[str, Any], list[str]]:
    """The smooth-sensitivity release's JSON keys and lines: publishable values only (its noisy estimate and public parameters)."""
    from dpaudit.privacy.pate import smooth_sensitivity

    beta, sigma_ss = smooth
    try:
        release = _release(smooth_sensitivity, name, votes, args, answered, beta, sigma_ss, progress)
    except ValueError as exc:  # the library names beta / sigma_ss / order; the user typed these flags
        if isinstance(exc, v.InvalidArgument) and exc.argument in ("sigma", "threshold_sigma"):
            raise  # about --sigma / --threshold-sigma themselves (too small for a release): the CLI names them
        raise UsageError(f"--smooth-sensitivity-beta={beta:g} --smooth-sensitivity-sigma={sigma_ss:g}: {exc}", argument="--smooth-sensitivity-beta") from None
    payload = {"data_dependent": True, "sanitised": True, "publishable": not release.reproducible, "release": _release_payload(release)}
    rule = "given by --smooth-sensitivity-order" if release.order_rule == "given" else "fixed from public parameters"
    lines = [
        f"  epsilon, released (noisy estimate, smooth sensitivity)  {fmt_eps_ub(release.epsilon_noisy_estimate)}",
        f"    order {release.order:g} ({rule}), beta={beta:g}, sigma_ss={sigma_ss:g}; includes the release's own RDP cost {release.rdp_release:.4g} at that order (GNSS, Papernot et al. 2018, Thm 23)",
        "    a noisy estimate of the data-dependent epsilon, not a bound",
    ]
    if release.reproducible:
        lines.append(f"  REPRODUCIBLE, NOT PRIVATE: the release noise was drawn from --seed {release.seed}; anyone with the seed can remove it. Do not publish this value.")
    else:
        lines.append("  release noise from the operating system's entropy: the value above may be published (the private data-dependent epsilon is not shown)")
    return payload, lines


def _private(name: str, dep: Any, answered: Any) -> tuple[dict[str, Any], list[str]]:
    """The private analysis's JSON keys and lines: the data-dependent ε, marked as not for publication."""
    dep_payload, lines = _analysis_lines(name, dep, answered)
    payload: dict[str, Any] = {**dep_payload, "data_dependent": True, "sanitised": False, "publishable": False}
    if name == "confident-gnmax":
        payload["expected_answered"] = dep.expected_answered
        lines.append(f"  expected answered queries        {dep.expected_answered:.1f}" + ("" if answered is None else f" (answered: {int(answered.sum())})") + " — private")
    if name == "lnmax":
        lines.append("  the data-dependent epsilon depends on the private votes and is not sanitised: do not publish it as is")
    else:
        lines.append("  a data-dependent epsilon depends on the private votes: publish only its smooth-sensitivity release (--smooth-sensitivity-beta/-sigma)")
    return payload, lines


def _release_payload(release: Any) -> dict[str, Any]:
    """The release's JSON: its fields, all publishable (the release holds no private value)."""
    import dataclasses

    return {f.name: getattr(release, f.name) for f in dataclasses.fields(release)}


def _cmd_audit(args: argparse.Namespace) -> int:
    name = _aggregator(args)
    bug = args.planted_bug
    if bug == "threshold-without-noise" and name != "confident-gnmax":
        raise UsageError(f"--planted-bug={bug} applies to --aggregator confident-gnmax, not {name}", argument="--planted-bug")
    if name == "confident-gnmax" and args.threshold > args.num_teachers:
        raise UsageError(f"--threshold={args.threshold:g} must be <= --num-teachers ({args.num_teachers}): the game puts the largest count at T", argument="--threshold")
    draws = 2 * args.trials * (args.num_classes + 1)
    if draws > MAX_DRAWS and not args.i_know:
        raise UsageError(f"--trials={args.trials} with --num-classes={args.num_classes} draws {draws:,} noise values, above {MAX_DRAWS:,}; pass --i-know to run it anyway", argument="--trials")

    from attacks.audit.pate import pate_audit
    from defenses.pate.aggregators import aggregator_config
    from defenses.pate.planted import planted_aggregator

    params = {"lnmax": {"laplace_scale": args.laplace_scale}, "gnmax": {"sigma": args.sigma}}.get(name, {"threshold": args.threshold, "threshold_sigma": args.threshold_sigma, "sigma": args.sigma})
    config = aggregator_config(name, **params)
    result = pate_audit(
        planted_aggregator(bug, aggregator=name),
        config,
        num_teachers=args.num_teachers,
        num_classes=args.num_classes,
        trials=args.trials,
        delta=args.delta,
        confidence=args.confidence,
        seed=args.seed,
        details={"planted_bug": bug},
    )
    info = result.details
    if not isinstance(info, PateAuditDetails):
        raise TypeError(f"pate_audit must return PateAuditDetails, got {type(info).__name__}")
    payload: dict[str, Any] = {"aggregator": name, "parameters": dict(params), "planted_bug": bug, "trials": args.trials, **result.to_dict()}
    lines = [
        f"PATE audit of {name} ({', '.join(f'{k}={x:g}' for k, x in params.items())}), planted bug: {bug}",
        f"  game: {args.trials:,} answers on each of D = {info.votes} and D' = {info.neighbour_votes} (one teacher's vote moved)",
        f"  epsilon_lb  {fmt_eps_lb(result.epsilon_lb)}  ({info.event}; clopper-pearson, {result.confidence:.0%} confidence over {info.num_tests} tests, delta={result.delta:g})",
        f"  ceiling     {'not recorded' if result.ceiling is None else fmt_eps_lb(result.ceiling)}  (the largest epsilon_lb {args.trials:,} answers per side can show: the event always on D, never on D'; more --trials raise it)",
        f"  epsilon_ub  {fmt_eps_ub(result.epsilon_ub)}  ({result.accountant}: {', '.join(f'{k} {fmt_eps_ub(x)}' for k, x in result.epsilon_ub_by_accountant.items())}; one answered query, data-independent)",
        "  VIOLATION: epsilon_lb > epsilon_ub — the aggregator does not meet its claim" if result.violation else "  no violation",
    ]
    emit(args, payload, "\n".join(lines))
    return EXIT_VIOLATION if result.violation else EXIT_OK


def _cmd_attack(args: argparse.Namespace) -> int:
    from dpaudit.app.runs.pate import attack_aggregator
    from dpaudit.app.runs.report import render_reports
    from dpaudit.store import RunDir

    record = check_record("--target", args.target)
    if record.defense != "pate":
        raise UsageError(f"--target is a {record.defense!r} record; the aggregator attack needs a PATE student (trained with --defense pate)", argument="--target")
    run = RunDir(args.out)
    result = attack_aggregator(target=args.target, run=run, repeats=args.repeats, num_samples=args.num_samples, seed=args.seed, data_root=args.data_root, device=args.device, progress=not args.quiet)
    index = render_reports(run)
    report = next((p for p in index.membership if result.model_id in p.name), index.index_html)
    summary = result.summary(delta=args.delta)
    covered = "one answer per example: what the claim covers" if args.repeats == 1 else f"{args.repeats} answers per example: more than the claim covers (each answer costs privacy)"
    payload = {"attack": result.attack, "target": result.model_id, "repeats": args.repeats, "covered_by_claim": args.repeats == 1, **summary, "report": str(report)}
    lines = [
        f"membership inference on the aggregator of {result.model_id} ({result.num_members} members, {result.num_non_members} non-members; {covered})",
        f"  AUC {summary['auc']:.4f}  balanced accuracy {summary['balanced_accuracy']:.4f}  TPR@1% {'n/a' if summary['tpr_at_fpr']['0.01'] is None else format(summary['tpr_at_fpr']['0.01'], '.4f')}  epsilon_lb {fmt_eps_lb(summary['epsilon_lb'])}",
        *(f"  TPR@1%: {note}" for f, note in summary["tpr_at_fpr_notes"].items() if f == "0.01"),
        f"  report: {report}",
    ]
    emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _laplace_scale(name: str, value: float) -> float:
    """A positive ``--laplace-scale`` no smaller than :data:`MIN_LAPLACE_SCALE` (below it the analysis overflows)."""
    b = v.positive(name, value)
    if b < MIN_LAPLACE_SCALE:
        raise v.invalid(name, f"{name}={value!r} is below {MIN_LAPLACE_SCALE:.4g}: each answer would be (2/b = {2 / b:.4g}, 0)-DP, beyond what the moments analysis can evaluate in floating point")
    return b


def _noise_flags(a: argparse.ArgumentParser) -> None:
    a.add_argument("--sigma", type=arg("--sigma", v.positive), metavar="S", help="GNMax noise sigma (sigma2 of Confident-GNMax)")
    a.add_argument("--threshold", type=arg("--threshold", v.positive), metavar="T", help="Confident-GNMax threshold T")
    a.add_argument("--threshold-sigma", type=arg("--threshold-sigma", v.positive), metavar="S1", help="Confident-GNMax threshold noise sigma1")
    a.add_argument("--laplace-scale", type=arg("--laplace-scale", _laplace_scale), metavar="B", help=f"LNMax Laplace scale b = 1/gamma (each answer is (2/b, 0)-DP; at least {MIN_LAPLACE_SCALE:.4g})")


def _add_analyze(kinds: argparse._SubParsersAction) -> None:
    """Adds ``pate analyze``: the privacy analysis of a vote matrix."""
    a = kinds.add_parser(
        "analyze",
        help="data-independent and data-dependent epsilon of a vote matrix",
        description=(
            "The privacy analysis of a PATE vote matrix (queries x classes, integer counts; every row sums to the number of teachers) "
            "from any implementation: LNMax's moments analysis (2017), GNMax's data-dependent RDP (2018, Theorem 6 with Proposition 10), "
            "Confident-GNMax's threshold step and expected cost, on the 2018 order grid with the standard and the improved conversion; "
            "optionally the smooth-sensitivity release of the data-dependent epsilon (GNSS). A data-dependent epsilon is private: it is "
            "marked as such, and only its sanitised release is safe to publish. Without --answered, Confident-GNMax's data-dependent "
            "epsilon is the expected cost over the threshold step, not a bound for the run; with it, the realised cost. The release "
            "prints only publishable values (its noisy estimate, the data-independent bound and the release's public parameters); its "
            "noise comes from the operating system's entropy unless --seed makes it reproducible (and not private). "
            f"Limits (exceeded only with --i-know): {MAX_QUERIES:,} queries (about 1 ms each), {MAX_VOTE_CELLS:,} counts (about {BYTES_PER_CELL} bytes each in memory), "
            f"and for the release {MAX_RELEASE_QUERIES:,} queries (10-20 ms each); from {PROGRESS_QUERIES:,} queries (the release: {PROGRESS_QUERIES // 10:,}) "
            "the progress is shown on stderr."
        ),
    )
    a.add_argument(
        "--votes",
        required=True,
        type=path_type("--votes", must_exist="file"),
        metavar="VOTES.npy",
        help=f"vote matrix, .npy of shape queries x classes (at most {MAX_QUERIES:,} queries and {MAX_VOTE_CELLS:,} counts, about {_gb(MAX_VOTE_CELLS * BYTES_PER_CELL)} "
        f"of memory, and for the smooth-sensitivity release at most {MAX_RELEASE_QUERIES:,} queries, without --i-know)",
    )
    a.add_argument("--aggregator", choices=AGGREGATORS, help="default: lnmax with --laplace-scale, confident-gnmax with --threshold, else gnmax")
    _noise_flags(a)
    a.add_argument("--answered", type=path_type("--answered", must_exist="file"), metavar="MASK.npy", help="Confident-GNMax: boolean .npy, which queries were answered")
    a.add_argument("--delta", type=delta_type, default=1e-5, help="delta (default 1e-5)")
    a.add_argument("--smooth-sensitivity-beta", type=arg("--smooth-sensitivity-beta", v.positive), metavar="BETA", help="beta of the smooth-sensitivity release")
    a.add_argument("--smooth-sensitivity-sigma", type=arg("--smooth-sensitivity-sigma", v.positive), metavar="S_SS", help="sigma_ss of the smooth-sensitivity release")
    a.add_argument(
        "--smooth-sensitivity-order",
        type=arg("--smooth-sensitivity-order", v.positive),
        metavar="LAMBDA",
        help="RDP order of the release, fixed in advance without the votes (default: chosen from public parameters: queries, answered count, sigmas, delta, beta, sigma_ss)",
    )
    a.add_argument(
        "--seed",
        type=seed_type,
        default=None,
        help="seed of the release noise: makes the release reproducible and NOT private (default: the operating system's entropy, as a private release needs)",
    )
    a.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    a.add_argument("--i-know", action="store_true", help="accept a vote matrix above the documented limits of --votes (long runs, large memory)")
    a.set_defaults(func=_cmd_analyze)


def _add_audit(kinds: argparse._SubParsersAction) -> None:
    """Adds ``pate audit``: the audit game of an aggregator."""
    u = kinds.add_parser(
        "audit",
        help="audit game of an aggregator: epsilon_lb from repeated answers on neighbouring votes",
        description=(
            "Audit a PATE aggregator: answer one query --trials times on each of two vote histograms that differ by one teacher's vote "
            "(a tie of the top two classes; for Confident-GNMax the largest count at T), bound epsilon from below from how often each "
            "answer (a label, or not answered) occurs (Clopper-Pearson at --confidence, Bonferroni over every candidate event), and set "
            "it against the aggregator's per-query epsilon_ub at --delta (LNMax: pure 2/b; GNMax: data-independent RDP; Confident-GNMax: "
            "threshold step plus GNMax). --planted-bug audits a deliberately broken aggregator instead. Exit status 3 when epsilon_lb > epsilon_ub."
        ),
    )
    u.add_argument("--aggregator", choices=AGGREGATORS, help="default: lnmax with --laplace-scale, confident-gnmax with --threshold, else gnmax")
    _noise_flags(u)
    u.add_argument("--num-teachers", type=positive_int("--num-teachers", 2), default=250, metavar="N", help="teachers voting (default 250)")
    limit_action(u.add_argument("--num-classes", type=positive_int("--num-classes", 2), default=10, metavar="K", help="classes (default 10)"), 10**4, "each class is one noise draw per trial")
    limit_action(
        u.add_argument("--trials", type=positive_int("--trials"), default=100_000, metavar="N", help="answers drawn on each histogram (default 100000)"),
        10**7,
        "each trial is one noisy answer per histogram",
    )
    u.add_argument("--delta", type=delta_type, default=1e-5, help="delta of both bounds (default 1e-5)")
    u.add_argument("--confidence", type=arg("--confidence", v.open_unit), default=0.95, help="confidence of epsilon_lb (default 0.95)")
    u.add_argument("--planted-bug", choices=PLANTED_BUGS, default="none", help="audit a deliberately broken aggregator (default none: the real one)")
    u.add_argument("--seed", type=seed_type, default=0, help="root seed of the noise (default 0)")
    u.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    u.set_defaults(func=_cmd_audit)


def _add_attack(kinds: argparse._SubParsersAction) -> None:
    """Adds ``pate attack``: membership inference on a PATE student's aggregator."""
    t = kinds.add_parser(
        "attack",
        help="membership inference on a PATE student's aggregator answers",
        description=(
            "Label-only membership inference on the noisy aggregator of a PATE student trained with `dpaudit train --defense pate`: "
            "every teacher labels the student's members (the private set) and non-members, the record's own aggregator answers each "
            "(--repeats times), and an example scores the share of answers equal to its label. The result is stored and reported "
            "with the student's other membership results. Attack the student itself, or one teacher "
            "(RUN_DIR/records/pate-teachers/ID), with `dpaudit attack membership --target`."
        ),
    )
    t.add_argument("--target", required=True, type=path_type("--target", must_exist="any"), metavar="RECORD_DIR", help="a PATE student's record directory (or its record.json)")
    limit_action(
        t.add_argument("--repeats", type=positive_int("--repeats"), default=1, metavar="K", help="answers per example (default 1: what the claim covers)"),
        10_000,
        "each repeat is one noisy answer per example",
    )
    limit_action(t.add_argument("--num-samples", type=positive_int("--num-samples"), metavar="N", help="at most N members and N non-members (seeded subsample)"), 10**7, "every teacher labels each")
    t.add_argument("--delta", type=delta_type, default=1e-5, help="delta of the epsilon lower bound (default 1e-5)")
    add_common(t, out=True, seed=True, data_root=True, device="cpu", quiet=True)
    t.set_defaults(func=_cmd_attack)


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``pate`` (with ``analyze``, ``audit`` and ``attack``) to the ``dpaudit`` parser."""
    p = sub.add_parser("pate", help="PATE: the privacy analysis of a teacher-vote matrix and the audit of an aggregator", description="PATE (Papernot et al. 2017, 2018) tools.")
    kinds = p.add_subparsers(dest="pate_kind", metavar="KIND", parser_class=type(p))
    kinds.required = True
    _add_analyze(kinds)
    _add_audit(kinds)
    _add_attack(kinds)
