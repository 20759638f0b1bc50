"""The model-inversion run: what ``dpaudit attack inversion`` does, callable from scripts and tests.

It loads a suite-trained target, trains (or reuses) the evaluation classifier on the target's
private training data and, for attacks with a prior (GMI), the prior on the public data; runs
each registered attack of :data:`attacks.inversion.INVERSION_ATTACKS` on the chosen classes;
judges every reconstruction with :func:`attacks.inversion.evaluate.evaluate_reconstructions`;
and stores one :class:`~dpaudit.results.inversion.InversionResult` per attack under
``RunDir.inversion_dir(model_id)``.

The evaluator and the priors are cached under ``RUN_DIR/attacks/inversion/models/`` keyed by
what they were trained on (dataset, the private ids or public classes, seed, options), so a
second target of the same dataset — a DP-SGD model beside a non-private one — is judged by the
same evaluator and attacked through the same GAN, which is what makes their rows comparable.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit import _validate as v
from dpaudit.locks import unit_lock
from dpaudit.results.inversion import InversionResult
from dpaudit.specs import PlainSpec, spec_field
from dpaudit.store import RunDir, atomic_write_json, read_json

if TYPE_CHECKING:
    from torch import nn

    from attacks.inversion.spec import PriorSpec

#: Trained modules by name (an evaluator, a prior's generator and discriminator), as cached.
Modules = Mapping[str, "nn.Module"]

__all__ = ["InversionRun", "InversionSpec", "PublicData", "check_public_data", "parse_public_data", "run_inversion"]


@dataclass(frozen=True, kw_only=True)
class PublicData:
    """Public images an attack's prior is trained on: ``dataset``'s samples of ``classes`` (all if empty)."""

    dataset: str
    classes: tuple[int, ...] = ()

    def text(self) -> str:
        """``DATASET[:CLASSES]`` as the command line takes it, runs of labels written ``a-b``."""
        parts: list[str] = []
        for c in self.classes:
            if parts and parts[-1].rpartition("-")[2] == str(c - 1) and (c - 1) in self.classes:
                lo = parts[-1].partition("-")[0]
                parts[-1] = f"{lo}-{c}"
            else:
                parts.append(str(c))
        return self.dataset + (":" + ",".join(parts) if parts else "")


def parse_public_data(text: str) -> PublicData:
    """``DATASET`` or ``DATASET:CLASSES`` (``5-9``, ``0,2,4``, ``20-39``) in the dataset's own labels.

    Raises:
        ValueError: an unknown dataset or a malformed class list (the message names ``--public-data``).
    """
    from dpaudit.data import DATASETS

    name, _, spec = str(text).partition(":")
    name = name.strip().lower()
    if name not in DATASETS:
        raise v.invalid(
            "--public-data",
            f"--public-data must be DATASET[:CLASSES] with DATASET one of {', '.join(DATASETS)}; got {text!r}",
        )
    if not spec.strip():
        return PublicData(dataset=name, classes=())
    from dpaudit.data.subsets import parse_classes

    n = DATASETS[name].num_classes
    classes = parse_classes(
        spec, argument=f"--public-data classes (of {name!r}, {text!r})", num_classes=n, example="5-9 or 0,2,4"
    )
    return PublicData(dataset=name, classes=tuple(classes))


def check_public_data(public: PublicData, *, dataset: str, classes: tuple[int, ...]) -> None:
    """Refuses public data the target may have seen, or of another image shape.

    Raises:
        ValueError: ``public`` is the target's own dataset with classes overlapping ``classes``
            (or all of them), or its images differ in shape (the message names ``--public-data``).
    """
    from dpaudit.data import DATASETS

    if public.dataset == dataset and (not public.classes or set(public.classes) & set(classes)):
        raise v.invalid(
            "--public-data",
            f"--public-data={public.text()!r} overlaps the target's own classes of "
            f"{dataset!r}: public data must be images the target never saw "
            "(other classes, or a disjoint dataset such as mnist:5-9 for mnist-0-4)",
        )
    pshape, tshape = (
        DATASETS[public.dataset].input_shape,
        DATASETS[dataset].input_shape if dataset in DATASETS else None,
    )
    if pshape is not None and tshape is not None and tuple(pshape) != tuple(tshape):
        raise v.invalid(
            "--public-data",
            f"--public-data={public.text()!r} has images of shape {tuple(pshape)}, the target takes {tuple(tshape)}",
        )


@dataclass(frozen=True, kw_only=True)
class InversionSpec:
    """What to run.

    Attributes:
        target: the target's record directory (or its record.json, or a run with one record).
        attacks: attack name → its config (see :data:`attacks.inversion.INVERSION_ATTACKS`).
        priors: prior name → the config it is trained with (for attacks that need one).
        public_data: the prior's training data; required by an attack with a prior.
        classes: the labels to invert (default: every class of the target's dataset).
        evaluator: the evaluation classifier's options (an ``EvaluatorConfig``).
        seed: root seed of the evaluator, the prior and the attacks.
        data_root: where the datasets are.
        device: where to run.
        progress: progress on stderr.
        command: the command line, for the run manifest.
        i_know: accept sizes above the documented limits of the attacks', priors' and
            evaluator's configs (steps, restarts, epochs…; :data:`dpaudit.limits.LIMITS`), as
            ``--i-know`` does on the command line.
    """

    target: Path
    attacks: Mapping[str, object]
    priors: Mapping[str, object] = field(default_factory=dict)
    public_data: PublicData | None = None
    classes: tuple[int, ...] | None = None
    evaluator: Any = None
    seed: int = 0
    data_root: str | None = None
    device: str = "cpu"
    progress: bool = True
    command: str = ""
    i_know: bool = False

    def __post_init__(self) -> None:
        from dpaudit.limits import check_sizes
        from dpaudit.options import check_config_sizes

        check_sizes(self, {})
        for config in [
            *dict(self.attacks).values(),
            *dict(self.priors).values(),
            self.evaluator,
        ]:  # each declares its limits (the flags')
            check_config_sizes(config, i_know=self.i_know)


@dataclass(frozen=True, kw_only=True)
class InversionRun:
    """What :func:`run_inversion` did."""

    model_id: str
    results: Mapping[str, InversionResult]
    result_dir: Path
    evaluator_accuracy: float
    reused: tuple[str, ...] = ()
    trained: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class _EvaluatorKey(PlainSpec):
    """What an evaluation classifier is trained from: its cache entry is named by a hash of this.

    Attributes:
        dataset: the target's dataset.
        members: SHA-256 (16 hex digits) of the private (member) ids it trains on.
        seed: the run's root seed.
        config: the evaluator's options (an ``EvaluatorConfig``'s fields).
        num_classes: the dataset's classes.
    """

    dataset: str
    members: str
    seed: int
    config: Mapping[str, object]
    num_classes: int


@dataclass(frozen=True, kw_only=True)
class _PriorKey(PlainSpec):
    """What a prior is trained from: its cache entry is named by a hash of this.

    Attributes:
        dataset: the public data's dataset.
        classes: the public classes it trains on (empty: all).
        seed: the run's root seed.
        config: the prior's training options (its config type's fields).
        shape: the shape of one image.
    """

    dataset: str
    classes: tuple[int, ...]
    seed: int
    config: Mapping[str, object]
    shape: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class _ResultKey(PlainSpec):
    """What one attack's result is computed with, stored as the result's ``config``: a stored
    result is reused only when it matches.

    Attributes:
        attack: the attack's config fields.
        evaluator: the evaluator's cache entry (``cache``) and its options.
        seed: the run's root seed.
        classes: the inverted classes.
        prior: for an attack with a prior, its name, the public data and its config fields.
    """

    attack: Mapping[str, object]
    evaluator: Mapping[str, object]
    seed: int
    classes: tuple[int, ...]
    prior: Mapping[str, object] | None = spec_field(default=None, omit="none")


def _key(kind: str, describe: _EvaluatorKey | _PriorKey) -> str:
    """The cache entry's name: the kind, the dataset and a hash of the key's plain form (sorted keys)."""
    digest = hashlib.sha256(json.dumps(describe.to_dict(), sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{kind}-{describe.dataset}-{digest}"


def _build_prior(prior: PriorSpec, shape: tuple[int, ...], config: Any, device: str) -> dict[str, nn.Module]:
    """A prior's untrained modules on ``device`` (what :func:`_cached_modules` loads weights into)."""
    return {k: m.to(device) for k, m in prior.build(shape, config).items()}


