"""The ``strong`` accountant: advanced composition of per-step (ε, δ) bounds.

Dwork, Rothblum & Vadhan (2010, Theorem III.3) over the exact ε of each Poisson-sampled Gaussian
step (:mod:`dpaudit.privacy.composition`). Declines anything but (Poisson-sampled) Gaussian steps
under add/remove-one, where the amplification theorem it uses does not apply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpaudit.privacy.accountant_names import ACCOUNTANTS, AccountantSpec

if TYPE_CHECKING:
    from dp_accounting.dp_event import DpEvent


def decline(event: DpEvent, neighbouring: str) -> str:
    from dpaudit.privacy.composition import decline_reason

    return decline_reason(event, neighbouring)


def epsilon(event: DpEvent, delta: float, neighbouring: str) -> float:
    from dpaudit.privacy.composition import strong_epsilon

    return strong_epsilon(event, delta)


STRONG = ACCOUNTANTS.register(
    AccountantSpec(
        name="strong",
        display="strong composition",
        summary="advanced composition of per-step bounds (Dwork, Rothblum & Vadhan 2010)",
        decline=decline,
        epsilon=epsilon,
        rank=40,
    )
)
