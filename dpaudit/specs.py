"""Plain data for frozen dataclasses, read off their fields' type hints.

One serialisation scheme for every stored value and every spec sent to a worker: a *spec*
says everything that determines one trained sub-model (a shadow model, a PATE teacher) and
travels to executor workers as plain data (dicts, lists, scalars: picklable and JSON-able);
a *stored value* (a record, a comparison, a job's outcome) is written as JSON by
:func:`dpaudit.store.save_value`. :class:`PlainSpec` gives a frozen dataclass the
``to_dict`` / ``from_dict`` pair of that protocol, derived from its fields instead of written
by hand, so a new field is carried by declaring it. Non-finite floats stay floats here;
:func:`dpaudit.store.to_jsonable` spells them when the JSON is written, and ``from_dict``
turns the strings back into floats.

How each field converts, by its type hint:

============================  =====================================  =============================
hint                          ``to_dict``                            ``from_dict``
============================  =====================================  =============================
a dataclass                   its own ``to_dict`` when it has one,   its own ``from_dict`` when it
                              else its fields by these rules         has one, else these rules
``np.ndarray``                ``tolist()``                           an array of the field's
                                                                     ``dtype`` (int64 by default:
                                                                     specs hold ids)
``tuple[X, ...]``             a list, items by X's rule              a tuple, items by X's rule
``Mapping[K, V]``             a dict, values by V's rule             a dict, keys by K's rule
                                                                     (``"0.01"`` → 0.01 for
                                                                     float keys), values by V's
free-form values (a          plain dicts and lists all the way      as stored (the value freezes
``Mapping[str, JsonValue]``;  down (:func:`dpaudit.store.thaw`);     it)
``object`` or ``Any`` values)
                              a shallow ``dict`` for a field marked
                              :func:`spec_field` ``(as_given=True)``
``X | None``                  ``None``, or by X's rule               likewise
an :class:`enum.Enum`         its value                              the member of that value
``float``                     as it is                               ``"inf"`` / ``"-inf"`` /
                                                                     ``"nan"`` made a float
anything else                 as it is                               as it is
============================  =====================================  =============================

Keys come out in field order, or in the order a class names in ``__spec_keys__`` (then the
fields it does not name, in field order, so a subclass's new fields follow its base's keys):
a tuple of field names and *computed* names (a property or class attribute, written but not
read back; a stored value of a plain class constant, such as a schema version or a kind, must
equal it); a ``(key, attribute)`` pair stores a computed attribute under another key. Keys that other writers store
beside a value's own (a record's notes about its
authors' code beside a certification spec) are named in ``__spec_ignored__`` and read past.
Per field, :func:`spec_field` can rename the key (``key=``), read older names
(``legacy=``), leave the key out of the dict when the value is ``None`` or empty
(``omit=``), keep the field out of the dict altogether (``stored=False``), give the value an
array ``dtype``, or supply an ``encode`` / ``decode`` pair for a shape these rules cannot
describe. ``from_dict`` refuses a key that names no field (nor a computed name) and a missing
key of a field without a default; a missing key of a field with a default takes it, or the
value a :func:`spec_field` ``(absent=...)`` names for dicts written before the field existed.

Torch-free: the specs' modules import torch, this one does not.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np

from dpaudit import _validate as v
from dpaudit.store import JsonObject, thaw

__all__ = ["PlainSpec", "spec_field", "spec_from_dict", "spec_to_dict"]

S = TypeVar("S")

#: Field metadata keys of :func:`spec_field`.
_ABSENT = "dpaudit.specs.absent"
_AS_GIVEN = "dpaudit.specs.as_given"
_KEY = "dpaudit.specs.key"
_LEGACY = "dpaudit.specs.legacy"
_OMIT = "dpaudit.specs.omit"
_STORED = "dpaudit.specs.stored"
_DTYPE = "dpaudit.specs.dtype"
_ENCODE = "dpaudit.specs.encode"
_DECODE = "dpaudit.specs.decode"

_OMISSIONS = ("none", "empty")
_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def spec_field(
    *,
    absent: Any = dataclasses.MISSING,
    as_given: bool = False,
    key: str | None = None,
    legacy: tuple[str, ...] = (),
    omit: str | None = None,
    stored: bool = True,
    dtype: Any = None,
    encode: Callable[[Any], Any] | None = None,
    decode: Callable[[Any], Any] | None = None,
    **kwargs: Any,
) -> Any:
    """A dataclass field with how :func:`spec_to_dict` / :func:`spec_from_dict` treat it.

    Args:
        absent: the value a dict without this key means (one written before the field
            existed), when that is not the field's default.
        as_given: a mapping field is copied as a shallow ``dict``: its values reach the
            worker as the caller gave them (a tuple stays a tuple), rather than thawed.
        key: the dict key, when it is not the field's name.
        legacy: older keys of the field, read when ``key`` is absent (never written).
        omit: ``"none"``: the key is left out when the value is ``None``; ``"empty"``: when
            the value has no items (so values stored before the field existed keep their bytes).
        stored: ``False``: the field is neither written nor read (it takes its default).
        dtype: the NumPy dtype an array field is read back as (int64 when not given).
        encode: the stored form of the value, for a shape the hint rules cannot describe.
        decode: the value from its stored form (the inverse of ``encode``).
        **kwargs: passed to :func:`dataclasses.field` (``default``, ``default_factory``, …).

    Raises:
        ValueError: ``omit`` is not one of ``"none"``, ``"empty"``.
    """
    if omit is not None and omit not in _OMISSIONS:
        raise v.invalid("omit", f"omit must be one of {', '.join(_OMISSIONS)}, got {omit!r}")
    metadata = dict(kwargs.pop("metadata", None) or {})
    if absent is not dataclasses.MISSING:
        metadata[_ABSENT] = absent
    if as_given:
        metadata[_AS_GIVEN] = True
    if key is not None:
        metadata[_KEY] = key
    if legacy:
        metadata[_LEGACY] = tuple(legacy)
    if omit is not None:
        metadata[_OMIT] = omit
    if not stored:
        metadata[_STORED] = False
    if dtype is not None:
        metadata[_DTYPE] = np.dtype(dtype)
    if encode is not None:
        metadata[_ENCODE] = encode
    if decode is not None:
        metadata[_DECODE] = decode
    return dataclasses.field(metadata=metadata, **kwargs)


class _Layout(typing.NamedTuple):
    """A class's stored shape, read once: its hints, its stored fields and its key order."""

    hints: dict[str, object]  # field name → its resolved type hint
    fields: dict[str, dataclasses.Field[Any]]  # stored init fields, by name
    order: tuple[str, ...]  # field names and computed keys, in the dict's order
    computed: dict[str, str]  # computed key → the attribute it is read from
    keys: dict[str, str]  # dict key (current and legacy) → field name


