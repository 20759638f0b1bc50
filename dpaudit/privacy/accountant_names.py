"""The accountant registry: every accountant's name, what it supports and how it computes ε.

One entry per accountant, an :class:`AccountantSpec` registered in :data:`ACCOUNTANTS` by a
module of its own under :mod:`dpaudit.privacy.accounting` (discovered on first lookup). Every
list of accountant names (``--accountant`` choices, a claim's by-accountant bounds, the
soundness suite) iterates this registry, so a new accountant is one module.

Each entry answers, as ``dp_accounting``'s ``PrivacyAccountant.supports(event)`` does, whether
it can bound a given event under a neighbouring relation (:meth:`AccountantSpec.supports`;
:meth:`AccountantSpec.decline_reason` says why not), and computes ε (and, where its analysis
gives one, δ) for a supported event. :func:`dpaudit.privacy.accountants.compute_epsilon_detailed`
applies what every accountant shares (validation, non-private events, the noise floor) around it.

This module and the registering modules import neither ``dp_accounting`` nor SciPy (about a
second of start-up): the command line reads the names for ``--help`` while it builds its
parser, and each entry imports its mathematics only when it is asked for a number.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dpaudit import _validate as v
from dpaudit.registry import Registry

if TYPE_CHECKING:
    from dp_accounting.dp_event import DpEvent

__all__ = ["ACCOUNTANTS", "MAX_NUM_STEPS", "AccountantSpec", "lazy"]

#: Largest step count (self-composition count) accepted; 10^18 keeps T exact in an int64.
MAX_NUM_STEPS = 10**18


@dataclass(frozen=True, kw_only=True)
class AccountantSpec:
    """One accountant: its name, what it can bound, and how.

    Attributes:
        name: the name users pass (``--accountant``) and results store (``epsilon_ub_by_accountant``).
        display: the name prose and tables print (``"PLD"``).
        summary: one line: what it computes, with its source.
        decline: ``decline(event, neighbouring)`` is ``""`` when the accountant can bound the
            (normalised, private) ``dp_accounting`` event under the neighbouring relation, else
            the reason it cannot (then no number is printed: the accountant declines).
        epsilon: ``epsilon(event, delta, neighbouring)``: ε_UB at δ of a supported event.
        delta: ``delta(event, epsilon, neighbouring)``: δ_UB at ε of a supported event, for the
            accountants whose analysis gives one; ``None`` otherwise.
        fallback: the accountant that answers, looser but still an upper bound, when this one
            cannot within its resources (``memory_estimate`` above the budget) or resolution
            (an infinite bound for a private event); ``None``: no fallback.
        memory_estimate: ``memory_estimate(event, neighbouring)``: bytes an evaluation would
            allocate, or ``None`` when unknown; ``None`` for accountants of negligible memory.
        unresolved: why an infinite ε of a private event means the accountant could not
            resolve δ (the note of the fallback it then takes); ``""``: an infinite ε is an answer.
        rank: where it stands in listings (``--help`` choices, tables); ties keep registration order.
    """

    name: str
    display: str
    summary: str
    decline: Callable[[DpEvent, str], str]
    epsilon: Callable[[DpEvent, float, str], float]
    delta: Callable[[DpEvent, float, str], float] | None = None
    fallback: str | None = None
    memory_estimate: Callable[[DpEvent, str], float | None] | None = None
    unresolved: str = ""
    rank: int = 100

    def __post_init__(self) -> None:
        for name in ("name", "display", "summary"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise v.invalid(name, f"an accountant's {name} must be a non-empty string, got {getattr(self, name)!r}")
        for name in ("decline", "epsilon"):
            if not callable(getattr(self, name)):
                raise v.invalid_type(name, f"an accountant's {name} must be callable, got {getattr(self, name)!r}")
        if self.fallback == self.name:
            raise v.invalid("fallback", f"accountant {self.name!r} cannot fall back to itself")

    def decline_reason(self, event: DpEvent, neighbouring: str = "add_or_remove_one") -> str:
        """Why this accountant cannot bound ``event`` under ``neighbouring``; ``""`` if it can."""
        return self.decline(event, neighbouring)

    def supports(self, event: DpEvent, neighbouring: str = "add_or_remove_one") -> bool:
        """Whether this accountant can bound ``event`` under ``neighbouring`` (``dp_accounting``'s ``supports``)."""
        return not self.decline(event, neighbouring)


#: Every accountant, by name, in listing order (``moments``, ``rdp``, ``pld``, ``strong``, ``naive``
#: for the built-in ones; see ``docs/privacy/accounting.md``).
ACCOUNTANTS: Registry[AccountantSpec] = Registry(
    "accountant", argument="accountant", discover=("dpaudit.privacy.accounting",), order=lambda spec: spec.rank
)


def lazy(module: str, name: str) -> Callable[..., Any]:
    """``module.name``, imported on its first call: listing the accountants loads none of their mathematics."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    return call
