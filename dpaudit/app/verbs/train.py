"""``dpaudit train``: train a registered defense and write its record under ``RUN_DIR/records/``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dpaudit import _validate as v
from dpaudit.app.common import (
    EXIT_OK,
    UsageError,
    arg,
    delta_type,
    emit,
    fmt_eps,
    positive_int,
    seed_type,
)

__all__ = ["register"]


def _cmd_train(args: argparse.Namespace) -> int:
    from defenses import DEFENSES
    from dpaudit.data import load_dataset, make_splits
    from dpaudit.results.record import RECORD_FILE, load_record
    from dpaudit.store import RunDir
    from dpaudit.training import resolve_device
    from dpaudit.weights import save_record

    spec = DEFENSES[args.defense]
    device = resolve_device(args.device)
    bundle = load_dataset(args.dataset, data_root=args.data_root, download=args.download)
    splits = make_splits(bundle, seed=args.split_seed if args.split_seed is not None else args.seed, member_fraction=args.member_fraction)
    config = spec.config_type(**_config_kwargs(args, spec.config_type))
    model_options: dict[str, Any] = {}
    run = RunDir(args.out).create(command=" ".join(["dpaudit", *sys.argv[1:]]))

    from defenses._common import model_id_for

    model_id = model_id_for(defense=args.defense, bundle=bundle, model_name=args.model, model_options=model_options, config=config, splits=splits, seed=args.seed)
    rdir = run.record_dir(model_id)
    if (rdir / RECORD_FILE).is_file() and not args.force:
        record = load_record(rdir)
        print(f"record {model_id} already exists in {rdir}; reusing it (pass --force to retrain)", file=sys.stderr)
    else:
        record, model = spec.train(bundle=bundle, splits=splits, model_name=args.model, model_options=model_options, config=config, seed=args.seed, device=device, progress=not args.quiet)
        save_record(record, model, rdir)
    m = record.metrics
    payload = {
        "model_id": record.model_id,
        "defense": record.defense,
        "dataset": record.dataset,
        "model_name": record.model_name,
        "record_path": str(rdir),
        "metrics": dict(m),
        "claim": record.claim.to_dict(),
        "epsilon": record.claim.epsilons(delta=args.delta),
        "delta": args.delta,
    }
    eps = ", ".join(f"{k} {fmt_eps(e)}" for k, e in payload["epsilon"].items())
    text = (
        f"trained {record.model_id}\n"
        f"  train accuracy {m['train_accuracy']:.4f}  test accuracy {m['test_accuracy']:.4f}  "
        f"({len(record.membership.members)} members, {m['train_seconds']:.1f}s)\n"
        f"  claim: {record.claim.description}; epsilon at delta={args.delta:g}: {eps}\n"
        f"  record: {rdir}"
    )
    emit(args, payload, text)
    return EXIT_OK


# Flags that configure a defense, by config field; a flag given for a defense whose config has
# no such field is a usage error rather than silently ignored.
_DEFENSE_FLAGS = {
    "epochs": "--epochs",
    "batch_size": "--batch-size",
    "learning_rate": "--learning-rate",
    "momentum": "--momentum",
    "noise_multiplier": "--noise-multiplier",
    "clip_norm": "--clip-norm",
    "lot_size": "--lot-size",
    "target_epsilon": "--target-epsilon",
    "accountant": "--accountant",
    "per_layer": "--per-layer",
    "pca_components": "--pca",
    "pca_noise": "--pca-noise",
    "sampling": "--sampling",
    "robustness_epsilon": "--robustness-epsilon",
    "robustness_delta": "--robustness-delta",
    "attack_norm_bound": "--attack-norm-bound",
    "attack_norm": "--attack-norm",
    "noise_ramp_fraction": "--noise-ramp",
    "redistribute": "--redistribute",
    "inflation": "--inflation",
}


def _config_kwargs(args: argparse.Namespace, config_type: type) -> dict[str, Any]:
    import dataclasses

    names = {f.name for f in dataclasses.fields(config_type)}
    for field, flag in _DEFENSE_FLAGS.items():
        if getattr(args, field, None) not in (None, False) and field not in names:
            raise UsageError(f"{flag}={getattr(args, field)!r} does not apply to --defense {args.defense}")
    out = {k: getattr(args, k) for k in names if getattr(args, k, None) is not None}
    if "delta" in names:
        out["delta"] = args.delta
    return out


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``train`` to the ``dpaudit`` parser."""
    from defenses import DEFENSES
    from dpaudit.data import DATASETS
    from dpaudit.models import MODELS
    from dpaudit.privacy.accountants import ACCOUNTANTS

    p = sub.add_parser(
        "train",
        help="train a defense and write its record",
        description="Train a model under a defense on a dataset split and write the record (claim, membership ids, metrics, weights) under RUN_DIR/records/.",
    )
    p.add_argument("--defense", choices=tuple(DEFENSES), required=True)
    p.add_argument("--dataset", choices=DATASETS, default="digits")
    p.add_argument("--model", choices=tuple(MODELS), required=True)
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory to write into")
    p.add_argument("--epochs", type=positive_int("--epochs"))
    p.add_argument("--batch-size", type=positive_int("--batch-size"))
    p.add_argument("--learning-rate", type=arg("--learning-rate", v.positive))
    p.add_argument("--momentum", type=arg("--momentum", v.non_negative))
    g = p.add_argument_group("DP-SGD (--defense dpsgd; Abadi et al. 2016)")
    g.add_argument("--noise-multiplier", type=arg("--noise-multiplier", v.positive), metavar="SIGMA", help="noise std / clip norm; with --target-epsilon, train until the budget is spent")
    g.add_argument("--clip-norm", type=arg("--clip-norm", v.positive), metavar="C", help="per-example L2 clipping norm")
    g.add_argument("--lot-size", type=arg("--lot-size", lambda n, x: v.integer(n, x, minimum=1), int), metavar="L", help="expected lot size (sampling rate q = L/N)")
    g.add_argument("--target-epsilon", type=arg("--target-epsilon", v.positive), metavar="E", help="privacy budget at --delta")
    g.add_argument("--accountant", choices=ACCOUNTANTS, help="accountant for the budget (default pld)")
    g.add_argument("--per-layer", action="store_true", default=None, help="clip each layer to C/sqrt(#layers)")
    g.add_argument("--pca", dest="pca_components", type=arg("--pca", lambda n, x: v.integer(n, x, minimum=1), int), metavar="K", help="DP-PCA projection to K components (abadi-mnist)")
    g.add_argument("--pca-noise", type=arg("--pca-noise", v.positive), metavar="SIGMA_P", help="DP-PCA noise multiplier")
    g.add_argument("--sampling", choices=("poisson", "shuffle-non-private-accounting"), help="lot sampling (default poisson)")
    r = p.add_argument_group("certified robustness (--defense pixeldp|agm|hgm|secure-sgd; Lecuyer et al. 2019, Phan et al. 2019)")
    r.add_argument(
        "--robustness-epsilon", type=arg("--robustness-epsilon", v.positive), metavar="EPS_R", help="epsilon_r of the noise layer (pixeldp: <= 1; default 1 for pixeldp/agm, 4 for hgm/secure-sgd)"
    )
    r.add_argument("--robustness-delta", type=arg("--robustness-delta", v.open_unit), metavar="DELTA_R", help="delta_r of the noise layer (default 0.05)")
    r.add_argument("--attack-norm-bound", type=arg("--attack-norm-bound", v.positive), metavar="L", help="attack size L the noise is calibrated for (default 0.1 pixeldp/agm, 0.2 hgm/secure-sgd)")
    r.add_argument("--attack-norm", choices=("l2", "linf", "l1"), help="norm of the attacks certified against (default l2)")
    r.add_argument("--noise-ramp", dest="noise_ramp_fraction", type=arg("--noise-ramp", v.non_negative), metavar="FRACTION", help="fraction of training over which the noise ramps up (default 0.1)")
    r.add_argument("--redistribute", action=argparse.BooleanOptionalAction, default=None, help="HGM heterogeneous noise from a pre-trained model's forward derivative (default on for hgm/secure-sgd)")
    r.add_argument("--inflation", type=arg("--inflation", v.non_negative), metavar="BETA", help="HGM inflation rate beta (default 0.5)")
    p.add_argument("--seed", type=seed_type, default=0, help="root seed (default 0)")
    p.add_argument("--split-seed", type=arg("--split-seed", lambda n, x: v.integer(n, x, minimum=0), int), help="seed of the member/non-member split (default: --seed)")
    p.add_argument("--member-fraction", type=arg("--member-fraction", v.open_unit), default=0.5, help="fraction of the training pool used as members (default 0.5)")
    p.add_argument("--delta", type=delta_type, default=1e-5, help="delta at which to report epsilon (default 1e-5)")
    p.add_argument("--data-root", metavar="DIR")
    p.add_argument("--download", action="store_true", help="download the dataset if missing (needs network)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N] (default auto)")
    p.add_argument("--force", action="store_true", help="retrain even if the record exists")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=_cmd_train)
