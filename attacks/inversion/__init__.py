"""Model-inversion attacks (MI-Face, GMI) and their registry (``docs/attacks/inversion.md`` §2).

Each attack registers itself in :data:`INVERSION_ATTACKS` as an :class:`InversionAttackSpec`
where it is defined (:mod:`~attacks.inversion.mi_face`, :mod:`~attacks.inversion.gmi`); the
command line (``dpaudit attack inversion``), the run (:mod:`dpaudit.app.runs.inversion`),
``compare``'s grid and the contract tests iterate it, so an attack is one module. An attack that
needs a learned prior from public data (GMI's GAN) declares it as a :class:`PriorSpec`; the run
trains that prior once per run directory, caches it, and hands it to the attack.
"""

from __future__ import annotations

from attacks.inversion.spec import (
    INVERSION_ATTACKS,
    InversionAttackSpec,
    InversionRun,
    PriorSpec,
    expand_inversion_attacks,
)

# The built-in attacks register themselves on import, in this order (the CLI's choices, ``all``).
# isort: off
import attacks.inversion.mi_face
import attacks.inversion.gmi  # noqa: F401
# isort: on

__all__ = ["INVERSION_ATTACKS", "InversionAttackSpec", "InversionRun", "PriorSpec", "expand_inversion_attacks"]
