"""Shadow and reference models: planning, training as independent jobs, and the run-store cache.

Membership-inference attacks that imitate the target learn what a member looks like from
models whose training sets the attacker chose: Shokri et al. (2017, §V "shadow models"),
Carlini et al. (2022, §IV-B, LiRA's IN/OUT models), Zarifzadeh et al. (2024, §3, RMIA's
reference models). Each such model is one *job*: a seed, a set of training ids and the
target's architecture and (non-private) training hyperparameters. Jobs run through a
:mod:`dpaudit.executors` executor (process pool or Ray) and each finished model is written at
once, atomically, as a record under ``RUN_DIR/attacks/shadows/<shadow_id>/`` (weights first,
``record.json`` last, :func:`dpaudit.weights.save_record`), so later attacks reuse it and an
interrupted run resumes where it stopped.

Training sets come in *complementary pairs*: shadow ``2j`` trains on a random ``m``-subset
``A_j`` of a pool of ids and shadow ``2j+1`` on another ``m``-subset ``B_j`` disjoint from it;
when the pool has exactly ``2m`` ids, ``B_j`` is the complement and every pool id is IN for
exactly half of any even number of shadows (the balanced design of Carlini et al. 2022,
§IV-B, made prefix-consistent: the first 4 of 64 shadows are again balanced, so RMIA's few
reference models are the first few LiRA shadows and are trained once).

* ``online`` pool: the queried ids (target members and non-members) plus population ids up
  to ``2m`` — each queried example is IN for ~half of the shadows.
* ``offline`` pool: population ids only — shadows never see a queried example.

How a shadow is trained is the caller's choice. By default with plain SGD (:class:`ShadowTraining`:
the target's architecture, epochs, batch size and learning rate where its record states them;
non-private shadows for a private target are a common choice, Carlini et al. 2022, §VI-C). The
application layer instead passes a *trainer* — a callable that trains with the target's own
defense and config through the defense registry — and a *recipe* (the defense's name and
config) that becomes part of each shadow's id; this module never imports ``defenses``, so the
mapping from a defense's config to a training loop lives with the defense.

**Many shadows as one computation.** Shadows of one pool share their architecture and recipe
and differ only in their members and seed, so where their training mode allows it (plain or
non-private SGD, DP-SGD with Poisson lots, full-batch DP-GD) :func:`ensure_shadows` trains the
missing ones in groups through :func:`dpaudit.batched.train_batched`: each model draws the
seeded streams its own run draws, so it equals the one-at-a-time shadow up to floating-point
reordering (``tests/attacks/test_batched_shadows.py``). A *batcher* (:data:`ShadowBatcher`)
says whether and how a shadow trains batched: :func:`sgd_batch` for plain SGD here, the
application's for a defense's recipe. Every model keeps its id and cache entry, is saved as its
group returns, and a resumed run trains only the missing ones.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType

import numpy as np
import torch
from torch import nn

from dpaudit import _validate as v
from dpaudit.batched import BatchedDPSGD, BatchedSGD, train_batched_on_ids
from dpaudit.callables import resolve_callable
from dpaudit.data import DatasetBundle, load_dataset, sorted_id_set
from dpaudit.executors.jobs import Executor, Job, SerialExecutor
from dpaudit.model_cache import ModelJob, ensure_models, is_cached, pack_model, unpack_state
from dpaudit.models import build_model
from dpaudit.privacy.claims import NonPrivateClaim
from dpaudit.progress import Progress
from dpaudit.provenance import provenance
from dpaudit.results.record import Membership, TrainedModel, load_record, make_model_id
from dpaudit.seeding import derive_seed, numpy_rng, torch_generator
from dpaudit.specs import PlainSpec, spec_field
from dpaudit.store import thaw
from dpaudit.training import SGDConfig, evaluate, shuffled_batches
from dpaudit.weights import save_record

__all__ = [
    "ShadowTraining",
    "ShadowRecipe",
    "ShadowSpec",
    "ShadowRun",
    "plan_shadows",
    "train_shadow",
    "train_shadow_job",
    "ensure_shadows",
    "ShadowTrainer",
    "ShadowBatch",
    "ShadowBatcher",
    "sgd_batch",
    "train_shadow_batch_job",
    "MODELS_PER_BATCH",
]

#: Most shadows one batched job trains: an interrupted run loses at most this many per worker,
#: and the progress bar moves at least this often.
MODELS_PER_BATCH = 16

POOL_KINDS = ("online", "offline")


@dataclass(frozen=True, kw_only=True)
class ShadowTraining(SGDConfig, PlainSpec):
    """Non-private SGD hyperparameters of a shadow model (those of the target where known).

    Same fields and checks as :class:`dpaudit.training.SGDConfig`; shadows default to 30
    epochs so that they overfit like the targets membership inference is run against.
    ``to_dict`` / ``from_dict``: :class:`dpaudit.specs.PlainSpec` (the fields, in order).
    """

    epochs: int = 30

    @classmethod
    def from_config(cls, config: Mapping[str, object], **overrides: float | None) -> ShadowTraining:
        """The hyperparameters a target's record states, defaults for the rest.

        Only keys that name a field of this class, with usable values, are taken; a defense
        whose config differs (DP-SGD's lots) is trained as a shadow through its own trainer
        (see the module docstring), not translated here.

        Args:
            config: a record's ``config``.
            **overrides: values that win over ``config`` (``None`` values are ignored).
        """
        kwargs: dict[str, int | float] = {}
        for f in fields(cls):
            for source in (overrides, config):
                value = source.get(f.name)
                # A record's config is free-form JSON: only numbers can set a hyperparameter.
                if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
                    kwargs[f.name] = int(value) if f.type in ("int", int) else float(value)
                    break
        return cls.from_dict(kwargs)  # validated as any stored ShadowTraining is


def _freeze(obj: Mapping[str, object]) -> Mapping[str, object]:
    return MappingProxyType(dict(obj))


@dataclass(frozen=True, kw_only=True)
class ShadowRecipe(PlainSpec):
    """How a custom trainer trains a shadow, and the fingerprints its id hashes.

    Stored (and hashed into :attr:`ShadowSpec.shadow_id`) as a JSON object holding only the
    fields that are set, in field order: the empty recipe is ``{}`` (plain SGD, no
    fingerprint), so the ids of shadows planned before this type existed are unchanged.

    Attributes:
        defense: the defense the trainer trains with (a :data:`defenses.DEFENSES` name), or
            ``None`` for plain SGD with :class:`ShadowTraining`.
        config: that defense's config fields, as plain JSON (a record's ``config``); kept as
            given (lists stay lists) because the trainer rebuilds the config type from it.
        model_fn_sha256: the fingerprint of an external model's builder code: shadows built
            by edited code never share a cache entry with those built by the old code.
        dataset_files_sha256: the fingerprint of the dataset's files (``None`` for bundled data).
    """

    defense: str | None = spec_field(default=None, omit="none")
    config: Mapping[str, object] | None = spec_field(default=None, omit="none", encode=thaw)
    model_fn_sha256: str | None = spec_field(default=None, omit="none")
    dataset_files_sha256: str | None = spec_field(default=None, omit="none")

    def __post_init__(self) -> None:
        if (self.defense is None) != (self.config is None):
            raise v.invalid("recipe", "a shadow recipe names a defense and its config together, or neither")
        if self.config is not None:
            if not isinstance(self.config, Mapping):
                raise v.invalid_type("config", f"config must be a mapping, got {type(self.config).__name__}")
            object.__setattr__(self, "config", MappingProxyType(thaw(self.config)))

    @property
    def empty(self) -> bool:
        """Plain SGD and no fingerprint: nothing for the shadow's id to hash."""
        return not self.to_dict()


