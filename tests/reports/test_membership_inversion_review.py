"""Issue 46, membership and inversion pages: what a reviewer found, each checked against an independent computation.

* membership "no evidence" states its power (the ε_LB a perfect attack reaches on the counts,
  here from the closed form of Clopper–Pearson at zero errors) and is amber below ε_UB;
* no ROC point left of FPR = 1/non-members (the tables' "n/a");
* the generalisation gap, and every rate, with Clopper–Pearson intervals (checked against
  SciPy's exact binomial interval) and a bootstrap AUC interval (checked against a plain
  resampling loop with scikit-learn's AUC);
* member / non-member score histograms told apart in grey-scale, and a per-class breakdown
  (checked by counting);
* an inversion verdict withheld for an evaluator near chance, and never "identifies members"
  when most reconstructions are nearer the class mean than any member.
"""

from __future__ import annotations

import csv
import dataclasses
import math

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import roc_auc_score

from dpaudit.privacy.audit_stats import auc_interval, clopper_pearson_interval
from dpaudit.results import MembershipResult, load_membership_result, save_membership_result
from dpaudit.results.membership_rates import class_breakdown, generalisation_gap, membership_power, membership_rates
from dpaudit.results.numbers import fmt_lower_bound
from dpaudit.results.verdicts import inversion_verdict, membership_verdict
from reports.inversion import metrics_tables
from reports.membership import membership_sections, plot_roc, plot_score_histograms


def _exact(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """SciPy's exact (Clopper–Pearson) interval: a second implementation."""
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=confidence, method="exact")
    return ci.low, ci.high


def _result(n_in: int, n_out: int, *, shift: float, seed: int = 0, labels: bool = False, attack: str = "lira"):
    rng = np.random.default_rng(seed)
    member = np.arange(n_in + n_out) < n_in
    return MembershipResult(
        attack=attack,
        model_id="target",
        sample_ids=np.arange(n_in + n_out),
        scores=rng.normal(0, 1, n_in + n_out) + shift * member,
        is_member=member,
        labels=(np.arange(n_in + n_out) % 4) if labels else None,
    )


# ------------------------------------------------------------------------------------------ membership
def _perfect_ceiling(n_in: int, n_out: int, *, delta: float, confidence: float, tests: int) -> float:
    """ε_LB of zero errors: each Clopper–Pearson upper rate at 0 of n is 1 − miss^(1/n) (miss = (1 − c)/(2·tests))."""
    miss = (1 - confidence) / tests / 2
    fnr_hi, fpr_hi = 1 - miss ** (1 / n_in), 1 - miss ** (1 / n_out)
    return max(math.log((1 - fnr_hi - delta) / fpr_hi), math.log((1 - delta - fpr_hi) / fnr_hi), 0.0)


def test_no_evidence_states_the_power_and_is_amber_when_it_is_below_the_claim():
    quiet = _result(50, 50, shift=0.0, seed=4)
    assert quiet.epsilon_bound().epsilon_lb == 0
    ceiling = _perfect_ceiling(50, 50, delta=1e-5, confidence=0.95, tests=20)
    assert membership_power(50, 50).ceiling == pytest.approx(ceiling, rel=1e-9)
    # The reviewer's case: ε_UB = 8, far beyond what 50 / 50 examples can show (about 2.1).
    low = membership_verdict([quiet], epsilon_ub=8.0)
    assert low.status == "no evidence" and low.tone == "warn"
    assert fmt_lower_bound(ceiling) in low.headline and "lira" in low.headline
    assert any("1/50 = 2.0%" in line for line in low.lines)  # the lowest FPR resolved
    # The same attack against a claim the audit could have refuted: no evidence is reassuring.
    enough = membership_verdict([quiet], epsilon_ub=1.0)
    assert enough.status == "no evidence" and enough.tone == "ok" and fmt_lower_bound(ceiling) in enough.headline


def test_the_roc_curve_starts_at_the_lowest_fpr_the_non_members_resolve():
    results = [_result(100, 100, shift=1.0), _result(100, 400, shift=1.0, seed=1, attack="loss")]
    ax = plot_roc(results).axes[0]
    lowest = {"lira": 1 / 100, "loss": 1 / 400}
    for line in ax.get_lines():
        attack = line.get_label().split(" ")[0]
        if attack in lowest:
            assert np.min(line.get_xdata()) >= lowest[attack] * (1 - 1e-12)
    assert ax.get_xlim()[0] >= 1 / 400 * (1 - 1e-12)
    # The band only one attack resolves is shaded, and named.
    assert "FPR some attacks cannot resolve" in ax.get_legend_handles_labels()[1]


