"""Intervals on a record's accuracies, and the power of compare's "no violation" (issue 46).

A record now keeps the counts behind its test accuracy (``build_record``); every page that shows
the accuracy shows its Clopper–Pearson interval, and a record stored before the counts were kept
shows the accuracy alone and says why. Means over several models (PATE's teachers, DSSGD's
stand-alone participants) get Hoeffding's interval. Compare's "no violation" states what its
attacks could have shown and is not green when they could not have shown a violation.

The intervals are checked against scipy's beta quantiles and Hoeffding's closed form, written
out here, not against the module's own helpers.
"""

from __future__ import annotations

import dataclasses
import math
import time

import pytest
from scipy import stats

from dpaudit.results import TrainedModel
from dpaudit.results.comparison import load_comparison
from dpaudit.results.grid_verdicts import compare_verdict
from dpaudit.results.record_accuracy import (
    NO_COUNT_REASON,
    counted_test_accuracy,
    mean_accuracy_estimate,
)
from tests.reports.conftest import bare_record, build_dssgd_run, build_pate_run


def trained(defense: str, *, metrics: dict) -> TrainedModel:
    """A digits-mlp record of ``defense`` holding ``metrics`` (no id check: the pages read its fields only)."""
    return bare_record(defense, config={}, metrics=metrics, model_id=f"{defense}-test")


def _cp(k: int, n: int, c: float = 0.95) -> tuple[float, float]:
    a = (1 - c) / 2
    low = 0.0 if k == 0 else stats.beta.ppf(a, k, n - k + 1)
    high = 1.0 if k == n else stats.beta.ppf(1 - a, k + 1, n - k)
    return float(low), float(high)


def test_a_record_test_accuracy_is_its_count_with_the_clopper_pearson_interval():
    est = counted_test_accuracy({"test_accuracy": 0.9, "test_examples": 360, "test_correct": 324})
    assert est is not None and (est.count, est.total) == (324, 360)
    assert (est.low, est.high) == pytest.approx(_cp(324, 360), abs=1e-12)
    # Another accuracy on the same test set (DSSGD's centralised baseline): its share times the size.
    central = counted_test_accuracy(
        {"centralised_test_accuracy": 0.8, "test_examples": 360}, "centralised_test_accuracy"
    )
    assert central is not None and (central.count, central.total) == (288, 360)
    # A record stored before the counts were kept has none, and no size is guessed.
    assert counted_test_accuracy({"test_accuracy": 0.9}) is None
    assert counted_test_accuracy({"test_accuracy": 0.9, "test_examples": True}) is None


def test_a_mean_over_models_gets_hoeffdings_interval():
    est = mean_accuracy_estimate(0.6, 360)
    half = math.sqrt(math.log(2 / 0.05) / (2 * 360))
    assert (est.low, est.high) == pytest.approx((0.6 - half, 0.6 + half))
    assert est.method == "hoeffding" and est.count is None
    # Wider than one model's exact interval on as many examples: the models' errors are not independent.
    lo, hi = _cp(216, 360)
    assert est.high - est.low > hi - lo
    with pytest.raises(ValueError, match="mean"):
        mean_accuracy_estimate(1.5, 10)
    with pytest.raises(ValueError, match="examples"):
        mean_accuracy_estimate(0.5, 0)


@pytest.mark.extended  # imports torch, loads digits and evaluates a network: seconds
def test_build_record_keeps_the_test_count_it_measured():
    import torch

    from defenses._common import build_record
    from dpaudit.data import load_dataset, make_splits
    from dpaudit.models import build_model
    from dpaudit.privacy.claims import NonPrivateClaim
    from dpaudit.train_request import TrainRequest
    from dpaudit.training import SGDConfig

    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0, num_members=40, num_non_members=20)
    torch.manual_seed(0)
    model = build_model("digits-mlp", input_shape=bundle.input_shape, num_classes=bundle.num_classes).eval()
    request = TrainRequest(
        bundle=bundle, splits=splits, model_name="digits-mlp", config=SGDConfig(), seed=0, device=torch.device("cpu")
    )
    rec = build_record(request, defense="nonprivate", model=model, claim=NonPrivateClaim(), started=time.monotonic())
    with torch.no_grad():
        correct = int((model(bundle.test.features).argmax(1) == bundle.test.labels).sum())  # counted here, directly
    assert rec.metrics["test_examples"] == len(bundle.test.labels)
    assert rec.metrics["test_correct"] == correct
    assert rec.metrics["test_accuracy"] == pytest.approx(correct / len(bundle.test.labels))


