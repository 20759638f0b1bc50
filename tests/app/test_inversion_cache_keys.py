"""The inversion run's cache keys keep their names and stored forms: what was cached before stays found.

The names below were printed by the dict-based keys the typed ones replaced (issue 44); the
stored result config is compared with the dict the old code wrote, key order included.
"""

from __future__ import annotations

import json

from dpaudit.app.runs.inversion import _EvaluatorKey, _key, _PriorKey, _ResultKey


def test_evaluator_and_prior_cache_names_are_those_of_before():
    evaluator = _EvaluatorKey(
        dataset="digits", members="0123456789abcdef", seed=4, config={"epochs": 3, "widths": (8, 4)}, num_classes=10
    )
    prior = _PriorKey(dataset="digits", classes=(0, 1), seed=4, config={"epochs": 2}, shape=(1, 8, 8))
    assert _key("evaluator", evaluator) == "evaluator-digits-860e5ac0e362"
    assert _key("gmi", prior) == "gmi-digits-bb68bb144c20"
    # meta.json's "describe": the old dict's keys, in its order, with lists for tuples
    assert json.dumps(prior.to_dict()) == json.dumps(
        {"dataset": "digits", "classes": [0, 1], "seed": 4, "config": {"epochs": 2}, "shape": [1, 8, 8]}
    )


def test_result_config_has_the_old_form_and_leaves_out_an_absent_prior():
    with_prior = _ResultKey(
        attack={"steps": 5, "radii": (0.5,)},
        evaluator={"cache": "evaluator-digits-860e5ac0e362", "epochs": 3},
        seed=0,
        classes=(3, 1),
        prior={"name": "gan", "public_data": "digits classes 5-9", "epochs": 2},
    )
    old = {
        "attack": {"steps": 5, "radii": [0.5]},
        "evaluator": {"cache": "evaluator-digits-860e5ac0e362", "epochs": 3},
        "seed": 0,
        "classes": [3, 1],
        "prior": {"name": "gan", "public_data": "digits classes 5-9", "epochs": 2},
    }
    assert json.dumps(with_prior.to_dict()) == json.dumps(old)
    without = _ResultKey(attack={"steps": 5}, evaluator={"cache": "e"}, seed=1, classes=(0,))
    assert list(without.to_dict()) == ["attack", "evaluator", "seed", "classes"]
