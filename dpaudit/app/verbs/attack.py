"""``dpaudit attack membership|inversion|uploads``: membership-inference and model-inversion attacks from the command
line.

``uploads`` is the parameter server's seat of DSSGD (:func:`dpaudit.app.runs.dssgd.attack_uploads`).

Parse → :class:`dpaudit.app.runs.membership.MembershipSpec` → :func:`run_membership` → print;
``inversion`` likewise through :class:`dpaudit.app.runs.inversion.InversionSpec`, its attacks and
their flags read from :data:`attacks.inversion.INVERSION_ATTACKS`.
The attack choices and every attack's flags come from
:data:`attacks.membership.MEMBERSHIP_ATTACKS` (each config field declares its flag with
:func:`dpaudit.options.option`), so registering an attack is enough for it to appear here.
``attacks`` is imported when the parser is built for this verb only, so ``dpaudit --help``
stays light.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from dpaudit.app.common import (
    EXIT_OK,
    UsageError,
    add_common,
    check_executor_flags,
    check_record,
    delta_type,
    emit,
    fmt_eps_lb,
    path_type,
    positive_int,
)
from dpaudit.limits import LIMITS
from dpaudit.options import limit_action

if TYPE_CHECKING:
    from dpaudit.results.membership import MembershipSummary

__all__ = ["register"]


def default_membership_attacks() -> list[str]:
    """``attack membership``'s attacks without ``--attack``: every registered one that trains no shadow model.

    Read from the registry's capability (:attr:`MembershipAttackSpec.needs_shadows`), so a new
    shadow-free attack joins the default by registering itself. Without shadow models the run
    costs one pass of the target over its members and non-members, whatever the dataset; the
    shadow-model attacks cost one training of the target's defense per shadow, which a user
    asks for by name (or ``all``).
    """
    from attacks.membership import MEMBERSHIP_ATTACKS

    return [name for name, spec in MEMBERSHIP_ATTACKS.items() if not spec.needs_shadows]


_SHADOW_HELP = (
    "Shadow models: --num-shadows N (shadow, lira, lira-offline) and --num-references R (rmia, rmia-offline) count "
    "the models one attack uses from its pool. Online attacks (lira, rmia) share one pool, in which each queried "
    "example is IN for about half of the models; offline attacks (shadow, lira-offline, rmia-offline) share another, "
    "trained on population data only. A pool has as many models as the largest count of the attacks using it (RMIA "
    "takes the first R, default all; 16 when no count is given), so '--num-shadows 8 --attack lira --attack "
    "lira-offline' trains 8 + 8 = 16 models. The command prints the count and the reason before training and reuses "
    "models already in the run's shadow cache. Shadows are trained with the target's own defense and config."
)


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``attack`` (with ``membership``) to the ``dpaudit`` parser."""
    from attacks.membership import MEMBERSHIP_ATTACKS
    from dpaudit.data import DATASETS
    from dpaudit.options import add_option_flags

    p = sub.add_parser(
        "attack",
        help="run attacks against a trained model",
        description="Run attacks against a trained model and store their results under RUN_DIR/attacks/.",
    )
    kinds = p.add_subparsers(dest="attack_kind", metavar="KIND", parser_class=type(p))
    kinds.required = True
    listing = "; ".join(f"{name}: {spec.summary}" for name, spec in MEMBERSHIP_ATTACKS.items())
    m = kinds.add_parser(
        "membership",
        help="membership inference (" + ", ".join(MEMBERSHIP_ATTACKS) + ")",
        description=(
            "Membership-inference attacks against a suite-trained record (--target) or an external model "
            f"(--model-fn/--weights/--dataset/--member-ids). Attacks — {listing}. Reports AUC, balanced accuracy, "
            "TPR at FPR 0.1% and 1%, and an honest epsilon lower bound. " + _SHADOW_HELP
        ),
    )
    m.add_argument(
        "--target",
        type=path_type("--target", must_exist="any"),
        metavar="PATH",
        help="record directory, its record.json, or a run directory with one record",
    )
    m.add_argument(
        "--model-fn", metavar="MODULE:FUNCTION", help="external model: zero-argument function that builds the nn.Module"
    )
    m.add_argument(
        "--weights",
        type=path_type("--weights", must_exist="file"),
        metavar="FILE",
        help="external model: .safetensors or .pt state dict",
    )
    m.add_argument("--dataset", choices=DATASETS, help="external model: the dataset it was trained on")
    m.add_argument(
        "--member-ids",
        type=path_type("--member-ids", must_exist="file"),
        metavar="FILE",
        help="external model: JSON list or .npy of the training sample ids",
    )
    m.add_argument(
        "--non-member-ids",
        type=path_type("--non-member-ids", must_exist="file"),
        metavar="FILE",
        help="external model: held-out ids (default: as many unused training ids)",
    )
    m.add_argument(
        "--attack",
        action="append",
        choices=(*MEMBERSHIP_ATTACKS, "all"),
        help="attack to run (repeatable; 'all' for every registered attack). Default: the attacks that train no "
        f"shadow model ({', '.join(default_membership_attacks())}), which score the target alone in seconds; the "
        "stronger ones (lira, rmia, shadow and their offline forms) each train a pool of shadow models first",
    )
    limit_action(
        m.add_argument(
            "--num-queries",
            type=positive_int("--num-queries"),
            metavar="N",
            help="query augmentations per example for LiRA/RMIA (default: 2 where mirroring/shifts apply, else 1)",
        ),
        LIMITS["queries"],
    )
    limit_action(
        m.add_argument(
            "--num-samples",
            type=positive_int("--num-samples"),
            metavar="N",
            help="score at most N members and N non-members (seeded subsample)",
        ),
        LIMITS["samples"],
    )
    limit_action(
        m.add_argument(
            "--num-population",
            type=positive_int("--num-population"),
            default=1000,
            metavar="N",
            help="RMIA population samples z (default 1000)",
        ),
        LIMITS["population"],
    )
    add_common(m, out=True, seed=True, data_root=True, device="cpu", quiet=True, executor="shadow models")
    m.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (jobs, estimated CPU-hours, wall time here and on 8 and "
        "64 workers, memory per job) and exit without training shadow models",
    )
    m.add_argument("--delta", type=delta_type, default=1e-5, help="delta of the epsilon lower bound (default 1e-5)")
    flags = add_option_flags(m, {name: spec.config_type for name, spec in MEMBERSHIP_ATTACKS.items()})
    m.set_defaults(func=lambda args: _cmd_membership(args, flags))
    _register_inversion(kinds)
    _register_uploads(kinds)