def test_the_generalisation_gap_and_its_intervals():
    gap = generalisation_gap({"train_accuracy": 0.95, "non_member_accuracy": 0.8}, num_members=200, num_non_members=100)
    assert gap is not None
    assert (gap.train.count, gap.held_out.count) == (190, 80)
    assert (gap.train.low, gap.train.high) == pytest.approx(_exact(190, 200), abs=1e-9)
    # The gap's interval: both ends' intervals at 97.5 %, combined end to end.
    train, held = _exact(190, 200, 0.975), _exact(80, 100, 0.975)
    assert gap.gap.value == pytest.approx(0.15)
    assert (gap.gap.low, gap.gap.high) == pytest.approx((train[0] - held[1], train[1] - held[0]), abs=1e-9)
    assert generalisation_gap({"test_accuracy": 0.9}, num_members=10, num_non_members=10) is None


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (57, 200)])
def test_the_clopper_pearson_interval_is_scipys_exact_one(k, n):
    assert clopper_pearson_interval(k, n, confidence=0.95) == pytest.approx(_exact(k, n), abs=1e-9)


def test_the_auc_interval_agrees_with_a_plain_bootstrap():
    r = _result(150, 150, shift=0.8, seed=2)
    s_in, s_out = r.scores[r.is_member], r.scores[~r.is_member]
    rng = np.random.default_rng(7)
    # A plain bootstrap, computed another way: the Mann–Whitney rank sum of each resample (scipy's ranks).
    both = np.concatenate([rng.choice(s_in, (1000, 150)), rng.choice(s_out, (1000, 150))], axis=1)
    ranks = stats.rankdata(both, axis=1)[:, :150].sum(axis=1)
    plain = (ranks - 150 * 151 / 2) / (150 * 150)
    assert roc_auc_score(np.r_[np.ones(150), np.zeros(150)], np.r_[s_in, s_out]) == pytest.approx(r.auc())
    low, high = auc_interval(s_in, s_out)
    assert low < r.auc() < high
    assert (low, high) == pytest.approx(tuple(np.quantile(plain, [0.025, 0.975])), abs=0.02)


def test_every_rate_on_the_page_carries_its_interval_and_counts(tmp_path):
    from reports.exports import save_table
    from reports.render import Table, format_number

    r = _result(100, 100, shift=1.0, labels=True)
    rates = membership_rates(r)
    tpr = rates.tpr_at_fpr["0.01"]
    assert tpr is not None and (tpr.low, tpr.high) == pytest.approx(_exact(tpr.count, 100), abs=1e-9)
    tp, fp = rates.true_positives, rates.false_positives
    assert (tp, fp) == (
        int((r.scores[r.is_member] >= rates.threshold).sum()),
        int((r.scores[~r.is_member] >= rates.threshold).sum()),
    )
    gap = generalisation_gap({"train_accuracy": 0.9, "non_member_accuracy": 0.7}, num_members=100, num_non_members=100)
    sections = membership_sections([r], epsilons={"pld": 2.0}, gap=gap)
    cells = [c for s in sections for b in s.blocks if isinstance(b, Table) for row in b.rows for c in row]
    # What the LaTeX blocks receive: the interval itself travels with the cell.
    with_interval = [c for c in cells if hasattr(c, "low")]
    assert any(c.count == tpr.count and c.total == 100 and c.low == pytest.approx(tpr.low) for c in with_interval)
    assert any(c.low == pytest.approx(rates.auc.low) and c.high == pytest.approx(rates.auc.high) for c in with_interval)
    assert any(c.low == pytest.approx(rates.balanced_accuracy.low) for c in with_interval)
    assert any(c.low == pytest.approx(rates.advantage.low) for c in with_interval)
    assert any(c.low == pytest.approx(gap.gap.low) for c in with_interval)
    # The CSV the kind writes (through the page writer's own exporter) has them too, as the page prints them.
    tables = [b for s in sections for b in s.blocks if isinstance(b, Table)]
    for i, t in enumerate(tables):
        save_table(t.columns, t.rows, tmp_path, f"membership-t-table-{i}", format_number)
    text = "".join(p.read_text() for p in sorted(tmp_path.glob("membership-t-table-*.csv")))
    assert f"({tpr.count}/100) [{100 * tpr.low:.1f}%, {100 * tpr.high:.1f}%]" in text
    assert f"{rates.auc.value:.3f} [{rates.auc.low:.3f}, {rates.auc.high:.3f}]" in text
    rows = [row for p in sorted(tmp_path.glob("membership-t-table-*.csv")) for row in csv.reader(p.open())]
    assert any(row[0] == "0" and "[" in row[1] for row in rows)  # the per-class table, class 0


