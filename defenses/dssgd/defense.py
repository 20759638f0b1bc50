"""DSSGD as a registered defense: a federation of participants trained into records.

Shokri & Shmatikov (CCS 2015): N participants with disjoint partitions of the private members
learn one model through a parameter server, each uploading only a selected fraction θ_u of its
parameter changes per turn (:mod:`defenses.dssgd.protocol`), optionally through the
differentially private sparse-vector upload (:mod:`defenses.dssgd.svt`).

A training produces

- the **global model** (the server's parameters) as the record, whose membership names the owner
  of every member;
- without the DP upload, every participant's **final local model** as a record of its own in the
  run's ``records/dssgd-participants/MODEL_ID/participant-NNN/`` (attack it with ``--target``;
  :mod:`defenses.dssgd.participants`);
  under it the local models never reach the server (:func:`defenses.dssgd.protocol.turn_reply`);
- the uploads of one observed participant (``--observe-participant``), as the server saw them,
  in ``uploads.npz`` beside the record: what the server-seat attacks read;
- without a DP claim, the two reference rows every DSSGD result is set against (§5 of the
  paper): **centralised** SGD on the union of the partitions and **standalone** SGD, each
  participant alone, both with the same local SGD and as many epochs as a participant's turns.

The claim is honest about what the DP variant protects (``docs/defenses/dssgd.md`` §5): ε is stated
per uploaded parameter per turn, as the paper states it, and composed over the c uploads of a
turn and every round (:class:`dpaudit.privacy.dssgd.DSSGDClaim`). Under it nothing else computed
from the private data is released (§6 there): the input standardisation comes from public data
(:func:`standardization_source`), replies carry only the noised upload, and :func:`replay_dssgd`
checks both on neighbouring data sets.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from defenses._common import build_record, expected_model_id
from defenses.dssgd.config import DSSGDConfig
from defenses.dssgd.participants import LOCAL_EVAL_EXAMPLES, local_models
from defenses.dssgd.plan import DSSGDPlan, plan_dssgd
from defenses.dssgd.protocol import (
    MECHANISM_FIELDS,
    FederationOutcome,
    FederationSetup,
    Reply,
    ReplyValue,
    assign_parameters,
    flatten_parameters,
    fraction_count,
    local_sgd,
    run_local,
)
from defenses.dssgd.uploads import Upload
from defenses.networks import build_network
from defenses.pate.partition import partition_ids, teacher_of
from defenses.registry import DEFENSES, DefenseSpec
from dpaudit import _validate as v
from dpaudit.data import DatasetBundle, Splits
from dpaudit.models import input_statistics
from dpaudit.parts import Artefact, PlotStyle
from dpaudit.privacy.claims import NonPrivateClaim, PrivacyClaim
from dpaudit.progress import Progress
from dpaudit.replay import ReplayTrace
from dpaudit.results.record import TrainedModel
from dpaudit.seeding import derive_seed, torch_generator
from dpaudit.store import atomic_save_npz
from dpaudit.threads import available_cores
from dpaudit.train_request import TrainRequest
from dpaudit.training import TrainWorkspace, evaluate

__all__ = [
    "train_dssgd",
    "federation_setup",
    "replay_dssgd",
    "standardization_source",
    "dssgd_claim_kind",
    "dssgd_report_lines",
    "PARTICIPANT_CACHE",
    "UPLOADS_FILE",
]

#: The run's cache of participants' local models (``RUN_DIR/records/dssgd-participants/``).
PARTICIPANT_CACHE = "dssgd-participants"
#: The observed participant's uploads, beside the global record.
UPLOADS_FILE = "uploads.npz"


def dssgd_report_lines(record: TrainedModel) -> list[str]:
    """What ``dpaudit train`` prints for a DSSGD record beyond accuracy and claim."""
    m = record.metrics
    rounds = m.get("run_rounds", record.config.get("rounds"))
    lines = [
        f"  federation: {record.config['participants']} participants, {rounds} "
        f"rounds ({record.config['schedule']}, {m['engine']} engine, "
        f"{m['seconds_per_round']:.2f} s per round); "
        f"each turn uploads at most {m['uploads_per_turn']:,} of {m['num_parameters']:,} parameters"
    ]
    if "centralised_test_accuracy" in m:
        lines.append(
            "  reference rows: centralised SGD "
            f"{m['centralised_test_accuracy']:.4f}, standalone "
            f"{m['standalone_test_accuracy']:.4f} "
            "(participants "
            f"{m['standalone_test_accuracy_min']:.4f}-{m['standalone_test_accuracy_max']:.4f}); "
            f"local models after DSSGD {m['local_test_accuracy_mean']:.4f}"
        )
    return lines


def dssgd_claim_kind(config: DSSGDConfig | Mapping[str, object]) -> str:
    """The claim kind a DSSGD training with ``config`` returns, or a stored record with this config carries.

    The DP upload's (``dssgd-svt``) with ``dp_epsilon``; none without it, and none for a
    participant's local model (a stored config naming its ``participant``).
    """
    if isinstance(config, Mapping):
        private = (
            config.get("dp_epsilon") is not None or config.get("target_epsilon") is not None
        ) and "participant" not in config
    else:
        private = config.dp_epsilon is not None or config.target_epsilon is not None
    return "dssgd-svt" if private else "nonprivate"


def participant_identity(record: TrainedModel) -> tuple[str, str] | None:
    """For a participant's local record: its id (as any DSSGD record's) and its directory name ``participant-NNN``."""
    index = record.config.get("participant")
    if record.defense != "dssgd" or isinstance(index, bool) or not isinstance(index, int):
        return None
    return expected_model_id(record, derived_options=DERIVED_OPTIONS), f"participant-{index:03d}"


#: Model options DSSGD derives from the data itself (the input standardisation), left out of the id.
DERIVED_OPTIONS = ("input_standardization",)


def dssgd_claim(config: DSSGDConfig, *, num_parameters: int) -> PrivacyClaim:
    """The privacy claim of a DSSGD training: non-private, or the DP upload composed honestly.

    A config with a budget is planned first (:func:`defenses.dssgd.plan.plan_dssgd`).
    """
    config = plan_dssgd(config, num_parameters=num_parameters).config
    if config.dp_epsilon is None:
        return NonPrivateClaim(
            description="DSSGD without the DP upload: the uploads carry exact parameter changes (no guarantee)"
        )
    from dpaudit.privacy.dssgd import dssgd_svt_claim

    return dssgd_svt_claim(
        epsilon_per_parameter=config.dp_epsilon,
        bound=config.bound,
        threshold=config.threshold,
        split=config.budget_split,
        uploads_per_round=config.rule.count(num_parameters),
        num_rounds=int(config.rounds),  # type: ignore[arg-type]
        num_parameters=num_parameters,
    )


def num_parameters(model_name: str, *, bundle: DatasetBundle, model_options: Mapping[str, object]) -> int:
    """|w|, the parameters every network of the federation has (public: the architecture's), without the data's
    statistics."""
    with torch.random.fork_rng(devices=[]):  # the global RNG stays untouched
        model = build_network(
            model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes, options=model_options
        )
    return int(flatten_parameters(model).numel())


def _run(
    setup: FederationSetup,
    config: DSSGDConfig,
    *,
    bundle: DatasetBundle,
    workspace: TrainWorkspace | None,
    progress: bool,
    observed: list[Upload],
) -> FederationOutcome:
    def on_upload(up: Upload) -> None:
        if up.participant == config.observe_participant:
            observed.append(up)

    assert config.rounds is not None  # plan_dssgd sets R before the federation runs
    with Progress(
        config.rounds,
        f"train dssgd {setup.model_name} on {bundle.name} ({config.participants} participants)",
        enabled=progress,
    ) as bar:
        on_round = lambda r: bar.update(1)
        if workspace is not None and workspace.executor == "ray":
            from defenses.dssgd.flower import run_flower

            workers = workspace.num_workers or max(1, min(config.participants, available_cores()))
            return run_flower(
                setup,
                rounds=config.rounds,
                download_fraction=config.download_fraction,
                schedule=config.schedule,
                num_workers=workers,
                on_upload=on_upload,
                on_round=on_round,
            )
        return run_local(
            setup,
            rounds=config.rounds,
            download_fraction=config.download_fraction,
            schedule=config.schedule,
            bundle=bundle,
            on_upload=on_upload,
            on_round=on_round,
        )


def _baselines(
    setup: FederationSetup,
    config: DSSGDConfig,
    *,
    bundle: DatasetBundle,
    members: np.ndarray,
    device: torch.device,
    progress: bool,
) -> dict[str, float]:
    """Centralised and standalone SGD with the participants' local SGD, for as many epochs as turns."""
    everything = bundle.all()
    test_x, test_y = bundle.test.features, bundle.test.labels
    assert config.rounds is not None  # plan_dssgd sets R before the federation runs
    epochs = config.rounds * config.local_epochs

    def fresh() -> nn.Module:
        model = build_network(
            setup.model_name,
            input_shape=bundle.input_shape,
            num_classes=bundle.num_classes,
            options=setup.model_options,
        ).to(device)
        assign_parameters(model, setup.initial)
        return model

    out: dict[str, float] = {}
    with Progress(1 + config.participants, "dssgd reference rows (centralised, standalone)", enabled=progress) as bar:
        union = everything.subset(members)
        model = fresh()
        local_sgd(
            model,
            union.features.to(device),
            union.labels.to(device),
            training=setup.training,
            generator=torch_generator(setup.seed, "dssgd", "centralised"),
            epochs=epochs,
        )
        out["centralised_test_accuracy"] = evaluate(model, test_x, test_y, device=device)["accuracy"]
        bar.update(1)
        alone = []
        for i, part_ids in enumerate(setup.partitions):
            part = everything.subset(part_ids)
            model = fresh()
            local_sgd(
                model,
                part.features.to(device),
                part.labels.to(device),
                training=setup.training,
                generator=torch_generator(setup.seed, "dssgd", "batches", i),
                epochs=epochs,
            )
            alone.append(evaluate(model, test_x, test_y, device=device)["accuracy"])
            bar.update(1)
    out["standalone_test_accuracy"] = float(np.mean(alone))
    out["standalone_test_accuracy_min"] = float(np.min(alone))
    out["standalone_test_accuracy_max"] = float(np.max(alone))
    return out


def _save_uploads(
    record_dir: Path, uploads: list[Upload], *, participant: int, partition: np.ndarray, num_parameters: int
) -> None:
    """The observed participant's uploads as the server received them (JSON-free NPZ, no pickle)."""
    sizes = np.array([u.indices.numel() for u in uploads], dtype=np.int64)
    atomic_save_npz(
        record_dir / UPLOADS_FILE,
        participant=np.array(participant, dtype=np.int64),
        rounds=np.array([u.round for u in uploads], dtype=np.int64),
        sizes=sizes,
        indices=torch.cat([u.indices for u in uploads]).numpy() if uploads else np.zeros(0, dtype=np.int64),
        values=torch.cat([u.values for u in uploads]).numpy() if uploads else np.zeros(0, dtype=np.float32),
        member_ids=np.asarray(partition, dtype=np.int64),
        num_parameters=np.array(num_parameters, dtype=np.int64),
    )


def federation_setup(request: TrainRequest[DSSGDConfig], /, *, data_root: str | None = None) -> FederationSetup:
    """The federation :func:`train_dssgd` trains for ``request``: partitions, common initial parameters, rules.

    A deterministic function of the request (its ``progress`` aside), so every machine of a real Flower federation
    builds the same one from the same dataset and settings (:mod:`defenses.dssgd.deployment`).

    Raises:
        ValueError: more participants than members, or a budget that cannot be met.
    """
    bundle, splits, config, seed = request.bundle, request.splits, request.config, request.seed
    model_options = _network_options(request.model_options, config, bundle=bundle, splits=splits)
    members = np.sort(np.asarray(splits.members, dtype=np.int64))
    if config.participants > len(members):
        raise v.invalid(
            "participants",
            f"participants must be at most the number of members ({len(members)}), got {config.participants!r}",
        )
    partitions = partition_ids(members, num_teachers=config.participants, seed=derive_seed(seed, "dssgd", "partition"))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "init"))  # inside fork_rng: global state restored after
        model = build_network(
            request.model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes, options=model_options
        )
    initial = flatten_parameters(model)
    config = plan_dssgd(
        config, num_parameters=int(initial.numel())
    ).config  # a budget's dp_epsilon is that of this model's c
    return FederationSetup(
        dataset=bundle.name,
        data_root=data_root,
        partitions=partitions,
        model_name=request.model_name,
        model_options=model_options,
        rule=config.rule,
        training=config.training,
        seed=seed,
        initial=initial,
        device=str(torch.device(request.device)),
    )


