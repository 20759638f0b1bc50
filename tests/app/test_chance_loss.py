"""The near-chance warning judges the training loss against guessing, not only the test accuracy.

Reference values are closed forms: ln K for K balanced classes, the entropy of the test set's class
frequencies otherwise (the cross-entropy of always predicting them).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from defenses.nonprivate import NonPrivateConfig
from dpaudit.app.runs.train import CHANCE_MARGIN, LOSS_MARGIN, TrainSpec, chance_check, guess_loss, train_or_load
from dpaudit.store import RunDir


def test_guess_loss_is_the_entropy_of_the_class_frequencies() -> None:
    assert guess_loss(list(range(40)) * 5, num_classes=40) == pytest.approx(math.log(40))
    # 3:1 → −(¾ ln ¾ + ¼ ln ¼)
    assert guess_loss([0, 0, 0, 1], num_classes=2) == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))
    assert guess_loss([], num_classes=10) == pytest.approx(math.log(10))


def test_a_model_at_the_uniform_guess_loss_is_near_chance_whatever_its_accuracy() -> None:
    # The faces run of issue 48: test accuracy 0.05 (2.5 points above chance 0.025, so not flagged by
    # accuracy), training loss 3.685 against ln 40 = 3.689.
    labels = list(range(40)) * 5
    at_guess = chance_check(0.05, labels, num_classes=40, train_loss=3.685)
    assert 0.05 > 1 / 40 + CHANCE_MARGIN  # the accuracy rule alone lets it pass
    assert at_guess.near_chance is True and at_guess.near_chance_by == "loss"
    assert at_guess.guess_loss == pytest.approx(math.log(40))
    # A loss clearly below guessing is learning; a loss above it (divergence) is not.
    learned = chance_check(0.05, labels, num_classes=40, train_loss=math.log(40) - 2 * LOSS_MARGIN)
    assert learned.near_chance is False and learned.near_chance_by is None
    assert chance_check(0.9, labels, num_classes=40, train_loss=7.5).near_chance_by == "loss"
    both = chance_check(0.03, labels, num_classes=40, train_loss=math.log(40))
    assert both.near_chance_by == "accuracy and loss"
    # Without a loss (a randomized model) only the accuracy is judged, as before.
    assert chance_check(0.05, labels, num_classes=40).near_chance is False


@pytest.mark.extended
def test_a_record_whose_loss_did_not_move_is_flagged_and_says_why(tmp_path: Path, capsys) -> None:
    # A learning rate that cannot move the weights: softmax regression on digits keeps its initial
    # loss, within a few hundredths of ln 10 (its test accuracy is whatever the initialisation gives).
    dead = TrainSpec(
        defense="nonprivate",
        model="softmax-regression",
        seed=3,
        config=NonPrivateConfig(epochs=1, learning_rate=1e-9),
        progress=False,
    )
    m = train_or_load(dead, RunDir(tmp_path / "run")).record.metrics
    assert abs(m["train_loss"] - math.log(10)) < 0.2  # the independent fact the check relies on
    assert m["near_chance"] is True and "loss" in m["near_chance_by"]
    # The test set's label entropy, by scipy's own implementation (digits' test classes are nearly balanced).
    import numpy as np
    from scipy.stats import entropy

    from dpaudit.data import load_dataset

    labels = np.asarray(load_dataset("digits").test.labels).astype(int)
    assert m["guess_loss"] == pytest.approx(entropy(np.bincount(labels, minlength=10)))
    assert m["guess_loss"] == pytest.approx(math.log(10), abs=0.03)
    err = capsys.readouterr().err
    assert "trained to chance" in err and "training loss" in err and "guessing the class frequencies" in err