def _spec(args: argparse.Namespace, flags: Any) -> Any:
    from attacks.membership import MEMBERSHIP_ATTACKS, expand_attacks
    from dpaudit.app.runs.membership import ExternalTarget, MembershipSpec, read_ids
    from dpaudit.options import option_specs, options_from_args

    if (args.target is None) == (args.model_fn is None):
        raise UsageError(
            "give exactly one of --target PATH or --model-fn MODULE:FUNCTION (with --weights, --dataset, --member-ids)",
            argument="--target",
        )
    check_executor_flags(args)
    names = expand_attacks(args.attack if args.attack else default_membership_attacks())
    configs = {}
    for name in names:
        spec = MEMBERSHIP_ATTACKS[name]
        mine = {s.flag for s in option_specs(spec.config_type)}
        # A flag meant for another requested attack is not an error for this one.
        kwargs = options_from_args(
            args, spec.config_type, {f: s for f, s in flags.items() if f in mine}, owner=f"attack {name!r}"
        )
        configs[name] = spec.config_type(**kwargs)
    wanted = {s.flag for n in names for s in option_specs(MEMBERSHIP_ATTACKS[n].config_type)}
    for flag, s in flags.items():
        if getattr(args, s.field, None) is not None and flag not in wanted:
            raise UsageError(
                f"{flag}={getattr(args, s.field)!r} does not apply to --attack {', '.join(names)}", argument=flag
            )
    target: Any
    if args.target is not None:
        for flag, val in (
            ("--weights", args.weights),
            ("--dataset", args.dataset),
            ("--member-ids", args.member_ids),
            ("--non-member-ids", args.non_member_ids),
        ):
            if val is not None:
                raise UsageError(f"{flag}={val!r} applies to --model-fn targets only", argument=flag)
        from dpaudit.results.record import resolve_record_dir

        try:
            target = resolve_record_dir(args.target)
        except ValueError as exc:
            raise UsageError(f"--target: {exc}", argument="--target") from None
    else:
        missing = [
            f
            for f, val in (("--weights", args.weights), ("--dataset", args.dataset), ("--member-ids", args.member_ids))
            if val is None
        ]
        if missing:
            raise UsageError(f"--model-fn={args.model_fn!r} needs {', '.join(missing)}", argument="--model-fn")
        from dpaudit.callables import resolve_callable
        from dpaudit.weights import load_weights

        resolve_callable(args.model_fn, argument="--model-fn")  # fail before any data loads
        try:
            load_weights(args.weights)
        except ValueError as exc:
            raise UsageError(f"--weights: {exc}", argument="--weights") from None
        non = read_ids("--non-member-ids", args.non_member_ids) if args.non_member_ids is not None else None
        target = ExternalTarget(
            model_fn=args.model_fn,
            weights=args.weights,
            dataset=args.dataset,
            member_ids=read_ids("--member-ids", args.member_ids),
            non_member_ids=non,
        )
    return MembershipSpec(
        attacks=configs,
        target=target,
        seed=args.seed,
        num_samples=args.num_samples,
        num_queries=args.num_queries,
        num_population=args.num_population,
        executor=args.executor,
        num_workers=args.num_workers,
        address=args.address,
        ship_code=args.ship_code,
        data_root=args.data_root,
        device=args.device,
        progress=not args.quiet,
        command=" ".join(["dpaudit", *sys.argv[1:]]),
        i_know=getattr(args, "i_know", False),
    )


