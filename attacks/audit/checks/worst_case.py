"""``worst-case``: the canary's margin from a saturated start, against noise and clipping bugs.

The game of :mod:`attacks.audit.checks.game` on a few zero-gradient records (Nasr et al. 2023,
"Tight Auditing of Differentially Private Machine Learning", §4; Annamalai & De Cristofaro 2024):
the canary's clipped gradient points the same way at every step it is sampled, so its logit
margin on the final model is (times sampled)·C·η/B against the noise's projection. Missing or
too small noise, noise not multiplied by C, missing or per-batch clipping, augmentation copies
clipped separately, accumulation that clips the accumulated sum, more steps than claimed and a
higher sampling rate than claimed all move IN away from OUT by more than the claim allows.
"""

from __future__ import annotations

from attacks.audit.checks.game import margin_game
from attacks.audit.checks.spec import CHECKS, CheckContext, CheckEvidence, CheckSpec

#: Zero-gradient records beside the canary (lots are seldom empty, the canary dominates).
RECORDS = 5
TRIALS = 100


def run(ctx: CheckContext) -> CheckEvidence:
    return margin_game(ctx, records=RECORDS, default_trials=TRIALS)


CHECKS.register(
    CheckSpec(
        name="worst-case",
        order=10,
        detects="noise missing, too small or not multiplied by the clipping norm; "
        "clipping missing, per batch, per augmented copy or after accumulation; "
        "more steps or a higher sampling rate than claimed",
        misses="leaks that need data other than one large-gradient canary among "
        "zero-gradient records (normalisers, class-dependent samplers) and "
        "leaks hidden from the final model",
        violation="the canary moves the final model more than the claimed noise allows — "
        "noise or clipping is weaker than claimed",
        needs_initial_state=True,
        run=run,
    )
)
