"""The audit runner: the application layer that wires defenses, canaries and audit games.

Part of the application layer (docs/architecture.md, "Import rule"), like :mod:`dpaudit.app.cli`: it may
import ``defenses``, ``attacks`` and ``reports``; the rest of the core may not. It turns an
:class:`AuditSpec` (built by ``dpaudit audit`` or ``scripts/reproduce_audit.py``) into

* a training function — the white-box trainer adapter of a registered defense
  (``defenses.DEFENSES[name].audit_trainer``, with the per-step hooks) or any third-party ``train(dataset, *, seed) ->
  nn.Module`` given as ``module:function``
  or ``path/to/file.py:function`` (:func:`resolve_train_fn`);
* the claim it is audited against — the defense's own claim, or one given on the command line or
  as a claim JSON (:func:`dpaudit.privacy.claims.claim_from_dict`);
* canaries (:mod:`attacks.audit.canaries`) and one of the games of :mod:`attacks.audit.procedures`;

and writes the result and its report under ``RUN_DIR/audits/<name>/`` and
``RUN_DIR/reports/``.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from dpaudit import _validate as v
from dpaudit.app.runs.audit.batching import trial_batcher
from dpaudit.app.runs.audit.provenance import audit_hash, code_keys, resolve_train_fn, say_if_superseded
from dpaudit.app.runs.audit.spec import WORST_CASE_AUDITOR_RECORDS, AuditSpec, audit_defenses
from dpaudit.app.runs.audit.trainer import audit_trainer
from dpaudit.callables import resolve_callable
from dpaudit.data import ArrayDataset, dataset_files, load_dataset, make_splits
from dpaudit.locks import unit_lock
from dpaudit.privacy.audit_bounds import resolve_bound
from dpaudit.privacy.claims import PrivacyClaim
from dpaudit.results.audit import AuditResult
from dpaudit.store import RunDir

__all__ = ["DatasetRef", "make_audit_executor", "run_audit"]


# ----------------------------------------------------------------------------- data
@functools.lru_cache(maxsize=4)
def _load_subset(name: str, data_root: str | None, ids: tuple[int, ...]) -> ArrayDataset:
    return load_dataset(name, data_root=data_root).all().subset(np.array(ids, dtype=np.int64), name=name)


@dataclass(frozen=True, kw_only=True)
class DatasetRef:
    """A dataset by name and sample ids: cheap to send to worker processes, loaded there once.

    Attributes:
        name: dataset name (:data:`dpaudit.data.DATASETS`).
        ids: sample ids (members of the audited training).
        data_root: data root (``None``: the default resolution).
    """

    name: str
    ids: tuple[int, ...]
    data_root: str | None = None

    def __call__(self) -> ArrayDataset:
        return _load_subset(self.name, self.data_root, self.ids)


def make_audit_executor(
    workers: int | None,
    kind: str = "local",
    address: str | None = None,
    *,
    dataset: str | None = None,
    data_root: str | None = None,
    ship_code: bool = False,
    num_gpus: float = 0.0,
) -> Any:
    """Where trials run: ``local`` is in-process for one worker (no start-up cost), else a spawned
    process pool; ``serial`` always in-process; ``ray`` a local Ray with ``workers`` CPUs or the
    cluster at ``address``."""
    from dpaudit.executors import make_executor
    from dpaudit.executors.jobs import SerialExecutor
    from dpaudit.executors.local import LocalExecutor

    if kind == "ray":
        return make_executor(
            "ray",
            workers=workers,
            address=address,
            datasets=() if dataset is None else (dataset,),
            data_root=data_root,
            ship_code=ship_code,
            num_gpus=num_gpus,
        )
    if address is not None:
        raise v.invalid("address", f"address={address!r} applies to executor 'ray' only, got executor={kind!r}")
    if kind == "serial" or workers is None or workers <= 1:
        return SerialExecutor()
    return LocalExecutor(workers=workers)


def _ray_gpus(spec: AuditSpec, bundle: Any) -> float:
    if spec.executor != "ray":
        return 0.0
    from dpaudit.app.cost import count_parameters, ray_gpus

    return ray_gpus(
        spec.device, count_parameters(spec.model, input_shape=bundle.input_shape, num_classes=bundle.num_classes)
    )


def _starting_model(spec: AuditSpec, members: ArrayDataset, trainer: Any | None) -> nn.Module:
    """The architecture every training of the audit starts from (seeded; the trainer's own when known)."""
    import torch

    from dpaudit.models import build_model
    from dpaudit.seeding import derive_seed

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(spec.seed, "init"))
        if trainer is not None:
            return trainer.build_model(members)
        if spec.model_fn is not None:
            # The user's own architecture: a start crafted on a zoo model would not load into it.
            builder = resolve_callable(spec.model_fn, argument="--model-fn")
            try:
                built = builder()
            except Exception as exc:  # third-party code: said in one line, like a failing --train-fn
                raise v.invalid(
                    "--model-fn",
                    f"--model-fn {spec.model_fn}: raised {type(exc).__name__}: "
                    f"{' '.join(str(exc).split()) or '(no message)'}",
                ) from exc
            if not isinstance(built, nn.Module):
                raise v.invalid(
                    "--model-fn",
                    f"--model-fn {spec.model_fn}: returned a {type(built).__name__}, not a torch.nn.Module",
                )
            return built
        return build_model(spec.model, input_shape=members.input_shape, num_classes=members.num_classes)


