#!/usr/bin/env python
"""Benchmark: our MI-Face beside the Adversarial Robustness Toolbox's ``MIFace``, on one target.

Fredrikson, Jha & Ristenpart (2015, Alg. 1) on the AT&T/ORL faces (40 identities), against a
non-private softmax-regression target trained by the suite (the paper's softmax model). Both
sides invert all 40 identities from the same grey start with the same step size, patience
window and iteration cap, and every reconstruction is judged by the same independent evaluation
classifier (``attacks.inversion.evaluate``): top-1 / top-5, KNN distance, PSNR.

ART's ``MIFace`` (1.x) steps *up* the gradient of the classifier's output for the class, and
keeps a class running while ``1 − output ≤ threshold`` (or while the cost is not above the
window's worst) — the opposite of the paper's "stop once the cost is at most γ". Given a model
that ends in a softmax, its output is the class probability, so its step is the paper's
x ← x − λ∇(1 − p); we hand it the target followed by a softmax. It runs ``batch_size`` images
at a time (1 by default; 40 is its best case here).

Rows: ours as run by default (steps on −log p, see ``MIFaceConfig.descend_on``), ours with the
paper's steps on 1 − p, ART at batch size 1 and at 40. Times are end to end (one run each,
``time.perf_counter``); the ratio is ART's seconds over ours. Pass criteria, printed: our
default top-1 ≥ ART's at both batch sizes, and ours ≥ 5× faster than ART at its default batch
size.

``--convergence`` measures instead what the command line does by default: ``dpaudit attack
inversion --attack mi-face`` against a non-private ``faces-mlp`` (Fredrikson et al.'s MLP, 40
identities), run as a user runs it (one process each), with the default convergence rule
(``MIFaceConfig.tolerance``) beside ``--max-iterations 1000`` with and without it
(``--tolerance 0`` is the rule before it had a tolerance). Each row: the attack's own seconds,
the process's wall and CPU seconds, the evaluator's top-1 / top-5, and the steps the classes
took. The target trains with the training's default flags, as a user trains it (the non-private
defaults learn on the faces since issue 48; ``--target-learning-rate`` overrides the rate). The
table goes to ``scripts/results/inversion/`` and into
``docs/attacks/inversion.md`` between its ``<!-- bench_inversion_convergence -->`` markers.

Usage::

    DPAUDIT_DATA_ROOT=../shared/data .venv/bin/python scripts/bench_inversion.py \\
        --json scripts/results/inversion/bench_inversion.json
    .venv/bin/python scripts/bench_inversion.py --quick     # 200 iterations, a few minutes
    DPAUDIT_DATA_ROOT=../shared/data OMP_NUM_THREADS=1 .venv/bin/python scripts/bench_inversion.py --convergence
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpaudit.api import (
    EvaluatorConfig,
    InversionOutput,
    LabelledImages,
    MIFaceConfig,
    RunDir,
    TrainSpec,
    atomic_write_json,
    default_config,
    evaluate_reconstructions,
    evaluator_accuracy,
    load_dataset,
    load_model,
    run_mi_face,
    target_confidence,
    to_jsonable,
    train_evaluator,
    train_or_load,
)


def _art_mi_face(
    model: nn.Module,
    *,
    classes: list[int],
    shape: tuple[int, ...],
    num_classes: int,
    config: MIFaceConfig,
    batch_size: int,
) -> np.ndarray:
    from art.attacks.inference.model_inversion import MIFace
    from art.estimators.classification import PyTorchClassifier

    probs = nn.Sequential(model, nn.Softmax(dim=1)).eval()
    classifier = PyTorchClassifier(
        model=probs, loss=nn.CrossEntropyLoss(), input_shape=shape, nb_classes=num_classes, clip_values=(0.0, 1.0)
    )
    attack = MIFace(
        classifier,
        max_iter=config.max_iterations,
        window_length=config.patience,
        threshold=0.99,
        learning_rate=float(config.step_size),
        batch_size=batch_size,
        verbose=False,
    )
    start = np.full((len(classes), *shape), float(config.start_value or 0.0), dtype=np.float32)
    return np.asarray(attack.infer(start, np.asarray(classes)), dtype=np.float32).clip(0.0, 1.0)


ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "scripts" / "results" / "inversion"
DOC = ROOT / "docs" / "attacks" / "inversion.md"
BEGIN, END = "<!-- bench_inversion_convergence -->", "<!-- /bench_inversion_convergence -->"

#: The rows of ``--convergence``: a name and the flags it adds to ``dpaudit attack inversion``.
CONVERGENCE_ROWS = (
    ("default (convergence rule)", ()),
    ("--max-iterations 1000", ("--max-iterations", "1000")),
    ("--max-iterations 1000 --tolerance 0 (before)", ("--max-iterations", "1000", "--tolerance", "0")),
)


def _cli(*args: str) -> tuple[str, float, float]:
    """Runs the checkout's command line in a child process: stdout, wall seconds, CPU seconds."""
    return _cli_many([args])[0]


