"""The budget arithmetic of differentially private DSSGD (Shokri & Shmatikov, CCS 2015, §5).

The paper states ε *per uploaded parameter per turn*. A participant uploads at most
c = round(θ_u·|w|) values in a turn and takes one turn in each of R rounds, so its data get
ε_total = c·R·ε by basic (pure) composition (Dwork & Roth 2014, Thm 3.16), the figure
:class:`dpaudit.privacy.dssgd.DSSGDClaim` states with accountant ``pure``. :func:`plan_budget`
spends a total ``target_epsilon`` on ε or R; the defense plans with it before training and a
record's claim is rebuilt with it. Torch-free, as every claim's arithmetic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpaudit import _validate as v

__all__ = ["BudgetPlan", "plan_budget", "fraction_count", "MAX_ROUNDS"]

#: The most rounds a run takes (the ``--rounds`` limit: one local training per participant each).
MAX_ROUNDS = 10_000
#: Relative slack of the budget comparisons: c·R·(target / (c·R)) may exceed target by an ulp.
_SLACK = 1e-9


def fraction_count(name: str, fraction: float, total: int) -> int:
    """How many of ``total`` parameters a fraction θ covers: round(θ·total), at least one.

    Raises:
        ValueError: ``fraction`` is not in (0, 1] (named as ``name``).
    """
    fraction = v.real(name, fraction)
    if not 0 < fraction <= 1:
        raise v.invalid(name, f"{name} must lie in (0, 1], got {fraction!r}")
    return max(1, min(total, int(round(fraction * total))))


@dataclass(frozen=True)
class BudgetPlan:
    """The resolved ε per parameter and rounds, and what was decided.

    Attributes:
        dp_epsilon: ε per uploaded parameter per turn (``None``: not private).
        rounds: R.
        uploads_per_turn: c.
        epsilon_total: c·R·ε, the pure composition the record claims (``None``: not private).
        note: one line said before training (``None`` without a target).
    """

    dp_epsilon: float | None
    rounds: int
    uploads_per_turn: int
    epsilon_total: float | None
    note: str | None


def plan_budget(
    *, target_epsilon: float | None, dp_epsilon: float | None, rounds: int | None, uploads_per_turn: int
) -> BudgetPlan:
    """Resolves ε per parameter and R from the budget.

    - ``target_epsilon`` without ``dp_epsilon``: ε = target / (c·R), so R rounds spend exactly
      the target;
    - ``target_epsilon`` and ``dp_epsilon`` without ``rounds``: R = ⌊target / (c·ε)⌋, the most
      rounds the budget allows (at most ``MAX_ROUNDS``);
    - all three: exactly ``rounds`` if c·R·ε stays within the target, else refused (naming the
      rounds it allows): stopping early would silently train another run.

    Args:
        target_epsilon: the budget (``None``: ``dp_epsilon`` and ``rounds`` as given).
        dp_epsilon: ε per uploaded parameter per turn, or ``None`` (calibrated with a target).
        rounds: R; ``None`` only with both ``target_epsilon`` and ``dp_epsilon`` (the most the
            budget allows).
        uploads_per_turn: c.

    Raises:
        ValueError: the budget cannot be met: a single round at ``dp_epsilon`` exceeds it (names
            ``dp_epsilon`` and the largest it may be), or ``rounds`` exceed what it allows
            (names ``rounds`` and the most it allows).
    """
    c = v.integer("uploads_per_turn", uploads_per_turn, minimum=1)
    if rounds is not None:
        v.integer("rounds", rounds, minimum=1)
    elif target_epsilon is None or dp_epsilon is None:
        raise v.invalid(
            "rounds",
            "rounds may be left unset only with both target_epsilon and dp_epsilon (the most rounds the budget allows)",
        )
    if dp_epsilon is not None:
        v.positive("dp_epsilon", dp_epsilon)
    if target_epsilon is None:
        assert rounds is not None  # refused above
        r = rounds
        total = None if dp_epsilon is None else c * r * dp_epsilon
        return BudgetPlan(dp_epsilon=dp_epsilon, rounds=r, uploads_per_turn=c, epsilon_total=total, note=None)
    target = v.positive("target_epsilon", target_epsilon)
    per_turn = f"{c:,} uploads per turn"
    if dp_epsilon is None:
        assert rounds is not None  # refused above
        r = rounds
        eps = target / (c * r)
        note = (
            f"dp_epsilon = {eps:.4g} calibrated so that {per_turn} x {r} rounds "
            f"spend epsilon = {target:g} (pure composition, what the record claims); "
            "--rounds sets the length"
        )
    else:
        eps = dp_epsilon
        allowed = math.floor(target / (c * eps) * (1 + _SLACK))
        if allowed < 1:
            largest = target / (c * (1 if rounds is None else rounds))
            raise v.invalid(
                "dp_epsilon",
                f"dp_epsilon={eps!r} exceeds target_epsilon={target:g} in a single round "
                f"({per_turn} spend {c * eps:.4g}); "
                "lower dp_epsilon to at most "
                f"{largest:.4g}{'' if rounds is None else f' for {rounds} rounds'}, or "
                "leave it unset to calibrate it",
            )
        if rounds is None:
            r = min(allowed, MAX_ROUNDS)
            cap = f" (the budget allows {allowed:,}, capped at {MAX_ROUNDS:,})" if allowed > MAX_ROUNDS else ""
            note = (
                f"dp_epsilon {eps:g} reaches epsilon {target:g} after {r} rounds{cap} "
                f"({per_turn}, pure composition); leave --dp-epsilon unset and pass "
                "--rounds to calibrate dp_epsilon instead"
            )
        elif rounds > allowed:
            # Stopping early would silently train a different run than the one asked for.
            raise v.invalid(
                "rounds",
                f"rounds={rounds} at dp_epsilon={eps:g} spend epsilon "
                f"{c * rounds * eps:.4g} ({per_turn}), above target_epsilon={target:g}; "
                f"lower rounds to at most {allowed}, lower dp_epsilon, or leave dp_epsilon unset to calibrate it",
            )
        else:
            r = rounds
            note = (
                f"dp_epsilon {eps:g} and {r} rounds ({per_turn}) spend epsilon "
                f"{c * r * eps:.4g} of target_epsilon {target:g} (pure composition)"
            )
    total = c * r * eps
    if total > target * (1 + _SLACK):
        raise RuntimeError(f"internal error: the DSSGD plan spends epsilon={total!r} > target_epsilon={target!r}")
    return BudgetPlan(dp_epsilon=eps, rounds=r, uploads_per_turn=c, epsilon_total=total, note=note)
