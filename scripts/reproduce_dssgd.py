#!/usr/bin/env python
"""Reproduces distributed selective SGD (Shokri & Shmatikov, CCS 2015) on MNIST and attacks it
from every seat: the accuracy table, the DP variant's accuracy against its composed ε, what the
server learns from uploads, membership inference against the global and a local model, the
canary audit of the DP upload, and the time per round with 1 and 2 Ray workers.

Settings (``--full``; ``--quick`` runs the same rows with a handful of rounds, the CI smoke test):

* 30 participants, each with 600 MNIST training images (members = 30 % of the 60,000, split
  seeded); θ_d = 1, largest-value selection, round-robin, plain SGD (batch 32) with one local
  epoch per turn, inputs standardised by the training split's mean and std as in the paper's
  §6.1 (the defense's default; part of every network, so attacks see raw images). θ_u ∈ {1, 0.1, 0.01, 0.001} for the
  paper's MLP (784-128-64-10, 109,386
  parameters; 140,106 on the paper's 32×32 frame) and CNN (105,506 parameters, :mod:`dpaudit.models`), beside
  centralised SGD on
  the union and standalone SGD (each participant alone, as many epochs as it has turns). The
  seed's table labels the varied fraction θ_d; the issue and the protocol's privacy question
  concern θ_u, which is what is varied here (θ_d = 1).
* 90 participants (45,000 members, 500 each) for the MLP at θ_u = 0.1 in ``--full``.
* The DP variant (sparse vector technique, ``defenses/dssgd/svt.py``) on the MLP at θ_u = 0.01
  for several per-parameter ε, with the composed ε (pure and zCDP at δ = 1e-5) of the record.

Every row is a ``dpaudit train`` record in ``--out`` (a rerun reuses what is finished). Prints
the tables and writes ``--json``.

Usage::

    DPAUDIT_DATA_ROOT=../shared/data python scripts/reproduce_dssgd.py --full --out out/dssgd --json out/dssgd.json
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit.api import RunDir, TrainSpec, atomic_write_json, default_config, to_jsonable, train_or_load

#: The seed's MNIST table (seed 004, "Overall Accuracy of DSSGD"): the value at θ, and the two reference rows.
PUBLISHED: dict[str, dict[str, float]] = {
    "dssgd-cnn": {"centralised": 0.9917, "0.1": 0.9914, "0.01": 0.9871, "0.001": 0.9645, "standalone": 0.9316},
    "dssgd-mlp": {"centralised": 0.9810, "standalone": 0.8832},
}
THETAS = (1.0, 0.1, 0.01, 0.001)
#: The timing rows' local step size. The asynchronous schedule adds every participant's upload,
#: all computed from one snapshot: with 30 participants and standardised inputs the CNN
#: diverges within two rounds at 0.05. These rows measure time per round, not accuracy.
TIMING_LEARNING_RATE = 0.01
SECTIONS = ("accuracy", "dp", "attacks", "timing")


@dataclass(frozen=True)
class Budget:
    """Rounds per model, and the other sizes of a mode."""

    rounds: dict[str, int]
    rounds_small_theta: dict[str, int]  # θ_u = 0.001 moves few parameters per turn and needs more rounds
    participants_large: int | None
    dp_epsilons: tuple[float, ...]
    models: tuple[str, ...]
    leakage_turns: int = 20
    audit_trials: int = 1000
    upload_turns: int = 10
    num_shadows: int = 4
    timing_participants: int = 30
    timing_rounds: int = 5
    timing_model: str = "dssgd-cnn"


QUICK = Budget(
    rounds={"dssgd-mlp": 2, "dssgd-cnn": 1},
    rounds_small_theta={"dssgd-mlp": 2, "dssgd-cnn": 1},
    participants_large=None,
    dp_epsilons=(1.0,),
    models=("dssgd-mlp",),
    leakage_turns=3,
    audit_trials=100,
    upload_turns=2,
    num_shadows=2,
    timing_participants=4,
    timing_rounds=1,
    timing_model="dssgd-mlp",
)
FULL = Budget(
    rounds={"dssgd-mlp": 60, "dssgd-cnn": 60},
    rounds_small_theta={"dssgd-mlp": 200, "dssgd-cnn": 150},
    participants_large=90,
    dp_epsilons=(0.1, 1.0, 10.0, 100.0),
    models=("dssgd-mlp", "dssgd-cnn"),
)


def _train(args: argparse.Namespace, *, model: str, member_fraction: float, **config: Any) -> Any:
    spec = TrainSpec(
        defense="dssgd",
        model=model,
        dataset=args.dataset,
        config=default_config("dssgd", **config),
        seed=args.seed,
        member_fraction=member_fraction,
        data_root=args.data_root,
        device=args.device,
        progress=not args.quiet,
    )
    started = time.monotonic()
    outcome = train_or_load(spec, RunDir(args.out))
    how = "reused" if outcome.reused else f"trained in {time.monotonic() - started:.0f} s"
    print(f"  {model} {config}: test accuracy {outcome.record.metrics['test_accuracy']:.4f} ({how})", file=sys.stderr)
    return outcome


def accuracy_rows(args: argparse.Namespace, budget: Budget) -> list[dict[str, Any]]:
    """The θ_u table with the centralised and standalone reference rows, per model."""
    rows: list[dict[str, Any]] = []
    for model in budget.models:
        published = PUBLISHED.get(model, {})
        for theta in THETAS:
            rounds = budget.rounds_small_theta[model] if theta == 0.001 else budget.rounds[model]
            # The reference rows are trained once per model, with the θ_u = 0.1 run.
            out = _train(
                args,
                model=model,
                member_fraction=0.3,
                participants=30,
                rounds=rounds,
                upload_fraction=theta,
                baselines=theta == 0.1,
                learning_rate=args.learning_rate,
            )
            m = out.record.metrics
            if theta == 0.1:
                for ref in ("centralised", "standalone"):
                    rows.append(
                        {
                            "model": model,
                            "participants": 30,
                            "row": ref,
                            "rounds": rounds,
                            "accuracy": m[f"{ref}_test_accuracy"],
                            "published": published.get(ref),
                        }
                    )
            rows.append(
                {
                    "model": model,
                    "participants": 30,
                    "row": f"theta_u={theta:g}",
                    "rounds": rounds,
                    "accuracy": m["test_accuracy"],
                    "local_accuracy": m["local_test_accuracy_mean"],
                    "published": published.get(f"{theta:g}"),
                    "seconds_per_round": m["seconds_per_round"],
                    "record": out.record.model_id,
                }
            )
        if budget.participants_large and model == "dssgd-mlp":
            n = budget.participants_large
            out = _train(
                args,
                model=model,
                member_fraction=0.75,
                participants=n,
                rounds=budget.rounds[model],
                upload_fraction=0.1,
                baselines=True,
                learning_rate=args.learning_rate,
            )
            m = out.record.metrics
            for ref in ("centralised", "standalone"):
                rows.append(
                    {
                        "model": model,
                        "participants": n,
                        "row": ref,
                        "rounds": budget.rounds[model],
                        "accuracy": m[f"{ref}_test_accuracy"],
                        "published": None,
                    }
                )
            rows.append(
                {
                    "model": model,
                    "participants": n,
                    "row": "theta_u=0.1",
                    "rounds": budget.rounds[model],
                    "accuracy": m["test_accuracy"],
                    "local_accuracy": m["local_test_accuracy_mean"],
                    "published": None,
                    "seconds_per_round": m["seconds_per_round"],
                    "record": out.record.model_id,
                }
            )
    for row in rows:
        pub = row.get("published")
        row["difference"] = None if pub is None else row["accuracy"] - pub
    return rows


def print_accuracy(rows: list[dict[str, Any]]) -> None:
    print("\nDSSGD accuracy on MNIST (global model; θ_d = 1, largest values, round-robin)")
    print(
        f"  {'model':<10} {'N':>3} {'row':<16} {'rounds':>6} {'accuracy':>9} "
        f"{'local':>7} {'seed':>7} {'diff':>7} {'s/round':>8}"
    )
    for r in rows:
        pub = "" if r.get("published") is None else f"{r['published']:.4f}"
        diff = "" if r.get("difference") is None else f"{r['difference']:+.4f}"
        local = "" if r.get("local_accuracy") is None else f"{r['local_accuracy']:.4f}"
        spr = "" if r.get("seconds_per_round") is None else f"{r['seconds_per_round']:.2f}"
        print(
            f"  {r['model']:<10} {r['participants']:>3} {r['row']:<16} "
            f"{r['rounds']:>6} {r['accuracy']:>9.4f} {local:>7} {pub:>7} {diff:>7} "
            f"{spr:>8}"
        )


def dp_rows(args: argparse.Namespace, budget: Budget) -> list[dict[str, Any]]:
    """The DP variant's accuracy beside its per-parameter and composed ε."""
    rows = []
    model = "dssgd-mlp"
    rounds = budget.rounds[model]
    for eps in budget.dp_epsilons:
        out = _train(
            args,
            model=model,
            member_fraction=0.3,
            participants=30,
            rounds=rounds,
            upload_fraction=0.01,
            dp_epsilon=eps,
            bound=args.bound,
            threshold=args.threshold,
            baselines=False,
            learning_rate=args.learning_rate,
        )
        claim = out.record.claim
        bound = claim.upper_bound(delta=1e-5)
        rows.append(
            {
                "model": model,
                "epsilon_per_parameter": eps,
                "uploads_per_turn": out.record.metrics["uploads_per_turn"],
                "rounds": rounds,
                "epsilon_per_round": claim.epsilon_per_round,
                "epsilon_pure": bound.by_accountant.get("pure"),
                "epsilon_zcdp": bound.by_accountant.get("zcdp"),
                "accuracy": out.record.metrics["test_accuracy"],
                "record": out.record.model_id,
            }
        )
    return rows


