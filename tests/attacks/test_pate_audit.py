"""The PATE aggregator audit (issue 12, "Attacks and audits"): planted bugs are flagged, the real aggregators never.

Each audit here draws 10^5 answers on each of two neighbouring vote histograms (~0.1 s).
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from attacks.audit.pate import answer_counts, neighbouring_votes, pate_audit, per_query_upper_bound
from defenses.pate.aggregators import ConfidentGNMaxConfig, GNMaxConfig, LNMaxConfig, aggregate
from defenses.pate.planted import (
    PLANTED_PATE_BUGS,
    aggregate_noise_scale_too_small,
    aggregate_threshold_without_noise,
    planted_aggregator,
)
from dpaudit.privacy.pate import analysis
from dpaudit.privacy.pate import votes as pate_votes

SEEDS = range(5)
TRIALS = 100_000
#: Every aggregator, at the 2017/2018 noise; Confident-GNMax with T ≤ N/2 (both steps exercised)
#: and with the 2018 MNIST T = 200 of 250 (threshold step only).
CONFIGS: dict[str, LNMaxConfig | GNMaxConfig | ConfidentGNMaxConfig] = {
    "lnmax": LNMaxConfig(laplace_scale=20.0),
    "gnmax": GNMaxConfig(sigma=40.0),
    "confident-gnmax": ConfidentGNMaxConfig(threshold=100.0, threshold_sigma=150.0, sigma=40.0),
    "confident-gnmax-T200": ConfidentGNMaxConfig(threshold=200.0, threshold_sigma=150.0, sigma=40.0),
}


@pytest.mark.extended
@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_real_aggregator_is_never_flagged(name: str) -> None:
    for seed in SEEDS:
        result = pate_audit(aggregate, CONFIGS[name], trials=TRIALS, seed=seed)
        assert not result.violation and result.epsilon_lb <= result.epsilon_ub, (name, seed, result.summary())


@pytest.mark.extended
@pytest.mark.parametrize("name", ["lnmax", "gnmax", "confident-gnmax"])
def test_noise_scale_too_small_is_flagged_for_every_seed(name: str) -> None:
    bugged = planted_aggregator("noise-scale-too-small", aggregator=CONFIGS[name].name)
    for seed in SEEDS:
        result = pate_audit(bugged, CONFIGS[name], trials=TRIALS, seed=seed)
        assert result.violation and result.epsilon_lb > result.epsilon_ub, (name, seed, result.summary())


@pytest.mark.extended
@pytest.mark.parametrize("name", ["confident-gnmax", "confident-gnmax-T200"])
def test_threshold_without_noise_is_flagged_for_every_seed(name: str) -> None:
    bugged = planted_aggregator("threshold-without-noise", aggregator="confident-gnmax")
    for seed in SEEDS:
        result = pate_audit(bugged, CONFIGS[name], trials=TRIALS, seed=seed)
        assert result.violation and result.epsilon_lb > result.epsilon_ub, (name, seed, result.summary())
        assert result.details.event.startswith("not answered")  # the threshold step gave it away


def test_the_result_records_the_game_and_is_reproducible() -> None:
    cfg = CONFIGS["gnmax"]
    a, b = pate_audit(aggregate, cfg, trials=20_000, seed=3), pate_audit(aggregate, cfg, trials=20_000, seed=3)
    assert a.to_dict() == b.to_dict()
    assert pate_audit(aggregate, cfg, trials=20_000, seed=4).details.counts != a.details.counts
    assert (a.method, a.bound, a.threshold_strategy, a.num_in, a.num_out) == (
        "multi-run",
        "clopper-pearson",
        "bonferroni",
        20_000,
        20_000,
    )
    assert a.details.num_tests == 2 * 10  # every label, both directions
    assert sum(a.details.counts) == sum(a.details.neighbour_counts) == 20_000
    assert "data-independent" in a.claim_description


def test_upper_bounds_are_the_claims_per_query_bounds() -> None:
    """LNMax: pure 2/b (not 1/b, docs/defenses/pate.md §6); GNMax and Confident-GNMax: one query's data-independent RDP,
    converted."""
    row = np.array([126, 124] + [0] * 8)
    lnmax = per_query_upper_bound(LNMaxConfig(laplace_scale=20.0), delta=1e-5, votes=row)
    assert lnmax.accountant == "pure" and lnmax.epsilon == pytest.approx(0.1)
    orders = np.asarray(pate_votes.GNMAX_ORDERS)
    gn = per_query_upper_bound(GNMaxConfig(sigma=40.0), delta=1e-5, votes=row)
    standard = analysis.rdp_to_epsilon(orders, orders / 40.0**2, delta=1e-5)[0]
    assert gn.by_accountant["rdp"] == pytest.approx(standard)
    assert gn.epsilon == min(gn.by_accountant.values()) <= standard
    cg = per_query_upper_bound(CONFIGS["confident-gnmax"], delta=1e-5, votes=row)
    rdp = orders / (2 * 150.0**2) + orders / 40.0**2
    assert cg.by_accountant["rdp"] == pytest.approx(analysis.rdp_to_epsilon(orders, rdp, delta=1e-5)[0])
    assert not cg.claim.data_dependent and cg.claim.num_answered == 1


@pytest.mark.parametrize(
    ("aggregator", "n", "k", "t"),
    [
        ("gnmax", 250, 10, None),
        ("lnmax", 251, 10, None),
        ("gnmax", 7, 2, None),
        ("confident-gnmax", 250, 10, 100),
        ("confident-gnmax", 250, 10, 200),
        ("confident-gnmax", 250, 10, 199.5),
        ("confident-gnmax", 250, 2, 126),
        ("confident-gnmax", 250, 3, 250),
    ],
)
def test_neighbouring_votes_differ_by_one_teacher(aggregator: str, n: int, k: int, t: float | None) -> None:
    pair = neighbouring_votes(aggregator, num_teachers=n, num_classes=k, threshold=t)
    d, e = pair.votes, pair.neighbour
    assert d.sum() == e.sum() == n and d.min() >= 0 and e.min() >= 0 and d.shape == e.shape == (k,)
    assert sorted((d - e).tolist()) == [-1] + [0] * (k - 2) + [1]
    if t is None:
        assert abs(int(e[0]) - int(e[1])) <= 1 and e[:2].min() >= e[2:].max(initial=0)  # D' (nearly) ties the top two
    else:
        assert d.max() == math.ceil(t) and np.count_nonzero(d == d.max()) == 1 and e.max() == math.ceil(t) - 1


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"threshold": 300}, "threshold"),
        ({"threshold": 1}, "threshold"),
        ({"threshold": 10}, "threshold"),  # 250 teachers in 10 classes cannot have their maximum at 10
        ({"threshold": None}, "threshold"),
        ({"num_teachers": 1}, "num_teachers"),
        ({"num_classes": 1}, "num_classes"),
    ],
)
def test_impossible_games_are_refused_naming_the_argument(kwargs: dict, named: str) -> None:
    args = {"num_teachers": 250, "num_classes": 10, "threshold": 100, **kwargs}
    with pytest.raises(ValueError, match=named):
        neighbouring_votes("confident-gnmax", **args)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="trials"):
        pate_audit(aggregate, CONFIGS["gnmax"], trials=0)
    with pytest.raises(ValueError, match="confidence"):
        pate_audit(aggregate, CONFIGS["gnmax"], confidence=1.0)
    with pytest.raises(ValueError, match="delta"):
        pate_audit(aggregate, CONFIGS["gnmax"], delta=0.0)
    with pytest.raises(TypeError, match="config"):
        pate_audit(aggregate, object())

    def drops_rows(votes, config, *, seed):  # an aggregator that does not answer every row
        out = aggregate(votes, config, seed=seed)
        return type("A", (), {"labels": out.labels[:-1], "answered": out.answered[:-1]})()

    with pytest.raises(ValueError, match="aggregate_fn"):
        pate_audit(drops_rows, CONFIGS["gnmax"], trials=100)


def test_planted_aggregators_claim_the_documented_noise() -> None:
    votes = np.tile([126, 124] + [0] * 8, (20_000, 1))
    small = aggregate_noise_scale_too_small(votes, GNMaxConfig(sigma=40.0), seed=0)
    assert small.config == GNMaxConfig(sigma=40.0)  # what it says
    assert float(np.std(small.noise)) == pytest.approx(4.0, rel=0.02)  # what it does
    cg = aggregate_threshold_without_noise(votes, CONFIGS["confident-gnmax-T200"], seed=0)
    assert cg.threshold_noise is not None and not cg.threshold_noise.any()
    assert not cg.answered.any() and (cg.labels == -1).all()  # max 126 < 200, exactly
    with pytest.raises(ValueError, match="confident-gnmax"):
        planted_aggregator("threshold-without-noise", aggregator="gnmax")
    with pytest.raises(ValueError, match="confident-gnmax"):
        aggregate_threshold_without_noise(votes, GNMaxConfig(sigma=40.0), seed=0)
    with pytest.raises(ValueError, match="planted_bug"):
        planted_aggregator("bogus")
    assert planted_aggregator("none") is aggregate and PLANTED_PATE_BUGS[0] == "none"


def test_a_million_trials_take_seconds() -> None:
    """The noise is drawn as arrays: 10^6 answers on each side of the game in a few seconds."""
    start = time.perf_counter()
    counts = answer_counts(
        aggregate,
        CONFIGS["confident-gnmax"],
        neighbouring_votes("confident-gnmax", num_teachers=250, num_classes=10, threshold=100).votes,
        trials=1_000_000,
        seed=0,
    )
    assert counts.sum() == 1_000_000 and 0.45 < counts[-1] / 1e6 < 0.55  # P(not answered) = ½ at T
    assert time.perf_counter() - start < 10.0


def test_the_result_carries_its_ceiling_and_the_cli_prints_it(capsys) -> None:
    """Issue 15, item 4: the largest ε_LB the game's trials and Bonferroni factor allow."""
    from dpaudit.app.cli import main
    from dpaudit.privacy.audit_procedures import audit_ceiling

    bugged = planted_aggregator("noise-scale-too-small", aggregator="gnmax")
    for fn in (aggregate, bugged):
        r = pate_audit(fn, CONFIGS["gnmax"], trials=20_000, seed=0)
        expected = audit_ceiling(
            bound="clopper-pearson",
            delta=r.delta,
            confidence=r.confidence,
            num_in=20_000,
            num_out=20_000,
            num_tests=r.details.num_tests,
        )
        assert r.ceiling == pytest.approx(expected) and r.epsilon_lb <= r.ceiling
    capsys.readouterr()
    assert main(["pate", "audit", "--sigma", "40", "--trials", "20000"]) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.strip().startswith("ceiling"))
    assert f"{expected:.4f}" in line and "20,000 answers per side" in line
