"""The cost model of a run of independent jobs: its time on W workers, CPU-hours and memory per
job (what ``--dry-run`` prints, :mod:`dpaudit.app.plan`), and the notice every run prints before
a wait over an hour.

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

from dpaudit.app.estimate import (
    COMMAND_FINISH_FACTOR,
    LONG_RUN_SECONDS,
    POOL_START_FACTOR,
    Estimate,
    describe_duration,
)
from dpaudit.store import JsonObject

__all__ = [
    "RunPlan",
    "WORKER_COUNTS",
    "PROCESS_BYTES",
    "JOB_OVERHEAD_S",
    "announce_if_long",
    "describe_size",
    "short_duration",
    "count_parameters",
    "ray_gpus",
    "job_memory_bytes",
]

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
        job_seconds: estimated seconds of one job on one worker of this machine (0: unknown); the
            middle of ``job_low``–``job_high`` when those are given.
        job_memory_bytes: estimated memory of one job.
        workers: workers on this machine (``--num-workers``).
        reused: jobs whose stored results will be reused.
        job_low, job_high: the range of one job's time (0: ``job_seconds`` itself), from the
            calibration's spread (:class:`~dpaudit.app.estimate.Estimate`).
        timed: what the calibration timed, in words (empty: nothing).
        start_up: seconds the command spends before its jobs (imports, loading the data), as
            measured by the command that made the plan; with its work after the jobs and a
            pool's start (:data:`~dpaudit.app.estimate.COMMAND_FINISH_FACTOR`,
            :data:`~dpaudit.app.estimate.POOL_START_FACTOR`), part of the wall time here only.
        starts_pool: the run starts a local pool of worker processes here.
        command_low, command_high: the range of the command's own timed work outside its jobs
            (the privacy accounting of the claim it audits: :func:`dpaudit.app.plan.claim_accounting`),
            paid once whatever the workers.
    """

    what: str
    num_jobs: int
    job_seconds: float
    job_memory_bytes: int
    workers: int
    reused: int = 0
    job_low: float = 0.0
    job_high: float = 0.0
    timed: str = ""
    start_up: float = 0.0
    starts_pool: bool = False
    command_low: float = 0.0
    command_high: float = 0.0

    @classmethod
    def measured(cls, estimate: Estimate | None, **fields: Any) -> RunPlan:
        """A plan whose one job takes ``estimate`` (None: unknown)."""
        if estimate is None:
            return cls(job_seconds=0.0, **fields)
        return cls(job_seconds=estimate.middle, job_low=estimate.low, job_high=estimate.high, **fields)

    @property
    def job_range(self) -> Estimate:
        """One job's time as a range."""
        return Estimate(low=self.job_low or self.job_seconds, high=self.job_high or self.job_seconds)

    @property
    def cpu_hours(self) -> float:
        return self.num_jobs * self.job_seconds / 3600.0

    def wall_seconds(self, workers: int) -> float:
        """Estimated wall time on ``workers`` workers (whole jobs per worker, plus overhead): the
        middle of :meth:`wall_range`."""
        wall = self.wall_range(workers)
        return wall.middle if wall.low > 0 else wall.high

    def wall_range(self, workers: int) -> Estimate:
        """The wall time on ``workers`` workers as a range; here (``workers`` = :attr:`workers`)
        with the command's own start-up, finish and pool start."""
        job = self.job_range
        return Estimate(low=self._wall(job.low, workers, 0), high=self._wall(job.high, workers, 1))

    def _wall(self, job_seconds: float, workers: int, end: int) -> float:
        here = 0.0
        if workers == self.workers and self.start_up > 0:
            here = self.start_up * (1.0 + COMMAND_FINISH_FACTOR[end])
            if self.starts_pool:
                here += self.start_up * POOL_START_FACTOR[end]
        here += (self.command_low, self.command_high)[end]
        workers = max(1, int(workers))
        return here + math.ceil(self.num_jobs / workers) * job_seconds + self.num_jobs / workers * JOB_OVERHEAD_S

    def lines(self) -> list[str]:
        """The plan as printed by ``--dry-run``."""
        reused = f"; {self.reused} stored job(s) reused" if self.reused else ""
        out = [f"plan: {self.num_jobs} job(s): {self.what}{reused}"]
        if self.job_seconds > 0:
            job = self.job_range
            out.append(
                f"  one job: {job.describe()} on this machine; "
                f"in all about {self.num_jobs * job.low / 3600:.2g}–{self.num_jobs * job.high / 3600:.2g} CPU-hours"
            )
            walls = [
                f"{self.wall_range(self.workers).describe().removeprefix('about ')} here ({self.workers} "
                f"worker{'s' if self.workers != 1 else ''})"
            ]
            walls += [
                f"{self.wall_range(n).describe().removeprefix('about ')} on {n} workers"
                for n in WORKER_COUNTS
                if n > self.workers
            ]
            out.append(f"  wall time: about {', '.join(walls)}")
            if self.timed:
                out.append(f"  (measured: {self.timed})")
        else:
            out.append("  time: unknown (the model's speed cannot be measured here)")
        out.append(f"  memory: about {describe_size(self.job_memory_bytes)} per job (each worker needs that much)")
        return out

    def to_dict(self) -> JsonObject:
        """The plan as ``--json`` prints it (seconds of wall time keyed by worker count, with their ranges)."""
        counts = sorted({self.workers, *WORKER_COUNTS})
        return {
            "what": self.what,
            "num_jobs": self.num_jobs,
            "num_reused": self.reused,
            "job_seconds": self.job_seconds,
            "job_seconds_range": [self.job_range.low, self.job_range.high],
            "cpu_hours": self.cpu_hours,
            "wall_seconds": {str(n): self.wall_seconds(n) for n in counts},
            "wall_seconds_range": {str(n): [self.wall_range(n).low, self.wall_range(n).high] for n in counts},
            "job_memory_bytes": self.job_memory_bytes,
            "workers": self.workers,
            "start_up_seconds": self.start_up,
            "starts_pool": self.starts_pool,
            "command_seconds_range": [self.command_low, self.command_high],
            "timed": self.timed,
        }


