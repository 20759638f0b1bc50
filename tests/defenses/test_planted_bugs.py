"""Planted DP-SGD bugs are flagged by an audit; correct DP-SGD never is (docs/audits/statistics.md §6).

Each bug's fastest catch is the white-box per-step Dirac game against ONE Gaussian step of
the claimed σ (claimed ε_UB ≈ 0.93 at σ = 4, δ = 1e-5); a data-dependent normaliser rescales
every coordinate, so it is caught by the norm score with full-batch lots of a tiny dataset.
"""

from __future__ import annotations

import pytest
import torch

from attacks.audit.procedures import white_box_audit
from defenses.planted_bugs import PLANTED_BUGS, planted
from dpaudit.data import load_dataset

DELTA = 1e-5


@pytest.fixture(scope="module")
def digits():
    torch.set_num_threads(1)
    b = load_dataset("digits")
    return b.train


def _audit(trainer, data, tmp_path, score="dirac", seed=0):
    return white_box_audit(
        trainer=trainer,
        dataset=data,
        noise_multiplier=trainer.config.noise_multiplier,
        clip_norm=trainer.config.clip_norm,
        directory=tmp_path,
        delta=DELTA,
        score=score,
        seed=seed,
        progress=False,
    )


CATCH = {
    "no-clipping": ("dirac", {}),
    "batch-clipping": ("dirac", {}),
    "noise-without-clip-norm": ("dirac", {}),
    "noise-halved": ("dirac", {"num_steps": 3000}),  # per step μ 0.5 against the claimed 0.25: needs more steps
    "lot-size-sensitivity": ("dirac", {}),
    "realised-lot-size": ("norm", {"sampling_rate": 1.0}),
}


@pytest.mark.extended
@pytest.mark.parametrize("bug", sorted(CATCH))
def test_every_planted_bug_is_flagged(bug, digits, tmp_path):
    score, extra = CATCH[bug]
    n = 8 if extra.get("sampling_rate") == 1.0 else 200
    data = digits.subset(digits.ids[:n].numpy())
    trainer = planted(bug, **{"num_steps": 300, **extra})
    r = _audit(trainer, data, tmp_path, score=score)
    assert r.violation, f"{bug}: epsilon_lb {r.epsilon_lb:.3f} <= epsilon_ub {r.epsilon_ub:.3f}"


def test_bug_list_is_covered():
    assert set(CATCH) == set(PLANTED_BUGS) - {"none"}


@pytest.mark.extended
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("score, extra, n", [("dirac", {}, 200), ("norm", {"sampling_rate": 1.0}, 8)])
def test_correct_loop_never_flagged(seed, score, extra, n, digits, tmp_path):
    data = digits.subset(digits.ids[:n].numpy())
    r = _audit(planted("none", num_steps=300, **extra), data, tmp_path, score=score, seed=seed)
    assert not r.violation


@pytest.mark.extended
@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("score, q, n", [("dirac", 0.05, 200), ("norm", 1.0, 8)])
def test_suite_dpsgd_never_flagged(seed, score, q, n, digits, tmp_path):
    """The suite's DP-SGD under the same audits as the planted bugs (σ = 4, C = 5)."""
    from defenses.dpsgd.config import DPSGDConfig
    from defenses.dpsgd.training import DPSGDTrainer

    data = digits.subset(digits.ids[:n].numpy())
    config = DPSGDConfig(
        noise_multiplier=4.0,
        clip_norm=5.0,
        sampling_rate=q,
        expected_lot_size=q * n,
        epochs=300 * q if q < 1 else 300,
        learning_rate=0.1,
    )
    trainer = DPSGDTrainer(config=config)
    r = white_box_audit(
        trainer=trainer,
        dataset=data,
        noise_multiplier=4.0,
        clip_norm=5.0,
        directory=tmp_path,
        delta=DELTA,
        score=score,
        seed=seed,
        progress=False,
    )
    assert r.num_in + r.num_out == 300
    assert not r.violation
