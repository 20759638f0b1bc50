"""The conformance battery run: every registered check against one training function.

Part of the application layer (it imports ``attacks``). :func:`run_check` resolves the training
and model functions, evaluates the claim's ε_UB once, splits the family-wise confidence over the
checks by Bonferroni and the time budget evenly, runs each check of
:data:`attacks.audit.checks.CHECKS` on the executors and writes ``check.json`` (a
:class:`~dpaudit.results.check.CheckReport`) under ``RUN/checks/``.

Each check's trials are stored one file per trial under ``RUN/checks/trials-<key>/<name>/``,
where the key is that of everything a trial is made of (:func:`battery_key`: the training and
model code with the local modules they import, the dataset's files, the claim, the seed) — the
same key machinery as ``dpaudit audit``'s. A rerun with the same key resumes and says what it
reused; one with another key starts afresh and says why on one line (``recomputing: helper.py
changed since the stored trials in …``), keeping the old trials.

The battery's ``--budget-minutes`` holds: a training still running
:data:`attacks.audit.checks.game.GRACE_SECONDS` (2 s) after it ends is stopped and counted
failed, and checks not started by then are inconclusive.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpaudit import _validate as v
from dpaudit.privacy.claims import PrivacyClaim
from dpaudit.results.check import CheckDetails, CheckOutcome, CheckReport, check_status, save_check_report
from dpaudit.store import RunDir

__all__ = ["BatterySpec", "run_check", "battery_key", "training_failed", "CHECK_DIR", "DEFAULT_BUDGET_MINUTES"]

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


def _cannot(
    spec: Any,
    *,
    reason: str,
    epsilon_ub: float,
    confidence: float,
    seconds: float = 0.0,
    trials: int = 0,
    error: bool = False,
) -> CheckOutcome:
    """A check without evidence: inconclusive at ceiling 0; ``error`` when the training function failed
    (``details.error``: the JUnit file reports it as an error, and a battery of them exits 2)."""
    return CheckOutcome(
        name=spec.name,
        status="inconclusive",
        finding=f"{spec.name}: {'the training failed' if error else 'could not run'}: {reason}",
        epsilon_lb=0.0,
        epsilon_ub=epsilon_ub,
        ceiling=0.0,
        confidence=confidence,
        num_trials=trials,
        seconds=seconds,
        detects=spec.detects,
        misses=spec.misses,
        details=CheckDetails(reason=reason, error="training failed" if error else None),
        kind=getattr(spec, "kind", "statistical"),
    )


def training_failed(report: CheckReport) -> tuple[CheckOutcome, ...]:
    """The checks whose training function failed, when no check got a training through; else ``()``.

    Such a battery checked nothing: ``dpaudit check`` exits 2 naming the first failure, never 0.
    """
    failed = tuple(o for o in report.outcomes if o.details.failed)
    trained = [o for o in report.outcomes if o.num_trials > 0 and not o.details.failed]
    return failed if failed and not trained and not report.violated else ()


def _finding(spec: Any, status: str, *, lb: float, ub: float, ceiling: float, family: float) -> str:
    from dpaudit.app.common import fmt_eps_lb, fmt_eps_ub

    # Each bound rounded its safe way (ε_UB up; ε_LB and the ceiling, itself an ε_LB, down).
    ub_text, lb_text, ceiling_text = fmt_eps_ub(ub), fmt_eps_lb(lb), fmt_eps_lb(ceiling)
    if status == "violated" and lb >= ceiling * (1 - 1e-6) - 1e-6:
        # The design's ceiling: a perfect attack on these trials shows no more, so the leak is at least this.
        return (
            f"{spec.name}: eps_LB {lb_text} > eps_UB {ub_text} (saturated: at least this much; "
            f"{family:.0%} family-wise): {spec.violation}"
        )
    if status == "violated":
        return f"{spec.name}: eps_LB {lb_text} > eps_UB {ub_text} ({family:.0%} family-wise): {spec.violation}"
    if status == "passed":
        return (
            f"{spec.name}: eps_LB {lb_text} <= eps_UB {ub_text}; the design could "
            f"have shown up to {ceiling_text} ({family:.0%} family-wise)"
        )
    return (
        f"{spec.name}: eps_LB {lb_text} <= eps_UB {ub_text}, but the trials run "
        f"allow at most {ceiling_text}: give a larger --budget-minutes"
    )


def _one(spec: Any, ctx: Any, *, can_start: str | None) -> CheckOutcome:
    from attacks.audit.checks import CheckCannotRun
    from attacks.audit.trials import TrialFailed

    started = time.monotonic()
    if spec.needs_initial_state and can_start is not None:
        return _cannot(spec, reason=can_start, epsilon_ub=ctx.epsilon_ub, confidence=ctx.confidence)
    try:
        ev = spec.run(ctx)
    except CheckCannotRun as exc:
        return _cannot(
            spec,
            reason=str(exc),
            epsilon_ub=ctx.epsilon_ub,
            confidence=ctx.confidence,
            seconds=time.monotonic() - started,
        )
    except TrialFailed as exc:
        return _cannot(
            spec,
            reason=str(exc),
            epsilon_ub=ctx.epsilon_ub,
            confidence=ctx.confidence,
            seconds=time.monotonic() - started,
            error=True,
        )
    seconds = time.monotonic() - started
    if getattr(spec, "kind", "statistical") == "grey-box":
        # Read off the replayed trainings: its own status and cause, no ε_LB (0) and no ceiling (0).
        status = ev.verdict if ev.verdict in ("violated", "passed", "inconclusive") else "inconclusive"
        cause: str | None = ev.cause or "no cause given"
        kind, lb, ceiling, finding = "grey-box", 0.0, 0.0, f"{spec.name}: {cause}"
    else:
        ceiling = max(ev.ceiling, ev.epsilon_lb)
        status = check_status(epsilon_lb=ev.epsilon_lb, epsilon_ub=ctx.epsilon_ub, ceiling=ceiling)
        kind, lb, cause = "statistical", ev.epsilon_lb, None
        finding = _finding(
            spec, status, lb=ev.epsilon_lb, ub=ctx.epsilon_ub, ceiling=ceiling, family=ctx.family_confidence
        )
    return CheckOutcome(
        name=spec.name,
        status=status,
        finding=finding,
        epsilon_lb=lb,
        epsilon_ub=ctx.epsilon_ub,
        ceiling=ceiling,
        confidence=ctx.confidence,
        num_trials=ev.num_trials,
        seconds=seconds,
        detects=spec.detects,
        misses=spec.misses,
        details=CheckDetails(evidence=ev.details),
        kind=kind,
        cause=cause,
    )


def _start_problem(train_fn: Any, model_fn: Any) -> str | None:
    from attacks.audit.trials import accepts_initial_state

    if model_fn is None:
        return "no --model-fn: its worst-case start is crafted on the model's architecture"
    if not accepts_initial_state(train_fn):
        return (
            "the training function takes no initial_state keyword, so it cannot start from the crafted worst-case state"
        )
    return None


def _check_model_size(model_fn: Any, *, i_know: bool) -> None:
    """Refuses, before any training, a ``--model-fn`` model above the parameter limit (unless ``i_know``).

    Every check trains the model hundreds of times, so a model of millions of parameters would
    exhaust memory and budget long before a verdict. The model is built once here, sandboxed like
    every call of the user's code; if building it fails, the battery reports that failure where it
    calls the function itself, so nothing is decided here.
    """
    from dpaudit.callables import call_user
    from dpaudit.limits import check_parameter_count

    try:
        model = call_user(model_fn, label="--model-fn")
    except Exception:  # UserCodeFailed included: the battery reports it where it calls the function
        return
    if hasattr(model, "parameters"):
        check_parameter_count("--model-fn", model, i_know=i_know)


def battery_key(spec: BatterySpec, *, progress: bool = False) -> dict[str, object]:
    """What every trial of the battery is made of, the key its stored trials are reused by.

    The keys ``dpaudit audit`` uses for the same things (:func:`dpaudit.app.runs.audit.provenance.code_keys`,
    :func:`dpaudit.data.dataset_files`): the training and model code with every local module they
    import, the claim, the dataset and its files, and the seed. The trial count is not part of it
    (trial i depends on i alone), nor are δ and the confidence (they bound, never train).
    """
    from dpaudit.app.runs.audit.provenance import code_keys
    from dpaudit.data import dataset_files

    key: dict[str, object] = {
        "train_fn": spec.train_fn,
        **code_keys("train_fn", spec.train_fn, argument="--train-fn", progress=progress),
    }
    if spec.model_fn is not None:
        key.update(
            {
                "model_fn": spec.model_fn,
                **code_keys("model_fn", spec.model_fn, argument="--model-fn", progress=progress),
            }
        )
    key.update({"claim": spec.claim.to_dict(), "dataset": spec.dataset, "seed": spec.seed})
    files = dataset_files(spec.dataset, data_root=spec.data_root)
    if files:  # bundled data (digits) has none
        key["dataset_files"] = files
    return key


def _keyed_directory(root: Path, key: dict[str, object], *, progress: bool) -> Path:
    """``root/trials-<hash of key>``, its ``key.json`` written; says why when other trials are there instead."""
    from dpaudit.app.runs.audit.provenance import audit_hash, superseded_reasons
    from dpaudit.store import atomic_write_json, read_json, to_jsonable

    directory = root / f"trials-{audit_hash(key)}"
    if not (directory / "key.json").is_file():
        stored = sorted(root.glob("trials-*/key.json"), key=lambda p: p.stat().st_mtime)
        if stored:  # said even with --quiet, as dpaudit audit says it: nothing reused needs a reason
            try:
                why = "; ".join(superseded_reasons(key, read_json(stored[-1])))
            except ValueError:
                why = "their key cannot be read"
            _say(
                True,
                f"recomputing: {why} since the stored trials in {stored[-1].parent}; starting afresh in {directory}",
            )
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_json(directory / "key.json", to_jsonable(key))
    else:
        os.utime(directory / "key.json")  # the last battery run, which the next "recomputing" line compares with
    return directory


def _warm_workers(executor: Any) -> None:
    """Has every worker import the trial code (torch included) before the budget's clock starts."""
    workers = int(getattr(executor, "workers", 1) or 1)
    if workers <= 1:
        return
    from attacks.audit.checks.game import warm_worker
    from dpaudit.executors.jobs import Job

    for _ in executor.run([Job(key=f"warm-{i}", fn=warm_worker, kwargs={}) for i in range(2 * workers)]):
        pass


