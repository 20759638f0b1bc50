"""The DSSGD ServerApp's rule for missing participants, on an in-process stand-in for the Grid.

The real federation's tests (``test_dssgd_deployment.py``, ``-m cluster``) kill a SuperNode and
take minutes; here the same ServerApp and ClientApp objects exchange messages through a Grid whose
"dead" nodes never answer, so the rule (:mod:`defenses.dssgd.deployment`) is checked in seconds.
"""

from __future__ import annotations

import json
import time

import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from defenses.dssgd.flower import client_app, read_outcome, server_app
from defenses.dssgd.protocol import FederationSetup, run_local
from defenses.dssgd.uploads import UploadRule
from dpaudit.data import load_dataset, make_splits
from tests.defenses.dssgd_setups import digits_federation


class ToyGrid:
    """Delivers every message to an in-process ClientApp at once; ``answers[i]`` caps how many
    messages participant i's node answers before it goes silent (a SuperNode killed)."""

    def __init__(
        self, setup: FederationSetup, answers: dict[int, int] | None = None, present: int | None = None
    ) -> None:
        self.client = client_app(setup)
        n = setup.num_participants if present is None else present
        # Node ids deliberately not in participant order, as on a SuperLink.
        self.contexts = {
            1000 - 7 * i: Context(
                run_id=1, node_id=1000 - 7 * i, node_config={"partition-id": i}, state=RecordDict(), run_config={}
            )
            for i in range(n)
        }
        self.answers = dict(answers or {})
        self.replies: dict[str, object] = {}

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def push_messages(self, messages):
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = msg.object_id
            ctx = self.contexts[msg.metadata.dst_node_id]
            i = int(ctx.node_config["partition-id"])
            if self.answers.get(i, 1 << 30) > 0:
                self.answers[i] = self.answers.get(i, 1 << 30) - 1
                self.replies[msg.object_id] = self.client(msg, ctx)
            ids.append(msg.object_id)
        return ids

    def pull_messages(self, message_ids):
        return [self.replies.pop(mid) for mid in list(message_ids) if mid in self.replies]


@pytest.fixture(scope="module")
def setup():
    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0, num_members=300, num_non_members=60)
    return digits_federation(
        bundle, splits.members, participants=3, rule=UploadRule(upload_fraction=0.1), batch_size=32
    )


@pytest.fixture(autouse=True)
def task_identity(monkeypatch):
    # A Message needs the run's identity, which Flower's runtime sets in a real ServerApp process.
    for name in ("_run_id", "_task_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)


def _serve(setup, grid, tmp_path, **config):
    cfg = {
        "rounds": 2,
        "download-fraction": 1.0,
        "schedule": "round-robin",
        "result-dir": str(tmp_path),
        "turn-timeout": 0.3,
        "node-timeout": 0.3,
        **config,
    }
    server_app(setup, config=cfg)(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config={}))
    return read_outcome(tmp_path, setup.num_participants)


def test_with_every_participant_present_the_toy_grid_equals_the_local_engine(setup, tmp_path):
    got = _serve(setup, ToyGrid(setup), tmp_path)
    want = run_local(setup, rounds=2, download_fraction=1.0, schedule="round-robin")
    assert got.missed_turns == ()
    assert torch.equal(got.parameters, want.parameters) and torch.equal(got.stat, want.stat)
    assert all(torch.equal(g, w) for g, w in zip(got.local_parameters, want.local_parameters, strict=True))


@pytest.mark.parametrize("schedule", ["round-robin", "async"])
def test_a_participant_gone_mid_run_is_skipped_dropped_and_recorded(setup, tmp_path, schedule):
    # Participant 1 answers "which participant are you" and its round-0 turn, then goes silent.
    start = time.monotonic()
    got = _serve(setup, ToyGrid(setup, answers={1: 2}), tmp_path, schedule=schedule)
    assert time.monotonic() - start < 10  # one 0.3 s timeout, not a hang
    assert got.missed_turns == ((1, 1),)
    assert got.uploads_applied == 5
    assert (
        got.local_parameters[1] is None and got.local_parameters[0] is not None and got.local_parameters[2] is not None
    )
    assert json.loads((tmp_path / "outcome.json").read_text())["dropped"] == {
        "1": "no reply within 0.3 s (turn-timeout)"
    }
    assert sorted(
        (e["round"], e["participant"]) for e in map(json.loads, (tmp_path / "progress.jsonl").read_text().splitlines())
    ) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 2)]


def test_a_participant_silent_from_its_first_turn_misses_every_turn(setup, tmp_path):
    got = _serve(setup, ToyGrid(setup, answers={2: 1}), tmp_path)
    assert got.missed_turns == ((0, 2), (1, 2))
    assert got.uploads_applied == 4


def test_a_federation_missing_a_supernode_stops_with_one_line(setup, tmp_path):
    with pytest.raises(
        RuntimeError,
        match=r"^the DSSGD federation stopped: only 2 of 3 SuperNodes connected within 0.3 s \(node-timeout\)$",
    ):
        _serve(setup, ToyGrid(setup, present=2), tmp_path)


def test_a_supernode_silent_from_the_start_stops_the_run_with_one_line(setup, tmp_path):
    with pytest.raises(
        RuntimeError, match=r"did not say which participant it is within 0.3 s \(node-timeout\): no reply$"
    ):
        _serve(setup, ToyGrid(setup, answers={0: 0}), tmp_path)
