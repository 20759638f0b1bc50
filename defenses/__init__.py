"""Defenses: training procedures that return a record (model, membership, privacy claim).

Each defense registers a :class:`DefenseSpec` in :data:`DEFENSES`; the CLI and experiment
runner look defenses up here, so adding one needs no change elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from defenses.dpsgd import DPSGDConfig, train_dpsgd
from defenses.nonprivate import NonPrivateConfig, train_nonprivate

__all__ = ["DefenseSpec", "DEFENSES"]


@dataclass(frozen=True, kw_only=True)
class DefenseSpec:
    """A registered defense: its config type and its training function."""

    name: str
    config_type: type
    train: Callable[..., Any]
    summary: str


DEFENSES: dict[str, DefenseSpec] = {
    "nonprivate": DefenseSpec(name="nonprivate", config_type=NonPrivateConfig, train=train_nonprivate, summary="non-private SGD baseline (ε = ∞)"),
    "dpsgd": DefenseSpec(name="dpsgd", config_type=DPSGDConfig, train=train_dpsgd, summary="DP-SGD with Poisson lots, per-example clipping and Gaussian noise (+ DP-PCA) (Abadi et al. 2016)"),
}
