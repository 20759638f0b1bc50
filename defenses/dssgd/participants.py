"""DSSGD's participants after the federation: their final local models, evaluated and kept as records.

Without the DP upload each participant's last reply carries its whole local model
(:func:`defenses.dssgd.protocol.turn_reply`); :func:`local_models` evaluates every one the
server received and, in a run, saves it as a record of its own under
``RUN_DIR/records/dssgd-participants/MODEL_ID/participant-NNN/`` (:func:`participant_record_dir`),
so each local model can be attacked like any other. Apart from :mod:`defenses.dssgd.defense`
because it is the one part of a training about the participants' models rather than the
global one.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from defenses._common import build_record, config_dict, evaluation_bundle, model_id_for
from defenses.dssgd.config import DSSGDConfig
from defenses.dssgd.protocol import FederationOutcome, FederationSetup, assign_parameters
from defenses.networks import build_network
from dpaudit.data import Splits
from dpaudit.privacy.claims import NonPrivateClaim
from dpaudit.seeding import derive_seed
from dpaudit.train_request import TrainRequest
from dpaudit.training import TrainWorkspace, evaluate

__all__ = ["LOCAL_EVAL_EXAMPLES", "local_models", "participant_record_dir"]

#: Local models are evaluated on at most this many test examples (the first by id): evaluating 30
#: CNNs on all 10,000 MNIST test images costs more than the whole federation's training.
LOCAL_EVAL_EXAMPLES = 1000


def participant_record_dir(cache_dir: str | os.PathLike[str], model_id: str, index: int) -> Path:
    """Where participant ``index`` of the federation ``model_id`` keeps its local record."""
    return Path(cache_dir) / model_id / f"participant-{index:03d}"


def local_models(
    outcome: FederationOutcome,
    setup: FederationSetup,
    request: TrainRequest[DSSGDConfig],
    *,
    workspace: TrainWorkspace | None,
    started: float,
) -> list[float]:
    """Every final local model the server received, evaluated (and with a workspace, saved as a record); their test
    accuracies.

    ``request`` is the federation's training as asked (its config and model options, what the
    global record's id hashes); ``setup`` holds the options the networks were built with. Under
    the DP upload the server receives none (:func:`defenses.dssgd.protocol.turn_reply`).
    """
    bundle, device = request.bundle, torch.device(request.device)
    local_acc = []
    small = evaluation_bundle(bundle, LOCAL_EVAL_EXAMPLES)
    for i, flat in enumerate(outcome.local_parameters):
        if flat is None:  # kept by the participant (DP upload) or gone (a real federation)
            continue
        local = build_network(
            request.model_name,
            input_shape=bundle.input_shape,
            num_classes=bundle.num_classes,
            options=setup.model_options,
        ).to(device)
        assign_parameters(local, flat)
        local.eval()
        local_acc.append(evaluate(local, small.test.features, small.test.labels, device=device)["accuracy"])
        if workspace is not None:
            _save_participant(
                local,
                request,
                index=i,
                partition=setup.partitions[i],
                built_options=setup.model_options,
                workspace=workspace,
                started=started,
            )
    return local_acc


def _save_participant(
    local: nn.Module,
    request: TrainRequest[DSSGDConfig],
    *,
    index: int,
    partition: np.ndarray,
    built_options: Mapping[str, object],
    workspace: TrainWorkspace,
    started: float,
) -> None:
    """Participant ``index``'s final local model as a record whose members are its own partition."""
    from dpaudit.weights import save_record

    bundle, splits = request.bundle, request.splits
    # As many non-members as the participant has members, drawn from the global non-members: a
    # balanced membership game for its local model, evaluated at the cost of its own data.
    rng = np.random.default_rng(derive_seed(request.seed, "dssgd", "local-non-members", index))
    pool = np.asarray(splits.non_members, dtype=np.int64)
    non_members = np.sort(rng.choice(pool, size=min(len(pool), len(partition)), replace=False)) if len(pool) else pool
    own = Splits(
        dataset=splits.dataset,
        seed=splits.seed,
        members=partition,
        non_members=non_members,
        population=splits.population,
        test=np.asarray(bundle.test.ids, dtype=np.int64),
    )
    claim = NonPrivateClaim(
        description=f"DSSGD participant {index}'s local model: trained on its own data "
        "without noise (the DP variant, if any, protects only what it uploads)"
    )
    config = {**config_dict(request.config), "participant": index}
    participant = TrainRequest(
        bundle=bundle,
        splits=own,
        model_name=request.model_name,
        model_options=request.model_options,
        config=config,
        seed=request.seed,
        device=request.device,
        progress=False,
    )
    record = build_record(
        participant, defense="dssgd", model=local, claim=claim, started=started, built_options=built_options
    )
    target = participant_record_dir(workspace.cache_dir, model_id_for(request, defense="dssgd"), index)
    save_record(record, local, target)
    if index == 0:
        print(f"participants' local records: {target.parent}", file=sys.stderr)
