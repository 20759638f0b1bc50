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
  :func:`~defenses.dssgd.protocol.run_local`: bit for bit when both train with one thread
  (Ray gives each simulated client one CPU), about 1e-7 apart otherwise (float sums in
  another order).
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

Real federation (``flwr run`` against a SuperLink with one SuperNode per participant, each
started with ``--node-config "partition-id=I"``): :mod:`defenses.dssgd.deployment` builds these
apps with a factory that constructs the :class:`~defenses.dssgd.protocol.FederationSetup` from
the run_config on every machine, and documents the commands, the run_config keys and the rule
for missing participants (``turn-timeout``, ``node-timeout``); ``examples/dssgd-flower`` is the
Flower App. The run_config keys the server reads itself are ``rounds``, ``download-fraction``,
``schedule``, ``turn-timeout``, ``node-timeout`` and ``result-dir`` (where it writes the outcome,
:func:`read_outcome`); :func:`run_flower` fills them in for simulation. The server polls its own
replies (``Grid.send_and_receive`` sleeps 3 s between polls on a real SuperLink and waits
forever for a node that died).

Flower is the optional extra ``dpaudit[federated]`` (which brings Ray for the simulation; a
SuperNode needs none).
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
    ReplyValue,
    build_participant,
    query_reply,
    schedule_order,
    turn_reply,
)
from .uploads import Upload

if TYPE_CHECKING:  # Flower is an optional dependency, imported where a federation runs
    from flwr.app import ConfigRecordValues

__all__ = ["run_flower", "client_app", "server_app", "read_outcome", "DEFAULT_TURN_TIMEOUT", "DEFAULT_NODE_TIMEOUT"]

_EXTRA = "pip install 'dpaudit[federated]'"
_STATE = "dssgd-state"
#: A Flower run's run_config: its keys' values (Flower's ``UserConfigValue``: no nesting, no null).
RunConfig = Mapping[str, bool | int | float | str | bytes]
#: A federation, or a function building it from a run's run_config (every machine of a real
#: federation builds it itself, :func:`defenses.dssgd.deployment.setup_from_run_config`).
SetupSource = FederationSetup | Callable[[RunConfig], FederationSetup]
#: Seconds the server waits for a turn's reply before the participant counts as missing.
DEFAULT_TURN_TIMEOUT = 600.0
#: Seconds the server waits for all SuperNodes to connect and say which participant they are.
DEFAULT_NODE_TIMEOUT = 120.0
#: Error codes of a reply that mean "this participant is gone", not "its code failed": the
#: message or node unavailable (3, 4, 5) and a crashed ClientApp process (8) (flwr ErrorCode).
_GONE_CODES = frozenset({3, 4, 5, 8})
#: Loaded dataset bundles of this process, keyed by (dataset, data_root).
_BUNDLES: dict[tuple[str, str | None], Any] = {}


def _require_flower(*, ray: bool = False) -> None:
    """Flower must be importable; Ray too where ``ray`` (the simulation engine; a SuperNode needs none)."""
    try:
        import flwr  # noqa: F401

        if ray:
            import ray as _ray  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"the Flower engine needs Flower{' and Ray' if ray else ''}: {_EXTRA}") from exc


def _resolve(setup: SetupSource, run_config: RunConfig) -> FederationSetup:
    """The federation itself, or the one a factory builds from the run's run_config (a real federation)."""
    return setup if isinstance(setup, FederationSetup) else setup(run_config)


def load_bundle(dataset: str, data_root: str | None) -> Any:
    """The dataset, loaded once per process."""
    key = (dataset, data_root)
    if key not in _BUNDLES:
        from dpaudit.data import load_dataset

        _BUNDLES[key] = load_dataset(dataset, data_root=data_root)
    return _BUNDLES[key]


def _bundle(setup: FederationSetup) -> Any:
    return load_bundle(setup.dataset, setup.data_root)


def _arrays(**tensors: ReplyValue | np.ndarray) -> Any:
    from flwr.app import Array, ArrayRecord

    out = {}
    for name, t in tensors.items():
        a = t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
        out[name] = Array(np.ascontiguousarray(a))
    return ArrayRecord(array_dict=out)