def _cmd_membership(args: argparse.Namespace, flags: Any) -> int:
    from dpaudit.app.runs.membership import run_membership
    from dpaudit.store import RunDir

    spec = _spec(args, flags)
    if args.dry_run:
        from dpaudit.app.plan import membership_plan, print_plan
        from dpaudit.app.runs.membership import _load_target

        return print_plan(args, membership_plan(spec, record=_load_target(spec, "cpu")[0]))
    run = RunDir(args.out)
    say = (lambda line: print(f"training or reusing {line}", file=sys.stderr)) if not args.quiet else None
    done = run_membership(spec, run, on_plan=say)
    from dpaudit.app.runs.report import render_reports

    index = render_reports(run)
    report = next((p for p in index.membership if done.model_id in p.name), index.index_html)
    summaries = {name: r.metrics(delta=args.delta) for name, r in done.results.items()}
    shadows = [
        {
            "pool": p.kind,
            "num_models": p.num_models,
            "attacks": list(p.attacks),
            "num_trained": p.num_trained,
            "num_reused": p.num_reused,
        }
        for p in done.pools
    ]
    payload = {
        "attacks": {name: s.to_dict() for name, s in summaries.items()},
        "target": done.model_id,
        "shadows": shadows,
        "shadow_defense": done.shadow_defense,
        "result_dir": str(done.result_dir),
        "report": str(report),
        "index": str(index.index_html),
    }
    lines = [
        f"membership inference against {done.model_id} ({done.num_members} members, {done.num_non_members} non-members)"
    ]
    for p in done.pools:
        lines.append(
            f"  {p.kind} shadow pool: {p.num_models} models ({p.num_trained} "
            f"trained, {p.num_reused} reused; trained as {done.shadow_defense!r}) "
            f"for {', '.join(p.attacks)}"
        )
    lines.append(f"  {'attack':<17} {'AUC':>6} {'bal.acc':>7} {'TPR@0.1%':>9} {'TPR@1%':>7} {'eps_lb':>7}")
    for name, s in summaries.items():
        lines.append(
            f"  {name:<17} {s.auc:6.4f} {s.balanced_accuracy:7.4f} "
            f"{_rate(s, '0.001'):>9} {_rate(s, '0.01'):>7} "
            f"{fmt_eps_lb(s.epsilon_lb):>7}"
        )
    # A rate the non-members cannot resolve is shown as n/a, with the reason once below the table.
    notes = {f: n for s in summaries.values() for f, n in s.tpr_at_fpr_notes.items()}
    lines += [f"  TPR@{float(f):.1%}: {note}" for f, note in sorted(notes.items())]
    lines.append(f"  results: {done.result_dir}\n  report: {report}")
    emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _rate(summary: MembershipSummary, fpr: str) -> str:
    """A TPR cell of the text table: the rate, or ``n/a`` where the sample cannot resolve it."""
    value = summary.tpr_at_fpr[fpr]
    return "n/a" if value is None else f"{value:.4f}"


