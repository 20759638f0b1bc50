"""The PATE defense: teachers on disjoint partitions, a noisy aggregator, and the released student.

Papernot et al. (2017, "Semi-supervised Knowledge Transfer for Deep Learning from Private
Training Data") and (2018, "Scalable Private Learning with PATE"). :func:`train_pate` runs the
whole pipeline for one record:

1. the run's private members are cut into ``teachers`` disjoint partitions and one teacher is
   trained per partition (:mod:`defenses.pate.teachers`; on the run's executor and cached in
   the run when a :class:`~dpaudit.training.TrainWorkspace` is given);
2. the public data is the test split's first ``public_fraction`` (by id), as the papers use
   MNIST's test set; the rest of the test split only evaluates the student. ``queries`` public
   examples (a seeded draw) are labelled by the aggregator (LNMax, GNMax or Confident-GNMax;
   :mod:`defenses.pate.aggregators`) from the teachers' votes;
3. the privacy cost of the answers is analysed (:mod:`dpaudit.privacy.pate`) — data-dependent by
   default, as the papers report it, charging Confident-GNMax's GNMax step to the queries it
   answered (the realised cost, not the expectation of the 2018 scripts), optionally published
   through the smooth-sensitivity release (2018, §4.2) as a noisy estimate — and becomes the
   record's :class:`~dpaudit.privacy.pate.claim.PATEClaim`;
4. the student is trained on the answered queries (and, with ``semi_supervised``, on the rest of
   the public data without labels; :mod:`defenses.pate.student`).

Only the student is released: its record's members are the whole private set (every teacher's
partition), its non-members the run's held-out ids. With a workspace, what the claim covers is
saved beside the record (``pate.npz``: the queries asked and their noisy answers; ``pate.json``:
the run's public summary), and what it does not cover is kept apart under the record's
``private/`` folder (:data:`PRIVATE_DIR`): the vote matrix (``votes.npy``, for ``dpaudit pate
analyze``), the aggregator's noise, the un-sanitised data-dependent ε, the teachers' accuracy
and their ids and partitions. Each teacher is a record of its own under
``RUN_DIR/records/pate-teachers/`` (attackable like any; trusted-side, like ``private/``).

The aggregator's noise comes from the operating system's entropy unless ``aggregator_seed``
(``--aggregator-seed``) is given, and the record then says the answers are reproducible and not
private: noise derived from the stored root seed could be subtracted by anyone holding the
record. Partitions, teachers, the query draw and the student stay seeded (reproducible), as
none of them is the mechanism's noise. :func:`replay_pate` runs the same pipeline for the
neighbouring replay (:mod:`dpaudit.replay`).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import sys
import time
from typing import Any, TypedDict

import numpy as np
import torch
from torch import nn

from defenses._common import build_record
from defenses.pate.aggregators import AGGREGATORS, Aggregation
from defenses.pate.answers import aggregate_once
from defenses.pate.config import PATEConfig
from defenses.pate.plan import PATEPlan, plan_pate
from defenses.pate.student import train_student
from defenses.pate.teachers import (
    TeacherEnsemble,
    TeacherSpec,
    plan_teachers,
    teacher_identity,
    teacher_votes,
    train_teacher,
    train_teachers,
)
from defenses.registry import DEFENSES, DefenseSpec
from dpaudit import _validate as v
from dpaudit.data import DatasetBundle, Splits
from dpaudit.models import build_model
from dpaudit.parts import Artefact, PlotStyle
from dpaudit.privacy.pate import analysis as pate_analysis
from dpaudit.privacy.pate import claim as pate_claim
from dpaudit.privacy.pate import smooth_sensitivity
from dpaudit.progress import Progress
from dpaudit.replay import MechanismInput, ReplayTrace
from dpaudit.results.record import TrainedModel
from dpaudit.seeding import derive_seed
from dpaudit.store import atomic_save_npz, atomic_write_bytes, atomic_write_json
from dpaudit.train_request import TrainRequest
from dpaudit.training import TrainWorkspace

__all__ = [
    "PRIVATE_DIR",
    "PRIVATE_METRICS",
    "TEACHER_CACHE",
    "epsilon_curve",
    "plan_pate_teachers",
    "plan_for",
    "public_split",
    "replay_pate",
    "train_pate",
    "vote_sensitivity",
]

#: Name of the run's teacher cache (``RUN_DIR/records/pate-teachers/``).
TEACHER_CACHE = "pate-teachers"

#: The record's subfolder for what the claim does not cover (votes, noise, partitions, the
#: un-sanitised data-dependent ε): kept on the trusted side, never published with the record.
PRIVATE_DIR = "private"

#: Values computed from the private data outside the aggregator: kept in ``private/pate.json``,
#: not in the record's metrics (the data-dependent ε stays there only when it is the claim).
PRIVATE_METRICS = (
    "epsilon_data_dependent_realised",
    "epsilon_data_dependent_realised_improved",
    "teacher_test_accuracy_mean",
)


def public_split(bundle: DatasetBundle, public_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """(public ids, evaluation ids): the test split's first ``public_fraction`` by id, and the rest.

    Raises:
        ValueError: either part would be empty.
    """
    ids = np.sort(np.asarray(bundle.test.ids, dtype=np.int64))
    cut = int(round(v.open_unit("public_fraction", public_fraction) * len(ids)))
    if cut < 1 or cut >= len(ids):
        raise v.invalid(
            "public_fraction",
            f"public_fraction={public_fraction!r} leaves no public or no evaluation "
            f"example among the {len(ids)} test examples of {bundle.name}",
        )
    return ids[:cut], ids[cut:]


def _bounds(config: PATEConfig, votes: np.ndarray, answered: np.ndarray) -> pate_analysis.PateAnalysis:
    """The PATE analysis of the chosen aggregator over ``votes`` (Confident-GNMax: given what was answered)."""
    if config.aggregator == "lnmax":
        return pate_analysis.analyze_lnmax(votes, laplace_scale=config.laplace_scale, delta=config.delta)
    assert config.sigma is not None  # GNMax and Confident-GNMax configs are resolved by plan_pate
    if config.aggregator == "gnmax":
        return pate_analysis.analyze_gnmax(votes, sigma=config.sigma, delta=config.delta)
    assert config.threshold is not None and config.threshold_sigma is not None
    return pate_analysis.analyze_confident_gnmax(
        votes,
        threshold=config.threshold,
        threshold_sigma=config.threshold_sigma,
        sigma=config.sigma,
        delta=config.delta,
        answered=answered,
    )


def epsilon_curve(config: PATEConfig, agg: Aggregation, *, analysis: str | None = None) -> np.ndarray:
    """ε (standard conversion, at ``config.delta``) of the first k answers, for k = 1 … queries.

    RDP adds over queries, so the curve is the conversion of running sums of each query's RDP;
    the data-dependent curve never exceeds the data-independent one at any order (as for the
    whole run), so its last point is the claim's ε. ``analysis`` (default: the config's) picks
    the bound; the data-independent curve depends only on which queries were answered.
    """
    analysis = (
        config.analysis if analysis is None else v.choice("analysis", analysis, ("data-dependent", "data-independent"))
    )
    rows = [_bounds(config, agg.votes[i : i + 1], agg.answered[i : i + 1]) for i in range(agg.num_queries)]
    if not rows:
        return np.zeros(0)
    orders = np.asarray(rows[0].orders)
    dep = np.cumsum([r.rdp_data_dependent for r in rows], axis=0)
    ind = np.cumsum([r.rdp_data_independent for r in rows], axis=0)
    rdp = np.minimum(dep, ind) if analysis == "data-dependent" else ind
    return np.min(rdp + np.log(1.0 / config.delta) / (orders - 1.0), axis=1)


def _analyse(config: PATEConfig, agg: Aggregation, *, progress: bool = False) -> tuple[pate_analysis.PateAnalysis, Any]:
    """The analysis of the answers and, when asked, its smooth-sensitivity release."""
    votes, d = agg.votes, config.delta
    result = _bounds(config, votes, agg.answered)
    release = None
    beta, ss = config.smooth_sensitivity_beta, config.smooth_sensitivity_sigma
    if beta is not None and ss is not None:
        # The release noise is the one draw not taken from the run's seed: the seed is stored in
        # the record, and a release whose noise anyone can recompute is not private. Its order is
        # fixed from public parameters (release_order), never from the votes.
        with Progress(len(votes), "smooth-sensitivity release (queries)", enabled=progress) as bar:
            step = bar.update if progress else None
            assert config.sigma is not None  # the release is for GNMax and Confident-GNMax, resolved by plan_pate
            if config.aggregator == "gnmax":
                release = smooth_sensitivity.release_gnmax_epsilon(
                    votes, sigma=config.sigma, delta=d, beta=beta, sigma_ss=ss, progress=step
                )
            else:
                assert config.threshold is not None and config.threshold_sigma is not None
                release = smooth_sensitivity.release_confident_gnmax_epsilon(
                    votes,
                    threshold=config.threshold,
                    threshold_sigma=config.threshold_sigma,
                    sigma=config.sigma,
                    answered=agg.answered,
                    delta=d,
                    beta=beta,
                    sigma_ss=ss,
                    progress=step,
                )
    return result, release


def plan_for(config: PATEConfig, *, bundle: DatasetBundle, splits: Splits) -> PATEPlan:
    """:func:`defenses.pate.plan.plan_pate` for this dataset and split (public facts only: sizes and classes)."""
    public_ids, _ = public_split(bundle, config.public_fraction)
    return plan_pate(
        config, num_members=len(splits.members), num_public=len(public_ids), num_classes=bundle.num_classes
    )


def plan_pate_teachers(request: TrainRequest[PATEConfig], /) -> tuple[TeacherSpec, ...]:
    """The teachers :func:`train_pate` trains for ``request`` (to train them ahead of the students)."""
    config, bundle, splits = request.config, request.bundle, request.splits
    if not config.resolved():
        config = plan_for(config, bundle=bundle, splits=splits).config
    assert config.teachers is not None  # a resolved config
    return plan_teachers(
        bundle=bundle,
        splits=splits,
        num_teachers=config.teachers,
        model_name=request.model_name,
        model_options=request.options(),
        config=config.teacher_config(),
        seed=request.seed,
        num_eval_examples=config.teacher_eval_examples,
    )


def _teachers(
    specs: Any, *, bundle: DatasetBundle, workspace: TrainWorkspace | None, device: torch.device, progress: bool
) -> TeacherEnsemble:
    if workspace is None:
        # No run to cache in (a shadow model of an attack): train in this process, keep nothing.
        pairs = [train_teacher(s, bundle=bundle, device=device) for s in specs]
        return TeacherEnsemble(
            specs=tuple(specs),
            records=tuple(r for r, _ in pairs),
            models=tuple(m.to("cpu") for _, m in pairs),
            trained=tuple(s.teacher_id for s in specs),
            reused=(),
            directory=None,
        )
    from dpaudit.executors import make_executor

    with make_executor(
        workspace.executor,
        workers=workspace.num_workers,
        address=workspace.address,
        ship_code=workspace.ship_code,
        datasets=(bundle.name,),
        data_root=workspace.data_root,
    ) as executor:
        return train_teachers(
            specs,
            directory=workspace.cache_dir,
            executor=executor,
            data_root=workspace.data_root,
            device=device.type,
            progress=progress,
        )


class PublicSummary(TypedDict):
    """The run's public summary, the fields of the record's ``pate.json`` (in this order) besides the aggregation and
    teachers."""

    model_id: str
    claim: str
    epsilon: float
    metrics: dict[str, object]


def _save_artifacts(
    workspace: TrainWorkspace,
    *,
    config: PATEConfig,
    agg: Aggregation,
    query_ids: np.ndarray,
    ensemble: TeacherEnsemble,
    summary: PublicSummary,
    private_metrics: dict[str, object],
    sanitised: bool,
) -> None:
    """Writes what the claim covers beside the record and what it does not under ``private/``.

    Published (``pate.npz``, ``pate.json``): the queries asked, the noisy answers, which were
    answered, ε after each query (the claim's own bound, unless the claim is a smooth-sensitivity
    release, whose curve would be the un-sanitised data-dependent one), the public summary.
    Private (``private/votes.npy``, ``private/pate.npz``, ``private/pate.json``): the vote matrix,
    the noise, the data-dependent curve and ε, the teachers' accuracy, ids and partitions.
    """
    private = workspace.record_dir / PRIVATE_DIR
    private.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(agg.votes), allow_pickle=False)
    atomic_write_bytes(private / "votes.npy", buf.getvalue())
    curve = epsilon_curve(config, agg)
    secret = {
        "votes": agg.votes,
        "query_ids": query_ids,
        "noise": agg.noise,
        "epsilon_curve": curve,
        "epsilon_curve_data_dependent": epsilon_curve(config, agg, analysis="data-dependent"),
    }
    if agg.threshold_noise is not None:
        secret["threshold_noise"] = agg.threshold_noise
    atomic_save_npz(private / "pate.npz", **secret)
    published = {"query_ids": query_ids, "labels": agg.labels, "answered": agg.answered}
    if not sanitised:
        published["epsilon_curve"] = curve
    atomic_save_npz(workspace.record_dir / "pate.npz", **published)
    teachers = {
        "cache": os.path.relpath(workspace.cache_dir, private),  # relative: the run may move
        "teacher_ids": list(ensemble.teacher_ids),
        "partitions": ensemble.membership(),
    }
    aggregation = {k: x for k, x in agg.to_dict().items() if k != "labels"}
    atomic_write_json(
        private / "pate.json",
        {
            "model_id": summary["model_id"],
            "note": "private: computed from the private data outside the claimed mechanism; "
            "never publish (docs/defenses/pate.md)",
            "metrics": json.loads(json.dumps(private_metrics)),
            "aggregation": aggregation,
            "teachers": teachers,
        },
    )
    if agg.seed is None:
        aggregation.pop("seed")
    atomic_write_json(
        workspace.record_dir / "pate.json",
        {
            **summary,
            "aggregation": aggregation,
            "teachers": {"num_teachers": ensemble.num_teachers, "private": f"{PRIVATE_DIR}/pate.json"},
        },
    )


def _queries(
    config: PATEConfig, *, bundle: DatasetBundle, splits: Splits, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(public ids, evaluation ids, the queries drawn from the public ids, the public ids not queried).

    Raises:
        ValueError: more queries than public examples, more teachers than private members.
    """
    public_ids, eval_ids = public_split(bundle, config.public_fraction)
    assert config.queries is not None and config.teachers is not None  # a resolved config
    if config.queries > len(public_ids):
        raise v.invalid(
            "queries",
            f"queries={config.queries} exceeds the {len(public_ids)} public examples "
            f"of {bundle.name} (public_fraction={config.public_fraction:g} of its "
            f"{len(bundle.test)} test examples)",
        )
    if config.teachers > len(splits.members):
        raise v.invalid(
            "teachers",
            f"teachers={config.teachers} exceeds the {len(splits.members)} private "
            "members of the split (one example at least per teacher)",
        )
    order = np.random.default_rng(derive_seed(seed, "pate", "queries")).permutation(public_ids)
    return public_ids, eval_ids, np.sort(order[: config.queries]), order[config.queries :]


