"""The DP-SGD bug catalogue (examples/dp_bugs/): every example keeps the ``--train-fn`` protocol.

The conformance battery (``dpaudit check``, issue 33) trains these functions on tiny crafted
datasets with a crafted ``initial_state``; a function that crashes there, or that is not a
function of its seed, cannot be checked at all. These tests pin what the battery relies on:
the module attributes (``train``, ``model``, ``CLAIM``, ``BUG``, ``REPORTED``), training on 1,
3 and 20 records from a perturbed state without crashing, determinism under a seed, the path
form ``examples/dp_bugs/<name>.py:train`` resolved here and in a fresh (``spawn``) worker, and
that each bug is actually present in the piece it overrides. The slow tier trains the correct
implementations on full digits (useful accuracy) and times every example.
"""

from __future__ import annotations

import inspect
import math
import multiprocessing
import pickle
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import nn

from dpaudit.callables import FileCallable, code_fingerprint, resolve_callable
from dpaudit.data import ArrayDataset, load_dataset

ROOT = Path(__file__).resolve().parents[2]
BUGS = ROOT / "examples" / "dp_bugs"
NAMES = sorted(p.stem for p in BUGS.glob("*.py") if not p.name.startswith("_"))
CORRECT = ("correct_opacus", "correct_opacus_ghost", "correct_plain")
OPACUS = ("correct_opacus", "correct_opacus_ghost", "dataset_size_normaliser", "no_noise", "realised_lot_size")


def module(name: str) -> ModuleType:
    """The example's module, loaded the way ``--train-fn examples/dp_bugs/<name>.py:train`` loads it."""
    fc = resolve_callable(f"{BUGS / name}.py:train", argument="--train-fn")
    assert isinstance(fc, FileCallable)
    return inspect.getmodule(fc.resolve())  # type: ignore[return-value]


def needs(name: str) -> None:
    if name in OPACUS:
        pytest.importorskip("opacus")


def digits(n: int | None = None) -> ArrayDataset:
    train = load_dataset("digits").train
    return train if n is None else train.subset(train.ids[:n])


def crafted_state(net: nn.Module, seed: int = 7) -> dict[str, torch.Tensor]:
    """``net``'s state dict with every float tensor perturbed: an auditor's start, not the builder's."""
    g = torch.Generator().manual_seed(seed)
    return {
        k: v + 0.1 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v.clone()
        for k, v in net.state_dict().items()
    }


