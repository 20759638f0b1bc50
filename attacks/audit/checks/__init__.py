"""The conformance battery's checks: targeted audits, each exposing one class of DP-SGD bug.

Every module here registers one :class:`~attacks.audit.checks.spec.CheckSpec` in :data:`CHECKS`
(discovered on first lookup); the shared game machinery is :mod:`attacks.audit.checks.game`.
"""

from attacks.audit.checks.spec import CHECKS, CheckCannotRun, CheckContext, CheckEvidence, CheckSpec

__all__ = ["CHECKS", "CheckSpec", "CheckContext", "CheckEvidence", "CheckCannotRun"]
