"""A teacher spec's plain-data form and id are pinned: cached teachers in existing run directories stay found.

The literals and ids below were printed by the hand-written ``to_dict`` / ``teacher_id`` this
codec replaced (issue 32); a change of key, order or value type fails here before it strands a
cache. Values are compared with their types (a tuple is not a list, an int is not a float).
"""

from __future__ import annotations

import json
from types import MappingProxyType

import numpy as np
import pytest

from defenses.nonprivate import NonPrivateConfig
from defenses.pate.teachers import TeacherSpec
from dpaudit import _validate as v
from tests.plain_forms import typed


def _specs():
    return {
        "full": TeacherSpec(
            dataset="digits",
            model_name="digits-mlp",
            model_options={"hidden": 32, "activation": "relu"},
            input_shape=(64,),
            num_classes=10,
            training=NonPrivateConfig(epochs=3, batch_size=32, learning_rate=0.05),
            index=3,
            num_teachers=12,
            train_ids=np.array([40, 4, 14], dtype=np.int64),
            non_member_ids=np.array([1, 2, 3], dtype=np.int64),
            population_ids=np.array([50, 60], dtype=np.int64),
            partition_seed=5,
            seed=987654321,
            num_eval_examples=None,
        ),
        "defaults": TeacherSpec(
            dataset="mnist",
            model_name="abadi-mnist",
            input_shape=(1, 28, 28),
            num_classes=10,
            training=NonPrivateConfig(),
            index=0,
            num_teachers=1,
            train_ids=np.array([0, 1, 2, 3]),
            partition_seed=0,
            seed=1,
        ),
        "of250": TeacherSpec(
            dataset="adult",
            model_name="tabular-mlp",
            model_options=MappingProxyType({"hidden": 16}),
            input_shape=(108,),
            num_classes=2,
            training=NonPrivateConfig(epochs=20, weight_decay=0.001),
            index=17,
            num_teachers=250,
            train_ids=[7, 1000, 33],
            non_member_ids=[5],
            partition_seed=3,
            seed=42,
            num_eval_examples=200,
        ),
    }


FORMS = {
    "full": {
        "dataset": "digits",
        "model_name": "digits-mlp",
        "model_options": {"hidden": 32, "activation": "relu"},
        "input_shape": [64],
        "num_classes": 10,
        "training": {"epochs": 3, "batch_size": 32, "learning_rate": 0.05, "momentum": 0.9, "weight_decay": 0.0},
        "index": 3,
        "num_teachers": 12,
        "train_ids": [4, 14, 40],
        "non_member_ids": [1, 2, 3],
        "population_ids": [50, 60],
        "partition_seed": 5,
        "seed": 987654321,
        "num_eval_examples": None,
    },
    "defaults": {
        "dataset": "mnist",
        "model_name": "abadi-mnist",
        "model_options": {},
        "input_shape": [1, 28, 28],
        "num_classes": 10,
        "training": {"epochs": 10, "batch_size": 64, "learning_rate": 0.05, "momentum": 0.9, "weight_decay": 0.0},
        "index": 0,
        "num_teachers": 1,
        "train_ids": [0, 1, 2, 3],
        "non_member_ids": [],
        "population_ids": [],
        "partition_seed": 0,
        "seed": 1,
        "num_eval_examples": 1000,
    },
    "of250": {
        "dataset": "adult",
        "model_name": "tabular-mlp",
        "model_options": {"hidden": 16},
        "input_shape": [108],
        "num_classes": 2,
        "training": {"epochs": 20, "batch_size": 64, "learning_rate": 0.05, "momentum": 0.9, "weight_decay": 0.001},
        "index": 17,
        "num_teachers": 250,
        "train_ids": [7, 33, 1000],
        "non_member_ids": [5],
        "population_ids": [],
        "partition_seed": 3,
        "seed": 42,
        "num_eval_examples": 200,
    },
}
IDS = {
    "full": "pate-teacher03-digits-digits-mlp-seed987654321-dc008f6e",
    "defaults": "pate-teacher0-mnist-abadi-mnist-seed1-43142746",
    "of250": "pate-teacher017-adult-tabular-mlp-seed42-36c6d348",
}


@pytest.mark.parametrize("name", sorted(FORMS))
def test_plain_form_and_id_are_those_of_before(name):
    spec = _specs()[name]
    assert typed(spec.to_dict()) == typed(FORMS[name])
    assert spec.teacher_id == IDS[name]


@pytest.mark.parametrize("name", sorted(FORMS))
def test_round_trip_keeps_the_form_and_the_id(name):
    spec = _specs()[name]
    back = TeacherSpec.from_dict(json.loads(json.dumps(spec.to_dict())))  # what a worker rebuilds
    assert typed(back.to_dict()) == typed(FORMS[name]) and back.teacher_id == IDS[name]
    assert type(back.training) is NonPrivateConfig and back.training == spec.training
    assert back.train_ids.dtype == np.int64 and back.population_ids.dtype == np.int64


def test_a_dict_written_before_the_optional_keys_still_loads_with_its_meaning():
    old = {
        k: x
        for k, x in FORMS["full"].items()
        if k not in ("model_options", "non_member_ids", "population_ids", "num_eval_examples")
    }
    spec = TeacherSpec.from_dict(old)
    assert spec.model_options == {} and spec.non_member_ids.size == 0 and spec.population_ids.size == 0
    assert spec.num_eval_examples is None  # such a dict predates the cap: every test example, as it then meant


def test_unknown_keys_are_refused_naming_them():
    with pytest.raises(v.InvalidArgument, match="TeacherSpec has no field 'teachers'") as err:
        TeacherSpec.from_dict({**FORMS["defaults"], "teachers": 5})
    assert err.value.argument == "teachers"
    with pytest.raises(v.InvalidArgument, match="NonPrivateConfig has no field 'noise_multiplier'"):
        TeacherSpec.from_dict({**FORMS["defaults"], "training": {"noise_multiplier": 1.0}})
