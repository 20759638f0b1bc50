"""Soundness of the checks' statistics: under a correct DP-SGD the false-violation rate is at most 1 − confidence.

Simulated in the worst-case geometry the checks play (Nasr et al. 2023, §4; Steinke et al. 2024,
linear loss): the canary's score is (times sampled)·C + N(0, σ²C²T) IN and N(0, σ²C²T) OUT, the
exact last iterate of DP-SGD from a saturated start; state-leakage sees d-dimensional tensors
whose IN side is shifted along one direction by the same count. The claim is the simulated
mechanism's own (q = 0.1, σ = 3, T = 50: ε_UB ≈ 0.97), so every ε_LB > ε_UB is a false alarm.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binom

from attacks.audit.checks.game import bound_scores, sides
from attacks.audit.checks.spec import CheckContext
from attacks.audit.checks.state_leakage import evaluate
from dpaudit.privacy.claims import dpsgd_claim

Q, SIGMA, T = 0.1, 3.0, 50
CLAIM = dpsgd_claim(sampling_rate=Q, noise_multiplier=SIGMA, num_steps=T)
EPSILON_UB = CLAIM.upper_bound(delta=1e-5).epsilon
CONFIDENCE = 0.99  # a check's share of the battery's 95 % over five checks


def ctx() -> CheckContext:
    return CheckContext(
        train_fn=print,
        model_fn=None,
        train_spec="simulated",
        claim=CLAIM,
        delta=1e-5,
        confidence=CONFIDENCE,
        family_confidence=0.95,
        epsilon_ub=EPSILON_UB,
        pool=None,
        directory=Path("."),
        budget_seconds=1.0,
        seed=0,  # type: ignore[arg-type]
    )


def margins(rng: np.random.Generator, n: int, sigma: float = SIGMA) -> tuple[np.ndarray, np.ndarray]:
    is_in = sides(n)
    counts = rng.binomial(T, Q, size=n) * is_in
    return counts + rng.normal(0.0, sigma * np.sqrt(T), size=n), is_in


def allowed(reps: int) -> int:
    """False alarms at most this many: 1 − confidence per repetition, with a 1e-3 tail."""
    return int(binom.ppf(0.999, reps, 1 - CONFIDENCE))


def false_alarms_margin(reps: int, n: int, seed: int, sigma: float = SIGMA) -> int:
    rng = np.random.default_rng(seed)
    c = ctx()
    return sum(bound_scores(c, *margins(rng, n, sigma)).epsilon_lb > EPSILON_UB for _ in range(reps))


def false_alarms_state(reps: int, n: int, dim: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    c = ctx()
    direction = rng.normal(size=dim)
    direction /= np.linalg.norm(direction)
    alarms = 0
    for _ in range(reps):
        is_in = sides(n)
        counts = rng.binomial(T, Q, size=n) * is_in
        noise = rng.normal(0.0, SIGMA * np.sqrt(T), size=(n, dim))
        trials = [{"state:w": counts[i] * direction + noise[i], "state:b": noise[i, :3].copy()} for i in range(n)]
        alarms += evaluate(c, trials, planned=n).epsilon_lb > EPSILON_UB
    return alarms


def test_the_margin_statistic_rarely_alarms_under_the_claim():
    assert false_alarms_margin(reps=40, n=60, seed=1) <= allowed(40)


def test_the_simulation_can_alarm_when_the_noise_is_a_hundredth_of_the_claim():
    assert false_alarms_margin(reps=10, n=60, seed=5, sigma=SIGMA / 100) >= 8


def test_state_leakage_rarely_alarms_under_the_claim():
    assert false_alarms_state(reps=15, n=60, dim=20, seed=2) <= allowed(15)


@pytest.mark.slow
def test_the_margin_statistic_false_violation_rate_is_at_most_one_minus_confidence():
    assert false_alarms_margin(reps=1000, n=80, seed=3) <= allowed(1000)


@pytest.mark.slow
def test_state_leakage_false_violation_rate_is_at_most_one_minus_confidence():
    assert false_alarms_state(reps=300, n=100, dim=50, seed=4) <= allowed(300)
