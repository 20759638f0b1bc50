"""The one registry type: registration order, duplicate names refused, errors that name the argument, discovery."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest

from dpaudit import _validate as v
from dpaudit.registry import Registry, UnknownPart


@dataclass(frozen=True)
class Part:
    name: str


def test_register_lookup_order_and_decorator_form():
    reg: Registry[Part] = Registry("widget", argument="--widget")
    a = reg.register(Part("a"))
    assert reg.register(Part("b")).name == "b"
    assert reg["a"] is a and list(reg) == ["a", "b"] and reg.names() == ("a", "b") and len(reg) == 2 and "b" in reg


def test_duplicate_name_is_refused_unless_replaced():
    reg: Registry[Part] = Registry("widget")
    reg.register(Part("a"))
    with pytest.raises(v.InvalidArgument, match="already registered"):
        reg.register(Part("a"))
    reg.register(Part("a"), replace=True)


def test_unknown_name_names_the_argument_and_the_choices():
    reg: Registry[Part] = Registry("widget", argument="--widget")
    reg.register(Part("a"))
    with pytest.raises(UnknownPart) as exc:
        reg["zzz"]
    assert exc.value.argument == "--widget" and "'zzz'" in str(exc.value) and "(a)" in str(exc.value)
    assert isinstance(exc.value, KeyError)  # Mapping.get keeps working
    assert reg.get("zzz") is None


def test_temporarily_restores():
    reg: Registry[Part] = Registry("widget")
    old = reg.register(Part("a"))
    with reg.temporarily(Part("t")):
        assert "t" in reg
    assert "t" not in reg and reg["a"] is old


def test_setitem_must_match_name():
    reg: Registry[Part] = Registry("widget")
    with pytest.raises(v.InvalidArgument):
        reg["x"] = Part("y")


def test_discovery_imports_every_module_of_a_package(tmp_path, monkeypatch):
    pkg = tmp_path / "toyparts"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "one.py").write_text("from tests_registry_host import REG, Part\nREG.register(Part('one'))\n")
    (pkg / "sub").mkdir()
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "two.py").write_text("from tests_registry_host import REG, Part\nREG.register(Part('two'))\n")
    host = type(sys)("tests_registry_host")
    host.Part = Part
    host.REG = Registry("widget", discover=("toyparts",))
    monkeypatch.setitem(sys.modules, "tests_registry_host", host)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert sorted(host.REG) == ["one", "two"]
    finally:
        for name in [m for m in sys.modules if m == "toyparts" or m.startswith("toyparts.")]:
            del sys.modules[name]


def test_an_order_key_sets_the_listing_order_whatever_the_registration_order():
    @dataclass(frozen=True)
    class Ranked:
        name: str
        rank: int

    reg: Registry[Ranked] = Registry("widget", order=lambda spec: spec.rank)
    for name, rank in (("variant", 2), ("other", 2), ("baseline", 0)):
        reg.register(Ranked(name, rank))
    assert reg.names() == ("baseline", "variant", "other") and list(reg) == ["baseline", "variant", "other"]
    with pytest.raises(UnknownPart, match=r"\(baseline, variant, other\)"):
        reg["zzz"]