def _announce_budget(plan: DSSGDPlan, *, num_parameters: int) -> None:
    """Says on stderr, before training, how the run spends its budget (or what its --dp-epsilon adds up to)."""
    config = plan.config
    if plan.budget.note is not None:
        print(f"dssgd budget: {plan.budget.note}", file=sys.stderr, flush=True)
    elif config.dp_epsilon is not None:
        # --dp-epsilon is the paper's per-parameter figure, not a budget: say what it adds up to before spending it.
        total = dssgd_claim(config, num_parameters=num_parameters)
        print(
            f"dssgd budget: --dp-epsilon {config.dp_epsilon:g} is spent per uploaded "
            "parameter per turn; each participant uploads at most "
            f"{config.rule.count(num_parameters):,} of {num_parameters:,} parameters "
            f"per turn for {config.rounds} rounds, so its data get "
            f"epsilon = {total.epsilon(delta=1e-5, accountant='pure'):g} (pure composition, what the record claims)",
            file=sys.stderr,
            flush=True,
        )


def _federation_metrics(
    outcome: FederationOutcome,
    config: DSSGDConfig,
    *,
    num_parameters: int,
    partitions: Sequence[np.ndarray],
    observed: list[Upload],
) -> dict[str, object]:
    """The global record's metrics about the federation: engine, uploads, the values the run used."""
    c = config.rule.count(num_parameters)
    return {
        "engine": outcome.engine,
        "num_parameters": num_parameters,
        "uploads_per_turn": c,
        # The values the run used (a budget's calibrated ones included: the record's config keeps them unset).
        "run_rounds": int(config.rounds),  # type: ignore[arg-type]
        **({} if config.dp_epsilon is None else {"run_dp_epsilon": float(config.dp_epsilon)}),
        "download_count": fraction_count("download_fraction", config.download_fraction, num_parameters),
        "uploads_applied": outcome.uploads_applied,
        "parameters_updated": int((outcome.stat > 0).sum()),
        "seconds_per_round": float(np.mean(outcome.seconds_per_round)) if outcome.seconds_per_round else float("nan"),
        "partition_sizes": [len(p) for p in partitions],
        "observed_upload_sizes_mean": float(np.mean([u.indices.numel() for u in observed])) if observed else 0.0,
    }


