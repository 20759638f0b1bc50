"""Shadow pools trained batched (dpaudit.batched) equal the same shadows trained one at a time.

Each mode the pools use — plain SGD (:func:`attacks.membership.shadows.train_shadow`), the
non-private defense and DP-SGD through the registry
(:func:`dpaudit.app.runs.membership_shadows.train_shadow_with_defense`) — is trained both ways from the
same specs (same seeds, same members); the models must agree up to floating-point reordering,
keep their ids and cache entries, and a resumed run must train only the missing ones.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from attacks.membership.shadows import (
    ShadowRecipe,
    ShadowTraining,
    ensure_shadows,
    plan_shadows,
    sgd_batch,
)
from defenses.nonprivate import NonPrivateConfig, train_nonprivate
from dpaudit.app.runs.membership_shadows import batch_shadow_with_defense, train_shadow_with_defense
from dpaudit.data import load_dataset, make_splits
from dpaudit.results.record import load_record
from dpaudit.train_request import TrainRequest

TOL = 2e-5


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def template():
    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0, num_members=60, num_non_members=60)
    record, _ = train_nonprivate(
        TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name="digits-mlp",
            config=NonPrivateConfig(epochs=1),
            seed=0,
            progress=False,
        )
    )
    return record


def _gap(a: nn.Module, b: nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max(float((sa[n] - sb[n]).abs().max()) for n in sa)


def _specs(template, recipe=None, training=None, n=4):
    return plan_shadows(
        template=template,
        pool_ids=np.arange(200),
        num_shadows=n,
        seed=3,
        kind="online",
        train_size=50,
        training=training,
        recipe=recipe,
    )


def _both_ways(specs, **kw):
    alone = ensure_shadows(specs, directory=None, progress=False, **{**kw, "batcher": None})
    together = ensure_shadows(specs, directory=None, progress=False, **kw)
    assert together.trained == tuple(s.shadow_id for s in specs)  # every one trained batched
    return alone, together


def test_plain_sgd_shadows_batched_equal_one_at_a_time(template):
    specs = _specs(template, training=ShadowTraining(epochs=2, batch_size=16, learning_rate=0.1, momentum=0.9))
    alone, together = _both_ways(specs)
    for a, b in zip(alone.models, together.models, strict=True):
        assert _gap(a, b) < TOL
    assert _gap(together.models[0], together.models[1]) > 1e-3  # own members and seeds: not one model


DP_CONFIG = {
    "noise_multiplier": 0.9,
    "clip_norm": 1.0,
    "sampling_rate": 0.2,
    "epochs": 1.0,
    "learning_rate": 0.3,
    "momentum": 0.5,
    "final_learning_rate": 0.1,
    "lr_decay_epochs": 1.0,
    "accountant": "rdp",
}


@pytest.mark.extended
@pytest.mark.parametrize(
    ("defense", "config"),
    [
        ("dpsgd", DP_CONFIG),
        ("dpsgd", {**DP_CONFIG, "sampling_rate": 1.0, "epochs": 3.0, "momentum": 0.0}),
        ("nonprivate", {"epochs": 2, "batch_size": 16, "learning_rate": 0.1, "momentum": 0.9}),
    ],
    ids=["dpsgd-poisson-decay", "dpgd-full-batch", "nonprivate"],
)
def test_defense_shadows_batched_equal_the_defenses_own_runs(template, defense, config):
    specs = _specs(template, recipe=ShadowRecipe(defense=defense, config=config))
    alone, together = _both_ways(specs, trainer=train_shadow_with_defense, batcher=batch_shadow_with_defense)
    for a, b in zip(alone.models, together.models, strict=True):
        assert _gap(a, b) < TOL
    assert _gap(together.models[0], together.models[1]) > 1e-3


def test_modes_the_batched_trainer_lacks_train_one_at_a_time(template):
    bundle = load_dataset("digits")
    for config in (
        {**DP_CONFIG, "per_layer": True},
        {**DP_CONFIG, "sampling": "shuffle-non-private-accounting"},
    ):
        spec = _specs(template, recipe=ShadowRecipe(defense="dpsgd", config=config), n=1)[0]
        assert batch_shadow_with_defense(spec, bundle=bundle) is None
    spec = _specs(template, recipe=ShadowRecipe(defense="pixeldp", config={"epochs": 1}), n=1)[0]
    assert batch_shadow_with_defense(spec, bundle=bundle) is None
    # A DP-SGD shadow of a model batching makes slower (a convolution) trains alone; non-private batches.
    cnn = dataclasses.replace(
        spec, model_name="audit-cnn", input_shape=(1, 28, 28), recipe=ShadowRecipe(defense="dpsgd", config=DP_CONFIG)
    )
    assert batch_shadow_with_defense(cnn, bundle=bundle) is None
    cnn = dataclasses.replace(cnn, recipe=ShadowRecipe(defense="nonprivate", config={"epochs": 1}))
    assert batch_shadow_with_defense(cnn, bundle=bundle) is not None
    # A custom trainer is never replaced by plain SGD.
    seen = []

    def trainer(spec, *, bundle, device):
        seen.append(spec.shadow_id)
        from attacks.membership.shadows import train_shadow

        return train_shadow(spec, bundle=bundle, device=device)

    specs = _specs(template, training=ShadowTraining(epochs=1), n=2)
    ensure_shadows(specs, directory=None, progress=False, trainer=trainer)
    assert seen == [s.shadow_id for s in specs]


@pytest.mark.extended
def test_batched_shadows_keep_their_cache_entries_and_a_resumed_run_trains_the_rest(template, tmp_path):
    specs = _specs(template, recipe=ShadowRecipe(defense="dpsgd", config=DP_CONFIG), n=6)
    kw = {"trainer": train_shadow_with_defense, "batcher": batch_shadow_with_defense, "progress": False}
    first = ensure_shadows(specs[:2], directory=tmp_path, **kw)
    assert first.trained == tuple(s.shadow_id for s in specs[:2])
    stamps = {s.shadow_id: (tmp_path / s.shadow_id / "record.json").stat().st_mtime_ns for s in specs[:2]}
    rest = ensure_shadows(specs, directory=tmp_path, **kw)
    assert rest.reused == tuple(s.shadow_id for s in specs[:2])
    assert set(rest.trained) == {s.shadow_id for s in specs[2:]}
    assert {s.shadow_id: (tmp_path / s.shadow_id / "record.json").stat().st_mtime_ns for s in specs[:2]} == stamps
    # Each entry is the one-at-a-time shadow's: same id, same record kind, same weights (to rounding).
    alone = ensure_shadows(specs, directory=None, **{**kw, "batcher": None})
    for spec, a, b in zip(specs, alone.models, rest.models, strict=True):
        record = load_record(tmp_path / spec.shadow_id)
        assert record.model_id == spec.shadow_id and record.defense == "dpsgd"
        assert record.metrics["num_steps"] == round(DP_CONFIG["epochs"] / DP_CONFIG["sampling_rate"])
        assert np.array_equal(record.membership.members, spec.train_ids)
        assert _gap(a, b) < TOL
    again = ensure_shadows(specs, directory=tmp_path, **kw)
    assert again.trained == () and len(again.reused) == 6


def test_sgd_batch_declines_a_defense_recipe(template):
    spec = _specs(template, recipe=ShadowRecipe(defense="dpsgd", config=DP_CONFIG), n=1)[0]
    assert sgd_batch(spec, bundle=load_dataset("digits")) is None
