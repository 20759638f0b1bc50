"""The accountants, one module each; importing a module registers its accountant in
:data:`~dpaudit.privacy.accountant_names.ACCOUNTANTS` (discovered on first lookup).

A module here stays light (no ``dp_accounting``, no SciPy at import): it declares the
accountant and imports the mathematics (:mod:`~dpaudit.privacy.composition`,
:mod:`~dpaudit.privacy.rdp_accountant`, :mod:`~dpaudit.privacy.pld_accountant`) inside the
functions it registers, so listing the accountants for ``--help`` costs nothing.
"""