def _cli_many(argvs: list[tuple[str, ...]]) -> list[tuple[str, float, float]]:
    """Runs several command lines at once, each in its own process: stdout, wall and CPU seconds of each."""
    code = "import sys; from dpaudit.app.cli import main; sys.argv[0] = 'dpaudit'; sys.exit(main())"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    running: dict[int, tuple[int, subprocess.Popen[str], Any, Any, float]] = {}
    for i, args in enumerate(argvs):
        out, err = tempfile.TemporaryFile(mode="w+"), tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], env=env, cwd=ROOT, stdout=out, stderr=err, text=True
        )
        running[proc.pid] = (i, proc, out, err, time.perf_counter())
    results: list[tuple[str, float, float]] = [("", 0.0, 0.0)] * len(argvs)
    while running:
        # wait4 gives each child's own CPU time, however many run at once.
        pid, status, usage = os.wait4(-1, 0)
        if pid not in running:
            continue
        i, proc, out, err, started = running.pop(pid)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"dpaudit {' '.join(argvs[i])} failed ({proc.returncode}):\n{err.read()[-3000:]}")
        results[i] = (out.read(), wall, usage.ru_utime + usage.ru_stime)
    return results


def convergence(args: argparse.Namespace) -> int:
    """MI-Face's default stopping rule against fixed 1,000 iterations on faces-mlp, through the CLI."""
    run = Path(args.run_dir) / "convergence"
    data = ["--data-root", args.data_root] if args.data_root else []
    if args.target:
        from dpaudit.api import load_record, resolve_record_dir

        rdir = resolve_record_dir(args.target)
        record = load_record(rdir)
        target = {"model_id": record.model_id, "record_path": str(rdir), "metrics": dict(record.metrics)}
    else:
        rate = [] if args.target_learning_rate is None else ["--learning-rate", str(args.target_learning_rate)]
        out, _, _ = _cli(
            "train", "--defense", "nonprivate", "--dataset", "faces", "--model", "faces-mlp", *rate,
            "--out", str(run / "target"), "--quiet", "--json", *data,
        )  # fmt: skip
        target = json.loads(out)
    print(f"target {target['model_id']}: test accuracy {target['metrics']['test_accuracy']:.3f}", flush=True)
    base = ("attack", "inversion", "--target", target["record_path"], "--attack", "mi-face", "--quiet", "--json", *data)
    # The evaluator is trained once and cached in the run (an untimed one-step run trains it);
    # every row runs in its own copy of that run, so rows reuse the evaluator and nothing else.
    warm = run / "warm-up"
    first_run = ""
    if not list(warm.rglob("inversion-mi-face.json")):
        _, warm_wall, warm_cpu = _cli(*base, "--out", str(warm), "--max-iterations", "1")
        # What a user's first run adds to a row: the evaluator's training (and one attack step).
        first_run = (
            f" A first run also trains the evaluator: the one-step warm-up run that trained it took "
            f"{warm_wall:.0f} s wall ({warm_cpu:.0f} CPU s)."
        )
    dirs = []
    for i, _ in enumerate(CONVERGENCE_ROWS):
        row_dir = run / f"row{i}"
        shutil.rmtree(row_dir, ignore_errors=True)
        shutil.copytree(warm, row_dir)
        for stale in row_dir.rglob("inversion-mi-face.*"):
            stale.unlink()
        dirs.append(row_dir)
    argvs = [(*base, "--out", str(d), *flags) for d, (_, flags) in zip(dirs, CONVERGENCE_ROWS)]
    if args.parallel:
        outputs = _cli_many(argvs)
    else:
        outputs = [_cli(*a) for a in argvs]
    rows: list[dict[str, Any]] = []
    for (name, _), row_dir, (out, wall, cpu) in zip(CONVERGENCE_ROWS, dirs, outputs):
        summary = json.loads(out)
        result = summary["attacks"]["mi-face"]
        stored = _stored_details(row_dir)
        steps = np.asarray(stored["iterations"]).max(axis=1)
        reasons = [r for per_class in stored["stop_reasons"] for r in per_class]
        row = {
            "method": name,
            "attack_seconds": float(stored["seconds"]),
            "wall_seconds": wall,
            "cpu_seconds": cpu,
            "top1": float(result["attack_accuracy_top1"]),
            "top5": float(result["attack_accuracy_top5"]),
            "steps_median": float(np.median(steps)),
            "steps_max": int(steps.max()),
            "stops": {r: reasons.count(r) for r in sorted(set(reasons))},
        }
        rows.append(row)
        print(
            f"  {name:<46} attack {row['attack_seconds']:7.1f} s  wall {wall:7.1f} s  CPU {cpu:7.1f} s  "
            f"top-1 {row['top1']:.3f}  steps median {row['steps_median']:.0f} max {row['steps_max']}  {row['stops']}",
            flush=True,
        )
    table = _convergence_table(rows, target=target, note=args.note + first_run)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_convergence.md").write_text(table)
    atomic_write_json(RESULTS / "bench_convergence.json", to_jsonable({"target": target["model_id"], "rows": rows}))
    page = DOC.read_text()
    if BEGIN in page and END in page:
        head, rest = page.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        DOC.write_text(f"{head}{BEGIN}\n{table}{END}{tail}")
    else:
        print(f"{DOC} has no {BEGIN} … {END} markers: the table is only in {RESULTS}", file=sys.stderr)
    print(table)
    default, fixed = rows[0], rows[2]
    ok = default["top1"] >= fixed["top1"]
    print(f"pass: default top-1 {default['top1']:.3f} >= fixed-1,000 top-1 {fixed['top1']:.3f}: {ok}")
    return 0 if ok else 1


