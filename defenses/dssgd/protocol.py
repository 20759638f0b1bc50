"""The distributed selective SGD protocol (Shokri & Shmatikov, CCS 2015, §4), engine-free.

N participants each hold a disjoint private partition and a local copy of the model; a
parameter server holds the global parameters and ``stat``, a per-parameter count of how often
each was updated. In its turn a participant

1. downloads the fraction θ_d of global parameters with the largest ``stat`` and overwrites its
   local copies of them,
2. runs local SGD on its own data,
3. computes Δw, the change of every local parameter over the turn, and
4. uploads at most c = θ_u·|w| entries of Δw, chosen by *largest values* (largest |Δw_j|) or
   *random with threshold* (a random subset of the entries with |Δw_j| > τ), or, in the
   differentially private variant, by the sparse vector technique with noisy values
   (:mod:`defenses.dssgd.svt`).

The server adds every uploaded entry to the global parameter and counts it in ``stat``.

This module holds the pieces every engine shares — the server, the participant, the upload
rules (:mod:`defenses.dssgd.uploads`) and the schedules — so the in-process engine
(:func:`run_federation`) and the Flower apps (:mod:`defenses.dssgd.flower`) run exactly the
same arithmetic and differ only in who calls whom. Parameters travel as one flat float32 vector, the concatenation of
``model.parameters()`` in order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from defenses.dssgd.uploads import Upload, UploadRule
from dpaudit import _validate as v
from dpaudit.privacy.dssgd_budget import fraction_count  # torch-free, so a record's budget can be planned again
from dpaudit.seeding import torch_generator
from dpaudit.training import check_loss, shuffled_batches

__all__ = [
    "SCHEDULES",
    "LocalTraining",
    "ParameterServer",
    "Participant",
    "flatten_parameters",
    "assign_parameters",
    "fraction_count",
    "local_sgd",
    "schedule_order",
    "run_federation",
    "FederationSetup",
    "FederationOutcome",
    "build_participant",
    "run_local",
    "Observer",
    "MECHANISM_FIELDS",
    "turn_reply",
    "query_reply",
    "Reply",
    "ReplyValue",
]

#: Orders in which participants take their turns.
SCHEDULES: tuple[str, ...] = ("round-robin", "random", "async")


def flatten_parameters(model: nn.Module) -> torch.Tensor:
    """The model's parameters as one detached float32 CPU vector (in ``model.parameters()`` order)."""
    return torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])


@torch.no_grad()
def assign_parameters(model: nn.Module, flat: torch.Tensor) -> None:
    """Copies the flat vector ``flat`` into the model's parameters (the inverse of :func:`flatten_parameters`)."""
    total = sum(p.numel() for p in model.parameters())
    if flat.ndim != 1 or flat.numel() != total:
        raise v.invalid(
            "flat", f"flat must be a vector of the model's {total} parameters, got shape {tuple(flat.shape)}"
        )
    offset = 0
    for p in model.parameters():
        n = p.numel()
        p.copy_(flat[offset : offset + n].view_as(p).to(p.device, p.dtype))
        offset += n


