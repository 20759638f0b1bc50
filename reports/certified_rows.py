"""The rows of the certified report's CSV tables, one frozen type per table (columns in field order).

:func:`reports.certified.certified_rows` and :func:`reports.certified.robust_rows` build them from
the stored certify runs; ``certified_accuracy.csv`` and ``robust_accuracy.csv`` hold one row each,
from radius 0 (the classifier's clean accuracy) up. Every accuracy comes with its count and its
two-sided Clopper–Pearson interval at ``confidence``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CertifiedRow", "RobustRow"]


@dataclass(frozen=True, kw_only=True)
class CertifiedRow:
    """One certificate's certified accuracy at one radius (a row of ``certified_accuracy.csv``, columns in field order).

    Attributes:
        defense, model_id: the record.
        certificate, norm: the certificate and the norm of its radius.
        radius: the perturbation radius (0: the classifier's conventional accuracy).
        certified_accuracy: at ``radius``; ``certified_count`` of ``num_points`` test points, with its
            interval ``certified_ci_low``–``certified_ci_high``.
        conventional_accuracy: of the same classifier, the one ``prediction_rule`` names;
            ``conventional_count`` of ``num_points``, interval ``conventional_ci_low``–``conventional_ci_high``.
        prediction_rule: that classifier, in words.
        confidence: two-sided confidence of the intervals.
    """

    defense: str
    model_id: str
    certificate: str
    norm: str
    radius: float
    certified_accuracy: float
    conventional_accuracy: float
    prediction_rule: str
    num_points: int | None = None
    certified_count: int | None = None
    certified_ci_low: float | None = None
    certified_ci_high: float | None = None
    conventional_count: int | None = None
    conventional_ci_low: float | None = None
    conventional_ci_high: float | None = None
    confidence: float | None = None


@dataclass(frozen=True, kw_only=True)
class RobustRow:
    """One attack's robust accuracy at one radius (a row of ``robust_accuracy.csv``, columns in field order).

    Attributes:
        defense, model_id: the record.
        attack, norm: the evasion attack and the norm of its radius.
        radius: the perturbation radius (0: the attacked classifier's clean accuracy).
        robust_accuracy: accuracy left by the attack at ``radius``; ``robust_count`` of
            ``num_examples``, interval ``robust_ci_low``–``robust_ci_high``.
        clean_accuracy: accuracy of the attacked classifier on the unperturbed examples;
            ``clean_count`` of ``num_examples``, interval ``clean_ci_low``–``clean_ci_high``.
        prediction_rule: the attacked classifier, in words (not necessarily a certificate's rule).
        confidence: two-sided confidence of the intervals.
    """

    defense: str
    model_id: str
    attack: str
    norm: str
    radius: float
    robust_accuracy: float
    clean_accuracy: float
    prediction_rule: str | None = None
    num_examples: int | None = None
    robust_count: int | None = None
    robust_ci_low: float | None = None
    robust_ci_high: float | None = None
    clean_count: int | None = None
    clean_ci_low: float | None = None
    clean_ci_high: float | None = None
    confidence: float | None = None
