"""The cost model: what a run will cost, before it runs (``--dry-run``, and the long-run notice).

A run of ``compare``, ``audit`` or ``attack membership`` is a set of independent jobs (trainings
of shadow models, audit trials, grid cells). Its cost is estimated from the time of one job on
this machine — measured passes of the model (:mod:`dpaudit.app.estimate`) times the examples
the job pushes through it — and spread over W workers as whole jobs:
``wall(W) = ceil(jobs / W) × job_seconds + (jobs / W) × overhead``, where ``overhead`` is the
per-job cost of the executor (scheduling, result transfer; ``scripts/bench_scale.py`` measures
it for the local pool and Ray). With jobs of equal length this is Amdahl's law with the serial
part being the per-job overhead (Amdahl 1967); the driver's own work (loading, attacks on the
stored models) is left out, so the estimate errs low, which is why it says "about".

Memory per job is the dataset's tensors, the model with its gradients and two optimizer moments,
per-example gradients of one batch for DP-SGD, and :data:`PROCESS_BYTES` for the interpreter
with torch; the run needs that much on each worker.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["RunPlan", "WORKER_COUNTS", "PROCESS_BYTES", "count_parameters", "ray_gpus", "job_memory_bytes", "announce_plan", "grid_plan", "membership_plan", "audit_plan", "print_plan"]

#: The worker counts a plan is shown for, beside this machine's.
WORKER_COUNTS: tuple[int, ...] = (8, 64)
#: A worker process with torch imported, before any data (measured: 300–400 MB RSS on CPU).
PROCESS_BYTES = 400 * 2**20
#: Per-job overhead of an executor, seconds (Ray's scheduling and result transfer of a small
#: model, the larger of the two measured by scripts/bench_scale.py on a 2-core machine).
JOB_OVERHEAD_S = 0.05


@dataclass(frozen=True, kw_only=True)
class RunPlan:
    """What a run will do and cost.

    Attributes:
        what: the jobs, in words (``12 shadow models (lira, 8 epochs each)``).
        num_jobs: jobs that will run (stored ones already excluded where known).
        job_seconds: estimated seconds of one job on one worker of this machine (0: unknown).
        job_memory_bytes: estimated memory of one job.
        workers: workers on this machine (``--num-workers``).
        reused: jobs whose stored results will be reused.
    """

    what: str
    num_jobs: int
    job_seconds: float
    job_memory_bytes: int
    workers: int
    reused: int = 0

    @property
    def cpu_hours(self) -> float:
        return self.num_jobs * self.job_seconds / 3600.0

    def wall_seconds(self, workers: int) -> float:
        """Estimated wall time on ``workers`` workers (whole jobs per worker, plus overhead)."""
        workers = max(1, int(workers))
        return math.ceil(self.num_jobs / workers) * self.job_seconds + self.num_jobs / workers * JOB_OVERHEAD_S

    def lines(self) -> list[str]:
        """The plan as printed by ``--dry-run``."""
        reused = f"; {self.reused} stored job(s) reused" if self.reused else ""
        out = [f"plan: {self.num_jobs} job(s): {self.what}{reused}"]
        if self.job_seconds > 0:
            out.append(f"  one job: about {_duration(self.job_seconds)} on this machine; in all about {self.cpu_hours:.2g} CPU-hours")
            walls = [f"{_duration(self.wall_seconds(self.workers))} here ({self.workers} worker{'s' if self.workers != 1 else ''})"]
            walls += [f"{_duration(self.wall_seconds(n))} on {n} workers" for n in WORKER_COUNTS if n > self.workers]
            out.append(f"  wall time: about {', '.join(walls)}")
        else:
            out.append("  time: unknown (the model's speed cannot be measured here)")
        out.append(f"  memory: about {_size(self.job_memory_bytes)} per job (each worker needs that much)")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "what": self.what,
            "num_jobs": self.num_jobs,
            "num_reused": self.reused,
            "job_seconds": self.job_seconds,
            "cpu_hours": self.cpu_hours,
            "wall_seconds": {str(n): self.wall_seconds(n) for n in sorted({self.workers, *WORKER_COUNTS})},
            "job_memory_bytes": self.job_memory_bytes,
        }


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 1 else f"{seconds:.1g} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def _size(num_bytes: float) -> str:
    return f"{num_bytes / 2**30:.1f} GB" if num_bytes >= 2**30 else f"{num_bytes / 2**20:.0f} MB"


def count_parameters(model_name: str, *, input_shape: Sequence[int], num_classes: int, model_options: Any = None) -> int:
    """Parameters of a zoo model (0 where it cannot be built here, e.g. an external builder)."""
    try:
        from dpaudit.models import build_model

        model = build_model(model_name, input_shape=tuple(input_shape), num_classes=num_classes, **dict(model_options or {}))
    except (ValueError, TypeError, KeyError, RuntimeError):
        return 0
    return int(sum(p.numel() for p in model.parameters()))


def ray_gpus(device: str, num_parameters: int) -> float:
    """GPUs a Ray job of a model asks for: none on CPU, :func:`dpaudit.cluster.gpu_share` on CUDA."""
    from dpaudit.cluster import gpu_share

    return gpu_share(num_parameters) if str(device).startswith("cuda") else 0.0


def job_memory_bytes(model_name: str, *, input_shape: Sequence[int], num_classes: int, num_examples: int, batch_size: int = 256, per_example: bool = False, model_options: Any = None) -> int:
    """Estimated memory of one training job (see the module docstring); the model's size is
    counted from the zoo's builder, 0 parameters where it cannot be built here."""
    params = count_parameters(model_name, input_shape=input_shape, num_classes=num_classes, model_options=model_options)
    features = num_examples * math.prod(int(s) for s in input_shape)
    model_bytes = 4 * params * 4  # weights, gradients, two optimizer moments (float32)
    per_example_bytes = 4 * params * batch_size if per_example else 0
    return int(PROCESS_BYTES + 4 * features + model_bytes + per_example_bytes)


