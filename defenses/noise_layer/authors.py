"""Phan et al.'s TensorFlow code's behaviours as explicit options of HGM and Secure-SGD, all off by default.

The paper's mathematics (Phan et al. 2019, Theorems 2–3, Algorithm 1) is what the defenses
implement; these options reproduce what the authors' code (github.com/haiphanNJIT/SecureSGD)
does instead, as options (a)–(f). (a), (b), (c) and (e) act on the noise layer
(:mod:`defenses.noise_layer.schedule`, :mod:`defenses.noise_layer.training`); (d) replaces
DP-SGD's per-example clipping by :class:`AuthorsBatchClipping`, the release the one DP-SGD loop
(:func:`defenses.dpsgd.training.train_dpsgd`) runs through its ``release`` hook; (f) is applied
by :class:`dpaudit.robustness.certification.AuthorsMixedDelta`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from defenses.dpsgd.config import DPSGDConfig
from defenses.dpsgd.plan import DPSGDPlan
from dpaudit import _validate as v
from dpaudit.options import option
from dpaudit.robustness.certification import AUTHORS_REFERENCE_DELTA

__all__ = [
    "AUTHORS_QUIRKS",
    "AuthorsCodeOptions",
    "AuthorsBatchClipping",
    "authors_quirks",
    "quirk_note",
    "authors_total",
    "authors_batch_mean_gradient",
]

#: The authors' TensorFlow code's behaviours (docs/defenses/noise-layer.md §2 (a)–(f)), by config field: the
#: label records and claims carry, and what it does to the guarantees. Every one is off by default.
AUTHORS_QUIRKS: dict[str, tuple[str, str]] = {
    "authors_noise_scale_r": (
        "noise-scale-r",
        "(a) noise std sigma*r_k instead of sigma*sqrt(r_k), calibrated as if "
        "it were sigma*sqrt(r_k): the noise layer does not meet its (eps_r, "
        "delta_r, L) as trained",
    ),
    "authors_heuristic_sensitivity": (
        "heuristic-sensitivity",
        "(b) Delta_r estimated from the reshaped kernel and r, not the layer's "
        "sensitivity: the noise may be below what (eps_r, delta_r, L) needs",
    ),
    "authors_fixed_training_noise": (
        "fixed-training-noise",
        "(c) one noise-layer draw reused at every training step (the released "
        "model draws fresh noise; no guarantee depends on the training draws)",
    ),
    "authors_batch_clipping": (
        "batch-clipping",
        "(d) each weight's batch-mean gradient is clipped to C (biases not at "
        "all) instead of each example's gradient, so one example can move the "
        "noisy sum by up to 2*L*C on the weights and without bound on the "
        "biases, where the accounting assumes C: this epsilon is NOT a valid "
        "guarantee for the run",
    ),
    "authors_redistribution_total": (
        "redistribution-total",
        "(e) r normalised to sum 16*16*C (the MNIST script's total) instead of K; Delta_r is measured with that r",
    ),
    "authors_mixed_delta": (
        "mixed-delta",
        "(f) certified sizes scaled by c(eps_r, "
        f"{AUTHORS_REFERENCE_DELTA:g})/c(eps_r, delta_r), a delta the noise was "
        "not calibrated at: such sizes are NOT certificates",
    ),
}

#: The positions per channel the authors' MNIST script normalises r to (16·16, a CIFAR-10 size).
_AUTHORS_POSITIONS = 16 * 16


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise v.invalid_type(name, f"{name} must be a bool, got {value!r}")
    return value


@dataclass(frozen=True, kw_only=True)
class AuthorsCodeOptions:
    """Phan et al.'s TensorFlow code's behaviours as explicit options, all off by default.

    The paper's mathematics (Theorems 2–3, Algorithm 1) is what the defenses implement; these
    options reproduce what the authors' code (github.com/haiphanNJIT/SecureSGD) does instead,
    so a user can reproduce their numbers and see which the mathematics supports
    (docs/defenses/noise-layer.md §2). Records trained with any on name them (:func:`authors_quirks`).

    Attributes:
        authors_noise_scale_r: (a) component k gets noise std σ·r_k instead of σ·√r_k, while
            the calibration (Δ_r, the projection) still assumes σ·√r_k. Components with
            r_k < 1 are under-noised, so the layer does not meet (ε_r, δ_r) at L as trained.
            The layer stores r² so that the released model adds exactly this noise, and
            ``certify`` measures Δ with it: its certificate is honest about what was added.
        authors_heuristic_sensitivity: (b) Δ_r = σ_max(kernel as C_out × fan-in) /
            √σ_max(r as C × positions) (:func:`dpaudit.robustness.noise.authors_heuristic_sensitivity`)
            instead of the exact Δ_r (l2, l1) or the bound √(Σ_k ‖W_k‖₁² / r_k) (linf), for the
            projection and the noise during training and for the released σ. It is not an
            upper bound, so the noise may be too small for (ε_r, δ_r) at L; ``certify``
            measures the exact Δ_r again.
        authors_fixed_training_noise: (c) the noise layer's training noise is drawn once (one
            tensor of h's shape, shared by every example) and reused at every step, instead of
            fresh noise at every forward pass. The released model draws fresh noise. Neither
            guarantee rests on training draws (the DP claim is DP-SGD's; the certificate is
            about the released layer), but the model is not trained as the paper says.
        authors_redistribution_total: (e) r is normalised to Σ r = 16·16·C (C = channels of
            the first layer's output) — the MNIST script's total, 8,192 for its 28·28·32 = 25,088
            components — instead of Σ r = K (Theorem 3; the CIFAR-10 script uses K). Δ_r is
            measured with that r, so the calibration stays valid; only the total noise differs
            from the isotropic mechanism's. Needs a convolutional first layer.
        authors_mixed_delta: (f) certified sizes are scaled by c(ε_r, 1e-5)/c(ε_r, δ_r): the
            code certifies with the multiplier at δ = 1e-5 (its DP-SGD δ) while the noise is
            calibrated at δ_r. Stored in the record's certification spec as
            ``authors_reference_delta``; applied by
            :class:`dpaudit.robustness.certification.AuthorsMixedDelta`. Such sizes are **not
            certificates**.
    """

    _omit_when_default: ClassVar[tuple[str, ...]] = (
        "authors_noise_scale_r",
        "authors_heuristic_sensitivity",
        "authors_fixed_training_noise",
        "authors_redistribution_total",
        "authors_mixed_delta",
    )

    authors_noise_scale_r: bool = option(
        False,
        help="AUTHORS' CODE, not the paper: noise std sigma*r_k; the maths (Theorem "
        "3) adds sigma*sqrt(r_k), so this under-noises components with r_k < 1 "
        "and voids eps_r/delta_r/L",
    )
    authors_heuristic_sensitivity: bool = option(
        False,
        help="AUTHORS' CODE, not the paper: Delta_r = sigma_max(reshaped "
        "kernel)/sqrt(sigma_max(reshaped r)); the maths uses the exact Delta_r "
        "(l2, l1) or the bound sqrt(sum_k ||W_k||_1^2/r_k) (linf); may "
        "under-noise",
    )
    authors_fixed_training_noise: bool = option(
        False,
        help="AUTHORS' CODE, not the paper: draw the noise layer's training noise "
        "once and reuse it every step; the maths draws fresh noise at every "
        "pass (the released model still does)",
    )
    authors_redistribution_total: bool = option(
        False,
        help="AUTHORS' CODE, not the paper: normalise r to sum 16*16*C (their MNIST "
        "total); Theorem 3 needs sum r_k = K (conv first layer only)",
    )
    authors_mixed_delta: bool = option(
        False,
        help="AUTHORS' CODE, not the paper: certify with the multiplier at "
        "delta=1e-5 while the noise is calibrated at delta_r; the maths uses "
        "delta_r; inflated sizes, NOT certificates",
    )

    def _check_authors_options(self) -> None:
        for name in AUTHORS_QUIRKS:
            if hasattr(self, name):
                _flag(name, getattr(self, name))
        for name in ("authors_noise_scale_r", "authors_redistribution_total"):
            if getattr(self, name) and not getattr(self, "redistribute", False):
                raise v.invalid(
                    name,
                    f"{name}=True needs redistribute=True (it acts on the redistribution "
                    f"vector r), got redistribute={getattr(self, 'redistribute', None)!r}",
                )


def authors_quirks(config: Any) -> tuple[str, ...]:
    """Labels of the authors'-code options switched on in ``config`` (``()`` for the mathematics)."""
    return tuple(label for name, (label, _) in AUTHORS_QUIRKS.items() if getattr(config, name, False) is True)


def quirk_note(config: Any) -> str:
    """What a claim's description appends for the switched-on quirks ("" when none)."""
    notes = [
        f"{label}: {AUTHORS_QUIRKS[name][1]}"
        for name, (label, _) in AUTHORS_QUIRKS.items()
        if getattr(config, name, False) is True
    ]
    return f" [authors' code, not the paper's mathematics: {'; '.join(notes)}]" if notes else ""


def authors_total(output_shape: tuple[int, ...]) -> float:
    """Σ r of the authors' MNIST script: 16·16 positions per channel (docs/defenses/noise-layer.md §2 (e))."""
    if len(output_shape) < 2:
        raise v.invalid(
            "model",
            "authors_redistribution_total=True needs a first layer with channels "
            f"and positions (a convolution), got output shape {output_shape!r}",
        )
    return float(_AUTHORS_POSITIONS * output_shape[0])


def authors_batch_mean_gradient(
    model: nn.Module,
    params: dict[str, nn.Parameter],
    features: torch.Tensor,
    labels: torch.Tensor,
    *,
    clip_norm: float,
    physical_batch_size: int,
) -> tuple[dict[str, torch.Tensor], float]:
    """The gradient the authors' code noises: ∇ of the lot's mean loss, each weight clipped as a whole.

    As their TensorFlow code does (docs/defenses/noise-layer.md §2 (d)): the gradient of the mean cross-entropy
    over the lot, every weight tensor (≥ 2 dimensions) rescaled to L2 norm ≤ ``clip_norm``
    (``tf.clip_by_norm``), biases left unclipped. No example's own gradient is ever clipped.

    Returns:
        ({name: clipped mean gradient}, Σ loss over the lot).
    """
    total = {name: torch.zeros_like(p) for name, p in params.items()}
    n = int(features.shape[0])
    loss_sum = 0.0
    for start in range(0, n, physical_batch_size):
        xb, yb = features[start : start + physical_batch_size], labels[start : start + physical_batch_size]
        loss = nn.functional.cross_entropy(model(xb), yb, reduction="sum")
        grads = torch.autograd.grad(loss, list(params.values()))
        for name, g in zip(params, grads):
            total[name].add_(g)
        loss_sum += float(loss.detach())
    for g in total.values():
        if n:
            g.div_(n)
        if g.ndim >= 2:
            g.mul_(clip_norm / torch.clamp(g.norm(), min=clip_norm))
    return total, loss_sum


class AuthorsBatchClipping:
    """(d) as the release of one DP-SGD step: the lot's batch-mean gradient, clipped per weight, plus N(0, σ²C²)/L.

    Passed as ``release=`` to :func:`defenses.dpsgd.training.train_dpsgd`, so everything else
    — initialisation, lots, schedule, optimiser, seed streams, record — is the one DP-SGD
    loop's, and the only difference from the default run is the clipping: each step releases
    :func:`authors_batch_mean_gradient` + N(0, σ²C²)/L (L the public expected lot size). One
    example can move that by up to 2C through the weights and without bound through the
    unclipped biases, where the accounting assumes C/L: the claim carries the DP-SGD event for
    reference, and Secure-SGD appends a description saying the ε is NOT a valid guarantee.
    """

    def __init__(self, model: nn.Module, *, config: DPSGDConfig, plan: DPSGDPlan, generator: torch.Generator) -> None:
        self._model = model
        self._params = {name: p for name, p in model.named_parameters() if p.requires_grad}
        self._clip_norm = float(config.clip_norm)  # type: ignore[arg-type]
        self._physical_batch_size = config.physical_batch_size
        self._expected_lot_size = plan.expected_lot_size
        self._generator = generator
        self.noise_std = plan.noise_multiplier * self._clip_norm

    def parameters(self) -> dict[str, nn.Parameter]:
        return self._params

    def __call__(
        self, features: torch.Tensor, labels: torch.Tensor, lot: torch.Tensor, *, canary: Any
    ) -> tuple[dict[str, torch.Tensor], float]:
        if canary is not None:
            raise v.invalid(
                "canary_gradient",
                "the authors' batch clipping has no per-example clipping a gradient "
                "canary could be clipped like; got a canary",
            )
        grads, loss_sum = authors_batch_mean_gradient(
            self._model,
            self._params,
            features[lot],
            labels[lot],
            clip_norm=self._clip_norm,
            physical_batch_size=self._physical_batch_size,
        )
        for g in grads.values():
            g.add_(
                torch.randn(g.shape, generator=self._generator, device=g.device, dtype=g.dtype),
                alpha=self.noise_std / self._expected_lot_size,
            )
        return grads, loss_sum

    def close(self) -> None:
        """Nothing attached to the model."""
