"""The server's attacks on DSSGD uploads: input reconstruction, SSIM, membership from uploads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attacks.federated.similarity import RECOGNISABLE_SSIM, match_reconstructions, ssim
from attacks.federated.uploads import (
    first_layer_update,
    reconstruct_inputs,
    upload_membership_scores,
    upload_reconstruction_attack,
)
from dpaudit.models import build_model

SHAPE = (1, 28, 28)


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's bundled 8×8 digits, upsampled to 1×28×28 in [0, 1]: MNIST-like, offline."""
    from sklearn.datasets import load_digits

    raw = load_digits()
    images = torch.tensor(raw.images / 16.0, dtype=torch.float32)[:, None]
    images = F.interpolate(images, size=SHAPE[1:], mode="bilinear", align_corners=False).clamp(0, 1)
    return images, torch.tensor(raw.target)


def _turn(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, steps: int = 1, lr: float = 0.1) -> torch.Tensor:
    """Δw of a participant's local turn (plain SGD on one batch), over the flat parameter vector."""
    before = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()]) - before


def _largest(dw: torch.Tensor, fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.sort(-dw.abs(), stable=True).indices[: max(1, int(fraction * dw.numel()))]
    return idx, dw[idx]


def _random(dw: torch.Tensor, fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.randperm(dw.numel(), generator=torch.Generator().manual_seed(seed))[
        : max(1, int(fraction * dw.numel()))
    ]
    return idx, dw[idx]


def _best(model: torch.nn.Module, idx: torch.Tensor, val: torch.Tensor, private: torch.Tensor) -> np.ndarray:
    recons = reconstruct_inputs(first_layer_update(model, idx, val), input_shape=SHAPE, max_images=16)
    best, _ = match_reconstructions(recons, private)
    return best


def _auc(members: np.ndarray, others: np.ndarray) -> float:
    # P(member score > non-member score), ties counted half (Mann–Whitney).
    diff = members[:, None] - others[None, :]
    return float((diff > 0).mean() + 0.5 * (diff == 0).mean())


def test_single_example_full_upload_is_exact_and_sparsity_and_noise_degrade_it(digits):
    images, labels = digits
    torch.manual_seed(0)
    model = build_model("dssgd-mlp", input_shape=SHAPE, num_classes=10)
    x, y = images[:1], labels[:1]
    dw = _turn(model, x, y)
    full = _best(model, torch.arange(dw.numel()), dw, x)
    largest10 = _best(model, *_largest(dw, 0.10), x)
    largest1 = _best(model, *_largest(dw, 0.01), x)
    random1 = _best(model, *_random(dw, 0.01, seed=1), x)
    noisy = dw + torch.distributions.Laplace(0.0, 1.0).sample(dw.shape)  # the DP variant's noise at a small ε
    laplace = _best(model, torch.arange(dw.numel()), noisy, x)
    # Measured (seed 0): full 1.000, largest 10 % 0.892, largest 1 % 0.254, random 1 % 0.004, Laplace(1) < 0.05.
    assert full.max() > 0.99
    assert full.size == 1  # every active unit's row is the same image: de-duplicated to one
    assert largest10.max() < full.max() and largest10.max() > RECOGNISABLE_SSIM
    assert largest1.max() < largest10.max()
    assert random1.max() < largest1.max()
    assert laplace.max() < 0.1


def test_several_local_steps_on_one_example_still_give_it_exactly(digits):
    images, labels = digits
    torch.manual_seed(3)
    model = build_model("dssgd-mlp", input_shape=SHAPE, num_classes=10)
    dw = _turn(model, images[5:6], labels[5:6], steps=4)
    assert _best(model, torch.arange(dw.numel()), dw, images[5:6]).max() > 0.99


def test_without_the_bias_rows_are_rescaled_and_deduplicated(digits):
    images, labels = digits
    torch.manual_seed(2)
    model = build_model("dssgd-mlp", input_shape=SHAPE, num_classes=10)
    x = images[7:8]
    dw = _turn(model, x, labels[7:8])
    weight_only = torch.arange(128 * 784)  # the first layer's weight, no bias: each row is c·x, c unknown
    recons = reconstruct_inputs(
        first_layer_update(model, weight_only, dw[weight_only]), input_shape=SHAPE, max_images=16
    )
    assert recons.shape[0] == 1  # all active rows are one image up to scale: de-duplicated
    best, _ = match_reconstructions(recons, x)
    assert best[0] > 0.99  # sign fixed by the row's sum, scale by its brightest pixel (this digit's is 1)


def test_a_standardising_model_is_read_back_to_raw_inputs(digits):
    # The server knows the shared model, so it undoes its standardisation (x' = (x - m) / s):
    # with the bias, exactly; without it, by the brightest pixel. Ignoring it would compare
    # copies of x' (negative background) with raw images.
    images, labels = digits
    mean, std = float(images.mean()), float(images.std())
    torch.manual_seed(2)
    model = build_model("dssgd-mlp", input_shape=SHAPE, num_classes=10, input_standardization=[mean, std])
    x = images[7:8]
    dw = _turn(model, x, labels[7:8])
    update = first_layer_update(model, torch.arange(dw.numel()), dw)
    assert (update.input_mean, update.input_std) == (mean, std)
    assert _best(model, torch.arange(dw.numel()), dw, x).max() > 0.99
    weight_only = torch.arange(128 * 784)
    recons = reconstruct_inputs(
        first_layer_update(model, weight_only, dw[weight_only]), input_shape=SHAPE, max_images=16
    )
    best, _ = match_reconstructions(recons, x)
    assert best[0] > 0.99
    plain = build_model(
        "dssgd-mlp", input_shape=SHAPE, num_classes=10
    )  # same layout, no standardisation: the attacker's mistake
    wrong = reconstruct_inputs(
        first_layer_update(plain, torch.arange(dw.numel()), dw), input_shape=SHAPE, max_images=16
    )
    assert match_reconstructions(wrong, x)[0].max() < 0.9


def test_batch_of_eight_leaks_several_distinct_examples(digits):
    images, labels = digits
    torch.manual_seed(0)
    model = build_model("dssgd-mlp", input_shape=SHAPE, num_classes=10)
    pick = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))[:8]
    x, y = images[pick], labels[pick]
    dw = _turn(model, x, y)
    recons = reconstruct_inputs(
        first_layer_update(model, torch.arange(dw.numel()), dw), input_shape=SHAPE, max_images=16
    )
    best, where = match_reconstructions(recons, x)
    # ReLU units active for one example only carry an exact copy of it; measured: 7 of 8 at seed 0.
    assert len(set(where[best > 0.8].tolist())) >= 3


