"""The accountants' names and the largest step count they accept, without the accountants.

The command line lists these in ``--help`` and checks ``--num-steps`` while it builds its parser;
importing :mod:`dpaudit.privacy.accountants` for two constants would load ``dp_accounting`` and
SciPy's signal package first (about 0.8 s), so ``dpaudit epsilon --help`` reads them from here.
"""

from __future__ import annotations

__all__ = ["ACCOUNTANTS", "MAX_NUM_STEPS"]

#: The named accountants, loosest last (see :mod:`dpaudit.privacy.accountants`).
ACCOUNTANTS = ("moments", "rdp", "pld", "strong", "naive")
#: Largest step count (self-composition count) accepted; 10^18 keeps T exact in an int64.
MAX_NUM_STEPS = 10**18
