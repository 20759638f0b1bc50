"""``dpaudit train``: train a registered defense and write its record under ``RUN_DIR/records/``.

Every defense flag is generated from the defenses' config fields (:mod:`dpaudit.options`), so
a defense registered in :data:`defenses.DEFENSES` is trainable from the command line with all
of its hyper-parameters and nothing written here.
"""

from __future__ import annotations

import argparse
import sys

from dpaudit import _validate as v
from dpaudit.app.common import EXIT_OK, UsageError, add_common, arg, emit, fmt_eps_ub

__all__ = ["register"]

_REPORT_DELTA = 1e-5  # δ at which ε is printed for configs that have no δ of their own


def _cmd_train(args: argparse.Namespace) -> int:
    from defenses import DEFENSES
    from dpaudit.app.runs.train import TrainSpec, chance_evidence, train_or_load
    from dpaudit.options import options_from_args
    from dpaudit.results.certification_spec import CertificationSpec
    from dpaudit.store import RunDir, thaw

    spec = DEFENSES[args.defense]
    try:
        kwargs = options_from_args(args, spec.config_type, args.defense_flags, owner=f"--defense {args.defense}")
        config = spec.config_type(**kwargs)
    except (TypeError, ValueError) as exc:  # the flags the user gave built this config
        raise UsageError(str(exc), argument=getattr(exc, "argument", None)) from None
    train_spec = TrainSpec(
        defense=args.defense,
        config=config,
        model=args.model,
        dataset=args.dataset,
        seed=args.seed,
        split_seed=args.split_seed,
        member_fraction=args.member_fraction,
        data_root=args.data_root,
        device=args.device,
        force=args.force,
        progress=not args.quiet,
        executor=args.executor,
        num_workers=args.num_workers,
        address=args.address,
        ship_code=args.ship_code,
        i_know=getattr(args, "i_know", False),
    )
    if args.dry_run:
        from dpaudit.app.plan import print_plan, train_plan
        from dpaudit.app.runs.train import resolve_inputs

        bundle, splits, config, _ = resolve_inputs(train_spec)
        return print_plan(args, train_plan(train_spec, bundle=bundle, splits=splits, config=config))
    outcome = train_or_load(train_spec, RunDir(args.out))
    record, rdir = outcome.record, outcome.record_dir
    if outcome.reused:
        n = len(outcome.data_files)
        same = (
            f", trained on the same {n} file{'s' if n != 1 else ''} of dataset {args.dataset} (MD5 match)" if n else ""
        )
        print(
            f"record {record.model_id} already stored in {rdir}; reusing it{same} (pass --force to retrain)",
            file=sys.stderr,
        )
    delta = float(getattr(config, "delta", _REPORT_DELTA))
    bound = record.claim.upper_bound(delta=delta)
    epsilons = dict(bound.by_accountant)
    stored = thaw(record.config).get("certification")
    robustness = CertificationSpec.from_dict(stored).describe() if stored is not None else None
    m = record.metrics
    payload: dict[str, object] = {
        "model_id": record.model_id,
        "defense": record.defense,
        "dataset": record.dataset,
        "model_name": record.model_name,
        "record_path": str(rdir),
        "reused": outcome.reused,
        "dataset_files": dict(outcome.data_files),
        "metrics": dict(m),
        "claim": record.claim.to_dict(),
        "data_dependent": record.claim.data_dependent,
        "sanitised": record.claim.sanitised,
        "epsilon": epsilons,
        "epsilon_ub": bound.epsilon,
        "delta": delta,
        "robustness": stored,
    }
    eps = ", ".join(f"{k} {fmt_eps_ub(e)}" for k, e in epsilons.items()) or "inf (no accountant applies)"
    lines = [
        f"{'reused' if outcome.reused else 'trained'} {record.model_id}",
        f"  defense {record.defense}: {spec.summary}",
        f"  train accuracy {m['train_accuracy']:.4f}  test accuracy {m['test_accuracy']:.4f}"
        + (
            f" (expected scores over {m['test_accuracy_draws']} noise draws; one "
            f"draw {m['test_accuracy_single_draw']:.4f})"
            if "test_accuracy_draws" in m
            else ""
        )
        + f"  ({len(record.membership.members)} members, {m['train_seconds']:.1f}s)",
        f"  privacy claim: {record.claim.statement()}; epsilon at delta={delta:g}: {eps}",
    ]
    if m.get("near_chance"):
        lines.append(f"  WARNING: trained to chance ({chance_evidence(m)}); see stderr for the flags to change")
    if robustness is not None:
        lines.append(f"  robustness: {robustness}")
    if spec.report_lines is not None:
        lines += spec.report_lines(record)
    lines.append(f"  record: {rdir}")
    emit(args, payload, "\n".join(lines))
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``train`` to the ``dpaudit`` parser, with one flag per defense config field."""
    from defenses import DEFENSES
    from dpaudit.data import DATASETS
    from dpaudit.models import MODELS
    from dpaudit.options import add_option_flags

    defenses = "\n".join(f"  {name:<12} {spec.summary}" for name, spec in DEFENSES.items())
    p = sub.add_parser(
        "train",
        help="train a defense and write its record",
        description="Train a model under a defense on a dataset split and write the record "
        "(claim, membership ids, metrics, weights) under "
        "RUN_DIR/records/.\n\ndefenses:\n" + defenses,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--defense", choices=tuple(DEFENSES), required=True)
    p.add_argument("--dataset", choices=DATASETS, default="digits")
    p.add_argument("--model", choices=tuple(MODELS), required=True)
    add_common(
        p,
        out=True,
        seed=True,
        data_root=True,
        device="auto",
        quiet=True,
        executor="sub-models (PATE teachers) and federated participants (DSSGD: ray runs "
        "them as Flower clients on Ray)",
    )
    p.add_argument(
        "--split-seed",
        type=arg("--split-seed", lambda n, x: v.integer(n, x, minimum=0), int),
        help="seed of the member/non-member split (default: --seed)",
    )
    p.add_argument(
        "--member-fraction",
        type=arg("--member-fraction", v.open_unit),
        default=0.5,
        help="fraction of the training pool used as members (default 0.5)",
    )
    p.add_argument("--force", action="store_true", help="retrain even if the record exists")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (the training's time measured on this machine, its memory) and exit without training",
    )
    flags = add_option_flags(p, {name: spec.config_type for name, spec in DEFENSES.items()})
    # Only a defense with sub-models (PATE's teachers, DSSGD's participants) runs a pool of workers.
    p.set_defaults(func=_cmd_train, defense_flags=flags, uses_pool=lambda a: DEFENSES[a.defense].submodels is not None)
