"""RMIA, the relative membership-inference attack of Zarifzadeh, Liu & Shokri (2024, §3), online and offline.

LR(x) = Pr(x|θ)/Pr(x) against population samples z, with the reference models the first ones
of the attack's shadow pool (:func:`attacks.membership.scores.rmia_scores`); offline, Pr(x) is
approximated with a weight a tuned on the references (§3.3 / App. B).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special

from attacks.membership.scores import _log_softmax, rmia_scores, tune_rmia_offline_a
from attacks.membership.spec import (
    MEMBERSHIP_ATTACKS,
    SHADOW_LIMIT,
    MembershipAttackSpec,
    MembershipContext,
    check_fields,
    count,
)
from dpaudit import _validate as v
from dpaudit.options import option
from dpaudit.parts import PlotStyle
from dpaudit.results import MembershipResult

__all__ = ["RMIAConfig", "RMIAOfflineConfig"]


def _unit_closed(name: str, value: Any) -> float:
    x = v.real(name, value)
    if not 0.0 <= x <= 1.0:
        raise v.invalid(name, f"{name} must lie in [0, 1], got {value!r}")
    return x


@dataclass(frozen=True, kw_only=True)
class RMIAConfig:
    """RMIA (Zarifzadeh et al. 2024, §3): reference models and the likelihood-ratio threshold γ.

    The reference models are the first ``num_references`` models of the attack's shadow pool,
    so RMIA beside LiRA costs no extra training; ``None`` uses every model of the pool (its size
    is then set by ``--num-shadows`` of the other attacks, or :data:`DEFAULT_NUM_SHADOWS`).
    """

    num_references: int | None = option(
        None,
        kind=int,
        help="RMIA reference models, the first ones of its shadow pool (default: the whole pool)",
        metavar="R",
        check=count,
        limit=SHADOW_LIMIT,
    )
    gamma: float = option(1.0, help="RMIA likelihood-ratio threshold gamma > 0 (default 1)", check=v.positive)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True, kw_only=True)
class RMIAOfflineConfig(RMIAConfig):
    """Offline RMIA adds a, the weight of the offline approximation of Pr(x) (§3, App. B)."""

    offline_a: float | None = option(
        None, help="RMIA offline a in [0, 1] (default: tuned on the references)", metavar="A", check=_unit_closed
    )


def _logp_true(context: MembershipContext, logits: np.ndarray, where: np.ndarray) -> np.ndarray:
    """log of the true-class probability averaged over queries (RMIA's Pr(x|θ))."""
    logp = np.take_along_axis(
        _log_softmax(logits[where].astype(np.float64)), context.universe_labels[where][:, None, None], axis=-1
    )[..., 0]
    return special.logsumexp(logp, axis=1) - np.log(logp.shape[1])


def _rmia(online: bool) -> Callable[[MembershipContext, Any], MembershipResult]:
    name = "rmia" if online else "rmia-offline"

    def run(context: MembershipContext, config: RMIAConfig) -> MembershipResult:
        pool = context.pool("online" if online else "offline", name)
        k = pool.num_models if config.num_references is None else min(config.num_references, pool.num_models)
        z = pool.population_ids
        if z.size == 0:
            raise v.invalid(
                "target",
                f"attack {name!r} needs population samples z, but the target's record "
                "has no population ids left to draw them from",
            )
        q, zpos = context.query_positions, context.positions(z)
        lgs = pool.logits[:k]
        ref_x = np.stack([_logp_true(context, lg, q) for lg in lgs])
        ref_z = np.stack([_logp_true(context, lg, zpos) for lg in lgs])
        keep_z = np.stack([np.isin(z, t) for t in pool.train_ids[:k]])
        offline_a = getattr(config, "offline_a", None)
        a_used = None
        keep_x = None
        if online:
            keep_x = np.stack([np.isin(context.sample_ids, t) for t in pool.train_ids[:k]])
        elif offline_a is not None:
            a_used = offline_a
        else:
            ppos = context.positions(pool.pool_ids)
            ref_pool = np.stack([_logp_true(context, lg, ppos) for lg in lgs])
            keep_pool = np.stack([np.isin(pool.pool_ids, t) for t in pool.train_ids[:k]])
            a_used = tune_rmia_offline_a(
                ref_logp=ref_pool,
                keep=keep_pool,
                z_index=np.searchsorted(pool.pool_ids, z),
                seed=context.seed,
                gamma=config.gamma,
            )
        scores = rmia_scores(
            target_logp_x=_logp_true(context, context.target_logits, q),
            ref_logp_x=ref_x,
            target_logp_z=_logp_true(context, context.target_logits, zpos),
            ref_logp_z=ref_z,
            keep_x=keep_x,
            keep_z=keep_z,
            offline_a=a_used,
            gamma=config.gamma,
        )
        out: dict[str, object] = {
            "num_queries": len(context.augmentations),
            "augmentations": list(context.augmentations),
            "num_references": k,
            "gamma": config.gamma,
            "num_population": int(z.size),
            "tie_break": True,
        }
        if not online:
            out.update(offline_a=a_used, offline_a_tuned=offline_a is None)
        return context.result(name, scores, out)

    return run


MEMBERSHIP_ATTACKS.register(
    MembershipAttackSpec(
        name="rmia",
        style=PlotStyle(colour="#117733", marker="^"),
        summary="relative likelihood ratio against population samples, online (Zarifzadeh et al. 2024, §3)",
        config_type=RMIAConfig,
        run=_rmia(True),
        shadow_pool="online",
        shadow_count_field="num_references",
        population_samples=True,
    )
)
MEMBERSHIP_ATTACKS.register(
    MembershipAttackSpec(
        name="rmia-offline",
        style=PlotStyle(colour="#CC79A7", marker="v", dash="--"),
        summary="RMIA with OUT references and the offline approximation of Pr(x) (Zarifzadeh et al. 2024, §3, App. B)",
        config_type=RMIAOfflineConfig,
        run=_rmia(False),
        shadow_pool="offline",
        shadow_count_field="num_references",
        population_samples=True,
    )
)