def _cached_modules(
    directory: Path,
    *,
    describe: _EvaluatorKey | _PriorKey,
    build: Callable[[], Modules],
    train: Callable[[], Modules],
    trained: list[str],
    reused: list[str],
) -> Modules:
    """Loads ``directory``'s modules if a finished cache entry is there, else trains and stores them."""
    from dpaudit.weights import load_modules, save_modules

    meta_file, weights = directory / "meta.json", directory / "weights.safetensors"
    plain = json.loads(json.dumps(describe.to_dict(), default=str))
    if meta_file.is_file() and weights.is_file() and read_json(meta_file).get("describe") == plain:
        modules = build()
        load_modules(weights, modules)
        for m in modules.values():
            m.eval()
        reused.append(directory.name)
        return modules
    modules = train()
    directory.mkdir(parents=True, exist_ok=True)
    save_modules(weights, modules)
    atomic_write_json(
        meta_file,
        {
            "describe": plain,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        },
    )
    trained.append(directory.name)
    return modules


def _stored(path: Path, config: _ResultKey) -> InversionResult | None:
    """The result at ``path`` if it was computed with exactly ``config`` (else ``None``: recompute)."""
    from dpaudit.results import load_inversion_result
    from dpaudit.store import thaw

    if not path.is_file():
        return None
    try:
        result = load_inversion_result(path)
    except (OSError, ValueError):
        return None  # damaged: recomputed and overwritten atomically
    return result if thaw(result.config) == json.loads(json.dumps(config.to_dict(), default=str)) else None


