"""The outcome of an audit: an empirical lower bound ε_LB beside the claim's upper bound ε_UB.

:class:`AuditResult` is computed by :mod:`dpaudit.privacy.audit_procedures` (the statistics of docs/audits/statistics.md
§1–5) and stored as ``result.json`` in the audit's directory; it carries its verdicts
(``violation`` = ε_LB > ε_UB, ``tightness`` = ε_LB / ε_UB) so that reports only render them.

Every result also carries its ``ceiling``: the largest ε_LB the audit's design could have produced
— the same counts, Bonferroni factor, confidence, δ and bound with a perfect attack (every IN
scored above every OUT; for one-run, every guess correct). A Clopper–Pearson bound on n
observations per side cannot exceed ≈ ln(n) (docs/audits/statistics.md §1: 3.28 at n = 100, 5.60 at 1,000), and
Steinke et al.'s one-run bound is capped by its guess count (docs/audits/statistics.md §4, §8), so ε_LB = 0.4 means
"a weak attack" beside a ceiling of 22 but "a design that could not say more" beside 0.6.
:class:`EpsilonByTrials` holds ε_LB and the ceiling recomputed on prefixes of the observations,
for the report's plot of both against the number of trials.

For DP-SGD-family claims a result also carries ``epsilon_last_iterate``, the last-iterate ε of
Steinke et al. (2024): the final model's exact ε when the losses are linear, hence a *lower* bound
on its worst case over losses, and only a heuristic for other losses (the paper constructs losses
whose final model exceeds it). It is neither a cap on what an attack can show nor an upper bound.
:attr:`AuditResult.gap` splits ε_UB − ε_LB into what the design allows (the ceiling) and what the
attack leaves, and gives ε_UB − last-iterate beside them as what the linear-loss heuristic
suggests a final-model audit cannot see. Torch-free.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from dpaudit import _validate as v
from dpaudit.results.audit_details import AuditDetails, details_from_dict
from dpaudit.specs import spec_from_dict
from dpaudit.store import SCHEMA_VERSION, load_value, save_value

__all__ = [
    "AUDIT_METHODS",
    "AUDIT_BOUNDS",
    "ASSUMPTION_NONE",
    "ASSUMPTION_GDP",
    "ASSUMPTION_APPROXIMATE",
    "default_assumption",
    "ONE_RUN_BOUNDS",
    "THREAT_MODELS",
    "RESULT_FILE",
    "AuditResult",
    "EpsilonByTrials",
    "save_audit_result",
    "load_audit_result",
]

AUDIT_METHODS = ("multi-run", "one-run", "white-box")
AUDIT_BOUNDS = ("clopper-pearson", "gdp", "one-run", "one-run-fdp")
#: The bounds of the one-run game: Steinke, Nasr & Jagielski (2023), and the f-DP bound of
#: Mahloujifar, Melis & Chaudhuri (2025) (:mod:`dpaudit.privacy.fdp_one_run`).
ONE_RUN_BOUNDS = ("one-run", "one-run-fdp")
THREAT_MODELS = ("black-box", "white-box")
RESULT_FILE = "result.json"
#: What each bound assumes about the audited mechanism beyond its (ε, δ) claim. ``gdp`` and
#: ``one-run-fdp`` reject a Gaussian-shaped trade-off curve and are lower bounds on ε only for
#: claims of that family (:attr:`dpaudit.privacy.claims.PrivacyClaim.trade_off_family`).
ASSUMPTION_NONE = {"clopper-pearson": "none (Clopper-Pearson)", "one-run": "none (Steinke et al. one-run)"}
ASSUMPTION_GDP = "gaussian trade-off (GDP)"
#: Appended when the claim's curve is Gaussian only by the central-limit approximation (DP-SGD's Poisson sampling).
ASSUMPTION_APPROXIMATE = "; approximate for Poisson-sampled steps (central limit, Dong, Roth & Su 2022, Thm 3.5)"


def default_assumption(bound: str, curve: str = "gaussian") -> str:
    """The assumption of ``bound`` as results name it (``curve``: the f-DP one-run family)."""
    if bound in ASSUMPTION_NONE:
        return ASSUMPTION_NONE[bound]
    if bound == "gdp":
        return ASSUMPTION_GDP
    return f"{curve} trade-off (f-DP one-run)"


# One-run audits guess IN for the top-k and OUT for the bottom-k scores (Steinke et al. 2023, §5).
_STRATEGIES = ("bonferroni", "split", "fixed", "top-bottom")
# ε_LB and its ceiling come from the same bisection and formulas; allow their rounding only.
_CEILING_TOLERANCE = 1e-6


@dataclass(frozen=True, kw_only=True, eq=False)
class AuditResult:
    """The outcome of one audit: ε_LB beside the ε_UB it is set against.

    Attributes:
        epsilon_lb: the lower bound; holds with probability ≥ ``confidence`` (after paying for
            the threshold choice) if the audited mechanism satisfies the claim.
        confidence: confidence of ``epsilon_lb``, e.g. 0.95.
        method: the game: ``multi-run`` (one observation per training), ``one-run`` (m
            canaries in one training) or ``white-box`` (one observation per released step).
        bound: ``clopper-pearson``, ``gdp`` (assumes a Gaussian trade-off curve, exact for a
            Gaussian mechanism), ``one-run`` (Steinke et al. 2023) or ``one-run-fdp``
            (Mahloujifar et al. 2025; assumes the trade-off curve family named in ``details``).
        delta: the δ at which both bounds are stated.
        threshold_strategy: how the test was chosen: ``bonferroni``, ``split``, ``fixed``
            (one threshold set before the scores were seen) or ``top-bottom`` (one-run guesses).
        num_in: IN observations (IN canaries for one-run).
        num_out: OUT observations (OUT canaries for one-run).
        epsilon_ub: the claim's tightest upper bound at ``delta`` (``math.inf`` if none).
        accountant: the accountant ``epsilon_ub`` came from.
        epsilon_ub_by_accountant: ε_UB under every accountant that could evaluate the claim.
        epsilon_estimate: an uncorrected point *estimate* of ε (best threshold on the raw
            rates, or a composed GDP estimate); never a bound, ``None`` if not computed.
        group_size: canary multiplicity k; ``epsilon_lb`` is already divided by k.
        threat_model: ``black-box`` (final model only) or ``white-box`` (every update).
        claim_description: the mechanism ``epsilon_ub`` describes, in words. For white-box
            audits this is ONE step of the Gaussian mechanism, not the whole training.
        details: what the procedure kept beside the bounds, typed by procedure
            (:mod:`dpaudit.results.audit_details`: threshold and counts, one-run guesses, the
            white-box run's own claim, the PATE or DSSGD game, the caller's context). A mapping
            given here is read into its type (:func:`~dpaudit.results.audit_details.details_from_dict`).
        ceiling: the largest ``epsilon_lb`` this design could report: the same counts
            (observations, or canaries and guess counts), Bonferroni factor, confidence, δ, group
            size and bound with a perfect attack (:func:`dpaudit.privacy.audit_procedures.audit_ceiling`).
            ``None`` only for results stored before ceilings were reported.
        epsilon_last_iterate: the last-iterate ε of the claim at ``delta`` (Steinke et al. 2024,
            "The Last Iterate Advantage", Theorem 1 / Heuristic 1;
            :func:`dpaudit.privacy.last_iterate.claim_last_iterate_epsilon`): the final model's
            exact ε if the losses were linear, so a lower bound on its worst case over losses;
            for other losses a heuristic, not an upper bound (losses exist that exceed it). ``None``
            for claims outside the DP-SGD family (PATE, DSSGD, no mechanism, DP-PCA composed
            in) and for results stored before it was recorded.
        assumption: what ``epsilon_lb`` assumes about the mechanism beyond its claim:
            ``none (Clopper-Pearson)`` / ``none (Steinke et al. one-run)``, or a trade-off
            family (``gaussian trade-off (GDP)``, ``… (f-DP one-run)``), under which alone the
            bound holds. Empty: derived from ``bound`` (results stored before it was recorded).
    """

    epsilon_lb: float
    confidence: float
    method: str
    bound: str
    delta: float
    threshold_strategy: str
    num_in: int
    num_out: int
    epsilon_ub: float
    accountant: str
    epsilon_ub_by_accountant: Mapping[str, float] = field(default_factory=dict)
    epsilon_estimate: float | None = None
    group_size: int = 1
    threat_model: str = "black-box"
    claim_description: str = ""
    details: AuditDetails = field(default_factory=AuditDetails)
    ceiling: float | None = None
    assumption: str = ""
    epsilon_last_iterate: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon_lb", v.non_negative("epsilon_lb", self.epsilon_lb))
        if self.ceiling is not None:
            object.__setattr__(self, "ceiling", v.non_negative("ceiling", self.ceiling))
            if self.epsilon_lb > self.ceiling + _CEILING_TOLERANCE:
                raise v.invalid(
                    "ceiling",
                    f"ceiling must be >= epsilon_lb={self.epsilon_lb!r} (a perfect attack "
                    f"bounds every attack), got {self.ceiling!r}",
                )
        if self.epsilon_last_iterate is not None:
            li = v.real("epsilon_last_iterate", self.epsilon_last_iterate)
            if li < 0:
                raise v.invalid(
                    "epsilon_last_iterate", f"epsilon_last_iterate must be >= 0, got {self.epsilon_last_iterate!r}"
                )
            object.__setattr__(self, "epsilon_last_iterate", li)
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        v.choice("method", self.method, AUDIT_METHODS)
        v.choice("bound", self.bound, AUDIT_BOUNDS)
        object.__setattr__(self, "delta", v.open_unit("delta", self.delta))
        v.choice("threshold_strategy", self.threshold_strategy, _STRATEGIES)
        object.__setattr__(self, "num_in", v.integer("num_in", self.num_in, minimum=0))
        object.__setattr__(self, "num_out", v.integer("num_out", self.num_out, minimum=0))
        ub = v.real("epsilon_ub", self.epsilon_ub)
        if ub < 0:
            raise v.invalid("epsilon_ub", f"epsilon_ub must be >= 0, got {self.epsilon_ub!r}")
        object.__setattr__(self, "epsilon_ub", ub)
        if not isinstance(self.accountant, str) or not self.accountant:
            raise v.invalid_type("accountant", f"accountant must be a non-empty string, got {self.accountant!r}")
        if not isinstance(self.epsilon_ub_by_accountant, Mapping):
            raise v.invalid_type(
                "epsilon_ub_by_accountant",
                f"epsilon_ub_by_accountant must be a mapping, got {type(self.epsilon_ub_by_accountant).__name__}",
            )
        by = {str(k): v.real(f"epsilon_ub_by_accountant[{k!r}]", x) for k, x in self.epsilon_ub_by_accountant.items()}
        object.__setattr__(self, "epsilon_ub_by_accountant", MappingProxyType(by))
        if self.epsilon_estimate is not None:
            object.__setattr__(self, "epsilon_estimate", v.real("epsilon_estimate", self.epsilon_estimate))
        object.__setattr__(self, "group_size", v.integer("group_size", self.group_size, minimum=1))
        v.choice("threat_model", self.threat_model, THREAT_MODELS)
        if not isinstance(self.claim_description, str):
            raise v.invalid_type(
                "claim_description", f"claim_description must be a string, got {self.claim_description!r}"
            )
        if isinstance(self.details, Mapping):
            object.__setattr__(self, "details", details_from_dict(self.details, method=self.method))
        elif not isinstance(self.details, AuditDetails):
            raise v.invalid_type(
                "details", f"details must be AuditDetails or a mapping, got {type(self.details).__name__}"
            )
        if self.method == "one-run" and self.bound not in ONE_RUN_BOUNDS:
            raise v.invalid("method", f"method 'one-run' needs a bound in {ONE_RUN_BOUNDS}, got bound={self.bound!r}")
        if not isinstance(self.assumption, str):
            raise v.invalid_type("assumption", f"assumption must be a string, got {self.assumption!r}")
        if not self.assumption:
            object.__setattr__(self, "assumption", default_assumption(self.bound, self.details.assumed_curve))

    @property
    def violation(self) -> bool:
        """ε_LB > ε_UB: the implementation (or its claim) is broken, at ``confidence``."""
        return self.epsilon_lb > self.epsilon_ub

    @property
    def tightness(self) -> float:
        """ε_LB / ε_UB (0 when ε_UB is ∞ or 0)."""
        if math.isinf(self.epsilon_ub) or self.epsilon_ub <= 0:
            return 0.0
        return self.epsilon_lb / self.epsilon_ub

    @property
    def ceiling_fraction(self) -> float | None:
        """ε_LB / ceiling: how much of what the design could show the attack showed (``None``
        without a ceiling; 0 when the ceiling is 0, a design that cannot show anything)."""
        if self.ceiling is None:
            return None
        return 0.0 if self.ceiling <= 0 else min(1.0, self.epsilon_lb / self.ceiling)

    @property
    def gap(self) -> dict[str, float | None]:
        """ε_UB − ε_LB split into what the design allows and what the attack leaves, with the last-iterate heuristic's
        reading beside it.

        With c = ``ceiling`` (ε_UB when unknown): ``design`` = max(0, ε_UB − c) (what no attack
        could show with the audit's counts) and ``attack`` = min(ε_UB, c) − ε_LB (what this attack
        left below what the design allows; negative only for a violation). The two add up to
        ε_UB − ε_LB, and both rest on bounds alone.

        ``last_iterate_heuristic`` = ε_UB − r with r = ``epsilon_last_iterate`` (``None`` without
        one) is *not* a third share: it is what the linear-loss heuristic of Steinke et al. (2024)
        suggests a final-model (black-box) audit cannot see. For linear losses r is the final
        model's exact ε, so there it is established; for other losses r is no upper bound (losses
        exist whose final model exceeds it), so ``attack`` is never capped at r. The four values
        the split is read from come along.
        """
        ub, li, lb = self.epsilon_ub, self.epsilon_last_iterate, self.epsilon_lb
        top = ub if self.ceiling is None else self.ceiling
        return {
            "epsilon_ub": ub,
            "epsilon_last_iterate": li,
            "ceiling": self.ceiling,
            "epsilon_lb": lb,
            "design": max(0.0, ub - top),
            "attack": min(ub, top) - lb,
            "last_iterate_heuristic": None if li is None else (0.0 if ub == li else ub - li),
        }

    def to_dict(self) -> dict[str, object]:
        """JSON-able dict (non-finite floats are handled by :mod:`dpaudit.store`)."""
        return {
            "schema_version": SCHEMA_VERSION,
            "epsilon_lb": self.epsilon_lb,
            "ceiling": self.ceiling,
            "ceiling_fraction": self.ceiling_fraction,
            "epsilon_ub": self.epsilon_ub,
            "epsilon_last_iterate": self.epsilon_last_iterate,
            "gap": self.gap,
            "accountant": self.accountant,
            "confidence": self.confidence,
            "delta": self.delta,
            "method": self.method,
            "violation": self.violation,
            "tightness": self.tightness,
            "bound": self.bound,
            "assumption": self.assumption,
            "threshold_strategy": self.threshold_strategy,
            "threat_model": self.threat_model,
            "num_in": self.num_in,
            "num_out": self.num_out,
            "group_size": self.group_size,
            "epsilon_ub_by_accountant": dict(self.epsilon_ub_by_accountant),
            "epsilon_estimate": self.epsilon_estimate,
            "claim_description": self.claim_description,
            "details": self.details.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> AuditResult:
        """Rebuilds a result from :meth:`to_dict` output; derived keys are ignored.

        ``ceiling`` and ``epsilon_last_iterate`` are optional: results written before they were
        reported (same schema version; the fields are additive) load with ``None``, and reports
        say they were not recorded.

        Raises:
            ValueError: wrong schema version or a missing key.
        """
        if not isinstance(data, Mapping):
            raise v.invalid_type("data", f"data must be a mapping, got {type(data).__name__}")
        version = data.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise v.invalid(None, f"schema_version must be {SCHEMA_VERSION}, got {version!r}")
        required = (
            "epsilon_lb",
            "confidence",
            "method",
            "bound",
            "delta",
            "threshold_strategy",
            "num_in",
            "num_out",
            "epsilon_ub",
            "accountant",
        )
        missing = [k for k in required if k not in data]
        if missing:
            raise v.invalid(None, f"audit result is missing keys {missing}")
        optional = (
            "epsilon_ub_by_accountant",
            "epsilon_estimate",
            "group_size",
            "threat_model",
            "claim_description",
            "details",
            "ceiling",
            "assumption",
            "epsilon_last_iterate",
        )
        stored = {k: data[k] for k in (*required, *optional) if k in data}
        details, method = stored.get("details"), stored["method"]
        if isinstance(details, Mapping) and isinstance(method, str):  # typed by the procedure that wrote it
            stored["details"] = details_from_dict(details, method=method)
        return spec_from_dict(cls, stored)

    def summary(self) -> str:
        """One line for terminals and logs."""
        from dpaudit.results.numbers import fmt_lower_bound, fmt_upper_bound

        # Each bound its safe way, four significant digits: ε_UB up; ε_LB and the ceiling (an ε_LB) down.
        ub = "inf" if math.isinf(self.epsilon_ub) else fmt_upper_bound(self.epsilon_ub, 4)
        flag = "VIOLATION" if self.violation else "ok"
        ceiling = "" if self.ceiling is None else f" [ceiling {fmt_lower_bound(self.ceiling, 4)}]"
        return (
            f"epsilon_lb {fmt_lower_bound(self.epsilon_lb, 4)}{ceiling} "
            f"({self.method}, {self.bound}, assumes {self.assumption}, "
            f"{self.confidence:.0%} confidence, "
            f"{self.num_in} in / {self.num_out} out) vs epsilon_ub {ub} "
            f"({self.accountant}) at delta={self.delta:g}: {flag}"
        )


@dataclass(frozen=True, kw_only=True, eq=False)
class EpsilonByTrials:
    """ε_LB and its ceiling for the audit recomputed on growing prefixes of its observations.

    Computed by :func:`dpaudit.privacy.audit_trials.epsilon_lb_by_trials` from an audit's stored scores;
    the report plots both against the number of observations, so a reader sees whether more
    trials would have raised the ceiling (and with it, possibly, ε_LB).

    Attributes:
        unit: what one observation is: ``trials`` (multi-run trainings), ``canaries`` (one-run) or
            ``steps`` (white-box per-step releases).
        num_observations: IN + OUT observations in each prefix, increasing.
        num_in: IN observations in each prefix.
        num_out: OUT observations in each prefix.
        epsilon_lb: the audit's ε_LB on each prefix (same bound, strategy, confidence, δ).
        ceiling: its ceiling on each prefix (a perfect attack on the same counts).
    """

    unit: str
    num_observations: tuple[int, ...]
    num_in: tuple[int, ...]
    num_out: tuple[int, ...]
    epsilon_lb: tuple[float, ...]
    ceiling: tuple[float, ...]

    def __post_init__(self) -> None:
        v.choice("unit", self.unit, ("trials", "canaries", "steps"))
        n = len(self.num_observations)
        for name in ("num_observations", "num_in", "num_out", "epsilon_lb", "ceiling"):
            values = tuple(getattr(self, name))
            if len(values) != n:
                raise ValueError(f"{name} must hold one entry per prefix ({n}), got {len(values)}")
            object.__setattr__(self, name, values)
        if any(b <= a for a, b in zip(self.num_observations, self.num_observations[1:])):
            raise v.invalid("num_observations", f"num_observations must increase, got {list(self.num_observations)}")
        bad = [i for i, (lb, c) in enumerate(zip(self.epsilon_lb, self.ceiling)) if lb > c + _CEILING_TOLERANCE]
        if bad:
            raise v.invalid(
                "ceiling",
                "ceiling must be >= epsilon_lb at every prefix, got epsilon_lb "
                f"{self.epsilon_lb[bad[0]]!r} > ceiling {self.ceiling[bad[0]]!r} at "
                f"prefix {bad[0]}",
            )


def save_audit_result(result: AuditResult, directory: str | os.PathLike[str]) -> Path:
    """Writes ``result.json`` under ``directory`` atomically; returns its path."""
    return save_value(result, directory, RESULT_FILE, kind=AuditResult)


def load_audit_result(path: str | os.PathLike[str]) -> AuditResult:
    """Reads an audit result from its directory or its ``result.json``."""
    result: AuditResult = load_value(path, RESULT_FILE, kind=AuditResult)
    return result
