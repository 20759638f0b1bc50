"""The ``moments`` accountant: Abadi et al.'s moments accountant (2016, Theorem 2).

RDP at the integer orders 2…33 with the standard conversion (Mironov 2017, Proposition 3);
docs/privacy/accounting.md §1–§2.
"""

from __future__ import annotations

from dpaudit.privacy.accountant_names import ACCOUNTANTS, AccountantSpec, lazy

_MATHS = "dpaudit.privacy.rdp_accountant"

MOMENTS = ACCOUNTANTS.register(
    AccountantSpec(
        name="moments",
        display="moments accountant",
        summary="RDP at integer orders 2…33 with the standard conversion (Abadi et al. 2016)",
        decline=lazy(_MATHS, "rdp_decline"),
        epsilon=lazy(_MATHS, "moments_epsilon"),
        delta=lazy(_MATHS, "moments_delta"),
        rank=10,
    )
)
