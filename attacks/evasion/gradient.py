"""The projected-gradient routine behind FGSM, I-FGSM, PGD and MIM, and their registration.

With loss L = cross-entropy of the true label, step a = r · ``step_ratio`` and Π the projection
onto the ball of radius r around x intersected with the input range, each attack is one
:class:`~attacks.evasion.spec.EvasionConfig` of :func:`projected_gradient` (the citations are in
:mod:`attacks.evasion`). Against a randomized model each step's gradient is the mean over
``eot_samples`` draws and a misclassification counts only when fresh draws confirm it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
from scipy import stats
from torch import nn
from torch.nn import functional as F

from attacks.evasion.spec import CONFIRM_CONFIDENCE, CONFIRM_SAMPLES, EVASION_ATTACKS, EvasionAttackSpec, EvasionConfig
from dpaudit.parts import PlotStyle
from dpaudit.robustness.noise import is_randomized

__all__ = ["evaluate", "confirm_fooled", "norms", "projected_gradient"]

# Floor for gradient norms: a zero gradient (saturated softmax) must give a zero step, not NaN.
_TINY = 1e-12


def _per_row(t: torch.Tensor, ndim: int) -> torch.Tensor:
    return t.view(-1, *([1] * (ndim - 1)))


def norms(delta: torch.Tensor, norm: str) -> torch.Tensor:
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
def evaluate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, eval_samples: int, draws_per_pass: int
) -> tuple[torch.Tensor, torch.Tensor]:
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
        draws = torch.cat(
            [
                F.log_softmax(logits.float(), dim=2)
                for logits in _draws_in_passes(model, x, eval_samples, draws_per_pass)
            ]
        )
        log_p = torch.logsumexp(draws, dim=0) - math.log(eval_samples)
        votes = F.one_hot(draws.argmax(2), draws.shape[2]).sum(0).argmax(1)
    fooled = votes != y
    loss = -log_p.gather(1, y[:, None]).squeeze(1)
    return fooled, loss


@torch.no_grad()
def confirm_fooled(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    fooled: torch.Tensor,
    *,
    draws: int,
    draws_per_pass: int,
    confidence: float,
) -> torch.Tensor:
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
    counts = sum(
        F.one_hot(logits.argmax(2), logits.shape[2]).sum(0)
        for logits in _draws_in_passes(model, xs, draws, draws_per_pass)
    )
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


def projected_gradient(
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
        factor = (r_inside / norms(delta, "l2").clamp_min(_TINY)).clamp(max=1.0)
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
                    direction = grad / _per_row(norms(grad, "l2").clamp_min(_TINY), grad.ndim)
                x = project(x + step * direction)
        fooled, loss = evaluate(model, x, y, eval_samples=eval_samples, draws_per_pass=eot_samples)
        if randomized:
            fooled = confirm_fooled(
                model, x, y, fooled, draws=CONFIRM_SAMPLES, draws_per_pass=eot_samples, confidence=CONFIRM_CONFIDENCE
            )
        if best_x is None:
            best_x, best_fooled, best_loss = x, fooled, loss
            continue
        better = (fooled & ~best_fooled) | ((fooled == best_fooled) & (loss > best_loss))
        best_x = torch.where(_per_row(better, x.ndim), x, best_x)
        best_fooled = torch.where(better, fooled, best_fooled)
        best_loss = torch.where(better, loss, best_loss)
    assert best_x is not None  # num_restarts >= 1
    return best_x.detach(), best_fooled


# FGSM, I-FGSM and MIM take the steps of Phan et al. (2019, §6) (10 steps of radius/10). PGD
# starts at a random point of the ball, from which 10 steps of radius/10 cannot cross it, so
# it would be weaker than FGSM; it takes Madry et al.'s 2.5·radius/steps instead. The authors'
# PGD is ``evasion_config("pgd", step_ratio=0.1)``.
for _spec in (
    EvasionAttackSpec(
        name="fgsm",
        style=PlotStyle(colour="#8C564B", marker="o", dash=":"),
        summary="one signed-gradient step of the radius (Goodfellow et al. 2015, §4)",
        defaults={"num_steps": 1, "step_ratio": 1.0, "random_start": False},
        run=projected_gradient,
    ),
    EvasionAttackSpec(
        name="ifgsm",
        style=PlotStyle(colour="#999933", marker="s", dash="-."),
        summary="iterated FGSM, projected onto the ball (Kurakin et al. 2016, §2.2)",
        defaults={"num_steps": 10, "step_ratio": 0.1, "random_start": False},
        run=projected_gradient,
    ),
    EvasionAttackSpec(
        name="pgd",
        style=PlotStyle(colour="#D62728", marker="^", dash="--"),
        summary="I-FGSM from a uniformly random start in the ball (Madry et al. 2018, §2.1)",
        defaults={"num_steps": 10, "step_ratio": 0.25, "random_start": True},
        run=projected_gradient,
    ),
    EvasionAttackSpec(
        name="mim",
        style=PlotStyle(colour="#332288", marker="x", dash=(0, (1, 1))),
        summary="I-FGSM on the accumulated L1-normalised gradient, momentum 1 (Dong et al. 2018, Alg. 1)",
        defaults={"num_steps": 10, "step_ratio": 0.1, "random_start": False, "momentum": 1.0},
        run=projected_gradient,
    ),
):
    EVASION_ATTACKS.register(_spec)
