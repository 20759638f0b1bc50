"""The audit runner: the application layer that wires defenses, canaries and audit games.

:mod:`~dpaudit.app.runs.audit.spec` says what one audit is (:class:`AuditSpec`, torch-free),
:mod:`~dpaudit.app.runs.audit.provenance` what its trials are made of (code and data
fingerprints, part of its name), and :mod:`~dpaudit.app.runs.audit.runner` runs it
(:func:`run_audit`).
"""

from __future__ import annotations

from dpaudit.app.runs.audit.provenance import resolve_train_fn, train_fn_fingerprint
from dpaudit.app.runs.audit.runner import DatasetRef, make_audit_executor, run_audit
from dpaudit.app.runs.audit.spec import (
    CANARY_KINDS,
    INIT_KINDS,
    METHODS,
    THREATS,
    WHITE_BOX_CHUNK_STEPS,
    WHITE_BOX_MOST_STEPS,
    WORST_CASE_AUDITOR_RECORDS,
    AuditSpec,
    audit_defenses,
)

__all__ = [
    "CANARY_KINDS",
    "INIT_KINDS",
    "METHODS",
    "THREATS",
    "WHITE_BOX_CHUNK_STEPS",
    "WHITE_BOX_MOST_STEPS",
    "WORST_CASE_AUDITOR_RECORDS",
    "AuditSpec",
    "DatasetRef",
    "audit_defenses",
    "make_audit_executor",
    "resolve_train_fn",
    "run_audit",
    "train_fn_fingerprint",
]
