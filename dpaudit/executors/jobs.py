"""Jobs and the executor interface; the serial executor that runs jobs in this process, in order.

A job is a module-level function plus keyword arguments (both must pickle, since they cross
process boundaries; this is transport between our own processes, never a file a user
receives). :meth:`Executor.run` yields ``(job, result)`` as jobs finish, so callers persist
each result at once; if the caller stops early (an exception, Ctrl-C), pending jobs are
cancelled and whatever was already persisted survives.
"""

from __future__ import annotations

import abc
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpaudit import _validate as v

__all__ = ["Job", "Executor", "SerialExecutor"]


@dataclass(frozen=True, kw_only=True)
class Job:
    """One independent unit of work.

    Attributes:
        key: a unique name (e.g. the shadow model's id), used in errors and by callers.
        fn: a module-level function (it must be importable by name in a worker).
        kwargs: its keyword arguments (picklable).
    """

    key: str
    fn: Callable[..., Any]
    kwargs: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise v.invalid_type("key", f"key must be a non-empty string, got {self.key!r}")
        if not callable(self.fn):
            raise v.invalid_type("fn", f"fn must be callable, got {self.fn!r}")
        if not isinstance(self.kwargs, Mapping):
            raise v.invalid_type("kwargs", f"kwargs must be a mapping, got {type(self.kwargs).__name__}")


def _limit_threads(num_threads: int) -> None:
    """Runs this worker process with ``num_threads`` intra-op threads (:func:`dpaudit.threads.apply_threads`)."""
    from dpaudit.threads import ThreadPlan, apply_threads

    apply_threads(ThreadPlan(cores=num_threads, workers=1, intra_op=num_threads, inter_op=1, source="the executor"))


def _call(fn: Callable[..., Any], kwargs: Mapping[str, object]) -> Any:
    return fn(**kwargs)


def _noop() -> int:
    return os.getpid()


def _with_key(exc: BaseException, job: Job) -> BaseException:
    if sys.version_info >= (3, 11):  # add_note is new in 3.11; on 3.10 the error goes up without the job's key
        exc.add_note(f"(in job {job.key!r})")
    return exc


class Executor(abc.ABC):
    """Runs :class:`Job` s and yields their results as they finish.

    Use as a context manager (or call :meth:`close`) so worker processes are released.
    """

    name: str = "executor"
    workers: int = 1

    @abc.abstractmethod
    def run(self, jobs: Sequence[Job]) -> Iterator[tuple[Job, Any]]:
        """Runs ``jobs``; yields ``(job, result)`` in completion order.

        If a job raises, its exception propagates (with the job key in a note) and the
        remaining jobs are cancelled. Closing the iterator early cancels them as well.

        Raises:
            TypeError: an element of ``jobs`` is not a :class:`Job`.
            ValueError: two jobs share a key.
        """

    def warm_up(self) -> None:
        """Starts the workers now (so that timing excludes start-up). No-op by default."""

    def close(self) -> None:
        """Releases workers. Idempotent."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(workers={self.workers})"


def _check_jobs(jobs: Sequence[Job]) -> list[Job]:
    jobs = list(jobs)
    keys = set()
    for job in jobs:
        if not isinstance(job, Job):
            raise v.invalid_type("jobs", f"jobs must hold Job values, got {type(job).__name__}")
        if job.key in keys:
            raise v.invalid("jobs", f"jobs must have unique keys, got {job.key!r} twice")
        keys.add(job.key)
    return jobs


class SerialExecutor(Executor):
    """Runs jobs one after another in this process (no start-up cost, no parallelism).

    Args:
        threads_per_worker: torch intra-op threads while a job runs; default: the thread plan of
            a process that computes alone (:func:`dpaudit.threads.plan_threads`, ``workers=1``:
            every core, unless ``--threads`` or the environment says otherwise). The previous
            setting is restored after each job.
    """

    name = "serial"

    def __init__(self, *, threads_per_worker: int | None = None) -> None:
        from dpaudit.threads import worker_threads

        self.workers = 1
        self.threads_per_worker = (
            worker_threads(1)
            if threads_per_worker is None
            else v.integer("threads_per_worker", threads_per_worker, minimum=1)
        )

    def run(self, jobs: Sequence[Job]) -> Iterator[tuple[Job, Any]]:
        for job in _check_jobs(jobs):
            try:
                result = self._call(job)
            except Exception as exc:
                raise _with_key(exc, job)
            yield job, result

    def _call(self, job: Job) -> Any:
        import torch

        # Pinned for the job only, so the caller's own setting survives.
        before = torch.get_num_threads()
        torch.set_num_threads(self.threads_per_worker)
        try:
            return _call(job.fn, job.kwargs)
        finally:
            torch.set_num_threads(before)


#: The resource tracker's report of the named semaphores it unlinked for a killed owner.
