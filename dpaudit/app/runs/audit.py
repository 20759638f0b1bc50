"""The audit runner: the application layer that wires defenses, canaries and audit games.

Part of the application layer (DESIGN.md, "Import rule"), like :mod:`dpaudit.app.cli`: it may
import ``defenses``, ``attacks`` and ``reports``; the rest of the core may not. It turns an
:class:`AuditSpec` (built by ``dpaudit audit`` or ``scripts/reproduce_audit.py``) into

* a training function — the white-box trainer adapter of a registered defense
  (``defenses.DEFENSES[name].audit_trainer``, with the per-step hooks) or any third-party ``train(dataset, *, seed) -> nn.Module`` given as ``module:function``
  or ``path/to/file.py:function`` (:func:`resolve_train_fn`);
* the claim it is audited against — the defense's own claim, or one given on the command line or
  as a claim JSON (:func:`dpaudit.privacy.claims.claim_from_dict`);
* canaries (:mod:`attacks.canaries`) and one of the games of :mod:`attacks.audit_procedures`;

and writes the result and its report under ``RUN_DIR/audits/<name>/`` and
``RUN_DIR/reports/``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from dpaudit import _validate as v
from dpaudit.app.estimate import PER_EXAMPLE_GRADIENT_FACTOR, announce_if_long, seconds_per_example
from dpaudit.callables import callable_fingerprint, code_fingerprint, resolve_callable
from dpaudit.data import ArrayDataset, dataset_files, load_dataset, make_splits
from dpaudit.locks import unit_lock
from dpaudit.privacy.audit_bounds import ONE_RUN_BOUND_CHOICES, SCORE_BOUND_CHOICES, resolve_bound
from dpaudit.privacy.audit_stats import THRESHOLD_STRATEGIES
from dpaudit.privacy.claims import PrivacyClaim
from dpaudit.results.audit import AuditResult
from dpaudit.store import RunDir, to_jsonable

__all__ = [
    "THREATS",
    "METHODS",
    "CANARY_KINDS",
    "DatasetRef",
    "resolve_train_fn",
    "train_fn_fingerprint",
    "make_audit_executor",
    "AuditSpec",
    "audit_defenses",
    "run_audit",
]

THREATS = ("black-box", "white-box")
METHODS = ("multi-run", "one-run")
CANARY_KINDS = ("clipbkd", "mislabelled", "blank")
INIT_KINDS = ("random", "worst-case")
#: Auditor records a worst-case start is pre-trained on (Annamalai & De Cristofaro use half of MNIST).
WORST_CASE_AUDITOR_RECORDS = 30_000
#: White-box default length: never more steps than this in all (ε ≲ 0.6 would need more; the
#: result then says how far its ceiling is).
WHITE_BOX_MOST_STEPS = 300_000
#: White-box steps per training under ``budget_seconds`` (≈ 2–4 s each on one CPU core).
WHITE_BOX_CHUNK_STEPS = 2_000


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
#: Keys of an audit's configuration that say what its trials were made *of* (code, data), not
#: how: an audit differing from a stored one only in them is the same audit of other code or data.
_IDENTITY_KEYS = ("train_fn_modules", "train_fn_unresolved", "model_fn_modules", "model_fn_unresolved", "dataset_files")


def _code_keys(prefix: str, spec: str, *, argument: str, progress: bool) -> dict[str, Any]:
    """``<prefix>_sha256`` of the code behind ``spec``, with the local modules it covers.

    The modules (name → file and SHA-256) are listed only when the code imports any, so audits
    of self-contained code keep the names they always had; imports found nowhere are said on
    stderr (and listed beside the modules).
    """
    code = code_fingerprint(spec, argument=argument)
    keys: dict[str, Any] = {f"{prefix}_sha256": code.sha256}
    if code.modules:
        keys[f"{prefix}_modules"] = code.covered()
        if code.unresolved:
            keys[f"{prefix}_unresolved"] = list(code.unresolved)
    if code.unresolved and progress:
        print(f"{argument} {spec}: import{'s' if len(code.unresolved) != 1 else ''} {', '.join(code.unresolved)} not found; not part of the code's fingerprint", file=sys.stderr)
    return keys


def _what_changed(ours: Mapping[str, Any], stored: Mapping[str, Any], differ: list[str]) -> list[str]:
    """Why the stored trials are not these, in words: the files that changed."""
    from dpaudit.data.registry import changed_files

    reasons = []
    for prefix in ("train_fn", "model_fn"):
        if f"{prefix}_sha256" not in differ:
            continue
        new, old = ours.get(f"{prefix}_modules") or {}, stored.get(f"{prefix}_modules") or {}
        files = [new[n]["file"] for n in sorted(new) if n in old and old[n] != new[n]]
        added = [new[n]["file"] for n in sorted(new) if n not in old]
        removed = [old[n]["file"] for n in sorted(old) if n not in new]
        source = Path(str(ours.get(prefix, "")).rpartition(":")[0]).name or prefix
        if files:
            reasons.append(f"{', '.join(files)} changed")
        if added:
            reasons.append(f"{source} now imports {', '.join(added)}")
        if removed:
            reasons.append(f"{source} no longer imports {', '.join(removed)}")
        if not (files or added or removed):
            reasons.append(f"{source} (or the version of a package it imports) changed")
    if "dataset_files" in differ:
        if stored.get("dataset_files") is None:
            reasons.append(f"the stored trials do not name the files of dataset {ours.get('dataset')}")
        else:
            reasons.append(f"dataset {ours.get('dataset')}'s files changed ({changed_files(stored.get('dataset_files'), dict(ours.get('dataset_files') or {}))})")
    if "member_ids_sha256" in differ:
        reasons.append("the member ids differ (another data root?)")
    return reasons


def _say_if_superseded(run: RunDir, name: str, cfg: Mapping[str, Any]) -> None:
    """Says so when the run holds trials of this very audit made by other code or other data.

    Those trials are never reused (the fingerprints are part of the audit's name); the line tells
    a user who reran after editing their training function, a module it imports, or a dataset
    file, why nothing was reused: ``recomputing: helper.py changed since the stored trials in …``.
    """
    from dpaudit.store import read_json

    ours = json.loads(json.dumps(to_jsonable(dict(cfg))))
    for config_file in sorted((run.path / "audits").glob("*/config.json")):
        if config_file.parent.name == name:
            continue
        try:
            stored = read_json(config_file)
        except ValueError:
            continue
        # What a trial depends on, as stored: the game's own counters (method, seed …) are in both.
        differ = sorted(k for k in set(ours) | (set(stored) & set(_IDENTITY_KEYS)) if stored.get(k) != ours.get(k))
        if differ and all(k.endswith("_sha256") or k in _IDENTITY_KEYS for k in differ):
            why = "; ".join(_what_changed(ours, stored, differ)) or f"{', '.join(differ)} differ"
            print(f"recomputing: {why} since the stored trials in {config_file.parent}; starting afresh in {run.audit_dir(name)}", file=sys.stderr)


def resolve_train_fn(spec: str) -> Callable[..., nn.Module]:
    """A third-party ``train(dataset, *, seed) -> nn.Module`` from ``module:function`` or ``file.py:function``.

    Raises:
        ValueError: the spec is malformed or does not name a callable (names ``--train-fn``).
    """
    return resolve_callable(spec, argument="--train-fn")


def train_fn_fingerprint(spec: str) -> str:
    """The fingerprint of the code behind a ``--train-fn`` spec (:func:`dpaudit.callables.callable_fingerprint`).

    Stored trials are reused only by an audit of the same code: the fingerprint is part of the
    audit's configuration, so editing the training function (or upgrading a package it imports)
    starts a fresh audit instead of handing back the verdict of the old code (issue "Results
    that cannot lie", finding 1).
    """
    return callable_fingerprint(spec, argument="--train-fn")


def make_audit_executor(
    workers: int | None, kind: str = "local", address: str | None = None, *, dataset: str | None = None, data_root: str | None = None, ship_code: bool = False, num_gpus: float = 0.0
) -> Any:
    """Where trials run: ``local`` is in-process for one worker (no start-up cost), else a spawned
    process pool; ``serial`` always in-process; ``ray`` a local Ray with ``workers`` CPUs or the
    cluster at ``address``."""
    from dpaudit.executors import make_executor
    from dpaudit.executors.jobs import SerialExecutor
    from dpaudit.executors.local import LocalExecutor

    if kind == "ray":
        return make_executor("ray", workers=workers, address=address, datasets=() if dataset is None else (dataset,), data_root=data_root, ship_code=ship_code, num_gpus=num_gpus)
    if address is not None:
        raise v.invalid("address", f"address={address!r} applies to executor 'ray' only, got executor={kind!r}")
    if kind == "serial" or workers is None or workers <= 1:
        return SerialExecutor()
    return LocalExecutor(workers=workers, threads_per_worker=1)


def _ray_gpus(spec: AuditSpec, bundle: Any) -> float:
    if spec.executor != "ray":
        return 0.0
    from dpaudit.app.plan import count_parameters, ray_gpus

    return ray_gpus(spec.device, count_parameters(spec.model, input_shape=bundle.input_shape, num_classes=bundle.num_classes))


# ----------------------------------------------------------------------------- the audit
def _hash(config: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(to_jsonable(dict(config)), sort_keys=True).encode()).hexdigest()[:8]


@dataclass(frozen=True, kw_only=True)
class AuditSpec:
    """Everything one audit needs, validated once (``dpaudit audit`` builds it from its flags).

    Attributes:
        defense: a registered defense with a white-box trainer adapter
            (``defenses.DEFENSES[name].audit_trainer``); ignored when ``train_fn`` is given.
        train_fn: a third-party ``train(dataset, *, seed) -> nn.Module`` as ``module:function``
            or ``path/to/file.py:function`` (black-box games only; needs ``claim``).
        claim: the claim a ``train_fn`` is audited against.
        model_fn: with ``train_fn``: a zero-argument ``module:function`` (or ``file.py:function``)
            building the architecture ``train_fn`` trains, on which a worst-case start (or a
            blank canary's label) is crafted; default: ``model`` from the zoo.
        dataset: dataset name.
        model: zoo model for the suite's defense.
        model_options: its architecture options (``None``: the zoo's defaults).
        defense_config: further fields of the defense's config, for an audit of an exact
            trained configuration (``dpaudit compare`` passes its trained record's: momentum,
            weight decay, per-layer clipping, …); the fields this spec sets itself (σ, C, q,
            the steps, the learning rate, δ) take precedence.
        threat: ``black-box`` (final model only) or ``white-box`` (every released update).
        method: the black-box game, ``multi-run`` or ``one-run``.
        target_epsilon: calibrate σ so that the *audited claim* has ε_UB = this (black-box:
            the whole training, PLD accountant; white-box: one Gaussian step, analytic Gaussian
            mechanism of Balle & Wang 2018). Exactly one of it and ``noise_multiplier``.
        noise_multiplier: σ directly.
        delta: δ of both bounds.
        clip_norm: clipping norm C.
        sampling_rate: Poisson sampling rate q.
        epochs: epochs of 1/q steps (black-box default 10 when ``num_steps`` is not given).
        num_steps: steps T of each training (instead of ``epochs``). White-box default: the
            steps :func:`~dpaudit.privacy.audit_stats.gdp_observations_needed` says make the
            expected ε_LB 0.9 · ε_UB (at most :data:`WHITE_BOX_MOST_STEPS` in all), split over
            one training per worker; with ``budget_seconds``, :data:`WHITE_BOX_CHUNK_STEPS`
            per training.
        learning_rate: learning rate.
        num_members: training-set size (default: the dataset split's own).
        num_trials: multi-run: trainings per side (default 50); white-box: runs pooled
            (default 1, or one per worker when the steps are the default; with
            ``budget_seconds``, the most that will be run: default 10,000).
        num_canaries: one-run: canaries m.
        one_run_bound: one-run: ``steinke`` (Steinke, Nasr & Jagielski 2023) or ``fdp``
            (Mahloujifar, Melis & Chaudhuri 2025, Gaussian trade-off curve); see
            :func:`dpaudit.privacy.audit.audit_from_one_run`.
        canary: multi-run input canary, ``clipbkd``, ``mislabelled`` or ``blank`` (one all-zero
            input labelled with the class the starting model finds least likely).
        init: multi-run: where every training starts, ``random`` (the trainer's own seeded
            initialisation) or ``worst-case`` (Annamalai & De Cristofaro 2024: the model
            pre-trained non-privately on up to 30,000 records of the dataset that are not
            members, saved as ``initial_state.safetensors`` in the audit directory and passed
            to every training as ``initial_state``).
        group_size: multi-run canary copies k (ε_LB is divided by k).
        confidence: confidence of ε_LB.
        bound: ``auto`` (GDP when the audited claim's trade-off curve is Gaussian-family, else
            Clopper–Pearson; :func:`~dpaudit.privacy.audit.resolve_bound`), ``gdp`` (refused for
            other claims) or ``clopper-pearson`` (multi-run and white-box).
        strategy: honest threshold choice, ``bonferroni``, ``split`` or ``fixed`` (white-box
            Dirac only: one threshold from the claim; its default there).
        score: white-box score, ``dirac`` or ``norm``.
        budget_seconds: white-box: train and pool trials until this wall time is spent
            (instead of a fixed ``num_trials``); a rerun reuses the stored trials and adds more.
        workers: worker processes for trials (1: in this process), or a local Ray's CPUs.
        executor: where trials run: ``local`` (process pool), ``serial`` or ``ray``.
        address: Ray cluster address (``executor="ray"`` only; ``None`` starts a local Ray).
        ship_code: Ray sends this checkout's packages to the workers (:mod:`dpaudit.cluster`).
        seed: root seed.
        name: audit name under ``RUN_DIR/audits/`` (default derived from the configuration).
        data_root: data root (``None``: the default resolution).
        device: ``cpu`` or ``cuda[:N]``.
        progress: report progress on stderr.
    """

    defense: str = "dpsgd"
    train_fn: str | None = None
    claim: PrivacyClaim | None = None
    model_fn: str | None = None
    dataset: str = "digits"
    model: str = "digits-mlp"
    model_options: Mapping[str, Any] | None = None
    defense_config: Mapping[str, Any] | None = None
    threat: str = "black-box"
    method: str = "multi-run"
    target_epsilon: float | None = None
    noise_multiplier: float | None = None
    delta: float = 1e-5
    clip_norm: float = 1.0
    sampling_rate: float = 0.01
    epochs: float | None = None
    num_steps: int | None = None
    learning_rate: float = 0.1
    num_members: int | None = None
    num_trials: int | None = None
    num_canaries: int = 100
    one_run_bound: str = "steinke"
    canary: str = "clipbkd"
    init: str = "random"
    group_size: int = 1
    confidence: float = 0.95
    bound: str = "auto"
    strategy: str | None = None
    score: str = "dirac"
    budget_seconds: float | None = None
    workers: int = 1
    executor: str = "local"
    address: str | None = None
    ship_code: bool = False
    seed: int = 0
    name: str | None = None
    data_root: str | None = None
    device: str = "cpu"
    progress: bool = True

    def __post_init__(self) -> None:
        v.choice("threat", self.threat, THREATS)
        v.choice("method", self.method, METHODS)
        v.choice("canary", self.canary, CANARY_KINDS)
        v.choice("init", self.init, INIT_KINDS)
        if self.init != "random" and (self.threat, self.method) != ("black-box", "multi-run"):
            raise v.invalid("init", f"init={self.init!r} applies to the black-box multi-run game, got threat={self.threat!r}, method={self.method!r}")
        v.choice("one_run_bound", self.one_run_bound, ONE_RUN_BOUND_CHOICES)
        v.choice("bound", self.bound, SCORE_BOUND_CHOICES)
        if self.threat == "white-box":
            from attacks.audit_procedures import white_box_strategy

            object.__setattr__(self, "strategy", white_box_strategy(self.score, self.strategy))
        elif self.strategy is None:
            object.__setattr__(self, "strategy", "bonferroni")
        else:
            v.choice("strategy", self.strategy, THRESHOLD_STRATEGIES)
            if self.strategy == "fixed":
                raise v.invalid("strategy", f"strategy='fixed' takes its threshold from the white-box Dirac claim; with threat={self.threat!r} use bonferroni or split")
        if self.budget_seconds is not None:
            object.__setattr__(self, "budget_seconds", v.positive("budget_seconds", self.budget_seconds))
            if self.threat != "white-box":
                raise v.invalid("budget_seconds", f"budget_seconds applies to threat='white-box' (trials of a fixed length pooled until the time is spent), got threat={self.threat!r}")
        if self.one_run_bound != "steinke" and self.method != "one-run":
            raise v.invalid("one_run_bound", f"one_run_bound applies to method='one-run', got method={self.method!r}, one_run_bound={self.one_run_bound!r}")
        object.__setattr__(self, "delta", v.open_unit("delta", self.delta))
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        object.__setattr__(self, "sampling_rate", v.half_open_unit("sampling_rate", self.sampling_rate))
        object.__setattr__(self, "clip_norm", v.positive("clip_norm", self.clip_norm))
        object.__setattr__(self, "learning_rate", v.positive("learning_rate", self.learning_rate))
        object.__setattr__(self, "group_size", v.integer("group_size", self.group_size, minimum=1))
        object.__setattr__(self, "num_canaries", v.integer("num_canaries", self.num_canaries, minimum=2))
        object.__setattr__(self, "workers", v.integer("workers", self.workers, minimum=1))
        from dpaudit.executors import EXECUTORS

        v.choice("executor", self.executor, EXECUTORS)
        if self.address is not None and self.executor != "ray":
            raise v.invalid("address", f"address={self.address!r} applies to executor='ray' only, got executor={self.executor!r}")
        for name in ("num_trials", "num_steps", "num_members"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, v.integer(name, value, minimum=1))
        if self.target_epsilon is not None:
            object.__setattr__(self, "target_epsilon", v.positive("target_epsilon", self.target_epsilon))
        if self.noise_multiplier is not None:
            object.__setattr__(self, "noise_multiplier", v.positive("noise_multiplier", self.noise_multiplier))
        if self.epochs is not None:
            object.__setattr__(self, "epochs", v.positive("epochs", self.epochs))
        if self.num_steps is not None and self.epochs is not None:
            raise v.invalid("epochs", f"give epochs or num_steps, not both; got epochs={self.epochs!r}, num_steps={self.num_steps!r}")
        if self.name is not None and not (isinstance(self.name, str) and self.name.replace("-", "").replace("_", "").replace(".", "").isalnum() and not self.name.startswith(".")):
            raise v.invalid("name", f"name must be a plain name (letters, digits, - _ .), got {self.name!r}")
        if self.model_fn is not None and (self.train_fn is None or (self.init == "random" and self.canary != "blank")):
            raise v.invalid(
                "model_fn",
                f"model_fn builds the starting architecture of a train_fn audited with init='worst-case' or canary='blank'; "
                f"got model_fn={self.model_fn!r} with train_fn={self.train_fn!r}, init={self.init!r}, canary={self.canary!r}",
            )
        if self.train_fn is not None and (self.model_options or self.defense_config):
            raise v.invalid("model_options", "model_options and defense_config configure the suite's defense; a train_fn builds its own model")
        if self.train_fn is None:
            if self.claim is not None:
                raise v.invalid("claim", f"claim applies to train_fn; defense {self.defense!r} builds its own claim")
            if (self.target_epsilon is None) == (self.noise_multiplier is None):
                raise v.invalid("target_epsilon", f"give exactly one of target_epsilon and noise_multiplier, got target_epsilon={self.target_epsilon!r}, noise_multiplier={self.noise_multiplier!r}")
        else:
            if not isinstance(self.claim, PrivacyClaim):
                raise v.invalid("train_fn", f"train_fn needs the claim it is audited against, got claim={self.claim!r}")
            if self.threat == "white-box":
                raise v.invalid("threat", "threat='white-box' needs a defense's white-box trainer hooks; a third-party train_fn is audited black-box")
            if self.target_epsilon is not None or self.noise_multiplier is not None:
                raise v.invalid("target_epsilon", "target_epsilon/noise_multiplier configure the suite's defense; with train_fn the claim comes from claim")

    @property
    def _white_box_default_length(self) -> bool:
        return self.threat == "white-box" and self.num_steps is None and self.epochs is None

    @property
    def white_box_total_steps(self) -> int:
        """White-box default: observations for an expected ε_LB of 0.9 · the step's ε_UB.

        The claim is one Gaussian step with σ (given, or calibrated to ``target_epsilon``), so
        μ = 1/σ; :func:`gdp_observations_needed` turns μ into a count (≈ 82,000 steps at
        ε = 1, 25,000 at 2, 8,000 at 4; δ = 1e-5, 95 %), capped at :data:`WHITE_BOX_MOST_STEPS`.
        """
        from dpaudit.privacy.audit_stats import gdp_observations_needed
        from dpaudit.privacy.gaussian import analytic_sigma

        sigma = self.noise_multiplier if self.noise_multiplier is not None else analytic_sigma(epsilon=float(self.target_epsilon), delta=self.delta)  # type: ignore[arg-type]
        return gdp_observations_needed(mu=1.0 / sigma, delta=self.delta, confidence=self.confidence, ratio=0.9, most=WHITE_BOX_MOST_STEPS)

    @property
    def resolved_num_trials(self) -> int:
        """Trainings: per side for multi-run (default 50); pooled runs for white-box; 1 for one-run."""
        if self.threat == "white-box":
            if self.num_trials is not None:
                return self.num_trials
            if self.budget_seconds is not None:
                return 10_000
            return self.workers if self._white_box_default_length and self.train_fn is None else 1
        if self.method == "multi-run":
            return self.num_trials if self.num_trials is not None else 50
        return 1

    @property
    def resolved_num_steps(self) -> int:
        """T of each training: ``num_steps``, else ``epochs`` of 1/q steps (black-box default 10 epochs).

        White-box without either: :data:`WHITE_BOX_CHUNK_STEPS` per training under a time
        budget, else :attr:`white_box_total_steps` split over :attr:`resolved_num_trials`.
        """
        if self.num_steps is not None:
            return self.num_steps
        if self._white_box_default_length and self.train_fn is None:
            if self.budget_seconds is not None:
                return WHITE_BOX_CHUNK_STEPS
            return -(-self.white_box_total_steps // self.resolved_num_trials)
        per_epoch = max(1, round(1.0 / self.sampling_rate))
        return max(1, round((self.epochs if self.epochs is not None else 10) * per_epoch))


def audit_defenses() -> tuple[str, ...]:
    """The registered defenses that carry a white-box trainer adapter (those ``audit`` can train)."""
    from defenses import DEFENSES

    return tuple(name for name, entry in DEFENSES.items() if entry.audit_trainer is not None)


def _audit_trainer(spec: AuditSpec, *, num_members: int, num_steps: int) -> tuple[Any, float]:
    """The defense's white-box trainer for ``spec`` and the σ it runs with."""
    from defenses import DEFENSES
    from dpaudit.privacy.calibration import calibrate_noise_multiplier
    from dpaudit.privacy.gaussian import analytic_sigma

    entry = DEFENSES.get(spec.defense)
    if entry is None or entry.audit_trainer is None:
        raise v.invalid("defense", f"defense {spec.defense!r} has no white-box trainer for audits; defenses that do: {', '.join(audit_defenses()) or 'none'}")
    sigma = spec.noise_multiplier
    if sigma is None:
        eps = float(spec.target_epsilon)  # type: ignore[arg-type]  # __post_init__ guarantees one of the two
        # The calibrated claim is the one the game compares against: one step for white-box, the run otherwise.
        if spec.threat == "white-box":
            sigma = analytic_sigma(epsilon=eps, delta=spec.delta)
        else:
            sigma = calibrate_noise_multiplier(target_epsilon=eps, delta=spec.delta, sampling_rate=spec.sampling_rate, num_steps=num_steps)
    per_epoch = max(1, round(1.0 / spec.sampling_rate))
    # The audit's training knobs, passed to the defense's config by field name: a defense whose
    # config lacks one of them cannot be audited with these options (said, not silently dropped).
    wanted = {
        "noise_multiplier": sigma,
        "clip_norm": spec.clip_norm,
        "sampling_rate": spec.sampling_rate,
        "expected_lot_size": spec.sampling_rate * num_members,
        "epochs": num_steps / per_epoch,
        "learning_rate": spec.learning_rate,
        "delta": spec.delta,
    }
    known = {f.name for f in dataclasses.fields(entry.config_type)}
    missing = sorted(set(wanted) - known) or sorted(set(spec.defense_config or {}) - known)
    if missing:
        raise v.invalid("defense", f"defense {spec.defense!r}: its config {entry.config_type.__name__} has no field(s) {', '.join(missing)} that the audit sets")
    config = entry.config_type(**{**dict(spec.defense_config or {}), **wanted})
    options = {"model_options": dict(spec.model_options)} if spec.model_options else {}
    return entry.audit_trainer(config=config, model_name=spec.model, device=spec.device, **options), float(sigma)


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
                raise v.invalid("--model-fn", f"--model-fn {spec.model_fn}: raised {type(exc).__name__}: {' '.join(str(exc).split()) or '(no message)'}") from exc
            if not isinstance(built, nn.Module):
                raise v.invalid("--model-fn", f"--model-fn {spec.model_fn}: returned a {type(built).__name__}, not a torch.nn.Module")
            return built
        return build_model(spec.model, input_shape=members.input_shape, num_classes=members.num_classes)


def _worst_case_start(spec: AuditSpec, run: RunDir, bundle: Any, splits: Any, model: nn.Module, *, cfg_key: Mapping[str, Any]) -> Path:
    """Pre-trains ``model`` on non-member records (the auditor's own) once; returns the safetensors file.

    The file sits in its own directory keyed by the audit's configuration, so a rerun reuses
    it (and says so) and another configuration never picks it up.
    """
    from attacks.canaries import worst_case_initial_state
    from dpaudit.weights import load_weights, save_weights

    directory = run.path / "initial-states" / f"worst-case-{_hash(cfg_key)}"
    path = directory / "initial_state.safetensors"
    if path.is_file():
        if spec.progress:
            print(f"reusing the worst-case start {path}", file=sys.stderr, flush=True)
    else:
        pool = np.asarray(splits.population if len(splits.population) else splits.non_members)[:WORST_CASE_AUDITOR_RECORDS]
        if pool.size == 0:
            raise v.invalid("num_members", f"init='worst-case' pre-trains on records that are not members; dataset {spec.dataset!r} has none left with num_members={spec.num_members!r}")
        if spec.progress:
            print(f"crafting the worst-case start: {spec.model} pre-trained non-privately on {pool.size:,} non-member records (5 epochs)", file=sys.stderr, flush=True)
        state = worst_case_initial_state(model, bundle.all().subset(pool), seed=spec.seed)
        directory.mkdir(parents=True, exist_ok=True)
        save_weights(path, state)
    model.load_state_dict(load_weights(path))
    return path


def run_audit(spec: AuditSpec, run: RunDir) -> AuditResult:
    """Runs one audit end to end under ``run``; returns its result (stored in ``run.audit_dir(name)``).

    The audit's directory name is in ``result.details["audit_name"]``. A rerun with the same
    configuration resumes: finished trials are reused (and said so on stderr).

    Raises:
        ValueError: inconsistent options (named in the message), or a third-party ``train_fn``
            that failed in a trial (raised, returned no ``nn.Module``, or returned a model that
            rejects the data): one line naming ``--train-fn``, the trial index, its seed and, for a
            rejected input, its shape; trials finished before it stay stored and a rerun resumes.
    """
    from attacks import audit_procedures as ap
    from attacks.canaries import blank_canary, clipbkd_canaries, mislabelled_canaries

    if not isinstance(spec, AuditSpec):
        raise v.invalid_type("spec", f"spec must be an AuditSpec, got {type(spec).__name__}")
    if not isinstance(run, RunDir):
        raise v.invalid_type("run", f"run must be a RunDir, got {type(run).__name__}")
    if spec.train_fn is None and spec.defense not in audit_defenses():
        raise v.invalid("defense", f"defense {spec.defense!r} has no white-box trainer for audits; defenses that do: {', '.join(audit_defenses()) or 'none'}")
    fn_third_party = resolve_train_fn(spec.train_fn) if spec.train_fn is not None else None  # fail before loading data
    bundle = load_dataset(spec.dataset, data_root=spec.data_root)
    split_kwargs: dict[str, Any] = {"num_members": spec.num_members} if spec.num_members is not None else {}
    splits = make_splits(bundle, seed=spec.seed, **split_kwargs)
    members_ref = DatasetRef(name=spec.dataset, ids=tuple(int(i) for i in splits.members), data_root=spec.data_root)
    members = members_ref()
    id_offset = int(max(bundle.train.ids.max(), bundle.test.ids.max())) + 1

    q = spec.sampling_rate
    num_steps = spec.resolved_num_steps
    if spec.train_fn is None and spec.progress:
        trainings = 2 * spec.resolved_num_trials if spec.threat == "black-box" and spec.method == "multi-run" else spec.resolved_num_trials
        per_example = seconds_per_example(spec.model, input_shape=bundle.input_shape, num_classes=bundle.num_classes, device=spec.device) * PER_EXAMPLE_GRADIENT_FACTOR
        announce_if_long(
            trainings * num_steps * q * len(members) * per_example / spec.workers,
            f"this audit ({trainings} trainings of {num_steps} DP-SGD steps, {spec.workers} worker(s))",
            hint="--num-trials, --num-steps and --num-workers change it",
            jobs=trainings,
            job_seconds=num_steps * q * len(members) * per_example,
        )
    claim: PrivacyClaim
    if fn_third_party is None:
        trainer, sigma = _audit_trainer(spec, num_members=len(members), num_steps=num_steps)
        claim = trainer.claim(len(members))
        fn: Callable[..., nn.Module] = trainer.train
        described: dict[str, Any] = {
            "defense": spec.defense,
            "model": spec.model,
            "noise_multiplier": sigma,
            "clip_norm": spec.clip_norm,
            "sampling_rate": q,
            "num_steps": num_steps,
            "learning_rate": spec.learning_rate,
            # Only when given, so the names of audits without them stay as they were.
            **{k: dict(x) for k, x in (("model_options", spec.model_options), ("defense_config", spec.defense_config)) if x},
        }
    else:
        assert spec.claim is not None  # checked in AuditSpec.__post_init__
        claim = spec.claim
        fn = fn_third_party
        described = {"train_fn": spec.train_fn, **_code_keys("train_fn", spec.train_fn, argument="--train-fn", progress=spec.progress), "claim": claim.to_dict()}
    # The bound follows the compared claim (white-box: one un-sampled Gaussian step), decided
    # before any training so that a GDP bound on a non-Gaussian claim is refused up front.
    bound = resolve_bound(spec.bound, claim=claim if spec.threat == "black-box" else _white_box_claim())
    if spec.method == "one-run" and spec.threat == "black-box" and spec.one_run_bound == "fdp" and claim.trade_off_family != "gaussian":
        raise v.invalid(
            "one_run_bound", f"one_run_bound='fdp' assumes a Gaussian trade-off curve, and the claim of kind {claim.kind!r} ({claim.statement()}) is not Gaussian-family; use one_run_bound='steinke'"
        )
    # The member ids are part of what the trials are about: a data root holding other data gives
    # other members, and their trials must not be mixed with these.
    members_sha256 = hashlib.sha256(np.asarray(members_ref.ids, dtype=np.int64).tobytes()).hexdigest()[:16]
    described.update({"dataset": spec.dataset, "num_members": len(members), "member_ids_sha256": members_sha256, "threat": spec.threat, "delta": spec.delta, "confidence": spec.confidence})
    # The files the data came from: a dataset file replaced under the data root (its MD5SUMS
    # updated) gives other trials. Bundled data (digits) has none, so its audits keep their names.
    data = dataset_files(spec.dataset, data_root=spec.data_root)
    if data:
        described["dataset_files"] = data

    run.create(command=" ".join(["dpaudit", *sys.argv[1:]]))
    executor = make_audit_executor(
        spec.workers,
        spec.executor,
        spec.address,
        dataset=spec.dataset,
        data_root=spec.data_root,
        ship_code=spec.ship_code,
        num_gpus=_ray_gpus(spec, bundle),
    )
    common = {"delta": spec.delta, "confidence": spec.confidence, "seed": spec.seed, "progress": spec.progress}
    try:
        if spec.threat == "white-box":
            cfg = {**described, "score": spec.score, "bound": bound, "strategy": spec.strategy}
            name = spec.name or f"white-box-{_hash(cfg)}"
            call = functools.partial(
                ap.white_box_audit,
                trainer=trainer,
                dataset=members_ref,
                noise_multiplier=sigma,
                clip_norm=spec.clip_norm,
                directory=run.audit_dir(name),
                num_trials=spec.resolved_num_trials,
                bound=bound,
                strategy=spec.strategy,
                score=spec.score,
                full_claim=claim,
                sampling_rate=q,
                num_steps=num_steps,
                budget_seconds=spec.budget_seconds,
                executor=executor,
                config={**cfg, "audit_name": name},
                **common,
            )
        elif spec.method == "multi-run":
            cfg_init = {"init": spec.init} if spec.init != "random" else {}  # random-start audits keep their names
            if spec.model_fn is not None:  # the start's architecture: its code is part of what the trials are about
                cfg_init.update({"model_fn": spec.model_fn, **_code_keys("model_fn", spec.model_fn, argument="--model-fn", progress=spec.progress)})
            start: nn.Module | None = None
            state_file: Path | None = None
            if spec.init == "worst-case" or spec.canary == "blank":
                start = _starting_model(spec, members, trainer if fn_third_party is None else None)
            if spec.init == "worst-case":
                assert start is not None
                if fn_third_party is not None and not ap.accepts_initial_state(fn_third_party):
                    raise v.invalid("--train-fn", f"--train-fn {spec.train_fn}: init='worst-case' passes initial_state=... to the training function, and it takes no such argument")
                state_file = _worst_case_start(spec, run, bundle, splits, start, cfg_key={**described, **cfg_init, "canary": spec.canary})
            if spec.canary == "blank":
                assert start is not None
                cans = blank_canary(start, input_shape=bundle.input_shape, num_classes=bundle.num_classes, id_offset=id_offset)
                if spec.group_size > 1:
                    raise v.invalid("group_size", f"canary='blank' is one record; group_size must be 1, got {spec.group_size}")
            elif spec.canary == "clipbkd":
                cans = clipbkd_canaries(members, group_size=spec.group_size, id_offset=id_offset)
            else:  # one held-out example with a wrong label, repeated group_size times
                one = mislabelled_canaries(bundle.all().subset(splits.non_members), num_canaries=1, seed=spec.seed, id_offset=id_offset)
                k = spec.group_size
                cans = ArrayDataset(
                    name=one.name,
                    features=one.features.repeat(k, *[1] * (one.features.ndim - 1)),
                    labels=one.labels.repeat(k),
                    ids=np.arange(id_offset, id_offset + k),
                    num_classes=one.num_classes,
                )
            cfg = {**described, **cfg_init, "canary": spec.canary, "group_size": spec.group_size, "bound": bound, "strategy": spec.strategy}
            name = spec.name or f"multi-run-{_hash(cfg)}"
            call = functools.partial(
                ap.multi_run_audit,
                train_fn=fn,
                dataset=members_ref,
                canaries=cans,
                claim=claim,
                num_trials=spec.resolved_num_trials,
                directory=run.audit_dir(name),
                bound=bound,
                strategy=spec.strategy,
                executor=executor,
                config={**cfg, "audit_name": name},
                initial_state=state_file,
                **common,
            )
        else:
            m = spec.num_canaries
            pool = bundle.all().subset(splits.non_members if len(splits.non_members) >= m else np.concatenate([splits.non_members, splits.population]))
            cans = mislabelled_canaries(pool, num_canaries=m, seed=spec.seed, id_offset=id_offset)
            cfg = {**described, "canary": "mislabelled", "num_canaries": m}
            if spec.one_run_bound != "steinke":  # Steinke audits keep the names they always had
                cfg["one_run_bound"] = spec.one_run_bound
            name = spec.name or f"one-run-{_hash(cfg)}"
            call = functools.partial(
                ap.one_run_audit,
                train_fn=fn,
                dataset=members_ref,
                canaries=cans,
                claim=claim,
                directory=run.audit_dir(name),
                config={**cfg, "audit_name": name},
                **common,
            )
        _say_if_superseded(run, name, cfg)
        # One writer per audit directory: a second process with the same audit waits for no one
        # and mixes nothing; it is refused, naming the holder.
        with unit_lock(run.path, f"audit-{name}"):
            try:
                result = call()
            except ap.TrialFailed as exc:
                if spec.train_fn is None:
                    raise  # the suite's own trainer failing is an internal error, not bad input
                # The user's function (or its model) failed: bad input, one line, exit status 2.
                raise v.invalid("--train-fn", f"--train-fn {spec.train_fn}: {exc}") from exc
            if spec.method == "one-run" and spec.threat == "black-box" and spec.one_run_bound == "fdp":
                result = _rebound_one_run(result, run.audit_dir(name), claim=claim, spec=spec)
    finally:
        executor.close()
    return result


def _white_box_claim() -> PrivacyClaim:
    """The family the white-box game compares against: one un-sampled Gaussian step (σ is irrelevant here)."""
    from dpaudit.privacy.audit_bounds import gaussian_step_claim

    return gaussian_step_claim(noise_multiplier=1.0)


#: Keys :func:`audit_from_one_run` computes itself; the rest of a result's details are carried over.
_ONE_RUN_COMPUTED = ("num_guesses", "num_correct", "num_canaries", "guess_counts", "tie_break_seed", "guess_curve", "one_run_bound", "mu_lb", "tradeoff_curve", "sampling_rate", "bound_assumption")


def _rebound_one_run(result: AuditResult, directory: Path, *, claim: PrivacyClaim, spec: AuditSpec) -> AuditResult:
    """The one-run game's stored scores bounded again with the f-DP bound; replaces ``result.json``.

    The game (one training, the canary scores in ``scores.npz``) is the same for both bounds;
    only the statistics differ, so the training is not repeated for it.
    """
    from dpaudit.results.audit import save_audit_result
    from dpaudit.results.auditing import audit_from_one_run

    with np.load(directory / "scores.npz", allow_pickle=False) as stored:
        scores, included = stored["scores"], stored["included"].astype(bool)
    kept = {k: x for k, x in result.details.items() if k not in _ONE_RUN_COMPUTED}
    fdp = audit_from_one_run(scores, included, claim=claim, delta=spec.delta, confidence=spec.confidence, threat_model=result.threat_model, details=kept, bound=spec.one_run_bound)
    save_audit_result(fdp, directory)
    return fdp
