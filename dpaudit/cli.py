"""The ``dpaudit`` command line: the application layer that wires core, defenses and attacks.

Conventions (DESIGN.md, "Command line"): every verb has ``--help`` and ``--json``; progress
and logs go to stderr; with ``--json`` stdout carries exactly one JSON object whose keys are
the snake_case field names of the result. Exit status: 0 success, 2 bad usage or input (one
line naming the argument and the value, no traceback), 1 an internal failure, 3 an audit
that found ε_LB > ε_UB.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from dpaudit import _validate as v

__all__ = ["main", "build_parser", "UsageError"]

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_VIOLATION = 0, 1, 2, 3


class UsageError(Exception):
    """Bad usage or input detected after parsing; becomes one line on stderr and exit 2."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line (no usage dump) and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _arg(name: str, check: Callable[[str, Any], Any], convert: Callable[[str], Any] = float) -> Callable[[str], Any]:
    """An argparse ``type`` that converts, then validates with a shared validator."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {convert.__name__}, got {text!r}") from None
        try:
            return check(name, value)
        except (ValueError, TypeError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = name
    return parse


_delta = _arg("--delta", v.open_unit)
_sampling_rate = _arg("--sampling-rate", v.half_open_unit)
_noise = _arg("--noise-multiplier", v.positive)
_target_eps = _arg("--target-epsilon", v.positive)
_steps = _arg("--steps", lambda n, x: v.integer(n, x, minimum=1), int)
_seed = _arg("--seed", lambda n, x: v.integer(n, x, minimum=0), int)
_epochs = _arg("--epochs", lambda n, x: v.integer(n, x, minimum=1), int)
_batch = _arg("--batch-size", lambda n, x: v.integer(n, x, minimum=1), int)
_lr = _arg("--learning-rate", v.positive)
_frac = _arg("--member-fraction", v.open_unit)


def _emit(args: argparse.Namespace, payload: dict[str, Any], text: str) -> None:
    from dpaudit.store import to_jsonable

    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(to_jsonable(payload), allow_nan=False) + "\n")
    else:
        sys.stdout.write(text.rstrip("\n") + "\n")


def _fmt_eps(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.4f}"


# ----------------------------------------------------------------------------- epsilon
def _cmd_epsilon(args: argparse.Namespace) -> int:
    from dpaudit.accountants import ACCOUNTANTS, calibrate_noise_multiplier, calibrate_num_steps, sampled_gaussian_event, compute_epsilon

    if args.mechanism == "gaussian":
        return _gaussian_epsilon(args)
    if args.sampling_rate is None:
        raise UsageError("--sampling-rate is required for --mechanism dpsgd")
    names = ACCOUNTANTS if args.accountant == "all" else (args.accountant,)
    q, delta = args.sampling_rate, args.delta
    if args.target_epsilon is None:
        if args.noise_multiplier is None or args.steps is None:
            raise UsageError("--noise-multiplier and --steps are required unless --target-epsilon is given")
        event = sampled_gaussian_event(sampling_rate=q, noise_multiplier=args.noise_multiplier, num_steps=args.steps)
        values = {n: compute_epsilon(event, delta=delta, accountant=n) for n in names}
        lines = [f"epsilon at delta={delta:g} for q={q:g}, sigma={args.noise_multiplier:g}, T={args.steps}:"]
        lines += [f"  {n:<8} {_fmt_eps(e)}" for n, e in values.items()]
        _emit(args, values, "\n".join(lines))
        return EXIT_OK

    solve_with = "pld" if args.accountant == "all" else args.accountant
    if args.solve == "noise-multiplier":
        if args.noise_multiplier is not None:
            raise UsageError(f"--noise-multiplier={args.noise_multiplier!r} conflicts with --solve noise-multiplier; omit it")
        if args.steps is None:
            raise UsageError("--steps is required to solve for the noise multiplier")
        sigma = calibrate_noise_multiplier(target_epsilon=args.target_epsilon, delta=delta, sampling_rate=q, num_steps=args.steps, accountant=solve_with)
        steps = args.steps
    else:
        if args.steps is not None:
            raise UsageError(f"--steps={args.steps!r} conflicts with --solve steps; omit it")
        if args.noise_multiplier is None:
            raise UsageError("--noise-multiplier is required to solve for the number of steps")
        sigma = args.noise_multiplier
        try:
            steps = calibrate_num_steps(target_epsilon=args.target_epsilon, delta=delta, sampling_rate=q, noise_multiplier=sigma, accountant=solve_with)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    event = sampled_gaussian_event(sampling_rate=q, noise_multiplier=sigma, num_steps=steps)
    values = {n: compute_epsilon(event, delta=delta, accountant=n) for n in names}
    payload = {
        "solve": args.solve.replace("-", "_"),
        "accountant": solve_with,
        "target_epsilon": args.target_epsilon,
        "delta": delta,
        "sampling_rate": q,
        "noise_multiplier": sigma,
        "num_steps": steps,
        "epsilon": values,
    }
    lines = [
        f"target epsilon {args.target_epsilon:g} at delta={delta:g} under '{solve_with}': "
        + (f"noise multiplier sigma = {sigma:.4f} for T={steps}" if args.solve == "noise-multiplier" else f"at most T = {steps} steps at sigma={sigma:g}"),
        "epsilon reached:",
    ] + [f"  {n:<8} {_fmt_eps(e)}" for n, e in values.items()]
    _emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _gaussian_epsilon(args: argparse.Namespace) -> int:
    """A single Gaussian mechanism: its exact ε at δ, or σ under each calibration."""
    from dpaudit.gaussian import GAUSSIAN_CALIBRATIONS, calibrate_gaussian, gaussian_epsilon

    if args.sampling_rate is not None or args.steps is not None:
        raise UsageError("--sampling-rate and --steps apply to --mechanism dpsgd only")
    delta, sens = args.delta, args.sensitivity
    if args.target_epsilon is None:
        if args.noise_multiplier is None:
            raise UsageError("--noise-multiplier or --target-epsilon is required for --mechanism gaussian")
        sigma = args.noise_multiplier * sens
        eps = gaussian_epsilon(delta=delta, sigma=sigma, sensitivity=sens)
        payload = {"mechanism": "gaussian", "noise_multiplier": args.noise_multiplier, "sensitivity": sens, "delta": delta, "epsilon": eps}
        _emit(args, payload, f"Gaussian mechanism, sigma = {args.noise_multiplier:g} x sensitivity {sens:g}: exact epsilon at delta={delta:g} is {eps:.6f} (Balle & Wang 2018)")
        return EXIT_OK
    if args.noise_multiplier is not None:
        raise UsageError(f"--noise-multiplier={args.noise_multiplier!r} conflicts with --target-epsilon for --mechanism gaussian; omit it")
    names = GAUSSIAN_CALIBRATIONS if args.calibration == "all" else (args.calibration,)
    sigmas: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for name in names:
        try:
            sigmas[name] = calibrate_gaussian(epsilon=args.target_epsilon, delta=delta, sensitivity=sens, method=name)
        except ValueError as exc:
            if args.calibration != "all":
                raise
            sigmas[name], notes[name] = None, str(exc)  # e.g. classical at epsilon > 1
    payload = {"mechanism": "gaussian", "target_epsilon": args.target_epsilon, "delta": delta, "sensitivity": sens, "sigma": sigmas}
    lines = [f"Gaussian noise std for epsilon={args.target_epsilon:g}, delta={delta:g}, sensitivity={sens:g}:"]
    lines += [f"  {n:<9} " + (f"{val:.6f}" if val is not None else f"n/a ({notes[n]})") for n, val in sigmas.items()]
    _emit(args, payload, "\n".join(lines))
    return EXIT_OK


# ----------------------------------------------------------------------------- datasets
def _cmd_datasets(args: argparse.Namespace) -> int:
    from dpaudit.data import dataset_info, resolve_data_root

    root = resolve_data_root(args.data_root)
    infos = dataset_info(data_root=args.data_root)
    payload = {
        "data_root": str(root),
        "datasets": {
            i.name: {"available": i.available, "num_train": i.num_train, "num_test": i.num_test, "input_shape": list(i.input_shape) if i.input_shape else None, "num_classes": i.num_classes, "detail": i.detail}
            for i in infos
        },
    }
    lines = [f"data root: {root}", f"{'dataset':<14} {'available':<9} {'train':>7} {'test':>7}  {'shape':<12} classes  detail"]
    for i in infos:
        shape = "x".join(map(str, i.input_shape)) if i.input_shape else "-"
        lines.append(
            f"{i.name:<14} {'yes' if i.available else 'no':<9} {i.num_train if i.num_train is not None else '-':>7} "
            f"{i.num_test if i.num_test is not None else '-':>7}  {shape:<12} {i.num_classes if i.num_classes else '-':>7}  {i.detail}"
        )
    _emit(args, payload, "\n".join(lines))
    return EXIT_OK


# ----------------------------------------------------------------------------- train
def _cmd_train(args: argparse.Namespace) -> int:
    from defenses import DEFENSES
    from dpaudit.data import load_dataset, make_splits
    from dpaudit.records import RECORD_FILE, load_record, save_record
    from dpaudit.store import RunDir
    from dpaudit.training import resolve_device

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
    eps = ", ".join(f"{k} {_fmt_eps(e)}" for k, e in payload["epsilon"].items())
    text = (
        f"trained {record.model_id}\n"
        f"  train accuracy {m['train_accuracy']:.4f}  test accuracy {m['test_accuracy']:.4f}  "
        f"({len(record.membership.members)} members, {m['train_seconds']:.1f}s)\n"
        f"  claim: {record.claim.description}; epsilon at delta={args.delta:g}: {eps}\n"
        f"  record: {rdir}"
    )
    _emit(args, payload, text)
    return EXIT_OK


# Flags that configure a defense, by config field; a flag given for a defense whose config has
# no such field is a usage error rather than silently ignored.
_DEFENSE_FLAGS = {
    "epochs": "--epochs", "batch_size": "--batch-size", "learning_rate": "--learning-rate", "momentum": "--momentum",
    "noise_multiplier": "--noise-multiplier", "clip_norm": "--clip-norm", "lot_size": "--lot-size",
    "target_epsilon": "--target-epsilon", "accountant": "--accountant", "per_layer": "--per-layer",
    "pca_components": "--pca", "pca_noise": "--pca-noise", "sampling": "--sampling",
    "robustness_epsilon": "--robustness-epsilon", "robustness_delta": "--robustness-delta", "attack_norm_bound": "--attack-norm-bound",
    "attack_norm": "--attack-norm", "noise_ramp_fraction": "--noise-ramp", "redistribute": "--redistribute", "inflation": "--inflation",
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


# ----------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    from dpaudit.accountants import ACCOUNTANTS

    parser = _Parser(prog="dpaudit", description="Attack-and-audit evaluation suite for privacy-preserving deep learning.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on internal errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    p = sub.add_parser("epsilon", help="epsilon of DP-SGD under each accountant, or solve for sigma / steps", description="ε of the sampled Gaussian mechanism (DP-SGD) under the moments, RDP, PLD and strong-composition accountants; or solve for the noise multiplier (or steps) that reaches a target ε without overshooting it.")
    p.add_argument("--mechanism", choices=("dpsgd", "gaussian"), default="dpsgd", help="dpsgd: the sampled Gaussian composed over steps (default); gaussian: one Gaussian mechanism (exact ε, or σ under each calibration)")
    p.add_argument("--sampling-rate", type=_sampling_rate, metavar="Q", help="Poisson sampling rate q = lot size / N, in (0, 1] (dpsgd)")
    p.add_argument("--noise-multiplier", type=_noise, metavar="SIGMA", help="noise std / clipping norm, > 0")
    p.add_argument("--steps", type=_steps, metavar="T", help="number of steps (lots), >= 1")
    p.add_argument("--delta", type=_delta, required=True, metavar="D", help="target delta in (0, 1)")
    p.add_argument("--accountant", choices=(*ACCOUNTANTS, "all"), default="all", help="accountant (default: all)")
    p.add_argument("--target-epsilon", type=_target_eps, metavar="E", help="solve for the value that reaches this epsilon")
    p.add_argument("--solve", choices=("noise-multiplier", "steps"), default="noise-multiplier", help="what --target-epsilon solves for (default: noise-multiplier)")
    p.add_argument("--calibration", choices=("classical", "analytic", "extended", "all"), default="all", help="gaussian: calibration for --target-epsilon (classical: Dwork-Roth, epsilon <= 1; analytic: Balle-Wang; extended: Phan et al. Thm 2)")
    p.add_argument("--sensitivity", type=_arg("--sensitivity", v.positive), default=1.0, help="gaussian: L2 sensitivity (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=_cmd_epsilon)

    p = sub.add_parser("datasets", help="list datasets available under the data root", description="Which datasets are available under the data root, with their sizes.")
    p.add_argument("--data-root", metavar="DIR", help=f"data root (default: ${'DPAUDIT_DATA_ROOT'} or ~/.dpaudit/data)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=_cmd_datasets)

    from defenses import DEFENSES
    from dpaudit.data import DATASETS
    from dpaudit.models import MODELS

    p = sub.add_parser("train", help="train a defense and write its record", description="Train a model under a defense on a dataset split and write the record (claim, membership ids, metrics, weights) under RUN_DIR/records/.")
    p.add_argument("--defense", choices=tuple(DEFENSES), required=True)
    p.add_argument("--dataset", choices=DATASETS, default="digits")
    p.add_argument("--model", choices=tuple(MODELS), required=True)
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory to write into")
    p.add_argument("--epochs", type=_epochs)
    p.add_argument("--batch-size", type=_batch)
    p.add_argument("--learning-rate", type=_lr)
    p.add_argument("--momentum", type=_arg("--momentum", v.non_negative))
    g = p.add_argument_group("DP-SGD (--defense dpsgd; Abadi et al. 2016)")
    g.add_argument("--noise-multiplier", type=_noise, metavar="SIGMA", help="noise std / clip norm; with --target-epsilon, train until the budget is spent")
    g.add_argument("--clip-norm", type=_arg("--clip-norm", v.positive), metavar="C", help="per-example L2 clipping norm")
    g.add_argument("--lot-size", type=_arg("--lot-size", lambda n, x: v.integer(n, x, minimum=1), int), metavar="L", help="expected lot size (sampling rate q = L/N)")
    g.add_argument("--target-epsilon", type=_target_eps, metavar="E", help="privacy budget at --delta")
    g.add_argument("--accountant", choices=ACCOUNTANTS, help="accountant for the budget (default pld)")
    g.add_argument("--per-layer", action="store_true", default=None, help="clip each layer to C/sqrt(#layers)")
    g.add_argument("--pca", dest="pca_components", type=_arg("--pca", lambda n, x: v.integer(n, x, minimum=1), int), metavar="K", help="DP-PCA projection to K components (abadi-mnist)")
    g.add_argument("--pca-noise", type=_arg("--pca-noise", v.positive), metavar="SIGMA_P", help="DP-PCA noise multiplier")
    g.add_argument("--sampling", choices=("poisson", "shuffle-non-private-accounting"), help="lot sampling (default poisson)")
    r = p.add_argument_group("certified robustness (--defense pixeldp|agm|hgm|secure-sgd; Lecuyer et al. 2019, Phan et al. 2019)")
    r.add_argument("--robustness-epsilon", type=_arg("--robustness-epsilon", v.positive), metavar="EPS_R", help="epsilon_r of the noise layer (pixeldp: <= 1; default 1 for pixeldp/agm, 4 for hgm/secure-sgd)")
    r.add_argument("--robustness-delta", type=_arg("--robustness-delta", v.open_unit), metavar="DELTA_R", help="delta_r of the noise layer (default 0.05)")
    r.add_argument("--attack-norm-bound", type=_arg("--attack-norm-bound", v.positive), metavar="L", help="attack size L the noise is calibrated for (default 0.1 pixeldp/agm, 0.2 hgm/secure-sgd)")
    r.add_argument("--attack-norm", choices=("l2", "linf", "l1"), help="norm of the attacks certified against (default l2)")
    r.add_argument("--noise-ramp", dest="noise_ramp_fraction", type=_arg("--noise-ramp", v.non_negative), metavar="FRACTION", help="fraction of training over which the noise ramps up (default 0.1)")
    r.add_argument("--redistribute", action=argparse.BooleanOptionalAction, default=None, help="HGM heterogeneous noise from a pre-trained model's forward derivative (default on for hgm/secure-sgd)")
    r.add_argument("--inflation", type=_arg("--inflation", v.non_negative), metavar="BETA", help="HGM inflation rate beta (default 0.5)")
    p.add_argument("--seed", type=_seed, default=0, help="root seed (default 0)")
    p.add_argument("--split-seed", type=_arg("--split-seed", lambda n, x: v.integer(n, x, minimum=0), int), help="seed of the member/non-member split (default: --seed)")
    p.add_argument("--member-fraction", type=_frac, default=0.5, help="fraction of the training pool used as members (default 0.5)")
    p.add_argument("--delta", type=_delta, default=1e-5, help="delta at which to report epsilon (default 1e-5)")
    p.add_argument("--data-root", metavar="DIR")
    p.add_argument("--download", action="store_true", help="download the dataset if missing (needs network)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N] (default auto)")
    p.add_argument("--force", action="store_true", help="retrain even if the record exists")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=_cmd_train)

    # Verbs that live in their own modules (audit, attack, certify, report) register here.
    # Each module defines ``register(subparsers, shared)`` where ``shared`` holds the common
    # argument types and helpers of this module; a missing module is simply not offered.
    import importlib

    shared = {"arg": _arg, "emit": _emit, "UsageError": UsageError, "delta": _delta, "seed": _seed, "fmt_eps": _fmt_eps, "EXIT_VIOLATION": EXIT_VIOLATION, "EXIT_OK": EXIT_OK}
    for name in EXTENSION_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub, shared)
    return parser


EXTENSION_MODULES = ("dpaudit.cli_audit", "dpaudit.cli_attack", "dpaudit.cli_certify", "dpaudit.cli_report")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpaudit`` console script; returns the exit status."""
    try:
        parser = build_parser()
    except Exception as exc:  # noqa: BLE001 - a broken install must still exit 1 with one line
        if os.environ.get("DPAUDIT_DEBUG"):
            traceback.print_exc()
        print(f"dpaudit: internal error while starting: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"dpaudit {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, TypeError, FileNotFoundError) as exc:
        # Validation errors from the library name the argument and value already.
        if args.debug:
            traceback.print_exc()
        print(f"dpaudit {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"dpaudit {args.command}: interrupted; finished results are kept, rerun to resume", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence for exit status 1
        if args.debug or os.environ.get("DPAUDIT_DEBUG"):
            traceback.print_exc()
        print(f"dpaudit {args.command}: internal error: {type(exc).__name__}: {exc} (rerun with --debug for a traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
