"""Executors: run independent jobs (shadow models, audit trials, grids) in parallel.

Shadow and reference models for membership inference (Shokri et al. 2017, §V; Carlini et al.
2022, §IV-B; Zarifzadeh et al. 2024, §3) are many independent training runs, each fully
described by its arguments (a seed and a split). DESIGN.md ("Scale") asks for a process pool
on one machine and Ray beyond it, nothing home-made; this module offers both behind one small
interface:

* :class:`SerialExecutor` — in this process, in order (tests, debugging, ``--num-workers 1``
  without the cost of starting a worker).
* :class:`LocalExecutor` — ``concurrent.futures.ProcessPoolExecutor`` with a ``spawn`` (or
  ``forkserver``) context: forking a process that already runs torch's thread pools can
  deadlock, so workers start fresh. Each worker pins torch to one intra-op thread, because W
  workers × all-cores threads oversubscribe the CPU and are slower than W single-threaded
  jobs.
* :class:`RayExecutor` — Ray tasks (``ray.init(address=...)``; a local Ray when no address
  is given). Ray is imported only when this executor is used, so it stays an optional extra.
  Before the first job every node's code and data are compared with this process's
  (:mod:`dpaudit.cluster`); a task of a lost node is rerun elsewhere by Ray; ``--device cuda``
  jobs ask for a share of a GPU (:func:`dpaudit.cluster.gpu_share`).

A job is a module-level function plus keyword arguments (both must pickle, since they cross
process boundaries; this is transport between our own processes, never a file a user
receives). :meth:`Executor.run` yields ``(job, result)`` as jobs finish, so callers persist
each result at once; if the caller stops early (an exception, Ctrl-C), pending jobs are
cancelled and local workers are stopped, and whatever was already persisted survives.

Local workers die with the process that started them, however it ends (issue "Results that
cannot lie", finding 5: a SIGKILLed ``dpaudit`` used to leave its workers and multiprocessing's
resource tracker running for ever). Each worker, before anything else, asks Linux to SIGKILL it
when its parent dies (``PR_SET_PDEATHSIG``) and starts a watchdog thread that waits on
multiprocessing's parent sentinel (a pipe that reaches EOF when the parent is gone) and also
polls ``os.getppid()``, then exits — the portable path, e.g. on macOS. Workers ignore SIGINT:
Ctrl-C reaches the whole foreground process group, and the parent, which gets it as well, stops
them itself (without a traceback from every worker). The resource tracker needs nothing of its
own: it exits at EOF of its pipe, once every process holding the write end (the parent and the
workers) is dead; a ``forkserver`` exits when the parent's end of its ``alive`` pipe closes.
Stopping a run early terminates the workers and then unblocks the pool's manager thread, which
otherwise waits for ever on a result a worker was half-way through sending.

A Ray started here (``ray.init`` without an address) is Ray's to manage: :meth:`RayExecutor.close`
(and Ray's own exit hook) shut it down on a normal exit or Ctrl-C. After a SIGKILL only Ray's
own fate-sharing acts: its GCS, raylet and workers die at once, but its dashboard and
runtime-env agents linger until they give up reporting to the dead GCS (about a minute, seen
with Ray 2.60). A cluster given by ``address`` is not ours and keeps running.
"""

from __future__ import annotations

import abc
import concurrent.futures as cf
import multiprocessing
import os
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dpaudit import _validate as v

__all__ = ["EXECUTORS", "Job", "Executor", "SerialExecutor", "LocalExecutor", "RayExecutor", "make_executor"]

EXECUTORS: tuple[str, ...] = ("serial", "local", "ray")


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
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise v.invalid_type("key", f"key must be a non-empty string, got {self.key!r}")
        if not callable(self.fn):
            raise v.invalid_type("fn", f"fn must be callable, got {self.fn!r}")
        if not isinstance(self.kwargs, Mapping):
            raise v.invalid_type("kwargs", f"kwargs must be a mapping, got {type(self.kwargs).__name__}")


