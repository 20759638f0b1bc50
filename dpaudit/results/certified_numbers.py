"""Accuracies of the certified report with their counts and 95 % Clopper–Pearson interval, worded once.

A certified, conventional or robust accuracy is a share of a few hundred test points at most:
"82.5 %" alone hides that one more point moves it by 2.5 points on 40. Every such accuracy is
shown as ``82.5% (33/40; 95% CI 67.2–92.7%)``, the interval's ends rounded outwards, by the
verdict and by the page alike (torch-free; the interval is
:func:`dpaudit.privacy.audit_stats.clopper_pearson_interval`).
"""

from __future__ import annotations

from dataclasses import dataclass

from dpaudit import _validate as v
from dpaudit.privacy.audit_stats import clopper_pearson_interval
from dpaudit.results.numbers import fmt_percent_lower_bound, fmt_percent_upper_bound, fmt_rate

__all__ = ["ACCURACY_CONFIDENCE", "CountedAccuracy", "counted_accuracy"]

#: Two-sided confidence of every interval on the certified page (and its CSV).
ACCURACY_CONFIDENCE = 0.95


@dataclass(frozen=True, kw_only=True)
class CountedAccuracy:
    """An accuracy as the count it is, with its two-sided Clopper–Pearson interval.

    Attributes:
        correct, total: the count and the test points it is out of.
        low, high: the interval's ends at ``confidence``.
        confidence: two-sided confidence of the interval.
    """

    correct: int
    total: int
    low: float
    high: float
    confidence: float = ACCURACY_CONFIDENCE

    @property
    def share(self) -> float:
        """correct / total."""
        return self.correct / self.total

    @property
    def interval_text(self) -> str:
        """``67.2–92.7%``: the ends rounded outwards (low down, high up), so the printed range holds the exact one."""
        return f"{fmt_percent_lower_bound(self.low).rstrip('%')}–{fmt_percent_upper_bound(self.high)}"

    @property
    def text(self) -> str:
        """``82.5% (33/40; 95% CI 67.2–92.7%)``."""
        rate = fmt_rate(self.correct, self.total)  # "82.5% (33/40)"
        return f"{rate[:-1]}; {self.confidence:.0%} CI {self.interval_text})"


def counted_accuracy(correct: int, total: int, *, confidence: float = ACCURACY_CONFIDENCE) -> CountedAccuracy:
    """``correct`` of ``total`` with its interval.

    Raises:
        ValueError: counts out of range (named).
    """
    total = v.integer("total", total, minimum=1)
    correct = v.integer("correct", correct, minimum=0)
    if correct > total:
        raise v.invalid("correct", f"correct must be <= total={total}, got {correct}")
    low, high = clopper_pearson_interval(correct, total, confidence=confidence)
    return CountedAccuracy(correct=correct, total=total, low=low, high=high, confidence=confidence)
