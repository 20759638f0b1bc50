"""PATE teachers trained in batched groups against the same teachers trained one job each.

Same specs, same seeds: each batched teacher must equal its separate run up to floating-point
reordering, carry the same record (id, partition, ground truth, metrics) and land in the same
cache entry; a resumed ensemble trains only the missing teachers, in groups.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from defenses.nonprivate import NonPrivateConfig
from defenses.pate import teachers as batched_teachers
from defenses.pate.teachers import TEACHERS_PER_BATCH, batches_teachers, plan_teachers, teacher_groups, train_teachers
from dpaudit.data import load_dataset, make_splits

TOL = 2e-5


@pytest.fixture(scope="module")
def specs():
    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0, num_members=300, num_non_members=100)
    # Partitions of 15 and 16 examples: the batched loop must wait, unmoved, for the teachers
    # with fewer batches, as the separate runs simply stop.
    return plan_teachers(
        bundle=bundle,
        splits=splits,
        num_teachers=19,
        model_name="digits-mlp",
        config=NonPrivateConfig(epochs=3, batch_size=8, learning_rate=0.1, momentum=0.9),
        seed=4,
        num_eval_examples=50,
    )


def _gap(a: torch.nn.Module, b: torch.nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    return max(float((sa[n] - sb[n]).abs().max()) for n in sa)


def test_batched_teachers_equal_teachers_trained_alone(specs, tmp_path, monkeypatch):
    jobs = []
    real = batched_teachers.train_teacher_group_job

    def spy(**kwargs):
        jobs.append(len(kwargs["specs"]))
        return real(**kwargs)

    monkeypatch.setattr(batched_teachers, "train_teacher_group_job", spy)
    alone = train_teachers(specs, directory=tmp_path / "alone", progress=False, batched=False)
    assert jobs == []
    together = train_teachers(specs, directory=tmp_path / "together", progress=False)
    assert jobs == [TEACHERS_PER_BATCH, len(specs) - TEACHERS_PER_BATCH]
    assert together.teacher_ids == alone.teacher_ids
    for a, b, ra, rb in zip(alone.models, together.models, alone.records, together.records, strict=True):
        assert _gap(a, b) < TOL
        assert ra.model_id == rb.model_id and ra.config == rb.config
        assert np.array_equal(ra.membership.members, rb.membership.members)
        assert np.array_equal(ra.membership.non_members, rb.membership.non_members)
        for key in ("train_accuracy", "test_accuracy", "num_steps", "num_test_examples"):
            assert ra.metrics[key] == pytest.approx(rb.metrics[key], abs=1e-6), key
    # The teachers really differ (own partitions, own seeds): agreement above is not a constant.
    assert _gap(together.models[0], together.models[1]) > 1e-2


def test_a_resumed_ensemble_trains_only_the_missing_teachers_in_groups(specs, tmp_path):
    first = train_teachers(specs[:5], directory=tmp_path, progress=False)
    again = train_teachers(specs, directory=tmp_path, progress=False)
    assert set(again.reused) == set(first.teacher_ids) and len(again.trained) == len(specs) - 5
    grouping = teacher_groups(specs, data_root=None, device="cpu")(list(again.trained))
    assert [len(keys) for keys, _ in grouping] == [TEACHERS_PER_BATCH - 2]  # 14 missing: one group


def test_a_model_with_dropout_trains_alone(specs, monkeypatch):
    """Dropout draws from the global generator, which a batched run cannot split per teacher."""
    assert batches_teachers(specs[0])
    missing = [s.teacher_id for s in specs]
    assert len(teacher_groups(specs, data_root=None, device="cpu")(missing)) == 2
    # No zoo model has dropout today: an architecture with one stands in for a future one.
    monkeypatch.setattr(
        batched_teachers,
        "_architecture",
        lambda spec: lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Dropout(0.5), torch.nn.Linear(64, 10)),
    )
    assert not batches_teachers(specs[0])
    assert teacher_groups(specs, data_root=None, device="cpu")(missing) == []
