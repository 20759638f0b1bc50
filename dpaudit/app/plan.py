"""What a run will do and cost, before it runs: the plans ``--dry-run`` prints for ``train``,
``certify``, ``compare``, ``audit`` and ``attack membership``, and the notice of a plan whose wall
time here is over an hour — one code path for both.

Each plan counts the run's independent jobs (grid cells, audit trials, shadow models), times a
short calibration of one job's own steps on this machine, with the threads its workers will run
(:mod:`dpaudit.app.estimate`, :mod:`dpaudit.threads`), and hands both to the cost model of
:mod:`dpaudit.app.cost`. Times are ranges (:class:`~dpaudit.app.estimate.Estimate`).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping
from typing import Any

from dpaudit.app.cost import WORKER_COUNTS, RunPlan, job_memory_bytes
from dpaudit.app.estimate import Estimate, estimate_job, job_start

__all__ = [
    "announce_plan",
    "passes_of",
    "training_batch",
    "training_job",
    "accounting_of",
    "claim_accounting",
    "train_plan",
    "certify_plan",
    "membership_plan",
    "audit_plan",
    "print_plan",
]


def announce_plan(plan: RunPlan, *, hint: str = "") -> bool:
    """Says on stderr what ``plan`` costs when its wall time here is over an hour (the threshold of
    :func:`~dpaudit.app.cost.announce_if_long`); returns whether it did."""
    from dpaudit.app.estimate import LONG_RUN_SECONDS

    if not plan.wall_seconds(plan.workers) > LONG_RUN_SECONDS:
        return False
    extra = f"; {hint}" if hint else ""
    walls = "".join(
        f", {plan.wall_range(n).describe().removeprefix('about ')} on {n} workers"
        for n in WORKER_COUNTS
        if n > plan.workers
    )
    job = plan.job_range
    print(
        f"note: {plan.what} ({plan.num_jobs} job(s)) is estimated at about "
        f"{plan.num_jobs * job.low / 3600:.2g}–{plan.num_jobs * job.high / 3600:.2g} CPU-hours: "
        f"{plan.wall_range(plan.workers).describe()} on this machine "
        f"({plan.workers} worker(s)){walls}{extra}; progress is shown, and an "
        "interrupted run resumes",
        file=sys.stderr,
    )
    return True


# ----------------------------------------------------------------------------- one training job
def _count(parameters: Mapping[str, object], name: str, default: float) -> float:
    """A count among a training's parameters (its default when absent, ``None`` or 0)."""
    value = parameters.get(name)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value else default


def passes_of(parameters: Mapping[str, object]) -> float:
    """Passes over the members a training makes (DSSGD: rounds × local epochs; PATE: teachers' and student's epochs)."""
    if parameters.get("rounds") is not None:
        return _count(parameters, "rounds", 0.0) * _count(parameters, "local_epochs", 1.0)
    return _count(parameters, "epochs", 10.0) + _count(parameters, "student_epochs", 0.0)


def training_batch(parameters: Mapping[str, object], members: int) -> int:
    """The examples of one step of a training: its lot (DP-SGD, at most the physical batch) or batch."""
    lot = _count(parameters, "lot_size", 0.0) or _count(parameters, "expected_lot_size", 0.0)
    if not lot and _count(parameters, "sampling_rate", 0.0):
        lot = _count(parameters, "sampling_rate", 0.0) * members
    batch = lot or _count(parameters, "batch_size", 64.0)
    physical = _count(parameters, "physical_batch_size", 0.0)
    return max(1, int(round(min(batch, physical) if physical else batch)))


