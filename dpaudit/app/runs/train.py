"""Train a registered defense, or reuse its stored record: the one place that does either.

``dpaudit train``, the membership run (targets and shadows), the audit and certify scripts and
the benchmarks all obtain a trained record through :func:`train_or_load`, so a record is found
again by the same id whoever asks for it (DESIGN.md, "runs/").
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpaudit import _validate as v
from dpaudit.results.record import TrainedModel
from dpaudit.store import RunDir

__all__ = ["TrainSpec", "TrainOutcome", "train_or_load", "default_config"]


def default_config(defense: str, **overrides: Any) -> Any:
    """The defense's config with ``overrides`` (raises ValueError naming a bad defense or field)."""
    from defenses import DEFENSES

    spec = DEFENSES.get(defense)
    if spec is None:
        raise ValueError(f"defense must be one of {', '.join(DEFENSES)}, got {defense!r}")
    names = {f.name for f in dataclasses.fields(spec.config_type)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(f"{', '.join(unknown)} {'is' if len(unknown) == 1 else 'are'} not a field of the {defense} config (fields: {', '.join(sorted(names))})")
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
    """

    defense: str
    model: str
    config: Any = None
    dataset: str = "digits"
    model_options: Mapping[str, Any] = field(default_factory=dict)
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

    def __post_init__(self) -> None:
        from defenses import DEFENSES
        from dpaudit.models import MODELS

        if self.defense not in DEFENSES:
            raise ValueError(f"defense must be one of {', '.join(DEFENSES)}, got {self.defense!r}")
        config_type = DEFENSES[self.defense].config_type
        if self.config is None:
            object.__setattr__(self, "config", config_type())
        elif not isinstance(self.config, config_type):
            raise TypeError(f"config must be a {config_type.__name__} for defense {self.defense!r}, got {type(self.config).__name__}")
        if self.model not in MODELS:
            raise ValueError(f"model must be one of {', '.join(MODELS)}, got {self.model!r}")
        v.integer("seed", self.seed, minimum=0)
        if self.split_seed is not None:
            v.integer("split_seed", self.split_seed, minimum=0)
        v.open_unit("member_fraction", self.member_fraction)
        from dpaudit.executors import EXECUTORS

        v.choice("executor", self.executor, EXECUTORS)
        if self.num_workers is not None:
            v.integer("num_workers", self.num_workers, minimum=1)
        if self.address is not None and self.executor != "ray":
            raise ValueError(f"address={self.address!r} needs executor 'ray', got {self.executor!r}")
        object.__setattr__(self, "model_options", dict(self.model_options))


@dataclass(frozen=True, kw_only=True)
class TrainOutcome:
    """A trained (or reused) record.

    Attributes:
        record: the torch-free record.
        model: the model, on the spec's device, in eval mode.
        record_dir: where the record is stored.
        reused: whether the record was found rather than trained.
    """

    record: TrainedModel
    model: Any
    record_dir: Path
    reused: bool


def _refuse_unmeetable_budget(config: Any, *, num_members: int) -> None:
    """A DP-SGD run whose σ and epochs exceed its target ε is refused before anything is written."""
    from defenses.dpsgd import DPSGDConfig, plan_dpsgd

    if isinstance(config, DPSGDConfig) and None not in (config.target_epsilon, config.noise_multiplier, config.epochs):
        plan_dpsgd(config, num_members=num_members)  # raises ValueError naming the steps the budget allows


def train_or_load(spec: TrainSpec, run: RunDir, *, bundle: Any = None, splits: Any = None) -> TrainOutcome:
    """Trains ``spec`` into ``run`` unless a record with the same id is already stored there.

    Args:
        spec: what to train.
        run: the run directory (created if needed).
        bundle: the loaded dataset, when the caller has it (else loaded from ``spec``).
        splits: explicit membership splits (shadow models); default drawn from ``spec``.

    Returns:
        The record, its model and whether it was reused.
    """
    from defenses import DEFENSES, model_id_for
    from dpaudit.app.estimate import PER_EXAMPLE_GRADIENT_FACTOR, announce_if_long, seconds_per_example
    from dpaudit.data import load_dataset, make_splits
    from dpaudit.locks import unit_lock
    from dpaudit.results.record import RECORD_FILE, WEIGHTS_FILE, load_record
    from dpaudit.training import resolve_device
    from dpaudit.weights import load_model, save_record

    device = resolve_device(spec.device)
    if bundle is None:
        bundle = load_dataset(spec.dataset, data_root=spec.data_root)
    if splits is None:
        splits = make_splits(bundle, seed=spec.split_seed if spec.split_seed is not None else spec.seed, member_fraction=spec.member_fraction)
    _refuse_unmeetable_budget(spec.config, num_members=len(splits.members))
    model_id = model_id_for(defense=spec.defense, bundle=bundle, model_name=spec.model, model_options=dict(spec.model_options), config=spec.config, splits=splits, seed=spec.seed)
    run = run.create(command=" ".join(["dpaudit", *sys.argv[1:]]))
    rdir = run.record_dir(model_id)
    with unit_lock(run.path, f"record-{model_id}"):  # one writer per record: a second `train` is refused, not duplicated
        if (rdir / RECORD_FILE).is_file() and not spec.force:
            if (rdir / WEIGHTS_FILE).is_file():
                return TrainOutcome(record=load_record(rdir), model=load_model(rdir, device=device), record_dir=rdir, reused=True)
            # A record without its weights is incomplete (an interrupted copy, a deleted file): never "reuse" it.
            print(f"record {model_id} in {rdir} has no {WEIGHTS_FILE}; training it again", file=sys.stderr)
        entry = DEFENSES[spec.defense]
        if spec.progress:
            epochs = float(getattr(spec.config, "epochs", None) or 10)
            per_example = seconds_per_example(spec.model, input_shape=bundle.input_shape, num_classes=bundle.num_classes, device=str(device), model_options=dict(spec.model_options))
            # Only DP-SGD-style claims pay for per-example gradients (PATE's teachers train plainly).
            factor = PER_EXAMPLE_GRADIENT_FACTOR if entry.claim_kind_for(spec.config) == "dp" else 1.0
            announce_if_long(epochs * len(splits.members) * per_example * factor, f"training {spec.defense} for {epochs:g} epochs", hint="--epochs changes it")
        extra: dict[str, Any] = {}
        if entry.submodels is not None:
            from dpaudit.training import TrainWorkspace

            extra["workspace"] = TrainWorkspace(
                record_dir=rdir, cache_dir=run.submodel_dir(entry.submodels), executor=spec.executor, num_workers=spec.num_workers, address=spec.address, data_root=spec.data_root
            )
        record, model = entry.train(
            bundle=bundle, splits=splits, model_name=spec.model, model_options=dict(spec.model_options), config=spec.config, seed=spec.seed, device=device, progress=spec.progress, **extra
        )
        save_record(record, model, rdir)
        model.eval()
        # As stored (with its weights' digest), so a fresh and a reused outcome carry the same record.
        return TrainOutcome(record=load_record(rdir), model=model, record_dir=rdir, reused=False)