@dataclass(frozen=True, kw_only=True, eq=False)
class ShadowSpec(PlainSpec):
    """Everything that determines one shadow model (its id is a hash of it).

    ``to_dict`` / ``from_dict`` (:class:`dpaudit.specs.PlainSpec`): plain data, sent to workers
    that rebuild the spec; ``recipe`` is plain all the way down (it is pickled), the model
    options reach the builder as given.

    Attributes:
        dataset: dataset name.
        model_name: zoo name or ``external:module:function``.
        model_options: architecture options.
        input_shape: shape of one example.
        num_classes: number of outputs.
        training: SGD hyperparameters.
        train_ids: sorted ids the shadow trains on.
        seed: seed of initialisation and batch order.
        recipe: how a custom trainer trains it (e.g. ``{"defense": …, "config": …}``); part of
            the id, so shadows trained differently never share a cache entry. Empty: plain SGD
            with ``training``.
    """

    dataset: str
    model_name: str
    model_options: Mapping[str, object] = spec_field(default_factory=dict, as_given=True)
    input_shape: tuple[int, ...]
    num_classes: int
    training: ShadowTraining
    train_ids: np.ndarray
    seed: int
    recipe: ShadowRecipe = field(default_factory=ShadowRecipe)

    def __post_init__(self) -> None:
        object.__setattr__(self, "train_ids", sorted_id_set("train_ids", self.train_ids))
        if self.train_ids.size == 0:
            raise v.invalid("train_ids", "train_ids must not be empty")
        object.__setattr__(self, "seed", v.integer("seed", self.seed, minimum=0))
        object.__setattr__(self, "input_shape", tuple(int(s) for s in self.input_shape))
        object.__setattr__(self, "model_options", _freeze(self.model_options))
        if not isinstance(self.recipe, ShadowRecipe):
            raise v.invalid_type("recipe", f"recipe must be a ShadowRecipe, got {type(self.recipe).__name__}")
        if not isinstance(self.training, ShadowTraining):
            raise v.invalid_type("training", f"training must be a ShadowTraining, got {type(self.training).__name__}")

    @property
    def ids_digest(self) -> str:
        return hashlib.sha256(self.train_ids.tobytes()).hexdigest()[:16]

    @property
    def shadow_id(self) -> str:
        """Stable id: the same spec always maps to the same cache directory."""
        config: dict[str, object] = {
            "training": self.training.to_dict(),
            "model_options": dict(self.model_options),
            "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
            "num_train": int(self.train_ids.size),
            "train_ids_sha256": self.ids_digest,
        }
        if not self.recipe.empty:  # kept out of the hash when empty, so plain-SGD shadow ids stay as they were
            config["recipe"] = self.recipe.to_dict()
        return make_model_id(
            defense="shadow", dataset=self.dataset, model_name=self.model_name, seed=self.seed, config=config
        )


