"""Third-party code named on the command line: ``module:function`` or ``path/to/file.py:function``.

``--train-fn`` (a training procedure to audit) and ``--model-fn`` (a model builder to attack)
accept the same two forms, resolved here in one way. Each also has a *fingerprint* — the
SHA-256 of the source it resolves to, of every local module it imports (found statically,
:mod:`dpaudit.import_graph`), and the installed versions of the distributions they import — so a stored result made by
other code is never handed back as if it were
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
import io
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit import _validate as v
from dpaudit.import_graph import LocalModule, installed_distributions, installed_top_level, walk_imports

__all__ = [
    "FileCallable",
    "CodeFingerprint",
    "UserCodeFailed",
    "OutOfTime",
    "resolve_callable",
    "callable_fingerprint",
    "callable_label",
    "call_user",
    "code_fingerprint",
    "describe_exception",
    "names_a_file",
    "callable_attribute",
]


class UserCodeFailed(Exception):
    """Third-party code ended in a way no caller should see as its own: it raised ``SystemExit``
    (any code) or another ``BaseException`` that is not an ``Exception``, or it closed or replaced
    ``sys.stdout``/``sys.stderr``. The message names the code (``module:function``) and what it did.

    An ordinary ``Exception`` is not wrapped: callers report those as they always did.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        # Crosses back from worker processes as its message.
        return (type(self), (str(self),))


class OutOfTime(BaseException):
    """Raised into user code whose time is up (a ``BaseException``, so ``except Exception`` in
    that code does not swallow it); :func:`call_user` lets it through to whoever set the time."""


def describe_exception(exc: BaseException) -> str:
    """``Type: message`` of ``exc`` on one line, never raising: an exception whose ``__str__``
    raises (or returns a non-string) is described by its type alone."""
    name = type(exc).__name__
    try:
        text = " ".join(str(exc).split())
    except BaseException:  # user code's __str__ may raise anything; its type is what is left
        text = ""
    return f"{name}: {text}" if text else name


class _Forward(io.TextIOBase):
    """What user code sees as ``sys.stdout``/``sys.stderr``: writes go to this process's stderr.

    Its own ``close()`` closes only this stand-in, so user code that closes "stdout" cannot close
    the stream dpaudit writes its result to (the caller then reports the close as a failure).
    """

    def __init__(self, target: Any) -> None:
        super().__init__()
        self._target = target

    def write(self, text: str) -> int:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        self._target.write(text)
        return len(text)

    def flush(self) -> None:
        if not self.closed:
            self._target.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return int(self._target.fileno())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self._target, "encoding", None) or "utf-8")


def callable_label(fn: Any) -> str:
    """``file.py:function`` or ``module:function`` of ``fn``, for messages about what it did."""
    if isinstance(fn, FileCallable):
        return f"{Path(fn.path).name}:{fn.name}"
    target = getattr(fn, "func", fn)  # functools.partial
    module = getattr(target, "__module__", None) or "?"
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or type(target).__name__
    return f"{module}:{name}"


