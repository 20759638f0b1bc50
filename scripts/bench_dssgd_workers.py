#!/usr/bin/env python
"""Times one DSSGD federation on Flower's simulation engine (Ray) with 1 and with 2 workers.

Same federation, same seed, run twice in one process: ``num_workers=1`` (one ClientApp trains
at a time) and ``num_workers=2`` (two at once, each on half the CPUs). Wall times include
Ray's start-up, so the per-round times (the server's own clock) are reported too.

Usage::

    python scripts/bench_dssgd_workers.py --dataset mnist --data-root ../shared/data --participants 8 --rounds 3 --json
    out/bench_dssgd_workers.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from dpaudit.api import (
    SCHEDULES,
    FederationSetup,
    LocalTraining,
    UploadRule,
    build_model,
    flatten_parameters,
    load_dataset,
    make_splits,
    partition_ids,
    run_flower,
)

_MODELS = {"digits": "digits-mlp", "mnist": "dssgd-mlp"}


def main(argv: list[str] | None = None) -> dict[str, object]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=sorted(_MODELS), default="digits")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--participants", type=int, default=8)
    ap.add_argument("--per-participant", type=int, default=150, help="training examples per participant")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--local-epochs", type=int, default=1)
    ap.add_argument("--schedule", choices=SCHEDULES, default="async")
    ap.add_argument("--upload-fraction", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    bundle = load_dataset(args.dataset, data_root=args.data_root)
    members = args.participants * args.per_participant
    splits = make_splits(bundle, seed=args.seed, num_members=members, num_non_members=min(100, members))
    torch.manual_seed(args.seed)
    model_name = _MODELS[args.dataset]
    model = build_model(model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes)
    setup = FederationSetup(
        dataset=args.dataset,
        data_root=args.data_root,
        partitions=partition_ids(splits.members, num_teachers=args.participants, seed=args.seed),
        model_name=model_name,
        model_options={},
        rule=UploadRule(upload_fraction=args.upload_fraction),
        training=LocalTraining(epochs=args.local_epochs, batch_size=32, learning_rate=0.05),
        seed=args.seed,
        initial=flatten_parameters(model),
    )
    result: dict[str, object] = {
        "dataset": args.dataset,
        "model": model_name,
        "participants": args.participants,
        "rounds": args.rounds,
        "schedule": args.schedule,
        "cpus": os.cpu_count(),
    }
    for workers in (1, 2):
        start = time.monotonic()
        out = run_flower(setup, rounds=args.rounds, download_fraction=1.0, schedule=args.schedule, num_workers=workers)
        wall = time.monotonic() - start
        federation = sum(out.seconds_per_round)
        result[f"workers_{workers}"] = {
            "wall_s": wall,
            "federation_s": federation,
            "seconds_per_round": list(out.seconds_per_round),
            "uploads": out.uploads_applied,
        }
        print(
            f"num_workers={workers}: wall {wall:.1f} s, federation {federation:.1f} "
            f"s ({federation / args.rounds:.2f} s/round)"
        )
    one, two = result["workers_1"], result["workers_2"]
    assert isinstance(one, dict) and isinstance(two, dict)
    result["speedup_wall"] = one["wall_s"] / two["wall_s"]
    result["speedup_federation"] = one["federation_s"] / two["federation_s"]
    print(
        f"speed-up 1 → 2 workers: {result['speedup_federation']:.2f}× "
        f"(federation), {result['speedup_wall']:.2f}× (wall, with Ray start-up)"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