def plan_shadows(
    *,
    template: TrainedModel,
    pool_ids: np.ndarray | Sequence[int],
    num_shadows: int,
    seed: int,
    kind: str,
    train_size: int | None = None,
    training: ShadowTraining | None = None,
    recipe: ShadowRecipe | None = None,
) -> list[ShadowSpec]:
    """Shadow specs in complementary pairs over ``pool_ids`` (see the module docstring).

    Args:
        template: the target's record (architecture, dataset, training config).
        pool_ids: ids the shadows' training sets are drawn from.
        num_shadows: number of shadow models, >= 1.
        seed: root seed of the plan; pair ``j`` of pool ``kind`` draws from its own stream,
            so the first shadows of a larger plan equal those of a smaller one.
        kind: ``online`` or ``offline`` (names the stream).
        train_size: ids per shadow (default: the target's number of members), capped at half
            the pool.
        training: SGD hyperparameters (default: from the target's config).
        recipe: what a custom trainer needs (see :class:`ShadowSpec`); empty for plain SGD.

    Returns:
        ``num_shadows`` specs.

    Raises:
        ValueError: fewer than 2 pool ids, or bad counts.
    """
    num_shadows = v.integer("num_shadows", num_shadows, minimum=1)
    kind = v.choice("kind", kind, POOL_KINDS)
    pool = sorted_id_set("pool_ids", pool_ids)
    if pool.size < 2:
        raise v.invalid(
            "pool_ids", f"pool_ids must hold at least 2 ids to draw shadow training sets from, got {pool.size}"
        )
    default = max(len(template.membership.members), 1)
    m = v.integer("train_size", train_size if train_size is not None else default, minimum=1)
    m = min(m, pool.size // 2)
    training = training or ShadowTraining.from_config(template.config)
    specs = []
    for i in range(num_shadows):
        pair, side = divmod(i, 2)
        perm = numpy_rng(seed, "shadows", kind, pair).permutation(pool)
        ids = perm[:m] if side == 0 else perm[m : 2 * m]
        specs.append(
            ShadowSpec(
                dataset=template.dataset,
                model_name=template.model_name,
                model_options=dict(template.model_options),
                input_shape=template.input_shape,
                num_classes=template.num_classes,
                training=training,
                train_ids=ids,
                seed=derive_seed(seed, "shadow-training", kind, i),
                recipe=recipe or ShadowRecipe(),
            )
        )
    return specs


def _build(spec: ShadowSpec) -> nn.Module:
    if spec.model_name.startswith("external:"):
        fn = resolve_callable(spec.model_name.removeprefix("external:"), argument="model_name")
        model = fn()
        if not isinstance(model, nn.Module):
            raise v.invalid(
                "model_fn",
                f"model builder {spec.model_name!r} must return a torch.nn.Module, got {type(model).__name__}",
            )
        return model
    options = dict(spec.model_options)
    # The options are free-form JSON; the one the builder types itself is narrowed here.
    noise_layer = options.pop("noise_layer", False)
    if not isinstance(noise_layer, bool):
        raise v.invalid_type("model_options", f"model_options noise_layer must be true or false, got {noise_layer!r}")
    return build_model(
        spec.model_name,
        input_shape=spec.input_shape,
        num_classes=spec.num_classes,
        noise_layer=noise_layer,
        **options,
    )


def train_shadow(
    spec: ShadowSpec, *, bundle: DatasetBundle, device: torch.device | str = "cpu"
) -> tuple[TrainedModel, nn.Module]:
    """Trains one shadow model with non-private mini-batch SGD, deterministically from its seed.

    Args:
        spec: what to train.
        bundle: the dataset (``spec.train_ids`` are looked up in ``bundle.all()``).
        device: where to train.

    Returns:
        The shadow's record (members = its training ids) and the module in eval mode.
    """
    started = time.monotonic()
    device = torch.device(device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(spec.seed, "init"))  # inside fork_rng: global state restored after
        model = _build(spec)
    model.to(device).train()
    cfg = spec.training
    opt = torch.optim.SGD(
        model.parameters(), lr=cfg.learning_rate, momentum=cfg.momentum, weight_decay=cfg.weight_decay
    )
    data = bundle.all().subset(spec.train_ids)
    x, y = data.features.to(device), data.labels.to(device)
    gen = torch_generator(spec.seed, "batches")
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(cfg.epochs):
        for idx in shuffled_batches(len(x), cfg.batch_size, generator=gen):
            idx = idx.to(device)
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x[idx]), y[idx]).backward()
            opt.step()
    model.eval()
    return _sgd_record(spec, model, bundle=bundle, device=device, seconds=time.monotonic() - started), model


