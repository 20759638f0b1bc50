"""Under a DP claim a DSSGD participant sends only the noised upload, and the replay proves it (issue 42).

The messages are inspected where they are built (the Flower ClientApp of the simulation and of
the real deployment, called in process), and the neighbouring replay runs the federation on D
and on a neighbour with the record removed from the data altogether, as a user's D′ would be.
"""

from __future__ import annotations

import io
import json
import math
import time

import numpy as np
import pytest
import torch

import defenses.dssgd.defense as dssgd_defense
import defenses.dssgd.protocol as protocol
from defenses.dssgd.config import DSSGDConfig
from defenses.dssgd.defense import replay_dssgd
from defenses.dssgd.protocol import MECHANISM_FIELDS, query_reply, turn_reply
from defenses.dssgd.uploads import Upload, UploadRule
from dpaudit.data import DatasetBundle, load_dataset, make_splits
from dpaudit.data.splits import Splits
from dpaudit.replay import compare_traces, neighbours
from dpaudit.train_request import TrainRequest
from tests.defenses.dssgd_setups import digits_federation

GAMMA = 0.001
_DP = UploadRule(upload_fraction=0.1, dp_epsilon=1.0, bound=GAMMA)
_PLAIN = UploadRule(upload_fraction=0.1)


@pytest.fixture(scope="module")
def digits() -> DatasetBundle:
    return load_dataset("digits")


@pytest.fixture(scope="module")
def splits(digits: DatasetBundle) -> Splits:
    return make_splits(digits, seed=0, num_members=60, num_non_members=20)


def _without(bundle: DatasetBundle, sample_id: int) -> DatasetBundle:
    """The dataset with one training record gone: the neighbour a user's D′ is (nothing of it left anywhere)."""
    keep = bundle.train.ids.numpy()
    return DatasetBundle(
        name=bundle.name,
        train=bundle.train.subset(keep[keep != sample_id]),
        test=bundle.test,
        num_classes=bundle.num_classes,
        input_shape=bundle.input_shape,
        description=bundle.description,
    )


def _config(**kw) -> DSSGDConfig:
    return DSSGDConfig(
        **{"participants": 3, "rounds": 2, "batch_size": 16, "target_epsilon": 1.0, "baselines": False, **kw}
    )


# --- what a turn's reply carries --------------------------------------------------------------


def _upload() -> Upload:
    return Upload(participant=2, round=1, indices=torch.tensor([4, 9]), values=torch.tensor([1e-4, -2e-4]), loss=0.731)


def test_a_dp_reply_carries_the_noised_upload_and_who_sent_it_only() -> None:
    up = _upload()
    reply = turn_reply(up, private=True, final_parameters=torch.ones(5))
    assert {(r, f) for r, fields in reply.items() for f in fields} == set(MECHANISM_FIELDS) | {
        ("config", "participant"),
        ("config", "round"),
    }
    assert reply["config"] == {"participant": 2, "round": 1}
    # Without the DP upload: today's reply, the loss and on the last turn the local model too.
    plain = turn_reply(up, private=False, final_parameters=torch.ones(5))
    assert plain["config"]["loss"] == pytest.approx(0.731) and torch.equal(plain["local"]["parameters"], torch.ones(5))
    assert "local" not in turn_reply(up, private=False)


def test_a_dp_participant_keeps_its_loss(digits: DatasetBundle, splits: Splits) -> None:
    fed = digits_federation(digits, splits.members, participants=2, rule=_DP)
    p = protocol.build_participant(fed, 0, bundle=digits)
    up = p.run_turn(0, torch.arange(fed.initial.numel()), fed.initial)
    assert math.isnan(up.loss) and up.indices.numel() > 0
    assert "local" not in query_reply(p) and set(query_reply(p)["config"]) == {"participant", "turns"}
    plain = protocol.build_participant(
        digits_federation(digits, splits.members, participants=2, rule=_PLAIN), 0, bundle=digits
    )
    assert math.isfinite(
        plain.run_turn(0, torch.arange(fed.initial.numel()), fed.initial).loss
    ) and "local" in query_reply(plain)


