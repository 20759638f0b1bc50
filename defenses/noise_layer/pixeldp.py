"""PixelDP, AGM and HGM: non-private SGD with a calibrated noise layer after the first layer.

PixelDP (Lecuyer et al. 2019, §3.2–3.3) with the classical Gaussian calibration (ε_r ≤ 1), AGM
with the analytic one (Balle & Wang 2018, Thm 8), HGM with the extended multiplier and
redistributed noise (Phan et al. 2019, Theorems 2–3). Each registers itself here; they share
one privacy–utility family in ``dpaudit compare``.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from defenses.noise_layer.configs import CERTIFIED_MECHANISMS, AGMConfig, HGMConfig, PixelDPConfig, certification_spec
from defenses.noise_layer.training import train_certified
from defenses.nonprivate import NonPrivateConfig, resolve_nonprivate_config, train_nonprivate
from defenses.registry import DEFENSES, DefenseSpec, TrainFn
from dpaudit import _validate as v
from dpaudit.parts import PlotStyle
from dpaudit.results.record import TrainedModel
from dpaudit.train_request import TrainRequest
from dpaudit.training import SGDConfig

__all__ = ["train_pixeldp", "train_agm", "train_hgm"]

#: The flags to change first when a noise-layer model trains to chance.
CHANCE_HINT = "--sensitivity-control, --attack-norm-bound or --robustness-epsilon"


def _sgd_steps(config: SGDConfig, num_members: int) -> int:
    return config.epochs * -(-num_members // config.batch_size)


def _make_nonprivate_trainer(defense: str, config_type: type[NonPrivateConfig]) -> TrainFn:
    def train(request: TrainRequest[Any], /) -> tuple[TrainedModel, nn.Module]:
        config = request.config
        if not isinstance(config, config_type):
            raise v.invalid_type("config", f"config must be a {config_type.__name__}, got {type(config).__name__}")
        members = request.splits.members
        return train_certified(
            defense,
            request,
            base_train=train_nonprivate,
            total_steps=_sgd_steps(config, len(members)),
            redistribution_ids=members,
            batch_size=config.batch_size,
            learning_rate=config.learning_rate,
        )

    train.__name__ = f"train_{defense.replace('-', '_')}"
    train.__doc__ = (
        f"Trains a zoo model with the {defense} noise layer (see the module docstring).\n\n"
        "Args:\n    request: as for :func:`defenses.nonprivate.train_nonprivate`, with a\n"
        f"        :class:`{config_type.__name__}` config.\n\n"
        "Returns:\n    The record (config carries the certification parameters) and the module.\n"
    )
    return train


train_pixeldp = _make_nonprivate_trainer("pixeldp", PixelDPConfig)
train_agm = _make_nonprivate_trainer("agm", AGMConfig)
train_hgm = _make_nonprivate_trainer("hgm", HGMConfig)


def _register(name: str, config_type: type, train: TrainFn, summary: str, order: int, style: PlotStyle) -> None:
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
            resolve_defaults=resolve_nonprivate_config,  # the baseline's SGD defaults (defenses.sgd_defaults)
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
_register(
    "agm",
    AGMConfig,
    train_agm,
    "PixelDP's noise layer with the analytic Gaussian calibration (Balle & Wang 2018)",
    order=21,
    style=PlotStyle(colour="#E69F00", marker="s"),
)
_register(
    "hgm",
    HGMConfig,
    train_hgm,
    "heterogeneous Gaussian noise layer, any eps_r > 0 (Phan et al. 2019)",
    order=22,
    style=PlotStyle(colour="#009E73", marker="D"),
)
