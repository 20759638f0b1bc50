"""A parsed grid's time and sizes against their limits, before any job starts: the estimate
``compare --dry-run`` prints and the check that refuses (or, with ``--i-know``, announces) a grid
above an hour or a documented size.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from dpaudit.app.runs.compare.grid import CompareGrid, GridError, count_jobs, plan_problems

__all__ = ["estimate_seconds", "check_plan"]


def _count(parameters: Mapping[str, object], name: str, default: float) -> float:
    """A count among a setting's parameters (its default when absent, ``None`` or 0)."""
    value = parameters.get(name)
    # The grid checked the value against its defense's config: a count is a number here.
    return float(value) if isinstance(value, (int, float)) and value else default


def _passes(parameters: Mapping[str, object]) -> float:
    """Passes over the members a setting's training makes (DSSGD: rounds x local epochs)."""
    if parameters.get("rounds") is not None:
        return _count(parameters, "rounds", 0.0) * _count(parameters, "local_epochs", 1.0)
    return _count(parameters, "epochs", 10.0) + _count(parameters, "student_epochs", 0.0)


def estimate_seconds(grid: CompareGrid, *, data_root: str | None, workers: int | None) -> float:
    """A rough, measured estimate of a grid's time: the trainings it makes (targets, shadows, audit
    trials) x the measured seconds per example of its model (:mod:`dpaudit.app.estimate`), spread
    over the workers. Attacks, evaluation and data loading are left out, so it errs low; 0.0 when
    the dataset's size or the model's speed cannot be found here (no estimate beats a wrong one).
    """
    from defenses import DEFENSES
    from dpaudit.app.estimate import PER_EXAMPLE_GRADIENT_FACTOR, seconds_per_example
    from dpaudit.data import DATASETS
    from dpaudit.data.source import checked_data_root

    source = DATASETS[grid.dataset]
    try:
        info = source.info(
            checked_data_root(data_root) if source.needs_root else checked_data_root(None, allow_missing=True)
        )
    except (OSError, ValueError):
        return 0.0
    if not info.num_train or not info.input_shape:
        return 0.0
    members = info.num_train * grid.member_fraction
    total = 0.0
    for s in grid.settings:
        per = seconds_per_example(
            s.model,
            input_shape=info.input_shape,
            num_classes=source.num_classes,
            device=grid.device,
            model_options=dict(s.model_options),
        )
        factor = PER_EXAMPLE_GRADIENT_FACTOR if DEFENSES[s.defense].per_example_gradients else 1.0
        one = _passes(s.parameters) * members * per * factor
        total += len(grid.seeds) * one
        if grid.membership is not None and grid.membership.shadows == "target":
            total += len(grid.seeds) * grid.membership.num_shadows * one
        if grid.audit is not None and DEFENSES[s.defense].audit_trainer is not None:
            num_trials = grid.audit.num_trials if grid.audit.num_trials is not None else 50
            trials = 1 if grid.audit.method == "one-run" else 2 * num_trials
            total += trials * _count(s.parameters, "epochs", 10.0) * members * per * PER_EXAMPLE_GRADIENT_FACTOR
    if grid.membership is not None and grid.membership.shadows == "shared":
        base = grid.settings[0]
        per = seconds_per_example(
            base.model,
            input_shape=info.input_shape,
            num_classes=source.num_classes,
            device=grid.device,
            model_options=dict(base.model_options),
        )
        total += (
            len(grid.seeds) * grid.membership.num_shadows * float(grid.membership.shadow_epochs or 10) * members * per
        )
    return total / max(1, workers or os.cpu_count() or 1)


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
    seconds = estimate_seconds(grid, data_root=data_root, workers=workers)
    if seconds > LONG_RUN_SECONDS and not i_know:
        raise GridError(
            f"the grid ({count_jobs(grid):,} jobs) is estimated to take "
            f"{describe_duration(seconds)} on this machine, above "
            f"{LONG_RUN_SECONDS / 3600:g} h; "
            "fewer settings, seeds, epochs or shadows shorten it; pass --i-know to run it anyway"
        )
    if progress:
        jobs = count_jobs(grid)
        one = estimate_seconds(grid, data_root=data_root, workers=1) / max(jobs, 1)
        announce_if_long(
            seconds, f"the grid ({jobs:,} jobs)", hint="--num-workers changes it", jobs=jobs, job_seconds=one
        )
