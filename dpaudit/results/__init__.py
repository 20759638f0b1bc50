"""Every result value of the suite, torch-free: records of trained models, membership, evasion,
audit, certification and inversion results, with their JSON + NPZ serialisation.

Reports import only from here (and :mod:`dpaudit.store`), so a report renders from stored
results without torch (DESIGN.md, "Import rule").
"""

from dpaudit.results.audit import AuditResult, EpsilonByTrials, load_audit_result, save_audit_result
from dpaudit.results.certification import CertificationResult, load_certification_result, save_certification_result
from dpaudit.results.evasion import (
    EVASION_NORMS,
    EvasionResult,
    load_evasion_result,
    save_evasion_result,
)
from dpaudit.results.inversion import InversionResult, inversion_stem, load_inversion_result, save_inversion_result
from dpaudit.results.membership import (
    DEFAULT_FPRS,
    RESULT_SCHEMA_VERSION,
    MembershipResult,
    RocCurve,
    load_membership_result,
    save_membership_result,
)
from dpaudit.results.record import (
    RECORD_FILE,
    WEIGHTS_FILE,
    Membership,
    TrainedModel,
    load_record,
    make_model_id,
    resolve_record_dir,
)

__all__ = [
    "DEFAULT_FPRS",
    "EVASION_NORMS",
    "RECORD_FILE",
    "RESULT_SCHEMA_VERSION",
    "WEIGHTS_FILE",
    "AuditResult",
    "CertificationResult",
    "EpsilonByTrials",
    "EvasionResult",
    "InversionResult",
    "Membership",
    "MembershipResult",
    "RocCurve",
    "TrainedModel",
    "load_audit_result",
    "load_certification_result",
    "inversion_stem",
    "load_evasion_result",
    "load_inversion_result",
    "load_membership_result",
    "load_record",
    "make_model_id",
    "resolve_record_dir",
    "save_audit_result",
    "save_certification_result",
    "save_evasion_result",
    "save_inversion_result",
    "save_membership_result",
]
