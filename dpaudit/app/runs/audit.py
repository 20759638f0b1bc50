"""The audit runner: the application layer that wires defenses, canaries and audit games.

Part of the application layer (DESIGN.md, "Import rule"), like :mod:`dpaudit.app.cli`: it may
import ``defenses``, ``attacks`` and ``reports``; the rest of the core may not. It turns the
options of ``dpaudit audit`` (or of ``scripts/reproduce_audit.py``) into

* a training function — the suite's DP-SGD (:class:`DPSGDTrainer`, with the white-box hooks)
  or any third-party ``train(dataset, *, seed) -> nn.Module`` given as ``module:function``
  or ``path/to/file.py:function`` (:func:`resolve_train_fn`);
* the claim it is audited against — DP-SGD's own claim, or one given on the command line or
  as a claim JSON (:func:`dpaudit.privacy.claims.claim_from_dict`);
* canaries (:mod:`attacks.canaries`) and one of the games of :mod:`attacks.audit_procedures`;

and writes the result and its report under ``RUN_DIR/audits/<name>/`` and
``RUN_DIR/reports/``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from dpaudit import _validate as v
from dpaudit.data import ArrayDataset, load_dataset, make_splits
from dpaudit.privacy.audit import AuditResult
from dpaudit.privacy.claims import PrivacyClaim
from dpaudit.store import RunDir, to_jsonable
from dpaudit.weights import callable_attribute, import_callable

__all__ = [
    "THREATS",
    "METHODS",
    "CANARY_KINDS",
    "DatasetRef",
    "FileCallable",
    "resolve_train_fn",
    "make_audit_executor",
    "run_audit",
    "write_audit_report",
]

THREATS = ("black-box", "white-box")
METHODS = ("multi-run", "one-run")
CANARY_KINDS = ("clipbkd", "mislabelled")


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


# ----------------------------------------------------------------------------- training
@dataclass(frozen=True)
class FileCallable:
    """``path/to/file.py:function`` loaded lazily (picklable by path, so workers can load it)."""

    path: str
    name: str

    def resolve(self) -> Callable[..., Any]:
        p = Path(self.path)
        if not p.is_file():
            raise ValueError(f"train-fn: file {self.path!r} does not exist")
        mod_name = "_dpaudit_trainfn_" + hashlib.sha256(str(p.resolve()).encode()).hexdigest()[:12]
        module = sys.modules.get(mod_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(mod_name, p)
            if spec is None or spec.loader is None:
                raise ValueError(f"train-fn: cannot load {self.path!r} as a Python module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            spec.loader.exec_module(module)
        return callable_attribute(module, self.name, label=f"train-fn={self.path}:{self.name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)


def resolve_train_fn(spec: str) -> Callable[..., nn.Module]:
    """A third-party ``train(dataset, *, seed) -> nn.Module`` from ``module:function`` or ``file.py:function``.

    Raises:
        ValueError: the spec is malformed or does not name a callable.
    """
    if not isinstance(spec, str) or spec.count(":") < 1:
        raise ValueError(f"train-fn must look like 'module:function' or 'path/to/file.py:function', got {spec!r}")
    target, _, name = spec.rpartition(":")
    if target.endswith(".py") or os.sep in target or "/" in target:
        fc = FileCallable(str(Path(target).resolve()), name)
        fc.resolve()  # fail early, in this process, with one clear line
        return fc
    return import_callable(spec, argument="train-fn")


def make_audit_executor(workers: int | None) -> Any:
    """In-process for one worker (no start-up cost), else a spawned process pool."""
    from dpaudit.executors import LocalExecutor, SerialExecutor

    if workers is None or workers <= 1:
        return SerialExecutor()
    return LocalExecutor(workers=workers, threads_per_worker=1)


# ----------------------------------------------------------------------------- the audit
def _hash(config: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(to_jsonable(dict(config)), sort_keys=True).encode()).hexdigest()[:8]


def run_audit(
    *,
    out: str | os.PathLike[str],
    dataset: str = "digits",
    model: str = "digits-mlp",
    threat: str = "white-box",
    method: str = "multi-run",
    train_fn: str | None = None,
    claim: PrivacyClaim | None = None,
    epsilon: float | None = None,
    noise_multiplier: float | None = None,
    delta: float = 1e-5,
    clip_norm: float = 1.0,
    sampling_rate: float = 0.01,
    epochs: float | None = None,
    steps: int | None = None,
    learning_rate: float = 0.1,
    num_members: int | None = None,
    trials: int | None = None,
    canaries: int = 100,
    canary: str = "clipbkd",
    group_size: int = 1,
    confidence: float = 0.95,
    bound: str = "gdp",
    strategy: str = "bonferroni",
    score: str = "dirac",
    workers: int | None = None,
    seed: int = 0,
    name: str | None = None,
    data_root: str | None = None,
    device: str = "cpu",
    progress: bool = True,
    report: bool = True,
) -> tuple[AuditResult, Path]:
    """Runs one audit end to end; returns its result and directory (``RUN_DIR/audits/<name>``).

    DP-SGD (``train_fn=None``) is configured by ``clip_norm``, ``sampling_rate``, ``epochs``
    or ``steps``, ``learning_rate`` and either ``noise_multiplier`` or ``epsilon``. With
    ``epsilon``, σ is calibrated so that the *audited claim* has ε_UB = ``epsilon``: for
    black-box games that is the whole training (PLD accountant); for the white-box per-step
    game it is one Gaussian step (σ from the analytic Gaussian mechanism, Balle & Wang 2018).

    A third-party ``train_fn`` needs ``claim`` and supports black-box games only.

    Raises:
        ValueError: inconsistent options (named in the message).
    """
    from attacks import audit_procedures as ap
    from attacks.canaries import clipbkd_canaries, mislabelled_canaries
    from dpaudit.privacy.accountants import calibrate_noise_multiplier

    threat = v.choice("threat", threat, THREATS)
    if name is not None and not (isinstance(name, str) and name.replace("-", "").replace("_", "").replace(".", "").isalnum() and not name.startswith(".")):
        raise ValueError(f"name must be a plain name (letters, digits, - _ .), got {name!r}")
    method = v.choice("method", method, METHODS)
    delta = v.open_unit("delta", delta)
    if (epsilon is None) == (noise_multiplier is None) and train_fn is None:
        raise ValueError(f"give exactly one of epsilon and noise_multiplier for DP-SGD, got epsilon={epsilon!r}, noise_multiplier={noise_multiplier!r}")
    if train_fn is not None and claim is None:
        raise ValueError("train_fn needs a claim (--claim FILE or --claim-noise-multiplier/--claim-sampling-rate/--claim-steps)")
    if train_fn is not None and threat == "white-box":
        raise ValueError("threat='white-box' needs the suite's DP-SGD hooks; third-party training functions are audited black-box")
    if steps is not None and epochs is not None:
        raise ValueError(f"give epochs or steps, not both; got epochs={epochs!r}, steps={steps!r}")

    fn_third_party = resolve_train_fn(train_fn) if train_fn is not None else None  # fail before loading data
    bundle = load_dataset(dataset, data_root=data_root)
    split_kwargs: dict[str, Any] = {"num_members": num_members} if num_members is not None else {}
    splits = make_splits(bundle, seed=seed, **split_kwargs)
    members_ref = DatasetRef(name=dataset, ids=tuple(int(i) for i in splits.members), data_root=data_root)
    members = members_ref()
    id_offset = int(max(bundle.train.ids.max(), bundle.test.ids.max())) + 1

    q = v.half_open_unit("sampling_rate", sampling_rate)
    per_epoch = max(1, round(1.0 / q))
    num_steps = v.integer("steps", steps, minimum=1) if steps is not None else max(1, round((epochs if epochs is not None else 10) * per_epoch))
    if train_fn is None:
        if noise_multiplier is None:
            eps = v.positive("epsilon", epsilon)
            if threat == "white-box":
                from dpaudit.privacy.gaussian import analytic_sigma

                noise_multiplier = analytic_sigma(epsilon=eps, delta=delta)
            else:
                noise_multiplier = calibrate_noise_multiplier(target_epsilon=eps, delta=delta, sampling_rate=q, num_steps=num_steps)
        from defenses.dpsgd import DPSGDConfig

        config = DPSGDConfig(
            noise_multiplier=noise_multiplier,
            clip_norm=clip_norm,
            sampling_rate=q,
            expected_lot_size=q * len(members),
            epochs=num_steps / per_epoch,
            learning_rate=learning_rate,
            delta=delta,
        )
        from defenses.dpsgd import DPSGDTrainer

        trainer = DPSGDTrainer(config=config, model_name=model, device=device)
        claim = trainer.claim(len(members))
        fn: Callable[..., nn.Module] = trainer.train
        described = {"defense": "dpsgd", "model": model, "noise_multiplier": noise_multiplier, "clip_norm": clip_norm, "sampling_rate": q, "num_steps": num_steps, "learning_rate": learning_rate}
    else:
        fn = fn_third_party  # type: ignore[assignment]
        described = {"train_fn": train_fn, "claim": claim.to_dict()}
    described.update({"dataset": dataset, "num_members": len(members), "threat": threat, "delta": delta, "confidence": confidence})

    run = RunDir(out).create(command=" ".join(["dpaudit", *sys.argv[1:]]))
    executor = make_audit_executor(workers)
    try:
        if threat == "white-box":
            r = v.integer("trials", trials if trials is not None else 1, minimum=1)
            cfg = {**described, "score": score, "bound": bound, "strategy": strategy}
            directory = run.subdir("audits") / (name or f"white-box-{_hash(cfg)}")
            result = ap.white_box_audit(
                trainer=trainer,
                dataset=members_ref,
                noise_multiplier=float(noise_multiplier),
                clip_norm=clip_norm,
                directory=directory,
                delta=delta,
                num_trials=r,
                confidence=confidence,
                bound=bound,
                strategy=strategy,
                score=score,
                full_claim=claim,
                sampling_rate=q,
                num_steps=num_steps,
                seed=seed,
                executor=executor,
                config=cfg,
                progress=progress,
            )
        elif method == "multi-run":
            r = v.integer("trials", trials if trials is not None else 50, minimum=1)
            if canary == "clipbkd":
                cans = clipbkd_canaries(members, group_size=group_size, id_offset=id_offset)
            else:  # one held-out example with a wrong label, repeated group_size times
                one = mislabelled_canaries(bundle.all().subset(splits.non_members), num_canaries=1, seed=seed, id_offset=id_offset)
                k = v.integer("group_size", group_size, minimum=1)
                cans = ArrayDataset(
                    name=one.name,
                    features=one.features.repeat(k, *[1] * (one.features.ndim - 1)),
                    labels=one.labels.repeat(k),
                    ids=np.arange(id_offset, id_offset + k),
                    num_classes=one.num_classes,
                )
            cfg = {**described, "canary": canary, "group_size": group_size, "bound": bound, "strategy": strategy}
            directory = run.subdir("audits") / (name or f"multi-run-{_hash(cfg)}")
            result = ap.multi_run_audit(
                train_fn=fn,
                dataset=members_ref,
                canaries=cans,
                claim=claim,
                num_trials=r,
                directory=directory,
                delta=delta,
                confidence=confidence,
                bound=bound,
                strategy=strategy,
                seed=seed,
                executor=executor,
                config=cfg,
                progress=progress,
            )
        else:
            m = v.integer("canaries", canaries, minimum=2)
            pool = bundle.all().subset(splits.non_members if len(splits.non_members) >= m else np.concatenate([splits.non_members, splits.population]))
            cans = mislabelled_canaries(pool, num_canaries=m, seed=seed, id_offset=id_offset)
            cfg = {**described, "canary": "mislabelled", "num_canaries": m}
            directory = run.subdir("audits") / (name or f"one-run-{_hash(cfg)}")
            result = ap.one_run_audit(
                train_fn=fn,
                dataset=members_ref,
                canaries=cans,
                claim=claim,
                directory=directory,
                delta=delta,
                confidence=confidence,
                seed=seed,
                config=cfg,
                progress=progress,
            )
    finally:
        executor.close()
    if report:
        write_audit_report(run.path, result, directory)
    return result, directory


def write_audit_report(run_dir: str | os.PathLike[str], result: AuditResult, audit_dir: str | os.PathLike[str]) -> Path:
    """Renders the audit's report (HTML + Markdown + figures) under ``RUN_DIR/reports/``; returns report.html."""
    from dpaudit.store import load_npz
    from reports.audit import audit_section
    from reports.render import write_report

    scores_path = Path(audit_dir) / "scores.npz"
    scores = load_npz(scores_path) if scores_path.is_file() else {}
    section = audit_section(result, scores, title=f"Audit {Path(audit_dir).name}")
    out = write_report(Path(run_dir) / "reports", [section], title="dpaudit audit report", stem=f"audit-{Path(audit_dir).name}")
    return out
