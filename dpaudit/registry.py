"""One registry type for every kind of part: defenses, attacks, datasets, models, claim kinds,
audit procedures and report kinds.

A part registers itself where it is defined, with a module-level ``REGISTRY.register(spec)``
or the decorator form ``@REGISTRY.register`` on a spec-returning factory — the style Opacus
uses for its grad samplers and accountants. Everything that lists parts (the CLI's flags and
choices, ``compare``'s grid schema, ``report``, the hostile-input tables, the contract suites)
iterates a registry, so a new part is one module and no edit anywhere else.

A registry may name the packages whose modules define its parts (``discover=("attacks",)``):
on first lookup it imports every module under them once, so a module dropped into the package
registers itself without being listed anywhere. Imports go by name at run time
(:func:`importlib.import_module`), which keeps the core free of static imports of
``attacks``/``defenses``/``reports`` (the import rule, ``docs/architecture.md``).

Tests add a part for their own duration with :meth:`Registry.temporarily`, or register one
from a temporary module and remove it with :meth:`Registry.unregister`.

Torch-free.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from dpaudit import _validate as v

__all__ = ["Registry", "UnknownPart"]

T = TypeVar("T")


class UnknownPart(v.InvalidArgument, KeyError):
    """A name that no registered part carries; the message lists the registered ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class Registry(MutableMapping[str, T], Generic[T]):
    """Named parts of one kind, in registration order.

    Args:
        kind: what the parts are, for messages (``"defense"``, ``"membership attack"``).
        argument: the user-facing argument a lookup answers (``"defense"``, ``"--attack"``),
            named by the error an unknown name raises.
        key: the name a spec registers under (default: its ``name`` attribute).
        discover: packages whose modules are imported once, on first lookup, so that every
            part defined in them has registered itself.
        order: where a part stands in listings (help choices, error messages, tables), by a
            key of its spec; ties keep registration order. Without it, registration order —
            which, for discovered parts, follows module names rather than what a reader expects
            first (a baseline before its variants).
    """

    def __init__(
        self,
        kind: str,
        *,
        argument: str | None = None,
        key: Callable[[T], str] | None = None,
        discover: tuple[str, ...] = (),
        order: Callable[[T], Any] | None = None,
    ) -> None:
        self.kind = kind
        self.argument = argument or kind
        self._key = key or (lambda spec: spec.name)  # type: ignore[attr-defined]
        self._discover = discover
        self._order = order
        self._parts: dict[str, T] = {}
        self._discovered = not discover
        self._lock = threading.RLock()

    # -- registration -------------------------------------------------------------------------

    def register(self, spec: T, *, replace: bool = False) -> T:
        """Add ``spec`` under its key and return it unchanged (so it works as a decorator too).

        Raises:
            ValueError: another part already holds the key and ``replace`` is false (two
                modules claiming one name is a bug, not an override).
        """
        name = self._key(spec)
        if not isinstance(name, str) or not name:
            raise v.invalid("name", f"a {self.kind} must register under a non-empty string name; got {name!r}")
        with self._lock:
            held = self._parts.get(name)
            if held is not None and held is not spec and not replace:
                raise v.invalid(
                    "name",
                    f"{self.kind} {name!r} is already registered (by {_origin(held)}); got a "
                    f"second one from {_origin(spec)}",
                )
            self._parts[name] = spec
        return spec

    def unregister(self, name: str) -> T:
        """Remove and return the part registered under ``name``."""
        with self._lock:
            if name not in self._parts:
                raise self._unknown(name)
            return self._parts.pop(name)

    @contextmanager
    def temporarily(self, spec: T) -> Iterator[T]:
        """Register ``spec`` for the duration of a ``with`` block (tests), restoring what was there."""
        self._load()
        name = self._key(spec)
        previous = self._parts.get(name)
        self.register(spec, replace=True)
        try:
            yield spec
        finally:
            with self._lock:
                if previous is None:
                    self._parts.pop(name, None)
                else:
                    self._parts[name] = previous

    # -- lookup -------------------------------------------------------------------------------

    def _load(self) -> None:
        if self._discovered:
            return
        with self._lock:
            if self._discovered:
                return
            # Set first: a discovered module that looks a part up while it is being imported
            # sees the parts registered so far instead of recursing into discovery.
            self._discovered = True
            for package in self._discover:
                _import_all(package)

    def _unknown(self, name: object) -> UnknownPart:
        known = ", ".join(self._listed()) or "none"
        return UnknownPart(
            f"{self.argument} must name a registered {self.kind} ({known}); got {name!r}", argument=self.argument
        )

    def __getitem__(self, name: str) -> T:
        self._load()
        try:
            return self._parts[name]
        except (KeyError, TypeError):
            raise self._unknown(name) from None

    def __setitem__(self, name: str, spec: T) -> None:
        # Mapping-style assignment (``monkeypatch.setitem``) replaces, as dict assignment does.
        self._load()
        if self._key(spec) != name:
            raise v.invalid(
                "name", f"a {self.kind} registered as {name!r} must carry that name; got {self._key(spec)!r}"
            )
        self.register(spec, replace=True)

    def __delitem__(self, name: str) -> None:
        self.unregister(name)

    def _listed(self) -> list[str]:
        if self._order is None:
            return list(self._parts)
        order = self._order
        return [name for name, _ in sorted(self._parts.items(), key=lambda item: order(item[1]))]

    def __iter__(self) -> Iterator[str]:
        self._load()
        return iter(self._listed())

    def __len__(self) -> int:
        self._load()
        return len(self._parts)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._parts

    def names(self) -> tuple[str, ...]:
        """Registered names in registration order."""
        self._load()
        return tuple(self._listed())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, parts={list(self._parts)!r})"


def _origin(spec: object) -> str:
    module = getattr(spec, "__module__", None) or type(spec).__module__
    return str(module)


def _import_all(package: str) -> None:
    """Import ``package`` and every module beneath it (each registers the parts it defines)."""
    root = importlib.import_module(package)
    paths = getattr(root, "__path__", None)
    if paths is None:
        return
    for info in pkgutil.walk_packages(paths, prefix=f"{package}."):
        importlib.import_module(info.name)