_LAYOUTS: dict[type, _Layout] = {}


def _key(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get(_KEY, f.name))


def _layout(cls: type) -> _Layout:
    layout = _LAYOUTS.get(cls)
    if layout is not None:
        return layout
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise v.invalid_type("spec", f"spec must be a dataclass, got {cls!r}")
    # Resolved once per class (the modules use `from __future__ import annotations`, so the
    # hints are strings until read in their modules' namespaces).
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init and f.metadata.get(_STORED, True)}
    # The declared order first (a subclass inherits its base's), then any stored field it does not name.
    # A (key, attribute) pair stores a computed attribute under another key.
    entries = [(e, e) if isinstance(e, str) else tuple(e) for e in getattr(cls, "__spec_keys__", None) or ()]
    declared = tuple(key for key, _ in entries)
    order = declared + tuple(n for n in fields if n not in declared)
    computed = {key: attribute for key, attribute in entries if key not in fields}
    for attribute in computed.values():
        if not hasattr(cls, attribute):
            raise TypeError(
                f"{cls.__name__}.__spec_keys__ names {attribute!r}, neither a stored field nor an attribute"
            )
    keys: dict[str, str] = {}
    for f in fields.values():
        keys[_key(f)] = f.name
        for old in f.metadata.get(_LEGACY, ()):
            keys.setdefault(old, f.name)
    layout = _LAYOUTS[cls] = _Layout(hints, fields, order, computed, keys)
    return layout


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


def _optional_arm(hint: Any) -> Any:
    """``X`` for ``X | None`` (one arm besides ``None``), else ``None``."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return None
    arms = [a for a in typing.get_args(hint) if a is not type(None)]
    return arms[0] if len(arms) == 1 else None


def _mapping_args(hint: Any) -> tuple[Any, Any]:
    args = typing.get_args(hint)
    return (args[0], args[1]) if len(args) == 2 else (Any, Any)


#: The classes :data:`dpaudit.store.JsonValue`'s arms check against. Its hint is compared by them,
#: not by identity: resolving a recursive alias in a field's hint expands it one level.
_JSON_ARMS = frozenset({str, int, float, bool, type(None), list, dict})


def _free_form(hint: Any) -> bool:
    """Whether a mapping's value hint says nothing the codec could convert by (JSON as it is)."""
    if hint is Any or hint is object:
        return True
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return False
    return {_origin(arm) for arm in typing.get_args(hint)} == _JSON_ARMS


