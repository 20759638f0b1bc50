"""The static import walk behind ``--train-fn`` / ``--model-fn`` fingerprints (issue 31, item 1).

Before it, a fingerprint covered the named file and installed package versions only: a
``helper.py`` the file imports could be replaced and the old verdict was handed back.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dpaudit.callables import callable_fingerprint, code_fingerprint
from dpaudit.import_graph import walk_imports


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def _names(walk) -> dict[str, str]:
    return {m.name: Path(m.path).name for m in walk.modules}


def test_relative_imports_packages_lazy_imports_and_cycles(tmp_path):
    _write(
        tmp_path,
        {
            "fns.py": "import helper\nfrom . import sibling\nfrom pkg import thing\n\ndef "
            "train(dataset, *, seed):\n    import lazy  # imported only when called\n "
            "   return helper.f()\n",
            "helper.py": "import fns  # a cycle back to the start\nfrom helper2 import g\n\ndef f():\n    return g()\n",
            "helper2.py": "import helper  # and one between two helpers\n\ndef g():\n    return 1\n",
            "sibling.py": "x = 1\n",
            "lazy.py": "y = 1\n",
            "pkg/__init__.py": "from .sub import deep\nthing = 1\n",
            "pkg/sub/__init__.py": "from .. import other\n",
            "pkg/sub/deep.py": "z = 1\n",
            "pkg/other.py": "w = 1\n",
        },
    )
    walk = walk_imports(tmp_path / "fns.py")
    assert _names(walk) == {
        "helper": "helper.py",
        "helper2": "helper2.py",
        "sibling": "sibling.py",
        "lazy": "lazy.py",
        "pkg": "__init__.py",
        "pkg.sub": "__init__.py",
        "pkg.sub.deep": "deep.py",
        "pkg.other": "other.py",
    }
    assert walk.unresolved == ()


def test_stdlib_and_installed_imports_are_not_hashed_and_the_missing_are_listed(tmp_path):
    _write(
        tmp_path,
        {
            "fns.py": "import os, json\nfrom collections import abc\nimport numpy\nimport "
            "torch.nn\ntry:\n    import no_such_module_xyz\nexcept ImportError:\n   "
            " pass\nfrom . import no_such_sibling_xyz\n"
        },
    )
    walk = walk_imports(tmp_path / "fns.py")
    assert walk.modules == ()  # numpy and torch count by version, os/json/collections not at all
    assert set(walk.distributions) >= {"numpy", "torch"}
    assert walk.unresolved == ("no_such_module_xyz",)  # `from . import name` may name an attribute: not listed


def test_a_module_spec_walks_its_own_package(tmp_path, monkeypatch):
    _write(
        tmp_path,
        {
            "proj/__init__.py": "",
            "proj/fns.py": "from .util import f\n\ndef train(d, *, seed):\n    return f()\n",
            "proj/util.py": "def f():\n    return 1\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    code = code_fingerprint("proj.fns:train")
    assert [m.name for m in code.modules] == ["proj", "proj.util"]
    before = code.sha256
    (tmp_path / "proj" / "util.py").write_text("def f():\n    return 2\n")
    assert callable_fingerprint("proj.fns:train") != before
    sys.modules.pop("proj.fns", None), sys.modules.pop("proj", None)


def test_the_fingerprint_changes_with_an_imported_module_and_is_unchanged_without_one(tmp_path):
    _write(
        tmp_path,
        {
            "fns.py": "import helper\n\ndef train(d, *, seed):\n    return helper.f()\n",
            "helper.py": "def f():\n    return 1\n",
            "alone.py": "import torch\n\ndef train(d, *, seed):\n    return None\n",
        },
    )
    first = code_fingerprint(f"{tmp_path / 'fns.py'}:train")
    assert first.covered() == {"helper": {"file": "helper.py", "sha256": first.modules[0].sha256}}
    (tmp_path / "helper.py").write_text("def f():\n    return 2\n")
    assert callable_fingerprint(f"{tmp_path / 'fns.py'}:train") != first.sha256
    # Self-contained code keeps the fingerprint it had before modules were covered.
    import hashlib
    import json

    from dpaudit.callables import _imported_distributions

    source = (tmp_path / "alone.py").read_bytes()
    old = hashlib.sha256(source)
    old.update(json.dumps(_imported_distributions(source), sort_keys=True).encode())
    assert callable_fingerprint(f"{tmp_path / 'alone.py'}:train") == old.hexdigest()


@pytest.mark.parametrize("syntax", ["def broken(:\n", ""])
def test_a_file_that_does_not_parse_is_skipped(tmp_path, syntax):
    _write(tmp_path, {"fns.py": "import helper\n", "helper.py": syntax})
    assert [m.name for m in walk_imports(tmp_path / "fns.py").modules] == ["helper"]


def test_the_audit_report_lists_what_the_fingerprints_cover():
    from dpaudit.results.audit_details import AuditDetails
    from reports.audit import _covered_lines

    details = AuditDetails(
        context={
            "train_fn_modules": {"helper": {"file": "helper.py", "sha256": "ab" * 32}},
            "train_fn_unresolved": ["ujson"],
            "dataset_files": {"mnist/t10k-labels-idx1-ubyte.gz": "cd" * 16},
        }
    )
    assert _covered_lines(details) == [
        f"--train-fn imports, covered by its fingerprint: helper.py {'ab' * 8}",
        "--train-fn imports not found, not covered: ujson",
        f"dataset files (MD5, reuse is keyed on them): mnist/t10k-labels-idx1-ubyte.gz {'cd' * 8}",
    ]
    assert _covered_lines(AuditDetails()) == []
