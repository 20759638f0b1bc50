"""How long a run will take, measured on this machine before it starts (issues 11 and 48).

Every estimate of dpaudit (``--dry-run``'s plans, the "about N" notes before a long run) comes
from one calibration: the job's own model is built and a few of its steps are timed here — a
batch of the job's size, through the step the job takes (a forward pass for certification, a
forward and backward pass and an SGD update for plain training, per-example clipping for
DP-SGD, :mod:`defenses.clipping` itself), on the job's device and with the threads the job will
run with (:mod:`dpaudit.threads`: a pool's worker runs fewer than the command). The steps'
time per example is multiplied by the examples the job pushes through the model.

The result is a range, :class:`Estimate`: its low end is the median timed step, its high end
the slowest quarter of the timed steps (their spread on this machine, which grows with other
work on it), each times a stated factor for what the calibration does not time
(:data:`UNTIMED_FACTOR`: data loading, evaluation) plus a job's own work outside its steps
(:func:`job_start`). The privacy accounting a run does (PLD evaluations: seconds each on a
small DP-SGD training) is priced apart, by its grids' sizes at a rate timed here
(:func:`accounting_seconds`). A command's work outside its jobs — its start-up before the first
calibration, measured (:func:`command_start_up`), its finish and a pool's start, stated as
shares of it — is added by the plan (:class:`dpaudit.app.cost.RunPlan`). The factors were set
from the runs of ``scripts/check_estimates.py`` on a loaded 2-core machine; the docs page
``docs/performance.md`` shows its table.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LONG_RUN_SECONDS",
    "PER_EXAMPLE_GRADIENT_FACTOR",
    "UNTIMED_FACTOR",
    "COMMAND_FINISH_FACTOR",
    "POOL_START_FACTOR",
    "JOB_START_SECONDS",
    "JOB_START_SHARE",
    "job_start",
    "ACCOUNTANT_FACTOR",
    "accounting_seconds",
    "MODES",
    "Estimate",
    "StepTimes",
    "time_steps",
    "estimate_job",
    "time_group",
    "process_elapsed",
    "start_command",
    "command_start_up",
    "seconds_per_example",
    "describe_duration",
    "describe_range",
]

#: Runs expected to take longer than this are announced before they start.
LONG_RUN_SECONDS = 3600.0
#: A per-example gradient step against a plain one, used only where the clipping step cannot be
#: timed on the model (one :mod:`defenses.clipping` cannot follow): measured at 1.3–3× for the zoo
#: models (scripts/bench_dpsgd.py), so 3 is the cautious side.
PER_EXAMPLE_GRADIENT_FACTOR = 3.0
#: What the calibration leaves out (data loading, evaluation, progress), as a
#: factor on the timed steps: (low end, high end).
UNTIMED_FACTOR = (1.1, 1.6)
#: A job's own work outside its steps (building the model, the data and the canaries, evaluating
#: it, storing it), as a share of the command's measured start-up (which grows with the
#: machine's load as that work does), and at least the seconds below: (low, high).
JOB_START_SHARE = (0.03, 0.1)
JOB_START_SECONDS = (0.2, 1.0)
#: The command's own work after its jobs (attacks on the stored models, evaluation, reports), as
#: a share of its measured start-up (:func:`command_start_up`, which grows with the machine's
#: load as that work does): (low, high).
COMMAND_FINISH_FACTOR = (0.3, 1.0)
#: A local pool's workers start (a fresh interpreter, torch and dpaudit imported, in parallel) in
#: this many of the command's start-ups: (low, high).
POOL_START_FACTOR = (1.0, 2.0)
#: The PLD accountant's cost, timed on a coarser grid and scaled to the run's grid by their
#: lengths (:func:`accounting_seconds`), times this: (low, high). The coarse timing carries the
#: evaluation's fixed part too, so scaling it up errs high; the low end allows for that.
ACCOUNTANT_FACTOR = (0.6, 1.2)
#: The grid timed for that (bytes, :func:`~dpaudit.privacy.pld_accountant.pld_memory_estimate`):
#: about a tenth of a small DP-SGD training's, a fraction of a second here.
_ACCOUNTANT_TIMED_BYTES = 6e6
#: Seconds per byte of grid, measured once per process (None: not yet).
_SECONDS_PER_GRID_BYTE: float | None = None
#: The steps a calibration can time.
MODES = ("forward", "backward", "per-example")
#: The timing of one calibration: at least this many steps, and at least this long (seconds).
_MIN_STEPS = 5
_MIN_SECONDS = 0.4
_MAX_STEPS = 200
#: The largest batch timed (a larger job batch costs about as much per example).
_MAX_BATCH = 512
#: When this command started (``time.monotonic``; None: no command, e.g. library use).
_COMMAND_T0: float | None = None
#: When its first calibration started (None: none yet).
_FIRST_CALIBRATION: float | None = None


def process_elapsed() -> float:
    """Seconds since this process started (from Linux's ``/proc``; 0.0 where it cannot be read)."""
    import os

    try:
        with open("/proc/self/stat", encoding="ascii") as f:
            after_name = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        # Field 22 of stat, the start time in clock ticks after boot; after_name starts at field 3.
        return max(0.0, uptime - int(after_name[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def start_command(*, whole_process: bool) -> None:
    """Marks the start of a command (the CLI's ``main``); ``whole_process``: the process was started
    for it (the ``dpaudit`` script), so its interpreter's start-up counts too."""
    global _COMMAND_T0, _FIRST_CALIBRATION
    _COMMAND_T0 = time.monotonic() - (process_elapsed() if whole_process else 0.0)
    _FIRST_CALIBRATION = None


def command_start_up() -> float:
    """What this command spent before its first calibration (the interpreter, imports, loading the
    data and the target): the part of a run's wall time outside its jobs that a plan made now can
    measure. 0.0 outside a command."""
    if _COMMAND_T0 is None:
        return 0.0
    return max(0.0, (_FIRST_CALIBRATION if _FIRST_CALIBRATION is not None else time.monotonic()) - _COMMAND_T0)


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """A duration as a range, seconds.

    Attributes:
        low: the low end.
        high: the high end (≥ ``low``).
        basis: what was timed, in words (empty: nothing).
    """

    low: float
    high: float
    basis: str = ""

    @property
    def middle(self) -> float:
        """The geometric middle of the range (the one figure, where one is needed)."""
        return math.sqrt(self.low * self.high) if self.low > 0 else self.high / 2

    def times(self, k: float) -> Estimate:
        return Estimate(low=self.low * k, high=self.high * k, basis=self.basis)

    def plus(self, other: Estimate) -> Estimate:
        basis = "; ".join(dict.fromkeys(b for b in (self.basis, other.basis) if b))
        return Estimate(low=self.low + other.low, high=self.high + other.high, basis=basis)

    def describe(self) -> str:
        """``about 4–6 min`` (``about 5 min`` where both ends read the same)."""
        return describe_range(self.low, self.high)


@dataclass(frozen=True, kw_only=True)
class StepTimes:
    """A calibration: the timed steps of one job's model.

    Attributes:
        per_example: seconds per example of each timed step.
        batch: the examples of each step.
        threads: the intra-op threads they ran with.
        mode: the step (:data:`MODES`).
    """

    per_example: tuple[float, ...]
    batch: int
    threads: int
    mode: str

    @property
    def median(self) -> float:
        return statistics.median(self.per_example) if self.per_example else 0.0

    @property
    def slow(self) -> float:
        """The slowest quarter's edge (the upper quartile)."""
        if len(self.per_example) < 2:
            return self.median
        return statistics.quantiles(self.per_example, n=4, method="inclusive")[2]

    def describe(self) -> str:
        """``8 per-example steps of 64 examples with 1 thread``."""
        plural = "s" if self.threads != 1 else ""
        return f"{len(self.per_example)} {self.mode} steps of {self.batch} examples with {self.threads} thread{plural}"

    def seconds(self, examples: float) -> Estimate:
        """The time of pushing ``examples`` through the step, with what is not timed (the module docstring)."""
        low = examples * self.median * UNTIMED_FACTOR[0]
        high = examples * max(self.slow, self.median) * UNTIMED_FACTOR[1]
        return Estimate(low=low, high=high, basis=self.describe())


def _step(model: Any, x: Any, y: Any, mode: str) -> Callable[[], None]:
    """One step of ``mode`` on the batch ``(x, y)``."""
    import torch

    if mode == "forward":

        def forward() -> None:
            with torch.no_grad():
                model(x)

        return forward
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    loss_fn = torch.nn.CrossEntropyLoss()
    if mode == "per-example":
        from defenses.clipping import GradientClipper

        clipper = GradientClipper(model, clip_norm=1.0)
        params = clipper.parameters()

        def clipped() -> None:
            total = clipper.clipped_sum(x, y)
            with torch.no_grad():  # the noisy sum's update, as DP-SGD applies it
                for name, p in params.items():
                    p.grad = total.grads[name] + torch.randn_like(p)
            opt.step()

        return clipped

    def backward() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    return backward


def time_steps(
    model_name: str,
    *,
    input_shape: tuple[int, ...],
    num_classes: int,
    mode: str = "backward",
    batch: int = 64,
    threads: int | None = None,
    device: str = "cpu",
    model_options: Mapping[str, object] | None = None,
    features: Any = None,
    labels: Any = None,
) -> StepTimes | None:
    """Times a few steps of a zoo model on this machine (the calibration of the module docstring).

    Args:
        model_name: the zoo model.
        input_shape: one example's shape; num_classes: the classes.
        mode: ``forward`` (certification), ``backward`` (plain training: forward, backward, SGD
            update) or ``per-example`` (DP-SGD: per-example clipping, noise, update).
        batch: the job's batch (capped at 512).
        threads: the intra-op threads the job will run with (default: the command's plan for
            one process); set for the timing only.
        device: the job's device.
        model_options: the model's options.
        features, labels: a batch of the job's own data (default: random inputs of the shape).

    Returns:
        The timed steps, or None for a model that cannot be built or stepped here (an external
        builder, a per-example step the clipping cannot follow with no plain step either): no
        estimate is better than a wrong one.
    """
    import torch

    from dpaudit.models import build_model
    from dpaudit.threads import plan_threads

    global _FIRST_CALIBRATION
    if _FIRST_CALIBRATION is None:
        _FIRST_CALIBRATION = time.monotonic()
    batch = max(1, min(int(batch), _MAX_BATCH))
    threads = plan_threads(workers=1).intra_op if threads is None else max(1, int(threads))
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        options: dict[str, Any] = dict(model_options or {})
        try:
            model = build_model(model_name, input_shape=tuple(input_shape), num_classes=num_classes, **options).to(
                device
            )
        except (ValueError, TypeError, KeyError, RuntimeError):
            return None
        gen = torch.Generator().manual_seed(0)
        if features is not None and len(features) > 0:
            reps = math.ceil(batch / len(features))
            x = torch.as_tensor(features).float().repeat(reps, *([1] * (len(input_shape))))[:batch].to(device)
            y = torch.as_tensor(labels).long().repeat(reps)[:batch].to(device)
        else:
            x = torch.randn(batch, *input_shape, generator=gen).to(device)
            y = torch.randint(0, max(1, num_classes), (batch,), generator=gen).to(device)
        try:
            step = _step(model, x, y, mode)
            step()  # warm-up: allocation and kernel selection are not the steady state
        except (ValueError, TypeError, RuntimeError):
            if mode != "per-example":
                return None
            # A model the clipping cannot follow: a plain step, times the measured factor.
            plain = time_steps(
                model_name,
                input_shape=input_shape,
                num_classes=num_classes,
                mode="backward",
                batch=batch,
                threads=threads,
                device=device,
                model_options=model_options,
            )
            if plain is None:
                return None
            scaled = tuple(t * PER_EXAMPLE_GRADIENT_FACTOR for t in plain.per_example)
            return StepTimes(per_example=scaled, batch=batch, threads=threads, mode=mode)
        sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
        step()
        sync()
        times: list[float] = []
        spent = 0.0
        while len(times) < _MAX_STEPS and (len(times) < _MIN_STEPS or spent < _MIN_SECONDS):
            start = time.perf_counter()
            step()
            sync()
            took = time.perf_counter() - start
            times.append(took / batch)
            spent += took
        return StepTimes(per_example=tuple(times), batch=batch, threads=threads, mode=mode)
    finally:
        torch.set_num_threads(before)


def time_group(run: Callable[[int], object], *, steps: int, threads: int, what: str) -> Estimate:
    """The time of a batched job (:mod:`dpaudit.batched`): ``run(s)`` trains its group of models for ``s`` steps.

    A short run of 2 steps gives the group's fixed part (building and stacking its models, the
    warm-up) with two steps; longer runs, doubled until they take :data:`_MIN_SECONDS` more,
    give the time of a step. The job is the fixed part plus ``steps`` steps, with
    :data:`UNTIMED_FACTOR` for what it does besides (scoring, storing); the range's high end
    takes the slower of two timed runs.
    """
    import torch

    global _FIRST_CALIBRATION
    if _FIRST_CALIBRATION is None:
        _FIRST_CALIBRATION = time.monotonic()
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:

        def timed(s: int) -> float:
            start = time.perf_counter()
            run(s)
            return time.perf_counter() - start

        base = min(timed(2), timed(2))
        extra, longer = 4, [base]
        while extra < _MAX_STEPS:
            longer = [timed(2 + extra), timed(2 + extra)]
            if min(longer) - base >= _MIN_SECONDS:
                break
            extra *= 2
        per_step = [max(0.0, t - base) / extra for t in longer]
        fixed = max(0.0, base - 2 * min(per_step))
    finally:
        torch.set_num_threads(before)
    plural = "s" if threads != 1 else ""
    return Estimate(
        low=(fixed + steps * min(per_step)) * UNTIMED_FACTOR[0],
        high=(fixed + steps * max(per_step)) * UNTIMED_FACTOR[1],
        basis=f"{what}: 2 and {2 + extra} steps timed with {threads} thread{plural}",
    )


def job_start() -> Estimate:
    """A job's own work outside its steps (:data:`JOB_START_SHARE` of the command's start-up)."""
    up = command_start_up()
    return Estimate(
        low=max(JOB_START_SECONDS[0], JOB_START_SHARE[0] * up), high=max(JOB_START_SECONDS[1], JOB_START_SHARE[1] * up)
    )


def _seconds_per_grid_byte(question: Any, size: float) -> float:
    """Times the PLD accountant on ``question``'s own event, on a grid coarser by the factor that
    brings it to about :data:`_ACCOUNTANT_TIMED_BYTES` (the whole grid when it is smaller), after
    a warm-up on a grid ten times coarser still (the first evaluation's imports are no part of
    the rate); seconds per byte of the timed grid's predicted size."""
    from dpaudit.privacy.pld_accountant import PLD_DISCRETIZATION, pld_epsilon, pld_memory_estimate

    global _SECONDS_PER_GRID_BYTE
    if _SECONDS_PER_GRID_BYTE is None:
        interval = PLD_DISCRETIZATION * max(1.0, size / _ACCOUNTANT_TIMED_BYTES)
        pld_epsilon(question.event, question.delta, question.neighbouring, interval=10 * interval)
        timed = pld_memory_estimate(question.event, neighbouring=question.neighbouring, interval=interval) or size
        start = time.perf_counter()
        pld_epsilon(question.event, question.delta, question.neighbouring, interval=interval)
        _SECONDS_PER_GRID_BYTE = (time.perf_counter() - start) / max(timed, 1.0)
    return _SECONDS_PER_GRID_BYTE


def accounting_seconds(questions: Any) -> Estimate:
    """The time of a run's costly ε evaluations (the questions of
    :func:`dpaudit.privacy.accountants.rehearsal`): each PLD evaluation costs in proportion to
    its grid's length (its predicted size, :func:`~dpaudit.privacy.pld_accountant.pld_memory_estimate`;
    about 100 MB and seconds for a small DP-SGD training), at a rate timed here on the largest
    question's own event over a coarser grid (:data:`ACCOUNTANT_FACTOR`). A question above the
    accountant's memory budget is answered by its fallback (milliseconds) and costs nothing here."""
    from dpaudit.privacy.pld_accountant import PLD_MEMORY_BUDGET, pld_memory_estimate

    sized = []
    for q in questions:
        if q.accountant != "pld":  # the only accountant whose cost grows with a grid
            continue
        size = pld_memory_estimate(q.event, neighbouring=q.neighbouring)
        if size is not None and math.isfinite(size) and 0 < size <= PLD_MEMORY_BUDGET:
            sized.append((size, q))
    if not sized:
        return Estimate(low=0.0, high=0.0)
    total = sum(size for size, _ in sized)
    size, largest = max(sized, key=lambda pair: pair[0])
    seconds = total * _seconds_per_grid_byte(largest, size)
    n = len(sized)
    return Estimate(
        low=seconds * ACCOUNTANT_FACTOR[0],
        high=seconds * ACCOUNTANT_FACTOR[1],
        basis=f"{n} PLD evaluation{'s' if n != 1 else ''} of {total / 1e6:.0f} MB of grid, timed on a coarser one",
    )


def estimate_job(
    model_name: str,
    *,
    input_shape: tuple[int, ...],
    num_classes: int,
    passes: Mapping[str, float],
    batch: int = 64,
    threads: int | None = None,
    device: str = "cpu",
    model_options: Mapping[str, object] | None = None,
    features: Any = None,
    labels: Any = None,
    start: bool = True,
) -> Estimate | None:
    """The time of one job: ``passes`` maps each step mode to the examples the job pushes through it.

    E.g. a Secure-SGD training of 400 members for 8 epochs after 2 noise-free epochs is
    ``{"backward": 800, "per-example": 3200}``. ``start`` adds a job's own work outside its steps
    (:func:`job_start`). None where the model cannot be timed here.
    """
    total = job_start() if start else Estimate(low=0.0, high=0.0)
    for mode, examples in passes.items():
        if examples <= 0:
            continue
        steps = time_steps(
            model_name,
            input_shape=input_shape,
            num_classes=num_classes,
            mode=mode,
            batch=batch,
            threads=threads,
            device=device,
            model_options=model_options,
            features=features,
            labels=labels,
        )
        if steps is None:
            return None
        total = total.plus(steps.seconds(examples))
    return total


def seconds_per_example(
    model_name: str,
    *,
    input_shape: tuple[int, ...],
    num_classes: int,
    device: str = "cpu",
    model_options: Mapping[str, object] | None = None,
    backward: bool = True,
    per_example: bool = False,
    threads: int | None = None,
) -> float:
    """Measured seconds one example costs in a step of a zoo model (the median of a calibration).

    ``backward=False`` times a forward pass, ``per_example=True`` a DP-SGD step. Returns 0.0 for a
    model that cannot be built here (an external builder): no estimate is better than a wrong one.
    """
    mode = "per-example" if per_example else ("backward" if backward else "forward")
    steps = time_steps(
        model_name,
        input_shape=tuple(int(s) for s in input_shape),
        num_classes=int(num_classes),
        mode=mode,
        threads=threads,
        device=str(device),
        model_options=model_options,
    )
    return 0.0 if steps is None else steps.median


def _unit(seconds: float) -> tuple[float, str]:
    if seconds < 90:
        return 1.0, "s"
    if seconds < 5400:
        return 60.0, "min"
    if seconds < 48 * 3600:
        return 3600.0, "h"
    return 86400.0, "days"


def describe_range(low: float, high: float) -> str:
    """``about 4–6 min``: both ends in the unit the high end reads best in (``about 5 min`` when they agree)."""
    scale, unit = _unit(high)
    lo, hi = low / scale, high / scale
    fmt = (lambda x: f"{x:.1f}") if unit == "h" and hi < 10 else (lambda x: f"{x:.0f}")
    if unit == "s" and hi < 1:
        return "about 1 s" if hi >= 0.5 else "under 1 s"
    a, b = fmt(lo), fmt(hi)
    return f"about {b} {unit}" if a == b else f"about {a}–{b} {unit}"


def describe_duration(seconds: float | Estimate) -> str:
    """``about 3 h`` / ``about 2 days`` (a range, ``about 2–3 h``, for an :class:`Estimate`) for an announcement."""
    if isinstance(seconds, Estimate):
        if seconds.low < seconds.high:
            return seconds.describe()
        seconds = seconds.high
    hours = seconds / 3600.0
    if hours < 48:
        return f"about {hours:.0f} h" if hours >= 1.5 else "about 1 h"
    return f"about {hours / 24:.0f} days"