def train_dssgd(
    request: TrainRequest[DSSGDConfig], /, *, workspace: TrainWorkspace | None = None
) -> tuple[TrainedModel, nn.Module]:
    """Trains a DSSGD federation over the split's members and returns the global model's record.

    Args:
        request: what to train: the split's members are cut into ``config.participants``
            disjoint partitions (seeded, by sample id); the model is the global and every local
            model's architecture; the seed roots the initialisation, partitions, batch orders,
            uploads and schedule; the device is where participants train (the in-process engine).
        workspace: where the participants' local records and the observed uploads are kept and
            which engine runs the federation (``ray``: Flower's simulation engine on Ray with
            ``num_workers`` concurrent clients; otherwise in this process). ``None``: in this
            process, keeping nothing but the global record.

    Returns:
        The global model's record (membership with owners) and the global model (eval mode).

    Raises:
        ValueError: more participants than members, or a budget that cannot be met
            (:func:`defenses.dssgd.plan.plan_dssgd`).
    """
    started, device, progress, bundle = time.monotonic(), torch.device(request.device), request.progress, request.bundle
    members = np.sort(np.asarray(request.splits.members, dtype=np.int64))
    data_root = workspace.data_root if workspace is not None else None
    setup = federation_setup(request, data_root=data_root)
    model_options, partitions, initial = setup.model_options, setup.partitions, setup.initial
    # The record keeps the request's config as asked (its id); the run uses the resolved one.
    plan: DSSGDPlan = plan_dssgd(request.config, num_parameters=int(initial.numel()))
    config = plan.config
    if progress:
        _announce_budget(plan, num_parameters=int(initial.numel()))
    with torch.random.fork_rng(devices=[]):  # the global RNG stays untouched, as before the split
        model = build_network(
            request.model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes, options=model_options
        )
    observed: list[Upload] = []
    outcome = _run(setup, config, bundle=bundle, workspace=workspace, progress=progress, observed=observed)
    model.to(device)
    assign_parameters(model, outcome.parameters)
    model.eval()
    num_parameters = int(initial.numel())
    extra = _federation_metrics(
        outcome, config, num_parameters=num_parameters, partitions=partitions, observed=observed
    )
    private = setup.rule.private
    local_acc = local_models(outcome, setup, request, workspace=workspace, started=started)
    if local_acc:  # none under the DP upload: the local models stay with their participants
        extra["local_test_accuracy_mean"] = float(np.mean(local_acc))  # on the first LOCAL_EVAL_EXAMPLES test examples
        # How many test examples each local model was scored on: a mean of accuracies is an
        # estimate, and its interval needs the count.
        extra["local_test_examples"] = min(LOCAL_EVAL_EXAMPLES, len(bundle.test))
    if config.baselines and private:
        # Plain SGD on the private data, un-noised: its accuracies would be statistics of the data
        # outside the claim in a record that claims DP. They do not depend on the DP settings, so
        # the same config without the budget trains the same reference rows.
        if progress:
            print(
                "dssgd: no reference rows under a DP claim (they are non-private "
                "statistics of the data); train the same config without the budget for "
                "them",
                file=sys.stderr,
            )
    elif config.baselines:
        extra.update(_baselines(setup, config, bundle=bundle, members=members, device=device, progress=progress))
    owners = teacher_of(partitions, members)
    claim = dssgd_claim(config, num_parameters=num_parameters)
    record = build_record(
        dataclasses.replace(request, progress=False),
        defense="dssgd",
        model=model,
        claim=claim,
        started=started,
        built_options=model_options,
        extra_metrics=extra,
        owners=owners,
    )
    if workspace is not None:
        workspace.record_dir.mkdir(parents=True, exist_ok=True)
        _save_uploads(
            workspace.record_dir,
            observed,
            participant=config.observe_participant,
            partition=partitions[config.observe_participant],
            num_parameters=num_parameters,
        )
    return record, model