def training_job(
    model_name: str,
    *,
    input_shape: tuple[int, ...],
    num_classes: int,
    parameters: Mapping[str, object],
    members: float,
    per_example: bool,
    threads: int | None = None,
    device: str = "cpu",
    model_options: Mapping[str, object] | None = None,
    features: Any = None,
    labels: Any = None,
    start: bool = True,
    accounting: Estimate | None = None,
) -> Estimate | None:
    """One training's time: its passes over ``members`` (:func:`passes_of`) through its step
    (per-example clipping where the defense clips), plus a noise-free pre-training where it has
    one (Secure-SGD's redistribution), each timed at the training's batch, plus its privacy
    accounting when given (:func:`accounting_of`)."""
    passes = {("per-example" if per_example else "backward"): passes_of(parameters) * members}
    if parameters.get("redistribute") and parameters.get("redistribution_pretrain_epochs"):
        pre = _count(parameters, "redistribution_pretrain_epochs", 0.0) * members
        passes["backward"] = passes.get("backward", 0.0) + pre
    steps = estimate_job(
        model_name,
        input_shape=tuple(input_shape),
        num_classes=num_classes,
        passes=passes,
        batch=training_batch(parameters, int(members)),
        threads=threads,
        device=device,
        model_options=model_options,
        features=features,
        labels=labels,
        start=start,
    )
    if steps is None or accounting is None or accounting.high <= 0:
        return steps
    return steps.plus(accounting)


def claim_accounting(claim: Any, *, delta: float) -> Estimate:
    """The time of evaluating ``claim``'s bounds at ``delta`` under every accountant (what an
    audit's result states), rehearsed (:func:`dpaudit.privacy.accountants.rehearsal`) and priced
    by :func:`~dpaudit.app.estimate.accounting_seconds`."""
    from dpaudit.app.estimate import accounting_seconds
    from dpaudit.privacy.accountants import rehearsal

    with rehearsal() as asked:
        try:
            claim.epsilons(delta=delta)
        except ValueError:  # no accountant can: the run says so, at no cost
            pass
    return accounting_seconds(asked)


def accounting_of(config: Any, *, members: int) -> Estimate | None:
    """The time a training's privacy accounting takes (a DP-SGD-family config: its σ or step
    calibration, the record's ε, the printed PLD bound — :func:`defenses.dpsgd.plan.accounting_questions`),
    priced by :func:`~dpaudit.app.estimate.accounting_seconds`; None for other configs (their
    accounting is not timed: PATE's and DSSGD's answer in milliseconds)."""
    from defenses.dpsgd.config import DPSGDConfig
    from defenses.dpsgd.plan import accounting_questions
    from dpaudit.app.estimate import accounting_seconds

    if not isinstance(config, DPSGDConfig):
        return None
    return accounting_seconds(accounting_questions(config, num_members=max(1, int(members))))


def _fields(config: Any) -> dict[str, object]:
    """A config's fields by name (a dataclass, or a record's stored mapping)."""
    import dataclasses

    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    return dict(config or {})


def _workers_threads(workers: int) -> int:
    from dpaudit.threads import plan_threads

    return plan_threads(workers=max(1, workers)).intra_op


# ----------------------------------------------------------------------------- the verbs' plans
def train_plan(spec: Any, *, bundle: Any, splits: Any, config: Any) -> RunPlan:
    """The plan of ``train``: one training in this process (a defense's sub-models count in it).

    ``bundle``, ``splits`` and the resolved ``config`` are the run's, from
    :func:`dpaudit.app.runs.train.resolve_inputs` (the train run imports this module, so the
    plan takes them rather than resolving them a second way).
    """
    from defenses import DEFENSES

    entry = DEFENSES[spec.defense]
    members = len(splits.members)
    fields = _fields(config)
    device = "cpu" if spec.device == "auto" else str(spec.device)
    try:
        from dpaudit.training import resolve_device

        device = str(resolve_device(spec.device))
    except (ValueError, RuntimeError):
        pass
    batch = training_batch(fields, members)
    estimate = training_job(
        spec.model,
        input_shape=tuple(bundle.input_shape),
        num_classes=bundle.num_classes,
        parameters=fields,
        members=members,
        per_example=entry.per_example_gradients,
        threads=_workers_threads(1),
        device=device,
        model_options=dict(spec.model_options),
        features=bundle.train.features[:batch],
        labels=bundle.train.labels[:batch],
        accounting=accounting_of(config, members=members),
    )
    memory = job_memory_bytes(
        spec.model,
        input_shape=bundle.input_shape,
        num_classes=bundle.num_classes,
        num_examples=members,
        batch_size=batch,
        per_example=entry.per_example_gradients,
        model_options=dict(spec.model_options),
    )
    what = f"training {spec.defense} on {spec.dataset} ({passes_of(fields):g} epochs of {members} members)"
    return RunPlan.measured(
        estimate,
        what=what,
        num_jobs=1,
        job_memory_bytes=memory,
        workers=1,
        timed="" if estimate is None else estimate.basis,
    )


