"""Training runs show loss, accuracy and ε over training (issue 46): the DP-SGD trainer stores a per-epoch history in
its record and the trained-model page plots it; old records without one still render."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
import pytest

from defenses.dpsgd.config import DPSGDConfig
from defenses.dpsgd.training import train_dpsgd
from dpaudit.data import load_dataset, make_splits
from dpaudit.privacy.audit_stats import clopper_pearson_interval
from dpaudit.privacy.claims import dpsgd_claim
from dpaudit.results.history import TrainingHistory, epsilon_by_epoch, training_history
from dpaudit.train_request import TrainRequest
from reports.train import history_figure, train_sections


@pytest.fixture(scope="module")
def trained_run():
    """Three epochs of DP-SGD on digits (RDP accountant: cheap), the record and the test set's size."""
    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0)
    cfg = DPSGDConfig(noise_multiplier=1.0, clip_norm=1.0, lot_size=120, epochs=3, learning_rate=0.5, accountant="rdp")
    record, _ = train_dpsgd(
        TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=cfg, seed=0, progress=False)
    )
    return record, len(bundle.test)


@pytest.mark.extended  # trains DP-SGD on digits (seconds)
def test_the_dpsgd_record_stores_a_history_that_agrees_with_its_own_metrics(trained_run):
    record, num_test = trained_run
    history = training_history(record)
    assert history is not None and history.epoch == (1.0, 2.0, 3.0)
    m = record.metrics
    assert history.steps[-1] == m["num_steps"] and len(set(np.diff(history.steps))) == 1
    # The epochs' losses, weighted by their lots, are the run's mean loss (kept by the same loop, summed apart).
    assert np.average(history.train_loss) == pytest.approx(m["train_loss_mean"], rel=0.05)
    # The last epoch's test accuracy is the record's, measured again by the record's own evaluation.
    assert history.test_examples == num_test and history.test_accuracy[-1] == pytest.approx(m["test_accuracy"])


@pytest.mark.extended  # trains DP-SGD on digits (seconds)
def test_epsilon_by_epoch_is_the_claim_of_the_steps_so_far_and_ends_at_the_records_epsilon(trained_run):
    record, _ = trained_run
    history = training_history(record)
    curve = epsilon_by_epoch(record, history, delta=1e-5, accountant="rdp")
    q, sigma = record.metrics["sampling_rate"], record.metrics["noise_multiplier"]
    expected = [
        dpsgd_claim(sampling_rate=q, noise_multiplier=sigma, num_steps=t).epsilon(delta=1e-5, accountant="rdp")
        for t in history.steps
    ]
    assert curve == pytest.approx(expected) and all(np.diff(curve) > 0)
    assert curve[-1] == pytest.approx(record.metrics["epsilon"])  # the run's accountant is RDP here


@pytest.mark.extended  # trains DP-SGD on digits (seconds)
def test_the_page_plots_loss_accuracy_with_intervals_and_epsilon(trained_run):
    record, _ = trained_run
    history = training_history(record)
    fig = history_figure(record, history)
    try:
        loss_ax, acc_ax, eps_ax = fig.axes
        assert list(loss_ax.get_lines()[0].get_ydata()) == pytest.approx(history.train_loss)
        (bars,) = acc_ax.containers
        n = history.test_examples
        segments = bars.lines[2][0].get_segments()
        for a, seg in zip(history.test_accuracy, segments):
            low, high = clopper_pearson_interval(round(a * n), n)
            assert seg[0][1] == pytest.approx(low) and seg[1][1] == pytest.approx(high)
        assert eps_ax.get_lines()[0].get_ydata()[-1] == pytest.approx(record.metrics["epsilon"])
    finally:
        plt.close(fig)
    titles = [s.title for s in train_sections(record)]
    assert "Training history" in titles
    old = dataclasses.replace(record, metrics={k: x for k, x in record.metrics.items() if k != "history"})
    assert "Training history" not in [s.title for s in train_sections(old)]


def _stored_record():
    """A DP-SGD record as the trainer now stores it: 4 epochs of 25 steps at q = 0.04, σ = 1.1, on 360 test examples."""
    from tests.reports.conftest import trained

    claim = dpsgd_claim(sampling_rate=0.04, noise_multiplier=1.1, num_steps=100)
    history = {
        "epoch": [1.0, 2.0, 3.0, 4.0],
        "steps": [25.0, 50.0, 75.0, 100.0],
        "train_loss": [2.2, 1.9, 1.7, 1.6],
        "test_accuracy": [0.4, 0.65, 0.75, 0.8],
        "test_examples": 360,
    }
    metrics = {"sampling_rate": 0.04, "noise_multiplier": 1.1, "epsilon": 1.0, "epsilon_accountant": "pld"}
    return trained("dpsgd", claim, {**metrics, "history": history, "test_accuracy": 0.8, "delta": 1e-5})


def test_the_history_figure_of_a_stored_record_draws_what_it_holds():
    record = _stored_record()
    history = training_history(record)
    fig = history_figure(record, history)
    try:
        loss_ax, acc_ax, eps_ax = fig.axes
        assert list(loss_ax.get_lines()[0].get_ydata()) == pytest.approx(history.train_loss)
        (bars,) = acc_ax.containers
        for a, seg in zip(history.test_accuracy, bars.lines[2][0].get_segments()):
            low, high = clopper_pearson_interval(round(a * 360), 360)
            assert (seg[0][1], seg[1][1]) == pytest.approx((low, high))
        curve, final = eps_ax.get_lines()
        q = [
            dpsgd_claim(sampling_rate=0.04, noise_multiplier=1.1, num_steps=t).epsilon(delta=1e-5, accountant="rdp")
            for t in (25, 50, 75, 100)
        ]
        assert list(curve.get_ydata()) == pytest.approx(q)
        # The run's own accountant (PLD) gives the final point, drawn apart from the RDP curve.
        assert list(final.get_xdata()) == [4.0] and list(final.get_ydata()) == [1.0]
    finally:
        plt.close(fig)


def test_a_malformed_history_is_refused_by_name():
    with pytest.raises(ValueError, match="train_loss"):
        TrainingHistory(epoch=(1.0, 2.0), steps=(5, 10), train_loss=(1.0,))
    with pytest.raises(ValueError, match="steps"):
        TrainingHistory(epoch=(1.0, 2.0), steps=(10, 5), train_loss=(1.0, 0.9))