def test_the_model_page_shows_the_interval_where_the_record_has_the_count_and_says_why_not_where_it_has_none():
    from reports.train import metrics_table, train_verdict

    old = trained("nonprivate", metrics={"test_accuracy": 0.95})
    assert NO_COUNT_REASON in train_verdict(old).headline and "95.0%" in train_verdict(old).headline
    counted = trained("nonprivate", metrics={"test_accuracy": 0.9, "test_examples": 360, "test_correct": 324})
    lo, hi = _cp(324, 360)
    shown = f"90.0% (324/360) [{100 * lo:.1f}%, {100 * hi:.1f}%]"
    head = train_verdict(counted).headline
    assert shown in head and NO_COUNT_REASON not in head
    cells = {str(r[0]): str(r[1]) for r in metrics_table(counted.metrics).rows}
    assert cells["test accuracy"] == shown and cells["test examples"] == "360"
    assert NO_COUNT_REASON in {str(r[0]): str(r[1]) for r in metrics_table(old.metrics).rows}["test accuracy"]


def test_dssgd_and_pate_pages_show_their_accuracies_with_intervals(tmp_path):
    from dpaudit.results import load_record
    from reports.dssgd import accuracy_table, dssgd_verdict
    from reports.pate import load_pate_runs, pate_rows

    record = load_record(build_dssgd_run(tmp_path / "d").record_dirs()[0])
    cells = {str(r[0]): str(r[1]) for r in accuracy_table(record).rows}
    lo, hi = _cp(198, 360)
    assert cells["federation (global model)"] == f"55.0% (198/360) [{100 * lo:.1f}%, {100 * hi:.1f}%]"
    assert cells["federation (global model)"] in dssgd_verdict(record).headline
    lo, hi = _cp(302, 360)
    assert cells["centralised (all data pooled)"] == f"83.9% (302/360) [{100 * lo:.1f}%, {100 * hi:.1f}%]"
    # The stand-alone mean over participants: Hoeffding's half-width on the same 360 test examples.
    half = math.sqrt(math.log(2 / 0.05) / (2 * 360))
    assert (
        cells["standalone (each participant alone)"]
        == f"58.0% [{100 * (0.58 - half):.1f}%, {100 * (0.58 + half):.1f}%]"
    )
    # The local models' mean over the 360 test examples each was scored on: Hoeffding's too.
    assert cells["participants' final local models"] == f"50.0% [{100 * (0.5 - half):.1f}%, {100 * (0.5 + half):.1f}%]"
    # An accuracy that is no count of the stored test set gets no interval rather than a made-up one.
    odd = dataclasses.replace(record, metrics={**record.metrics, "centralised_test_accuracy": 0.84})
    assert NO_COUNT_REASON in {str(r[0]): str(r[1]) for r in accuracy_table(odd).rows}["centralised (all data pooled)"]
    (row,) = pate_rows(load_pate_runs(build_pate_run(tmp_path / "p")))
    lo, hi = _cp(288, 360)
    assert row.student_estimate().text() == f"80.0% (288/360) [{100 * lo:.1f}%, {100 * hi:.1f}%]"
    lo, hi = _cp(20, 20)
    assert row.answer_estimate().text() == f"100.0% (20/20) [{100 * lo:.1f}%, {100 * hi:.1f}%]"


