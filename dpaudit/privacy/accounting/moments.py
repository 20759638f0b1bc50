"""The ``moments`` accountant: Abadi et al.'s moments accountant (2016, Theorem 2).

RDP at the integer orders 2…33 with the standard conversion (Mironov 2017, Proposition 3);
docs/privacy/accounting.md §1–§2.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit.privacy.accountant_names import ACCOUNTANTS, AccountantSpec

if TYPE_CHECKING:
    from dp_accounting.dp_event import DpEvent


def decline(event: DpEvent, neighbouring: str) -> str:
    from dpaudit.privacy.rdp_accountant import rdp_supports

    return (
        ""
        if rdp_supports(event, neighbouring)
        else f"dp_accounting's RDP analysis does not support the event {event!r} under {neighbouring}"
    )


def epsilon(event: DpEvent, delta: float, neighbouring: str) -> float:
    from dpaudit.privacy.rdp_accountant import moments_epsilon

    return moments_epsilon(event, delta, neighbouring)


def delta(event: DpEvent, epsilon: float, neighbouring: str) -> float:
    from dpaudit.privacy.rdp_accountant import moments_delta

    return moments_delta(event, epsilon, neighbouring)


MOMENTS = ACCOUNTANTS.register(
    AccountantSpec(
        name="moments",
        display="moments accountant",
        summary="RDP at integer orders 2…33 with the standard conversion (Abadi et al. 2016)",
        decline=decline,
        epsilon=epsilon,
        delta=delta,
        rank=10,
    )
)
