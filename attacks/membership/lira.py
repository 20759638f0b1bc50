"""LiRA, the likelihood-ratio attack of Carlini et al. (2022, §IV), online and offline.

The statistic is the logit-scaled confidence φ (:func:`attacks.membership.scores.lira_phi`) of
each query augmentation; online the attack fits IN and OUT Gaussians per example from the
``online`` pool, offline only the OUT ones from the ``offline`` pool. The same statistic ranks
the queried samples by how exposed the shadows say they are (:func:`sample_vulnerability`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from attacks.membership.scores import GLOBAL_VARIANCE_BELOW, lira_offline_scores, lira_online_scores, lira_phi
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

__all__ = ["LiRAConfig", "sample_vulnerability"]


@dataclass(frozen=True, kw_only=True)
class LiRAConfig:
    """LiRA (Carlini et al. 2022, §IV): shadow count and variance mode."""

    num_shadows: int = option(
        16,
        help="shadow models the attack uses from its pool (default 16)",
        metavar="N",
        check=count,
        limit=SHADOW_LIMIT,
    )
    global_variance: bool | None = option(
        None, kind=bool, help="LiRA: one global variance (default: automatically below 64 shadows, §IV-B)"
    )

    def __post_init__(self) -> None:
        check_fields(self)
        if self.global_variance is not None and not isinstance(self.global_variance, bool):
            raise v.invalid_type(
                "global_variance", f"global_variance must be a bool or None, got {self.global_variance!r}"
            )


def _phi(context: MembershipContext, logits: np.ndarray, where: np.ndarray) -> np.ndarray:
    return lira_phi(logits[where], context.universe_labels[where])


def _lira(online: bool) -> Callable[[MembershipContext, Any], MembershipResult]:
    name = "lira" if online else "lira-offline"

    def run(context: MembershipContext, config: LiRAConfig) -> MembershipResult:
        pool = context.pool("online" if online else "offline", name)
        k = min(config.num_shadows, pool.num_models)
        q = context.query_positions
        shadow_phi = np.stack([_phi(context, lg, q) for lg in pool.logits[:k]])
        target_phi = _phi(context, context.target_logits, q)
        glob = k < GLOBAL_VARIANCE_BELOW if config.global_variance is None else config.global_variance
        if online:
            keep = np.stack([np.isin(context.sample_ids, t) for t in pool.train_ids[:k]])
            scores = lira_online_scores(target_phi, shadow_phi, keep, global_variance=glob)
        else:
            scores = lira_offline_scores(target_phi, shadow_phi, global_variance=glob)
        return context.result(
            name,
            scores,
            {
                "num_queries": len(context.augmentations),
                "augmentations": list(context.augmentations),
                "num_shadows": k,
                "global_variance": bool(glob),
            },
        )

    return run


def sample_vulnerability(context: MembershipContext) -> np.ndarray | None:
    """How exposed each queried sample is, judged from the shadows alone (never the target).

    With an online pool every queried sample is IN for about half the shadows and OUT for the
    rest; its vulnerability is the separation of LiRA's statistic φ between the two,
    |μ_in − μ_out| / √((σ²_in + σ²_out)/2) (Carlini et al. 2022, §IV: the samples whose IN and
    OUT distributions differ most are the ones a strong attack exposes). Because the target
    plays no part, restricting an attack's measures to the top-k samples by this ranking is
    not a selection on the outcome, so the subset's TPR and AUC remain honest estimates
    (Aerni et al. 2024 measure defenses on their most vulnerable samples for this reason).

    Returns:
        ``(n,)`` float64, one per queried id (``context.sample_ids`` order; ``-inf`` for a
        sample no shadow pair saw both IN and OUT), or ``None`` when the run has no online pool.
    """
    pool = context.shadows.get("online")
    if pool is None or pool.num_models < 2:
        return None
    q = context.query_positions
    phi = np.stack([_phi(context, lg, q) for lg in pool.logits])  # (k, n, queries)
    phi = phi.reshape(phi.shape[0], phi.shape[1], -1).mean(axis=2)  # one statistic per sample
    keep = np.stack([np.isin(context.sample_ids, t) for t in pool.train_ids])
    n_in, n_out = keep.sum(0), (~keep).sum(0)
    both = (n_in > 0) & (n_out > 0)
    if not both.any():
        return None
    mu_in = np.where(keep, phi, 0.0).sum(0) / np.maximum(n_in, 1)
    mu_out = np.where(~keep, phi, 0.0).sum(0) / np.maximum(n_out, 1)
    var_in = np.where(keep, (phi - mu_in) ** 2, 0.0).sum(0) / np.maximum(n_in - 1, 1)
    var_out = np.where(~keep, (phi - mu_out) ** 2, 0.0).sum(0) / np.maximum(n_out - 1, 1)
    # A floor on the spread: a sample every shadow fits identically would otherwise divide by 0.
    spread = np.sqrt(np.maximum((var_in + var_out) / 2, 1e-12))
    # A sample the shadows never saw both IN and OUT (all 2^-k of them, k shadows) cannot be
    # judged: -inf ranks it last, never among the most vulnerable.
    return np.where(both, np.abs(mu_in - mu_out) / spread, -np.inf)


MEMBERSHIP_ATTACKS.register(
    MembershipAttackSpec(
        name="lira",
        style=PlotStyle(colour="#1F4E9C", marker="s"),
        summary="likelihood-ratio test with IN and OUT shadows, online (Carlini et al. 2022, §IV-B)",
        config_type=LiRAConfig,
        run=_lira(True),
        shadow_pool="online",
        shadow_count_field="num_shadows",
    )
)
MEMBERSHIP_ATTACKS.register(
    MembershipAttackSpec(
        name="lira-offline",
        style=PlotStyle(colour="#56B4E9", marker="D", dash="--"),
        summary="one-sided test against OUT shadows only (Carlini et al. 2022, §IV-C)",
        config_type=LiRAConfig,
        run=_lira(False),
        shadow_pool="offline",
        shadow_count_field="num_shadows",
    )
)