def standardization_source(config: DSSGDConfig, *, bundle: DatasetBundle, splits: Splits) -> tuple[str, torch.Tensor]:
    """Where ``--standardize`` takes the input mean and std from: (what, the features).

    Without the DP upload, the whole training split (the paper's preprocessing, §6.1). Under a DP
    claim, the split's *population*: ids that are neither members nor non-members, public data of
    the same distribution (the pool shadow models train on), so the two constants the released
    model carries do not depend on any private record (docs/defenses/dssgd.md, §6).

    Raises:
        ValueError: a DP config with ``standardize`` and an empty population (named ``standardize``).
    """
    if dssgd_claim_kind(config) == "nonprivate":
        return "training split", bundle.train.features
    population = np.asarray(splits.population, dtype=np.int64)
    if population.size == 0:
        budget = ", ".join(
            f"{k}={val!r}"
            for k, val in (("dp_epsilon", config.dp_epsilon), ("target_epsilon", config.target_epsilon))
            if val is not None
        )
        raise v.invalid(
            "standardize",
            "--standardize (standardize=True, the default) with a DP budget "
            f"({budget}) standardises inputs by public data, the split's population, "
            "which is empty here (members and non-members take every training id): "
            "pass --no-standardize, leave a population (lower --member-fraction), "
            "or, from Python, declare the constants as the model option input_standardization",
        )
    return "population", bundle.all().subset(population).features


