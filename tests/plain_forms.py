"""Comparing plain-data forms with their types: a pinned form must fail on a tuple that became a
list or an int that became a float, which ``==`` alone lets through (shadow and teacher ids hash
these forms)."""

from __future__ import annotations

from typing import Any


def typed(x: Any) -> Any:
    """``x`` with every container and leaf tagged by its type, keys in order."""
    if isinstance(x, dict):
        return ("dict", [(k, typed(val)) for k, val in x.items()])
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [typed(val) for val in x])
    return (type(x).__name__, x)
