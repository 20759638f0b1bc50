"""How a DSSGD run spends ``target_epsilon``, resolved before training from public facts.

Shokri & Shmatikov (CCS 2015, §5) state ε per uploaded parameter per turn; a participant's data
get c·R·ε (c uploads per turn, R rounds; :mod:`dpaudit.privacy.dssgd_budget`). c depends only on
θ_u and the model's parameter count, both public, so the plan never looks at the data. As
DP-SGD's :func:`defenses.dpsgd.plan.plan_dpsgd` and PATE's :func:`defenses.pate.plan.plan_pate`:

- ``target_epsilon`` without ``dp_epsilon``: ``dp_epsilon`` is calibrated so that ``rounds``
  (default ``DEFAULT_ROUNDS``) spend exactly the target;
- ``target_epsilon`` and ``dp_epsilon`` without ``rounds``: the most rounds the budget allows;
- all three: exactly ``rounds`` if the budget allows them, refused (naming the most it allows)
  otherwise.

The plan's note says, before training, what was derived (``train_dssgd`` prints it); the record
keeps the config as asked (its id) and the resolved values in its metrics and claim.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpaudit import _validate as v
from dpaudit.privacy.dssgd_budget import MAX_ROUNDS, BudgetPlan, fraction_count, plan_budget

__all__ = ["DSSGDPlan", "plan_dssgd", "plan_budget_for", "DEFAULT_ROUNDS", "MAX_ROUNDS"]

#: Rounds of a run that names none (and is not planned from a budget at a given ``dp_epsilon``).
DEFAULT_ROUNDS = 10


@dataclass(frozen=True)
class DSSGDPlan:
    """A DSSGD config with ``dp_epsilon`` and ``rounds`` resolved, and what was decided.

    Attributes:
        config: the resolved config; the record keeps the config it was asked for (its id).
        budget: the budget decision (``budget.note`` is ``None`` without a target).
    """

    config: Any
    budget: BudgetPlan


def _field(config: Any, name: str) -> Any:
    return config.get(name) if isinstance(config, Mapping) else getattr(config, name)


def plan_budget_for(config: Any, *, num_parameters: int) -> BudgetPlan:
    """:func:`plan_budget` for a DSSGD config or a stored record's config mapping."""
    n = v.integer("num_parameters", num_parameters, minimum=1)
    c = fraction_count("upload_fraction", _field(config, "upload_fraction"), n)
    return plan_budget(
        target_epsilon=_field(config, "target_epsilon"),
        dp_epsilon=_field(config, "dp_epsilon"),
        rounds=_field(config, "rounds"),
        uploads_per_turn=c,
    )


def plan_dssgd(config: Any, *, num_parameters: int) -> DSSGDPlan:
    """Resolves a :class:`~defenses.dssgd.config.DSSGDConfig` for a model of ``num_parameters`` parameters.

    Raises:
        ValueError: the budget cannot be met (see :func:`plan_budget`).
    """
    budget = plan_budget_for(config, num_parameters=num_parameters)
    resolved = dataclasses.replace(config, dp_epsilon=budget.dp_epsilon, rounds=budget.rounds)
    return DSSGDPlan(config=resolved, budget=budget)