def _sgd_record(
    spec: ShadowSpec,
    model: nn.Module,
    *,
    bundle: DatasetBundle,
    device: torch.device | str,
    seconds: float,
    stats: Mapping[str, float] | None = None,
) -> TrainedModel:
    """The record of a plain-SGD shadow: its members, its fit on them and its training time."""
    cfg = spec.training
    data = bundle.all().subset(spec.train_ids)
    fit = evaluate(model, data.features.to(device), data.labels.to(device), device=device)
    return TrainedModel(
        model_id=spec.shadow_id,
        defense="shadow",
        model_name=spec.model_name,
        model_options=dict(spec.model_options),
        dataset=spec.dataset,
        input_shape=spec.input_shape,
        num_classes=spec.num_classes,
        config={**cfg.to_dict(), "train_ids_sha256": spec.ids_digest},
        claim=NonPrivateClaim(),
        membership=Membership(members=spec.train_ids, non_members=np.zeros(0, dtype=np.int64)),
        seed=spec.seed,
        metrics={
            "train_accuracy": fit["accuracy"],
            "train_loss": fit["loss"],
            "train_seconds": seconds,
        },
        provenance=provenance(device=str(device)),
    )


#: ``trainer(spec, *, bundle, device) -> (record, module)``: a custom way to train one shadow.
ShadowTrainer = Callable[..., tuple[TrainedModel, nn.Module]]


