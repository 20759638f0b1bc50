"""The DP upload of DSSGD (defenses/dssgd/svt.py) against the mechanism's definition.

The exact output distribution is computed here independently of the implementation, by
integrating the Laplace densities over the threshold noise and averaging over the visiting
orders (the seed's algorithm, thresholds redrawn after each upload), and compared with the
empirical frequencies of seeded draws.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from defenses.dssgd.svt import noise_scales, svt_upload

EPS, GAMMA, TAU = 8.0, 1.0, 0.5
DRAWS = 20_000


def _segment(q_miss, q_hit, tau, bt, bq):
    """P(every q_miss entry is below and then q_hit is at/above one fresh noisy threshold)."""

    def below(t, q):
        return stats.laplace.cdf(t - q, scale=bq)

    def f(r):
        t = tau + r
        p = stats.laplace.pdf(r, scale=bt)
        for q in q_miss:
            p *= below(t, q)
        if q_hit is not None:
            p *= 1.0 - below(t, q_hit)
        return p

    return integrate.quad(f, -np.inf, np.inf, epsabs=1e-12, limit=200)[0]


def _exact(x, count, eps=EPS, gamma=GAMMA, tau=TAU, split="sum"):
    """{ordered tuple of uploaded indices: probability} from the mechanism's definition."""
    s = noise_scales(epsilon=eps, bound=gamma, split=split)
    q = np.abs(np.clip(x, -gamma, gamma))
    n = len(x)
    out: dict[tuple[int, ...], float] = {}
    perms = list(itertools.permutations(range(n)))
    for perm in perms:
        # Walk the sweep: each segment ends at a hit (a fresh threshold) or at the end of the order.
        def walk(pos, picked, prob):
            if len(picked) == count or pos == n:  # halted, or every entry visited
                out[tuple(picked)] = out.get(tuple(picked), 0.0) + prob / len(perms)
                return
            # the open segment may end at any later position, or miss everything
            for hit in range(pos, n):
                p = _segment([q[perm[j]] for j in range(pos, hit)], q[perm[hit]], tau, s.threshold, s.query)
                walk(hit + 1, [*picked, perm[hit]], prob * p)
            miss = _segment([q[perm[j]] for j in range(pos, n)], None, tau, s.threshold, s.query)
            out[tuple(picked)] = out.get(tuple(picked), 0.0) + prob * miss / len(perms)

        walk(0, [], 1.0)
    return out


