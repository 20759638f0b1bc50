"""Whether an audit's ε point estimate is shown, decided once for the terminal and the report.

An estimate at chance (AUC 0.49) can still read ε ≈ 1 — the best of many thresholds — and shown
bare it reads as leakage. So a point estimate is shown only with its confidence interval, and only
when that interval excludes 0 (docs/audits/statistics.md). ``dpaudit audit``'s terminal lines and
the audit report's bounds table both read :func:`shown_estimate`, so the two never disagree
(they did: a one-run audit printed 1.1782 that its report withheld).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpaudit.results.audit import AuditResult
from dpaudit.results.audit_details import estimate_facts

__all__ = ["ShownEstimate", "shown_estimate"]


@dataclass(frozen=True, kw_only=True)
class ShownEstimate:
    """What to show of a result's ε point estimate.

    Attributes:
        value: the estimate, or ``None`` when it is withheld (or there is none).
        low, high: its interval (``high`` may be ∞); ``None`` when not stored.
        level: the interval's confidence.
        kind: what the estimate is, in words.
        reason: why it is withheld (``None`` when shown or when there is no estimate).
    """

    value: float | None
    low: float | None = None
    high: float | None = None
    level: float | None = None
    kind: str = "point estimate"
    reason: str | None = None

    @property
    def exists(self) -> bool:
        """Whether the result has an estimate at all (shown or withheld)."""
        return self.value is not None or self.reason is not None


def shown_estimate(result: AuditResult) -> ShownEstimate:
    """The estimate with its interval when the interval excludes 0; else ``value=None`` and the reason.

    A result stored without an interval shows no estimate.
    """
    if result.epsilon_estimate is None:
        return ShownEstimate(value=None)
    interval, stored_level, stored_kind = estimate_facts(result.details)
    kind = stored_kind or "point estimate"
    if interval is None or len(interval) != 2:
        return ShownEstimate(
            value=None,
            kind=kind,
            reason="stored without a confidence interval; a point estimate is shown only with one",
        )
    low, high = float(interval[0]), math.inf if interval[1] is None else float(interval[1])
    level = float(result.confidence if stored_level is None else stored_level)
    if low <= 0:
        return ShownEstimate(
            value=None,
            low=low,
            high=high,
            level=level,
            kind=kind,
            reason="its interval includes 0: no evidence of leakage beyond chance",
        )
    return ShownEstimate(value=float(result.epsilon_estimate), low=low, high=high, level=level, kind=kind)
