"""The audit game of DSSGD's upload: a canary in one participant's data, watched by the server.

Distributed selective SGD (Shokri & Shmatikov, CCS 2015) lets every participant upload a
selection of its Δw; the DP variant (§5) selects with the sparse vector technique and releases
Laplace-noised values, claiming ε *per uploaded parameter per turn*. What one turn really
spends on the participant's data is the composition over its c uploads (c·ε, see
:class:`dpaudit.privacy.dssgd.DSSGDClaim`); this game measures how much of that an adversary
sitting at the server can actually see.

The canary (:func:`pixel_canary`) is an input that is zero everywhere except on the input
positions that are zero across the participant's whole partition (for MNIST and 8×8 digits,
the border pixels), where it is 1. In a model whose first layer is ``Linear``, the gradient of
weight[j, p] is (∂loss/∂z_j)·x_p, so the weights attached to those positions change in a turn
*only* through the canary: without it their Δw is exactly 0 (plain SGD, no weight decay). The
server therefore knows which flat coordinates to look at (:func:`canary_coordinates`).

:func:`dssgd_upload_audit` runs independent turns with and without the canary, scores each by
what the server sees at those coordinates, and bounds ε from the scores with
:func:`dpaudit.privacy.audit_procedures.audit_from_scores` (Jagielski et al. 2020; Nasr et al. 2021): ε_LB
is set against the claim of ONE turn (c uploads composed) and reported beside the paper's
per-parameter ε, so a result reads "ε_LB vs per-turn ε_UB vs per-parameter ε".

Bound: ``clopper-pearson``. The DP upload is a pure-ε mechanism built from Laplace noise and a
sparse-vector test; its trade-off curve is not Gaussian, so the GDP bound (which fits μ-GDP
curves and is exact only for Gaussian mechanisms) would rest on an assumption the mechanism
does not meet. Clopper–Pearson intervals on the two error rates assume nothing about the
mechanism (Kairouz, Oh & Viswanath 2015, Thm 2.1).

The turn is passed in as a function (``turn_fn``): attacks never import defenses (docs/architecture.md,
"Import rule"); the application layer wires ``defenses.dssgd.protocol`` into it.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from dpaudit import _validate as v
from dpaudit.privacy.audit_procedures import audit_from_scores
from dpaudit.privacy.claims import PrivacyClaim
from dpaudit.results.audit import AuditResult
from dpaudit.results.audit_details import ScoresDetails, UploadAuditDetails
from dpaudit.seeding import derive_seed

__all__ = [
    "STATISTICS",
    "Canary",
    "TurnFn",
    "pixel_canary",
    "canary_coordinates",
    "upload_scores",
    "dssgd_upload_audit",
]

#: What the server may compute from one upload at the canary coordinates (both are tried; the
#: confidence is split between them, Bonferroni):
#: ``count`` — how many canary coordinates were uploaded (what the selection leaks);
#: ``abs-sum`` — the sum of |uploaded value| over them (selection and released values together).
STATISTICS: tuple[str, ...] = ("count", "abs-sum")


@dataclass(frozen=True, kw_only=True, eq=False)
class Canary:
    """An input planted in one participant's data that the server can look for.

    Attributes:
        features: the canary input, shaped like one example of the partition.
        label: its label.
        positions: the flat input positions it lights up (sorted, int64), those that are
            (near) zero in every example of the partition.
        value: the value of the lit positions.
    """

    features: torch.Tensor
    label: int
    positions: np.ndarray
    value: float

    def __post_init__(self) -> None:
        pos = np.asarray(self.positions, dtype=np.int64).reshape(-1)
        if pos.size == 0:
            raise v.invalid("positions", "positions must name at least one input position, got none")
        pos.setflags(write=False)
        object.__setattr__(self, "positions", pos)


def pixel_canary(
    features: torch.Tensor,
    labels: torch.Tensor,
    *,
    num_classes: int,
    value: float | None = None,
    tolerance: float = 0.0,
) -> Canary:
    """The canary of a partition: ``value`` on every input position that no example uses, 0 elsewhere.

    The default ``value`` is 8 × the partition's largest |x|. A canary as bright as a real pixel
    loses: the weights it moves get one example's gradient, while the weights the largest-values
    rule uploads collect the gradients of the whole partition (on 50 digits at θ_u = 0.1, a
    value of 1 put a canary coordinate in the upload in about 5 % of turns, a value of 8 in all
    of them). An auditor's canary need not look like data.

    A position counts as unused when |x_p| ≤ ``tolerance`` in every example (default: exactly 0,
    so without the canary the first-layer weights on those positions do not move at all). The
    label is the partition's least frequent class (lowest index on ties): deterministic, and the
    one the model is least inclined to predict, so the canary's loss and gradient are large.

    Args:
        features: the participant's inputs, ``(n, ...)``.
        labels: their labels, ``(n,)``.
        num_classes: number of classes.
        value: the value of the lit positions (> 0); ``None``: 8 × max |x| of ``features``.
        tolerance: the largest |x_p| still counted as unused (≥ 0).

    Raises:
        ValueError: an empty partition, labels that do not match, no unused position, or a bad
            ``num_classes``/``value``/``tolerance`` (named, with its value).
    """
    if not isinstance(features, torch.Tensor) or not isinstance(labels, torch.Tensor):
        raise v.invalid_type(
            "features",
            f"features and labels must be torch tensors, got {type(features).__name__} and {type(labels).__name__}",
        )
    k = v.integer("num_classes", num_classes, minimum=2)
    tolerance = v.non_negative("tolerance", tolerance)
    if features.ndim < 2 or len(features) == 0:
        raise v.invalid("features", f"features must be a non-empty batch (n, ...), got shape {tuple(features.shape)}")
    if labels.shape != (len(features),):
        raise v.invalid("labels", f"labels must have shape ({len(features)},), got {tuple(labels.shape)}")
    flat = features.detach().reshape(len(features), -1).abs().amax(dim=0).cpu()
    value = v.positive("value", 8.0 * float(flat.max()) if value is None else value)
    positions = torch.nonzero(flat <= tolerance).flatten().numpy().astype(np.int64)
    if positions.size == 0:
        raise v.invalid(
            "features",
            f"features have no input position with |x| <= tolerance={tolerance!r} in "
            "every example; raise tolerance or use another canary",
        )
    counts = torch.bincount(labels.detach().cpu().to(torch.int64), minlength=k)
    if counts.numel() > k:
        raise v.invalid("labels", f"labels must lie in [0, {k}) for num_classes={k}, got a label {int(labels.max())}")
    label = int(torch.argmin(counts))  # argmin returns the first minimum: lowest index on ties
    canary = torch.zeros(features.shape[1:], dtype=features.dtype)
    canary.view(-1)[torch.from_numpy(positions)] = value
    return Canary(features=canary, label=label, positions=positions, value=value)


def canary_coordinates(model: nn.Module, canary: Canary) -> np.ndarray:
    """Flat parameter positions of weight[:, p] of the first ``Linear`` layer for every lit p.

    The flat layout is the concatenation of ``model.parameters()`` flattened in order (the one
    DSSGD's server uses). The first ``Linear`` module in ``model.modules()`` order must take the
    flattened input (``in_features`` = the canary's size): only then does its weight[j, p] see
    exactly input position p.

    Raises:
        ValueError: no ``Linear`` layer, or a first ``Linear`` layer that does not read the input
            (``in_features`` differs from the canary's size), or a lit position outside it.
    """
    if not isinstance(canary, Canary):
        raise v.invalid_type("canary", f"canary must be a Canary, got {type(canary).__name__}")
    first = next((m for m in model.modules() if isinstance(m, nn.Linear)), None)
    if first is None:
        raise v.invalid(
            "model", f"model must contain an nn.Linear layer reading the input, got {type(model).__name__} without one"
        )
    size = canary.features.numel()
    if first.in_features != size:
        raise v.invalid(
            "model",
            f"model's first Linear layer must read the flattened input ({size} "
            f"features), got in_features={first.in_features}",
        )
    if int(canary.positions.max()) >= size:
        raise v.invalid("canary", f"canary positions must lie in [0, {size}), got {int(canary.positions.max())}")
    offset = 0
    for p in model.parameters():
        if p is first.weight:
            break
        offset += p.numel()
    rows = np.arange(first.out_features, dtype=np.int64)[:, None]
    # weight is (out_features, in_features), flattened row-major: weight[j, p] sits at j·in + p.
    coords = offset + rows * first.in_features + canary.positions[None, :]
    return np.sort(coords.reshape(-1))


class TurnFn(Protocol):
    """One participant turn as the server sees it: ``(indices, values)`` of its upload.

    ``include_canary`` adds the canary to the participant's partition for this turn; ``seed``
    fixes every random choice of the turn (batch order, selection, noise), so distinct seeds
    give independent turns.
    """

    def __call__(self, *, include_canary: bool, seed: int) -> tuple[Any, Any]: ...


def upload_scores(indices: Any, values: Any, coordinates: np.ndarray) -> dict[str, float]:
    """Every statistic of :data:`STATISTICS` for one upload, at the sorted ``coordinates``.

    Raises:
        ValueError: ``indices`` and ``values`` are not vectors of one length, or a value is not finite.
    """
    idx = np.asarray(indices.detach().cpu() if isinstance(indices, torch.Tensor) else indices).reshape(-1)
    val = np.asarray(values.detach().cpu() if isinstance(values, torch.Tensor) else values, dtype=np.float64).reshape(
        -1
    )
    if idx.shape != val.shape:
        raise v.invalid(None, f"upload indices and values must be vectors of one length, got {idx.size} and {val.size}")
    if not np.isfinite(val).all():
        raise v.invalid(None, "upload values must be finite, got NaN or infinite entries")
    hit = np.isin(idx.astype(np.int64), coordinates, assume_unique=False)
    return {"count": float(hit.sum()), "abs-sum": float(np.abs(val[hit]).sum())}


def _candidates(s_in: list[float], s_out: list[float], num_thresholds: int) -> int:
    """The ``num_thresholds`` to pass :func:`audit_from_scores` for one statistic.

    Candidate thresholds are quantiles of the pooled scores. Without the canary the canary
    coordinates are rarely uploaded, so most pooled scores are tied at 0, and the quantiles
    would all land on 0 or on the maximum, missing the one test that matters ("any canary
    coordinate uploaded"). A statistic with at most ``num_thresholds`` distinct pooled values is
    therefore tested at every one of them (asking for as many thresholds as scores makes the
    bound use each distinct value, and Bonferroni pays for exactly those); otherwise at
    ``num_thresholds`` quantiles. The choice looks at the pooled scores only, never at which
    side a score came from.
    """
    pooled = np.asarray(s_in + s_out)
    return pooled.size if np.unique(pooled).size <= num_thresholds else num_thresholds


def _one_turn_claim(claim: PrivacyClaim) -> PrivacyClaim:
    if not isinstance(claim, PrivacyClaim):
        raise v.invalid_type("claim", f"claim must be a PrivacyClaim, got {type(claim).__name__}")
    rounds = getattr(claim, "num_rounds", None)
    if rounds is not None and rounds != 1:
        raise v.invalid(
            "claim",
            "claim must be the claim of ONE turn (num_rounds=1), got "
            f"num_rounds={rounds!r}; pass dataclasses.replace(claim, num_rounds=1, "
            "description='')",
        )
    return claim


def _play_turns(
    turn_fn: TurnFn, coords: np.ndarray, *, trials: int, seed: int, progress: bool
) -> dict[bool, dict[str, list[float]]]:
    """Plays ``trials`` turns, the first half with the canary (IN) and the rest without; each upload's statistics by
    side."""
    n, started = trials, time.monotonic()
    n_in = n // 2
    plan = [(True, i) for i in range(n_in)] + [(False, i) for i in range(n - n_in)]
    scores: dict[bool, dict[str, list[float]]] = {flag: {s: [] for s in STATISTICS} for flag in (True, False)}
    step = max(1, n // 10)
    for k, (flag, i) in enumerate(plan):
        # Distinct named streams per side and trial: every turn is independent of every other.
        turn_seed = derive_seed(seed, "dssgd-audit", "in" if flag else "out", i)
        indices, values = turn_fn(include_canary=flag, seed=turn_seed)
        for name, s in upload_scores(indices, values, coords).items():
            scores[flag][name].append(s)
        if progress and ((k + 1) % step == 0 or k + 1 == n):
            print(f"dssgd upload audit: {k + 1}/{n} turns ({time.monotonic() - started:.1f} s)", file=sys.stderr)
    return scores


def dssgd_upload_audit(
    *,
    turn_fn: TurnFn,
    coordinates: Any,
    trials: int,
    claim: PrivacyClaim,
    delta: float,
    confidence: float = 0.95,
    seed: int = 0,
    num_thresholds: int = 20,
    progress: bool = False,
    details: Mapping[str, object] | None = None,
) -> AuditResult:
    """ε_LB of one DSSGD turn from the server's view of the canary coordinates.

    Runs ``trials`` independent turns, half with the canary in the partition (IN) and half
    without (OUT), on seeds derived from ``seed``. Each upload is scored by every statistic of
    :data:`STATISTICS`; for each, :func:`~dpaudit.privacy.audit_procedures.audit_from_scores` bounds ε with
    Clopper–Pearson intervals at confidence 1 − (1 − ``confidence``)/2, paying Bonferroni over
    its ``num_thresholds`` candidate thresholds. The larger of the two bounds then holds at
    ``confidence`` (the statistic is chosen after the fact, so the confidence is split over
    both), and that is the result's ε_LB.

    Args:
        turn_fn: one participant turn (:class:`TurnFn`).
        coordinates: the flat parameter positions the canary alone moves (:func:`canary_coordinates`).
        trials: turns in all (≥ 2); ``trials // 2`` IN, the rest OUT.
        claim: the claim of ONE turn (for DP-DSSGD, a ``dssgd-svt`` claim with
            ``num_rounds=1``: c uploads composed); its ε_UB is what ε_LB is set against.
        delta: δ of both bounds.
        confidence: confidence of ε_LB, in (0, 1).
        seed: root seed of the turns.
        num_thresholds: candidate thresholds per statistic (Bonferroni factor).
        progress: report progress on stderr.
        details: the caller's context to keep with the result (the ``context`` of
            :class:`~dpaudit.results.audit_details.UploadAuditDetails`).

    Returns:
        The :class:`AuditResult` (``method`` and ``threat_model`` ``white-box``: one observation
        per released upload). ``details`` holds the chosen statistic, each statistic's ε_LB,
        ``epsilon_per_parameter`` (the paper's figure, when the claim states one) and whether
        ε_LB exceeds it, the per-turn ε_UB, the canary coordinates' count and the IN/OUT rates
        of uploading any canary coordinate.

    Raises:
        ValueError: ``trials`` < 2, empty ``coordinates``, ``confidence`` or ``delta`` outside
            (0, 1), a claim of more than one turn, or an upload that is not a pair of vectors.
    """
    if not callable(turn_fn):
        raise v.invalid_type("turn_fn", f"turn_fn must be callable, got {type(turn_fn).__name__}")
    n = v.integer("trials", trials, minimum=2)
    coords = np.unique(np.asarray(coordinates).reshape(-1))
    if coords.size == 0:
        raise v.invalid("coordinates", "coordinates must name at least one parameter position, got none")
    if not np.issubdtype(coords.dtype, np.integer) or int(coords.min()) < 0:
        raise v.invalid(
            "coordinates",
            "coordinates must be non-negative integer positions, got dtype "
            f"{coords.dtype} with minimum {coords.min()!r}",
        )
    coords = coords.astype(np.int64)
    confidence = v.open_unit("confidence", confidence)
    delta = v.open_unit("delta", delta)
    seed = v.integer("seed", seed, minimum=0)
    v.integer("num_thresholds", num_thresholds, minimum=1)
    claim = _one_turn_claim(claim)

    started = time.monotonic()
    scores = _play_turns(turn_fn, coords, trials=n, seed=seed, progress=progress)
    seconds = time.monotonic() - started

    per_stat = 1.0 - (1.0 - confidence) / len(STATISTICS)
    results = {
        name: audit_from_scores(
            scores[True][name],
            scores[False][name],
            claim=claim,
            delta=delta,
            confidence=per_stat,
            method="white-box",
            bound="clopper-pearson",
            num_thresholds=_candidates(scores[True][name], scores[False][name], num_thresholds),
            threat_model="white-box",
        )
        for name in STATISTICS
    }
    best = max(STATISTICS, key=lambda s: results[s].epsilon_lb)  # ties: the first (count)
    chosen = results[best]
    per_parameter = getattr(claim, "epsilon_per_parameter", None)
    hit_in = float(np.mean(np.asarray(scores[True]["count"]) > 0))
    hit_out = float(np.mean(np.asarray(scores[False]["count"]) > 0))
    scored = chosen.details
    if not isinstance(scored, ScoresDetails):
        raise TypeError(f"audit_from_scores must return ScoresDetails, got {type(scored).__name__}")
    info = UploadAuditDetails(
        threshold=scored.threshold,
        true_positives=scored.true_positives,
        false_positives=scored.false_positives,
        bounding_num_in=scored.bounding_num_in,
        bounding_num_out=scored.bounding_num_out,
        num_tests=scored.num_tests,
        num_thresholds=scored.num_thresholds,
        split_seed=scored.split_seed,
        estimate_kind=scored.estimate_kind,
        estimate_interval=scored.estimate_interval,
        estimate_interval_confidence=scored.estimate_interval_confidence,
        statistic=best,
        statistics=STATISTICS,
        epsilon_lb_by_statistic={s: results[s].epsilon_lb for s in STATISTICS},
        confidence_per_statistic=per_stat,
        epsilon_ub_per_turn=chosen.epsilon_ub,
        epsilon_per_parameter=None if per_parameter is None else float(per_parameter),
        exceeds_per_parameter=None if per_parameter is None else bool(chosen.epsilon_lb > float(per_parameter)),
        uploads_per_turn=getattr(claim, "uploads_per_round", None),
        num_canary_coordinates=int(coords.size),
        in_rate_any_canary_coordinate=hit_in,
        out_rate_any_canary_coordinate=hit_out,
        seconds=seconds,
        epsilon_ub_note=None
        if math.isfinite(chosen.epsilon_ub)
        else "the claim states no finite ε (no privacy mechanism)",
        context={**scored.context, **(details or {})},
    )
    # Each statistic's bound holds at per_stat; their maximum holds at ``confidence``.
    # The design's ceiling is the larger of the statistics' ceilings (ε_LB is their maximum).
    return dataclasses.replace(
        chosen, confidence=confidence, details=info, ceiling=max(float(results[s].ceiling or 0.0) for s in STATISTICS)
    )
