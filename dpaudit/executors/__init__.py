"""Executors: run independent jobs (shadow models, audit trials, grids) in parallel.

Shadow and reference models for membership inference (Shokri et al. 2017, §V; Carlini et al.
2022, §IV-B; Zarifzadeh et al. 2024, §3) are many independent training runs, each fully
described by its arguments (a seed and a split). docs/architecture.md ("Scale") asks for a process pool
on one machine and Ray beyond it, nothing home-made; this package offers both behind one small
interface (:class:`~dpaudit.executors.jobs.Executor`), and :func:`make_executor` picks one by name:

* :class:`~dpaudit.executors.jobs.SerialExecutor` — in this process, in order (tests, debugging, ``--num-workers 1``
  without the cost of starting a worker).
* :class:`~dpaudit.executors.local.LocalExecutor` — ``concurrent.futures.ProcessPoolExecutor`` with a ``spawn`` (or
  ``forkserver``) context: forking a process that already runs torch's thread pools can
  deadlock, so workers start fresh. Each worker runs the thread plan's intra-op threads
  (:mod:`dpaudit.threads`: cores // workers by default), because W workers × all-cores
  threads oversubscribe the CPU and are slower than W jobs that share the cores.
* :class:`~dpaudit.executors.ray_tasks.RayExecutor` — Ray tasks (``ray.init(address=...)``; a local Ray when no address
  is given). Ray is imported only when this executor is used, so it stays an optional extra.
  Before the first job every node's code and data are compared with this process's
  (:mod:`dpaudit.cluster`); a task of a lost node is rerun elsewhere by Ray; ``--device cuda``
  jobs ask for a share of a GPU (:func:`dpaudit.cluster.gpu_share`).

Jobs and the interface are :mod:`~dpaudit.executors.jobs`; the local pool and its workers' lifecycle
:mod:`~dpaudit.executors.local`; Ray :mod:`~dpaudit.executors.ray_tasks`.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpaudit import _validate as v
from dpaudit.executors.jobs import Executor, SerialExecutor
from dpaudit.executors.local import LocalExecutor
from dpaudit.executors.ray_tasks import RayExecutor

__all__ = ["EXECUTORS", "make_executor"]

EXECUTORS: tuple[str, ...] = ("serial", "local", "ray")


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
    return RayExecutor(
        address=address, workers=workers, datasets=datasets, data_root=data_root, ship_code=ship_code, num_gpus=num_gpus
    )