def _student(
    request: TrainRequest[PATEConfig], agg: Aggregation, *, queries: Any, unlabeled: torch.Tensor | None
) -> tuple[nn.Module, dict[str, float]]:
    """The student trained on the answered queries' noisy labels (and the unlabeled public data, semi-supervised); eval
    mode."""
    bundle, seed, device = request.bundle, request.seed, torch.device(request.device)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "pate", "student", "init"))
        student = build_model(
            request.model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes, **request.model_options
        )
    student.to(device)
    answered = agg.answered
    student_metrics = train_student(
        student,
        labeled_features=queries.features[torch.from_numpy(np.array(answered))],
        labels=torch.from_numpy(agg.labels[answered]),
        unlabeled_features=unlabeled,
        config=request.config.student_config(),
        seed=derive_seed(seed, "pate", "student"),
        device=device,
        progress=request.progress,
    )
    student.eval()
    return student, student_metrics


def _pate_metrics(
    config: PATEConfig,
    plan: Any,
    *,
    ensemble: TeacherEnsemble,
    agg: Aggregation,
    true_labels: np.ndarray,
    result: Any,
    release: Any,
    student_metrics: dict[str, float],
    counts: dict[str, int],
) -> tuple[dict[str, object], dict[str, object]]:
    """(the record's metrics, the private ones): the values the run used, the teachers, the answers, the privacy
    analysis, the student.

    The values of :data:`PRIVATE_METRICS` are computed from the private data outside the
    aggregator, so they go to ``private/pate.json``; the data-dependent ε stays in the record only
    when it is the claim itself (a data-dependent claim without smooth-sensitivity release,
    which the record already flags as not publishable).
    """
    answered = agg.answered
    teacher_acc = [float(r.metrics["test_accuracy"]) for r in ensemble.records]
    metrics: dict[str, object] = {
        "num_teachers": ensemble.num_teachers,
        # The values the run used (derived ones included: the record's config keeps them unset).
        **{
            f"run_{k}": float(getattr(config, k))
            for k in ("epochs", "sigma", "threshold", "threshold_sigma")
            if getattr(config, k) is not None
        },
        **{
            f"run_{k}": getattr(config, k)
            for k in ("aggregator", "analysis", "queries", "teachers")
            if getattr(config, k) is not None
        },
        **({} if plan.epsilon_planned is None else {"epsilon_planned_worst_case": plan.epsilon_planned}),
        "teachers_trained": len(ensemble.trained),
        "teachers_reused": len(ensemble.reused),
        "teacher_test_accuracy_mean": float(np.mean(teacher_acc)),
        "num_queries": agg.num_queries,
        "num_answered": agg.num_answered,
        "aggregator_noise": agg.noise_source,
        "answer_accuracy": float(np.mean(agg.labels[answered] == true_labels[answered])),
        **counts,
        # Confident-GNMax is analysed with the answered mask: the realised cost, not the expectation.
        "epsilon_data_dependent_realised": result.data_dependent.epsilon,
        "epsilon_data_dependent_realised_improved": result.data_dependent.epsilon_improved,
        "epsilon_data_independent": result.data_independent.epsilon,
        **(
            {}
            if release is None
            else {"epsilon_noisy_estimate": release.epsilon_noisy_estimate, "release_order": release.order}
        ),
        **{f"student_{k}": x for k, x in student_metrics.items()},
    }
    claims_it = config.analysis == "data-dependent" and release is None
    keep = ("epsilon_data_dependent_realised", "epsilon_data_dependent_realised_improved") if claims_it else ()
    private = {k: metrics[k] for k in PRIVATE_METRICS}
    return {k: x for k, x in metrics.items() if k not in PRIVATE_METRICS or k in keep}, private


