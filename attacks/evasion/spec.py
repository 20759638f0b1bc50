"""What an evasion attack is: its config, its spec, the routine it runs and the registry it joins.

An attack is a :class:`EvasionAttackSpec` registered with ``EVASION_ATTACKS.register(...)`` where
it is defined: a name, a one-line summary citing its paper, the fields of its default
:class:`EvasionConfig` and the routine (:class:`EvasionRun`) that attacks a batch of rows. The
command line (``dpaudit certify --attack``), ``compare``'s grid and the tests iterate
:data:`EVASION_ATTACKS`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from dpaudit import _validate as v
from dpaudit.parts import PlotStyle
from dpaudit.registry import Registry
from dpaudit.specs import PlainSpec

__all__ = [
    "CONFIRM_CONFIDENCE",
    "CONFIRM_SAMPLES",
    "DEFAULT_EOT_SAMPLES",
    "DEFAULT_EVAL_SAMPLES",
    "EVASION_ATTACKS",
    "EvasionAttackSpec",
    "EvasionConfig",
    "EvasionRun",
    "evasion_config",
]

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


@dataclass(frozen=True, kw_only=True)
class EvasionConfig(PlainSpec):
    """One configuration of the projected-gradient routine (``to_dict``: its fields, for a result's ``config``).

    Attributes:
        name: the attack, a name registered in :data:`EVASION_ATTACKS`.
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
        v.choice("name", self.name, EVASION_ATTACKS)
        v.integer("num_steps", self.num_steps, minimum=1)
        v.positive("step_ratio", self.step_ratio)
        if not isinstance(self.random_start, bool):
            raise v.invalid_type("random_start", f"random_start must be a bool, got {self.random_start!r}")
        v.integer("num_restarts", self.num_restarts, minimum=1)
        v.non_negative("momentum", self.momentum)


class EvasionRun(Protocol):
    """What an evasion attack provides: adversarial rows within per-row radii, and which of them fool the model."""

    def __call__(
        self,
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
        """Perturb ``x0`` within per-row radii and say which rows fool the model.

        Args:
            model: the classifier in eval mode (logits out); a noise layer may make it randomized.
            x0: the rows to perturb, inside [clip_min, clip_max].
            y: their true labels.
            radius: per-row radius (float64, all > 0).
            config: the attack's configuration.
            norm: ``"linf"`` or ``"l2"``.
            eot_samples: noise draws averaged per gradient (1 for a deterministic model).
            eval_samples: noise draws whose majority vote makes a prediction.
            generator: the source of random starts.
            clip_min: lower end of the valid input range.
            clip_max: upper end of the valid input range.

        Returns:
            tuple[torch.Tensor, torch.Tensor]: ``(x_adv, fooled)``: each row of ``x_adv`` within its radius and the
            input range, and
            whether the model misclassifies it (confirmed by fresh draws for a randomized model).
        """


@dataclass(frozen=True, kw_only=True)
class EvasionAttackSpec:
    """One registered evasion attack.

    Attributes:
        name: registry key and CLI choice.
        summary: one line, citing the paper.
        defaults: the fields of its default :class:`EvasionConfig` other than ``name``
            (``num_steps``, ``step_ratio``, ``random_start``, and optionally ``num_restarts``,
            ``momentum``).
        run: the routine that attacks a batch of rows (:class:`EvasionRun`).
        style: its colour, marker and dash in every figure (:class:`dpaudit.parts.PlotStyle`);
            ``None``: chosen by a stable hash of its name.
    """

    name: str
    summary: str
    defaults: Mapping[str, Any] = field(default_factory=dict)
    run: EvasionRun
    style: PlotStyle | None = None

    def __post_init__(self) -> None:
        fields = {f.name for f in dataclasses.fields(EvasionConfig)} - {"name"}
        unknown = sorted(set(self.defaults) - fields)
        if unknown:
            raise v.invalid(
                "defaults",
                f"defaults of evasion attack {self.name!r} must be fields of "
                f"EvasionConfig ({', '.join(sorted(fields))}); got {unknown[0]!r}",
            )

    @property
    def config(self) -> EvasionConfig:
        """The attack's default configuration."""
        return EvasionConfig(name=self.name, **self.defaults)


#: Every evasion attack, in registration order; each registers itself where it is defined.
EVASION_ATTACKS: Registry[EvasionAttackSpec] = Registry(
    "evasion attack", argument="attack", discover=("attacks.evasion",)
)


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
        raise v.invalid(
            "overrides", f"overrides must be fields of EvasionConfig ({', '.join(sorted(fields))}); got {unknown[0]!r}"
        )
    return dataclasses.replace(EVASION_ATTACKS[name].config, **overrides)
