"""The import rule of docs/architecture.md: only the application layer (``dpaudit/app`` and the public API
``dpaudit/api.py``) wires ``attacks``, ``defenses`` and ``reports`` together; attacks and defenses
never import each other; ``scripts/`` are clients of ``dpaudit.api`` alone; ``dpaudit/results`` and
``reports`` render stored results without torch; ``dpaudit --help`` does not import torch."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Path prefixes of the application layer: the only code that may import attacks, defenses and reports together.
APPLICATION_LAYER = ("dpaudit/app/", "dpaudit/api.py")
#: The one module of the project a script may import (issue 32, "scripts are clients").
PUBLIC_API = "dpaudit.api"
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


@pytest.mark.extended
@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_import_rule(package):
    for path in sorted((ROOT / package).rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(APPLICATION_LAYER):
            continue
        bad = _imports(path) & FORBIDDEN[package]
        assert not bad, f"{rel} imports {sorted(bad)}"


@pytest.mark.extended
def test_application_layer_is_a_package_of_its_own():
    # Nothing outside the application layer imports dpaudit.app (tests may; scripts go through dpaudit.api).
    for package in ("dpaudit", "attacks", "defenses", "reports"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(APPLICATION_LAYER):
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
            mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            assert not any(m == "dpaudit.app" or m.startswith("dpaudit.app.") for m in mods), (
                f"{rel} imports dpaudit.app"
            )


def _project_imports(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) of every absolute import of ``path`` at any depth (inside functions too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from dpaudit import api` names the module it imports.
            found += (
                [(node.lineno, f"dpaudit.{a.name}") for a in node.names]
                if node.module == "dpaudit"
                else [(node.lineno, node.module)]
            )
    return [(line, m) for line, m in found if m.split(".")[0] in FORBIDDEN]  # its keys: the project's packages


def test_scripts_are_clients_of_the_public_api():
    scripts = sorted((ROOT / "scripts").glob("*.py"))
    assert scripts, "no scripts found"
    bad = [
        f"{p.relative_to(ROOT).as_posix()}:{line} imports {m}"
        for p in scripts
        for line, m in _project_imports(p)
        if m != PUBLIC_API
    ]
    assert not bad, "scripts import the project only through dpaudit.api:\n" + "\n".join(bad)


def test_scripts_import_only_names_the_public_api_lists():
    # A script's inner imports run only on its slow paths: a misspelt or unlisted name is caught here instead.
    import dpaudit.api

    listed = set(dpaudit.api.__all__)
    for path in sorted((ROOT / "scripts").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == PUBLIC_API:
                unknown = sorted(a.name for a in node.names if a.name not in listed)
                assert not unknown, (
                    f"{path.relative_to(ROOT).as_posix()}:{node.lineno} imports {unknown}, not in dpaudit.api.__all__"
                )


def _modules_after_import(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sorted(m.split('.')[0] for m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    return set(out.stdout.split())


@pytest.mark.extended
@pytest.mark.parametrize(
    "statement",
    [
        "import dpaudit.results, dpaudit.results.record, dpaudit.results.membership, dpaudit.results.evasion",
        "import dpaudit.privacy.claims, dpaudit.privacy.audit_bounds, "
        "dpaudit.privacy.audit_procedures, dpaudit.privacy.gaussian, "
        "dpaudit.privacy.pate.claim, dpaudit.privacy.pate.smooth_sensitivity, "
        "dpaudit.seeding",
        # `dpaudit pate analyze` is the PATE analysis of a vote matrix: numpy and scipy only.
        "from dpaudit.app.cli import build_parser; build_parser(['pate', 'analyze', '--help'])",
        # The public API loads each name on first use: its privacy mathematics and result types stay torch-free.
        "import dpaudit.api; from dpaudit.api import dpsgd_claim, gdp_epsilon, "
        "analytic_sigma, count_bounds, MembershipResult, RunDir",
        # What `dpaudit --help` and `dpaudit epsilon ...` load before they run.
        "from dpaudit.app.cli import build_parser; build_parser(['--help'])",
        "from dpaudit.app.cli import main; main(['epsilon', '--sampling-rate', "
        "'0.01', '--noise-multiplier', '1', '--num-steps', '10', '--delta', "
        "'1e-5'])",
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
