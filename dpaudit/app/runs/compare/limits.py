"""A parsed grid's time and sizes against their limits, before any job starts: the estimate
``compare --dry-run`` prints and the check that refuses (or, with ``--i-know``, announces) a grid
above an hour or a documented size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dpaudit.app.runs.compare.grid import CompareGrid, GridError, count_jobs, plan_problems

if TYPE_CHECKING:
    from dpaudit.app.estimate import Estimate

__all__ = ["estimate_seconds", "check_plan", "grid_plan"]


def estimate_seconds(grid: CompareGrid, *, data_root: str | None, workers: int | None) -> Estimate | None:
    """A measured estimate of a grid's time on ``workers`` workers: the trainings it makes (targets,
    shadows, audit trials), each timed by a calibration of its own model and step at the threads
    of one of the workers (:func:`dpaudit.app.plan.training_job`), spread over the workers.
    Attacks and evaluation count in the calibration's stated factor for what it does not time.
    None when the dataset's size or a model's speed cannot be found here (no estimate beats a
    wrong one).
    """
    from defenses import DEFENSES
    from dpaudit.app.estimate import Estimate
    from dpaudit.app.plan import training_job
    from dpaudit.data import DATASETS
    from dpaudit.data.source import checked_data_root
    from dpaudit.threads import available_cores, plan_threads

    source = DATASETS[grid.dataset]
    try:
        info = source.info(
            checked_data_root(data_root) if source.needs_root else checked_data_root(None, allow_missing=True)
        )
    except (OSError, ValueError):
        return None
    if not info.num_train or not info.input_shape:
        return None
    workers = max(1, workers or available_cores())
    threads = plan_threads(workers=min(workers, max(1, count_jobs(grid)))).intra_op
    members = info.num_train * grid.member_fraction
    shape = tuple(info.input_shape)
    total = Estimate(low=0.0, high=0.0)

    def accounting(defense: str, parameters: dict[str, object]) -> Estimate | None:
        """The cell's privacy accounting (a DP-SGD-family config: its calibration and claim), or None."""
        from dpaudit.app.plan import accounting_of

        try:
            config = DEFENSES[defense].config_type(
                **{k: (tuple(x) if isinstance(x, list) else x) for k, x in parameters.items()}
            )
        except (TypeError, ValueError):  # the run itself reports it
            return None
        return accounting_of(config, members=int(members))

    def training(
        model: str,
        parameters: dict[str, object],
        options: dict[str, object],
        dp: bool,
        accounted: Estimate | None = None,
    ) -> Estimate | None:
        return training_job(
            model,
            input_shape=shape,
            num_classes=source.num_classes,
            parameters=parameters,
            members=members,
            per_example=dp,
            threads=threads,
            device=grid.device,
            model_options=options,
            accounting=accounted,
        )

    for s in grid.settings:
        params = dict(s.parameters)
        one = training(
            s.model,
            params,
            dict(s.model_options),
            DEFENSES[s.defense].per_example_gradients,
            accounting(s.defense, params),
        )
        if one is None:
            return None
        total = total.plus(one.times(len(grid.seeds)))
        if grid.membership is not None and grid.membership.shadows == "target":
            total = total.plus(one.times(len(grid.seeds) * grid.membership.num_shadows))
        if grid.audit is not None and DEFENSES[s.defense].audit_trainer is not None:
            num_trials = grid.audit.num_trials if grid.audit.num_trials is not None else 50
            trials = 1 if grid.audit.method == "one-run" else 2 * num_trials
            audit = training(s.model, {"epochs": params.get("epochs")}, dict(s.model_options), True)
            if audit is None:
                return None
            total = total.plus(audit.times(trials))
    if grid.membership is not None and grid.membership.shadows == "shared":
        base = grid.settings[0]
        shadow = training(
            base.model, {"epochs": float(grid.membership.shadow_epochs or 10)}, dict(base.model_options), False
        )
        if shadow is None:
            return None
        total = total.plus(shadow.times(len(grid.seeds) * grid.membership.num_shadows))
    return total.times(1.0 / workers)


