"""The battery's checks against planted broken doubles and the correct one (small settings, in-process).

Each check must flag the bug it is designed for (ε_LB > ε_UB) and leave the correct DP-SGD of
``checks_doubles.py`` unflagged; the ceiling always bounds ε_LB. The default tier plays few
trainings at 95 % confidence; the slow tier plays each check's default size at its battery share.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attacks.audit.checks import CHECKS, CheckCannotRun, CheckContext
from attacks.audit.checks.game import SATURATION, worst_case_start
from dpaudit.callables import resolve_callable
from dpaudit.data import load_dataset
from dpaudit.privacy.claims import dpsgd_claim

DOUBLES = Path(__file__).with_name("checks_doubles.py")
CLAIM = dpsgd_claim(sampling_rate=0.1, noise_multiplier=3.0, num_steps=50)
EPSILON_UB = CLAIM.upper_bound(delta=1e-5).epsilon


def context(tmp_path: Path, fn: str, check: str, *, trials: int | None, confidence: float = 0.95) -> CheckContext:
    return CheckContext(
        train_fn=resolve_callable(f"{DOUBLES}:{fn}"),
        model_fn=resolve_callable(f"{DOUBLES}:model"),
        train_spec=f"doubles:{fn}",
        claim=CLAIM,
        delta=1e-5,
        confidence=confidence,
        family_confidence=0.95,
        epsilon_ub=EPSILON_UB,
        pool=load_dataset("digits").train,
        directory=tmp_path / check,
        budget_seconds=600.0,
        seed=0,
        trials=trials,
    )


def play(tmp_path, fn, check, trials):
    ev = CHECKS[check].run(context(tmp_path, fn, check, trials=trials))
    assert ev.ceiling >= ev.epsilon_lb - 1e-9
    return ev


def test_the_registry_lists_the_grey_box_checks_first_then_the_five_games_in_order():
    names = CHECKS.names()
    statistical = tuple(n for n in names if CHECKS[n].kind == "statistical")
    assert statistical == ("worst-case", "lot-size", "sampling-rate", "reused-noise", "state-leakage")
    grey = tuple(n for n in names if CHECKS[n].kind == "grey-box")
    assert names == grey + statistical and len(grey) == 7
    for name in CHECKS:
        spec = CHECKS[name]
        assert spec.detects and spec.misses and spec.violation
        assert spec.needs_initial_state == (spec.kind == "statistical")


def test_the_worst_case_start_saturates_class_zero():
    pool = load_dataset("digits").train
    start = worst_case_start(resolve_callable(f"{DOUBLES}:model"), pool, seed=0)
    net = resolve_callable(f"{DOUBLES}:model")()
    from dpaudit.weights import weights_from_bytes

    net.load_state_dict(weights_from_bytes(start.state))
    with torch.no_grad():
        logits = net(start.zero_gradient.features[:50])
    assert (logits.argmax(1) == 0).all()
    assert float((logits[:, 0] - logits[:, 1:].max(1).values).min()) > SATURATION - 1
    assert int(start.canary.labels[0]) != 0 and (start.zero_gradient.labels == 0).all()


def test_a_model_without_a_class_layer_cannot_start():
    with pytest.raises(CheckCannotRun, match="no nn.Linear with 10 outputs"):
        worst_case_start(
            lambda: torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 3)),
            load_dataset("digits").train,
            seed=0,
        )


@pytest.mark.extended
def test_worst_case_flags_missing_noise(tmp_path):
    broken = play(tmp_path, "train_no_noise", "worst-case", 28)
    assert broken.epsilon_lb > EPSILON_UB


@pytest.mark.extended
def test_lot_size_flags_a_dataset_size_normaliser(tmp_path):
    ev = play(tmp_path, "train_dataset_size", "lot-size", 32)
    assert ev.epsilon_lb > EPSILON_UB
    assert ev.details["sizes"] == {"shared-lot": 1, "integer-crossing": 19}


@pytest.mark.extended
def test_reused_noise_flags_a_constant_noise_seed(tmp_path):
    ev = play(tmp_path, "train_constant_noise_seed", "reused-noise", 48)
    assert ev.epsilon_lb > EPSILON_UB


@pytest.mark.extended
def test_state_leakage_flags_an_unnoised_bias(tmp_path):
    ev = play(tmp_path, "train_unnoised_bias", "state-leakage", 72)
    assert ev.epsilon_lb > EPSILON_UB
    assert ev.details["tensor"].endswith("bias")


@pytest.mark.slow
@pytest.mark.parametrize("check", ["worst-case", "lot-size", "sampling-rate", "reused-noise", "state-leakage"])
def test_the_correct_double_passes_every_check(tmp_path, check):
    ev = CHECKS[check].run(context(tmp_path, "train", check, trials=None, confidence=0.99))
    assert ev.epsilon_lb <= EPSILON_UB < ev.ceiling


@pytest.mark.slow
def test_lot_size_flags_realised_lot_normalisation(tmp_path):
    ev = CHECKS["lot-size"].run(context(tmp_path, "train_realised_lot", "lot-size", trials=None, confidence=0.99))
    assert ev.epsilon_lb > EPSILON_UB


@pytest.mark.slow
def test_sampling_rate_flags_a_class_balanced_sampler(tmp_path):
    ev = CHECKS["sampling-rate"].run(
        context(tmp_path, "train_class_balanced", "sampling-rate", trials=None, confidence=0.99)
    )
    assert ev.epsilon_lb > EPSILON_UB


def test_nan_scores_count_as_the_lowest(tmp_path):
    from attacks.audit.checks.game import finite

    out = finite(np.array([np.nan, np.inf, -np.inf, 1.0]))
    assert np.isfinite(out).all() and out[0] == out[2] < out[3] < out[1]