def print_dp(rows: list[dict[str, Any]]) -> None:
    print("\nDP variant (MLP, θ_u = 0.01): accuracy against the guarantee as stated and as composed (δ = 1e-5)")
    print(
        f"  {'eps/param':>9} {'c':>6} {'rounds':>6} {'eps/round':>11} {'eps pure':>12} {'eps zCDP':>12} {'accuracy':>9}"
    )
    for r in rows:
        print(
            f"  {r['epsilon_per_parameter']:>9g} {r['uploads_per_turn']:>6} "
            f"{r['rounds']:>6} {r['epsilon_per_round']:>11.4g} "
            f"{r['epsilon_pure']:>12.4g} {r['epsilon_zcdp']:>12.4g} "
            f"{r['accuracy']:>9.4f}"
        )


def _cli_json(argv: list[str]) -> dict[str, Any]:
    """Runs ``dpaudit *argv --json`` in this process (as a user would) and returns its JSON."""
    import contextlib
    import io
    import json

    from dpaudit.api import cli_main as dpaudit

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = dpaudit([*argv, "--json"])
    if code != 0:
        raise SystemExit(f"dpaudit {' '.join(argv)} exited {code}")
    return dict(json.loads(buf.getvalue()))


def attack_rows(args: argparse.Namespace, budget: Budget) -> dict[str, Any]:
    """Every seat: the server (reconstruction and membership from uploads, the DP audit), the
    participants (membership against the global and one local model, through the CLI)."""
    from dpaudit.api import DEFENSES, attack_uploads, audit_upload, participant_record_dir, turn_leakage

    model = "dssgd-mlp"
    rounds = budget.rounds[model]
    out: dict[str, Any] = {}
    # 1. One turn on k examples (one SGD step), as the server receives it.
    out["turn_leakage"] = []
    examples: dict[str, Any] = {}
    for k in (1, 8):
        rows = turn_leakage(
            dataset=args.dataset,
            model=model,
            examples_per_turn=k,
            upload_fractions=(1.0, 0.1, 0.01),
            dp_epsilons=(1.0, 10.0, 100.0),
            dp_upload_fraction=0.1,
            bound=args.bound,
            threshold=args.threshold,
            turns=budget.leakage_turns,
            data_root=args.data_root,
        )
        out["turn_leakage"] += [r.summary() for r in rows]
        examples.update({f"{k} x {r.setting}": r.example_reconstruction for r in rows if r.example_reconstruction.size})
        print(f"  turn leakage measured for {k} example(s) per turn", file=sys.stderr)
    if args.figures:
        out["reconstruction_figure"] = str(
            reconstruction_figure(examples, Path(args.figures) / "dssgd-reconstructions.png")
        )
    # 2. The recorded uploads of participant 0 in the federations of the accuracy and DP tables.
    targets = [(f"theta_u={t:g}", {"upload_fraction": t, "baselines": t == 0.1}) for t in (1.0, 0.1, 0.01)]
    targets += [
        (
            f"dp eps={e:g} (theta_u=0.01)",
            {
                "upload_fraction": 0.01,
                "dp_epsilon": e,
                "bound": args.bound,
                "threshold": args.threshold,
                "baselines": False,
            },
        )
        for e in budget.dp_epsilons
    ]
    out["uploads"], records = [], {}
    for label, cfg in targets:
        rec = _train(
            args,
            model=model,
            member_fraction=0.3,
            participants=30,
            rounds=rounds,
            learning_rate=args.learning_rate,
            **cfg,
        )
        records[label] = rec.record
        res = attack_uploads(
            target=rec.record_dir,
            run=RunDir(args.out),
            max_turns=budget.upload_turns,
            data_root=args.data_root,
            progress=not args.quiet,
        )
        out["uploads"].append({"setting": label, **res.summary()})
    # 3. Membership inference from the participants' seat, through the CLI like any record.
    out["membership"] = []
    basic = ["--attack", "loss", "--attack", "modified-entropy"]
    for label in ("theta_u=1", "theta_u=0.01"):
        record = records[label]
        seats = [
            (
                "global",
                RunDir(args.out).record_dir(record.model_id),
                [*basic, "--attack", "lira-offline", "--num-shadows", str(budget.num_shadows), "--executor", "serial"],
            ),
            (
                "participant 0 (local)",
                participant_record_dir(RunDir(args.out).submodel_dir(DEFENSES["dssgd"].submodels), record.model_id, 0),
                basic,
            ),
        ]
        for seat, rdir, attacks in seats:
            res = _cli_json(
                [
                    "attack",
                    "membership",
                    "--target",
                    str(rdir),
                    *attacks,
                    "--num-samples",
                    "1000",
                    "--out",
                    args.out,
                    "--quiet",
                ]
            )
            for name, summary in res["attacks"].items():
                out["membership"].append(
                    {
                        "setting": label,
                        "model": seat,
                        "attack": name,
                        "auc": summary["auc"],
                        "tpr_at_1pct": summary["tpr_at_fpr"]["0.01"],
                        "epsilon_lb": summary["epsilon_lb"],
                    }
                )
    # 4. The canary audit of one turn's upload, without and with the DP variant.
    out["audit"] = []
    for eps in (None, 1.0, 10.0, 100.0):
        started = time.monotonic()
        res = audit_upload(
            dataset=args.dataset,
            model=model,
            partition_size=100,
            upload_fraction=0.01,
            dp_epsilon=eps,
            bound=args.bound,
            threshold=args.threshold,
            trials=budget.audit_trials,
            seed=args.seed,
            data_root=args.data_root,
            progress=False,
        )
        out["audit"].append(
            {
                "dp_epsilon": eps,
                "trials": budget.audit_trials,
                "epsilon_lb": res.epsilon_lb,
                "epsilon_ub_turn": res.epsilon_ub,
                "epsilon_per_parameter": res.details.epsilon_per_parameter,
                "statistic": res.details.statistic,
                "in_rate": res.details.in_rate_any_canary_coordinate,
                "out_rate": res.details.out_rate_any_canary_coordinate,
                "seconds": time.monotonic() - started,
            }
        )
    return out