def call_user(fn: Callable[..., Any], *args: Any, label: str, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, for code dpaudit did not write, with its prints sent to stderr.

    While ``fn`` runs, ``sys.stdout`` and ``sys.stderr`` are stand-ins that write to stderr, so
    ``--json`` keeps stdout to its one JSON object whatever the code prints. ``KeyboardInterrupt``
    (a real Ctrl-C), :class:`OutOfTime` and ordinary exceptions pass through unchanged; anything else that would end
    the process or take its streams is turned into :class:`UserCodeFailed` naming ``label``.

    Raises:
        UserCodeFailed: ``fn`` raised ``SystemExit`` or another non-``Exception``
            ``BaseException``, or closed or replaced ``sys.stdout`` or ``sys.stderr``.
    """
    real_out, real_err = sys.stdout, sys.stderr
    out, err = _Forward(real_err), _Forward(real_err)

    def restore() -> list[str]:
        took = [
            f"{'closed' if ours.closed else 'replaced'} sys.{name}"
            for name, now, ours in (("stdout", sys.stdout, out), ("stderr", sys.stderr, err))
            if now is not ours or ours.closed
        ]
        sys.stdout, sys.stderr = real_out, real_err
        return took

    sys.stdout, sys.stderr = out, err
    try:
        result = fn(*args, **kwargs)
    except (KeyboardInterrupt, OutOfTime, Exception):
        restore()
        raise
    except BaseException as exc:  # SystemExit and the like, from code that is not ours
        restore()
        raise UserCodeFailed(f"{label} raised {describe_exception(exc)}") from None
    took = restore()
    if took:
        raise UserCodeFailed(f"{label} {' and '.join(took)}; only dpaudit may write its standard output")
    return result


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
                # Import runs the file's top level: its prints go to stderr, its sys.exit() is its failure.
                call_user(spec.loader.exec_module, module, label=f"{self.argument} {p.name} (at import)")
            except UserCodeFailed as exc:
                del sys.modules[mod_name]
                raise v.invalid(self.argument, str(exc)) from None
            except SyntaxError as exc:
                del sys.modules[mod_name]
                raise v.invalid(
                    self.argument, f"{self.argument}: {self.path!r} is not valid Python (line {exc.lineno}: {exc.msg})"
                ) from None
            except ImportError as exc:
                del sys.modules[mod_name]
                raise v.invalid(
                    self.argument, f"{self.argument}: {self.path!r} fails to import: {describe_exception(exc)}"
                ) from None
            except Exception as exc:
                del sys.modules[mod_name]
                raise v.invalid(
                    self.argument, f"{self.argument}: {self.path!r} raised {describe_exception(exc)} at import"
                ) from None
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
        raise v.invalid(
            argument, f"{argument} must look like 'module:function' or 'path/to/file.py:function', got {spec!r}"
        )
    target, _, name = spec.rpartition(":")
    if not target or not name:
        raise v.invalid(
            argument, f"{argument} must look like 'module:function' or 'path/to/file.py:function', got {spec!r}"
        )
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
    module = _import_user_module(target, spec=spec, argument=argument)
    return callable_attribute(module, name, label=f"{argument}={spec!r}")


def _import_user_module(target: str, *, spec: str, argument: str) -> Any:
    """``importlib.import_module(target)`` as user code (:func:`call_user`); failures name ``argument``."""
    try:
        return call_user(importlib.import_module, target, label=f"{argument} {target} (at import)")
    except UserCodeFailed as exc:
        raise v.invalid(argument, str(exc)) from None
    except ImportError as exc:
        raise v.invalid(
            argument, f"{argument}={spec!r}: cannot import module {target!r} ({describe_exception(exc)})"
        ) from None
    except Exception as exc:
        raise v.invalid(
            argument, f"{argument}={spec!r}: module {target!r} raised {describe_exception(exc)} at import"
        ) from None


def _source_path(target: str, *, spec: str, argument: str) -> str | None:
    if names_a_file(target):
        return str(Path(target).resolve())
    module = _import_user_module(target, spec=spec, argument=argument)
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
    return installed_distributions(tops)


@dataclass(frozen=True)
class CodeFingerprint:
    """What a ``module:function`` / ``file.py:function`` spec's fingerprint covers.

    Attributes:
        sha256: the fingerprint: SHA-256 over the source file, the versions of the installed
            distributions it (or a local module it imports) imports, and the SHA-256 of every
            local module it imports (:func:`dpaudit.import_graph.walk_imports`).
        source: the source file (``None`` for a module without one).
        modules: the local modules covered (the source file excluded).
        unresolved: imports found nowhere, hence not covered.
    """

    sha256: str
    source: str | None = None
    modules: tuple[LocalModule, ...] = ()
    unresolved: tuple[str, ...] = ()

    def covered(self) -> dict[str, dict[str, str]]:
        """Module name → ``{"file", "sha256"}`` of the local modules covered; files beside the
        source are named relative to its directory, others by absolute path."""
        here = Path(self.source).resolve().parent if self.source else None
        out: dict[str, dict[str, str]] = {}
        for m in self.modules:
            path = Path(m.path)
            file = path.relative_to(here).as_posix() if here is not None and path.is_relative_to(here) else str(path)
            out[m.name if m.name not in out else f"{m.name}@{m.path}"] = {"file": file, "sha256": m.sha256}
        return out


def code_fingerprint(spec: str, *, argument: str = "spec") -> CodeFingerprint:
    """The fingerprint of the code behind ``spec``, with the local modules it covers.

    The source file and, transitively, every module it imports from outside installed
    distributions and the standard library (a ``helper.py`` beside it, a package of the
    user's project) are hashed; installed distributions count by version. The imports are
    found statically before the code runs, so an import the walk cannot see (``importlib``
    with a computed name, ``exec``) is not covered: see :mod:`dpaudit.import_graph`. With no
    local module the fingerprint is what it was before modules were covered, so stored results
    of such code keep their names.

    A module without a readable source file is fingerprinted by its name and ``__version__``.

    Raises:
        ValueError: malformed spec or a module that cannot be imported.
    """
    target, _ = _split(spec, argument)
    path = _source_path(target, spec=spec, argument=argument)
    if path is None:
        module = sys.modules.get(target)
        return CodeFingerprint(
            sha256=hashlib.sha256(f"{target}=={getattr(module, '__version__', '')}".encode()).hexdigest()
        )
    try:
        source = Path(path).read_bytes()
    except OSError as exc:
        raise v.invalid(argument, f"{argument}={spec!r}: cannot read {path!r} ({exc.strerror})") from None
    distributions = _imported_distributions(source)
    module_name = None if names_a_file(target) else target
    walk = None
    if module_name is None or not installed_top_level(module_name.split(".")[0]):
        # An installed package's own code is covered by its version; a user's code by its files.
        walk = walk_imports(path, module_name=module_name)
    digest = hashlib.sha256(source)
    if walk is not None and walk.modules:
        distributions = {**walk.distributions, **distributions}
    digest.update(json.dumps(distributions, sort_keys=True).encode())
    if walk is None:
        return CodeFingerprint(sha256=digest.hexdigest(), source=path)
    if walk.modules:
        digest.update(json.dumps({m.name: m.sha256 for m in walk.modules}, sort_keys=True).encode())
    return CodeFingerprint(sha256=digest.hexdigest(), source=path, modules=walk.modules, unresolved=walk.unresolved)


def callable_fingerprint(spec: str, *, argument: str = "spec") -> str:
    """SHA-256 of the code behind ``spec`` (:func:`code_fingerprint`'s ``sha256``).

    Raises:
        ValueError: malformed spec or a module that cannot be imported.
    """
    return code_fingerprint(spec, argument=argument).sha256
