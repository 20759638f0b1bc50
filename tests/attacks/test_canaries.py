"""Canaries (docs/audits/statistics.md §5): mislabelled examples, ClipBKD points, Dirac gradient canaries."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from attacks.audit.canaries import (
    DiracCanary,
    clipbkd_canaries,
    find_dirac_coordinate,
    loss_scores,
    mislabelled_canaries,
    with_canaries,
)
from dpaudit.data import ArrayDataset, load_dataset


@pytest.fixture(scope="module")
def digits():
    b = load_dataset("digits")
    return b.train.subset(b.train.ids[:300].numpy())


def test_mislabelled_canaries_have_wrong_labels_and_fresh_ids(digits):
    c = mislabelled_canaries(digits, num_canaries=50, seed=3, id_offset=10_000)
    assert len(c) == 50 and c.ids.min() == 10_000
    src = {tuple(x.reshape(-1).tolist()): int(y) for x, y in zip(digits.features, digits.labels)}
    assert all(src[tuple(x.reshape(-1).tolist())] != int(y) for x, y in zip(c.features, c.labels))
    again = mislabelled_canaries(digits, num_canaries=50, seed=3, id_offset=10_000)
    assert torch.equal(c.features, again.features) and torch.equal(c.labels, again.labels)
    with pytest.raises(ValueError, match="num_canaries"):
        mislabelled_canaries(digits, num_canaries=1000, seed=0, id_offset=0)


def test_clipbkd_point_lies_along_the_last_component(digits):
    c = clipbkd_canaries(digits, group_size=3, id_offset=5000)
    assert len(c) == 3 and torch.equal(c.features[0], c.features[2])
    x = digits.features.reshape(len(digits), -1).double()
    # The canary differs from the mean mostly where the data does not vary (the last PCs).
    delta = c.features[0].reshape(-1).double() - x.mean(0)
    var = x.var(0)
    assert float((delta.abs() * var).sum()) < 0.05 * float(delta.abs().sum() * var.mean())
    assert 0 <= int(c.labels[0]) < digits.num_classes


def test_clipbkd_on_a_one_class_training_set_picks_another_class(digits):
    """Issue 11, finding 9: --num-members 1 failed with scikit-learn's "needs samples of at least 2 classes"."""
    one = digits.subset(digits.ids[:1].numpy())
    c = clipbkd_canaries(one, id_offset=5000)
    assert len(c) == 1 and int(c.labels[0]) != int(one.labels[0])


def test_with_canaries_and_loss_scores(digits):
    c = mislabelled_canaries(digits, num_canaries=4, seed=0, id_offset=9000)
    both = with_canaries(digits, c, np.array([True, False, True, False]))
    assert len(both) == len(digits) + 2
    assert len(with_canaries(digits, c, np.zeros(4, bool))) == len(digits)
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 10))
    s = loss_scores(model, c.features, c.labels)
    assert s.shape == (4,) and np.all(s <= 0)


def test_dirac_coordinate_is_structurally_decoupled_on_digits(digits):
    from dpaudit.models import build_model

    model = build_model("digits-mlp", input_shape=(1, 8, 8), num_classes=10)
    canary = find_dirac_coordinate(model, digits, magnitude=5.0)
    assert canary.decoupled
    j = canary.index % 64
    assert float(digits.features.reshape(len(digits), -1)[:, j].abs().max()) == 0.0
    # Every per-example gradient at the coordinate is exactly zero.
    params = dict(model.named_parameters())
    for i in range(0, 40):
        model.zero_grad()
        nn.functional.cross_entropy(model(digits.features[i : i + 1]), digits.labels[i : i + 1]).backward()
        assert float(params[canary.parameter].grad.reshape(-1)[canary.index]) == 0.0
    g = canary.gradient({n: p.shape for n, p in model.named_parameters()})
    assert float(g[canary.parameter].abs().sum()) == 5.0
    assert canary.read({canary.parameter: g[canary.parameter]}) == 5.0


def test_dirac_fallback_without_zero_features():
    x = torch.rand(30, 4) * 0.9 + 0.05
    data = ArrayDataset(name="dense", features=x, labels=torch.randint(0, 3, (30,)), ids=np.arange(30), num_classes=3)
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
    canary = find_dirac_coordinate(model, data, magnitude=1.0)
    assert not canary.decoupled and canary.parameter in dict(model.named_parameters())
    with pytest.raises(ValueError):
        DiracCanary(parameter="w", index=0, magnitude=0.0)
