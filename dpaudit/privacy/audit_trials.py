"""ε_LB and its ceiling against the number of trials: an audit recomputed on prefixes of its scores.

The report's trials figure (docs/audits/statistics.md, §9) reads :func:`epsilon_lb_by_trials`: ε_LB
far below a high ceiling is a weak attack, ε_LB at a low ceiling a design that needs more trials.
Each prefix is audited by the procedures of :mod:`dpaudit.privacy.audit_procedures`, as the full
audit was. Torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from dpaudit import _validate as v

# The bound computations the full audit ran, so that the last prefix reproduces its result.
from dpaudit.privacy.audit_procedures import one_run_bound, scores_bound
from dpaudit.privacy.audit_stats import (
    default_guess_counts,
)
from dpaudit.results.audit import (
    AuditResult,
    EpsilonByTrials,
)
from dpaudit.results.audit_details import OneRunDetails, ScoresDetails

__all__ = ["epsilon_lb_by_trials"]


def _prefix_sizes(total: int, smallest: int, num_points: int) -> list[int]:
    """Up to ``num_points`` prefix sizes from ``smallest`` to ``total``, evenly spaced on a log scale."""
    if total <= smallest:
        return [total]
    return sorted({int(round(x)) for x in np.geomspace(smallest, total, num_points)} | {total})


def epsilon_lb_by_trials(
    result: AuditResult, scores: Mapping[str, np.ndarray], *, num_points: int = 10
) -> EpsilonByTrials | None:
    """ε_LB and its ceiling recomputed on growing prefixes of an audit's stored scores.

    Each prefix is audited as the full audit was (same bound, threshold strategy and candidate
    count, confidence, δ, group size; for one-run the same guess counts scaled to the prefix's m),
    so the last point is the result's own ε_LB and ceiling. The observations are taken in the
    order they were stored (trial, step or canary index): their order is independent of the
    scores, so a prefix is a smaller audit of the same kind.

    Args:
        result: the stored audit result.
        scores: its ``scores.npz`` (``in_scores``/``out_scores``, or ``scores``/``included`` for
            one-run).
        num_points: prefixes to compute (≥ 2).

    Returns:
        The curve, or ``None`` when the scores are not ones this function can prefix (no IN or no
        OUT observations, or keys of another game).
    """
    if not isinstance(result, AuditResult):
        raise v.invalid_type("result", f"result must be an AuditResult, got {type(result).__name__}")
    points = v.integer("num_points", num_points, minimum=2)
    d = result.details
    rows: list[tuple[int, int, int, float, float]] = []
    if result.method == "one-run":
        if "scores" not in scores or "included" not in scores:
            return None
        s_all = np.asarray(scores["scores"], dtype=float).reshape(-1)
        inc_all = np.asarray(scores["included"], dtype=bool).reshape(-1)
        m = s_all.size
        if m < 2 or inc_all.size != m:
            return None
        # Results stored before the bound's name, the k grid and the seed were recorded (or with
        # no one-run details at all) used the defaults.
        one = d if isinstance(d, OneRunDetails) else None
        bound = (one and one.one_run_bound) or ("fdp" if result.bound == "one-run-fdp" else "steinke")
        curve = ((one and one.tradeoff_curve) or "gaussian") if bound == "fdp" else "gaussian"
        q = (1.0 if one is None or one.sampling_rate is None else one.sampling_rate) if bound == "fdp" else 1.0
        stored = [int(k) for k in ((one and one.guess_counts) or default_guess_counts(m))]
        seed = (one and one.tie_break_seed) or 0
        for n in _prefix_sizes(m, min(10, m), points):
            counts = sorted({min(n // 2, max(1, round(k * n / m))) for k in stored})
            s, inc = s_all[:n], inc_all[:n]
            eps, _, _, _, ceiling = one_run_bound(
                s,
                inc,
                delta=result.delta,
                confidence=result.confidence,
                counts=counts,
                bound=bound,
                curve=curve,
                sampling_rate=q,
                seed=seed,
            )
            rows.append((n, int(inc.sum()), int((~inc).sum()), eps, ceiling))
        unit = "canaries"
    else:
        if "in_scores" not in scores or "out_scores" not in scores:
            return None
        s_in = np.asarray(scores["in_scores"], dtype=float).reshape(-1)
        s_out = np.asarray(scores["out_scores"], dtype=float).reshape(-1)
        if s_in.size == 0 or s_out.size == 0 or result.bound not in ("clopper-pearson", "gdp"):
            return None
        # Results stored without IN/OUT details were audited with the defaults.
        scored = d if isinstance(d, ScoresDetails) else None
        num_thresholds = 20 if scored is None else scored.num_thresholds
        split_seed = 0 if scored is None or scored.split_seed is None else scored.split_seed
        fixed = None if scored is None else scored.threshold
        if result.threshold_strategy == "fixed" and fixed is None:
            return None  # the threshold it was audited at is not recorded
        least = 2 if result.threshold_strategy == "split" else 1
        if min(s_in.size, s_out.size) < least:
            return None
        total = s_in.size + s_out.size
        for n in _prefix_sizes(total, min(total, max(2 * least, 10)), points):
            frac = n / total
            n_in, n_out = max(least, round(frac * s_in.size)), max(least, round(frac * s_out.size))
            tb, ceiling = scores_bound(
                s_in[:n_in],
                s_out[:n_out],
                delta=result.delta,
                confidence=result.confidence,
                bound=result.bound,
                strategy=result.threshold_strategy,
                num_thresholds=num_thresholds,
                group_size=result.group_size,
                seed=split_seed,
                threshold=fixed if result.threshold_strategy == "fixed" else None,
            )
            rows.append((n_in + n_out, n_in, n_out, tb.epsilon_lb, ceiling))
        unit = "steps" if result.method == "white-box" else "trials"
    rows = [row for i, row in enumerate(rows) if i == 0 or row[0] > rows[i - 1][0]]
    return EpsilonByTrials(
        unit=unit,
        num_observations=tuple(r[0] for r in rows),
        num_in=tuple(r[1] for r in rows),
        num_out=tuple(r[2] for r in rows),
        epsilon_lb=tuple(r[3] for r in rows),
        ceiling=tuple(r[4] for r in rows),
    )