def test_the_in_process_engine_returns_no_local_model_under_the_dp_upload(
    digits: DatasetBundle, splits: Splits
) -> None:
    fed = digits_federation(digits, splits.members, participants=2, rule=_DP)
    replies: list[dict] = []
    out = protocol.run_local(
        fed, rounds=1, download_fraction=1.0, schedule="round-robin", bundle=digits, on_reply=replies.append
    )
    assert out.local_parameters == (None, None) and out.uploads_applied == 2
    assert all(set(r) == {"upload", "config"} and set(r["config"]) == {"participant", "round"} for r in replies)


# --- the Flower messages ----------------------------------------------------------------------


def _message(content, kind: str):
    from flwr.app import Message, Metadata

    meta = Metadata(
        run_id=1,
        message_id=f"m-{kind}",
        src_node_id=1,
        dst_node_id=7,
        reply_to_message_id="",
        group_id="0",
        created_at=time.time(),
        ttl=3600.0,
        message_type=kind,
    )
    return Message(content, metadata=meta)


def _exchange(app, num_parameters: int, *, run_config: dict | None = None) -> tuple[object, object]:
    """One last-round train message and one query to participant 0, as the server sends them; the two replies."""
    from flwr.app import ConfigRecord, Context, RecordDict

    from defenses.dssgd.flower import _arrays

    ctx = Context(run_id=1, node_id=7, node_config={"partition-id": 0}, state=RecordDict(), run_config=run_config or {})
    train = RecordDict(
        {
            "download": _arrays(indices=torch.arange(num_parameters), values=torch.zeros(num_parameters)),
            "config": ConfigRecord({"round": 0, "last": True}),
        }
    )
    reply = app(_message(train, "train"), ctx)
    query = app(_message(RecordDict(), "query"), ctx)
    assert not reply.has_error() and not query.has_error()
    return reply, query


def _fields(message) -> set[tuple[str, str]]:
    return {(name, key) for name, record in message.content.items() for key in record.keys()}


def test_the_flower_client_sends_only_the_noised_upload_under_a_dp_claim(digits: DatasetBundle, splits: Splits) -> None:
    pytest.importorskip("flwr")
    from defenses.dssgd.flower import client_app

    for rule, private in ((_DP, True), (_PLAIN, False)):
        fed = digits_federation(digits, splits.members, participants=2, rule=rule)
        reply, query = _exchange(client_app(fed), fed.initial.numel())
        values = reply.content["upload"]["values"].numpy()
        if private:
            assert _fields(reply) == set(MECHANISM_FIELDS) | {("config", "participant"), ("config", "round")}
            assert dict(reply.content["config"]) == {"participant": 0, "round": 0}
            assert _fields(query) == {("config", "participant"), ("config", "turns")}
            # The values are the sparse-vector release's: bounded, at most c of them.
            assert np.abs(values).max() <= GAMMA and values.size <= rule.count(fed.initial.numel())
        else:  # the non-private configuration keeps today's messages (what the DP branch must not send)
            assert {("config", "loss"), ("local", "parameters")} <= _fields(reply) and (
                "local",
                "parameters",
            ) in _fields(query)


def test_the_deployed_client_sends_only_the_noised_upload_under_a_dp_claim() -> None:
    pytest.importorskip("flwr")
    from defenses.dssgd.deployment import make_client_app, setup_from_run_config

    run_config = {
        "dataset": "digits",
        "model": "digits-mlp",
        "seed": 0,
        "member-fraction": 0.05,
        "participants": 2,
        "rounds": 1,
        "dp-epsilon": 1.0,
        "batch-size": 16,
        "baselines": False,
    }
    fed = setup_from_run_config(run_config)
    assert fed.rule.private
    reply, query = _exchange(make_client_app(), fed.initial.numel(), run_config=run_config)
    assert _fields(reply) == set(MECHANISM_FIELDS) | {("config", "participant"), ("config", "round")}
    assert _fields(query) == {("config", "participant"), ("config", "turns")}


