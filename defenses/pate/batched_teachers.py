"""PATE's teachers trained many at once (:func:`dpaudit.batched.train_batched`).

A PATE ensemble is hundreds of small models of one architecture, each trained by the
non-private baseline's loop on its own partition (Papernot et al. 2018, §5: 250 teachers).
Teachers that need nothing but that loop train in groups of :data:`TEACHERS_PER_BATCH` as one
computation: the pool is the union of the group's partitions, each model's mask is its own
partition (so each private example still reaches exactly one teacher, the fact the
aggregator's analysis rests on), and each model is initialised and shuffled from its own seed's
streams. A teacher trained in a group equals the one :func:`~defenses.pate.teachers.train_teacher`
trains alone, up to floating-point reordering (``tests/defenses/test_pate_batched_teachers.py``),
and gets the same record and cache entry, so a resumed run trains only the missing teachers.
A model with dropout (it draws from the global generator, which a batched run cannot split per
teacher) trains alone.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from defenses._common import build_record
from defenses.networks import build_network
from defenses.pate.teachers import TeacherSpec, as_teacher_record, teacher_request
from dpaudit.batched import train_batched_on_ids
from dpaudit.data import load_dataset
from dpaudit.executors.jobs import Job
from dpaudit.model_cache import pack_model
from dpaudit.privacy.claims import NonPrivateClaim

__all__ = ["TEACHERS_PER_BATCH", "batches_teachers", "teacher_groups", "train_teacher_group_job"]

#: Most teachers one batched job trains: an interrupted run loses at most this many per worker,
#: and 16 small models already share most of a step's overhead (docs/batched.md).
TEACHERS_PER_BATCH = 16


def _architecture(spec: TeacherSpec) -> Callable[[], nn.Module]:
    """Builds one untrained teacher as the baseline's loop does (the seed's ``init`` stream is the caller's)."""
    return functools.partial(
        build_network,
        spec.model_name,
        input_shape=spec.input_shape,
        num_classes=spec.num_classes,
        options=spec.model_options,
    )


def batches_teachers(spec: TeacherSpec) -> bool:
    """Whether teachers like ``spec`` train batched: a zoo model without dropout or a noise layer."""
    if spec.model_name.startswith("external:") or dict(spec.model_options).get("noise_layer"):
        return False
    with torch.random.fork_rng(devices=[]):
        model = _architecture(spec)()
    return not any(isinstance(m, nn.modules.dropout._DropoutNd) for m in model.modules())


def teacher_groups(
    specs: Sequence[TeacherSpec], *, data_root: str | None, device: str
) -> Callable[[Sequence[str]], list[tuple[tuple[str, ...], Job]]]:
    """The grouping :func:`dpaudit.model_cache.ensure_models` asks for: the missing teachers in batched jobs.

    Teachers group by everything but their partition, index and seed, in teacher order, at most
    :data:`TEACHERS_PER_BATCH` a job; the grouping depends on nothing else, so every executor
    trains the same groups.
    """
    by_id = {s.teacher_id: s for s in specs}

    def group(keys: Sequence[str]) -> list[tuple[tuple[str, ...], Job]]:
        kinds: dict[str, list[TeacherSpec]] = {}
        for key in keys:
            spec = by_id[key]
            kind = repr((spec.dataset, spec.model_name, sorted(spec.model_options.items()), spec.training))
            kinds.setdefault(kind, []).append(spec)
        jobs = []
        for members in kinds.values():
            if not batches_teachers(members[0]):
                continue  # these train alone, one job each
            for i in range(0, len(members), TEACHERS_PER_BATCH):
                part = members[i : i + TEACHERS_PER_BATCH]
                job = Job(
                    key=f"teachers-{part[0].index}-{part[-1].index}",
                    fn=train_teacher_group_job,
                    kwargs={"specs": [p.to_dict() for p in part], "data_root": data_root, "device": device},
                )
                jobs.append((tuple(p.teacher_id for p in part), job))
        return jobs

    return group


def train_teacher_group_job(
    *, specs: Sequence[Mapping[str, object]], data_root: str | None = None, device: str = "cpu"
) -> list[Mapping[str, object]]:
    """Executor job: the teachers ``specs`` (one group, as plain data) trained as one batched computation.

    Returns:
        :func:`dpaudit.model_cache.pack_model` of each teacher, in the order of ``specs``.
    """
    teachers = [TeacherSpec.from_dict(s) for s in specs]
    bundle = load_dataset(teachers[0].dataset, data_root=data_root)  # cached per worker process
    started = time.monotonic()
    run = train_batched_on_ids(
        _architecture(teachers[0]),
        bundle.all(),
        [t.train_ids for t in teachers],
        seeds=[t.seed for t in teachers],
        config=teachers[0].training,
        device=device,
        label="PATE teachers",
    )
    share = (time.monotonic() - started) / len(teachers)
    out: list[Mapping[str, object]] = []
    for j, (spec, model) in enumerate(zip(teachers, run.models, strict=True)):
        request = teacher_request(spec, bundle=bundle, device=device)
        record = build_record(
            request,
            defense="nonprivate",
            model=model.eval(),
            claim=NonPrivateClaim(),
            started=time.monotonic() - share,
            extra_metrics={"num_steps": int(run.num_steps[j])},
        )
        out.append(pack_model(as_teacher_record(spec, record, num_test_examples=len(request.bundle.test)), model))
    return out
