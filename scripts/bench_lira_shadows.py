#!/usr/bin/env python
"""Benchmark: CPU-seconds per LiRA shadow of a Fashion-MNIST ``abadi-mnist`` DP-SGD target, one at a time and batched.

A LiRA shadow of a DP-SGD target trains as the target did (``attacks/membership/shadows.py``):
the ``dpsgd`` defense's default plan on the target's number of members. This script trains
such shadows for ``--steps`` of the plan's steps, the old way (the project's DP-SGD trainer,
one model a process, one torch thread) and the new way (the shadow pool's batched jobs:
:func:`dpaudit.batched.train_batched` on ``--models`` shadows with their own members and
seeds), and reports CPU-seconds per shadow-step both ways, and what they give for 64 shadows
of the full plan. Both sides run in this process, alternating, so the machine's load slows
them alike; the CPU time is ``time.process_time``.

Usage::

    DPAUDIT_DATA_ROOT=../shared/data OMP_NUM_THREADS=1 python scripts/bench_lira_shadows.py \\
        [--steps 20] [--models 16] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit.api import (
    BatchedDPSGD,
    DPSGDConfig,
    DPSGDTrainer,
    build_model,
    load_dataset,
    numpy_rng,
    plan_dpsgd,
    resolve_config,
    train_batched,
)

RESULTS = Path(__file__).resolve().parents[1] / "scripts" / "results" / "membership"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20, help="steps of the plan each shadow takes here (default 20)")
    p.add_argument("--models", type=int, default=16, help="shadows per batched job (default 16, MODELS_PER_BATCH)")
    p.add_argument("--rounds", type=int, default=2, help="alternating rounds of both sides")
    p.add_argument("--members", type=int, default=30_000, help="members per shadow (the default target's: 30,000)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    load_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    everything = load_dataset("fashion-mnist").all()
    pool_ids = np.sort(numpy_rng(0, "bench-lira").permutation(everything.ids.numpy())[: 2 * args.members])
    pool = everything.subset(pool_ids)
    config = DPSGDConfig()  # the defense's defaults, as `dpaudit train --defense dpsgd` ran the target
    plan = plan_dpsgd(config, num_members=args.members)
    resolved, _ = resolve_config(config, num_members=args.members)
    q = plan.sampling_rate
    old_config = DPSGDConfig(
        noise_multiplier=plan.noise_multiplier,
        clip_norm=resolved.clip_norm,
        sampling_rate=q,
        epochs=args.steps * q,
        learning_rate=resolved.learning_rate,
        accountant="rdp",
    )
    trainer = DPSGDTrainer(config=old_config, model_name="abadi-mnist")
    batched = BatchedDPSGD(
        noise_multiplier=plan.noise_multiplier,
        clip_norm=float(resolved.clip_norm),  # type: ignore[arg-type]
        sampling_rate=q,
        num_steps=args.steps,
        learning_rate=float(resolved.learning_rate),  # type: ignore[arg-type]
        expected_lot_size=plan.expected_lot_size,
    )

    def build() -> torch.nn.Module:
        return build_model("abadi-mnist", input_shape=pool.input_shape, num_classes=pool.num_classes)

    def members(seed: int) -> np.ndarray:
        return np.sort(numpy_rng(seed, "bench-lira-members").permutation(pool_ids)[: args.members])

    old_cpu = new_cpu = 0.0
    old_models = new_models = 0
    seed = 1
    for r in range(args.rounds):
        for side in ("old", "new") if r % 2 == 0 else ("new", "old"):
            started = time.process_time()
            if side == "old":
                trainer(pool.subset(members(seed)), seed=seed)
                old_cpu += time.process_time() - started
                old_models += 1
                seed += 1
            else:
                seeds = list(range(seed, seed + args.models))
                mask = np.stack([np.isin(pool_ids, members(s)) for s in seeds])
                train_batched(
                    build, pool.features, pool.labels, seeds=seeds, config=batched, members=mask, sample_ids=pool.ids
                )
                new_cpu += time.process_time() - started
                new_models += args.models
                seed += args.models
            print(f"round {r + 1} {side}: {time.process_time() - started:.1f} CPU-s", file=sys.stderr, flush=True)
    old_step = old_cpu / (old_models * args.steps)
    new_step = new_cpu / (new_models * args.steps)
    full = 64 * plan.num_steps
    out = {
        "members": args.members,
        "plan": {"sampling_rate": q, "noise_multiplier": plan.noise_multiplier, "num_steps": plan.num_steps},
        "steps_measured": args.steps,
        "models_per_batch": args.models,
        "one_at_a_time_cpu_s_per_shadow_step": old_step,
        "batched_cpu_s_per_shadow_step": new_step,
        "ratio": old_step / new_step,
        "one_at_a_time_cpu_min_for_64_shadows": old_step * full / 60,
        "batched_cpu_min_for_64_shadows": new_step * full / 60,
        "load_before": load_before,
        "load_after": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_lira_shadows.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
