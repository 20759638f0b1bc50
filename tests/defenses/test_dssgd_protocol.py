"""DSSGD's protocol (Shokri & Shmatikov 2015, §4): server arithmetic, download by ``stat``,
upload rules, schedules, the centralised-SGD equivalence, and the records a training leaves."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from defenses.dssgd.config import DSSGDConfig
from defenses.dssgd.defense import train_dssgd
from defenses.dssgd.participants import participant_record_dir
from defenses.dssgd.protocol import (
    ParameterServer,
    assign_parameters,
    build_participant,
    flatten_parameters,
    fraction_count,
    local_sgd,
    run_local,
)
from defenses.dssgd.uploads import Upload, UploadRule, select_largest, select_random_threshold
from dpaudit.data import load_dataset, make_splits
from dpaudit.models import build_model
from dpaudit.seeding import torch_generator
from dpaudit.train_request import TrainRequest
from dpaudit.training import TrainWorkspace
from tests.defenses.dssgd_setups import digits_federation


@pytest.fixture(scope="module")
def digits():
    bundle = load_dataset("digits")
    return bundle, make_splits(bundle, seed=0, num_members=120, num_non_members=60)


def test_the_server_applies_exactly_the_uploaded_entries_and_counts_them():
    server = ParameterServer(torch.zeros(10))
    server.apply(Upload(participant=0, round=0, indices=torch.tensor([1, 4, 7]), values=torch.tensor([0.5, -1.0, 2.0])))
    server.apply(Upload(participant=1, round=0, indices=torch.tensor([4, 9]), values=torch.tensor([0.25, 3.0])))
    want = torch.zeros(10)
    want[[1, 4, 7, 9]] = torch.tensor([0.5, -0.75, 2.0, 3.0])
    assert torch.equal(server.parameters, want)
    assert server.stat.tolist() == [0, 1, 0, 0, 2, 0, 0, 1, 0, 1]
    with pytest.raises(ValueError, match="repeats an index"):
        server.apply(Upload(participant=2, round=0, indices=torch.tensor([3, 3]), values=torch.tensor([1.0, 1.0])))
    with pytest.raises(ValueError, match="outside"):
        server.apply(Upload(participant=2, round=0, indices=torch.tensor([10]), values=torch.tensor([1.0])))
    assert server.stat.sum() == 5  # refused uploads change nothing


def test_download_follows_stat_with_ties_broken_by_position():
    server = ParameterServer(torch.arange(8, dtype=torch.float32))
    server.stat = torch.tensor([0, 5, 2, 5, 0, 1, 9, 0])
    idx, values = server.download(0.5)  # 4 of 8: stat 9, 5, 5, 2
    assert idx.tolist() == [1, 2, 3, 6]
    assert torch.equal(values, server.parameters[idx])
    assert server.download_indices(1.0).tolist() == list(range(8))
    assert server.download_indices(0.01).tolist() == [6]  # at least one
    with pytest.raises(ValueError, match="download_fraction"):
        server.download_indices(0.0)


def test_upload_selections():
    delta = torch.tensor([0.1, -3.0, 0.0, 2.0, -0.5, 0.05])
    assert select_largest(delta, 2).tolist() == [1, 3]
    gen = torch_generator(0, "t")
    picks = {tuple(select_random_threshold(delta, 2, threshold=0.2, generator=gen).tolist()) for _ in range(200)}
    assert all(set(p) <= {1, 3, 4} and len(p) == 2 for p in picks) and len(picks) == 3
    assert select_random_threshold(delta, 5, threshold=2.5, generator=gen).tolist() == [1]
    assert fraction_count("upload_fraction", 0.001, 100) == 1


def test_one_participant_uploading_everything_is_centralised_sgd(digits):
    bundle, splits = digits
    rounds = 3
    setup = digits_federation(bundle, splits.members, participants=1, rule=UploadRule(upload_fraction=1.0))
    outcome = run_local(setup, rounds=rounds, download_fraction=1.0, schedule="round-robin", bundle=bundle)
    model = build_model("digits-mlp", input_shape=bundle.input_shape, num_classes=bundle.num_classes)
    assign_parameters(model, setup.initial)
    data = bundle.all().subset(setup.partitions[0])
    local_sgd(
        model,
        data.features,
        data.labels,
        training=setup.training,
        generator=torch_generator(0, "dssgd", "batches", 0),
        epochs=rounds,
    )
    assert torch.allclose(outcome.parameters, flatten_parameters(model), atol=1e-6)
    assert torch.equal(outcome.stat, torch.full_like(outcome.stat, rounds))


def test_sparse_uploads_only_move_what_was_uploaded(digits):
    bundle, splits = digits
    setup = digits_federation(bundle, splits.members, participants=3, rule=UploadRule(upload_fraction=0.01))
    seen: list[Upload] = []
    outcome = run_local(setup, rounds=2, download_fraction=1.0, schedule="random", bundle=bundle, on_upload=seen.append)
    c = fraction_count("upload_fraction", 0.01, setup.initial.numel())
    assert len(seen) == 6 and all(u.indices.numel() == c for u in seen)
    assert sorted(u.participant for u in seen) == [0, 0, 1, 1, 2, 2]
    rebuilt = setup.initial.clone()
    for u in seen:
        rebuilt[u.indices] += u.values
    assert torch.allclose(outcome.parameters, rebuilt, atol=1e-6)
    untouched = outcome.stat == 0
    assert torch.equal(outcome.parameters[untouched], setup.initial[untouched])


def test_async_turns_start_from_the_same_snapshot(digits):
    bundle, splits = digits
    setup = digits_federation(bundle, splits.members, participants=3, rule=UploadRule(upload_fraction=1.0))
    outcome = run_local(setup, rounds=1, download_fraction=1.0, schedule="async", bundle=bundle)
    # every participant trained from the initial parameters: the global result is the initial plus the sum of the three
    # changes
    total = setup.initial.clone()
    for i in range(3):
        p = build_participant(setup, i, bundle=bundle)
        up = p.run_turn(0, torch.arange(setup.initial.numel()), setup.initial)
        total[up.indices] += up.values
    assert torch.allclose(outcome.parameters, total, atol=1e-5)


def test_participant_state_round_trips(digits):
    bundle, splits = digits
    setup = digits_federation(
        bundle, splits.members, participants=2, rule=UploadRule(upload_fraction=0.1, selection="random-threshold")
    )
    a = build_participant(setup, 1, bundle=bundle)
    all_idx = torch.arange(setup.initial.numel())
    a.run_turn(0, all_idx, setup.initial)
    b = build_participant(setup, 1, bundle=bundle)
    b.load_state(a.state())
    ua, ub = a.run_turn(1, all_idx, setup.initial), b.run_turn(1, all_idx, setup.initial)
    assert torch.equal(ua.indices, ub.indices) and torch.equal(ua.values, ub.values)


def test_training_leaves_owners_local_records_and_observed_uploads(digits, tmp_path):
    bundle, splits = digits
    config = DSSGDConfig(participants=3, rounds=2, upload_fraction=0.1, observe_participant=1, baselines=True)
    ws = TrainWorkspace(record_dir=tmp_path / "rec", cache_dir=tmp_path / "cache")
    record, _ = train_dssgd(
        TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=config, seed=1, progress=False),
        workspace=ws,
    )
    owners = record.membership.owners
    assert owners.shape == record.membership.members.shape and set(owners.tolist()) == {0, 1, 2}
    assert record.claim.kind == "nonprivate" and not record.claim.is_private
    for key in (
        "centralised_test_accuracy",
        "standalone_test_accuracy",
        "local_test_accuracy_mean",
        "seconds_per_round",
    ):
        assert 0 <= record.metrics[key] <= (1 if "accuracy" in key else 1e3)
    assert record.metrics["local_test_examples"] == min(1000, len(bundle.test))  # the mean's interval needs it
    from dpaudit.results.record import load_record

    local = load_record(participant_record_dir(ws.cache_dir, record.model_id, 1))
    assert np.array_equal(local.membership.members, record.membership.owned_by(1))
    assert local.config["participant"] == 1
    uploads = np.load(ws.record_dir / "uploads.npz")
    assert int(uploads["participant"]) == 1 and uploads["rounds"].tolist() == [0, 1]
    assert np.array_equal(uploads["member_ids"], record.membership.owned_by(1))
    assert uploads["sizes"].sum() == len(uploads["indices"]) == 2 * record.metrics["uploads_per_turn"]


def test_standardised_inputs_live_in_the_record_and_its_id_stays_the_requested_one(digits, tmp_path):
    # §6.1 of the paper standardises inputs; the statistics are folded into the network, so the
    # reloaded record predicts exactly as trained on raw inputs, and a rerun finds it by its id.
    from defenses._common import model_id_for
    from dpaudit.weights import load_model, save_record

    bundle, splits = digits
    config = DSSGDConfig(participants=2, rounds=1, baselines=False)
    assert config.standardize
    record, model = train_dssgd(
        TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=config, seed=1, progress=False)
    )
    mean, std = record.model_options["input_standardization"]
    x = bundle.train.features.double()
    assert mean == pytest.approx(float(x.mean()), rel=1e-5) and std == pytest.approx(float(x.std()), rel=1e-5)
    assert record.model_id == model_id_for(
        TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=config, seed=1), defense="dssgd"
    )
    save_record(record, model, tmp_path / "rec")
    again = load_model(tmp_path / "rec")
    xs = bundle.test.features[:16]
    assert torch.allclose(again(xs), model(xs))
    raw, _ = train_dssgd(
        TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name="digits-mlp",
            config=DSSGDConfig(participants=2, rounds=1, baselines=False, standardize=False),
            seed=1,
            progress=False,
        )
    )
    assert "input_standardization" not in raw.model_options and raw.model_id != record.model_id


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="observe_participant"):
        DSSGDConfig(participants=3, observe_participant=3)
    with pytest.raises(ValueError, match="upload_fraction"):
        DSSGDConfig(upload_fraction=1.5)
    with pytest.raises(ValueError, match="selection"):
        DSSGDConfig(selection="smallest")
    with pytest.raises(ValueError, match="schedule"):
        DSSGDConfig(schedule="parallel")
