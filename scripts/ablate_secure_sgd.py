#!/usr/bin/env python
"""Secure-SGD against DP-SGD on MNIST, one change at a time (the ablation table of docs/results/certified.md).

Trains ``hgm-cnn`` with DP-SGD and with Secure-SGD variants at ε = 2 (δ = 1e-5, lots of 250,
lr 0.1, momentum 0.9, C = 1; ε_r = 4, L = 0.2 for the noise layer) on the same members, and
prints the test accuracy of one noise draw and of the majority of 32 draws on the first
2,000 test images. Each row is appended to ``--out`` as a JSON line.

Usage::

    DPAUDIT_DATA_ROOT=../shared/data python scripts/ablate_secure_sgd.py --members 60000 --epochs 10 --only dpsgd,gain
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from dpaudit.api import (
    DPSGDConfig,
    SecureSGDConfig,
    TrainRequest,
    expected_score_accuracy,
    load_dataset,
    make_splits,
    train_dpsgd,
    train_secure_sgd,
)

#: name → Secure-SGD settings (``None``: plain DP-SGD on the same network without the noise layer).
VARIANTS: dict[str, dict[str, Any] | None] = {
    "dpsgd": None,
    "before": dict(sensitivity_control="scale-noise", redistribution_pretrain_epochs=1),  # r from a pre-trained model
    "gain": dict(sensitivity_control="normalize", redistribute=False),
    "gain-ramp0.3": dict(sensitivity_control="normalize", redistribute=False, noise_ramp_fraction=0.3),
    "gain-hgm-r": dict(sensitivity_control="normalize", redistribution_pretrain_epochs=1),
    "gain-no-noise": dict(sensitivity_control="normalize", redistribute=False, robustness_epsilon=1000.0),
    "orthogonal": dict(sensitivity_control="orthogonal", redistribute=False),
    "orthogonal-ramp0.3": dict(sensitivity_control="orthogonal", redistribute=False, noise_ramp_fraction=0.3),
    "orthogonal-no-noise": dict(sensitivity_control="orthogonal", redistribute=False, robustness_epsilon=1000.0),
}


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, draws: int = 32) -> tuple[float, float]:
    """(one draw, majority of ``draws``) test accuracy of a randomized model."""
    model.eval()
    votes = torch.zeros(len(x), 10)
    one = 0.0
    for d in range(draws):
        pred = torch.cat([model(x[i : i + 500]).argmax(1) for i in range(0, len(x), 500)])
        if d == 0:
            one = (pred == y).float().mean().item()
        votes[torch.arange(len(x)), pred] += 1
    return one, (votes.argmax(1) == y).float().mean().item()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=20000)
    ap.add_argument("--epochs", type=float, default=3.0)
    ap.add_argument("--only", default=",".join(VARIANTS), help=f"variants, comma separated ({', '.join(VARIANTS)})")
    ap.add_argument(
        "--set", default="{}", help="JSON of config fields for every variant, e.g. '{\"learning_rate\": 0.2}'"
    )
    ap.add_argument("--out", default="out/ablate_secure_sgd.jsonl")
    args = ap.parse_args(argv)
    bundle = load_dataset("mnist")
    splits = make_splits(bundle, seed=0, num_members=min(args.members, len(bundle.train) - 1), num_non_members=0)
    x, y = bundle.test.features[:2000], bundle.test.labels[:2000]
    base = dict(
        epochs=args.epochs,
        lot_size=250,
        clip_norm=1.0,
        learning_rate=0.1,
        momentum=0.9,
        noise_multiplier=None,
        delta=1e-5,
        target_epsilon=2.0,
        **json.loads(args.set),
    )
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    for name in args.only.split(","):
        if name not in VARIANTS:
            ap.error(f"--only: unknown variant {name!r} (known: {', '.join(VARIANTS)})")
        started = time.monotonic()
        extra = VARIANTS[name]
        if extra is None:
            record, model = train_dpsgd(
                TrainRequest(
                    bundle=bundle,
                    splits=splits,
                    model_name="hgm-cnn",
                    config=DPSGDConfig(**base),
                    seed=0,
                    progress=False,
                )
            )
        else:
            cfg = {**base, "robustness_epsilon": 4.0, "attack_norm_bound": 0.2, **extra}
            record, model = train_secure_sgd(
                TrainRequest(
                    bundle=bundle,
                    splits=splits,
                    model_name="hgm-cnn",
                    config=SecureSGDConfig(**cfg),
                    seed=0,
                    progress=False,
                )
            )
        one, majority = accuracy(model, x, y)
        row = {
            "variant": name,
            "members": len(splits.members),
            "epochs": args.epochs,
            "one_draw": one,
            "majority_of_32": majority,
            "expected_scores_100": expected_score_accuracy(model, x, y, num_draws=100),
            "sigma": record.metrics.get("noise_multiplier"),
            "epsilon": record.metrics.get("epsilon"),
            "seconds": time.monotonic() - started,
        }
        print(json.dumps(row), flush=True)
        with open(args.out, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