def _noise_seed(config: PATEConfig) -> int | None:
    """The aggregator's noise seed: ``None`` (the operating system's entropy) unless the config gives one."""
    return config.aggregator_seed  # the aggregators draw each step's stream from it by name


def _teach(
    request: TrainRequest[PATEConfig], /, *, workspace: TrainWorkspace | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, TeacherEnsemble, np.ndarray]:
    """Everything before the aggregator's noise, shared by :func:`train_pate` and :func:`replay_pate`.

    Returns:
        (public ids, evaluation ids, query ids, public ids not queried, the teachers, the vote
        matrix of the queries) for a request with a resolved config.
    """
    bundle, device, progress = request.bundle, torch.device(request.device), request.progress
    public_ids, eval_ids, query_ids, other_ids = _queries(
        request.config, bundle=bundle, splits=request.splits, seed=request.seed
    )
    ensemble = _teachers(
        plan_pate_teachers(request), bundle=bundle, workspace=workspace, device=device, progress=progress
    )
    votes = teacher_votes(ensemble, bundle.test.subset(query_ids).features, device=device, progress=progress)
    return public_ids, eval_ids, query_ids, other_ids, ensemble, votes


def vote_sensitivity(aggregator: str) -> tuple[float, str]:
    """(sensitivity, norm) of one query's vote histogram, as the aggregator's analysis assumes it.

    One record is in one teacher's partition, so a neighbouring data set changes at most that
    teacher's vote: one count down by one and another up by one. GNMax and Confident-GNMax are
    analysed as Gaussian mechanisms on the histogram (L2 sensitivity √2; the threshold step's
    maximum count moves by at most 1 ≤ √2); LNMax as a Laplace report-noisy-max (L1 sensitivity
    2: each answer (2/b, 0)-DP).
    """
    v.choice("aggregator", aggregator, tuple(AGGREGATORS))
    return (2.0, "l1") if aggregator == "lnmax" else (math.sqrt(2.0), "l2")


