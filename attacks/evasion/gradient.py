"""White-box evasion attacks: FGSM, I-FGSM (BIM), PGD and MIM, in L∞ and L2.

These attacks measure *conventional* robustness: how much accuracy a model keeps when an
attacker who knows its weights may move every input by at most a radius r (in L∞ or L2).
Reports set the robust accuracy they measure beside the *certified* accuracy of PixelDP /
HGM models (``reference/attacks.md`` §3).

All four attacks are configurations (:class:`EvasionConfig`) of one projected-gradient
routine. With loss L = cross-entropy of the true label, step a = r · ``step_ratio`` and Π the
projection onto the ball of radius r around x intersected with the input range:

* **FGSM** — Goodfellow, Shlens & Szegedy (2015), "Explaining and Harnessing Adversarial
  Examples", §4: one step x' = clip(x + r · sign(∇ₓL)).
* **I-FGSM / BIM** — Kurakin, Goodfellow & Bengio (2016), "Adversarial Examples in the
  Physical World", §2.2: t steps x ← Π(x + a · sign(∇ₓL)).
* **PGD** — Madry et al. (2018), "Towards Deep Learning Models Resistant to Adversarial
  Attacks", §2.1: I-FGSM from a uniformly random point of the ball, optionally restarted,
  keeping per example the worst case over restarts.
* **MIM** — Dong et al. (2018), "Boosting Adversarial Attacks with Momentum", Alg. 1:
  g ← μ g + ∇ₓL / ‖∇ₓL‖₁, x ← Π(x + a · sign(g)), μ = 1.

The L2 variants replace sign(·) by division by the per-example L2 norm and project onto the
L2 ball (Madry et al. 2018; Dong et al. 2018 give MIM's L2 form). FGSM, I-FGSM and MIM
default to the evaluation of Phan et al. (2019, "Heterogeneous Gaussian Mechanism", §6) on
MNIST: 10 steps of a = r/10. PGD's random start costs part of that budget (a start at the far
side of the ball cannot cross it in 10 steps of r/10), which made it weaker than FGSM at small
radii, so PGD defaults to Madry et al.'s a = 2.5 · r / t (``step_ratio=0.25``); the authors'
setting is ``evasion_config("pgd", step_ratio=0.1)``.

**Randomized models.** Against a model with an active noise layer (PixelDP / HGM,
:func:`dpaudit.robustness.noise.is_randomized`) the gradient of one noise draw is a poor direction and
robustness would be overstated (Athalye, Carlini & Wagner 2018, "Obfuscated Gradients Give
a False Sense of Security", expectation over transformation). The attack then uses expectation over transformation: each step's gradient is the mean
over ``eot_samples`` draws, and a prediction is the majority vote of ``eval_samples`` draws.
A misclassification counts only when fresh draws confirm it (:func:`_confirm_fooled`), so a
break near a tie of the votes is evidence, not Monte Carlo noise.

**Many radii in one pass.** :func:`run_evasion` attacks all K radii at once: every example is
repeated K times along the batch dimension, each copy with its own radius, so one
forward/backward pass serves every radius. Success at radius r_k is the OR over the radii
≤ r_k (an input found inside a smaller ball lies inside every larger one), which makes robust
accuracy non-increasing in the radius by construction rather than by luck of the optimiser.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy import stats
from torch import nn
from torch.nn import functional as F

from dpaudit import _validate as v
from dpaudit.progress import Progress
from dpaudit.results import EVASION_NORMS, EvasionResult
from dpaudit.robustness.noise import find_noise_layer, is_randomized
from dpaudit.seeding import torch_generator
from dpaudit.training import resolve_device

__all__ = [
    "ATTACK_NAMES",
    "CONFIRM_CONFIDENCE",
    "CONFIRM_SAMPLES",
    "EVASION_ATTACKS",
    "EvasionConfig",
    "adversarial_examples",
    "evasion_config",
    "run_evasion",
]

ATTACK_NAMES: tuple[str, ...] = ("fgsm", "ifgsm", "pgd", "mim")
#: EOT / evaluation draws against randomized models when the caller gives none: 8 gradient
#: draws per step is enough for the sign of the mean gradient to settle on the MNIST-size
#: models here; 32 prediction draws make the argmax of the mean softmax stable.
DEFAULT_EOT_SAMPLES = 8
DEFAULT_EVAL_SAMPLES = 32
#: Fresh draws that confirm a randomized model's misclassification, and the confidence of the
#: test (see :func:`_confirm_fooled`): a finite vote is wrong about half the time where the
#: classifier's vote shares are close, so an unconfirmed "break" is noise, not evidence.
CONFIRM_SAMPLES = 256
CONFIRM_CONFIDENCE = 0.99
# Floor for gradient norms: a zero gradient (saturated softmax) must give a zero step, not NaN.
_TINY = 1e-12


@dataclass(frozen=True, kw_only=True)
class EvasionConfig:
    """One configuration of the projected-gradient routine.

    Attributes:
        name: the attack, one of :data:`ATTACK_NAMES`.
        num_steps: gradient steps (1 for FGSM).
        step_ratio: step size relative to the radius, a = r · step_ratio (FGSM: 1; I-FGSM,
            MIM: 1/10 with 10 steps, as in Phan et al. 2019, §6; PGD: 0.25, Madry et al.).
        random_start: start from a uniformly random point of the ball (PGD) instead of x.
        num_restarts: independent runs; per example the worst case is kept (a misclassified
            result beats a correct one, then the higher loss wins).
        momentum: μ of MIM's accumulated L1-normalised gradient (0 = no momentum).

    Raises:
        TypeError / ValueError: a field has the wrong type or is out of range (the message
            names it).
    """

    name: str
    num_steps: int
    step_ratio: float
    random_start: bool
    num_restarts: int = 1
    momentum: float = 0.0

    def __post_init__(self) -> None:
        v.choice("name", self.name, ATTACK_NAMES)
        v.integer("num_steps", self.num_steps, minimum=1)
        v.positive("step_ratio", self.step_ratio)
        if not isinstance(self.random_start, bool):
            raise v.invalid_type("random_start", f"random_start must be a bool, got {self.random_start!r}")
        v.integer("num_restarts", self.num_restarts, minimum=1)
        v.non_negative("momentum", self.momentum)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (for a result's ``config``)."""
        return dataclasses.asdict(self)