def test_score_histograms_one_panel_per_attack_told_apart_in_grey_scale():
    results = [_result(100, 100, shift=1.0), _result(100, 50, shift=0.3, seed=1, attack="loss")]
    fig = plot_score_histograms(results)
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert len(panels) == 2
    for ax, r in zip(panels, results, strict=True):
        filled, outline = ax.patches[0], ax.patches[1]
        # Members: filled and hatched; non-members: an unfilled dashed outline (no colour needed to tell them).
        assert filled.get_fill() and filled.get_hatch() and not outline.get_fill()
        dashes = outline.get_linestyle()
        assert isinstance(dashes, tuple) and dashes[1]  # a dash pattern, not a solid line
        # Each side as a share of its own count, as np.histogram counts them over the 1st–99th percentiles (the
        # scores beyond them in the end bins).
        lo, hi = np.quantile(r.scores, [0.01, 0.99])
        scores = np.clip(r.scores, lo, hi)
        edges = np.histogram_bin_edges(scores, bins=30)
        shares = np.histogram(scores[r.is_member], bins=edges)[0] / r.num_members
        heights = filled.get_xy()[:, 1]
        assert heights.max() == pytest.approx(shares.max())


def test_per_class_rates_count_each_class_at_one_threshold_and_labels_round_trip(tmp_path):
    r = _result(120, 120, shift=1.0, labels=True)
    threshold = membership_rates(r).threshold
    rows = class_breakdown(r)
    assert rows is not None and [c.label for c in rows] == [0, 1, 2, 3]
    for c in rows:
        here = r.labels == c.label
        tp = int(((r.scores >= threshold) & here & r.is_member).sum())
        fp = int(((r.scores >= threshold) & here & ~r.is_member).sum())
        assert (c.tpr.count, c.tpr.total) == (tp, int((here & r.is_member).sum()))
        assert (c.fpr.count, c.fpr.total) == (fp, int((here & ~r.is_member).sum()))
        assert c.advantage.value == pytest.approx(c.tpr.value - c.fpr.value)
    again = load_membership_result(save_membership_result(r, tmp_path / "new"))
    assert np.array_equal(again.labels, r.labels)
    old = dataclasses.replace(r, labels=None)
    assert load_membership_result(save_membership_result(old, tmp_path / "old")).labels is None
    assert class_breakdown(old) is None


# ------------------------------------------------------------------------------------------- inversion
def _membership(n: int, shift: float, seed: int = 0) -> MembershipResult:
    rng = np.random.default_rng(seed)
    member = np.arange(n) < n // 2
    return MembershipResult(
        attack="inversion-gmi",
        model_id="m",
        sample_ids=np.arange(n),
        scores=rng.normal(0, 1, n) + shift * member,
        is_member=member,
    )


def test_the_inversion_verdict_is_withheld_for_an_evaluator_near_chance(make_inversion_result):
    k = 40
    base = make_inversion_result("m", "gmi", k=k, top1=0.3)
    weak = dataclasses.replace(
        base,
        metadata={**base.metadata, "evaluator_accuracy": 0.3, "evaluator_num_tested": 400, "num_dataset_classes": k},
    )
    # The rule: the lower end of the exact 95 % interval must exceed (1 + 1/40)/2.
    assert _exact(120, 400)[0] <= (1 + 1 / k) / 2
    verdict = inversion_verdict([weak], num_dataset_classes=k)
    assert verdict.status == "withheld" and verdict.tone == "warn"
    assert "evaluator too weak" in verdict.headline and "30.0%" in verdict.headline and "2.5%" in verdict.headline
    strong = dataclasses.replace(weak, metadata={**weak.metadata, "evaluator_accuracy": 0.95})
    assert _exact(380, 400)[0] > (1 + 1 / k) / 2
    assert inversion_verdict([strong], num_dataset_classes=k).status != "withheld"