def announce_plan(plan: RunPlan, *, hint: str = "") -> bool:
    """Says on stderr what ``plan`` costs when its wall time here is over an hour (the threshold of
    :func:`dpaudit.app.estimate.announce_if_long`); returns whether it did."""
    from dpaudit.app.estimate import LONG_RUN_SECONDS

    if not plan.wall_seconds(plan.workers) > LONG_RUN_SECONDS:
        return False
    extra = f"; {hint}" if hint else ""
    walls = ", ".join(f"{_duration(plan.wall_seconds(n))} on {n} workers" for n in WORKER_COUNTS if n > plan.workers)
    print(
        f"note: {plan.num_jobs} {plan.what} are estimated at about {plan.cpu_hours:.2g} CPU-hours: "
        f"{_duration(plan.wall_seconds(plan.workers))} on this machine ({plan.workers} worker(s)), {walls}{extra}; progress is shown, and an interrupted run resumes",
        file=sys.stderr,
    )
    return True


# ----------------------------------------------------------------------------- the verbs' plans
def grid_plan(grid: Any, *, data_root: str | None, workers: int | None) -> RunPlan:
    """The plan of a ``compare`` grid: its jobs (:func:`~dpaudit.app.runs.grid_checks.count_jobs`),
    the grid's estimated time on one worker shared over them, the largest job's memory."""
    import os

    from defenses import DEFENSES
    from dpaudit.app.runs.grid_checks import count_jobs, estimate_seconds
    from dpaudit.data import DATASETS
    from dpaudit.data.source import checked_data_root

    jobs = count_jobs(grid)
    seconds = estimate_seconds(grid, data_root=data_root, workers=1)
    source = DATASETS[grid.dataset]
    try:
        info = source.info(checked_data_root(data_root) if source.needs_root else checked_data_root(None, allow_missing=True))
        shape, num_train = tuple(info.input_shape or ()), int(info.num_train or 0)
    except (OSError, ValueError):
        shape, num_train = (), 0
    memory = max(
        job_memory_bytes(s.model, input_shape=shape, num_classes=source.num_classes, num_examples=num_train, per_example=DEFENSES[s.defense].per_example_gradients, model_options=dict(s.model_options))
        for s in grid.settings
    )
    sections = [k for k in ("membership", "evasion", "inversion") if getattr(grid, k) is not None]
    what = f"grid {grid.name!r}: {len(grid.settings)} setting(s) x {len(grid.seeds)} seed(s) x (training{''.join(' + ' + k for k in sections)}){' + audits' if grid.audit else ''}"
    return RunPlan(what=what, num_jobs=jobs, job_seconds=seconds / max(jobs, 1), job_memory_bytes=memory, workers=workers or os.cpu_count() or 1)