def certify_plan(
    *, record: Any, num_examples: int, num_draws: int, device: str = "cpu", features: Any = None, labels: Any = None
) -> RunPlan:
    """The plan of ``certify``: ``num_examples`` test inputs, each through ``num_draws`` noisy forward passes."""
    passes = {"forward": float(num_examples * num_draws)}
    estimate = estimate_job(
        record.model_name,
        input_shape=tuple(record.input_shape),
        num_classes=record.num_classes,
        passes=passes,
        batch=512,
        threads=_workers_threads(1),
        device=device,
        model_options=record.model_options,
        features=features,
        labels=labels,
    )
    return RunPlan.measured(
        estimate,
        what=f"certifying {num_examples} examples with {num_draws} noise draws each",
        num_jobs=1,
        job_memory_bytes=job_memory_bytes(
            record.model_name,
            input_shape=record.input_shape,
            num_classes=record.num_classes,
            num_examples=num_examples,
            model_options=record.model_options,
        ),
        workers=1,
        timed="" if estimate is None else estimate.basis,
    )


def membership_plan(spec: Any, *, record: Any, pools: Mapping[str, Any] | None = None) -> RunPlan:
    """The plan of ``attack membership``: one job per shadow model its attacks need (cached shadows
    are reused at run time), each a training like the target's, timed at its workers' threads.

    ``record`` is the target's (the caller loads it: the membership run imports this module);
    ``pools`` the run's when it has them (the announcement), else made from ``spec``.
    """
    from attacks import membership as mia
    from defenses import DEFENSES
    from dpaudit.threads import available_cores

    train_size = max(len(record.membership.members), 1)
    if pools is None:
        ids, _ = mia.query_ids(record, max_per_side=spec.num_samples, seed=spec.seed)
        chosen = {n: (mia.MEMBERSHIP_ATTACKS[n], c) for n, c in spec.attacks.items()}
        pools = mia.plan_pools(
            chosen,
            record=record,
            sample_ids=ids,
            seed=spec.seed,
            num_population=spec.num_population,
            train_size=train_size,
        )
    num_models = sum(p.num_models for p in pools.values())
    workers = 1 if spec.executor == "serial" else (spec.num_workers or available_cores())
    fields = _fields(record.config)
    # Shadows train as the target did: per-example clipping costs what its defense says.
    dp = record.defense in DEFENSES and DEFENSES[record.defense].per_example_gradients
    estimate = (
        training_job(
            record.model_name,
            input_shape=tuple(record.input_shape),
            num_classes=record.num_classes,
            parameters=fields,
            members=train_size,
            per_example=dp,
            threads=_workers_threads(min(workers, max(num_models, 1))),
            model_options=record.model_options,
        )
        if num_models
        else None
    )
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
        f"({passes_of(fields):g} epochs on {train_size} examples each; cached ones are "
        "reused)"
        if pools
        else "no shadow models (the attacks need none)"
    )
    return RunPlan.measured(
        estimate,
        what=what,
        num_jobs=num_models,
        job_memory_bytes=memory,
        workers=workers,
        timed="" if estimate is None else estimate.basis,
        starts_pool=spec.executor == "local" and num_models > 0,
    )