class _EpochBar:
    """A ``progress(done, total)`` callback drawing a bar once the total is known."""

    def __init__(self, enabled: bool, description: str) -> None:
        self._enabled, self._description = enabled, description
        self._bar: Any = None

    def __call__(self, done: int, total: int) -> None:
        from dpaudit.progress import Progress

        if self._bar is None:
            self._bar = Progress(total, self._description, enabled=self._enabled)
        self._bar.update(done - self._bar.count)

    def __enter__(self) -> _EpochBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


@dataclass(frozen=True, kw_only=True)
class _Target:
    """The checked target of an inversion run and the images its reconstructions are judged against.

    Attributes:
        rdir: the record directory; ``record`` its record; ``bundle`` its dataset.
        shape: the input shape (C, H, W).
        classes: the labels to invert.
        evaluator_config: the evaluation classifier's options.
        needs_prior: attack name → the prior it needs (only attacks with one).
        public: the priors' public data.
        members: the private training images; ``held`` the held-out ones.
    """

    rdir: Path
    record: Any
    bundle: Any
    shape: tuple[int, ...]
    classes: tuple[int, ...]
    evaluator_config: Any
    needs_prior: dict[str, PriorSpec]
    public: PublicData | None
    members: Any
    held: Any


def _resolve_target(spec: InversionSpec) -> _Target:
    """Checks the target, the classes and the public data before any work (messages name the flags)."""
    from attacks.inversion import INVERSION_ATTACKS
    from attacks.inversion.evaluate import EvaluatorConfig
    from dpaudit.app.records import verify_record
    from dpaudit.data import load_dataset
    from dpaudit.results.record import load_record, resolve_record_dir

    try:
        rdir = resolve_record_dir(spec.target)
    except ValueError as exc:
        raise v.invalid("target", f"target: {exc}") from None
    record = verify_record(load_record(rdir), rdir)  # a record contradicting itself: one line, before any work
    bundle = load_dataset(record.dataset, data_root=spec.data_root)
    shape = tuple(bundle.input_shape)
    if len(shape) != 3:
        raise v.invalid(
            "target",
            f"target: model inversion reconstructs images, but {record.model_id!r} "
            f"was trained on {record.dataset!r} with inputs of shape {shape}",
        )
    classes = tuple(range(bundle.num_classes)) if spec.classes is None else tuple(spec.classes)
    bad = [c for c in classes if not 0 <= c < bundle.num_classes]
    if bad or not classes or len(set(classes)) != len(classes):
        raise v.invalid(
            "--classes",
            f"--classes must be distinct labels 0..{bundle.num_classes - 1} of {record.dataset!r}, got {list(classes)}",
        )
    evaluator_config = spec.evaluator if spec.evaluator is not None else EvaluatorConfig()
    needs_prior = {n: prior for n in spec.attacks if (prior := INVERSION_ATTACKS[n].prior) is not None}
    public = spec.public_data
    if needs_prior and public is None:
        raise v.invalid(
            "--attack",
            f"--attack {', '.join(needs_prior)} needs --public-data "
            "DATASET[:CLASSES]: images of the same domain the target never saw "
            "(e.g. mnist:5-9 for a mnist-0-4 target)",
        )
    if public is not None:
        if not needs_prior:
            raise v.invalid(
                "--public-data",
                f"--public-data={public.text()!r} applies only to attacks with a prior "
                f"({', '.join(n for n, s in INVERSION_ATTACKS.items() if s.prior) or 'none registered'})",
            )
        check_public_data(public, dataset=record.dataset, classes=classes)
    members, held = _member_images(record, bundle)
    return _Target(
        rdir=rdir,
        record=record,
        bundle=bundle,
        shape=shape,
        classes=classes,
        evaluator_config=evaluator_config,
        needs_prior=needs_prior,
        public=public,
        members=members,
        held=held,
    )


