"""``reused-noise``: distances to reference trainings, against noise that ignores the seed.

Reference trainings of D0 (zero-gradient records) and D0 + the worst-case canary run first, with
public auditor seeds (the first half of the trials); each later trial is scored by its distance
to the nearest OUT reference. With a fresh noise stream every training lands somewhere else and
the distance carries only what DP allows about the canary; noise drawn from a constant seed (or
from a generator that ignores ``seed``) makes every OUT training the same model, so an OUT trial
sits on its references and an IN trial (the canary sampled at least once) does not. The
references are fixed before the evaluated trials are seen, so the statistic is sound.
"""

from __future__ import annotations

import numpy as np

from attacks.audit.checks.game import Game, evidence, first, play, sides, start_for
from attacks.audit.checks.spec import CHECKS, CheckContext, CheckEvidence, CheckSpec

RECORDS = 5
TRIALS = 80
#: Share of the trials that are references.
REFERENCES = 0.4


def flat(trial: dict[str, np.ndarray]) -> np.ndarray:
    """Every floating tensor of the final state, in key order, as one vector."""
    return np.concatenate(
        [np.asarray(trial[k], dtype=float).reshape(-1) for k in sorted(trial) if k.startswith("state:")]
    )


def run(ctx: CheckContext) -> CheckEvidence:
    start = start_for(ctx)
    game = Game(
        name=f"records-{RECORDS}",
        out_data=first(start.zero_gradient, RECORDS),
        canary=start.canary,
        start=start.state,
        keep_state=True,
    )
    total = ctx.trials or TRIALS
    trials = play(ctx, game, trials=total, budget_seconds=ctx.budget_seconds)
    # References: a prefix fixed by the planned size, so the split never depends on outcomes.
    num_ref = min(len(trials) // 2, max(2, int(REFERENCES * total)))
    num_ref -= num_ref % 2
    is_in = sides(len(trials))
    out_refs = (
        np.stack([flat(t) for t, side in zip(trials[:num_ref], is_in[:num_ref]) if not side])
        if num_ref
        else np.zeros((0, 1))
    )
    evaluated = trials[num_ref:]
    if not len(out_refs) or not evaluated:
        return evidence(ctx, np.zeros(0), np.zeros(0, dtype=bool), details={"references": num_ref})
    scores = np.array([np.min(np.linalg.norm(out_refs - flat(t), axis=1)) for t in evaluated])
    details = {
        "records": RECORDS,
        "references": num_ref,
        "statistic": "distance of the final state to the nearest OUT reference training",
    }
    ev = evidence(ctx, scores, is_in[num_ref:], details=details)
    return CheckEvidence(epsilon_lb=ev.epsilon_lb, ceiling=ev.ceiling, num_trials=len(trials), details=ev.details)


CHECKS.register(
    CheckSpec(
        name="reused-noise",
        order=40,
        detects="noise drawn from a constant seed or a generator that ignores the "
        "training's seed (the same noise in every training)",
        misses="the same noise reused across the steps of one training but fresh per "
        "training (the final model's noise is then larger, not smaller), which "
        "only intermediate updates show",
        violation="trainings without the canary land on the same model whatever the seed "
        "— the noise does not come from the training's seed",
        needs_initial_state=True,
        run=run,
    )
)
