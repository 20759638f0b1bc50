"""The thread plan: how many torch threads each process of a command runs, decided in one place.

torch starts as many intra-op threads as it sees cores, in every process. A pool of W worker
processes then runs W × cores busy threads on cores cores, and on a machine shared with other
work even one process with all cores' threads waits on threads the kernel has parked: OpenMP's
threads meet at a barrier after every operation, so one descheduled thread stalls the others
(issue 48 measured 6–8× slower how-tos on a shared 2-core machine, and the README's times with
``OMP_NUM_THREADS=1``). The plan keeps busy threads within the cores: ``workers × intra-op ≤
cores``.

The cores are what this process may use: its CPU affinity (``os.sched_getaffinity``), capped by
a cgroup CPU quota where one is readable (a container given 2 CPUs of a 64-core host), else
``os.cpu_count()``. Of those, the cores other work keeps busy are not free: the runnable tasks
other than this process, the least of a few samples of ``/proc/loadavg`` over 40 ms (a CPU-bound
neighbour is runnable in every sample, a passing one is not), counted once per command. The
intra-op threads of every process (the command's own and each worker's) are
``(cores - busy) // workers``, at least 1, unless one is given; what is given wins in this order:

1. ``--threads N`` (the flag of the verbs that compute),
2. ``DPAUDIT_THREADS``, then ``OMP_NUM_THREADS``, then ``MKL_NUM_THREADS`` (the usual variables,
   set explicitly in the environment),
3. the default above.

A given N is the intra-op threads of each process, as ``OMP_NUM_THREADS`` means it. torch's
inter-op pool runs only ``torch.jit.fork`` tasks, which dpaudit does not use: one thread, so the
pool adds no idle threads. The plan is said once on stderr, as the command's first progress
starts (``threads: 1 intra-op × 2 workers on 2 cores (from the cores available)``); ``--quiet``
silences it, and a command refused before any work keeps its one-line error. The thread count can change the
last bits of floating-point sums, so two runs that must agree bit for bit on different machines
should give the same ``--threads``. The docs page is ``docs/performance.md``.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TextIO

from dpaudit import _validate as v

__all__ = [
    "ENV_VARIABLES",
    "ThreadPlan",
    "available_cores",
    "busy_cores",
    "plan_threads",
    "set_thread_flag",
    "thread_flag",
    "apply_threads",
    "worker_threads",
    "announce",
    "start_command",
    "say_pending",
]

#: The environment variables a plan reads, strongest first.
ENV_VARIABLES: tuple[str, ...] = ("DPAUDIT_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

_CGROUP_V2 = "/sys/fs/cgroup/cpu.max"
_CGROUP_V1 = ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")

#: The variables as the user set them, read when this module is first imported (at the start of a
#: command): :func:`apply_threads` sets them for the processes this one starts, and a later plan
#: (a pool of another size) must still read the user's values, not those.
_USER_ENV: dict[str, str] = {name: os.environ[name] for name in ENV_VARIABLES if name in os.environ}
#: The ``--threads`` of this command, once the command line set it (see :func:`set_thread_flag`).
_FLAG: int | None = None
#: Whether the plan was already said on stderr (it is said once per command).
_ANNOUNCED = False
#: The plan to say when the command's first work starts (None: nothing to say).
_PENDING: ThreadPlan | None = None
#: The cores other work kept busy when this command first planned (None: not counted yet). Counted
#: once: a later plan of the same command would count its own workers as other work.
_BUSY: int | None = None
_LOADAVG = "/proc/loadavg"


@dataclass(frozen=True, kw_only=True)
class ThreadPlan:
    """How many threads each process runs.

    Attributes:
        cores: the cores this process may use.
        workers: the worker processes that run at once (1: the command computes alone).
        intra_op: torch intra-op (and BLAS/OpenMP) threads of each process.
        inter_op: torch inter-op threads of each process.
        source: where ``intra_op`` comes from: ``--threads``, an environment variable's name, or
            ``the cores available``.
        busy: the cores other work kept busy when the plan was made (0 where not counted).
    """

    cores: int
    workers: int
    intra_op: int
    inter_op: int
    source: str
    busy: int = 0

    @property
    def busy_threads(self) -> int:
        """The intra-op threads all workers run at once."""
        return self.workers * self.intra_op

    def line(self) -> str:
        """The one line said on stderr."""
        workers = f"{self.workers} worker{'s' if self.workers != 1 else ''}"
        core = f"{self.cores} core{'s' if self.cores != 1 else ''}"
        if self.busy:
            core += f", {self.busy} busy with other work"
        over = " — more busy threads than cores" if self.busy_threads > self.cores else ""
        return f"threads: {self.intra_op} intra-op × {workers} on {core} (from {self.source}){over}"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_cores(v2: str = _CGROUP_V2, v1: tuple[str, str] = _CGROUP_V1) -> int | None:
    """The CPUs a cgroup quota allows (rounded up), or None where there is none or it is unreadable."""
    text = _read(v2)
    if text:
        parts = text.split()
        if len(parts) == 2 and parts[0] != "max":
            try:
                quota, period = int(parts[0]), int(parts[1])
            except ValueError:
                return None
            return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None
        return None
    quota_text, period_text = _read(v1[0]), _read(v1[1])
    try:
        quota, period = int(quota_text or ""), int(period_text or "")
    except ValueError:
        return None
    return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None


def available_cores() -> int:
    """The cores this process may use: its affinity, capped by a cgroup CPU quota; ``os.cpu_count()`` without either."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_cores()
    return max(1, min(cores, quota) if quota is not None else cores)


