"""``lot-size``: zero-gradient records only, against normalisers that depend on the data.

From the saturated start (:mod:`attacks.audit.checks.game`) a record labelled 0 has no gradient,
so in a correct DP-SGD the final model does not depend on it at all: the noisy sum is divided
by a public constant. Here the canary is one more such record. An implementation that divides by
the realised lot size (Opacus issue #420), by q·|D| or its floor (Opacus #819, #571), or draws
fixed-size shuffled batches larger than a small dataset (Opacus #80) divides the noise by
something the canary changes, and the displacement ‖θ_T − θ_0‖ — the noise's norm, concentrated
in high dimension — shows it. Two games, Bonferroni-paid: one record (the canary shares a lot
with it now and then: realised-lot normalisers) and ⌈2/q⌉ − 1 records (q·n crosses an integer
when the canary joins: floor-based normalisers), each scored in both directions.
"""

from __future__ import annotations

import math

import numpy as np

from attacks.audit.checks.game import Game, claimed_sampling_rate, evidence, first, play, relabelled, sides, start_for
from attacks.audit.checks.spec import CHECKS, CheckContext, CheckEvidence, CheckSpec

#: Trials per game: the one-record game needs many (the canary shares a lot with the record in
#: ≈ 40 % of the trainings), the q·n game few (a floor or q·|D| normaliser separates every trial).
TRIALS = {"shared-lot": 160, "integer-crossing": 40}


def sizes(q: float) -> dict[str, int]:
    """D0 sizes: 1, and the size where q·n reaches the next integer when the canary joins."""
    return {"shared-lot": 1, "integer-crossing": max(2, math.ceil(2.0 / q) - 1)}


def displacement_score(trial: dict[str, np.ndarray]) -> float:
    """−log ‖θ_T − θ_0‖ over the parameters: larger when the noise was divided by more."""
    total = sum(float(trial[k]) ** 2 for k in trial if k.startswith("norm:"))
    return -0.5 * math.log(total) if total > 0 else 1e300


def run(ctx: CheckContext) -> CheckEvidence:
    start = start_for(ctx)
    chosen = sizes(claimed_sampling_rate(ctx))
    best: CheckEvidence | None = None
    per_size = {}
    total = 0
    planned = {kind: ctx.trials or TRIALS[kind] for kind in chosen}
    for kind, n in chosen.items():
        game = Game(
            name=f"records-{n}",
            out_data=first(start.zero_gradient, n),
            canary=relabelled(start.zero_gradient, [n], None),
            start=start.state,
        )
        share = ctx.budget_seconds * planned[kind] / sum(planned.values())
        trials = play(ctx, game, trials=planned[kind], budget_seconds=share)
        scores = np.array([displacement_score(t) for t in trials])
        total += len(trials)
        # Both directions, paid for: a normaliser that grows with the data shrinks the noise (IN
        # scores higher), one that skips empty lots adds noise steps with the canary (IN lower).
        for sign, direction in ((1.0, "smaller"), (-1.0, "larger")):
            ev = evidence(
                ctx,
                sign * scores,
                sides(len(trials)),
                num_tests=2 * len(chosen),
                details={"records": n, "in_displacement": direction},
            )
            per_size[f"{kind}/{direction}"] = {
                "records": n,
                "epsilon_lb": ev.epsilon_lb,
                "ceiling": ev.ceiling,
                "trials": ev.num_trials,
            }
            if best is None or (ev.epsilon_lb, ev.ceiling) > (best.epsilon_lb, best.ceiling):
                best = ev
    assert best is not None
    details = {
        "sizes": dict(chosen),
        "by_size": per_size,
        "statistic": "-log of the parameters' displacement norm",
        **{k: x for k, x in best.details.items() if k != "records"},
    }
    return CheckEvidence(
        epsilon_lb=best.epsilon_lb,
        ceiling=max(s["ceiling"] for s in per_size.values()),
        num_trials=total,
        details=details,
    )


CHECKS.register(
    CheckSpec(
        name="lot-size",
        order=20,
        detects="normalisers of the noisy sum that depend on the data: the realised lot "
        "size, q·|D| or its floor, fixed-size batches larger than the dataset",
        misses="normaliser bugs on datasets larger than a few lots when the lot size "
        "barely varies, and bugs that need a record with a gradient",
        violation="the output depends on a record with zero gradient — the noisy sum's normaliser depends on the data",
        needs_initial_state=True,
        run=run,
    )
)
