"""``dpaudit train --defense pate``: what the student's record claims (issue 29, defects 3 and 5).

The claim charges Confident-GNMax's GNMax step to the queries that were answered (the realised
cost, not the expectation over the threshold step), and a smooth-sensitivity release made while
training draws fresh noise (the run's seed is stored in the record: noise derived from it could be
recomputed and removed) at an order fixed from public parameters.
"""

from __future__ import annotations

import numpy as np

from defenses.pate.aggregators import aggregate
from defenses.pate.config import PATEConfig
from defenses.pate.defense import _analyse
from dpaudit.privacy.pate import analysis, smooth_sensitivity
from dpaudit.privacy.pate import claim as pate_claim

ROW = [200, 30, 10, 10, 0, 0, 0, 0, 0, 0]


def test_a_students_claim_is_the_realised_cost_and_its_release_is_fresh_and_publicly_ordered() -> None:
    votes = np.array([ROW] * 30 + [[120, 100, 30, 0, 0, 0, 0, 0, 0, 0]] * 10, dtype=np.int64)
    # The 2018 MNIST aggregator, given explicitly (the defaults are now derived from the data size).
    config = PATEConfig(
        teachers=250,
        threshold=200.0,
        threshold_sigma=150.0,
        sigma=40.0,
        queries=40,
        epochs=20,
        smooth_sensitivity_beta=0.0329,
        smooth_sensitivity_sigma=2.0,
    )
    agg = aggregate(votes, config.aggregator_config(), seed=0)
    assert 0 < agg.num_answered < 40
    # sigma_ss = 2 keeps the noisy RDP clear of its clip at 0, so two fresh draws differ (at 15 they often both clip)
    first, second = _analyse(config, agg), _analyse(config, agg)
    result, release = first
    kw = {"threshold": 200.0, "threshold_sigma": 150.0, "sigma": 40.0, "delta": 1e-5}
    realised = analysis.analyze_confident_gnmax(votes, **kw, answered=agg.answered).data_dependent
    assert result.data_dependent.cost == "realised" and result.data_dependent.epsilon == realised.epsilon
    assert result.data_dependent.epsilon != analysis.analyze_confident_gnmax(votes, **kw).data_dependent.epsilon
    assert release.private and release.seed is None
    assert release.epsilon_noisy_estimate != second[1].epsilon_noisy_estimate
    public = smooth_sensitivity.release_order(
        sigma=40.0,
        num_answered=agg.num_answered,
        num_queries=40,
        threshold_sigma=150.0,
        delta=1e-5,
        beta=0.0329,
        sigma_ss=2.0,
    )
    assert release.order == public and release.order_rule == "public"
    claim = pate_claim.pate_claim(
        result,
        parameters={"threshold": 200.0, "threshold_sigma": 150.0, "sigma": 40.0},
        num_answered=agg.num_answered,
        release=release,
    )
    assert "noisy estimate" in claim.statement() and claim.orders == (public,)