def train_shadow_job(
    *,
    spec: Mapping[str, object],
    data_root: str | None = None,
    device: str = "cpu",
    trainer: ShadowTrainer | None = None,
) -> dict[str, object]:
    """Executor job: trains the shadow described by ``spec`` (a :meth:`ShadowSpec.to_dict`).

    Returns plain data (:func:`dpaudit.model_cache.pack_model`: the record as a dict and the
    weights as NumPy arrays) rather than writing files, so the job also works on Ray nodes
    that do not share the run directory; the caller persists it.

    Args:
        spec: the shadow, as plain data.
        data_root: the data root.
        device: where to train.
        trainer: a module-level (picklable) function trained instead of :func:`train_shadow`.
    """
    shadow = ShadowSpec.from_dict(spec)
    bundle = load_dataset(shadow.dataset, data_root=data_root)  # cached per worker process
    record, model = (trainer or train_shadow)(shadow, bundle=bundle, device=device)
    return pack_model(record, model)


@dataclass(frozen=True, kw_only=True, eq=False)
class ShadowBatch:
    """How one shadow trains as part of a batched group (:func:`dpaudit.batched.train_batched`).

    Attributes:
        config: the batched trainer's mode and hyperparameters (shared by the group).
        schedule: the learning rate of each step (DP-SGD's decay), or ``None``.
        record: ``record(spec, model, bundle=…, device=…, seconds=…, stats=…)``: the shadow's
            record, as its one-at-a-time trainer writes it (``seconds``: its share of the
            group's time; ``stats``: its ``num_steps``, ``mean_lot_size`` and
            ``train_loss_mean`` from the batched run).
    """

    config: BatchedSGD | BatchedDPSGD
    schedule: Callable[[int], float] | None = None
    record: Callable[..., TrainedModel]


#: ``batcher(spec, *, bundle) -> ShadowBatch | None``: how ``spec`` trains batched, or ``None``
#: when its training mode is one the batched trainer does not have (it then trains alone).
#: Module-level (picklable): batched jobs run in worker processes.
ShadowBatcher = Callable[..., "ShadowBatch | None"]


def sgd_batch(spec: ShadowSpec, *, bundle: DatasetBundle) -> ShadowBatch | None:
    """Plain-SGD shadows (an empty recipe, :func:`train_shadow`): the batched trainer's non-private mode.

    :func:`train_shadow` and the batched non-private mode run the same loop: momentum SGD on
    the mean cross-entropy of seeded shuffled batches, initialised from the ``init`` stream.
    """
    if not spec.recipe.empty and spec.recipe.defense is not None:
        return None
    return ShadowBatch(config=spec.training, record=_sgd_record)


