#!/usr/bin/env python
"""Benchmark: models per CPU-second, one at a time (the project's trainers) against batched (dpaudit.batched).

Three workloads, each the training an audit repeats hundreds of times:

* ``digits-mlp`` — DP-SGD with Poisson lots, the multi-run black-box audit's recipe of
  ``scripts/reproduce_audit.py`` (300 digits records, q = 0.05, 10 epochs = 200 steps, C = 1,
  learning rate 0.5, σ = 1);
* ``audit-cnn`` — non-private SGD on 1,000 MNIST records (1 epoch, batch 32, learning rate 0.01,
  momentum 0: the worst-case start's pre-training recipe, as a shadow model would train);
* ``worst-case`` — the MNIST worst-case audit's model: full-batch DP-GD of ``audit-cnn`` on 1,000
  MNIST records from one shared start (C = 1, learning rate 0.133, σ = 1), ``--worst-case-steps``
  steps of the audit's 100 (each step costs the same on either side; the one-model side also
  pays a fixed cost per model — its record — so a short run slightly favours batching);
* ``pate-teachers`` — PATE teachers of the Adult reproduction (250 teachers of ``tabular-mlp``,
  20 epochs of batches of 32, learning rate 0.05), each on its partition of the default split:
  ``train_teachers`` one teacher per job against groups of ``--models``, records and
  evaluation included on both sides;
* ``audit`` — a whole multi-run black-box audit end to end (``run_audit``, as ``dpaudit audit``
  runs it in one process): the ``digits-mlp`` recipe above with ``--audit-trials`` trials a side
  and a ClipBKD canary, its trials trained one per job (``batch_trials=False``) against in
  batched groups (the default); each side's models are its 2R trainings, and its time includes
  the canary search, the scoring and the bound.

One at a time is what an audit worker runs for each model: ``DPSGDTrainer`` (the audit's
training function) and ``train_nonprivate``, each with its record's bookkeeping. The DP-SGD
records' ε is computed with the RDP accountant (milliseconds); with the default PLD
accountant each separate run spends several CPU-seconds more on its claim, which this
comparison leaves out. Batched is :func:`dpaudit.batched.train_batched` on ``--models`` models.

Fairness on a shared machine: both sides run in this process with one torch thread
(``OMP_NUM_THREADS=1``, as each executor worker runs), time is CPU time of this process
(:func:`time.process_time`), and the sides alternate round by round, so load from other
processes hits both alike; ``uptime`` is recorded with the numbers. The result is written
to ``scripts/results/batched/bench_batched.{md,json}`` and into ``docs/batched.md`` between
its ``<!-- bench_batched -->`` markers.

Usage::

    OMP_NUM_THREADS=1 python scripts/bench_batched.py [--rounds 2] [--models 32] [--worst-case-steps 10] \\
        [--audit-trials 32]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported: one thread, as each audit worker
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import json
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from dpaudit.api import (  # noqa: E402
    AuditSpec,
    BatchedDPSGD,
    BatchedSGD,
    DPSGDConfig,
    DPSGDTrainer,
    NonPrivateConfig,
    RunDir,
    TrainRequest,
    build_model,
    bundle_for_members,
    load_dataset,
    make_splits,
    plan_teachers,
    run_audit,
    train_batched,
    train_nonprivate,
    train_teachers,
)

RESULTS = ROOT / "scripts" / "results" / "batched"
DOC = ROOT / "docs" / "batched.md"
BEGIN, END = "<!-- bench_batched -->", "<!-- /bench_batched -->"


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def _mnist(n: int) -> tuple[Any, str]:
    try:
        return load_dataset("mnist").all().subset(np.arange(n)), "MNIST"
    except (OSError, ValueError) as exc:
        raise SystemExit(f"bench_batched: MNIST is needed (set DPAUDIT_DATA_ROOT or --data-root): {exc}") from None


class Workload:
    """One row: how to train one model the old way, and k models batched.

    ``each``: models one call of either side trains (the audit row: its 2R trainings); ``None``:
    one for ``one`` and as many as its seeds for ``many``.
    """

    def __init__(
        self,
        name: str,
        recipe: str,
        one: Callable[[int], object],
        many: Callable[[list[int]], object],
        each: int | None = None,
    ) -> None:
        self.name, self.recipe, self.one, self.many, self.each = name, recipe, one, many, each
        self.old_models, self.old_cpu, self.new_models, self.new_cpu = 0, 0.0, 0, 0.0


def _audit(trials: int, work: Path) -> Callable[[int, bool], object]:
    """A whole multi-run audit of the digits-mlp recipe, in a fresh run directory per call."""

    def audit(seed: int, batched: bool) -> object:
        spec = AuditSpec(
            dataset="digits",
            model="digits-mlp",
            num_members=300,
            noise_multiplier=1.0,
            sampling_rate=0.05,
            num_steps=200,
            learning_rate=0.5,
            num_trials=trials,
            executor="serial",
            seed=seed,
            batch_trials=batched,
            progress=False,
        )
        return run_audit(spec, RunDir(work / f"audit-{seed}-{'batched' if batched else 'alone'}"))

    return audit


def workloads(worst_case_steps: int, audit_trials: int, work: Path) -> list[Workload]:
    digits = load_dataset("digits").all().subset(np.arange(300))
    mnist, source = _mnist(1000)

    def mlp() -> torch.nn.Module:
        return build_model("digits-mlp", input_shape=digits.input_shape, num_classes=digits.num_classes)

    def cnn() -> torch.nn.Module:
        return build_model("audit-cnn", input_shape=mnist.input_shape, num_classes=mnist.num_classes)

    dp = {"noise_multiplier": 1.0, "clip_norm": 1.0, "learning_rate": 0.5}
    mlp_trainer = DPSGDTrainer(
        config=DPSGDConfig(**dp, sampling_rate=0.05, epochs=10, accountant="rdp"), model_name="digits-mlp"
    )
    mlp_batched = BatchedDPSGD(**dp, sampling_rate=0.05, num_steps=200)

    sgd = {"epochs": 1, "batch_size": 32, "learning_rate": 0.01, "momentum": 0.0}
    bundle, splits = bundle_for_members(mnist)

    def cnn_one(seed: int) -> object:
        request = TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name="audit-cnn",
            config=NonPrivateConfig(**sgd),
            seed=seed,
            progress=False,
        )
        return train_nonprivate(request)

    start = cnn().state_dict()  # one shared start, as the worst-case audit's crafted one
    adult = load_dataset("adult")
    teachers = plan_teachers(
        bundle=adult,
        splits=make_splits(adult, seed=0),
        num_teachers=250,
        model_name="tabular-mlp",
        config=NonPrivateConfig(epochs=20, batch_size=32, learning_rate=0.05),
        seed=0,
    )
    audit = _audit(audit_trials, work)
    wc = {"noise_multiplier": 1.0, "clip_norm": 1.0, "learning_rate": 0.133}
    wc_trainer = DPSGDTrainer(
        config=DPSGDConfig(**wc, sampling_rate=1.0, epochs=worst_case_steps, accountant="rdp"), model_name="audit-cnn"
    )
    wc_batched = BatchedDPSGD(**wc, sampling_rate=1.0, num_steps=worst_case_steps)
    return [
        Workload(
            "digits-mlp",
            "DP-SGD, 300 digits records, q = 0.05, 200 steps",
            lambda s: mlp_trainer(digits, seed=s),
            lambda seeds: train_batched(
                mlp, digits.features, digits.labels, seeds=seeds, sample_ids=digits.ids, config=mlp_batched
            ),
        ),
        Workload(
            "audit-cnn",
            f"non-private SGD, 1,000 {source} records, 1 epoch of batches of 32",
            cnn_one,
            lambda seeds: train_batched(cnn, mnist.features, mnist.labels, seeds=seeds, config=BatchedSGD(**sgd)),
        ),
        Workload(
            "worst-case (audit-cnn)",
            f"full-batch DP-GD, 1,000 {source} records, {worst_case_steps} steps from a shared start",
            lambda s: wc_trainer(mnist, seed=s, initial_state=start),
            lambda seeds: train_batched(
                cnn,
                mnist.features,
                mnist.labels,
                seeds=seeds,
                sample_ids=mnist.ids,
                initial_state=start,
                config=wc_batched,
            ),
        ),
        Workload(
            "pate-teachers (tabular-mlp)",
            f"PATE teachers on Adult partitions of {teachers[0].train_ids.size} records, 20 epochs of batches of 32",
            lambda s: train_teachers([teachers[s % 250]], directory=None, progress=False, batched=False),
            lambda seeds: train_teachers([teachers[s % 250] for s in seeds], directory=None, progress=False),
        ),
        Workload(
            "audit",
            f"multi-run audit end to end: the digits-mlp recipe, {audit_trials} trials a side",
            lambda s: audit(s, False),
            lambda seeds: audit(seeds[0], True),
            each=2 * audit_trials,
        ),
    ]


def _cpu(fn: Callable[[], object]) -> float:
    started = time.process_time()
    fn()
    return time.process_time() - started


def run(
    rounds: int, models: int, worst_case_steps: int, audit_trials: int, only: list[str] | None
) -> dict[str, object]:
    import tempfile

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="bench-batched-"))
    rows = [w for w in workloads(worst_case_steps, audit_trials, work) if not only or w.name.split()[0] in only]
    load_before = _uptime()
    for w in rows:  # warm-up: lazy imports and first-call costs are paid by neither side
        if w.each is None:  # (an audit's first call pays its imports inside its own time: both sides alike)
            w.one(10**6)
            w.many([10**6, 10**6 + 1])
    seed = 0
    for r in range(rounds):
        for w in rows:
            sides = ("old", "new") if r % 2 == 0 else ("new", "old")
            for side in sides:
                if side == "old":
                    s = seed
                    w.old_cpu += _cpu(lambda: w.one(s))
                    w.old_models += w.each or 1
                    seed += 1
                else:
                    seeds = list(range(seed, seed + models))
                    w.new_cpu += _cpu(lambda: w.many(seeds))
                    w.new_models += w.each or models
                    seed += models
            print(
                f"round {r + 1}/{rounds} {w.name}: one at a time {w.old_models / w.old_cpu:.3g}, "
                f"batched {w.new_models / w.new_cpu:.3g} models/CPU-s",
                file=sys.stderr,
                flush=True,
            )
    load_after = _uptime()
    table = []
    for w in rows:
        old_rate, new_rate = w.old_models / w.old_cpu, w.new_models / w.new_cpu
        table.append(
            {
                "model": w.name,
                "training": w.recipe,
                "one_at_a_time_models": w.old_models,
                "one_at_a_time_cpu_s": round(w.old_cpu, 2),
                "one_at_a_time_models_per_cpu_s": old_rate,
                "batched_models": w.new_models,
                "batched_cpu_s": round(w.new_cpu, 2),
                "batched_models_per_cpu_s": new_rate,
                "ratio": new_rate / old_rate,
            }
        )
    return {
        "rows": table,
        "rounds": rounds,
        "models_per_batched_run": models,
        "worst_case_steps": worst_case_steps,
        "audit_trials": audit_trials,
        "threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "cpu_count": os.cpu_count(),
        "uptime_before": load_before,
        "uptime_after": load_after,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def markdown(result: dict[str, object]) -> str:
    rows = result["rows"]
    assert isinstance(rows, list)
    lines = [
        "| model | training | one at a time (models / CPU-s) | batched (models / CPU-s) | ratio |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| `{r['model']}` | {r['training']} | {r['one_at_a_time_models_per_cpu_s']:.3g} "
            f"({r['one_at_a_time_models']} in {r['one_at_a_time_cpu_s']:.1f} s) | "
            f"{r['batched_models_per_cpu_s']:.3g} ({r['batched_models']} in {r['batched_cpu_s']:.1f} s) | "
            f"**{r['ratio']:.1f}×** |"
        )
    lines += [
        "",
        f"Measured {result['date']} by `scripts/bench_batched.py --rounds {result['rounds']} "
        f"--models {result['models_per_batched_run']} --worst-case-steps {result['worst_case_steps']} "
        f"--audit-trials {result.get('audit_trials', 16)}`: "
        f"one torch thread (`OMP_NUM_THREADS={result['omp_num_threads']}`), {result['cpu_count']} cores, "
        f"torch {result['torch']}, the two sides alternating round by round. Load during the run: "
        f"before `{result['uptime_before']}`, after `{result['uptime_after']}`.",
    ]
    return "\n".join(lines) + "\n"


def write(result: dict[str, object]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bench_batched.json").write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    (RESULTS / "bench_batched.md").write_text(table)
    page = DOC.read_text()
    if BEGIN in page and END in page:
        head, rest = page.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        DOC.write_text(f"{head}{BEGIN}\n{table}{END}{tail}")
    else:
        print(f"{DOC} has no {BEGIN} … {END} markers: the table is only in {RESULTS}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--rounds", type=int, default=2, help="alternations of the two sides (default 2)")
    p.add_argument("--models", type=int, default=32, help="models per batched run (default 32, TRIALS_PER_BATCH)")
    p.add_argument("--worst-case-steps", type=int, default=10, help="DP-GD steps of the worst-case row (audit: 100)")
    p.add_argument("--audit-trials", type=int, default=32, help="trials a side of the audit row (default 32)")
    p.add_argument(
        "--only", nargs="*", help="rows to run (digits-mlp, audit-cnn, worst-case, pate-teachers, audit); default all"
    )
    p.add_argument("--no-write", action="store_true", help="print the table only")
    args = p.parse_args(argv)
    for name in ("rounds", "models", "worst_case_steps", "audit_trials"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    result = run(args.rounds, args.models, args.worst_case_steps, args.audit_trials, args.only)
    print(markdown(result))
    if not args.no_write:
        write(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
