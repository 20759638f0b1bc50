"""Neighbouring replay: does a defense's whole pipeline respect its claim's neighbouring relation?

A privacy claim covers a pipeline, not one formula (docs/privacy/accounting.md, "What a claim
covers"). The replay runs a defense's own code on a dataset D and on a neighbour D′ (one record
removed or added) with identical randomness, and records a :class:`ReplayTrace` of each run:

* the **mechanism inputs** — each value that enters a claimed mechanism before its noise (a
  DP-SGD step's clipped sum, a PATE query's vote histogram, a DSSGD participant's clipped
  upload), with the sensitivity the claim's analysis assumes for it and the norm it is measured
  in;
* the **released values** — everything else the run releases, stores or sends off a
  participant (partitions, preprocessing statistics, uploads' side fields, the steps taken, the
  lots drawn), which the claim covers only if it does not depend on the private data at all.

:func:`compare_traces` then checks the two traces: the same mechanism inputs in the same order
(no data-dependent control flow), each differing by no more than its sensitivity, and every
released value identical. This is the deterministic half of grey-box auditing (Cebere et al.
2026, "Privacy in Theory, Bugs in Practice"): one pair of runs shows a violation, and the
finding names the value that leaked.

Torch-free: traces hold NumPy arrays.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from dpaudit import _validate as v

__all__ = ["NORMS", "MechanismInput", "ReplayFinding", "ReplayTrace", "ReplayVerdict", "compare_traces", "neighbours"]

#: The norms a sensitivity may be stated in.
NORMS = ("l1", "l2", "linf")


def _frozen(name: str, value: object) -> np.ndarray:
    arr = np.array(value, dtype=np.float64, copy=True)
    if not np.all(np.isfinite(arr)):
        raise v.invalid(name, f"{name} must be finite, got a non-finite entry")
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, kw_only=True)
class MechanismInput:
    """One value that enters a claimed mechanism, before its noise.

    Attributes:
        name: what it is and where, unique within a trace (``"step 12: clipped sum"``,
            ``"query 3: votes"``, ``"round 2, participant 1: upload"``); the two runs of a
            replay must produce the same names in the same order.
        value: the value as the mechanism receives it (any shape).
        sensitivity: the largest change of ``value`` between neighbours that the claim's
            analysis assumes (C for a DP-SGD step, √2 for a PATE vote histogram in L2).
        norm: the norm ``sensitivity`` is stated in, one of :data:`NORMS`.
    """

    name: str
    value: np.ndarray
    sensitivity: float
    norm: str = "l2"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise v.invalid("name", f"name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "value", _frozen(f"{self.name}: value", self.value))
        if not (
            isinstance(self.sensitivity, (int, float)) and math.isfinite(self.sensitivity) and self.sensitivity >= 0
        ):
            raise v.invalid("sensitivity", f"sensitivity must be a finite number ≥ 0, got {self.sensitivity!r}")
        if self.norm not in NORMS:
            raise v.invalid("norm", f"norm must be one of {NORMS}, got {self.norm!r}")


@dataclass(frozen=True, kw_only=True)
class ReplayTrace:
    """What one run of a defense's pipeline fed its mechanisms and released besides.

    Attributes:
        defense: the registered defense that ran.
        mechanism_inputs: every mechanism input, in the order the run produced them.
        released: every other value the run releases, stores or sends off a participant, by a
            name unique within the trace (``"partition of teacher 3"``, ``"input mean"``,
            ``"lot at step 4"``); numbers or arrays. A value that is private by design and never
            leaves the trusted side (raw votes kept apart from the published record) is not
            listed here.
    """

    defense: str
    mechanism_inputs: tuple[MechanismInput, ...] = ()
    released: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.defense, str) or not self.defense:
            raise v.invalid("defense", f"defense must be a non-empty string, got {self.defense!r}")
        inputs = tuple(self.mechanism_inputs)
        names = [m.name for m in inputs]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise v.invalid("mechanism_inputs", f"mechanism input names must be unique, got {dup!r} twice")
        object.__setattr__(self, "mechanism_inputs", inputs)
        object.__setattr__(
            self, "released", {str(k): _frozen(f"released[{k!r}]", x) for k, x in dict(self.released).items()}
        )


@dataclass(frozen=True, kw_only=True)
class ReplayFinding:
    """One way the neighbouring run differed outside what the claim covers.

    Attributes:
        kind: ``"control-flow"`` (different mechanism inputs were produced), ``"sensitivity"``
            (an input moved by more than its sensitivity) or ``"released"`` (a value released
            outside the mechanism differs, or exists in one run only).
        name: the mechanism input or released value concerned.
        measured: the change measured (the norm of the difference; ``inf`` for a value present
            in one run only or of another shape).
        allowed: what the claim allows (the sensitivity; 0 for a released value).
        message: one sentence in the user's terms.
    """

    kind: str
    name: str
    measured: float
    allowed: float
    message: str


@dataclass(frozen=True, kw_only=True)
class ReplayVerdict:
    """The comparison of a run on D with a run on a neighbour D′.

    Attributes:
        defense: the defense replayed.
        num_mechanism_inputs: how many mechanism inputs each run produced (of the run on D).
        max_ratio: the largest measured change over its sensitivity across the mechanism inputs
            both runs share (0 when none moved; ``inf`` when an input with sensitivity 0 moved).
        findings: every difference outside the claim, in trace order; empty when it holds.
    """

    defense: str
    num_mechanism_inputs: int
    max_ratio: float
    findings: tuple[ReplayFinding, ...]

    @property
    def holds(self) -> bool:
        """Whether only the mechanisms' inputs differ, each by no more than its sensitivity."""
        return not self.findings

    def summary(self) -> str:
        """One line: holds, or the first finding."""
        if self.holds:
            return (
                f"{self.defense}: neighbouring replay holds ({self.num_mechanism_inputs} "
                f"mechanism inputs, largest change {self.max_ratio:.3g} of its "
                "sensitivity)"
            )
        more = f" (and {len(self.findings) - 1} more)" if len(self.findings) > 1 else ""
        return f"{self.defense}: {self.findings[0].message}{more}"


