#!/usr/bin/env python
"""Benchmark: what fanning jobs out costs, and how far it scales (issue "Beyond one machine").

Measures, with tiny jobs, the per-job overheads of the two parallel executors of
:mod:`dpaudit.executors` — the local process pool and Ray (a local Ray here; a cluster adds the
network's latency to each round trip):

* **start-up**: creating the executor and starting W workers (``warm_up``), seconds;
* **scheduling**: the driver's time per job with empty jobs (submit, dispatch, return), the
  serial part every job pays on the driver, seconds;
* **result transfer**: the extra time per job of returning a 1 MB array (a small model's weights).

It then times one shadow-model training and one DP-SGD audit training of ``digits-mlp`` with
the cost model (:mod:`dpaudit.app.plan`) and extrapolates a 1,024-shadow LiRA and a 400-model
black-box audit (200 trials, two trainings each) to 1, 8 and 64 workers, Amdahl-style:
``T(W) = start-up + max(N × driver, ceil(N / W) × (job + transfer))`` — the workers' share
shrinks with W until the driver's serial share (N × its per-job time) is all that is left.
The speed-up stops where ``W ≈ job / driver``; the table says where for each executor.

Usage::

    python scripts/bench_scale.py [--workers 2] [--num-jobs 200] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from dpaudit.api import Job, LocalExecutor, RayExecutor

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "bench_scale" / "bench_scale.json"
WORKER_COUNTS = (1, 8, 64)


def _wall(executor: Any, jobs: list[Job]) -> float:
    start = time.perf_counter()
    for _ in executor.run(jobs):
        pass
    return time.perf_counter() - start


def measure(executor: Any, *, num_jobs: int) -> dict[str, float]:
    """Start-up, driver time per empty job, and extra time per 1 MB result, of one executor."""
    start = time.perf_counter()
    executor.warm_up()
    startup = time.perf_counter() - start
    empty = [Job(key=f"e{i}", fn=os.getpid) for i in range(num_jobs)]
    _wall(executor, empty[: max(1, num_jobs // 10)])  # first calls import what the jobs need
    per_empty = _wall(executor, empty) / num_jobs
    big = [Job(key=f"b{i}", fn=np.ones, kwargs={"shape": 2**17}) for i in range(num_jobs)]  # 1 MB of float64
    per_big = _wall(executor, big) / num_jobs
    return {"startup_s": startup, "driver_per_job_s": per_empty, "transfer_per_job_s": max(0.0, per_big - per_empty)}


def job_seconds() -> dict[str, float]:
    """One LiRA shadow, timed for real (``defenses.nonprivate`` for 30 epochs on digits' default
    members, as ``attack membership`` trains it, in this process with one thread), and one audit
    training (1,000 DP-SGD steps at q = 0.05) from the cost model, scaled by how far the cost
    model missed the real shadow (it leaves out data handling and evaluation)."""
    import torch

    from dpaudit.api import (
        PER_EXAMPLE_GRADIENT_FACTOR,
        NonPrivateConfig,
        TrainRequest,
        load_dataset,
        make_splits,
        seconds_per_example,
        train_nonprivate,
    )

    torch.set_num_threads(1)
    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0)
    members = len(splits.members)
    train_nonprivate(
        TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name="digits-mlp",
            config=NonPrivateConfig(epochs=1),
            seed=0,
            progress=False,
        )
    )  # warm-up
    start = time.perf_counter()
    train_nonprivate(
        TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name="digits-mlp",
            config=NonPrivateConfig(epochs=30),
            seed=0,
            progress=False,
        )
    )
    shadow = time.perf_counter() - start
    per = seconds_per_example("digits-mlp", input_shape=(1, 8, 8), num_classes=10)
    modelled = 30 * members * per
    audit = 1000 * 0.05 * members * per * PER_EXAMPLE_GRADIENT_FACTOR * (shadow / modelled if modelled > 0 else 1.0)
    return {"lira_shadow": shadow, "lira_shadow_cost_model": modelled, "audit_training": audit}


def extrapolate(overheads: dict[str, float], job: float, num_jobs: int, workers: int) -> float:
    """Amdahl-style wall time (see the module docstring)."""
    driver = overheads["driver_per_job_s"]
    return overheads["startup_s"] + max(
        num_jobs * driver, math.ceil(num_jobs / workers) * (job + overheads["transfer_per_job_s"])
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="workers of each executor while measuring (default 2)")
    parser.add_argument("--num-jobs", type=int, default=200, help="tiny jobs per measurement (default 200)")
    parser.add_argument(
        "--json", type=Path, default=DEFAULT_JSON, help=f"where to write the figures (default {DEFAULT_JSON})"
    )
    args = parser.parse_args()

    overheads: dict[str, dict[str, float]] = {}
    with LocalExecutor(workers=args.workers) as pool:
        overheads["local"] = measure(pool, num_jobs=args.num_jobs)
    with RayExecutor(workers=args.workers) as ray_exec:
        overheads["ray"] = measure(ray_exec, num_jobs=args.num_jobs)
    jobs = job_seconds()
    workloads = {"lira_1024_shadows": (jobs["lira_shadow"], 1024), "audit_400_models": (jobs["audit_training"], 400)}

    print(f"per-job overheads ({args.workers} workers, {args.num_jobs} tiny jobs; this machine: {os.cpu_count()} CPUs)")
    print(f"{'executor':<8} {'start-up s':>11} {'driver ms/job':>14} {'1 MB result ms/job':>19}")
    for name, o in overheads.items():
        print(
            f"{name:<8} {o['startup_s']:>11.2f} "
            f"{1000 * o['driver_per_job_s']:>14.2f} "
            f"{1000 * o['transfer_per_job_s']:>19.2f}"
        )
    table: dict[str, Any] = {}
    print(
        f"\none job: LiRA shadow {jobs['lira_shadow']:.2f} s measured (the cost "
        f"model says {jobs['lira_shadow_cost_model']:.2f} s), "
        f"audit training {jobs['audit_training']:.2f} s (cost model, scaled alike); digits-mlp, one thread"
    )
    print(
        f"{'workload':<20} {'executor':<8} "
        + " ".join(f"{f'W={w}':>10}" for w in WORKER_COUNTS)
        + f" {'speed-up stops at W≈':>21}"
    )
    for work, (job, n) in workloads.items():
        for name, o in overheads.items():
            walls = {w: extrapolate(o, job, n, w) for w in WORKER_COUNTS}
            saturate = (job + o["transfer_per_job_s"]) / max(o["driver_per_job_s"], 1e-9)
            table.setdefault(work, {})[name] = {
                "wall_seconds": {str(w): t for w, t in walls.items()},
                "saturates_at_workers": saturate,
                "job_seconds": job,
                "num_jobs": n,
            }
            print(f"{work:<20} {name:<8} " + " ".join(f"{t:>9.0f}s" for t in walls.values()) + f" {saturate:>21.0f}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "workers": args.workers,
                "num_jobs": args.num_jobs,
                "cpu_count": os.cpu_count(),
                "overheads": overheads,
                "job_seconds": jobs,
                "extrapolation": table,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"\nwritten to {args.json}")


if __name__ == "__main__":
    main()
