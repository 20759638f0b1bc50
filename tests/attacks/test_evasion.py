"""Evasion attacks (attacks.evasion) and their result type (dpaudit.results.EvasionResult).

Contract table over every attack × norm on a small digits MLP, strength ordering, EOT against
a randomized (noise-layer) model, the result value's validation and round trip, and a
cross-check against Foolbox's projected-gradient attacks when Foolbox is installed.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.nn import functional as F

from attacks.evasion import (
    EVASION_ATTACKS,
    EvasionConfig,
    adversarial_examples,
    evasion_config,
    run_evasion,
)
from dpaudit.data import load_dataset
from dpaudit.models import build_model
from dpaudit.results import EvasionResult, load_evasion_result, save_evasion_result
from dpaudit.robustness.noise import find_noise_layer

RADII = {"linf": [0.0, 0.05, 0.1, 0.3], "l2": [0.0, 0.5, 1.0, 3.0]}
NORMS = ("linf", "l2")
TOL = 1e-6
PROPS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, epochs: int = 30) -> torch.nn.Module:
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        for idx in torch.randperm(len(x), generator=gen).split(128):
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    opt.zero_grad(set_to_none=True)
    return model.eval()


def _build(**kwargs: object) -> torch.nn.Module:
    # Weight init draws from torch's global generator; fork it so the test leaks no state.
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return build_model("digits-mlp", input_shape=(1, 8, 8), num_classes=10, **kwargs)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


@pytest.fixture(scope="module")
def model(digits):
    return _train(_build(), digits.train.features, digits.train.labels)


@pytest.fixture(scope="module")
def noisy_model(digits):
    net = _build(noise_layer=True)
    layer = find_noise_layer(net)
    layer.set_noise(0.3)
    layer.generator = torch.Generator().manual_seed(1)
    _train(net, digits.train.features, digits.train.labels)
    layer.generator = None
    return net


def _measured(x_adv: torch.Tensor, x: torch.Tensor, norm: str) -> torch.Tensor:
    delta = (x_adv.double() - x.double()).flatten(1)
    return delta.abs().amax(1) if norm == "linf" else delta.norm(dim=1)


# ----------------------------------------------------------------------------- contract table


@pytest.mark.extended
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("attack", EVASION_ATTACKS.names())
def test_contract(model, digits, attack, norm):
    x, y = digits.test.features, digits.test.labels
    radii = RADII[norm]
    x_before = x.clone()
    result = run_evasion(model, x, y, attack=attack, radii=radii, norm=norm, seed=3)

    assert result.attack == attack and result.norm == norm
    assert result.success.shape == (len(radii), len(x)) and result.success.dtype == bool
    np.testing.assert_array_equal(result.radii, radii)
    robust = result.robust_accuracy
    assert np.all(np.diff(robust) <= 0), robust
    assert robust[0] == pytest.approx(result.clean_accuracy)
    assert result.clean_accuracy > 0.9
    assert robust[-1] < result.clean_accuracy - 0.2
    assert np.all(result.max_perturbation <= result.radii + TOL)
    # The attack really uses its budget (a silent no-op would also pass the bound above).
    assert np.all(result.max_perturbation[1:] > 0.5 * result.radii[1:])
    assert result.config["name"] == attack and result.config["eot_samples"] == 1
    assert torch.equal(x, x_before)

    again = run_evasion(model, x, y, attack=attack, radii=radii, norm=norm, seed=3)
    np.testing.assert_array_equal(again.success, result.success)
    np.testing.assert_array_equal(again.max_perturbation, result.max_perturbation)

    for radius in radii:
        x_adv = adversarial_examples(model, x, y, attack=attack, radius=radius, norm=norm)
        assert x_adv.shape == x.shape and x_adv.device.type == "cpu"
        assert float(_measured(x_adv, x, norm).max()) <= radius + TOL
        assert float(x_adv.min()) >= 0.0 and float(x_adv.max()) <= 1.0


@PROPS
@given(
    attack=st.sampled_from(EVASION_ATTACKS.names()),
    norm=st.sampled_from(NORMS),
    radius=st.floats(1e-4, 20.0),
    bounds=st.sampled_from([(0.0, 1.0), (-1.0, 1.0), (0.0, 255.0)]),
    seed=st.integers(0, 2**16),
)
def test_examples_always_inside_ball_and_range(attack, norm, radius, bounds, seed):
    # A random linear model on random inputs anywhere in the range, including on its edges.
    gen = torch.Generator().manual_seed(seed)
    lo, hi = bounds
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(48, 5))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    x = lo + (hi - lo) * torch.rand(16, 3, 4, 4, generator=gen)
    x[:4] = lo
    x[4:8] = hi
    y = torch.randint(0, 5, (16,), generator=gen)
    x_adv = adversarial_examples(
        net, x, y, attack=attack, radius=radius, norm=norm, clip_min=lo, clip_max=hi, generator=gen
    )
    assert float(_measured(x_adv, x, norm).max()) <= radius + TOL
    assert float(x_adv.min()) >= lo and float(x_adv.max()) <= hi


@pytest.mark.parametrize("norm", NORMS)
def test_model_state_untouched(model, digits, norm):
    model.train()
    try:
        run_evasion(
            model, digits.test.features[:20], digits.test.labels[:20], attack="pgd", radii=RADII[norm], norm=norm
        )
        assert model.training
    finally:
        model.eval()
    assert all(p.grad is None for p in model.parameters())


def test_fgsm_matches_its_formula(model, digits):
    x, y, r = digits.test.features[:50], digits.test.labels[:50], 0.1
    xg = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(F.cross_entropy(model(xg), y, reduction="sum"), xg)
    expected = (x + r * grad.sign()).clamp(0, 1)
    torch.testing.assert_close(adversarial_examples(model, x, y, attack="fgsm", radius=r), expected)


def test_mim_without_momentum_is_ifgsm(model, digits):
    # Dividing by ‖∇L‖₁ leaves the sign unchanged: MIM with μ = 0 is I-FGSM (one routine).
    x, y = digits.test.features, digits.test.labels
    mim0 = run_evasion(model, x, y, attack=evasion_config("mim", momentum=0.0), radii=RADII["linf"])
    ifgsm = run_evasion(model, x, y, attack="ifgsm", radii=RADII["linf"])
    np.testing.assert_array_equal(mim0.success, ifgsm.success)


def test_success_is_cumulative_over_radii(model, digits):
    x, y = digits.test.features, digits.test.labels
    dense = run_evasion(model, x, y, attack="ifgsm", radii=[0.0, 0.05, 0.1, 0.15, 0.2])
    single = run_evasion(model, x, y, attack="ifgsm", radii=[0.15])
    # A point fooled within 0.15 by the lone run is fooled within 0.15 in the dense run too.
    assert np.all(dense.success[3] >= single.success[0])
    assert dense.robust_accuracy_at(0.15) <= single.robust_accuracy_at(0.15)


@pytest.mark.parametrize("norm", NORMS)
def test_iterative_attacks_at_least_as_strong_as_fgsm(model, digits, norm):
    x, y, radii = digits.test.features, digits.test.labels, RADII[norm][:3]
    fgsm = run_evasion(model, x, y, attack="fgsm", radii=radii, norm=norm).robust_accuracy
    for attack in ("ifgsm", "mim", evasion_config("pgd", step_ratio=0.25)):
        robust = run_evasion(model, x, y, attack=attack, radii=radii, norm=norm).robust_accuracy
        assert np.all(robust <= fgsm + 0.02), (attack, robust, fgsm)


def test_pgd_restarts_keep_the_worst_case(model, digits):
    x, y = digits.test.features, digits.test.labels
    one = run_evasion(model, x, y, attack="pgd", radii=[0.05, 0.1], seed=5, batch_size=1000)
    many = run_evasion(
        model, x, y, attack=evasion_config("pgd", num_restarts=4), radii=[0.05, 0.1], seed=5, batch_size=1000
    )
    # The first restart draws the same start as the single run; later ones can only add.
    assert np.all(many.success >= one.success)


def test_batch_size_changes_nothing_for_deterministic_attacks(model, digits):
    x, y = digits.test.features, digits.test.labels
    a = run_evasion(model, x, y, attack="mim", radii=RADII["l2"], norm="l2", batch_size=7)
    b = run_evasion(model, x, y, attack="mim", radii=RADII["l2"], norm="l2", batch_size=1000)
    np.testing.assert_array_equal(a.success, b.success)


# ----------------------------------------------------------------------------- randomized models


@pytest.mark.extended
def test_randomized_model_uses_eot_and_is_seeded(noisy_model, digits):
    x, y = digits.test.features[:120], digits.test.labels[:120]
    rng_before = torch.get_rng_state()
    result = run_evasion(noisy_model, x, y, attack="pgd", radii=[0.0, 0.1, 0.3], seed=1)
    assert result.config["randomized"] is True
    assert result.config["eot_samples"] == 8 and result.config["eval_samples"] == 32
    assert result.clean_accuracy > 0.8
    assert np.all(np.diff(result.robust_accuracy) <= 0)
    assert result.robust_accuracy[-1] < result.clean_accuracy - 0.2
    assert np.all(result.max_perturbation <= result.radii + TOL)
    # The noise came from a stream of the seed, not torch's global generator.
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert find_noise_layer(noisy_model).generator is None
    again = run_evasion(noisy_model, x, y, attack="pgd", radii=[0.0, 0.1, 0.3], seed=1)
    np.testing.assert_array_equal(again.success, result.success)
    # Clean predictions do not depend on the attack.
    fgsm = run_evasion(noisy_model, x, y, attack="fgsm", radii=[0.1], seed=1)
    np.testing.assert_array_equal(fgsm.clean_correct, result.clean_correct)


def test_randomized_model_with_its_own_generator(noisy_model, digits):
    x, y = digits.test.features[:60], digits.test.labels[:60]
    layer = find_noise_layer(noisy_model)
    runs = []
    for _ in range(2):
        layer.generator = torch.Generator().manual_seed(7)
        try:
            runs.append(
                run_evasion(noisy_model, x, y, attack="mim", radii=[0.1], norm="linf", eot_samples=2, eval_samples=4)
            )
        finally:
            layer.generator = None
    assert runs[0].config["eot_samples"] == 2 and runs[0].config["eval_samples"] == 4
    np.testing.assert_array_equal(runs[0].success, runs[1].success)


def test_eot_draws_ignored_for_deterministic_models(model, digits):
    result = run_evasion(
        model, digits.test.features[:20], digits.test.labels[:20], attack="fgsm", radii=[0.1], eot_samples=8
    )
    assert result.config["eot_samples"] == 1 and result.config["randomized"] is False


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"radii": [0.1, -0.1]}, ValueError, "radii"),
        ({"radii": [0.2, 0.1]}, ValueError, "radii"),
        ({"radii": []}, ValueError, "radii"),
        ({"radii": [float("inf")]}, ValueError, "radii"),
        ({"radii": [float("nan")]}, ValueError, "radii"),
        ({"radii": 0.1}, TypeError, "radii"),
        ({"attack": "cw"}, ValueError, "attack"),
        ({"attack": 3}, TypeError, "attack"),
        ({"norm": "l1"}, ValueError, "norm"),
        ({"eot_samples": 0}, ValueError, "eot_samples"),
        ({"eot_samples": 1.5}, TypeError, "eot_samples"),
        ({"eval_samples": 0}, ValueError, "eval_samples"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"seed": -1}, ValueError, "seed"),
        ({"clip_min": 1.0, "clip_max": 0.0}, ValueError, "clip_min"),
        ({"clip_max": 0.5}, ValueError, "features"),
        ({"device": "tpu"}, ValueError, "device"),
        ({"progress": "yes"}, TypeError, "progress"),
    ],
)
def test_bad_input_names_the_argument(model, digits, kwargs, exc, name):
    args = {"attack": "pgd", "radii": [0.1], **kwargs}
    with pytest.raises(exc, match=name):
        run_evasion(model, digits.test.features[:8], digits.test.labels[:8], **args)


def test_bad_data_and_configs(model, digits):
    x, y = digits.test.features[:8], digits.test.labels[:8]
    with pytest.raises(ValueError, match="labels"):
        run_evasion(model, x, y[:4], attack="fgsm", radii=[0.1])
    with pytest.raises(TypeError, match="features"):
        run_evasion(model, x.numpy(), y, attack="fgsm", radii=[0.1])
    with pytest.raises(TypeError, match="labels"):
        run_evasion(model, x, y.float(), attack="fgsm", radii=[0.1])
    with pytest.raises(ValueError, match="radius"):
        adversarial_examples(model, x, y, attack="fgsm", radius=-1.0)
    with pytest.raises(ValueError, match="batch_size"):  # was a TypeError from range() deep inside
        adversarial_examples(model, x, y, attack="fgsm", radius=0.1, batch_size=None)
    with pytest.raises(ValueError, match="overrides.*'steps'"):
        evasion_config("pgd", steps=3)
    with pytest.raises(ValueError, match="attack"):
        evasion_config("deepfool")
    with pytest.raises(ValueError, match="num_steps"):
        evasion_config("ifgsm", num_steps=0)
    with pytest.raises(ValueError, match="step_ratio"):
        EvasionConfig(name="pgd", num_steps=10, step_ratio=0.0, random_start=True)
    with pytest.raises(TypeError, match="random_start"):
        EvasionConfig(name="pgd", num_steps=10, step_ratio=0.1, random_start=1)
    with pytest.raises(ValueError, match="momentum"):
        evasion_config("mim", momentum=-1.0)
    with pytest.raises(ValueError, match="name"):
        EvasionConfig(name="cw", num_steps=1, step_ratio=1.0, random_start=False)


def test_registry_defaults():
    assert EVASION_ATTACKS.names() == ("fgsm", "ifgsm", "pgd", "mim")
    assert EVASION_ATTACKS["fgsm"].config.num_steps == 1 and EVASION_ATTACKS["fgsm"].config.step_ratio == 1.0
    for name in ("ifgsm", "mim"):  # Phan et al.'s evaluation: 10 steps of radius/10
        assert EVASION_ATTACKS[name].config.num_steps == 10 and EVASION_ATTACKS[
            name
        ].config.step_ratio == pytest.approx(0.1)
    assert EVASION_ATTACKS["pgd"].config.num_steps == 10 and EVASION_ATTACKS["pgd"].config.step_ratio == pytest.approx(
        0.25
    )  # Madry et al.'s 2.5 r / t
    assert EVASION_ATTACKS["pgd"].config.random_start and not EVASION_ATTACKS["ifgsm"].config.random_start
    assert EVASION_ATTACKS["mim"].config.momentum == 1.0
    assert evasion_config("pgd", num_restarts=3) == dataclasses.replace(EVASION_ATTACKS["pgd"].config, num_restarts=3)


# ----------------------------------------------------------------------------- the result value


def _result(**overrides: object) -> EvasionResult:
    fields = {
        "attack": "pgd",
        "norm": "linf",
        "radii": np.array([0.0, 0.1, 0.3]),
        "success": np.array([[False, True, False, False], [True, True, False, False], [True, True, True, False]]),
        "clean_correct": np.array([True, False, True, True]),
        "max_perturbation": np.array([0.0, 0.1, 0.29]),
        "config": {"num_steps": 10, "seconds": 1.5},
    }
    return EvasionResult(**{**fields, **overrides})


def test_result_metrics_and_round_trip(tmp_path):
    result = _result()
    assert result.num_examples == 4
    assert result.clean_accuracy == pytest.approx(0.75)
    np.testing.assert_allclose(result.robust_accuracy, [0.75, 0.5, 0.25])
    assert result.robust_accuracy_at(0.1) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="radius"):
        result.robust_accuracy_at(0.2)
    assert result.summary().robust_accuracy == {"0": 0.75, "0.1": 0.5, "0.3": 0.25}
    with pytest.raises(ValueError):
        result.success[0, 0] = True
    assert EvasionResult.from_dict(result.to_dict()) == result
    path = save_evasion_result(result, tmp_path)
    assert path.name == "evasion-pgd-linf.json" and (tmp_path / "evasion-pgd-linf.npz").is_file()
    assert load_evasion_result(path) == result
    assert result != _result(config={"num_steps": 9})


@pytest.mark.parametrize(
    ("overrides", "exc", "name"),
    [
        ({"norm": "l1"}, ValueError, "norm"),
        ({"attack": ""}, TypeError, "attack"),
        ({"radii": np.array([0.0, 0.3, 0.1])}, ValueError, "radii"),
        ({"radii": np.array([-0.1, 0.1, 0.3])}, ValueError, "radii"),
        ({"radii": np.array([0.0, 0.1])}, ValueError, "success"),
        ({"success": np.zeros((3, 4), dtype=int)}, TypeError, "success"),
        (
            {"success": np.array([[True, True, False, False], [False, True, False, False], [True, True, True, False]])},
            ValueError,
            "monotone",
        ),
        ({"success": np.zeros((3, 4), dtype=bool)}, ValueError, "clean_correct"),
        ({"clean_correct": np.array([1, 0, 1, 1])}, TypeError, "clean_correct"),
        ({"max_perturbation": np.array([0.0, 0.2, 0.3])}, ValueError, "max_perturbation"),
        ({"max_perturbation": np.array([0.0, 0.1])}, ValueError, "max_perturbation"),
        ({"config": [1, 2]}, TypeError, "config"),
        ({"schema_version": 99}, ValueError, "schema_version"),
    ],
)
def test_result_validation(overrides, exc, name):
    with pytest.raises(exc, match=name):
        _result(**overrides)


def test_save_refuses_other_types(tmp_path):
    with pytest.raises(TypeError, match="result"):
        save_evasion_result({"attack": "pgd"}, tmp_path)


# ----------------------------------------------------------------------------- Foolbox cross-check


@pytest.mark.extended
def test_pgd_not_weaker_than_foolbox(model, digits):
    fb = pytest.importorskip("foolbox")
    # All 1,797 digits and three seeds each: random starts make single runs differ by about a
    # point, and the comparison is of the attacks, not of one lucky draw.
    x = torch.cat([digits.train.features, digits.test.features])
    y = torch.cat([digits.train.labels, digits.test.labels])
    radii = [0.05, 0.1, 0.2]
    reference = copy.deepcopy(model).eval()  # Foolbox calls backward(), which fills .grad
    fmodel = fb.PyTorchModel(reference, bounds=(0, 1))
    attack = fb.attacks.LinfPGD(steps=10, rel_stepsize=0.1, random_start=True)
    theirs, ours = [], []
    for seed in range(3):
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            _, _, success = attack(fmodel, x, y, epsilons=radii)
        theirs.append(1.0 - success.float().mean(1).numpy())
        ours.append(run_evasion(model, x, y, attack="pgd", radii=radii, seed=seed).robust_accuracy)
    theirs_mean, ours_mean = np.mean(theirs, axis=0), np.mean(ours, axis=0)
    assert np.all(ours_mean <= theirs_mean + 0.01), (ours_mean, theirs_mean)
    # The deterministic attacks are the same computation: identical robust accuracy.
    for ours_name, theirs_attack in (
        ("fgsm", fb.attacks.FGSM()),
        ("ifgsm", fb.attacks.LinfBasicIterativeAttack(steps=10, rel_stepsize=0.1)),
    ):
        _, _, success = theirs_attack(fmodel, x, y, epsilons=radii)
        mine = run_evasion(model, x, y, attack=ours_name, radii=radii).robust_accuracy
        assert np.all(mine <= 1.0 - success.float().mean(1).numpy() + 1e-3), ours_name


def _coin(margin: float) -> torch.nn.Module:
    """A two-class randomized model that votes class 1 with probability Φ(margin / (0.5·√2))
    whatever its input: W = 0, bias (0, margin), noise σ = 0.5 on both logits."""
    from dpaudit.robustness.noise import add_noise_layer

    net = add_noise_layer(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(1, 2)), input_shape=(1,))
    with torch.no_grad():
        lin = net[0].layer[-1]
        lin.weight.zero_()
        lin.bias.copy_(torch.tensor([0.0, margin]))
    find_noise_layer(net).set_noise(0.5)
    return net.eval()


@pytest.mark.parametrize(("p_wrong", "confirmed"), [(0.45, False), (0.75, True)])
def test_randomized_breaks_need_confirmation(p_wrong, confirmed):
    # At a true vote share of 0.45 for the wrong class the classifier is right, yet a 32-draw
    # vote calls it wrong about 23 % of the time; a break counts only when fresh draws confirm
    # it. At 0.75 the classifier is wrong and every row is confirmed.
    from scipy.stats import binom
    from scipy.stats import norm as gaussian

    net = _coin(float(gaussian.ppf(p_wrong)) * 0.5 * math.sqrt(2))
    x, y = torch.full((300, 1), 0.5), torch.zeros(300, dtype=torch.long)
    result = run_evasion(net, x, y, attack="fgsm", radii=[0.0], norm="l2", seed=3)
    assert result.config["randomized"] is True and result.config["confirm_samples"] == 256
    errors = 1.0 - result.clean_accuracy
    if confirmed:
        assert errors == 1.0
    else:
        unconfirmed = binom.sf(16, 32, p_wrong)  # P(class 1 gets > 16 of 32 votes) ≈ 0.23
        assert unconfirmed > 0.2 and errors < 0.03
