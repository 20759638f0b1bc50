#!/usr/bin/env python
"""Reproduces the comparison of Jayaraman & Evans (USENIX Security 2019) on data we have
offline, and compares every defense of the suite under the same attacks (``dpaudit compare``).

Part ``je`` (their Table/Figures 2-4, on Adult and MNIST instead of CIFAR-100 / Purchase-100):
DP-SGD at ε ∈ {0.1, 1, 10, 100, 1000} for each of the four analyses they compare — naive
composition, advanced (strong) composition, the moments accountant (their zCDP / MA column)
and RDP — each analysis calibrating its own σ for the target ε, as they did, beside the
non-private baseline. Every model faces their two attacks (Yeom's loss threshold, Shokri's
shadow models) *and* LiRA and RMIA on the same shared shadows, so the table shows how much of
the gap to the DP ceiling e^ε − 1 the stronger attacks close.

Part ``all``: every defense of the suite on MNIST (the non-private baseline, DP-SGD at ε = 1 and
8, PATE, DSSGD, PixelDP, HGM, Secure-SGD, randomized smoothing) under the same membership,
evasion (with certification where a defense certifies) and inversion attacks.

Each part is a grid run by :func:`dpaudit.app.runs.compare.run_compare` into ``--out`` (a rerun
reuses every finished job); the reports are ``OUT/reports/compare-*.html``. Prints the tables
and writes ``--json``.

Usage::

    DPAUDIT_DATA_ROOT=../shared/data python scripts/reproduce_comparison.py --part je --out out/compare --json
    out/compare.json
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit.api import CompareSpec, ComparisonResult, RunDir, atomic_write_json, parse_grid, run_compare

EPSILONS = (0.1, 1.0, 10.0, 100.0, 1000.0)
#: Jayaraman & Evans' four analyses of the same noise, by our accountant names.
ANALYSES = {
    "naive": "NC (naive composition)",
    "strong": "AC (advanced composition)",
    "moments": "zCDP / MA (moments)",
    "rdp": "RDP",
}
MIA = {"attacks": ["loss", "shadow", "lira", "rmia"], "num_shadows": 8, "num_samples": 2000, "shadows": "shared"}

#: Per dataset: the model and the training of the J&E grid. Their 2-layer network of 256 units,
#: 100 epochs, and a training set small enough (2,000 members) that the non-private model
#: overfits as theirs did (Purchase-100 and CIFAR-100 with 10,000 records and 100 classes); on
#: 10,000 Adult records a small MLP generalises and no attack sees anything.
JE_DATA: dict[str, dict[str, Any]] = {
    "adult": {
        "model": "tabular-mlp",
        "model_options": {"hidden": 256},
        "member_fraction": 2_000 / 30_162,
        "epochs": 100,
        "lot_size": 100,
        "learning_rate": 0.5,
        "nonprivate_lr": 0.05,
    },
    "mnist": {
        "model": "dssgd-mlp",
        "model_options": {"hidden": [256, 256]},
        "member_fraction": 2_000 / 60_000,
        "epochs": 100,
        "lot_size": 100,
        "learning_rate": 0.5,
        "nonprivate_lr": 0.05,
    },
}


def je_grid(dataset: str, *, quick: bool = False) -> dict[str, Any]:
    d = JE_DATA[dataset]
    epochs = 2 if quick else d["epochs"]
    defenses: list[dict[str, Any]] = [{"defense": "nonprivate", "epochs": epochs, "learning_rate": d["nonprivate_lr"]}]
    for accountant in ANALYSES:
        defenses.append(
            {
                "defense": "dpsgd",
                "label": f"dpsgd-{accountant}",
                "family": f"dpsgd ({accountant})",  # one curve per analysis, as in their figures
                "accountant": accountant,
                # Abadi et al.'s moments accountant tracks orders λ ≤ 32 only, so its tail bound can
                # never certify ε < ln(1/δ)/32 = 0.36 at δ = 1e-5: ε = 0.1 has no σ under it.
                "target_epsilon": [e for e in EPSILONS if accountant != "moments" or e >= 0.5],
                "epochs": epochs,
                "lot_size": d["lot_size"],
                "clip_norm": 1.0,
                "learning_rate": d["learning_rate"],
            }
        )
    return {
        "name": f"je-{dataset}",
        "dataset": dataset,
        "model": d["model"],
        "model_options": d["model_options"],
        "member_fraction": d["member_fraction"],
        "seeds": [0],
        "delta": 1e-5,
        "vulnerable_top_k": 200,
        "defenses": defenses,
        "attacks": {"membership": {**MIA, "shadow_epochs": epochs}},
    }


def all_grid(*, quick: bool = False) -> dict[str, Any]:
    e = 1 if quick else 2
    return {
        "name": "all-mnist",
        "dataset": "mnist",
        "model": "hgm-cnn",
        "member_fraction": 20_000 / 60_000,
        "seeds": [0],
        "delta": 1e-5,
        "vulnerable_top_k": 200,
        "defenses": [
            {"defense": "nonprivate", "epochs": e},
            {
                "defense": "dpsgd",
                "target_epsilon": [1.0, 8.0],
                "epochs": 3,
                "lot_size": 250,
                "clip_norm": 1.0,
                "learning_rate": 0.1,
                "momentum": 0.9,
            },
            {
                "defense": "pate",
                "teachers": 50,
                "queries": 1000,
                "threshold": 40.0,
                "threshold_sigma": 20.0,
                "sigma": 10.0,
                "epochs": 10,
            },
            {
                "defense": "dssgd",
                "model": "dssgd-mlp",
                "participants": 10,
                "rounds": 20,
                "upload_fraction": 0.1,
                "baselines": False,
            },
            {"defense": "pixeldp", "epochs": e},
            {"defense": "hgm", "epochs": e, "redistribute": False},
            {
                "defense": "secure-sgd",
                "target_epsilon": 8.0,
                "epochs": 3,
                "lot_size": 250,
                "clip_norm": 1.0,
                "learning_rate": 0.1,
                "momentum": 0.9,
                "sensitivity_control": "normalize",
                "redistribute": False,
                "noise_ramp_fraction": 0.3,
            },
            {"defense": "smoothing", "epochs": e, "smoothing_sigma": 0.5},
        ],
        "attacks": {
            "membership": {
                "attacks": ["loss", "lira", "rmia"],
                "num_shadows": 8,
                "num_samples": 2000,
                "shadows": "shared",
                "shadow_epochs": e,
            },
            "evasion": {
                "attacks": ["fgsm", "pgd"],
                "radii": [0.1, 0.3, 0.5, 1.0],
                "norm": "l2",
                "num_examples": 100,
                "num_draws": 1000,
                "eot_samples": 2,
            },
            # Three classes keep MI-Face's share of the CPU run small (it inverts every target).
            "inversion": {"attacks": ["mi-face"], "classes": [0, 1, 2]},
        },
    }


def _je_table(result: ComparisonResult) -> list[dict[str, Any]]:
    base = result.row(result.baseline)
    rows = []
    for r in result.rows:
        eps_target = r.parameters.get("target_epsilon")
        own = r.parameters.get("accountant")
        m = r.membership
        je = max((m[a].advantage for a in ("loss", "shadow") if a in m), default=0.0)
        strong = max((m[a].advantage for a in ("lira", "rmia") if a in m), default=0.0)
        ceiling = min(1.0, math.expm1(eps_target)) if eps_target is not None and eps_target < 700 else 1.0
        n_members = m["loss"].num_samples / 2 if "loss" in m else 0
        rows.append(
            {
                "label": r.label,
                "analysis": ANALYSES.get(own, "non-private") if own else "non-private",
                "target_epsilon": eps_target,
                "epsilon_ub": r.epsilon_ub.get(own) if own else math.inf,
                "test_accuracy": r.test_accuracy,
                "accuracy_loss": r.accuracy_loss,
                "relative_accuracy_loss": r.accuracy_loss / base.test_accuracy if base.test_accuracy else math.nan,
                "advantage_je_attacks": je,
                "advantage_lira_rmia": strong,
                "ceiling": ceiling,
                "gap_closed": (strong - je) / (ceiling - je) if ceiling > je else 0.0,
                "members_revealed_at_1pct": {a: round(m[a].tpr_at_fpr["0.01"] * n_members) for a in m},
                "vulnerable_tpr_at_1pct": {a: r.vulnerable[a].tpr_at_fpr["0.01"] for a in r.vulnerable},
                "epsilon_lb": r.epsilon_lb,
                "best_attack": r.best_attack,
                "verdict": r.verdict,
            }
        )
    return rows


def _print_je(name: str, rows: list[dict[str, Any]]) -> None:
    print(f"\n== {name}: Jayaraman & Evans' comparison (advantage = TPR - FPR, ceiling = min(e^eps - 1, 1)) ==")
    print(
        f"{'analysis':<28}{'eps':>7}{'acc':>7}{'loss':>7}{'Yeom/Shokri':>12}"
        f"{'LiRA/RMIA':>11}{'ceiling':>9}{'gap closed':>11}{'eps_LB':>8} "
        " members@1%FPR (loss/shadow/lira/rmia)"
    )
    for r in rows:
        eps = "inf" if r["target_epsilon"] is None else f"{r['target_epsilon']:g}"
        rev = "/".join(str(r["members_revealed_at_1pct"].get(a, "-")) for a in ("loss", "shadow", "lira", "rmia"))
        print(
            f"{r['analysis']:<28}{eps:>7}{r['test_accuracy']:7.3f}{r['accuracy_loss']:7.3f}{r['advantage_je_attacks']:12.3f}{r['advantage_lira_rmia']:11.3f}"
            f"{r['ceiling']:9.3f}{r['gap_closed']:11.3f}{r['epsilon_lb']:8.3f}  {rev}  [{r['verdict']}]"
        )


def _rate(x: float | None) -> float:
    return math.nan if x is None else x


def _print_all(result: ComparisonResult) -> None:
    print(f"\n== {result.name}: every defense under the same attacks ==")
    radii = [f"{x:g}" for x in result.radii]
    print(
        f"{'setting':<26}{'acc':>7}{'eps_UB':>9}{'eps_LB':>8}{'AUC':>7}{'TPR@1%':>8}{'vuln TPR@1%':>12}{'inv top1':>9} "
        f" robust/certified @ {','.join(radii)}"
    )
    for r in result.rows:
        m = max(r.membership.values(), key=lambda x: x.auc) if r.membership else None
        attack = max(r.membership, key=lambda a: r.membership[a].auc) if r.membership else None
        vm = r.vulnerable.get(attack) if attack else None
        vul = _rate(vm.tpr_at_fpr.get("0.01") if vm else None)
        rob = "/".join(f"{r.robust_accuracy.get(x, math.nan):.2f}" for x in radii)
        cert = "/".join(f"{r.certified_accuracy[x]:.2f}" for x in radii) if r.certified_accuracy else "-"
        inv = f"{r.inversion_top1:.2f}" if r.inversion_top1 is not None else "-"
        print(
            f"{r.label:<26}{r.test_accuracy:7.3f}{r.epsilon_ub_best:9.3g}"
            f"{r.epsilon_lb:8.3f}{m.auc if m else math.nan:7.3f}"
            f"{_rate(m.tpr_at_fpr.get('0.01') if m else None):8.3f}"
            f"{vul:12.3f}{inv:>9}  {rob} | {cert}  [{r.verdict}]"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--part", choices=("je", "all", "both"), default="both")
    ap.add_argument("--datasets", default="adult,mnist", help="datasets of the J&E part (adult, mnist)")
    ap.add_argument(
        "--quick", action="store_true", help="2 epochs per model: a smoke test of the pipeline, not the numbers"
    )
    ap.add_argument("--out", default="out/compare")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--executor", default="local", choices=("local", "ray", "serial"))
    ap.add_argument("--num-workers", type=int, default=2)
    ap.add_argument("--address")
    args = ap.parse_args(argv)
    run = RunDir(args.out)
    measured: dict[str, Any] = {"je": {}, "all": None, "seconds": {}}
    grids = []
    if args.part in ("je", "both"):
        grids += [("je", je_grid(d.strip(), quick=args.quick)) for d in args.datasets.split(",") if d.strip()]
    if args.part in ("all", "both"):
        grids.append(("all", all_grid(quick=args.quick)))
    for kind, data in grids:
        started = time.monotonic()
        result = run_compare(
            CompareSpec(
                grid=parse_grid(data),
                executor=args.executor,
                num_workers=args.num_workers,
                address=args.address,
                command="scripts/reproduce_comparison.py",
            ),
            run,
        )
        seconds = time.monotonic() - started
        measured["seconds"][data["name"]] = seconds
        print(
            f"\n[{data['name']}] {result.jobs_run} jobs run, {result.jobs_reused} reused, {seconds:.0f} s",
            file=sys.stderr,
        )
        if kind == "je":
            rows = _je_table(result)
            measured["je"][data["dataset"]] = {"rows": rows, "summary": result.summary()}
            _print_je(data["name"], rows)
            dp = [r for r in result.rows if r.epsilon_ub]
            base = result.row(result.baseline)
            strongest = max((m.advantage for m in base.membership.values()), default=0.0)
            leaks_more = all(
                strongest >= max((m.advantage for m in r.membership.values()), default=0.0)
                for r in dp
                if r.epsilon_ub_best <= 8
            )
            print(
                "soundness: eps_LB <= eps_UB on every DP row: "
                f"{all(r.verdict == 'no violation' for r in dp)}; non-private leaks more "
                f"than every DP row at eps <= 8: {leaks_more}"
            )
            measured["je"][data["dataset"]]["nonprivate_leaks_more_than_dp_at_eps_le_8"] = leaks_more
        else:
            measured["all"] = result.summary()
            _print_all(result)
    from dpaudit.api import render_reports

    index = render_reports(run)
    measured["reports"] = [str(p) for p in index.compare]
    print("\nreports: " + ", ".join(measured["reports"]))
    if args.json:
        atomic_write_json(args.json, measured)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