def test_the_inversion_verdict_never_contradicts_the_member_vs_class_mean_table(make_inversion_result):
    k = 40
    near_mean = np.full(k, 0.1)
    near_mean[0] = 0.5  # 39 of 40 reconstructions nearer the class mean (0.1) than any member (0.2)
    leaky = _membership(400, shift=1.0)
    assert leaky.epsilon_bound().epsilon_lb > 0
    r = dataclasses.replace(
        make_inversion_result("m", "gmi", k=k, top1=0.9), membership=leaky, distance_to_mean=near_mean
    )
    assert int(r.closer_to_mean().sum()) == 39
    verdict = inversion_verdict([r], num_dataset_classes=k, epsilon_ub=8.0)
    assert verdict.status == "class only" and "39 of 40" in verdict.headline and "not the members" in verdict.headline
    assert "recovers a class average" in r.finding()
    # With the table on the members' side, the same score identifies members.
    members_side = dataclasses.replace(r, distance_to_mean=np.full(k, 0.3))
    assert inversion_verdict([members_side], num_dataset_classes=k, epsilon_ub=8.0).status == "identifies members"


def test_inversion_tables_give_top1_with_its_exact_interval(make_inversion_result, tmp_path):
    from reports.inversion import InversionTarget

    r = make_inversion_result("m", "gmi", k=10, top1=0.7)
    target = InversionTarget(model_id="m", results=(r,), record=None, result_dir=tmp_path)
    top1 = metrics_tables(target)[0].rows[0][1]
    assert (top1.count, top1.total) == (7, 10)
    assert (top1.low, top1.high) == pytest.approx(_exact(7, 10), abs=1e-9)


def test_the_targets_compared_figure_draws_each_top1_with_its_exact_interval(make_inversion_result, tmp_path):
    from matplotlib.collections import LineCollection

    from reports.inversion import InversionTarget, comparison_figure

    r = make_inversion_result("m", "gmi", k=10, top1=0.7)
    target = InversionTarget(model_id="m", results=(r,), record=None, result_dir=tmp_path)
    left = comparison_figure([target]).axes[0]
    bars = [c for c in left.collections if isinstance(c, LineCollection)]
    (segment,) = bars[0].get_segments()
    assert (segment[0][0], segment[1][0]) == pytest.approx(_exact(7, 10), abs=1e-9)


def test_a_few_extreme_scores_do_not_squeeze_every_other_into_one_bin():
    """The review's loss histograms: members and non-members near 0, a few losses of 10–30, one bar of ~100%."""
    rng = np.random.default_rng(0)
    member = np.arange(718) < 359
    loss = np.where(member, rng.exponential(0.001, 718), rng.exponential(0.01, 718))
    loss[[5, 700]] = (30.0, 12.0)
    r = MembershipResult(attack="loss", model_id="m", sample_ids=np.arange(718), scores=-loss, is_member=member)
    fig = plot_score_histograms([r])
    (ax,) = [a for a in fig.axes if a.get_visible()]
    heights = ax.patches[0].get_xy()[:, 1]
    assert heights.max() < 0.9  # the members' mass spread over several bins, not one bar next to 0
    assert ax.get_xlim()[0] > -1.0  # the axis spans the bulk of the scores, not the outliers


def test_an_inversion_that_stopped_after_a_few_steps_says_so_in_its_verdict_and_configuration():
    """The review's MI-Face run: stopped at its cost threshold after 1–10 of 1,000 iterations, unstated."""
    import dataclasses

    from dpaudit.results.inversion import stopping_text
    from dpaudit.results.verdicts import inversion_verdict
    from tests.reports.conftest import inversion_result

    base = inversion_result("m", "mi-face", k=4, top1=1.0)
    details = {"iterations": [[4], [1], [1], [10]], "stop_reasons": [["threshold"]] * 4, "max_iterations": 1000}
    early = dataclasses.replace(base, metadata={**base.metadata, "details": details})
    text = stopping_text(early)
    assert text is not None and "1–10 iterations" in text and "of the 1000 allowed" in text
    assert "threshold ×4" in text and "early stop" in text
    assert text in inversion_verdict([early]).lines
    full = dict(details, iterations=[[900], [1000], [950], [1000]], stop_reasons=[["patience"]] * 4)
    ran = dataclasses.replace(base, metadata={**base.metadata, "details": full})
    assert "early stop" not in (stopping_text(ran) or "") and "patience ×4" in (stopping_text(ran) or "")
    assert stopping_text(base) is None  # an attack that stored no diagnostics: nothing invented


def test_the_targets_confidence_is_a_percentage_with_its_spread_over_the_classes():
    # The first review: "target's confidence 0.995", a fraction on a page of percentages, with no spread.
    from reports.inversion import _confidence_cell

    assert _confidence_cell(np.array([0.99, 1.0, 0.995])) == "99.5% (99.0%–100.0%)"
