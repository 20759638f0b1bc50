"""Audit procedures of :mod:`attacks.audit.procedures` (docs/audits/statistics.md §3–5).

Statistical tier: on a simulated Gaussian release with exactly known ε, the white-box per-step
pipeline (canary hooks → scores → bound) gives ε_LB ≤ true ε in ≥ 95 % of seeded repetitions,
and ≈ 0 when IN and OUT are identically distributed.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from dpaudit.data import ArrayDataset
from dpaudit.privacy.claims import dpsgd_claim
from dpaudit.privacy.gaussian import gaussian_epsilon

DELTA = 1e-5


class GaussianRelease:
    """A fake DP-SGD whose every step is exactly the Gaussian mechanism about the Dirac canary.

    The canary (magnitude ≥ C) is clipped to C, the release is clip(canary) + N(0, σ²C²):
    μ = 1/σ, so ε of one step is known exactly (Balle & Wang 2018). ``shift`` replaces the
    clipped canary's value (0: identical IN and OUT distributions).
    """

    def __init__(self, sigma: float, steps: int, clip: float = 1.0, shift: float | None = None) -> None:
        self.sigma, self.steps, self.clip, self.shift = sigma, steps, clip, shift

    def build_model(self, dataset):
        return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(dataset.input_shape)), 2))

    def __call__(self, dataset, *, seed, on_step, canary_gradient):
        g = torch.Generator().manual_seed(seed)
        for t in range(self.steps):
            canary = canary_gradient(t)
            w = torch.randn(2, 3, generator=g) * self.sigma * self.clip
            if canary is not None:
                c = canary["1.weight"]
                w += c * min(1.0, self.clip / float(c.norm())) if self.shift is None else (c != 0) * self.shift
            on_step(t, {"1.weight": w, "1.bias": torch.randn(2, generator=g)}, 1)
        return self.build_model(dataset)


def _tiny():
    x = torch.rand(20, 3)
    x[:, 0] = 0  # feature 0 is never on: its weights' clean gradients are structurally zero
    return ArrayDataset(name="tiny", features=x, labels=torch.randint(0, 2, (20,)), ids=np.arange(20), num_classes=2)


@pytest.mark.extended
@pytest.mark.parametrize(
    "bound, strategy",
    [
        ("gdp", "fixed"),
        # 3 s each; gdp-fixed keeps the coverage check in the default suite
        pytest.param("gdp", "bonferroni", marks=pytest.mark.slow),
        pytest.param("clopper-pearson", "split", marks=pytest.mark.slow),
        pytest.param("gdp", "split", marks=pytest.mark.slow),
        pytest.param("clopper-pearson", "bonferroni", marks=pytest.mark.slow),
    ],
)
def test_white_box_per_step_coverage_on_gaussian_release(tmp_path, bound, strategy):
    from attacks.audit.procedures import white_box_audit

    sigma = 1.0
    true_eps = gaussian_epsilon(delta=DELTA, sigma=sigma)
    data = _tiny()
    reps = 200
    below = 0
    lbs = []
    for rep in range(reps):
        r = white_box_audit(
            trainer=GaussianRelease(sigma, 300),
            dataset=data,
            noise_multiplier=sigma,
            clip_norm=1.0,
            directory=tmp_path / f"{bound}-{strategy}-{rep}",
            delta=DELTA,
            bound=bound,
            strategy=strategy,
            seed=rep,
            progress=False,
        )
        assert r.epsilon_ub == pytest.approx(true_eps, rel=1e-3)
        assert r.details.context["canary"]["decoupled"]
        below += r.epsilon_lb <= true_eps
        lbs.append(r.epsilon_lb)
    assert below / reps >= 0.95
    assert np.mean(lbs) > 0.2  # the test has power: it is not trivially 0


def test_white_box_identical_distributions_give_about_zero(tmp_path):
    from attacks.audit.procedures import white_box_audit

    r = white_box_audit(
        trainer=GaussianRelease(1.0, 4000, shift=0.0),
        dataset=_tiny(),
        noise_multiplier=1.0,
        clip_norm=1.0,
        directory=tmp_path,
        delta=DELTA,
        progress=False,
    )
    assert r.epsilon_lb < 0.15


def test_white_box_resumes_finished_trials(tmp_path):
    from attacks.audit.procedures import white_box_audit

    kw = dict(
        dataset=_tiny(),
        noise_multiplier=1.0,
        clip_norm=1.0,
        directory=tmp_path,
        delta=DELTA,
        num_trials=2,
        progress=False,
    )
    first = white_box_audit(trainer=GaussianRelease(1.0, 100), **kw)
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "trials").iterdir()}
    (tmp_path / "trials" / "trial-00001.npz").unlink()
    second = white_box_audit(trainer=GaussianRelease(1.0, 100), **kw)
    assert (tmp_path / "trials" / "trial-00000.npz").stat().st_mtime_ns == stamps[
        tmp_path / "trials" / "trial-00000.npz"
    ]
    assert second.epsilon_lb == pytest.approx(first.epsilon_lb)
    with pytest.raises(ValueError, match="different audit \\(differs in noise_multiplier\\)"):
        white_box_audit(trainer=GaussianRelease(1.0, 100), **{**kw, "noise_multiplier": 2.0})


def test_white_box_says_how_many_stored_trials_it_reuses(tmp_path, capsys):
    from attacks.audit.procedures import white_box_audit

    kw = dict(dataset=_tiny(), noise_multiplier=1.0, clip_norm=1.0, directory=tmp_path, delta=DELTA, num_trials=2)
    white_box_audit(trainer=GaussianRelease(1.0, 50), progress=False, **kw)
    capsys.readouterr()
    white_box_audit(trainer=GaussianRelease(1.0, 50), progress=True, **kw)
    assert f"reusing 2 stored trials from {tmp_path}" in capsys.readouterr().err
    (tmp_path / "trials" / "trial-00001.npz").unlink()
    white_box_audit(trainer=GaussianRelease(1.0, 50), progress=True, **kw)
    err = capsys.readouterr().err
    assert f"reusing 1 stored trial from {tmp_path}" in err
    assert "white-box trial 2/2 (steps)" in err  # per-step progress of the trial that ran


def test_white_box_default_strategy_is_the_claims_midpoint(tmp_path):
    from attacks.audit.procedures import white_box_audit, white_box_strategy

    r = white_box_audit(
        trainer=GaussianRelease(1.0, 400),
        dataset=_tiny(),
        noise_multiplier=1.0,
        clip_norm=2.0,
        directory=tmp_path,
        delta=DELTA,
        progress=False,
    )
    assert r.threshold_strategy == "fixed" and r.details.threshold == 1.0 and r.details.num_tests == 1  # C/2
    assert white_box_strategy("norm", None) == "bonferroni"
    with pytest.raises(ValueError, match="score='norm'"):
        white_box_strategy("norm", "fixed")


def test_white_box_budget_runs_waves_until_the_time_is_spent_and_a_rerun_adds_more(tmp_path, capsys):
    from attacks.audit.procedures import white_box_audit

    kw = dict(dataset=_tiny(), noise_multiplier=1.0, clip_norm=1.0, directory=tmp_path, delta=DELTA, num_trials=50)
    # A budget below one trial still runs one wave (one trial in this process) and says so.
    first = white_box_audit(trainer=GaussianRelease(1.0, 200), budget_seconds=1e-6, progress=True, **kw)
    err = capsys.readouterr().err
    assert "1 new trial in" in err and "one wave is longer than the budget" in err
    assert first.num_in + first.num_out == 200 and sorted(p.name for p in (tmp_path / "trials").iterdir()) == [
        "trial-00000.npz"
    ]
    # A rerun reuses the stored trial without spending its budget, and adds trials while time is left.
    second = white_box_audit(trainer=GaussianRelease(1.0, 200), budget_seconds=0.5, progress=True, **kw)
    err = capsys.readouterr().err
    assert f"reusing 1 stored trial from {tmp_path}" in err
    added = len(list((tmp_path / "trials").iterdir())) - 1
    assert 1 <= added <= 49 and second.num_in + second.num_out == 200 * (1 + added)
    # num_trials caps a generous budget
    third = white_box_audit(
        trainer=GaussianRelease(1.0, 200),
        budget_seconds=3600,
        progress=False,
        **{**kw, "directory": tmp_path / "capped", "num_trials": 3},
    )
    assert third.num_in + third.num_out == 600
    with pytest.raises(ValueError, match="budget_seconds"):
        white_box_audit(
            trainer=GaussianRelease(1.0, 200), budget_seconds=0, progress=False, **{**kw, "directory": tmp_path / "bad"}
        )


# ----------------------------------------------------------------------------- black-box games
def _memoriser(dataset, *, seed):
    """A 'training' that memorises: a lookup of the training points (maximally non-private)."""

    class Lookup(nn.Module):
        def __init__(self):
            super().__init__()
            self.keys = nn.Parameter(dataset.features.reshape(len(dataset), -1).clone(), requires_grad=False)
            self.labels = dataset.labels.clone()

        def forward(self, x):
            d = torch.cdist(x.reshape(len(x), -1), self.keys)
            hit = d.min(1).values < 1e-6
            out = torch.zeros(len(x), int(dataset.num_classes))
            out[hit, self.labels[d.argmin(1)][hit]] = 20.0
            return out

    return Lookup()


def test_multi_run_and_one_run_flag_a_memoriser(tmp_path):
    from attacks.audit.canaries import mislabelled_canaries
    from attacks.audit.procedures import multi_run_audit, one_run_audit

    data = _tiny()
    pool = ArrayDataset(
        name="pool",
        features=torch.rand(300, 3),
        labels=torch.randint(0, 2, (300,)),
        ids=np.arange(100, 400),
        num_classes=2,
    )
    claim = dpsgd_claim(sampling_rate=0.1, noise_multiplier=5.0, num_steps=10)
    one = mislabelled_canaries(pool, num_canaries=1, seed=0, id_offset=1000)
    r = multi_run_audit(
        train_fn=_memoriser,
        dataset=data,
        canaries=one,
        claim=claim,
        num_trials=30,
        directory=tmp_path / "m",
        delta=DELTA,
        progress=False,
    )
    assert r.violation and r.num_in == r.num_out == 30
    cans = mislabelled_canaries(pool, num_canaries=200, seed=0, id_offset=1000)
    r1 = one_run_audit(
        train_fn=_memoriser,
        dataset=data,
        canaries=cans,
        claim=claim,
        directory=tmp_path / "o",
        delta=DELTA,
        progress=False,
    )
    assert r1.violation and r1.method == "one-run"