# FGSM, I-FGSM and MIM take the steps of Phan et al. (2019, §6) (10 steps of radius/10). PGD
# starts at a random point of the ball, from which 10 steps of radius/10 cannot cross it, so
# it would be weaker than FGSM; it takes Madry et al.'s 2.5·radius/steps instead. The authors'
# PGD is ``evasion_config("pgd", step_ratio=0.1)``.
EVASION_ATTACKS: dict[str, EvasionConfig] = {
    "fgsm": EvasionConfig(name="fgsm", num_steps=1, step_ratio=1.0, random_start=False),
    "ifgsm": EvasionConfig(name="ifgsm", num_steps=10, step_ratio=0.1, random_start=False),
    "pgd": EvasionConfig(name="pgd", num_steps=10, step_ratio=0.25, random_start=True),
    "mim": EvasionConfig(name="mim", num_steps=10, step_ratio=0.1, random_start=False, momentum=1.0),
}


def evasion_config(name: str, **overrides: Any) -> EvasionConfig:
    """The default configuration of attack ``name`` with some fields replaced.

    Args:
        name: one of :data:`EVASION_ATTACKS`.
        **overrides: fields of :class:`EvasionConfig` to change (e.g. ``num_restarts=5``).

    Raises:
        ValueError: unknown attack or field, or an invalid value (the message names it).
    """
    name = v.choice("attack", name, EVASION_ATTACKS)
    fields = {f.name for f in dataclasses.fields(EvasionConfig)} - {"name"}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise v.invalid("overrides", f"overrides must be fields of EvasionConfig ({', '.join(sorted(fields))}); got {unknown[0]!r}")
    return dataclasses.replace(EVASION_ATTACKS[name], **overrides)


# ----------------------------------------------------------------------------- validation


def _resolve_attack(attack: Any) -> EvasionConfig:
    if isinstance(attack, EvasionConfig):
        return attack
    if isinstance(attack, str):
        return evasion_config(attack)
    raise v.invalid_type("attack", f"attack must be an attack name or an EvasionConfig, got {attack!r}")


