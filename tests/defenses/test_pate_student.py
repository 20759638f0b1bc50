"""The PATE student: supervised and FixMatch semi-supervised training on the embedded digits."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from defenses.pate.student import StudentConfig, strong_augment, train_student, weak_augment
from dpaudit.data import load_dataset
from dpaudit.models import build_model
from dpaudit.training import TrainingDiverged, evaluate

#: Few labelled steps on the tiny digits MLP: the whole file runs in a few seconds.
FAST = StudentConfig(epochs=40, batch_size=32, learning_rate=0.1)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


def _model(seed: int = 0) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_model("digits-mlp", input_shape=(1, 8, 8), num_classes=10)


def _labelled(digits, count: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``count`` labelled training digits (random, seeded) and the rest of the training split unlabelled."""
    train = digits.train
    pick = np.random.default_rng(seed).permutation(len(train))
    chosen, rest = torch.from_numpy(pick[:count]), torch.from_numpy(pick[count:])
    return train.features[chosen], train.labels[chosen], train.features[rest]


def _accuracy(model: nn.Module, digits) -> float:
    return evaluate(model, digits.test.features, digits.test.labels)["accuracy"]


def _train(
    digits, count: int, config: StudentConfig, *, seed: int = 0, model_seed: int = 0
) -> tuple[nn.Module, dict[str, float]]:
    x, y, u = _labelled(digits, count)
    model = _model(model_seed)
    metrics = train_student(
        model, labeled_features=x, labels=y, unlabeled_features=u, config=config, seed=seed, progress=False
    )
    return model, metrics


def test_supervised_student_learns_from_200_labels(digits):
    model, metrics = _train(digits, 200, FAST)
    assert _accuracy(model, digits) > 0.8
    assert metrics["steps"] == FAST.epochs * 7  # an epoch is one pass over the 200 labels at B = 32
    assert metrics["mask_rate"] == 0.0 and metrics["unlabeled_passes"] == 0.0


@pytest.mark.extended
def test_semi_supervised_beats_supervised_with_the_same_60_labels(digits):
    # 600 steps; a lower threshold than MNIST's so the small MLP's pseudo-labels start flowing early.
    base = StudentConfig(epochs=300, batch_size=32, learning_rate=0.1, confidence=0.7, unlabeled_ratio=7)
    semi_config = dataclasses.replace(base, semi_supervised=True)
    # Same labels, same initial weights, same number of steps: only the unlabelled pool differs
    # (measured: supervised ≈ 0.82, semi-supervised ≈ 0.88 on the 360 test digits).
    sup = np.mean([_accuracy(_train(digits, 60, base, seed=s, model_seed=s)[0], digits) for s in range(2)])
    semi_runs = [_train(digits, 60, semi_config, seed=s, model_seed=s) for s in range(2)]
    semi = np.mean([_accuracy(m, digits) for m, _ in semi_runs])
    assert semi > sup + 0.03, (sup, semi)
    for _, metrics in semi_runs:
        assert 0.0 < metrics["mask_rate"] <= 1.0 and metrics["pseudo_labels"] > 0
        assert metrics["unlabeled_passes"] > 1.0


def test_same_seed_same_weights_other_seed_other_weights(digits):
    config = dataclasses.replace(FAST, epochs=3, semi_supervised=True, confidence=0.5)
    a, ma = _train(digits, 60, config, seed=7)
    b, mb = _train(digits, 60, config, seed=7)
    c, _ = _train(digits, 60, config, seed=8)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa) and ma == mb
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_global_rng_untouched_even_with_dropout(digits):
    x, y, u = _labelled(digits, 60)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 10))
    before = torch.get_rng_state()
    train_student(
        model,
        labeled_features=x,
        labels=y,
        unlabeled_features=u,
        config=dataclasses.replace(FAST, epochs=2, semi_supervised=True, confidence=0.2),
        seed=0,
        progress=False,
    )
    assert torch.equal(torch.get_rng_state(), before)


