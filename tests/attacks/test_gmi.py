"""GMI (Zhang et al. 2020): the GAN prior's shapes and determinism, and the latent search's contract."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest
import torch
from torch import nn

from attacks.inversion.base import InversionOutput, target_confidence
from attacks.inversion.gmi import GANConfig, GMIConfig, build_gan, gmi, run_gmi, train_gan


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    # Tiny models on a shared 2-core machine: several torch threads contend and run far slower.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _gan(shape: tuple[int, int, int] = (1, 8, 8), latent_dim: int = 8) -> tuple[nn.Module, nn.Module]:
    return build_gan(shape, GANConfig(latent_dim=latent_dim))


def _seeded(model: nn.Module, seed: int = 0) -> nn.Module:
    gen = torch.Generator().manual_seed(seed)  # no test reads or seeds torch's global generator
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model


def _target(num_classes: int = 4, shape: tuple[int, int, int] = (1, 8, 8), seed: int = 0) -> nn.Module:
    return _seeded(
        nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(shape)), 16), nn.Dropout(0.1), nn.Linear(16, num_classes)),
        seed,
    )


def _snapshot(*modules: nn.Module) -> list[tuple[dict[str, torch.Tensor], list[bool]]]:
    return [
        ({k: t.detach().clone() for k, t in m.state_dict().items()}, [s.training for s in m.modules()]) for m in modules
    ]


def _same(before: list[tuple[dict[str, torch.Tensor], list[bool]]], *modules: nn.Module) -> None:
    for (state, flags), m in zip(before, modules, strict=True):
        assert [s.training for s in m.modules()] == flags
        now = m.state_dict()
        assert state.keys() == now.keys()
        assert all(torch.equal(state[k], now[k]) for k in state)
        assert all(p.grad is None for p in m.parameters())


@pytest.mark.parametrize("shape", [(1, 28, 28), (1, 112, 92), (1, 8, 8), (3, 64, 64)])
def test_build_gan_makes_images_of_the_input_shape_in_unit_range(shape: tuple[int, int, int]) -> None:
    generator, critic = build_gan(shape, GANConfig(latent_dim=100))
    generator.eval()
    with torch.no_grad():
        images = generator(torch.randn(3, 100))
        scores = critic(images)
    assert images.shape == (3, *shape) and images.dtype == torch.float32
    assert float(images.min()) >= 0.0 and float(images.max()) <= 1.0
    assert scores.reshape(-1).shape == (3,)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in critic.modules())  # WGAN-GP: no batch norm
    assert sum(p.numel() for p in generator.parameters()) < 5_000_000


def test_train_gan_is_deterministic_under_a_seed_and_returns_eval_models() -> None:
    public = torch.rand(24, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    config = GANConfig(latent_dim=8, gan_epochs=1, gan_batch_size=8, critic_steps=2)
    calls: list[tuple[int, int]] = []
    g1, d1 = train_gan(public, input_shape=(1, 8, 8), config=config, seed=3, progress=lambda d, t: calls.append((d, t)))
    g2, d2 = train_gan(public, input_shape=(1, 8, 8), config=config, seed=3)
    g3, _ = train_gan(public, input_shape=(1, 8, 8), config=config, seed=4)
    assert calls == [(1, 1)]
    for a, b in ((g1, g2), (d1, d2)):
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(g1.state_dict().values(), g3.state_dict().values(), strict=True))
    for m in (g1, d1):
        assert not any(s.training for s in m.modules())
        assert all(p.grad is None for p in m.parameters())
    with torch.no_grad():
        images = g1(torch.randn(5, 8))
    assert images.shape == (5, 1, 8, 8) and float(images.min()) >= 0.0 and float(images.max()) <= 1.0


def test_train_gan_rejects_bad_arguments() -> None:
    ok = torch.rand(4, 1, 8, 8)
    with pytest.raises(ValueError, match="config"):
        train_gan(ok, input_shape=(1, 8, 8), config=GMIConfig(), seed=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="public"):
        train_gan(ok * 2, input_shape=(1, 8, 8), config=GANConfig(gan_epochs=1), seed=0)
    with pytest.raises(ValueError, match="public"):
        train_gan(ok, input_shape=(1, 8, 9), config=GANConfig(gan_epochs=1), seed=0)
    with pytest.raises(ValueError, match="gan_epochs"):
        GANConfig(gan_epochs=0)


def test_gmi_contract_shapes_range_determinism_and_nothing_mutated() -> None:
    target = _target().train()  # attacks must put it in eval mode and restore the flags
    generator, critic = _gan()
    generator.train()
    before = _snapshot(target, generator, critic)
    config = GMIConfig(gmi_iterations=5, restarts=3)
    out = gmi(target, generator, critic, classes=[2, 0], config=config, seed=7)
    again = gmi(target, generator, critic, classes=[2, 0], config=config, seed=7)
    other = gmi(target, generator, critic, classes=[2, 0], config=config, seed=8)
    _same(before, target, generator, critic)
    assert isinstance(out, InversionOutput)
    assert out.classes.tolist() == [2, 0]
    assert out.reconstructions.shape == (2, 1, 8, 8) and out.reconstructions.dtype == np.float32
    assert out.reconstructions.min() >= 0.0 and out.reconstructions.max() <= 1.0
    assert out.target_confidence.shape == (2,)
    assert np.array_equal(out.reconstructions, again.reconstructions)
    assert np.array_equal(out.target_confidence, again.target_confidence)
    assert not np.array_equal(out.reconstructions, other.reconstructions)
    d = out.details
    assert d["iterations"] == 5 and len(d["best_restart"]) == 2
    assert np.shape(d["restart_confidence"]) == (2, 3)
    assert len(d["prior_loss"]) == 2 and len(d["identity_loss"]) == 2


class _Counting(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.batch_sizes: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.batch_sizes.append(int(x.shape[0]))
        return self.inner(x)


def test_gmi_batches_every_class_and_restart_and_keeps_the_restart_the_target_scores_highest() -> None:
    target = _Counting(_target(num_classes=5))
    generator, critic = _gan()
    out = gmi(
        target,
        generator,
        critic,
        classes=[0, 1, 2, 3, 4],
        config=GMIConfig(gmi_iterations=3, restarts=4, identity_weight=0.0),
        seed=1,
    )
    # One batch of K·R = 20 latents per iteration (3 steps, the final pass, the confidence pass).
    assert set(target.batch_sizes) == {20} and len(target.batch_sizes) == 5
    conf = np.asarray(out.details["restart_confidence"])
    # With λ = 0 the search ignores the target, so restarts differ in confidence and the pick matters.
    assert np.all(conf.max(axis=1) > conf.min(axis=1))
    assert out.details["best_restart"] == conf.argmax(axis=1).tolist()
    assert np.allclose(out.target_confidence, conf.max(axis=1))
    labels = torch.tensor(out.classes)
    recomputed = target_confidence(target, torch.from_numpy(out.reconstructions.copy()), labels)
    assert np.allclose(recomputed, out.target_confidence, atol=1e-6)


def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = torch.tensor(bunch.images / 16.0, dtype=torch.float32)[:, None]
    return x, torch.tensor(bunch.target, dtype=torch.long)


@pytest.mark.extended
def test_gmi_raises_the_targets_confidence_far_above_chance() -> None:
    # Private digits 0-4 train a linear target; the GAN sees only digits 5-9 (GMI's MNIST split).
    x, y = _digits()
    private, public = y < 5, y >= 5
    target = _seeded(nn.Sequential(nn.Flatten(), nn.Linear(64, 5)))
    opt = torch.optim.Adam(target.parameters(), lr=0.05)
    for _ in range(100):
        opt.zero_grad()
        nn.functional.cross_entropy(target(x[private]), y[private]).backward()
        opt.step()
    target.zero_grad(set_to_none=True)
    # Briefly: ten passes over ~900 images, one critic step per generator step, a large step.
    config = GANConfig(latent_dim=32, gan_epochs=10, gan_batch_size=64, critic_steps=1, gan_learning_rate=5e-3)
    generator, critic = train_gan(x[public], input_shape=(1, 8, 8), config=config, seed=0)
    classes = [0, 1, 2, 3, 4]
    # One step from one random latent per class: what the prior alone gives, before the search.
    start = gmi(target, generator, critic, classes=classes, config=GMIConfig(gmi_iterations=1, restarts=1), seed=0)
    out = gmi(target, generator, critic, classes=classes, config=GMIConfig(gmi_iterations=200, restarts=4), seed=0)
    assert out.target_confidence.min() > 4 / len(classes)  # every class, 4x chance
    assert out.target_confidence.mean() > start.target_confidence.mean() + 0.1
    assert np.mean(out.details["identity_loss"]) < 0.5 * np.mean(start.details["identity_loss"])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"classes": []}, "classes"),
        ({"classes": [1, 1]}, "classes"),
        ({"classes": [-1]}, "classes"),
        ({"classes": [9]}, "classes"),  # the target has 4 outputs
        ({"config": GANConfig()}, "config"),
        ({"seed": -1}, "seed"),
    ],
)
def test_gmi_rejects_bad_arguments_naming_them(kwargs: dict[str, object], name: str) -> None:
    generator, critic = _gan()
    args: dict[str, object] = {
        "classes": [0, 1],
        "config": GMIConfig(gmi_iterations=1, restarts=1),
        "seed": 0,
        **kwargs,
    }
    with pytest.raises(ValueError, match=name):
        gmi(_target(), generator, critic, **args)  # type: ignore[arg-type]


def test_gmi_config_validates_its_fields() -> None:
    with pytest.raises(ValueError, match="restarts"):
        GMIConfig(restarts=0)
    with pytest.raises(ValueError, match="gmi_momentum"):
        GMIConfig(gmi_momentum=1.0)
    with pytest.raises(ValueError, match="gmi_step_size"):
        GMIConfig(gmi_step_size=0.0)
    with pytest.raises(ValueError, match="generator"):
        gmi(_target(), nn.Identity(), nn.Identity(), classes=[0], config=GMIConfig(gmi_iterations=1), seed=0)
    assert dataclasses.asdict(GMIConfig())["identity_weight"] == 100.0


def test_run_gmi_needs_a_prior_of_the_right_shape() -> None:
    generator, critic = _gan()
    config = GMIConfig(gmi_iterations=1, restarts=1)
    with pytest.raises(ValueError, match="prior"):
        run_gmi(_target(), classes=[0], input_shape=(1, 8, 8), config=config, seed=0, prior=None)
    with pytest.raises(ValueError, match="input_shape"):
        run_gmi(
            _target(shape=(1, 28, 28)),
            classes=[0],
            input_shape=(1, 28, 28),
            config=config,
            seed=0,
            prior={"generator": generator, "critic": critic},
        )
    out = run_gmi(
        _target(),
        classes=[0],
        input_shape=(1, 8, 8),
        config=config,
        seed=0,
        prior={"generator": generator, "critic": critic},
    )
    assert out.reconstructions.shape == (1, 1, 8, 8)


def test_flags_are_prefixed_and_do_not_leak_into_mi_face_or_from_it() -> None:
    import argparse

    from attacks.inversion.mi_face import MIFaceConfig
    from dpaudit.options import add_option_flags, option_specs, options_from_args

    parser = argparse.ArgumentParser()
    flags = add_option_flags(parser, {"mi-face": MIFaceConfig, "gmi": GMIConfig, "prior:gan": GANConfig})
    expected = {
        "--latent-dim",
        "--gan-epochs",
        "--gan-batch-size",
        "--gan-learning-rate",
        "--critic-steps",
        "--gradient-penalty",
    }
    assert {s.flag for s in option_specs(GANConfig)} == expected
    assert {s.flag for s in option_specs(GMIConfig)} == {
        "--identity-weight",
        "--gmi-iterations",
        "--gmi-step-size",
        "--gmi-momentum",
        "--restarts",
        "--gmi-patience",
        "--gmi-tolerance",
    }

    def parsed(config_type: type, argv: list[str]) -> dict[str, object]:
        mine = {s.flag for s in option_specs(config_type)}
        return options_from_args(
            parser.parse_args(argv), config_type, {f: s for f, s in flags.items() if f in mine}, owner="test"
        )

    # MI-Face's --step-size is not GMI's step, and GMI's is not MI-Face's; --restarts is shared.
    assert parsed(GMIConfig, ["--step-size", "0.3", "--restarts", "2"]) == {"restarts": 2}
    assert parsed(MIFaceConfig, ["--gmi-step-size", "0.3", "--restarts", "2"]) == {"restarts": 2}
    assert GMIConfig(**parsed(GMIConfig, ["--gmi-step-size", "0.05"])).gmi_step_size == 0.05  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"gan_learning_rate": 2.0}, "gan_learning_rate"),
        ({"gradient_penalty": 1e300}, "gradient_penalty"),
        ({"gradient_penalty": float("inf")}, "gradient_penalty"),
        ({"gan_epochs": 0}, "gan_epochs"),
        ({"latent_dim": 0}, "latent_dim"),
    ],
)
def test_gan_config_refuses_values_that_only_diverge(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ValueError, match=name):
        GANConfig(**kwargs)  # type: ignore[arg-type]


def test_gmi_config_refuses_an_identity_weight_that_overflows() -> None:
    with pytest.raises(ValueError, match="identity_weight"):
        GMIConfig(identity_weight=1e300)
    assert GMIConfig(identity_weight=0.0).identity_weight == 0.0  # the prior alone: valid


def _reference_steps(target, generator, critic, *, labels, config, seed) -> list[int]:
    """GMI's latent search with the convergence rule written out plainly, one latent per list entry."""
    from torch.nn import functional as F

    from dpaudit.seeding import torch_generator

    n = len(labels)
    z = torch.randn(n, generator.latent_dim, generator=torch_generator(seed, "gmi", "latents")).clamp(-1.0, 1.0)
    y = torch.tensor(labels)
    velocity = torch.zeros_like(z)
    best, history, stopped = [float("inf")] * n, [], [None] * n
    beta, tol = config.gmi_patience, config.gmi_tolerance
    for it in range(config.gmi_iterations):
        zz = z.detach().requires_grad_(True)
        images = generator(zz)
        objective = -critic(images).reshape(-1) + config.identity_weight * F.cross_entropy(
            target(images), y, reduction="none"
        )
        (grad,) = torch.autograd.grad(objective.sum(), zz)
        for j in range(n):
            if stopped[j] is None:
                best[j] = min(best[j], float(objective[j].detach()))
        history.append(list(best))
        for j in range(n):
            if (
                stopped[j] is None
                and it >= beta
                and history[it - beta][j] - best[j] <= tol * abs(history[it - beta][j])
            ):
                stopped[j] = it
        z = z.detach().clone()
        for j in range(n):
            if stopped[j] is None:
                velocity[j] = config.gmi_momentum * velocity[j] + grad[j]
                z[j] = (z[j] - config.gmi_step_size * velocity[j]).clamp(-1.0, 1.0)
    return [config.gmi_iterations if s is None else s for s in stopped]


def test_gmi_latents_stop_by_the_convergence_rule_where_a_plain_loop_says() -> None:
    generator, critic = _gan()
    _seeded(generator, 1), _seeded(critic, 2)
    target = _target()
    labels = [0, 1, 3]
    for m in (target, generator, critic):
        m.eval()  # as gmi runs them (BatchNorm on running statistics, no dropout)
    caps = []
    for tolerance in (0.0, 0.01, 0.2):
        config = GMIConfig(gmi_iterations=60, restarts=1, gmi_patience=5, gmi_tolerance=tolerance)
        out = gmi(target, generator, critic, classes=labels, config=config, seed=4)
        expected = _reference_steps(target, generator, critic, labels=labels, config=config, seed=4)
        assert out.details["steps"] == expected, tolerance
        caps.append(max(expected))
    assert min(caps) < 60  # a loose tolerance stops latents before the cap
    with pytest.raises(ValueError, match="gmi_tolerance"):
        GMIConfig(gmi_tolerance=1.0)
    with pytest.raises(ValueError, match="gmi_patience"):
        GMIConfig(gmi_patience=0)
