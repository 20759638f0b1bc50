"""Running a ``dpaudit compare`` grid: the two waves of jobs, their stored outcomes, the matrix.

Every (setting, seed) trains (or finds its record) in the first wave; every trained record is
attacked, certified and inverted, and every auditable setting audited, in the second. Each job's
outcome is written atomically to ``RUN_DIR/compare/NAME/jobs/KEY.json`` with a hash of what it
was asked, so a rerun does only the jobs that are missing and says how many it reused. The typed
outcomes are condensed in the torch-free core (:func:`dpaudit.results.compare_outcomes.condense`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from dpaudit import _validate as v
from dpaudit.app.runs.compare import jobs
from dpaudit.app.runs.compare.grid import CompareGrid, Setting
from dpaudit.app.runs.compare.jobs import EVALUATION_KINDS, JobKey
from dpaudit.results.compare_outcomes import (
    AuditOutcome,
    EvasionOutcome,
    InversionOutcome,
    MembershipOutcome,
    SeedOutcomes,
    SettingOutcomes,
    TrainedOutcome,
)
from dpaudit.results.compare_outcomes import condense as condense_outcomes
from dpaudit.results.comparison import ComparisonResult, save_comparison
from dpaudit.specs import PlainSpec, spec_field
from dpaudit.store import RunDir, atomic_write_json, read_json, safe_stem, to_jsonable

__all__ = ["CompareSpec", "condense", "run_compare"]

#: What a job hands back.
Outcome = TrainedOutcome | MembershipOutcome | EvasionOutcome | InversionOutcome | AuditOutcome
OutcomeT = TypeVar("OutcomeT", TrainedOutcome, MembershipOutcome, EvasionOutcome, InversionOutcome, AuditOutcome)
#: Each job kind's outcome type, which reads its stored JSON back.
_OUTCOME_TYPES: dict[str, type[Any]] = {
    "train": TrainedOutcome,
    "membership": MembershipOutcome,
    "evasion": EvasionOutcome,
    "inversion": InversionOutcome,
    "audit": AuditOutcome,
}
_EVALUATIONS: dict[str, Callable[..., Any]] = {
    "membership": jobs.membership_job,
    "evasion": jobs.evasion_job,
    "inversion": jobs.inversion_job,
}
#: Raised when what a section measures changes, so stored outcomes of the old measurement are redone
#: (evasion 2: models that do not certify are attacked on certify's test subset).
_SECTION_VERSIONS = {"membership": 1, "evasion": 2, "inversion": 1}


@dataclass(frozen=True, kw_only=True)
class CompareSpec:
    """One ``dpaudit compare`` run.

    Attributes:
        grid: the parsed grid.
        executor: ``local`` (process pool), ``ray`` or ``serial``.
        num_workers: parallel jobs (``None``: the executor's default).
        address: Ray cluster address (``executor="ray"`` only; the run directory must then be
            on a filesystem every node shares).
        ship_code: Ray sends this checkout's packages to the workers (:mod:`dpaudit.cluster`).
        data_root: data root.
        progress: progress on stderr.
        command: the command line, for the run manifest.
        i_know: accept a grid above the documented limits — a setting's or section's size, more
            than :data:`~dpaudit.app.runs.grid_checks.JOB_LIMIT` jobs, or an estimated time over
            an hour — as ``--i-know`` does on the command line. Checked here, so the Python API
            passes the same gate as ``dpaudit compare``.
    """

    grid: CompareGrid
    executor: str = "local"
    num_workers: int | None = None
    address: str | None = None
    ship_code: bool = False
    data_root: str | None = None
    progress: bool = True
    command: str = ""
    i_know: bool = False

    def __post_init__(self) -> None:
        from dpaudit.app.runs.compare.limits import check_plan
        from dpaudit.executors import EXECUTORS

        if not isinstance(self.grid, CompareGrid):
            raise v.invalid_type("grid", f"grid must be a CompareGrid, got {type(self.grid).__name__}")
        v.choice("executor", self.executor, EXECUTORS)
        if self.num_workers is not None:
            v.integer("num_workers", self.num_workers, minimum=1)
        if self.address is not None and self.executor != "ray":
            raise v.invalid("address", f"address={self.address!r} needs executor 'ray', got {self.executor!r}")
        if not isinstance(self.i_know, bool):
            raise v.invalid_type("i_know", f"i_know must be a bool, got {self.i_know!r}")
        check_plan(
            self.grid,
            i_know=self.i_know,
            data_root=self.data_root,
            workers=1 if self.executor == "serial" else self.num_workers,
            progress=self.progress,
        )


# ----------------------------------------------------------------------------- the job store


def _hash(payload: Any) -> str:
    return hashlib.sha256(json.dumps(to_jsonable(payload), sort_keys=True).encode()).hexdigest()[:16]


def _job_file(jobs_dir: Path, key: JobKey) -> Path:
    """Where a job's outcome is kept: a readable stem plus a hash of the exact key (stems may collide)."""
    name = str(key)
    return jobs_dir / f"{safe_stem(name, default='job')}-{hashlib.sha256(name.encode()).hexdigest()[:8]}.json"


#: What the job store writes beside each outcome's own keys (see :func:`_run_wave`).
_JOB_STORE_KEYS = ("job_hash", "job")


def _parse(key: JobKey, data: Mapping[str, object]) -> Outcome:
    """A stored (or hand-made) outcome of job ``key`` as its typed value."""
    outcome: Outcome = _OUTCOME_TYPES[key.kind].from_dict({k: x for k, x in data.items() if k not in _JOB_STORE_KEYS})
    return outcome


def _stored(key: JobKey, path: Path, wanted: str) -> Outcome | None:
    """The stored outcome of a job asked exactly ``wanted``, or ``None`` (missing, stale or corrupt)."""
    if not path.is_file():
        return None
    try:
        data = read_json(path)
    except ValueError:
        return None  # a corrupt outcome is redone, not trusted
    if not (isinstance(data, dict) and data.get("job_hash") == wanted):
        return None
    try:
        return _parse(key, data)
    except (KeyError, TypeError, ValueError):
        return None  # an outcome of another shape is redone, not trusted


@dataclass(frozen=True)
class _PlannedJob:
    """A job of a wave: its key, its outcome file, the hash of what it is asked, what it runs."""

    key: JobKey
    path: Path
    wanted: str
    fn: Callable[..., Outcome]
    kwargs: Mapping[str, object]  # the job function's keyword arguments


def _named_job(*, fn: Callable[..., Outcome], key: str, kwargs: Mapping[str, object]) -> Outcome:
    """Runs one job; a ValueError / TypeError (a bad parameter of the grid) names the job."""
    try:
        return fn(**kwargs)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, v.InvalidArgument):  # a bad parameter of the grid: still the user's (exit 2)
            raise v.invalid(exc.argument, f"job {key}: {exc}") from exc
        raise ValueError(f"job {key}: {exc}") from exc