def test_the_server_takes_a_dp_reply_without_loss_or_local_model(digits: DatasetBundle, splits: Splits) -> None:
    pytest.importorskip("flwr")
    from defenses.dssgd.flower import _ServerRun, client_app

    fed = digits_federation(digits, splits.members, participants=2, rule=_DP)
    reply, _ = _exchange(client_app(fed), fed.initial.numel())
    run = _ServerRun(
        None, {"rounds": 1, "download-fraction": 1.0, "schedule": "round-robin"}, fed, on_upload=None, on_round=None
    )
    run.progress = io.StringIO()
    run._receive(0, reply)
    assert run.server.uploads_applied == 1 and run.finals == {}
    assert set(json.loads(run.progress.getvalue())) == {"participant", "round", "seconds"}


# --- the neighbouring replay ------------------------------------------------------------------


def _replay(bundle: DatasetBundle, splits: Splits, **kw):
    return replay_dssgd(
        TrainRequest(
            bundle=bundle, splits=splits, model_name="digits-mlp", model_options=None, config=_config(**kw), seed=0
        )
    )


def _removed(splits: Splits, sample_id: int) -> Splits:
    return Splits(
        dataset=splits.dataset,
        seed=splits.seed,
        members=neighbours(splits.members, removed=sample_id),
        non_members=splits.non_members,
        population=splits.population,
        test=splits.test,
    )


def test_the_replay_holds_on_both_neighbours(digits: DatasetBundle, splits: Splits) -> None:
    gone = int(splits.members[7])
    run = _replay(digits, splits)
    # 3 participants x 2 rounds of bounded updates, each entry within [-gamma, gamma], sensitivity 2 gamma in
    # L-infinity.
    assert [m.name for m in run.mechanism_inputs] == [
        f"round {r}, participant {i}: bounded update" for r in range(2) for i in range(3)
    ]
    assert all(
        m.norm == "linf" and m.sensitivity == pytest.approx(2 * 0.001) and np.abs(m.value).max() <= 0.001
        for m in run.mechanism_inputs
    )
    assert "input standardization" in run.released and "turns" in run.released
    assert not any("loss" in k or "local" in k for k in run.released)
    removed = compare_traces(run, _replay(_without(digits, gone), _removed(splits, gone)))
    assert removed.holds, removed.summary()
    added_id = int(splits.non_members[0])
    added = Splits(
        dataset=splits.dataset,
        seed=splits.seed,
        members=neighbours(splits.members, added=added_id),
        non_members=splits.non_members[splits.non_members != added_id],
        population=splits.population,
        test=splits.test,
    )
    verdict = compare_traces(run, _replay(digits, added))
    assert verdict.holds, verdict.summary()