def _group_key(spec: ShadowSpec) -> str:
    """Shadows train in one batched group when everything but their members and seed agrees."""
    digest = hashlib.sha256()
    for part in (
        spec.dataset,
        spec.model_name,
        repr(sorted(spec.model_options.items())),
        repr(spec.input_shape),
        str(spec.num_classes),
        repr(spec.training.to_dict()),
        repr(spec.recipe.to_dict()),
        str(spec.train_ids.size),  # DP-SGD's plan (q, σ, steps) depends on the number of members
    ):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def train_shadow_batch_job(
    *,
    specs: Sequence[Mapping[str, object]],
    data_root: str | None = None,
    device: str = "cpu",
    batcher: ShadowBatcher,
) -> list[dict[str, object]]:
    """Executor job: trains the shadows ``specs`` (one group, as plain data) as one batched computation.

    The pool is the union of their training ids in id order, so each model's members come in
    the order its own run sees them; every model is initialised, shuffled, sampled and noised
    from its own seed's streams (:mod:`dpaudit.batched`).

    Returns:
        :func:`dpaudit.model_cache.pack_model` of each shadow, in the order of ``specs``.
    """
    shadows = [ShadowSpec.from_dict(s) for s in specs]
    bundle = load_dataset(shadows[0].dataset, data_root=data_root)
    batch = batcher(shadows[0], bundle=bundle)
    if batch is None:
        raise v.invalid("batcher", f"batcher has no batched mode for shadow {shadows[0].shadow_id!r}")
    started = time.monotonic()
    run = train_batched_on_ids(
        functools.partial(_build, shadows[0]),
        bundle.all(),
        [s.train_ids for s in shadows],
        seeds=[s.seed for s in shadows],
        config=batch.config,
        schedule=batch.schedule,
        device=device,
        label="shadow models",
    )
    seconds = (time.monotonic() - started) / len(shadows)
    out = []
    for j, (spec, model) in enumerate(zip(shadows, run.models, strict=True)):
        stats = {
            "num_steps": run.num_steps[j],
            "mean_lot_size": run.mean_lot_sizes[j],
            "train_loss_mean": run.train_loss_means[j],
        }
        record = batch.record(spec, model.eval(), bundle=bundle, device=device, seconds=seconds, stats=stats)
        out.append(pack_model(record, model))
    return out


def _train_batched_groups(
    specs: Sequence[ShadowSpec],
    *,
    batcher: ShadowBatcher,
    directory: str | os.PathLike[str] | None,
    executor: Executor,
    data_root: str | None,
    device: str,
    progress: bool,
    on_trained: Callable[[ShadowSpec, TrainedModel], None] | None,
    total: int,
    done: int,
) -> dict[str, nn.Module]:
    """Trains ``specs`` (missing, batchable) in groups of at most ``MODELS_PER_BATCH``, saving each as it returns."""
    groups: dict[str, list[ShadowSpec]] = {}
    for s in specs:
        groups.setdefault(_group_key(s), []).append(s)
    jobs: list[Job] = []
    by_job: dict[str, list[ShadowSpec]] = {}
    for key, members in groups.items():
        # Groups of a fixed size, whatever the executor: the same run trains bit-identical
        # shadows in one process or on many workers.
        for i in range(0, len(members), MODELS_PER_BATCH):
            part = members[i : i + MODELS_PER_BATCH]
            by_job[f"batch-{key}-{i}"] = part
            jobs.append(
                Job(
                    key=f"batch-{key}-{i}",
                    fn=train_shadow_batch_job,
                    kwargs={
                        "specs": [p.to_dict() for p in part],
                        "data_root": data_root,
                        "device": device,
                        "batcher": batcher,
                    },
                )
            )
    root = os.fspath(directory) if directory is not None else None
    models: dict[str, nn.Module] = {}
    label = f"shadow models (batched, {executor.name}, {executor.workers} workers)"
    with Progress(total, label, enabled=progress) as bar:
        bar.count = done
        with bar.heartbeat():
            for job, outs in executor.run(jobs):
                for spec, out in zip(by_job[job.key], outs, strict=True):
                    record = TrainedModel.from_dict(out["record"])
                    with torch.random.fork_rng(devices=[]):
                        model = unpack_state(_build(spec), out["state"])
                    if root is not None:
                        save_record(record, model, os.path.join(root, spec.shadow_id))
                        record = load_record(os.path.join(root, spec.shadow_id))  # as stored: with its digest
                    models[spec.shadow_id] = model
                    bar.update(1)
                    if on_trained is not None:
                        on_trained(spec, record)
    return models


@dataclass(frozen=True, kw_only=True)
class ShadowRun:
    """Shadow models ready for an attack.

    Attributes:
        specs: the specs, in plan order.
        models: the trained modules (eval mode), aligned with ``specs``.
        trained: ids trained by this call.
        reused: ids loaded from the cache.
    """

    specs: tuple[ShadowSpec, ...]
    models: tuple[nn.Module, ...]
    trained: tuple[str, ...]
    reused: tuple[str, ...]