def _worst_case_start(
    spec: AuditSpec, run: RunDir, bundle: Any, splits: Any, model: nn.Module, *, cfg_key: Mapping[str, object]
) -> Path:
    """Pre-trains ``model`` on non-member records (the auditor's own) once; returns the safetensors file.

    The file sits in its own directory keyed by the audit's configuration, so a rerun reuses
    it (and says so) and another configuration never picks it up.
    """
    from attacks.audit.canaries import worst_case_initial_state
    from dpaudit.weights import load_weights, save_weights

    directory = run.path / "initial-states" / f"worst-case-{audit_hash(cfg_key)}"
    path = directory / "initial_state.safetensors"
    if path.is_file():
        if spec.progress:
            print(f"reusing the worst-case start {path}", file=sys.stderr, flush=True)
    else:
        pool = np.asarray(splits.population if len(splits.population) else splits.non_members)[
            :WORST_CASE_AUDITOR_RECORDS
        ]
        if pool.size == 0:
            raise v.invalid(
                "num_members",
                "init='worst-case' pre-trains on records that are not members; dataset "
                f"{spec.dataset!r} has none left with num_members={spec.num_members!r}",
            )
        if spec.progress:
            print(
                f"crafting the worst-case start: {spec.model} pre-trained non-privately "
                f"on {pool.size:,} non-member records (5 epochs)",
                file=sys.stderr,
                flush=True,
            )
        state = worst_case_initial_state(model, bundle.all().subset(pool), seed=spec.seed)
        directory.mkdir(parents=True, exist_ok=True)
        save_weights(path, state)
    model.load_state_dict(load_weights(path))
    return path


@dataclass(frozen=True, kw_only=True)
class _Game:
    """What every game of one audit shares, fixed before any training."""

    bundle: Any
    splits: Any
    members_ref: DatasetRef
    members: ArrayDataset
    id_offset: int
    num_steps: int
    claim: PrivacyClaim
    fn: Callable[..., nn.Module]
    trainer: Any | None
    sigma: float | None
    third_party: bool
    described: dict[str, object]
    bound: str


def _announce(spec: AuditSpec, bundle: Any, members: ArrayDataset, num_steps: int) -> None:
    """Says so before the trials start when the audit will take long (the suite's own trainer only):
    the plan ``--dry-run`` prints (:func:`dpaudit.app.plan.audit_plan`)."""
    from dpaudit.app.plan import announce_plan, audit_plan

    announce_plan(
        audit_plan(spec, bundle=bundle, members=len(members), num_steps=num_steps),
        hint="--num-trials, --num-steps and --num-workers change it",
    )