def _inversion_configs() -> dict[str, type]:
    """Every config type whose fields are ``attack inversion`` flags: attacks, their priors, the evaluator."""
    from attacks.inversion import INVERSION_ATTACKS
    from attacks.inversion.evaluate import EvaluatorConfig

    types: dict[str, type] = {name: spec.config_type for name, spec in INVERSION_ATTACKS.items()}
    types.update(
        {
            f"prior:{spec.prior.name}": spec.prior.config_type
            for spec in INVERSION_ATTACKS.values()
            if spec.prior is not None
        }
    )
    types["evaluator"] = EvaluatorConfig
    return types


def _register_inversion(kinds: Any) -> None:
    from attacks.inversion import INVERSION_ATTACKS
    from dpaudit.options import add_option_flags

    listing = "; ".join(f"{name}: {spec.summary}" for name, spec in INVERSION_ATTACKS.items())
    p = kinds.add_parser(
        "inversion",
        help="model inversion (" + ", ".join(INVERSION_ATTACKS) + ")",
        description=(
            "Model-inversion attacks against a suite-trained record: one "
            f"reconstruction per class. Attacks — {listing}. "
            "Each reconstruction is judged by an independent evaluation classifier "
            "(another architecture, trained on the "
            "target's private training data, cached in the run): attack accuracy "
            "top-1/top-5, KNN distance in its feature "
            "space and PSNR to the nearest private image of the class. Then: is a "
            "reconstruction nearer the training members "
            "of its class than held-out images of the class, or only the class "
            "average? Distances to the class mean, the "
            "nearest member and the nearest non-member, and a membership score "
            "(AUC, TPR at low FPR, epsilon lower bound)."
        ),
    )
    p.add_argument(
        "--target",
        required=True,
        type=path_type("--target", must_exist="any"),
        metavar="PATH",
        help="record directory, its record.json, or a run directory with one record",
    )
    p.add_argument(
        "--attack",
        action="append",
        choices=(*INVERSION_ATTACKS, "all"),
        required=True,
        help="attack to run (repeatable; 'all' for every registered attack)",
    )
    p.add_argument("--classes", metavar="LIST", help="labels to invert, e.g. 0-9 or 0,3,7 (default: every class)")
    p.add_argument(
        "--public-data",
        metavar="DATASET[:CLASSES]",
        help="public images the prior (GMI's GAN) learns from, never seen by the "
        "target, e.g. mnist:5-9 for a mnist-0-4 target or faces:20-39 for "
        "faces-1-20",
    )
    add_common(p, out=True, seed=True, data_root=True, device="cpu", quiet=True)
    p.add_argument(
        "--delta",
        type=delta_type,
        default=1e-5,
        help="delta of the epsilon lower bound of the membership score (default 1e-5)",
    )
    flags = add_option_flags(p, _inversion_configs())
    p.set_defaults(func=lambda args: _cmd_inversion(args, flags))


def _parse_classes(text: str | None) -> tuple[int, ...] | None:
    from dpaudit.data.subsets import parse_classes

    if text is None:
        return None
    try:
        return parse_classes(text, argument="--classes")
    except ValueError as exc:
        raise UsageError(str(exc), argument="--classes") from None


