"""PATE teachers: one non-private model per disjoint partition of the private data, and their votes.

Papernot et al. (2017, "Semi-supervised Knowledge Transfer for Deep Learning from Private
Training Data", §2.1) cut the private training set into n disjoint partitions and train one
*teacher* on each, with no privacy mechanism of its own: privacy comes from the noisy
aggregation of their votes (:mod:`defenses.pate.aggregators`), whose analysis rests on each
private example having been seen by exactly one teacher. Papernot et al. (2018, "Scalable
Private Learning with PATE", §5) use 250 teachers on MNIST and Adult.

Here every teacher is an independent job on a :mod:`dpaudit.executors` executor (the
process pool by default, Ray when configured), trained by the non-private baseline's own loop
(:func:`defenses.nonprivate.train_nonprivate`: plain SGD with momentum), and cached through
:mod:`dpaudit.model_cache`: each finished teacher is written at once, atomically, as a record
under ``directory/<teacher_id>/``, so an interrupted run resumes with every finished teacher
kept. Each record's membership ground truth is its partition (members) beside the run's held-out
non-members, so membership attacks know the truth for a single teacher; its defense is
``nonprivate`` (that is how it was trained, and shadows of a teacher are trained the same way)
and ``config["pate_teacher"]`` says which teacher of which ensemble it is.

:func:`teacher_votes` runs every teacher on the (public, unlabelled) query inputs and returns
the vote matrix (queries × classes). Each teacher's predicted labels are cached as ``.npy``
beside its record, keyed by a digest of the queries and of the teacher's weights, so the votes
of a resumed run or of another aggregator cost no inference.

Teachers that need nothing but the baseline's loop train in groups of :data:`TEACHERS_PER_BATCH`
as one computation (:func:`dpaudit.batched.train_batched`): the pool is the union of the
group's partitions and each model's mask is its own partition, so each private example still
reaches exactly one teacher, the fact the aggregator's analysis rests on; each model is
initialised and shuffled from its own seed's streams. A teacher trained in a group equals the one
:func:`train_teacher` trains alone up to floating-point reordering
(``tests/defenses/test_pate_batched_teachers.py``) and gets the same record and cache entry. A
model with dropout (it draws from the global generator, which a batched run cannot split per
teacher) trains alone.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import torch
from torch import nn

from defenses._common import build_record, evaluation_bundle
from defenses.networks import build_network
from defenses.nonprivate import NonPrivateConfig, train_nonprivate
from defenses.pate.aggregators import vote_histogram
from defenses.pate.partition import partition_ids, teacher_membership
from dpaudit import _validate as v
from dpaudit.batched import train_batched_on_ids
from dpaudit.data import DatasetBundle, Splits, load_dataset, sorted_id_set
from dpaudit.executors.jobs import Executor, Job
from dpaudit.model_cache import ModelJob, ensure_models, pack_model
from dpaudit.privacy.claims import NonPrivateClaim
from dpaudit.progress import Progress
from dpaudit.results.record import Membership, TrainedModel, make_model_id
from dpaudit.seeding import derive_seed
from dpaudit.specs import PlainSpec, spec_field, spec_to_dict
from dpaudit.store import atomic_write_bytes
from dpaudit.train_request import TrainRequest
from dpaudit.training import predict_logits

__all__ = [
    "TeacherSpec",
    "TeacherEnsemble",
    "plan_teachers",
    "TEACHERS_PER_BATCH",
    "as_teacher_record",
    "batches_teachers",
    "teacher_groups",
    "train_teacher_group_job",
    "teacher_request",
    "train_teacher",
    "train_teacher_job",
    "teacher_identity",
    "train_teachers",
    "teacher_predictions",
    "teacher_votes",
]

#: The record's defense: a teacher is trained by the non-private baseline's loop.
TEACHER_DEFENSE = "nonprivate"


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(str(a.shape).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True, kw_only=True, eq=False)
class TeacherSpec(PlainSpec):
    """Everything that determines one teacher (its id is a hash of it).

    ``to_dict`` / ``from_dict`` (:class:`dpaudit.specs.PlainSpec`): plain data, sent to workers
    that rebuild the spec.

    Attributes:
        dataset: dataset name (the job reloads it by name, also on another machine).
        model_name: zoo architecture.
        model_options: architecture options.
        input_shape: shape of one example.
        num_classes: number of classes.
        training: SGD hyperparameters.
        index: which teacher, in ``[0, num_teachers)``.
        num_teachers: n, the size of the ensemble.
        train_ids: the teacher's partition (sorted ids).
        non_member_ids: the run's held-out ids (never trained on by any teacher).
        population_ids: the run's population ids (for shadow models of attacks).
        partition_seed: seed the partitions were drawn with.
        seed: the teacher's own seed (initialisation and batch order).
        num_eval_examples: the record's test metrics are measured on at most this many test
            examples (the first by id; ``None``: all). Evaluating every teacher on a whole test
            set costs more than training it when partitions are small (10,000 MNIST test
            images take ~5 s on one core, 20 epochs on a 240-image partition ~3 s). It changes
            no weight, so it is not part of the id. A dict without it (written before it
            existed) means all.
    """

    dataset: str
    model_name: str
    model_options: Mapping[str, object] = spec_field(default_factory=dict, as_given=True)
    input_shape: tuple[int, ...]
    num_classes: int
    training: NonPrivateConfig
    index: int
    num_teachers: int
    train_ids: np.ndarray
    non_member_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    population_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    partition_seed: int
    seed: int
    num_eval_examples: int | None = spec_field(default=1000, absent=None)

    def __post_init__(self) -> None:
        for name in ("train_ids", "non_member_ids", "population_ids"):
            object.__setattr__(self, name, sorted_id_set(name, getattr(self, name)))
        if self.train_ids.size == 0:
            raise v.invalid("train_ids", "train_ids must not be empty")
        Membership(
            members=self.train_ids, non_members=self.non_member_ids, population=self.population_ids
        )  # refuses shared ids
        num = v.integer("num_teachers", self.num_teachers, minimum=1)
        index = v.integer("index", self.index, minimum=0)
        if index >= num:
            raise v.invalid("index", f"index must lie in [0, num_teachers={num}), got {index}")
        object.__setattr__(self, "partition_seed", v.integer("partition_seed", self.partition_seed, minimum=0))
        object.__setattr__(self, "seed", v.integer("seed", self.seed, minimum=0))
        if self.num_eval_examples is not None:
            object.__setattr__(
                self, "num_eval_examples", v.integer("num_eval_examples", self.num_eval_examples, minimum=1)
            )
        object.__setattr__(self, "input_shape", tuple(int(s) for s in self.input_shape))
        object.__setattr__(self, "model_options", MappingProxyType(dict(self.model_options)))
        if not isinstance(self.training, NonPrivateConfig):
            raise v.invalid_type("training", f"training must be a NonPrivateConfig, got {type(self.training).__name__}")

    @property
    def teacher_id(self) -> str:
        """Stable id, also the cache directory: the same spec always maps to the same record.

        Starts with the zero-padded teacher index, so directory listings sort in teacher order.
        """
        config = {
            "training": spec_to_dict(self.training),
            "model_options": dict(self.model_options),
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "num_teachers": self.num_teachers,
            "partition_seed": self.partition_seed,
            "train_ids_sha256": _digest(self.train_ids),
            # The stored ground truth is part of the record, so a different held-out set is another record.
            "membership_sha256": _digest(self.non_member_ids, self.population_ids),
        }
        width = len(str(self.num_teachers - 1))
        return make_model_id(
            defense=f"pate-teacher{self.index:0{width}d}",
            dataset=self.dataset,
            model_name=self.model_name,
            seed=self.seed,
            config=config,
        )

    def build(self) -> nn.Module:
        """A freshly initialised module of the teacher's architecture."""
        return build_network(
            self.model_name, input_shape=self.input_shape, num_classes=self.num_classes, options=self.model_options
        )