def test_unlabelled_data_is_ignored_in_supervised_mode(digits):
    x, y, u = _labelled(digits, 60)
    config = dataclasses.replace(FAST, epochs=3)
    a, b = _model(), _model()
    train_student(a, labeled_features=x, labels=y, unlabeled_features=u, config=config, seed=1, progress=False)
    train_student(b, labeled_features=x, labels=y, unlabeled_features=None, config=config, seed=1, progress=False)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_tabular_rows_train_in_both_modes():
    gen = torch.Generator().manual_seed(0)
    centers = torch.rand(3, 12, generator=gen)
    labels = torch.randint(0, 3, (400,), generator=gen)
    rows = (centers[labels] + 0.05 * torch.randn(400, 12, generator=gen)).clamp(0, 1)
    for semi in (False, True):
        model = build_model("tabular-mlp", input_shape=(12,), num_classes=3)
        config = dataclasses.replace(FAST, epochs=30, semi_supervised=semi)
        metrics = train_student(
            model,
            labeled_features=rows[:30],
            labels=labels[:30],
            unlabeled_features=rows[30:],
            config=config,
            seed=0,
            progress=False,
        )
        assert evaluate(model, rows[30:], labels[30:])["accuracy"] > 0.9
        assert (metrics["pseudo_labels"] > 0) == semi


def test_augmentations_keep_shape_and_range_and_follow_the_generator(digits):
    x = digits.train.features[:50]
    for augment in (weak_augment, strong_augment):
        a = augment(x, torch.Generator().manual_seed(3))
        b = augment(x, torch.Generator().manual_seed(3))
        assert a.shape == x.shape and a.dtype == x.dtype and torch.equal(a, b)
        assert float(a.min()) >= 0.0 and float(a.max()) <= 1.0
        assert not torch.equal(a, x)
    rows = torch.rand(20, 7)
    assert weak_augment(rows, torch.Generator().manual_seed(0)).shape == rows.shape
    assert strong_augment(rows, torch.Generator().manual_seed(0)).shape == rows.shape


def test_nan_loss_stops_training(digits):
    x, y, _ = _labelled(digits, 60)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    with torch.no_grad():
        model[1].weight.fill_(float("inf"))
    with pytest.raises(TrainingDiverged, match="diverged"):
        train_student(model, labeled_features=x, labels=y, unlabeled_features=None, config=FAST, seed=0, progress=False)


@pytest.mark.parametrize(
    ("change", "name"),
    [
        (
            {"labels": torch.zeros(0, dtype=torch.int64), "labeled_features": torch.zeros(0, 1, 8, 8)},
            "labeled_features",
        ),
        ({"labels": torch.zeros(0, dtype=torch.int64)}, "labels"),
        ({"labels": torch.zeros(59, dtype=torch.int64)}, "labels"),
        ({"labels": torch.full((60,), 10)}, "labels"),
        ({"labels": torch.full((60,), -1)}, "labels"),
        ({"unlabeled_features": None, "config": dataclasses.replace(FAST, semi_supervised=True)}, "unlabeled_features"),
        (
            {"unlabeled_features": torch.zeros(5, 64), "config": dataclasses.replace(FAST, semi_supervised=True)},
            "unlabeled_features",
        ),
        (
            {"unlabeled_features": torch.zeros(0, 1, 8, 8), "config": dataclasses.replace(FAST, semi_supervised=True)},
            "unlabeled_features",
        ),
        ({"labeled_features": torch.full((60, 1, 8, 8), float("nan"))}, "labeled_features"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_input_is_a_value_error_naming_the_argument(digits, change, name):
    x, y, u = _labelled(digits, 60)
    kwargs = {"labeled_features": x, "labels": y, "unlabeled_features": u, "config": FAST, "seed": 0, "progress": False}
    kwargs.update(change)
    with pytest.raises(ValueError, match=name):
        train_student(_model(), **kwargs)


def test_wrong_types_are_type_errors(digits):
    x, y, u = _labelled(digits, 60)
    with pytest.raises(TypeError, match="labels"):
        train_student(
            _model(), labeled_features=x, labels=y.float(), unlabeled_features=u, config=FAST, seed=0, progress=False
        )
    with pytest.raises(TypeError, match="config"):
        train_student(
            _model(), labeled_features=x, labels=y, unlabeled_features=u, config={"epochs": 1}, seed=0, progress=False
        )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("epochs", 0),
        ("batch_size", 0),
        ("learning_rate", 0.0),
        ("momentum", 1.0),
        ("weight_decay", -1.0),
        ("unlabeled_weight", -0.5),
        ("confidence", 1.0),
        ("confidence", 0.0),
        ("unlabeled_ratio", 0),
        ("learning_rate", float("nan")),
    ],
)
def test_config_fields_are_validated(field, value):
    with pytest.raises(ValueError, match=field):
        StudentConfig(**{field: value})