def _encode(value: Any, hint: Any, as_given: bool = False) -> Any:
    if value is None:
        return None
    arm = _optional_arm(hint)
    if arm is not None:
        return _encode(value, arm)
    cls = _origin(hint)
    if _is_dataclass_type(cls) and dataclasses.is_dataclass(value) and not isinstance(value, type):
        to_dict = getattr(value, "to_dict", None)
        return to_dict() if callable(to_dict) else spec_to_dict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if cls is np.ndarray:
        return np.asarray(value).tolist()
    if cls is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return [_encode(x, args[0]) for x in value]
        if args and len(args) == len(value):
            return [_encode(x, a) for x, a in zip(value, args, strict=True)]
        return list(value)
    if isinstance(cls, type) and issubclass(cls, Mapping):
        if as_given:
            return dict(value)
        _, value_hint = _mapping_args(hint)
        if _free_form(value_hint):
            return thaw(value)
        return {k: _encode(x, value_hint) for k, x in value.items()}
    return value


def _decode(name: str, value: Any, hint: Any, dtype: Any = None) -> Any:
    if value is None:
        return None
    arm = _optional_arm(hint)
    if arm is not None:
        return _decode(name, value, arm, dtype)
    cls = _origin(hint)
    if _is_dataclass_type(cls):
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise v.invalid_type(
                name, f"{name} must be a mapping of {cls.__name__}'s fields, got {type(value).__name__}"
            )
        from_dict = getattr(cls, "from_dict", None)
        return from_dict(value) if callable(from_dict) else spec_from_dict(cls, value)
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        try:
            return cls(value)
        except ValueError:
            raise v.invalid(
                name, f"{name} must be one of {', '.join(repr(m.value) for m in cls)}, got {v.short(value)}"
            ) from None
    if cls is np.ndarray:
        return _array(name, value, np.dtype(dtype if dtype is not None else _hint_dtype(hint)))
    if cls is float:
        # The strings to_jsonable writes for non-finite floats; an int stays an int, so that a
        # value read and written again keeps its bytes ("1" is not "1.0").
        return _NONFINITE.get(value, value) if isinstance(value, str) else value
    if cls is tuple:
        if not isinstance(value, (list, tuple)):
            raise v.invalid_type(name, f"{name} must be a list, got {type(value).__name__}")
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_decode(f"{name}[{i}]", x, args[0]) for i, x in enumerate(value))
        if args and len(args) == len(value):
            return tuple(_decode(f"{name}[{i}]", x, a) for i, (x, a) in enumerate(zip(value, args, strict=True)))
        return tuple(value)
    if isinstance(cls, type) and issubclass(cls, Mapping):
        if not isinstance(value, Mapping):
            raise v.invalid_type(name, f"{name} must be a mapping, got {type(value).__name__}")
        key_hint, value_hint = _mapping_args(hint)
        if key_hint is Any and _free_form(value_hint):
            return value
        return {_decode_key(name, k, key_hint): _decode(f"{name}[{k!r}]", x, value_hint) for k, x in value.items()}
    return value


def _array(name: str, value: Any, dtype: np.dtype[Any]) -> np.ndarray:
    # Cast only within the kind (bools to ints, ints to floats): 1.5 read as an id would be truncated silently.
    arr = np.asarray(value)
    if arr.size and not np.can_cast(arr.dtype, dtype, casting="same_kind"):
        raise v.invalid_type(name, f"{name} must hold {dtype} values, got {arr.dtype} ({v.short(value)})")
    return arr.astype(dtype)


def _decode_key(name: str, key: Any, hint: Any) -> Any:
    # JSON keys are strings: a float- or int-keyed mapping is read back through its key type.
    if hint in (float, int) and isinstance(key, str):
        try:
            return hint(key)
        except ValueError:
            raise v.invalid(name, f"{name} must have {hint.__name__} keys, got {key!r}") from None
    return key


def _hint_dtype(hint: Any) -> Any:
    # numpy.typing.NDArray[np.float64] is np.ndarray[shape, np.dtype[np.float64]].
    args = typing.get_args(hint)
    if len(args) == 2:
        dtype_args = typing.get_args(args[1])
        if dtype_args and isinstance(dtype_args[0], type) and issubclass(dtype_args[0], np.generic):
            return np.dtype(dtype_args[0])
    return np.int64


