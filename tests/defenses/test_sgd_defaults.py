"""The non-private SGD defaults from public facts (defenses/sgd_defaults.py, docs/defenses/nonprivate.md).

Checked against the rules written out by hand (closed forms), and against the fixed values the
baseline had before, which MNIST-, digits- and Adult-sized runs must keep (their records' ids too).
"""

from __future__ import annotations

import math

import pytest

from defenses.nonprivate import NonPrivateConfig, resolve_nonprivate_config
from defenses.sgd_defaults import (
    derived_batch_size,
    derived_epochs,
    derived_learning_rate,
    first_layer_fan_in,
    resolve_sgd_config,
)
from defenses.smoothing import SmoothingConfig


class _Faces:
    name = "faces"
    input_shape = (1, 112, 92)
    num_classes = 40


class _Digits:
    name = "digits"
    input_shape = (1, 8, 8)
    num_classes = 10


def test_first_layer_fan_in_reads_the_architecture() -> None:
    assert first_layer_fan_in("faces-mlp", input_shape=(1, 112, 92), num_classes=40) == 112 * 92
    assert first_layer_fan_in("softmax-regression", input_shape=(1, 8, 8), num_classes=10) == 64
    assert first_layer_fan_in("hgm-cnn", input_shape=(1, 28, 28), num_classes=10) == 1 * 5 * 5  # conv 5x5, 1 channel


def test_the_rules_by_hand() -> None:
    # Rule 1: 64 halved while above N/4.
    assert [derived_batch_size(n) for n in (1, 4, 100, 140, 255, 256, 30_000)] == [1, 1, 16, 32, 32, 64, 64]
    # Rule 2: 0.05 * min(1, sqrt(784 / fan-in)).
    assert derived_learning_rate(64) == 0.05 and derived_learning_rate(784) == 0.05
    assert derived_learning_rate(10_304) == pytest.approx(0.05 * math.sqrt(784 / 10_304))
    assert derived_learning_rate(None) == 0.05
    # Rule 3: 10 epochs, or the fewest with 5 steps per class: 140 members in batches of 32 make 5 steps
    # an epoch, and 40 classes want 200 steps.
    assert derived_epochs(num_members=140, batch_size=32, num_classes=40) == 40
    assert derived_epochs(num_members=718, batch_size=64, num_classes=10) == 10  # 12 steps an epoch: 120 >= 50


def test_runs_the_fixed_values_suited_keep_them_and_explicit_flags_win() -> None:
    resolved, note = resolve_nonprivate_config(
        NonPrivateConfig(), num_members=718, model_name="digits-mlp", bundle=_Digits()
    )
    assert (resolved.epochs, resolved.batch_size, resolved.learning_rate) == (10, 64, 0.05)
    assert resolved == NonPrivateConfig(epochs=10, batch_size=64, learning_rate=0.05)  # the same id as before
    assert note is not None and "derived from N=718" in note
    faces, note = resolve_nonprivate_config(
        NonPrivateConfig(), num_members=140, model_name="faces-mlp", bundle=_Faces()
    )
    assert (faces.epochs, faces.batch_size) == (40, 32)
    assert faces.learning_rate == pytest.approx(0.05 * math.sqrt(784 / 10_304))
    assert "--learning-rate" in note and "--batch-size" in note and "--epochs" in note
    mine, note = resolve_nonprivate_config(
        NonPrivateConfig(learning_rate=0.01, epochs=100), num_members=140, model_name="faces-mlp", bundle=_Faces()
    )
    assert (mine.learning_rate, mine.epochs, mine.batch_size) == (0.01, 100, 32) and "--learning-rate" not in note
    # Resolving again derives nothing; smoothing (which extends the config) resolves the same way.
    assert resolve_sgd_config(faces, num_members=140) == (faces, ())
    smooth, _ = resolve_nonprivate_config(SmoothingConfig(), num_members=140, model_name="faces-mlp", bundle=_Faces())
    assert isinstance(smooth, SmoothingConfig) and smooth.batch_size == 32


@pytest.mark.extended  # reads the AT&T faces and trains 200 steps of a linear model
def test_default_nonprivate_training_on_faces_learns(tmp_path) -> None:
    from dpaudit.app.runs.train import TrainSpec, train_or_load
    from dpaudit.data import DatasetNotFoundError, load_dataset
    from dpaudit.store import RunDir

    try:
        load_dataset("faces")
    except DatasetNotFoundError:
        pytest.skip("the AT&T faces are not under the data root (DPAUDIT_DATA_ROOT)")
    out = train_or_load(
        TrainSpec(defense="nonprivate", dataset="faces", model="softmax-regression", progress=False),
        RunDir(tmp_path / "run"),
    )
    m = out.record.metrics
    # Old defaults: test accuracy 0.158, training loss 72.7 (diverged). Measured with the derived ones: 0.83.
    assert m["test_accuracy"] >= 0.5 and m["near_chance"] is False
    assert out.record.config["epochs"] == 40 and out.record.config["batch_size"] == 32