def replay_pate(request: TrainRequest[PATEConfig], /) -> ReplayTrace:
    """The neighbouring-replay trace of PATE (:mod:`dpaudit.replay`): :func:`train_pate`'s own pipeline up to the
    aggregator.

    Runs the plan, the query draw, the keyed-hash partitioning, every teacher's training (in
    this process, nothing cached) and the votes exactly as :func:`train_pate` does, and records:

    * one mechanism input per query: its vote histogram, with :func:`vote_sensitivity`;
    * released: what a run publishes besides the noisy answers and does not pass through the
      aggregator — the public ids and evaluation ids, the queries asked, the number of teachers
      and every resolved setting of the run (teacher epochs, noise, threshold, queries), which the
      record's metrics state. The partitions, the teachers, their accuracy and the votes are
      private (``private/``), so they are not listed; the student is trained on the noisy
      answers and public data only (post-processing), so it is not run.

    Args:
        request: as for :func:`train_pate` (its ``progress`` ignored).

    Returns:
        The trace.
    """
    config = plan_for(request.config, bundle=request.bundle, splits=request.splits).config
    public_ids, eval_ids, query_ids, _, ensemble, votes = _teach(
        dataclasses.replace(request, config=config, progress=False), workspace=None
    )
    sensitivity, norm = vote_sensitivity(str(config.aggregator))  # resolved by the plan
    inputs = tuple(
        MechanismInput(
            name=f"query {i} (public id {int(q)}): vote histogram", value=votes[i], sensitivity=sensitivity, norm=norm
        )
        for i, q in enumerate(query_ids)
    )
    settings = {
        f"run_{k}": float(getattr(config, k))
        for k in ("teachers", "epochs", "queries", "sigma", "threshold", "threshold_sigma", "laplace_scale")
        if getattr(config, k) is not None
    }
    public = {
        "public ids": public_ids,
        "evaluation ids": eval_ids,
        "query ids": query_ids,
        "number of teachers": float(ensemble.num_teachers),
        **settings,
    }
    released = {name: np.asarray(x, dtype=np.float64) for name, x in public.items()}
    return ReplayTrace(defense="pate", mechanism_inputs=inputs, released=released)


