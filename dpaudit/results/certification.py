"""Certification results: per test input, the certified radius and the prediction it protects.

A :class:`CertificationResult` is what :mod:`dpaudit.robustness.certification` computes for one
certificate (a noise-layer defense's own mechanism, or randomized smoothing of the same noise):
labels, predictions and certified radii; certified and conventional accuracy are derived from
them. Stored as ``certify-METHOD.json`` beside ``certify-METHOD.npz``. Torch-free.

A record states how it is certified in ``config["certification"]``: a noise layer's
:class:`CertificationSpec` (PixelDP / HGM), or a :class:`SmoothingCertificationSpec` for a base
classifier certified by randomized smoothing of its input (Cohen, Rosenfeld & Kolter 2019,
Theorem 1 and CERTIFY), told apart by the stored ``kind``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from dpaudit import _validate as v
from dpaudit.store import freeze as _freeze
from dpaudit.store import load_result_files, read_json, safe_stem, save_result_files
from dpaudit.store import thaw as _thaw

__all__ = [
    "CERTIFICATION_NORMS",
    "CERTIFICATION_SCHEMA_VERSION",
    "CERTIFY_SUMMARY_SCHEMA_VERSION",
    "CertificationResult",
    "CertificationSpec",
    "CertifySummary",
    "SmoothingCertificationSpec",
    "SmoothingSummary",
    "SoundnessViolation",
    "certification_spec_from_dict",
    "load_certification_result",
    "load_certify_summary",
    "save_certification_result",
    "save_certify_summary",
]

CERTIFICATION_SCHEMA_VERSION = 1
_ARRAYS = ("labels", "predictions", "radii")
#: Norms a certificate can be stated in.
CERTIFICATION_NORMS = ("l2", "linf", "l1")


#: The Gaussian calibrations a noise layer may use (see dpaudit.robustness.certification).
_MECHANISMS = ("classical", "analytic", "extended")
#: ``kind`` of a stored certification spec; a spec without one is a noise layer's (older records).
CERTIFICATION_KINDS = ("noise-layer", "smoothing")


@dataclass(frozen=True, kw_only=True)
class CertificationSpec:
    """What a certifier needs to know about a noise-layer model beyond its weights.

    A defense with a noise layer (PixelDP, Lecuyer et al. 2019; HGM, Phan et al. 2019) stores
    this in its record; ``certify`` reads it to pick the calibration whose radius it solves for.

    Attributes:
        mechanism: the Gaussian calibration of the noise layer (``classical``, ``analytic`` or
            ``extended``).
        max_epsilon: largest ε_r the calibration is valid for (``None``: no limit).
        attack_norm: the norm of the attacks the noise is calibrated against.
        robustness_epsilon: ε_r the layer was trained for.
        robustness_delta: δ_r the layer was trained for.
        attack_norm_bound: L, the attack size the noise was calibrated for.
        noise_per_sensitivity: σ/Δ_r the calibration gives at (ε_r, δ_r) for unit L.
        redistribute: whether the noise is heterogeneous (HGM's redistribution vector).
    """

    mechanism: str
    max_epsilon: float | None
    attack_norm: str
    robustness_epsilon: float
    robustness_delta: float
    attack_norm_bound: float
    noise_per_sensitivity: float
    redistribute: bool = False

    #: What ``certify`` draws and at which confidence when not told otherwise: PixelDP's
    #: 2,000 draws (certified.md §1), and CERTIFY's n0 = 100 and α = 0.001 for the smoothing
    #: certificate of the same noise (certified.md §3).
    kind: ClassVar[str] = "noise-layer"
    default_num_draws: ClassVar[int] = 2000
    default_num_selection_draws: ClassVar[int] = 100
    default_smoothing_confidence: ClassVar[float] = 0.999
    #: The sensitivity of the layer is measured in any of these norms, so each can be certified.
    norms: ClassVar[tuple[str, ...]] = CERTIFICATION_NORMS

    def __post_init__(self) -> None:
        v.choice("mechanism", self.mechanism, _MECHANISMS)
        if self.max_epsilon is not None:
            v.positive("max_epsilon", self.max_epsilon)
        v.choice("attack_norm", self.attack_norm, CERTIFICATION_NORMS)
        v.positive("robustness_epsilon", self.robustness_epsilon)
        if self.max_epsilon is not None and self.robustness_epsilon > self.max_epsilon:
            # PixelDP's Gaussian bound holds only for ε ≤ 1 (Lecuyer et al. 2019, Eq. 3).
            raise v.invalid("robustness_epsilon", f"robustness_epsilon must be <= max_epsilon {self.max_epsilon!r} for mechanism {self.mechanism!r}, got {self.robustness_epsilon!r}")
        v.open_unit("robustness_delta", self.robustness_delta)
        v.positive("attack_norm_bound", self.attack_norm_bound)
        v.positive("noise_per_sensitivity", self.noise_per_sensitivity)

    def describe(self) -> str:
        """One line naming the robustness parameters (what ``train`` prints)."""
        noise = "heterogeneous" if self.redistribute else "isotropic"
        return f"{noise} Gaussian noise layer ({self.mechanism}): eps_r={self.robustness_epsilon:g}, delta_r={self.robustness_delta:g}, L={self.attack_norm_bound:g} ({self.attack_norm})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.mechanism,
            "max_epsilon": self.max_epsilon,
            "attack_norm": self.attack_norm,
            "robustness_epsilon": self.robustness_epsilon,
            "robustness_delta": self.robustness_delta,
            "attack_norm_bound": self.attack_norm_bound,
            "noise_per_sensitivity": self.noise_per_sensitivity,
            "redistribute": self.redistribute,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CertificationSpec | SmoothingCertificationSpec:
        """Inverse of :meth:`to_dict` for every kind of certification spec a record may store.

        Every reader of ``config["certification"]`` (record validation, ``train``, ``certify``)
        comes through here, so a stored spec of another kind (``{"kind": "smoothing", …}``)
        is read as its own type by :func:`certification_spec_from_dict`.

        Raises:
            ValueError: a field is missing or invalid (named).
        """
        return certification_spec_from_dict(data)

    @classmethod
    def _noise_layer_from_dict(cls, data: Mapping[str, Any]) -> CertificationSpec:
        names = ("mechanism", "max_epsilon", "attack_norm", "robustness_epsilon", "robustness_delta", "attack_norm_bound", "noise_per_sensitivity")
        missing = [n for n in names if n not in data]
        if missing:
            raise v.invalid(None, f"certification spec is missing {', '.join(missing)}")
        return cls(**{n: data[n] for n in names}, redistribute=bool(data.get("redistribute", False)))


@dataclass(frozen=True, kw_only=True)
class SmoothingCertificationSpec:
    """How ``certify`` certifies a randomized-smoothing model (Cohen, Rosenfeld & Kolter 2019).

    The record's model is the *base* classifier f, trained with Gaussian data augmentation;
    the certified classifier is g(x) = argmax_c P(f(x + e) = c), e ~ N(0, σ²I) (Theorem 1).
    CERTIFY guesses c_A from ``num_selection_draws`` draws, bounds p_A from below with a
    one-sided Clopper–Pearson bound at ``confidence`` from ``num_draws`` fresh draws, abstains
    when p_A ≤ ½ and otherwise certifies the L2 radius R = σ Φ⁻¹(p_A) (certified.md §3).

    Attributes:
        sigma: standard deviation σ > 0 of the Gaussian noise added to the input.
        attack_norm: the norm of the radius (``l2``: Theorem 1 is an L2 statement).
        num_selection_draws: n0 of CERTIFY (default 100, the paper's).
        num_draws: n of CERTIFY (default 10,000; the paper uses 100,000).
        confidence: 1 − α of each certificate (default 0.999, the paper's α = 0.001).
    """

    sigma: float
    attack_norm: str = "l2"
    num_selection_draws: int = 100
    num_draws: int = 10_000
    confidence: float = 0.999

    kind: ClassVar[str] = "smoothing"
    #: Theorem 1 bounds L2 perturbations only.
    norms: ClassVar[tuple[str, ...]] = ("l2",)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", v.positive("sigma", self.sigma))
        v.choice("attack_norm", self.attack_norm, self.norms)
        object.__setattr__(self, "num_selection_draws", v.integer("num_selection_draws", self.num_selection_draws, minimum=1))
        object.__setattr__(self, "num_draws", v.integer("num_draws", self.num_draws, minimum=2))
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))

    # The names certify reads its defaults by, shared with CertificationSpec.
    @property
    def default_num_draws(self) -> int:
        return self.num_draws

    @property
    def default_num_selection_draws(self) -> int:
        return self.num_selection_draws

    @property
    def default_smoothing_confidence(self) -> float:
        return self.confidence

    def describe(self) -> str:
        """One line naming the smoothing parameters (what ``train`` prints)."""
        return (
            f"randomized smoothing: Gaussian input noise sigma={self.sigma:g}, CERTIFY n0={self.num_selection_draws}, "
            f"n={self.num_draws}, confidence={self.confidence:g} ({self.attack_norm} radius sigma * Phi^-1(p_A))"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "sigma": self.sigma,
            "attack_norm": self.attack_norm,
            "num_selection_draws": self.num_selection_draws,
            "num_draws": self.num_draws,
            "confidence": self.confidence,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SmoothingCertificationSpec:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: a field is missing or invalid (named).
        """
        names = ("sigma", "attack_norm", "num_selection_draws", "num_draws", "confidence")
        missing = [n for n in names if n not in data]
        if missing:
            raise v.invalid(None, f"certification spec is missing {', '.join(missing)}")
        return cls(**{n: data[n] for n in names})


def certification_spec_from_dict(data: Mapping[str, Any]) -> CertificationSpec | SmoothingCertificationSpec:
    """Reads a stored certification spec by its ``kind`` (none: a noise layer's, as older records store it).

    Raises:
        TypeError: ``data`` is not a mapping.
        ValueError: an unknown kind, or a field missing or invalid (named).
    """
    if not isinstance(data, Mapping):
        raise v.invalid_type(None, f"certification spec must be a mapping, got {type(data).__name__}")
    kind = v.choice("kind", data.get("kind", "noise-layer"), CERTIFICATION_KINDS)
    if kind == "smoothing":
        return SmoothingCertificationSpec.from_dict(data)
    return CertificationSpec._noise_layer_from_dict(data)


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr = np.array(arr, copy=True)
    arr.flags.writeable = False
    return arr


def _real_array(name: str, value: Any) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == bool or arr.dtype.kind not in "fiu":
        raise v.invalid_type(name, f"{name} must hold real numbers, got dtype {arr.dtype}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        bad = arr[~np.isfinite(arr)][:3].tolist()
        raise v.invalid(name, f"{name} must be finite, got e.g. {bad}")
    return arr


def _int_array(name: str, value: Any, *, ndim: int) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype == bool or (arr.size and arr.dtype.kind not in "iu"):
        raise v.invalid_type(name, f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise v.invalid(name, f"{name} must be {ndim}-D, got shape {arr.shape}")
    return arr.astype(np.int64)


@dataclass(frozen=True, kw_only=True, eq=False)
class CertificationResult:
    """Certified radii of one certification method on one test set.

    Certified accuracy at size T is the fraction of test points predicted correctly *and*
    certified at a size ≥ T; conventional accuracy is the plain accuracy of the (Monte Carlo)
    prediction (certified.md §1). Both are derived, never stored.

    Attributes:
        method: e.g. ``"pixeldp"``, ``"hgm"``, ``"agm"``, ``"smoothing"``.
        norm: the attack norm the radii are measured in, one of :data:`CERTIFICATION_NORMS`.
        labels: (n,) int64 true labels, ≥ 0.
        predictions: (n,) int64 predictions, −1 = abstain.
        radii: (n,) float64 certified sizes, finite, ≥ 0 (0 = not certified; abstentions
            must have 0).
        num_draws: Monte Carlo draws per test point behind the certificates.
        confidence: confidence of each certificate.
        config: parameters (mechanism, σ, sensitivity, …), JSON-like.
        schema_version: version of the stored format.

    Raises:
        TypeError: a field has the wrong type.
        ValueError: shapes disagree or values are out of range.
    """

    method: str
    norm: str
    labels: np.ndarray
    predictions: np.ndarray
    radii: np.ndarray
    num_draws: int
    confidence: float
    config: Mapping[str, Any] = field(default_factory=dict)
    schema_version: int = CERTIFICATION_SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not self.method:
            raise v.invalid_type("method", f"method must be a non-empty string, got {self.method!r}")
        v.choice("norm", self.norm, CERTIFICATION_NORMS)
        if self.schema_version != CERTIFICATION_SCHEMA_VERSION:
            raise v.invalid("schema_version", f"schema_version must be {CERTIFICATION_SCHEMA_VERSION}, got {self.schema_version!r}")
        object.__setattr__(self, "num_draws", v.integer("num_draws", self.num_draws, minimum=1))
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        labels = _int_array("labels", self.labels, ndim=1)
        if labels.size == 0:
            raise v.invalid("labels", "labels must hold at least one test point, got an empty array")
        if np.any(labels < 0):
            raise v.invalid("labels", f"labels must be >= 0, got e.g. {labels[labels < 0][:3].tolist()}")
        predictions = _int_array("predictions", self.predictions, ndim=1)
        if predictions.shape != labels.shape:
            raise v.invalid("predictions", f"predictions must have shape {labels.shape} (like labels), got {predictions.shape}")
        if np.any(predictions < -1):
            raise v.invalid("predictions", f"predictions must be class indices or -1 (abstain), got e.g. {predictions[predictions < -1][:3].tolist()}")
        radii = _real_array("radii", self.radii)
        if radii.shape != labels.shape:
            raise v.invalid("radii", f"radii must have shape {labels.shape} (like labels), got {radii.shape}")
        if np.any(radii < 0):
            raise v.invalid("radii", f"radii must be >= 0, got e.g. {radii[radii < 0][:3].tolist()}")
        if np.any((predictions == -1) & (radii > 0)):
            raise v.invalid("radii", "radii must be 0 where the prediction abstains (-1)")
        object.__setattr__(self, "labels", _readonly(labels))
        object.__setattr__(self, "predictions", _readonly(predictions))
        object.__setattr__(self, "radii", _readonly(radii))
        if not isinstance(self.config, Mapping):
            raise v.invalid_type("config", f"config must be a mapping, got {type(self.config).__name__}")
        object.__setattr__(self, "config", _freeze(self.config))

    @property
    def num_points(self) -> int:
        return int(self.labels.size)

    @property
    def conventional_accuracy(self) -> float:
        """Fraction of test points whose prediction equals the label (abstentions are wrong)."""
        return float(np.mean(self.predictions == self.labels))

    def certified_accuracy(self, sizes: float | Sequence[float] | np.ndarray) -> np.ndarray:
        """Fraction of test points correct and certified at a size ≥ T, for each T in ``sizes``.

        Non-increasing in T; at T = 0 it equals :attr:`conventional_accuracy`.

        Args:
            sizes: attack sizes T ≥ 0 (a scalar counts as one size).

        Returns:
            Float array of shape ``(len(sizes),)``.

        Raises:
            ValueError: a size is negative or not finite, or ``sizes`` is not 0-D/1-D.
        """
        t = np.atleast_1d(_real_array("sizes", sizes))
        if t.ndim != 1:
            raise v.invalid("sizes", f"sizes must be a scalar or 1-D, got shape {t.shape}")
        if np.any(t < 0):
            raise v.invalid("sizes", f"sizes must be >= 0, got e.g. {t[t < 0][:3].tolist()}")
        correct = self.predictions == self.labels
        return np.mean(correct[None, :] & (self.radii[None, :] >= t[:, None]), axis=1)

    def summary(self, sizes: Sequence[float] | np.ndarray) -> dict[str, Any]:
        """The CLI's ``certify`` figures: ``{"conventional_accuracy", "certified_accuracy": {size: …}, …}``."""
        t = np.atleast_1d(_real_array("sizes", sizes))
        acc = self.certified_accuracy(t)
        return {
            "method": self.method,
            "norm": self.norm,
            "conventional_accuracy": self.conventional_accuracy,
            "certified_accuracy": {f"{s:g}": float(a) for s, a in zip(t.tolist(), acc.tolist())},
            "num_points": self.num_points,
            "num_abstained": int(np.sum(self.predictions == -1)),
            "num_draws": self.num_draws,
            "confidence": self.confidence,
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (arrays as lists), readable by :meth:`from_dict`."""
        return {
            "schema_version": self.schema_version,
            "method": self.method,
            "norm": self.norm,
            "labels": self.labels.tolist(),
            "predictions": self.predictions.tolist(),
            "radii": self.radii.tolist(),
            "num_draws": self.num_draws,
            "confidence": self.confidence,
            "config": _thaw(self.config),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CertificationResult:
        """Rebuilds a result written by :meth:`to_dict` (validated).

        Raises:
            TypeError: ``data`` is not a mapping.
            ValueError: a field is missing or the schema version is unknown.
        """
        v.mapping_with("data", data, ("method", "norm", *_ARRAYS, "num_draws", "confidence"))
        return cls(
            method=data["method"],
            norm=data["norm"],
            labels=np.asarray(data["labels"], dtype=np.int64),
            predictions=np.asarray(data["predictions"], dtype=np.int64),
            radii=np.asarray(data["radii"], dtype=np.float64),
            num_draws=data["num_draws"],
            confidence=data["confidence"],
            config=data.get("config", {}),
            schema_version=data.get("schema_version", CERTIFICATION_SCHEMA_VERSION),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CertificationResult):
            return NotImplemented
        return (
            self.method == other.method
            and self.norm == other.norm
            and self.num_draws == other.num_draws
            and self.confidence == other.confidence
            and all(np.array_equal(getattr(self, a), getattr(other, a)) for a in _ARRAYS)
            and _thaw(self.config) == _thaw(other.config)
        )

    __hash__ = None  # type: ignore[assignment]


def _file_stem(method: str) -> str:
    return f"certify-{safe_stem(method, default='method')}"


def save_certification_result(result: CertificationResult, directory: str | os.PathLike[str]) -> Path:
    """Writes ``certify-METHOD.npz`` (arrays) then ``certify-METHOD.json`` atomically.

    The JSON is written last, so a JSON file that exists always has its arrays beside it.

    Returns:
        The path of the JSON file.
    """
    if not isinstance(result, CertificationResult):
        raise v.invalid_type("result", f"result must be a CertificationResult, got {type(result).__name__}")
    meta = {k: val for k, val in result.to_dict().items() if k not in _ARRAYS}
    return save_result_files(directory, _file_stem(result.method), arrays={a: getattr(result, a) for a in _ARRAYS}, meta=meta)


def load_certification_result(path: str | os.PathLike[str]) -> CertificationResult:
    """Loads a result written by :func:`save_certification_result` (NPZ read without pickle).

    Args:
        path: the JSON file.

    Raises:
        FileNotFoundError: the JSON or its NPZ is missing.
        ValueError: the files are malformed.
    """
    return CertificationResult.from_dict(load_result_files(path, _ARRAYS))


# --------------------------------------------------------------------------------------------
# Soundness verdicts and the certify summary
# --------------------------------------------------------------------------------------------
#: Version of ``summary.json`` written by the certify run.
CERTIFY_SUMMARY_SCHEMA_VERSION = 1
SUMMARY_FILE = "summary.json"


def _accuracy(name: str, value: Any) -> float:
    value = v.real(name, value)
    if not 0.0 <= value <= 1.0:
        raise v.invalid(name, f"{name} must lie in [0, 1], got {value!r}")
    return value


def _accuracy_map(name: str, value: Any) -> Mapping[str, float]:
    if not isinstance(value, Mapping):
        raise v.invalid_type(name, f"{name} must be a mapping radius -> accuracy, got {type(value).__name__}")
    return _freeze({str(k): _accuracy(f"{name}[{k!r}]", a) for k, a in value.items()})


@dataclass(frozen=True, kw_only=True)
class SoundnessViolation:
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

    def to_dict(self) -> dict[str, Any]:
        return {"certificate": self.certificate, "radius": self.radius, "certified_accuracy": self.certified_accuracy, "robust_accuracy": self.robust_accuracy}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SoundnessViolation:
        v.mapping_with("data", data, ("certificate", "radius", "certified_accuracy", "robust_accuracy"))
        return cls(certificate=data["certificate"], radius=data["radius"], certified_accuracy=data["certified_accuracy"], robust_accuracy=data["robust_accuracy"])


@dataclass(frozen=True, kw_only=True)
class SmoothingSummary:
    """Randomized smoothing of the same noise (Cohen, Rosenfeld & Kolter 2019, CERTIFY).

    Attributes:
        conventional_accuracy: accuracy of the smoothed prediction (abstentions are wrong).
        certified_accuracy: radius (formatted ``f"{r:g}"``) -> certified accuracy.
        confidence: 1 − α of each certificate.
        num_selection_draws: n0, draws that pick the class.
    """

    conventional_accuracy: float
    certified_accuracy: Mapping[str, float]
    confidence: float
    num_selection_draws: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "conventional_accuracy", _accuracy("conventional_accuracy", self.conventional_accuracy))
        object.__setattr__(self, "certified_accuracy", _accuracy_map("certified_accuracy", self.certified_accuracy))
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        object.__setattr__(self, "num_selection_draws", v.integer("num_selection_draws", self.num_selection_draws, minimum=1))

    def to_dict(self) -> dict[str, Any]:
        return {
            "conventional_accuracy": self.conventional_accuracy,
            "certified_accuracy": dict(self.certified_accuracy),
            "confidence": self.confidence,
            "num_selection_draws": self.num_selection_draws,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SmoothingSummary:
        v.mapping_with("data", data, ("conventional_accuracy", "certified_accuracy", "confidence", "num_selection_draws"))
        return cls(**{k: data[k] for k in ("conventional_accuracy", "certified_accuracy", "confidence", "num_selection_draws")})


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
class CertifySummary:
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
        conventional_accuracy: accuracy of the Monte Carlo prediction.
        certified_accuracy: radius (``f"{r:g}"``) -> certified accuracy of the defense's own certificate.
        robust_accuracy: attack -> radius -> accuracy under that attack.
        smoothing: the randomized-smoothing certificate, or ``None`` when skipped.
        soundness_violations: every (certificate, radius) where certified > robust accuracy.
        seconds: wall time of the run.
        schema_version: version of the stored format.
    """

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
    soundness_violations: tuple[SoundnessViolation, ...] = ()
    seconds: float = 0.0
    schema_version: int = CERTIFY_SUMMARY_SCHEMA_VERSION

    def __post_init__(self) -> None:
        for name in ("model_id", "defense", "dataset", "bound", "mechanism"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise TypeError(f"{name} must be a non-empty string, got {getattr(self, name)!r}")
        v.choice("norm", self.norm, CERTIFICATION_NORMS)
        if self.schema_version != CERTIFY_SUMMARY_SCHEMA_VERSION:
            raise v.invalid("schema_version", f"schema_version must be {CERTIFY_SUMMARY_SCHEMA_VERSION}, got {self.schema_version!r}")
        radii = tuple(v.non_negative("radii", r) for r in self.radii)
        if not radii or list(radii) != sorted(set(radii)):
            raise v.invalid("radii", f"radii must be non-empty, sorted and distinct, got {list(self.radii)!r}")
        object.__setattr__(self, "radii", radii)
        object.__setattr__(self, "num_examples", v.integer("num_examples", self.num_examples, minimum=1))
        object.__setattr__(self, "num_draws", v.integer("num_draws", self.num_draws, minimum=1))
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        # The store writes an infinite ε as the string "inf" (strict JSON has no infinity).
        epsilon = float(self.epsilon) if isinstance(self.epsilon, str) and self.epsilon in ("inf", "Infinity") else self.epsilon
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
        object.__setattr__(self, "conventional_accuracy", _accuracy("conventional_accuracy", self.conventional_accuracy))
        object.__setattr__(self, "certified_accuracy", _accuracy_map("certified_accuracy", self.certified_accuracy))
        if not isinstance(self.robust_accuracy, Mapping):
            raise v.invalid_type("robust_accuracy", f"robust_accuracy must be a mapping attack -> radius -> accuracy, got {type(self.robust_accuracy).__name__}")
        object.__setattr__(self, "robust_accuracy", _freeze({str(a): dict(_accuracy_map(f"robust_accuracy[{a!r}]", m)) for a, m in self.robust_accuracy.items()}))
        if self.smoothing is not None and not isinstance(self.smoothing, SmoothingSummary):
            raise v.invalid_type("smoothing", f"smoothing must be a SmoothingSummary or None, got {type(self.smoothing).__name__}")
        bad = [x for x in self.soundness_violations if not isinstance(x, SoundnessViolation)]
        if bad:
            raise v.invalid_type("soundness_violations", f"soundness_violations must hold SoundnessViolation values, got {bad[0]!r}")
        object.__setattr__(self, "soundness_violations", tuple(self.soundness_violations))

    @property
    def sound(self) -> bool:
        """No certificate exceeded what an attack left."""
        return not self.soundness_violations

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (the ``--json`` payload and ``summary.json``)."""
        out: dict[str, Any] = {"schema_version": self.schema_version}
        for name in _SUMMARY_FIELDS:
            out[name] = _thaw(getattr(self, name))
        out["radii"] = list(self.radii)
        out["smoothing"] = self.smoothing.to_dict() if self.smoothing is not None else None
        out["soundness_violations"] = [x.to_dict() for x in self.soundness_violations]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CertifySummary:
        """Inverse of :meth:`to_dict` (validated).

        Raises:
            ValueError: a field is missing or invalid.
        """
        v.mapping_with("data", data, _SUMMARY_FIELDS)
        smoothing = data.get("smoothing")
        return cls(
            **{name: data[name] for name in _SUMMARY_FIELDS if name != "radii"},
            radii=tuple(data["radii"]),
            smoothing=SmoothingSummary.from_dict(smoothing) if smoothing is not None else None,
            soundness_violations=tuple(SoundnessViolation.from_dict(x) for x in data.get("soundness_violations", ())),
            schema_version=data.get("schema_version", CERTIFY_SUMMARY_SCHEMA_VERSION),
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