def busy_cores(*, samples: int = 5, interval: float = 0.01, path: str = _LOADAVG) -> int:
    """The tasks other than this process that are runnable now: the least of ``samples`` readings.

    ``/proc/loadavg``'s fourth field is ``runnable/total`` and counts the reading process itself.
    A busy neighbour (another training, a build) is runnable in every reading, a passing task
    (a shell starting) in few, so the least reading counts the neighbours that hold a core. 0 where
    the file cannot be read (not Linux).
    """
    least: int | None = None
    for i in range(max(1, samples)):
        text = _read(path)
        try:
            runnable = int(text.split()[3].split("/")[0]) if text else None
        except (IndexError, ValueError):
            runnable = None
        if runnable is None:
            return 0
        least = runnable if least is None else min(least, runnable)
        if i + 1 < samples:
            time.sleep(interval)
    return max(0, (least or 1) - 1)


def _command_busy() -> int:
    """The busy cores of this command, counted on its first plan (:data:`_BUSY`)."""
    global _BUSY
    if _BUSY is None:
        _BUSY = busy_cores()
    return _BUSY


def set_thread_flag(threads: int | None) -> None:
    """Records the command's ``--threads`` (None: not given), which every later plan obeys.

    Raises:
        ValueError: ``threads`` < 1.
    """
    global _FLAG
    _FLAG = None if threads is None else v.integer("threads", threads, minimum=1)


def thread_flag() -> int | None:
    """The command's ``--threads``, or None."""
    return _FLAG


def _from_env(env: Mapping[str, str]) -> tuple[int, str] | None:
    for name in ENV_VARIABLES:
        text = env.get(name, "").strip()
        if not text:
            continue
        try:
            n = int(text)
        except ValueError:
            raise v.invalid(name, f"{name} must be a whole number of threads, got {text!r}") from None
        if n < 1:
            raise v.invalid(name, f"{name} must be at least 1, got {text!r}")
        return n, name
    return None


def plan_threads(
    *,
    workers: int = 1,
    flag: int | None = None,
    env: Mapping[str, str] | None = None,
    cores: int | None = None,
    busy: int | None = None,
) -> ThreadPlan:
    """The thread plan of ``workers`` processes that run at once (see the module docstring).

    Args:
        workers: worker processes running at once (1 for a command that computes alone).
        flag: ``--threads``; default: the command's (:func:`set_thread_flag`).
        env: the environment; default: the variables as they were when the command started.
        cores: the cores; default :func:`available_cores`.
        busy: the cores other work keeps busy; default: counted once per command
            (:func:`busy_cores`) when ``cores`` is this machine's, 0 when ``cores`` is given.

    Raises:
        ValueError: ``workers`` or ``flag`` < 1, or a variable that is not a whole number ≥ 1.
    """
    workers = v.integer("workers", workers, minimum=1)
    machine = cores is None
    cores = available_cores() if cores is None else v.integer("cores", cores, minimum=1)
    flag = _FLAG if flag is None else v.integer("threads", flag, minimum=1)
    if flag is not None:
        return ThreadPlan(cores=cores, workers=workers, intra_op=flag, inter_op=1, source="--threads")
    given = _from_env(_USER_ENV if env is None else env)
    if given is not None:
        return ThreadPlan(cores=cores, workers=workers, intra_op=given[0], inter_op=1, source=given[1])
    # Threads of one process meet after every operation: a thread parked for a busy neighbour
    # holds up the others (a 2-thread training beside one busy process ran 2.9x its quiet time,
    # measured by scripts/time_howtos.py --background-load 1), so only the free cores are planned.
    if busy is None:
        busy = _command_busy() if machine else 0
    busy = min(v.integer("busy", busy, minimum=0), cores - 1)
    source = "the cores free" if busy else "the cores available"
    return ThreadPlan(
        cores=cores, workers=workers, intra_op=max(1, (cores - busy) // workers), inter_op=1, source=source, busy=busy
    )


def apply_threads(plan: ThreadPlan) -> None:
    """Runs this process (and the libraries it starts later) with the plan's threads.

    The variables are set too, so that BLAS libraries loaded later and processes started from
    this one read the same count.
    """
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(plan.intra_op)
    try:
        import torch
    except ImportError:  # a job that needs no torch
        return
    torch.set_num_threads(plan.intra_op)
    if torch.get_num_interop_threads() != plan.inter_op:
        try:
            torch.set_num_interop_threads(plan.inter_op)
        except RuntimeError:  # settable only before the first inter-op work; then it stays as it is
            pass


def worker_threads(workers: int) -> int:
    """The intra-op threads each of ``workers`` pool workers runs (the executors' default)."""
    return plan_threads(workers=workers).intra_op


def start_command(threads: int | None) -> None:
    """Starts a command's plan afresh: its ``--threads`` (None: not given), and nothing to say yet."""
    global _ANNOUNCED, _PENDING, _BUSY
    set_thread_flag(threads)
    _ANNOUNCED = False
    _PENDING = None
    _BUSY = None


def announce(plan: ThreadPlan, *, quiet: bool = False) -> bool:
    """Says the plan once per command, when its first work starts (:func:`say_pending`, called by
    :class:`dpaudit.progress.Progress`): a command refused before any work keeps its one-line
    error, and a dry run that trains nothing says nothing. Returns whether it will be said."""
    global _PENDING
    if quiet or _ANNOUNCED:
        return False
    _PENDING = plan
    return True


def say_pending(stream: TextIO | None = None) -> bool:
    """Says the plan :func:`announce` left, on ``stream`` (stderr); returns whether it did."""
    global _ANNOUNCED, _PENDING
    if _PENDING is None or _ANNOUNCED:
        return False
    plan, _PENDING, _ANNOUNCED = _PENDING, None, True
    print(plan.line(), file=stream if stream is not None else sys.stderr, flush=True)
    return True
