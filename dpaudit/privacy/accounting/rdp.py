"""The ``rdp`` accountant: Rényi DP on a fine fractional grid with the improved conversion.

Fractional orders by the signed series of Mironov, Talwar & Zhang (2019, §3.3); conversion of
Balle et al. (2020) / Canonne, Kamath & Steinke (2020); docs/privacy/accounting.md §1–§2.
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
    from dpaudit.privacy.rdp_accountant import rdp_epsilon

    return rdp_epsilon(event, delta, neighbouring)


def delta(event: DpEvent, epsilon: float, neighbouring: str) -> float:
    from dpaudit.privacy.rdp_accountant import rdp_delta

    return rdp_delta(event, epsilon, neighbouring)


RDP = ACCOUNTANTS.register(
    AccountantSpec(
        name="rdp",
        display="RDP",
        summary="RDP on a fine fractional order grid with the improved conversion (Balle et al. 2020)",
        decline=decline,
        epsilon=epsilon,
        delta=delta,
        rank=20,
    )
)
