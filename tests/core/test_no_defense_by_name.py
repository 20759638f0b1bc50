"""No code outside a defense's own modules recognises that defense by its name.

What is special about a defense (its artefacts, the run of its own verb, its report kind, its plot
style) is declared on its :class:`~defenses.registry.DefenseSpec`; code elsewhere asks the spec. A
comparison such as ``record.defense == "pate"`` outside ``defenses/pate/`` is the pattern the spec
replaced (issue 44), so a new defense never needs edits scattered over the tree.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dpaudit", "attacks", "defenses", "reports")
# Defenses with a package of their own (defenses/<name>/): their names may be compared inside it only.
OWN = {
    d.name: f"defenses/{d.name}/" for d in (ROOT / "defenses").iterdir() if d.is_dir() and (d / "__init__.py").is_file()
}


def _is_defense_field(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "defense") or (
        isinstance(node, ast.Name) and node.id == "defense"
    )


def _name_tests(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare) or not all(
            isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops
        ):
            continue
        sides = [node.left, *node.comparators]
        names = [s.value for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)]
        for s in sides:
            if isinstance(s, (ast.Tuple, ast.List, ast.Set)):
                names += [e.value for e in s.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        if any(_is_defense_field(s) for s in sides):
            found += [(node.lineno, n) for n in names if n in OWN]
    return found


def test_the_scan_sees_the_pattern_it_forbids():
    assert _name_tests('if record.defense != "pate":\n    pass\n') == [(1, "pate")]
    assert _name_tests('ok = defense in ("dssgd", "x")\n') == [(1, "dssgd")]
    assert {"pate", "dssgd", "dpsgd"} <= set(OWN)
    assert _name_tests('if record.defense == "nonprivate":\n    pass\n') == []  # a defense without a package of its own
    assert _name_tests("if spec.run_module == __name__:\n    pass\n") == []


@pytest.mark.extended
def test_no_defense_is_recognised_by_name_outside_its_modules():
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for line, name in _name_tests(path.read_text(encoding="utf-8")):
                if not rel.startswith(OWN[name]):
                    offenders.append(f"{rel}:{line} compares a defense with {name!r}")
    assert not offenders, "ask the DefenseSpec (artefacts, run_module, report_kind) instead:\n" + "\n".join(offenders)