def _network_options(
    requested: Mapping[str, object], config: DSSGDConfig, *, bundle: DatasetBundle, splits: Splits
) -> dict[str, object]:
    """The options every network of the federation is built with: the requested ones, plus the
    input standardisation when ``config.standardize`` asks for it and the caller gave none.

    The statistics are two numbers (:func:`dpaudit.models.input_statistics`) over
    :func:`standardization_source`: the training split without the DP upload, public data under it.
    """
    if not config.standardize or "input_standardization" in requested:
        return dict(requested)
    _, features = standardization_source(config, bundle=bundle, splits=splits)
    return {**requested, "input_standardization": input_statistics(features)}


def _check_budget(
    config: DSSGDConfig,
    *,
    bundle: DatasetBundle,
    splits: Splits,
    model_name: str,
    model_options: Mapping[str, object],
    **_: Any,
) -> None:
    """Refuses, before anything is written, a DP run that ``--standardize`` would standardise by
    no public data, and with a target ε and the DP upload, rounds the budget cannot pay for
    (naming those it allows, or the dp_epsilon)."""
    if config.standardize and "input_standardization" not in (model_options or {}):
        standardization_source(config, bundle=bundle, splits=splits)
    if None not in (config.target_epsilon, config.dp_epsilon):
        plan_dssgd(config, num_parameters=num_parameters(model_name, bundle=bundle, model_options=model_options))


