"""The import rule of DESIGN.md: the core never reaches into attacks, defenses or reports
(except its application layer), and attacks and defenses never import each other."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The application layer wires core, defenses, attacks and reports together: the CLI, its
# verb modules and the experiment runner.
APPLICATION_LAYER = {"dpaudit/runner.py"} | {p.relative_to(ROOT).as_posix() for p in (ROOT / "dpaudit").glob("cli*.py")}
FORBIDDEN = {
    "dpaudit": {"attacks", "defenses", "reports"},
    "attacks": {"defenses", "reports"},
    "defenses": {"attacks", "reports"},
    "reports": {"attacks", "defenses", "torch"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_import_rule(package):
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in APPLICATION_LAYER:
            continue
        bad = _imports(path) & FORBIDDEN[package]
        assert not bad, f"{rel} imports {sorted(bad)}"


def test_no_pickle_loading_in_library_code():
    for package in FORBIDDEN:
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text()
            assert "pickle.load(" not in text and "pickle.loads(" not in text, path
            assert "weights_only=False" not in text, path
            assert "allow_pickle=True" not in text, path
