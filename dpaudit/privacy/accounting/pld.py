"""The ``pld`` accountant: privacy loss distributions, ``dp_accounting``'s pessimistic estimate.

Koskela et al. (2020); Doroshenko et al. (2022). The tightest in practice; its grid's memory is
estimated before anything is allocated, and beyond the budget (or below the δ its truncation
resolves) ``rdp`` answers instead (docs/privacy/accounting.md §2).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit.privacy.accountant_names import ACCOUNTANTS, AccountantSpec

if TYPE_CHECKING:
    from dp_accounting.dp_event import DpEvent


def decline(event: DpEvent, neighbouring: str) -> str:
    from dpaudit.privacy.pld_accountant import pld_supports

    return (
        ""
        if pld_supports(event, neighbouring)
        else f"dp_accounting's PLD analysis does not support the event {event!r} under {neighbouring}"
    )


def epsilon(event: DpEvent, delta: float, neighbouring: str) -> float:
    from dpaudit.privacy.pld_accountant import pld_epsilon

    return pld_epsilon(event, delta, neighbouring)


def delta(event: DpEvent, epsilon: float, neighbouring: str) -> float:
    from dpaudit.privacy.pld_accountant import pld_delta

    return pld_delta(event, epsilon, neighbouring)


def memory_estimate(event: DpEvent, neighbouring: str) -> float | None:
    from dpaudit.privacy.pld_accountant import pld_memory_estimate

    return pld_memory_estimate(event, neighbouring=neighbouring)


PLD = ACCOUNTANTS.register(
    AccountantSpec(
        name="pld",
        display="PLD",
        summary="privacy loss distributions, dp_accounting's pessimistic estimate (Koskela et al. 2020)",
        decline=decline,
        epsilon=epsilon,
        delta=delta,
        fallback="rdp",
        memory_estimate=memory_estimate,
        unresolved="below its truncated tail mass",
        rank=30,
    )
)