#: Metrics of :func:`_federation_metrics` the replay does not count as released, with why.
_NOT_RELEASED_METRICS = {
    "partition_sizes": "a summary of the membership ground truth the record holds anyway (each member's owner)",
    "parameters_updated": "post-processing of the uploads' indices, the mechanism's output",
    "observed_upload_sizes_mean": "post-processing of the uploads' sizes, the mechanism's output",
    "seconds_per_round": "wall time, as every record's train_seconds",
}


def replay_dssgd(request: TrainRequest[DSSGDConfig], /) -> ReplayTrace:
    """The neighbouring replay of a DP DSSGD training (``DefenseSpec.replay``; docs/defenses/dssgd.md, §6).

    Runs the training's own federation (:func:`federation_setup`: standardisation, partitions,
    initial model, plan; :func:`~defenses.dssgd.protocol.run_local`: participants, schedule,
    local SGD, uploads) on ``splits``' members, without the reference rows, and records:

    * mechanism inputs: every turn's bounded Δw as the sparse-vector upload receives it, before
      its noise, named ``round R, participant I: bounded update``, with the sensitivity the
      claim's accounting assumes for every entry, Δf = 2γ, in L∞
      (:func:`dpaudit.privacy.dssgd.noise_scales`);
    * released: the standardisation constants and the initial parameters the record's network
      is built with; every field of every turn's reply other than the noised upload
      (:func:`~defenses.dssgd.protocol.turn_reply`: who sent it, the round, and, were they sent,
      the loss and the final local model); the turns taken, in order (who took part); the final
      local models the outcome holds; the federation's metrics the record stores, except those in
      :data:`_NOT_RELEASED_METRICS`.

    Raises:
        ValueError: ``config`` has no DP claim (nothing to replay against), or is invalid.
    """
    from dpaudit.privacy.dssgd import noise_scales
    from dpaudit.replay import MechanismInput, ReplayTrace

    if dssgd_claim_kind(request.config) == "nonprivate":
        raise v.invalid(
            "config",
            "the DSSGD replay needs a DP config (dp_epsilon or target_epsilon): "
            "without the DP upload there is no claim to replay against",
        )
    setup = federation_setup(request)
    n = int(setup.initial.numel())
    config = plan_dssgd(request.config, num_parameters=n).config
    rounds = int(config.rounds)
    sensitivity = noise_scales(
        epsilon=float(config.dp_epsilon), bound=config.bound, split=config.budget_split
    ).sensitivity
    inputs: list[MechanismInput] = []
    released: dict[str, np.ndarray] = {
        "input standardization": np.asarray(setup.model_options.get("input_standardization", []), dtype=np.float64),
        "initial parameters": setup.initial.numpy(),
    }
    turns: list[tuple[int, int]] = []

    def observe(participant: int, rnd: int, bounded: np.ndarray) -> None:
        inputs.append(
            MechanismInput(
                name=f"round {rnd}, participant {participant}: bounded update",
                value=bounded,
                sensitivity=sensitivity,
                norm="linf",
            )
        )

    def on_reply(reply: Reply) -> None:
        sender, rnd = int(reply["config"]["participant"]), int(reply["config"]["round"])
        turns.append((rnd, sender))
        for record, fields in reply.items():
            for name, value in fields.items():
                if (record, name) not in MECHANISM_FIELDS:
                    released[f"round {rnd}, participant {sender}: {record}.{name}"] = _numeric(value)

    outcome = run_local(
        setup,
        rounds=rounds,
        download_fraction=config.download_fraction,
        schedule=config.schedule,
        bundle=request.bundle,
        observer=observe,
        on_reply=on_reply,
    )
    released["turns"] = np.asarray(turns, dtype=np.float64).reshape(-1, 2)
    for i, flat in enumerate(outcome.local_parameters):
        if flat is not None:
            released[f"final local model of participant {i}"] = flat.numpy()
    metrics = _federation_metrics(outcome, config, num_parameters=n, partitions=list(setup.partitions), observed=[])
    for key, value in metrics.items():
        if key not in _NOT_RELEASED_METRICS and not isinstance(value, str):
            released[f"metric {key}"] = np.asarray(value, dtype=np.float64)
    return ReplayTrace(defense="dssgd", mechanism_inputs=tuple(inputs), released=released)


def _numeric(value: ReplyValue) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().double().numpy()
    return np.asarray(value, dtype=np.float64)


DEFENSES.register(
    DefenseSpec(
        name="dssgd",
        config_type=DSSGDConfig,
        train=train_dssgd,
        claim_kind=dssgd_claim_kind,
        submodels=PARTICIPANT_CACHE,
        submodel_identity=participant_identity,
        derived_options=DERIVED_OPTIONS,
        report_lines=dssgd_report_lines,
        check_budget=_check_budget,
        replay=replay_dssgd,
        summary="distributed selective SGD: participants upload a selected fraction of "
        "their updates to a parameter server, optionally by the sparse vector "
        "technique (Shokri & Shmatikov 2015)",
        order=50,
        artefacts=(
            Artefact(
                name=UPLOADS_FILE, what="the observed participant's uploads as the server received them, turn by turn"
            ),
        ),
        report_kind="dssgd",
        run_module="dpaudit.app.runs.dssgd",
        style=PlotStyle(colour="#999933", marker="h"),
    )
)