def _inversion_spec(args: argparse.Namespace, flags: Any) -> Any:
    from attacks.inversion import INVERSION_ATTACKS, expand_inversion_attacks
    from dpaudit.app.runs.inversion import InversionSpec, parse_public_data
    from dpaudit.options import option_specs, options_from_args
    from dpaudit.results.record import resolve_record_dir

    names = expand_inversion_attacks(args.attack)
    types = _inversion_configs()
    wanted_types = {n: types[n] for n in names}
    wanted_types.update(
        {
            f"prior:{INVERSION_ATTACKS[n].prior.name}": types[f"prior:{INVERSION_ATTACKS[n].prior.name}"]  # type: ignore[union-attr]
            for n in names
            if INVERSION_ATTACKS[n].prior is not None
        }
    )
    wanted_types["evaluator"] = types["evaluator"]
    built = {}
    for key, config_type in wanted_types.items():
        mine = {s.flag for s in option_specs(config_type)}
        built[key] = config_type(
            **options_from_args(
                args, config_type, {f: s for f, s in flags.items() if f in mine}, owner=f"attack {key!r}"
            )
        )
    wanted = {s.flag for t in wanted_types.values() for s in option_specs(t)}
    for flag, s in flags.items():
        if getattr(args, s.field, None) is not None and flag not in wanted:
            raise UsageError(
                f"{flag}={getattr(args, s.field)!r} does not apply to --attack {', '.join(names)}", argument=flag
            )
    try:
        target = resolve_record_dir(args.target)
    except ValueError as exc:
        raise UsageError(f"--target: {exc}", argument="--target") from None
    try:
        public = parse_public_data(args.public_data) if args.public_data is not None else None
    except ValueError as exc:
        raise UsageError(str(exc), argument="--public-data") from None
    with_prior = [n for n in names if INVERSION_ATTACKS[n].prior is not None]
    if public is not None and not with_prior:
        raise UsageError(
            f"--public-data={args.public_data!r} applies only to attacks with a "
            f"prior (gmi), not to --attack {', '.join(names)}",
            argument="--public-data",
        )
    if public is None and with_prior:
        raise UsageError(
            f"--attack {', '.join(with_prior)} needs --public-data "
            "DATASET[:CLASSES]: images of the target's domain it never saw (e.g. "
            "mnist:5-9 for a mnist-0-4 target)",
            argument="--public-data",
        )
    classes = _parse_classes(args.classes)
    if classes is not None or public is not None:
        from dpaudit.app.runs.inversion import check_public_data
        from dpaudit.data import DATASETS

        record = check_record("--target", str(args.target))
        n = DATASETS[record.dataset].num_classes if record.dataset in DATASETS else None
        if classes is not None and (
            len(set(classes)) != len(classes) or min(classes) < 0 or (n is not None and max(classes) >= n)
        ):
            raise UsageError(
                f"--classes must be distinct labels 0..{(n or 1) - 1} of {record.dataset!r}, got {args.classes!r}",
                argument="--classes",
            )
        if public is not None:
            try:
                check_public_data(public, dataset=record.dataset, classes=classes or tuple(range(n or 0)))
            except ValueError as exc:
                raise UsageError(str(exc), argument="--public-data") from None
    return InversionSpec(
        target=target,
        attacks={n: built[n] for n in names},
        priors={k.removeprefix("prior:"): c for k, c in built.items() if k.startswith("prior:")},
        public_data=public,
        classes=classes,
        evaluator=built["evaluator"],
        seed=args.seed,
        data_root=args.data_root,
        device=args.device,
        progress=not args.quiet,
        command=" ".join(["dpaudit", *sys.argv[1:]]),
        i_know=getattr(args, "i_know", False),
    )


