"""The architecture page's registry table and runs list against the code (issue 44): neither can drift.

The registries are found in the source, not from a list: every module-level assignment of a
``Registry(...)`` in ``dpaudit``, ``attacks``, ``defenses`` and ``reports`` is one, so a registry
added anywhere (an accountant registry, a new kind of part) fails this test until the page names
it. The runs list is held against the modules and packages of ``dpaudit/app/runs``.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGES = ("dpaudit", "attacks", "defenses", "reports")


def _is_registry_call(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Registry"


@functools.cache
def registries_in_code() -> dict[str, str]:
    """Registry name → the file (relative to the repository) whose module level assigns it a ``Registry(...)``."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if (
                    isinstance(node, ast.AnnAssign)
                    and isinstance(node.target, ast.Name)
                    and _is_registry_call(node.value)
                ):
                    found[node.target.id] = path.relative_to(ROOT).as_posix()
                elif isinstance(node, ast.Assign) and _is_registry_call(node.value):
                    found.update(
                        {t.id: path.relative_to(ROOT).as_posix() for t in node.targets if isinstance(t, ast.Name)}
                    )
    return found


def _section(title: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def registries_on_page() -> dict[str, str]:
    """Registry name → the file the table's ``where`` column gives, one per name of its first column."""
    rows = [line for line in _section("Registries").splitlines() if line.startswith("| `")]
    table: dict[str, str] = {}
    for row in rows:
        names, where = (cell.strip() for cell in row.strip("|").split("|")[:2])
        for name in re.findall(r"`([A-Z_]+)`", names):
            table[name] = where.strip("`")
    return table


def runs_on_page() -> set[str]:
    return set(re.findall(r"^\| `runs/([a-z_]+)(?:\.py|/)` \|", _section("The runs API"), flags=re.MULTILINE))


def runs_in_code() -> set[str]:
    runs = ROOT / "dpaudit" / "app" / "runs"
    modules = {p.stem for p in runs.glob("*.py") if p.stem != "__init__"}
    packages = {p.name for p in runs.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    return modules | packages


@pytest.mark.extended
def test_the_discovery_finds_the_registries_it_must():
    # A guard on the scan itself: an empty or partial find would let the page drift unseen.
    found = dict(registries_in_code())
    assert {"DEFENSES", "REPORT_KINDS", "CHECKS", "MEMBERSHIP_ATTACKS", "DATASETS", "MODELS"} <= set(found), sorted(
        found
    )
    assert found["CHECKS"] == "attacks/audit/checks/spec.py"


@pytest.mark.extended
def test_the_registry_table_names_every_registry_where_it_is():
    code, page = registries_in_code(), registries_on_page()
    missing = {name: where for name, where in code.items() if name not in page}
    assert not missing, f"registries missing from docs/architecture.md's table: {missing}"
    gone = sorted(set(page) - set(code))
    assert not gone, f"docs/architecture.md's table names registries the code does not define: {gone}"
    elsewhere = {name: (page[name], code[name]) for name in code if page[name] != code[name]}
    assert not elsewhere, f"the table's 'where' is not the file that defines the registry (page, code): {elsewhere}"


def test_the_runs_list_names_every_run_module():
    code, page = runs_in_code(), runs_on_page()
    assert not code - page, (
        f"modules of dpaudit/app/runs missing from docs/architecture.md's runs list: {sorted(code - page)}"
    )
    assert not page - code, (
        f"docs/architecture.md's runs list names modules dpaudit/app/runs does not hold: {sorted(page - code)}"
    )
