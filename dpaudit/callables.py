"""Third-party code named on the command line: ``module:function`` or ``path/to/file.py:function``.

``--train-fn`` (a training procedure to audit) and ``--model-fn`` (a model builder to attack)
accept the same two forms, resolved here in one way. Each also has a *fingerprint* — the
SHA-256 of the source it resolves to, plus the installed versions of the distributions that
source imports — so a stored result made by other code is never handed back as if it were
this code's (issue "Results that cannot lie": reuse keyed by content, never by name).

Torch-free.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit import _validate as v

__all__ = ["FileCallable", "resolve_callable", "callable_fingerprint", "names_a_file", "callable_attribute"]


def names_a_file(target: str) -> bool:
    """Whether the part before ``:`` of a spec is a file path rather than a module name."""
    return target.endswith(".py") or os.sep in target or "/" in target


def callable_attribute(obj: Any, attr_path: str, *, label: str) -> Any:
    """``obj.a.b`` for ``attr_path`` ``"a.b"``, which must be callable; errors start with ``label``.

    Raises:
        ValueError: an attribute is missing or the result is not callable.
    """
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise v.invalid(label, f"{label}: no attribute {part!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise v.invalid(label, f"{label}: {attr_path!r} is not callable")
    return obj


@dataclass(frozen=True)
class FileCallable:
    """``path/to/file.py:function``, loaded lazily (picklable by path, so workers can load it).

    Attributes:
        path: absolute path of the Python file.
        name: the function (dotted attribute path) in it.
        argument: the flag it came from, for error messages.
    """

    path: str
    name: str
    argument: str = "spec"

    def resolve(self) -> Callable[..., Any]:
        p = Path(self.path)
        if not p.is_file():
            raise v.invalid(self.argument, f"{self.argument}: file {self.path!r} does not exist")
        # Keyed by path AND content: an edited file is a different module, never the cached old one.
        mod_name = "_dpaudit_user_" + hashlib.sha256(str(p.resolve()).encode() + p.read_bytes()).hexdigest()[:16]
        module = sys.modules.get(mod_name)
        if module is None:
            spec = importlib.util.spec_from_file_location(mod_name, p)
            if spec is None or spec.loader is None:
                raise v.invalid(self.argument, f"{self.argument}: cannot load {self.path!r} as a Python module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module
            try:
                spec.loader.exec_module(module)
            except SyntaxError as exc:
                del sys.modules[mod_name]
                raise v.invalid(self.argument, f"{self.argument}: {self.path!r} is not valid Python (line {exc.lineno}: {exc.msg})") from None
            except ImportError as exc:
                del sys.modules[mod_name]
                raise v.invalid(self.argument, f"{self.argument}: {self.path!r} fails to import: {exc}") from None
        return callable_attribute(module, self.name, label=f"{self.argument}={self.path}:{self.name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        # ``inspect.signature`` reads this first: checks of what the user's function accepts
        # (e.g. the optional ``initial_state`` of worst-case audits) see it, not ``*args, **kwargs``.
        return inspect.signature(self.resolve())


def _split(spec: Any, argument: str) -> tuple[str, str]:
    if not isinstance(spec, str) or ":" not in spec:
        raise v.invalid(argument, f"{argument} must look like 'module:function' or 'path/to/file.py:function', got {spec!r}")
    target, _, name = spec.rpartition(":")
    if not target or not name:
        raise v.invalid(argument, f"{argument} must look like 'module:function' or 'path/to/file.py:function', got {spec!r}")
    return target, name


def resolve_callable(spec: str, *, argument: str = "spec") -> Callable[..., Any]:
    """The callable named by ``module:function`` or ``path/to/file.py:function``.

    A file is returned as a :class:`FileCallable` (it travels to worker processes by path);
    it is loaded once here so a bad file fails at once with one line.

    Raises:
        ValueError: malformed spec, missing file or module, or no such callable (names
            ``argument`` and the value).
    """
    target, name = _split(spec, argument)
    if names_a_file(target):
        fc = FileCallable(str(Path(target).resolve()), name, argument)
        fc.resolve()
        return fc
    try:
        module = importlib.import_module(target)
    except ImportError as exc:
        raise v.invalid(argument, f"{argument}={spec!r}: cannot import module {target!r} ({exc})") from None
    return callable_attribute(module, name, label=f"{argument}={spec!r}")


def _source_path(target: str) -> str | None:
    if names_a_file(target):
        return str(Path(target).resolve())
    module = importlib.import_module(target)
    try:
        return inspect.getsourcefile(module)
    except TypeError:  # a built-in module has no source
        return None


def _imported_distributions(source: bytes) -> dict[str, str]:
    """Installed versions of the top-level packages ``source`` imports (where they can be found)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    tops: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            tops.add(node.module.split(".")[0])
    owners = importlib.metadata.packages_distributions()
    versions: dict[str, str] = {}
    for top in sorted(tops):
        for dist in owners.get(top, ()):
            try:
                versions[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                continue
    return versions


def callable_fingerprint(spec: str, *, argument: str = "spec") -> str:
    """SHA-256 of the code behind ``spec``: its source file and the versions of what it imports.

    A module without a readable source file is fingerprinted by its name and ``__version__``.

    Raises:
        ValueError: malformed spec or a module that cannot be imported.
    """
    target, _ = _split(spec, argument)
    try:
        path = _source_path(target)
    except ImportError as exc:
        raise v.invalid(argument, f"{argument}={spec!r}: cannot import module {target!r} ({exc})") from None
    if path is None:
        module = sys.modules.get(target)
        return hashlib.sha256(f"{target}=={getattr(module, '__version__', '')}".encode()).hexdigest()
    try:
        source = Path(path).read_bytes()
    except OSError as exc:
        raise v.invalid(argument, f"{argument}={spec!r}: cannot read {path!r} ({exc.strerror})") from None
    digest = hashlib.sha256(source)
    digest.update(json.dumps(_imported_distributions(source), sort_keys=True).encode())
    return digest.hexdigest()
