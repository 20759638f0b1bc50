"""PATE's derived defaults and its budget rule (defenses/pate/plan.py, dpaudit/privacy/pate/budget.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant

from defenses.pate.config import PATEConfig
from defenses.pate.plan import plan_pate
from dpaudit.privacy.pate.budget import worst_case_epsilon
from dpaudit.privacy.pate.votes import GNMAX_ORDERS

DIGITS = {"num_members": 718, "num_public": 324, "num_classes": 10}


def _reference_epsilon(*, queries: int, sigma: float, threshold_sigma: float | None, delta: float) -> float:
    """dp_accounting's RDP of the same Gaussian mechanisms, standard conversion over the same orders.

    GNMax's histogram has L2 sensitivity sqrt(2): a Gaussian of noise multiplier sigma/sqrt(2); the
    threshold step's top count has sensitivity 1: noise multiplier sigma_1.
    """
    acc = rdp_privacy_accountant.RdpAccountant(list(GNMAX_ORDERS))
    acc.compose(dp_event.GaussianDpEvent(sigma / math.sqrt(2.0)), queries)
    if threshold_sigma is not None:
        acc.compose(dp_event.GaussianDpEvent(threshold_sigma), queries)
    rdp = np.asarray(acc._rdp)  # the accumulated RDP curve
    return float(np.min(rdp + math.log(1.0 / delta) / (np.asarray(GNMAX_ORDERS) - 1.0)))


def test_defaults_scale_the_2018_mnist_setting_with_the_teacher_count() -> None:
    # MNIST's 57,000 members: the papers' 250 teachers, T = 200, sigma_1 = 150, sigma_2 = 40, 640 queries.
    cfg = plan_pate(PATEConfig(), num_members=57_000, num_public=9_000, num_classes=10).config
    assert (cfg.teachers, cfg.threshold, cfg.threshold_sigma, cfg.sigma, cfg.queries, cfg.epochs) == (
        250,
        200.0,
        150.0,
        40.0,
        640,
        25,
    )
    assert cfg.analysis == "data-dependent"
    # digits: one teacher per 20 members, enough epochs for 200 steps, the whole public pool.
    plan = plan_pate(PATEConfig(), **DIGITS)
    assert (plan.config.teachers, plan.config.epochs, plan.config.queries) == (35, 200, 324)
    assert (
        plan.config.threshold == pytest.approx(28.0)
        and plan.config.sigma == pytest.approx(5.6)
        and plan.config.threshold_sigma == pytest.approx(21.0)
    )
    assert any("teachers = 35" in n for n in plan.notes)
    # Explicit values are kept, and a resolved config is its own plan.
    given = PATEConfig(teachers=8, sigma=1.0, threshold=6.0, threshold_sigma=2.0, queries=120, epochs=20)
    assert given.resolved() and plan_pate(given, **DIGITS).config == given and plan_pate(given, **DIGITS).notes == ()


@pytest.mark.parametrize("target", [1.0, 2.0, 8.0])
def test_a_budget_without_sigma_is_met_by_the_data_independent_bound_of_every_query(target: float) -> None:
    plan = plan_pate(PATEConfig(target_epsilon=target), **DIGITS)
    cfg = plan.config
    assert cfg.analysis == "data-independent"  # the published bound, never the private one
    assert (
        cfg.aggregator == "gnmax" and PATEConfig().aggregator == "confident-gnmax"
    )  # a budget pays for every query anyway
    reference = _reference_epsilon(
        queries=cfg.queries, sigma=cfg.sigma, threshold_sigma=cfg.threshold_sigma, delta=cfg.delta
    )
    assert reference == pytest.approx(plan.epsilon_planned, rel=1e-9)
    assert reference <= target * (1 + 1e-9)
    assert reference >= 0.95 * target or cfg.queries == 324  # spends the budget, does not waste it
    assert any(f"target_epsilon = {target:g}" in n for n in plan.notes)


def test_queries_without_sigma_calibrate_sigma_and_sigma_without_queries_solves_the_queries() -> None:
    plan = plan_pate(PATEConfig(aggregator="confident-gnmax", target_epsilon=2.0, queries=50), **DIGITS)
    eps = _reference_epsilon(
        queries=50, sigma=plan.config.sigma, threshold_sigma=plan.config.threshold_sigma, delta=1e-5
    )
    assert 0.998 * 2.0 <= eps <= 2.0
    assert any("calibrated so that 50 queries" in n for n in plan.notes)
    plan = plan_pate(
        PATEConfig(aggregator="confident-gnmax", target_epsilon=2.0, sigma=20.0, threshold_sigma=75.0), **DIGITS
    )
    q = plan.config.queries
    assert (
        _reference_epsilon(queries=q, sigma=20.0, threshold_sigma=75.0, delta=1e-5)
        <= 2.0
        < _reference_epsilon(queries=q + 1, sigma=20.0, threshold_sigma=75.0, delta=1e-5)
    )
    assert any(f"allows {q} queries" in n for n in plan.notes)


def test_an_unmeetable_budget_is_refused_naming_what_it_allows() -> None:
    allowed = plan_pate(PATEConfig(aggregator="gnmax", target_epsilon=2.0, sigma=10.0), **DIGITS).config.queries
    with pytest.raises(ValueError, match=rf"queries=100 exceeds the {allowed} queries that sigma=10.0 allows"):
        plan_pate(PATEConfig(aggregator="gnmax", target_epsilon=2.0, sigma=10.0, queries=100), **DIGITS)
    assert (
        plan_pate(
            PATEConfig(aggregator="gnmax", target_epsilon=2.0, sigma=10.0, queries=allowed), **DIGITS
        ).config.queries
        == allowed
    )
    with pytest.raises(ValueError, match="exceeded by a single query"):
        plan_pate(PATEConfig(aggregator="gnmax", target_epsilon=0.5, sigma=1.0), **DIGITS)
    with pytest.raises(ValueError, match="target_epsilon.*lnmax"):
        PATEConfig(aggregator="lnmax", target_epsilon=2.0)
    with pytest.raises(ValueError, match="queries=400 exceeds the 324 public"):
        plan_pate(PATEConfig(queries=400), **DIGITS)


def test_worst_case_epsilon_matches_dp_accounting_over_random_parameters() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        q, s = int(rng.integers(1, 2000)), float(rng.uniform(1.0, 200.0))
        s1 = None if rng.random() < 0.5 else float(rng.uniform(1.0, 500.0))
        assert worst_case_epsilon(num_queries=q, sigma=s, threshold_sigma=s1, delta=1e-5) == pytest.approx(
            _reference_epsilon(queries=q, sigma=s, threshold_sigma=s1, delta=1e-5), rel=1e-9
        )


def test_a_budget_refuses_a_smooth_sensitivity_release_it_would_not_cover() -> None:
    with pytest.raises(
        ValueError, match="smooth_sensitivity_beta: target_epsilon=2.0 is met by the data-independent bound"
    ):
        PATEConfig(
            target_epsilon=2.0, analysis="data-dependent", smooth_sensitivity_beta=0.03, smooth_sensitivity_sigma=15.0
        )
