"""PATE vote bookkeeping, aggregators and teacher partitions (Papernot et al. 2017, 2018).

Statistical checks use fixed seeds and compare the empirical frequency to the analytic value
(``docs/defenses/pate.md`` §2–3) within a few binomial standard errors; exact probabilities computed by
numerical integration pin the noise scale (σ vs σ², b vs 1/b) and not only an upper bound.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from scipy import integrate, stats

from defenses.pate.aggregators import (
    AGGREGATORS,
    NOT_ANSWERED,
    ConfidentGNMaxConfig,
    GNMaxConfig,
    LNMaxConfig,
    aggregate,
    aggregator_config,
    confident_gnmax,
    gnmax,
    lnmax,
    plurality,
    validate_votes,
    vote_histogram,
)
from defenses.pate.partition import partition_ids, partitions_from_membership, teacher_membership, teacher_of

VOTES_2017 = [200, 30, 10, 10, 0, 0, 0, 0, 0, 0]  # docs/defenses/pate.md §2 / §3 test vector, 250 teachers
N = 2000


def _rows(row, n=N):
    return np.tile(np.asarray(row, dtype=np.int64), (n, 1))


def _within(freq, p, n, k=4.0):
    return abs(freq - p) <= k * math.sqrt(p * (1 - p) / n)


# ---------------------------------------------------------------- vote histogram


def test_vote_histogram_rows_are_queries_and_columns_are_classes():
    # 3 teachers x 2 queries, 4 classes (class 3 never predicted).
    preds = np.array([[0, 1], [2, 1], [0, 1]])
    votes = vote_histogram(preds, num_classes=4)
    assert votes.dtype == np.int64 and votes.shape == (2, 4)
    np.testing.assert_array_equal(votes, [[2, 0, 1, 0], [0, 3, 0, 0]])
    assert (votes.sum(axis=1) == 3).all()
    assert not votes.flags.writeable


def test_vote_histogram_label_versus_query_trap():
    # Square case (2 queries, 2 classes): a histogram indexed by label instead of by query is
    # the transpose, which differs here, so the test catches the swap.
    preds = np.array([[0, 0], [1, 0], [1, 0]])
    votes = vote_histogram(preds, num_classes=2)
    np.testing.assert_array_equal(votes, [[1, 2], [3, 0]])
    assert not np.array_equal(votes, votes.T)


def test_vote_histogram_num_classes_not_inferred():
    preds = np.array([[1, 1, 1], [1, 1, 2]])  # only labels 1 and 2 observed
    votes = vote_histogram(preds, num_classes=10)
    assert votes.shape == (3, 10)
    np.testing.assert_array_equal(votes[:, 0], 0)
    np.testing.assert_array_equal(votes[:, 3:], 0)
    np.testing.assert_array_equal(votes[:, 1], [2, 2, 1])


def test_vote_histogram_matches_a_direct_count():
    rng = np.random.default_rng(0)
    preds = rng.integers(0, 7, size=(25, 40))
    votes = vote_histogram(preds, num_classes=7)
    expected = np.array([[np.sum(preds[:, i] == j) for j in range(7)] for i in range(40)])
    np.testing.assert_array_equal(votes, expected)


def test_vote_histogram_zero_queries():
    assert vote_histogram(np.zeros((5, 0), dtype=np.int64), num_classes=3).shape == (0, 3)


@pytest.mark.parametrize(
    ("preds", "num_classes", "exc", "arg"),
    [
        ([[0, 10]], 10, ValueError, "teacher_predictions"),  # label == num_classes
        ([[0, -1]], 10, ValueError, "teacher_predictions"),  # no abstain value
        ([0, 1, 2], 10, ValueError, "teacher_predictions"),  # 1-D
        (np.zeros((0, 3), dtype=int), 10, ValueError, "teacher_predictions"),  # no teacher
        ([[0.0, 1.0]], 10, TypeError, "teacher_predictions"),
        ([[0, 1]], 1, ValueError, "num_classes"),
        ([[0, 1]], 2.0, TypeError, "num_classes"),
    ],
)
def test_vote_histogram_rejects_bad_input(preds, num_classes, exc, arg):
    with pytest.raises(exc, match=arg):
        vote_histogram(preds, num_classes=num_classes)


# ---------------------------------------------------------------- votes and configs


def test_validate_votes_accepts_whole_floats_and_rejects_bad_matrices():
    np.testing.assert_array_equal(validate_votes(np.array([[2.0, 1.0]])), [[2, 1]])
    for bad, exc in [
        ([[1, -1]], ValueError),
        ([[1.5, 0.5]], ValueError),
        ([[np.nan, 1.0]], ValueError),
        ([[3], [3]], ValueError),  # one class
        ([1, 2, 3], ValueError),
        ([[True, False]], TypeError),
    ]:
        with pytest.raises(exc, match="votes"):
            validate_votes(np.asarray(bad))


@pytest.mark.parametrize(
    ("build", "arg"),
    [
        (lambda: LNMaxConfig(laplace_scale=0), "laplace_scale"),
        (lambda: LNMaxConfig(laplace_scale=float("inf")), "laplace_scale"),
        (lambda: GNMaxConfig(sigma=-1.0), "sigma"),
        (lambda: ConfidentGNMaxConfig(threshold=-1.0), "threshold"),
        (lambda: ConfidentGNMaxConfig(threshold=float("nan")), "threshold"),
        (lambda: ConfidentGNMaxConfig(threshold_sigma=0.0), "threshold_sigma"),
        (lambda: ConfidentGNMaxConfig(sigma=0.0), "sigma"),
        (lambda: aggregator_config("rnmax"), "aggregator"),
        (lambda: aggregator_config("gnmax", sigma=40, threshold=3), "threshold"),
        (lambda: gnmax(_rows(VOTES_2017, 3), sigma=40, seed=-1), "seed"),
        (lambda: gnmax([[1, -1]], sigma=40, seed=0), "votes"),
    ],
)
def test_bad_aggregator_arguments_name_the_argument(build, arg):
    with pytest.raises(ValueError, match=arg):
        build()


def test_config_must_be_an_aggregator_config_and_is_frozen():
    with pytest.raises(TypeError, match="config"):
        aggregate(_rows(VOTES_2017, 2), {"sigma": 40}, seed=0)  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        GNMaxConfig().sigma = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        GNMaxConfig(40.0)  # type: ignore[misc]  # keyword-only


def test_config_round_trips_through_json():
    for cfg in (
        LNMaxConfig(),
        GNMaxConfig(sigma=30),
        ConfidentGNMaxConfig(threshold=300, threshold_sigma=200, sigma=40),
    ):
        d = json.loads(json.dumps(cfg.to_dict()))
        assert aggregator_config(d["aggregator"], **d) == cfg
        assert AGGREGATORS[d["aggregator"]] is type(cfg)


# ---------------------------------------------------------------- aggregation bookkeeping


def _all(votes, seed):
    return {
        "lnmax": lnmax(votes, laplace_scale=20, seed=seed),
        "gnmax": gnmax(votes, sigma=40, seed=seed),
        "confident-gnmax": confident_gnmax(votes, threshold=200, threshold_sigma=150, sigma=40, seed=seed),
    }


def test_aggregation_is_recheckable_from_its_draws():
    rng = np.random.default_rng(1)
    votes = vote_histogram(rng.integers(0, 10, size=(250, 300)) * (rng.random((250, 300)) < 0.5), num_classes=10)
    for name, agg in _all(votes, seed=3).items():
        assert agg.aggregator == name and agg.config.name == name
        assert agg.labels.dtype == np.int64 and agg.labels.shape == (300,)
        assert agg.noise.shape == votes.shape
        np.testing.assert_array_equal(agg.votes, votes)
        recomputed = np.argmax(agg.votes + agg.noise, axis=1)
        np.testing.assert_array_equal(agg.labels[agg.answered], recomputed[agg.answered])
        assert (agg.labels[~agg.answered] == NOT_ANSWERED).all()
        assert not agg.labels.flags.writeable and not agg.noise.flags.writeable
        if name == "confident-gnmax":
            assert agg.threshold_noise is not None
            np.testing.assert_array_equal(agg.answered, agg.votes.max(axis=1) + agg.threshold_noise >= 200)
            assert 0 < agg.num_answered < agg.num_queries
        else:
            assert agg.threshold_noise is None and agg.num_answered == agg.num_queries
        summary = json.loads(json.dumps(agg.to_dict()))
        assert summary["num_answered"] == agg.num_answered and summary["labels"] == agg.labels.tolist()


def test_aggregate_matches_the_named_functions():
    votes = _rows(VOTES_2017, 50)
    for cfg, fn in [
        (LNMaxConfig(laplace_scale=20), lambda: lnmax(votes, laplace_scale=20, seed=7)),
        (GNMaxConfig(sigma=40), lambda: gnmax(votes, sigma=40, seed=7)),
        (ConfidentGNMaxConfig(), lambda: confident_gnmax(votes, threshold=200, threshold_sigma=150, sigma=40, seed=7)),
    ]:
        a, b = aggregate(votes, cfg, seed=7), fn()
        np.testing.assert_array_equal(a.labels, b.labels)
        np.testing.assert_array_equal(a.noise, b.noise)


def test_deterministic_per_seed_and_different_across_seeds():
    votes = _rows([120, 110, 20, 0, 0], 500)
    for name in AGGREGATORS:
        a, b, c = (_all(votes, s)[name] for s in (5, 5, 6))
        np.testing.assert_array_equal(a.noise, b.noise)
        np.testing.assert_array_equal(a.labels, b.labels)
        assert not np.array_equal(a.noise, c.noise)


def test_noise_streams_are_independent_between_aggregators_and_steps():
    # Unit scales so that the raw draws are compared; same root seed for every aggregator.
    votes = np.zeros((4000, 5), dtype=np.int64)
    ln = lnmax(votes, laplace_scale=1, seed=11).noise.ravel()
    gn = gnmax(votes, sigma=1, seed=11).noise.ravel()
    cg = confident_gnmax(votes, threshold=0, threshold_sigma=1, sigma=1, seed=11)
    tn = cg.threshold_noise
    assert tn is not None
    pairs = [(gn, cg.noise.ravel()), (ln, gn), (cg.noise[:, 0], tn)]
    for x, y in pairs:
        assert not np.allclose(x, y)
        r = np.corrcoef(x, y)[0, 1]
        assert abs(r) < 4 / math.sqrt(x.size), r
    # And the streams have the stated scales (std of Laplace(b) is b√2).
    assert abs(gn.std() - 1) < 0.02 and abs(ln.std() - math.sqrt(2)) < 0.04 and abs(tn.std() - 1) < 0.05


def test_zero_queries():
    agg = confident_gnmax(np.zeros((0, 10), dtype=np.int64), threshold=200, threshold_sigma=150, sigma=40, seed=0)
    assert agg.num_queries == 0 and agg.labels.shape == (0,)


def test_plurality_breaks_ties_to_the_lowest_class():
    np.testing.assert_array_equal(plurality([[3, 5, 5], [4, 4, 0], [0, 0, 9]]), [1, 0, 2])


# ---------------------------------------------------------------- statistics against the analysis


def _gnmax_q_bound(votes, sigma):
    # docs/defenses/pate.md §3: q̃ ≤ ½ Σ_{i≠i*} erfc((n_i* − n_i)/(2σ)), capped at 1 − 1/m.
    v = np.sort(np.asarray(votes, dtype=float))[::-1]
    q = 0.5 * sum(math.erfc((v[0] - x) / (2 * sigma)) for x in v[1:])
    return min(q, 1 - 1 / len(v))


def _lnmax_q_bound(votes, gamma):
    # docs/defenses/pate.md §2: q ≤ Σ_{j≠j*} (2 + γΔ_j) / (4 exp(γΔ_j)), capped at 1 − 1/m.
    v = np.sort(np.asarray(votes, dtype=float))[::-1]
    q = sum((2 + gamma * (v[0] - x)) / (4 * math.exp(gamma * (v[0] - x))) for x in v[1:])
    return min(q, 1 - 1 / len(v))


def test_gnmax_returns_the_plurality_within_the_erfc_bound():
    q = _gnmax_q_bound(VOTES_2017, 40)
    assert math.log(q) == pytest.approx(-5.7045, abs=1e-4)  # docs/defenses/pate.md §3 test vector
    agg = gnmax(_rows(VOTES_2017), sigma=40, seed=2018)
    freq = float(np.mean(agg.labels != 0))
    assert freq <= q + 3 * math.sqrt(q * (1 - q) / N), (freq, q)


def test_lnmax_returns_the_plurality_within_the_2017_bound():
    q = _lnmax_q_bound(VOTES_2017, 1 / 20)
    assert q == pytest.approx(0.0017817, rel=1e-4)  # docs/defenses/pate.md §2 test vector
    agg = lnmax(_rows(VOTES_2017), laplace_scale=20, seed=2017)
    freq = float(np.mean(agg.labels != 0))
    assert freq <= q + 3 * math.sqrt(q * (1 - q) / N), (freq, q)


def _p_plurality_gaussian(votes, sigma):
    # P(n* + σZ* > n_j + σZ_j ∀ j≠*) = ∫ φ(z) Π_j Φ(z + (n* − n_j)/σ) dz.
    v = np.sort(np.asarray(votes, dtype=float))[::-1]
    gaps = (v[0] - v[1:]) / sigma
    return integrate.quad(lambda z: stats.norm.pdf(z) * np.prod(stats.norm.cdf(z + gaps)), -12, 12, limit=200)[0]


def _p_plurality_laplace(votes, b):
    v = np.sort(np.asarray(votes, dtype=float))[::-1]
    gaps = v[0] - v[1:]
    lap = stats.laplace(scale=b)
    return integrate.quad(
        lambda x: lap.pdf(x) * np.prod(lap.cdf(x + gaps)), -40 * b, 40 * b, points=[0.0, *(-gaps)], limit=400
    )[0]


def test_noise_scales_match_the_exact_plurality_probability():
    # Close votes make the error frequent, so a wrong scale (σ² for σ, 1/b for b, σ/√2…)
    # moves the frequency by many standard errors.
    votes = [120, 100, 30, 0, 0, 0, 0, 0, 0, 0]
    n = 4000
    p_gn = 1 - _p_plurality_gaussian(votes, 40)
    p_ln = 1 - _p_plurality_laplace(votes, 20)
    f_gn = float(np.mean(gnmax(_rows(votes, n), sigma=40, seed=1).labels != 0))
    f_ln = float(np.mean(lnmax(_rows(votes, n), laplace_scale=20, seed=1).labels != 0))
    assert _within(f_gn, p_gn, n), (f_gn, p_gn)
    assert _within(f_ln, p_ln, n), (f_ln, p_ln)
    # The alternatives a scale bug would give are far outside the interval.
    assert not _within(f_gn, 1 - _p_plurality_gaussian(votes, 20), n)
    assert not _within(f_ln, 1 - _p_plurality_laplace(votes, 10), n)


@pytest.mark.parametrize(
    ("row", "p_answer"),
    [
        (VOTES_2017, 0.5),  # max vote = T: P_ans = 0.5 (docs/defenses/pate.md §3)
        ([250, 0, 0, 0, 0, 0, 0, 0, 0, 0], float(stats.norm.cdf(1 / 3))),
        ([50, 50, 50, 50, 50, 0, 0, 0, 0, 0], float(stats.norm.cdf(-1.0))),
    ],
)
def test_confident_gnmax_answers_with_probability_p_ans(row, p_answer):
    # docs/defenses/pate.md §3: P_ans = Q((T − max_j n_j)/σ1) with T = 200, σ1 = 150. Without noise on the
    # threshold the first case would answer always, the last never.
    agg = confident_gnmax(_rows(row), threshold=200, threshold_sigma=150, sigma=40, seed=max(row))
    freq = agg.num_answered / N
    assert _within(freq, p_answer, N), (freq, p_answer)


def test_confident_gnmax_answers_the_plurality_when_confident():
    agg = confident_gnmax(_rows(VOTES_2017), threshold=200, threshold_sigma=150, sigma=40, seed=9)
    answered = agg.labels[agg.answered]
    q = _gnmax_q_bound(VOTES_2017, 40)
    assert float(np.mean(answered != 0)) <= q + 3 * math.sqrt(q / answered.size)
    assert set(np.unique(agg.labels[~agg.answered]).tolist()) == {NOT_ANSWERED}


# ---------------------------------------------------------------- partitions


def test_partitions_are_disjoint_covering_sorted_and_deterministic():
    ids = np.arange(1000, 3003)  # 2003 ids, 50 teachers: multinomial sizes, mean 40.06
    parts = partition_ids(ids, num_teachers=50, seed=4)
    assert len(parts) == 50
    sizes = np.array([p.size for p in parts])
    # Keyed-hash assignment: sizes vary as a multinomial's (sd ≈ 6.3), never empty here.
    assert (
        sizes.sum() == ids.size
        and sizes.min() >= 1
        and np.all(np.abs(sizes - ids.size / 50) < 5 * np.sqrt(ids.size / 50))
    )
    joined = np.concatenate(parts)
    assert np.unique(joined).size == joined.size
    np.testing.assert_array_equal(np.sort(joined), ids)
    assert all((np.diff(p) > 0).all() and p.dtype == np.int64 and not p.flags.writeable for p in parts)
    again = partition_ids(ids[::-1].copy(), num_teachers=50, seed=4)  # the order of ids does not matter
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))
    other = partition_ids(ids, num_teachers=50, seed=5)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other))


def test_partition_edge_cases():
    (only,) = partition_ids([5, 3, 9], num_teachers=1, seed=0)
    np.testing.assert_array_equal(only, [3, 5, 9])
    # As many teachers as ids: the hash leaves some teacher empty under seed 0, said clearly.
    with pytest.raises(ValueError, match="num_teachers=3: the keyed hash of seed 0 gives teacher"):
        partition_ids([5, 3, 9], num_teachers=3, seed=0)


@pytest.mark.parametrize(
    ("ids", "num_teachers", "arg"),
    [
        (range(10), 0, "num_teachers"),
        (range(10), 11, "num_teachers"),
        ([], 1, "num_teachers"),
        ([1, 1, 2], 2, "ids"),
        ([-1, 2], 1, "ids"),
    ],
)
def test_partition_rejects_bad_input(ids, num_teachers, arg):
    with pytest.raises(ValueError, match=arg):
        partition_ids(ids, num_teachers=num_teachers, seed=0)


def test_teacher_membership_is_json_able_and_round_trips():
    parts = partition_ids(range(0, 50, 2), num_teachers=4, seed=1)
    membership = teacher_membership(parts)
    assert list(membership) == ["0", "1", "2", "3"]
    back = json.loads(json.dumps(membership))
    assert back == membership
    restored = partitions_from_membership(back)
    assert all(np.array_equal(a, b) for a, b in zip(parts, restored))
    np.testing.assert_array_equal(teacher_of(parts, [int(parts[2][0]), int(parts[0][-1]), 1]), [2, 0, -1])


def test_teacher_membership_rejects_overlap_and_bad_keys():
    with pytest.raises(ValueError, match="partitions"):
        teacher_membership([[1, 2], [2, 3]])
    with pytest.raises(ValueError, match="membership"):
        partitions_from_membership({"0": [1], "2": [3]})