def _check_radii(radii: Any) -> np.ndarray:
    if isinstance(radii, (np.ndarray, torch.Tensor)):
        radii = radii.tolist() if radii.ndim == 1 else radii
    if isinstance(radii, (str, bytes)) or not isinstance(radii, Sequence):
        raise v.invalid_type("radii", f"radii must be a sequence of numbers, got {radii!r}")
    values = [v.non_negative(f"radii[{i}]", r) for i, r in enumerate(radii)]
    if not values:
        raise v.invalid("radii", "radii must hold at least one radius, got []")
    arr = np.asarray(values, dtype=np.float64)
    if np.any(np.diff(arr) <= 0):
        raise v.invalid("radii", f"radii must be strictly increasing, got {values!r}")
    return arr


def _check_data(features: Any, labels: Any, clip_min: float, clip_max: float) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(features, torch.Tensor) or not features.is_floating_point():
        raise v.invalid_type("features", f"features must be a floating-point torch.Tensor, got {type(features).__name__}")
    if features.ndim < 2 or features.shape[0] == 0:
        raise v.invalid("features", f"features must be (n, *input_shape) with n >= 1, got shape {tuple(features.shape)}")
    if not isinstance(labels, torch.Tensor) or labels.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise v.invalid_type("labels", f"labels must be an integer torch.Tensor, got {getattr(labels, 'dtype', type(labels).__name__)}")
    if tuple(labels.shape) != (features.shape[0],):
        raise v.invalid("labels", f"labels must have shape ({features.shape[0]},), one per example, got {tuple(labels.shape)}")
    # The ball ∩ box projection only stays inside the ball when x itself is in the box.
    lo, hi = float(features.min()), float(features.max())
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo < clip_min or hi > clip_max:
        raise v.invalid("features", f"features must lie in [clip_min, clip_max] = [{clip_min:g}, {clip_max:g}], got values in [{lo:g}, {hi:g}]")
    return features.detach(), labels.long()


def _check_range(clip_min: Any, clip_max: Any) -> tuple[float, float]:
    lo, hi = v.real("clip_min", clip_min), v.real("clip_max", clip_max)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
        raise v.invalid("clip_min", f"clip_min must be finite and < clip_max, got clip_min={clip_min!r}, clip_max={clip_max!r}")
    return lo, hi


def _check_call(
    model: Any, attack: Any, norm: Any, clip_min: Any, clip_max: Any, features: Any, labels: Any, eot_samples: Any, eval_samples: Any, batch_size: Any
) -> tuple[EvasionConfig, str, float, float, torch.Tensor, torch.Tensor, bool, int, int, int | None]:
    """The argument checks :func:`run_evasion` and :func:`adversarial_examples` share."""
    if not isinstance(model, nn.Module):
        raise v.invalid_type("model", f"model must be a torch.nn.Module, got {type(model).__name__}")
    config = _resolve_attack(attack)
    norm = v.choice("norm", norm, EVASION_NORMS)
    lo, hi = _check_range(clip_min, clip_max)
    features, labels = _check_data(features, labels, lo, hi)
    randomized = is_randomized(model)
    eot = _draws("eot_samples", eot_samples, randomized=randomized, default=DEFAULT_EOT_SAMPLES)
    n_eval = _draws("eval_samples", eval_samples, randomized=randomized, default=DEFAULT_EVAL_SAMPLES)
    batch_size = None if batch_size is None else v.integer("batch_size", batch_size, minimum=1)
    return config, norm, lo, hi, features, labels, randomized, eot, n_eval, batch_size


def _draws(name: str, value: Any, *, randomized: bool, default: int) -> int:
    if value is None:
        return default if randomized else 1
    count = v.integer(name, value, minimum=1)
    # Repeated draws of a deterministic model are identical: the same answer at 1/count the cost.
    return count if randomized else 1


# ----------------------------------------------------------------------------- the routine


def _per_row(t: torch.Tensor, ndim: int) -> torch.Tensor:
    return t.view(-1, *([1] * (ndim - 1)))


def _norms(delta: torch.Tensor, norm: str) -> torch.Tensor:
    flat = delta.flatten(1)
    return flat.abs().amax(1) if norm == "linf" else flat.norm(dim=1)


