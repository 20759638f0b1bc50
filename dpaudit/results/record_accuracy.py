"""A trained record's accuracies as estimates with their intervals, for every page that shows them.

A record's test accuracy is a share of the test set: on digits' 360 test examples it moves by
about ±3 points between test sets, so no page shows it bare (issue 46). ``build_record`` keeps
the counts it rests on (``test_correct`` of ``test_examples``), and :func:`counted_test_accuracy`
turns them into a Clopper–Pearson interval. A record stored before the counts were kept has no
interval: the pages show its accuracy alone and say why (:data:`NO_COUNT_REASON`), never guess
the size.

An accuracy averaged over several models scored on the same test examples (PATE's teachers,
DSSGD's stand-alone participants) is no binomial count: the models' errors on one example are
correlated. It is, however, the mean over the test examples of each example's share of correct
models, a value in [0, 1] per example, so Hoeffding's inequality bounds it without assuming
anything of that correlation (:func:`mean_accuracy_estimate`): ±sqrt(ln(2/(1 − c)) / (2n)).

Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from dpaudit import _validate as v
from dpaudit.results.membership_rates import Estimate, proportion

__all__ = [
    "NO_COUNT_REASON",
    "counted_share",
    "counted_test_accuracy",
    "mean_accuracy_estimate",
    "repeats_accuracy_estimate",
    "stored_test_examples",
]

#: What a page says in place of the interval of an accuracy whose count the record does not hold.
NO_COUNT_REASON = "no interval: the record was stored before its test-set size was kept"


def _count(x: object) -> int | None:
    return int(x) if isinstance(x, int) and not isinstance(x, bool) and x >= 0 else None


def _share(x: object) -> float | None:
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and 0.0 <= x <= 1.0:
        return float(x)
    return None


def stored_test_examples(metrics: Mapping[str, object]) -> int | None:
    """The test-set size a record's metrics hold (``None`` for a record stored before it was kept)."""
    n = _count(metrics.get("test_examples"))
    return n if n else None


def counted_share(share: object, examples: object, *, confidence: float = 0.95) -> Estimate | None:
    """A share of ``examples`` outcomes (an accuracy over the members, the answered labels…) as its
    count with a Clopper–Pearson interval: a mean of n zeros and ones is a multiple of 1/n.

    Returns:
        The estimate, or ``None`` when either is missing, or the share is no multiple of
        1/``examples`` (not measured on that many examples; float32 rounding stays far below 0.01
        of a count).
    """
    p, n = _share(share), _count(examples)
    if p is None or not n:
        return None
    correct = round(p * n)
    if abs(p * n - correct) > 0.01:
        return None
    return proportion(correct, n, confidence=confidence)


def counted_test_accuracy(
    metrics: Mapping[str, object], key: str = "test_accuracy", *, confidence: float = 0.95
) -> Estimate | None:
    """The accuracy ``metrics[key]``, measured on the whole test set, with its Clopper–Pearson interval.

    For ``test_accuracy`` the stored correct count is used; another accuracy on the same test set
    (DSSGD's centralised baseline) is its share times the test-set size, rounded: a mean of n
    zeros and ones is a multiple of 1/n.

    Returns:
        The estimate, or ``None`` when the record holds no test-set size (stored before it was kept),
        no such accuracy, or an accuracy that is no multiple of 1/n (not measured on that test set).
    """
    n, acc = stored_test_examples(metrics), _share(metrics.get(key))
    if n is None or acc is None:
        return None
    correct = _count(metrics.get("test_correct")) if key == "test_accuracy" else None
    if correct is None or correct > n or abs(correct / n - acc) > 0.5 / n:
        return counted_share(acc, n, confidence=confidence)
    return proportion(correct, n, confidence=confidence)


def mean_accuracy_estimate(mean: float, examples: int, *, confidence: float = 0.95) -> Estimate:
    """A mean of several models' accuracies on the same ``examples`` test examples, with Hoeffding's interval.

    Valid whatever the models' errors have in common (see the module docstring); wider than a
    Clopper–Pearson interval of one model on as many examples.

    Raises:
        ValueError: ``mean`` outside [0, 1], ``examples`` < 1 or ``confidence`` outside (0, 1) (named).
    """
    share = _share(mean)
    if share is None:
        raise v.invalid("mean", f"mean must be an accuracy in [0, 1], got {mean!r}")
    n = v.integer("examples", examples, minimum=1)
    confidence = v.open_unit("confidence", confidence)
    half = math.sqrt(math.log(2.0 / (1.0 - confidence)) / (2.0 * n))
    return Estimate(
        value=share,
        low=max(0.0, share - half),
        high=min(1.0, share + half),
        confidence=confidence,
        method="hoeffding",
    )


def repeats_accuracy_estimate(
    mean: float, examples: int | None, *, repeats: int, confidence: float = 0.95
) -> Estimate | None:
    """A setting's accuracy averaged over its ``repeats`` models, each scored on ``examples`` test examples.

    One model: its count (``mean`` × ``examples``, rounded) with a Clopper–Pearson interval. Several:
    Hoeffding's interval on ``examples`` (:func:`mean_accuracy_estimate`). That holds whether the
    models were scored on the same examples (the test set) or each on its own draw of as many (a
    comparison's evasion subsets, drawn per seed): with independent draws the mean rests on
    ``repeats`` × ``examples`` independent outcomes, so the interval on ``examples`` alone is
    conservative.

    Returns:
        The estimate, or ``None`` when ``mean`` is missing (nan) or ``examples`` was not stored, or
        one model's ``mean`` is no multiple of 1/``examples`` (not a share of that many examples).

    Raises:
        ValueError: ``repeats`` < 1 or ``confidence`` outside (0, 1) (named).
    """
    repeats = v.integer("repeats", repeats, minimum=1)
    share, n = _share(mean), _count(examples)
    if share is None or not n:
        return None
    if repeats > 1:
        return mean_accuracy_estimate(share, n, confidence=confidence)
    return counted_share(share, n, confidence=confidence)