def _member_images(record: Any, bundle: Any) -> tuple[Any, Any]:
    """``(members, held out)`` as ``LabelledImages``: what the target trained on, and what it never saw."""
    from attacks.inversion.evaluate import LabelledImages

    everything = bundle.all()
    members = everything.subset(record.membership.members)
    # Held out = never trained on: the record's non-members, its shadow population, and the
    # test split (less anything the record trained on), so every class has images to compare.
    used = np.concatenate([record.membership.members, record.membership.canaries])
    held_ids = np.union1d(
        np.union1d(record.membership.non_members, record.membership.population), bundle.test.ids.numpy()
    )
    non_members = everything.subset(np.setdiff1d(held_ids, used))
    if len(non_members) == 0:
        raise v.invalid(
            "target", f"target {record.model_id!r} has no held-out non-members to compare reconstructions with"
        )
    priv = LabelledImages(features=members.features, labels=members.labels, ids=members.ids.numpy())
    held = LabelledImages(features=non_members.features, labels=non_members.labels, ids=non_members.ids.numpy())
    return priv, held


@dataclass(frozen=True, kw_only=True)
class _Context:
    """What every cached model and attack of one run shares: the spec, the run, the target and where to log.

    ``trained`` and ``reused`` collect the cache entries (and reused results) as the steps go;
    :class:`InversionRun` reports them.
    """

    spec: InversionSpec
    run: RunDir
    target: _Target
    device: str
    on_plan: Callable[[str], None] | None
    trained: list[str]
    reused: list[str]


def _evaluator(ctx: _Context) -> tuple[Any, Path]:
    """The evaluation classifier trained on the private images (cached by what it was trained on) and its cache
    entry."""
    from attacks.inversion.evaluate import build_evaluator, train_evaluator
    from dpaudit.seeding import derive_seed

    spec, t = ctx.spec, ctx.target
    ids_digest = hashlib.sha256(np.ascontiguousarray(t.record.membership.members).tobytes()).hexdigest()[:16]
    ev_describe = _EvaluatorKey(
        dataset=t.record.dataset,
        members=ids_digest,
        seed=spec.seed,
        config=dataclasses.asdict(t.evaluator_config),
        num_classes=t.bundle.num_classes,
    )
    ev_dir = ctx.run.inversion_model_dir(_key("evaluator", ev_describe))

    def train_ev() -> Modules:
        with _EpochBar(
            spec.progress, f"evaluation classifier on {len(t.members.ids)} private images (epochs)"
        ) as update:
            model = train_evaluator(
                t.members,
                num_classes=t.bundle.num_classes,
                config=t.evaluator_config,
                seed=derive_seed(spec.seed, "evaluator"),
                device=ctx.device,
                progress=update,
            )
        return {"evaluator": model}

    if ctx.on_plan is not None:
        ctx.on_plan(
            f"evaluation classifier {ev_dir.name} ({'reused' if (ev_dir / 'meta.json').is_file() else 'trained now'})"
        )
    evaluator = _cached_modules(
        ev_dir,
        describe=ev_describe,
        build=lambda: {"evaluator": build_evaluator(t.shape, t.bundle.num_classes, t.evaluator_config).to(ctx.device)},
        train=train_ev,
        trained=ctx.trained,
        reused=ctx.reused,
    )["evaluator"]
    return evaluator, ev_dir