def _config_record(fields: Mapping[str, ReplyValue]) -> Any:
    """A ConfigRecord of a reply's ``config`` record: who sent it, the round, counts, a loss, a message."""
    from flwr.app import ConfigRecord

    scalars: dict[str, ConfigRecordValues] = {}
    for name, value in fields.items():
        if isinstance(value, torch.Tensor):  # a tensor travels in an ArrayRecord: a bug of the reply's builder
            raise TypeError(f"a reply's config record holds scalars, got a tensor for {name!r}")
        scalars[name] = value
    return ConfigRecord(scalars)


def _record_dict(content: Mapping[str, Mapping[str, ReplyValue]]) -> Any:
    """A Flower RecordDict of a reply built by :func:`turn_reply` / :func:`query_reply`:
    ``config`` as a ConfigRecord, every other record as an ArrayRecord of its tensors."""
    from flwr.app import RecordDict

    return RecordDict(
        {name: _config_record(fields) if name == "config" else _arrays(**fields) for name, fields in content.items()}
    )


def _tensor(record: Any, name: str) -> torch.Tensor:
    return torch.from_numpy(np.array(record[name].numpy(), copy=True))


def _participant(setup: FederationSetup, context: Any) -> Participant:
    index = int(context.node_config["partition-id"])
    if not 0 <= index < setup.num_participants:
        raise ValueError(f"partition-id must lie in [0, {setup.num_participants}), got {index}")
    participant = build_participant(setup, index, bundle=_bundle(setup))
    if _STATE in context.state:
        rec = context.state[_STATE]
        participant.load_state(
            {name: _tensor(rec, name) for name in ("parameters", "batch_rng", "upload_rng", "turns")}
        )
    return participant


def client_app(setup: SetupSource) -> Any:
    """The participants' ClientApp for ``setup`` (a federation, or a factory of one from run_config).

    Message types: ``train`` (content ``download``: indices, values; ``config``: round, last)
    replies with :func:`~defenses.dssgd.protocol.turn_reply`: ``upload`` (indices, values) and
    ``config`` (participant, round), plus without the DP upload the turn's ``loss`` and, on the
    participant's last turn, ``local`` (its final local parameters); ``query`` replies with
    :func:`~defenses.dssgd.protocol.query_reply` (the participant's index and turns, plus its
    local parameters without the DP upload).
    """
    _require_flower()
    from flwr.app import Context, Message
    from flwr.clientapp import ClientApp

    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        participant = _participant(_resolve(setup, context.run_config), context)
        rnd = int(msg.content["config"]["round"])  # type: ignore[arg-type]
        down = msg.content["download"]
        try:
            up = participant.run_turn(rnd, _tensor(down, "indices"), _tensor(down, "values"))
        except TrainingDiverged as exc:
            # A setting the user chose (the learning rate, the schedule), not a crash: the
            # server hears it in one line instead of Flower logging this client's traceback.
            return Message(_record_dict({"config": {"failed": str(exc)}}), reply_to=msg)
        context.state[_STATE] = _arrays(**participant.state())
        # Without the DP upload the last turn also returns the final local model (what a
        # ``query`` returns), sparing a real federation one more exchange; under it, never.
        last = bool(msg.content["config"].get("last", False))
        reply = turn_reply(
            up, private=participant.rule.private, final_parameters=participant.local_parameters if last else None
        )
        return Message(_record_dict(reply), reply_to=msg)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        participant = _participant(_resolve(setup, context.run_config), context)
        return Message(_record_dict(query_reply(participant)), reply_to=msg)

    return app


def server_app(
    setup: SetupSource,
    *,
    on_upload: Callable[[Upload], None] | None = None,
    on_round: Callable[[int], None] | None = None,
    config: RunConfig | None = None,
) -> Any:
    """The parameter server's ServerApp for ``setup`` (reads run_config, see the module docstring).

    ``config`` gives defaults for the run_config keys (what :func:`run_flower` uses, since
    ``flwr.simulation.run_simulation`` takes no run_config); the run's own run_config wins.

    It writes into run_config ``result-dir``: ``outcome.npz`` (global parameters, stat, the final
    local parameters of every participant that took its last turn, none under the DP upload), ``outcome.json`` (uploads
    applied, seconds per round, missed turns, each dropped participant with why), ``progress.jsonl`` (one line
    per applied upload, as it happens; its loss only without the DP upload) and, when the run stops early,
    ``failure.json`` (one line).
    :func:`read_outcome` reads them back.
    """
    _require_flower()
    from flwr.app import Context
    from flwr.serverapp import Grid, ServerApp

    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        cfg = {**(config or {}), **dict(context.run_config)}
        result_dir = Path(str(cfg["result-dir"]))
        result_dir.mkdir(parents=True, exist_ok=True)
        try:
            _ServerRun(grid, cfg, _resolve(setup, cfg), on_upload=on_upload, on_round=on_round).serve(result_dir)
        except _Stop as exc:
            # Ends the run cleanly with one line; run_flower / read_outcome raise it in the
            # caller's process (a diverged participant as TrainingDiverged).
            (result_dir / "failure.json").write_text(json.dumps({"kind": exc.kind, "message": str(exc)}))

    return app