def plan_teachers(
    *,
    bundle: DatasetBundle,
    splits: Splits,
    num_teachers: int,
    model_name: str,
    model_options: Mapping[str, object] | None = None,
    config: NonPrivateConfig | None = None,
    seed: int,
    num_eval_examples: int | None = 1000,
) -> tuple[TeacherSpec, ...]:
    """One teacher per disjoint partition of ``splits.members`` (the private training ids).

    Args:
        bundle: the dataset (name, input shape, classes).
        splits: the run's split; its members are partitioned, its non-members and
            population become every teacher's non-members and population.
        num_teachers: n, between 1 and the number of members.
        model_name: zoo architecture of every teacher.
        model_options: architecture options.
        config: SGD hyperparameters (default :class:`NonPrivateConfig`'s).
        seed: root seed: the partition (:func:`defenses.pate.partition.partition_ids`) and
            each teacher's own seed (stream ``("pate", "teacher", t)``) derive from it.
        num_eval_examples: test examples each teacher's record is evaluated on (see
            :class:`TeacherSpec`).

    Returns:
        ``num_teachers`` specs in teacher order.

    Raises:
        ValueError: ``num_teachers`` < 1 or above the number of members, or a bad seed.
    """
    seed = v.integer("seed", seed, minimum=0)
    config = config if config is not None else NonPrivateConfig()
    parts = partition_ids(splits.members, num_teachers=num_teachers, seed=seed)
    return tuple(
        TeacherSpec(
            dataset=bundle.name,
            model_name=model_name,
            model_options=dict(model_options or {}),
            input_shape=bundle.input_shape,
            num_classes=bundle.num_classes,
            training=config,
            index=t,
            num_teachers=len(parts),
            train_ids=part,
            non_member_ids=splits.non_members,
            population_ids=splits.population,
            partition_seed=seed,
            seed=derive_seed(seed, "pate", "teacher", t),
            num_eval_examples=num_eval_examples,
        )
        for t, part in enumerate(parts)
    )


