"""A shadow spec's plain-data form and id are pinned: cached shadow models in existing run directories stay found.

The literals and ids below were printed by the hand-written ``to_dict`` / ``shadow_id`` this
codec replaced (issue 32); a change of key, order or value type fails here before it strands a
cache. Values are compared with their types (a tuple is not a list, an int is not a float).
"""

from __future__ import annotations

import json
from types import MappingProxyType

import numpy as np
import pytest

from attacks.membership.shadows import ShadowRecipe, ShadowSpec, ShadowTraining
from dpaudit import _validate as v
from tests.plain_forms import typed


def _specs():
    return {
        "full": ShadowSpec(
            dataset="digits",
            model_name="dssgd-mlp",
            model_options=MappingProxyType({"hidden": (128, 64), "input_standardization": (0.5, 0.25)}),
            input_shape=(64,),
            num_classes=10,
            training=ShadowTraining(epochs=7, batch_size=16, learning_rate=0.1, momentum=0.5, weight_decay=1e-4),
            train_ids=np.array([9, 3, 41, 7], dtype=np.int32),
            seed=12345,
            recipe=ShadowRecipe(
                defense="dpsgd",
                config=MappingProxyType(
                    {"noise_multiplier": 1.1, "clip_norm": 1.0, "radii": (0.5, 1.0), "nested": {"a": [1, 2]}}
                ),
            ),
        ),
        "plain": ShadowSpec(
            dataset="adult",
            model_name="tabular-mlp",
            input_shape=[108],
            num_classes=2,
            training=ShadowTraining.from_config(
                {"epochs": 3, "batch_size": 128, "learning_rate": 0.02, "noise_multiplier": 2.0}
            ),
            train_ids=np.arange(5, 20, 3, dtype=np.int64),
            seed=0,
        ),
        "external": ShadowSpec(
            dataset="mnist",
            model_name="external:mymod:build",
            model_options={"width": 32},
            input_shape=(1, 28, 28),
            num_classes=10,
            training=ShadowTraining(),
            train_ids=[100, 2, 55],
            seed=7,
            recipe=ShadowRecipe(defense="pate", config={"num_teachers": 50, "aggregator": "gnmax"}),
        ),
    }


FORMS = {
    "full": {
        "dataset": "digits",
        "model_name": "dssgd-mlp",
        "model_options": {"hidden": (128, 64), "input_standardization": (0.5, 0.25)},
        "input_shape": [64],
        "num_classes": 10,
        "training": {"epochs": 7, "batch_size": 16, "learning_rate": 0.1, "momentum": 0.5, "weight_decay": 0.0001},
        "train_ids": [3, 7, 9, 41],
        "seed": 12345,
        "recipe": {
            "defense": "dpsgd",
            "config": {"noise_multiplier": 1.1, "clip_norm": 1.0, "radii": [0.5, 1.0], "nested": {"a": [1, 2]}},
        },
    },
    "plain": {
        "dataset": "adult",
        "model_name": "tabular-mlp",
        "model_options": {},
        "input_shape": [108],
        "num_classes": 2,
        "training": {"epochs": 3, "batch_size": 128, "learning_rate": 0.02, "momentum": 0.9, "weight_decay": 0.0},
        "train_ids": [5, 8, 11, 14, 17],
        "seed": 0,
        "recipe": {},
    },
    "external": {
        "dataset": "mnist",
        "model_name": "external:mymod:build",
        "model_options": {"width": 32},
        "input_shape": [1, 28, 28],
        "num_classes": 10,
        "training": {"epochs": 30, "batch_size": 64, "learning_rate": 0.05, "momentum": 0.9, "weight_decay": 0.0},
        "train_ids": [2, 55, 100],
        "seed": 7,
        "recipe": {"defense": "pate", "config": {"num_teachers": 50, "aggregator": "gnmax"}},
    },
}
IDS = {
    "full": "shadow-digits-dssgd-mlp-seed12345-ad2906e0",
    "plain": "shadow-adult-tabular-mlp-seed0-e309e2fc",
    "external": "shadow-mnist-external_mymod_build-seed7-d51925d9",
}