def train_pate(
    request: TrainRequest[PATEConfig], /, *, workspace: TrainWorkspace | None = None
) -> tuple[TrainedModel, nn.Module]:
    """Trains PATE's teachers, labels public queries by the noisy aggregator, trains the student.

    Args:
        request: what to train. The bundle's test split supplies the public data and the
            evaluation set; the split's members are the private data the teachers share out; the
            model is the teachers' and the student's architecture; the partitions' hash key, the
            teachers, the query draw and the student are independent streams of the seed. The
            aggregator's noise is not (the operating system's entropy, unless
            ``config.aggregator_seed`` is given).
        workspace: where to cache teachers and save the answers, and the votes under
            ``private/`` (``None``: keep nothing).

    Returns:
        The student's record (defense ``pate``, the PATE claim, members = the private set) and
        the student in eval mode.

    Raises:
        ValueError: more queries than public examples, more teachers than private members.
    """
    started, bundle, progress = time.monotonic(), request.bundle, request.progress
    # The record keeps the config as asked (its id); the run uses the resolved one.
    plan = plan_for(request.config, bundle=bundle, splits=request.splits)
    for note in plan.notes if progress else ():
        print(f"pate: {note}", file=sys.stderr, flush=True)
    config = plan.config
    resolved = dataclasses.replace(request, config=config)
    public_ids, eval_ids, query_ids, other_ids, ensemble, votes = _teach(resolved, workspace=workspace)
    queries = bundle.test.subset(query_ids)
    agg = aggregate_once(votes, config.aggregator_config(), seed=_noise_seed(config))
    if agg.num_answered == 0:
        raise v.invalid(
            "threshold",
            f"the aggregator answered none of the {agg.num_queries} queries "
            f"(threshold={config.threshold:g}); lower --threshold or ask more "
            "--queries",
        )
    result, release = _analyse(config, agg, progress=progress)
    parameters = {k: float(x) for k, x in config.aggregator_config().to_dict().items() if k != "aggregator"}
    claim = pate_claim.pate_claim(
        result,
        parameters=parameters,
        num_answered=agg.num_answered,
        data_dependent=config.analysis == "data-dependent",
        release=release,
    )
    unlabeled = None
    if config.semi_supervised:
        rest = np.sort(np.concatenate([query_ids[~agg.answered], other_ids]))
        unlabeled = bundle.test.subset(rest).features if len(rest) else None
    student, student_metrics = _student(resolved, agg, queries=queries, unlabeled=unlabeled)
    counts = {
        "num_public": len(public_ids),
        "num_unlabeled": 0 if unlabeled is None else len(unlabeled),
        "num_eval": len(eval_ids),
    }
    metrics, private_metrics = _pate_metrics(
        config,
        plan,
        ensemble=ensemble,
        agg=agg,
        true_labels=queries.labels.numpy(),
        result=result,
        release=release,
        student_metrics=student_metrics,
        counts=counts,
    )
    # The student is evaluated on the evaluation part only: it has trained on the public part.
    evaluation = dataclasses.replace(bundle, test=bundle.test.subset(eval_ids))
    evaluated = dataclasses.replace(
        request, bundle=evaluation, splits=dataclasses.replace(request.splits, test=eval_ids), progress=False
    )
    record = build_record(evaluated, defense="pate", model=student, claim=claim, started=started, extra_metrics=metrics)
    if workspace is not None:
        summary: PublicSummary = {
            "model_id": record.model_id,
            "claim": claim.statement(),
            "epsilon": claim.epsilon(delta=config.delta, accountant="rdp"),
            "metrics": json.loads(json.dumps(metrics)),
        }
        _save_artifacts(
            workspace,
            config=config,
            agg=agg,
            query_ids=query_ids,
            ensemble=ensemble,
            summary=summary,
            private_metrics=private_metrics,
            sanitised=release is not None,
        )
    return record, student