def _prepare(spec: AuditSpec, third_party: Callable[..., nn.Module] | None) -> _Game:
    """The data, the training function, its claim and the bound; what the trials are about."""
    bundle = load_dataset(spec.dataset, data_root=spec.data_root)
    # make_splits' own default member count applies unless the spec names one.
    splits = (
        make_splits(bundle, seed=spec.seed)
        if spec.num_members is None
        else make_splits(bundle, seed=spec.seed, num_members=spec.num_members)
    )
    members_ref = DatasetRef(name=spec.dataset, ids=tuple(int(i) for i in splits.members), data_root=spec.data_root)
    members = members_ref()
    num_steps = spec.resolved_num_steps
    if third_party is None and spec.progress:
        _announce(spec, bundle, members, num_steps)
    trainer: Any | None = None
    sigma: float | None = None
    if third_party is None:
        trainer, sigma = audit_trainer(spec, num_members=len(members), num_steps=num_steps)
        claim: PrivacyClaim = trainer.claim(len(members))
        fn: Callable[..., nn.Module] = trainer.train
        described: dict[str, object] = {
            "defense": spec.defense,
            "model": spec.model,
            "noise_multiplier": sigma,
            "clip_norm": spec.clip_norm,
            "sampling_rate": spec.sampling_rate,
            "num_steps": num_steps,
            "learning_rate": spec.learning_rate,
            # Only when given, so the names of audits without them stay as they were.
            **{
                k: dict(x)
                for k, x in (("model_options", spec.model_options), ("defense_config", spec.defense_config))
                if x
            },
        }
    else:
        assert spec.claim is not None and spec.train_fn is not None  # checked in AuditSpec.__post_init__
        claim, fn = spec.claim, third_party
        described = {
            "train_fn": spec.train_fn,
            **code_keys("train_fn", spec.train_fn, argument="--train-fn", progress=spec.progress),
            "claim": claim.to_dict(),
        }
    # The bound follows the compared claim (white-box: one un-sampled Gaussian step), decided
    # before any training so that a GDP bound on a non-Gaussian claim is refused up front.
    bound = resolve_bound(spec.bound, claim=claim if spec.threat == "black-box" else _white_box_claim())
    if (
        spec.method == "one-run"
        and spec.threat == "black-box"
        and spec.one_run_bound == "fdp"
        and claim.trade_off_family != "gaussian"
    ):
        raise v.invalid(
            "one_run_bound",
            "one_run_bound='fdp' assumes a Gaussian trade-off curve, and the claim "
            f"of kind {claim.kind!r} ({claim.statement()}) is not Gaussian-family; "
            "use one_run_bound='steinke'",
        )
    # The member ids are part of what the trials are about: a data root holding other data gives
    # other members, and their trials must not be mixed with these.
    members_sha256 = hashlib.sha256(np.asarray(members_ref.ids, dtype=np.int64).tobytes()).hexdigest()[:16]
    described.update(
        {
            "dataset": spec.dataset,
            "num_members": len(members),
            "member_ids_sha256": members_sha256,
            "threat": spec.threat,
            "delta": spec.delta,
            "confidence": spec.confidence,
        }
    )
    # The files the data came from: a dataset file replaced under the data root (its MD5SUMS
    # updated) gives other trials. Bundled data (digits) has none, so its audits keep their names.
    data = dataset_files(spec.dataset, data_root=spec.data_root)
    if data:
        described["dataset_files"] = data
    id_offset = int(max(bundle.train.ids.max(), bundle.test.ids.max())) + 1
    return _Game(
        bundle=bundle,
        splits=splits,
        members_ref=members_ref,
        members=members,
        id_offset=id_offset,
        num_steps=num_steps,
        claim=claim,
        fn=fn,
        trainer=trainer,
        sigma=sigma,
        third_party=third_party is not None,
        described=described,
        bound=bound,
    )


def _white_box(
    spec: AuditSpec, run: RunDir, game: _Game, *, executor: Any, strategy: str
) -> tuple[str, dict[str, object], Callable[[], AuditResult]]:
    from attacks.audit.procedures import AUDIT_PROCEDURES

    assert game.trainer is not None and game.sigma is not None  # white-box audits the suite's own trainer
    cfg = {**game.described, "score": spec.score, "bound": game.bound, "strategy": strategy}
    name = spec.name or f"white-box-{audit_hash(cfg)}"
    call = functools.partial(
        AUDIT_PROCEDURES["white-box"].run,
        trainer=game.trainer,
        dataset=game.members_ref,
        noise_multiplier=game.sigma,
        clip_norm=spec.clip_norm,
        directory=run.audit_dir(name),
        num_trials=spec.resolved_num_trials,
        bound=game.bound,
        strategy=strategy,
        score=spec.score,
        full_claim=game.claim,
        sampling_rate=spec.sampling_rate,
        num_steps=game.num_steps,
        budget_seconds=spec.budget_seconds,
        executor=executor,
        config={**cfg, "audit_name": name},
        delta=spec.delta,
        confidence=spec.confidence,
        seed=spec.seed,
        progress=spec.progress,
    )
    return name, cfg, call


