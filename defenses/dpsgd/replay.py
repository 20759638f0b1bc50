"""DP-SGD's neighbouring replay (docs/audits/replay.md): the one training loop with its mechanism inputs recorded.

:func:`replay_dpsgd` is DP-SGD's :attr:`defenses.registry.DefenseSpec.replay`;
:class:`ReplayRecorder` and :func:`dpsgd_released` serve every defense that trains through
:func:`defenses.dpsgd.training.train_dpsgd` (Secure-SGD).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch import nn

from defenses.dpsgd.config import DPSGDConfig
from defenses.dpsgd.plan import plan_dpsgd, resolve_config
from defenses.dpsgd.training import train_dpsgd
from dpaudit.replay import MechanismInput, ReplayTrace
from dpaudit.results.record import TrainedModel
from dpaudit.train_request import TrainRequest

__all__ = ["ReplayRecorder", "dpsgd_released", "replay_dpsgd"]


class ReplayRecorder:
    """The observers of a DP-SGD replay: records each mechanism input and substitutes a public value.

    Each step's pre-noise clipped sum (divided by the public expected lot size L, as the release
    computes it) is recorded with the claim's sensitivity C / L, and DP-PCA's pre-noise
    covariance with sensitivity 1; each is then replaced by zeros before its noise. Both runs of a
    pair therefore follow the same trajectory — the one the noise alone drives — so every step's
    input is compared at the same parameters: the per-step sensitivity that adaptive composition
    assumes, conditioned on the same earlier outputs (docs/audits/replay.md).

    Args:
        clip_norm: C, the claim's total L2 bound on one example's clipped gradient.
        expected_lot_size: L, the divisor the release folds in.
        pca_sensitivity: DP-PCA's claimed sensitivity (1: rows scaled to unit norm).
    """

    def __init__(self, *, clip_norm: float, expected_lot_size: float, pca_sensitivity: float = 1.0) -> None:
        self.step_sensitivity = float(clip_norm) / float(expected_lot_size)
        self.pca_sensitivity = float(pca_sensitivity)
        self.inputs: list[MechanismInput] = []

    def __call__(self, step: int, clipped_sum: dict[str, torch.Tensor], lot_ids: np.ndarray) -> dict[str, torch.Tensor]:
        """A :class:`~defenses.dpsgd.release.StepObserver`: records the step's clipped sum, returns zeros in its
        place."""
        flat = torch.cat([t.detach().reshape(-1).to("cpu", torch.float64) for t in clipped_sum.values()])
        self.inputs.append(
            MechanismInput(
                name=f"step {step}: clipped sum", value=flat.numpy(), sensitivity=self.step_sensitivity, norm="l2"
            )
        )
        return {name: torch.zeros_like(t) for name, t in clipped_sum.items()}

    def pca(self, upper: torch.Tensor) -> torch.Tensor:
        """A :data:`~defenses.dpsgd.pca.PCAObserver`: records XᵀX's upper triangle, returns zeros."""
        self.inputs.append(
            MechanismInput(
                name="DP-PCA: covariance (upper triangle)",
                value=upper.detach().cpu().numpy(),
                sensitivity=self.pca_sensitivity,
                norm="l2",
            )
        )
        return torch.zeros_like(upper)


def dpsgd_released(record: TrainedModel, model: nn.Module, *, config: DPSGDConfig) -> dict[str, np.ndarray]:
    """What a DP-SGD run releases besides its noisy sums: the schedule's public constants, the claim and the model.

    The record's evaluation metrics (accuracies and losses on members, the realised mean lot
    size, the mean training loss) are the audit's own measurements beside its membership ground
    truth, not values the defense publishes, and are not listed.
    """
    m = record.metrics
    constants = {
        "number of steps": m["num_steps"],
        "sampling rate": m["sampling_rate"],
        "expected lot size (normaliser)": m["expected_lot_size"],
        "noise multiplier": m["noise_multiplier"],
        "noise std": m["noise_std"],
        "clip norm": config.clip_norm,
        "claimed epsilon": m["epsilon"],
    }
    released = {name: np.asarray(x, dtype=np.float64) for name, x in constants.items()}
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_floating_point():
            released[f"model {name}"] = t.detach().cpu().double().numpy()
    return released


def replay_dpsgd(request: TrainRequest[DPSGDConfig], /) -> ReplayTrace:
    """The neighbouring replay of DP-SGD (:attr:`defenses.registry.DefenseSpec.replay`).

    Runs :func:`train_dpsgd` itself on the request's members with a :class:`ReplayRecorder`
    attached: every step's clipped sum (sensitivity C / L) and DP-PCA's covariance (sensitivity
    1) as mechanism inputs, and :func:`dpsgd_released` as released values. With
    ``sampling="shuffle-non-private-accounting"`` the fixed-size lots come from a positional
    shuffle, which one record more or less reshuffles: the replay runs it as it is and reports
    the steps whose sums moved by more than C / L. A sampling rate derived from N (``lot_size``
    or its default, q = L / N) and the default divisor q·N depend on the number of members: the
    replay reports them as released values that differ; give ``sampling_rate`` and
    ``expected_lot_size`` for a pipeline that treats nothing about the data as public.
    """
    members = len(request.splits.members)
    resolved, _ = resolve_config(request.config, num_members=members)
    plan = plan_dpsgd(resolved, num_members=members)
    recorder = ReplayRecorder(clip_norm=float(resolved.clip_norm), expected_lot_size=plan.expected_lot_size)  # type: ignore[arg-type]
    record, model = train_dpsgd(
        dataclasses.replace(request, progress=False), observer=recorder, pca_observer=recorder.pca
    )
    return ReplayTrace(
        defense="dpsgd",
        mechanism_inputs=tuple(recorder.inputs),
        released=dpsgd_released(record, model, config=resolved),
    )
