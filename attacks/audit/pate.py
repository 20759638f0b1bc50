"""The audit game of a PATE aggregator: one query, answered many times on neighbouring votes.

PATE's guarantee is about the noisy answers (Papernot et al. 2017, §3; 2018, §4): two vote
histograms that differ by ONE teacher's vote — one count lowered by one, another raised by one —
must give answer distributions within the aggregator's per-query (ε, δ). The game draws many
independent noisy answers on each histogram, counts every possible output (a label, or ⊥ when
Confident-GNMax declines), and turns the counts into an empirical lower bound ε_LB at a stated
confidence with the Clopper–Pearson test of :func:`dpaudit.privacy.audit_stats.epsilon_lb_from_counts`
(Kairouz, Oh & Viswanath 2015, Thm 2.1; Jagielski et al. 2020). Each candidate event
"answer == j" / "answer is ⊥" is tested in both directions (the bound also uses the event's
complement), and the confidence is split over all of them (Bonferroni), so picking the best
event after the fact costs what it should. A correct aggregator then has ε_LB ≤ ε_UB at the
stated confidence; an implementation that gets its noise wrong is caught when ε_LB > ε_UB.

The upper bound is the aggregator's per-query claim, from :mod:`dpaudit.privacy.pate` through
the :class:`~dpaudit.privacy.pate.claim.PATEClaim` of one answered query — never re-derived here:

- LNMax, Laplace scale b: pure (2/b, 0)-DP (:func:`~dpaudit.privacy.pate.mechanisms.lnmax_epsilon_per_query`;
  one teacher moves two counts, ``docs/defenses/pate.md`` §6), beside the moments bound of the 2017 analysis;
- GNMax, σ: the data-independent RDP λ/σ² (2018, Prop. 8) converted at δ;
- Confident-GNMax: the threshold step's λ/(2σ1²) plus GNMax's λ/σ2² for the answered query.

Every valid conversion is a valid upper bound; the result keeps each (standard and improved
RDP conversion, pure ε for LNMax) and is set against the tightest, as
:meth:`~dpaudit.privacy.claims.PrivacyClaim.upper_bound` does.

The aggregator is passed in (``aggregate_fn(votes, config, seed=...)``, the signature of
``defenses.pate.aggregators.aggregate``): attacks never import defenses (docs/architecture.md, "Import
rule"); the command line wires the real or a planted aggregator in. Torch-free (NumPy/SciPy).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from dpaudit import _validate as v
from dpaudit.privacy.audit_procedures import audit_ceiling
from dpaudit.privacy.audit_stats import epsilon_from_rates, epsilon_lb_from_counts
from dpaudit.privacy.pate import analysis as pate_analysis
from dpaudit.privacy.pate import claim as pate_claim
from dpaudit.privacy.pate import mechanisms
from dpaudit.results.audit import AuditResult
from dpaudit.results.audit_details import PateAuditDetails
from dpaudit.seeding import derive_seed

__all__ = [
    "AGGREGATOR_NAMES",
    "AggregateFn",
    "NeighbouringVotes",
    "PerQueryBound",
    "neighbouring_votes",
    "per_query_upper_bound",
    "answer_counts",
    "pate_audit",
]

AGGREGATOR_NAMES = ("lnmax", "gnmax", "confident-gnmax")
#: The parameters each aggregator's config states (as ``config.to_dict()`` names them).
_PARAMETERS = {
    "lnmax": ("laplace_scale",),
    "gnmax": ("sigma",),
    "confident-gnmax": ("threshold", "threshold_sigma", "sigma"),
}
#: Rows of noise drawn per call of the aggregator: bounds memory (rows × classes floats) at ~4M draws.
_DRAWS_PER_CHUNK = 1 << 22


class _Answers(Protocol):
    @property
    def labels(self) -> np.ndarray: ...

    @property
    def answered(self) -> np.ndarray: ...


class _Config(Protocol):
    def to_dict(self) -> Mapping[str, object]: ...


class AggregateFn(Protocol):
    """``aggregate(votes, config, *, seed) -> Aggregation``: one noisy answer per row of ``votes``."""

    def __call__(self, votes: Any, config: Any, *, seed: int) -> _Answers: ...


def _parameters(config: _Config) -> tuple[str, dict[str, float]]:
    """(aggregator name, its noise parameters) from an aggregator config's ``to_dict()``."""
    to_dict = getattr(config, "to_dict", None)
    if not callable(to_dict):
        raise v.invalid_type(
            "config",
            "config must be an aggregator config (LNMaxConfig, GNMaxConfig or "
            f"ConfidentGNMaxConfig), got {type(config).__name__}",
        )
    data = dict(to_dict())
    name = v.choice("aggregator", data.get("aggregator"), AGGREGATOR_NAMES)
    params = {k: v.real(k, data.get(k)) for k in _PARAMETERS[name]}
    return name, params