class _ServerRun:
    """One federation served over a Flower grid: the participants' nodes, their turns, the outcome files."""

    def __init__(
        self,
        grid: Any,
        cfg: RunConfig,
        fed: FederationSetup,
        *,
        on_upload: Callable[[Upload], None] | None,
        on_round: Callable[[int], None] | None,
    ) -> None:
        self.grid, self.fed = grid, fed
        self.rounds = int(cfg["rounds"])
        self.fraction = float(cfg["download-fraction"])
        self.schedule = str(cfg["schedule"])
        self.turn_timeout = float(cfg.get("turn-timeout", DEFAULT_TURN_TIMEOUT))
        self.node_timeout = float(cfg.get("node-timeout", DEFAULT_NODE_TIMEOUT))
        self.n = fed.num_participants
        self.server = ParameterServer(fed.initial)
        self.on_upload, self.on_round = on_upload, on_round
        self.node_of: dict[int, int] = {}
        self.dropped: dict[int, str] = {}  # participant -> why it is missing
        self.missed: list[tuple[int, int]] = []
        self.finals: dict[int, torch.Tensor] = {}
        self.started = time.monotonic()
        self.progress: Any = None  # progress.jsonl while the federation runs (receive() writes there)

    def serve(self, result_dir: Path) -> None:
        self.node_of = self._assign_nodes()
        self.started = time.monotonic()
        with (result_dir / "progress.jsonl").open("a") as self.progress:
            times = self._federate_async() if self.schedule == "async" else self._federate_in_turns()
        arrays: dict[str, np.ndarray] = {
            "parameters": self.server.parameters.numpy(),
            "stat": self.server.stat.numpy(),
        }
        for i, local in sorted(self.finals.items()):
            arrays[f"local_{i}"] = local.numpy()
        # numpy's stub lets a ** mapping bind its allow_pickle: bool (a 2.x parameter); every value here is an array.
        np.savez(result_dir / "outcome.npz", **arrays)  # type: ignore[arg-type]
        meta = {
            "uploads_applied": self.server.uploads_applied,
            "seconds_per_round": times,
            "missed_turns": sorted(self.missed),
            "dropped": {str(i): why for i, why in sorted(self.dropped.items())},
        }
        (result_dir / "outcome.json").write_text(json.dumps(meta))

    def _assign_nodes(self) -> dict[int, int]:
        """Participant -> node id. Node ids are opaque (random in simulation, assigned by the
        SuperLink in a real federation): every node is asked once which participant it is (its
        partition-id). The run starts only with every participant present."""
        from flwr.app import Message, RecordDict

        nodes = _wait_for_nodes(self.grid, self.n, self.node_timeout)
        ids = _exchange(
            self.grid,
            [Message(RecordDict(), dst_node_id=node, message_type="query") for node in nodes],
            self.node_timeout,
        )
        node_of: dict[int, int] = {}
        for node, reply in zip(nodes, ids, strict=True):
            if reply is None or reply.has_error():
                why = "no reply" if reply is None else _one_line(reply.error.reason)
                raise _Stop(
                    "federation",
                    f"SuperNode {node} did not say which participant it is within "
                    f"{self.node_timeout:g} s (node-timeout): {why}",
                )
            node_of[int(reply.content["config"]["participant"])] = node
        if sorted(node_of) != list(range(self.n)):
            raise _Stop(
                "federation",
                f"the federation's SuperNodes must carry partition-id 0..{self.n - 1} once each, got {sorted(node_of)}",
            )
        return node_of

    def _train_msg(self, i: int, rnd: int) -> Any:
        from flwr.app import ConfigRecord, Message, RecordDict

        idx, vals = self.server.download(self.fraction)
        content = RecordDict(
            {
                "download": _arrays(indices=idx, values=vals),
                "config": ConfigRecord({"round": rnd, "last": rnd == self.rounds - 1}),
            }
        )
        return Message(content, dst_node_id=self.node_of[i], message_type="train", group_id=str(rnd))

    def _drop(self, i: int, first_missed: int, reply: Any) -> None:
        # The missing-participant rule (module docstring): this turn and every later one of i.
        self.dropped[i] = (
            f"no reply within {self.turn_timeout:g} s (turn-timeout)"
            if reply is None
            else _one_line(reply.error.reason)
        )
        self.missed.extend((r, i) for r in range(first_missed, self.rounds))

    def _receive(self, i: int, reply: Any) -> None:
        if reply.has_error():
            raise _Stop(
                "federation", f"participant {i} (node {self.node_of[i]}) failed: {_one_line(reply.error.reason)}"
            )
        c = reply.content["config"]
        if "failed" in c:
            raise _Stop("diverged", str(c["failed"]))
        up = Upload(
            participant=int(c["participant"]),
            round=int(c["round"]),
            indices=_tensor(reply.content["upload"], "indices"),
            values=_tensor(reply.content["upload"], "values"),
            loss=float(c["loss"]) if "loss" in c else math.nan,  # none under the DP upload
        )
        self.server.apply(up)
        if "local" in reply.content:
            self.finals[i] = _tensor(reply.content["local"], "parameters")
        line: dict[str, int | float] = {"participant": up.participant, "round": up.round}
        if math.isfinite(up.loss):
            line["loss"] = up.loss
        self.progress.write(json.dumps({**line, "seconds": round(time.monotonic() - self.started, 3)}) + "\n")
        self.progress.flush()
        if self.on_upload is not None:
            self.on_upload(up)

    def _federate_async(self) -> list[float]:
        """Every participant's turns as fast as it takes them; returns the seconds per round (their mean)."""
        start = time.monotonic()
        turns = dict.fromkeys(range(self.n), 0)
        pending: dict[str, tuple[int, float]] = {}  # message id -> (participant, deadline)

        def send(i: int) -> None:
            (mid,) = self.grid.push_messages([self._train_msg(i, turns[i])])
            pending[mid] = (i, time.monotonic() + self.turn_timeout)

        for i in range(self.n):
            send(i)
        wait = _Backoff()
        while pending:
            replies = [r for r in self.grid.pull_messages(list(pending)) if r.metadata.reply_to_message_id in pending]
            for reply in replies:
                i, _ = pending.pop(reply.metadata.reply_to_message_id)
                if _gone(reply):
                    self._drop(i, turns[i], reply)
                    continue
                self._receive(i, reply)
                turns[i] += 1
                if turns[i] < self.rounds:
                    send(i)
            now = time.monotonic()
            for mid, (i, deadline) in list(pending.items()):
                if now >= deadline:
                    del pending[mid]
                    self._drop(i, turns[i], None)
            wait(bool(replies))
        total = time.monotonic() - start
        if self.on_round is not None:
            for r in range(self.rounds):
                self.on_round(r)
        return [total / self.rounds] * self.rounds

    def _federate_in_turns(self) -> list[float]:
        """Round after round, one participant's turn at a time in the schedule's order; returns the seconds per
        round."""
        times: list[float] = []
        gen = torch_generator(self.fed.seed, "dssgd", "schedule")
        last = time.monotonic()
        for r in range(self.rounds):
            for i in schedule_order(self.schedule, self.n, generator=gen):
                if i in self.dropped:
                    continue
                (reply,) = _exchange(self.grid, [self._train_msg(i, r)], self.turn_timeout)
                if reply is None or _gone(reply):
                    self._drop(i, r, reply)
                    continue
                self._receive(i, reply)
            now = time.monotonic()
            times.append(now - last)
            last = now
            if self.on_round is not None:
                self.on_round(r)
        return times


