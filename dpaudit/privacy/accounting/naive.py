"""The ``naive`` accountant: basic composition of per-step (ε, δ) bounds.

Dwork & Roth (2014, Theorem 3.16) over the exact ε of each Poisson-sampled Gaussian step
(:mod:`dpaudit.privacy.composition`); the loosest. Declines what ``strong`` declines.
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
    from dpaudit.privacy.composition import naive_epsilon

    return naive_epsilon(event, delta)


NAIVE = ACCOUNTANTS.register(
    AccountantSpec(
        name="naive",
        display="basic composition",
        summary="basic composition of per-step bounds (Dwork & Roth 2014)",
        decline=decline,
        epsilon=epsilon,
        rank=50,
    )
)
