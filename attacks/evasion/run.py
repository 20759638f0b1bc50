"""Running an evasion attack: the argument checks, many radii in one pass, and single-radius examples.

:func:`run_evasion` attacks all K radii at once: every example is repeated K times along the
batch dimension, each copy with its own radius, so one forward/backward pass serves every
radius; success at radius r_k is the OR over the radii ≤ r_k. The routine of each attack is the
``run`` of its registered :class:`~attacks.evasion.spec.EvasionAttackSpec`.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from torch import nn

from attacks.evasion.gradient import confirm_fooled, evaluate, norms
from attacks.evasion.spec import (
    CONFIRM_CONFIDENCE,
    CONFIRM_SAMPLES,
    DEFAULT_EOT_SAMPLES,
    DEFAULT_EVAL_SAMPLES,
    EVASION_ATTACKS,
    EvasionConfig,
    evasion_config,
)
from dpaudit import _validate as v
from dpaudit.progress import Progress
from dpaudit.results import EVASION_NORMS, EvasionResult
from dpaudit.robustness.noise import find_noise_layer, is_randomized
from dpaudit.seeding import torch_generator
from dpaudit.training import resolve_device

__all__ = ["run_evasion", "adversarial_examples"]


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
        raise v.invalid_type(
            "features", f"features must be a floating-point torch.Tensor, got {type(features).__name__}"
        )
    if features.ndim < 2 or features.shape[0] == 0:
        raise v.invalid(
            "features", f"features must be (n, *input_shape) with n >= 1, got shape {tuple(features.shape)}"
        )
    if not isinstance(labels, torch.Tensor) or labels.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
        raise v.invalid_type(
            "labels", f"labels must be an integer torch.Tensor, got {getattr(labels, 'dtype', type(labels).__name__)}"
        )
    if tuple(labels.shape) != (features.shape[0],):
        raise v.invalid(
            "labels", f"labels must have shape ({features.shape[0]},), one per example, got {tuple(labels.shape)}"
        )
    # The ball ∩ box projection only stays inside the ball when x itself is in the box.
    lo, hi = float(features.min()), float(features.max())
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo < clip_min or hi > clip_max:
        raise v.invalid(
            "features",
            f"features must lie in [clip_min, clip_max] = [{clip_min:g}, {clip_max:g}], got values in [{lo:g}, {hi:g}]",
        )
    return features.detach(), labels.long()


def _check_range(clip_min: Any, clip_max: Any) -> tuple[float, float]:
    lo, hi = v.real("clip_min", clip_min), v.real("clip_max", clip_max)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
        raise v.invalid(
            "clip_min", f"clip_min must be finite and < clip_max, got clip_min={clip_min!r}, clip_max={clip_max!r}"
        )
    return lo, hi


def _check_call(
    model: Any,
    attack: Any,
    norm: Any,
    clip_min: Any,
    clip_max: Any,
    features: Any,
    labels: Any,
    eot_samples: Any,
    eval_samples: Any,
    batch_size: Any,
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


def _clean_errors(
    model: nn.Module,
    features: torch.Tensor,
    labels: torch.Tensor,
    chunks: Sequence[tuple[int, int]],
    *,
    device: torch.device,
    dtype: torch.dtype,
    eval_samples: int,
    draws_per_pass: int,
    randomized: bool,
) -> np.ndarray:
    """Which examples the model misclassifies unattacked (confirmed by fresh draws for a randomized model).

    Computed for all chunks before any attack: against a randomized model every attack then
    sees the same noise draws here, so every attack reports the same clean accuracy for one seed.
    """
    clean_fooled = np.zeros(features.shape[0], dtype=bool)
    for begin, end in chunks:
        xb, yb = features[begin:end].to(device, dtype), labels[begin:end].to(device)
        fooled, _ = evaluate(model, xb, yb, eval_samples=eval_samples, draws_per_pass=draws_per_pass)
        if randomized:
            fooled = confirm_fooled(
                model,
                xb,
                yb,
                fooled,
                draws=CONFIRM_SAMPLES,
                draws_per_pass=draws_per_pass,
                confidence=CONFIRM_CONFIDENCE,
            )
        clean_fooled[begin:end] = fooled.cpu().numpy()
    return clean_fooled


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
    config, norm, lo, hi, features, labels, randomized, eot, n_eval, batch_size = _check_call(
        model, attack, norm, clip_min, clip_max, features, labels, eot_samples, eval_samples, batch_size
    )
    seed = v.integer("seed", seed, minimum=0)
    if not isinstance(progress, bool):
        raise v.invalid_type("progress", f"progress must be a bool, got {progress!r}")
    dev = resolve_device(device)

    n, num_radii = features.shape[0], radii_arr.size
    active = np.flatnonzero(radii_arr > 0)
    success = np.zeros((num_radii, n), dtype=bool)
    max_perturbation = np.zeros(num_radii, dtype=np.float64)
    dtype = _model_dtype(model, features)
    active_radii = torch.as_tensor(radii_arr[active], dtype=torch.float64, device=dev)
    generator = torch_generator(seed, "evasion", config.name, norm, device="cpu")

    if batch_size is None:
        rows = 128 if dev.type == "cpu" else 8192
        batch_size = max(1, rows // (max(1, active.size) * eot))
    chunks = [(begin, min(n, begin + batch_size)) for begin in range(0, n, batch_size)]
    attack_rows = functools.partial(
        EVASION_ATTACKS[config.name].run,
        model,
        config=config,
        norm=norm,
        eot_samples=eot,
        eval_samples=n_eval,
        generator=generator,
        clip_min=lo,
        clip_max=hi,
    )
    with _attack_mode(model, dev, seed), Progress(n, f"evasion {config.name}/{norm}", enabled=progress) as bar:
        clean_fooled = _clean_errors(
            model,
            features,
            labels,
            chunks,
            device=dev,
            dtype=dtype,
            eval_samples=n_eval,
            draws_per_pass=eot,
            randomized=randomized,
        )
        for begin, end in chunks:
            xb = features[begin:end].to(dev, dtype)
            yb = labels[begin:end].to(dev)
            if active.size:
                b, k = end - begin, active.size
                # Row i·k + j is example i at radius j: all radii ride in the same batch.
                x0 = xb.repeat_interleave(k, dim=0)
                x_adv, fooled_adv = attack_rows(x0, yb.repeat_interleave(k), active_radii.repeat(b))
                success[active, begin:end] = fooled_adv.view(b, k).T.cpu().numpy()
                measured = norms(x_adv.double() - x0.double(), norm).view(b, k).amax(0).cpu().numpy()
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
    config, norm, lo, hi, features, labels, randomized, eot, n_eval, checked_batch = _check_call(
        model, attack, norm, clip_min, clip_max, features, labels, eot_samples, None, batch_size
    )
    if checked_batch is None:  # unlike run_evasion, there is no size to derive it from here
        raise v.invalid("batch_size", "batch_size must be a positive integer, got None")
    batch_size = checked_batch
    if generator is not None and not isinstance(generator, torch.Generator):
        raise v.invalid_type(
            "generator", f"generator must be a torch.Generator or None, got {type(generator).__name__}"
        )
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
            x_adv, _ = EVASION_ATTACKS[config.name].run(
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