class ParameterServer:
    """The global parameters and the per-parameter update counter ``stat`` (§4, "parameter server").

    Args:
        initial: the flat initial parameters (copied).
    """

    def __init__(self, initial: torch.Tensor) -> None:
        if initial.ndim != 1 or initial.numel() == 0:
            raise v.invalid(
                "initial", f"initial must be a non-empty flat parameter vector, got shape {tuple(initial.shape)}"
            )
        self.parameters = initial.detach().float().cpu().clone()
        self.stat = torch.zeros(initial.numel(), dtype=torch.int64)
        self.uploads_applied = 0

    def download_indices(self, fraction: float) -> torch.Tensor:
        """The positions of the θ_d·|w| parameters with the largest ``stat``, in increasing order.

        Ties are broken by position (a stable sort), so every engine selects the same entries;
        with θ_d = 1 every parameter is downloaded.
        """
        k = fraction_count("download_fraction", fraction, self.stat.numel())
        if k == self.stat.numel():
            return torch.arange(k)
        order = torch.sort(-self.stat, stable=True).indices[:k]
        return torch.sort(order).values

    def download(self, fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
        """(positions, current values) of the parameters a participant downloads."""
        idx = self.download_indices(fraction)
        return idx, self.parameters[idx].clone()

    def apply(self, upload: Upload) -> None:
        """Adds the uploaded increments to the global parameters and counts each entry once.

        Raises:
            ValueError: an index outside the parameter vector or a repeated index (an honest
                participant never sends one; the server refuses rather than double-counting).
        """
        idx = upload.indices
        if idx.numel():
            if int(idx.min()) < 0 or int(idx.max()) >= self.parameters.numel():
                raise v.invalid(
                    "upload",
                    f"upload of participant {upload.participant} has indices outside [0, {self.parameters.numel()})",
                )
            if torch.unique(idx).numel() != idx.numel():
                raise v.invalid("upload", f"upload of participant {upload.participant} repeats an index")
        self.parameters[idx] += upload.values
        self.stat[idx] += 1
        self.uploads_applied += 1


@dataclass(frozen=True, kw_only=True)
class LocalTraining:
    """Plain SGD as every participant (and the centralised reference) runs it.

    The paper's participants run plain SGD (no momentum), which also keeps a turn stateless:
    nothing but the parameters carries over from one turn to the next.

    Attributes:
        epochs: passes over the participant's data per turn.
        batch_size: examples per step.
        learning_rate: step size.
    """

    epochs: int = 1
    batch_size: int = 32
    learning_rate: float = 0.05

    def __post_init__(self) -> None:
        v.integer("local_epochs", self.epochs, minimum=1)
        v.integer("batch_size", self.batch_size, minimum=1)
        v.positive("learning_rate", self.learning_rate)


def local_sgd(
    model: nn.Module,
    features: torch.Tensor,
    labels: torch.Tensor,
    *,
    training: LocalTraining,
    generator: torch.Generator,
    epochs: int | None = None,
) -> float:
    """Runs plain mini-batch SGD on (features, labels) in place; returns the mean loss.

    The batch order comes from ``generator`` only, so a participant alone with θ_u = θ_d = 1
    follows exactly the steps of centralised SGD on its data with the same generator.
    """
    device = next(model.parameters()).device
    model.train()
    loss_fn = nn.CrossEntropyLoss()
    total, count, step = 0.0, 0, 0
    for epoch in range(training.epochs if epochs is None else epochs):
        for idx in shuffled_batches(len(features), training.batch_size, generator=generator):
            xb, yb = features[idx].to(device), labels[idx].to(device)
            model.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            value = float(loss.item())
            check_loss(value, step=step, epoch=epoch, learning_rate=training.learning_rate)
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    if p.grad is not None:
                        p.add_(p.grad, alpha=-training.learning_rate)
            total += value * len(idx)
            count += len(idx)
            step += 1
    return total / max(count, 1)


#: Receives (participant, round, bounded Δw) of every DP upload, before its noise: the neighbouring replay's hook.
Observer = Callable[[int, int, np.ndarray], None]


class Participant:
    """One DSSGD participant: its private data, its local model and its two random streams.

    Args:
        index: the participant's number.
        model: its local model (already holding the common initial parameters).
        features, labels: its private partition.
        rule: how it uploads.
        training: its local SGD.
        batch_generator: the stream of its batch orders (one per participant, continuing over turns).
        upload_generator: the stream of its upload choices (random selection, DP noise).
        observer: called with every DP upload's mechanism input (:data:`Observer`); ``None``
            (the default) in every training.
    """

    def __init__(
        self,
        *,
        index: int,
        model: nn.Module,
        features: torch.Tensor,
        labels: torch.Tensor,
        rule: UploadRule,
        training: LocalTraining,
        batch_generator: torch.Generator,
        upload_generator: torch.Generator,
        observer: Observer | None = None,
    ) -> None:
        if len(features) == 0 or len(features) != len(labels):
            raise v.invalid(
                "participants",
                f"participant {index} needs a non-empty partition with one label per "
                f"example, got {len(features)} examples and {len(labels)} labels",
            )
        self.index = index
        self.model = model
        self.features = features
        self.labels = labels
        self.rule = rule
        self.training = training
        self.batch_generator = batch_generator
        self.upload_generator = upload_generator
        self.observer = observer
        self.turns = 0

    @property
    def local_parameters(self) -> torch.Tensor:
        """The local model's current flat parameters."""
        return flatten_parameters(self.model)

    def run_turn(self, round_index: int, download_indices: torch.Tensor, download_values: torch.Tensor) -> Upload:
        """One turn: overwrite the downloaded parameters, train locally, upload a selection of Δw."""
        local = self.local_parameters
        local[download_indices] = download_values.float()
        assign_parameters(self.model, local)
        loss = local_sgd(self.model, self.features, self.labels, training=self.training, generator=self.batch_generator)
        delta = self.local_parameters - local
        observer = self.observer
        observe = None if observer is None else (lambda bounded: observer(self.index, round_index, bounded))
        idx, values = self.rule.choose(delta, generator=self.upload_generator, observe=observe)
        self.turns += 1
        # Under the DP upload the claim covers the noised values only: the un-noised mean loss stays here.
        return Upload(
            participant=self.index,
            round=round_index,
            indices=idx,
            values=values,
            loss=math.nan if self.rule.private else loss,
        )

    def state(self) -> dict[str, torch.Tensor]:
        """Everything that carries over between turns (for engines whose clients are rebuilt per turn)."""
        return {
            "parameters": self.local_parameters,
            "batch_rng": self.batch_generator.get_state(),
            "upload_rng": self.upload_generator.get_state(),
            "turns": torch.tensor(self.turns),
        }

    def load_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restores what :meth:`state` returned."""
        assign_parameters(self.model, state["parameters"])
        self.batch_generator.set_state(state["batch_rng"])
        self.upload_generator.set_state(state["upload_rng"])
        self.turns = int(state["turns"])


#: One field of a participant's reply: a tensor (the upload, local parameters), an index or count, a
#: loss, or a failed turn's message.
ReplyValue = torch.Tensor | int | float | str
#: A participant's reply, by record (``upload``, ``config``, ``local``) and field, as it crosses the network.
Reply = dict[str, dict[str, ReplyValue]]

#: The fields of a turn's reply that the DP upload's mechanism produces (its noised output);
#: every other field a participant sends must not depend on its data (:func:`turn_reply`).
MECHANISM_FIELDS: frozenset[tuple[str, str]] = frozenset({("upload", "indices"), ("upload", "values")})


def turn_reply(upload: Upload, *, private: bool, final_parameters: torch.Tensor | None = None) -> Reply:
    """Everything a participant sends the server after a turn, by record and field.

    Every engine that carries a turn over a network builds its message from this (the Flower
    ClientApp, :mod:`defenses.dssgd.flower`), and the neighbouring replay inspects it, so what is
    sent and what is checked are one thing. ``upload``: the sparse Δw (:data:`MECHANISM_FIELDS`);
    ``config``: who sent it and for which round (both the server's own knowledge). Without the
    DP upload the reply also carries the turn's mean ``loss`` and, with ``final_parameters`` (the
    participant's last turn), its whole local model under ``local``; under the DP upload
    neither: the claim covers the noised upload only (docs/defenses/dssgd.md, §6).

    Args:
        upload: the turn's upload.
        private: whether the upload rule is the DP variant's.
        final_parameters: the participant's final local parameters on its last turn, else ``None``.
    """
    config: dict[str, ReplyValue] = {"participant": int(upload.participant), "round": int(upload.round)}
    content: Reply = {"upload": {"indices": upload.indices, "values": upload.values}, "config": config}
    if not private:
        config["loss"] = float(upload.loss)
        if final_parameters is not None:
            content["local"] = {"parameters": final_parameters}
    return content


def query_reply(participant: Participant) -> Reply:
    """What a participant answers the server's ``query`` (which participant it is, how many turns it took).

    Without the DP upload it also sends its current local parameters (``local``); under the DP
    upload never: after a turn they are a function of its data outside the mechanism.
    """
    content: Reply = {"config": {"participant": int(participant.index), "turns": int(participant.turns)}}
    if not participant.rule.private:
        content["local"] = {"parameters": participant.local_parameters}
    return content


def schedule_order(schedule: str, num_participants: int, *, generator: torch.Generator) -> list[int]:
    """The participants' order within one round: fixed (round-robin and async) or a fresh permutation (random)."""
    v.choice("schedule", schedule, SCHEDULES)
    if schedule == "random":
        return [int(i) for i in torch.randperm(num_participants, generator=generator)]
    return list(range(num_participants))


def run_federation(
    server: ParameterServer,
    participants: Sequence[Participant],
    *,
    rounds: int,
    download_fraction: float,
    schedule: str,
    generator: torch.Generator,
    on_upload: Callable[[Upload], None] | None = None,
    on_round: Callable[[int], None] | None = None,
) -> None:
    """Runs ``rounds`` rounds of DSSGD in this process (the reference engine).

    ``round-robin`` and ``random`` are sequential: each participant downloads the parameters as
    the previous upload left them. ``async`` models participants that train at the same time:
    all of them download at the start of the round, and their uploads reach the server one after
    another (here in index order; on a real engine in order of arrival).

    Args:
        server: the parameter server (updated in place).
        participants: the participants (their local models are updated in place).
        rounds: number of rounds; every participant takes one turn per round.
        download_fraction: θ_d.
        schedule: one of :data:`SCHEDULES`.
        generator: the stream of the random schedule's permutations.
        on_upload: called with every upload after the server applied it.
        on_round: called with the round index after each round.
    """
    v.integer("rounds", rounds, minimum=1)
    for r in range(rounds):
        order = schedule_order(schedule, len(participants), generator=generator)
        if schedule == "async":
            snapshot = [server.download(download_fraction) for _ in order]
            uploads = [participants[i].run_turn(r, *snapshot[k]) for k, i in enumerate(order)]
            for up in uploads:
                server.apply(up)
                if on_upload is not None:
                    on_upload(up)
        else:
            for i in order:
                up = participants[i].run_turn(r, *server.download(download_fraction))
                server.apply(up)
                if on_upload is not None:
                    on_upload(up)
        if on_round is not None:
            on_round(r)


@dataclass(frozen=True, kw_only=True, eq=False)
class FederationSetup:
    """Everything needed to build any participant from scratch, in any process.

    Engines whose clients live in other processes (Flower on Ray) ship this and rebuild a
    participant from it, reloading the dataset by name, so nothing but plain values and
    tensors crosses a process boundary.

    Attributes:
        dataset: registered dataset name.
        data_root: where datasets live (``None``: the default resolution).
        partitions: each participant's private sample ids (disjoint).
        model_name, model_options: the zoo architecture every participant trains.
        rule: the upload rule.
        training: the local SGD.
        seed: root seed; participant i's streams are ``("dssgd", "batches", i)`` and ``("dssgd", "upload", i)``.
        initial: the common initial parameters (flat).
        device: where participants train.
    """

    dataset: str
    data_root: str | None
    partitions: tuple[np.ndarray, ...]
    model_name: str
    model_options: Mapping[str, object]
    rule: UploadRule
    training: LocalTraining
    seed: int
    initial: torch.Tensor
    device: str = "cpu"

    @property
    def num_participants(self) -> int:
        return len(self.partitions)


def build_participant(setup: FederationSetup, index: int, *, bundle: Any = None) -> Participant:
    """Participant ``index`` of ``setup`` at its starting point (common initial parameters, fresh streams).

    Args:
        setup: the federation.
        index: which participant.
        bundle: the loaded dataset when the caller has it (else loaded by name).
    """
    from defenses.networks import build_network
    from dpaudit.data import load_dataset

    if bundle is None:
        bundle = load_dataset(setup.dataset, data_root=setup.data_root)
    part = bundle.all().subset(setup.partitions[index])
    model = build_network(
        setup.model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes, options=setup.model_options
    )
    model.to(setup.device)
    assign_parameters(model, setup.initial)
    return Participant(
        index=index,
        model=model,
        features=part.features.to(setup.device),
        labels=part.labels.to(setup.device),
        rule=setup.rule,
        training=setup.training,
        batch_generator=torch_generator(setup.seed, "dssgd", "batches", index),
        upload_generator=torch_generator(setup.seed, "dssgd", "upload", index),
    )


@dataclass(frozen=True, kw_only=True, eq=False)
class FederationOutcome:
    """What a finished federation leaves: the server's state and every participant's local model.

    Attributes:
        parameters: the global parameters (flat).
        stat: how often each global parameter was updated.
        local_parameters: each participant's final local parameters (flat), by index; ``None``
            for a participant of a real federation that was gone at the end, and for every
            participant under the DP upload (its local model never leaves it).
        uploads_applied: uploads the server applied.
        seconds_per_round: wall time of each round.
        engine: ``local`` or ``flower``.
        missed_turns: the (round, participant) turns a real federation skipped because the
            participant was gone (:mod:`defenses.dssgd.deployment`); empty otherwise.
    """

    parameters: torch.Tensor
    stat: torch.Tensor
    local_parameters: tuple[torch.Tensor | None, ...]
    uploads_applied: int
    seconds_per_round: tuple[float, ...]
    engine: str
    missed_turns: tuple[tuple[int, int], ...] = ()


def run_local(
    setup: FederationSetup,
    *,
    rounds: int,
    download_fraction: float,
    schedule: str,
    bundle: Any = None,
    on_upload: Callable[[Upload], None] | None = None,
    on_round: Callable[[int], None] | None = None,
    observer: Observer | None = None,
    on_reply: Callable[[Reply], None] | None = None,
) -> FederationOutcome:
    """Runs the federation of ``setup`` in this process with :func:`run_federation`.

    Each turn's reply is built as a networked engine sends it (:func:`turn_reply`), and the
    outcome's final local models are those the replies carried: none under the DP upload.

    Args:
        setup, rounds, download_fraction, schedule, bundle, on_upload, on_round: as for
            :func:`run_federation` (``bundle``: the loaded dataset, else loaded by name).
        observer: receives every DP upload's mechanism input (:data:`Observer`).
        on_reply: receives every turn's reply, after the server applied its upload.
    """
    import time

    participants = [build_participant(setup, i, bundle=bundle) for i in range(setup.num_participants)]
    for p in participants:
        p.observer = observer
    finals: dict[int, torch.Tensor] = {}

    def delivered(up: Upload) -> None:
        last = participants[up.participant].local_parameters if up.round == rounds - 1 else None
        reply = turn_reply(up, private=setup.rule.private, final_parameters=last)
        sent = reply.get("local", {}).get("parameters")
        if isinstance(sent, torch.Tensor):  # only without the DP upload, on the last turn
            finals[up.participant] = sent
        if on_reply is not None:
            on_reply(reply)
        if on_upload is not None:
            on_upload(up)

    server = ParameterServer(setup.initial)
    times: list[float] = []
    last = [time.monotonic()]

    def round_done(r: int) -> None:
        now = time.monotonic()
        times.append(now - last[0])
        last[0] = now
        if on_round is not None:
            on_round(r)

    run_federation(
        server,
        participants,
        rounds=rounds,
        download_fraction=download_fraction,
        schedule=schedule,
        generator=torch_generator(setup.seed, "dssgd", "schedule"),
        on_upload=delivered,
        on_round=round_done,
    )
    return FederationOutcome(
        parameters=server.parameters.clone(),
        stat=server.stat.clone(),
        local_parameters=tuple(finals.get(i) for i in range(setup.num_participants)),
        uploads_applied=server.uploads_applied,
        seconds_per_round=tuple(times),
        engine="local",
    )
