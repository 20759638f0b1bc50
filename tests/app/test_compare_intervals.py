"""Every rate of the compare matrix carries its interval (issue 46, item (c)).

The review of a real compare page found test accuracy, AUC, advantage, TPR, robust and certified
accuracy and inversion top-1 without any: ±10 points on 100 examples go unseen. The row now keeps
the counts behind each (test set, evasion subset, classes inverted, members / non-members) and
the membership jobs store the AUC's and the advantage's intervals; these tests check that each
interval is the one its method gives, that several repeats keep a joint interval, and that a
comparison stored before any of this shows bare numbers rather than an invented interval.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpaudit.results import MembershipResult
from dpaudit.results.compare_outcomes import (
    InversionOutcome,
    MembershipMeasures,
    MembershipOutcome,
    SeedOutcomes,
    SettingOutcomes,
    TrainedOutcome,
    condense,
)
from dpaudit.results.comparison import ComparisonRow, PooledMeasures


def _membership_result(seed: int, n: int = 200) -> MembershipResult:
    rng = np.random.default_rng(seed)
    member = np.arange(2 * n) < n
    scores = rng.normal(size=2 * n) + 0.6 * member
    return MembershipResult(attack="loss", model_id="m", sample_ids=np.arange(2 * n), scores=scores, is_member=member)


def test_a_membership_jobs_intervals_hold_their_measure_and_widen_with_the_repeats_they_are_split_over():
    from dpaudit.app.runs.compare.jobs import _membership_measures

    result = _membership_result(0)
    one = _membership_measures(result, delta=1e-5, confidence=0.95, repeats=1)
    five = _membership_measures(result, delta=1e-5, confidence=0.95, repeats=5)
    assert one is not None and five is not None
    for m in (one, five):
        assert m.auc_low <= m.auc <= m.auc_high and m.advantage_low <= m.advantage <= m.advantage_high
    assert one.interval_confidence == pytest.approx(0.95) and five.interval_confidence == pytest.approx(0.99)
    assert five.auc_high - five.auc_low > one.auc_high - one.auc_low
    assert five.advantage_high - five.advantage_low > one.advantage_high - one.advantage_low


def _measures(seed: int, repeats: int) -> MembershipMeasures:
    from dpaudit.app.runs.compare.jobs import _membership_measures

    m = _membership_measures(_membership_result(seed), delta=1e-5, confidence=0.95, repeats=repeats)
    assert m is not None
    return m


def _setting(repeats: int) -> SettingOutcomes:
    return SettingOutcomes(
        label="nonprivate",
        defense="nonprivate",
        family="nonprivate",
        parameters={},
        repeats=tuple(
            SeedOutcomes(
                seed=i,
                trained=TrainedOutcome(
                    model_id=f"m{i}", test_accuracy=0.9, epsilon_ub={"none": math.inf}, test_examples=360
                ),
                membership=MembershipOutcome(membership={"loss": _measures(i, repeats)}),
                inversion=InversionOutcome(inversion_top1={"mi-face": 0.9, "gmi": 0.6}, num_classes=10),
            )
            for i in range(repeats)
        ),
    )


def _row(repeats: int) -> ComparisonRow:
    return condense(
        [_setting(repeats)],
        name="g",
        dataset="digits",
        baseline="nonprivate",
        delta=1e-5,
        confidence=0.95,
        membership_attacks=("loss",),
    ).row("nonprivate")


def test_the_rows_membership_interval_is_the_mean_of_the_repeats_bonferroni_intervals():
    row = _row(3)
    pooled = row.membership["loss"]
    runs = [_measures(i, 3) for i in range(3)]
    assert pooled.auc_low == pytest.approx(np.mean([r.auc_low for r in runs]))
    assert pooled.advantage_high == pytest.approx(np.mean([r.advantage_high for r in runs]))
    auc = pooled.auc_estimate()
    assert auc is not None and auc.low <= pooled.auc <= auc.high


def test_the_best_inversion_top1_gets_its_count_and_an_interval_split_over_what_it_was_chosen_from():
    row = _row(2)
    assert (row.inversion_top1, row.inversion_classes, row.inversion_candidates) == (0.9, 10, 4)
    e = row.inversion_estimate()
    assert e is not None and (e.count, e.total) == (9, 10)
    # Clopper–Pearson at 1 − 0.05/4 for 9 of 10: the beta quantiles, computed here independently.
    a = 0.05 / 4
    assert e.low == pytest.approx(stats.beta.ppf(a / 2, 9, 2), abs=1e-9)
    assert e.high == pytest.approx(stats.beta.ppf(1 - a / 2, 10, 1), abs=1e-9)


def test_the_matrix_prints_every_rate_with_its_interval():
    from reports.compare_matrix import matrix_rows

    row = _row(1)
    from dpaudit.results.comparison import ComparisonResult

    result = ComparisonResult(
        name="g", dataset="digits", rows=(row,), baseline="nonprivate", delta=1e-5, confidence=0.95, fprs=(0.01,)
    )
    columns, (cells,) = matrix_rows(result)
    shown = {c: str(x) for c, x in zip(columns, cells, strict=True)}
    assert shown["test acc."].startswith("90.0% (324/360) [")
    assert shown["AUC"].count("[") == 1 and shown["advantage"].count("[") == 1
    assert shown["TPR @ 1.0% FPR"].count("[") == 1 and "/200)" in shown["TPR @ 1.0% FPR"]
    assert shown["inversion top-1"].startswith("90.0% (9/10) [")


def test_a_row_stored_before_the_counts_shows_bare_numbers_not_an_invented_interval():
    from reports.compare_matrix import _auc, _inversion

    old = PooledMeasures(auc=0.7, auc_std=0.0, advantage=0.2, tpr_at_fpr={"0.01": 0.05}, epsilon_lb=0.5)
    assert old.auc_estimate() is None and old.advantage_estimate() is None
    assert "[" not in str(_auc(old))
    row = ComparisonRow(label="x", defense="nonprivate", family="nonprivate", test_accuracy=0.9, inversion_top1=0.9)
    assert row.inversion_estimate() is None and "[" not in str(_inversion(row))
    assert row.accuracy_estimate(0.9, evaluated=False) is None
