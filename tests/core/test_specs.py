"""The spec codec: plain data read off the fields' type hints, refusals that name the key, no torch."""

from __future__ import annotations

import enum
import json
import math
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import pytest

from dpaudit import _validate as v
from dpaudit.specs import PlainSpec, spec_field, spec_from_dict, spec_to_dict
from dpaudit.store import JsonValue, from_jsonable, to_jsonable

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
    assert (
        d["recipe"] == {"config": {"radii": [0.5, 1.0]}} and type(d["recipe"]["config"]) is dict
    )  # thawed all the way down
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


@dataclass(frozen=True, kw_only=True)
class FreeForm(PlainSpec):
    json: Mapping[str, JsonValue] = field(default_factory=dict)
    loose: Mapping[str, object] = field(default_factory=dict)
    typed: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


def test_free_form_mappings_are_json_all_the_way_down_whichever_way_they_are_spelled():
    # JsonValue's hint reaches the codec expanded one level (a recursive alias), yet it is as
    # free-form as Any: frozen values thaw to the lists json.loads gives back.
    frozen = MappingProxyType({"radii": (0.5, 1.0), "nested": MappingProxyType({"k": (1,)})})
    spec = FreeForm(json=frozen, loose=frozen, typed={"ids": (3, 4)})
    d = spec.to_dict()
    plain = {"radii": [0.5, 1.0], "nested": {"k": [1]}}
    assert d == {"json": plain, "loose": plain, "typed": {"ids": [3, 4]}}
    assert type(d["json"]) is dict and type(d["loose"]) is dict
    assert json.loads(json.dumps(d)) == d
    back = FreeForm.from_dict(json.loads(json.dumps(d)))
    assert back.json == plain and back.loose == plain and back.typed == {"ids": (3, 4)}


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


# --- the features stored values need (written by hand before they shared this codec) ---


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True, kw_only=True)
class Point(PlainSpec):
    x: float
    y: float = 0.0


@dataclass(frozen=True, kw_only=True, eq=False)
class Stored(PlainSpec):
    """A stored value whose dict order is not its field order, with computed and optional keys."""

    __spec_keys__ = (
        "version",
        "name",
        "flagged",
        "tpr",
        "points",
        "scores",
        "mask",
        "colour",
        "note",
        "owners",
        "renamed",
        "kept",
    )
    version: ClassVar[int] = 3

    name: str
    tpr: Mapping[float, float | None] = field(default_factory=dict)
    points: tuple[Point, ...] = ()
    scores: np.ndarray = spec_field(default_factory=lambda: np.zeros(0), dtype=np.float64)
    mask: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))
    colour: Colour = Colour.RED
    note: str | None = spec_field(default=None, omit="none")
    owners: np.ndarray = spec_field(default_factory=lambda: np.zeros(0, dtype=np.int64), omit="empty")
    renamed: int = spec_field(default=0, key="new_name", legacy=("old_name",))
    kept: Mapping[str, Point | None] = spec_field(
        default_factory=dict,
        encode=lambda m: {k: (p.to_dict() if p else {}) for k, p in m.items()},
        decode=lambda d: {k: (Point.from_dict(p) if p else None) for k, p in d.items()},
    )
    cache: str = spec_field(default="", stored=False)

    @property
    def flagged(self) -> bool:
        return self.note is not None


def _stored() -> Stored:
    return Stored(
        name="s",
        tpr={0.001: None, 0.01: 0.25},
        points=(Point(x=1.0), Point(x=2.0, y=-1.5)),
        scores=np.array([0.5, math.inf]),
        mask=np.array([True, False]),
        colour=Colour.BLUE,
        renamed=7,
        kept={"a": Point(x=3.0), "b": None},
        cache="not stored",
    )


def test_stored_values_keep_their_declared_key_order_and_computed_keys():
    d = _stored().to_dict()
    # The dict a hand-written to_dict would have produced, spelled out here as the reference.
    assert d == {
        "version": 3,
        "name": "s",
        "flagged": False,
        "tpr": {0.001: None, 0.01: 0.25},
        "points": [{"x": 1.0, "y": 0.0}, {"x": 2.0, "y": -1.5}],
        "scores": [0.5, math.inf],
        "mask": [True, False],
        "colour": "blue",
        "new_name": 7,
        "kept": {"a": {"x": 3.0, "y": 0.0}, "b": {}},
    }
    assert list(d) == [
        "version",
        "name",
        "flagged",
        "tpr",
        "points",
        "scores",
        "mask",
        "colour",
        "new_name",
        "kept",
    ]  # note, owners: omitted
    with_both = Stored(name="t", note="n", owners=np.array([0, 1])).to_dict()
    assert with_both["note"] == "n" and with_both["owners"] == [0, 1] and with_both["flagged"] is True
    assert list(with_both).index("note") < list(with_both).index("owners") < list(with_both).index("new_name")