@pytest.mark.parametrize("name", sorted(FORMS))
def test_plain_form_and_id_are_those_of_before(name):
    spec = _specs()[name]
    assert typed(spec.to_dict()) == typed(FORMS[name])
    assert typed(spec.training.to_dict()) == typed(FORMS[name]["training"])
    assert spec.shadow_id == IDS[name]


@pytest.mark.parametrize("name", sorted(FORMS))
def test_round_trip_keeps_the_form_and_the_id(name):
    spec = _specs()[name]
    back = ShadowSpec.from_dict(spec.to_dict())  # what a process-pool worker rebuilds
    assert typed(back.to_dict()) == typed(FORMS[name]) and back.shadow_id == IDS[name]
    assert isinstance(back.training, ShadowTraining) and back.training == spec.training
    via_json = ShadowSpec.from_dict(json.loads(json.dumps(spec.to_dict())))  # a Ray node's copy
    assert via_json.shadow_id == IDS[name] and np.array_equal(via_json.train_ids, spec.train_ids)


def test_a_dict_without_the_optional_keys_still_loads():
    old = {k: x for k, x in FORMS["plain"].items() if k not in ("model_options", "recipe")}
    spec = ShadowSpec.from_dict(old)
    assert spec.model_options == {} and spec.recipe == ShadowRecipe() and spec.shadow_id == IDS["plain"]


def test_unknown_keys_are_refused_naming_them():
    with pytest.raises(v.InvalidArgument, match="ShadowSpec has no field 'train_id'") as err:
        ShadowSpec.from_dict({**FORMS["plain"], "train_id": [1]})
    assert err.value.argument == "train_id"
    with pytest.raises(v.InvalidArgument, match="ShadowTraining has no field 'lr'"):
        ShadowSpec.from_dict({**FORMS["plain"], "training": {"lr": 0.1}})


# Recipes with fingerprints, as the membership run builds them; forms and ids printed by the
# dict-based recipe this type replaced (issue 44), so shadows cached under them stay found.
_BASE = {
    "dataset": "digits",
    "model_name": "digits-mlp",
    "input_shape": (64,),
    "num_classes": 10,
    "training": ShadowTraining(epochs=2),
    "train_ids": np.arange(0, 40, 2),
    "seed": 3,
}
RECIPES = {
    "external": (
        ShadowRecipe(model_fn_sha256="0f" * 32, dataset_files_sha256="ab" * 32),
        {"model_fn_sha256": "0f" * 32, "dataset_files_sha256": "ab" * 32},
        "shadow-digits-digits-mlp-seed3-917da1f1",
    ),
    "files": (
        ShadowRecipe(defense="dpsgd", config={"noise_multiplier": 1.0, "radii": [0.5]}, dataset_files_sha256="cd" * 32),
        {"defense": "dpsgd", "config": {"noise_multiplier": 1.0, "radii": [0.5]}, "dataset_files_sha256": "cd" * 32},
        "shadow-digits-digits-mlp-seed3-e9561594",
    ),
}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_with_fingerprints_keeps_its_form_and_id(name):
    recipe, form, shadow_id = RECIPES[name]
    spec = ShadowSpec(**_BASE, recipe=recipe)
    assert json.dumps(spec.to_dict()["recipe"]) == json.dumps(form)  # same keys, same order
    assert spec.shadow_id == shadow_id
    back = ShadowSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back.recipe == recipe and back.shadow_id == shadow_id


def test_recipe_names_a_defense_and_its_config_together():
    with pytest.raises(v.InvalidArgument, match="defense and its config together") as err:
        ShadowRecipe(defense="dpsgd")
    assert err.value.argument == "recipe"
    with pytest.raises(v.InvalidArgument, match="ShadowRecipe has no field 'trainer'"):
        ShadowSpec.from_dict({**FORMS["plain"], "recipe": {"trainer": "x"}})
