"""The one value every defense's ``train`` and ``replay`` take (issue 44: the eight restated keywords).

A request is checked where it is built (bad input names its argument), copies the caller's model
options, and is what every registered train and replay function takes, positionally and alone:
none of them restates the keyword list any more.
"""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

from defenses import DEFENSES
from defenses._common import expected_model_id, model_id_for
from defenses.nonprivate import NonPrivateConfig, train_nonprivate
from dpaudit._validate import InvalidArgument
from dpaudit.data import load_dataset, make_splits
from dpaudit.train_request import TrainRequest

#: What each train function used to take as keywords, and must now read from the request.
RESTATED = {"bundle", "splits", "model_name", "model_options", "config", "seed", "device", "progress"}


@pytest.fixture(scope="module")
def digits():
    bundle = load_dataset("digits")
    return bundle, make_splits(bundle, seed=0, num_members=60, num_non_members=20)


def _request(digits, **changes) -> TrainRequest[NonPrivateConfig]:
    bundle, splits = digits
    fields = {
        "bundle": bundle,
        "splits": splits,
        "model_name": "digits-mlp",
        "config": NonPrivateConfig(epochs=1),
        "progress": False,
        **changes,
    }
    return TrainRequest(**fields)


@pytest.mark.parametrize(
    ("changes", "argument"),
    [
        ({"model_name": ""}, "model_name"),
        ({"model_name": 3}, "model_name"),
        ({"model_options": ["hidden", 32]}, "model_options"),
        ({"seed": 1.5}, "seed"),
        ({"seed": True}, "seed"),
        ({"progress": "yes"}, "progress"),
    ],
)
def test_bad_input_is_refused_naming_the_argument_and_the_value(digits, changes, argument) -> None:
    with pytest.raises(InvalidArgument) as caught:
        _request(digits, **changes)
    assert caught.value.argument == argument
    assert argument in str(caught.value) and repr(next(iter(changes.values()))) in str(caught.value)


def test_the_request_is_frozen_keyword_only_and_keeps_its_own_copy_of_the_options(digits) -> None:
    options = {"hidden": 16}
    request = _request(digits, model_options=options)
    options["hidden"] = 99  # the caller's mapping changes after the request was built
    assert request.model_options == {"hidden": 16}
    fresh = request.options()
    fresh["noise_layer"] = True  # what a wrapping defense adds to its own copy
    assert request.model_options == {"hidden": 16}
    assert _request(digits, model_options=None).model_options == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.seed = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        TrainRequest(*digits, "digits-mlp", NonPrivateConfig())  # type: ignore[misc]


@pytest.mark.parametrize("name", list(DEFENSES))
def test_every_train_and_replay_takes_one_request_and_restates_none_of_its_fields(name) -> None:
    spec = DEFENSES[name]
    for role, fn in (("train", spec.train), ("replay", spec.replay)):
        if fn is None:
            continue
        params = list(inspect.signature(fn).parameters.values())
        assert params and params[0].kind is inspect.Parameter.POSITIONAL_ONLY, (
            f"{name}.{role} must take the request as its first, positional-only parameter"
        )
        # Everything else is the defense's own (hooks, a workspace), keyword-only with a default.
        rest = params[1:]
        assert all(
            p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is not inspect.Parameter.empty for p in rest
        ), f"{name}.{role}: {rest}"
        assert not RESTATED & {p.name for p in rest}, (
            f"{name}.{role} restates {sorted(RESTATED & {p.name for p in rest})}"
        )


def test_the_id_a_request_resumes_by_is_the_one_its_record_states(digits) -> None:
    """The id computed before training (what ``train`` resumes by) is the id the record carries,
    and the one rebuilt from the stored record alone (:func:`expected_model_id`); the seed and
    the options are part of it."""
    request = _request(digits, seed=4)
    record, _ = train_nonprivate(request)
    assert record.model_id == model_id_for(request, defense="nonprivate") == expected_model_id(record)
    assert record.seed == 4 and record.config["epochs"] == 1 and record.config["split_seed"] == request.splits.seed
    others = {
        model_id_for(dataclasses.replace(request, **change), defense="nonprivate")
        for change in ({"seed": 5}, {"model_options": {"hidden": 8}}, {"config": NonPrivateConfig(epochs=2)})
    }
    assert len(others) == 3 and record.model_id not in others
    # Where it trains and whether it reports progress is no part of what was trained.
    assert (
        model_id_for(dataclasses.replace(request, device="cpu", progress=True), defense="nonprivate") == record.model_id
    )


def test_the_request_module_is_torch_free() -> None:
    # The value sits in the core beside the registry: naming it must not load the training stack.
    code = "import sys, dpaudit.train_request; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "False"
