"""The import rule of DESIGN.md: only ``dpaudit/app`` wires ``attacks``, ``defenses`` and
``reports`` together; attacks and defenses never import each other; ``dpaudit/results`` and
``reports`` render stored results without torch; ``dpaudit --help`` does not import torch."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APPLICATION_LAYER = "dpaudit/app/"
FORBIDDEN = {
    "dpaudit": {"attacks", "defenses", "reports"},
    "attacks": {"defenses", "reports"},
    "defenses": {"attacks", "reports"},
    "reports": {"attacks", "defenses", "torch"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
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
        if rel.startswith(APPLICATION_LAYER):
            continue
        bad = _imports(path) & FORBIDDEN[package]
        assert not bad, f"{rel} imports {sorted(bad)}"


def test_application_layer_is_a_package_of_its_own():
    # Nothing outside dpaudit/app imports it (scripts and tests may: they are its users).
    for package in ("dpaudit", "attacks", "defenses", "reports"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(APPLICATION_LAYER):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
            mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            assert not any(m == "dpaudit.app" or m.startswith("dpaudit.app.") for m in mods), f"{rel} imports dpaudit.app"


def _modules_after_import(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "statement",
    [
        "import dpaudit.results, dpaudit.results.record, dpaudit.results.membership, dpaudit.results.evasion",
        "import dpaudit.privacy.claims, dpaudit.privacy.audit_bounds, dpaudit.results.auditing, dpaudit.privacy.gaussian, dpaudit.privacy.pate.claim, dpaudit.privacy.pate.smooth_sensitivity, dpaudit.seeding",
        # `dpaudit pate analyze` is the PATE analysis of a vote matrix: numpy and scipy only.
        "from dpaudit.app.cli import build_parser; build_parser(['pate', 'analyze', '--help'])",
        # What `dpaudit --help` and `dpaudit epsilon ...` load before they run.
        "from dpaudit.app.cli import build_parser; build_parser(['--help'])",
        "from dpaudit.app.cli import main; main(['epsilon', '--sampling-rate', '0.01', '--noise-multiplier', '1', '--num-steps', '10', '--delta', '1e-5'])",
    ],
)
def test_torch_free_imports(statement):
    loaded = _modules_after_import(statement)
    assert "torch" not in loaded, f"{statement!r} imports torch"


def test_no_pickle_loading_in_library_code():
    for package in FORBIDDEN:
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            assert "pickle.load(" not in text and "pickle.loads(" not in text, path
            assert "weights_only=False" not in text, path
            assert "allow_pickle=True" not in text, path