class _LazyExecutor:
    """One executor for both waves, started only when a job actually has to run (a rerun that
    finds every outcome stored starts no pool and no Ray)."""

    def __init__(self, spec: CompareSpec) -> None:
        self.spec = spec
        self.executor: Any = None

    def get(self) -> Any:
        from dpaudit.executors import make_executor

        if self.executor is None:
            self.executor = make_executor(
                self.spec.executor,
                workers=self.spec.num_workers,
                address=self.spec.address,
                ship_code=self.spec.ship_code,
                datasets=(self.spec.grid.dataset,),
                data_root=self.spec.data_root,
                num_gpus=self._gpus(),
            )
            self.executor.__enter__()
        return self.executor

    def _gpus(self) -> float:
        """One share for every job of the grid: the largest model's (:func:`dpaudit.cluster.gpu_share`)."""
        grid = self.spec.grid
        if self.spec.executor != "ray" or not str(grid.device).startswith("cuda"):
            return 0.0
        from dpaudit.app.cost import count_parameters, ray_gpus
        from dpaudit.data import load_dataset

        bundle = load_dataset(grid.dataset, data_root=self.spec.data_root)  # cached: the run has loaded it
        largest = max(
            count_parameters(
                s.model,
                input_shape=bundle.input_shape,
                num_classes=bundle.num_classes,
                model_options=dict(s.model_options),
            )
            for s in grid.settings
        )
        return ray_gpus(grid.device, largest)

    def __enter__(self) -> _LazyExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.executor is not None:
            self.executor.__exit__(*exc)


