"""Membership inference on PATE's noisy aggregator: what its answers reveal about a private example.

PATE releases only the student, but the aggregator's answers are the channel through which the
private data reaches it (Papernot et al. 2018, §2; docs/defenses/pate.md §5: membership attacks on the student
and, for contrast, on single teachers and on the noisy aggregate). This attack queries the
aggregator on each candidate example — a private training example (member: exactly one teacher
trained on it) or a held-out one — and scores it by how often the released answer is its true
label: the label-only "gap" attack (Yeom et al. 2018; Choquette-Choo et al. 2021, "Label-Only
Membership Inference Attacks"), which needs no shadow model and is the strongest generic signal
a label-only output gives. An unanswered query (⊥, Confident-GNMax) scores 0: it says the
teachers disagree, which is evidence against membership.

One teacher moves at most two vote counts by one, so against 250 teachers and σ = 40 the signal
is small; the attack exists to show exactly that (and to catch an aggregator whose noise was
dropped). ``repeats`` answers per example model an attacker who asks the same query many times;
each answer costs privacy, which the record's claim does not cover for repeated queries — so
the ε_LB from ``repeats > 1`` is set against an ε_UB that does not apply, and the result says so.

Torch-free, and free of the defenses (only the application layer wires the two): it takes the
teachers' predicted labels on the candidates (a teachers × examples matrix) and the aggregator
as a function of a vote matrix and a seed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from dpaudit import _validate as v
from dpaudit.results import MembershipResult
from dpaudit.seeding import derive_seed

__all__ = ["ATTACK_NAME", "aggregator_membership"]

#: The attack's name in results and reports.
ATTACK_NAME = "pate-aggregator"


def aggregator_membership(
    *,
    teacher_labels: Any,
    true_labels: Any,
    sample_ids: Any,
    is_member: Any,
    num_classes: int,
    answer: Callable[[np.ndarray, int], np.ndarray],
    config: Mapping[str, object],
    model_id: str,
    repeats: int = 1,
    seed: int = 0,
    metadata: Mapping[str, object] | None = None,
) -> MembershipResult:
    """Scores each candidate by the share of the aggregator's answers that equal its true label.

    Args:
        teacher_labels: int ``(teachers, examples)``, every teacher's label for every candidate.
        true_labels: int ``(examples,)``, the candidates' labels.
        sample_ids: int64 ``(examples,)``, their ids.
        is_member: bool ``(examples,)``, whether a teacher trained on each (the private set).
        num_classes: number of classes.
        answer: the aggregator: ``answer(votes, seed)`` → the released label per row of the
            ``(examples, classes)`` vote matrix, −1 for ⊥ (e.g. ``aggregate(...).labels`` of
            :mod:`defenses.pate.aggregators`, with the noise the record's claim states).
        config: the aggregator's parameters, kept with the result.
        model_id: the record the aggregator belongs to (the student's).
        repeats: independent answers per candidate (1: one query each, what the claim covers).
        seed: root seed of the aggregator's noise.
        metadata: extra facts kept with the result.

    Returns:
        A :class:`dpaudit.results.MembershipResult` named :data:`ATTACK_NAME`.

    Raises:
        ValueError: shapes that do not agree, labels out of range, ``repeats`` < 1.
    """
    preds = np.asarray(teacher_labels)
    if preds.ndim != 2 or preds.shape[1] == 0:
        raise v.invalid(
            "teacher_labels",
            f"teacher_labels must be a (teachers, examples) matrix with at least one example, got shape {preds.shape}",
        )
    n = preds.shape[1]
    labels = np.asarray(true_labels)
    if labels.shape != (n,) or labels.dtype.kind not in "iu" or labels.min() < 0 or labels.max() >= num_classes:
        raise v.invalid(
            "true_labels",
            f"true_labels must hold {n} integer labels in [0, {num_classes}), got "
            f"dtype {labels.dtype} shape {labels.shape}",
        )
    member = np.asarray(is_member)
    if member.shape != (n,) or member.dtype != bool:
        raise v.invalid(
            "is_member",
            f"is_member must be a boolean array of {n} entries, got dtype {member.dtype} shape {member.shape}",
        )
    repeats = v.integer("repeats", repeats, minimum=1)
    seed = v.integer("seed", seed, minimum=0)
    if preds.dtype.kind not in "iu" or preds.min() < 0 or preds.max() >= num_classes:
        raise v.invalid(
            "teacher_labels", f"teacher_labels must be integer labels in [0, {num_classes}), got dtype {preds.dtype}"
        )
    votes = np.zeros((n, num_classes), dtype=np.int64)
    for row in preds:  # one teacher at a time: votes[i, label] += 1
        votes[np.arange(n), row] += 1
    hits = np.zeros(n)
    for r in range(repeats):
        released = np.asarray(
            answer(votes, derive_seed(seed, "pate-aggregator-attack", r))
        )  # independent, reproducible answers
        hits += released == labels
    plurality_correct = votes.argmax(axis=1) == labels
    meta = {
        "repeats": repeats,
        "num_teachers": int(preds.shape[0]),
        "covered_by_claim": repeats == 1,
        "target": "the aggregator's answers (not the released student)",
        "vote_margin_true_label_mean": {
            "members": float(_margin(votes, labels)[member].mean()) if member.any() else None,
            "non_members": float(_margin(votes, labels)[~member].mean()) if (~member).any() else None,
        },
        "plurality_accuracy": {
            "members": float(plurality_correct[member].mean()) if member.any() else None,
            "non_members": float(plurality_correct[~member].mean()) if (~member).any() else None,
        },
        **(metadata or {}),
    }
    return MembershipResult(
        attack=ATTACK_NAME,
        model_id=model_id,
        sample_ids=np.asarray(sample_ids, dtype=np.int64),
        scores=hits / repeats,
        is_member=member,
        config={**dict(config), "repeats": repeats, "seed": seed},
        metadata=meta,
    )


def _margin(votes: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Votes for the true label minus the largest count among the other labels."""
    true = votes[np.arange(len(labels)), labels].astype(float)
    other = votes.astype(float).copy()
    other[np.arange(len(labels)), labels] = -np.inf
    return true - other.max(axis=1)
