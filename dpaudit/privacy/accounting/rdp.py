"""The ``rdp`` accountant: Rényi DP on a fine fractional grid with the improved conversion.

Fractional orders by the signed series of Mironov, Talwar & Zhang (2019, §3.3); conversion of
Balle et al. (2020) / Canonne, Kamath & Steinke (2020); docs/privacy/accounting.md §1–§2.
"""

from __future__ import annotations

from dpaudit.privacy.accountant_names import ACCOUNTANTS, AccountantSpec, lazy

_MATHS = "dpaudit.privacy.rdp_accountant"

RDP = ACCOUNTANTS.register(
    AccountantSpec(
        name="rdp",
        display="RDP",
        summary="RDP on a fine fractional order grid with the improved conversion (Balle et al. 2020)",
        decline=lazy(_MATHS, "rdp_decline"),
        epsilon=lazy(_MATHS, "rdp_epsilon"),
        delta=lazy(_MATHS, "rdp_delta"),
        rank=20,
    )
)