def _multi_run_canaries(spec: AuditSpec, game: _Game, start: nn.Module | None) -> ArrayDataset:
    from attacks.audit.canaries import blank_canary, clipbkd_canaries, mislabelled_canaries

    bundle = game.bundle
    if spec.canary == "blank":
        assert start is not None
        cans = blank_canary(
            start, input_shape=bundle.input_shape, num_classes=bundle.num_classes, id_offset=game.id_offset
        )
        if spec.group_size > 1:
            raise v.invalid("group_size", f"canary='blank' is one record; group_size must be 1, got {spec.group_size}")
        return cans
    if spec.canary == "clipbkd":
        return clipbkd_canaries(game.members, group_size=spec.group_size, id_offset=game.id_offset)
    # one held-out example with a wrong label, repeated group_size times
    one = mislabelled_canaries(
        bundle.all().subset(game.splits.non_members), num_canaries=1, seed=spec.seed, id_offset=game.id_offset
    )
    k = spec.group_size
    return ArrayDataset(
        name=one.name,
        features=one.features.repeat(k, *[1] * (one.features.ndim - 1)),
        labels=one.labels.repeat(k),
        ids=np.arange(game.id_offset, game.id_offset + k),
        num_classes=one.num_classes,
    )


def _multi_run(
    spec: AuditSpec, run: RunDir, game: _Game, *, executor: Any, strategy: str
) -> tuple[str, dict[str, object], Callable[[], AuditResult]]:
    from attacks.audit.procedures import AUDIT_PROCEDURES
    from attacks.audit.trials import accepts_initial_state

    cfg_init: dict[str, object] = (
        {"init": spec.init} if spec.init != "random" else {}
    )  # random-start audits keep their names
    if spec.model_fn is not None:  # the start's architecture: its code is part of what the trials are about
        cfg_init.update(
            {
                "model_fn": spec.model_fn,
                **code_keys("model_fn", spec.model_fn, argument="--model-fn", progress=spec.progress),
            }
        )
    start: nn.Module | None = None
    state_file: Path | None = None
    if spec.init == "worst-case" or spec.canary == "blank":
        start = _starting_model(spec, game.members, None if game.third_party else game.trainer)
    if spec.init == "worst-case":
        assert start is not None
        if game.third_party and not accepts_initial_state(game.fn):
            raise v.invalid(
                "--train-fn",
                f"--train-fn {spec.train_fn}: init='worst-case' passes initial_state=... "
                "to the training function, and it takes no such argument",
            )
        state_file = _worst_case_start(
            spec, run, game.bundle, game.splits, start, cfg_key={**game.described, **cfg_init, "canary": spec.canary}
        )
    cans = _multi_run_canaries(spec, game, start)
    cfg = {
        **game.described,
        **cfg_init,
        "canary": spec.canary,
        "group_size": spec.group_size,
        "bound": game.bound,
        "strategy": strategy,
    }
    name = spec.name or f"multi-run-{audit_hash(cfg)}"
    call = functools.partial(
        AUDIT_PROCEDURES["multi-run"].run,
        train_fn=game.fn,
        dataset=game.members_ref,
        canaries=cans,
        claim=game.claim,
        num_trials=spec.resolved_num_trials,
        directory=run.audit_dir(name),
        bound=game.bound,
        strategy=strategy,
        executor=executor,
        config={**cfg, "audit_name": name},
        initial_state=state_file,
        delta=spec.delta,
        confidence=spec.confidence,
        seed=spec.seed,
        progress=spec.progress,
        batcher=trial_batcher(game.trainer) if spec.batch_trials and not game.third_party else None,
    )
    return name, cfg, call


def _one_run(spec: AuditSpec, run: RunDir, game: _Game) -> tuple[str, dict[str, object], Callable[[], AuditResult]]:
    from attacks.audit.canaries import mislabelled_canaries
    from attacks.audit.procedures import AUDIT_PROCEDURES

    m = spec.num_canaries
    splits = game.splits
    pool = game.bundle.all().subset(
        splits.non_members if len(splits.non_members) >= m else np.concatenate([splits.non_members, splits.population])
    )
    cans = mislabelled_canaries(pool, num_canaries=m, seed=spec.seed, id_offset=game.id_offset)
    cfg = {**game.described, "canary": "mislabelled", "num_canaries": m}
    if spec.one_run_bound != "steinke":  # Steinke audits keep the names they always had
        cfg["one_run_bound"] = spec.one_run_bound
    name = spec.name or f"one-run-{audit_hash(cfg)}"
    call = functools.partial(
        AUDIT_PROCEDURES["one-run"].run,
        train_fn=game.fn,
        dataset=game.members_ref,
        canaries=cans,
        claim=game.claim,
        directory=run.audit_dir(name),
        config={**cfg, "audit_name": name},
        delta=spec.delta,
        confidence=spec.confidence,
        seed=spec.seed,
        progress=spec.progress,
    )
    return name, cfg, call