def _check_budget(config: PATEConfig, *, bundle: DatasetBundle, splits: Splits, **_: Any) -> None:
    """Refuses a budget the queries cannot be answered within (naming the queries it allows)."""
    plan_for(config, bundle=bundle, splits=splits)


DEFENSES.register(
    DefenseSpec(
        name="pate",
        config_type=PATEConfig,
        train=train_pate,
        claim_kind="pate",
        submodels=TEACHER_CACHE,
        submodel_identity=teacher_identity,
        check_budget=_check_budget,
        replay=replay_pate,
        summary="teachers on disjoint partitions, noisy vote aggregation "
        "(LNMax/GNMax/Confident-GNMax), released student (Papernot et al. 2017, "
        "2018)",
        order=40,
        artefacts=(
            Artefact(
                name="pate.npz",
                what="the queries asked, the noisy answers, which were answered (published)",
                required=True,
            ),
            Artefact(name="pate.json", what="the aggregation and its privacy accounting (published)"),
            Artefact(
                name=f"{PRIVATE_DIR}/",
                what="the vote matrix, the noise, the partitions, the un-sanitised data-dependent ε (never publish)",
            ),
        ),
        report_kind="pate",
        run_module="dpaudit.app.runs.pate",
        style=PlotStyle(colour="#AA4499", marker="*"),
    )
)
