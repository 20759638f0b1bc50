"""The Ray executor: jobs as Ray tasks on a local Ray or a cluster.

``ray.init(address=...)``; a local Ray when no address is given. Ray is imported only when this
executor is used, so it stays an optional extra. Before the first job every node's code and
data are compared with this process's (:mod:`dpaudit.cluster`); a task of a lost node is rerun
elsewhere by Ray; ``--device cuda`` jobs ask for a share of a GPU
(:func:`dpaudit.cluster.gpu_share`).

A Ray started here (``ray.init`` without an address) is Ray's to manage: :meth:`RayExecutor.close`
(and Ray's own exit hook) shut it down on a normal exit or Ctrl-C. After a SIGKILL only Ray's
own fate-sharing acts: its GCS, raylet and workers die at once, but its dashboard and
runtime-env agents linger until they give up reporting to the dead GCS (about a minute, seen
with Ray 2.60). A cluster given by ``address`` is not ours and keeps running.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from dpaudit import _validate as v
from dpaudit.executors.jobs import Executor, Job, _check_jobs, _limit_threads, _noop, _with_key

__all__ = ["RayExecutor"]


def _ray_call(
    fn: Callable[..., Any],
    kwargs: Mapping[str, object],
    num_threads: int,
    driver: Any = None,
    datasets: Sequence[str] = (),
    data_root: str | None = None,
    library_warnings: bool | None = None,
) -> Any:
    from dpaudit.library_warnings import route_in_worker

    # Ray reuses worker processes across tasks, so pin threads on every call (cheap); library
    # warnings go where the command sends its own (once per worker process).
    _limit_threads(num_threads)
    route_in_worker(library_warnings)
    if driver is not None:  # the driver's NodeReport (a top-level reference, resolved by Ray)
        from dpaudit.cluster import check_here

        check_here(driver, datasets, data_root)
    return fn(**kwargs)


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
        workers: tasks the local Ray runs at once (ignored with ``address``).
        threads_per_worker: torch threads per task, and the CPUs each task reserves; default:
            the thread plan's for ``workers`` on this machine (:func:`dpaudit.threads.worker_threads`),
            or with ``address`` the ``--threads`` / environment's count, else 1 (a cluster's
            nodes are not this machine).
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
        threads_per_worker: int | None = None,
        num_gpus: float = 0.0,
        datasets: Sequence[str] = (),
        data_root: str | None = None,
        ship_code: bool = False,
        max_retries: int = 3,
        init_kwargs: Mapping[str, object] | None = None,
    ) -> None:
        try:
            import ray  # noqa: F401  (imported lazily: Ray is an optional extra)
        except ImportError:
            raise ImportError(
                "executor 'ray' needs Ray: pip install 'dpaudit[ray]' (or pip install 'ray>=2.9')"
            ) from None
        if address is not None and (not isinstance(address, str) or not address.strip()):
            raise v.invalid("address", f"address must be a non-empty string, got {address!r}")
        self.address = address
        from dpaudit.threads import available_cores, plan_threads, worker_threads

        self.workers = v.integer("workers", workers if workers is not None else available_cores(), minimum=1)
        if threads_per_worker is not None:
            self.threads_per_worker = v.integer("threads_per_worker", threads_per_worker, minimum=1)
        elif address is None:
            self.threads_per_worker = worker_threads(self.workers)
        else:
            given = plan_threads(workers=1, cores=1)  # what the flag or the environment says, else 1
            self.threads_per_worker = given.intra_op
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
            kwargs: dict[str, object] = {
                "include_dashboard": False,
                "log_to_driver": False,
                "logging_level": "WARNING",
                **self.init_kwargs,
            }
            if self.address is None:
                # Each task reserves its threads' CPUs: room for ``workers`` tasks at once.
                kwargs.setdefault("num_cpus", self.workers * self.threads_per_worker)
            if self.ship_code:
                from dpaudit.cluster import ship_env

                given = kwargs.get("runtime_env")  # the caller's own runtime_env (init_kwargs) joins ours
                kwargs["runtime_env"] = {**ship_env(), **(dict(given) if isinstance(given, Mapping) else {})}
            with warnings.catch_warnings():
                # A notice about a future default for GPU-less tasks, not about this run.
                warnings.filterwarnings("ignore", category=FutureWarning, module=r"ray\.")
                # The caller's init_kwargs are Ray's own options, checked by Ray: passed through as given.
                init: Callable[..., object] = ray.init
                init(address=self.address, **kwargs)
            self._started = True
        if self._remote is None:
            self._remote = ray.remote(
                num_cpus=self.threads_per_worker, num_gpus=self.num_gpus, max_retries=self.max_retries
            )(_ray_call)
        if self.num_gpus > 0 and not ray.cluster_resources().get("GPU"):
            from dpaudit.cluster import ClusterMismatch

            raise ClusterMismatch(
                f"jobs on --device cuda ask Ray for {self.num_gpus:g} GPU each, but no "
                "node of the cluster has a GPU; start the nodes with --num-gpus or use "
                "--device cpu"
            )
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
        from dpaudit.library_warnings import worker_setting

        ray = self._ensure()
        driver = self._driver[1]
        pending = {
            self._remote.remote(
                job.fn,
                dict(job.kwargs),
                self.threads_per_worker,
                driver,
                self.datasets,
                self.data_root,
                worker_setting(),
            ): job
            for job in jobs
        }
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