def _repeat(x: torch.Tensor, times: int) -> torch.Tensor:
    return x if times == 1 else x.repeat(times, *([1] * (x.ndim - 1)))


def _loss_gradient(model: nn.Module, x: torch.Tensor, y: torch.Tensor, eot_samples: int) -> torch.Tensor:
    """∇ₓ of the cross-entropy, averaged over ``eot_samples`` noise draws in one forward pass."""
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        logits = model(_repeat(x, eot_samples))
        loss = F.cross_entropy(logits, _repeat(y, eot_samples), reduction="sum")
        # Gradient w.r.t. the input only: parameters get no .grad and no weight-gradient work.
        (grad,) = torch.autograd.grad(loss, x)
    return grad / eot_samples


def _draws_in_passes(model: nn.Module, x: torch.Tensor, draws: int, draws_per_pass: int) -> Iterator[torch.Tensor]:
    """``draws`` noise draws of the model's logits on ``x``, ``(k, n, C)`` per forward pass of at
    most ``draws_per_pass`` copies (never more rows than the attack's own EOT passes)."""
    done = 0
    while done < draws:
        k = min(draws_per_pass, draws - done)
        yield model(_repeat(x, k)).view(k, x.shape[0], -1)
        done += k


@torch.no_grad()
def _evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, eval_samples: int, draws_per_pass: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(misclassified, loss) per row over ``eval_samples`` noise draws.

    The prediction is the majority vote of the per-draw argmax — the classifier whose
    argmax counts PixelDP / HGM certify and randomized smoothing defines — so robust and
    certified accuracy describe the same classifier (a mean-softmax argmax can differ from
    the vote, and then a certificate could look "broken" by an attack on another model).
    The loss (for choosing among restarts) is that of the mean softmax. Draws are taken
    ``draws_per_pass`` at a time so a forward pass never holds more rows than the attack's
    own EOT passes.
    """
    if eval_samples == 1:
        log_p = F.log_softmax(model(x).float(), dim=1)
        votes = log_p.argmax(1)
    else:
        draws = torch.cat([F.log_softmax(logits.float(), dim=2) for logits in _draws_in_passes(model, x, eval_samples, draws_per_pass)])
        log_p = torch.logsumexp(draws, dim=0) - math.log(eval_samples)
        votes = F.one_hot(draws.argmax(2), draws.shape[2]).sum(0).argmax(1)
    fooled = votes != y
    loss = -log_p.gather(1, y[:, None]).squeeze(1)
    return fooled, loss


@torch.no_grad()
def _confirm_fooled(model: nn.Module, x: torch.Tensor, y: torch.Tensor, fooled: torch.Tensor, *, draws: int, draws_per_pass: int, confidence: float) -> torch.Tensor:
    """Keeps only the misclassifications of a randomized model that fresh draws confirm.

    The classifier a vote describes (the argmax of the expected votes, which PixelDP/HGM's
    count bounds and Cohen et al.'s CERTIFY both certify) misclassifies x when some class c
    has a larger vote probability than y. For each row judged fooled, ``draws`` fresh draws
    are counted and the runner-up c (the most voted class other than y) tested against y with
    a one-sided Clopper–Pearson bound on c's share of the votes for c or y (a binomial
    conditional on n_c + n_y), Bonferroni-corrected over the K − 1 candidates. Rows whose
    share is not confidently above ½ count as not fooled: an attack's robust accuracy is an
    upper bound on the true one only if its breaks are real, and the soundness check (certified
    ≤ robust) is only meaningful then.
    """
    rows = torch.nonzero(fooled).flatten()
    if rows.numel() == 0:
        return fooled
    xs, ys = x[rows], y[rows]
    counts = sum(F.one_hot(logits.argmax(2), logits.shape[2]).sum(0) for logits in _draws_in_passes(model, xs, draws, draws_per_pass))
    assert isinstance(counts, torch.Tensor)
    n_y = counts.gather(1, ys[:, None]).squeeze(1)
    others = counts.scatter(1, ys[:, None], -1)
    n_c = others.max(1).values
    level = (1.0 - confidence) / max(1, counts.shape[1] - 1)
    k_c, n = n_c.cpu().numpy(), (n_c + n_y).cpu().numpy()
    lower = np.where(k_c > 0, stats.beta.ppf(level, np.maximum(k_c, 1), n - k_c + 1), 0.0)
    confirmed = torch.as_tensor(lower > 0.5, device=fooled.device)
    out = fooled.clone()
    out[rows] = confirmed
    return out


def _random_start(x0: torch.Tensor, r: torch.Tensor, norm: str, generator: torch.Generator) -> torch.Tensor:
    """A point drawn uniformly from the ball of per-row radius ``r`` around each row of x0."""
    gdev = generator.device
    if norm == "linf":
        u = torch.rand(x0.shape, generator=generator, device=gdev).to(x0.device, x0.dtype)
        return x0 + (2 * u - 1) * r
    b, d = x0.shape[0], x0[0].numel()
    # Uniform in the L2 ball: a uniform direction (normalised Gaussian) times r · U^(1/d).
    z = torch.randn(b, d, generator=generator, device=gdev).to(x0.device, x0.dtype)
    z = z / z.norm(dim=1, keepdim=True).clamp_min(_TINY)
    scale = torch.rand(b, generator=generator, device=gdev).to(x0.device, torch.float64).pow(1.0 / d).to(x0.dtype)
    return x0 + (z * scale[:, None]).view_as(x0) * r


def _attack_rows(
    model: nn.Module,
    x0: torch.Tensor,
    y: torch.Tensor,
    radius: torch.Tensor,
    *,
    config: EvasionConfig,
    norm: str,
    eot_samples: int,
    eval_samples: int,
    generator: torch.Generator,
    clip_min: float,
    clip_max: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Runs ``config`` on rows x0 with per-row radii (float64, all > 0); returns (x_adv, misclassified)."""
    r = _per_row(radius.to(x0.dtype), x0.ndim)
    step = r * config.step_ratio
    # Rounding x0 + δ moves each coordinate by up to half an ulp of the input range, i.e. the
    # L2 norm by up to √d · eps · max|bound| / 2, and the norm itself is off by a few ulps
    # relative. Aim that much inside the L2 sphere so the returned example is inside the ball
    # however the rounding falls (a shift of ~1e-6, far below any radius worth attacking).
    eps = torch.finfo(x0.dtype).eps
    slack = math.sqrt(x0[0].numel()) * eps * max(abs(clip_min), abs(clip_max))
    r_inside = (r.flatten() * (1 - 8 * eps) - slack).clamp_min(0.0)
    if norm == "linf":
        # The L∞ ball ∩ the input box is itself a box, so Π is one clamp to precomputed bounds.
        # x0 ± r is formed in float64 and rounded to the nearest float, which can lie half an
        # ulp outside the ball (large input ranges); one ulp back towards x0 is inside. The
        # clamp below only ever picks one of x, lower and upper, so these bounds are the
        # guarantee that every example is inside the ball.
        r64 = _per_row(radius.to(torch.float64), x0.ndim)
        x64 = x0.to(torch.float64)
        upper = (x64 + r64).to(x0.dtype)
        lower = (x64 - r64).to(x0.dtype)
        upper = torch.where(upper.to(torch.float64) - x64 > r64, torch.nextafter(upper, x0), upper).clamp(max=clip_max)
        lower = torch.where(x64 - lower.to(torch.float64) > r64, torch.nextafter(lower, x0), lower).clamp(min=clip_min)

    def project(x: torch.Tensor) -> torch.Tensor:
        if norm == "linf":
            return torch.maximum(torch.minimum(x, upper), lower)
        delta = x - x0
        factor = (r_inside / _norms(delta, "l2").clamp_min(_TINY)).clamp(max=1.0)
        # Clamping to the box after the ball moves every coordinate towards x0 (x0 is in the
        # box), so the result stays inside the ball.
        return (x0 + delta * _per_row(factor, x0.ndim)).clamp(clip_min, clip_max)

    randomized = is_randomized(model)
    best_x: torch.Tensor | None = None
    best_fooled = best_loss = torch.empty(0)
    for _ in range(config.num_restarts):
        x = project(_random_start(x0, r, norm, generator)) if config.random_start else x0.clone()
        accumulated = torch.zeros_like(x0) if config.momentum > 0 else None
        for _ in range(config.num_steps):
            grad = _loss_gradient(model, x, y, eot_samples)
            with torch.no_grad():
                if accumulated is not None:
                    l1 = grad.flatten(1).abs().sum(1).clamp_min(_TINY)
                    accumulated.mul_(config.momentum).add_(grad / _per_row(l1, grad.ndim))
                    grad = accumulated
                if norm == "linf":
                    direction = grad.sign()
                else:
                    direction = grad / _per_row(_norms(grad, "l2").clamp_min(_TINY), grad.ndim)
                x = project(x + step * direction)
        fooled, loss = _evaluate(model, x, y, eval_samples=eval_samples, draws_per_pass=eot_samples)
        if randomized:
            fooled = _confirm_fooled(model, x, y, fooled, draws=CONFIRM_SAMPLES, draws_per_pass=eot_samples, confidence=CONFIRM_CONFIDENCE)
        if best_x is None:
            best_x, best_fooled, best_loss = x, fooled, loss
            continue
        better = (fooled & ~best_fooled) | ((fooled == best_fooled) & (loss > best_loss))
        best_x = torch.where(_per_row(better, x.ndim), x, best_x)
        best_fooled = torch.where(better, fooled, best_fooled)
        best_loss = torch.where(better, loss, best_loss)
    assert best_x is not None  # num_restarts >= 1
    return best_x.detach(), best_fooled


