"""Defenses: training procedures that return a record (model, membership, privacy claim).

Each defense registers a :class:`DefenseSpec` in :data:`DEFENSES`; the CLI and experiment
runner look defenses up here, so adding one needs no change elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from defenses.certified import (
    AGMConfig,
    HGMConfig,
    PixelDPConfig,
    SecureSGDConfig,
    train_agm,
    train_hgm,
    train_pixeldp,
    train_secure_sgd,
)
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
    "pixeldp": DefenseSpec(
        name="pixeldp", config_type=PixelDPConfig, train=train_pixeldp, summary="noise layer after the first layer, classical Gaussian calibration (eps_r <= 1) (Lecuyer et al. 2019)"
    ),
    "agm": DefenseSpec(name="agm", config_type=AGMConfig, train=train_agm, summary="PixelDP's noise layer with the analytic Gaussian calibration (Balle & Wang 2018)"),
    "hgm": DefenseSpec(name="hgm", config_type=HGMConfig, train=train_hgm, summary="heterogeneous Gaussian noise layer, any eps_r > 0 (Phan et al. 2019)"),
    "secure-sgd": DefenseSpec(
        name="secure-sgd", config_type=SecureSGDConfig, train=train_secure_sgd, summary="HGM noise layer + DP-SGD: DP for the training data and certified robustness (Phan et al. 2019)"
    ),
}
