"""Attacks, by family: membership inference, model inversion, evasion, audits and federated uploads.

Each attack takes a record (see ``dpaudit.results.record``) and produces evidence as an immutable
result value. Attacks import the core, never ``defenses``. Each family is a package whose parts
register themselves where they are defined, in one :class:`dpaudit.registry.Registry` per family:
:data:`attacks.membership.MEMBERSHIP_ATTACKS`, :data:`attacks.inversion.INVERSION_ATTACKS`,
:data:`attacks.evasion.EVASION_ATTACKS` and :data:`attacks.audit.procedures.AUDIT_PROCEDURES`;
:mod:`attacks.federated` holds the server-seat attacks and the canary audit of DSSGD uploads.
"""