def _stored_details(run: Path) -> dict[str, Any]:
    """The stored details and seconds of the MI-Face result under ``run`` (the last one written)."""
    found = sorted(run.rglob("inversion-mi-face.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise SystemExit(f"no MI-Face result under {run}")
    meta = json.loads(found[-1].read_text())["metadata"]
    return {**meta["details"], "seconds": meta["seconds"]}


def _convergence_table(rows: list[dict[str, Any]], *, target: dict[str, Any], note: str) -> str:
    lines = [
        f"MI-Face on a non-private `faces-mlp` (40 classes, test accuracy "
        f"{target['metrics']['test_accuracy']:.3f}), `scripts/bench_inversion.py --convergence`. {note}",
        "",
        "| run | attack s | process wall s | process CPU s | top-1 | top-5 | steps (median / max) | stops |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        stops = ", ".join(f"{k} {n}" for k, n in r["stops"].items())
        lines.append(
            f"| {r['method']} | {r['attack_seconds']:.0f} | {r['wall_seconds']:.0f} | {r['cpu_seconds']:.0f} | "
            f"{r['top1']:.3f} | {r['top5']:.3f} | {r['steps_median']:.0f} / {r['steps_max']} | {stops} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="200 iterations instead of --iterations")
    p.add_argument(
        "--convergence", action="store_true", help="the default stopping rule against 1,000 fixed steps on faces-mlp"
    )
    p.add_argument(
        "--target-learning-rate",
        type=float,
        default=None,
        help="--convergence: the target's learning rate (default: the training's own default, as a user gets it)",
    )
    p.add_argument("--target", help="--convergence: an already trained faces-mlp record instead of training one")
    p.add_argument(
        "--parallel", action="store_true", help="--convergence: run the rows at once (CPU seconds stay each row's own)"
    )
    p.add_argument(
        "--note", default="", help="--convergence: a sentence for the table's caption (the machine, its load)"
    )
    p.add_argument("--iterations", type=int, default=1000, help="iteration cap of both sides (default 1000)")
    p.add_argument(
        "--run-dir", default="/tmp/dpaudit-bench-inversion", help="where the target is trained once and reused"
    )
    p.add_argument("--data-root", help="data root (default $DPAUDIT_DATA_ROOT)")
    p.add_argument("--json", help="write the measured figures here")
    args = p.parse_args(argv)
    if args.convergence:
        return convergence(args)
    iterations = 200 if args.quick else args.iterations

    run = RunDir(args.run_dir)
    done = train_or_load(
        TrainSpec(
            defense="nonprivate",
            model="softmax-regression",
            dataset="faces",
            config=default_config("nonprivate", epochs=100, learning_rate=0.01, batch_size=32),
            member_fraction=0.75,
            data_root=args.data_root,
            device="cpu",
            progress=False,
        ),
        run,
    )
    record = done.record
    model = load_model(run.record_dir(record.model_id), device="cpu")
    bundle = load_dataset("faces", data_root=args.data_root)
    everything = bundle.all()
    members = everything.subset(record.membership.members)
    held_ids = np.setdiff1d(
        np.union1d(record.membership.non_members, bundle.test.ids.numpy()), record.membership.members
    )
    held = everything.subset(held_ids)
    private = LabelledImages(features=members.features, labels=members.labels, ids=members.ids.numpy())
    non_members = LabelledImages(features=held.features, labels=held.labels, ids=held.ids.numpy())
    evaluator = train_evaluator(private, num_classes=bundle.num_classes, config=EvaluatorConfig(), seed=0)
    shape = tuple(bundle.input_shape)
    classes = list(range(bundle.num_classes))
    config = MIFaceConfig(max_iterations=iterations)
    print(
        f"target {record.model_id}: test accuracy "
        f"{record.metrics['test_accuracy']:.3f}; evaluator held-out accuracy "
        f"{evaluator_accuracy(evaluator, non_members):.3f}; {len(classes)} "
        f"classes, {iterations} iterations",
        flush=True,
    )

    rows: list[dict[str, Any]] = []

    def judge(method: str, batch: int, seconds: float, output: InversionOutput) -> None:
        r = evaluate_reconstructions(
            output,
            attack="mi-face",
            model_id=record.model_id,
            evaluator=evaluator,
            members=private,
            non_members=non_members,
            config={},
            metadata={},
        )
        s = r.summary()
        rows.append(
            {
                "method": method,
                "batch": batch,
                "seconds": seconds,
                "top1": s["attack_accuracy_top1"],
                "top5": s["attack_accuracy_top5"],
                "knn_distance": s["knn_distance"],
                "psnr": s["psnr"],
            }
        )
        print(
            f"  {method:<22} batch {batch:>2}: {seconds:8.1f} s  top-1 "
            f"{s['attack_accuracy_top1']:.3f}  top-5 {s['attack_accuracy_top5']:.3f}",
            flush=True,
        )

    for method, cfg in (
        ("ours (-log p steps)", config),
        ("ours (paper 1-p steps)", dataclasses.replace(config, descend_on="cost")),
    ):
        started = time.perf_counter()
        out = run_mi_face(model, classes=classes, input_shape=shape, config=cfg, seed=0)
        judge(method, len(classes), time.perf_counter() - started, out)
    labels = torch.tensor(classes)
    for batch in (1, len(classes)):
        started = time.perf_counter()
        recon = _art_mi_face(
            model, classes=classes, shape=shape, num_classes=bundle.num_classes, config=config, batch_size=batch
        )
        seconds = time.perf_counter() - started
        out = InversionOutput(
            classes=np.asarray(classes),
            reconstructions=recon,
            target_confidence=target_confidence(model, torch.from_numpy(recon), labels),
        )
        judge("ART MIFace", batch, seconds, out)

    ours = rows[0]
    art1, art_k = rows[2], rows[3]
    ratio_1, ratio_k = art1["seconds"] / ours["seconds"], art_k["seconds"] / ours["seconds"]
    print()
    print(f"{'method':<22} {'batch':>5} {'seconds':>8} {'top-1':>6} {'top-5':>6} {'KNN':>7} {'PSNR':>6}")
    for r in rows:
        print(
            f"{r['method']:<22} {r['batch']:>5} {r['seconds']:8.1f} {r['top1']:6.3f} "
            f"{r['top5']:6.3f} {r['knn_distance']:7.2f} {r['psnr']:6.2f}"
        )
    print(f"speed: ART at batch 1 takes {ratio_1:.1f}x our time, at batch {len(classes)} {ratio_k:.1f}x")
    accurate = ours["top1"] >= max(art1["top1"], art_k["top1"])
    fast = ratio_1 >= 5.0
    print(
        f"pass: ours top-1 >= ART top-1 (both batch sizes): {accurate}; ours >= "
        f"5x faster than ART at its default batch size: {fast}"
    )
    if args.json:
        atomic_write_json(
            Path(args.json),
            to_jsonable(
                {
                    "iterations": iterations,
                    "target": record.model_id,
                    "rows": rows,
                    "speedup_vs_art_batch1": ratio_1,
                    "speedup_vs_art_batch40": ratio_k,
                    "pass_accuracy": accurate,
                    "pass_speed": fast,
                }
            ),
        )
    return 0 if accurate and fast else 1


if __name__ == "__main__":
    raise SystemExit(main())
