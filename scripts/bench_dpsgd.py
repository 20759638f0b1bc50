#!/usr/bin/env python
"""Benchmark: DP-SGD step time against non-private SGD and Opacus, side by side.

Times one optimiser step (forward, gradient computation, clipping + noise where private,
parameter update) on the same model, batch and data for:

* ``nonprivate`` — plain SGD, ``loss.backward()``;
* ``dpaudit`` — this suite's DP-SGD step (:func:`defenses.dpsgd.training.noisy_clipped_sum` with the
  book-keeping clipping engine of :mod:`defenses.clipping`, then SGD);
* ``opacus-hooks`` — Opacus' default per-sample gradients (``grad_sample_mode="hooks"``);
* ``opacus-ghost`` — Opacus' ghost clipping (``grad_sample_mode="ghost"``).

Models (Abadi et al. 2016 §5.1 and Phan et al. 2019 §6): ``abadi-mnist`` (784→1000→10) with
batch 600 and ``hgm-cnn`` with batch 128, on MNIST when the data root has it (random images
otherwise). Each method runs in its own worker process (see :func:`bench`); the workers take
turns, round by round, and the median per-step time is reported, so that load from other
processes hits all methods alike.

Usage::

    python scripts/bench_dpsgd.py [--rounds 7] [--num-steps 3] [--json FILE] [--models abadi-mnist hgm-cnn]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from torch import nn
from torch.nn import functional as F

from dpaudit.api import GradientClipper, build_model, noisy_clipped_sum

SETUPS = {"abadi-mnist": 600, "hgm-cnn": 128}
CLIP, SIGMA, LR = 1.0, 1.0, 0.05


def _data(batch: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    try:
        from dpaudit.api import load_dataset

        bundle = load_dataset("mnist")
        return bundle.train.features[:batch].clone(), bundle.train.labels[:batch].clone(), "mnist"
    except Exception as exc:  # no MNIST under the data root: the timing does not depend on it
        print(f"MNIST not available ({exc.__class__.__name__}); using random images", file=sys.stderr)
        gen = torch.Generator().manual_seed(0)
        return torch.rand(batch, 1, 28, 28, generator=gen), torch.randint(0, 10, (batch,), generator=gen), "random"


def _model(name: str) -> nn.Module:
    torch.manual_seed(0)
    return build_model(name, input_shape=(1, 28, 28), num_classes=10).train()


def _nonprivate(name: str, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    model = _model(name)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    idx = torch.arange(len(x))

    def step() -> None:  # as defenses/nonprivate.py: index the batch out of the training tensors
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()

    return step


def _dpaudit(name: str, x: torch.Tensor, y: torch.Tensor) -> Callable[[], None]:
    model = _model(name)
    clipper = GradientClipper(model, clip_norm=CLIP)
    params = clipper.parameters()
    opt = torch.optim.SGD(params.values(), lr=LR)
    gen = torch.Generator().manual_seed(0)
    lot = torch.arange(len(x))
    batch = float(len(x))

    def step() -> None:  # as the training loop of defenses/dpsgd/training.py (the lot is indexed inside)
        update, _ = noisy_clipped_sum(
            clipper, x, y, lot, noise_std=SIGMA * CLIP, generator=gen, physical_batch_size=len(x), scale=1.0 / batch
        )
        for n, p in params.items():
            p.grad = update[n]
        opt.step()

    return step


def _opacus(name: str, x: torch.Tensor, y: torch.Tensor, mode: str) -> Callable[[], None]:
    from opacus import PrivacyEngine

    model = _model(name)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=len(x))
    engine = PrivacyEngine()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "ghost":
            module, optimizer, criterion, _ = engine.make_private(
                module=model,
                optimizer=opt,
                criterion=nn.CrossEntropyLoss(),
                data_loader=loader,
                noise_multiplier=SIGMA,
                max_grad_norm=CLIP,
                poisson_sampling=False,
                grad_sample_mode="ghost",
            )
        else:
            module, optimizer, _ = engine.make_private(
                module=model,
                optimizer=opt,
                data_loader=loader,
                noise_multiplier=SIGMA,
                max_grad_norm=CLIP,
                poisson_sampling=False,
                grad_sample_mode="hooks",
            )
            criterion = nn.CrossEntropyLoss()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        criterion(module(x), y).backward()
        optimizer.step()

    return step


def _make_step(name: str, batch: int, method: str) -> Callable[[], None]:
    x, y, _ = _data(batch)
    if method == "nonprivate":
        return _nonprivate(name, x, y)
    if method == "dpaudit":
        return _dpaudit(name, x, y)
    return _opacus(name, x, y, method.removeprefix("opacus-"))


def _worker(conn: Any, name: str, batch: int, method: str, threads: int) -> None:
    """Builds one method's step in a fresh process and times it on request."""
    torch.set_num_threads(threads)
    warnings.simplefilter("ignore")
    step = _make_step(name, batch, method)
    for _ in range(2):  # warm-up (allocator, lazy init)
        step()
    conn.send("ready")
    while True:
        steps = conn.recv()
        if steps is None:
            break
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        conn.send((time.perf_counter() - t0) / steps)
    conn.close()