def train_teacher(
    spec: TeacherSpec, *, bundle: DatasetBundle, device: torch.device | str = "cpu"
) -> tuple[TrainedModel, nn.Module]:
    """Trains one teacher on its partition with the non-private baseline's SGD loop.

    Args:
        spec: the teacher.
        bundle: the dataset.
        device: where to train.

    Returns:
        The record (id ``spec.teacher_id``; members = the partition, non-members and population
        those of the run) and the module in eval mode. Its metrics are the partition's and the
        test split's (at most ``spec.num_eval_examples`` of it) accuracy and loss.
    """
    request = teacher_request(spec, bundle=bundle, device=device)
    record, model = train_nonprivate(request, progress_label="pate-teacher")
    return as_teacher_record(spec, record, num_test_examples=len(request.bundle.test)), model


def teacher_request(spec: TeacherSpec, *, bundle: DatasetBundle, device: torch.device | str = "cpu") -> TrainRequest:
    """The non-private baseline's request that trains ``spec``: its partition, a test split cut to its budget."""
    evaluation = evaluation_bundle(bundle, spec.num_eval_examples)
    none = np.zeros(0, dtype=np.int64)
    # Only the partition is trained on; the run's non-members are not evaluated per teacher (a
    # second test set's cost for every teacher) but become its ground truth (as_teacher_record).
    splits = Splits(
        dataset=bundle.name,
        seed=spec.partition_seed,
        members=spec.train_ids,
        non_members=none,
        population=none,
        test=np.asarray(evaluation.test.ids, dtype=np.int64),
    )
    return TrainRequest(
        bundle=evaluation,
        splits=splits,
        model_name=spec.model_name,
        model_options=spec.model_options,
        config=spec.training,
        seed=spec.seed,
        device=device,
        progress=False,
    )


def as_teacher_record(spec: TeacherSpec, record: TrainedModel, *, num_test_examples: int) -> TrainedModel:
    """The baseline's record of a teacher's training as the teacher's: its id, which teacher, its ground truth."""
    about = {
        "index": spec.index,
        "num_teachers": spec.num_teachers,
        "partition_seed": spec.partition_seed,
        "train_ids_sha256": _digest(spec.train_ids),
    }
    metrics = {k: val for k, val in record.metrics.items() if not k.startswith("non_member_")}
    metrics["num_test_examples"] = num_test_examples
    return dataclasses.replace(
        record,
        model_id=spec.teacher_id,
        config={**record.config, "pate_teacher": about},
        membership=Membership(members=spec.train_ids, non_members=spec.non_member_ids, population=spec.population_ids),
        metrics=metrics,
    )


def teacher_identity(record: TrainedModel) -> tuple[str, str] | None:
    """For a teacher's record: the id its spec gives (and its cache directory's name, the same).

    ``None`` for a record that is not a teacher's (its config holds no ``pate_teacher``). The id
    is rebuilt from what the record states (training config, options, shape, partition and the
    run's held-out ids), so an edited teacher record no longer matches it.
    """
    about = record.config.get("pate_teacher")
    if not isinstance(about, Mapping):
        return None
    names = {f.name for f in dataclasses.fields(NonPrivateConfig)}
    training = NonPrivateConfig(**{k: x for k, x in record.config.items() if k in names})
    spec = TeacherSpec(
        dataset=record.dataset,
        model_name=record.model_name,
        model_options=dict(record.model_options),
        input_shape=record.input_shape,
        num_classes=record.num_classes,
        training=training,
        index=about["index"],
        num_teachers=about["num_teachers"],
        train_ids=record.membership.members,
        non_member_ids=record.membership.non_members,
        population_ids=record.membership.population,
        partition_seed=about["partition_seed"],
        seed=record.seed,
    )
    return spec.teacher_id, spec.teacher_id


