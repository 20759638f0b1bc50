"""``state-leakage``: per-tensor statistics of the returned state, against un-noised tensors.

The worst-case game (:mod:`attacks.audit.checks.game`) on copies of one zero-gradient record,
keeping every floating tensor of the returned state dict — parameters and buffers. On the first half of the trials each
tensor gets a
direction, (mean_IN − mean_OUT) over the pooled variance elementwise (with a floor); on the
second half each trial is scored by its projection on that direction, per tensor, and ε_LB is the
best tensor's, Bonferroni-paid over the tensors. A tensor that moves with the data without noise
— a bias or adapter left out of the noise, BatchNorm's running statistics — separates IN from OUT
where the noised tensors cannot.
"""

from __future__ import annotations

import numpy as np

from attacks.audit.checks.game import Game, copies, evidence, play, sides, start_for
from attacks.audit.checks.spec import CHECKS, CheckContext, CheckEvidence, CheckSpec

#: Copies of one zero-gradient record: almost every lot holds some, all with the same statistics,
#: so a buffer that averages lots (BatchNorm's running mean) is nearly constant without the canary.
RECORDS = 20
TRIALS = 100
#: Relative variance floor: directions never divide by a near-zero variance of a constant coordinate.
FLOOR = 1e-6


def directions(fit: list[dict[str, np.ndarray]], is_in: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per tensor: (OUT mean, direction) fitted on the fitting trials."""
    out = {}
    for key in sorted(k for k in fit[0] if k.startswith("state:")):
        x = np.stack([np.asarray(t[key], dtype=float).reshape(-1) for t in fit])
        a, b = x[is_in], x[~is_in]
        var = 0.5 * (a.var(axis=0) + b.var(axis=0))
        floor = FLOOR * max(float(np.mean(var)), float(np.mean((a.mean(0) - b.mean(0)) ** 2)), 1e-30)
        out[key] = (b.mean(axis=0), (a.mean(axis=0) - b.mean(axis=0)) / (var + floor))
    return out


def run(ctx: CheckContext) -> CheckEvidence:
    start = start_for(ctx)
    game = Game(
        name=f"records-{RECORDS}",
        out_data=copies(start.zero_gradient, RECORDS),
        canary=start.canary,
        start=start.state,
        keep_state=True,
    )
    total = ctx.trials or TRIALS
    return evaluate(ctx, play(ctx, game, trials=total, budget_seconds=ctx.budget_seconds), planned=total)


def evaluate(ctx: CheckContext, trials: list[dict[str, np.ndarray]], *, planned: int) -> CheckEvidence:
    """Directions from the first half of the ``planned`` trials, ε_LB on the rest (Bonferroni over tensors)."""
    num_fit = min(len(trials) // 2, planned // 2)
    num_fit -= num_fit % 2
    is_in = sides(len(trials))
    if num_fit < 4 or len(trials) - num_fit < 2:
        return evidence(ctx, np.zeros(0), np.zeros(0, dtype=bool), details={"fitting_trials": num_fit})
    fitted = directions(trials[:num_fit], is_in[:num_fit])
    evaluated, ev_in = trials[num_fit:], is_in[num_fit:]
    best, by_tensor = None, {}
    for key, (mean_out, d) in fitted.items():
        scores = np.array([float((np.asarray(t[key], dtype=float).reshape(-1) - mean_out) @ d) for t in evaluated])
        ev = evidence(ctx, scores, ev_in, num_tests=len(fitted), details={"tensor": key.removeprefix("state:")})
        by_tensor[key.removeprefix("state:")] = ev.epsilon_lb
        if best is None or (ev.epsilon_lb, ev.ceiling) > (best.epsilon_lb, best.ceiling):
            best = ev
    assert best is not None
    details = {
        **best.details,
        "fitting_trials": num_fit,
        "epsilon_lb_by_tensor": by_tensor,
        "statistic": "projection of each tensor on its fitted IN-OUT direction",
    }
    return CheckEvidence(epsilon_lb=best.epsilon_lb, ceiling=best.ceiling, num_trials=len(trials), details=details)


CHECKS.register(
    CheckSpec(
        name="state-leakage",
        order=50,
        detects="tensors of the returned state that follow the data without noise: "
        "parameters left out of the noise (biases, adapters, layers thought "
        "frozen) and BatchNorm running statistics",
        misses="un-noised tensors that a single large-gradient canary does not move, "
        "and leaks spread thinly over many tensors",
        violation="a tensor of the returned state follows the canary without noise — "
        "noise is missing on part of the model or a buffer (BatchNorm) mixes "
        "examples",
        needs_initial_state=True,
        run=run,
    )
)
