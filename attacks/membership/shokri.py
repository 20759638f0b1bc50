"""The shadow-model attack of Shokri et al. (2017, §V–VI).

Shadows trained on population data with known membership (the ``offline`` pool); one attack
classifier per class on the *sorted* log-probability vectors, labelled IN/OUT
(:func:`attacks.membership.scores.shokri_scores`), applied to the target's outputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attacks.membership.scores import shokri_scores
from attacks.membership.spec import (
    MEMBERSHIP_ATTACKS,
    SHADOW_LIMIT,
    MembershipAttackSpec,
    MembershipContext,
    check_fields,
    count,
)
from dpaudit.options import option
from dpaudit.parts import PlotStyle
from dpaudit.results import MembershipResult
from dpaudit.seeding import numpy_rng

__all__ = ["ShokriConfig"]


@dataclass(frozen=True, kw_only=True)
class ShokriConfig:
    """Shokri et al. (2017): how many shadow models (offline pool) train the attack classifiers."""

    num_shadows: int = option(
        16,
        help="shadow models the attack uses from its pool (default 16)",
        metavar="N",
        check=count,
        limit=SHADOW_LIMIT,
    )

    def __post_init__(self) -> None:
        check_fields(self)


def _run_shokri(context: MembershipContext, config: ShokriConfig) -> MembershipResult:
    pool = context.pool("offline", "shadow")
    k = min(config.num_shadows, pool.num_models)
    s_logits, s_labels, s_in = [], [], []
    for i in range(k):
        rng_i = numpy_rng(context.seed, "shokri-rows", i)
        inside = np.isin(pool.pool_ids, pool.train_ids[i])
        rows = np.concatenate(
            [rng_i.permutation(np.flatnonzero(inside))[:1000], rng_i.permutation(np.flatnonzero(~inside))[:1000]]
        )
        where = context.positions(pool.pool_ids[rows])
        s_logits.append(pool.logits[i][where, 0])
        s_labels.append(context.universe_labels[where])
        s_in.append(inside[rows])
    scores = shokri_scores(
        target_logits=context.query_logits(),
        labels=context.labels,
        shadow_logits=s_logits,
        shadow_labels=s_labels,
        shadow_in=s_in,
        seed=context.seed,
    )
    return context.result(
        "shadow",
        scores,
        {
            "num_shadows": k,
            "classifier": "HistGradientBoostingClassifier",
            "num_queries": 1,
            "augmentations": ["identity"],
        },
    )


MEMBERSHIP_ATTACKS.register(
    MembershipAttackSpec(
        name="shadow",
        style=PlotStyle(colour="#EE7733", marker="P", dash="-."),
        summary="per-class attack classifiers trained on shadow models' outputs (Shokri et al. 2017, §V)",
        config_type=ShokriConfig,
        run=_run_shokri,
        shadow_pool="offline",
        shadow_count_field="num_shadows",
    )
)
