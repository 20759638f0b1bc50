"""DSSGD's budget plan: ``target_epsilon`` against the pure composition c x R x dp_epsilon."""

from __future__ import annotations

import math

import pytest

from defenses._common import config_dict
from defenses.dssgd.config import DSSGDConfig
from defenses.dssgd.plan import DEFAULT_ROUNDS, MAX_ROUNDS, plan_dssgd
from dpaudit.privacy.dssgd import DSSGDClaim
from dpaudit.privacy.dssgd_budget import plan_budget


def _most_rounds(target: float, eps: float, c: int, limit: int = 2000) -> int:
    """Brute force: the largest R with c * R * eps <= target (the pure composition, Dwork & Roth Thm 3.16)."""
    best = 0
    for r in range(1, limit + 1):
        if c * r * eps <= target * (1 + 1e-12):
            best = r
    return best


def _claimed(eps: float, c: int, rounds: int, n: int) -> float:
    """What the record claims: the claim derives each upload's cost from its noise scales."""
    return DSSGDClaim.build(
        epsilon_per_parameter=eps, bound=0.001, threshold=1e-4, uploads_per_round=c, num_rounds=rounds, num_parameters=n
    ).epsilon(delta=1e-5, accountant="pure")


@pytest.mark.parametrize(("target", "c", "rounds"), [(2.0, 961, 2), (1.0, 1, 10), (8.0, 28, 7), (0.5, 12345, 3)])
def test_calibrated_dp_epsilon_spends_exactly_the_target(target: float, c: int, rounds: int) -> None:
    plan = plan_budget(target_epsilon=target, dp_epsilon=None, rounds=rounds, uploads_per_turn=c)
    assert plan.rounds == rounds and plan.dp_epsilon is not None
    assert math.isclose(plan.dp_epsilon, target / (c * rounds), rel_tol=1e-12)
    assert math.isclose(_claimed(plan.dp_epsilon, c, rounds, 10 * c), target, rel_tol=1e-9)
    assert f"{c:,} uploads per turn x {rounds} rounds spend epsilon = {target:g}" in plan.note


@pytest.mark.parametrize(
    ("target", "eps", "c"),
    [(2.0, 0.01, 28), (2.0, 0.001, 961), (2.0, 0.01, 20), (3.0, 0.1, 10), (1.0, 0.003, 7), (0.7, 0.07, 1)],
)
def test_the_most_rounds_the_budget_allows_matches_brute_force(target: float, eps: float, c: int) -> None:
    plan = plan_budget(target_epsilon=target, dp_epsilon=eps, rounds=None, uploads_per_turn=c)
    assert plan.rounds == _most_rounds(target, eps, c)
    assert _claimed(eps, c, plan.rounds, 10 * c) <= target * (1 + 1e-9)
    assert _claimed(eps, c, plan.rounds + 1, 10 * c) > target
    assert (
        f"dp_epsilon {eps:g} reaches epsilon {target:g} after {plan.rounds} rounds" in plan.note
        and "--rounds" in plan.note
    )


def test_rounds_beyond_the_budget_are_refused_naming_the_most_it_allows() -> None:
    assert plan_budget(target_epsilon=2.0, dp_epsilon=0.01, rounds=10, uploads_per_turn=20).rounds == 10  # exactly 2.0
    with pytest.raises(ValueError, match=r"rounds=11 .*lower rounds to at most 10") as info:
        plan_budget(target_epsilon=2.0, dp_epsilon=0.01, rounds=11, uploads_per_turn=20)
    assert getattr(info.value, "argument", "rounds") == "rounds"


def test_a_single_round_above_the_budget_names_the_largest_dp_epsilon() -> None:
    with pytest.raises(
        ValueError, match=r"dp_epsilon=0\.01 exceeds target_epsilon=2 in a single round .*at most 0\.002081"
    ):
        plan_budget(target_epsilon=2.0, dp_epsilon=0.01, rounds=None, uploads_per_turn=961)


def test_a_huge_budget_is_capped_at_the_round_limit_and_says_so() -> None:
    plan = plan_budget(target_epsilon=1e6, dp_epsilon=1e-3, rounds=None, uploads_per_turn=1)
    assert plan.rounds == MAX_ROUNDS and "capped" in plan.note


def test_the_config_counts_c_from_the_upload_fraction_and_the_parameter_count() -> None:
    n = 9610
    c = max(1, min(n, round(0.1 * n)))  # theta_u x |w|, the paper's c
    plan = plan_dssgd(DSSGDConfig(rounds=2, target_epsilon=2.0), num_parameters=n)
    assert plan.budget.uploads_per_turn == c == 961
    assert plan.config.rounds == 2 and math.isclose(plan.config.dp_epsilon * c * 2, 2.0, rel_tol=1e-12)
    budget = plan_dssgd(DSSGDConfig(dp_epsilon=0.001, target_epsilon=2.0), num_parameters=n).config
    assert budget.rounds == 2 and budget.dp_epsilon == 0.001  # floor(2 / 0.961)


def test_a_config_without_a_budget_keeps_its_record_and_id() -> None:
    stored = config_dict(DSSGDConfig())
    assert "target_epsilon" not in stored and stored["rounds"] == DEFAULT_ROUNDS and stored["dp_epsilon"] is None
    assert config_dict(DSSGDConfig(dp_epsilon=0.5))["rounds"] == DEFAULT_ROUNDS
    assert (
        config_dict(DSSGDConfig(target_epsilon=2.0))["rounds"] == DEFAULT_ROUNDS
    )  # calibrates dp_epsilon for 10 rounds
    assert config_dict(DSSGDConfig(target_epsilon=2.0, dp_epsilon=0.1))["rounds"] is None  # the budget decides


def test_an_unplanned_budget_never_uploads_exact_values() -> None:
    with pytest.raises(ValueError, match="plan_dssgd"):
        _ = DSSGDConfig(target_epsilon=2.0).rule
    assert plan_dssgd(DSSGDConfig(target_epsilon=2.0), num_parameters=100).config.rule.dp_epsilon == pytest.approx(
        2.0 / (10 * 10)
    )
