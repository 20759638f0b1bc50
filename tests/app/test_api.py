"""``dpaudit.api``, the one module scripts import: every name it lists resolves to its source's own object."""

from __future__ import annotations

import ast
import importlib
import inspect

import pytest

import dpaudit.api as api


def _type_checking_imports() -> dict[str, tuple[str, str]]:
    """Exported name → (module, attribute), read independently from the module's source."""
    tree = ast.parse(inspect.getsource(api))
    guarded = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    assert len(guarded) == 1
    return {a.asname or a.name: (stmt.module, a.name) for stmt in guarded[0].body for a in stmt.names}


def test_all_lists_exactly_the_imported_names_once():
    assert len(api.__all__) == len(set(api.__all__))
    assert set(api.__all__) == set(_type_checking_imports())


def test_every_name_is_its_sources_object():
    # A name whose module moved fails here (an ImportError or AttributeError), not in a script.
    for name, (module, attribute) in _type_checking_imports().items():
        assert getattr(api, name) is getattr(importlib.import_module(module), attribute), name
    assert api.cli_main is importlib.import_module("dpaudit.app.cli").main
    assert set(api.__all__) <= set(dir(api))


def test_star_import_gives_every_name():
    namespace: dict[str, object] = {}
    exec("from dpaudit.api import *", namespace)
    assert set(api.__all__) <= set(namespace)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="'dpaudit.api' has no attribute 'train_dpsgd_v2'"):
        api.train_dpsgd_v2  # noqa: B018
    with pytest.raises(ImportError, match="train_dpsgd_v2"):
        exec("from dpaudit.api import train_dpsgd_v2", {})