def test_attack_result_is_numpy_and_json_ready(digits):
    images, labels = digits
    torch.manual_seed(0)
    model = build_model("dssgd-mlp", input_shape=SHAPE, num_classes=10)
    dw = _turn(model, images[:1], labels[:1])
    result = upload_reconstruction_attack(
        model,
        torch.arange(dw.numel()),
        dw,
        input_shape=SHAPE,
        private_images=images[:20],
        private_ids=np.arange(100, 120),
        max_images=4,
    )
    assert all(isinstance(a, np.ndarray) for a in result.arrays().values())
    summary = json.loads(json.dumps(result.summary()))
    assert summary["distinct_recognised"] == 1 and summary["fraction_recognisable"] == 1.0
    assert result.matched_ids.tolist() == [100]
    assert result.threshold == RECOGNISABLE_SSIM


def test_first_layer_update_places_entries_and_masks():
    model = build_model("digits-mlp", input_shape=(1, 8, 8), num_classes=10, hidden=128)
    n_weight = 128 * 64
    up = first_layer_update(
        model, torch.tensor([5, 64 + 2, n_weight + 3, n_weight + 128 + 7]), torch.tensor([1.0, 2.0, 3.0, 4.0])
    )
    assert up.weight_delta.shape == (128, 64) and up.bias_delta is not None and up.bias_mask is not None
    assert up.weight_delta[0, 5] == 1.0 and up.weight_delta[1, 2] == 2.0 and up.bias_delta[3] == 3.0
    assert int(up.weight_mask.sum()) == 2 and int(up.bias_mask.sum()) == 1  # index n_weight+128+7 is the second layer's
    with pytest.raises(ValueError, match="indices"):
        first_layer_update(model, torch.tensor([10**9]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="distinct"):
        first_layer_update(model, torch.tensor([1, 1]), torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="values"):
        first_layer_update(model, torch.tensor([1, 2]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="input_shape"):
        reconstruct_inputs(up, input_shape=(1, 28, 28))


def test_conv_first_layer_is_refused_naming_the_layer():
    model = build_model("dssgd-cnn", input_shape=SHAPE, num_classes=10)
    with pytest.raises(ValueError, match="fully-connected first layer.*Conv2d"):
        first_layer_update(model, torch.tensor([0]), torch.tensor([1.0]))


def test_ssim_identity_symmetry_noise_and_a_known_value():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(3, 1, 28, 28, generator=g)
    y = (x + 0.3 * torch.rand(3, 1, 28, 28, generator=g)).clamp(0, 1)
    assert torch.allclose(ssim(x, x), torch.ones(3, dtype=torch.float64))
    assert torch.allclose(ssim(x, y), ssim(y, x))
    assert bool((ssim(x, y) < 0.99).all())
    assert float(ssim(x[0, 0], torch.rand(28, 28, generator=g))) < 0.1  # independent noise: about 0
    # Constant images: no structure, so SSIM is the luminance term (2μaμb + C1) / (μa² + μb² + C1).
    expected = (2 * 0.2 * 0.6 + 1e-4) / (0.2**2 + 0.6**2 + 1e-4)
    assert float(
        ssim(torch.full((8, 8), 0.2, dtype=torch.float64), torch.full((8, 8), 0.6, dtype=torch.float64))
    ) == pytest.approx(expected, rel=1e-9)
    # Tiny (8×8, window shrunk to 7) and multi-channel images work, batched or not.
    assert float(ssim(torch.rand(3, 8, 8, generator=g).clamp(0, 1), torch.zeros(3, 8, 8))) < 0.5
    assert ssim(torch.rand(2, 3, 8, 8, generator=g), torch.rand(2, 3, 8, 8, generator=g)).shape == (2,)


@pytest.mark.parametrize(
    ("a", "b", "name"),
    [
        (torch.zeros(5), torch.zeros(5), "a"),
        (torch.zeros(8, 8), torch.zeros(1, 1, 1, 8, 8), "b"),
        (torch.zeros(8, 8), torch.zeros(9, 9), "b"),
        (torch.full((8, 8), 2.0), torch.zeros(8, 8), "a"),
        (torch.zeros(2, 2), torch.zeros(2, 2), "a"),
    ],
)
def test_ssim_rejects_bad_inputs_naming_the_argument(a, b, name):
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        ssim(a, b)


def test_upload_membership_members_outscore_fresh_inputs(digits):
    images, labels = digits
    torch.manual_seed(1)
    model = build_model("dssgd-mlp", input_shape=SHAPE, num_classes=10)
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(1))
    members, others = order[:4], order[4:104]
    dw = _turn(model, images[members], labels[members])
    scores = upload_membership_scores(
        first_layer_update(model, torch.arange(dw.numel()), dw), images[torch.cat([members, others])]
    )
    assert scores.shape == (104,) and ((scores >= 0) & (scores <= 1)).all()
    assert _auc(scores[:4], scores[4:]) > 0.9
    # Under heavy Laplace noise the upload says nothing: the members' edge disappears.
    noisy = dw + torch.distributions.Laplace(0.0, 1.0).sample(dw.shape)
    noise_scores = upload_membership_scores(
        first_layer_update(model, torch.arange(dw.numel()), noisy), images[torch.cat([members, others])]
    )
    assert _auc(noise_scores[:4], noise_scores[4:]) < 0.9
    with pytest.raises(ValueError, match="candidates"):
        upload_membership_scores(first_layer_update(model, torch.arange(dw.numel()), dw), torch.zeros(3, 10))
