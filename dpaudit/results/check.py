"""The outcome of ``dpaudit check``: one verdict per targeted audit of a DP training function.

The conformance battery plays several distinguishing games against one training function, each
designed to expose one class of implementation bug cheaply (a worst-case initial state for noise
and clipping bugs, lot-size variation for normalisation bugs, …). Each game yields an ε_LB that
holds at its share of the battery's confidence (Bonferroni over the checks run), set against the
claim's ε_UB at δ. :class:`CheckOutcome` is one check's verdict, :class:`CheckReport` the
battery's, stored as ``check.json`` in the check's directory. Torch-free.

Status rule (one place, :func:`check_status`): a check is ``violated`` iff ε_LB > ε_UB (the
implementation leaks more than it claims, at the check's confidence); otherwise ``passed`` iff
its ceiling — the largest ε_LB its design could reach at the size it ran — exceeds ε_UB (it could
have shown a violation and did not), else ``inconclusive``. A check that could not run is
inconclusive with ceiling 0 and says why in its finding.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpaudit import _validate as v
from dpaudit.specs import spec_from_dict
from dpaudit.store import SCHEMA_VERSION, load_value, save_value
from dpaudit.store import freeze as _freeze
from dpaudit.store import thaw as _thaw

__all__ = [
    "CHECK_STATUSES",
    "CHECK_FILE",
    "EXIT_VIOLATED",
    "CheckDetails",
    "CheckOutcome",
    "CheckReport",
    "check_status",
    "CHECK_KINDS",
    "diagnosis",
    "save_check_report",
    "load_check_report",
]

CHECK_STATUSES = ("passed", "violated", "inconclusive")
#: ``statistical``: a distinguishing game, its status by :func:`check_status`; ``grey-box``: a
#: verdict read off instrumented trainings (ε_LB and the ceiling 0, the status its own).
CHECK_KINDS = ("statistical", "grey-box")
CHECK_FILE = "check.json"
#: The exit status of ``dpaudit check`` when a check is violated (0 otherwise).
EXIT_VIOLATED = 3
# ε_LB and its ceiling come from the same bisection and formulas; allow their rounding only.
_CEILING_TOLERANCE = 1e-6


def check_status(*, epsilon_lb: float, epsilon_ub: float, ceiling: float) -> str:
    """The status rule: ``violated`` iff ε_LB > ε_UB, else ``passed`` iff ceiling > ε_UB, else ``inconclusive``."""
    if epsilon_lb > epsilon_ub:
        return "violated"
    return "passed" if ceiling > epsilon_ub else "inconclusive"


def _string(name: str, value: Any, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise v.invalid_type(name, f"{name} must be a string, got {v.short(value)}")
    if not allow_empty and not value.strip():
        raise v.invalid(name, f"{name} must be a non-empty string, got {value!r}")
    return value


def _epsilon_ub(value: Any) -> float:
    ub = v.real("epsilon_ub", value)
    if ub < 0:
        raise v.invalid("epsilon_ub", f"epsilon_ub must be >= 0, got {value!r}")
    return ub


@dataclass(frozen=True, kw_only=True)
class CheckDetails:
    """What a check's verdict keeps beside its numbers.

    Attributes:
        reason: why the check could not run (``None`` when it ran).
        error: set when the training function itself failed (the JUnit file reports the check
            as an error, and a battery of them exits 2); ``None`` otherwise.
        evidence: the game's own JSON-able facts (counts, statistic, sizes, …), as the check
            wrote them.
    """

    reason: str | None = None
    error: str | None = None
    evidence: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("reason", "error"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise v.invalid_type(name, f"details {name} must be a string or None, got {value!r}")
        if not isinstance(self.evidence, Mapping):
            raise v.invalid_type("details", f"details must be a mapping, got {type(self.evidence).__name__}")
        object.__setattr__(self, "evidence", _freeze(self.evidence))

    @property
    def failed(self) -> bool:
        """The training function failed: nothing was checked."""
        return bool(self.error)

    def to_dict(self) -> dict[str, object]:
        """The stored object: ``reason`` and ``error`` first (when set), then the evidence."""
        out: dict[str, object] = {}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.error is not None:
            out["error"] = self.error
        out.update(_thaw(self.evidence))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CheckDetails:
        """Rebuilds the details from their stored object; keys other than ``reason`` and ``error`` are the evidence."""
        if not isinstance(data, Mapping):
            raise v.invalid_type("details", f"details must be a mapping, got {type(data).__name__}")
        reason, error = data.get("reason"), data.get("error")
        return cls(
            reason=reason if isinstance(reason, str) else None,
            error=error if isinstance(error, str) else None,
            evidence={k: x for k, x in data.items() if not (k in ("reason", "error") and isinstance(x, str))},
        )


@dataclass(frozen=True, kw_only=True, eq=False)
class CheckOutcome:
    """One check's verdict.

    Attributes:
        name: the check's registry key, e.g. ``worst-case``.
        status: ``passed``, ``violated`` or ``inconclusive``; must follow :func:`check_status`.
        finding: one line naming the check, e.g. ``worst-case: eps_LB 4.1 > eps_UB 0.97 …``.
        epsilon_lb: ε_LB ≥ 0 at ``confidence`` (already the check's Bonferroni share).
        epsilon_ub: the claim's ε at the battery's δ (∞ when no accountant bounds it).
        ceiling: the largest ε_LB the check's design could reach at the size it ran (a perfect
            attack on the same counts); ≥ ``epsilon_lb``; 0 for a check that could not run.
        confidence: the check's confidence (the battery's, split by Bonferroni).
        num_trials: trainings the check ran (reused stored ones included).
        seconds: wall time of the check.
        detects: what the check is designed to detect (one sentence).
        misses: what it cannot detect (one sentence).
        details: why it could not run or that the training failed, and the game's evidence
            (:class:`CheckDetails`; a mapping given here is read into one).
        kind: ``statistical`` or ``grey-box`` (:data:`CHECK_KINDS`); only a statistical
            outcome's status follows :func:`check_status`.
        cause: a grey-box check's cause in one sentence (``None`` for a statistical check).
    """

    name: str
    status: str
    finding: str
    epsilon_lb: float
    epsilon_ub: float
    ceiling: float
    confidence: float
    num_trials: int
    seconds: float
    detects: str
    misses: str
    details: CheckDetails = field(default_factory=CheckDetails)
    kind: str = "statistical"
    cause: str | None = None

    def __post_init__(self) -> None:
        _string("name", self.name)
        v.choice("status", self.status, CHECK_STATUSES)
        v.choice("kind", self.kind, CHECK_KINDS)
        if self.cause is not None:
            _string("cause", self.cause)
        _string("finding", self.finding)
        if "\n" in self.finding or "\r" in self.finding:
            raise v.invalid("finding", f"finding must be one line, got {v.short(self.finding)}")
        if self.name not in self.finding:
            raise v.invalid("finding", f"finding must name the check {self.name!r}, got {v.short(self.finding)}")
        object.__setattr__(self, "epsilon_lb", v.non_negative("epsilon_lb", self.epsilon_lb))
        object.__setattr__(self, "epsilon_ub", _epsilon_ub(self.epsilon_ub))
        object.__setattr__(self, "ceiling", v.non_negative("ceiling", self.ceiling))
        if self.epsilon_lb > self.ceiling + _CEILING_TOLERANCE:
            raise v.invalid(
                "ceiling",
                f"ceiling must be >= epsilon_lb={self.epsilon_lb!r} (a perfect attack "
                f"bounds every attack), got {self.ceiling!r}",
            )
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        object.__setattr__(self, "num_trials", v.integer("num_trials", self.num_trials, minimum=0))
        object.__setattr__(self, "seconds", v.non_negative("seconds", self.seconds))
        _string("detects", self.detects)
        _string("misses", self.misses)
        expected = check_status(epsilon_lb=self.epsilon_lb, epsilon_ub=self.epsilon_ub, ceiling=self.ceiling)
        if self.kind == "statistical" and self.status != expected:
            raise v.invalid(
                "status",
                f"status must be {expected!r} for epsilon_lb={self.epsilon_lb!r}, "
                f"epsilon_ub={self.epsilon_ub!r}, ceiling={self.ceiling!r}, got "
                f"{self.status!r}",
            )
        if isinstance(self.details, Mapping):
            object.__setattr__(self, "details", CheckDetails.from_dict(self.details))
        elif not isinstance(self.details, CheckDetails):
            raise v.invalid_type(
                "details", f"details must be CheckDetails or a mapping, got {type(self.details).__name__}"
            )

    @property
    def violated(self) -> bool:
        """ε_LB > ε_UB at the check's confidence (a grey-box check: its verdict)."""
        return self.status == "violated"

    @property
    def saturated(self) -> bool:
        """A statistical violation whose ε_LB is its design's ceiling: the leak is at least this much."""
        return (
            self.kind == "statistical"
            and self.violated
            and self.epsilon_lb >= self.ceiling * (1 - _CEILING_TOLERANCE) - _CEILING_TOLERANCE
        )

    def to_dict(self) -> dict[str, object]:
        """JSON-able dict (non-finite floats are handled by :mod:`dpaudit.store`)."""
        return {
            "name": self.name,
            "status": self.status,
            "finding": self.finding,
            "epsilon_lb": self.epsilon_lb,
            "epsilon_ub": self.epsilon_ub,
            "ceiling": self.ceiling,
            "confidence": self.confidence,
            "num_trials": self.num_trials,
            "seconds": self.seconds,
            "detects": self.detects,
            "misses": self.misses,
            "details": self.details.to_dict(),
            # A statistical outcome has neither: left out, so outcomes stored before the grey-box
            # checks existed keep their bytes when loaded and saved again.
            **({"kind": self.kind} if self.kind != "statistical" else {}),
            **({"cause": self.cause} if self.cause is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CheckOutcome:
        """Rebuilds an outcome from :meth:`to_dict` output.

        Raises:
            ValueError: a missing key or an invalid value.
        """
        if not isinstance(data, Mapping):
            raise v.invalid_type("data", f"data must be a mapping, got {type(data).__name__}")
        required = (
            "name",
            "status",
            "finding",
            "epsilon_lb",
            "epsilon_ub",
            "ceiling",
            "confidence",
            "num_trials",
            "seconds",
            "detects",
            "misses",
        )
        missing = [k for k in required if k not in data]
        if missing:
            raise v.invalid(None, f"check outcome is missing keys {missing}")
        optional = {k: data[k] for k in ("kind", "cause") if k in data}
        return spec_from_dict(cls, {**{k: data[k] for k in required}, "details": data.get("details", {}), **optional})

    def summary(self) -> str:
        """One line for terminals: status, ε_LB, ε_UB and ceiling (a grey-box check: status and cause)."""
        from dpaudit.results.numbers import fmt_lower_bound, fmt_upper_bound

        if self.kind == "grey-box":
            return f"{self.name}: {self.status} ({self.cause or self.finding}; {self.seconds:.1f} s)"

        # Bounds rounded their safe way: ε_UB up; ε_LB and the ceiling (itself an ε_LB) down.
        ub = "inf" if math.isinf(self.epsilon_ub) else fmt_upper_bound(self.epsilon_ub, 4)
        lb, ceiling = fmt_lower_bound(self.epsilon_lb, 4), fmt_lower_bound(self.ceiling, 4)
        return (
            f"{self.name}: {self.status} (eps_LB {lb}, eps_UB {ub}, ceiling "
            f"{ceiling}, {self.num_trials} trainings, {self.seconds:.1f} s)"
        )


@dataclass(frozen=True, kw_only=True, eq=False)
class CheckReport:
    """The battery's verdict: one :class:`CheckOutcome` per check run.

    Attributes:
        train_fn: the training function's spec string (``MODULE:FUNCTION`` or ``path.py:FUNCTION``).
        model_fn: the model builder's spec string, ``None`` when not given.
        claim_description: the claim ε_UB describes, in words.
        delta: the δ at which every ε is stated.
        confidence: the battery's family-wise confidence (each check runs at a Bonferroni share).
        budget_minutes: the time budget split across the checks.
        outcomes: the checks' verdicts in the order they ran (unique names).
        seconds: wall time of the whole battery.
    """

    train_fn: str
    model_fn: str | None
    claim_description: str
    delta: float
    confidence: float
    budget_minutes: float
    outcomes: tuple[CheckOutcome, ...]
    seconds: float

    def __post_init__(self) -> None:
        _string("train_fn", self.train_fn)
        if self.model_fn is not None:
            _string("model_fn", self.model_fn)
        _string("claim_description", self.claim_description, allow_empty=True)
        object.__setattr__(self, "delta", v.open_unit("delta", self.delta))
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        object.__setattr__(self, "budget_minutes", v.positive("budget_minutes", self.budget_minutes))
        object.__setattr__(self, "seconds", v.non_negative("seconds", self.seconds))
        if isinstance(self.outcomes, (str, bytes, Mapping)):
            raise v.invalid_type(
                "outcomes", f"outcomes must be a sequence of CheckOutcome, got {type(self.outcomes).__name__}"
            )
        outcomes = tuple(self.outcomes)
        for i, outcome in enumerate(outcomes):
            if not isinstance(outcome, CheckOutcome):
                raise v.invalid_type("outcomes", f"outcomes[{i}] must be a CheckOutcome, got {type(outcome).__name__}")
        names = [o.name for o in outcomes]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise v.invalid("outcomes", f"outcomes must name each check once, got duplicates {duplicates}")
        object.__setattr__(self, "outcomes", outcomes)

    @property
    def violated(self) -> bool:
        """Some check showed ε_LB > ε_UB."""
        return any(o.violated for o in self.outcomes)

    @property
    def exit_status(self) -> int:
        """3 when a check is violated, else 0 (the CLI's exit status)."""
        return EXIT_VIOLATED if self.violated else 0

    @property
    def violations(self) -> tuple[CheckOutcome, ...]:
        """The violated checks, in the order they ran."""
        return tuple(o for o in self.outcomes if o.violated)

    @property
    def epsilon_ub(self) -> float | None:
        """The claim's ε at δ (the same for every check), ``None`` without outcomes."""
        return self.outcomes[0].epsilon_ub if self.outcomes else None

    def outcome(self, name: str) -> CheckOutcome:
        """The outcome of the check ``name``.

        Raises:
            ValueError: no check of that name ran.
        """
        for o in self.outcomes:
            if o.name == name:
                return o
        raise v.invalid("name", f"name must be one of the checks run {[o.name for o in self.outcomes]}, got {name!r}")

    def to_dict(self) -> dict[str, object]:
        """JSON-able dict with a schema version (derived keys are written for readers, ignored on load)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "train_fn": self.train_fn,
            "model_fn": self.model_fn,
            "claim_description": self.claim_description,
            "delta": self.delta,
            "confidence": self.confidence,
            "budget_minutes": self.budget_minutes,
            "seconds": self.seconds,
            "violated": self.violated,
            "exit_status": self.exit_status,
            "diagnosis": [o.name for o in diagnosis(self)],
            "outcomes": [o.to_dict() for o in self.outcomes],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CheckReport:
        """Rebuilds a report from :meth:`to_dict` output; derived keys are ignored.

        Raises:
            ValueError: wrong schema version, a missing key or an invalid value.
        """
        if not isinstance(data, Mapping):
            raise v.invalid_type("data", f"data must be a mapping, got {type(data).__name__}")
        version = data.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise v.invalid(None, f"schema_version must be {SCHEMA_VERSION}, got {version!r}")
        required = (
            "train_fn",
            "model_fn",
            "claim_description",
            "delta",
            "confidence",
            "budget_minutes",
            "outcomes",
            "seconds",
        )
        missing = [k for k in required if k not in data]
        if missing:
            raise v.invalid(None, f"check report is missing keys {missing}")
        raw = data["outcomes"]
        if isinstance(raw, (str, bytes, Mapping)) or not hasattr(raw, "__iter__"):
            raise v.invalid_type("outcomes", f"outcomes must be a list, got {type(raw).__name__}")
        outcomes = tuple(CheckOutcome.from_dict(o) for o in raw)
        return spec_from_dict(cls, {**{k: data[k] for k in required if k != "outcomes"}, "outcomes": outcomes})


def diagnosis(report: CheckReport) -> tuple[CheckOutcome, ...]:
    """The violated checks, root cause first: grey-box verdicts, then statistical ones.

    A grey-box violation is read off the mechanism itself and names the faulty step, so it
    outranks a statistical ε_LB that follows from it; among the grey-box checks their run order
    (the registry's, most specific cause first) decides, among the statistical ones a violation
    below its ceiling outranks a saturated one.
    """
    violated = [o for o in report.outcomes if o.violated]
    order = {o.name: i for i, o in enumerate(report.outcomes)}
    return tuple(sorted(violated, key=lambda o: (o.kind != "grey-box", o.saturated, order[o.name])))


def save_check_report(report: CheckReport, directory: str | os.PathLike[str]) -> Path:
    """Writes ``check.json`` under ``directory`` atomically; returns its path."""
    return save_value(report, directory, CHECK_FILE, kind=CheckReport)


def load_check_report(path: str | os.PathLike[str]) -> CheckReport:
    """Reads a check report from its directory or its ``check.json``."""
    report: CheckReport = load_value(path, CHECK_FILE, kind=CheckReport)
    return report