def _empirical(x, count, draws=DRAWS, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = torch.tensor(x, dtype=torch.float64)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(draws):
        idx, _ = svt_upload(t, count=count, epsilon=EPS, bound=GAMMA, threshold=TAU, generator=g)
        key = tuple(int(i) for i in idx)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _check_against_exact(exact, counts, draws=DRAWS):
    assert math.isclose(sum(exact.values()), 1.0, abs_tol=1e-6)
    assert set(counts) <= set(exact), f"outputs the mechanism cannot produce: {set(counts) - set(exact)}"
    for key, p in exact.items():
        se = math.sqrt(max(p * (1 - p), 1e-12) / draws)
        got = counts.get(key, 0) / draws
        assert abs(got - p) <= 5 * se + 1e-6, f"outcome {key}: empirical {got:.4f}, exact {p:.4f} (5σ = {5 * se:.4f})"


@pytest.mark.extended
def test_selection_probabilities_one_upload_match_the_definition():
    x = [1.0, 0.0, -0.6]
    exact = _exact(x, 1)
    # the probabilities differ enough that a wrong mechanism (e.g. a fixed order) would show
    assert exact[(0,)] - exact[(1,)] > 0.05
    _check_against_exact(exact, _empirical(x, 1))


@pytest.mark.slow  # 6 s; the one-upload case stays in the default suite
def test_selection_probabilities_two_uploads_match_redrawn_thresholds():
    # Ordered pairs: with one shared threshold (not redrawn) the pair probabilities differ.
    x = [1.0, 0.0, 0.6]
    _check_against_exact(_exact(x, 2), _empirical(x, 2, seed=1))


@pytest.mark.extended
def test_likelihood_ratio_on_neighbouring_inputs_within_the_selection_cost():
    s = noise_scales(epsilon=EPS, bound=GAMMA, split="sum")
    x, y = [1.0, 0.0, -0.6], [1.0, 1.0, -0.6]  # one entry moved (|x| changes by γ; Δf = 2γ covers it)
    px, py = _exact(x, 1), _exact(y, 1)
    bound = math.exp(s.selection_cost)
    for key in px:
        assert px[key] <= bound * py[key] + 1e-9 and py[key] <= bound * px[key] + 1e-9
    cx, cy = _empirical(x, 1, seed=2), _empirical(y, 1, seed=3)
    for key in set(cx) | set(cy):
        a, b = cx.get(key, 0) / DRAWS, cy.get(key, 0) / DRAWS
        sa, sb = math.sqrt(max(a, 1e-4) / DRAWS), math.sqrt(max(b, 1e-4) / DRAWS)
        assert a - 5 * sa <= bound * (b + 5 * sb) and b - 5 * sb <= bound * (a + 5 * sa)
    # and the ratio is not trivially 1: the changed entry is picked noticeably more often
    assert py[(1,)] / px[(1,)] > 1.2


@pytest.mark.parametrize("split", ["sum", "seed"])
def test_release_noise_is_laplace_with_the_stated_scale(split):
    eps, gamma = 1000.0, 1.0
    s = noise_scales(epsilon=eps, bound=gamma, split=split)
    n = 5000
    g = torch.Generator().manual_seed(4)
    x = torch.linspace(-0.5, 0.5, n, dtype=torch.float64)
    idx, vals = svt_upload(x, count=n, epsilon=eps, bound=gamma, threshold=-10.0, split=split, generator=g)
    assert len(idx) == n  # τ far below every value: every entry passes
    resid = (vals - x[idx]).numpy()
    assert stats.kstest(resid, "laplace", args=(0, s.release)).pvalue > 1e-6
    assert stats.kstest(resid, "laplace", args=(0, 2 * s.release)).pvalue < 1e-6  # the test has power
    assert s.release == pytest.approx(9 * 2 * gamma / eps)


def test_seed_split_releases_with_the_same_noise_and_costs_epsilon():
    for eps, gamma in [(0.5, 0.01), (3.0, 2.0)]:
        a, b = noise_scales(epsilon=eps, bound=gamma, split="sum"), noise_scales(epsilon=eps, bound=gamma, split="seed")
        assert b.release == pytest.approx(2 * (2 * gamma) / (2 * eps / 9))  # σ(ε2) = 2Δf/ε2 as printed
        assert a.release == pytest.approx(b.release) and a.threshold == b.threshold and a.query == b.query
        assert b.release_cost == pytest.approx(eps / 9)  # ε2/2, not ε2: the printed 10/9 is not spent
        assert a.upload_cost == pytest.approx(eps) and b.upload_cost == pytest.approx(eps)
        assert a.selection_cost == pytest.approx(8 * eps / 9)


def test_upload_shape_bounds_uniqueness_and_determinism():
    d = torch.randn(4, 50, dtype=torch.float32) * 3
    kw = dict(count=30, epsilon=2.0, bound=1.0, threshold=0.2)
    i1, v1 = svt_upload(d, generator=torch.Generator().manual_seed(7), **kw)
    i2, v2 = svt_upload(d, generator=torch.Generator().manual_seed(7), **kw)
    assert torch.equal(i1, i2) and torch.equal(v1, v2)
    assert i1.dtype == torch.int64 and v1.dtype == torch.float32
    assert 0 < len(i1) <= 30 and len(set(i1.tolist())) == len(i1)
    assert bool((i1 >= 0).all() and (i1 < d.numel()).all())
    assert float(v1.abs().max()) <= 1.0
    # fewer uploads than count when the sweep runs out (τ far above every value)
    i3, _ = svt_upload(d, generator=torch.Generator().manual_seed(7), **{**kw, "threshold": 1e6})
    assert len(i3) == 0


def test_ten_thousand_uploads_from_100k_entries_are_all_distinct():
    g = torch.Generator().manual_seed(0)
    d = torch.randn(100_000) * 0.01
    idx, vals = svt_upload(d, count=10_000, epsilon=0.5, bound=0.01, threshold=0.005, generator=g)
    assert len(idx) == 10_000 and len(set(idx.tolist())) == 10_000


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"count": 0}, "count"),
        ({"count": 1.5}, "count"),
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": math.inf}, "epsilon"),
        ({"bound": -1.0}, "bound"),
        ({"threshold": math.nan}, "threshold"),
        ({"threshold": math.inf}, "threshold"),
        ({"split": "paper"}, "split"),
        ({"generator": 3}, "generator"),
        ({"delta": torch.tensor([1, 2])}, "delta"),
        ({"delta": torch.tensor([1.0, math.nan])}, "delta"),
        ({"delta": torch.zeros(0)}, "delta"),
    ],
)
def test_bad_arguments_are_refused_by_name(kwargs, name):
    args = dict(
        delta=torch.ones(5),
        count=2,
        epsilon=1.0,
        bound=1.0,
        threshold=0.0,
        split="sum",
        generator=torch.Generator().manual_seed(0),
    )
    args.update(kwargs)
    delta = args.pop("delta")
    with pytest.raises((ValueError, TypeError), match=name):
        svt_upload(delta, **args)
