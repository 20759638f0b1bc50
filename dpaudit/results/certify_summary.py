"""The certify run's verdicts: soundness violations and the summary stored as ``summary.json`` (torch-free).

:class:`SoundnessViolation` is a test input whose certified radius an attack broke (computed by
:func:`dpaudit.robustness.certification.soundness_violations`); :class:`CertifySummary` holds a
certify run's accuracies per radius and its verdicts, and :class:`SmoothingSummary` the
smoothing-specific part.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from dpaudit import _validate as v
from dpaudit.results.certification_spec import CERTIFICATION_NORMS
from dpaudit.specs import PlainSpec, spec_field, spec_from_dict
from dpaudit.store import freeze as _freeze
from dpaudit.store import read_json

__all__ = [
    "CERTIFY_SUMMARY_SCHEMA_VERSION",
    "SUMMARY_FILE",
    "UNNAMED_PREDICTION_RULE",
    "SoundnessViolation",
    "CertificateReach",
    "AttackedClassifier",
    "attacked_prediction_rule",
    "SmoothingSummary",
    "CertifySummary",
    "load_certify_summary",
    "StoredCertifySummary",
    "read_stored_summary",
    "stored_soundness_violations",
    "own_prediction_rule",
    "save_certify_summary",
    "smoothing_prediction_rule",
]


#: Version of ``summary.json`` written by the certify run.
CERTIFY_SUMMARY_SCHEMA_VERSION = 1
SUMMARY_FILE = "summary.json"


#: What a summary stored before prediction rules were named says about its classifier.
UNNAMED_PREDICTION_RULE = "not recorded (certified before the prediction rule was stored)"


def own_prediction_rule(bound: str, num_draws: int) -> str:
    """The classifier a noise layer's own certificate covers, in words (its conventional accuracy is this rule's).

    With Clopper–Pearson the certificate bounds the expected one-hot votes, so the classifier is
    the argmax of the vote counts; with Hoeffding or Bernstein it bounds the expected softmax,
    so the classifier is the argmax of the mean softmax (PixelDP's prediction, Lecuyer et al.
    2019, §3.3). Both are read from the same ``num_draws`` draws as the bounds.
    """
    rule = "vote-count argmax" if bound == "clopper-pearson" else "expected-softmax argmax"
    return f"{rule} over the {num_draws} certification draws"


def smoothing_prediction_rule(num_selection_draws: int) -> str:
    """The classifier CERTIFY covers (Cohen et al. 2019): its guess c_A, abstaining where p_A ≤ ½ (abstentions count as
    wrong)."""
    return f"CERTIFY: vote-count argmax over {num_selection_draws} selection draws, abstaining where p_A <= 1/2"


def _rule(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise v.invalid_type(name, f"{name} must be a non-empty string naming the prediction rule, got {value!r}")
    return value


def _accuracy(name: str, value: Any) -> float:
    value = v.real(name, value)
    if not 0.0 <= value <= 1.0:
        raise v.invalid(name, f"{name} must lie in [0, 1], got {value!r}")
    return value


def _accuracy_map(name: str, value: Any) -> Mapping[str, float]:
    if not isinstance(value, Mapping):
        raise v.invalid_type(name, f"{name} must be a mapping radius -> accuracy, got {type(value).__name__}")
    return _freeze({str(k): _accuracy(f"{name}[{k!r}]", a) for k, a in value.items()})


def _within_conventional(certified: Mapping[str, float], conventional: float, *, name: str) -> None:
    """Certified accuracy counts correct predictions of the same classifier, so it never exceeds that classifier's
    accuracy."""
    over = {r: a for r, a in certified.items() if a > conventional + 1e-12}
    if over:
        raise v.invalid(
            name,
            f"{name} must not exceed the conventional accuracy {conventional!r} of the same classifier, got {over}",
        )


@dataclass(frozen=True, kw_only=True)
class SoundnessViolation(PlainSpec):
    """One radius at which a certificate claims more than an attack left (a soundness bug).

    Certified accuracy is a lower bound on robust accuracy and the strongest attack's robust
    accuracy an upper bound (Lecuyer et al. 2019, §4; Cohen et al. 2019, §3), so
    ``certified_accuracy > robust_accuracy`` means a broken certificate or the rare failure of
    the 1 − η event behind its bounds.

    Attributes:
        certificate: the certificate's method (e.g. ``"hgm"``, ``"smoothing"``).
        radius: the perturbation radius.
        certified_accuracy: certified accuracy at ``radius``.
        robust_accuracy: the lowest accuracy any attack left at ``radius``.
    """

    certificate: str
    radius: float
    certified_accuracy: float
    robust_accuracy: float

    def __post_init__(self) -> None:
        if not isinstance(self.certificate, str) or not self.certificate:
            raise v.invalid_type("certificate", f"certificate must be a non-empty string, got {self.certificate!r}")
        object.__setattr__(self, "radius", v.non_negative("radius", self.radius))
        object.__setattr__(self, "certified_accuracy", _accuracy("certified_accuracy", self.certified_accuracy))
        object.__setattr__(self, "robust_accuracy", _accuracy("robust_accuracy", self.robust_accuracy))


@dataclass(frozen=True, kw_only=True)
class CertificateReach:
    """How far one certificate of one model reaches at the radii a run asked about (what the verdict reads).

    A certificate that certifies no test point at any non-zero radius asked is *vacuous at these
    radii*: "certified ≤ robust" then holds trivially, so it is no evidence of soundness, and the
    reader needs the radius the model does certify instead (``largest_radius``).

    Attributes:
        model_id, certificate: which model and which certificate (e.g. ``"secure-sgd"``, ``"smoothing"``).
        radii: the radii asked, ascending.
        certified_accuracy: at each of ``radii``.
        largest_radius: the largest radius certified on a correctly predicted test point (0: none).
        prediction_rule: the classifier the certificate covers, in words.
    """

    model_id: str
    certificate: str
    radii: tuple[float, ...]
    certified_accuracy: tuple[float, ...]
    largest_radius: float
    prediction_rule: str = UNNAMED_PREDICTION_RULE

    def __post_init__(self) -> None:
        for name in ("model_id", "certificate"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise v.invalid_type(name, f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        radii = tuple(v.non_negative("radii", r) for r in self.radii)
        accs = tuple(_accuracy("certified_accuracy", a) for a in self.certified_accuracy)
        if len(accs) != len(radii):
            raise v.invalid(
                "certified_accuracy",
                f"certified_accuracy must hold one value per radius ({len(radii)}), got {len(accs)}",
            )
        object.__setattr__(self, "radii", radii)
        object.__setattr__(self, "certified_accuracy", accs)
        object.__setattr__(self, "largest_radius", v.non_negative("largest_radius", self.largest_radius))
        object.__setattr__(self, "prediction_rule", _rule("prediction_rule", self.prediction_rule))

    @property
    def vacuous(self) -> bool:
        """True when some non-zero radius was asked and the certificate certifies 0 % at every one of them."""
        positive = [a for r, a in zip(self.radii, self.certified_accuracy) if r > 0]
        return bool(positive) and max(positive) == 0.0


def attacked_prediction_rule(config: Mapping[str, object]) -> str:
    """The classifier an evasion attack ran against, in words, from the attack's stored ``config``.

    Against a randomized model (a noise layer, or smoothing's input noise) the attack judges the
    vote of ``eval_samples`` noise draws and counts a break only when ``confirm_samples`` fresh
    draws confirm it (:mod:`attacks.evasion`): that is the smoothed classifier g, the argmax of the
    expected votes, which the certificates also cover, but estimated without abstaining, so its
    clean accuracy can exceed the conventional accuracy of a certificate's rule that abstains.
    """
    randomized = config.get("randomized")
    if randomized is False:
        return "the model's deterministic argmax (no noise drawn)"
    votes, confirm = config.get("eval_samples"), config.get("confirm_samples")
    if not isinstance(votes, int) or isinstance(votes, bool):
        return "not recorded (the attack result stores no draw counts)"
    rule = f"g by majority vote of {votes} noise draws, never abstaining"
    if isinstance(confirm, int) and not isinstance(confirm, bool) and confirm > 0:
        level = config.get("confirm_confidence")
        at = f" at {float(level):.0%}" if isinstance(level, (int, float)) and not isinstance(level, bool) else ""
        rule += f"; an error counts only when {confirm} fresh draws confirm it{at}"
    return rule


@dataclass(frozen=True, kw_only=True)
class AttackedClassifier:
    """The classifier one evasion attack ran against and its clean accuracy (what the verdict sets beside a
    certificate).

    Attributes:
        model_id, attack: which model and which attack.
        prediction_rule: the attacked classifier, in words (:func:`attacked_prediction_rule`).
        clean_correct, num_examples: its correct clean predictions out of the examples attacked.
    """

    model_id: str
    attack: str
    prediction_rule: str
    clean_correct: int
    num_examples: int

    def __post_init__(self) -> None:
        for name in ("model_id", "attack"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise v.invalid_type(name, f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        object.__setattr__(self, "prediction_rule", _rule("prediction_rule", self.prediction_rule))
        object.__setattr__(self, "num_examples", v.integer("num_examples", self.num_examples, minimum=1))
        correct = v.integer("clean_correct", self.clean_correct, minimum=0)
        if correct > self.num_examples:
            raise v.invalid(
                "clean_correct", f"clean_correct must be <= num_examples={self.num_examples}, got {correct}"
            )
        object.__setattr__(self, "clean_correct", correct)


def stored_soundness_violations(items: object) -> tuple[SoundnessViolation, ...]:
    """The ``soundness_violations`` a stored summary holds, typed, in every form ``certify`` has written.

    Summaries of the current form hold one mapping per violation (:meth:`SoundnessViolation.to_dict`);
    older ones hold a ``[certificate, radius, certified_accuracy, robust_accuracy]`` list each.
    Readers get :class:`SoundnessViolation` values either way, so no reader keeps the old form.

    Raises:
        ValueError: ``items`` is not a list of either form (named, with the entry's index).
    """
    if items is None:
        return ()
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, (list, tuple)):
        raise v.invalid_type("soundness_violations", f"soundness_violations must be a list, got {v.short(items)}")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, Mapping):
            out.append(SoundnessViolation.from_dict(item))
        elif isinstance(item, (list, tuple)) and len(item) == 4:
            certificate, radius, certified, robust = item
            out.append(
                SoundnessViolation(
                    certificate=certificate, radius=radius, certified_accuracy=certified, robust_accuracy=robust
                )
            )
        else:
            raise v.invalid_type(
                f"soundness_violations[{i}]",
                f"soundness_violations[{i}] must be a mapping or a [certificate, radius, "
                f"certified, robust] list, got {v.short(item)}",
            )
    return tuple(out)


@dataclass(frozen=True, kw_only=True)
class SmoothingSummary(PlainSpec):
    """Randomized smoothing of the same noise (Cohen, Rosenfeld & Kolter 2019, CERTIFY).

    Attributes:
        conventional_accuracy: accuracy of CERTIFY's prediction (abstentions are wrong), the
            classifier whose certified accuracy is beside it.
        certified_accuracy: radius (formatted ``f"{r:g}"``) -> certified accuracy.
        confidence: 1 − α of each certificate.
        num_selection_draws: n0, draws that pick the class.
        prediction_rule: that classifier, in words (:func:`smoothing_prediction_rule`).
    """

    conventional_accuracy: float
    certified_accuracy: Mapping[str, float]
    confidence: float
    num_selection_draws: int
    prediction_rule: str = UNNAMED_PREDICTION_RULE

    def __post_init__(self) -> None:
        object.__setattr__(self, "prediction_rule", _rule("prediction_rule", self.prediction_rule))
        object.__setattr__(
            self, "conventional_accuracy", _accuracy("conventional_accuracy", self.conventional_accuracy)
        )
        object.__setattr__(self, "certified_accuracy", _accuracy_map("certified_accuracy", self.certified_accuracy))
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        object.__setattr__(
            self, "num_selection_draws", v.integer("num_selection_draws", self.num_selection_draws, minimum=1)
        )
        _within_conventional(self.certified_accuracy, self.conventional_accuracy, name="certified_accuracy")

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> SmoothingSummary:
        """The stored smoothing block, read by its fields' types (a summary stored before the rule was named reads
        :data:`UNNAMED_PREDICTION_RULE`).

        Raises:
            ValueError: a field is missing (every field but the rule is required) or invalid.
        """
        v.mapping_with(
            "data", data, ("conventional_accuracy", "certified_accuracy", "confidence", "num_selection_draws")
        )
        return spec_from_dict(cls, data)


_SUMMARY_FIELDS = (
    "model_id",
    "defense",
    "dataset",
    "norm",
    "radii",
    "num_examples",
    "num_draws",
    "confidence",
    "bound",
    "seed",
    "epsilon",
    "delta",
    "mechanism",
    "sensitivity",
    "noise_std",
    "noise_per_sensitivity",
    "robustness_epsilon",
    "robustness_delta",
    "attack_norm_bound",
    "redistribute",
    "draws_per_second",
    "conventional_accuracy",
    "certified_accuracy",
    "robust_accuracy",
    "seconds",
)


@dataclass(frozen=True, kw_only=True)
class CertifySummary(PlainSpec):
    """What one ``certify`` run measured for one noise-layer model (stored as ``summary.json``).

    Certified accuracy of the defense's own certificate (Lecuyer et al. 2019, Prop. 1; Phan et
    al. 2019, Eq. 10; for the ``smoothing`` defense, CERTIFY of Cohen et al. 2019, which then is
    also ``smoothing``) and, optionally, of randomized smoothing, beside the robust accuracy each
    evasion attack left at the same radii, with the soundness verdict computed by
    :func:`dpaudit.robustness.certification.soundness_violations`. Per-input certificates and
    attack results live beside it (``certify-METHOD.json``, ``evasion-ATTACK-NORM.json``).

    Attributes:
        model_id, defense, dataset: which record was certified.
        norm: the attack norm the radii are measured in.
        radii: the perturbation radii, sorted ascending.
        num_examples: test inputs certified and attacked.
        num_draws: Monte Carlo noise draws per input.
        confidence: 1 − η of the expected-score bounds.
        bound: ``clopper-pearson``, ``hoeffding`` or ``bernstein``.
        seed: root seed.
        epsilon, delta: the record's DP ε and δ (ε infinite without DP training).
        mechanism: the noise layer's Gaussian calibration, or ``"smoothing"`` for a model
            certified by randomized smoothing alone (Cohen et al. 2019).
        sensitivity: Δ_r of the first layer measured on the weights, in ``norm`` (1 for the
            identity in front of smoothing's input noise).
        noise_std: σ of the noise layer (of the input noise for smoothing).
        noise_per_sensitivity: σ / Δ_r.
        robustness_epsilon, robustness_delta, attack_norm_bound: (ε_r, δ_r, L) the layer was
            trained for; ``None`` for smoothing, which has no such calibration.
        redistribute: whether the noise is heterogeneous (HGM).
        draws_per_second: Monte Carlo throughput when the certificate was computed.
        conventional_accuracy: accuracy of the classifier the defense's own certificate covers
            (``prediction_rule``), so that it and ``certified_accuracy`` describe one classifier:
            at radius 0 the certified accuracy never exceeds it.
        prediction_rule: that classifier, in words (:func:`own_prediction_rule`,
            :func:`smoothing_prediction_rule`; :data:`UNNAMED_PREDICTION_RULE` when read from a
            summary stored before rules were named).
        certified_accuracy: radius (``f"{r:g}"``) -> certified accuracy of the defense's own certificate.
        robust_accuracy: attack -> radius -> accuracy under that attack.
        smoothing: the randomized-smoothing certificate, or ``None`` when skipped.
        soundness_violations: every (certificate, radius) where certified > robust accuracy.
        seconds: wall time of the run.
        radii_source: how ``radii`` were chosen when none were asked for (``None``: asked for).
        schema_version: version of the stored format.
    """

    # summary.json's key order since it was first written: the version, the measured fields,
    # then what later versions added.
    __spec_keys__: ClassVar[tuple[str, ...]] = (
        "schema_version",
        *_SUMMARY_FIELDS,
        "prediction_rule",
        "smoothing",
        "soundness_violations",
        "radii_source",
    )

    model_id: str
    defense: str
    dataset: str
    norm: str
    radii: tuple[float, ...]
    num_examples: int
    num_draws: int
    confidence: float
    bound: str
    seed: int
    epsilon: float
    delta: float | None
    mechanism: str
    sensitivity: float
    noise_std: float
    noise_per_sensitivity: float
    robustness_epsilon: float | None
    robustness_delta: float | None
    attack_norm_bound: float | None
    redistribute: bool
    draws_per_second: float | None
    conventional_accuracy: float
    certified_accuracy: Mapping[str, float]
    robust_accuracy: Mapping[str, Mapping[str, float]]
    smoothing: SmoothingSummary | None = None
    # Older summaries hold each violation as a list: the stored forms are read in one place.
    soundness_violations: tuple[SoundnessViolation, ...] = spec_field(default=(), decode=stored_soundness_violations)
    seconds: float = 0.0
    prediction_rule: str = UNNAMED_PREDICTION_RULE
    # Absent (None) when the radii were asked for; summaries stored before radii were chosen have none.
    radii_source: str | None = spec_field(default=None, omit="none")
    schema_version: int = CERTIFY_SUMMARY_SCHEMA_VERSION

    def __post_init__(self) -> None:
        object.__setattr__(self, "prediction_rule", _rule("prediction_rule", self.prediction_rule))
        if self.radii_source is not None:
            object.__setattr__(self, "radii_source", _rule("radii_source", self.radii_source))
        for name in ("model_id", "defense", "dataset", "bound", "mechanism"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise TypeError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        v.choice("norm", self.norm, CERTIFICATION_NORMS)
        if self.schema_version != CERTIFY_SUMMARY_SCHEMA_VERSION:
            raise v.invalid(
                "schema_version",
                f"schema_version must be {CERTIFY_SUMMARY_SCHEMA_VERSION}, got {self.schema_version!r}",
            )
        radii = tuple(v.non_negative("radii", r) for r in self.radii)
        if not radii or list(radii) != sorted(set(radii)):
            raise v.invalid("radii", f"radii must be non-empty, sorted and distinct, got {list(self.radii)!r}")
        object.__setattr__(self, "radii", radii)
        object.__setattr__(self, "num_examples", v.integer("num_examples", self.num_examples, minimum=1))
        object.__setattr__(self, "num_draws", v.integer("num_draws", self.num_draws, minimum=1))
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        # The store writes an infinite ε as the string "inf" (strict JSON has no infinity).
        epsilon = (
            float(self.epsilon)
            if isinstance(self.epsilon, str) and self.epsilon in ("inf", "Infinity")
            else self.epsilon
        )
        object.__setattr__(self, "epsilon", v.positive("epsilon", epsilon, allow_inf=True) if epsilon != 0 else 0.0)
        if self.delta is not None:
            object.__setattr__(self, "delta", v.non_negative("delta", self.delta))
        for name in ("sensitivity", "noise_std", "noise_per_sensitivity"):
            object.__setattr__(self, name, v.positive(name, getattr(self, name)))
        # A smoothing model has no noise layer calibrated at (ε_r, δ_r, L): those stay None.
        for name in ("robustness_epsilon", "attack_norm_bound"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, v.positive(name, getattr(self, name)))
        if self.robustness_delta is not None:
            object.__setattr__(self, "robustness_delta", v.open_unit("robustness_delta", self.robustness_delta))
        object.__setattr__(
            self, "conventional_accuracy", _accuracy("conventional_accuracy", self.conventional_accuracy)
        )
        object.__setattr__(self, "certified_accuracy", _accuracy_map("certified_accuracy", self.certified_accuracy))
        _within_conventional(self.certified_accuracy, self.conventional_accuracy, name="certified_accuracy")
        if not isinstance(self.robust_accuracy, Mapping):
            raise v.invalid_type(
                "robust_accuracy",
                "robust_accuracy must be a mapping attack -> radius -> accuracy, got "
                f"{type(self.robust_accuracy).__name__}",
            )
        object.__setattr__(
            self,
            "robust_accuracy",
            _freeze(
                {str(a): dict(_accuracy_map(f"robust_accuracy[{a!r}]", m)) for a, m in self.robust_accuracy.items()}
            ),
        )
        if self.smoothing is not None and not isinstance(self.smoothing, SmoothingSummary):
            raise v.invalid_type(
                "smoothing", f"smoothing must be a SmoothingSummary or None, got {type(self.smoothing).__name__}"
            )
        bad = [x for x in self.soundness_violations if not isinstance(x, SoundnessViolation)]
        if bad:
            raise v.invalid_type(
                "soundness_violations", f"soundness_violations must hold SoundnessViolation values, got {bad[0]!r}"
            )
        object.__setattr__(self, "soundness_violations", tuple(self.soundness_violations))

    @property
    def sound(self) -> bool:
        """No certificate exceeded what an attack left."""
        return not self.soundness_violations

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CertifySummary:
        """Inverse of :meth:`to_dict` (the ``--json`` payload and ``summary.json``), validated.

        Raises:
            ValueError: a field is missing (every measured field is required) or invalid.
        """
        v.mapping_with("data", data, _SUMMARY_FIELDS)
        return spec_from_dict(cls, data)


def _stored(name: str, data: Mapping[str, object], kinds: tuple[type, ...]) -> Any:
    """``data[name]`` when the file has it and it is of one of ``kinds`` (a bool is no number), else ``None`` when
    absent or null."""
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise v.invalid_type(name, f"{name} must be {' or '.join(k.__name__ for k in kinds)}, got {v.short(value)}")
    return value


@dataclass(frozen=True, kw_only=True)
class StoredCertifySummary:
    """A stored ``summary.json`` as reports read it: the fields of :class:`CertifySummary`, ``None`` where the file has
    none.

    ``certify`` writes every field (:func:`save_certify_summary`); summaries stored by older
    versions, and the small ones test fixtures write, lack some, and their pages show those
    cells blank. :func:`read_stored_summary` is the one place that knows the stored forms
    (an infinite ε stored as ``"inf"``, violations stored as lists), so a reader reads attributes.

    Attributes:
        model_id, defense: which record was certified (required).
        radii: the perturbation radii (empty when the file has none).
        attacks_run: the attacks of the run's ``robust_accuracy``, ``None`` when the file has no such mapping.
        smoothing_prediction_rule: the prediction rule of the smoothing certificate, if stored.
        soundness_violations: typed (:func:`stored_soundness_violations`).
        the rest: as :class:`CertifySummary`.
    """

    model_id: str
    defense: str
    radii: tuple[float, ...] = ()
    norm: str | None = None
    epsilon: float | None = None
    delta: float | None = None
    mechanism: str | None = None
    sensitivity: float | None = None
    noise_std: float | None = None
    robustness_epsilon: float | None = None
    attack_norm_bound: float | None = None
    redistribute: bool | None = None
    num_examples: int | None = None
    num_draws: int | None = None
    draws_per_second: float | None = None
    conventional_accuracy: float | None = None
    prediction_rule: str | None = None
    smoothing_prediction_rule: str | None = None
    attacks_run: tuple[str, ...] | None = None
    soundness_violations: tuple[SoundnessViolation, ...] = ()
    radii_source: str | None = None


def read_stored_summary(data: object) -> StoredCertifySummary:
    """A stored summary (``summary.json``'s content, any version) as :class:`StoredCertifySummary`.

    Raises:
        ValueError: the summary is not a mapping, lacks ``model_id`` or ``defense``, or a field has the wrong type
            (named).
    """
    if not isinstance(data, Mapping):
        raise v.invalid_type("summary", f"summary must be a mapping, got {v.short(data)}")
    number = (int, float)
    ids = {name: data.get(name) for name in ("model_id", "defense")}
    for name, value in ids.items():
        if not isinstance(value, str) or not value:
            raise v.invalid_type(name, f"{name} must be a non-empty string, got {v.short(value)}")
    radii = data.get("radii", ())
    if not isinstance(radii, (list, tuple)) or any(isinstance(r, bool) or not isinstance(r, number) for r in radii):
        raise v.invalid_type("radii", f"radii must be a list of numbers, got {v.short(radii)}")
    # The store writes an infinite ε as the string "inf" (strict JSON has no infinity).
    epsilon = data.get("epsilon")
    epsilon = (
        float(epsilon)
        if isinstance(epsilon, str) and epsilon in ("inf", "Infinity")
        else _stored("epsilon", data, number)
    )
    used = data.get("robust_accuracy")
    smoothing = data.get("smoothing")
    smoothing_rule = _stored("prediction_rule", smoothing, (str,)) if isinstance(smoothing, Mapping) else None
    return StoredCertifySummary(
        model_id=str(ids["model_id"]),
        defense=str(ids["defense"]),
        radii=tuple(radii),
        norm=_stored("norm", data, (str,)),
        epsilon=epsilon,
        delta=_stored("delta", data, number),
        mechanism=_stored("mechanism", data, (str,)),
        sensitivity=_stored("sensitivity", data, number),
        noise_std=_stored("noise_std", data, number),
        robustness_epsilon=_stored("robustness_epsilon", data, number),
        attack_norm_bound=_stored("attack_norm_bound", data, number),
        redistribute=_stored("redistribute", data, (bool,)),
        num_examples=_stored("num_examples", data, (int,)),
        num_draws=_stored("num_draws", data, (int,)),
        draws_per_second=_stored("draws_per_second", data, number),
        conventional_accuracy=_stored("conventional_accuracy", data, number),
        prediction_rule=_stored("prediction_rule", data, (str,)),
        smoothing_prediction_rule=smoothing_rule,
        attacks_run=tuple(str(a) for a in used) if isinstance(used, Mapping) else None,
        soundness_violations=stored_soundness_violations(data.get("soundness_violations")),
        radii_source=_stored("radii_source", data, (str,)),
    )


def save_certify_summary(summary: CertifySummary, directory: str | os.PathLike[str]) -> Path:
    """Writes ``summary.json`` into ``directory`` atomically; returns its path."""
    from dpaudit.store import atomic_write_json

    if not isinstance(summary, CertifySummary):
        raise v.invalid_type("summary", f"summary must be a CertifySummary, got {type(summary).__name__}")
    return atomic_write_json(Path(directory) / SUMMARY_FILE, summary.to_dict())


def load_certify_summary(path: str | os.PathLike[str]) -> CertifySummary:
    """Reads a ``summary.json`` (or the directory holding one) written by :func:`save_certify_summary`.

    Raises:
        FileNotFoundError: no summary there.
        ValueError: the file is malformed.
    """
    p = Path(path)
    if p.is_dir():
        p = p / SUMMARY_FILE
    return CertifySummary.from_dict(read_json(p))
