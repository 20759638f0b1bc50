"""The batched trainer (dpaudit/batched.py) against k separate runs with the same seeds.

Each mode is checked against the project's own trainer where its randomness can be matched
(DP-SGD and DP-GD: ``DPSGDTrainer`` as the audits call it; non-private: ``train_nonprivate``),
and the fast layered path against the generic ``torch.func`` path and a plain per-example loop.
Models agree up to floating-point reordering (sums taken in another order), so the tolerance
is a few float32 ulps of the parameters' scale, far below what one step of noise moves them.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from defenses._common import bundle_for_members
from defenses.dpsgd.config import DPSGDConfig
from defenses.dpsgd.training import DPSGDTrainer
from defenses.nonprivate import NonPrivateConfig, train_nonprivate
from dpaudit.batched import BatchedDPSGD, BatchedSGD, _layered_gradient_numel, plan_batches, train_batched
from dpaudit.batched_compute import LayeredModels
from dpaudit.data import load_dataset
from dpaudit.models import build_model
from dpaudit.seeding import derive_seed, torch_generator
from dpaudit.train_request import TrainRequest

TOL = 2e-5


@pytest.fixture(scope="module")
def pool():
    return load_dataset("digits").all().subset(np.arange(120))


def _mlp(pool):
    return lambda: build_model("digits-mlp", input_shape=pool.input_shape, num_classes=pool.num_classes)


def _gap(a: nn.Module, b: nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return max(float((sa[n] - sb[n]).abs().max()) for n in sa)


def _masks(n: int) -> np.ndarray:
    # Three models on different members: all, all but the last (an audit's OUT side), every other.
    mask = np.ones((3, n), dtype=bool)
    mask[1, -1] = False
    mask[2, 1::2] = False
    return mask


@pytest.mark.parametrize("sampling_rate", [0.1, 1.0], ids=["dpsgd-poisson", "dpgd-full-batch"])
def test_dp_modes_equal_the_projects_dpsgd_run_by_run(pool, sampling_rate):
    seeds, mask = [11, 12, 13], _masks(len(pool))
    steps, momentum = (6, 0.5) if sampling_rate < 1 else (3, 0.0)
    config = DPSGDConfig(
        noise_multiplier=0.8,
        clip_norm=1.0,
        sampling_rate=sampling_rate,
        epochs=steps * sampling_rate,
        learning_rate=0.3,
        momentum=momentum,
        accountant="rdp",  # the record's ε only: RDP costs milliseconds where PLD costs seconds per run
    )
    trainer = DPSGDTrainer(config=config, model_name="digits-mlp")
    # A start every run shares (the worst-case audits' crafted start) for the full-batch mode.
    start = _mlp(pool)().state_dict() if sampling_rate == 1 else None
    separate = [trainer(pool.subset(pool.ids[row].numpy()), seed=s, initial_state=start) for s, row in zip(seeds, mask)]
    run = train_batched(
        _mlp(pool),
        pool.features,
        pool.labels,
        seeds=seeds,
        members=mask,
        sample_ids=pool.ids,
        initial_state=start,
        config=BatchedDPSGD(
            noise_multiplier=0.8,
            clip_norm=1.0,
            sampling_rate=sampling_rate,
            num_steps=steps,
            learning_rate=0.3,
            momentum=momentum,
        ),
    )
    assert run.num_steps == (steps,) * 3
    for one, batched in zip(separate, run.models):
        assert _gap(one, batched) < TOL
    # The models really differ (own seeds, own members): equality above is not a constant.
    assert _gap(run.models[0], run.models[1]) > 1e-3


def test_nonprivate_equals_the_baseline_with_unequal_member_counts(pool):
    seeds, mask = [5, 6, 7], _masks(len(pool))
    cfg = NonPrivateConfig(epochs=2, batch_size=16, learning_rate=0.1, momentum=0.9, weight_decay=1e-3)
    separate = []
    for s, row in zip(seeds, mask):
        bundle, splits = bundle_for_members(pool.subset(pool.ids[row].numpy()))
        request = TrainRequest(
            bundle=bundle, splits=splits, model_name="digits-mlp", config=cfg, seed=s, progress=False
        )
        separate.append(train_nonprivate(request)[1])
    run = train_batched(
        _mlp(pool),
        pool.features,
        pool.labels,
        seeds=seeds,
        members=mask,
        config=BatchedSGD(epochs=2, batch_size=16, learning_rate=0.1, momentum=0.9, weight_decay=1e-3),
    )
    # 120 and 119 members take 8 batches an epoch, 60 take 4: the short model waits, unmoved.
    assert run.num_steps == (16, 16, 8)
    for one, batched in zip(separate, run.models):
        assert _gap(one, batched) < TOL


def test_chunking_by_the_memory_budget_changes_nothing(pool):
    config = BatchedDPSGD(noise_multiplier=1.0, clip_norm=0.5, sampling_rate=0.2, num_steps=3, learning_rate=0.2)
    whole = train_batched(_mlp(pool), pool.features, pool.labels, seeds=[1, 2, 3], config=config)
    model = _mlp(pool)()
    # digits-mlp takes the layered path, which forms no Linear layer's per-example gradient.
    held = _layered_gradient_numel(model, pool.features[0])
    assert held < sum(p.numel() for p in model.parameters())
    per_example = plan_batches(
        model, pool.features[0], num_models=3, max_examples=10, gradient_numel=held
    ).bytes_per_example
    # A budget for two models of one example each: chunks of two, then one, one example a pass.
    tight = train_batched(
        _mlp(pool), pool.features, pool.labels, seeds=[1, 2, 3], config=config, memory_budget=per_example * 2
    )
    assert (tight.plan.models_per_chunk, tight.plan.examples_per_pass) == (2, 1)
    assert whole.plan.models_per_chunk == 3
    assert "chunks of 2" in tight.plan.note
    for a, b in zip(whole.models, tight.models):
        assert _gap(a, b) < TOL


def test_plan_follows_the_budget_in_closed_form(pool):
    model = _mlp(pool)()
    params = sum(p.numel() for p in model.parameters())
    # digits-mlp: 64 → 64 → 10; its leaf modules output 64 + 64 + 64 + 10 numbers per example
    # (Flatten, Linear, Tanh, Linear); the per-example work is 4 bytes × 3 copies of those and P.
    per_example = 4 * 3 * (params + 64 + 64 + 64 + 10)
    plan = plan_batches(model, pool.features[0], num_models=100, max_examples=50, memory_budget=per_example * 350)
    assert plan.bytes_per_example == per_example
    # 350 example-models a pass: all 100 models, 3 examples each.
    assert (plan.models_per_chunk, plan.examples_per_pass) == (100, 3)
    few = plan_batches(model, pool.features[0], num_models=4, max_examples=50, memory_budget=per_example * 100)
    assert (few.models_per_chunk, few.examples_per_pass) == (4, 25)
    # A large budget still passes at most 32 MiB at once.
    big = plan_batches(model, pool.features[0], num_models=4, max_examples=10**4, memory_budget=2**40)
    assert big.examples_per_pass == (32 * 2**20 // per_example) // 4


def _reference_clipped_sum(model: nn.Module, x, y, weights, clip_norm):
    """Σ_i w_i · C / max(‖g_i‖, C) · g_i by one autograd call per example (the definition)."""
    total = [torch.zeros_like(p) for p in model.parameters()]
    for xi, yi, wi in zip(x, y, weights):
        g = torch.autograd.grad(F.cross_entropy(model(xi[None]), yi[None]), list(model.parameters()))
        norm = torch.sqrt(sum((t**2).sum() for t in g))
        for acc, t in zip(total, g):
            acc += wi * clip_norm / max(float(norm), clip_norm) * t
    return total


def test_layered_path_computes_each_examples_clipped_gradient_for_a_cnn():
    torch.manual_seed(0)
    models = [build_model("audit-cnn", input_shape=(1, 14, 14), num_classes=4) for _ in range(2)]
    from dpaudit.batched import StackedModels

    stack = StackedModels(models, torch.device("cpu"))
    assert stack.layered is not None
    x = torch.randn(2, 5, 1, 14, 14)
    y = torch.randint(0, 4, (2, 5))
    w = torch.tensor([[1.0, 1.0, 0.5, 1.0, 0.0], [0.2, 1.0, 1.0, 1.0, 1.0]])
    sums, losses = stack.layered.sums(stack.params, x, y, w, clip_norm=0.05)
    for j, model in enumerate(models):
        want = _reference_clipped_sum(model, x[j], y[j], w[j], 0.05)
        for (name, _), ref in zip(model.named_parameters(), want):
            torch.testing.assert_close(sums[name][j], ref, rtol=1e-4, atol=1e-6)
        live = w[j] > 0
        with torch.no_grad():
            expect = F.cross_entropy(model(x[j][live]), y[j][live], reduction="sum")
        assert float(losses[j]) == pytest.approx(float(expect), rel=1e-5)
    # Without clipping (the non-private mode) the sums are Σ w_i g_i: a bound no gradient reaches.
    plain, _ = stack.layered.sums(stack.params, x, y, w, clip_norm=None)
    for j, model in enumerate(models):
        want = _reference_clipped_sum(model, x[j], y[j], w[j], 1e9)
        for (name, _), ref in zip(model.named_parameters(), want):
            torch.testing.assert_close(plain[name][j], ref, rtol=1e-4, atol=1e-6)


def test_layered_sums_carry_no_graph_so_steps_do_not_chain_their_forward_passes():
    """A sum holding its forward graph made each DP-GD step keep the last one's activations:
    memory grew by ~600 MB a step for 4 audit-cnn models on 1,000 MNIST images."""
    from dpaudit.batched import StackedModels

    torch.manual_seed(0)
    stack = StackedModels([build_model("audit-cnn", input_shape=(1, 14, 14), num_classes=4)] * 2, torch.device("cpu"))
    assert stack.layered is not None
    params = {n: p.detach() for n, p in stack.params.items()}  # as the DP loop passes them
    x, y = torch.randn(2, 3, 1, 14, 14), torch.randint(0, 4, (2, 3))
    for clip_norm in (1.0, None):
        sums, losses = stack.layered.sums(params, x, y, torch.ones(2, 3), clip_norm=clip_norm)
        assert not losses.requires_grad
        assert all(g.grad_fn is None and not g.requires_grad for g in sums.values()), clip_norm


def test_generic_path_for_a_model_the_fast_path_does_not_take(pool):
    # LayerNorm is not a module the layered path knows, so the torch.func path trains it;
    # checked against DP-GD written plainly here (one autograd call per example).
    def build():
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 8), nn.LayerNorm(8), nn.Tanh(), nn.Linear(8, 10))

    assert LayeredModels.build(build()) is None
    x, y = pool.features[:30], pool.labels[:30]
    config = BatchedDPSGD(noise_multiplier=0.5, clip_norm=0.3, sampling_rate=1.0, num_steps=2, learning_rate=0.5)
    run = train_batched(build, x, y, seeds=[4, 9], config=config)
    for seed, got in zip([4, 9], run.models):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(seed, "init"))
            model = build()
        noise = torch_generator(seed, "noise")
        for _ in range(2):
            total = _reference_clipped_sum(model, x, y, torch.ones(30), 0.3)
            with torch.no_grad():
                for p, t in zip(model.parameters(), total):
                    t += 0.5 * 0.3 * torch.randn(t.shape, generator=noise)
                    p -= 0.5 * t / 30
        assert _gap(model, got) < TOL


def test_leaves_the_global_generator_alone_and_trains_on_the_named_device(pool):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    run = train_batched(
        _mlp(pool),
        pool.features,
        pool.labels,
        seeds=[0],
        device="cpu",
        config=BatchedSGD(epochs=1, batch_size=64),
    )
    assert torch.equal(before, torch.get_rng_state())
    assert next(run.models[0].parameters()).device.type == "cpu"
    assert not run.models[0].training


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"device": "tpu"}, "device"),
        ({"members": np.ones((2, 3), dtype=bool)}, "members"),
        ({"members": np.zeros((1, 120), dtype=bool)}, "members"),
        ({"seeds": []}, "seeds"),
        ({"seeds": [-1]}, "seed"),
        ({"config": "sgd"}, "config"),
    ],
)
def test_bad_arguments_are_named(pool, kwargs, argument):
    args = {"seeds": [0], "config": BatchedSGD(epochs=1), **kwargs}
    with pytest.raises((ValueError, TypeError), match=argument):
        train_batched(_mlp(pool), pool.features, pool.labels, **args)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"sampling_rate": 1.5}, "sampling_rate"),
        ({"sampling_rate": 0.0}, "sampling_rate"),
        ({"clip_norm": 0.0}, "clip_norm"),
        ({"num_steps": 0}, "num_steps"),
        ({"momentum": 1.0}, "momentum"),
        ({"expected_lot_size": -1.0}, "expected_lot_size"),
    ],
)
def test_bad_dp_settings_are_named(kwargs, argument):
    base = {"noise_multiplier": 1.0, "clip_norm": 1.0, "sampling_rate": 0.1, "num_steps": 2, "learning_rate": 0.1}
    with pytest.raises(ValueError, match=argument):
        BatchedDPSGD(**{**base, **kwargs})


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_gpu_is_refused_by_name(pool):
    with pytest.raises(ValueError, match="device='cuda'.*not available"):
        train_batched(_mlp(pool), pool.features, pool.labels, seeds=[0], config=BatchedSGD(epochs=1), device="cuda")


def test_layered_plan_counts_what_an_example_holds_in_closed_form():
    # Linear layers: each example holds its input and output gradient (784 + 1000, 1000 + 10),
    # never its 795,010-number gradient; a convolution holds its whole gradient (4·1·3·3 = 36)
    # and its unfolded input (1·3·3 numbers at each of 8·8 positions).
    mlp = nn.Sequential(nn.Flatten(), nn.Linear(784, 1000), nn.ReLU(), nn.Linear(1000, 10))
    assert _layered_gradient_numel(mlp, torch.zeros(1, 28, 28)) == (784 + 1000) + (1000 + 10)
    conv = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.Flatten(), nn.Linear(256, 2))
    assert _layered_gradient_numel(conv, torch.zeros(1, 8, 8)) == 36 + 9 * 64 + (256 + 2)
    x = torch.zeros(1, 28, 28)
    generic = plan_batches(mlp, x, num_models=16, max_examples=512)
    layered = plan_batches(mlp, x, num_models=16, max_examples=512, gradient_numel=2794)
    activations = 784 + 1000 + 1000 + 10  # Flatten, Linear, ReLU, Linear outputs
    assert generic.bytes_per_example == 4 * 3 * (795_010 + activations)
    assert layered.bytes_per_example == 4 * 3 * (2794 + activations)
    assert (layered.models_per_chunk, layered.examples_per_pass) == (
        16,
        (32 * 2**20) // (layered.bytes_per_example * 16),
    )
