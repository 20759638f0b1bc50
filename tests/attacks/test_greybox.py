"""The grey-box replay and its checks, on short versions of the catalogue's reference loop.

Each training here is ``examples/dp_bugs/_dpsgd.py``'s DP-SGD cut to a few steps on a few records
(milliseconds), with one piece done wrong where a test plants a bug. The expected verdicts come
from what the planted code does (its number of steps, its normaliser, its clipping), not from
the checks' own output; the instrumentation's scoping is checked against torch's own functions.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from attacks.audit.canaries import with_canaries
from attacks.audit.checks.greybox import checks as gb
from attacks.audit.checks.greybox.replay import Recorder, instrumented, run_pair
from dpaudit.data import ArrayDataset, load_dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "dp_bugs"))
from _dpsgd import DPSGD

STEPS = 12
Q = 0.25
SIGMA = 2.0
CLAIM = gb.ClaimedMechanism(sampling_rate=Q, noise_multiplier=SIGMA, steps=STEPS)


class Short(DPSGD):
    """The reference loop, 12 steps at q = 0.25, σ = 2, C = 1, a public normaliser 3."""

    steps = STEPS
    sampling_rate = Q
    noise_multiplier = SIGMA
    lot_size = 3.0

    def build(self) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.ReLU(), nn.Linear(8, 10))


class MoreSteps(Short):
    steps = 2 * STEPS  # the loop runs twice the claimed T


class RealisedLot(Short):
    def normaliser(self, lot_size: int) -> float:
        return float(max(lot_size, 1))  # the realised lot size


class DatasetSized(Short):
    def train(self, dataset, *, seed, initial_state=None):  # type: ignore[no-untyped-def]
        self.lot_size = float(int(len(dataset) * Q))  # int(len(dataset) · q), as Opacus's default
        return super().train(dataset, seed=seed, initial_state=initial_state)


class Unclipped(Short):
    clip_for_noise = 1.0

    def clipped_sum(self, grads):  # type: ignore[no-untyped-def]
        return {k: g.sum(0) for k, g in grads.items()}  # no clipping at all


class NoNoise(Short):
    def noise(self, like, generator):  # type: ignore[no-untyped-def]
        return {k: torch.zeros_like(v) for k, v in like.items()}


def _data(n: int = 7) -> tuple[ArrayDataset, ArrayDataset]:
    pool = load_dataset("digits").train
    base = ArrayDataset(
        name=pool.name,
        features=pool.features[:n].clone(),
        labels=torch.zeros(n, dtype=torch.long),
        ids=pool.ids[:n].clone(),
        num_classes=10,
    )
    canary = ArrayDataset(
        name=pool.name,
        features=torch.ones_like(pool.features[:1]),
        labels=torch.ones(1, dtype=torch.long),
        ids=torch.tensor([10**7]),
        num_classes=10,
    )
    return base, with_canaries(base, canary)


def _pair(cls: type[Short], n: int = 7, seed: int = 1):  # type: ignore[no-untyped-def]
    base, added = _data(n)

    def train(dataset, *, seed):  # type: ignore[no-untyped-def]
        return cls().train(dataset, seed=seed)

    return run_pair(train, base, added, seed=seed, label="test")


def test_instrumentation_is_scoped_and_restored_after_an_exception():
    base, _ = _data()
    recorder = Recorder(base.features)
    from torch.optim import optimizer as optim_module

    before = (len(optim_module._global_optimizer_pre_hooks), len(optim_module._global_optimizer_post_hooks))
    with pytest.raises(RuntimeError, match="boom"):
        with instrumented(recorder):
            torch.randn(3)
            raise RuntimeError("boom")
    after = (len(optim_module._global_optimizer_pre_hooks), len(optim_module._global_optimizer_post_hooks))
    assert after == before
    assert not torch.overrides._get_current_function_mode_stack()
    assert recorder.trace.gaussian_draws == 1
    torch.randn(3)  # outside: not seen
    assert recorder.trace.gaussian_draws == 1


def test_the_replay_gives_d_prime_the_same_draws_and_one_more_value():
    base, added = _data()
    d = Recorder(base.features)
    with instrumented(d):
        a = torch.rand(7, generator=torch.Generator().manual_seed(1))
    e = Recorder(added.features, reference=d.trace)
    with instrumented(e):
        b = torch.rand(8, generator=torch.Generator().manual_seed(99))  # another seed: replay decides
    assert torch.equal(a, b[:7]) and e.trace.divergence is None


def test_a_correct_loop_passes_every_check_with_the_measured_sensitivity_at_most_c():
    pair = _pair(Short)
    verdicts = {name: decide(pair, CLAIM, 0.99) for name, (_, decide, _, _) in gb.DECISIONS.items()}
    assert {v.status for v in verdicts.values()} <= {"passed", "inconclusive"}, verdicts
    assert verdicts["greybox-steps"].status == "passed"
    assert verdicts["greybox-normaliser"].status == "passed"
    assert verdicts["greybox-control-flow"].status == "passed"
    assert verdicts["greybox-state"].status == "passed"
    facts = dict(verdicts["greybox-sensitivity"].facts)
    assert facts["sensitivity"] <= 1.0 + 1e-4  # C = 1: the canary's clipped gradient
    assert facts["calibrated_c"] == pytest.approx(1.0)  # std σC over σ


def test_more_steps_than_claimed_are_caught_deterministically_by_the_step_count():
    verdict = gb.steps(_pair(MoreSteps), CLAIM, 0.99)
    assert verdict.status == "violated"
    assert f"took {2 * STEPS} steps" in verdict.cause and f"T = {STEPS}" in verdict.cause


def test_a_realised_lot_normaliser_is_named():
    verdict = gb.normaliser(_pair(RealisedLot), CLAIM, 0.99)
    assert verdict.status == "violated" and "realised lot" in verdict.cause


def test_a_dataset_size_normaliser_is_flagged_unless_the_dataset_size_is_public():
    # 7 records at q = 0.25: int(1.75) = 1; with the added record int(2.0) = 2.
    pair = _pair(DatasetSized)
    private = gb.normaliser(pair, CLAIM, 0.99)
    assert private.status == "violated"
    assert "1 on 7 records and 2 on 8" in private.cause and "dataset size" in private.cause
    assert "--dataset-size-public" in private.cause
    public = gb.ClaimedMechanism(sampling_rate=Q, noise_multiplier=SIGMA, steps=STEPS, dataset_size_public=True)
    assert gb.normaliser(pair, public, 0.99).status == "passed"


def test_a_dataset_size_normaliser_says_what_leaks_at_the_users_dataset_size():
    # int(q·|D|) at q = 0.25: 2 on 10 and on 11 records (nothing leaks for that pair); 2 on 11, 3 on 12.
    pair = _pair(DatasetSized)
    dims = 64 * 8 + 8 + 8 * 10 + 10  # the noised coordinates of Short's network

    def claim(n: int) -> gb.ClaimedMechanism:
        def replay(k: int):  # type: ignore[no-untyped-def]
            return _pair(DatasetSized, k)

        return gb.ClaimedMechanism(sampling_rate=Q, noise_multiplier=SIGMA, steps=STEPS, dataset_size=n, replay=replay)

    # Scale test on d·T coordinates: μ = √(2dT)·ln(m′/m), independently of the check's code.
    mu = math.sqrt(2 * dims * STEPS) * math.log(3 / 2)
    same = gb.normaliser(pair, claim(10), 0.99).cause
    assert "at your |D| = 10 it is 2 on |D| and on |D| + 1, so nothing leaks" in same
    assert f"μ ≈ {mu:.3g}-GDP" in same and f"{dims} noised coordinates and {STEPS} steps" in same
    steps_up = gb.normaliser(pair, claim(11), 0.99).cause
    assert "at your |D| = 11 it is 2 on |D| and 3 on |D| + 1" in steps_up and f"μ ≈ {mu:.3g}-GDP" in steps_up
    too_large = gb.ClaimedMechanism(
        sampling_rate=Q, noise_multiplier=SIGMA, steps=STEPS, dataset_size=10**6, replay=lambda k: None
    )
    assert "not replayed at your |D| = 1000000" in gb.normaliser(pair, too_large, 0.99).cause


def test_missing_clipping_shows_as_a_sensitivity_above_c():
    pair = _pair(Unclipped, seed=3)
    verdict = gb.sensitivity(pair, CLAIM, 0.99)
    if verdict.status == "inconclusive":  # the canary in no lot: P = 0.75^12 ≈ 3 %
        pair = _pair(Unclipped, seed=4)
        verdict = gb.sensitivity(pair, CLAIM, 0.99)
    assert verdict.status == "violated"
    assert dict(verdict.facts)["sensitivity"] > 1.0


def test_no_noise_is_named_as_the_cause():
    verdict = gb.noise(_pair(NoNoise), CLAIM, 0.99)
    assert verdict.status == "violated" and "no Gaussian noise" in verdict.cause


def test_state_kept_between_trainings_is_caught():
    kept: list[torch.Tensor] = []

    def train(dataset, *, seed):  # type: ignore[no-untyped-def]
        net = Short().train(dataset, seed=seed)
        with torch.no_grad():  # a "warm start" from the previous call's model: state across runs
            if kept:
                net[1].bias.add_(kept[-1])
            kept.append(net[1].bias.detach().clone())
        return net

    base, added = _data()
    verdict = gb.state(run_pair(train, base, added, seed=0, label="test"), CLAIM, 0.99)
    assert verdict.status == "violated" and "survives between runs" in verdict.cause


def numpy_train(dataset, *, seed):  # type: ignore[no-untyped-def]
    """DP-SGD on a linear model done entirely in NumPy: nothing for torch's hooks to see."""
    rng = np.random.default_rng(seed)
    x = np.asarray(dataset.features.reshape(len(dataset), -1).tolist())
    y = np.asarray(dataset.labels.tolist())
    w = np.zeros((10, x.shape[1]))
    for _ in range(5):
        lot = rng.random(len(x)) < Q
        g = np.zeros_like(w)
        for xi, yi in zip(x[lot], y[lot]):
            p = np.exp(w @ xi - (w @ xi).max())
            p /= p.sum()
            gi = np.outer(p - np.eye(10)[yi], xi)
            g += gi * min(1.0, 1.0 / (np.linalg.norm(gi) + 1e-12))
        w -= (g + rng.normal(0, SIGMA, size=w.shape)) / 3.0
    net = nn.Linear(x.shape[1], 10, bias=False)
    net.load_state_dict({"weight": torch.from_numpy(w).float()})
    return net


def test_an_uninstrumentable_training_is_inconclusive_not_observable():
    base, added = _data()
    pair = run_pair(numpy_train, base, added, seed=0, label="numpy")
    for name in (
        "greybox-steps",
        "greybox-noise",
        "greybox-sensitivity",
        "greybox-normaliser",
        "greybox-sampling-rate",
    ):
        verdict = gb.DECISIONS[name][1](pair, CLAIM, 0.99)
        assert verdict.status == "inconclusive", (name, verdict)
        assert "inconclusive: not observable" in verdict.cause, (name, verdict)


def test_the_claimed_mechanism_is_read_from_a_dpsgd_claim():
    from dpaudit.privacy.claims import dpsgd_claim

    claim = dpsgd_claim(sampling_rate=0.05, noise_multiplier=1.5, num_steps=200)
    mech = gb.claimed_mechanism(claim.to_dict())
    assert (mech.sampling_rate, mech.noise_multiplier, mech.steps) == (0.05, 1.5, 200)
