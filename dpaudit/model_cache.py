"""A run-store cache of trained models: load the finished ones, train the rest as executor jobs.

Many parts of the suite train a batch of independent models — shadow and reference models of
membership attacks (Shokri et al. 2017, §V; Carlini et al. 2022, §IV-B), the teachers of PATE
(Papernot et al. 2017, §2.1) — and each must survive an interrupted run. This module is the
part they share: every model is one :class:`ModelJob` whose function runs on a
:mod:`dpaudit.executors` executor (in this process, a process pool or Ray) and returns plain
data (:func:`pack_model`); each result is written at once, atomically, as a record under
``directory/<key>/`` (weights first, ``record.json`` last, :func:`dpaudit.weights.save_record`),
so a directory whose ``record.json`` exists is complete and is reused by the next call instead
of being trained again.

Jobs return data rather than writing files themselves so that they also run on Ray nodes that
do not share the run directory; only this process writes to the cache.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dpaudit import _validate as v
from dpaudit.executors.jobs import Executor, Job, SerialExecutor
from dpaudit.progress import Progress
from dpaudit.results.record import RECORD_FILE, TrainedModel, load_record
from dpaudit.weights import load_model, save_record

__all__ = ["ModelJob", "CachedModels", "pack_model", "unpack_state", "is_cached", "ensure_models"]


def pack_model(record: TrainedModel, model: nn.Module) -> dict[str, Any]:
    """What a model-training job returns: the record as a dict and the weights as NumPy arrays.

    Plain data crosses process (and machine) boundaries without pickling a module, and the
    caller rebuilds the module from its own architecture code (:func:`unpack_state`).
    """
    state = {k: t.detach().cpu().contiguous().numpy() for k, t in model.state_dict().items()}
    return {"record": record.to_dict(), "state": state}


def unpack_state(model: nn.Module, state: Mapping[str, np.ndarray]) -> nn.Module:
    """Loads a packed state (:func:`pack_model`) into ``model`` (strictly) and returns it in eval mode."""
    model.load_state_dict({k: torch.from_numpy(np.array(a)) for k, a in state.items()}, strict=True)
    return model.eval()


def is_cached(directory: str | os.PathLike[str], key: str) -> bool:
    """Whether ``directory/<key>`` holds a finished record (its ``record.json`` exists)."""
    return (Path(directory) / key / RECORD_FILE).is_file()


@dataclass(frozen=True, kw_only=True)
class ModelJob:
    """One model to load from the cache or to train.

    Attributes:
        key: unique name of the model and of its cache directory (a model id: no ``/``).
        fn: module-level (picklable) job function; called with ``kwargs`` on the executor, it
            returns :func:`pack_model`'s dict.
        kwargs: its keyword arguments (picklable).
        build: makes a fresh module of the model's architecture in this process, into which
            the job's weights are loaded (never sent to a worker, so it may be a closure).
        external_builder: the ``module:function`` the caller vouches for when a cached record
            names an external builder (:func:`dpaudit.weights.load_model`); ``None`` for zoo
            models.
    """

    key: str
    fn: Callable[..., Mapping[str, object]]
    kwargs: Mapping[str, object] = field(default_factory=dict)
    build: Callable[[], nn.Module]
    external_builder: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key or "/" in self.key or self.key.startswith("."):
            raise v.invalid(
                "key", f"key must be a non-empty name without '/' that does not start with '.', got {self.key!r}"
            )
        if not callable(self.fn):
            raise v.invalid_type("fn", f"fn must be callable, got {self.fn!r}")
        if not callable(self.build):
            raise v.invalid_type("build", f"build must be callable, got {self.build!r}")


@dataclass(frozen=True, kw_only=True)
class CachedModels:
    """The models of one :func:`ensure_models` call, in job order.

    Attributes:
        keys: the jobs' keys.
        models: the modules (eval mode, on the CPU), aligned with ``keys``.
        records: their records, aligned with ``keys`` (as stored, with the weights' digest,
            when a directory was given).
        trained: keys trained by this call, in the order they finished.
        reused: keys loaded from the cache.
    """

    keys: tuple[str, ...]
    models: tuple[nn.Module, ...]
    records: tuple[TrainedModel, ...]
    trained: tuple[str, ...]
    reused: tuple[str, ...]


def _build_quietly(job: ModelJob) -> nn.Module:
    # The fresh module's initial weights are overwritten at once; building it inside fork_rng
    # keeps the caller's global torch RNG where it was (library code never moves it).
    with torch.random.fork_rng(devices=[]):
        return job.build()


def ensure_models(
    jobs: Sequence[ModelJob],
    *,
    directory: str | os.PathLike[str] | None,
    executor: Executor | None = None,
    label: str = "models",
    progress: bool = True,
    announce_reused: bool = False,
    on_trained: Callable[[str, TrainedModel, nn.Module], None] | None = None,
    group: Callable[[Sequence[str]], Sequence[tuple[tuple[str, ...], Job]]] | None = None,
) -> CachedModels:
    """Loads the cached models among ``jobs`` and trains the rest through ``executor``.

    Each newly trained model is saved (atomically) as soon as its job returns, before
    ``on_trained`` is called; if training stops early — an exception from a job or from
    ``on_trained``, or Ctrl-C — everything saved so far is kept and a rerun trains only what
    is missing.

    Args:
        jobs: the models wanted (unique keys).
        directory: the cache; ``None`` keeps nothing on disk (everything is trained).
        executor: where jobs run (default: in this process, :class:`SerialExecutor`).
        label: what the progress bar counts (``"shadow models"``, ``"PATE teachers"``).
        progress: report on stderr.
        announce_reused: also print one line saying how many models were reused from
            ``directory`` (when any were and ``progress`` is on).
        on_trained: called in this process with (key, record, module) after each newly
            trained model was saved.
        group: given the keys still to train, the jobs that train several of them at once (a
            batched group, :mod:`dpaudit.batched`): ``(keys, job)`` pairs whose job returns one
            :func:`pack_model` per key, in order; a key left out trains alone by its own job.
            ``None``: every model alone.

    Returns:
        The models and records, aligned with ``jobs``.

    Raises:
        TypeError: ``jobs`` holds something other than :class:`ModelJob`.
        ValueError: two jobs share a key, or a cached record or its weights are invalid.
    """
    jobs = list(jobs)
    by_key: dict[str, ModelJob] = {}
    for job in jobs:
        if not isinstance(job, ModelJob):
            raise v.invalid_type("jobs", f"jobs must hold ModelJob values, got {type(job).__name__}")
        if job.key in by_key:
            raise v.invalid("jobs", f"jobs must have unique keys, got {job.key!r} twice")
        by_key[job.key] = job
    root = Path(directory) if directory is not None else None
    models: dict[str, nn.Module] = {}
    records: dict[str, TrainedModel] = {}
    reused: list[str] = []
    if root is not None:
        for key, job in by_key.items():
            if is_cached(root, key):
                record = load_record(root / key)
                models[key] = load_model(record, directory=root / key, external_builder=job.external_builder)
                records[key] = record
                reused.append(key)
    todo = [key for key in by_key if key not in models]
    trained: list[str] = []
    if reused and announce_reused and progress:
        print(f"{label}: reusing {len(reused)} of {len(by_key)} already trained in {root}", file=sys.stderr)
    if todo:
        executor = executor or SerialExecutor()
        grouped = list(group(todo)) if group is not None else []
        alone = set(todo) - {key for keys, _ in grouped for key in keys}
        work = grouped + [
            ((key,), Job(key=key, fn=by_key[key].fn, kwargs=by_key[key].kwargs)) for key in todo if key in alone
        ]
        keys_of = {job.key: keys for keys, job in work}
        batched = ", batched" if grouped else ""
        with Progress(
            len(by_key), f"{label} ({executor.name}, {executor.workers} workers{batched})", enabled=progress
        ) as bar:
            bar.count = len(reused)
            # Models train in worker processes that cannot move this bar: say what is pending.
            with bar.heartbeat():
                for done, out in executor.run([job for _, job in work]):
                    # A group's job returns a list of packs, a single model's job its pack.
                    packs = out if isinstance(out, list) else [out]
                    for key, pack in zip(keys_of[done.key], packs, strict=True):
                        record = TrainedModel.from_dict(pack["record"])
                        model = unpack_state(_build_quietly(by_key[key]), pack["state"])
                        if root is not None:
                            save_record(record, model, root / key)
                            record = load_record(root / key)  # as stored: with the weights' digest
                        models[key] = model
                        records[key] = record
                        trained.append(key)
                        bar.update(1, reused=len(reused))
                        if on_trained is not None:
                            on_trained(key, record, model)
    return CachedModels(
        keys=tuple(by_key),
        models=tuple(models[k] for k in by_key),
        records=tuple(records[k] for k in by_key),
        trained=tuple(trained),
        reused=tuple(reused),
    )
