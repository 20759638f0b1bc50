"""A multi-run audit's trials trained in batched groups against the same trials trained one at a time.

The project's DP-SGD (``DPSGDTrainer``, the audit's trainer of ``--defense dpsgd``) on
``digits-mlp``: each trial trained in a group must give the scores its separate run gives with
the same seed, up to floating-point reordering, and store the same file; a resumed audit
trains the missing trials only.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from attacks.audit import batched_trials
from attacks.audit.batched_trials import TRIALS_PER_BATCH, trial_groups
from attacks.audit.canaries import mislabelled_canaries
from attacks.audit.procedures import multi_run_audit
from defenses.dpsgd.config import DPSGDConfig
from defenses.dpsgd.training import DPSGDTrainer
from dpaudit.app.runs.audit.batching import trial_batcher
from dpaudit.data import load_dataset
from dpaudit.store import load_npz

DELTA = 1e-5


@pytest.fixture(scope="module")
def game():
    everything = load_dataset("digits").all()
    data = everything.subset(everything.ids[:150].numpy())
    canaries = mislabelled_canaries(
        everything.subset(everything.ids[150:200].numpy()), num_canaries=2, seed=0, id_offset=10_000
    )
    config = DPSGDConfig(
        noise_multiplier=1.0,
        clip_norm=1.0,
        sampling_rate=0.1,
        expected_lot_size=15.0,
        epochs=0.5,  # 5 steps
        learning_rate=0.5,
        accountant="rdp",
    )
    trainer = DPSGDTrainer(config=config, model_name="digits-mlp")
    return data, canaries, trainer


def _audit(game, directory, *, batched: bool, num_trials: int = 3):
    data, canaries, trainer = game
    return multi_run_audit(
        train_fn=trainer.train,
        dataset=data,
        canaries=canaries,
        claim=trainer.claim(len(data)),
        num_trials=num_trials,
        directory=directory,
        delta=DELTA,
        progress=False,
        batcher=trial_batcher(trainer) if batched else None,
    )


def _trials(directory, count):
    return [load_npz(directory / "trials" / f"trial-{i:05d}.npz") for i in range(count)]


@pytest.fixture
def groups(monkeypatch):
    """The trial indices of every batched group the audits of a test train, in order."""
    seen = []
    real = batched_trials.black_box_trial_group

    def spy(**kwargs):
        seen.append(tuple(kwargs["indices"]))
        return real(**kwargs)

    monkeypatch.setattr("attacks.audit.procedures.black_box_trial_group", spy)
    return seen


def test_batched_trials_equal_the_trials_trained_one_at_a_time(game, tmp_path, groups):
    alone = _audit(game, tmp_path / "alone", batched=False)
    assert groups == []
    together = _audit(game, tmp_path / "together", batched=True)
    assert groups == [(0, 2, 4), (1, 3, 5)]  # one group per side
    for a, b in zip(_trials(tmp_path / "alone", 6), _trials(tmp_path / "together", 6), strict=True):
        assert np.array_equal(a["included"], b["included"]) and int(a["seed"]) == int(b["seed"])
        np.testing.assert_allclose(a["scores"], b["scores"], rtol=1e-4, atol=1e-5)
    # The trials really differ (own seeds, own sides): agreement above is not a constant.
    scores = np.array([t["scores"].mean() for t in _trials(tmp_path / "together", 6)])
    assert np.ptp(scores) > 1e-3
    assert together.epsilon_lb == pytest.approx(alone.epsilon_lb, rel=1e-3, abs=1e-6)


def test_a_resumed_batched_audit_trains_only_the_missing_trials(game, tmp_path, groups):
    _audit(game, tmp_path / "a", batched=True, num_trials=2)
    kept = load_npz(tmp_path / "a" / "trials" / "trial-00000.npz")
    (tmp_path / "a" / "trials" / "trial-00003.npz").unlink()
    groups.clear()
    _audit(game, tmp_path / "a", batched=True, num_trials=3)  # one trial lost, one pair more per side
    assert groups == [(4,), (3, 5)]
    again = load_npz(tmp_path / "a" / "trials" / "trial-00000.npz")
    assert np.array_equal(kept["scores"], again["scores"])


def test_trials_of_models_batching_slows_train_one_at_a_time(game):
    data, _, trainer = game
    from dpaudit.data import ArrayDataset

    cnn = DPSGDTrainer(config=trainer.config, model_name="audit-cnn")
    mnist_like = ArrayDataset(
        name="mnist-like",
        features=torch.zeros(20, 1, 28, 28),
        labels=torch.arange(20) % 10,
        ids=np.arange(20),
        num_classes=10,
    )
    batcher = trial_batcher(cnn)
    assert batcher is not None and batcher(dataset=mnist_like) is None
    shuffled = DPSGDTrainer(config=dataclasses.replace(trainer.config, sampling="shuffle-non-private-accounting"))
    assert trial_batcher(shuffled)(dataset=data) is None  # type: ignore[misc]
    assert trial_batcher(None) is None  # a third-party training function: never batched


def test_groups_hold_one_side_each_in_index_order_and_at_most_the_batch_size():
    missing = list(range(2 * TRIALS_PER_BATCH + 3))
    groups = trial_groups(missing, {i: i % 2 == 0 for i in missing})
    assert all(len(g) <= TRIALS_PER_BATCH for g in groups)
    assert sorted(i for g in groups for i in g) == missing
    assert all(len({i % 2 for i in g}) == 1 and list(g) == sorted(g) for g in groups)
    assert groups[0] == tuple(range(0, 2 * TRIALS_PER_BATCH, 2))


def test_a_group_whose_batcher_has_no_mode_fails_naming_its_trials(game):
    from attacks.audit.trials import TrialFailed

    data, canaries, _ = game
    with pytest.raises(TrialFailed, match=r"trials 4-6 \(seeds 1-2\)"):
        batched_trials.black_box_trial_group(
            batcher=lambda *, dataset: None,
            dataset=data,
            canaries=canaries,
            includes=np.ones((2, len(canaries)), dtype=bool),
            seeds=[1, 2],
            indices=[4, 6],
        )


def test_the_group_trains_in_its_own_streams_not_the_global_generator(game, tmp_path):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    _audit(game, tmp_path / "g", batched=True, num_trials=1)
    assert torch.equal(torch.rand(1), before)
