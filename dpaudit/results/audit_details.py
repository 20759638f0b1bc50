"""What an audit result keeps beside its bounds: one frozen details type per audit procedure.

The ``details`` of an :class:`~dpaudit.results.audit.AuditResult` is one of these values. Each procedure writes its
own type, and every reader reads attributes, never keys:

* :class:`ScoresDetails` — IN/OUT observations (the multi-run game,
  :func:`dpaudit.privacy.audit_procedures.audit_from_scores`): the bounding counts and the threshold;
* :class:`WhiteBoxDetails` — the same for the white-box per-step game, with the run's own claim
  and the composed estimate beside the per-step bound;
* :class:`OneRunDetails` — the one-run game (:func:`~dpaudit.privacy.audit_procedures.audit_from_one_run`):
  guesses, the k grid, the curve of ε_LB by guesses and, for the f-DP bound, its trade-off family;
* :class:`PateAuditDetails` — the PATE aggregator game (:func:`attacks.audit.pate.pate_audit`);
* :class:`UploadAuditDetails` — the DSSGD upload game (:func:`attacks.federated.dssgd_audit.dssgd_upload_audit`);
* :class:`AuditDetails` — the base: the caller's free-form ``context`` only (training
  configuration, fingerprints, the audit's name), with typed views of the context keys the
  project itself writes.

Each type serialises to exactly the JSON object ``result.json`` has always held, key order
included: the fields the procedure computes first, then the caller's context, then what is
added after (the interval of a one-run estimate, the white-box run context). Loading picks the
type from the keys a stored object holds (:func:`details_from_dict`), so files written before
these types existed load unchanged. Torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import ClassVar, cast

from dpaudit import _validate as v
from dpaudit.store import freeze as _freeze
from dpaudit.store import thaw as _thaw

__all__ = [
    "AuditDetails",
    "ScoresDetails",
    "WhiteBoxDetails",
    "OneRunDetails",
    "PateAuditDetails",
    "UploadAuditDetails",
    "FullRunClaim",
    "ComposedEstimate",
    "GuessPoint",
    "CanaryCoordinate",
    "details_from_dict",
    "estimate_facts",
]

#: The game an upload audit's details name (:class:`UploadAuditDetails`).
UPLOAD_GAME = "dssgd-upload-canary"


@dataclass(frozen=True, kw_only=True)
class FullRunClaim:
    """The white-box audit's run-level claim, kept beside the per-step bound (never compared with it)."""

    description: str
    accountant: str
    epsilon_ub: float
    epsilon_ub_by_accountant: Mapping[str, float]
    epsilon_last_iterate: float | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon_ub_by_accountant", MappingProxyType(dict(self.epsilon_ub_by_accountant)))

    def to_dict(self) -> dict[str, object]:
        """The stored object (key order as written since white-box audits kept it)."""
        return {
            "description": self.description,
            "accountant": self.accountant,
            "epsilon_ub": self.epsilon_ub,
            "epsilon_ub_by_accountant": dict(self.epsilon_ub_by_accountant),
            "epsilon_last_iterate": self.epsilon_last_iterate,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> FullRunClaim:
        d = _pick(cls, data, "full_run_claim")
        by = d["epsilon_ub_by_accountant"]
        if not isinstance(by, Mapping):
            raise v.invalid_type(
                "full_run_claim",
                f"details['full_run_claim']['epsilon_ub_by_accountant'] must be a mapping, got {type(by).__name__}",
            )
        return cls(
            description=str(d["description"]),
            accountant=str(d["accountant"]),
            epsilon_ub=cast(float, d["epsilon_ub"]),
            epsilon_ub_by_accountant=by,
            epsilon_last_iterate=cast("float | None", d["epsilon_last_iterate"]),
        )


@dataclass(frozen=True, kw_only=True)
class ComposedEstimate:
    """The CLT composition of a white-box audit's per-step μ_LB over the run: an estimate, never a bound."""

    epsilon: float
    sampling_rate: float
    num_steps: int
    kind: str

    def to_dict(self) -> dict[str, object]:
        return {
            "epsilon": self.epsilon,
            "sampling_rate": self.sampling_rate,
            "num_steps": self.num_steps,
            "kind": self.kind,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> ComposedEstimate:
        d = _pick(cls, data, "composed_estimate")
        return cls(
            epsilon=cast(float, d["epsilon"]),
            sampling_rate=cast(float, d["sampling_rate"]),
            num_steps=cast(int, d["num_steps"]),
            kind=str(d["kind"]),
        )


@dataclass(frozen=True, kw_only=True)
class GuessPoint:
    """One point of a one-run audit's curve: r guesses, v of them correct, their own ε_LB."""

    num_guesses: int
    num_correct: int
    epsilon_lb: float

    def to_dict(self) -> dict[str, object]:
        return {"num_guesses": self.num_guesses, "num_correct": self.num_correct, "epsilon_lb": self.epsilon_lb}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> GuessPoint:
        d = _pick(cls, data, "guess_curve")
        # Stored numbers are kept as they are (no float()/int()): the file's bytes must round-trip.
        return cls(
            num_guesses=cast(int, d["num_guesses"]),
            num_correct=cast(int, d["num_correct"]),
            epsilon_lb=cast(float, d["epsilon_lb"]),
        )


@dataclass(frozen=True, kw_only=True)
class CanaryCoordinate:
    """The white-box Dirac canary as its details name it: the parameter, the flat index, the magnitude, why."""

    parameter: str
    index: int
    magnitude: float
    reason: str


def _pick(cls: type, data: Mapping[str, object], name: str) -> dict[str, object]:
    """The constructor arguments of ``cls`` read from a stored object (a missing key is named)."""
    if not isinstance(data, Mapping):
        raise v.invalid_type(name, f"details[{name!r}] must be a mapping, got {type(data).__name__}")
    wanted = [f.name for f in fields(cls)]
    missing = [k for k in wanted if k not in data]
    if missing:
        raise v.invalid(name, f"details[{name!r}] is missing keys {missing}")
    return {k: data[k] for k in wanted}


def _nested(value: object) -> object:
    """A field's stored form: nested detail values by their own ``to_dict``, frozen JSON thawed."""
    if isinstance(value, (FullRunClaim, ComposedEstimate, GuessPoint)):
        return value.to_dict()
    if isinstance(value, tuple) and value and isinstance(value[0], GuessPoint):
        return [p.to_dict() for p in value]
    return _thaw(value)


def _guess_curve(value: object) -> tuple[GuessPoint, ...]:
    if not isinstance(value, (list, tuple)):
        raise v.invalid_type("guess_curve", f"details['guess_curve'] must be a list, got {type(value).__name__}")
    return tuple(p if isinstance(p, GuessPoint) else GuessPoint.from_dict(p) for p in value)


#: How a stored value of a field becomes the field's typed value (others are frozen JSON).
_READERS: dict[str, Callable[[object], object]] = {
    "full_run_claim": lambda x: x if isinstance(x, FullRunClaim) or x is None else FullRunClaim.from_dict(x),  # type: ignore[arg-type]
    "composed_estimate": lambda x: x if isinstance(x, ComposedEstimate) or x is None else ComposedEstimate.from_dict(x),  # type: ignore[arg-type]
    "guess_curve": _guess_curve,
}


@dataclass(frozen=True, kw_only=True)
class AuditDetails:
    """The base details: the caller's free-form context, written after the procedure's own fields.

    Attributes:
        context: JSON-able facts the caller kept with the result (training configuration, the
            audit's name, fingerprints, the dataset's files). The keys the project writes there
            are read through the typed views below.
    """

    #: Fields written before the context, in order.
    HEAD: ClassVar[tuple[str, ...]] = ()
    #: Fields written after the context, in order.
    TAIL: ClassVar[tuple[str, ...]] = ()
    #: Fields left out of the stored object when ``None`` (absent in files that predate them).
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()

    context: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.context, Mapping):
            raise v.invalid_type("details", f"details context must be a mapping, got {type(self.context).__name__}")
        context = dict(self.context)
        # A context key that names a field the procedure writes first overrides it in place (as
        # a caller's key always did); the value moves to the field, so a loaded copy is equal.
        for name in self.HEAD:
            if name in context:
                object.__setattr__(self, name, context.pop(name))
        for f in fields(self):
            if f.name != "context":
                value = getattr(self, f.name)
                object.__setattr__(self, f.name, _READERS[f.name](value) if f.name in _READERS else _freeze(value))
        object.__setattr__(self, "context", _freeze(context))

    def to_dict(self) -> dict[str, object]:
        """The stored JSON object: head fields, the context, tail fields (``None`` optionals left out)."""
        out: dict[str, object] = {}
        for name in self.HEAD:
            value = getattr(self, name)
            if value is not None or name not in self.OPTIONAL:
                out[name] = _nested(value)
        out.update(_thaw(self.context))
        for name in self.TAIL:
            value = getattr(self, name)
            if value is not None or name not in self.OPTIONAL:
                out[name] = _nested(value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> AuditDetails:
        """Rebuilds this type from its stored object; keys that are no field form the context.

        Raises:
            ValueError: a required field is missing (named).
        """
        names = (*cls.HEAD, *cls.TAIL)
        missing = [k for k in names if k not in data and k not in cls.OPTIONAL]
        if missing:
            raise v.invalid("details", f"{cls.__name__} is missing keys {missing}")
        typed = {k: data[k] for k in names if k in data}
        return cls(**typed, context={k: x for k, x in data.items() if k not in typed})

    # Typed views of the context keys the audit runner writes (app/runs/audit).
    def _text(self, key: str) -> str | None:
        value = self.context.get(key)
        return value if isinstance(value, str) else None

    @property
    def score(self) -> str | None:
        """What the attack scored (e.g. the canary's negative loss on the final model)."""
        return self._text("score")

    @property
    def audit_name(self) -> str | None:
        """The audit's directory name under its run (set by ``dpaudit audit``)."""
        return self._text("audit_name")

    @property
    def init(self) -> str | None:
        """Where the multi-run game's trainings started (``worst-case``; ``None``: random)."""
        return self._text("init")

    @property
    def canary_name(self) -> str | None:
        """The black-box canary, in words (``None`` when not recorded or a white-box coordinate)."""
        return self._text("canary")

    @property
    def canary_coordinate(self) -> CanaryCoordinate | None:
        """The white-box Dirac canary (``None`` for other audits)."""
        c = self.context.get("canary")
        if not isinstance(c, Mapping) or not all(k in c for k in ("parameter", "index", "magnitude", "reason")):
            return None
        return CanaryCoordinate(
            parameter=str(c["parameter"]),
            index=int(c["index"]),
            magnitude=float(c["magnitude"]),
            reason=str(c["reason"]),
        )

    @property
    def fingerprints(self) -> dict[str, str]:
        """The SHA-256 fingerprints the stored trials were keyed on, by what they cover (``*_sha256`` keys)."""
        return {k.removesuffix("_sha256"): str(x) for k, x in self.context.items() if k.endswith("_sha256")}

    def covered_modules(self, function: str) -> tuple[dict[str, tuple[str, str]], tuple[str, ...]]:
        """The local modules ``function`` (``train_fn`` or ``model_fn``) imports: {name: (file, sha256)}, and the
        unresolved names."""
        modules = self.context.get(f"{function}_modules")
        found: dict[str, tuple[str, str]] = {}
        if isinstance(modules, Mapping):
            found = {
                str(n): (str(m.get("file", n)), str(m.get("sha256", "")))
                for n, m in modules.items()
                if isinstance(m, Mapping)
            }
        unresolved = self.context.get(f"{function}_unresolved")
        return found, tuple(map(str, unresolved)) if isinstance(unresolved, (list, tuple)) else ()

    @property
    def dataset_files(self) -> dict[str, str]:
        """The dataset's files and their MD5 digests (empty when not recorded)."""
        files = self.context.get("dataset_files")
        return {str(f): str(d) for f, d in files.items()} if isinstance(files, Mapping) else {}

    @property
    def assumed_curve(self) -> str:
        """The trade-off family a bound assumes (``gaussian`` unless a one-run f-DP bound names another)."""
        return "gaussian"


@dataclass(frozen=True, kw_only=True)
class ScoresDetails(AuditDetails):
    """Details of an IN/OUT-observation audit (the multi-run game; :class:`WhiteBoxDetails` for the per-step one).

    Attributes:
        threshold: the bounding threshold (``None``: none chosen).
        true_positives: IN observations at or above it, among the bounding ones.
        false_positives: OUT observations at or above it.
        bounding_num_in: IN observations the bound is computed on (half of them for ``split``).
        bounding_num_out: OUT observations the bound is computed on.
        num_tests: the Bonferroni factor paid.
        num_thresholds: candidate thresholds.
        split_seed: the seed of the random halves (``split`` only).
        estimate_kind: what ``epsilon_estimate`` is, in words.
        estimate_interval: the estimate's interval per canary copy (``None`` upper end: ∞).
        estimate_interval_confidence: its confidence.
    """

    HEAD: ClassVar[tuple[str, ...]] = (
        "threshold",
        "true_positives",
        "false_positives",
        "bounding_num_in",
        "bounding_num_out",
        "num_tests",
        "num_thresholds",
        "split_seed",
        "estimate_kind",
        "estimate_interval",
        "estimate_interval_confidence",
    )
    OPTIONAL: ClassVar[frozenset[str]] = frozenset({"split_seed", "estimate_interval", "estimate_interval_confidence"})

    threshold: float | None
    true_positives: int
    false_positives: int
    bounding_num_in: int
    bounding_num_out: int
    num_tests: int
    num_thresholds: int
    split_seed: int | None = None
    estimate_kind: str
    estimate_interval: tuple[float, float | None] | None = None
    estimate_interval_confidence: float | None = None


@dataclass(frozen=True, kw_only=True)
class WhiteBoxDetails(ScoresDetails):
    """Details of the white-box per-step game: the IN/OUT facts, then the caller's context, then the run's own context.

    Attributes:
        full_run_claim: the run's own claim, for context (ε_UB of the result is one step's).
        mu_step_lb: the per-step μ lower bound the composed estimate uses.
        composed_estimate: the CLT composition over the run (an estimate, never a bound).
    """

    TAIL: ClassVar[tuple[str, ...]] = ("full_run_claim", "mu_step_lb", "composed_estimate")
    OPTIONAL: ClassVar[frozenset[str]] = ScoresDetails.OPTIONAL | {"full_run_claim", "mu_step_lb", "composed_estimate"}

    full_run_claim: FullRunClaim | None = None
    mu_step_lb: float | None = None
    composed_estimate: ComposedEstimate | None = None


@dataclass(frozen=True, kw_only=True)
class OneRunDetails(AuditDetails):
    """Details of a one-run audit (Steinke, Nasr & Jagielski 2023; or the f-DP bound).

    Attributes:
        num_guesses: r, the guesses of the bounding k.
        num_correct: v, the correct ones.
        num_canaries: m.
        guess_counts: the k tried (Bonferroni over them).
        tie_break_seed: the seed of the order tied scores are guessed in.
        guess_curve: ε_LB by number of guesses, each point bounded alone.
        one_run_bound: ``steinke`` or ``fdp``.
        mu_lb: ``fdp``: the rejected μ.
        tradeoff_curve: ``fdp``: the trade-off family assumed.
        sampling_rate: ``fdp``: q of the subsampled curve.
        bound_assumption: ``fdp``: what the bound assumes, in words.
        estimate_interval: the point estimate's interval (when both sides were guessed).
        estimate_interval_confidence: its confidence.
    """

    HEAD: ClassVar[tuple[str, ...]] = (
        "num_guesses",
        "num_correct",
        "num_canaries",
        "guess_counts",
        "tie_break_seed",
        "guess_curve",
        "one_run_bound",
        "mu_lb",
        "tradeoff_curve",
        "sampling_rate",
        "bound_assumption",
    )
    TAIL: ClassVar[tuple[str, ...]] = ("estimate_interval", "estimate_interval_confidence")
    # The k grid, the tie-break seed and the bound's name were recorded from 2026-11-24 on.
    OPTIONAL: ClassVar[frozenset[str]] = frozenset(
        {
            "guess_counts",
            "tie_break_seed",
            "one_run_bound",
            "mu_lb",
            "tradeoff_curve",
            "sampling_rate",
            "bound_assumption",
            "estimate_interval",
            "estimate_interval_confidence",
        }
    )

    num_guesses: int
    num_correct: int
    num_canaries: int
    guess_counts: tuple[int, ...] | None = None
    tie_break_seed: int | None = None
    guess_curve: tuple[GuessPoint, ...]
    one_run_bound: str | None = None
    mu_lb: float | None = None
    tradeoff_curve: str | None = None
    sampling_rate: float | None = None
    bound_assumption: str | None = None
    estimate_interval: tuple[float, float | None] | None = None
    estimate_interval_confidence: float | None = None

    @property
    def assumed_curve(self) -> str:
        return self.tradeoff_curve or "gaussian"


@dataclass(frozen=True, kw_only=True)
class PateAuditDetails(AuditDetails):
    """Details of the PATE aggregator game: one query answered on neighbouring vote histograms."""

    HEAD: ClassVar[tuple[str, ...]] = (
        "game",
        "aggregator",
        "parameters",
        "num_teachers",
        "num_classes",
        "votes",
        "neighbour_votes",
        "choice_of_votes",
        "outputs",
        "counts",
        "neighbour_counts",
        "event",
        "true_positives",
        "false_positives",
        "num_tests",
        "seed",
        "estimate_kind",
    )

    game: str
    aggregator: str
    parameters: Mapping[str, float]
    num_teachers: int
    num_classes: int
    votes: tuple[int, ...]
    neighbour_votes: tuple[int, ...]
    choice_of_votes: str
    outputs: tuple[str, ...]
    counts: tuple[int, ...]
    neighbour_counts: tuple[int, ...]
    event: str
    true_positives: int
    false_positives: int
    num_tests: int
    seed: int
    estimate_kind: str


@dataclass(frozen=True, kw_only=True)
class UploadAuditDetails(ScoresDetails):
    """Details of the DSSGD upload game: the chosen statistic's IN/OUT details, then the game's own facts."""

    HEAD: ClassVar[tuple[str, ...]] = (
        *ScoresDetails.HEAD,
        "game",
        "statistic",
        "statistics",
        "epsilon_lb_by_statistic",
        "confidence_per_statistic",
        "epsilon_ub_per_turn",
        "epsilon_per_parameter",
        "exceeds_per_parameter",
        "uploads_per_turn",
        "num_canary_coordinates",
        "in_rate_any_canary_coordinate",
        "out_rate_any_canary_coordinate",
        "seconds",
    )
    TAIL: ClassVar[tuple[str, ...]] = ("epsilon_ub_note",)
    OPTIONAL: ClassVar[frozenset[str]] = ScoresDetails.OPTIONAL | {"epsilon_ub_note"}

    game: str = UPLOAD_GAME
    statistic: str
    statistics: tuple[str, ...]
    epsilon_lb_by_statistic: Mapping[str, float]
    confidence_per_statistic: float
    epsilon_ub_per_turn: float
    epsilon_per_parameter: float | None
    exceeds_per_parameter: bool | None
    uploads_per_turn: int | None
    num_canary_coordinates: int
    in_rate_any_canary_coordinate: float
    out_rate_any_canary_coordinate: float
    seconds: float
    epsilon_ub_note: str | None = None


def details_from_dict(data: Mapping[str, object], *, method: str | None = None) -> AuditDetails:
    """The typed details of a stored (or caller-built) object, by the keys it holds and the result's ``method``.

    Raises:
        TypeError: ``data`` is not a mapping.
    """
    if not isinstance(data, Mapping):
        raise v.invalid_type("details", f"details must be a mapping, got {type(data).__name__}")
    kind: type[AuditDetails] = AuditDetails
    if data.get("game") == UPLOAD_GAME and "bounding_num_in" in data:
        kind = UploadAuditDetails
    elif "aggregator" in data and "neighbour_votes" in data:
        kind = PateAuditDetails
    elif "guess_curve" in data and "num_guesses" in data:
        kind = OneRunDetails
    elif "bounding_num_in" in data and "estimate_kind" in data:
        kind = WhiteBoxDetails if method == "white-box" else ScoresDetails
    if kind is not AuditDetails:
        try:
            return kind.from_dict(data)
        except (TypeError, ValueError):
            pass  # a hand-made or damaged object: kept whole as context, as it was stored
    return AuditDetails(context=data)


def estimate_facts(details: AuditDetails) -> tuple[tuple[float, float | None] | None, float | None, str | None]:
    """(interval, its confidence, what the estimate is) of a result's ε estimate, ``None`` where not recorded."""
    interval = confidence = kind = None
    if isinstance(details, (ScoresDetails, OneRunDetails)):
        interval, confidence = details.estimate_interval, details.estimate_interval_confidence
    if isinstance(details, (ScoresDetails, PateAuditDetails)):
        kind = details.estimate_kind
    return interval, confidence, kind