def _run_wave(
    planned: Sequence[_PlannedJob], *, executor: _LazyExecutor, bar: Any, counts: dict[str, int]
) -> dict[JobKey, Outcome]:
    """Runs the jobs whose outcome is not stored yet; returns key → typed outcome for all of them."""
    from dpaudit.executors.jobs import Job

    done: dict[JobKey, Outcome] = {}
    todo: dict[str, _PlannedJob] = {}
    for job in planned:
        stored = _stored(job.key, job.path, job.wanted)
        if stored is not None:
            done[job.key] = stored
            counts["reused"] += 1
            bar.update(1)
        else:
            todo[str(job.key)] = job
    if not todo:
        return done
    pending = list(todo)

    def waiting() -> str:
        head = ", ".join(pending[:3]) + (f" and {len(pending) - 3} more" if len(pending) > 3 else "")
        return f"{len(pending)} job{'s' if len(pending) != 1 else ''} running or queued ({head})"

    # Jobs train in worker processes whose progress cannot reach this bar: say what is pending.
    with bar.heartbeat(waiting):
        for ran, outcome in executor.get().run(
            [
                Job(key=name, fn=_named_job, kwargs={"fn": j.fn, "key": name, "kwargs": j.kwargs})
                for name, j in todo.items()
            ]
        ):
            job = todo[ran.key]
            atomic_write_json(
                job.path, {**outcome.to_dict(), "job_hash": job.wanted, "job": ran.key}
            )  # at once: an interrupted grid keeps every finished job
            done[job.key] = outcome
            pending.remove(ran.key)
            counts["run"] += 1
            bar.update(1, last=ran.key)
    return done


def _typed(outcomes: Mapping[JobKey, Outcome], key: JobKey, kind: type[OutcomeT]) -> OutcomeT | None:
    found = outcomes.get(key)
    if found is not None and not isinstance(found, kind):
        raise TypeError(f"internal error: job {key} handed back a {type(found).__name__}, not a {kind.__name__}")
    return found


def _trained(outcomes: Mapping[JobKey, Outcome], label: str, seed: int) -> TrainedOutcome:
    found = _typed(outcomes, JobKey.train(label, seed), TrainedOutcome)
    if found is None:
        raise KeyError(f"internal error: no outcome of job {JobKey.train(label, seed)}")
    return found


# ----------------------------------------------------------------------------- the run


@dataclass(frozen=True, kw_only=True)
class _GridKey(PlainSpec):
    """What every job's hash includes of the grid itself (its ``to_dict``)."""

    dataset: str
    member_fraction: float
    delta: float
    confidence: float
    device: str
    # Every job reads the dataset: a file replaced under the data root redoes them all (bundled
    # data such as digits has a fixed identity and no entry, so its stored jobs keep their keys).
    dataset_files: Mapping[str, str] = spec_field(default_factory=dict, omit="empty")


def _grid_key(grid: CompareGrid, data_root: str | None) -> _GridKey:
    from dpaudit.data import dataset_files

    return _GridKey(
        dataset=grid.dataset,
        member_fraction=grid.member_fraction,
        delta=grid.delta,
        confidence=grid.confidence,
        device=grid.device,
        dataset_files=dataset_files(grid.dataset, data_root=data_root) or {},
    )


def _sections(grid: CompareGrid) -> list[str]:
    return [k for k in EVALUATION_KINDS if getattr(grid, k) is not None]


def _audited(grid: CompareGrid) -> list[Setting]:
    from defenses import DEFENSES

    return [s for s in grid.settings if grid.audit is not None and DEFENSES[s.defense].audit_trainer is not None]