def run_check(spec: BatterySpec, run: RunDir, *, progress: bool = True) -> CheckReport:
    """Runs the battery of ``spec`` under ``run`` and writes ``RUN/checks/check.json``.

    Returns:
        The :class:`CheckReport` (``exit_status`` 3 when a check is violated); a check whose
        training failed (raised, exited, ran past the budget) is inconclusive with
        ``details.error`` (:func:`training_failed`).

    Raises:
        ValueError: a spec that does not resolve (names ``--train-fn`` / ``--model-fn``).
    """
    from attacks.audit.checks import CHECKS, CheckContext
    from attacks.audit.checks.game import GRACE_SECONDS as grace
    from dpaudit.app.common import fmt_eps_ub
    from dpaudit.app.runs.audit import make_audit_executor, resolve_train_fn
    from dpaudit.callables import resolve_callable
    from dpaudit.data import load_dataset

    started = time.monotonic()
    train_fn = resolve_train_fn(spec.train_fn)
    model_fn = None if spec.model_fn is None else resolve_callable(spec.model_fn, argument="--model-fn")
    if model_fn is not None:
        _check_model_size(model_fn, i_know=spec.i_know)
    names = spec.selected()
    bound = spec.claim.upper_bound(delta=spec.delta)
    per_check = 1.0 - (1.0 - spec.confidence) / len(names)
    # The games share the budget; the grey-box checks (one replayed pair, seconds) take theirs off the top.
    games = [n for n in names if getattr(CHECKS[n], "kind", "statistical") != "grey-box"]
    budget = 60.0 * spec.budget_minutes / max(1, len(games))
    pool = load_dataset(spec.dataset, data_root=spec.data_root).train
    key = battery_key(spec, progress=progress)
    run.create(command="check")
    root = run.path / CHECK_DIR
    keyed = _keyed_directory(root, key, progress=progress)
    problem = _start_problem(train_fn, model_fn)
    _say(
        progress,
        f"check: {len(names)} checks ({', '.join(names)}) against "
        f"{spec.claim.statement()}: eps_UB {fmt_eps_ub(bound.epsilon)} at "
        f"delta={spec.delta:g}; {per_check:.4%} confidence each, {budget:.0f} s "
        "each",
    )
    outcomes = []
    with make_audit_executor(spec.num_workers) as executor:
        executor.warm_up()  # worker start-up is not a check's time: budgets measure trainings
        _warm_workers(executor)
        ends = time.time() + 60.0 * spec.budget_minutes  # the battery's budget, in wall time (workers share it)
        for name in names:
            check = CHECKS[name]
            if time.time() >= ends and not (check.needs_initial_state and problem is not None):
                outcome = _cannot(
                    check,
                    reason="the battery's --budget-minutes was spent before it started",
                    epsilon_ub=bound.epsilon,
                    confidence=per_check,
                )
            else:
                ctx = CheckContext(
                    train_fn=train_fn,
                    model_fn=model_fn,
                    train_spec=spec.train_fn,
                    claim=spec.claim,
                    delta=spec.delta,
                    confidence=per_check,
                    family_confidence=spec.confidence,
                    epsilon_ub=bound.epsilon,
                    pool=pool,
                    directory=keyed / name,
                    budget_seconds=budget,
                    seed=spec.seed,
                    executor=executor,
                    trials=spec.trials,
                    progress=progress,
                    deadline=ends + grace,
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