def test_stored_values_round_trip_through_json_with_their_types():
    text = json.dumps(to_jsonable(_stored().to_dict()))
    back = Stored.from_dict(from_jsonable(json.loads(text)))
    assert back.tpr == {0.001: None, 0.01: 0.25} and all(
        type(k) is float for k in back.tpr
    )  # keys were strings in JSON
    assert back.points == (Point(x=1.0), Point(x=2.0, y=-1.5))
    assert back.scores.dtype == np.float64 and back.scores[1] == math.inf
    assert back.mask.dtype == np.bool_ and back.mask.tolist() == [True, False]
    assert back.colour is Colour.BLUE and back.renamed == 7 and back.note is None and back.owners.size == 0
    assert back.kept == {"a": Point(x=3.0), "b": None} and back.cache == ""
    assert json.dumps(to_jsonable(back.to_dict())) == text


def test_legacy_keys_numbers_and_computed_constants():
    back = Stored.from_dict({"name": "s", "old_name": 4, "points": [{"x": 1}], "tpr": {"0.5": 1}, "scores": [1, 2]})
    assert (
        back.renamed == 4 and back.tpr == {0.5: 1} and type(back.tpr[0.5]) is int
    )  # an int stays one: re-saved, "1" stays "1"
    assert type(back.points[0].x) is int and back.to_dict()["new_name"] == 4 and "old_name" not in back.to_dict()
    assert (
        back.scores.tolist() == [1.0, 2.0] and back.scores.dtype == np.float64
    )  # ints into a float array: within the kind
    with pytest.raises(v.InvalidArgumentType, match=r"owners must hold int64 values, got float64"):
        Stored.from_dict({"name": "s", "owners": [1.5]})  # an id of 1.5 is refused, never truncated to 1
    assert Stored.from_dict({"name": "s", "flagged": True}).note is None  # a computed property is not read back
    with pytest.raises(v.InvalidArgument, match=r"version must be 3, got 2") as err:
        Stored.from_dict({"name": "s", "version": 2})
    assert err.value.argument == "version"
    with pytest.raises(v.InvalidArgument, match=r"colour must be one of 'red', 'blue', got 'green'"):
        Stored.from_dict({"name": "s", "colour": "green"})
    with pytest.raises(v.InvalidArgument, match=r"Stored has no field 'cache'"):
        Stored.from_dict({"name": "s", "cache": "x"})


def test_fields_a_key_order_does_not_name_follow_it_and_bad_names_are_refused():
    @dataclass(frozen=True, kw_only=True)
    class Base(PlainSpec):
        __spec_keys__: ClassVar[tuple[str, ...]] = ("kind", "b", "a")
        kind: ClassVar[str] = "base"
        a: int = 0
        b: int = 0

    @dataclass(frozen=True, kw_only=True)
    class Child(Base):  # a new kind declares its fields only, as a toy claim kind does
        c: int = 0

    assert list(Child(a=1, b=2, c=3).to_dict().items()) == [("kind", "base"), ("b", 2), ("a", 1), ("c", 3)]

    @dataclass(frozen=True, kw_only=True)
    class Renamed(PlainSpec):  # a computed attribute stored under another key
        __spec_keys__: ClassVar[tuple[str | tuple[str, str], ...]] = (("type", "name"), "a")
        name: ClassVar[str] = "renamed"
        a: int = 0

    assert Renamed(a=2).to_dict() == {"type": "renamed", "a": 2} and Renamed.from_dict(
        {"type": "renamed", "a": 2}
    ) == Renamed(a=2)
    with pytest.raises(v.InvalidArgument, match=r"Renamed type must be 'renamed', got 'other'"):
        Renamed.from_dict({"type": "other"})

    @dataclass(frozen=True, kw_only=True)
    class Typo(PlainSpec):
        __spec_keys__: ClassVar[tuple[str, ...]] = ("aa",)
        a: int = 0

    with pytest.raises(TypeError, match=r"names 'aa', neither a stored field nor an attribute"):
        Typo().to_dict()
    with pytest.raises(v.InvalidArgument, match="omit must be one of none, empty"):
        spec_field(omit="zero")