def _cmd_inversion(args: argparse.Namespace, flags: Any) -> int:
    from dpaudit.app.runs.inversion import run_inversion
    from dpaudit.app.runs.report import render_reports
    from dpaudit.store import RunDir

    spec = _inversion_spec(args, flags)
    say = (lambda line: print(f"training or reusing {line}", file=sys.stderr)) if not args.quiet else None
    done = run_inversion(spec, RunDir(args.out), on_plan=say)
    index = render_reports(args.out)
    pages = [p for p in getattr(index, "inversion", ()) if done.model_id in p.name] or list(
        getattr(index, "inversion", ())
    )
    report = pages[0] if pages else index.index_html
    summaries = {name: r.metrics(delta=args.delta) for name, r in done.results.items()}
    payload = {
        "attacks": {name: s.to_dict() for name, s in summaries.items()},
        "target": done.model_id,
        "evaluator_accuracy": done.evaluator_accuracy,
        "trained": list(done.trained),
        "reused": list(done.reused),
        "result_dir": str(done.result_dir),
        "report": str(report),
        "index": str(index.index_html),
    }
    any_result = next(iter(done.results.values()))
    # The result's metadata is free-form JSON: a stored class count is used only when it is a number.
    stored_n = any_result.metadata.get("num_dataset_classes")
    chance = 1.0 / (int(stored_n) if isinstance(stored_n, (int, float)) else any_result.num_classes)
    lines = [
        f"model inversion against {done.model_id} ({any_result.num_classes} "
        "classes; evaluator accuracy on held-out images "
        f"{done.evaluator_accuracy:.3f}; chance {chance:.3f})"
    ]
    if done.reused:
        lines.append(f"  reused from the run's cache: {', '.join(done.reused)}")
    lines.append(
        f"  {'attack':<8} {'top-1':>6} {'top-5':>6} {'KNN':>7} {'PSNR':>6} {'AUC':>6} {'eps_lb':>7} {'seconds':>8}"
    )
    for name, s in summaries.items():
        seconds = done.results[name].metadata.get("seconds")
        secs = float(seconds) if isinstance(seconds, (int, float)) else float("nan")
        lines.append(
            f"  {name:<8} {s.attack_accuracy_top1:6.3f} "
            f"{s.attack_accuracy_top5:6.3f} {s.knn_distance:7.3f} "
            f"{s.psnr:6.2f} {s.membership.auc:6.3f} "
            f"{fmt_eps_lb(s.membership.epsilon_lb):>7} {secs:8.1f}"
        )
    for name in summaries:
        lines.append(f"  {done.results[name].finding()}")
    lines.append(f"  results: {done.result_dir}\n  report: {report}")
    emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _register_uploads(kinds: Any) -> None:
    p = kinds.add_parser(
        "uploads",
        help="DSSGD: what the parameter server learns from a participant's uploads",
        description=(
            "The server's seat of distributed selective SGD (Shokri & Shmatikov "
            "2015): reads the uploads a DSSGD record kept for its "
            "observed participant (uploads.npz, from `dpaudit train --defense dssgd "
            "--observe-participant I`), reconstructs inputs from "
            "each turn's first-layer update (row i of dW divided by db_i; one "
            "example's update is a copy of it), scores the "
            "reconstructions by SSIM against the participant's partition "
            "(recognisable at SSIM >= 0.5), and infers membership of the "
            "partition from the uploads. The membership result joins the record's other membership results and report."
        ),
    )
    p.add_argument(
        "--target",
        required=True,
        type=path_type("--target", must_exist="any"),
        metavar="RECORD_DIR",
        help="a DSSGD record directory (the global model's), or its record.json",
    )
    limit_action(
        p.add_argument(
            "--max-turns",
            type=positive_int("--max-turns"),
            metavar="N",
            help="attack only the first N turns (default: all kept)",
        ),
        10**6,
        "each turn is one reconstruction",
    )
    limit_action(
        p.add_argument(
            "--max-images",
            type=positive_int("--max-images"),
            default=16,
            metavar="K",
            help="reconstructions kept per turn (default 16)",
        ),
        10**5,
        "each is scored against the whole partition",
    )
    add_common(p, out=True, seed=True, data_root=True, quiet=True)
    p.set_defaults(func=_cmd_uploads)


def _cmd_uploads(args: argparse.Namespace) -> int:
    from dpaudit.app.runs.dssgd import attack_uploads
    from dpaudit.app.runs.report import render_reports
    from dpaudit.store import RunDir

    check_record("--target", args.target)  # a missing or corrupt record: one line before any work
    run = RunDir(args.out)
    # attack_uploads refuses a record that is not DSSGD's, naming the target.
    done = attack_uploads(
        target=args.target,
        run=run,
        max_turns=args.max_turns,
        max_images=args.max_images,
        seed=args.seed,
        data_root=args.data_root,
        progress=not args.quiet,
    )
    index = render_reports(run)
    report = next((p for p in index.membership if done.model_id in p.name), index.index_html)
    s = done.summary()
    payload = {**s, "report": str(report)}
    lines = [
        f"server-seat attacks on participant {done.participant} of {done.model_id} ({done.turns} uploads)",
        f"  reconstruction: best SSIM {s['best_ssim_max']:.3f} (mean over turns {s['best_ssim_mean_over_turns']:.3f}); "
        f"{s['distinct_recognised_total']} recognisable copies of private inputs (SSIM >= 0.5)",
        f"  membership from uploads: AUC {s['membership_auc']:.4f}  TPR@1% "
        f"{s['membership_tpr_at_1pct_fpr_note'] or format(s['membership_tpr_at_1pct_fpr'], '.4f')}",
        f"  report: {report}",
    ]
    emit(args, payload, "\n".join(lines))
    return EXIT_OK