def bench(
    name: str, batch: int, *, rounds: int, steps: int, with_opacus: bool, threads: int, in_process: bool
) -> dict[str, Any]:
    methods = ["nonprivate", "dpaudit"] + (["opacus-hooks", "opacus-ghost"] if with_opacus else [])
    times: dict[str, list[float]] = {m: [] for m in methods}
    if in_process:
        fns = {m: _make_step(name, batch, m) for m in methods}
        for fn in fns.values():
            for _ in range(2):
                fn()
        run = {m: (lambda fn: lambda k: _timed(fn, k))(fn) for m, fn in fns.items()}
        close: Callable[[], None] = lambda: None
    else:
        # One process per method: Opacus' per-sample gradients allocate gigabytes, after which
        # glibc's heap hands every later large tensor fresh pages, and *all* methods sharing
        # the process slowed down 2-4x (non-private included). Only one worker runs at a time.
        ctx = mp.get_context("spawn")
        workers = {}
        for m in methods:
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=_worker, args=(child, name, batch, m, threads), daemon=True)
            proc.start()
            workers[m] = (parent, proc)
            if parent.recv() != "ready":
                raise RuntimeError(f"benchmark worker for {m} failed to start")

        def ask(m: str, k: int) -> float:
            workers[m][0].send(k)
            return workers[m][0].recv()

        run = {m: (lambda m: lambda k: ask(m, k))(m) for m in methods}

        def close() -> None:
            for parent, proc in workers.values():
                parent.send(None)
                proc.join(timeout=30)

    try:
        for _ in range(rounds):
            for m in methods:
                times[m].append(run[m](steps))
    finally:
        close()
    ms = {m: 1000 * statistics.median(t) for m, t in times.items()}
    ratios = {"dpaudit/nonprivate": ms["dpaudit"] / ms["nonprivate"]}
    if with_opacus:
        ratios["opacus-hooks/dpaudit"] = ms["opacus-hooks"] / ms["dpaudit"]
        ratios["opacus-ghost/dpaudit"] = ms["opacus-ghost"] / ms["dpaudit"]
    _, _, source = _data(1)
    return {
        "model": name,
        "batch_size": batch,
        "data": source,
        "ms_per_step": ms,
        "ratios": ratios,
        "rounds": rounds,
        "steps_per_round": steps,
        "all_ms": {m: [1000 * t for t in v] for m, v in times.items()},
    }


def _timed(fn: Callable[[], None], steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t0) / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", nargs="+", choices=tuple(SETUPS), default=list(SETUPS))
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds (median reported)")
    parser.add_argument("--num-steps", type=int, default=3, help="steps per method per round")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: the CPUs this process may use)"
    )
    parser.add_argument("--no-opacus", action="store_true", help="skip the Opacus comparisons")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="time all methods in this process (see bench() for why not by default)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the measurements as JSON")
    args = parser.parse_args(argv)
    threads = args.threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    results = [
        bench(
            m,
            SETUPS[m],
            rounds=args.rounds,
            steps=args.num_steps,
            with_opacus=not args.no_opacus,
            threads=threads,
            in_process=args.in_process,
        )
        for m in args.models
    ]
    header = f"{'model':<12} {'batch':>5}  {'method':<13} {'ms/step':>9}  {'x nonprivate':>12}"
    where = "one process" if args.in_process else "one worker process per method"
    print(
        f"DP-SGD step time, torch {torch.__version__}, {threads} threads, "
        f"{where} (median of {args.rounds} interleaved rounds)"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        base = r["ms_per_step"]["nonprivate"]
        for m, t in r["ms_per_step"].items():
            print(f"{r['model']:<12} {r['batch_size']:>5}  {m:<13} {t:>9.1f}  {t / base:>12.2f}")
        print("  ratios: " + ", ".join(f"{k} = {val:.2f}" for k, val in r["ratios"].items()))
    if args.json:
        payload = {"threads": threads, "torch": torch.__version__, "in_process": args.in_process, "results": results}
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