class _Stop(Exception):
    """Ends the run with one line: ``kind`` ``diverged`` (a participant's training diverged, a
    setting the user can change) or ``federation`` (the federation cannot go on)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _one_line(text: str) -> str:
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no reason given)"


def _gone(reply: Any) -> bool:
    """Whether a reply says its participant is gone (node or message unavailable, ClientApp crashed)."""
    return bool(reply.has_error() and int(reply.error.code) in _GONE_CODES)


class _Backoff:
    """Polling pause: 10 ms after progress, doubling up to 0.2 s while nothing arrives (a real
    SuperNode answers in seconds; a simulated one in milliseconds)."""

    def __init__(self) -> None:
        self.delay = 0.01

    def __call__(self, progressed: bool) -> None:
        self.delay = 0.01 if progressed else min(0.2, self.delay * 2)
        if not progressed:
            time.sleep(self.delay)


def _wait_for_nodes(grid: Any, n: int, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        nodes = sorted(grid.get_node_ids())
        if len(nodes) >= n:
            return nodes[:n]
        if time.monotonic() > deadline:
            raise _Stop(
                "federation", f"only {len(nodes)} of {n} SuperNodes connected within {timeout:g} s (node-timeout)"
            )
        time.sleep(0.2)


def _exchange(grid: Any, messages: list[Any], timeout: float) -> list[Any]:
    """Sends ``messages`` and returns their replies in order, ``None`` where none came within
    ``timeout`` seconds. (``Grid.send_and_receive`` polls every 3 s on a real SuperLink, which
    would add seconds to every sequential turn.)"""
    ids = list(grid.push_messages(messages))
    slot = {mid: k for k, mid in enumerate(ids)}
    replies: list[Any] = [None] * len(ids)
    deadline = time.monotonic() + timeout
    wait = _Backoff()
    while slot:
        got = [r for r in grid.pull_messages(list(slot)) if r.metadata.reply_to_message_id in slot]
        for reply in got:
            replies[slot.pop(reply.metadata.reply_to_message_id)] = reply
        if not slot or time.monotonic() >= deadline:
            break
        wait(bool(got))
    return replies


def read_outcome(result_dir: str | Path, num_participants: int) -> FederationOutcome:
    """The outcome the ServerApp wrote into ``result_dir``.

    Raises:
        TrainingDiverged: a participant's training diverged (the run stopped).
        RuntimeError: the run stopped early (one line: why), or left no result.
    """
    result_dir = Path(result_dir)
    failure = result_dir / "failure.json"
    if failure.exists():
        info = json.loads(failure.read_text())
        if info.get("kind") == "diverged":
            raise TrainingDiverged(info["message"])
        raise RuntimeError(f"the DSSGD federation stopped: {info['message']}")
    result = result_dir / "outcome.npz"
    if not result.exists():
        raise RuntimeError(f"the Flower federation ended without a result in {result_dir} (see the Flower log)")
    with np.load(result, allow_pickle=False) as npz:
        params = torch.from_numpy(npz["parameters"].copy())
        stat = torch.from_numpy(npz["stat"].copy())
        local = tuple(
            torch.from_numpy(npz[f"local_{i}"].copy()) if f"local_{i}" in npz else None for i in range(num_participants)
        )
    meta = json.loads((result_dir / "outcome.json").read_text())
    times = tuple(float(t) for t in meta["seconds_per_round"])
    assert all(math.isfinite(t) for t in times)
    return FederationOutcome(
        parameters=params,
        stat=stat,
        local_parameters=local,
        uploads_applied=int(meta["uploads_applied"]),
        seconds_per_round=times,
        engine="flower",
        missed_turns=tuple((int(r), int(i)) for r, i in meta["missed_turns"]),
    )


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
    _require_flower(ray=True)
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
    with tempfile.TemporaryDirectory(prefix="dssgd-flower-") as tmp:
        run_config: RunConfig = {
            "rounds": rounds,
            "download-fraction": float(download_fraction),
            "schedule": schedule,
            "result-dir": tmp,
        }
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
                backend_config={
                    "client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0},
                    "init_args": {
                        "num_cpus": cpus_per_client * workers,
                        "include_dashboard": False,
                        "logging_level": logging.ERROR,
                        "log_to_driver": progress,
                        "configure_logging": True,
                    },
                },
            )
        finally:
            flwr_logger.setLevel(level)
        outcome = read_outcome(tmp, setup.num_participants)
    if outcome.missed_turns:  # nothing leaves a simulated federation, so this is a bug, not a rule
        raise RuntimeError(f"the simulated federation missed turns {list(outcome.missed_turns)}")
    return outcome