def membership_plan(spec: Any) -> RunPlan:
    """The plan of ``attack membership``: one job per shadow model its attacks need (cached shadows
    are reused at run time), each a training like the target's."""
    import os

    from attacks import membership as mia
    from dpaudit.app.estimate import PER_EXAMPLE_GRADIENT_FACTOR, seconds_per_example
    from dpaudit.app.runs.membership import _load_target

    record, _, _ = _load_target(spec, "cpu")
    ids, _ = mia.query_ids(record, max_per_side=spec.num_samples, seed=spec.seed)
    train_size = max(len(record.membership.members), 1)
    chosen = {n: (mia.MEMBERSHIP_ATTACKS[n], c) for n, c in spec.attacks.items()}
    pools = mia.plan_pools(chosen, record=record, sample_ids=ids, seed=spec.seed, num_population=spec.num_population, train_size=train_size)
    num_models = sum(p.num_models for p in pools.values())
    epochs = float(record.config.get("epochs") or 10)
    from defenses import DEFENSES

    # Shadows train as the target did: per-example clipping costs what its defense says.
    dp = record.defense in DEFENSES and DEFENSES[record.defense].per_example_gradients
    per = seconds_per_example(record.model_name, input_shape=record.input_shape, num_classes=record.num_classes, device="cpu", model_options=record.model_options)
    seconds = epochs * train_size * per * (PER_EXAMPLE_GRADIENT_FACTOR if dp else 1.0)
    memory = job_memory_bytes(record.model_name, input_shape=record.input_shape, num_classes=record.num_classes, num_examples=2 * train_size, per_example=dp, model_options=record.model_options)
    what = (
        f"shadow models of {record.model_name} for {', '.join(spec.attacks)} ({epochs:g} epochs on {train_size} examples each; cached ones are reused)"
        if pools
        else "no shadow models (the attacks need none)"
    )
    return RunPlan(what=what, num_jobs=num_models, job_seconds=seconds, job_memory_bytes=memory, workers=spec.num_workers or os.cpu_count() or 1)


def audit_plan(spec: Any) -> RunPlan:
    """The plan of ``audit``: one job per training (black-box multi-run trains two per trial:
    with and without the canaries), each ``num_steps`` DP-SGD steps of expected size q·n."""
    from dpaudit.app.estimate import PER_EXAMPLE_GRADIENT_FACTOR, seconds_per_example
    from dpaudit.data import load_dataset, make_splits

    bundle = load_dataset(spec.dataset, data_root=spec.data_root)
    splits = make_splits(bundle, seed=spec.seed, **({"num_members": spec.num_members} if spec.num_members is not None else {}))
    members = len(splits.members)
    trainings = 2 * spec.resolved_num_trials if spec.threat == "black-box" and spec.method == "multi-run" else spec.resolved_num_trials
    steps = spec.resolved_num_steps
    per = 0.0 if spec.train_fn is not None else seconds_per_example(spec.model, input_shape=bundle.input_shape, num_classes=bundle.num_classes, device=spec.device)
    seconds = steps * spec.sampling_rate * members * per * PER_EXAMPLE_GRADIENT_FACTOR
    memory = job_memory_bytes(
        spec.model, input_shape=bundle.input_shape, num_classes=bundle.num_classes, num_examples=members, batch_size=max(1, round(spec.sampling_rate * members)), per_example=True
    )
    what = f"{spec.threat} {spec.method if spec.threat == 'black-box' else ''} audit trainings of {steps} DP-SGD steps on {members} members".replace("  ", " ")
    return RunPlan(what=what, num_jobs=trainings, job_seconds=seconds, job_memory_bytes=memory, workers=spec.workers)


def print_plan(args: Any, plan: RunPlan) -> int:
    """``--dry-run``: the plan on stdout (``--json``: as one object), exit 0."""
    from dpaudit.app.common import EXIT_OK, emit

    emit(args, {"dry_run": True, **plan.to_dict()}, "\n".join(plan.lines()))
    return EXIT_OK
