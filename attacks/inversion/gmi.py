"""GMI: generative model inversion with a GAN prior learned from public data.

Zhang, Jia, Pei, Wang, Li & Song (2020), "The Secret Revealer: Generative Model-Inversion
Attacks Against Deep Neural Networks", CVPR. MI-Face searches the raw pixel space, where most
points the target scores highly look like noise to a person. GMI instead searches the latent
space of a generator trained on *public* images of the same domain (faces of other people,
other digits), so every candidate looks like a plausible image, and only then asks the target
which candidate belongs to the class. It has two stages:

* **Stage 1 (§3.2)** — a Wasserstein GAN with gradient penalty (WGAN-GP, Gulrajani et al.
  2017) learns a generator G and a critic D on the public data (:func:`train_gan`). The paper
  also trains an inpainting variant with auxiliary knowledge (blurred or corrupted private
  images); this module implements the attack without auxiliary knowledge, the paper's
  setting for its MNIST and "no auxiliary knowledge" experiments.
* **Stage 2 (§3.3)** — for each target class c, find the latent

      z* = argmin_z  L_prior(z) + λ · L_id(z),   L_prior(z) = −D(G(z)),
                                                 L_id(z) = CE(target(G(z)), c)      (Eq. 3–5)

  by momentum SGD on z, clamping z to [−1, 1] after every step, from several random starts;
  the start whose image the target scores highest is kept (:func:`gmi`). λ = 100 in the paper.

The paper runs a fixed number of steps (``gmi_iterations``, 1,500); here that is a cap, and
each latent also stops by MI-Face's convergence rule (:mod:`attacks.inversion.mi_face`): once
its last β steps (``gmi_patience``) lowered the best objective it has reached by at most a
fraction τ (``gmi_tolerance``) of that objective's size β steps earlier. The objective is
signed (−D(G(z)) may be negative), hence the size. τ defaults to 0 — stop a latent only when
its best objective has not moved at all for β steps — because no measurement yet shows which
τ keeps GMI's reconstructions as recognisable as the full 1,500 steps (for MI-Face one does).

Every class and every restart is one row of a single batch of K·R latents: one iteration is
one forward and backward pass through G, D and the target, whatever K and R are. G and D are
in eval mode during the search (BatchNorm uses its running statistics), so rows do not interact
and each latent follows its own gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from attacks.inversion.base import RESTARTS_HELP, InversionOutput, check_classes, eval_mode, target_confidence
from attacks.inversion.spec import INVERSION_ATTACKS, InversionAttackSpec, PriorSpec
from dpaudit import _validate as v
from dpaudit.limits import LIMITS
from dpaudit.models import build_critic, build_generator
from dpaudit.options import option, option_specs
from dpaudit.parts import PlotStyle
from dpaudit.seeding import torch_generator

__all__ = [
    "GANConfig",
    "GMIConfig",
    "build_gan",
    "train_gan",
    "gmi",
    "build_gan_modules",
    "train_gan_modules",
    "run_gmi",
]

#: The zoo GAN (``dpaudit.models.GAN_MODELS``) GMI trains as its prior.
GAN_NAME = "dcgan"


def _count(name: str, value: Any) -> int:
    return v.integer(name, value, minimum=1)


def _weight(name: str, value: Any) -> float:
    # A loss weight past 1e6 only overflows the other term's gradient (and 1e300 makes NaNs).
    x = v.non_negative(name, value)
    if x > 1e6:
        raise v.invalid(name, f"{name} must be <= 1e6, got {value!r}")
    return x


def _rate(name: str, value: Any) -> float:
    # Adam's step is about the learning rate per parameter; above 1 the GAN only diverges.
    x = v.positive(name, value)
    if x > 1.0:
        raise v.invalid(name, f"{name} must be in (0, 1], got {value!r}")
    return x


def _check_fields(config: Any) -> None:
    # Every option's validator runs on its field; the error names the field and the value.
    for spec in option_specs(type(config)):
        if spec.check is not None:
            object.__setattr__(config, spec.field, spec.check(spec.field, getattr(config, spec.field)))


@dataclass(frozen=True, kw_only=True)
class GANConfig:
    """Training options of GMI's prior, a WGAN-GP on public images (Zhang et al. 2020, §3.2).

    The defaults follow the GMI authors' setting (Adam 2e-4, β = (0.5, 0.999), five critic
    steps per generator step, λ_GP = 10 as in Gulrajani et al. 2017, Alg. 1), with fewer epochs
    so that a usable MNIST generator trains on a laptop CPU in minutes.

    Attributes:
        latent_dim: length of the latent z.
        gan_epochs: passes over the public images; each batch is one critic step.
        gan_batch_size: public images per critic step.
        gan_learning_rate: Adam's step size for both networks.
        critic_steps: n_critic, critic steps per generator step.
        gradient_penalty: λ_GP, the weight of the critic's gradient-norm penalty.
    """

    latent_dim: int = option(
        100, help="GMI: length of the GAN's latent vector z", metavar="D", check=_count, limit=LIMITS["latent_dim"]
    )
    gan_epochs: int = option(
        10,
        help="GMI: passes of the GAN training over the public images",
        metavar="N",
        check=_count,
        limit=LIMITS["epochs"],
    )
    gan_batch_size: int = option(
        64, help="GMI: public images per GAN critic step", metavar="B", check=_count, limit=LIMITS["batch_size"]
    )
    gan_learning_rate: float = option(
        2e-4, help="GMI: Adam step size of the GAN's generator and critic", metavar="LR", check=_rate
    )
    critic_steps: int = option(
        5,
        help="GMI: WGAN-GP critic steps per generator step, n_critic",
        metavar="N",
        check=_count,
        limit=LIMITS["critic_steps"],
    )
    gradient_penalty: float = option(
        10.0, help="GMI: WGAN-GP gradient-penalty weight (Gulrajani et al. 2017)", metavar="LAMBDA", check=_weight
    )

    def __post_init__(self) -> None:
        _check_fields(self)


@dataclass(frozen=True, kw_only=True)
class GMIConfig:
    """Options of GMI's latent search (Zhang et al. 2020, §3.3, Eq. 3–5); defaults are the paper's.

    Attributes:
        identity_weight: λ, the weight of the identity loss against the prior loss.
        gmi_iterations: momentum-SGD steps on z.
        gmi_step_size: the SGD learning rate on z.
        gmi_momentum: the SGD momentum on z, in [0, 1).
        restarts: random starting latents per class; the one the target scores highest is kept.
        gmi_patience: β, the window of the convergence rule, in steps (module docstring).
        gmi_tolerance: τ in [0, 1): stop a latent once its best objective improved by at most
            this fraction of its size over the last β steps; 0 stops only a latent that has not
            improved at all.

    Field names are the flags' names (``--gmi-step-size`` → ``gmi_step_size``): the command line
    stores each flag under its field name, and MI-Face, which shares the ``attack inversion``
    parser, already has a ``step_size`` (``--step-size``).
    """

    identity_weight: float = option(
        100.0,
        help="GMI: weight lambda of the identity loss CE(target(G(z)), class) against the prior loss -D(G(z))",
        metavar="LAMBDA",
        check=_weight,
    )
    gmi_iterations: int = option(
        1500,
        help="GMI: momentum-SGD steps on the latent z",
        metavar="N",
        check=_count,
        limit=LIMITS["inversion_steps"],
    )
    gmi_step_size: float = option(0.02, help="GMI: SGD learning rate on the latent z", metavar="ETA", check=v.positive)
    gmi_momentum: float = option(
        0.9, help="GMI: SGD momentum on the latent z, in [0, 1)", metavar="MU", check=v.unit_interval_open_right
    )
    restarts: int = option(5, help=RESTARTS_HELP, metavar="R", check=_count, limit=LIMITS["restarts"])
    gmi_patience: int = option(
        100, help="GMI: window of the convergence rule in steps (see --gmi-tolerance)", metavar="BETA", check=_count
    )
    gmi_tolerance: float = option(
        0.0,
        help="GMI: stop a latent once its best objective improved by at most this fraction of its size "
        "over the last --gmi-patience steps, in [0, 1) (0: only when it has not improved at all)",
        metavar="TAU",
        check=lambda n, x: _fraction(n, x),
    )

    def __post_init__(self) -> None:
        _check_fields(self)


def _fraction(name: str, value: Any) -> float:
    x = v.non_negative(name, value)
    if x >= 1.0:
        raise v.invalid(name, f"{name} must be in [0, 1), got {value!r}")
    return x


def _shape(input_shape: object) -> tuple[int, int, int]:
    try:
        shape = tuple(int(s) for s in input_shape)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        raise v.invalid("input_shape", f"input_shape must be (C, H, W) of positive ints, got {input_shape!r}") from None
    if len(shape) != 3 or min(shape) < 1:
        raise v.invalid("input_shape", f"input_shape must be (C, H, W) of positive ints, got {input_shape!r}")
    return shape[0], shape[1], shape[2]


def build_gan(input_shape: tuple[int, ...], config: GANConfig) -> tuple[nn.Module, nn.Module]:
    """The untrained generator and critic of GMI's prior for images of ``input_shape``.

    Args:
        input_shape: (C, H, W) of one image (at least 4×4).
        config: the GAN's options (``latent_dim`` sizes the generator's input).

    Returns:
        ``(generator, critic)``: G maps (N, latent_dim) to (N, C, H, W) in [0, 1]; D maps
        images to (N,) scores.

    Raises:
        ValueError: a bad shape or a config of the wrong type.
    """
    if not isinstance(config, GANConfig):
        raise v.invalid("config", f"config must be a GANConfig, got {type(config).__name__}")
    shape = _shape(input_shape)
    return build_generator(GAN_NAME, image_shape=shape, latent_dim=config.latent_dim), build_critic(
        GAN_NAME, image_shape=shape
    )


@torch.no_grad()
def _init_weights(module: nn.Module, gen: torch.Generator) -> None:
    # DCGAN initialisation (Radford et al. 2016, §4): weights N(0, 0.02), norm scales
    # N(1, 0.02), biases 0, drawn from the seeded stream rather than torch's global generator.
    for m in module.modules():
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d, nn.Linear)):
            m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * 0.02)
            if m.bias is not None:
                m.bias.zero_()
        elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
            m.weight.copy_(1.0 + torch.randn(m.weight.shape, generator=gen) * 0.02)
            m.bias.zero_()


def _as_images(public: object, shape: tuple[int, int, int]) -> torch.Tensor:
    x = torch.as_tensor(np.asarray(public) if not isinstance(public, torch.Tensor) else public)
    if not x.is_floating_point():
        raise v.invalid("public", f"public must hold float images in [0, 1], got dtype {x.dtype}")
    if x.ndim != 4 or tuple(x.shape[1:]) != shape or x.shape[0] < 1:
        raise v.invalid(
            "public", f"public must have shape (N, {', '.join(map(str, shape))}) with N >= 1, got {tuple(x.shape)}"
        )
    if not bool(torch.isfinite(x).all()) or float(x.min()) < 0.0 or float(x.max()) > 1.0:
        raise v.invalid("public", "public must hold finite values in [0, 1]")
    return x.detach().to(torch.float32)


def train_gan(
    public: torch.Tensor,
    *,
    input_shape: tuple[int, ...],
    config: GANConfig,
    seed: int,
    device: str | torch.device = "cpu",
    progress: Callable[[int, int], None] | None = None,
) -> tuple[nn.Module, nn.Module]:
    """Stage 1 of GMI (Zhang et al. 2020, §3.2): a WGAN-GP prior on public images.

    The critic D minimises E[D(G(z))] − E[D(x)] + λ_GP · E[(‖∇D(x̂)‖₂ − 1)²] on points x̂ drawn
    uniformly on lines between real and generated images (Gulrajani et al. 2017, Alg. 1); the
    generator minimises −E[D(G(z))] once every ``critic_steps`` critic steps, z ~ N(0, I). Each
    mini-batch of public images is one critic step; the last incomplete batch of an epoch is
    dropped (unless the data is smaller than one batch).

    All randomness (initial weights, shuffling, latents, interpolation points) comes from
    streams derived from ``seed``; torch's global generator is neither read nor seeded, so on
    the CPU the result is a function of the arguments.

    Args:
        public: (N, *input_shape) float images in [0, 1] the target never saw.
        input_shape: (C, H, W) of one image.
        config: the GAN's options.
        seed: root seed of the training.
        device: where to train.
        progress: called as ``progress(done_epochs, total_epochs)`` after every epoch.

    Returns:
        ``(generator, critic)``, trained, in eval mode, without gradients stored.

    Raises:
        ValueError: an argument (named in the message) is invalid.
    """
    if not isinstance(config, GANConfig):
        raise v.invalid("config", f"config must be a GANConfig, got {type(config).__name__}")
    seed = v.integer("seed", seed, minimum=0)
    if progress is not None and not callable(progress):
        raise v.invalid("progress", f"progress must be callable or None, got {progress!r}")
    shape = _shape(input_shape)
    data = _as_images(public, shape)
    dev = torch.device(device)
    generator, critic = build_gan(shape, config)
    init = torch_generator(seed, "gmi-gan", "init")
    _init_weights(generator, init)
    _init_weights(critic, init)
    generator.to(dev).train()
    critic.to(dev).train()
    data = data.to(dev)
    opt_g = torch.optim.Adam(generator.parameters(), lr=config.gan_learning_rate, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(critic.parameters(), lr=config.gan_learning_rate, betas=(0.5, 0.999))
    # Random numbers are drawn on the CPU and moved, so a GPU run sees the same draws.
    rng = torch_generator(seed, "gmi-gan", "train")
    n = data.shape[0]
    batch = min(config.gan_batch_size, n)
    critic_step = 0
    with torch.enable_grad():
        for epoch in range(config.gan_epochs):
            order = torch.randperm(n, generator=rng).to(dev)
            for start in range(0, n - batch + 1, batch):
                real = data[order[start : start + batch]]
                z = torch.randn(batch, config.latent_dim, generator=rng).to(dev)
                eps = torch.rand(batch, 1, 1, 1, generator=rng).to(dev)
                with torch.no_grad():
                    fake = generator(z)
                mixed = (eps * real + (1.0 - eps) * fake).requires_grad_(True)
                (grad,) = torch.autograd.grad(critic(mixed).sum(), mixed, create_graph=True)
                penalty = ((grad.flatten(1).norm(dim=1) - 1.0) ** 2).mean()
                loss_d = critic(fake).mean() - critic(real).mean() + config.gradient_penalty * penalty
                opt_d.zero_grad(set_to_none=True)
                loss_d.backward()
                opt_d.step()
                critic_step += 1
                if critic_step % config.critic_steps == 0:
                    z = torch.randn(batch, config.latent_dim, generator=rng).to(dev)
                    loss_g = -critic(generator(z)).mean()
                    opt_g.zero_grad(set_to_none=True)
                    loss_g.backward()  # also reaches D's parameters; cleared before D's next step
                    opt_g.step()
            if progress is not None:
                progress(epoch + 1, config.gan_epochs)
    opt_g.zero_grad(set_to_none=True)
    opt_d.zero_grad(set_to_none=True)
    return generator.eval(), critic.eval()


def gmi(
    target: nn.Module,
    generator: nn.Module,
    critic: nn.Module,
    *,
    classes: object,
    config: GMIConfig,
    seed: int,
    device: str | torch.device = "cpu",
    progress: Callable[[int, int], None] | None = None,
) -> InversionOutput:
    """Stage 2 of GMI (Zhang et al. 2020, §3.3): search the GAN's latent space for each class.

    For K classes and R = ``config.restarts`` restarts, K·R latents are drawn from N(0, I)
    clamped to [−1, 1] and optimised together; latent ``k·R + r`` is restart r of class k. Each
    minimises −D(G(z)) + λ · CE(target(G(z)), class) (Eq. 3–5) by momentum SGD
    (v ← μ·v + ∇_z, z ← clamp(z − η·v, −1, 1)). After the last step the target's softmax
    probability of the class on each restart's image is computed, and per class the restart
    with the highest one is kept: the attacker has the target's verdict and nothing else.

    The three networks run in eval mode and are left as found: per-module training flags are
    restored, and gradients are taken with respect to z only (``torch.autograd.grad``), so no
    parameter changes and no ``.grad`` accumulates. They must already live on ``device``.

    Args:
        target: classifier returning logits (N, num_classes) for images (N, C, H, W) in [0, 1].
        generator: G from :func:`train_gan`; must have an int attribute ``latent_dim``.
        critic: D from :func:`train_gan`, returning (N,) or (N, 1) scores.
        classes: the target labels (distinct non-negative ints).
        config: the search's options.
        seed: seeds the starting latents; the search is otherwise deterministic.
        device: where to run.
        progress: called as ``progress(done_steps, total_steps)`` after every search step.

    Returns:
        The kept reconstruction per class with the target's confidence; ``details`` holds
        ``restart_confidence`` (K × R), ``best_restart`` (K), ``iterations``, and the kept
        restart's final ``prior_loss`` (−D(G(z))) and ``identity_loss`` (cross-entropy) per class.

    Raises:
        ValueError: an argument (named in the message) is invalid, including a label the
            target's output does not have or networks whose shapes do not fit together.
    """
    for name, module in (("target", target), ("generator", generator), ("critic", critic)):
        if not isinstance(module, nn.Module):
            raise ValueError(f"{name} must be a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(config, GMIConfig):
        raise v.invalid("config", f"config must be a GMIConfig, got {type(config).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise v.invalid("seed", f"seed must be a non-negative int, got {seed!r}")
    labels = check_classes(classes)
    latent_dim = getattr(generator, "latent_dim", None)
    if isinstance(latent_dim, bool) or not isinstance(latent_dim, int) or latent_dim < 1:
        raise v.invalid("generator", f"generator must have a positive int attribute latent_dim, got {latent_dim!r}")
    dev = torch.device(device)
    k, r = len(labels), config.restarts
    start = torch.randn(k * r, latent_dim, generator=torch_generator(seed, "gmi", "latents"))
    z = start.clamp(-1.0, 1.0).to(dev)
    y = torch.tensor(labels, dtype=torch.long, device=dev).repeat_interleave(r)

    def losses(latents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        images = generator(latents)
        if images.ndim != 4 or images.shape[0] != latents.shape[0]:
            raise v.invalid("generator", f"generator must return images (N, C, H, W), got {tuple(images.shape)}")
        score = critic(images)
        if score.numel() != latents.shape[0]:
            raise v.invalid("critic", f"critic must return one score per image, got {tuple(score.shape)}")
        logits = target(images)
        if logits.ndim != 2 or logits.shape[0] != latents.shape[0]:
            raise v.invalid("target", f"target must return logits of shape (N, C), got {tuple(logits.shape)}")
        if max(labels) >= logits.shape[1]:
            raise v.invalid("classes", f"classes must be < the target's {logits.shape[1]} outputs, got {max(labels)}")
        return images, -score.reshape(-1), F.cross_entropy(logits, y, reduction="none")

    n = k * r
    beta, window = config.gmi_patience, config.gmi_patience + 1
    with eval_mode(target), eval_mode(generator), eval_mode(critic), torch.enable_grad():
        velocity = torch.zeros_like(z)
        active = torch.ones(n, dtype=torch.bool, device=dev)
        steps = torch.zeros(n, dtype=torch.long, device=dev)
        best = torch.full((n,), math.inf, dtype=torch.float64, device=dev)
        history = torch.empty((window, n), dtype=torch.float64, device=dev)  # best objective, last β + 1 steps
        for it in range(config.gmi_iterations):
            if progress is not None and it:
                progress(it, config.gmi_iterations)
            z = z.detach().requires_grad_(True)
            _, prior, identity = losses(z)
            objective = prior + config.identity_weight * identity
            # Summing the per-latent losses keeps each latent's gradient its own loss's gradient.
            (grad,) = torch.autograd.grad(objective.sum(), z)
            best = torch.where(active, torch.minimum(best, objective.detach().double()), best)
            history[it % window] = best
            if it >= beta:
                before = history[(it - beta) % window]
                # A stopped latent keeps the z it stopped at (GMI returns the last iterate).
                active &= ~(before - best <= config.gmi_tolerance * before.abs())
                if not bool(active.any()):
                    break
            mask = active[:, None]
            velocity = torch.where(mask, config.gmi_momentum * velocity + grad, velocity)
            z = torch.where(mask, (z.detach() - config.gmi_step_size * velocity).clamp(-1.0, 1.0), z.detach())
            steps += active.long()
        if progress is not None:
            progress(config.gmi_iterations, config.gmi_iterations)
        with torch.no_grad():
            images, prior, identity = losses(z.detach())
        if not bool(torch.isfinite(images).all()):
            raise v.invalid(
                "generator",
                "generator produced non-finite images: is the GAN trained with a sane "
                "gan_learning_rate and gradient_penalty?",
            )
        images = images.detach().clamp(0.0, 1.0)
        conf = target_confidence(target, images, y).reshape(k, r)
    best_r = conf.argmax(axis=1)
    rows = np.arange(k) * r + best_r
    recon = images.cpu().numpy().astype(np.float32)[rows]
    prior_np, identity_np = prior.cpu().numpy().astype(np.float64), identity.cpu().numpy().astype(np.float64)
    return InversionOutput(
        classes=np.asarray(labels, dtype=np.int64),
        reconstructions=recon,
        target_confidence=conf[np.arange(k), best_r],
        details={
            "restart_confidence": conf.tolist(),
            "best_restart": best_r.tolist(),
            "iterations": int(config.gmi_iterations),
            "steps": steps.cpu().numpy().reshape(k, r)[np.arange(k), best_r].tolist(),
            "prior_loss": [float(x) if math.isfinite(x) else None for x in prior_np[rows]],
            "identity_loss": [float(x) if math.isfinite(x) else None for x in identity_np[rows]],
        },
    )


# ----------------------------------------------------------------------------- registry adapters
# ``attacks.inversion.INVERSION_ATTACKS`` describes priors and attacks by mappings of modules;
# these three adapt the functions above to that shape.


def build_gan_modules(input_shape: tuple[int, ...], config: GANConfig) -> dict[str, nn.Module]:
    """:func:`build_gan` as ``{"generator": G, "critic": D}`` (a registry ``PriorSpec.build``)."""
    generator, critic = build_gan(input_shape, config)
    return {"generator": generator, "critic": critic}


def train_gan_modules(public: torch.Tensor, **kwargs: Any) -> dict[str, nn.Module]:
    """:func:`train_gan` as ``{"generator": G, "critic": D}`` (a registry ``PriorSpec.train``)."""
    generator, critic = train_gan(public, **kwargs)
    return {"generator": generator, "critic": critic}


def run_gmi(
    model: nn.Module,
    *,
    classes: object,
    input_shape: tuple[int, ...],
    config: GMIConfig,
    seed: int,
    device: str | torch.device = "cpu",
    prior: Mapping[str, nn.Module] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> InversionOutput:
    """:func:`gmi` with the registry's signature; ``prior`` holds the trained ``generator`` and ``critic``.

    Raises:
        ValueError: no prior, or a generator whose images are not of ``input_shape``.
    """
    if prior is None or not isinstance(prior, Mapping) or not {"generator", "critic"} <= set(prior):
        raise v.invalid(
            "prior", f"prior must map 'generator' and 'critic' to GMI's trained GAN, got {type(prior).__name__}"
        )
    shape = _shape(input_shape)
    made = getattr(prior["generator"], "image_shape", shape)
    if tuple(made) != shape:
        raise v.invalid("prior", f"prior generator makes images of shape {tuple(made)}, but input_shape is {shape}")
    return gmi(
        model,
        prior["generator"],
        prior["critic"],
        classes=classes,
        config=config,
        seed=seed,
        device=device,
        progress=progress,
    )


INVERSION_ATTACKS.register(
    InversionAttackSpec(
        name="gmi",
        style=PlotStyle(colour="#D55E00", marker="s"),
        summary="latent search through a WGAN-GP trained on public data, -D(G(z)) + lambda CE (Zhang et al. 2020, §3)",
        config_type=GMIConfig,
        run=run_gmi,
        prior=PriorSpec(name="gan", config_type=GANConfig, build=build_gan_modules, train=train_gan_modules),
        iterations_field="gmi_iterations",
    )
)
