"""The rows of the certified report's CSV tables, one frozen type per table (columns in field order).

:func:`reports.certified.certified_rows` and :func:`reports.certified.robust_rows` build them from
the stored certify runs; ``certified_accuracy.csv`` and ``robust_accuracy.csv`` hold one row each.
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
        radius: the perturbation radius.
        certified_accuracy: at ``radius``.
        conventional_accuracy: of the same classifier, the one ``prediction_rule`` names.
        prediction_rule: that classifier, in words.
    """

    defense: str
    model_id: str
    certificate: str
    norm: str
    radius: float
    certified_accuracy: float
    conventional_accuracy: float
    prediction_rule: str


@dataclass(frozen=True, kw_only=True)
class RobustRow:
    """One attack's robust accuracy at one radius (a row of ``robust_accuracy.csv``, columns in field order).

    Attributes:
        defense, model_id: the record.
        attack, norm: the evasion attack and the norm of its radius.
        radius: the perturbation radius.
        robust_accuracy: accuracy left by the attack at ``radius``.
        clean_accuracy: accuracy on the unperturbed examples.
    """

    defense: str
    model_id: str
    attack: str
    norm: str
    radius: float
    robust_accuracy: float
    clean_accuracy: float
