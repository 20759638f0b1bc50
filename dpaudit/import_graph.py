"""The local modules a piece of user code imports, found without running it.

A ``--train-fn`` or ``--model-fn`` file rarely stands alone: it imports a ``helper.py`` beside
it, or a package of the user's project. A stored result may be handed back only to the code
that made it (issue "Results that cannot lie"), so the code's fingerprint must cover those
modules too, and it must be known *before* the call runs (the fingerprint names the stored
trials to reuse). This module walks the import graph statically with :mod:`ast`:

* ``import a.b``, ``from a.b import c`` (``a.b.c`` too when it is a submodule) and relative
  imports (``from . import x``, ``from ..pkg import y``), at any depth of the source —
  inside functions, ``if`` and ``try`` blocks included;
* transitively, through every local module found, each visited once (cycles end);
* resolved the way Python would find them, against the caller's directory first and then
  ``sys.path`` (``''`` being the working directory).

A module is *local*, and its file hashed (SHA-256 of its bytes), unless it is part of the
standard library, built in, owned by an installed distribution (recorded by version instead),
or found only under the standard library's or site-packages' directories. An import that is
found nowhere is listed as *unresolved* (e.g. an optional dependency inside ``try``).

Limitations: an import the walk cannot see — ``importlib.import_module(name)``,
``__import__``, ``exec``, a path added to ``sys.path`` at run time, a plugin found by entry
point — is not covered; nor are data files the code reads. Code that depends on such imports
changes its fingerprint only when the files the walk sees change.

Torch-free.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import site
import sys
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LocalModule", "ImportWalk", "walk_imports", "installed_distributions", "installed_top_level"]


@dataclass(frozen=True)
class LocalModule:
    """One local module the code imports.

    Attributes:
        name: its dotted name as imported (a relative import above any known package keeps its
            dots, e.g. ``..shared``).
        path: absolute path of its file.
        sha256: SHA-256 (hex) of the file's bytes.
    """

    name: str
    path: str
    sha256: str


@dataclass(frozen=True)
class ImportWalk:
    """What :func:`walk_imports` found.

    Attributes:
        modules: the local modules imported, directly or through each other, sorted by name
            (the walked file itself excluded).
        unresolved: imports found nowhere, sorted (``name`` or ``.relative``).
        distributions: installed distribution → version, for every installed package imported
            by the walked file or by one of ``modules``.
    """

    modules: tuple[LocalModule, ...]
    unresolved: tuple[str, ...]
    distributions: dict[str, str]


@functools.lru_cache(maxsize=1)
def _installed_roots() -> tuple[str, ...]:
    """Directories whose modules are installed, not the user's: the standard library and site-packages."""
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.realpath(path))
    try:
        roots.update(os.path.realpath(p) for p in site.getsitepackages())
    except AttributeError:  # pragma: no cover - virtualenvs without getsitepackages
        pass
    user = getattr(site, "getusersitepackages", lambda: None)()
    if user:
        roots.add(os.path.realpath(user))
    return tuple(sorted(roots))


def _is_installed_path(path: str) -> bool:
    real = os.path.realpath(path)
    return any(real == root or real.startswith(root + os.sep) for root in _installed_roots())


@functools.lru_cache(maxsize=1)
def _owners() -> Mapping[str, list[str]]:
    # Read once per process (it scans every installed distribution's metadata: ~0.5 s).
    return importlib.metadata.packages_distributions()


def installed_top_level(name: str) -> bool:
    """Whether the top-level package ``name`` belongs to an installed distribution."""
    return name in _owners()