def train_teacher_job(
    *, spec: Mapping[str, object], data_root: str | None = None, device: str = "cpu"
) -> Mapping[str, object]:
    """Executor job: trains the teacher described by ``spec`` (a :meth:`TeacherSpec.to_dict`).

    Returns plain data (:func:`dpaudit.model_cache.pack_model`), so the job also runs on Ray
    nodes that do not share the run directory.
    """
    teacher = TeacherSpec.from_dict(spec)
    bundle = load_dataset(teacher.dataset, data_root=data_root)  # cached per worker process
    with torch.random.fork_rng(devices=[]):  # in a SerialExecutor this is the caller's process
        # A layer that draws from the global CPU generator (dropout) gets a stream of the teacher's
        # seed, so a teacher is the same whichever executor or worker trains it.
        torch.random.default_generator.manual_seed(derive_seed(teacher.seed, "global"))
        record, model = train_teacher(teacher, bundle=bundle, device=device)
    return pack_model(record, model)


@dataclass(frozen=True, kw_only=True)
class TeacherEnsemble:
    """Trained teachers, in teacher order.

    Attributes:
        specs: what each teacher is.
        records: their records (membership = partition).
        models: the modules (eval mode, CPU).
        trained: teacher ids trained by the call that made this.
        reused: teacher ids loaded from the cache.
        directory: the cache (where predictions are cached too); ``None`` when nothing is kept.
    """

    specs: tuple[TeacherSpec, ...]
    records: tuple[TrainedModel, ...]
    models: tuple[nn.Module, ...]
    trained: tuple[str, ...]
    reused: tuple[str, ...]
    directory: Path | None

    @property
    def num_teachers(self) -> int:
        return len(self.specs)

    @property
    def num_classes(self) -> int:
        return self.specs[0].num_classes

    @property
    def teacher_ids(self) -> tuple[str, ...]:
        return tuple(s.teacher_id for s in self.specs)

    @property
    def partitions(self) -> tuple[np.ndarray, ...]:
        """Each teacher's training ids (its record's members)."""
        return tuple(r.membership.members for r in self.records)

    def membership(self) -> dict[str, list[int]]:
        """Every teacher's ids as JSON-able data (:func:`defenses.pate.partition.teacher_membership`)."""
        return teacher_membership(self.partitions)


def train_teachers(
    specs: Sequence[TeacherSpec],
    *,
    directory: str | os.PathLike[str] | None,
    executor: Executor | None = None,
    data_root: str | os.PathLike[str] | None = None,
    device: str = "cpu",
    progress: bool = True,
    on_trained: Callable[[TeacherSpec, TrainedModel], None] | None = None,
    batched: bool = True,
) -> TeacherEnsemble:
    """Loads the finished teachers among ``specs`` from ``directory`` and trains the rest.

    Each teacher is saved (atomically) as soon as its job returns; if training stops — a
    failing job, an exception from ``on_trained``, Ctrl-C — every teacher saved so far is kept
    and a rerun trains only the missing ones, saying on stderr how many it reused.

    Args:
        specs: the teachers, from :func:`plan_teachers`.
        directory: the cache (one record directory per teacher); ``None`` keeps nothing.
        executor: where jobs run (default: in this process).
        data_root: the data root, passed to workers.
        device: where workers train.
        progress: report on stderr.
        on_trained: called in this process after each newly trained teacher was saved.
        batched: train the missing teachers in batched groups where their model allows
            (:func:`teacher_groups`: the same teachers up to floating-point
            reordering); ``False``: one job per teacher.

    Returns:
        The ensemble.

    Raises:
        TypeError: ``specs`` holds something other than :class:`TeacherSpec`.
        ValueError: no specs, specs of different ensembles, or overlapping partitions.
    """
    specs = tuple(specs)
    if not specs:
        raise v.invalid("specs", "specs must hold at least one teacher, got none")
    for s in specs:
        if not isinstance(s, TeacherSpec):
            raise v.invalid_type("specs", f"specs must hold TeacherSpec values, got {type(s).__name__}")
    if len({s.num_classes for s in specs}) != 1:
        raise v.invalid(
            "specs", f"specs must share one number of classes, got {sorted({s.num_classes for s in specs})}"
        )
    teacher_membership([s.train_ids for s in specs])  # refuses overlapping partitions: one example, one teacher
    root_text = os.fspath(data_root) if data_root is not None else None
    jobs = [
        ModelJob(
            key=s.teacher_id,
            fn=train_teacher_job,
            kwargs={"spec": s.to_dict(), "data_root": root_text, "device": device},
            build=functools.partial(TeacherSpec.build, s),
        )
        for s in specs
    ]
    by_key = {s.teacher_id: s for s in specs}
    notify = None if on_trained is None else (lambda key, record, _model: on_trained(by_key[key], record))
    cached = ensure_models(
        jobs,
        directory=directory,
        executor=executor,
        label="PATE teachers",
        progress=progress,
        announce_reused=True,
        on_trained=notify,
        group=teacher_groups(specs, data_root=root_text, device=device) if batched else None,
    )
    return TeacherEnsemble(
        specs=specs,
        records=cached.records,
        models=cached.models,
        trained=cached.trained,
        reused=cached.reused,
        directory=Path(directory) if directory is not None else None,
    )


