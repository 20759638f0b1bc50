"""``dpaudit attack membership``: membership-inference attacks from the command line.

Part of the application layer (DESIGN.md, "Import rule"): it wires the core to ``attacks``
and ``reports``, imported inside the command so that ``dpaudit --help`` stays light.

Attacks and their papers are listed in :mod:`attacks.membership`; shadow models are trained
through :mod:`dpaudit.executors` (process pool by default, ``--executor ray [--address …]``)
and cached under ``RUN_DIR/attacks/shadows/`` so that reruns resume. Results go to
``RUN_DIR/attacks/membership/<model_id>/`` (JSON + NPZ) and a Markdown section with a log–log
ROC figure to ``RUN_DIR/reports/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit import _validate as v
from dpaudit.app.common import (
    EXIT_OK,
    UsageError,
    arg,
    delta_type,
    emit,
    seed_type,
)

__all__ = ["register"]


def _attacks_module() -> Any:
    from attacks import membership

    return membership


def _int_at_least(name: str, minimum: int) -> Any:
    return arg(name, lambda n, x: v.integer(n, x, minimum=minimum), int)


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``attack`` (with ``membership``) to the ``dpaudit`` parser."""
    from dpaudit.data import DATASETS
    from dpaudit.executors import EXECUTORS

    attack_names = ("loss", "confidence", "entropy", "modified-entropy", "shadow", "lira", "lira-offline", "rmia", "rmia-offline", "all")
    p = sub.add_parser("attack", help="run attacks against a trained model", description="Run attacks against a trained model and store their results under RUN_DIR/attacks/.")
    kinds = p.add_subparsers(dest="attack_kind", metavar="KIND", parser_class=type(p))
    kinds.required = True
    m = kinds.add_parser(
        "membership",
        help="membership inference (threshold, shadow models, LiRA, RMIA)",
        description=(
            "Membership-inference attacks against a suite-trained record (--target) or an external model "
            "(--model-fn/--weights/--dataset/--member-ids): loss, confidence, entropy, modified-entropy "
            "(Yeom et al. 2018; Song & Mittal 2021), shadow (Shokri et al. 2017), lira / lira-offline "
            "(Carlini et al. 2022), rmia / rmia-offline (Zarifzadeh et al. 2024). Reports AUC, balanced accuracy, "
            "TPR at FPR 0.1% and 1%, and an honest epsilon lower bound."
        ),
    )
    m.add_argument("--target", metavar="PATH", help="record directory, its record.json, or a run directory with one record")
    m.add_argument("--model-fn", metavar="MODULE:FUNCTION", help="external model: zero-argument function that builds the nn.Module")
    m.add_argument("--weights", metavar="FILE", help="external model: .safetensors or .pt state dict")
    m.add_argument("--dataset", choices=DATASETS, help="external model: the dataset it was trained on")
    m.add_argument("--member-ids", metavar="FILE", help="external model: JSON list or .npy of the training sample ids")
    m.add_argument("--non-member-ids", metavar="FILE", help="external model: held-out ids (default: as many unused training ids)")
    m.add_argument("--attack", action="append", choices=attack_names, required=True, help="attack to run (repeatable; 'all' for every attack)")
    m.add_argument("--shadows", type=_int_at_least("--shadows", 1), default=16, metavar="N", help="shadow models for shadow/lira/lira-offline (default 16)")
    m.add_argument("--references", type=_int_at_least("--references", 1), metavar="R", help="reference models for RMIA (default: --shadows)")
    m.add_argument("--executor", choices=EXECUTORS, default="local", help="where shadow models train: local process pool (default), ray, or serial (in-process)")
    m.add_argument("--workers", type=_int_at_least("--workers", 1), metavar="W", help="parallel workers (default: CPU count)")
    m.add_argument("--address", metavar="ADDR", help="Ray cluster address (with --executor ray; default: start a local Ray)")
    m.add_argument("--num-queries", type=_int_at_least("--num-queries", 1), metavar="N", help="query augmentations per example for LiRA/RMIA (default: 2 where mirroring/shifts apply, else 1)")
    m.add_argument("--num-samples", type=_int_at_least("--num-samples", 1), metavar="N", help="score at most N members and N non-members (seeded subsample)")
    m.add_argument("--num-population", type=_int_at_least("--num-population", 1), default=1000, metavar="N", help="RMIA population samples z (default 1000)")
    m.add_argument("--gamma", type=arg("--gamma", v.positive), default=1.0, help="RMIA likelihood-ratio threshold (default 1)")
    m.add_argument("--offline-a", type=arg("--offline-a", _unit_closed), metavar="A", help="RMIA offline a in [0, 1] (default: tuned on the references)")
    m.add_argument("--shadow-epochs", type=_int_at_least("--shadow-epochs", 1), metavar="E", help="shadow training epochs (default: the target's)")
    m.add_argument("--seed", type=seed_type, default=0, help="root seed (default 0)")
    m.add_argument("--delta", type=delta_type, default=1e-5, help="delta of the epsilon lower bound (default 1e-5)")
    m.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory (results, shadow cache, report)")
    m.add_argument("--data-root", metavar="DIR", help="data root (default: $DPAUDIT_DATA_ROOT or ~/.dpaudit/data)")
    m.add_argument("--device", default="cpu", help="cpu (default), auto or cuda[:N], for shadow training and inference")
    m.add_argument("--quiet", action="store_true", help="no progress on stderr")
    m.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    m.set_defaults(func=lambda args: _cmd_membership(args))