def _limit_threads(num_threads: int) -> None:
    """Pins BLAS/OpenMP and torch to ``num_threads`` in a worker process."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(num_threads)
    try:
        import torch
    except ImportError:  # a job that does not need torch
        return
    torch.set_num_threads(num_threads)
    try:
        torch.set_num_interop_threads(num_threads)
    except RuntimeError:  # only settable before the first parallel work; harmless if too late
        pass


#: How often a worker's watchdog looks at its parent when the sentinel has said nothing (seconds).
_WATCH_INTERVAL = 0.5
#: How long a stopped worker gets to exit after SIGTERM before it is killed (seconds).
_STOP_TIMEOUT = 5.0


def _set_parent_death_signal() -> bool:
    """Asks the kernel to SIGKILL this process when its parent dies; False where unsupported.

    Linux only (``prctl(PR_SET_PDEATHSIG)``). The signal fires when the *thread* that created this
    process exits, which is why :class:`LocalExecutor` keeps a pool to the thread that made it.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1  # <linux/prctl.h>
        return bool(libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0) == 0)
    except (OSError, AttributeError):  # no libc symbol (e.g. a static or unusual runtime)
        return False


def _watch_parent(parent: Any, parent_pid: int) -> None:
    """Exits this process once the parent is gone (the watchdog thread's body)."""
    while True:
        if parent is not None:
            # Returns at once when the sentinel pipe reaches EOF: the parent's end closed.
            parent.join(_WATCH_INTERVAL)
        else:
            threading.Event().wait(_WATCH_INTERVAL)
        if _parent_gone(parent, parent_pid):
            os._exit(1)  # no cleanup to do for a parent that cannot read any result


def _parent_gone(parent: Any, parent_pid: int) -> bool:
    if parent is not None and not parent.is_alive():
        return True
    # Reparenting (to init or a subreaper) happens as the parent exits, even before it is reaped.
    return os.getppid() != parent_pid


def _die_with_parent(parent_pid: int | None, pdeathsig: bool) -> None:
    """Makes this worker exit when the process that started it dies (see the module docstring).

    Args:
        parent_pid: the expected direct parent (the caller's pid under spawn); ``None`` (the fork
            server under forkserver, unknown to the caller) reads it here.
        pdeathsig: also set Linux's parent-death signal (off only to test the portable path).
    """
    parent = multiprocessing.parent_process()  # the process that made the Process object, with its sentinel
    if parent_pid is None:
        parent_pid = os.getppid()
    if pdeathsig:
        _set_parent_death_signal()
    # Checked after prctl: a parent that died before it would never send the signal.
    if _parent_gone(parent, parent_pid):
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent, parent_pid), name="dpaudit-parent-watchdog", daemon=True).start()


def _worker_init(num_threads: int, parent_pid: int | None = None, pdeathsig: bool = True) -> None:
    """Initializer of a :class:`LocalExecutor` worker: die with the parent, ignore Ctrl-C, pin threads."""
    _die_with_parent(parent_pid, pdeathsig)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_threads(num_threads)


