"""The conformance battery run: every registered check against one training function.

Part of the application layer (it imports ``attacks``). :func:`run_check` resolves the training
and model functions, evaluates the claim's ε_UB once, splits the family-wise confidence over the
checks by Bonferroni and the time budget evenly, runs each check of
:data:`attacks.audit.checks.CHECKS` on the executors and writes ``check.json`` (a
:class:`~dpaudit.results.check.CheckReport`) under ``RUN/checks/``. Each check's trials are stored
under ``RUN/checks/<name>/`` one file per trial, so a rerun resumes and says what it reused.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dpaudit import _validate as v
from dpaudit.privacy.claims import PrivacyClaim
from dpaudit.results.check import CheckOutcome, CheckReport, check_status, save_check_report
from dpaudit.store import RunDir

__all__ = ["BatterySpec", "run_check", "CHECK_DIR", "DEFAULT_BUDGET_MINUTES"]

CHECK_DIR = "checks"
DEFAULT_BUDGET_MINUTES = 5.0


@dataclass(frozen=True, kw_only=True)
class BatterySpec:
    """One run of the battery.

    Attributes:
        train_fn: ``MODULE:FUNCTION`` or ``path.py:FUNCTION`` of ``train(dataset, *, seed, initial_state=None)``.
        model_fn: spec of the zero-argument model builder (``None``: checks needing a crafted start are inconclusive).
        claim: what the function claims (ε_UB at ``delta``).
        delta: δ of every bound.
        confidence: family-wise confidence of the battery (each check gets a Bonferroni share).
        budget_minutes: wall-time budget, split evenly across the checks run.
        checks: names of the checks to run (empty or ``"all"``: every registered check).
        dataset: where the checks draw records from.
        seed: root seed of every trial's seed.
        num_workers: worker processes (1: in-process).
        trials: trainings per game (``None``: each check's default; tests use few).
        data_root: data root for datasets other than digits.
        i_know: accept a budget, trials or workers above the documented limits
            (:data:`dpaudit.limits.LIMITS`), as ``--i-know`` does on the command line.
    """

    train_fn: str
    model_fn: str | None = None
    claim: PrivacyClaim
    delta: float = 1e-5
    confidence: float = 0.95
    budget_minutes: float = DEFAULT_BUDGET_MINUTES
    checks: Sequence[str] = field(default_factory=tuple)
    dataset: str = "digits"
    seed: int = 0
    num_workers: int = 1
    trials: int | None = None
    data_root: str | None = None
    i_know: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.train_fn, str) or ":" not in self.train_fn:
            raise v.invalid("train_fn", f"train_fn must be MODULE:FUNCTION or path.py:FUNCTION, got {self.train_fn!r}")
        if self.model_fn is not None and (not isinstance(self.model_fn, str) or ":" not in self.model_fn):
            raise v.invalid("model_fn", f"model_fn must be MODULE:FUNCTION or path.py:FUNCTION, got {self.model_fn!r}")
        if not isinstance(self.claim, PrivacyClaim):
            raise v.invalid_type("claim", f"claim must be a PrivacyClaim, got {type(self.claim).__name__}")
        object.__setattr__(self, "delta", v.open_unit("delta", self.delta))
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        object.__setattr__(self, "budget_minutes", v.positive("budget_minutes", self.budget_minutes))
        names = (self.checks,) if isinstance(self.checks, str) else tuple(self.checks)
        if names == ("all",):
            names = ()
        from attacks.audit.checks import CHECKS

        for name in names:
            CHECKS[name]  # raises naming --checks and the registered checks
        if len(set(names)) != len(names):
            raise v.invalid("checks", f"checks must name each check once, got {list(names)}")
        object.__setattr__(self, "checks", names)
        object.__setattr__(self, "seed", v.integer("seed", self.seed, minimum=0))
        object.__setattr__(self, "num_workers", v.integer("num_workers", self.num_workers, minimum=1))
        if self.trials is not None:
            object.__setattr__(self, "trials", v.integer("trials", self.trials, minimum=4))
        from dpaudit.limits import check_sizes

        check_sizes(self, {"budget_minutes": "budget_minutes", "trials": "trials", "num_workers": "workers"})

    def selected(self) -> tuple[str, ...]:
        """The checks to run, in registry order."""
        from attacks.audit.checks import CHECKS

        return tuple(n for n in CHECKS.names() if not self.checks or n in self.checks)


def _say(progress: bool, text: str) -> None:
    if progress:
        print(text, file=sys.stderr, flush=True)


def _cannot(spec: Any, *, reason: str, epsilon_ub: float, confidence: float, seconds: float = 0.0, trials: int = 0) -> CheckOutcome:
    return CheckOutcome(
        name=spec.name,
        status="inconclusive",
        finding=f"{spec.name}: could not run: {reason}",
        epsilon_lb=0.0,
        epsilon_ub=epsilon_ub,
        ceiling=0.0,
        confidence=confidence,
        num_trials=trials,
        seconds=seconds,
        detects=spec.detects,
        misses=spec.misses,
        details={"reason": reason},
    )


def _finding(spec: Any, status: str, *, lb: float, ub: float, ceiling: float, family: float) -> str:
    ub_text = "inf" if math.isinf(ub) else f"{ub:.3g}"
    if status == "violated":
        return f"{spec.name}: eps_LB {lb:.3g} > eps_UB {ub_text} ({family:.0%} family-wise): {spec.violation}"
    if status == "passed":
        return f"{spec.name}: eps_LB {lb:.3g} <= eps_UB {ub_text}; the design could have shown up to {ceiling:.3g} ({family:.0%} family-wise)"
    return f"{spec.name}: eps_LB {lb:.3g} <= eps_UB {ub_text}, but the trials run allow at most {ceiling:.3g}: give a larger --budget-minutes"


def _one(spec: Any, ctx: Any, *, can_start: str | None) -> CheckOutcome:
    from attacks.audit.checks import CheckCannotRun
    from attacks.audit.trials import TrialFailed

    started = time.monotonic()
    if spec.needs_initial_state and can_start is not None:
        return _cannot(spec, reason=can_start, epsilon_ub=ctx.epsilon_ub, confidence=ctx.confidence)
    try:
        ev = spec.run(ctx)
    except (CheckCannotRun, TrialFailed) as exc:
        return _cannot(spec, reason=str(exc), epsilon_ub=ctx.epsilon_ub, confidence=ctx.confidence, seconds=time.monotonic() - started)
    seconds = time.monotonic() - started
    ceiling = max(ev.ceiling, ev.epsilon_lb)
    status = check_status(epsilon_lb=ev.epsilon_lb, epsilon_ub=ctx.epsilon_ub, ceiling=ceiling)
    return CheckOutcome(
        name=spec.name,
        status=status,
        finding=_finding(spec, status, lb=ev.epsilon_lb, ub=ctx.epsilon_ub, ceiling=ceiling, family=ctx.family_confidence),
        epsilon_lb=ev.epsilon_lb,
        epsilon_ub=ctx.epsilon_ub,
        ceiling=ceiling,
        confidence=ctx.confidence,
        num_trials=ev.num_trials,
        seconds=seconds,
        detects=spec.detects,
        misses=spec.misses,
        details=dict(ev.details),
    )


def _start_problem(train_fn: Any, model_fn: Any) -> str | None:
    from attacks.audit.trials import accepts_initial_state

    if model_fn is None:
        return "no --model-fn: its worst-case start is crafted on the model's architecture"
    if not accepts_initial_state(train_fn):
        return "the training function takes no initial_state keyword, so it cannot start from the crafted worst-case state"
    return None


def run_check(spec: BatterySpec, run: RunDir, *, progress: bool = True) -> CheckReport:
    """Runs the battery of ``spec`` under ``run`` and writes ``RUN/checks/check.json``.

    Returns:
        The :class:`CheckReport` (``exit_status`` 3 when a check is violated).

    Raises:
        ValueError: a spec that does not resolve (names ``--train-fn`` / ``--model-fn``).
    """
    from attacks.audit.checks import CHECKS, CheckContext
    from dpaudit.app.runs.audit import make_audit_executor, resolve_train_fn, train_fn_fingerprint
    from dpaudit.callables import resolve_callable
    from dpaudit.data import load_dataset

    started = time.monotonic()
    train_fn = resolve_train_fn(spec.train_fn)
    model_fn = None if spec.model_fn is None else resolve_callable(spec.model_fn, argument="--model-fn")
    names = spec.selected()
    bound = spec.claim.upper_bound(delta=spec.delta)
    per_check = 1.0 - (1.0 - spec.confidence) / len(names)
    budget = 60.0 * spec.budget_minutes / len(names)
    pool = load_dataset(spec.dataset, data_root=spec.data_root).train
    run.create(command="check")
    root = run.path / CHECK_DIR
    identity = f"{spec.train_fn}@{train_fn_fingerprint(spec.train_fn)}|{spec.model_fn or ''}|{spec.dataset}"
    problem = _start_problem(train_fn, model_fn)
    _say(
        progress,
        f"check: {len(names)} checks ({', '.join(names)}) against {spec.claim.statement()}: eps_UB {bound.epsilon:.4g} at delta={spec.delta:g}; {per_check:.4%} confidence each, {budget:.0f} s each",
    )
    outcomes = []
    with make_audit_executor(spec.num_workers) as executor:
        executor.warm_up()  # worker start-up is not a check's time: budgets measure trainings
        for name in names:
            check = CHECKS[name]
            ctx = CheckContext(
                train_fn=train_fn,
                model_fn=model_fn,
                train_spec=identity,
                claim=spec.claim,
                delta=spec.delta,
                confidence=per_check,
                family_confidence=spec.confidence,
                epsilon_ub=bound.epsilon,
                pool=pool,
                directory=root / name,
                budget_seconds=budget,
                seed=spec.seed,
                executor=executor,
                trials=spec.trials,
                progress=progress,
            )
            outcome = _one(check, ctx, can_start=problem)
            _say(progress, outcome.summary())
            outcomes.append(outcome)
    report = CheckReport(
        train_fn=spec.train_fn,
        model_fn=spec.model_fn,
        claim_description=spec.claim.statement(),
        delta=spec.delta,
        confidence=spec.confidence,
        budget_minutes=spec.budget_minutes,
        outcomes=tuple(outcomes),
        seconds=time.monotonic() - started,
    )
    save_check_report(report, root)
    return report
