"""Model-inversion attacks (MI-Face, GMI) and their registry (``reference/attacks.md`` §2).

:data:`INVERSION_ATTACKS` maps each attack to an :class:`InversionAttackSpec`; the command line
(``dpaudit attack inversion``), the run (:mod:`dpaudit.app.runs.inversion`) and the contract
tests read it, so an attack is one module plus one entry here. An attack that needs a learned
prior from public data (GMI's GAN) declares it as a :class:`PriorSpec`; the run trains that
prior once per run directory, caches it, and hands it to the attack.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from attacks.inversion.base import InversionOutput
from attacks.inversion.gmi import GANConfig, GMIConfig, build_gan_modules, run_gmi, train_gan_modules
from attacks.inversion.mi_face import MIFaceConfig, run_mi_face
from dpaudit import _validate as v

__all__ = ["INVERSION_ATTACKS", "InversionAttackSpec", "PriorSpec", "expand_inversion_attacks"]


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
    """

    name: str
    summary: str
    config_type: type
    run: Callable[..., InversionOutput]
    prior: PriorSpec | None = None
    iterations_field: str | None = None


INVERSION_ATTACKS: dict[str, InversionAttackSpec] = {
    "mi-face": InversionAttackSpec(
        name="mi-face",
        summary="gradient descent on 1 - p(class) from a neutral image (Fredrikson et al. 2015, Alg. 1)",
        config_type=MIFaceConfig,
        run=run_mi_face,
        iterations_field="max_iterations",
    ),
    "gmi": InversionAttackSpec(
        name="gmi",
        summary="latent search through a WGAN-GP trained on public data, -D(G(z)) + lambda CE (Zhang et al. 2020, §3)",
        config_type=GMIConfig,
        run=run_gmi,
        prior=PriorSpec(name="gan", config_type=GANConfig, build=build_gan_modules, train=train_gan_modules),
        iterations_field="gmi_iterations",
    ),
}


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
