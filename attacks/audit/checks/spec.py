"""The battery's registry and the contract of one check.

A check is a registered part (:data:`CHECKS`): a :class:`CheckSpec` naming what the check is
designed to detect and what it misses, and a ``run`` that plays its distinguishing game against a
training function through a :class:`CheckContext` and returns :class:`CheckEvidence` — ε_LB
and its ceiling at the check's confidence. The battery (:mod:`dpaudit.app.runs.check`) turns
evidence into a :class:`~dpaudit.results.check.CheckOutcome` by the status rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpaudit.data import ArrayDataset
from dpaudit.privacy.claims import PrivacyClaim
from dpaudit.registry import Registry

__all__ = ["CHECKS", "CheckSpec", "CheckContext", "CheckEvidence", "CheckCannotRun"]


class CheckCannotRun(Exception):
    """The check cannot play its game against this training function (the message says why)."""


@dataclass(frozen=True, kw_only=True)
class CheckContext:
    """What one check gets from the battery.

    Attributes:
        train_fn: ``train(dataset, *, seed, initial_state=None) -> nn.Module`` (picklable).
        model_fn: zero-argument builder of ``train_fn``'s architecture, ``None`` if not given.
        train_spec: the spec string of ``train_fn`` (the trial store's identity).
        claim: the claim ε_UB comes from.
        delta: δ of ε_LB and ε_UB.
        confidence: the check's confidence (its Bonferroni share of the battery's).
        family_confidence: the battery's family-wise confidence (for findings).
        epsilon_ub: the claim's ε at ``delta``.
        pool: the dataset the check draws its records from (digits by default).
        directory: the check's directory (``RUN/checks/<key>/<name>``, the key that of the code,
            data, claim and seed the trials are made of): its games' trials live there.
        budget_seconds: the check's share of the battery's time budget.
        seed: the battery's root seed (every trial's seed derives from it).
        executor: where trials run (:mod:`dpaudit.executors`).
        trials: trainings per game (``None``: the check's default).
        progress: progress on stderr.
        deadline: ``time.time()`` at which a training still running is stopped and its trial
            counted failed (the battery's budget plus a grace period); ``None``: no limit.
    """

    train_fn: Callable[..., Any]
    model_fn: Callable[[], Any] | None
    train_spec: str
    claim: PrivacyClaim
    delta: float
    confidence: float
    family_confidence: float
    epsilon_ub: float
    pool: ArrayDataset
    directory: Path
    budget_seconds: float
    seed: int
    executor: Any = None
    trials: int | None = None
    progress: bool = False
    deadline: float | None = None


@dataclass(frozen=True, kw_only=True)
class CheckEvidence:
    """What a check's game showed: ε_LB and its ceiling at the check's confidence.

    A grey-box check (``CheckSpec.kind == "grey-box"``) decides without a game: it sets
    ``verdict`` (``violated``, ``passed`` or ``inconclusive``) and ``cause`` (one sentence), with
    ε_LB and the ceiling 0.
    """

    epsilon_lb: float
    ceiling: float
    num_trials: int
    details: Mapping[str, object] = field(default_factory=dict)
    verdict: str | None = None
    cause: str | None = None


@dataclass(frozen=True, kw_only=True)
class CheckSpec:
    """One check of the battery.

    Attributes:
        name: registry key and the name findings carry (``worst-case``).
        order: place in listings and in the battery's run order.
        detects: what it is designed to detect (one sentence).
        misses: what it cannot detect (one sentence).
        violation: what a violation means, appended to the finding.
        needs_initial_state: the game needs ``--model-fn`` and a ``train_fn`` accepting
            ``initial_state`` (else the check is inconclusive, ceiling 0, saying why).
        run: plays the game: ``run(context) -> CheckEvidence``; raises :class:`CheckCannotRun`.
        kind: ``statistical`` (a distinguishing game: ε_LB against ε_UB) or ``grey-box`` (a
            verdict read off instrumented trainings, :mod:`attacks.audit.checks.greybox`).
    """

    name: str
    order: int
    detects: str
    misses: str
    violation: str
    needs_initial_state: bool
    run: Callable[[CheckContext], CheckEvidence]
    kind: str = "statistical"


#: The registered checks, in run order; modules under ``attacks.audit.checks`` register themselves.
CHECKS: Registry[CheckSpec] = Registry(
    "check", argument="--checks", discover=("attacks.audit.checks",), order=lambda spec: spec.order
)
