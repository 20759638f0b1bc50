"""DSSGD on Flower: participants are ClientApps, the parameter server is a ServerApp.

The arithmetic is :mod:`defenses.dssgd.protocol`'s; this module only decides who calls whom.
Every participant is a Flower SuperNode whose ClientApp rebuilds participant ``i`` with
:func:`~defenses.dssgd.protocol.build_participant`, restores what it carried over from its
previous turn, runs one turn and replies with the sparse upload. The server is a low-level
ServerApp (``@app.main()`` with the Grid / Message API, not a Strategy: DSSGD is not FedAvg —
no aggregation step, one upload is applied at a time).

Schedules:

* ``round-robin`` / ``random``: one message at a time in
  :func:`~defenses.dssgd.protocol.schedule_order` order; each participant downloads the
  parameters as the previous upload left them, so the result equals
  :func:`~defenses.dssgd.protocol.run_local` to float tolerance.
* ``async``: every node gets its first turn at once; as each reply arrives (polled with
  ``grid.pull_messages``), the server applies it and immediately sends that node its next turn
  with the then-current global parameters, until every participant took ``rounds`` turns.
  There is no round barrier; the Grid's push/pull calls express this directly, so no Ray
  actors of our own are needed. Arrival order depends on timing, so async results are not
  reproducible bit for bit.

Carried state (local parameters, the two generator states, the turn count) lives in Flower's
per-node ``context.state`` under the record ``"dssgd-state"``; the simulation engine keeps a
node's Context across messages, and so does a real SuperNode. The loaded dataset bundle is
cached per process (:data:`_BUNDLES`).

Real federation (``flwr run`` against a SuperLink with SuperNodes): build the apps with
:func:`client_app` and :func:`server_app` from a module of the Flower project that constructs the
:class:`~defenses.dssgd.protocol.FederationSetup` on every machine (same seed and partitions);
each SuperNode must be started with ``--node-config "partition-id=I"``, the participant's index.
The run_config keys the apps read are ``rounds``, ``download-fraction``, ``schedule`` and
``result-dir`` (where the ServerApp writes ``outcome.npz``); :func:`run_flower` fills them in for
simulation. Only the simulation path is tested.

Flower and Ray are the optional extra ``dpaudit[federated]``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpaudit.seeding import torch_generator
from dpaudit.training import TrainingDiverged

from .protocol import (
    SCHEDULES,
    FederationOutcome,
    FederationSetup,
    ParameterServer,
    Participant,
    Upload,
    build_participant,
    schedule_order,
)

__all__ = ["run_flower", "client_app", "server_app"]

_EXTRA = "pip install 'dpaudit[federated]'"
_STATE = "dssgd-state"
#: Loaded dataset bundles of this process, keyed by (dataset, data_root).
_BUNDLES: dict[tuple[str, str | None], Any] = {}


def _require_flower() -> None:
    try:
        import flwr  # noqa: F401
        import ray  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"the Flower engine needs Flower and Ray: {_EXTRA}") from exc


def _bundle(setup: FederationSetup) -> Any:
    key = (setup.dataset, setup.data_root)
    if key not in _BUNDLES:
        from dpaudit.data import load_dataset

        _BUNDLES[key] = load_dataset(setup.dataset, data_root=setup.data_root)
    return _BUNDLES[key]


def _arrays(**tensors: torch.Tensor | np.ndarray) -> Any:
    from flwr.app import Array, ArrayRecord

    out = {}
    for name, t in tensors.items():
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        out[name] = Array(np.ascontiguousarray(a))
    return ArrayRecord(array_dict=out)


def _tensor(record: Any, name: str) -> torch.Tensor:
    return torch.from_numpy(np.array(record[name].numpy(), copy=True))


def _participant(setup: FederationSetup, context: Any) -> Participant:
    index = int(context.node_config["partition-id"])
    if not 0 <= index < setup.num_participants:
        raise ValueError(f"partition-id must lie in [0, {setup.num_participants}), got {index}")
    participant = build_participant(setup, index, bundle=_bundle(setup))
    if _STATE in context.state:
        rec = context.state[_STATE]
        participant.load_state({name: _tensor(rec, name) for name in ("parameters", "batch_rng", "upload_rng", "turns")})
    return participant


def client_app(setup: FederationSetup) -> Any:
    """The participants' ClientApp for ``setup``.

    Message types: ``train`` (content ``download``: indices, values; ``config``: round) replies
    with ``upload`` (indices, values) and ``metrics`` (loss, participant); ``query`` replies with
    the participant's local parameters.
    """
    _require_flower()
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.clientapp import ClientApp

    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        participant = _participant(setup, context)
        rnd = int(msg.content["config"]["round"])  # type: ignore[arg-type]
        down = msg.content["download"]
        try:
            up = participant.run_turn(rnd, _tensor(down, "indices"), _tensor(down, "values"))
        except TrainingDiverged as exc:
            # A setting the user chose (the learning rate, the schedule), not a crash: the
            # server hears it in one line instead of Flower logging this client's traceback.
            return Message(RecordDict({"config": ConfigRecord({"failed": str(exc)})}), reply_to=msg)
        context.state[_STATE] = _arrays(**participant.state())
        content = RecordDict(
            {
                "upload": _arrays(indices=up.indices, values=up.values),
                "config": ConfigRecord({"participant": participant.index, "round": rnd, "loss": float(up.loss)}),
            }
        )
        return Message(content, reply_to=msg)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        participant = _participant(setup, context)
        content = RecordDict(
            {
                "local": _arrays(parameters=participant.local_parameters),
                "config": ConfigRecord({"participant": participant.index, "turns": participant.turns}),
            }
        )
        return Message(content, reply_to=msg)

    return app


def server_app(
    setup: FederationSetup,
    *,
    on_upload: Callable[[Upload], None] | None = None,
    on_round: Callable[[int], None] | None = None,
    config: dict[str, Any] | None = None,
) -> Any:
    """The parameter server's ServerApp for ``setup`` (reads run_config, see the module docstring).

    ``config`` gives defaults for the run_config keys (what :func:`run_flower` uses, since
    ``flwr.simulation.run_simulation`` takes no run_config); the run's own run_config wins.

    It writes ``outcome.npz`` (global parameters, stat, every participant's local parameters)
    and ``outcome.json`` (uploads applied, seconds per round) into run_config ``result-dir``.
    """
    _require_flower()
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.serverapp import Grid, ServerApp

    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        cfg = {**(config or {}), **dict(context.run_config)}
        rounds = int(cfg["rounds"])
        fraction = float(cfg["download-fraction"])
        schedule = str(cfg["schedule"])
        result_dir = Path(str(cfg["result-dir"]))
        n = setup.num_participants
        server = ParameterServer(setup.initial)

        # Node ids are opaque (random in simulation, assigned by the SuperLink in a real
        # federation): ask every node once which participant it is (its partition-id).
        nodes = _wait_for_nodes(grid, n)
        node_of: dict[int, int] = {}
        ids = _ask(grid, nodes, "query")
        for node, reply in zip(nodes, ids, strict=True):
            node_of[int(reply.content["config"]["participant"])] = node
        if sorted(node_of) != list(range(n)):
            raise ValueError(f"the federation's nodes must carry partition-id 0..{n - 1}, got {sorted(node_of)}")

        def train_msg(i: int, rnd: int) -> Message:
            idx, vals = server.download(fraction)
            content = RecordDict({"download": _arrays(indices=idx, values=vals), "config": ConfigRecord({"round": rnd})})
            return Message(content, dst_node_id=node_of[i], message_type="train", group_id=str(rnd))

        def receive(reply: Message) -> None:
            if reply.has_error():
                raise RuntimeError(f"participant on node {reply.metadata.src_node_id} failed: {reply.error.reason}")
            c = reply.content["config"]
            if "failed" in c:
                raise _ParticipantFailed(str(c["failed"]))
            up = Upload(
                participant=int(c["participant"]),  # type: ignore[arg-type]
                round=int(c["round"]),  # type: ignore[arg-type]
                indices=_tensor(reply.content["upload"], "indices"),
                values=_tensor(reply.content["upload"], "values"),
                loss=float(c["loss"]),  # type: ignore[arg-type]
            )
            server.apply(up)
            if on_upload is not None:
                on_upload(up)

        def federate() -> list[float]:
            """Every turn of every participant; returns the seconds per round."""
            times: list[float] = []
            start = time.monotonic()
            if schedule == "async":
                turns = dict.fromkeys(range(n), 0)
                pending: dict[str, int] = {}
                for i in range(n):
                    (mid,) = grid.push_messages([train_msg(i, 0)])
                    pending[mid] = i
                while pending:
                    replies = list(grid.pull_messages(list(pending)))
                    if not replies:
                        time.sleep(0.005)
                        continue
                    for reply in replies:
                        i = pending.pop(reply.metadata.reply_to_message_id)
                        receive(reply)
                        turns[i] += 1
                        if turns[i] < rounds:
                            (mid,) = grid.push_messages([train_msg(i, turns[i])])
                            pending[mid] = i
                total = time.monotonic() - start
                times = [total / rounds] * rounds
                if on_round is not None:
                    for r in range(rounds):
                        on_round(r)
            else:
                gen = torch_generator(setup.seed, "dssgd", "schedule")
                last = start
                for r in range(rounds):
                    for i in schedule_order(schedule, n, generator=gen):
                        (reply,) = grid.send_and_receive([train_msg(i, r)])
                        receive(reply)
                    now = time.monotonic()
                    times.append(now - last)
                    last = now
                    if on_round is not None:
                        on_round(r)
            return times

        try:
            times = federate()
        except _ParticipantFailed as exc:
            # Ends the run cleanly; run_flower raises it in the caller's process.
            (result_dir / "failure.json").write_text(json.dumps({"message": str(exc)}))
            return
        finals = _ask(grid, [node_of[i] for i in range(n)], "query")
        arrays: dict[str, Any] = {"parameters": server.parameters.numpy(), "stat": server.stat.numpy()}
        for i, reply in enumerate(finals):
            arrays[f"local_{i}"] = _tensor(reply.content["local"], "parameters").numpy()
        np.savez(result_dir / "outcome.npz", **arrays)
        (result_dir / "outcome.json").write_text(json.dumps({"uploads_applied": server.uploads_applied, "seconds_per_round": times}))

    return app


class _ParticipantFailed(Exception):
    """A participant's turn failed for a reason the user can act on (e.g. its training diverged)."""


def _wait_for_nodes(grid: Any, n: int, timeout: float = 120.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= n:
            return nodes[:n]
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(nodes)} of {n} SuperNodes connected within {timeout:.0f} s")
        time.sleep(0.2)


def _ask(grid: Any, nodes: list[int], kind: str) -> list[Any]:
    from flwr.app import Message, RecordDict

    msgs = [Message(RecordDict(), dst_node_id=node, message_type=kind) for node in nodes]
    replies = {r.metadata.src_node_id: r for r in grid.send_and_receive(msgs)}
    for node in nodes:
        if node not in replies or replies[node].has_error():
            reason = replies[node].error.reason if node in replies else "no reply"
            raise RuntimeError(f"node {node} failed the {kind} message: {reason}")
    return [replies[node] for node in nodes]


def run_flower(
    setup: FederationSetup,
    *,
    rounds: int,
    download_fraction: float,
    schedule: str,
    num_workers: int,
    on_upload: Callable[[Upload], None] | None = None,
    on_round: Callable[[int], None] | None = None,
    progress: bool = False,
) -> FederationOutcome:
    """Runs the federation of ``setup`` on Flower's simulation engine (Ray backend).

    Args:
        setup: the federation; one SuperNode per participant.
        rounds: turns per participant.
        download_fraction: θ_d.
        schedule: one of :data:`~defenses.dssgd.protocol.SCHEDULES`.
        num_workers: how many ClientApps may train at once (each on one CPU; Ray is started
            with ``num_workers`` CPUs).
        on_upload: called in this process with every upload after the server applied it.
        on_round: called with each round index (for ``async``: all at the end).
        progress: show Flower's INFO logs.

    Raises:
        ValueError: an invalid ``rounds``, ``schedule`` or ``num_workers``.
        ImportError: Flower or Ray is missing (``pip install 'dpaudit[federated]'``).
    """
    from dpaudit import _validate as v

    rounds = v.integer("rounds", rounds, minimum=1)
    num_workers = v.integer("num_workers", num_workers, minimum=1)
    v.choice("schedule", schedule, SCHEDULES)
    _require_flower()
    from flwr.simulation import run_simulation

    # Telemetry would try the network; simulation needs none.
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    # Keep Ray's current behaviour (no GPU env override for CPU clients) without its warning.
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

    workers = min(num_workers, setup.num_participants)
    # One CPU (so one torch thread: Ray sets OMP_NUM_THREADS to the actor's CPUs) per client:
    # participants are the parallel axis, so W workers use W cores. Giving a lone client every
    # core instead made 1 worker up to 45x slower per round on 2 busy cores (OpenMP threads
    # waiting on a core another process holds), which measured the threads, not the workers.
    cpus_per_client = 1
    backend_config: dict[str, Any] = {
        "client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0},
        "init_args": {
            "num_cpus": cpus_per_client * workers,
            "include_dashboard": False,
            "logging_level": logging.ERROR,
            "log_to_driver": progress,
            "configure_logging": True,
        },
    }
    with tempfile.TemporaryDirectory(prefix="dssgd-flower-") as tmp:
        run_config = {"rounds": rounds, "download-fraction": float(download_fraction), "schedule": schedule, "result-dir": tmp}
        flwr_logger = logging.getLogger("flwr")
        level = flwr_logger.level
        if not progress:
            # ERROR: also hides the notice that run_simulation is deprecated in favour of
            # ``flwr run`` (which needs a Flower project on disk; see the module docstring).
            flwr_logger.setLevel(logging.ERROR)
        try:
            run_simulation(
                server_app=server_app(setup, on_upload=on_upload, on_round=on_round, config=run_config),
                client_app=client_app(setup),
                num_supernodes=setup.num_participants,
                backend_name="ray",
                backend_config=backend_config,
            )
        finally:
            flwr_logger.setLevel(level)
        failure = Path(tmp) / "failure.json"
        if failure.exists():
            raise TrainingDiverged(json.loads(failure.read_text())["message"])
        result = Path(tmp) / "outcome.npz"
        if not result.exists():
            raise RuntimeError("the Flower federation ended without a result (see the Flower log above)")
        with np.load(result, allow_pickle=False) as npz:
            params = torch.from_numpy(npz["parameters"].copy())
            stat = torch.from_numpy(npz["stat"].copy())
            local = tuple(torch.from_numpy(npz[f"local_{i}"].copy()) for i in range(setup.num_participants))
        meta = json.loads((Path(tmp) / "outcome.json").read_text())
    times = tuple(float(t) for t in meta["seconds_per_round"])
    assert all(math.isfinite(t) for t in times)
    return FederationOutcome(
        parameters=params,
        stat=stat,
        local_parameters=local,
        uploads_applied=int(meta["uploads_applied"]),
        seconds_per_round=times,
        engine="flower",
    )
