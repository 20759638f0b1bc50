"""The membership-inference run: what ``dpaudit attack membership`` does, callable from scripts and tests.

It loads the target (a suite record, or an external model with the ids it trained on, for
which it draws the held-out non-members), plans the shadow pools the requested attacks need
(:func:`attacks.membership.plan_pools`), trains the missing shadow models with the *target's own
defense and config* through :data:`defenses.DEFENSES` (so a DP-SGD target gets DP-SGD shadows,
as the attacker who knows the training recipe would train them; Carlini et al. 2022, §VI-C
discuss both choices), evaluates every model once, runs each attack through its registered
``run`` and stores the results under ``RunDir.membership_dir(model_id)``.

Shadow counts: an attack uses ``num_shadows`` (LiRA, shadow) or ``num_references`` (RMIA) models
from its *pool*. Online attacks (``lira``, ``rmia``) share the ``online`` pool (queried ids plus
population; each queried example is IN for about half of its models), offline attacks
(``shadow``, ``lira-offline``, ``rmia-offline``) share the ``offline`` pool (population only). So
``--num-shadows 8`` with online and offline attacks trains 8 + 8 = 16 models;
:class:`MembershipRun` says how many of each pool were trained and reused, and the verb prints it
before training starts.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit import _validate as v
from dpaudit.locks import unit_lock
from dpaudit.results import MembershipResult
from dpaudit.store import RunDir, atomic_save_npz

if TYPE_CHECKING:
    from attacks.membership.pools import PoolPlan
    from attacks.membership.shadows import ShadowRecipe

#: Per queried sample, its vulnerability judged from the shadows (see attacks.membership.sample_vulnerability).
from dpaudit.app.runs.membership_shadows import (
    batch_shadow_with_defense,
    defense_config,
    train_shadow_with_defense,
)

VULNERABILITY_FILE = "vulnerability.npz"

__all__ = [
    "VULNERABILITY_FILE",
    "ExternalTarget",
    "MembershipSpec",
    "MembershipRun",
    "PoolSummary",
    "run_membership",
    "read_ids",
    "train_shadow_with_defense",
]


def read_ids(name: str, path: str | Path) -> np.ndarray:
    """Sample ids from a JSON list or a ``.npy`` file (read without pickle).

    Raises:
        ValueError: the file is missing or does not hold a 1-D list of integers (names ``name``).
    """
    p = Path(path)
    if not p.is_file():
        raise v.invalid(name, f"{name}: file not found: {str(path)!r}")
    try:
        if p.suffix == ".npy":
            from dpaudit.limits import check_npy

            check_npy(name, p, ndim=1)  # from the header: a 2-D or 3-D array is refused before it is loaded
        arr = (
            np.load(p, allow_pickle=False)
            if p.suffix == ".npy"
            else np.asarray(json.loads(p.read_text(encoding="utf-8")))
        )
    except v.InvalidArgument:
        raise
    except (ValueError, OSError) as exc:
        raise v.invalid(
            name, f"{name}: {str(path)!r} must be a JSON list or .npy array of integer sample ids ({exc})"
        ) from None
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise v.invalid(
            name,
            f"{name}: {str(path)!r} must hold a 1-D list of integer sample ids, got "
            f"dtype {arr.dtype} shape {arr.shape}",
        )
    return arr.astype(np.int64)


@dataclass(frozen=True, kw_only=True)
class ExternalTarget:
    """A model trained outside the suite.

    Attributes:
        model_fn: ``module:function`` or ``path/to/file.py:function`` building the ``nn.Module``.
        weights: ``.safetensors`` or ``.pt`` state dict.
        dataset: the dataset it was trained on.
        member_ids: the ids it trained on.
        non_member_ids: held-out ids (default: as many unused training ids, drawn from the seed).
    """

    model_fn: str
    weights: str
    dataset: str
    member_ids: np.ndarray
    non_member_ids: np.ndarray | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "member_ids", np.unique(v.id_array("member_ids", self.member_ids)))
        if self.non_member_ids is not None:
            non = np.unique(v.id_array("non_member_ids", self.non_member_ids))
            if np.intersect1d(non, self.member_ids).size:
                raise v.invalid("non_member_ids", "non_member_ids shares ids with member_ids")
            object.__setattr__(self, "non_member_ids", non)


@dataclass(frozen=True, kw_only=True)
class MembershipSpec:
    """One membership-inference run.

    Attributes:
        attacks: attack name → its config (an instance of the registered ``config_type``), in
            the order to run them.
        target: a record directory, its ``record.json``, or a run directory with one record;
            or an :class:`ExternalTarget`.
        seed: root seed (non-members of external targets, pools, shadow training, classifiers).
        num_samples: score at most this many members and as many non-members (seeded).
        num_queries: query augmentations for LiRA / RMIA (default: 2 where one exists, else 1).
        num_population: RMIA's population samples z.
        executor: where shadows train (``local``, ``ray``, ``serial``).
        num_workers: parallel workers (default: CPU count).
        address: Ray address.
        ship_code: Ray sends this checkout's packages to the workers (:mod:`dpaudit.cluster`).
        data_root: data root.
        device: where shadows train and models are evaluated.
        progress: progress on stderr.
        command: the command line, for ``run.json``.
        shadow_defense: train every shadow with this defense and ``shadow_config`` instead of
            the target's own recipe (``None``). Targets on the same data then share one pool.
        shadow_config: that defense's config fields.
        i_know: accept sizes above the documented limits (samples, queries, population,
            workers, each attack's shadows; :data:`dpaudit.limits.LIMITS`), as ``--i-know``
            does on the command line.
    """

    attacks: Mapping[str, object]
    target: str | Path | ExternalTarget
    seed: int = 0
    num_samples: int | None = None
    num_queries: int | None = None
    num_population: int = 1000
    executor: str = "local"
    num_workers: int | None = None
    address: str | None = None
    ship_code: bool = False
    data_root: str | None = None
    device: str = "cpu"
    progress: bool = True
    command: str = ""
    shadow_defense: str | None = None
    shadow_config: Mapping[str, object] = field(default_factory=dict)
    i_know: bool = False

    def __post_init__(self) -> None:
        from attacks.membership import MEMBERSHIP_ATTACKS
        from dpaudit.limits import check_sizes
        from dpaudit.options import check_config_sizes

        if not self.attacks:
            raise v.invalid("attacks", "attacks must name at least one attack")
        for name, config in self.attacks.items():
            v.choice("attacks", name, MEMBERSHIP_ATTACKS)
            if not isinstance(config, MEMBERSHIP_ATTACKS[name].config_type):
                raise v.invalid_type(
                    "attacks",
                    f"attacks[{name!r}] must be a "
                    f"{MEMBERSHIP_ATTACKS[name].config_type.__name__}, got "
                    f"{type(config).__name__}",
                )
        object.__setattr__(self, "attacks", dict(self.attacks))
        object.__setattr__(self, "seed", v.integer("seed", self.seed, minimum=0))
        for name in ("num_samples", "num_queries", "num_workers"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, v.integer(name, getattr(self, name), minimum=1))
        object.__setattr__(self, "num_population", v.integer("num_population", self.num_population, minimum=1))
        check_sizes(
            self,
            {
                "num_samples": "samples",
                "num_queries": "queries",
                "num_population": "population",
                "num_workers": "workers",
            },
        )
        for config in self.attacks.values():  # each attack's sizes (its shadows) declare their limits
            check_config_sizes(config, i_know=self.i_know)
        if self.address is not None and self.executor != "ray":
            raise v.invalid("address", f"address={self.address!r} needs executor 'ray', got {self.executor!r}")
        if self.shadow_defense is not None:
            from defenses import DEFENSES

            spec = DEFENSES.get(self.shadow_defense)
            if spec is None:
                raise v.invalid(
                    "shadow_defense",
                    f"shadow_defense must be one of {', '.join(DEFENSES)}, got {self.shadow_defense!r}",
                )
            defense_config(spec.config_type, self.shadow_config)  # names a bad field now, not in a worker
        object.__setattr__(self, "shadow_config", dict(self.shadow_config))


@dataclass(frozen=True, kw_only=True)
class PoolSummary:
    """One shadow pool of a run: how many models, which attacks use it, how many were trained now."""

    kind: str
    num_models: int
    attacks: tuple[str, ...]
    num_trained: int
    num_reused: int


@dataclass(frozen=True, kw_only=True)
class MembershipRun:
    """What :func:`run_membership` did.

    Attributes:
        model_id: the target's id.
        results: attack name → its :class:`MembershipResult`.
        num_members, num_non_members: the scored ids.
        pools: the shadow pools (empty when only threshold attacks ran).
        shadow_defense: the defense shadows were trained with (``None`` without shadows).
        result_dir: where the results were stored.
    """

    model_id: str
    results: Mapping[str, MembershipResult]
    num_members: int
    num_non_members: int
    pools: tuple[PoolSummary, ...] = field(default_factory=tuple)
    shadow_defense: str | None = None
    result_dir: Path | None = None

    @property
    def num_shadows_trained(self) -> int:
        return sum(p.num_trained for p in self.pools)

    @property
    def num_shadows_reused(self) -> int:
        return sum(p.num_reused for p in self.pools)


def describe_pools(pools: Mapping[str, PoolPlan]) -> str:
    """One line saying how many shadow models a plan needs and why (printed before training)."""
    total = sum(p.num_models for p in pools.values())
    why = {"online": "each queried example IN for about half", "offline": "population only, no queried example"}
    parts = [f"{p.num_models} {kind} ({why[kind]}: {', '.join(p.users)})" for kind, p in pools.items()]
    return f"{total} shadow model(s): " + " + ".join(parts)


def _load_target(spec: MembershipSpec, device: str) -> tuple[Any, Any, Any]:
    from dpaudit.app.records import verify_record
    from dpaudit.data import load_dataset
    from dpaudit.results.record import load_record, resolve_record_dir
    from dpaudit.weights import load_model

    if isinstance(spec.target, ExternalTarget):
        return _external_target(spec.target, seed=spec.seed, data_root=spec.data_root)
    try:
        rdir = resolve_record_dir(spec.target)
    except ValueError as exc:
        raise v.invalid("target", f"target: {exc}") from None
    record = verify_record(load_record(rdir), rdir)  # a record contradicting itself: one line, before any work
    return record, load_model(rdir, device=device), load_dataset(record.dataset, data_root=spec.data_root)


def _external_target(target: ExternalTarget, *, seed: int, data_root: str | None) -> tuple[Any, Any, Any]:
    """A record for an external model: its members, held-out non-members and the rest as population."""
    from dpaudit.callables import code_fingerprint
    from dpaudit.data import load_dataset
    from dpaudit.privacy.claims import NonPrivateClaim
    from dpaudit.results.record import Membership, TrainedModel, weights_digest
    from dpaudit.seeding import numpy_rng
    from dpaudit.weights import load_external_model

    bundle = load_dataset(target.dataset, data_root=data_root)
    model = load_external_model(target.model_fn, target.weights)
    members = target.member_ids
    unknown = np.setdiff1d(members, bundle.all().ids.numpy())
    if unknown.size:
        raise v.invalid("member_ids", f"member_ids: sample id {int(unknown[0])} is not in dataset {target.dataset!r}")
    rest = np.setdiff1d(bundle.train.ids.numpy(), members)
    # Without stated non-members the attacker holds out as many unused training ids, so both sides are equally large.
    non = (
        target.non_member_ids
        if target.non_member_ids is not None
        else np.sort(numpy_rng(seed, "external-non-members").permutation(rest)[: members.size])
    )
    # The id is a fingerprint of everything that determines the attack's outcome: the weights,
    # the code that builds the model, and who is a member and who is not. Two targets that
    # differ in any of them never share a result directory or a shadow cache entry.
    covered = code_fingerprint(target.model_fn, argument="--model-fn")
    code = covered.sha256
    weights_sha256 = weights_digest(target.weights)
    identity = hashlib.sha256(weights_sha256.encode())
    for part in (
        code.encode(),
        np.asarray(members, dtype=np.int64).tobytes(),
        np.asarray(non, dtype=np.int64).tobytes(),
    ):
        identity.update(hashlib.sha256(part).digest())
    digest = identity.hexdigest()[:12]
    record = TrainedModel(
        model_id=f"external-{bundle.name}-{digest}",
        defense="external",
        model_name=f"external:{target.model_fn}",
        dataset=bundle.name,
        input_shape=bundle.input_shape,
        num_classes=bundle.num_classes,
        claim=NonPrivateClaim(description="external model; no privacy claim stated"),
        # The local modules the builder imports (name → file, SHA-256), where it imports any.
        config={"model_fn_sha256": code, **({"model_fn_modules": covered.covered()} if covered.modules else {})},
        weights_sha256=weights_sha256,
        membership=Membership(members=members, non_members=non, population=np.setdiff1d(rest, non)),
        seed=seed,
    )
    return record, model, bundle


@dataclass(frozen=True, kw_only=True)
class _Recipe:
    """How the shadows of one target train.

    Attributes:
        trainer: :func:`train_shadow_with_defense`, or ``None`` for plain SGD (an external model).
        recipe: what the trainer reads and the shadow ids hash (defense and config, code and
            data fingerprints).
        shadow_defense: the defense the shadows are trained with, as reported.
    """

    trainer: Callable[..., Any] | None
    recipe: ShadowRecipe
    shadow_defense: str


def _shadow_recipe(spec: MembershipSpec, record: Any) -> _Recipe:
    """Shadows train as the target did: its defense and config through the registry (or the spec's shared recipe)."""
    from attacks.membership import ShadowRecipe
    from defenses import DEFENSES
    from dpaudit.data import dataset_files
    from dpaudit.store import thaw

    # An external model has no stated recipe, so its shadows get plain SGD.
    trainer = None
    defense: str | None = None
    config: Mapping[str, object] | None = None
    model_fn_sha256: str | None = None
    if record.defense in DEFENSES:
        trainer = train_shadow_with_defense
        defense, config = record.defense, thaw(record.config)
    if spec.shadow_defense is not None:
        # One recipe for every target (``compare``'s shared shadows): targets on the same
        # data share one pool instead of each training its own.
        trainer = train_shadow_with_defense
        defense, config = spec.shadow_defense, dict(spec.shadow_config)
    elif "model_fn_sha256" in record.config:
        # The shadows of an external model are built by its code: a cached shadow built by
        # other code (an edited file) must not be reused, so the code's fingerprint is hashed
        # into the shadow ids.
        defense, config, model_fn_sha256 = None, None, str(record.config["model_fn_sha256"])
    # Shadows train on the dataset's files: a replaced file must not hand back shadows of the
    # old data (bundled data such as digits has a fixed identity and keeps its shadow ids).
    data = dataset_files(record.dataset, data_root=spec.data_root)
    files_sha256 = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest() if data else None
    recipe = ShadowRecipe(
        defense=defense, config=config, model_fn_sha256=model_fn_sha256, dataset_files_sha256=files_sha256
    )
    shadow_defense = (spec.shadow_defense or record.defense) if trainer is not None else "sgd"
    return _Recipe(trainer=trainer, recipe=recipe, shadow_defense=shadow_defense)


def _result_metadata(record: Any, bundle: Any, recipe: _Recipe) -> dict[str, object]:
    """What every result carries about its target, fingerprints (by content) included."""
    meta: dict[str, object] = {
        "target_metrics": {k: val for k, val in record.metrics.items() if isinstance(val, (int, float))},
        "dataset": bundle.name,
        "defense": record.defense,
    }
    # What the results are about, by content: the report lists these beside the results.
    fingerprints = {
        "weights_sha256": record.weights_sha256,
        "model_fn_sha256": record.config.get("model_fn_sha256"),
        "dataset_files_sha256": recipe.recipe.dataset_files_sha256,
    }
    meta["fingerprints"] = {k: val for k, val in fingerprints.items() if val}
    return meta


def _announce_shadow_cost(
    spec: MembershipSpec, record: Any, pools: Mapping[str, PoolPlan], *, train_size: int, device: str
) -> None:
    """Says on stderr how long the shadows will take when that is long (before any is trained):
    the plan ``--dry-run`` prints (:func:`dpaudit.app.plan.membership_plan`)."""
    from dpaudit.app.plan import announce_plan, membership_plan

    announce_plan(
        membership_plan(spec, record=record, pools=pools),
        hint="--num-shadows, --num-references and --num-workers change it",
    )


def _shadow_executor(spec: MembershipSpec, record: Any, device: str) -> Any:
    """The executor the shadows train on (``executor`` named in the error when its extra is missing)."""
    from dpaudit.app.cost import count_parameters, ray_gpus
    from dpaudit.executors import make_executor

    try:
        return make_executor(
            spec.executor,
            workers=spec.num_workers,
            address=spec.address,
            ship_code=spec.ship_code,
            datasets=(record.dataset,),
            data_root=spec.data_root,
            num_gpus=ray_gpus(
                device,
                count_parameters(
                    record.model_name,
                    input_shape=record.input_shape,
                    num_classes=record.num_classes,
                    model_options=record.model_options,
                ),
            ),
        )
    except ImportError as exc:
        raise v.invalid("executor", f"executor {spec.executor!r}: {exc}") from None


@dataclass(frozen=True, kw_only=True)
class _Shadows:
    """The shadow models of a run's pools, and how many of each pool were trained now or reused."""

    models: dict[str, list[tuple[np.ndarray, Any]]]
    summaries: tuple[PoolSummary, ...]
    num_trained: int
    num_reused: int


def _train_shadows(
    spec: MembershipSpec,
    run: RunDir,
    record: Any,
    pools: Mapping[str, PoolPlan],
    recipe: _Recipe,
    *,
    train_size: int,
    device: str,
) -> _Shadows:
    """Trains the missing shadows of ``pools`` (cached in ``run.shadow_dir()``) and loads the rest."""
    from attacks import membership as mia

    if spec.progress:
        _announce_shadow_cost(spec, record, pools, train_size=train_size, device=device)
    executor = _shadow_executor(spec, record, device)
    with executor:
        models, plans, shadow_run = mia.train_pools(
            pools,
            record=record,
            seed=spec.seed,
            train_size=train_size,
            recipe=recipe.recipe,
            directory=run.shadow_dir(),
            executor=executor,
            data_root=spec.data_root,
            device=device,
            progress=spec.progress,
            trainer=recipe.trainer,
            batcher=batch_shadow_with_defense if recipe.trainer is train_shadow_with_defense else mia.sgd_batch,
        )
    trained = set(shadow_run.trained)
    summaries: list[PoolSummary] = []
    for kind, plan in pools.items():
        n_new = sum(s.shadow_id in trained for s in plans[kind])
        summaries.append(
            PoolSummary(
                kind=kind,
                num_models=len(plans[kind]),
                attacks=plan.users,
                num_trained=n_new,
                num_reused=len(plans[kind]) - n_new,
            )
        )
    return _Shadows(
        models=models,
        summaries=tuple(summaries),
        num_trained=len(shadow_run.trained),
        num_reused=len(shadow_run.reused),
    )


def _store(context: Any, results: Mapping[str, MembershipResult], out: Path) -> None:
    """Writes each result and, where the shadows judge it, each sample's vulnerability."""
    from attacks import membership as mia
    from dpaudit.results import save_membership_result

    for result in results.values():
        save_membership_result(result, out)
    vulnerability = mia.sample_vulnerability(context)
    if vulnerability is not None:
        # Judged from the shadows alone: `compare` ranks samples by it (the most vulnerable).
        atomic_save_npz(out / VULNERABILITY_FILE, sample_ids=context.sample_ids, vulnerability=vulnerability)


def run_membership(spec: MembershipSpec, run: RunDir, *, on_plan: Callable[[str], None] | None = None) -> MembershipRun:
    """Runs the attacks of ``spec`` against its target and stores the results in ``run``.

    Args:
        spec: what to run.
        run: the run directory (created if needed); shadows are cached in ``run.shadow_dir()``
            and reused by later runs, results go to ``run.membership_dir(model_id)``.
        on_plan: called once with a line saying how many shadow models are needed and why,
            before any is trained.

    Returns:
        The results and what was trained or reused.

    Raises:
        ValueError: a bad target, ids, or counts (the message names the argument).
    """
    from attacks import membership as mia
    from dpaudit.training import resolve_device

    device = str(resolve_device(spec.device))
    record, model, bundle = _load_target(spec, device)
    ids, member = mia.query_ids(record, max_per_side=spec.num_samples, seed=spec.seed)
    if not member.any() or member.all():
        raise v.invalid(
            "target",
            f"target {record.model_id!r} has {int(member.sum())} members and "
            f"{int((~member).sum())} non-members; both are needed",
        )
    augs = mia.choose_augmentations(bundle, spec.num_queries)
    train_size = max(len(record.membership.members), 1)
    chosen = {n: (mia.MEMBERSHIP_ATTACKS[n], c) for n, c in spec.attacks.items()}
    pools = mia.plan_pools(
        chosen, record=record, sample_ids=ids, seed=spec.seed, num_population=spec.num_population, train_size=train_size
    )
    run.create(command=spec.command)
    with unit_lock(run.path, f"membership-{record.model_id}"):  # one writer per target's results
        recipe = _shadow_recipe(spec, record)
        meta = _result_metadata(record, bundle, recipe)
        shadows = _Shadows(models={}, summaries=(), num_trained=0, num_reused=0)
        if pools:
            if on_plan is not None:
                on_plan(f"{describe_pools(pools)}; shadows trained with {recipe.shadow_defense!r}")
            shadows = _train_shadows(spec, run, record, pools, recipe, train_size=train_size, device=device)
            meta.update(
                shadows_trained=shadows.num_trained,
                shadows_reused=shadows.num_reused,
                shadow_defense=recipe.shadow_defense,
            )
        context = mia.build_context(
            record=record,
            model=model,
            bundle=bundle,
            sample_ids=ids,
            is_member=member,
            seed=spec.seed,
            augmentations=augs,
            pools=pools,
            shadow_models=shadows.models,
            device=device,
            metadata=meta,
            progress=spec.progress,
        )
        results = mia.run_attacks(context, spec.attacks)
        out = run.membership_dir(record.model_id)
        _store(context, results, out)
        return MembershipRun(
            model_id=record.model_id,
            results=results,
            num_members=int(member.sum()),
            num_non_members=int((~member).sum()),
            pools=shadows.summaries,
            shadow_defense=recipe.shadow_defense if pools else None,
            result_dir=out,
        )
