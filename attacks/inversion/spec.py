"""What a model-inversion attack is: its spec, the prior it may learn first, the registry it joins.

An attack is one module that defines a frozen config dataclass (CLI flags via
:func:`dpaudit.options.option`), a function with the :class:`InversionRun` signature and registers
an :class:`InversionAttackSpec` with ``INVERSION_ATTACKS.register(...)``. An attack that needs a
learned prior from public data (GMI's GAN) declares it as a :class:`PriorSpec`; the run trains
that prior once per run directory, caches it, and hands it to the attack.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn

from attacks.inversion.base import InversionOutput
from dpaudit import _validate as v
from dpaudit.parts import PlotStyle
from dpaudit.registry import Registry

__all__ = ["INVERSION_ATTACKS", "InversionAttackSpec", "InversionRun", "PriorSpec", "expand_inversion_attacks"]


class InversionRun(Protocol):
    """What an inversion attack provides: one reconstruction per class of ``classes``.

    ``prior`` is the trained prior's modules (or ``None`` for an attack without one);
    ``progress(done, total)`` (or ``None``) is called as the search advances.
    """

    def __call__(
        self,
        model: nn.Module,
        *,
        classes: Any,
        input_shape: tuple[int, ...],
        config: Any,
        seed: int,
        device: str | torch.device = ...,
        prior: Any = ...,
        progress: Callable[[int, int], None] | None = ...,
    ) -> InversionOutput: ...


@dataclass(frozen=True, kw_only=True)
class PriorSpec:
    """A model an attack learns from public data before it inverts anything (e.g. a GAN).

    Attributes:
        name: names the cache entry (``RUN_DIR/attacks/inversion/models/NAME-…``).
        config_type: frozen dataclass of the prior's training options (CLI flags via ``option``).
        build: ``build(input_shape, config) -> {name: module}``, untrained (to load a cached prior).
        train: ``train(public, *, input_shape, config, seed, device, progress) -> {name: module}``
            with ``public`` a float tensor (N, *input_shape) in [0, 1].
    """

    name: str
    config_type: type
    build: Callable[[tuple[int, ...], Any], Mapping[str, nn.Module]]
    train: Callable[..., Mapping[str, nn.Module]]


@dataclass(frozen=True, kw_only=True)
class InversionAttackSpec:
    """One registered model-inversion attack.

    Attributes:
        name: registry key and CLI choice.
        summary: one line, citing the paper.
        config_type: frozen dataclass of the attack's options (CLI flags via ``option``).
        run: ``run(model, *, classes, input_shape, config, seed, device, prior, progress) ->
            InversionOutput``; ``prior`` is the trained prior's modules, or ``None``;
            ``progress(done, total)`` (or ``None``) is called as the search advances.
        prior: what the attack learns from public data first, or ``None``.
        iterations_field: the field of ``config_type`` that bounds the search's steps (what a
            ``compare`` grid's ``iterations`` sets), or ``None`` if it has none.
        style: its colour, marker and dash in every figure (:class:`dpaudit.parts.PlotStyle`);
            ``None``: chosen by a stable hash of its name.
        progress_unit: what the ``done`` and ``total`` of its ``progress(done, total)`` count
            (``"steps"``, or ``"classes"`` for an attack that stops each class on its own).
    """

    name: str
    summary: str
    config_type: type
    run: InversionRun
    prior: PriorSpec | None = None
    iterations_field: str | None = None
    style: PlotStyle | None = None
    progress_unit: str = "steps"

    @property
    def needs_prior(self) -> bool:
        """Whether the attack learns a prior from public data before it inverts anything."""
        return self.prior is not None


#: Every model-inversion attack, in registration order; each registers itself in its own module.
INVERSION_ATTACKS: Registry[InversionAttackSpec] = Registry(
    "inversion attack", argument="--attack", discover=("attacks.inversion",)
)


def expand_inversion_attacks(attacks: str | Sequence[str]) -> list[str]:
    """Registry names, in order, without repeats; ``all`` stands for every registered attack.

    Raises:
        ValueError: an unknown name, or none.
    """
    names = [attacks] if isinstance(attacks, str) else list(attacks)
    out: list[str] = []
    for name in names:
        v.choice("attack", name, (*INVERSION_ATTACKS, "all"))
        for n in INVERSION_ATTACKS if name == "all" else [name]:
            if n not in out:
                out.append(n)
    if not out:
        raise v.invalid("attack", "attack must name at least one inversion attack")
    return out
