"""The local executor: a process pool of fresh (``spawn``) workers that die with their parent.

``concurrent.futures.ProcessPoolExecutor`` with a ``spawn`` (or ``forkserver``) context: forking
a process that already runs torch's thread pools can deadlock, so workers start fresh. Each
worker runs the thread plan's intra-op threads (:mod:`dpaudit.threads`: cores // workers unless
``--threads`` or the environment says otherwise), set by the pool's initializer, because W
workers × all-cores threads oversubscribe the CPU and are slower than W jobs that share it.

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
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from dpaudit import _validate as v
from dpaudit.executors.jobs import Executor, Job, _call, _check_jobs, _limit_threads, _noop, _with_key

__all__ = ["LocalExecutor"]


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
    threading.Thread(
        target=_watch_parent, args=(parent, parent_pid), name="dpaudit-parent-watchdog", daemon=True
    ).start()


def _worker_init(
    num_threads: int, parent_pid: int | None = None, pdeathsig: bool = True, library_warnings: bool | None = None
) -> None:
    """Initializer of a :class:`LocalExecutor` worker: die with the parent, ignore Ctrl-C, pin
    threads, and send library warnings where the command sends its own (a log, not the
    terminal: :func:`dpaudit.library_warnings.route_in_worker`)."""
    from dpaudit.library_warnings import route_in_worker

    route_in_worker(library_warnings)
    _die_with_parent(parent_pid, pdeathsig)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_threads(num_threads)


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
        workers: number of worker processes (default: the cores available,
            :func:`dpaudit.threads.available_cores`).
        start_method: ``spawn`` (default) or ``forkserver``; ``fork`` is refused because
            forking a process that has started torch's thread pools can deadlock.
        threads_per_worker: torch / BLAS threads in each worker (default: the thread plan's,
            :func:`dpaudit.threads.worker_threads`).

    Workers exit when this process dies, even by SIGKILL, and ignore SIGINT (this process stops
    them when it is interrupted); see the module docstring. A pool belongs to the thread that
    started it: :meth:`run` from another thread starts a new one.

    Raises:
        ValueError: ``workers`` < 1 or an unknown start method.
    """

    name = "local"
    #: Workers also set Linux's parent-death signal (tests turn it off to exercise the watchdog alone).
    _pdeathsig: bool = True

    def __init__(
        self, *, workers: int | None = None, start_method: str = "spawn", threads_per_worker: int | None = None
    ) -> None:
        from dpaudit.threads import available_cores, worker_threads

        self.workers = v.integer("workers", workers if workers is not None else available_cores(), minimum=1)
        self.start_method = v.choice("start_method", start_method, ("spawn", "forkserver"))
        self.threads_per_worker = (
            worker_threads(self.workers)
            if threads_per_worker is None
            else v.integer("threads_per_worker", threads_per_worker, minimum=1)
        )
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
            from dpaudit.library_warnings import worker_setting

            _quiet_resource_tracker()
            self._pool = cf.ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context(self.start_method),
                initializer=_worker_init,
                initargs=(
                    self.threads_per_worker,
                    os.getpid() if self.start_method == "spawn" else None,
                    self._pdeathsig,
                    worker_setting(),
                ),
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
