"""``sampling-rate``: the worst-case canary alone in its class among many records, against sampler bugs.

The worst-case game (:mod:`attacks.audit.checks.game`) with a larger D0 of class-0 records
(zero gradient from the saturated start): a sampler that reweights by class or by loss
(``WeightedRandomSampler``, class balancing) or computes its rate from the number of batches
(Opacus issue #813) draws the lone class-1 canary far more often than the claimed q, and its
margin on the final model shows it.
"""

from __future__ import annotations

from attacks.audit.checks.game import margin_game
from attacks.audit.checks.spec import CHECKS, CheckContext, CheckEvidence, CheckSpec

#: Class-0 records beside the lone canary: a class-balanced sampler draws it ≈ RECORDS/2 times as often.
RECORDS = 150
TRIALS = 60


def run(ctx: CheckContext) -> CheckEvidence:
    return margin_game(ctx, records=RECORDS, default_trials=TRIALS)


CHECKS.register(
    CheckSpec(
        name="sampling-rate",
        order=30,
        detects="samplers that draw a rare-class or high-loss record more often than "
        "the claimed rate (weighted or class-balanced sampling, rates computed "
        "from the number of batches)",
        misses="sampling bugs that leave a rare record's rate unchanged (e.g. "
        "shuffling instead of Poisson sampling at the same rate), which the "
        "last iterate barely shows",
        violation="the lone rare-class canary moves the final model more than rate q "
        "allows — the sampler draws it more often than claimed",
        needs_initial_state=True,
        run=run,
    )
)