def _priors(ctx: _Context) -> dict[str, Modules]:
    """Each needed prior trained on the public data (cached by what it was trained on), by prior name."""
    import torch

    from dpaudit.data import load_dataset
    from dpaudit.seeding import derive_seed

    spec, t, public = ctx.spec, ctx.target, ctx.target.public
    priors: dict[str, Modules] = {}
    for name, prior in t.needs_prior.items():
        if prior is None or public is None:  # checked by _resolve_target; narrows the types
            continue
        if prior.name in priors:
            continue
        pconfig = _prior_config(spec, prior)
        describe = _PriorKey(
            dataset=public.dataset,
            classes=tuple(public.classes),
            seed=spec.seed,
            config=dataclasses.asdict(pconfig),
            shape=tuple(t.shape),
        )
        pdir = ctx.run.inversion_model_dir(_key(prior.name, describe))
        if ctx.on_plan is not None:
            ctx.on_plan(
                f"{prior.name} prior on {public.text()} for {name}: {pdir.name} "
                f"({'reused' if (pdir / 'meta.json').is_file() else 'trained now'})"
            )

        def train_prior(prior: PriorSpec = prior, pconfig: Any = pconfig, public: PublicData = public) -> Modules:
            pbundle = load_dataset(public.dataset, data_root=spec.data_root)
            pall = pbundle.all()
            keep = (
                torch.isin(pall.labels, torch.tensor(public.classes))
                if public.classes
                else torch.ones(len(pall), dtype=torch.bool)
            )
            with _EpochBar(
                spec.progress, f"{prior.name} prior on {int(keep.sum())} public images ({public.text()}, epochs)"
            ) as update:
                return prior.train(
                    pall.features[keep],
                    input_shape=t.shape,
                    config=pconfig,
                    seed=derive_seed(spec.seed, prior.name),
                    device=ctx.device,
                    progress=update,
                )

        priors[prior.name] = _cached_modules(
            pdir,
            describe=describe,
            build=functools.partial(_build_prior, prior, t.shape, pconfig, ctx.device),
            train=train_prior,
            trained=ctx.trained,
            reused=ctx.reused,
        )
    return priors


def _prior_config(spec: InversionSpec, prior: PriorSpec) -> Any:
    """The config ``prior`` trains with: the spec's, else its type's defaults.

    Raises:
        TypeError: the spec's config is not an instance of the prior's ``config_type`` (named).
    """
    config = spec.priors.get(prior.name)
    if config is None:
        return prior.config_type()
    if not isinstance(config, prior.config_type):
        raise v.invalid_type(
            "priors", f"priors[{prior.name!r}] must be a {prior.config_type.__name__}, got {type(config).__name__}"
        )
    return config


def _stored_config(ctx: _Context, name: str, config: Any, ev_dir: Path) -> _ResultKey:
    """What one attack's result is computed with (a stored result is reused only when it matches)."""
    from attacks.inversion import INVERSION_ATTACKS

    spec, public = ctx.spec, ctx.target.public
    attack = INVERSION_ATTACKS[name]
    prior: dict[str, object] | None = None
    if attack.prior is not None and public is not None:
        prior = {
            "name": attack.prior.name,
            "public_data": public.text(),
            **dataclasses.asdict(_prior_config(spec, attack.prior)),
        }
    return _ResultKey(
        attack=dataclasses.asdict(config),
        evaluator={"cache": ev_dir.name, **dataclasses.asdict(ctx.target.evaluator_config)},
        seed=spec.seed,
        classes=tuple(ctx.target.classes),
        prior=prior,
    )


@dataclass(frozen=True, kw_only=True)
class _Judge:
    """The attacked model and what judges its reconstructions."""

    model: Any
    evaluator: Any
    evaluator_accuracy: float
    priors: Mapping[str, Modules]


