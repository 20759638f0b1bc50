"""PixelDP, AGM and HGM: non-private SGD with a calibrated noise layer after the first layer.

PixelDP (Lecuyer et al. 2019, §3.2–3.3) with the classical Gaussian calibration (ε_r ≤ 1), AGM
with the analytic one (Balle & Wang 2018, Thm 8), HGM with the extended multiplier and
redistributed noise (Phan et al. 2019, Theorems 2–3). Each registers itself here; they share
one privacy–utility family in ``dpaudit compare``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from defenses.noise_layer.configs import CERTIFIED_MECHANISMS, AGMConfig, HGMConfig, PixelDPConfig, certification_spec
from defenses.noise_layer.training import train_certified
from defenses.nonprivate import train_nonprivate
from defenses.registry import DEFENSES, DefenseSpec
from dpaudit import _validate as v
from dpaudit.data import DatasetBundle, Splits
from dpaudit.parts import PlotStyle
from dpaudit.results.record import TrainedModel
from dpaudit.training import SGDConfig

__all__ = ["train_pixeldp", "train_agm", "train_hgm"]

#: The flags to change first when a noise-layer model trains to chance.
CHANCE_HINT = "--sensitivity-control, --attack-norm-bound or --robustness-epsilon"


def _sgd_steps(config: SGDConfig, num_members: int) -> int:
    return config.epochs * -(-num_members // config.batch_size)


def _make_nonprivate_trainer(defense: str, config_type: type) -> Callable[..., tuple[TrainedModel, nn.Module]]:
    def train(
        *,
        bundle: DatasetBundle,
        splits: Splits,
        model_name: str,
        model_options: dict[str, Any] | None = None,
        config: Any = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
        progress: bool = True,
    ) -> tuple[TrainedModel, nn.Module]:
        config = config_type() if config is None else config
        if not isinstance(config, config_type):
            raise v.invalid_type("config", f"config must be a {config_type.__name__}, got {type(config).__name__}")
        return train_certified(
            defense,
            bundle=bundle,
            splits=splits,
            model_name=model_name,
            model_options=model_options,
            config=config,
            seed=seed,
            device=device,
            progress=progress,
            base_train=train_nonprivate,
            total_steps=_sgd_steps(config, len(splits.members)),
            redistribution_ids=splits.members,
            batch_size=config.batch_size,
            learning_rate=config.learning_rate,
        )

    train.__name__ = f"train_{defense.replace('-', '_')}"
    train.__doc__ = (
        f"Trains a zoo model with the {defense} noise layer (see the module docstring).\n\n"
        "Args:\n    bundle, splits, model_name, model_options, seed, device, progress: as for\n"
        "        :func:`defenses.nonprivate.train_nonprivate`.\n"
        f"    config: a :class:`{config_type.__name__}`.\n\n"
        "Returns:\n    The record (config carries the certification parameters) and the module.\n"
    )
    return train


train_pixeldp = _make_nonprivate_trainer("pixeldp", PixelDPConfig)
train_agm = _make_nonprivate_trainer("agm", AGMConfig)
train_hgm = _make_nonprivate_trainer("hgm", HGMConfig)


def _register(name: str, config_type: type, train: Callable[..., tuple[TrainedModel, nn.Module]], summary: str, order: int, style: PlotStyle) -> None:
    DEFENSES.register(
        DefenseSpec(
            name=name,
            config_type=config_type,
            train=train,
            claim_kind="nonprivate",
            certification=lambda config: certification_spec(name, config),
            certified_mechanism=CERTIFIED_MECHANISMS[name],
            derived_options=("noise_layer",),
            family="noise-layer",
            chance_hint=CHANCE_HINT,
            summary=summary,
            order=order,
            style=style,
        )
    )


_register(
    "pixeldp",
    PixelDPConfig,
    train_pixeldp,
    "noise layer after the first layer, classical Gaussian calibration (eps_r <= 1) (Lecuyer et al. 2019)",
    order=20,
    style=PlotStyle(colour="#0072B2", marker="o"),
)
_register("agm", AGMConfig, train_agm, "PixelDP's noise layer with the analytic Gaussian calibration (Balle & Wang 2018)", order=21, style=PlotStyle(colour="#E69F00", marker="s"))
_register("hgm", HGMConfig, train_hgm, "heterogeneous Gaussian noise layer, any eps_r > 0 (Phan et al. 2019)", order=22, style=PlotStyle(colour="#009E73", marker="D"))
