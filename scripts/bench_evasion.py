"""Benchmark: our evasion attacks beside Foolbox's, robust accuracy and throughput.

Trains a small classifier (``hgm-cnn`` on MNIST when the IDX files are under the data root,
else ``digits-mlp`` on scikit-learn's 8×8 digits), then runs, on the same examples, the same
radii, the same number of steps and the same relative step size:

=========  ==============  ==========================================
ours       norm            Foolbox 3
=========  ==============  ==========================================
fgsm       linf / l2       ``FGSM`` / ``L2FastGradientAttack``
ifgsm      linf / l2       ``LinfBasicIterativeAttack`` / ``L2BasicIterativeAttack``
pgd        linf / l2       ``LinfPGD`` / ``L2PGD`` (random start)
=========  ==============  ==========================================

(Goodfellow et al. 2015; Kurakin et al. 2016; Madry et al. 2018.) MIM is left out: Foolbox's
MI-FGSM normalises before accumulating, so it is a different attack from Dong et al. (2018).

Both sides get every radius in one call: ours stacks the radii along the batch dimension,
Foolbox's ``attack(fmodel, x, y, epsilons=radii)`` loops over them internally. Each timing is
one warm-up then the median of ``--repeats`` runs (``time.perf_counter``); throughput is
examples × radii per second. Radius 0 is left out of the radii (we skip it as a no-op, which
would flatter our throughput) and the clean accuracy is printed instead.

Pass criteria, checked and printed: our PGD robust accuracy is at most Foolbox's + 1 point
at every radius (both norms), and our throughput is at least Foolbox's for every attack.

Usage::

    DPAUDIT_DATA_ROOT=../shared/data .venv/bin/python scripts/bench_evasion.py \\
        --json scripts/results/evasion/bench_evasion.json
    .venv/bin/python scripts/bench_evasion.py --quick      # smoke test, a minute on 2 cores
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from dpaudit.api import (
    DatasetNotFoundError,
    atomic_write_json,
    build_model,
    evasion_config,
    load_dataset,
    resolve_device,
    run_evasion,
    torch_generator,
)

RADII = {
    "mnist": {"linf": [0.05, 0.1, 0.2, 0.3], "l2": [0.5, 1.0, 2.0, 3.0]},
    "digits": {"linf": [0.05, 0.1, 0.2, 0.3], "l2": [0.25, 0.5, 1.0, 2.0]},
}
PAIRS = (
    ("fgsm", "FGSM", "L2FastGradientAttack"),
    ("ifgsm", "LinfBasicIterativeAttack", "L2BasicIterativeAttack"),
    ("pgd", "LinfPGD", "L2PGD"),
)
PGD_TOLERANCE = 0.01  # one point of accuracy


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--dataset",
        choices=("auto", "mnist", "digits"),
        default="auto",
        help="auto: MNIST if found under the data root, else digits",
    )
    p.add_argument("--model", default=None, help="zoo model (default: hgm-cnn for MNIST, digits-mlp for digits)")
    p.add_argument("--num-examples", type=int, default=1000, help="test examples attacked (default 1000)")
    p.add_argument("--train-examples", type=int, default=None, help="training examples (default: all)")
    p.add_argument("--epochs", type=int, default=1, help="training epochs (default 1)")
    p.add_argument("--num-steps", type=int, default=10, help="iterations of ifgsm/pgd (default 10)")
    p.add_argument(
        "--step-ratio", type=float, default=0.1, help="step size relative to the radius (default 0.1, Phan et al. 2019)"
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=None,
        help="examples per batch (default: ours sizes its own chunks; Foolbox gets all examples at once)",
    )
    p.add_argument(
        "--repeats", type=int, default=3, help="timed runs after one warm-up; the median is reported (default 3)"
    )
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto (default cpu)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-root", default=None, help="data root (default $DPAUDIT_DATA_ROOT)")
    p.add_argument("--quick", action="store_true", help="smoke test: 32 examples, 2,000 training examples, 1 timed run")
    p.add_argument("--json", type=Path, default=None, help="write the measured figures to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.num_examples = min(args.num_examples, 32)
        args.train_examples = args.train_examples or 2000
        args.repeats = 1
    for name in ("num_examples", "epochs", "num_steps", "batch_size", "repeats"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if not args.step_ratio > 0:
        p.error(f"--step-ratio must be > 0, got {args.step_ratio}")
    return args


def _load(args: argparse.Namespace) -> Any:
    if args.dataset in ("auto", "mnist"):
        try:
            return load_dataset("mnist", data_root=args.data_root)
        except DatasetNotFoundError as exc:
            if args.dataset == "mnist":
                raise SystemExit(f"error: {exc}") from None
            _log(f"MNIST not found ({exc}); using digits")
    return load_dataset("digits")


def _train(args: argparse.Namespace, bundle: Any, device: torch.device) -> tuple[torch.nn.Module, str]:
    name = args.model or ("hgm-cnn" if bundle.name == "mnist" else "digits-mlp")
    with torch.random.fork_rng():  # weight init draws from the global generator
        torch.manual_seed(args.seed)
        model = build_model(name, input_shape=bundle.input_shape, num_classes=bundle.num_classes).to(device)
    x, y = bundle.train.features, bundle.train.labels
    if args.train_examples is not None:
        x, y = x[: args.train_examples], y[: args.train_examples]
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch_generator(args.seed, "bench-evasion", "batches")
    t0 = time.perf_counter()
    model.train()
    for _ in range(args.epochs):
        for idx in torch.randperm(len(x), generator=gen).split(64):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[idx].to(device)), y[idx].to(device)).backward()
            opt.step()
    opt.zero_grad(set_to_none=True)
    model.eval()
    _log(
        f"trained {name} on {len(x)} {bundle.name} examples for {args.epochs} "
        f"epoch(s) in {time.perf_counter() - t0:.1f}s"
    )
    return model, name


def _timed(fn: Callable[[], np.ndarray], repeats: int) -> tuple[np.ndarray, float, list[float]]:
    fn()  # warm-up: allocator, thread pools, lazy imports
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    assert out is not None
    return out, statistics.median(times), times


def _ours(
    model: torch.nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    attack: str,
    norm: str,
    radii: list[float],
    args: argparse.Namespace,
) -> np.ndarray:
    overrides = {} if attack == "fgsm" else {"num_steps": args.num_steps, "step_ratio": args.step_ratio}
    result = run_evasion(
        model,
        x,
        y,
        attack=evasion_config(attack, **overrides),
        radii=radii,
        norm=norm,
        batch_size=args.batch_size,
        device=args.device,
        seed=args.seed,
    )
    return result.robust_accuracy


def _foolbox(
    fb: Any,
    fmodel: Any,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    cls: str,
    radii: list[float],
    args: argparse.Namespace,
    device: torch.device,
) -> np.ndarray:
    attack_cls = getattr(fb.attacks, cls)
    attack = (
        attack_cls()
        if "Fast" in cls or cls == "FGSM"
        else attack_cls(steps=args.num_steps, rel_stepsize=args.step_ratio)
    )
    fooled = np.zeros((len(radii), len(x)), dtype=bool)
    step = args.batch_size or 32  # the examples per chunk ours picks on a CPU for 4 radii
    for begin in range(0, len(x), step):
        xb = x[begin : begin + step].to(device)
        yb = y[begin : begin + step].to(device)
        _, _, success = attack(fmodel, xb, yb, epsilons=radii)
        fooled[:, begin : begin + len(xb)] = success.cpu().numpy()
    return 1.0 - fooled.mean(axis=1)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        import foolbox as fb
    except ImportError:
        _log("foolbox is not installed (pip install foolbox); nothing to compare against")
        return 2
    device = resolve_device(args.device)
    bundle = _load(args)
    model, model_name = _train(args, bundle, device)
    x = bundle.test.features[: args.num_examples]
    y = bundle.test.labels[: args.num_examples]
    with torch.no_grad():
        clean = float((model(x.to(device)).argmax(1).cpu() == y).float().mean())
    _log(f"clean accuracy on {len(x)} test examples: {clean:.4f}")
    # Foolbox's backward() fills parameter .grad; give it its own copy of the model.
    fmodel = fb.PyTorchModel(copy.deepcopy(model).eval(), bounds=(0.0, 1.0), device=device)
    radii_by_norm = RADII["mnist" if bundle.name == "mnist" else "digits"]

    rows = []
    for norm in ("linf", "l2"):
        radii = radii_by_norm[norm]
        for ours_name, linf_cls, l2_cls in PAIRS:
            cls = linf_cls if norm == "linf" else l2_cls
            _log(f"{ours_name}/{norm} vs foolbox {cls} ...")
            ours_acc, ours_s, ours_times = _timed(
                lambda: _ours(model, x, y, attack=ours_name, norm=norm, radii=radii, args=args), args.repeats
            )
            with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                # Foolbox's random starts draw from torch's global generator; seed it locally.
                torch.manual_seed(args.seed)
                fb_acc, fb_s, fb_times = _timed(
                    lambda: _foolbox(fb, fmodel, x, y, cls=cls, radii=radii, args=args, device=device), args.repeats
                )
            work = len(x) * len(radii)
            rows.append(
                {
                    "attack": ours_name,
                    "norm": norm,
                    "foolbox_attack": cls,
                    "radii": radii,
                    "robust_accuracy_ours": ours_acc.tolist(),
                    "robust_accuracy_foolbox": fb_acc.tolist(),
                    "difference_points": (100 * (ours_acc - fb_acc)).tolist(),
                    "seconds_ours": ours_s,
                    "seconds_foolbox": fb_s,
                    "times_ours": ours_times,
                    "times_foolbox": fb_times,
                    "throughput_ours": work / ours_s,
                    "throughput_foolbox": work / fb_s,
                    "throughput_ratio": fb_s / ours_s,
                }
            )

    cert = _certification_throughput(model, model_name, bundle, x, args, device)

    pgd_ok = all(max(r["difference_points"]) <= 100 * PGD_TOLERANCE + 1e-9 for r in rows if r["attack"] == "pgd")
    speed_ok = all(r["throughput_ratio"] >= 1.0 for r in rows)
    _print_table(rows, clean=clean, args=args, model_name=model_name, dataset=bundle.name)
    print(
        "criterion: our PGD robust accuracy <= Foolbox's + "
        f"{100 * PGD_TOLERANCE:g} point at every radius: "
        f"{'PASS' if pgd_ok else 'FAIL'}"
    )
    print(f"criterion: our throughput >= Foolbox's for every attack: {'PASS' if speed_ok else 'FAIL'}")
    print(
        f"certification throughput ({model_name} with a noise layer after its "
        f"first layer, {cert['num_examples']} inputs × {cert['num_draws']} "
        f"draws): {cert['draws_per_second']:.0f} draws/s"
    )
    if args.json is not None:
        atomic_write_json(
            args.json,
            {
                "dataset": bundle.name,
                "model": model_name,
                "num_examples": len(x),
                "clean_accuracy": clean,
                "num_steps": args.num_steps,
                "step_ratio": args.step_ratio,
                "batch_size": args.batch_size,
                "repeats": args.repeats,
                "device": str(device),
                "quick": args.quick,
                "seed": args.seed,
                "torch": torch.__version__,
                "foolbox": fb.__version__,
                "torch_threads": torch.get_num_threads(),
                "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                "results": rows,
                "certification": cert,
                "criteria": {"pgd_not_weaker_than_foolbox": pgd_ok, "throughput_at_least_foolbox": speed_ok},
            },
        )
        _log(f"wrote {args.json}")
    return 0 if pgd_ok and speed_ok else 1


def _certification_throughput(
    model: torch.nn.Module,
    model_name: str,
    bundle: Any,
    x: torch.Tensor,
    args: argparse.Namespace,
    device: torch.device,
) -> dict[str, Any]:
    """Draws per second of the Monte Carlo certifier on the same network with a noise layer."""
    from dpaudit.api import build_model, find_noise_layer, sample_scores

    noisy = build_model(model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes, noise_layer=True)
    # The noise layer wraps the prefix up to the first weight layer and adds buffers only, so the
    # parameters of both networks line up one to one, in order.
    ours = [name for name, _ in noisy.named_parameters()]
    theirs = list(model.named_parameters())
    assert len(ours) == len(theirs), (ours, [n for n, _ in theirs])
    mapped = {name: p.detach() for name, (_, p) in zip(ours, theirs)}
    missing = noisy.load_state_dict(mapped, strict=False).missing_keys
    assert all(k.endswith(("noise_std", "redistribution")) for k in missing), missing
    find_noise_layer(noisy).set_noise(0.25)
    noisy.to(device)
    n, draws = min(len(x), 100 if not args.quick else 16), 1000 if not args.quick else 200
    sample_scores(noisy, x[:4], num_draws=50, device=device)  # warm-up
    res = sample_scores(noisy, x[:n], num_draws=draws, device=device)
    return {"num_examples": n, "num_draws": draws, "seconds": res.seconds, "draws_per_second": res.draws_per_second}


def _print_table(
    rows: list[dict[str, Any]], *, clean: float, args: argparse.Namespace, model_name: str, dataset: str
) -> None:
    print(
        f"\n{model_name} on {dataset}: {args.num_examples} test examples, clean accuracy {100 * clean:.1f}%, "
        f"{args.num_steps} steps (iterative attacks), step = {args.step_ratio:g} "
        f"× radius, batch {args.batch_size or 'auto (ours) / 32 (Foolbox)'}, "
        f"device {args.device}, {torch.get_num_threads()} torch threads, median of {args.repeats} after a warm-up\n"
    )
    head = (
        f"{'attack':<6} {'norm':<5} {'foolbox':<26} {'radii':<22} "
        f"{'robust acc % ours':<26} {'foolbox':<26} {'diff (points)':<28} "
        f"{'ex·r/s ours':>11} {'foolbox':>9} {'ratio':>6}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:

        def fmt(values: list[float], scale: float = 100.0, spec: str = ".1f") -> str:
            return " ".join(f"{scale * val:{spec}}" for val in values)

        print(
            f"{r['attack']:<6} {r['norm']:<5} {r['foolbox_attack']:<26} {' '.join(f'{q:g}' for q in r['radii']):<22} "
            f"{fmt(r['robust_accuracy_ours']):<26} "
            f"{fmt(r['robust_accuracy_foolbox']):<26} "
            f"{fmt(r['difference_points'], 1.0, '+.1f'):<28} "
            f"{r['throughput_ours']:>11.0f} {r['throughput_foolbox']:>9.0f} {r['throughput_ratio']:>6.2f}"
        )
    print()


if __name__ == "__main__":
    sys.exit(main())