def _train_wave(
    grid: CompareGrid, *, jobs_dir: Path, gkey: _GridKey, common: Mapping[str, object]
) -> list[_PlannedJob]:
    planned = []
    for s in grid.settings:
        for seed in grid.seeds:
            key = JobKey.train(s.label, seed)
            wanted = _hash({"grid": gkey.to_dict(), "setting": s.key(), "seed": seed})
            # Looked up here, at run time, so that a patched job (tests) is the one that runs.
            planned.append(
                _PlannedJob(
                    key,
                    _job_file(jobs_dir, key),
                    wanted,
                    jobs.train_job,
                    {"grid": grid, "setting": s, "seed": seed, **common},
                )
            )
    return planned


def _evaluation_wave(
    grid: CompareGrid,
    trained: Mapping[JobKey, Outcome],
    *,
    jobs_dir: Path,
    gkey: _GridKey,
    common: Mapping[str, object],
) -> list[_PlannedJob]:
    planned = []
    for s in grid.settings:
        for seed in grid.seeds:
            t = _trained(trained, s.label, seed)
            for section in _sections(grid):
                key = JobKey(section, s.label, seed)
                payload = {
                    "grid": gkey.to_dict(),
                    "model_id": t.model_id,
                    section: getattr(grid, section).to_dict(),
                    "top_k": grid.vulnerable_top_k,
                    "bounds": grid.num_bounds(),
                    "seed": seed,
                }
                wanted = _hash({**payload, "version": _SECTION_VERSIONS[section]})
                planned.append(
                    _PlannedJob(
                        key,
                        _job_file(jobs_dir, key),
                        wanted,
                        _EVALUATIONS[section],
                        {"grid": grid, "trained": t, "seed": seed, **common},
                    )
                )
    for s in _audited(grid):
        # The audit runs after (and on) the trained record: a changed training is another audit.
        key = JobKey.audit(s.label)
        t = _trained(trained, s.label, grid.seeds[0])
        assert grid.audit is not None  # _audited is empty without an audit section
        wanted = _hash(
            {
                "grid": gkey.to_dict(),
                "setting": s.key(),
                "audit": grid.audit.to_dict(),
                "bounds": grid.num_bounds(),
                "trained": jobs.record_digest(t).to_dict(),
            }
        )
        name = f"compare-{grid.name}-{safe_stem(s.label, default='setting')}-{wanted[:8]}"
        planned.append(
            _PlannedJob(
                key,
                _job_file(jobs_dir, key),
                wanted,
                jobs.audit_job,
                {"grid": grid, "setting": s, "trained": t, "name": name, **common},
            )
        )
    return planned


def run_compare(spec: CompareSpec, run: RunDir) -> ComparisonResult:
    """Trains every setting × seed, attacks every record, condenses the matrix and stores it.

    Returns:
        The :class:`ComparisonResult` (also written to ``RUN_DIR/compare/NAME/comparison.json``).
    """
    from dpaudit.progress import Progress

    grid = spec.grid
    started = time.monotonic()
    run.create(command=spec.command)
    base = run.compare_dir(grid.name)
    jobs_dir = base / "jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    common = {"run_dir": str(run.path), "data_root": spec.data_root}
    gkey = _grid_key(grid, spec.data_root)
    train_jobs = _train_wave(grid, jobs_dir=jobs_dir, gkey=gkey, common=common)
    total = len(train_jobs) * (1 + len(_sections(grid))) + len(_audited(grid))
    counts = {"run": 0, "reused": 0}
    with Progress(total, f"compare {grid.name}", enabled=spec.progress) as bar, _LazyExecutor(spec) as executor:
        trained = _run_wave(train_jobs, executor=executor, bar=bar, counts=counts)
        evaluated = _run_wave(
            _evaluation_wave(grid, trained, jobs_dir=jobs_dir, gkey=gkey, common=common),
            executor=executor,
            bar=bar,
            counts=counts,
        )
    result = _condense(
        grid,
        {**trained, **evaluated},
        seconds=time.monotonic() - started,
        jobs_run=counts["run"],
        jobs_reused=counts["reused"],
    )
    save_comparison(result, base)
    return result


# ----------------------------------------------------------------------------- the matrix


