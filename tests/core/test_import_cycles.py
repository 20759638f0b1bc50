"""No import circle among the project's modules (issue 32).

The graph is read from the source, not from a running interpreter: every ``import`` and
``from … import`` anywhere in a module — inside functions, ``if TYPE_CHECKING`` and ``try``
blocks included, relative ones resolved against the module's package — is an edge from the
module to the module it names (``from a.b import c`` names ``a.b.c`` when that is a module of
the project, else ``a.b``). A lazy import inside a function hides a circle from Python at import
time but not from a reader: both ends still depend on each other, so it counts here.

Imports by name at run time (:func:`importlib.import_module`, a registry's ``discover=``) are no
edges: they are how the core reaches parts it must not import statically.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dpaudit", "attacks", "defenses", "reports")


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted name → file, for every module under ``packages`` (directories of ``root``)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            found[_module_name(path, root)] = path
    return found


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str | None:
    """The absolute module a ``from`` import names before its ``import`` list."""
    if node.level == 0:
        return node.module
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    if not base:
        return None
    return ".".join(base + ([node.module] if node.module else []))


def _target(name: str, modules: Mapping[str, Path]) -> str | None:
    """The project module ``name`` is, or lies in (an attribute of a module names the module)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph(modules: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module → the project modules it imports, at any depth of its source."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, node, is_package)
                if base is None:
                    continue
                names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            else:
                continue
            edges |= {t for t in (_target(n, modules) for n in names) if t is not None and t != module}
        graph[module] = edges
    return graph


def find_cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan), as a path ``a → … → a``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = [0]

    def connect(start: str) -> None:
        # Iterative Tarjan: the graph is deep enough that recursion would be fragile.
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return [_cycle_in(component, graph) for component in sorted(components)]


def _cycle_in(component: list[str], graph: Mapping[str, set[str]]) -> list[str]:
    """A shortest cycle through the component's first module (breadth-first within the component)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, node, start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle through {start} in its component {component}")


def _describe(cycles: list[list[str]]) -> str:
    return "\n".join(" -> ".join(cycle) for cycle in cycles)


@pytest.mark.extended
def test_the_project_has_no_import_cycle() -> None:
    cycles = find_cycles(import_graph(project_modules(ROOT, PACKAGES)))
    assert not cycles, f"{len(cycles)} import cycle(s):\n{_describe(cycles)}"


@pytest.mark.extended
def test_results_import_privacy_and_never_the_reverse() -> None:
    # A record holds its claim and a membership result its bound, so results/ reads privacy/;
    # privacy/ stays the mathematics that results are made from. The one exception is the audit
    # procedures (privacy/audit_procedures.py, audit_trials.py), which live beside the statistics they use and
    # build the audit's result value from them: they may read that value's own modules, and
    # results/ never imports them back (results/ keeps values only).
    graph = import_graph(project_modules(ROOT, PACKAGES))
    builders, values = (
        {"dpaudit.privacy.audit_procedures", "dpaudit.privacy.audit_trials"},
        {"dpaudit.results.audit", "dpaudit.results.audit_details"},
    )
    upward = sorted(
        f"{m} -> {t}"
        for m, targets in graph.items()
        if m.startswith("dpaudit.privacy")
        for t in targets
        if t.startswith("dpaudit.results") and not (m in builders and t in values)
    )
    assert not upward, "privacy imports results:\n" + "\n".join(upward)
    back = sorted(m for m, targets in graph.items() if m.startswith("dpaudit.results") and builders & set(targets))
    assert not back, f"results/ imports the audit procedures (it holds values only): {back}"


def _write(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_graph_sees_lazy_relative_and_submodule_imports(tmp_path: Path) -> None:
    # The circles this renovation broke had exactly these shapes: a lazy import inside a method,
    # an import at the bottom of a module, and a `from package import module`.
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/claims.py": "def f():\n    from pkg.pate import g\n    return g\n",
            "pkg/pate.py": "from . import claims\n",
            "pkg/a.py": "x = 1\nfrom pkg import b  # noqa: E402\n",
            "pkg/b.py": "from .sub.c import y\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/c.py": "from ..a import x\ny = x\n",
            "pkg/ok.py": "import pkg.sub.c\nfrom pkg.sub import c\n",
        },
    )
    graph = import_graph(project_modules(tmp_path, ["pkg"]))
    assert graph["pkg.claims"] == {"pkg.pate"} and graph["pkg.pate"] == {"pkg.claims"}
    assert graph["pkg.b"] == {"pkg.sub.c"} and graph["pkg.sub.c"] == {"pkg.a"}
    assert graph["pkg.ok"] == {"pkg.sub.c"}
    cycles = find_cycles(graph)
    assert cycles == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"], ["pkg.claims", "pkg.pate", "pkg.claims"]]
    assert "pkg.a -> pkg.b -> pkg.sub.c -> pkg.a" in _describe(cycles)


def test_a_graph_without_cycles_reports_none() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": set(), "d": {"a", "c"}}) == []
    assert find_cycles({"a": {"a"}}) == []  # a module naming itself is no circle between modules