def _call(fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> Any:
    return fn(**kwargs)


def _ray_call(fn: Callable[..., Any], kwargs: Mapping[str, Any], num_threads: int, driver: Any = None, datasets: Sequence[str] = (), data_root: str | None = None) -> Any:
    # Ray reuses worker processes across tasks, so pin threads on every call (cheap).
    _limit_threads(num_threads)
    if driver is not None:  # the driver's NodeReport (a top-level reference, resolved by Ray)
        from dpaudit.cluster import check_here

        check_here(driver, datasets, data_root)
    return fn(**kwargs)


def _noop() -> int:
    return os.getpid()


def _with_key(exc: BaseException, job: Job) -> BaseException:
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
        threads_per_worker: torch intra-op threads while a job runs (default 1, like the
            pool's workers, so that results and speed match theirs); the previous setting is
            restored after each job. ``None`` leaves torch's setting alone.
    """

    name = "serial"

    def __init__(self, *, threads_per_worker: int | None = 1) -> None:
        self.workers = 1
        self.threads_per_worker = None if threads_per_worker is None else v.integer("threads_per_worker", threads_per_worker, minimum=1)

    def run(self, jobs: Sequence[Job]) -> Iterator[tuple[Job, Any]]:
        for job in _check_jobs(jobs):
            try:
                result = self._call(job)
            except Exception as exc:
                raise _with_key(exc, job)
            yield job, result

    def _call(self, job: Job) -> Any:
        if self.threads_per_worker is None:
            return _call(job.fn, job.kwargs)
        import torch

        # Small models on a busy machine run many times slower with several threads that
        # contend for cores; pin for the job only, so the caller's setting survives.
        before = torch.get_num_threads()
        torch.set_num_threads(self.threads_per_worker)
        try:
            return _call(job.fn, job.kwargs)
        finally:
            torch.set_num_threads(before)


#: The resource tracker's report of the named semaphores it unlinked for a killed owner.
_TRACKER_REPORT = "ignore:resource_tracker:UserWarning:multiprocessing.resource_tracker"


def _quiet_resource_tracker() -> None:
    """Starts multiprocessing's resource tracker without its "leaked semaphore objects" warning.

    Under ``spawn``/``forkserver`` a pool's queues hold named POSIX semaphores, which the owner
    unlinks when it closes the pool; a SIGKILLed owner cannot, and the tracker then unlinks them
    itself (its documented job: Python docs, multiprocessing, "Contexts and start methods") and
    warns of "leaked" objects it has just cleaned up, a line the user can do nothing about.
    ``fork`` would unlink them at creation, but is refused (torch's threads). The tracker is a
    separate interpreter that reads ``PYTHONWARNINGS`` at start, so it is started here with that
    one report filtered; nothing else changes, and a tracker already running is left as it is.
    """
    from multiprocessing import resource_tracker

    old = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [old, _TRACKER_REPORT]))
    try:
        resource_tracker.ensure_running()
    finally:
        if old is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = old


class LocalExecutor(Executor):
    """A pool of ``workers`` fresh processes on this machine.

    Args:
        workers: number of worker processes (default: ``os.cpu_count()``).
        start_method: ``spawn`` (default) or ``forkserver``; ``fork`` is refused because
            forking a process that has started torch's thread pools can deadlock.
        threads_per_worker: torch / BLAS threads in each worker (default 1).

    Workers exit when this process dies, even by SIGKILL, and ignore SIGINT (this process stops
    them when it is interrupted); see the module docstring. A pool belongs to the thread that
    started it: :meth:`run` from another thread starts a new one.

    Raises:
        ValueError: ``workers`` < 1 or an unknown start method.
    """

    name = "local"
    #: Workers also set Linux's parent-death signal (tests turn it off to exercise the watchdog alone).
    _pdeathsig: bool = True

    def __init__(self, *, workers: int | None = None, start_method: str = "spawn", threads_per_worker: int = 1) -> None:
        self.workers = v.integer("workers", workers if workers is not None else (os.cpu_count() or 1), minimum=1)
        self.start_method = v.choice("start_method", start_method, ("spawn", "forkserver"))
        self.threads_per_worker = v.integer("threads_per_worker", threads_per_worker, minimum=1)
        self._pool: cf.ProcessPoolExecutor | None = None
        self._pool_thread: threading.Thread | None = None
        self._open_runs = 0  # run() generators started and not yet finished or closed

    def _ensure_pool(self) -> cf.ProcessPoolExecutor:
        # Workers start on demand, from the thread that submits, and the parent-death signal
        # fires when *that thread* ends: a pool is used only by the thread that made it, and
        # another thread gets a fresh one (the old one's jobs are all finished or cancelled).
        if self._pool is not None and self._pool_thread is not threading.current_thread():
            self.close()
        if self._pool is None:
            _quiet_resource_tracker()
            self._pool = cf.ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context(self.start_method),
                initializer=_worker_init,
                initargs=(self.threads_per_worker, os.getpid() if self.start_method == "spawn" else None, self._pdeathsig),
            )
            self._pool_thread = threading.current_thread()
        return self._pool

    def warm_up(self) -> None:
        pool = self._ensure_pool()
        # One task per worker; the pool starts processes on demand, so submit enough at once.
        for f in [pool.submit(_noop) for _ in range(self.workers)]:
            f.result()

    def run(self, jobs: Sequence[Job]) -> Iterator[tuple[Job, Any]]:
        jobs = _check_jobs(jobs)
        if not jobs:
            return
        pool = self._ensure_pool()
        futures = {pool.submit(_call, job.fn, job.kwargs): job for job in jobs}
        finished = False
        self._open_runs += 1
        try:
            for fut in cf.as_completed(futures):
                job = futures[fut]
                try:
                    result = fut.result()
                except cf.process.BrokenProcessPool as exc:
                    raise RuntimeError(f"a worker process died while running job {job.key!r} (out of memory?)") from exc
                except Exception as exc:
                    raise _with_key(exc, job)
                yield job, result
            finished = True
        finally:
            self._open_runs -= 1
            if not finished:
                # Jobs already running would otherwise keep the CPU busy (and delay exit)
                # for results nobody will read; stop the workers, a later run starts new ones.
                # The pending futures are cancelled by the pool's own shutdown: cancelling them
                # here as well races with its manager thread, which fails on a cancelled future.
                self._terminate()

    def _terminate(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # No public API for these before Python 3.14 (and shutdown() drops them): read them first.
        processes = list((getattr(pool, "_processes", None) or {}).values())
        results = getattr(pool, "_result_queue", None)
        terminate = getattr(pool, "terminate_workers", None)  # Python >= 3.14
        if terminate is not None:
            terminate()
        else:
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in processes:
                if proc.is_alive():
                    proc.terminate()
        for proc in processes:
            proc.join(_STOP_TIMEOUT)
            if proc.is_alive():  # a job that holds off SIGTERM in native code
                proc.kill()
                proc.join(_STOP_TIMEOUT)
        # A worker stopped while sending its result leaves a partial message, and the pool's
        # manager thread would wait for the rest for ever, which also hangs interpreter exit
        # (this process holds the pipe's write end too; seen with results of a few MB). With
        # the workers gone, closing that end turns the wait into EOF: the pool counts itself
        # broken and its thread finishes.
        writer = getattr(results, "_writer", None)
        if writer is not None:
            try:
                writer.close()
            except OSError:
                pass
        pool.shutdown(wait=True, cancel_futures=True)

    def close(self) -> None:
        # A run still open here was left by an exception in its caller's loop (Ctrl-C while a
        # result was being stored): its jobs would run to the end, so stop them as run() does.
        if self._open_runs:
            self._terminate()
            return
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor(Executor):
    """Ray tasks on a local Ray or the cluster at ``address``, after checking every node.

    Before the first job, every node of the cluster reports its code and data
    (:func:`dpaudit.cluster.node_report`, one task pinned to each node) and a node whose differ
    from this process's is refused (:class:`~dpaudit.cluster.ClusterMismatch`, one line); each
    job checks again where it runs (a node that joined later). A task on a node that dies is
    retried elsewhere by Ray (``max_retries``), and its result reaches the caller once.

    Args:
        address: a Ray cluster address (``auto``, ``ray://host:10001``, ``host:6379``); ``None``
            starts a local Ray with ``workers`` CPUs (or joins the one this process already
            initialised).
        workers: CPUs of the local Ray (ignored with ``address``).
        threads_per_worker: torch threads per task, and the CPUs each task reserves.
        num_gpus: GPUs each task reserves (fractional to share one GPU, see
            :func:`dpaudit.cluster.gpu_share`); 0 for CPU jobs.
        datasets: the datasets the jobs read (their files are compared on every node).
        data_root: the data root the jobs are given (``None``: each node's own default).
        ship_code: send this checkout's packages to the workers (Ray ``runtime_env``
            ``py_modules``) instead of using the package installed on each node.
        max_retries: how often Ray reruns a task whose worker or node died.
        init_kwargs: extra arguments for ``ray.init``.

    Raises:
        ImportError: Ray is not installed (``pip install 'dpaudit[ray]'``).
    """

    name = "ray"

    def __init__(
        self,
        *,
        address: str | None = None,
        workers: int | None = None,
        threads_per_worker: int = 1,
        num_gpus: float = 0.0,
        datasets: Sequence[str] = (),
        data_root: str | None = None,
        ship_code: bool = False,
        max_retries: int = 3,
        init_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            import ray  # noqa: F401  (imported lazily: Ray is an optional extra)
        except ImportError:
            raise ImportError("executor 'ray' needs Ray: pip install 'dpaudit[ray]' (or pip install 'ray>=2.9')") from None
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise v.invalid("address", f"address must be a non-empty string, got {address!r}")
        self.address = address
        self.workers = v.integer("workers", workers if workers is not None else (os.cpu_count() or 1), minimum=1)
        self.threads_per_worker = v.integer("threads_per_worker", threads_per_worker, minimum=1)
        self.num_gpus = v.non_negative("num_gpus", num_gpus)
        self.datasets = tuple(datasets)
        self.data_root = None if data_root is None else os.fspath(data_root)
        self.ship_code = bool(ship_code)
        self.max_retries = v.integer("max_retries", max_retries, minimum=0)
        self.init_kwargs = dict(init_kwargs or {})
        self._started = False
        self._remote: Any = None
        self._driver: Any = None  # this process's NodeReport, in Ray's object store
        self._checked: set[str] = set()  # node ids whose code and data were compared

    def _ensure(self) -> Any:
        import ray

        if not ray.is_initialized():
            from dpaudit.cluster import ray_notices_to_stderr

            ray_notices_to_stderr()
            # Ray's connection notes (INFO) would break the one-line errors and quiet runs.
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "WARNING", **self.init_kwargs}
            if self.address is None:
                kwargs.setdefault("num_cpus", self.workers)
            if self.ship_code:
                from dpaudit.cluster import ship_env

                kwargs["runtime_env"] = {**ship_env(), **dict(kwargs.get("runtime_env") or {})}
            with warnings.catch_warnings():
                # A notice about a future default for GPU-less tasks, not about this run.
                warnings.filterwarnings("ignore", category=FutureWarning, module=r"ray\.")
                ray.init(address=self.address, **kwargs)
            self._started = True
        if self._remote is None:
            self._remote = ray.remote(num_cpus=self.threads_per_worker, num_gpus=self.num_gpus, max_retries=self.max_retries)(_ray_call)
        if self.num_gpus > 0 and not ray.cluster_resources().get("GPU"):
            from dpaudit.cluster import ClusterMismatch

            raise ClusterMismatch(f"jobs on --device cuda ask Ray for {self.num_gpus:g} GPU each, but no node of the cluster has a GPU; start the nodes with --num-gpus or use --device cpu")
        self._check_nodes(ray)
        return ray

    def _check_nodes(self, ray: Any) -> None:
        """Compares every live node not compared yet with this process (one task pinned to each)."""
        from dpaudit.cluster import check_nodes, node_report

        if self._driver is None:
            driver = node_report(self.datasets, self.data_root, node="driver")
            self._driver = (driver, ray.put(driver))
        check_nodes(ray, self._driver[0], datasets=self.datasets, data_root=self.data_root, checked=self._checked)

    def warm_up(self) -> None:
        ray = self._ensure()
        ray.get([ray.remote(num_cpus=self.threads_per_worker)(_noop).remote() for _ in range(self.workers)])

    def run(self, jobs: Sequence[Job]) -> Iterator[tuple[Job, Any]]:
        jobs = _check_jobs(jobs)
        if not jobs:
            return
        ray = self._ensure()
        driver = self._driver[1]
        pending = {self._remote.remote(job.fn, dict(job.kwargs), self.threads_per_worker, driver, self.datasets, self.data_root): job for job in jobs}
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                ref = done[0]
                job = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except Exception as exc:  # RayTaskError wraps the job's exception
                    cause = getattr(exc, "cause", None)
                    raise _with_key(cause if isinstance(cause, Exception) else exc, job)
                yield job, result
        finally:
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception:
                    pass

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()
            self._started = False
            self._remote = None
            self._driver = None
            self._checked = set()


def make_executor(
    kind: str = "local",
    *,
    workers: int | None = None,
    address: str | None = None,
    datasets: Sequence[str] = (),
    data_root: str | None = None,
    ship_code: bool = False,
    num_gpus: float = 0.0,
) -> Executor:
    """The executor named ``kind``.

    Args:
        kind: ``local`` (process pool, default), ``ray``, or ``serial`` (in-process).
        workers: parallel workers (local processes / local Ray CPUs); ``local`` with
            ``workers=1`` still uses one worker process (so timing compares like with like).
        address: Ray cluster address (``ray`` only).
        datasets: the datasets the jobs read, and data_root the root they are given: Ray
            compares their files on every node with this machine's (``ray`` only).
        ship_code: Ray sends this checkout's packages to the workers (``ray`` only).
        num_gpus: GPUs each Ray task reserves (``ray`` only; local jobs share this machine's).

    Raises:
        ValueError: unknown ``kind``, ``workers`` < 1, or ``address`` given for a non-Ray
            executor.
        ImportError: ``kind='ray'`` without Ray installed.
    """
    kind = v.choice("executor", kind, EXECUTORS)
    if address is not None and kind != "ray":
        raise v.invalid("address", f"address={address!r} applies to executor 'ray' only, got executor={kind!r}")
    if workers is not None:
        workers = v.integer("workers", workers, minimum=1)
    if kind == "serial":
        return SerialExecutor()
    if kind == "local":
        return LocalExecutor(workers=workers)
    return RayExecutor(address=address, workers=workers, datasets=datasets, data_root=data_root, ship_code=ship_code, num_gpus=num_gpus)