def _links(model_ids: Sequence[str], sections: Sequence[str], *, certifies: bool) -> dict[str, str]:
    """Drill-down reports of a row, relative to the run's reports folder (rendered by ``report``).

    Evasion results of a model that does not certify appear only in the matrix: the certified
    report lists certified models, so such a row gets no "certified" link.
    """
    from reports.membership import membership_report_stem

    links: dict[str, str] = {}
    if "membership" in sections and model_ids:
        links["membership"] = f"{membership_report_stem(model_ids[0])}.html"
    if "evasion" in sections and certifies:
        links["certified"] = "certified.html"
    if "inversion" in sections:
        links["inversion"] = "inversion.html"
    return links


def _setting_outcomes(grid: CompareGrid, outcomes: Mapping[JobKey, Outcome]) -> list[SettingOutcomes]:
    """Each setting's outcomes, found by their job keys, with the links its row's reports have."""
    from defenses import DEFENSES

    sections = _sections(grid)
    settings = []
    for s in grid.settings:
        repeats = []
        for seed in grid.seeds:
            repeats.append(
                SeedOutcomes(
                    seed=seed,
                    trained=_trained(outcomes, s.label, seed),
                    membership=_typed(outcomes, JobKey("membership", s.label, seed), MembershipOutcome),
                    evasion=_typed(outcomes, JobKey("evasion", s.label, seed), EvasionOutcome),
                    inversion=_typed(outcomes, JobKey("inversion", s.label, seed), InversionOutcome),
                )
            )
        certifies = DEFENSES[s.defense].certification is not None and bool(grid.evasion and grid.evasion.certify)
        links = _links(tuple(r.trained.model_id for r in repeats), sections, certifies=certifies)
        audit = _typed(outcomes, JobKey.audit(s.label), AuditOutcome)
        settings.append(
            SettingOutcomes(
                label=s.label,
                defense=s.defense,
                family=s.family,
                parameters=dict(s.parameters),
                repeats=tuple(repeats),
                audit=audit,
                links=links,
            )
        )
    return settings


def _condense(
    grid: CompareGrid,
    outcomes: Mapping[JobKey, Outcome],
    *,
    seconds: float = 0.0,
    jobs_run: int = 0,
    jobs_reused: int = 0,
) -> ComparisonResult:
    return condense_outcomes(
        _setting_outcomes(grid, outcomes),
        name=grid.name,
        dataset=grid.dataset,
        baseline=grid.baseline,
        delta=grid.delta,
        confidence=grid.confidence,
        membership_attacks=None if grid.membership is None else grid.membership.attacks,
        radii=grid.radii,
        vulnerable_top_k=grid.vulnerable_top_k,
        grid=grid.source,
        seconds=seconds,
        jobs_run=jobs_run,
        jobs_reused=jobs_reused,
    )


def _job_key(name: str, grid: CompareGrid) -> JobKey:
    """The :class:`JobKey` a stored outcome's ``job`` string names (one of the grid's jobs)."""
    for s in grid.settings:
        keys = [JobKey.audit(s.label)] + [
            JobKey(kind, s.label, seed) for kind in ("train", *EVALUATION_KINDS) for seed in grid.seeds
        ]
        for key in keys:
            if str(key) == name:
                return key
    raise KeyError(f"no job {name!r} in grid {grid.name!r}")


def condense(
    grid: CompareGrid,
    trained: Mapping[str, Outcome | Mapping[str, object]],
    evaluated: Mapping[str, Outcome | Mapping[str, object]],
    *,
    seconds: float = 0.0,
    jobs_run: int = 0,
    jobs_reused: int = 0,
) -> ComparisonResult:
    """The defense × measure matrix of a grid from its jobs' outcomes as stored (no training, no I/O).

    Args:
        grid: the parsed grid.
        trained, evaluated: job key (``train-LABEL-seedN``, ``audit-LABEL`` …) → its outcome, typed
            or as its job file holds it.
    """
    outcomes: dict[JobKey, Outcome] = {}
    for name, outcome in {**trained, **evaluated}.items():
        key = _job_key(str(name), grid)
        outcomes[key] = _parse(key, outcome) if isinstance(outcome, Mapping) else outcome
    return _condense(grid, outcomes, seconds=seconds, jobs_run=jobs_run, jobs_reused=jobs_reused)
