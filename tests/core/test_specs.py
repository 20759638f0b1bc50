"""The spec codec: plain data read off the fields' type hints, refusals that name the key, no torch."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pytest

from dpaudit import _validate as v
from dpaudit.specs import PlainSpec, spec_field, spec_from_dict, spec_to_dict

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, kw_only=True)
class Inner:  # a nested dataclass that does not use the mixin (as NonPrivateConfig does not)
    epochs: int = 3
    rate: float = 0.5


@dataclass(frozen=True, kw_only=True, eq=False)
class Outer(PlainSpec):
    name: str
    shape: tuple[int, ...]
    ids: np.ndarray
    inner: Inner
    options: Mapping[str, Any] = spec_field(default_factory=dict, as_given=True)
    recipe: Mapping[str, Any] = field(default_factory=dict)
    limit: int | None = spec_field(default=10, absent=None)
    extra: float = 1.5


def _outer() -> Outer:
    return Outer(
        name="x",
        shape=(1, 28, 28),
        ids=np.array([4, 2, 9], dtype=np.int32),
        inner=Inner(epochs=7),
        options=MappingProxyType({"hidden": (8, 4)}),
        recipe=MappingProxyType({"config": MappingProxyType({"radii": (0.5, 1.0)})}),
    )


def test_fields_convert_by_their_hints_in_field_order():
    d = _outer().to_dict()
    assert list(d) == ["name", "shape", "ids", "inner", "options", "recipe", "limit", "extra"]
    assert d["shape"] == [1, 28, 28] and type(d["shape"]) is list
    assert d["ids"] == [4, 2, 9] and all(type(i) is int for i in d["ids"])
    assert d["inner"] == {"epochs": 7, "rate": 0.5}
    assert type(d["options"]) is dict and d["options"]["hidden"] == (8, 4)  # as given: the tuple stays
    assert d["recipe"] == {"config": {"radii": [0.5, 1.0]}} and type(d["recipe"]["config"]) is dict  # thawed all the way down
    assert json.loads(json.dumps(d)) == {**d, "options": {"hidden": [8, 4]}}


def test_round_trip_rebuilds_the_same_spec():
    spec = _outer()
    back = Outer.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert isinstance(back, Outer) and isinstance(back.inner, Inner) and back.inner == spec.inner
    assert back.shape == (1, 28, 28) and back.ids.dtype == np.int64 and back.ids.tolist() == [4, 2, 9]
    assert spec_to_dict(back) == {**spec.to_dict(), "options": {"hidden": [8, 4]}}


def test_absent_keys_take_the_default_or_the_value_older_dicts_meant():
    back = spec_from_dict(Outer, {"name": "x", "shape": [2], "ids": [], "inner": {}})
    assert back.options == {} and back.recipe == {} and back.extra == 1.5 and back.inner == Inner()
    assert back.limit is None  # written before `limit` existed: None, not the default 10
    assert back.ids.dtype == np.int64 and back.ids.size == 0


def test_unknown_and_missing_keys_are_refused_naming_the_key():
    good = _outer().to_dict()
    with pytest.raises(v.InvalidArgument, match=r"Outer has no field 'colour'") as err:
        Outer.from_dict({**good, "colour": "red"})
    assert err.value.argument == "colour"
    with pytest.raises(v.InvalidArgument, match=r"Inner has no field 'momentum'") as err:
        Outer.from_dict({**good, "inner": {"epochs": 1, "momentum": 0.9}})
    assert err.value.argument == "momentum"
    with pytest.raises(v.InvalidArgument, match=r"Outer needs 'shape'") as err:
        Outer.from_dict({k: x for k, x in good.items() if k != "shape"})
    assert err.value.argument == "shape"


@pytest.mark.parametrize(("key", "value"), [("shape", 3), ("inner", [1]), ("options", [("a", 1)])])
def test_values_of_the_wrong_shape_are_refused(key, value):
    with pytest.raises(v.InvalidArgumentType, match=key) as err:
        Outer.from_dict({**_outer().to_dict(), key: value})
    assert err.value.argument == key


def test_only_dataclasses_and_mappings():
    with pytest.raises(TypeError, match="dataclass"):
        spec_to_dict({"a": 1})
    with pytest.raises(TypeError, match="dataclass"):
        spec_from_dict(dict, {})
    with pytest.raises(TypeError, match="mapping"):
        Outer.from_dict([("name", "x")])  # type: ignore[arg-type]


def test_the_codec_does_not_import_torch():
    code = "import sys, dpaudit.specs; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"