def _attack(ctx: _Context, judge: _Judge, name: str, config: Any, stored_config: _ResultKey) -> InversionResult:
    """Runs one attack on the target and judges its reconstructions (Fredrikson et al. 2015; Zhang et al. 2020)."""
    import torch

    from attacks.inversion import INVERSION_ATTACKS
    from attacks.inversion.evaluate import evaluate_reconstructions
    from dpaudit.seeding import derive_seed
    from dpaudit.store import thaw

    spec, t, device = ctx.spec, ctx.target, ctx.device
    attack = INVERSION_ATTACKS[name]
    started = time.perf_counter()
    # A noise-layer target (PixelDP, HGM) draws its noise from torch's global stream:
    # seed a forked copy so the attack is reproducible and the caller's stream untouched.
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if device.startswith("cuda") else []):
        torch.manual_seed(derive_seed(spec.seed, "target-noise", name))
        with _EpochBar(spec.progress, f"{name} on {len(t.classes)} classes ({attack.progress_unit})") as update:
            output = attack.run(
                judge.model,
                classes=t.classes,
                input_shape=t.shape,
                config=config,
                seed=derive_seed(spec.seed, "attack", name),
                device=device,
                prior=judge.priors.get(attack.prior.name) if attack.prior is not None else None,
                progress=update if spec.progress else None,
            )
    seconds = time.perf_counter() - started
    return evaluate_reconstructions(
        output,
        attack=name,
        model_id=t.record.model_id,
        evaluator=judge.evaluator,
        members=t.members,
        non_members=t.held,
        config=stored_config.to_dict(),
        metadata={
            "seconds": seconds,
            "evaluator_accuracy": judge.evaluator_accuracy,
            # The count behind the accuracy: a report bounds it (Clopper–Pearson) before trusting the evaluator.
            "evaluator_num_tested": int(t.held.labels.shape[0]),
            "dataset": t.record.dataset,
            "num_dataset_classes": t.bundle.num_classes,
            "defense": t.record.defense,
            "target_metrics": {k: val for k, val in thaw(t.record.metrics).items() if isinstance(val, (int, float))},
        },
        device=device,
    )


def run_inversion(spec: InversionSpec, run: RunDir, *, on_plan: Callable[[str], None] | None = None) -> InversionRun:
    """Runs the inversion attacks of ``spec`` against its target and stores the results in ``run``.

    Args:
        spec: what to run.
        run: the run directory (created if needed).
        on_plan: called with one line per cached model that will be trained or reused.

    Returns:
        The stored results and what was trained or reused.

    Raises:
        ValueError: a bad target, class list or public data (the message names the argument).
    """
    from attacks.inversion.evaluate import evaluator_accuracy
    from dpaudit.results import inversion_stem, save_inversion_result
    from dpaudit.training import resolve_device
    from dpaudit.weights import load_model

    device = str(resolve_device(spec.device))
    target = _resolve_target(spec)
    run.create(command=spec.command)
    ctx = _Context(spec=spec, run=run, target=target, device=device, on_plan=on_plan, trained=[], reused=[])
    results: dict[str, InversionResult] = {}
    with unit_lock(run.path, f"inversion-{target.record.model_id}"):
        evaluator, ev_dir = _evaluator(ctx)
        ev_acc = evaluator_accuracy(evaluator, target.held, device=device)
        model = load_model(target.rdir, device=device)
        judge = _Judge(model=model, evaluator=evaluator, evaluator_accuracy=ev_acc, priors=_priors(ctx))
        out_dir = run.inversion_dir(target.record.model_id)
        for name, config in spec.attacks.items():
            stored_config = _stored_config(ctx, name, config, ev_dir)
            previous = _stored(out_dir / f"{inversion_stem(name)}.json", stored_config)
            if previous is not None:
                results[name] = previous
                ctx.reused.append(f"{name} result")
                continue
            result = _attack(ctx, judge, name, config, stored_config)
            save_inversion_result(result, out_dir)
            results[name] = result
    return InversionRun(
        model_id=target.record.model_id,
        results=results,
        result_dir=out_dir,
        evaluator_accuracy=ev_acc,
        reused=tuple(ctx.reused),
        trained=tuple(ctx.trained),
    )