def short_duration(seconds: float) -> str:
    """``40 s`` / ``12 min`` / ``3.5 h`` / ``2 days``: a plan's times, to the unit that reads best."""
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 1 else f"{seconds:.1g} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def describe_size(num_bytes: float) -> str:
    """``350 MB`` / ``1.2 GB``."""
    return f"{num_bytes / 2**30:.1f} GB" if num_bytes >= 2**30 else f"{num_bytes / 2**20:.0f} MB"


def announce_if_long(
    seconds: float | Estimate, what: str, *, hint: str = "", jobs: int = 0, job_seconds: float | Estimate = 0.0
) -> bool:
    """Says on stderr that ``what`` will take ``seconds`` when that is over an hour; returns whether it did.

    ``seconds`` is a figure or a measured range (:class:`~dpaudit.app.estimate.Estimate`, said as
    one: ``about 2–3 h``; announced when its middle is over the hour). Given its ``jobs`` and the
    estimated ``job_seconds`` of one, the line also gives the CPU-hours and the wall time on 8 and
    64 workers (:class:`RunPlan`'s cost model).
    """
    middle = seconds.middle if isinstance(seconds, Estimate) else seconds
    if not middle > LONG_RUN_SECONDS:
        return False
    extra = f"; {hint}" if hint else ""
    one = job_seconds if isinstance(job_seconds, Estimate) else Estimate(low=job_seconds, high=job_seconds)
    if jobs > 0 and one.high > 0:
        plan = RunPlan.measured(one, what=what, num_jobs=jobs, job_memory_bytes=0, workers=1)

        def wall(n: int) -> str:
            if not plan.wall_seconds(n) > LONG_RUN_SECONDS:
                return "under 1 h"
            return describe_duration(plan.wall_range(n) if one.low < one.high else plan.wall_seconds(n))

        walls = ", ".join(f"{wall(n)} on {n} workers" for n in WORKER_COUNTS)
        extra = f" ({jobs:,} jobs, about {plan.cpu_hours:.2g} CPU-hours; {walls}){extra}"
    print(
        f"note: {what} is estimated to take {describe_duration(seconds)} on this "
        f"machine{extra}; progress is shown, and an interrupted run resumes",
        file=sys.stderr,
    )
    return True


def count_parameters(
    model_name: str, *, input_shape: Sequence[int], num_classes: int, model_options: Any = None
) -> int:
    """Parameters of a zoo model (0 where it cannot be built here, e.g. an external builder)."""
    try:
        from dpaudit.models import build_model

        model = build_model(
            model_name, input_shape=tuple(input_shape), num_classes=num_classes, **dict(model_options or {})
        )
    except (ValueError, TypeError, KeyError, RuntimeError):
        return 0
    return int(sum(p.numel() for p in model.parameters()))


def ray_gpus(device: str, num_parameters: int) -> float:
    """GPUs a Ray job of a model asks for: none on CPU, :func:`dpaudit.cluster.gpu_share` on CUDA."""
    from dpaudit.cluster import gpu_share

    return gpu_share(num_parameters) if str(device).startswith("cuda") else 0.0


def job_memory_bytes(
    model_name: str,
    *,
    input_shape: Sequence[int],
    num_classes: int,
    num_examples: int,
    batch_size: int = 256,
    per_example: bool = False,
    model_options: Any = None,
) -> int:
    """Estimated memory of one training job (see the module docstring); the model's size is
    counted from the zoo's builder, 0 parameters where it cannot be built here."""
    params = count_parameters(model_name, input_shape=input_shape, num_classes=num_classes, model_options=model_options)
    features = num_examples * math.prod(int(s) for s in input_shape)
    model_bytes = 4 * params * 4  # weights, gradients, two optimizer moments (float32)
    per_example_bytes = 4 * params * batch_size if per_example else 0
    return int(PROCESS_BYTES + 4 * features + model_bytes + per_example_bytes)
