"""Defenses: training procedures that return a record (model, membership, privacy claim).

Each defense is a module (or a package: ``dpsgd/``, ``noise_layer/``, ``pate/``, ``dssgd/``)
that defines its config and train function and registers a :class:`~defenses.registry.DefenseSpec`
in :data:`~defenses.registry.DEFENSES` beside them. The registry imports every module here on its
first lookup, so a new defense is one new module: nothing in this package lists them.
"""

from __future__ import annotations

from defenses.registry import DEFENSES, DefenseSpec, SubmodelTrainFn, TrainFn

__all__ = ["DEFENSES", "DefenseSpec", "SubmodelTrainFn", "TrainFn"]