def audit_plan(spec: Any, *, bundle: Any = None, members: int | None = None, num_steps: int | None = None) -> RunPlan:
    """The plan of ``audit``: one job per training (black-box multi-run trains two per trial:
    with and without the canaries), each ``num_steps`` DP-SGD steps of expected size q·n, or one
    job per batched group of trainings where the multi-run game batches them.

    ``bundle``, ``members`` and ``num_steps`` are the run's when it has them; default: from ``spec``.
    """
    from attacks.audit.batched_trials import TRIALS_PER_BATCH
    from dpaudit.data import load_dataset, make_splits

    if bundle is None:
        bundle = load_dataset(spec.dataset, data_root=spec.data_root)
    if members is None:
        splits = make_splits(
            bundle, seed=spec.seed, **({"num_members": spec.num_members} if spec.num_members is not None else {})
        )
        members = len(splits.members)
    trainings = (
        2 * spec.resolved_num_trials
        if spec.threat == "black-box" and spec.method == "multi-run"
        else spec.resolved_num_trials
    )
    steps = spec.resolved_num_steps if num_steps is None else num_steps
    workers = 1 if spec.executor == "serial" else max(1, spec.workers)
    lot = max(1, round(spec.sampling_rate * members))
    num_groups = 2 * math.ceil(spec.resolved_num_trials / TRIALS_PER_BATCH)  # one side a group
    grouped = _audit_group(spec, bundle, steps=steps, threads=_workers_threads(min(workers, num_groups)))
    estimate: Estimate | None
    if grouped is not None:  # the trials train in batched groups: a group is a job
        estimate = job_start().plus(grouped.job)
    elif spec.train_fn is not None:
        estimate = None
    else:
        estimate = estimate_job(
            spec.model,
            input_shape=tuple(bundle.input_shape),
            num_classes=bundle.num_classes,
            passes={"per-example": steps * spec.sampling_rate * members},
            batch=lot,
            threads=_workers_threads(min(workers, trainings)),
            device=spec.device,
            features=bundle.train.features[:lot],
            labels=bundle.train.labels[:lot],
        )
    memory = job_memory_bytes(
        spec.model,
        input_shape=bundle.input_shape,
        num_classes=bundle.num_classes,
        num_examples=members,
        batch_size=lot,
        per_example=True,
    )
    what = (
        f"{spec.threat} {spec.method if spec.threat == 'black-box' else ''} "
        f"audit trainings of {steps} DP-SGD steps on {members} members"
    ).replace("  ", " ")
    if grouped is not None:
        what += f", {trainings} trained in batched groups of up to {grouped.size}"
    # The suite's DP-SGD run at a given sigma: its claim's bounds are evaluated once, in the command.
    accounting = Estimate(low=0.0, high=0.0)
    if spec.train_fn is None and spec.noise_multiplier is not None and estimate is not None:
        from dpaudit.privacy.claims import dpsgd_claim

        claim = dpsgd_claim(sampling_rate=spec.sampling_rate, noise_multiplier=spec.noise_multiplier, num_steps=steps)
        accounting = claim_accounting(claim, delta=spec.delta)
        timed = "; ".join(b for b in (estimate.basis, accounting.basis) if b)
        estimate = Estimate(low=estimate.low, high=estimate.high, basis=timed)
    return RunPlan.measured(
        estimate,
        what=what,
        num_jobs=trainings if grouped is None else num_groups,
        job_memory_bytes=memory,
        workers=workers,
        timed="" if estimate is None else estimate.basis,
        starts_pool=spec.executor == "local" and workers > 1,
        command_low=accounting.low,
        command_high=accounting.high,
    )


def _audit_group(spec: Any, bundle: Any, *, steps: int, threads: int) -> Any:
    """The size of the audit's batched groups and one group's time here, or None (one training per job).

    See :func:`~dpaudit.app.runs.audit.batching.trial_group_estimate`; the members are the run's
    (the same split of the same seed).
    """
    from dpaudit.app.runs.audit.batching import may_batch_trials, trial_group_estimate
    from dpaudit.data import make_splits

    if not may_batch_trials(spec):
        return None
    splits = make_splits(
        bundle, seed=spec.seed, **({"num_members": spec.num_members} if spec.num_members is not None else {})
    )
    return trial_group_estimate(spec, bundle.all().subset(splits.members), num_steps=steps, threads=threads)


def print_plan(args: Any, plan: RunPlan) -> int:
    """``--dry-run``: the plan on stdout (``--json``: as one object), exit 0. Its wall time here
    counts this command's own start-up (:func:`~dpaudit.app.estimate.command_start_up`), which
    the run pays as well."""
    import dataclasses

    from dpaudit.app.common import EXIT_OK, emit
    from dpaudit.app.estimate import command_start_up

    plan = dataclasses.replace(plan, start_up=command_start_up())
    emit(args, {"dry_run": True, **plan.to_dict()}, "\n".join(plan.lines()))
    return EXIT_OK