def test_compare_no_violation_states_its_power_and_is_amber_when_the_audit_could_not_show_one(tmp_path):
    from tests.reports.conftest import build_compare_run

    grid = load_comparison(build_compare_run(tmp_path / "run").compare_dirs()[0])
    quiet = dataclasses.replace(
        grid,
        rows=tuple(
            dataclasses.replace(r, verdict="no violation", findings=(), epsilon_lb=0.0, best_attack=None)
            for r in grid.rows
        ),
    )
    verdict = compare_verdict(quiet)
    # A perfect attack on 100 members / 100 non-members: TPR ≥ the CP bound of 100/100 and FPR ≤ that of 0/100, each
    # at (1 − 0.95) / 20 thresholds (one-sided, the two rates' misses summed), ε = ln((TPR − δ)/FPR).
    a = 0.05 / 20 / 2
    tpr_lo, fpr_hi = a ** (1 / 100), 1 - a ** (1 / 100)
    ceiling = math.log((tpr_lo - 1e-5) / fpr_hi)
    assert 1.0 < ceiling < 8.0
    assert verdict.status == "no violation" and verdict.tone == "warn"
    assert "dpsgd-target_epsilon=8" in verdict.headline and "could not have shown a violation" in verdict.headline
    digits = 2 - math.floor(math.log10(ceiling))  # three significant digits, rounded down as a lower bound is
    assert f"at most ε_LB {math.floor(ceiling * 10**digits) / 10**digits:g}" in verdict.headline
    assert any(line.startswith("Power: dpsgd-target_epsilon=1: could have shown") for line in verdict.lines)
    # Claims the attacks could have broken: green, and the power is still said.
    strong = dataclasses.replace(
        quiet,
        rows=tuple(dataclasses.replace(r, epsilon_ub={k: e / 10 for k, e in r.epsilon_ub.items()}) for r in quiet.rows),
    )
    verdict = compare_verdict(strong)
    assert verdict.tone == "ok" and "could have shown a violation" in verdict.headline
    # A comparison stored without the counts cannot state its power: not green.
    old = dataclasses.replace(
        quiet,
        rows=tuple(
            dataclasses.replace(
                r,
                membership={
                    k: dataclasses.replace(m, num_members=None, num_non_members=None) for k, m in r.membership.items()
                },
            )
            for r in quiet.rows
        ),
    )
    assert compare_verdict(old).tone == "info" and "not recorded" in compare_verdict(old).headline


def test_the_compare_matrix_writes_the_accuracy_loss_in_percentage_points(tmp_path):
    from reports.compare_matrix import matrix_rows
    from tests.reports.conftest import build_compare_run

    grid = load_comparison(build_compare_run(tmp_path / "run").compare_dirs()[0])
    columns, rows = matrix_rows(grid)
    loss = {r[0]: r[columns.index("acc. loss")] for r in rows}
    assert str(loss["dpsgd-target_epsilon=1"]) == "5.0\u00a0pp" and float(loss["dpsgd-target_epsilon=1"]) == 0.05
    advantage = {r[0]: r[columns.index("advantage")] for r in rows}
    assert str(advantage["dpsgd-target_epsilon=1"]).startswith("15.0% [")  # a share, like every rate of the page


def test_the_certified_comparison_draws_each_certified_accuracy_with_its_clopper_pearson_bar(tmp_path):
    from reports.certified import comparison_figure, load_certified_runs
    from tests.reports.figure_runs import build_certified_run

    runs = load_certified_runs(build_certified_run(tmp_path / "run"))
    fig = comparison_figure(runs)
    containers = fig.axes[0].containers
    assert len(containers) == sum(len(r.certificates) for r in runs)
    drawn = iter(containers)  # drawn model by model, certificate by certificate
    for run in runs:
        for _name, cert in run.certificates.items():
            bars = next(drawn)
            counts = cert.num_certified(run.curve_radii)
            for seg, k in zip(bars.lines[2][0].get_segments(), counts, strict=True):
                lo, hi = _cp(int(k), cert.num_points)
                assert (seg[0][1], seg[1][1]) == pytest.approx((lo, hi), abs=1e-9)
    # Offset curves do not shrink the axes to the one radius near 0 (their transform is not the data's).
    assert fig.axes[0].get_xlim()[1] >= max(max(r.curve_radii) for r in runs)


def test_accuracy_against_epsilon_is_a_figure_only_with_a_curve_and_draws_its_intervals():
    from reports.certified_figures import AccuracyEpsilonRow, accuracy_epsilon_figure

    def row(eps: float, correct: int) -> AccuracyEpsilonRow:
        lo, hi = _cp(correct, 360)
        return AccuracyEpsilonRow(
            defense="dpsgd",
            model_id=f"m{eps:g}",
            epsilon=eps,
            delta=1e-5,
            conventional_accuracy=correct / 360,
            source="record test accuracy",
            num_points=360,
            correct=correct,
            ci_low=lo,
            ci_high=hi,
        )

    assert accuracy_epsilon_figure([row(1.0, 300)]) is None  # one model: one point, the table's
    fig = accuracy_epsilon_figure([row(1.0, 300), row(4.0, 330)])
    (bars,) = fig.axes[0].containers
    ends = [e for s in bars.lines[2][0].get_segments() for e in (s[0][1], s[1][1])]
    assert ends == pytest.approx([*_cp(300, 360), *_cp(330, 360)])