def _as_features(features: Any) -> torch.Tensor:
    if isinstance(features, np.ndarray):
        features = torch.from_numpy(features)
    if not isinstance(features, torch.Tensor):
        raise v.invalid_type(
            "features", f"features must be a torch.Tensor or numpy array, got {type(features).__name__}"
        )
    if features.ndim < 1:
        raise v.invalid("features", f"features must hold one example per row, got shape {tuple(features.shape)}")
    return features.detach().to("cpu", torch.float32).contiguous()


def _load_cached(path: Path, *, num_queries: int, num_classes: int) -> np.ndarray | None:
    """A cached prediction vector, or ``None`` when absent or unusable (then it is recomputed)."""
    if not path.is_file():
        return None
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    if (
        arr.shape != (num_queries,)
        or arr.dtype.kind not in "iu"
        or (arr.size and (arr.min() < 0 or arr.max() >= num_classes))
    ):
        return None
    return arr.astype(np.int64, copy=False)


def teacher_predictions(
    ensemble: TeacherEnsemble,
    features: Any,
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 1024,
    progress: bool = False,
) -> np.ndarray:
    """Every teacher's label for every query: a (teachers × queries) int64 matrix.

    With a cache directory each teacher's labels are kept as
    ``<teacher dir>/predictions-<digest>.npy`` (the digest covers the queries and the teacher's
    weights), so asking again costs no inference.

    Args:
        ensemble: the teachers.
        features: the query inputs, shape ``(queries, *input_shape)``.
        device: where to run the teachers.
        batch_size: queries per forward pass.
        progress: report on stderr.

    Returns:
        A read-only int64 array of shape ``(num_teachers, num_queries)``.
    """
    x = _as_features(features)
    batch_size = v.integer("batch_size", batch_size, minimum=1)
    queries_digest = _digest(x.numpy())
    out = np.empty((ensemble.num_teachers, len(x)), dtype=np.int64)
    with Progress(ensemble.num_teachers, "PATE teacher votes", enabled=progress) as bar:
        for t, (record, model) in enumerate(zip(ensemble.records, ensemble.models, strict=True)):
            path = None
            if ensemble.directory is not None:
                key = hashlib.sha256(f"{queries_digest}:{record.weights_sha256}".encode()).hexdigest()[:16]
                path = ensemble.directory / record.model_id / f"predictions-{key}.npy"
                cached = _load_cached(path, num_queries=len(x), num_classes=ensemble.num_classes)
                if cached is not None:
                    out[t] = cached
                    bar.update(1)
                    continue
            model.to(device)
            labels = (
                predict_logits(model, x, device=device, batch_size=batch_size).argmax(1).numpy().astype(np.int64)
                if len(x)
                else np.zeros(0, dtype=np.int64)
            )
            model.to("cpu")
            out[t] = labels
            if path is not None:
                buf = io.BytesIO()
                np.save(buf, labels, allow_pickle=False)
                atomic_write_bytes(path, buf.getvalue())
            bar.update(1)
    out.flags.writeable = False
    return out


def teacher_votes(
    ensemble: TeacherEnsemble,
    features: Any,
    *,
    device: torch.device | str = "cpu",
    batch_size: int = 1024,
    progress: bool = False,
) -> np.ndarray:
    """The vote matrix of the ensemble on the queries (Papernot et al. 2017, §2.1: n_j(x)).

    Args:
        ensemble: the teachers.
        features: the (public, unlabelled) query inputs.
        device, batch_size, progress: as for :func:`teacher_predictions`.

    Returns:
        A read-only int64 array of shape ``(queries, num_classes)``; each row sums to the
        number of teachers (:func:`defenses.pate.aggregators.vote_histogram`).
    """
    preds = teacher_predictions(ensemble, features, device=device, batch_size=batch_size, progress=progress)
    return vote_histogram(preds, num_classes=ensemble.num_classes)


# ----------------------------------------------------------------------------- batched teachers
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