def _unit_closed(name: str, value: Any) -> float:
    x = v.real(name, value)
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")
    return x


def _read_ids(flag: str, path: str) -> np.ndarray:
    """Sample ids from a JSON list or a .npy file (read without pickle)."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"{flag}: file not found: {path!r}")
    try:
        if p.suffix == ".npy":
            arr = np.load(p, allow_pickle=False)
        else:
            arr = np.asarray(json.loads(p.read_text(encoding="utf-8")))
    except (ValueError, OSError) as exc:
        raise ValueError(f"{flag}: {path!r} must be a JSON list or .npy array of integer sample ids ({exc})") from None
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"{flag}: {path!r} must hold a 1-D list of integer sample ids, got dtype {arr.dtype} shape {arr.shape}")
    return arr.astype(np.int64)


def _external_target(args: argparse.Namespace, UsageError: type) -> tuple[Any, Any, Any]:
    from dpaudit.data import load_dataset
    from dpaudit.privacy.claims import NonPrivateClaim
    from dpaudit.results.record import Membership, TrainedModel
    from dpaudit.seeding import numpy_rng
    from dpaudit.weights import load_external_model

    missing = [f for f, val in (("--weights", args.weights), ("--dataset", args.dataset), ("--member-ids", args.member_ids)) if val is None]
    if missing:
        raise UsageError(f"--model-fn={args.model_fn!r} needs {', '.join(missing)}")
    bundle = load_dataset(args.dataset, data_root=args.data_root)
    model = load_external_model(args.model_fn, args.weights)
    members = np.unique(_read_ids("--member-ids", args.member_ids))
    train_ids = bundle.train.ids.numpy()
    unknown = np.setdiff1d(members, bundle.all().ids.numpy())
    if unknown.size:
        raise UsageError(f"--member-ids: sample id {int(unknown[0])} is not in dataset {args.dataset!r}")
    rest = np.setdiff1d(train_ids, members)
    if args.non_member_ids is not None:
        non = np.unique(_read_ids("--non-member-ids", args.non_member_ids))
        if np.intersect1d(non, members).size:
            raise UsageError(f"--non-member-ids: {args.non_member_ids!r} shares ids with --member-ids")
    else:
        non = np.sort(numpy_rng(args.seed, "external-non-members").permutation(rest)[: members.size])
    population = np.setdiff1d(rest, non)
    digest = hashlib.sha256(Path(args.weights).read_bytes()).hexdigest()[:12]
    record = TrainedModel(
        model_id=f"external-{bundle.name}-{digest}",
        defense="external",
        model_name=f"external:{args.model_fn}",
        dataset=bundle.name,
        input_shape=bundle.input_shape,
        num_classes=bundle.num_classes,
        claim=NonPrivateClaim(description="external model; no privacy claim stated"),
        membership=Membership(members=members, non_members=non, population=population),
        seed=args.seed,
    )
    return record, model, bundle


def _cmd_membership(args: argparse.Namespace) -> int:
    from dpaudit.data import load_dataset
    from dpaudit.executors import make_executor
    from dpaudit.results.record import load_record, resolve_record_dir
    from dpaudit.store import RunDir
    from dpaudit.training import resolve_device
    from dpaudit.weights import load_model

    if (args.target is None) == (args.model_fn is None):
        raise UsageError("give exactly one of --target PATH or --model-fn MODULE:FUNCTION (with --weights, --dataset, --member-ids)")
    if args.address is not None and args.executor != "ray":
        raise UsageError(f"--address={args.address!r} needs --executor ray, got --executor {args.executor}")
    device = str(resolve_device(args.device))
    mia = _attacks_module()
    from attacks import shadows

    if args.target is not None:
        for flag, val in (("--weights", args.weights), ("--dataset", args.dataset), ("--member-ids", args.member_ids), ("--non-member-ids", args.non_member_ids)):
            if val is not None:
                raise UsageError(f"{flag}={val!r} applies to --model-fn targets only")
        try:
            rdir = resolve_record_dir(args.target)
        except ValueError as exc:
            raise UsageError(f"--target: {exc}") from None
        record = load_record(rdir)
        model = load_model(rdir, device=device)
        bundle = load_dataset(record.dataset, data_root=args.data_root)
    else:
        record, model, bundle = _external_target(args, UsageError)
    sample_ids, is_member = mia.query_ids(record, max_per_side=args.num_samples, seed=args.seed)
    if not is_member.any() or is_member.all():
        raise UsageError(f"--target {record.model_id!r} has {int(is_member.sum())} members and {int((~is_member).sum())} non-members; both are needed")
    training = shadows.ShadowTraining.from_config(record.config, epochs=args.shadow_epochs)
    run = RunDir(args.out).create(command=" ".join(["dpaudit", *sys.argv[1:]]))
    try:
        executor = make_executor(args.executor, workers=args.workers, address=args.address)
    except ImportError as exc:
        raise UsageError(f"--executor ray: {exc}") from None
    with executor:
        results = mia.run_membership_attacks(
            args.attack,
            record=record,
            model=model,
            bundle=bundle,
            sample_ids=sample_ids,
            is_member=is_member,
            seed=args.seed,
            num_shadows=args.shadows,
            num_references=args.references,
            num_queries=args.num_queries,
            num_population=args.num_population,
            gamma=args.gamma,
            offline_a=args.offline_a,
            training=training,
            shadow_directory=shadows.shadow_dir(run.path),
            executor=executor,
            data_root=args.data_root,
            device=device,
            progress=not args.quiet,
        )
    result_dir = mia.save_membership_results(results, run.path)
    from reports.membership import write_membership_report

    report = write_membership_report(results, run.path, delta=args.delta)
    summaries = {name: r.summary(delta=args.delta) for name, r in results.items()}
    payload = {"attacks": summaries, "target": record.model_id, "result_dir": str(result_dir), "report": str(report)}
    lines = [f"membership inference against {record.model_id} ({int(is_member.sum())} members, {int((~is_member).sum())} non-members)"]
    lines.append(f"  {'attack':<17} {'AUC':>6} {'bal.acc':>7} {'TPR@0.1%':>9} {'TPR@1%':>7} {'eps_lb':>7}")
    for name, s in summaries.items():
        lines.append(f"  {name:<17} {s['auc']:6.4f} {s['balanced_accuracy']:7.4f} {s['tpr_at_fpr']['0.001']:9.4f} {s['tpr_at_fpr']['0.01']:7.4f} {s['epsilon_lb']:7.3f}")
    lines.append(f"  results: {result_dir}\n  report: {report}")
    emit(args, payload, "\n".join(lines))
    return EXIT_OK