@dataclass(frozen=True, kw_only=True)
class NeighbouringVotes:
    """The two vote histograms of the game; ``moved`` = D − D' (one teacher changed its vote).

    Attributes:
        votes: D, int64 ``(classes,)``.
        neighbour: D', int64 ``(classes,)``; D' = D − e_0 + e_1.
        why: the choice in words (kept with the audit result).
    """

    votes: np.ndarray
    neighbour: np.ndarray
    why: str


def neighbouring_votes(
    aggregator: str, *, num_teachers: int, num_classes: int, threshold: float | None = None
) -> NeighbouringVotes:
    """The worst-case pair of histograms for ``aggregator``: D and D' = D − e_0 + e_1.

    One teacher moves its vote from class 0 to class 1, the largest change one teacher can make
    (two counts move, the L1 distance is 2). Where that change matters most:

    - **LNMax / GNMax**: D' ties the top two classes (c, c) and D = (c + 1, c − 1); every other
      class gets the remainder (at most one vote), so it almost never wins. At a tie the
      noisy argmax is as uncertain as it can be, and the shift of the gap from 0 to 2 moves the
      probability of "answer == 0" and "answer == 1" the most in absolute terms, which is what a
      test on finitely many trials can see (a tail event has a larger ratio but is observed too
      rarely to bound). With two classes and an odd number of teachers a tie is impossible; D'
      is then (c + 1, c).
    - **Confident-GNMax**: D's largest count sits exactly at t = ⌈T⌉ and D' lowers it to t − 1,
      so a threshold check without noise answers every query on D and none on D' (the second
      planted bug), and a noisy check with too little noise moves P(answered) across ½. When the
      teachers allow (N ≥ 2t − 2), D = (t, t − 2, rest) and D' = (t − 1, t − 1, rest): the
      GNMax step goes from a gap of 2 to a tie as well, so too little noise in σ2 shows too.
      With T > N/2 + 1 no tie is possible (D = (t, N − t)), and the audit sees mainly the
      threshold step.

    Args:
        aggregator: ``"lnmax"``, ``"gnmax"`` or ``"confident-gnmax"``.
        num_teachers: N ≥ 2.
        num_classes: K ≥ 2.
        threshold: T of Confident-GNMax, 0 < T ≤ N.

    Raises:
        ValueError: too few teachers, a threshold outside (0, N], or N and K that cannot put
            the largest count at T.
    """
    name = v.choice("aggregator", aggregator, AGGREGATOR_NAMES)
    n = v.integer("num_teachers", num_teachers, minimum=2)
    k = v.integer("num_classes", num_classes, minimum=2)
    d = np.zeros(k, dtype=np.int64)
    if name != "confident-gnmax":
        c = n // 2
        rest = n - 2 * c
        d[0], d[1] = c + 1, c - 1
        if rest and k >= 3:
            d[2] = rest
            why = (
                f"D' ties the top two classes at {c} votes (one vote on class 2), D = D' "
                "with one teacher moved from class 1 to class 0"
            )
        else:
            d[0] += rest
            why = (
                f"{n} teachers in two classes cannot tie: D' = ({c + rest}, {c}), D = D' "
                "with one teacher moved from class 1 to class 0"
            )
    else:
        if threshold is None:
            raise v.invalid("threshold", "threshold must be given for confident-gnmax")
        t_real = v.positive("threshold", threshold)
        if t_real > n:
            raise v.invalid(
                "threshold",
                f"threshold must be <= num_teachers ({n}) so the largest count can sit at T, got {threshold!r}",
            )
        t = math.ceil(t_real)
        if t < 2:
            raise v.invalid(
                "threshold",
                "threshold must be > 1 so that D' (largest count T - 1) keeps a vote on "
                f"its top class, got {threshold!r}",
            )
        if n >= 2 * t - 2:
            rest = n - (2 * t - 2)
            spare = k - 2
            # The other classes must stay below t − 1 so that D's maximum is t and D''s is t − 1.
            if rest and (spare == 0 or -(-rest // spare) > t - 2):
                raise v.invalid(
                    "threshold",
                    f"threshold={threshold!r} is too low for num_teachers={n} in "
                    f"num_classes={k}: the largest count cannot sit at T (raise the "
                    "threshold or the number of classes)",
                )
            d[0], d[1] = t, t - 2
            if rest:
                d[2:] = rest // spare
                d[2 : 2 + rest % spare] += 1
            why = (
                f"D's largest count is at T ({t}) and its runner-up at T - 2; D' (one "
                "teacher moved from class 0 to class 1) ties them at T - 1: both steps "
                "move"
            )
        else:
            d[0], d[1] = t, n - t
            why = (
                f"D's largest count is at T ({t}); D' (one teacher moved from class 0 to "
                "class 1) lowers it to T - 1; with T > N/2 + 1 the GNMax step stays far "
                "from a tie"
            )
    neighbour = d.copy()
    neighbour[0] -= 1
    neighbour[1] += 1
    for arr in (d, neighbour):
        arr.setflags(write=False)
    return NeighbouringVotes(votes=d, neighbour=neighbour, why=why)


@dataclass(frozen=True, kw_only=True)
class PerQueryBound:
    """The aggregator's claimed per-query ε_UB at δ.

    Attributes:
        epsilon: the tightest of ``by_accountant``.
        accountant: the name of the tightest (``"pure"``, ``"rdp"`` or ``"rdp-improved"``).
        by_accountant: every bound: ``"rdp"`` (the claim's standard conversion), ``"rdp-improved"``
            (Balle et al. 2020) and, for LNMax, ``"pure"`` (2/b).
        claim: the :class:`~dpaudit.privacy.pate.claim.PATEClaim` of one answered query, data-independent.
    """

    epsilon: float
    accountant: str
    by_accountant: Mapping[str, float]
    claim: Any


def per_query_upper_bound(config: _Config, *, delta: float, votes: Any) -> PerQueryBound:
    """ε_UB of one answered query of the aggregator ``config`` describes (data-independent).

    Args:
        config: an aggregator config (its ``to_dict()`` names the aggregator and its noise).
        delta: δ of the bound.
        votes: one query's histogram (the data-independent bound does not depend on it; the
            analysis functions want a valid vote row).
    """
    name, params = _parameters(config)
    d = v.open_unit("delta", delta)
    row = np.asarray(votes)[None, :]
    if name == "lnmax":
        analysis = pate_analysis.analyze_lnmax(row, laplace_scale=params["laplace_scale"], delta=d)
    elif name == "gnmax":
        analysis = pate_analysis.analyze_gnmax(row, sigma=params["sigma"], delta=d)
    else:
        analysis = pate_analysis.analyze_confident_gnmax(
            row,
            threshold=params["threshold"],
            threshold_sigma=params["threshold_sigma"],
            sigma=params["sigma"],
            delta=d,
            answered=np.ones(1, dtype=bool),
        )
    claim = pate_claim.pate_claim(analysis, parameters=params, num_answered=1, data_dependent=False)
    by = {"rdp": claim.epsilon(delta=d), "rdp-improved": claim.epsilon_improved(delta=d)}
    if name == "lnmax":
        by["pure"] = mechanisms.lnmax_epsilon_per_query(laplace_scale=params["laplace_scale"])
    best = min(by, key=by.__getitem__)
    return PerQueryBound(epsilon=by[best], accountant=best, by_accountant=by, claim=claim)


def answer_counts(aggregate_fn: AggregateFn, config: Any, votes: np.ndarray, *, trials: int, seed: int) -> np.ndarray:
    """How often each output occurs over ``trials`` independent answers to the query ``votes``.

    The trials are rows of one vote matrix (every row the same histogram), so each call of the
    aggregator draws a whole block of noise at once; blocks of at most ~4M draws keep memory
    flat, each on its own seed stream.

    Returns:
        int64 ``(classes + 1,)``: counts of label 0 … K − 1, then of ⊥ (not answered).
    """
    n = v.integer("trials", trials, minimum=1)
    row = np.asarray(votes, dtype=np.int64)
    k = row.shape[0]
    per_chunk = max(1, _DRAWS_PER_CHUNK // (k + 1))
    counts = np.zeros(k + 1, dtype=np.int64)
    done, chunk = 0, 0
    while done < n:
        rows = min(per_chunk, n - done)
        out = aggregate_fn(np.broadcast_to(row, (rows, k)), config, seed=derive_seed(seed, "pate-audit", chunk))
        labels, answered = np.asarray(out.labels), np.asarray(out.answered, dtype=bool)
        if labels.shape != (rows,) or answered.shape != (rows,):
            raise v.invalid(
                "aggregate_fn", f"aggregate_fn must answer every row: expected {rows} labels, got shape {labels.shape}"
            )
        outcome = np.where(answered, labels, k)
        if outcome.size and (outcome.min() < 0 or outcome.max() > k):
            raise v.invalid("aggregate_fn", f"aggregate_fn returned a label outside [0, {k}) for an answered query")
        counts += np.bincount(outcome, minlength=k + 1)
        done += rows
        chunk += 1
    return counts


def _raw_ratio(tp: int, fp: int, n: int, delta: float) -> float:
    """The test's ε on the raw frequencies, kept finite by a half-count continuity correction."""
    lo, hi = 0.5 / n, 1.0 - 0.5 / n
    return epsilon_from_rates(tpr=min(max(tp / n, lo), hi), fpr=min(max(fp / n, lo), hi), delta=delta)


def pate_audit(
    aggregate_fn: AggregateFn,
    config: Any,
    *,
    num_teachers: int = 250,
    num_classes: int = 10,
    trials: int = 100_000,
    delta: float = 1e-5,
    confidence: float = 0.95,
    seed: int = 0,
    details: Mapping[str, object] | None = None,
) -> AuditResult:
    """Plays the neighbouring-votes game against ``aggregate_fn`` and sets ε_LB against the per-query ε_UB.

    Args:
        aggregate_fn: the aggregator under audit, ``aggregate_fn(votes, config, *, seed)``
            returning an object with ``labels`` and ``answered`` (one per row).
        config: the aggregator's config, as documented (the claim is made from it, whatever
            ``aggregate_fn`` really does).
        num_teachers: N, teachers voting.
        num_classes: K.
        trials: answers drawn on each of D and D'.
        delta: δ of both bounds.
        confidence: joint confidence of ε_LB over every candidate event.
        seed: root seed (D and D' draw on separate streams).
        details: the caller's JSON-able context to keep (e.g. the planted bug's name;
            the ``context`` of :class:`~dpaudit.results.audit_details.PateAuditDetails`).

    Returns:
        An :class:`~dpaudit.results.audit.AuditResult` (``method="multi-run"``,
        ``bound="clopper-pearson"``, ``threshold_strategy="bonferroni"``, ``num_in`` =
        ``num_out`` = ``trials``); ``violation`` is ε_LB > ε_UB. ``epsilon_estimate`` is the
        selected event's ratio on the raw frequencies, with a half-count continuity correction
        (an estimate, not a bound).

    Raises:
        ValueError / TypeError: a bad argument, named with its value.
    """
    name, params = _parameters(config)
    n = v.integer("trials", trials, minimum=1)
    d = v.open_unit("delta", delta)
    conf = v.open_unit("confidence", confidence)
    root = v.integer("seed", seed, minimum=0)
    pair = neighbouring_votes(
        name, num_teachers=num_teachers, num_classes=num_classes, threshold=params.get("threshold")
    )
    upper = per_query_upper_bound(config, delta=d, votes=pair.votes)
    on_d = answer_counts(aggregate_fn, config, pair.votes, trials=n, seed=derive_seed(root, "D"))
    on_neighbour = answer_counts(aggregate_fn, config, pair.neighbour, trials=n, seed=derive_seed(root, "D'"))
    k = pair.votes.shape[0]
    outcomes = list(range(k)) + ([k] if name == "confident-gnmax" else [])
    if name != "confident-gnmax" and (on_d[k] or on_neighbour[k]):
        raise v.invalid("aggregate_fn", f"aggregate_fn left queries unanswered, which {name} never does")
    # Each outcome in both directions; the set is fixed before looking at the counts.
    num_tests = 2 * len(outcomes)
    best = (0.0, "none", 0, 0)
    best_raw, any_raw = 0.0, 0.0
    for o in outcomes:
        label = "not answered" if o == k else f"answer == {o}"
        for first, second, direction in ((on_d, on_neighbour, "D over D'"), (on_neighbour, on_d, "D' over D")):
            tp, fp = int(first[o]), int(second[o])
            lb = epsilon_lb_from_counts(
                true_positives=tp,
                num_in=n,
                false_positives=fp,
                num_out=n,
                delta=d,
                confidence=conf,
                num_tests=num_tests,
            )
            raw = _raw_ratio(tp, fp, n, d)
            if min(tp, fp) >= 10:  # a handful of rare answers says nothing about the ratio
                any_raw = max(any_raw, raw)
            if lb > best[0]:
                best, best_raw = (lb, f"{label} ({direction})", tp, fp), raw
    # The estimate is the selected event's ratio; with none selected, the largest raw ratio of
    # an event seen at least 10 times on each side.
    estimate = best_raw if best[0] > 0 else any_raw
    info = PateAuditDetails(
        game="PATE aggregator, one query answered on neighbouring vote histograms (one teacher's vote changed)",
        aggregator=name,
        parameters=params,
        num_teachers=int(num_teachers),
        num_classes=int(num_classes),
        votes=pair.votes.tolist(),
        neighbour_votes=pair.neighbour.tolist(),
        choice_of_votes=pair.why,
        outputs=(*(str(j) for j in range(k)), "not answered"),
        counts=on_d.tolist(),
        neighbour_counts=on_neighbour.tolist(),
        event=best[1],
        true_positives=best[2],
        false_positives=best[3],
        num_tests=num_tests,
        seed=root,
        estimate_kind="the selected event's ratio on the raw frequencies (an estimate, not a bound)",
        context=details or {},
    )
    return AuditResult(
        epsilon_lb=best[0],
        ceiling=audit_ceiling(
            bound="clopper-pearson", delta=d, confidence=conf, num_in=n, num_out=n, num_tests=num_tests
        ),
        confidence=conf,
        method="multi-run",
        bound="clopper-pearson",
        delta=d,
        threshold_strategy="bonferroni",
        num_in=n,
        num_out=n,
        epsilon_ub=upper.epsilon,
        accountant=upper.accountant,
        epsilon_ub_by_accountant=upper.by_accountant,
        epsilon_estimate=estimate,
        claim_description=f"one answered query: {upper.claim.statement()}",
        details=info,
    )
