"""What a run will do and cost, before it runs: the plans ``--dry-run`` prints for ``compare``,
``audit`` and ``attack membership``, and the notice of a plan whose wall time here is over an hour.

Each plan counts the run's independent jobs (grid cells, audit trials, shadow models), measures
one job on this machine and hands both to the cost model of :mod:`dpaudit.app.cost`.
"""

from __future__ import annotations

import sys
from typing import Any

from dpaudit.app.cost import WORKER_COUNTS, RunPlan, job_memory_bytes, short_duration

__all__ = ["announce_plan", "grid_plan", "membership_plan", "audit_plan", "print_plan"]


def announce_plan(plan: RunPlan, *, hint: str = "") -> bool:
    """Says on stderr what ``plan`` costs when its wall time here is over an hour (the threshold of
    :func:`announce_if_long`); returns whether it did."""
    from dpaudit.app.estimate import LONG_RUN_SECONDS

    if not plan.wall_seconds(plan.workers) > LONG_RUN_SECONDS:
        return False
    extra = f"; {hint}" if hint else ""
    walls = ", ".join(
        f"{short_duration(plan.wall_seconds(n))} on {n} workers" for n in WORKER_COUNTS if n > plan.workers
    )
    print(
        f"note: {plan.num_jobs} {plan.what} are estimated at about {plan.cpu_hours:.2g} CPU-hours: "
        f"{short_duration(plan.wall_seconds(plan.workers))} on this machine "
        f"({plan.workers} worker(s)), {walls}{extra}; progress is shown, and an "
        "interrupted run resumes",
        file=sys.stderr,
    )
    return True


# ----------------------------------------------------------------------------- the verbs' plans
def grid_plan(grid: Any, *, data_root: str | None, workers: int | None) -> RunPlan:
    """The plan of a ``compare`` grid: its jobs (:func:`~dpaudit.app.runs.compare.grid.count_jobs`),
    the grid's estimated time on one worker shared over them, the largest job's memory."""
    import os

    from defenses import DEFENSES
    from dpaudit.app.runs.compare.grid import count_jobs
    from dpaudit.app.runs.compare.limits import estimate_seconds
    from dpaudit.data import DATASETS
    from dpaudit.data.source import checked_data_root

    jobs = count_jobs(grid)
    seconds = estimate_seconds(grid, data_root=data_root, workers=1)
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
    return RunPlan(
        what=what,
        num_jobs=jobs,
        job_seconds=seconds / max(jobs, 1),
        job_memory_bytes=memory,
        workers=workers or os.cpu_count() or 1,
    )


def membership_plan(spec: Any) -> RunPlan:
    """The plan of ``attack membership``: one job per shadow model its attacks need (cached shadows
    are reused at run time), each a training like the target's."""
    import os

    from attacks import membership as mia
    from dpaudit.app.estimate import PER_EXAMPLE_GRADIENT_FACTOR, seconds_per_example
    from dpaudit.app.runs.membership import _load_target

    record, _, _ = _load_target(spec, "cpu")
    ids, _ = mia.query_ids(record, max_per_side=spec.num_samples, seed=spec.seed)
    train_size = max(len(record.membership.members), 1)
    chosen = {n: (mia.MEMBERSHIP_ATTACKS[n], c) for n, c in spec.attacks.items()}
    pools = mia.plan_pools(
        chosen, record=record, sample_ids=ids, seed=spec.seed, num_population=spec.num_population, train_size=train_size
    )
    num_models = sum(p.num_models for p in pools.values())
    epochs = float(record.config.get("epochs") or 10)
    from defenses import DEFENSES

    # Shadows train as the target did: per-example clipping costs what its defense says.
    dp = record.defense in DEFENSES and DEFENSES[record.defense].per_example_gradients
    per = seconds_per_example(
        record.model_name,
        input_shape=record.input_shape,
        num_classes=record.num_classes,
        device="cpu",
        model_options=record.model_options,
    )
    seconds = epochs * train_size * per * (PER_EXAMPLE_GRADIENT_FACTOR if dp else 1.0)
    memory = job_memory_bytes(
        record.model_name,
        input_shape=record.input_shape,
        num_classes=record.num_classes,
        num_examples=2 * train_size,
        per_example=dp,
        model_options=record.model_options,
    )
    what = (
        f"shadow models of {record.model_name} for {', '.join(spec.attacks)} "
        f"({epochs:g} epochs on {train_size} examples each; cached ones are "
        "reused)"
        if pools
        else "no shadow models (the attacks need none)"
    )
    return RunPlan(
        what=what,
        num_jobs=num_models,
        job_seconds=seconds,
        job_memory_bytes=memory,
        workers=spec.num_workers or os.cpu_count() or 1,
    )


def audit_plan(spec: Any) -> RunPlan:
    """The plan of ``audit``: one job per training (black-box multi-run trains two per trial:
    with and without the canaries), each ``num_steps`` DP-SGD steps of expected size q·n."""
    from dpaudit.app.estimate import PER_EXAMPLE_GRADIENT_FACTOR, seconds_per_example
    from dpaudit.data import load_dataset, make_splits

    bundle = load_dataset(spec.dataset, data_root=spec.data_root)
    splits = make_splits(
        bundle, seed=spec.seed, **({"num_members": spec.num_members} if spec.num_members is not None else {})
    )
    members = len(splits.members)
    trainings = (
        2 * spec.resolved_num_trials
        if spec.threat == "black-box" and spec.method == "multi-run"
        else spec.resolved_num_trials
    )
    steps = spec.resolved_num_steps
    per = (
        0.0
        if spec.train_fn is not None
        else seconds_per_example(
            spec.model, input_shape=bundle.input_shape, num_classes=bundle.num_classes, device=spec.device
        )
    )
    seconds = steps * spec.sampling_rate * members * per * PER_EXAMPLE_GRADIENT_FACTOR
    memory = job_memory_bytes(
        spec.model,
        input_shape=bundle.input_shape,
        num_classes=bundle.num_classes,
        num_examples=members,
        batch_size=max(1, round(spec.sampling_rate * members)),
        per_example=True,
    )
    what = (
        f"{spec.threat} {spec.method if spec.threat == 'black-box' else ''} "
        f"audit trainings of {steps} DP-SGD steps on {members} members"
    ).replace("  ", " ")
    return RunPlan(what=what, num_jobs=trainings, job_seconds=seconds, job_memory_bytes=memory, workers=spec.workers)


def print_plan(args: Any, plan: RunPlan) -> int:
    """``--dry-run``: the plan on stdout (``--json``: as one object), exit 0."""
    from dpaudit.app.common import EXIT_OK, emit

    emit(args, {"dry_run": True, **plan.to_dict()}, "\n".join(plan.lines()))
    return EXIT_OK