def _norm(diff: np.ndarray, norm: str) -> float:
    flat = diff.reshape(-1)
    if flat.size == 0:
        return 0.0
    if norm == "l1":
        return float(np.abs(flat).sum())
    if norm == "linf":
        return float(np.abs(flat).max())
    return float(np.sqrt(np.square(flat).sum()))


def compare_traces(
    run: ReplayTrace, neighbour: ReplayTrace, *, rtol: float = 1e-6, atol: float = 1e-9
) -> ReplayVerdict:
    """Checks that a neighbouring run differs only in its mechanisms' inputs, within their sensitivity.

    Args:
        run: the trace of the run on D.
        neighbour: the trace of the run on D′ (one record added or removed), same randomness.
        rtol: relative slack on each sensitivity (floating-point summation order).
        atol: absolute slack, also the tolerance for released values to count as equal.

    Returns:
        The verdict, with one finding per difference outside the claim.

    Raises:
        ValueError: the traces are of different defenses.
    """
    if run.defense != neighbour.defense:
        raise v.invalid("neighbour", f"neighbour must be a trace of {run.defense!r}, got {neighbour.defense!r}")
    findings: list[ReplayFinding] = []
    names = [m.name for m in run.mechanism_inputs]
    other = [m.name for m in neighbour.mechanism_inputs]
    if names != other:
        first = next(
            (i for i, (a, b) in enumerate(zip(names, other, strict=False)) if a != b), min(len(names), len(other))
        )
        findings.append(
            ReplayFinding(
                kind="control-flow",
                name=names[first] if first < len(names) else other[first],
                measured=math.inf,
                allowed=0.0,
                message=(
                    f"the neighbouring run fed its mechanisms differently ({len(names)} "
                    f"inputs on D, {len(other)} on D′, first differing at position {first}): "
                    "the control flow depends on the data"
                ),
            )
        )
    by_name = {m.name: m for m in neighbour.mechanism_inputs}
    max_ratio = 0.0
    for m in run.mechanism_inputs:
        twin = by_name.get(m.name)
        if twin is None:
            continue
        if twin.value.shape != m.value.shape:
            measured = math.inf
        else:
            measured = _norm(m.value - twin.value, m.norm)
        allowed = max(m.sensitivity, twin.sensitivity)
        ratio = measured / allowed if allowed > 0 else (0.0 if measured <= atol else math.inf)
        max_ratio = max(max_ratio, ratio)
        if measured > allowed * (1 + rtol) + atol:
            findings.append(
                ReplayFinding(
                    kind="sensitivity",
                    name=m.name,
                    measured=measured,
                    allowed=allowed,
                    message=f"{m.name} moved by {measured:.6g} in {m.norm.upper()} between "
                    f"neighbours, more than the claimed sensitivity {allowed:.6g}",
                )
            )
    for key in list(run.released) + [k for k in neighbour.released if k not in run.released]:
        a, b = run.released.get(key), neighbour.released.get(key)
        if a is None or b is None:
            where = "D" if b is None else "D′"
            findings.append(
                ReplayFinding(
                    kind="released",
                    name=key,
                    measured=math.inf,
                    allowed=0.0,
                    message=f"{key} is released only by the run on {where}: what is released depends on the data",
                )
            )
            continue
        if a.shape != b.shape:
            findings.append(
                ReplayFinding(
                    kind="released",
                    name=key,
                    measured=math.inf,
                    allowed=0.0,
                    message=f"{key} has shape {a.shape} on D and {b.shape} on D′: it depends on the "
                    "private data outside the claimed mechanism",
                )
            )
            continue
        if not np.allclose(a, b, rtol=0.0, atol=atol):
            measured = _norm(a - b, "linf")
            findings.append(
                ReplayFinding(
                    kind="released",
                    name=key,
                    measured=measured,
                    allowed=0.0,
                    message=f"{key} differs between neighbours (by up to {measured:.6g}) and passes "
                    "through no claimed mechanism: it leaks the private data",
                )
            )
    return ReplayVerdict(
        defense=run.defense,
        num_mechanism_inputs=len(run.mechanism_inputs),
        max_ratio=max_ratio,
        findings=tuple(findings),
    )


def neighbours(ids: Sequence[int], *, removed: int | None = None, added: int | None = None) -> tuple[int, ...]:
    """The sorted ids of D′: ``ids`` with ``removed`` taken out or ``added`` put in (exactly one of them).

    Raises:
        ValueError: neither or both given, ``removed`` not in ``ids``, or ``added`` already in it.
    """
    pool = sorted(int(i) for i in ids)
    if (removed is None) == (added is None):
        raise v.invalid("removed", "give exactly one of removed= and added=")
    if added is None:
        if removed not in pool:
            raise v.invalid("removed", f"removed must be one of the ids, got {removed}")
        return tuple(i for i in pool if i != removed)
    if added in pool:
        raise v.invalid("added", f"added must not already be one of the ids, got {added}")
    return tuple(sorted([*pool, int(added)]))