def same(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_the_catalogue_has_at_least_twelve_bug_classes_and_both_correct_implementations() -> None:
    bugs = [n for n in NAMES if n not in CORRECT]
    assert len(bugs) >= 12, bugs
    assert set(CORRECT) <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_example_exposes_the_protocol(name: str) -> None:
    needs(name)
    mod = module(name)
    assert set(mod.CLAIM) == {"noise_multiplier", "sampling_rate", "num_steps"}
    assert mod.CLAIM["noise_multiplier"] > 0 and 0 < mod.CLAIM["sampling_rate"] <= 1 and mod.CLAIM["num_steps"] >= 1
    assert isinstance(mod.BUG, str) and (mod.BUG == "") == (name in CORRECT)
    assert isinstance(mod.REPORTED, str) and mod.REPORTED
    assert "initial_state" in inspect.signature(mod.train).parameters
    assert isinstance(mod.model(), nn.Module)
    doc = mod.__doc__ or ""
    assert "Leak" in doc or name in CORRECT, "a bug's docstring says by how much it leaks"
    if name not in CORRECT:
        assert "# BUG" in Path(mod.__file__).read_text(), "the buggy lines are marked"


def check_trains(mod: ModuleType, sizes: tuple[int, ...]) -> None:
    state = crafted_state(mod.model())
    for n in sizes:
        net = mod.train(digits(n), seed=0, initial_state=state)
        assert isinstance(net, nn.Module) and not net.training
        assert net.state_dict().keys() == state.keys()
        assert all(torch.isfinite(v).all() for v in net.state_dict().values() if v.is_floating_point())
        assert not same(net, mod.model()), "the crafted start is loaded (or training moved it)"
        assert same(net, mod.train(digits(n), seed=0, initial_state=state)), f"same seed, same model ({n} records)"


@pytest.mark.extended
@pytest.mark.parametrize("name", NAMES)
def test_trains_on_tiny_crafted_datasets_and_is_a_function_of_its_seed(name: str) -> None:
    needs(name)
    check_trains(module(name), (1, 3))


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_trains_on_twenty_records_and_a_different_seed_gives_a_different_model(name: str) -> None:
    needs(name)
    mod = module(name)
    check_trains(mod, (20,))
    state = crafted_state(mod.model())
    for n in (1, 3, 20):
        assert not same(
            mod.train(digits(n), seed=0, initial_state=state), mod.train(digits(n), seed=1, initial_state=state)
        ), n


def test_without_an_initial_state_the_start_comes_from_the_seed() -> None:
    mod = module("correct_plain")
    assert same(mod.train(digits(3), seed=5), mod.train(digits(3), seed=5))
    assert not same(mod.train(digits(3), seed=5), mod.train(digits(3), seed=6))


def test_the_path_form_travels_by_pickle_and_finds_its_helpers_in_a_fresh_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a worker does: unpickle the spec and import the file with neither its folder on
    ``sys.path`` nor its helper modules loaded."""
    fc = resolve_callable(f"{BUGS / 'per_batch_clipping'}.py:train", argument="--train-fn")
    expected = fc(digits(3), seed=0)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if Path(p or ".").resolve() != BUGS])
    for name in [m for m in sys.modules if m.startswith("_dpaudit_user_") or m in ("_dpsgd", "_opacus_dpsgd")]:
        monkeypatch.delitem(sys.modules, name)
    again = pickle.loads(pickle.dumps(fc))
    assert same(again(digits(3), seed=0), expected)


@pytest.mark.slow
def test_the_path_form_resolves_and_trains_in_a_spawned_worker() -> None:
    fc = resolve_callable(f"{BUGS / 'realised_lot_size'}.py:train", argument="--train-fn")
    plain = resolve_callable(f"{BUGS / 'per_batch_clipping'}.py:train", argument="--train-fn")
    pytest.importorskip("opacus")
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        nets = [pool.submit(f, digits(3), seed=0).result(timeout=300) for f in (fc, plain)]
    assert same(nets[0], fc(digits(3), seed=0)) and same(nets[1], plain(digits(3), seed=0))


def test_a_relative_path_spec_resolves_from_the_repository_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    fc = resolve_callable("examples/dp_bugs/correct_plain.py:train", argument="--train-fn")
    model_fn = resolve_callable("examples/dp_bugs/batchnorm.py:model", argument="--model-fn")
    assert isinstance(fc(digits(1), seed=0), nn.Module)
    assert any(isinstance(m, nn.BatchNorm1d) for m in model_fn().modules())


def test_the_fingerprint_covers_the_shared_loops_beside_the_example() -> None:
    """An edit of ``_dpsgd.py`` changes every example's code, so stored trials must not be reused."""
    assert set(code_fingerprint(f"{BUGS / 'noise_not_scaled'}.py:train").covered()) == {"_dpsgd"}
    assert set(code_fingerprint(f"{BUGS / 'no_noise'}.py:train").covered()) == {"_dpsgd", "_opacus_dpsgd"}


# Each bug is present in the piece its module overrides (a test that would fail on the reference).


def _grads(mod: ModuleType, cls: str) -> tuple[Any, dict[str, torch.Tensor]]:
    dp = getattr(mod, cls)()
    net = mod.model()
    x, y = digits(3).features, digits(3).labels
    return dp, dp.per_example_grads(net, x, y)


def test_per_batch_and_accumulation_clipping_let_one_example_exceed_its_share() -> None:
    for name, cls in (("per_batch_clipping", "PerBatchClipping"), ("accumulation_clipping", "AccumulationClipping")):
        dp, grads = _grads(module(name), cls)
        one = {k: 50 * g[:1] for k, g in grads.items()}  # one example with a large gradient, alone in its lot
        total = math.sqrt(sum(float(v.pow(2).sum()) for v in dp.clipped_sum(one).values()))
        assert total > 10 * dp.clip_norm, (name, total)  # the reference clips it to C


def test_augmentation_copies_count_one_record_eight_times() -> None:
    mod = module("augmentation_copies")
    x, y = mod.AugmentationCopies().inputs(digits(1).features, digits(1).labels, torch.Generator().manual_seed(0))
    assert len(x) == len(y) == 8 and x.shape[1:] == digits(1).features.shape[1:]


def test_the_same_noise_seed_draws_the_same_noise_on_every_call() -> None:
    dp = module("same_noise_seed").SameNoiseSeed()
    like = {"w": torch.zeros(5)}
    a, b = dp.noise(like, torch.Generator().manual_seed(1)), dp.noise(like, torch.Generator().manual_seed(2))
    assert torch.equal(a["w"], b["w"])


def test_the_samplers_put_a_lone_canary_in_every_lot() -> None:
    labels = torch.tensor([3] * 199 + [7])  # the canary alone in its class
    weighted = list(module("weighted_sampler").WeightedSampler().lots(labels, torch.Generator().manual_seed(0)))
    assert sum(int((lot == 199).sum()) for lot in weighted) > 50 * 40  # ≈ 72 copies per lot, not ≈ 0.1
    shuffled = list(
        module("shuffled_batches")
        .ShuffledBatches()
        .lots(torch.zeros(20, dtype=torch.long), torch.Generator().manual_seed(0))
    )
    assert len(shuffled) == 50 and all(len(lot) == 20 for lot in shuffled)


def test_steps_epochs_claims_the_epochs_and_runs_the_steps() -> None:
    mod = module("steps_epochs")
    assert mod.CLAIM["num_steps"] == mod.EPOCHS < mod.StepsEpochs.steps == 200


@pytest.mark.extended
def test_a_lone_record_never_sampled_leaves_the_unprotected_state_untouched() -> None:
    """Frozen head, BatchNorm statistics and realised-lot skipping: no noise reaches what they release."""
    one = digits(1)
    for name, key in (("frozen_layers", "3.weight"), ("batchnorm", "2.running_mean")):
        mod = module(name)
        state = crafted_state(mod.model())
        seeds = [
            s
            for s in range(3000)
            if not any(len(lot) for lot in mod.DPSGD().lots(one.labels, torch.Generator().manual_seed(s)))
        ]
        assert seeds, "some seed never samples the record (0.9^50 ≈ 0.5%)"
        assert torch.equal(mod.train(one, seed=seeds[0], initial_state=state).state_dict()[key], state[key]), name


# The slow tier: accuracy of the correct implementations on full digits, and timings.


@pytest.mark.slow
@pytest.mark.parametrize("name", CORRECT)
def test_the_correct_implementations_train_to_a_useful_accuracy(name: str) -> None:
    needs(name)
    mod = module(name)
    test = load_dataset("digits").test
    accs = []
    for seed in range(3):
        net = mod.train(digits(), seed=seed)
        with torch.no_grad():
            accs.append(float((net(test.features).argmax(1) == test.labels).float().mean()))
    print(f"{name}: test accuracy {accs}")
    assert min(accs) > 0.75, accs


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_timing_on_twenty_records_and_on_full_digits(name: str) -> None:
    needs(name)
    mod = module(name)
    mod.train(digits(20), seed=0)  # warm-up: imports, torch.func's first trace
    t0 = time.perf_counter()
    mod.train(digits(20), seed=1)
    small = time.perf_counter() - t0
    t0 = time.perf_counter()
    net = mod.train(digits(), seed=0)
    full = time.perf_counter() - t0
    test = load_dataset("digits").test
    with torch.no_grad():
        acc = float((net(test.features).argmax(1) == test.labels).float().mean())
    print(f"{name}: 20 records {small:.3f} s, full digits {full:.2f} s, test accuracy {acc:.3f}")
    assert small < 5 and full < 60