@contextmanager
def _attack_mode(model: nn.Module, device: torch.device, noise_seed: int | None) -> Iterator[None]:
    """Evaluation mode on ``device`` for the attack; restores mode, device and noise generator.

    With ``noise_seed`` set and no generator of its own, the noise layer draws from a stream
    derived from the seed, so a seeded run against a randomized model is reproducible
    without touching torch's global generator.
    """
    was_training = model.training
    param = next(model.parameters(), None)
    previous_device = param.device if param is not None else None
    noise = find_noise_layer(model)
    previous_generator = noise.generator if noise is not None else None
    try:
        model.eval()
        model.to(device)
        if noise is not None and noise.generator is None and noise_seed is not None:
            noise.generator = torch_generator(noise_seed, "evasion", "noise", device=device)
        yield
    finally:
        if noise is not None:
            noise.generator = previous_generator
        if previous_device is not None:
            model.to(previous_device)
        model.train(was_training)


def _model_dtype(model: nn.Module, features: torch.Tensor) -> torch.dtype:
    param = next(model.parameters(), None)
    return param.dtype if param is not None and param.is_floating_point() else features.dtype


# ----------------------------------------------------------------------------- public API


def run_evasion(
    model: nn.Module,
    features: torch.Tensor,
    labels: torch.Tensor,
    *,
    attack: str | EvasionConfig,
    radii: Sequence[float],
    norm: str = "linf",
    eot_samples: int | None = None,
    eval_samples: int | None = None,
    batch_size: int | None = None,
    device: str | torch.device = "cpu",
    seed: int = 0,
    clip_min: float = 0.0,
    clip_max: float = 1.0,
    progress: bool = False,
) -> EvasionResult:
    """Attacks ``model`` on (features, labels) at every radius in one batched pass.

    Each example is repeated once per non-zero radius along the batch dimension, so one
    forward/backward pass per step serves all radii. Radius 0 needs no attack: its success is
    the clean error. Success at radius r_k is then OR-ed over all radii ≤ r_k — the example
    found inside a smaller ball is inside this one too — and clean errors count as successes
    at every radius, so robust accuracy is non-increasing in r and at most the clean
    accuracy (Madry et al. 2018, §2.1, the min-max view of robustness within a ball).

    Args:
        model: the classifier (logits out). It is put in eval mode (and on ``device``) for the
            attack and restored afterwards; its parameters get no gradients.
        features: (n, *input_shape) inputs in [clip_min, clip_max].
        labels: (n,) true labels.
        attack: an attack name of :data:`EVASION_ATTACKS` or an :class:`EvasionConfig`
            (Goodfellow et al. 2015; Kurakin et al. 2016; Madry et al. 2018; Dong et al. 2018).
        radii: K strictly increasing radii >= 0.
        norm: ``"linf"`` or ``"l2"``.
        eot_samples: noise draws averaged per gradient step against a randomized model
            (default 8; always 1 for a deterministic model, where draws are identical).
        eval_samples: noise draws whose majority vote makes a prediction of a randomized model
            (default 32; always 1 for a deterministic model). A misclassification of a
            randomized model then counts only when :data:`CONFIRM_SAMPLES` fresh draws confirm
            it at :data:`CONFIRM_CONFIDENCE` (a finite vote is wrong about half the time near a
            tie, and an unconfirmed break would make robust accuracy no upper bound).
        batch_size: examples per chunk. A forward pass holds batch_size × (non-zero radii) ×
            eot_samples rows. ``None`` sizes chunks to about 128 rows on a CPU (small batches
            stay in cache: 2.4× faster than 1,024 rows for the MNIST CNN) and 8,192 on a GPU.
        device: where to compute (``"cpu"``, ``"cuda"``, ``"auto"``).
        seed: root seed; random starts (and the model's noise, when its noise layer has no
            generator of its own) come from streams derived from it. Results are reproducible
            for a given seed and batch_size.
        clip_min: lower end of the valid input range.
        clip_max: upper end of the valid input range.
        progress: report progress on stderr.

    Returns:
        An :class:`~dpaudit.results.EvasionResult` with a (K, n) success matrix, the clean
        predictions, the measured largest perturbation per radius, and in ``config`` the
        attack's hyperparameters, the draws used and the run time in seconds.

    Raises:
        TypeError / ValueError: an argument has the wrong type or value (the message names it),
            e.g. a negative radius, an unknown attack or norm, eot_samples < 1, or features
            outside [clip_min, clip_max].
    """
    start_time = time.perf_counter()
    radii_arr = _check_radii(radii)
    config, norm, lo, hi, features, labels, randomized, eot, n_eval, batch_size = _check_call(model, attack, norm, clip_min, clip_max, features, labels, eot_samples, eval_samples, batch_size)
    seed = v.integer("seed", seed, minimum=0)
    if not isinstance(progress, bool):
        raise v.invalid_type("progress", f"progress must be a bool, got {progress!r}")
    dev = resolve_device(device)

    n, num_radii = features.shape[0], radii_arr.size
    active = np.flatnonzero(radii_arr > 0)
    success = np.zeros((num_radii, n), dtype=bool)
    clean_fooled = np.zeros(n, dtype=bool)
    max_perturbation = np.zeros(num_radii, dtype=np.float64)
    dtype = _model_dtype(model, features)
    active_radii = torch.as_tensor(radii_arr[active], dtype=torch.float64, device=dev)
    generator = torch_generator(seed, "evasion", config.name, norm, device="cpu")

    if batch_size is None:
        rows = 128 if dev.type == "cpu" else 8192
        batch_size = max(1, rows // (max(1, active.size) * eot))
    chunks = [(begin, min(n, begin + batch_size)) for begin in range(0, n, batch_size)]
    with _attack_mode(model, dev, seed), Progress(n, f"evasion {config.name}/{norm}", enabled=progress) as bar:
        # Clean predictions first, for all chunks: against a randomized model they then use
        # the same noise draws whatever the attack, so every attack reports the same clean
        # accuracy for one seed.
        for begin, end in chunks:
            xb, yb = features[begin:end].to(dev, dtype), labels[begin:end].to(dev)
            fooled, _ = _evaluate(model, xb, yb, eval_samples=n_eval, draws_per_pass=eot)
            if randomized:
                fooled = _confirm_fooled(model, xb, yb, fooled, draws=CONFIRM_SAMPLES, draws_per_pass=eot, confidence=CONFIRM_CONFIDENCE)
            clean_fooled[begin:end] = fooled.cpu().numpy()
        for begin, end in chunks:
            xb = features[begin:end].to(dev, dtype)
            yb = labels[begin:end].to(dev)
            if active.size:
                b, k = end - begin, active.size
                # Row i·k + j is example i at radius j: all radii ride in the same batch.
                x0 = xb.repeat_interleave(k, dim=0)
                x_adv, fooled_adv = _attack_rows(
                    model,
                    x0,
                    yb.repeat_interleave(k),
                    active_radii.repeat(b),
                    config=config,
                    norm=norm,
                    eot_samples=eot,
                    eval_samples=n_eval,
                    generator=generator,
                    clip_min=lo,
                    clip_max=hi,
                )
                success[active, begin:end] = fooled_adv.view(b, k).T.cpu().numpy()
                measured = _norms(x_adv.double() - x0.double(), norm).view(b, k).amax(0).cpu().numpy()
                max_perturbation[active] = np.maximum(max_perturbation[active], measured)
            bar.update(end - begin)

    success |= clean_fooled[None, :]
    success = np.logical_or.accumulate(success, axis=0)
    run_config = {
        **config.to_dict(),
        "step_size": "radius * step_ratio",
        "eot_samples": eot,
        "eval_samples": n_eval,
        "randomized": randomized,
        "confirm_samples": CONFIRM_SAMPLES if randomized else 0,
        "confirm_confidence": CONFIRM_CONFIDENCE,
        "batch_size": batch_size,
        "seed": seed,
        "clip_min": lo,
        "clip_max": hi,
        "success": "cumulative over radii <= r (a smaller ball lies inside a larger one)",
        "seconds": time.perf_counter() - start_time,
    }
    return EvasionResult(
        attack=config.name,
        norm=norm,
        radii=radii_arr,
        success=success,
        clean_correct=~clean_fooled,
        max_perturbation=max_perturbation,
        config=run_config,
    )


def adversarial_examples(
    model: nn.Module,
    features: torch.Tensor,
    labels: torch.Tensor,
    *,
    attack: str | EvasionConfig,
    radius: float,
    norm: str = "linf",
    eot_samples: int | None = None,
    device: str | torch.device = "cpu",
    generator: torch.Generator | None = None,
    clip_min: float = 0.0,
    clip_max: float = 1.0,
    batch_size: int = 256,
) -> torch.Tensor:
    """The adversarial examples of ``attack`` at one radius (for inspection and plots).

    Args:
        model: the classifier; put in eval mode on ``device`` and restored afterwards.
        features: (n, *input_shape) inputs in [clip_min, clip_max].
        labels: (n,) true labels.
        attack: an attack name or :class:`EvasionConfig`.
        radius: the radius r >= 0 (0 returns a copy of ``features``).
        norm: ``"linf"`` or ``"l2"``.
        eot_samples: gradient draws per step against a randomized model (default 8).
        device: where to compute.
        generator: source of random starts (default: the stream of seed 0); the model's own
            noise is left to its noise layer.
        clip_min: lower end of the valid input range.
        clip_max: upper end of the valid input range.
        batch_size: examples per forward pass (× eot_samples rows).

    Returns:
        x_adv of the same shape as ``features``, on the CPU, with ‖x_adv − x‖ ≤ radius and
        every value in [clip_min, clip_max].

    Raises:
        TypeError / ValueError: an argument has the wrong type or value (named in the message).
    """
    r = v.non_negative("radius", radius)
    config, norm, lo, hi, features, labels, randomized, eot, n_eval, batch_size = _check_call(model, attack, norm, clip_min, clip_max, features, labels, eot_samples, None, batch_size)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise v.invalid_type("generator", f"generator must be a torch.Generator or None, got {type(generator).__name__}")
    dev = resolve_device(device)
    if r == 0:
        return features.detach().cpu().clone()
    gen = generator if generator is not None else torch_generator(0, "evasion", config.name, norm)
    dtype = _model_dtype(model, features)
    out = []
    with _attack_mode(model, dev, None):
        for begin in range(0, features.shape[0], batch_size):
            xb = features[begin : begin + batch_size].to(dev, dtype)
            yb = labels[begin : begin + batch_size].to(dev)
            radius_rows = torch.full((xb.shape[0],), r, dtype=torch.float64, device=dev)
            x_adv, _ = _attack_rows(
                model,
                xb,
                yb,
                radius_rows,
                config=config,
                norm=norm,
                eot_samples=eot,
                eval_samples=n_eval,
                generator=gen,
                clip_min=lo,
                clip_max=hi,
            )
            out.append(x_adv.cpu().to(features.dtype))
    return torch.cat(out)
