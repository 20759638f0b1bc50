"""DSSGD on Flower's simulation engine (Ray): the same arithmetic as the in-process engine.

Each test starts a small local Ray (about 8–10 s of the test's time is Ray start-up).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("flwr")
pytest.importorskip("ray")

from defenses.dssgd.flower import run_flower
from defenses.dssgd.protocol import LocalTraining, assign_parameters, build_participant, run_local
from defenses.dssgd.uploads import UploadRule
from dpaudit.data import load_dataset, make_splits
from tests.defenses.dssgd_setups import digits_federation


@pytest.fixture(scope="module")
def setup():
    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0, num_members=300, num_non_members=60)
    return (
        bundle,
        splits,
        digits_federation(bundle, splits.members, participants=3, rule=UploadRule(upload_fraction=0.1)),
    )


# A Flower federation costs ~10 s of Ray start-up on 2 cores: round-robin runs in the cluster tier
# (.ci/run's second command); the random order differs only in the server's permutation: opt-in.
@pytest.mark.parametrize(
    "schedule", [pytest.param("round-robin", marks=pytest.mark.cluster), pytest.param("random", marks=pytest.mark.slow)]
)
def test_sequential_schedules_on_flower_equal_the_local_engine(setup, schedule):
    _, _, fed = setup
    local_uploads = []
    want = run_local(fed, rounds=2, download_fraction=0.5, schedule=schedule, on_upload=local_uploads.append)
    uploads = []
    got = run_flower(fed, rounds=2, download_fraction=0.5, schedule=schedule, num_workers=2, on_upload=uploads.append)
    assert got.engine == "flower"
    assert torch.allclose(got.parameters, want.parameters, atol=1e-5)
    assert torch.equal(got.stat, want.stat)
    assert len(got.local_parameters) == 3
    for g, w in zip(got.local_parameters, want.local_parameters, strict=True):
        assert torch.allclose(g, w, atol=1e-5)
    assert got.uploads_applied == want.uploads_applied == 6
    assert [(u.participant, u.round) for u in uploads] == [(u.participant, u.round) for u in local_uploads]
    assert len(got.seconds_per_round) == 2
    # The participants really trained: their local models left the common start.
    assert all(not torch.equal(p, fed.initial) for p in got.local_parameters)


@pytest.mark.slow  # another ~9 s Flower federation; the round-robin equality test stays in the default suite
def test_async_on_flower_gives_every_participant_exactly_rounds_turns(setup):
    bundle, splits, fed = setup
    rounds = 3
    uploads = []
    got = run_flower(
        fed, rounds=rounds, download_fraction=1.0, schedule="async", num_workers=2, on_upload=uploads.append
    )
    assert got.uploads_applied == 3 * rounds
    assert sorted(u.participant for u in uploads) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    for i in range(3):
        assert [u.round for u in uploads if u.participant == i] == list(range(rounds))
    # Every upload is counted once per entry it carries.
    assert int(got.stat.sum()) == sum(u.indices.numel() for u in uploads)
    model = build_participant(fed, 0, bundle=bundle).model

    assign_parameters(model, got.parameters)
    test = bundle.all().subset(splits.test)
    with torch.no_grad():
        accuracy = float((model(test.features).argmax(1) == test.labels).float().mean())
    assert accuracy > 0.3  # chance is 0.1 on ten digits


def test_run_flower_refuses_bad_arguments(setup):
    _, _, fed = setup
    with pytest.raises(ValueError, match="num_workers"):
        run_flower(fed, rounds=1, download_fraction=1.0, schedule="async", num_workers=0)
    with pytest.raises(ValueError, match="schedule"):
        run_flower(fed, rounds=1, download_fraction=1.0, schedule="sideways", num_workers=1)


def test_a_missing_flower_names_the_extra(setup, monkeypatch):
    import sys

    _, _, fed = setup
    monkeypatch.setitem(sys.modules, "flwr", None)
    with pytest.raises(ImportError, match=r"dpaudit\[federated\]"):
        run_flower(fed, rounds=1, download_fraction=1.0, schedule="async", num_workers=1)


@pytest.mark.slow  # 11 s; the default suite keeps the round-robin Flower federation
def test_a_diverging_participant_ends_the_federation_with_one_clear_error(setup, capfd):
    # A learning rate that blows up is the user's setting, not a crash: the participant tells
    # the server, the run ends cleanly, and the caller gets the same TrainingDiverged the local
    # engine raises, without Flower printing the client's traceback.
    import dataclasses

    from dpaudit.training import TrainingDiverged

    bundle, splits, fed = setup
    wild = dataclasses.replace(fed, training=LocalTraining(epochs=1, batch_size=16, learning_rate=1e30))
    with pytest.raises(TrainingDiverged, match=r"loss became nan .* lower --learning-rate \(now 1e\+30\)"):
        run_flower(wild, rounds=2, download_fraction=1.0, schedule="async", num_workers=2)
    assert "Traceback" not in capfd.readouterr().err