def reconstruction_figure(examples: dict[str, Any], path: Path) -> Path:
    """One column per upload setting: the server's best reconstruction above the private input it matches."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpaudit.api import ssim

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2, len(examples), figsize=(1.6 * len(examples), 3.9), squeeze=False)
    for j, (label, pair) in enumerate(examples.items()):
        score = float(ssim(pair[0], pair[1]))
        for i, (img, row) in enumerate(zip(pair, ("reconstruction", "private input"), strict=True)):
            ax = axes[i][j]
            ax.imshow(img.reshape(img.shape[-2:]), cmap="gray", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel(row, fontsize=8)
        axes[0][j].set_title(label.replace(" (", "\n("), fontsize=7)
        axes[1][j].set_xlabel(f"SSIM {score:.2f}", fontsize=8)
    fig.suptitle("What the DSSGD server reconstructs from one turn (k examples, one SGD step)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def print_attacks(res: dict[str, Any]) -> None:
    print(
        "\nServer seat, one turn of k examples (one SGD step; means over "
        "turns): best SSIM, share of the k inputs recognisable (SSIM >= 0.5), "
        "upload-membership AUC"
    )
    print(f"  {'k':>2} {'upload':<26} {'SSIM':>6} {'recognised':>10} {'AUC':>6}")
    for r in res["turn_leakage"]:
        print(
            f"  {r['examples_per_turn']:>2} {r['setting']:<26} "
            f"{r['best_ssim']:>6.3f} {r['recognised_share']:>10.2f} "
            f"{r['membership_auc']:>6.3f}"
        )
    print("\nServer seat, participant 0's recorded uploads (30 participants, 600 examples per turn, MLP)")
    print(f"  {'federation':<26} {'turns':>5} {'best SSIM':>9} {'recognised':>10} {'AUC':>6} {'TPR@1%':>7}")
    for r in res["uploads"]:
        print(
            f"  {r['setting']:<26} {r['turns']:>5} {r['best_ssim_max']:>9.3f} "
            f"{r['distinct_recognised_total']:>10} {r['membership_auc']:>6.3f} "
            f"{r['membership_tpr_at_1pct_fpr']:>7.3f}"
        )
    print("\nMembership inference against the global and a local model (1,000 members and 1,000 non-members at most)")
    print(f"  {'federation':<14} {'model':<22} {'attack':<17} {'AUC':>6} {'TPR@1%':>7} {'eps_lb':>7}")
    for r in res["membership"]:
        print(
            f"  {r['setting']:<14} {r['model']:<22} {r['attack']:<17} "
            f"{r['auc']:>6.3f} {r['tpr_at_1pct']:>7.3f} {r['epsilon_lb']:>7.3f}"
        )
    print(
        "\nCanary audit of one turn's upload (100 examples, theta_u = 0.01): "
        "eps_lb (95 %) vs the turn's composed eps_ub and the paper's "
        "per-parameter eps"
    )
    print(
        f"  {'eps/param':>9} {'trials':>6} {'eps_lb':>7} {'eps_ub turn':>11} "
        f"{'IN rate':>7} {'OUT rate':>8} {'statistic':<9}"
    )
    for r in res["audit"]:
        eps = "no DP" if r["dp_epsilon"] is None else f"{r['dp_epsilon']:g}"
        print(
            f"  {eps:>9} {r['trials']:>6} {r['epsilon_lb']:>7.3f} "
            f"{r['epsilon_ub_turn']:>11.4g} {r['in_rate']:>7.3f} "
            f"{r['out_rate']:>8.3f} {r['statistic']:<9}"
        )


def timing_rows(args: argparse.Namespace, budget: Budget) -> list[dict[str, Any]]:
    """The same federation on Flower's simulation engine (Ray) with 1 and with 2 workers."""
    rows = []
    for workers in (1, 2):
        spec = TrainSpec(
            defense="dssgd",
            model=budget.timing_model,
            dataset=args.dataset,
            config=default_config(
                "dssgd",
                participants=budget.timing_participants,
                rounds=budget.timing_rounds,
                upload_fraction=0.1,
                schedule="async",
                baselines=False,
                learning_rate=TIMING_LEARNING_RATE,
            ),
            seed=args.seed,
            member_fraction=0.3,
            data_root=args.data_root,
            device=args.device,
            progress=not args.quiet,
            executor="ray",
            num_workers=workers,
            force=True,
        )
        started = time.monotonic()
        outcome = train_or_load(spec, RunDir(Path(args.out) / f"timing-{workers}-workers"))
        m = outcome.record.metrics
        rows.append(
            {
                "workers": workers,
                "model": budget.timing_model,
                "rounds": budget.timing_rounds,
                "participants": budget.timing_participants,
                "engine": m["engine"],
                "seconds_per_round": m["seconds_per_round"],
                "wall_seconds": time.monotonic() - started,
                "test_accuracy": m["test_accuracy"],
            }
        )
    rows[1]["speedup_per_round"] = rows[0]["seconds_per_round"] / rows[1]["seconds_per_round"]
    return rows