def _omitted(value: Any, how: str | None) -> bool:
    if how == "none":
        return value is None
    if how == "empty":
        return value is None or (np.asarray(value).size == 0 if isinstance(value, np.ndarray) else len(value) == 0)
    return False


def spec_to_dict(spec: object) -> JsonObject:
    """The plain-data form of a dataclass (see the module docstring for the rules).

    Raises:
        TypeError: ``spec`` is not a dataclass instance.
    """
    layout = _layout(type(spec))  # refuses a non-dataclass before its hints are read
    out: JsonObject = {}
    for name in layout.order:
        f = layout.fields.get(name)
        if f is None:  # a computed key
            out[name] = _encode(getattr(spec, layout.computed[name]), Any)
            continue
        value = getattr(spec, name)
        if _omitted(value, f.metadata.get(_OMIT)):
            continue
        encode = f.metadata.get(_ENCODE)
        out[_key(f)] = (
            encode(value) if encode is not None else _encode(value, layout.hints[name], bool(f.metadata.get(_AS_GIVEN)))
        )
    return out


def _computed_check(cls: type, key: str, attribute: str, stored: Any) -> None:
    # A class constant (a kind, a schema version) must match; a property is derived, not read.
    attr = _class_attribute(cls, attribute)
    if isinstance(attr, (property, types.FunctionType, classmethod, staticmethod)):
        return
    if stored != attr:
        raise v.invalid(key, f"{cls.__name__} {key} must be {attr!r}, got {v.short(stored)}")


def _class_attribute(cls: type, name: str) -> Any:
    for k in cls.__mro__:
        if name in k.__dict__:
            return k.__dict__[name]
    return None


def spec_from_dict(cls: type[S], data: Mapping[str, object]) -> S:
    """Inverse of :func:`spec_to_dict`: ``cls`` rebuilt (and validated by it) from ``data``.

    Raises:
        ValueError: ``data`` holds a key that names no field of ``cls``, lacks one of a field
            without a default, or holds a computed constant (a kind, a version) of another value.
        TypeError: ``data`` is not a mapping, or a value has the wrong shape for its field.
    """
    layout = _layout(cls)
    if not isinstance(data, Mapping):
        raise v.invalid_type(cls.__name__, f"{cls.__name__} must be read from a mapping, got {type(data).__name__}")
    computed = layout.computed
    ignored = getattr(cls, "__spec_ignored__", ())
    unknown = [k for k in data if k not in layout.keys and k not in computed and k not in ignored]
    if unknown:
        names = [_key(f) for f in layout.fields.values()]
        raise v.invalid(str(unknown[0]), f"{cls.__name__} has no field {unknown[0]!r} (its fields: {', '.join(names)})")
    for key, attribute in computed.items():
        if key in data:
            _computed_check(cls, key, attribute, data[key])
    kwargs: dict[str, object] = {}
    for name, f in layout.fields.items():
        found = next((k for k in (_key(f), *f.metadata.get(_LEGACY, ())) if k in data), None)
        if found is not None:
            value = data[found]
            decode = f.metadata.get(_DECODE)
            kwargs[name] = (
                decode(value)
                if decode is not None
                else _decode(found, value, layout.hints[name], f.metadata.get(_DTYPE))
            )
        elif _ABSENT in f.metadata:
            kwargs[name] = f.metadata[_ABSENT]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise v.invalid(_key(f), f"{cls.__name__} needs {_key(f)!r}, missing from {sorted(map(str, data))}")
    return cls(**kwargs)


class PlainSpec:
    """Mixin of a frozen dataclass: ``to_dict`` / ``from_dict`` from its fields' type hints.

    Example::

        @dataclass(frozen=True, kw_only=True)
        class Spec(PlainSpec):
            ids: np.ndarray
            shape: tuple[int, ...]
            note: str | None = spec_field(default=None, omit="none")
    """

    __slots__ = ()

    def to_dict(self) -> JsonObject:
        """Plain data (:func:`spec_to_dict`): picklable, JSON-able, rebuilt by :meth:`from_dict`."""
        return spec_to_dict(self)

    @classmethod
    def from_dict(cls: type[S], data: Mapping[str, object]) -> S:
        """The value rebuilt from :meth:`to_dict`'s output (:func:`spec_from_dict`)."""
        return spec_from_dict(cls, data)
