"""Shared validators for user-facing arguments.

Every public function checks its inputs through these helpers so that bad input always
raises a ``ValueError`` or ``TypeError`` whose message names the argument and the value it
got (docs/architecture.md, "Style"). The error is an :class:`InvalidArgument` (a ``ValueError``; its
:class:`InvalidArgumentType` twin is also a ``TypeError``) that carries the argument's name, so
the CLI can tell a user's bad input (exit status 2, one line naming the flag) from a bug inside
the library (any other exception: exit status 1, "internal error"). A check written by hand
raises through :func:`invalid` / :func:`invalid_type` for the same reason.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np


class InvalidArgument(ValueError):
    """Bad input: an argument (or a value read from a user's file) that a check refused.

    Attributes:
        argument: the parameter's name as the library spells it (``num_steps``), or a flag
            (``--votes``), a grid key (``defenses[0].defense``), or the path of the user's
            file a check refused (the CLI names the flag that led to it), where known;
            the CLI reports it as the flag of the verb being run. ``None`` when unknown. A
            subclass may name a default (``RunInUse`` is always about ``out``).
    """

    argument: str | None = None

    def __init__(self, message: str = "", *, argument: str | None = None) -> None:
        super().__init__(message)
        if argument is not None:
            self.argument = argument  # in __dict__, so it survives pickling (process pools)


class InvalidArgumentType(InvalidArgument, TypeError):
    """Bad input of the wrong type; also a ``TypeError``, which is what callers expect for it."""


def invalid(name: str | None, message: str) -> InvalidArgument:
    """The error to raise for a bad ``name``: ``raise v.invalid("lot_size", f"lot_size must ...")``."""
    return InvalidArgument(message, argument=name)


def invalid_type(name: str | None, message: str) -> InvalidArgumentType:
    """The error to raise for an argument of the wrong type (a ``TypeError`` too)."""
    return InvalidArgumentType(message, argument=name)


def _fmt(value: Any) -> str:
    return repr(value)


def short(value: Any, limit: int = 80) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages about values read from files."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def real(name: str, value: Any) -> float:
    """Returns ``value`` as a finite-or-infinite float, rejecting bools, strings and NaN."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise invalid_type(name, f"{name} must be a real number, got {_fmt(value)}")
    out = float(value)
    if math.isnan(out):
        raise invalid(name, f"{name} must not be NaN, got {_fmt(value)}")
    return out


def positive(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """Validates ``value > 0`` (finite unless ``allow_inf``)."""
    out = real(name, value)
    if not out > 0 or (math.isinf(out) and not allow_inf):
        raise invalid(name, f"{name} must be {'> 0' if allow_inf else 'finite and > 0'}, got {_fmt(value)}")
    return out


def non_negative(name: str, value: Any) -> float:
    """Validates a finite ``value >= 0``."""
    out = real(name, value)
    if not (out >= 0 and math.isfinite(out)):
        raise invalid(name, f"{name} must be finite and >= 0, got {_fmt(value)}")
    return out


def open_unit(name: str, value: Any) -> float:
    """Validates ``0 < value < 1`` (a δ, a confidence, a failure probability)."""
    out = real(name, value)
    if not 0.0 < out < 1.0:
        raise invalid(name, f"{name} must lie in (0, 1), got {_fmt(value)}")
    return out


def half_open_unit(name: str, value: Any) -> float:
    """Validates ``0 < value <= 1`` (a sampling rate)."""
    out = real(name, value)
    if not 0.0 < out <= 1.0:
        raise invalid(name, f"{name} must lie in (0, 1], got {_fmt(value)}")
    return out


def unit_interval_open_right(name: str, value: Any) -> float:
    """A real in [0, 1) (e.g. momentum)."""
    x = real(name, value)
    if not 0.0 <= x < 1.0:
        raise invalid(name, f"{name} must lie in [0, 1), got {_fmt(value)}")
    return x


def integer(name: str, value: Any, *, minimum: int | None = None) -> int:
    """Validates an integer (bools rejected), optionally ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise invalid_type(name, f"{name} must be an integer, got {_fmt(value)}")
    out = int(value)
    if minimum is not None and out < minimum:
        raise invalid(name, f"{name} must be an integer >= {minimum}, got {_fmt(value)}")
    return out


def choice(name: str, value: Any, options: Iterable[str]) -> str:
    """Validates that ``value`` is one of ``options``."""
    opts = tuple(options)
    if value not in opts:
        raise invalid(name, f"{name} must be one of {', '.join(opts)}; got {_fmt(value)}")
    return value


def mapping_with(name: str, value: Any, keys: Iterable[str]) -> Any:
    """Validates that ``value`` is a mapping holding every key of ``keys`` (stored results)."""
    from collections.abc import Mapping

    if not isinstance(value, Mapping):
        raise invalid_type(name, f"{name} must be a mapping, got {type(value).__name__}")
    missing = [k for k in keys if k not in value]
    if missing:
        raise invalid(name, f"{name} is missing keys {missing}")
    return value


def id_array(name: str, values: Any) -> np.ndarray:
    """A 1-D int64 array of sample ids; rejects floats, bools and non-numbers."""
    if hasattr(values, "detach") and hasattr(values, "numpy"):  # a torch tensor, without importing torch
        values = values.detach().cpu().numpy()
    if isinstance(values, (str, bytes)) or isinstance(values, numbers.Number):
        raise invalid_type(name, f"{name} must be a 1-D sequence of integer sample ids, got {values!r}")
    arr = np.asarray(values)
    if arr.size == 0:
        return np.zeros(0, dtype=np.int64)
    if arr.ndim != 1:
        raise invalid(name, f"{name} must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind not in "iu":
        raise invalid_type(name, f"{name} must hold integer sample ids, got dtype {arr.dtype} ({preview(arr)})")
    return arr.astype(np.int64, copy=False)


def all_unique(arr: np.ndarray) -> bool:
    if arr.size < 2 or bool(np.all(arr[1:] > arr[:-1])):  # the usual case: increasing ids
        return True
    return np.unique(arr).size == arr.size


def preview(arr: np.ndarray, k: int = 5) -> str:
    items = arr[:k].tolist()
    return repr(items)[:-1] + (", ...]" if arr.size > k else "]")


def sorted_id_set(name: str, values: Any) -> np.ndarray:
    """Validated, sorted, read-only int64 array of distinct non-negative sample ids."""
    if isinstance(values, (list, tuple)) and any(isinstance(x, bool) for x in values):
        raise invalid_type(name, f"{name} must hold integer sample ids, got a bool")
    arr = id_array(name, values)
    if arr.size and arr.min() < 0:
        raise invalid(name, f"{name} must hold non-negative sample ids, got {int(arr.min())}")
    if np.unique(arr).size != arr.size:
        raise invalid(name, f"{name} contains duplicate sample ids")
    arr = np.sort(arr)
    arr.flags.writeable = False
    return arr
