"""PATE teachers: disjoint partitions with their membership stored, resumable training, votes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from defenses.nonprivate import NonPrivateConfig
from defenses.pate.teachers import TeacherEnsemble, plan_teachers, teacher_predictions, teacher_votes, train_teachers
from dpaudit.data import load_dataset, make_splits
from dpaudit.executors.jobs import SerialExecutor
from dpaudit.executors.local import LocalExecutor
from dpaudit.results.record import RECORD_FILE, load_record
from dpaudit.weights import load_model

NUM_TEACHERS = 5


@pytest.fixture(scope="module")
def bundle():
    return load_dataset("digits")


@pytest.fixture(scope="module")
def splits(bundle):
    return make_splits(bundle, seed=0, num_members=500, num_non_members=200)


def _specs(bundle, splits, *, n=NUM_TEACHERS, seed=1, epochs=3):
    return plan_teachers(
        bundle=bundle,
        splits=splits,
        num_teachers=n,
        model_name="digits-mlp",
        config=NonPrivateConfig(epochs=epochs, batch_size=32),
        seed=seed,
    )


@pytest.fixture(scope="module")
def ensemble(bundle, splits, tmp_path_factory) -> TeacherEnsemble:
    return train_teachers(_specs(bundle, splits), directory=tmp_path_factory.mktemp("teachers"), progress=False)


def _same_weights(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_one_teacher_per_disjoint_partition_with_membership_stored(ensemble, splits):
    assert ensemble.num_teachers == NUM_TEACHERS and len(ensemble.trained) == NUM_TEACHERS
    parts = ensemble.partitions
    joined = np.concatenate(parts)
    assert joined.size == np.unique(joined).size  # disjoint
    assert np.array_equal(np.sort(joined), splits.members)  # covering the private ids
    # Keyed-hash partitions: multinomial sizes around members / n (five standard deviations).
    mean = len(splits.members) / len(parts)
    assert all(abs(p.size - mean) < 5 * np.sqrt(mean) for p in parts)
    for t, (spec, record) in enumerate(zip(ensemble.specs, ensemble.records, strict=True)):
        stored = load_record(ensemble.directory / spec.teacher_id)  # the ground truth as attacks read it
        assert np.array_equal(stored.membership.members, spec.train_ids)
        assert np.array_equal(stored.membership.non_members, splits.non_members)
        assert (
            stored.config["pate_teacher"]["index"] == t
            and stored.config["pate_teacher"]["num_teachers"] == NUM_TEACHERS
        )
        assert stored.defense == "nonprivate" and stored.model_id == spec.teacher_id == record.model_id
    assert ensemble.membership() == {str(t): p.tolist() for t, p in enumerate(parts)}
    assert sorted(p.name for p in ensemble.directory.iterdir()) == list(
        ensemble.teacher_ids
    )  # ids sort in teacher order


def test_interrupted_run_resumes_with_every_finished_teacher_kept(bundle, splits, tmp_path, capsys):
    specs = _specs(bundle, splits, seed=4, epochs=2)
    finished = []

    def stop_after_two(spec, record):
        finished.append(spec.index)
        if len(finished) == 2:
            raise KeyboardInterrupt  # stopped while the third teacher trains

    with pytest.raises(KeyboardInterrupt):
        train_teachers(specs, directory=tmp_path, executor=SerialExecutor(), progress=False, on_trained=stop_after_two)
    kept = sorted(p.parent.name for p in tmp_path.glob(f"*/{RECORD_FILE}"))
    assert kept == sorted(s.teacher_id for s in specs[:2])
    stamps = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*") if p.is_file()}
    retrained = []
    ensemble = train_teachers(
        specs, directory=tmp_path, progress=True, on_trained=lambda spec, record: retrained.append(spec.index)
    )
    assert retrained == [2, 3, 4]  # the two finished teachers were not trained again
    assert ensemble.reused == tuple(s.teacher_id for s in specs[:2]) and len(ensemble.trained) == 3
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())
    assert "PATE teachers: reusing 2 of 5 already trained" in capsys.readouterr().err


def test_same_seed_same_teachers_other_seed_other_partitions(bundle, splits, ensemble):
    again = train_teachers(_specs(bundle, splits), directory=None, progress=False)
    assert again.teacher_ids == ensemble.teacher_ids
    assert all(_same_weights(a, b) for a, b in zip(again.models, ensemble.models, strict=True))
    other = _specs(bundle, splits, seed=2)
    assert not np.array_equal(other[0].train_ids, ensemble.specs[0].train_ids)
    assert other[0].teacher_id != ensemble.specs[0].teacher_id


def test_vote_matrix_and_prediction_cache(ensemble, bundle):
    queries = bundle.test.features[:40]
    votes = teacher_votes(ensemble, queries)
    assert votes.shape == (40, bundle.num_classes) and votes.dtype == np.int64
    assert (votes.sum(axis=1) == NUM_TEACHERS).all()
    preds = teacher_predictions(ensemble, queries)
    direct = torch.stack([m(queries).argmax(1) for m in ensemble.models]).numpy()
    assert np.array_equal(preds, direct)
    for spec in ensemble.specs:
        assert len(list((ensemble.directory / spec.teacher_id).glob("predictions-*.npy"))) == 1

    class Unusable(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("cached predictions should have been used")

    cached_only = dataclasses.replace(ensemble, models=tuple(Unusable() for _ in ensemble.models))
    assert np.array_equal(teacher_votes(cached_only, queries), votes)
    with pytest.raises(AssertionError, match="cached predictions"):
        teacher_votes(cached_only, queries[:10])  # other queries: not cached


def test_reloaded_teacher_is_the_trained_one(ensemble):
    spec = ensemble.specs[0]
    assert _same_weights(load_model(ensemble.directory / spec.teacher_id), ensemble.models[0])


def test_evaluation_cap_changes_metrics_only(bundle, splits):
    capped = plan_teachers(
        bundle=bundle,
        splits=splits,
        num_teachers=2,
        model_name="digits-mlp",
        config=NonPrivateConfig(epochs=1),
        seed=3,
        num_eval_examples=50,
    )
    full = plan_teachers(
        bundle=bundle,
        splits=splits,
        num_teachers=2,
        model_name="digits-mlp",
        config=NonPrivateConfig(epochs=1),
        seed=3,
        num_eval_examples=None,
    )
    assert [s.teacher_id for s in capped] == [s.teacher_id for s in full]
    a = train_teachers(capped, directory=None, progress=False)
    b = train_teachers(full, directory=None, progress=False)
    assert all(_same_weights(x, y) for x, y in zip(a.models, b.models, strict=True))
    assert a.records[0].metrics["num_test_examples"] == 50 and b.records[0].metrics["num_test_examples"] == len(
        bundle.test
    )
    assert 0 <= a.records[0].metrics["test_accuracy"] <= 1 and "non_member_accuracy" not in a.records[0].metrics


@pytest.mark.slow  # 5 s; the shadow pool's equality test keeps the process pool in the default suite
def test_process_pool_trains_the_same_teachers(bundle, splits):
    specs = _specs(bundle, splits, n=2, seed=9, epochs=1)
    serial = train_teachers(specs, directory=None, executor=SerialExecutor(), progress=False)
    with LocalExecutor(workers=2) as pool:
        pooled = train_teachers(specs, directory=None, executor=pool, progress=False)
    assert all(_same_weights(a, b) for a, b in zip(serial.models, pooled.models, strict=True))


def test_bad_input(bundle, splits):
    with pytest.raises(ValueError, match="num_teachers must be at most the number of ids"):
        _specs(bundle, splits, n=501)
    specs = _specs(bundle, splits, n=2)
    overlapping = (specs[0], dataclasses.replace(specs[1], train_ids=specs[0].train_ids[:3]))
    with pytest.raises(ValueError, match="must be disjoint"):
        train_teachers(overlapping, directory=None, progress=False)
    with pytest.raises(ValueError, match="share sample ids"):
        dataclasses.replace(specs[0], non_member_ids=specs[0].train_ids[:2])
    with pytest.raises(ValueError, match="at least one teacher"):
        train_teachers([], directory=None, progress=False)