def print_timing(rows: list[dict[str, Any]]) -> None:
    print(
        "\nTime per round on Flower's simulation engine (Ray; async schedule, "
        f"{rows[0]['model']}, {rows[0]['participants']} participants, "
        f"{rows[0]['rounds']} rounds)"
    )
    for r in rows:
        extra = f"  speed-up {r['speedup_per_round']:.2f}x" if "speedup_per_round" in r else ""
        print(
            f"  {r['workers']} worker(s): {r['seconds_per_round']:.2f} s per round, "
            f"{r['wall_seconds']:.0f} s wall with Ray's start{extra}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="a few rounds per row (smoke test)")
    mode.add_argument("--full", action="store_true", help="the reproduction (default)")
    p.add_argument("--only", choices=SECTIONS, action="append", help="run only these sections (repeatable)")
    p.add_argument("--out", required=True, help="run directory (records and results; reused on a rerun)")
    p.add_argument("--json", help="write the measured figures here")
    p.add_argument("--figures", help="directory for the reconstruction figure (PNG)")
    p.add_argument("--dataset", default="mnist")
    p.add_argument("--data-root")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--learning-rate", type=float, default=0.05)
    p.add_argument("--bound", type=float, default=0.001, help="gamma of the DP variant")
    p.add_argument("--threshold", type=float, default=0.0001, help="tau of the DP variant")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    budget = QUICK if args.quick else FULL
    sections = tuple(args.only or SECTIONS)
    results: dict[str, Any] = {"mode": "quick" if args.quick else "full", "dataset": args.dataset}
    started = time.monotonic()
    if "accuracy" in sections:
        results["accuracy"] = accuracy_rows(args, budget)
        print_accuracy(results["accuracy"])
    if "dp" in sections:
        results["dp"] = dp_rows(args, budget)
        print_dp(results["dp"])
    if "attacks" in sections:
        results["attacks"] = attack_rows(args, budget)
        print_attacks(results["attacks"])
    if "timing" in sections:
        results["timing"] = timing_rows(args, budget)
        print_timing(results["timing"])
    results["seconds"] = time.monotonic() - started
    if args.json:
        atomic_write_json(args.json, to_jsonable(results))
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