def _play(
    spec: AuditSpec, run: RunDir, game: _Game, *, name: str, cfg: Mapping[str, object], call: Callable[[], AuditResult]
) -> AuditResult:
    """Runs the game under the audit's lock; a third-party function's failure is bad input."""
    from attacks.audit.trials import TrialFailed

    say_if_superseded(run, name, cfg)
    # One writer per audit directory: a second process with the same audit waits for no one
    # and mixes nothing; it is refused, naming the holder.
    with unit_lock(run.path, f"audit-{name}"):
        try:
            result = call()
        except TrialFailed as exc:
            if spec.train_fn is None:
                raise  # the suite's own trainer failing is an internal error, not bad input
            # The user's function (or its model) failed: bad input, one line, exit status 2.
            raise v.invalid("--train-fn", f"--train-fn {spec.train_fn}: {exc}") from exc
        if spec.method == "one-run" and spec.threat == "black-box" and spec.one_run_bound == "fdp":
            result = _rebound_one_run(result, run.audit_dir(name), claim=game.claim, spec=spec)
    return result


def run_audit(spec: AuditSpec, run: RunDir) -> AuditResult:
    """Runs one audit end to end under ``run``; returns its result (stored in ``run.audit_dir(name)``).

    The audit's directory name is in ``result.details.audit_name``. A rerun with the same
    configuration resumes: finished trials are reused (and said so on stderr).

    Raises:
        ValueError: inconsistent options (named in the message), or a third-party ``train_fn``
            that failed in a trial (raised, returned no ``nn.Module``, or returned a model that
            rejects the data): one line naming ``--train-fn``, the trial index, its seed and, for a
            rejected input, its shape; trials finished before it stay stored and a rerun resumes.
    """
    if not isinstance(spec, AuditSpec):
        raise v.invalid_type("spec", f"spec must be an AuditSpec, got {type(spec).__name__}")
    if not isinstance(run, RunDir):
        raise v.invalid_type("run", f"run must be a RunDir, got {type(run).__name__}")
    if spec.train_fn is None and spec.defense not in audit_defenses():
        raise v.invalid(
            "defense",
            f"defense {spec.defense!r} has no white-box trainer for audits; defenses "
            f"that do: {', '.join(audit_defenses()) or 'none'}",
        )
    third_party = resolve_train_fn(spec.train_fn) if spec.train_fn is not None else None  # fail before loading data
    game = _prepare(spec, third_party)
    run.create(command=" ".join(["dpaudit", *sys.argv[1:]]))
    executor = make_audit_executor(
        spec.workers,
        spec.executor,
        spec.address,
        dataset=spec.dataset,
        data_root=spec.data_root,
        ship_code=spec.ship_code,
        num_gpus=_ray_gpus(spec, game.bundle),
    )
    strategy = str(spec.strategy)  # resolved in AuditSpec.__post_init__
    try:
        if spec.threat == "white-box":
            name, cfg, call = _white_box(spec, run, game, executor=executor, strategy=strategy)
        elif spec.method == "multi-run":
            name, cfg, call = _multi_run(spec, run, game, executor=executor, strategy=strategy)
        else:
            name, cfg, call = _one_run(spec, run, game)
        return _play(spec, run, game, name=name, cfg=cfg, call=call)
    finally:
        executor.close()


def _white_box_claim() -> PrivacyClaim:
    """The family the white-box game compares against: one un-sampled Gaussian step (σ is irrelevant here)."""
    from dpaudit.privacy.audit_bounds import gaussian_step_claim

    return gaussian_step_claim(noise_multiplier=1.0)


def _rebound_one_run(result: AuditResult, directory: Path, *, claim: PrivacyClaim, spec: AuditSpec) -> AuditResult:
    """The one-run game's stored scores bounded again with the f-DP bound; replaces ``result.json``.

    The game (one training, the canary scores in ``scores.npz``) is the same for both bounds;
    only the statistics differ, so the training is not repeated for it.
    """
    from dpaudit.privacy.audit_procedures import audit_from_one_run
    from dpaudit.results.audit import save_audit_result

    with np.load(directory / "scores.npz", allow_pickle=False) as stored:
        scores, included = stored["scores"], stored["included"].astype(bool)
    # The procedure computes its own details again; only the caller's context is carried over.
    fdp = audit_from_one_run(
        scores,
        included,
        claim=claim,
        delta=spec.delta,
        confidence=spec.confidence,
        threat_model=result.threat_model,
        details=result.details.context,
        bound=spec.one_run_bound,
    )
    save_audit_result(fdp, directory)
    return fdp
