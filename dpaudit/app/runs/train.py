"""Train a registered defense, or reuse its stored record: the one place that does either.

``dpaudit train``, the membership run (targets and shadows), the audit and certify scripts and
the benchmarks all obtain a trained record through :func:`train_or_load`, so a record is found
again by the same id whoever asks for it (docs/architecture.md, "The runs API").
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpaudit import _validate as v
from dpaudit.results.record import TrainedModel
from dpaudit.specs import PlainSpec
from dpaudit.store import RunDir
from dpaudit.train_request import TrainRequest

if TYPE_CHECKING:
    from dpaudit.training import TrainWorkspace

__all__ = [
    "TrainSpec",
    "TrainOutcome",
    "train_or_load",
    "resolve_inputs",
    "default_config",
    "resolve_defaults",
    "DATA_FILES_KEY",
    "CHANCE_MARGIN",
    "LOSS_MARGIN",
    "ChanceCheck",
    "chance_check",
    "chance_evidence",
    "guess_loss",
    "warn_if_near_chance",
]

#: Test accuracy at most this far above chance counts as "trained to chance" (2 points).
CHANCE_MARGIN = 0.02
#: A training loss less than this far below the loss of guessing (nats) counts as "trained to
#: chance" too: the members' true class gets on average at most e^0.05 ≈ 1.05 times the
#: probability a constant guess gives it.
LOSS_MARGIN = 0.05


def default_config(defense: str, **overrides: Any) -> Any:
    """The defense's config with ``overrides`` (raises ValueError naming a bad defense or field)."""
    from defenses import DEFENSES

    spec = DEFENSES.get(defense)
    if spec is None:
        raise v.invalid("defense", f"defense must be one of {', '.join(DEFENSES)}, got {defense!r}")
    names = {f.name for f in dataclasses.fields(spec.config_type)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise v.invalid(
            unknown[0],
            f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a "
            f"field of the {defense} config (fields: {', '.join(sorted(names))})",
        )
    return spec.config_type(**overrides)


@dataclass(frozen=True, kw_only=True)
class TrainSpec:
    """What to train.

    Attributes:
        defense: a key of :data:`defenses.DEFENSES`.
        config: an instance of that defense's ``config_type`` (``None``: its defaults).
        model: zoo architecture (:data:`dpaudit.models.MODELS`).
        dataset: dataset name (:data:`dpaudit.data.DATASETS`).
        model_options: options of the architecture.
        seed: root seed of the training.
        split_seed: seed of the member/non-member split (``None``: ``seed``).
        member_fraction: share of the training pool used as members.
        data_root: where datasets live (``None``: the default resolution).
        device: ``auto``, ``cpu`` or ``cuda[:N]``.
        force: retrain even when the record exists.
        progress: progress on stderr.
        executor: where a defense's sub-models train (PATE's teachers): ``local``, ``ray`` or
            ``serial``.
        num_workers: their parallel workers (``None``: the executor's default).
        address: Ray cluster address.
        ship_code: Ray sends this checkout's packages to the workers (:mod:`dpaudit.cluster`).
        i_know: accept sizes above the documented limits (the config's epochs, batch size,
            teachers…, each declared with its field; :data:`dpaudit.limits.LIMITS`), as
            ``--i-know`` does on the command line.
    """

    defense: str
    model: str
    config: Any = None
    dataset: str = "digits"
    model_options: Mapping[str, object] = field(default_factory=dict)
    seed: int = 0
    split_seed: int | None = None
    member_fraction: float = 0.5
    data_root: str | None = None
    device: str = "auto"
    force: bool = False
    progress: bool = True
    executor: str = "local"
    num_workers: int | None = None
    address: str | None = None
    ship_code: bool = False
    i_know: bool = False

    def __post_init__(self) -> None:
        from defenses import DEFENSES
        from dpaudit.limits import check_sizes
        from dpaudit.models import MODELS
        from dpaudit.options import check_config_sizes

        if self.defense not in DEFENSES:
            raise v.invalid("defense", f"defense must be one of {', '.join(DEFENSES)}, got {self.defense!r}")
        config_type = DEFENSES[self.defense].config_type
        if self.config is None:
            object.__setattr__(self, "config", config_type())
        elif not isinstance(self.config, config_type):
            raise v.invalid_type(
                "config",
                f"config must be a {config_type.__name__} for defense {self.defense!r}, "
                f"got {type(self.config).__name__}",
            )
        if self.model not in MODELS:
            raise v.invalid("model", f"model must be one of {', '.join(MODELS)}, got {self.model!r}")
        v.integer("seed", self.seed, minimum=0)
        if self.split_seed is not None:
            v.integer("split_seed", self.split_seed, minimum=0)
        v.open_unit("member_fraction", self.member_fraction)
        from dpaudit.executors import EXECUTORS

        v.choice("executor", self.executor, EXECUTORS)
        if self.num_workers is not None:
            v.integer("num_workers", self.num_workers, minimum=1)
        if self.address is not None and self.executor != "ray":
            raise v.invalid("address", f"address={self.address!r} needs executor 'ray', got {self.executor!r}")
        check_sizes(self, {"num_workers": "workers"})
        check_config_sizes(self.config, i_know=self.i_know)
        object.__setattr__(self, "model_options", dict(self.model_options))


@dataclass(frozen=True, kw_only=True)
class TrainOutcome:
    """A trained (or reused) record.

    Attributes:
        record: the torch-free record.
        model: the model, on the spec's device, in eval mode.
        record_dir: where the record is stored.
        reused: whether the record was found rather than trained.
        data_files: the dataset's identity the record was made from and checked against
            (:func:`dpaudit.data.dataset_files`); empty for bundled data such as ``digits``,
            and for a reused record made before records kept it.
    """

    record: TrainedModel
    model: Any
    record_dir: Path
    reused: bool
    data_files: Mapping[str, str] = field(default_factory=dict)


#: Where a record keeps the identity of the data it was trained on (:func:`dpaudit.data.dataset_files`).
DATA_FILES_KEY = "dataset_files"


def _stale_data(record: TrainedModel, dataset: str, data: Mapping[str, str], rdir: Path) -> bool:
    """Whether ``record`` was trained on other files of ``dataset`` than ``data`` (said on stderr).

    A record made before records named their files cannot be checked: it is reused, saying so.
    """
    from dpaudit.data.registry import changed_files
    from dpaudit.store import thaw

    stored = record.provenance.get(DATA_FILES_KEY)
    if stored is None:
        if data:
            print(
                f"record {record.model_id} in {rdir} predates dataset checksums: its "
                f"files of dataset {dataset} cannot be checked (pass --force to retrain)",
                file=sys.stderr,
            )
        return False
    stored = thaw(stored)
    if stored == dict(data):
        return False
    print(
        f"recomputing: dataset {dataset}'s files changed since the stored record "
        f"{record.model_id} ({changed_files(stored, dict(data))}); training it "
        "again",
        file=sys.stderr,
    )
    return True


#: In a sub-model cache (PATE's teachers): dataset name → the files its cached sub-models were trained on.
SUBMODEL_DATA_FILE = "dataset_files.json"


def _submodel_cache(cache: Path, *, dataset: str, data: Mapping[str, str], label: str) -> Path:
    """``cache``, with the sub-models of ``dataset`` trained on other files moved aside (said on stderr).

    Sub-models are keyed by what they are (teacher index, ids, training), not by the data's
    files; the cache remembers, per dataset, which files its sub-models were trained on, so a
    file replaced under the data root never hands back a teacher of the old data. A cache made
    before it remembered this is taken to hold the current data.
    """
    import shutil

    from dpaudit.data.registry import changed_files
    from dpaudit.results.record import RECORD_FILE
    from dpaudit.store import atomic_write_json, read_json

    if not data:  # bundled data (digits) has a fixed identity
        return cache
    marker = cache / SUBMODEL_DATA_FILE
    try:
        known = read_json(marker) if marker.is_file() else {}
    except ValueError:
        known = {}
    known = known if isinstance(known, dict) else {}
    old = known.get(dataset)
    if old is not None and old != dict(data):
        aside = cache.parent / f"{cache.name}-stale"
        moved = 0
        for entry in sorted(cache.iterdir()) if cache.is_dir() else ():
            try:
                made_of = read_json(entry / RECORD_FILE).get("dataset") if (entry / RECORD_FILE).is_file() else None
            except (ValueError, AttributeError):
                made_of = None
            if made_of == dataset:
                (aside / entry.name).parent.mkdir(parents=True, exist_ok=True)
                target = aside / entry.name
                if target.exists():  # an older stale copy of the same sub-model
                    shutil.rmtree(target)
                entry.rename(target)
                moved += 1
        print(
            f"recomputing: dataset {dataset}'s files changed since the {label} "
            f"cached in {cache} ({changed_files(old, dict(data))}); {moved} moved to "
            f"{aside}",
            file=sys.stderr,
        )
    if old != dict(data):
        cache.mkdir(parents=True, exist_ok=True)
        atomic_write_json(marker, {**known, dataset: dict(data)})
    return cache


def _checkpoint_dir(run: RunDir, model_id: str, *, data: Mapping[str, str], fresh: bool) -> Path:
    """``RUN_DIR/checkpoints/<model_id>/``: where the training of ``model_id`` keeps its checkpoints.

    Checkpoints made from other files of the dataset (a file replaced under the data root), and
    with ``fresh`` (``--force``: train anew) any checkpoint, are deleted first, saying so.
    """
    from dpaudit.checkpoint import CHECKPOINTS_DIR, remove_checkpoints
    from dpaudit.store import atomic_write_json, read_json

    path = run.path / CHECKPOINTS_DIR / model_id
    marker = path / SUBMODEL_DATA_FILE
    if path.is_dir():
        try:
            made_of = read_json(marker) if marker.is_file() else {}
        except ValueError:
            made_of = None
        why = "--force" if fresh else None if made_of == dict(data) else "the dataset's files changed"
        if why is not None:
            print(
                f"discarding the checkpoints of {model_id} in {path} ({why}); training from the start", file=sys.stderr
            )
            remove_checkpoints(path)
    if data and not marker.is_file():
        atomic_write_json(marker, dict(data))
    return path


def _spec_of(config: Any) -> Any:
    """The registered defense of ``config``: the one whose config type is its class or nearest base (``None``: none)."""
    from defenses import DEFENSES

    by_type = {spec.config_type: spec for spec in DEFENSES.values()}
    return next((by_type[cls] for cls in type(config).__mro__ if cls in by_type), None)


def _refuse_unmeetable_budget(
    config: Any, *, bundle: Any, splits: Any, model_name: str, model_options: Mapping[str, object]
) -> None:
    """A run whose privacy budget cannot be met (DP-SGD's, PATE's, DSSGD's) is refused before anything is written.

    The defense's ``check_budget`` raises ValueError naming what the budget allows.
    """
    spec = _spec_of(config)
    if spec is not None and spec.check_budget is not None:
        spec.check_budget(config, bundle=bundle, splits=splits, model_name=model_name, model_options=model_options)


@dataclass(frozen=True, kw_only=True)
class ChanceCheck(PlainSpec):
    """What a record's metrics say about a model no better than guessing (merged into its metrics, in this order).

    Attributes:
        chance_accuracy: the larger of 1/num_classes and the test set's majority-class rate.
        near_chance: the model learned (almost) nothing: its test accuracy is within
            :data:`CHANCE_MARGIN` of ``chance_accuracy``, or its training loss is within
            :data:`LOSS_MARGIN` of ``guess_loss`` or above it.
        guess_loss: the cross-entropy of guessing the test set's class frequencies — their
            entropy, ln K for K balanced classes (``None``: no training loss was judged). The test
            set's, as for ``chance_accuracy``: nothing about the members is stored beside a claim.
        near_chance_by: what flagged it: ``"accuracy"``, ``"loss"``, ``"accuracy and loss"``
            (``None`` when not near chance).
    """

    chance_accuracy: float
    near_chance: bool
    guess_loss: float | None = None
    near_chance_by: str | None = None


def guess_loss(labels: Any, *, num_classes: int) -> float:
    """The cross-entropy of predicting ``labels``' class frequencies for every example: their entropy (nats).

    It is at most ln K, reached for K balanced classes: a model whose loss is no lower has learned
    nothing a constant guess does not know.
    """
    import numpy as np

    k = v.integer("num_classes", num_classes, minimum=1)
    y = np.asarray(labels).reshape(-1).astype(np.int64)
    if not len(y):
        return math.log(k)
    p = np.bincount(y, minlength=k) / len(y)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def chance_check(
    test_accuracy: float,
    test_labels: Any,
    *,
    num_classes: int,
    train_loss: float | None = None,
) -> ChanceCheck:
    """What a record's metrics say about a model no better than guessing.

    Chance is the larger of 1/num_classes and the test set's majority-class rate (what always
    predicting the commonest class scores); a test accuracy within :data:`CHANCE_MARGIN` of it
    is "near chance". Accuracy alone misses a model that barely moved on many classes (faces:
    test accuracy 0.05 against chance 0.025, training loss 3.685 against ln 40 = 3.689), so the
    final training loss is judged too: within :data:`LOSS_MARGIN` of :func:`guess_loss`, or
    above it, the configuration did not train either. Such a record must not look like a
    model worth attacking or releasing.

    Args:
        test_accuracy: the record's test accuracy.
        test_labels: the test set's labels (any array-like of class indices).
        num_classes: number of classes.
        train_loss: the model's mean cross-entropy on its members after training (``None``:
            judged by accuracy alone, e.g. for a randomized model, whose loss is a single
            noise draw's and not that of the prediction it releases).

    Returns:
        The chance accuracy, the guessing loss and whether the model is near either.
    """
    import numpy as np

    labels = np.asarray(test_labels).reshape(-1).astype(np.int64)
    majority = float(np.bincount(labels, minlength=num_classes).max() / len(labels)) if len(labels) else 0.0
    chance = max(1.0 / max(int(num_classes), 1), majority)
    by_accuracy = bool(float(test_accuracy) <= chance + CHANCE_MARGIN)
    guess = None
    by_loss = False
    if train_loss is not None:
        guess = guess_loss(labels, num_classes=num_classes)
        # A NaN loss never reaches here (the trainers stop on it); an infinite one is no learning.
        by_loss = bool(float(train_loss) >= guess - LOSS_MARGIN)
    reasons = [name for name, flagged in (("accuracy", by_accuracy), ("loss", by_loss)) if flagged]
    return ChanceCheck(
        chance_accuracy=chance,
        near_chance=bool(reasons),
        guess_loss=guess,
        near_chance_by=" and ".join(reasons) or None,
    )


def warn_if_near_chance(record: TrainedModel) -> str | None:
    """Prints (stderr) and returns the warning for a record trained to chance, else ``None``."""
    m = record.metrics
    if not m.get("near_chance"):
        return None
    from defenses import DEFENSES

    spec = DEFENSES.get(record.defense)
    hint = (spec.chance_hint if spec is not None else None) or "the training flags (--epochs, --learning-rate)"
    msg = (
        f"WARNING: model {record.model_id} ({record.defense}, "
        f"{record.model_name} on {record.dataset}) trained to chance: {chance_evidence(m)}. "
        f"Its attacks and audits say nothing about a useful model; change {hint} and retrain with --force"
    )
    print(msg, file=sys.stderr)
    return msg


def chance_evidence(metrics: Mapping[str, Any]) -> str:
    """The numbers that flagged a record as near chance (its metrics as :func:`chance_check` left them).

    A record stored before the loss was judged has no ``near_chance_by``: its flag came from accuracy.
    """
    by = str(metrics.get("near_chance_by") or "accuracy")
    parts = []
    if "accuracy" in by:
        parts.append(
            f"test accuracy {float(metrics['test_accuracy']):.4f} is within "
            f"{CHANCE_MARGIN:g} of chance {float(metrics['chance_accuracy']):.4f}"
        )
    if "loss" in by:
        parts.append(
            f"training loss {float(metrics['train_loss']):.4f} is not {LOSS_MARGIN:g} below "
            f"{float(metrics['guess_loss']):.4f}, the loss of guessing the class frequencies"
        )
    return "; ".join(parts)


def resolve_defaults(
    config: Any,
    *,
    num_members: int,
    model_name: str | None = None,
    model_options: Mapping[str, object] | None = None,
    bundle: Any = None,
) -> tuple[Any, str | None]:
    """A DP-SGD-style config (DP-SGD's, Secure-SGD's) with its unset training defaults derived.

    The values come from public facts only (N, ε, δ, and for Secure-SGD the model's first
    layer; :mod:`defenses.dp_defaults`). Resolved before the model id is digested, so the record,
    its id and its claim all carry the values that ran, and a run that names them explicitly
    finds the same record. Other configs come back unchanged.

    Args:
        config: the config as asked.
        num_members: N.
        model_name, model_options, bundle: the model and dataset it trains (needed for
            Secure-SGD, whose learning rate depends on how its first layer is normalised).

    Returns:
        (config, the line saying what was derived, or ``None``).
    """
    spec = _spec_of(config)
    if spec is None or spec.resolve_defaults is None:
        return config, None
    return spec.resolve_defaults(
        config, num_members=num_members, model_name=model_name, model_options=model_options, bundle=bundle
    )


def resolve_inputs(spec: TrainSpec, *, bundle: Any = None, splits: Any = None) -> tuple[Any, Any, Any, str | None]:
    """What a training of ``spec`` runs on: its dataset, its splits and its config with the defaults derived.

    :func:`train_or_load` and ``train --dry-run`` both resolve through it, so the plan a dry run
    prints is the plan of the run it stands for.

    Args:
        spec: what to train.
        bundle: the loaded dataset, when the caller has it (else loaded from ``spec``).
        splits: explicit membership splits (shadow models); default drawn from ``spec``.

    Returns:
        (bundle, splits, resolved config, the line saying which defaults were derived, or ``None``).
    """
    from dpaudit.data import load_dataset, make_splits

    if bundle is None:
        bundle = load_dataset(spec.dataset, data_root=spec.data_root)
    if splits is None:
        splits = make_splits(
            bundle,
            seed=spec.split_seed if spec.split_seed is not None else spec.seed,
            member_fraction=spec.member_fraction,
        )
    config, defaults = resolve_defaults(
        spec.config,
        num_members=len(splits.members),
        model_name=spec.model,
        model_options=dict(spec.model_options),
        bundle=bundle,
    )
    return bundle, splits, config, defaults


def train_or_load(spec: TrainSpec, run: RunDir, *, bundle: Any = None, splits: Any = None) -> TrainOutcome:
    """Trains ``spec`` into ``run`` unless a record with the same id, made from the same data, is stored there.

    The record keeps the checksums of the dataset files its training read
    (``provenance["dataset_files"]``, :func:`dpaudit.data.dataset_files`); a stored record whose
    files differ from the current ones (a file replaced under the data root, its ``MD5SUMS``
    updated) is trained again, saying why on stderr, never reused.

    Args:
        spec: what to train.
        run: the run directory (created if needed).
        bundle: the loaded dataset, when the caller has it (else loaded from ``spec``).
        splits: explicit membership splits (shadow models); default drawn from ``spec``.

    Returns:
        The record, its model and whether it was reused.
    """
    from defenses import DEFENSES
    from defenses._common import model_id_for
    from dpaudit.checkpoint import checkpoints_in, remove_checkpoints
    from dpaudit.data import dataset_files
    from dpaudit.locks import unit_lock
    from dpaudit.results.record import RECORD_FILE, WEIGHTS_FILE, load_record
    from dpaudit.training import resolve_device
    from dpaudit.weights import load_model, save_record

    device = resolve_device(spec.device)
    bundle, splits, config, defaults = resolve_inputs(spec, bundle=bundle, splits=splits)
    data = dataset_files(spec.dataset, data_root=spec.data_root)
    _refuse_unmeetable_budget(
        config, bundle=bundle, splits=splits, model_name=spec.model, model_options=dict(spec.model_options)
    )
    request = TrainRequest(
        bundle=bundle,
        splits=splits,
        model_name=spec.model,
        model_options=spec.model_options,
        config=config,
        seed=spec.seed,
        device=device,
        progress=bool(spec.progress),
    )
    model_id = model_id_for(request, defense=spec.defense)
    run = run.create(command=" ".join(["dpaudit", *sys.argv[1:]]))
    rdir = run.record_dir(model_id)
    with unit_lock(
        run.path, f"record-{model_id}"
    ):  # one writer per record: a second `train` is refused, not duplicated
        if (rdir / RECORD_FILE).is_file() and not spec.force:
            if not (rdir / WEIGHTS_FILE).is_file():
                # A record without its weights is incomplete (an interrupted copy, a deleted file): never "reuse" it.
                print(f"record {model_id} in {rdir} has no {WEIGHTS_FILE}; training it again", file=sys.stderr)
            else:
                from dpaudit.app.records import verify_record

                # A reused record is checked against itself like any loaded one (an edited claim or config is refused).
                stored = verify_record(load_record(rdir), rdir)
                if not _stale_data(stored, spec.dataset, data, rdir):
                    warn_if_near_chance(stored)  # said again on every reuse: it is still no useful model
                    checked = data if DATA_FILES_KEY in stored.provenance else {}
                    try:
                        return TrainOutcome(
                            record=stored,
                            model=load_model(rdir, device=device),
                            record_dir=rdir,
                            reused=True,
                            data_files=checked,
                        )
                    except v.InvalidArgument as exc:
                        # The id hashes the model's name and options, not its layers: a record made
                        # before an architecture changed (digits-mlp became 64 tanh units) is retrained.
                        if exc.argument != "weights":
                            raise
                        print(
                            f"record {model_id} in {rdir} was trained with an earlier {spec.model} "
                            f"architecture ({str(exc)[:160]}); training it again",
                            file=sys.stderr,
                        )
        entry = DEFENSES[spec.defense]
        if spec.progress and defaults is not None:
            print(f"{spec.defense} {defaults}", file=sys.stderr, flush=True)
        if spec.progress:
            from dpaudit.app.plan import announce_plan, train_plan

            # The same measured plan as `train --dry-run` prints (dpaudit.app.plan).
            announce_plan(train_plan(spec, bundle=bundle, splits=splits, config=config), hint="--epochs changes it")
        extra: dict[str, TrainWorkspace] = {}
        if entry.submodels is not None:
            from dpaudit.training import TrainWorkspace

            extra["workspace"] = TrainWorkspace(
                record_dir=rdir,
                cache_dir=_submodel_cache(
                    run.submodel_dir(entry.submodels), dataset=spec.dataset, data=data, label=entry.submodels
                ),
                executor=spec.executor,
                num_workers=spec.num_workers,
                address=spec.address,
                ship_code=spec.ship_code,
                data_root=spec.data_root,
            )
        # A training in progress keeps checkpoints under the record's id, so a rerun of the same
        # command continues it (dpaudit.checkpoint); they go once the record is written.
        checkpoints = _checkpoint_dir(run, model_id, data=data, fresh=spec.force)
        with checkpoints_in(checkpoints):
            record, model = entry.train(request, **extra)
        if data:  # bundled data (digits) has a fixed identity: its records keep their exact bytes
            record = dataclasses.replace(record, provenance={**record.provenance, DATA_FILES_KEY: dict(data)})
        if "test_accuracy" in record.metrics:
            # Never released silently: a model no better than guessing is flagged in its record
            # (attacks and reports read the metrics) and on stderr, not refused, so its run's
            # cost is kept and the numbers that show why stay inspectable.
            record = dataclasses.replace(
                record,
                metrics={
                    **record.metrics,
                    **chance_check(
                        record.metrics["test_accuracy"],
                        bundle.test.labels,
                        num_classes=bundle.num_classes,
                        # A randomized model's loss is one noise draw's, not its released prediction's.
                        train_loss=None
                        if "test_accuracy_draws" in record.metrics
                        else record.metrics.get("train_loss"),
                    ).to_dict(),
                },
            )
            warn_if_near_chance(record)
        save_record(record, model, rdir)
        remove_checkpoints(checkpoints)
        model.eval()
        # As stored (with its weights' digest), so a fresh and a reused outcome carry the same record.
        return TrainOutcome(record=load_record(rdir), model=model, record_dir=rdir, reused=False, data_files=data)