def check_plan(grid: CompareGrid, *, i_know: bool, data_root: str | None, workers: int | None, progress: bool) -> None:
    """A grid's sizes against their limits, and its estimated time against the hour after which
    ``train`` and ``audit`` announce a run: above either, only with ``i_know`` (then announced).

    Raises:
        GridError: the first size above its limit, or the estimate, with what to change.
    """
    from dpaudit.app.cost import announce_if_long
    from dpaudit.app.estimate import LONG_RUN_SECONDS, describe_duration

    problems = plan_problems(grid)
    if problems and not i_know:
        raise GridError(problems[0])
    from dpaudit.app.estimate import Estimate

    found = estimate_seconds(grid, data_root=data_root, workers=workers)
    # A figure is a range of one width (what a caller that fixes the estimate gives).
    seconds = Estimate(low=found, high=found) if isinstance(found, (int, float)) else found
    if seconds is not None and seconds.middle > LONG_RUN_SECONDS and not i_know:
        raise GridError(
            f"the grid ({count_jobs(grid):,} jobs) is estimated to take "
            f"{describe_duration(seconds)} on this machine, above "
            f"{LONG_RUN_SECONDS / 3600:g} h; "
            "fewer settings, seeds, epochs or shadows shorten it; pass --i-know to run it anyway"
        )
    if progress and seconds is not None:
        from dpaudit.threads import available_cores

        jobs = count_jobs(grid)
        one = seconds.times((workers or available_cores()) / max(jobs, 1))
        announce_if_long(
            seconds, f"the grid ({jobs:,} jobs)", hint="--num-workers changes it", jobs=jobs, job_seconds=one
        )


def grid_plan(grid: Any, *, data_root: str | None, workers: int | None, executor: str = "local") -> Any:
    """The plan of a ``compare`` grid: its jobs (:func:`~dpaudit.app.runs.compare.grid.count_jobs`),
    the grid's estimated work on one worker shared over them, the largest job's memory."""
    from defenses import DEFENSES
    from dpaudit.app.plan import RunPlan, job_memory_bytes
    from dpaudit.app.runs.compare.grid import count_jobs
    from dpaudit.data import DATASETS
    from dpaudit.data.source import checked_data_root
    from dpaudit.threads import available_cores

    workers = workers or available_cores()
    jobs = count_jobs(grid)
    total = estimate_seconds(grid, data_root=data_root, workers=workers)
    source = DATASETS[grid.dataset]
    try:
        info = source.info(
            checked_data_root(data_root) if source.needs_root else checked_data_root(None, allow_missing=True)
        )
        shape, num_train = tuple(info.input_shape or ()), int(info.num_train or 0)
    except (OSError, ValueError):
        shape, num_train = (), 0
    memory = max(
        job_memory_bytes(
            s.model,
            input_shape=shape,
            num_classes=source.num_classes,
            num_examples=num_train,
            per_example=DEFENSES[s.defense].per_example_gradients,
            model_options=dict(s.model_options),
        )
        for s in grid.settings
    )
    sections = [k for k in ("membership", "evasion", "inversion") if getattr(grid, k) is not None]
    what = (
        f"grid {grid.name!r}: {len(grid.settings)} setting(s) x "
        f"{len(grid.seeds)} seed(s) x "
        f"(training{''.join(' + ' + k for k in sections)}){' + audits' if grid.audit else ''}"
    )
    # estimate_seconds spreads the grid's work over the workers already; the plan wants one job's
    # time on one worker, and spreads it itself (RunPlan.wall_range). Dividing by the jobs alone
    # divided by the workers twice: a 2-worker grid was estimated at 0.41x its measured time.
    return RunPlan.measured(
        None if total is None else total.times(workers / max(jobs, 1)),
        what=what,
        num_jobs=jobs,
        job_memory_bytes=memory,
        workers=workers,
        timed="" if total is None else total.basis,
        starts_pool=executor == "local" and workers > 1,
    )