def test_the_dssgd_figure_names_each_bar_by_what_it_measured_when_no_baseline_was_trained(tmp_path):
    """The review's DSSGD figure: without baselines, the local models' mean was drawn under "standalone (mean)"
    (the tick labels listed every possible bar while only the measured ones were drawn)."""
    from dpaudit.results import load_record
    from reports.dssgd import accuracy_figure

    run = build_dssgd_run(tmp_path / "run")
    (path,) = run.record_dirs()
    record = load_record(path)
    metrics = {
        k: x
        for k, x in record.metrics.items()
        if not k.startswith(("standalone_", "centralised_"))  # a run with baselines = false
    }
    fig = accuracy_figure(dataclasses.replace(record, metrics=metrics))
    assert fig is not None
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["federation", "local models (mean)"]
    widths = sorted(round(float(p.get_width()), 6) for p in ax.patches)
    assert widths == sorted(
        [round(float(metrics["test_accuracy"]), 6), round(float(metrics["local_test_accuracy_mean"]), 6)]
    )


def test_the_dssgd_local_models_mean_has_hoeffdings_interval_and_the_caption_names_only_what_is_drawn(tmp_path):
    # The second review: "local models (mean) 89.6 %" had no interval (its count was not stored), and
    # a run without baselines had a caption describing standalone and centralised bars not drawn.
    from dpaudit.results.record import load_record
    from reports.dssgd import _figure, accuracy_figure, accuracy_table

    (path,) = build_dssgd_run(tmp_path / "run").record_dirs()
    record = load_record(path)
    metrics = {k: x for k, x in record.metrics.items() if not k.startswith(("standalone_", "centralised_"))}
    bare = dataclasses.replace(record, metrics=metrics)
    rows = {row[0]: row for row in accuracy_table(bare).rows}
    cell = str(rows["participants' final local models"][1])
    # Hoeffding at 95 % on 360 examples: half-width sqrt(ln(2/0.05) / (2 * 360)).
    half = math.sqrt(math.log(2 / 0.05) / (2 * 360))
    assert f"[{100 * (0.5 - half):.1f}%, {100 * (0.5 + half):.1f}%]" in cell
    (figure,) = _figure(bare)
    assert "alone" not in figure.caption and "centralised" not in figure.caption and "local models" in figure.caption
    (ax,) = accuracy_figure(bare).axes
    assert len(ax.containers) >= 2  # an interval bar on the federation and on the local models
    # A record stored before the count was kept: the bare share, saying why.
    old = dataclasses.replace(record, metrics={k: x for k, x in metrics.items() if k != "local_test_examples"})
    assert "not stored" in str({r[0]: r for r in accuracy_table(old).rows}["participants' final local models"][1])


def test_the_metrics_table_gives_train_and_non_member_accuracy_with_their_counts_and_intervals():
    # The second review: both model pages' Metrics tables showed train and non-member accuracy bare.
    from reports.train import metrics_table

    metrics = {"train_accuracy": 0.75, "non_member_accuracy": 0.5, "train_loss": 0.3, "odd_accuracy": 0.123}
    table = metrics_table(metrics, counts={"train_accuracy": 40, "non_member_accuracy": 10, "odd_accuracy": 7})
    cells = {str(r[0]): str(r[1]) for r in table.rows}
    lo, hi = _cp(30, 40)
    assert cells["train accuracy"] == f"75.0% (30/40) [{100 * lo:.1f}%, {100 * hi:.1f}%]"
    lo, hi = _cp(5, 10)
    assert cells["non member accuracy"] == f"50.0% (5/10) [{100 * lo:.1f}%, {100 * hi:.1f}%]"
    assert cells["odd accuracy"] == "12.3%"  # 0.123 x 7 is no count: no interval made up


@pytest.mark.extended  # draws a figure
def test_accuracy_against_epsilon_writes_epsilon_ticks_as_plain_numbers():
    # The second review: the compare run's certified page printed 10⁰ and 2×10⁰ on its ε axis.
    from reports.certified_figures import AccuracyEpsilonRow, accuracy_epsilon_figure

    rows = [
        AccuracyEpsilonRow(
            defense="dpsgd", model_id=f"m{e}", epsilon=e, delta=1e-5, conventional_accuracy=0.8, source="test set"
        )
        for e in (1.0, 8.0)
    ]
    fig = accuracy_epsilon_figure(rows)
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert labels and not any("10^" in x or "\\times" in x or "$" in x for x in labels)
