"""Plain data for frozen spec dataclasses, read off their fields' type hints.

A *spec* says everything that determines one trained sub-model (a shadow model, a PATE
teacher); it travels to executor workers as plain data (dicts, lists, scalars: picklable and
JSON-able), and the workers rebuild it. :class:`PlainSpec` gives a frozen dataclass the
``to_dict`` / ``from_dict`` pair of the results' serialisation protocol
(:func:`dpaudit.store.save_value` / :func:`dpaudit.store.load_value`), derived from its fields
instead of written by hand, so a new field is carried by declaring it.

How each field converts, by its type hint:

========================  =====================================  ===============================
hint                      ``to_dict``                            ``from_dict``
========================  =====================================  ===============================
a dataclass               its fields, converted by these rules   rebuilt through these rules
``np.ndarray``            ``tolist()``                           an int64 array (specs hold ids)
``tuple[...]``            a list                                 a tuple
``Mapping[...]``          plain dicts and lists all the way      as stored (the spec freezes it)
                          down (:func:`dpaudit.store.thaw`);
                          a shallow ``dict`` for a field marked
                          :func:`spec_field` ``(as_given=True)``
anything else             as it is                               as it is
========================  =====================================  ===============================

Keys come out in field order. ``from_dict`` refuses a key that names no field and a missing
key of a field without a default; a missing key of a field with a default takes it, or the
value a :func:`spec_field` ``(absent=...)`` names for dicts written before the field existed.

Torch-free: the specs' modules import torch, this one does not.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

import numpy as np

from dpaudit import _validate as v
from dpaudit.store import thaw

__all__ = ["PlainSpec", "spec_field", "spec_from_dict", "spec_to_dict"]

S = TypeVar("S")

#: Field metadata keys of :func:`spec_field`.
_ABSENT = "dpaudit.specs.absent"
_AS_GIVEN = "dpaudit.specs.as_given"


def spec_field(*, absent: Any = dataclasses.MISSING, as_given: bool = False, **kwargs: Any) -> Any:
    """A dataclass field with how :func:`spec_to_dict` / :func:`spec_from_dict` treat it.

    Args:
        absent: the value a dict without this key means (one written before the field
            existed), when that is not the field's default.
        as_given: a mapping field is copied as a shallow ``dict``: its values reach the
            worker as the caller gave them (a tuple stays a tuple), rather than thawed.
        **kwargs: passed to :func:`dataclasses.field` (``default``, ``default_factory``, …).
    """
    metadata = dict(kwargs.pop("metadata", None) or {})
    if absent is not dataclasses.MISSING:
        metadata[_ABSENT] = absent
    if as_given:
        metadata[_AS_GIVEN] = True
    return dataclasses.field(metadata=metadata, **kwargs)


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    # Resolved once per class (the specs' modules use `from __future__ import annotations`, so
    # the hints are strings until read in their modules' namespaces).
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _fields(cls: type) -> tuple[dataclasses.Field[Any], ...]:
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise v.invalid_type("spec", f"spec must be a dataclass, got {cls!r}")
    return tuple(f for f in dataclasses.fields(cls) if f.init)


def _origin(hint: Any) -> Any:
    """The class a hint checks against: ``tuple`` for ``tuple[int, ...]``, ``None`` for a union."""
    if isinstance(hint, type):
        return hint
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return None
    return origin


def _is_dataclass_type(cls: Any) -> bool:
    return isinstance(cls, type) and dataclasses.is_dataclass(cls)


def _encode(value: Any, hint: Any, field: dataclasses.Field[Any]) -> Any:
    cls = _origin(hint)
    if _is_dataclass_type(cls) and dataclasses.is_dataclass(value) and not isinstance(value, type):
        return spec_to_dict(value)
    if cls is np.ndarray:
        return np.asarray(value).tolist()
    if cls is tuple:
        return list(value)
    if isinstance(cls, type) and issubclass(cls, Mapping):
        return dict(value) if field.metadata.get(_AS_GIVEN) else thaw(value)
    return value


def spec_to_dict(spec: Any) -> dict[str, Any]:
    """The plain-data form of a spec dataclass (see the module docstring for the rules).

    Raises:
        TypeError: ``spec`` is not a dataclass instance.
    """
    fields = _fields(type(spec))  # first: refuses a non-dataclass before its hints are read
    hints = _hints(type(spec))
    return {f.name: _encode(getattr(spec, f.name), hints[f.name], f) for f in fields}


def _decode(name: str, value: Any, hint: Any) -> Any:
    cls = _origin(hint)
    if _is_dataclass_type(cls):
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise v.invalid_type(name, f"{name} must be a mapping of {cls.__name__}'s fields, got {type(value).__name__}")
        return spec_from_dict(cls, value)
    if cls is np.ndarray:
        return np.asarray(value, dtype=np.int64)
    if cls is tuple:
        if not isinstance(value, (list, tuple)):
            raise v.invalid_type(name, f"{name} must be a list, got {type(value).__name__}")
        return tuple(value)
    if isinstance(cls, type) and issubclass(cls, Mapping) and not isinstance(value, Mapping):
        raise v.invalid_type(name, f"{name} must be a mapping, got {type(value).__name__}")
    return value


def spec_from_dict(cls: type[S], data: Mapping[str, Any]) -> S:
    """Inverse of :func:`spec_to_dict`: the spec ``cls`` rebuilt (and validated by it) from ``data``.

    Raises:
        ValueError: ``data`` holds a key that names no field of ``cls``, or lacks one of a
            field without a default.
        TypeError: ``data`` is not a mapping, or a value has the wrong shape for its field.
    """
    fields = _fields(cls)
    if not isinstance(data, Mapping):
        raise v.invalid_type(cls.__name__, f"{cls.__name__} must be read from a mapping, got {type(data).__name__}")
    names = [f.name for f in fields]
    unknown = [k for k in data if k not in names]
    if unknown:
        raise v.invalid(str(unknown[0]), f"{cls.__name__} has no field {unknown[0]!r} (its fields: {', '.join(names)})")
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    for f in fields:
        if f.name in data:
            kwargs[f.name] = _decode(f.name, data[f.name], hints[f.name])
        elif _ABSENT in f.metadata:
            kwargs[f.name] = f.metadata[_ABSENT]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise v.invalid(f.name, f"{cls.__name__} needs {f.name!r}, missing from {sorted(map(str, data))}")
    return cls(**kwargs)


class PlainSpec:
    """Mixin of a frozen spec dataclass: ``to_dict`` / ``from_dict`` from its fields' type hints.

    Example::

        @dataclass(frozen=True, kw_only=True)
        class Spec(PlainSpec):
            ids: np.ndarray
            shape: tuple[int, ...]
    """

    __slots__ = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain data (:func:`spec_to_dict`): picklable, JSON-able, rebuilt by :meth:`from_dict`."""
        return spec_to_dict(self)

    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, Any]) -> S:
        """The spec rebuilt from :meth:`to_dict`'s output (:func:`spec_from_dict`)."""
        return spec_from_dict(cls, data)
