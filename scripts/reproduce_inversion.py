#!/usr/bin/env python
"""Reproduces model inversion — MI-Face (Fredrikson, Jha & Ristenpart 2015) and GMI (Zhang et al.
2020, "The Secret Revealer") — against non-private, DP-SGD and certified targets, and answers
the seeds' question: do the reconstructions reveal *members*, or only what a class looks like?

Settings (``--full``; ``--quick`` runs the same rows with tiny budgets, the CI smoke test):

* **faces** — AT&T/ORL, 40 identities, 210 training images (7 per identity × 0.75; the rest and
  the test split are the held-out non-members). MI-Face against a softmax-regression and a
  3000-unit sigmoid MLP target (Fredrikson et al.'s two models, §5), against DP-SGD softmax
  targets at ε = 1 and ε = 8 and a PixelDP (noise-layer) softmax target. Chance is 1/40.
* **faces-1-20** — identities s1–s20 private, s21–s40 public (the GMI face setting with
  disjoint identities): MI-Face and GMI on the same targets — non-private and DP-SGD (ε = 1)
  softmax (the sigmoid MLP does not learn 20 identities from 105 images with plain SGD); the GAN (WGAN-GP) learns from
  the 200 public faces. Chance is 1/20.
* **mnist-0-4** — digits 0–4 private, 5–9 public (Zhang et al. 2020, §4.1): MI-Face and GMI
  against an MLP target trained non-privately, with DP-SGD at ε = 1 and ε = 8, with PixelDP, and
  as the student of 50 PATE teachers (GNMax, σ = 10, 500 queries, supervised student).

Every row is a ``dpaudit train`` record and a ``dpaudit attack inversion`` result in ``--out``
(the evaluator and the GANs are trained once per dataset and reused by every target; a rerun
reuses everything finished). Each result is judged by the independent evaluation classifier
(top-1 / top-5, KNN distance, PSNR) and by the member-vs-class-average analysis (pixel distance
to the class mean, to the nearest member and to the nearest non-member; membership AUC and
ε_LB of the score −distance to the class's reconstruction). Prints one table, writes ``--json``
and renders ``OUT/reports/inversion.html``.

Usage::

    DPAUDIT_DATA_ROOT=../shared/data python scripts/reproduce_inversion.py --full --out out/inversion --json
    out/inversion.json
    DPAUDIT_DATA_ROOT=../shared/data python scripts/reproduce_inversion.py --full --only mnist ...   # one setting
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit.api import (
    InversionSpec,
    PublicData,
    RunDir,
    TrainSpec,
    atomic_write_json,
    default_config,
    run_inversion,
    to_jsonable,
    train_or_load,
)

SETTINGS = ("faces", "faces-1-20", "mnist")


@dataclass(frozen=True)
class Target:
    setting: str
    label: str
    dataset: str
    model: str
    defense: str
    config: dict[str, Any]
    attacks: tuple[str, ...] = ("mi-face",)
    public: PublicData | None = None
    member_fraction: float = 0.75


@dataclass(frozen=True)
class Budget:
    mi_face: dict[str, Any] = field(default_factory=dict)
    gmi: dict[str, Any] = field(default_factory=dict)
    gan: dict[str, dict[str, Any]] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)
    pate: dict[str, int] = field(default_factory=dict)


FULL = Budget(
    mi_face={"max_iterations": 3000},
    gmi={"gmi_iterations": 600, "restarts": 2},
    gan={"faces": {"gan_epochs": 150, "gan_batch_size": 16}, "mnist": {"gan_epochs": 10}},
    epochs={"faces": 100, "mnist": 10, "faces-dp": 20, "mnist-dp": 10},
    pate={"teachers": 50, "queries": 500, "epochs": 10, "student_epochs": 20},
)
QUICK = Budget(
    mi_face={"max_iterations": 100},
    gmi={"gmi_iterations": 30, "restarts": 2},
    gan={"faces": {"gan_epochs": 2, "gan_batch_size": 16}, "mnist": {"gan_epochs": 1}},
    epochs={"faces": 30, "mnist": 1, "faces-dp": 5, "mnist-dp": 1},
    pate={"teachers": 5, "queries": 100, "epochs": 1, "student_epochs": 1},
)


def _targets(b: Budget) -> list[Target]:
    soft = {"epochs": b.epochs["faces"], "learning_rate": 0.01, "batch_size": 32}
    mlp = {"epochs": b.epochs["faces"], "learning_rate": 0.1, "batch_size": 32}
    # DP-SGD on 210 faces: a large lot (q = 0.5) and few epochs keep the noise per step bearable.
    # σ is calibrated to the budget for the given epochs (noise_multiplier=None).
    faces_dp = {
        "epochs": b.epochs["faces-dp"],
        "lot_size": 105,
        "noise_multiplier": None,
        "learning_rate": 20.0,
        "clip_norm": 1.0,
        "delta": 1e-3,
    }
    pixel = {"epochs": b.epochs["faces"], "learning_rate": 0.01, "batch_size": 32}
    mnist = {"epochs": b.epochs["mnist"], "learning_rate": 0.1, "batch_size": 64}
    mnist_dp = {
        "epochs": b.epochs["mnist-dp"],
        "lot_size": 600,
        "noise_multiplier": None,
        "learning_rate": 0.1,
        "clip_norm": 4.0,
        "delta": 1e-5,
    }
    faces_public = PublicData(dataset="faces", classes=tuple(range(20, 40)))
    mnist_public = PublicData(dataset="mnist", classes=(5, 6, 7, 8, 9))
    both = ("mi-face", "gmi")
    return [
        Target("faces", "softmax, non-private", "faces", "softmax-regression", "nonprivate", soft),
        Target("faces", "MLP, non-private", "faces", "faces-mlp", "nonprivate", mlp),
        Target(
            "faces",
            "softmax, DP-SGD eps=1",
            "faces",
            "softmax-regression",
            "dpsgd",
            {**faces_dp, "target_epsilon": 1.0},
        ),
        Target(
            "faces",
            "softmax, DP-SGD eps=8",
            "faces",
            "softmax-regression",
            "dpsgd",
            {**faces_dp, "target_epsilon": 8.0},
        ),
        Target("faces", "softmax, PixelDP", "faces", "softmax-regression", "pixeldp", pixel),
        Target(
            "faces-1-20",
            "softmax, non-private",
            "faces-1-20",
            "softmax-regression",
            "nonprivate",
            soft,
            both,
            faces_public,
        ),
        Target(
            "faces-1-20",
            "softmax, DP-SGD eps=1",
            "faces-1-20",
            "softmax-regression",
            "dpsgd",
            {**faces_dp, "target_epsilon": 1.0, "lot_size": 52},
            both,
            faces_public,
        ),
        Target("mnist", "MLP, non-private", "mnist-0-4", "abadi-mnist", "nonprivate", mnist, both, mnist_public, 0.5),
        Target(
            "mnist",
            "MLP, DP-SGD eps=1",
            "mnist-0-4",
            "abadi-mnist",
            "dpsgd",
            {**mnist_dp, "target_epsilon": 1.0},
            both,
            mnist_public,
            0.5,
        ),
        Target(
            "mnist",
            "MLP, DP-SGD eps=8",
            "mnist-0-4",
            "abadi-mnist",
            "dpsgd",
            {**mnist_dp, "target_epsilon": 8.0},
            both,
            mnist_public,
            0.5,
        ),
        Target("mnist", "MLP, PixelDP", "mnist-0-4", "abadi-mnist", "pixeldp", mnist, both, mnist_public, 0.5),
        # GNMax (σ = 10 for 50 teachers, Papernot et al. 2018) with a supervised student.
        Target(
            "mnist",
            "MLP, PATE student",
            "mnist-0-4",
            "abadi-mnist",
            "pate",
            {**b.pate, "aggregator": "gnmax", "sigma": 10.0, "semi_supervised": False},
            both,
            mnist_public,
            0.5,
        ),
    ]


def _run_target(
    t: Target, b: Budget, run: RunDir, *, seed: int, data_root: str | None, device: str, progress: bool
) -> dict[str, Any]:
    from dpaudit.api import INVERSION_ATTACKS, GANConfig

    started = time.perf_counter()
    done = train_or_load(
        TrainSpec(
            defense=t.defense,
            model=t.model,
            dataset=t.dataset,
            config=default_config(t.defense, **t.config),
            seed=seed,
            member_fraction=t.member_fraction,
            data_root=data_root,
            device=device,
            progress=progress,
        ),
        run,
    )
    record = done.record
    train_seconds = time.perf_counter() - started
    configs = {"mi-face": b.mi_face, "gmi": b.gmi}
    attacks = {a: INVERSION_ATTACKS[a].config_type(**configs[a]) for a in t.attacks}
    gan_budget = b.gan["faces" if t.setting.startswith("faces") else "mnist"]
    spec = InversionSpec(
        target=run.record_dir(record.model_id),
        attacks=attacks,
        priors={"gan": GANConfig(**gan_budget)} if "gmi" in t.attacks else {},
        public_data=t.public if "gmi" in t.attacks else None,
        seed=seed,
        data_root=data_root,
        device=device,
        progress=progress,
        command="scripts/reproduce_inversion.py",
    )
    started = time.perf_counter()
    out = run_inversion(spec, run, on_plan=(lambda line: print(f"  {line}", file=sys.stderr)) if progress else None)
    attack_seconds = time.perf_counter() - started
    eps = record.claim.epsilons(delta=float(t.config.get("delta", 1e-5)))
    row: dict[str, Any] = {
        "setting": t.setting,
        "target": t.label,
        "model_id": record.model_id,
        "defense": t.defense,
        "epsilon_ub": min(eps.values()) if eps else float("inf"),
        "test_accuracy": record.metrics.get("test_accuracy"),
        "evaluator_accuracy": out.evaluator_accuracy,
        "train_seconds": train_seconds,
        "attack_seconds": attack_seconds,
        "attacks": {},
    }
    for name, result in out.results.items():
        s = result.summary()
        row["attacks"][name] = {
            **s,
            "seconds": float(result.metadata.get("seconds", 0.0)),
            "chance": 1.0 / int(result.metadata.get("num_dataset_classes", result.num_classes)),
        }
    return row


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'setting':<11} {'target':<24} {'eps_ub':>6} {'acc':>5} {'attack':<8} "
        f"{'top-1':>6} {'top-5':>6} {'chance':>6} {'KNN':>7} {'PSNR':>6} "
        f"{'d_mean':>6} {'d_mem':>6} {'d_non':>6} {'AUC':>5} {'eps_lb':>6} "
        f"{'sec':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        for name, a in r["attacks"].items():
            eps = f"{r['epsilon_ub']:.2f}" if r["epsilon_ub"] != float("inf") else "inf"
            lines.append(
                f"{r['setting']:<11} {r['target']:<24} {eps:>6} "
                f"{r['test_accuracy'] or 0:5.2f} {name:<8} "
                f"{a['attack_accuracy_top1']:6.3f} {a['attack_accuracy_top5']:6.3f} "
                f"{a['chance']:6.3f} "
                f"{a['knn_distance']:7.2f} {a['psnr']:6.2f} {a['distance_to_mean']:6.3f} "
                f"{a['distance_to_member']:6.3f} {a['distance_to_non_member']:6.3f} "
                f"{a['membership']['auc']:5.3f} {a['membership']['epsilon_lb']:6.3f} {a['seconds']:6.0f}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--quick", action="store_true", help="tiny budgets: checks the pipeline in minutes")
    mode.add_argument(
        "--full",
        action="store_true",
        help="the budgets of the table in docs/results/attacks.md (about an hour on a 2-core CPU)",
    )
    p.add_argument("--only", action="append", choices=SETTINGS, help="run only this setting (repeatable)")
    p.add_argument("--out", required=True, help="run directory (rerun to resume)")
    p.add_argument("--json", help="write the measured rows here")
    p.add_argument("--data-root", help="data root (default $DPAUDIT_DATA_ROOT)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    budget = FULL if args.full else QUICK
    run = RunDir(args.out)
    chosen = [t for t in _targets(budget) if not args.only or t.setting in args.only]
    rows = []
    started = time.perf_counter()
    for t in chosen:
        print(
            f"[{time.perf_counter() - started:7.0f} s] {t.setting}: {t.label} ({', '.join(t.attacks)})", file=sys.stderr
        )
        rows.append(
            _run_target(
                t, budget, run, seed=args.seed, data_root=args.data_root, device=args.device, progress=not args.quiet
            )
        )
    from dpaudit.api import render_reports

    index = render_reports(run)
    print(_table(rows))
    for r in rows:
        for a in r["attacks"].values():
            print(f"{r['setting']} / {r['target']}: {a['finding']}")
    print(f"report: {index.index_html}")
    if args.json:
        atomic_write_json(
            Path(args.json),
            to_jsonable(
                {"mode": "full" if args.full else "quick", "rows": rows, "seconds": time.perf_counter() - started}
            ),
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
