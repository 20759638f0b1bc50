"""Default sizes sized from a stated time budget (dpaudit/compute_budget.py): Secure-SGD's epochs, certify's examples.

The FLOP counts are checked against the layers' arithmetic written out by hand, and the sizes
against the budget formula, so a model or a constant that changes is caught.
"""

from __future__ import annotations

import math

from defenses.noise_layer.configs import SecureSGDConfig
from defenses.noise_layer.secure_sgd import TRAINING_BUDGET_SECONDS, resolve_secure_sgd_config
from dpaudit.app.runs.certify_defaults import CERTIFY_BUDGET_SECONDS, default_num_examples
from dpaudit.compute_budget import (
    PER_EXAMPLE_GRADIENT_FACTOR,
    REFERENCE_FLOPS_PER_SECOND,
    TRAINING_STEP_FACTOR,
    forward_flops,
)


def _hgm_cnn_flops() -> int:
    # conv 5x5 1->32 on 28x28 ('same'), conv 5x5 32->64 on 14x14, FC 64*7*7 -> 256, FC 256 -> 10; 2 per MAC.
    macs = 28 * 28 * 32 * 25 * 1 + 14 * 14 * 64 * 25 * 32 + 64 * 7 * 7 * 256 + 256 * 10
    return 2 * macs


def test_forward_flops_are_the_layers_arithmetic() -> None:
    assert forward_flops("hgm-cnn", input_shape=(1, 28, 28), num_classes=10) == _hgm_cnn_flops()
    assert forward_flops("softmax-regression", input_shape=(1, 8, 8), num_classes=10) == 2 * 64 * 10


def test_secure_sgd_default_epochs_fit_the_budget_and_explicit_epochs_are_kept() -> None:
    facts = {"model_name": "hgm-cnn", "model_options": {}, "input_shape": (1, 28, 28), "num_classes": 10}
    config, note = resolve_secure_sgd_config(SecureSGDConfig(target_epsilon=2.0), num_members=30_000, **facts)
    per_example = _hgm_cnn_flops() * TRAINING_STEP_FACTOR * PER_EXAMPLE_GRADIENT_FACTOR
    seconds = config.epochs * 30_000 * per_example / REFERENCE_FLOPS_PER_SECOND
    assert seconds <= TRAINING_BUDGET_SECONDS < (config.epochs + 1) * seconds / config.epochs
    assert config.epochs == 2 and "epochs capped at 2" in note  # rule 4 alone gives 8 (500 steps of 512)
    mine, note = resolve_secure_sgd_config(SecureSGDConfig(target_epsilon=2.0, epochs=8), num_members=30_000, **facts)
    assert mine.epochs == 8 and "capped" not in (note or "")
    small, note = resolve_secure_sgd_config(
        SecureSGDConfig(target_epsilon=2.0),
        num_members=718,
        model_name="digits-mlp",
        model_options={},
        input_shape=(1, 8, 8),
        num_classes=10,
    )
    assert small.epochs == 40 and "capped" not in note  # a small model is not touched


def test_secure_sgd_with_no_flags_at_all_is_capped_too() -> None:
    # Without a target the length is the config's default of 10 epochs, not one the user named: the
    # budget caps it (MNIST's hgm-cnn: 10 epochs projected about 25 minutes of DP-SGD on 2 cores).
    facts = {"model_name": "hgm-cnn", "model_options": {}, "input_shape": (1, 28, 28), "num_classes": 10}
    config, note = resolve_secure_sgd_config(SecureSGDConfig(), num_members=30_000, **facts)
    assert SecureSGDConfig().epochs == 10 and config.epochs == 2 and "epochs capped at 2" in note
    named, note = resolve_secure_sgd_config(SecureSGDConfig(epochs=10), num_members=30_000, **facts)
    assert named.epochs == 10 and "capped" not in (note or "")


def test_certify_default_examples_fit_the_budget() -> None:
    n = default_num_examples(
        model_name="hgm-cnn", input_shape=(1, 28, 28), num_classes=10, model_options={}, draws=2_100
    )
    assert n == math.floor(CERTIFY_BUDGET_SECONDS * REFERENCE_FLOPS_PER_SECOND / (_hgm_cnn_flops() * 2_100))
    assert 100 <= n < 500  # 500 projected 11 minutes on 2 cores
    assert (
        default_num_examples(
            model_name="digits-mlp", input_shape=(1, 8, 8), num_classes=10, model_options={}, draws=10_100
        )
        == 500
    )
