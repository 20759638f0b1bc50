"""The score bounds hold jointly at the confidence they state (issue 42, part 5).

Which bound a class gets (lower for the predicted class, upper for the others) depends on the
prediction. Read from the bounds' own draws, that choice is made after seeing the counts, so
both bounds of every class must hold: 2k one-sided bounds at η/(2k) each. With the class chosen
beforehand on independent draws, k one-sided bounds at η/k suffice. The tests check the levels
against scipy.stats.beta directly, and the joint coverage against a known multinomial twice:
an exact enumeration of every outcome (its own implementation of the procedure, scipy only)
and a seeded simulation of the project's code.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from dpaudit.robustness import score_bounds

# A near tie: two classes share the top, so which one is "top" flips from draw set to draw set.
NEAR_TIE = np.array([0.4, 0.4, 0.2])
N_DRAWS, ETA, REPEATS = 50, 0.2, 20_000


def _binomial_slack(rate: float, repeats: int) -> float:
    """Four binomial standard deviations of a failure rate measured over ``repeats`` repetitions."""
    return 4.0 * math.sqrt(rate * (1.0 - rate) / repeats)


def _exact_failure(p: np.ndarray, n: int, level: float) -> float:
    """P(some bound fails) for CP bounds at ``level`` whose top class is the largest count of the same draws.

    Enumerates every outcome of the multinomial; the bounds are scipy's beta quantiles, not the
    project's code.
    """
    k = len(p)
    heads = [h for h in itertools.product(range(n + 1), repeat=k - 1) if sum(h) <= n]
    counts = np.array([[*h, n - sum(h)] for h in heads])
    rows = np.arange(len(counts))
    top = np.argmax(counts, axis=1)
    n_top = counts[rows, top]
    second = np.sort(counts, axis=1)[:, -2]  # the largest count among the other classes
    lower = np.where(n_top > 0, stats.beta.ppf(level, np.maximum(n_top, 1), n - n_top + 1), 0.0)
    upper = np.where(second < n, stats.beta.ppf(1 - level, second + 1, np.maximum(n - second, 1)), 1.0)
    failed = (lower > p[top]) | (upper < _runner_up(p)[top])
    return float(stats.multinomial.pmf(counts[failed], n, p).sum())


def _runner_up(p: np.ndarray) -> np.ndarray:
    """For each class c, the largest probability among the other classes (what the upper bound must cover)."""
    return np.array([np.max(np.delete(p, c)) for c in range(len(p))])


def test_same_draw_bounds_are_beta_quantiles_at_eta_over_2k() -> None:
    # The old bounds were at η/k on both sides while reading the top class from the same counts.
    rng = np.random.default_rng(0)
    k, n, confidence = 10, 400, 0.95
    counts = rng.multinomial(n, rng.dirichlet(np.ones(k)), size=30)
    b = score_bounds.count_bounds(counts, confidence=confidence)
    level = (1 - confidence) / (2 * k)
    for row, top, lo, up in zip(counts, b.top, b.lower, b.upper):
        assert top == np.argmax(row)
        second = np.max(np.delete(row, top))
        assert lo == pytest.approx(stats.beta.ppf(level, row[top], n - row[top] + 1), rel=1e-12)
        assert up == pytest.approx(stats.beta.ppf(1 - level, second + 1, n - second), rel=1e-12)
    assert b.selection == "same-draws" and b.level(k) == pytest.approx(level)


def test_selected_bounds_are_beta_quantiles_at_eta_over_k_on_the_chosen_class() -> None:
    rng = np.random.default_rng(1)
    k, n, confidence = 4, 300, 0.9
    counts = rng.multinomial(n, [0.3, 0.3, 0.2, 0.2], size=25)
    chosen = rng.integers(0, k, size=25)
    b = score_bounds.count_bounds(counts, confidence=confidence, selected=chosen)
    level = (1 - confidence) / k
    for row, c, lo, up in zip(counts, chosen, b.lower, b.upper):
        second = np.max(np.delete(row, c))
        want_lo = stats.beta.ppf(level, row[c], n - row[c] + 1) if row[c] > 0 else 0.0
        assert lo == pytest.approx(want_lo, rel=1e-12, abs=1e-15)
        assert up == pytest.approx(stats.beta.ppf(1 - level, second + 1, n - second), rel=1e-12)
    assert b.top.tolist() == chosen.tolist() and b.selection == "separate-draws"


def test_hoeffding_level_follows_the_selection() -> None:
    means = np.array([[0.5, 0.3, 0.2]])
    same = score_bounds.mean_bounds(means, num_draws=100, confidence=0.9)
    fixed = score_bounds.mean_bounds(means, num_draws=100, confidence=0.9, selected=np.array([1]))
    assert same.lower[0] == pytest.approx(0.5 - math.sqrt(math.log(6 / 0.1) / 200))
    assert fixed.top.tolist() == [1] and fixed.lower[0] == pytest.approx(0.3 - math.sqrt(math.log(3 / 0.1) / 200))
    assert fixed.upper[0] == pytest.approx(0.5 + math.sqrt(math.log(3 / 0.1) / 200))


def test_same_draw_bounds_fail_jointly_at_most_eta_exactly_and_by_simulation() -> None:
    k = len(NEAR_TIE)
    exact = _exact_failure(NEAR_TIE, N_DRAWS, ETA / (2 * k))
    assert exact <= ETA
    rng = np.random.default_rng(42)
    counts = rng.multinomial(N_DRAWS, NEAR_TIE, size=REPEATS)
    b = score_bounds.count_bounds(counts, confidence=1 - ETA)
    other = _runner_up(NEAR_TIE)[b.top]
    failed = (b.lower > NEAR_TIE[b.top]) | (b.upper < other)
    # The project's bounds fail as often as the enumeration says, and no more often than η.
    assert abs(failed.mean() - exact) <= _binomial_slack(exact, REPEATS)
    assert failed.mean() <= ETA + _binomial_slack(ETA, REPEATS)


def test_bounds_on_a_class_chosen_on_separate_draws_fail_at_most_eta() -> None:
    rng = np.random.default_rng(43)
    selection = rng.multinomial(10, NEAR_TIE, size=REPEATS)  # CERTIFY's n0 draws, independent of the estimate
    chosen = np.argmax(selection, axis=1)
    counts = rng.multinomial(N_DRAWS, NEAR_TIE, size=REPEATS)
    b = score_bounds.count_bounds(counts, confidence=1 - ETA, selected=chosen)
    other = _runner_up(NEAR_TIE)[chosen]
    failed = (b.lower > NEAR_TIE[chosen]) | (b.upper < other)
    assert failed.mean() <= ETA + _binomial_slack(ETA, REPEATS)


def test_hoeffding_bounds_fail_jointly_at_most_eta() -> None:
    # One-hot scores, whose expectation is the class probability: the truth is known.
    rng = np.random.default_rng(44)
    repeats, n = 4_000, 40
    draws = rng.multinomial(1, NEAR_TIE, size=(repeats, n))
    b = score_bounds.mean_bounds(draws.mean(axis=1), num_draws=n, confidence=1 - ETA)
    other = _runner_up(NEAR_TIE)[b.top]
    failed = (b.lower > NEAR_TIE[b.top]) | (b.upper < other)
    assert failed.mean() <= ETA + _binomial_slack(ETA, repeats)


def test_selected_classes_are_validated() -> None:
    counts = np.array([[5, 3, 2], [1, 8, 1]])
    with pytest.raises(ValueError, match="selected"):
        score_bounds.count_bounds(counts, selected=np.array([0]))
    with pytest.raises(ValueError, match="selected"):
        score_bounds.count_bounds(counts, selected=np.array([0, 3]))
    with pytest.raises(TypeError, match="selected"):
        score_bounds.mean_bounds(np.array([[0.6, 0.4]]), num_draws=10, selected=np.array([0.5]))
