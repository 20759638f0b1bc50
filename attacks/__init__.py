"""Attacks: membership inference, model inversion, evasion and canaries.

Each attack takes a record (see ``dpaudit.results.record``) and produces evidence as an immutable
result value. Attacks import the core, never ``defenses``. Membership attacks are registered in
:data:`attacks.membership.MEMBERSHIP_ATTACKS`, evasion attacks in :data:`attacks.evasion.EVASION_ATTACKS`.
"""