def ensure_shadows(
    specs: Sequence[ShadowSpec],
    *,
    directory: str | os.PathLike[str] | None,
    executor: Executor | None = None,
    data_root: str | os.PathLike[str] | None = None,
    device: str = "cpu",
    progress: bool = True,
    on_trained: Callable[[ShadowSpec, TrainedModel], None] | None = None,
    trainer: ShadowTrainer | None = None,
    batcher: ShadowBatcher | None = sgd_batch,
) -> ShadowRun:
    """Loads the cached shadows among ``specs`` and trains the rest through ``executor``.

    Each model is saved (atomically) as soon as its job returns, before ``on_trained`` is
    called; if training stops early — an exception from a job or from ``on_trained``, or
    Ctrl-C — everything saved so far is kept and a rerun trains only what is missing.

    Args:
        specs: the shadows wanted.
        directory: the cache (``RunDir.shadow_dir()``); ``None`` keeps nothing on disk.
        executor: where jobs run (default: in this process).
        data_root: the data root, passed to workers.
        device: where workers train.
        progress: report on stderr.
        on_trained: called in this process after each newly trained shadow was saved.
        trainer: trains one shadow instead of :func:`train_shadow` (module-level, so that
            process pools can send it); the specs' ``recipe`` should say what it does.
        batcher: says how a missing shadow trains batched with others like it (module
            docstring); shadows it declines, and every shadow when ``batcher`` is ``None``,
            train one at a time through ``trainer``. The default, :func:`sgd_batch`, batches
            plain-SGD shadows, and only when no ``trainer`` is given.

    Returns:
        The models, aligned with ``specs``.
    """
    specs = list(specs)
    by_id: dict[str, ShadowSpec] = {}
    for s in specs:
        if not isinstance(s, ShadowSpec):
            raise v.invalid_type("specs", f"specs must hold ShadowSpec values, got {type(s).__name__}")
        by_id[s.shadow_id] = s
    root_text = os.fspath(data_root) if data_root is not None else None
    batched: dict[str, nn.Module] = {}
    if trainer is not None and batcher is sgd_batch:
        batcher = None  # a custom trainer decides how its shadows train: plain SGD must not stand in for it
    if batcher is not None:
        missing = [s for sid, s in by_id.items() if directory is None or not is_cached(directory, sid)]
        if missing:
            bundle = load_dataset(missing[0].dataset, data_root=root_text)
            # Asked once per group: a DP-SGD plan (σ calibrated to a budget) is costly to make.
            verdicts: dict[str, bool] = {}
            for s in missing:
                key = _group_key(s)
                if key not in verdicts:
                    verdicts[key] = batcher(s, bundle=bundle) is not None
            todo = [s for s in missing if verdicts[_group_key(s)]]
            if todo:
                batched = _train_batched_groups(
                    todo,
                    batcher=batcher,
                    directory=directory,
                    executor=executor or SerialExecutor(),
                    data_root=root_text,
                    device=device,
                    progress=progress,
                    on_trained=on_trained,
                    total=len(by_id),
                    done=len(by_id) - len(missing),
                )
    jobs = [
        ModelJob(
            key=sid,
            fn=train_shadow_job,
            kwargs={"spec": spec.to_dict(), "data_root": root_text, "device": device, "trainer": trainer},
            build=functools.partial(_build, spec),
            # An external target's shadows are built by the builder the user passed now, never by
            # whatever a cached record names.
            external_builder=spec.model_name.removeprefix("external:")
            if spec.model_name.startswith("external:")
            else None,
        )
        for sid, spec in by_id.items()
        if sid not in batched
    ]
    notify = None if on_trained is None else (lambda key, record, _model: on_trained(by_id[key], record))
    cached = ensure_models(
        jobs, directory=directory, executor=executor, label="shadow models", progress=progress, on_trained=notify
    )
    models = {**batched, **dict(zip(cached.keys, cached.models, strict=True))}
    return ShadowRun(
        specs=tuple(specs),
        models=tuple(models[s.shadow_id] for s in specs),
        trained=(*batched, *cached.trained),
        reused=cached.reused,
    )