def installed_distributions(tops: set[str]) -> dict[str, str]:
    """Installed distribution → version for the top-level package names ``tops`` (where found)."""
    versions: dict[str, str] = {}
    owners = _owners()
    for top in sorted(tops):
        for dist in owners.get(top, ()):
            try:
                versions[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
    return versions


def _search_path(first: Path | None) -> list[str]:
    """Where an absolute import is looked for: ``first`` (the caller's directory), then ``sys.path``."""
    out = [str(first)] if first is not None else []
    for entry in sys.path:
        path = entry or os.getcwd()
        if os.path.isdir(path) and path not in out:
            out.append(path)
    return out


def _find(name: str, locations: list[str]) -> importlib.machinery.ModuleSpec | None:
    """The spec Python's path finder gives ``name`` (its last component) in ``locations``; imports nothing."""
    try:
        return importlib.machinery.PathFinder.find_spec(name, locations)
    except (ImportError, ValueError, OSError):
        return None


def _file_of(spec: importlib.machinery.ModuleSpec) -> str | None:
    origin = spec.origin
    if spec.has_location and origin and os.path.isfile(origin):
        return origin
    return None


@dataclass
class _Walker:
    search: list[str]
    modules: dict[str, LocalModule]  # by real path
    unresolved: set[str]
    tops: set[str]
    queue: list[tuple[str, str | None]]  # (file, dotted name or None)

    def _add(self, name: str, spec: importlib.machinery.ModuleSpec) -> None:
        path = _file_of(spec)
        if path is None:  # a namespace package: no file of its own, its submodules are found by name
            return
        real = os.path.realpath(path)
        if real in self.modules:
            return
        try:
            data = Path(real).read_bytes()
        except OSError:
            self.unresolved.add(name)
            return
        self.modules[real] = LocalModule(name=name, path=real, sha256=hashlib.sha256(data).hexdigest())
        if real.endswith(".py"):
            self.queue.append((real, name if not name.startswith(".") else None))

    def _chain(self, first: importlib.machinery.ModuleSpec, first_name: str, rest: list[str], names: list[str]) -> None:
        """Adds ``first`` and each dotted component below it, then ``names`` where they are submodules."""
        self._add(first_name, first)
        spec, dotted = first, first_name
        for part in rest:
            dotted = f"{dotted}.{part}"
            locations = list(spec.submodule_search_locations or [])
            sub = _find(dotted, locations) if locations else None
            if sub is None:
                self.unresolved.add(dotted)
                return
            self._add(dotted, sub)
            spec = sub
        locations = list(spec.submodule_search_locations or [])
        for n in names:  # ``from pkg import x``: x is a submodule or just an attribute of pkg
            if n == "*" or not locations:
                continue
            sub = _find(f"{dotted}.{n}", locations)
            if sub is not None:
                self._add(f"{dotted}.{n}", sub)

    def absolute(self, dotted: str, names: list[str]) -> None:
        top, *rest = dotted.split(".")
        if top in sys.stdlib_module_names or top in sys.builtin_module_names or top == "__main__":
            return
        if top in _owners():
            self.tops.add(top)
            return
        spec = _find(top, self.search)
        if spec is None:
            if top not in sys.modules:
                self.unresolved.add(dotted)
            return
        origin = _file_of(spec)
        locations = list(spec.submodule_search_locations or [])
        where = origin or (locations[0] if locations else None)
        if where is None or _is_installed_path(where):
            return
        self._chain(spec, top, rest, names)

    def relative(self, here: str, own_name: str | None, level: int, module: str | None, names: list[str]) -> None:
        """``from <level dots><module> import names`` in the file ``here``, resolved by directory.

        Modules of a known package get dotted names (``pkg.helper``); a file loaded by path has
        none, so ``from . import helper`` there names ``helper`` (its directory taken as the
        top level) and deeper levels keep their dots (``..shared``).
        """
        base = Path(here).parent
        for _ in range(level - 1):
            base = base.parent
        package = None
        if own_name is not None:
            parts = own_name.split(".")
            keep = len(parts) - (0 if Path(here).name == "__init__.py" else 1) - (level - 1)
            package = ".".join(parts[:keep]) if keep > 0 else None
        prefix = f"{package}." if package else ("" if level == 1 else "." * level)
        init = base / "__init__.py"
        if init.is_file():  # a relative import runs the package's __init__ first
            spec = importlib.util.spec_from_file_location(package or "__init__", init)
            if spec is not None:
                self._add(package or f"{prefix}__init__", spec)
        if module:
            first, *rest = module.split(".")
            spec = _find(prefix + first, [str(base)])
            if spec is None:
                self.unresolved.add("." * level + module)
                return
            self._chain(spec, prefix + first, rest, names)
            return
        for n in names:  # ``from . import helper``: a module of the package directory, or an attribute of its __init__
            spec = _find(prefix + n, [str(base)]) if n != "*" else None
            if spec is not None:
                self._add(prefix + n, spec)

    def visit(self, path: str, own_name: str | None) -> None:
        try:
            tree = ast.parse(Path(path).read_bytes(), filename=path)
        except (SyntaxError, ValueError, OSError):
            return  # the import of such a file fails on its own, with its own message
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.absolute(alias.name, [])
            elif isinstance(node, ast.ImportFrom):
                names = [a.name for a in node.names]
                if node.level == 0 and node.module:
                    self.absolute(node.module, names)
                elif node.level > 0:
                    self.relative(path, own_name, node.level, node.module, names)


def walk_imports(path: str | os.PathLike[str], *, module_name: str | None = None) -> ImportWalk:
    """The local modules ``path`` imports, transitively, with their SHA-256.

    Args:
        path: a Python source file (a ``--train-fn`` file, or the source of a ``module:function``).
        module_name: its dotted name when it was imported as a module (relative imports then
            name modules of its package); ``None`` for a file loaded by path (relative imports
            are then resolved against its directory).

    Returns:
        The local modules, the unresolved imports and the installed distributions imported.
    """
    importlib.invalidate_caches()  # a file written a moment ago (same directory mtime) is found too
    start = os.path.realpath(path)
    walker = _Walker(
        search=_search_path(Path(start).parent), modules={}, unresolved=set(), tops=set(), queue=[(start, module_name)]
    )
    seen: set[str] = set()
    while walker.queue:
        file, name = walker.queue.pop(0)
        if file in seen:
            continue
        seen.add(file)
        walker.visit(file, name)
    modules = tuple(sorted((m for p, m in walker.modules.items() if p != start), key=lambda m: (m.name, m.path)))
    return ImportWalk(
        modules=modules, unresolved=tuple(sorted(walker.unresolved)), distributions=installed_distributions(walker.tops)
    )