def test_the_replay_catches_todays_standardisation(
    digits: DatasetBundle, splits: Splits, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The code before the fix standardised by the whole training split under a DP claim too.
    monkeypatch.setattr(
        dssgd_defense,
        "standardization_source",
        lambda config, *, bundle, splits: ("training split", bundle.train.features),
    )
    gone = int(splits.members[7])
    verdict = compare_traces(_replay(digits, splits), _replay(_without(digits, gone), _removed(splits, gone)))
    assert not verdict.holds
    (finding,) = verdict.findings
    assert finding.kind == "released" and finding.name == "input standardization" and finding.measured > 0


def test_the_replay_catches_a_loss_or_local_model_in_the_replies(
    digits: DatasetBundle, splits: Splits, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The participants before the fix: the loss in every reply, the final local model in the last
    # (the sparse-vector upload itself unchanged: it follows dp_epsilon, not this flag).
    monkeypatch.setattr(protocol.UploadRule, "private", property(lambda self: False))
    gone = int(splits.members[7])
    verdict = compare_traces(
        _replay(digits, splits, rounds=1), _replay(_without(digits, gone), _removed(splits, gone), rounds=1)
    )
    names = {f.name for f in verdict.findings}
    assert {f.kind for f in verdict.findings} == {"released"}
    # Partitions are keyed by sample id, so only the participant that held the removed record
    # computes another loss; that one un-noised loss is the leak the replay must name.
    assert any(n.startswith("round 0, participant ") and n.endswith(": config.loss") for n in names), names
    assert any(n.startswith("final local model of participant") for n in names) and any(
        n.endswith("local.parameters") for n in names
    )


def test_the_replay_refuses_a_config_without_a_dp_claim(digits: DatasetBundle, splits: Splits) -> None:
    with pytest.raises(ValueError, match="config"):
        replay_dssgd(
            TrainRequest(
                bundle=digits,
                splits=splits,
                model_name="digits-mlp",
                model_options=None,
                config=DSSGDConfig(participants=3, rounds=1, baselines=False),
                seed=0,
            )
        )


def test_dp_standardisation_is_the_populations_and_refused_without_one(digits: DatasetBundle, splits: Splits) -> None:
    from defenses.dssgd.defense import federation_setup

    fed = federation_setup(
        TrainRequest(
            bundle=digits, splits=splits, model_name="digits-mlp", model_options=None, config=_config(), seed=0
        )
    )
    x = digits.train.features.numpy()[np.isin(digits.train.ids.numpy(), splits.population)].astype(np.float64)
    assert fed.model_options["input_standardization"] == pytest.approx([x.mean(), x.std(ddof=1)], rel=1e-5)
    plain = federation_setup(
        TrainRequest(
            bundle=digits,
            splits=splits,
            model_name="digits-mlp",
            model_options=None,
            config=_config(target_epsilon=None),
            seed=0,
        )
    )
    whole = digits.train.features.numpy().astype(np.float64)
    assert plain.model_options["input_standardization"] == pytest.approx([whole.mean(), whole.std(ddof=1)], rel=1e-5)
    no_public = Splits(
        dataset=splits.dataset,
        seed=0,
        members=splits.members,
        non_members=splits.non_members,
        population=np.zeros(0, dtype=np.int64),
        test=splits.test,
    )
    with pytest.raises(ValueError, match="standardize"):
        federation_setup(
            TrainRequest(
                bundle=digits, splits=no_public, model_name="digits-mlp", model_options=None, config=_config(), seed=0
            )
        )
    declared = federation_setup(
        TrainRequest(
            bundle=digits,
            splits=no_public,
            model_name="digits-mlp",
            model_options={"input_standardization": [4.0, 6.0]},
            config=_config(),
            seed=0,
        )
    )
    assert declared.model_options["input_standardization"] == [4.0, 6.0]


@pytest.mark.cluster  # a Ray start-up (~10 s on 2 cores), as the other Flower federations
def test_a_dp_federation_on_flower_sends_what_the_local_engine_does(digits: DatasetBundle, splits: Splits) -> None:
    pytest.importorskip("flwr")
    pytest.importorskip("ray")
    from defenses.dssgd.flower import run_flower

    fed = digits_federation(digits, splits.members, participants=3, rule=_DP)
    want_uploads: list[Upload] = []
    want = protocol.run_local(
        fed, rounds=2, download_fraction=1.0, schedule="round-robin", bundle=digits, on_upload=want_uploads.append
    )
    got_uploads: list[Upload] = []
    got = run_flower(
        fed, rounds=2, download_fraction=1.0, schedule="round-robin", num_workers=2, on_upload=got_uploads.append
    )
    # The server received no local model and no loss, and applied the same noised uploads.
    assert got.local_parameters == want.local_parameters == (None, None, None)
    assert all(math.isnan(u.loss) for u in got_uploads) and len(got_uploads) == len(want_uploads) == 6
    for g, w in zip(got_uploads, want_uploads, strict=True):
        assert torch.equal(g.indices, w.indices) and torch.allclose(g.values, w.values)
    assert torch.allclose(got.parameters, want.parameters, atol=1e-6)
