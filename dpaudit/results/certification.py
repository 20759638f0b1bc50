"""Certification results: per test input, the certified radius and the prediction it protects.

A :class:`CertificationResult` is what :mod:`dpaudit.robustness.certification` computes for one
certificate (a noise-layer defense's own mechanism, or randomized smoothing of the same noise):
labels, predictions and certified radii; certified and conventional accuracy are derived from
them. Stored as ``certify-METHOD.json`` beside ``certify-METHOD.npz``. Torch-free.

How a record is certified is :mod:`dpaudit.results.certification_spec`; a certify run's
verdicts and summary are :mod:`dpaudit.results.certify_summary`.
"""

from __future__ import annotations

import decimal
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from dpaudit import _validate as v
from dpaudit.results.certification_spec import CERTIFICATION_NORMS
from dpaudit.results.certify_summary import UNNAMED_PREDICTION_RULE, CertificateReach
from dpaudit.specs import PlainSpec, spec_field, spec_from_dict
from dpaudit.store import freeze as _freeze
from dpaudit.store import load_result_files, safe_stem, save_result_files
from dpaudit.store import thaw as _thaw

__all__ = [
    "CERTIFICATION_SCHEMA_VERSION",
    "RADIUS_QUANTILES",
    "round_down",
    "CertificationResult",
    "CertifiedFigures",
    "load_certification_result",
    "save_certification_result",
]

CERTIFICATION_SCHEMA_VERSION = 1
#: The quantiles of a certificate's certified radii (over its correct, certified test points) that
#: ``certify`` reports at when no radii are given (:meth:`CertificationResult.suggested_radii`).
RADIUS_QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)
_ARRAYS = ("labels", "predictions", "radii")


def round_down(x: float, digits: int = 2) -> float:
    """``x`` ≥ 0 rounded *down* to ``digits`` significant digits (0.03849 → 0.038): a radius read at or below a
    certified radius keeps that point certified."""
    if x <= 0:
        return 0.0
    # On the shortest decimal that reads back as x (x / step in binary floating point would turn
    # 0.29 into 28.999… hundredths); converting back to float is monotone, so the result stays ≤ x.
    d = decimal.Decimal(repr(float(x)))
    return float(d.quantize(decimal.Decimal(1).scaleb(d.adjusted() - digits + 1), rounding=decimal.ROUND_DOWN))


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


@dataclass(frozen=True, kw_only=True)
class CertifiedFigures(PlainSpec):
    """What a certificate measured at the sizes asked (:meth:`CertificationResult.summary`).

    Attributes:
        method, norm: the certificate and the norm of its radii.
        conventional_accuracy: accuracy of the certified classifier (abstentions are wrong).
        certified_accuracy: size (formatted ``f"{s:g}"``) -> certified accuracy at that size.
        num_points: test points certified; ``num_abstained`` of them abstained.
        num_draws, confidence: the Monte Carlo draws and the confidence behind the certificates.
    """

    method: str
    norm: str
    conventional_accuracy: float
    certified_accuracy: Mapping[str, float]
    num_points: int
    num_abstained: int
    num_draws: int
    confidence: float


@dataclass(frozen=True, kw_only=True, eq=False)
class CertificationResult(PlainSpec):
    """Certified radii of one certification method on one test set.

    Certified accuracy at size T is the fraction of test points predicted correctly *and*
    certified at a size ≥ T; conventional accuracy is the plain accuracy of the same (Monte Carlo)
    predictions, so both describe one classifier, which the certify run names in
    ``config["prediction_rule"]`` (docs/defenses/noise-layer.md §1). Both are derived, never stored.

    Attributes:
        method: e.g. ``"pixeldp"``, ``"hgm"``, ``"agm"``, ``"smoothing"``.
        norm: the attack norm the radii are measured in, one of :data:`CERTIFICATION_NORMS`.
        labels: (n,) int64 true labels, ≥ 0.
        predictions: (n,) int64 predictions, −1 = abstain.
        radii: (n,) float64 certified sizes, finite, ≥ 0 (0 = not certified; abstentions
            must have 0).
        num_draws: Monte Carlo draws per test point behind the certificates.
        confidence: confidence of each certificate.
        config: parameters (mechanism, σ, sensitivity, …), JSON data kept read-only: which keys it
            holds depends on the certificate and on the version that stored it, and a stored one
            is reused only when every key a run asks for matches.
        schema_version: version of the stored format.

    Raises:
        TypeError: a field has the wrong type.
        ValueError: shapes disagree or values are out of range.
    """

    # certify-METHOD.json's key order (the arrays go to the NPZ beside it).
    __spec_keys__: ClassVar[tuple[str, ...]] = (
        "schema_version",
        "method",
        "norm",
        *_ARRAYS,
        "num_draws",
        "confidence",
        "config",
    )

    method: str
    norm: str
    labels: np.ndarray
    predictions: np.ndarray
    radii: np.ndarray = spec_field(dtype=np.float64)
    num_draws: int
    confidence: float
    # Stored thawed (plain dicts and lists), as the frozen copy cannot be written as JSON.
    config: Mapping[str, object] = spec_field(default_factory=dict, encode=_thaw)
    schema_version: int = CERTIFICATION_SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not self.method:
            raise v.invalid_type("method", f"method must be a non-empty string, got {self.method!r}")
        v.choice("norm", self.norm, CERTIFICATION_NORMS)
        if self.schema_version != CERTIFICATION_SCHEMA_VERSION:
            raise v.invalid(
                "schema_version", f"schema_version must be {CERTIFICATION_SCHEMA_VERSION}, got {self.schema_version!r}"
            )
        object.__setattr__(self, "num_draws", v.integer("num_draws", self.num_draws, minimum=1))
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        labels = _int_array("labels", self.labels, ndim=1)
        if labels.size == 0:
            raise v.invalid("labels", "labels must hold at least one test point, got an empty array")
        if np.any(labels < 0):
            raise v.invalid("labels", f"labels must be >= 0, got e.g. {labels[labels < 0][:3].tolist()}")
        predictions = _int_array("predictions", self.predictions, ndim=1)
        if predictions.shape != labels.shape:
            raise v.invalid(
                "predictions", f"predictions must have shape {labels.shape} (like labels), got {predictions.shape}"
            )
        if np.any(predictions < -1):
            raise v.invalid(
                "predictions",
                "predictions must be class indices or -1 (abstain), got e.g. "
                f"{predictions[predictions < -1][:3].tolist()}",
            )
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
        return self.num_certified(t) / self.num_points

    @property
    def num_correct(self) -> int:
        """Test points predicted correctly (the numerator of :attr:`conventional_accuracy`)."""
        return int(np.sum(self.predictions == self.labels))

    def num_certified(self, sizes: float | Sequence[float] | np.ndarray) -> np.ndarray:
        """For each T in ``sizes``, how many test points are correct and certified at a size ≥ T (the counts behind
        :meth:`certified_accuracy`, for its confidence interval)."""
        t = np.atleast_1d(_real_array("sizes", sizes))
        if t.ndim != 1:
            raise v.invalid("sizes", f"sizes must be a scalar or 1-D, got shape {t.shape}")
        if np.any(t < 0):
            raise v.invalid("sizes", f"sizes must be >= 0, got e.g. {t[t < 0][:3].tolist()}")
        correct = self.predictions == self.labels
        return np.sum(correct[None, :] & (self.radii[None, :] >= t[:, None]), axis=1).astype(np.int64)

    @property
    def largest_certified_radius(self) -> float:
        """The largest size certified on a correctly predicted test point (0 when none is certified)."""
        correct = self.predictions == self.labels
        return float(self.radii[correct].max()) if np.any(correct) else 0.0

    def suggested_radii(self, quantiles: Sequence[float] = RADIUS_QUANTILES) -> tuple[float, ...]:
        """Radii this certificate has something to say at: 0, then the ``quantiles`` of the radii it certified on
        correctly predicted test points, each rounded down to two significant digits.

        Rounded down, the q-quantile keeps at least (1 − q) of those points certified, so the
        certified accuracy at the smallest non-zero radius is never 0 when any point is certified.
        With fewer than three distinct quantiles (e.g. one radius on every point, as a noise layer
        whose votes are unanimous gives), a quarter and a half of the largest are added.

        Returns:
            ``(0.0,)`` alone when no correctly predicted point is certified.
        """
        correct = (self.predictions == self.labels) & (self.radii > 0)
        if not np.any(correct):
            return (0.0,)
        certified = self.radii[correct]
        picked = {round_down(float(r)) for r in np.quantile(certified, list(quantiles), method="lower")}
        if len(picked) < 3:
            top = float(certified.max())
            picked |= {round_down(top / 4), round_down(top / 2)}
        return (0.0, *sorted(r for r in picked if r > 0))

    def reach(self, model_id: str, sizes: Sequence[float] | np.ndarray) -> CertificateReach:
        """What the certified verdict reads of this certificate at the sizes a run asked about."""
        t = np.atleast_1d(_real_array("sizes", sizes))
        rule = self.config.get("prediction_rule")
        return CertificateReach(
            model_id=model_id,
            certificate=self.method,
            radii=tuple(t.tolist()),
            certified_accuracy=tuple(self.certified_accuracy(t).tolist()),
            largest_radius=self.largest_certified_radius,
            prediction_rule=str(rule) if isinstance(rule, str) and rule else UNNAMED_PREDICTION_RULE,
        )

    def summary(self, sizes: Sequence[float] | np.ndarray) -> CertifiedFigures:
        """The CLI's ``certify`` figures: conventional accuracy and certified accuracy at each of ``sizes``."""
        t = np.atleast_1d(_real_array("sizes", sizes))
        acc = self.certified_accuracy(t)
        return CertifiedFigures(
            method=self.method,
            norm=self.norm,
            conventional_accuracy=self.conventional_accuracy,
            certified_accuracy={f"{s:g}": float(a) for s, a in zip(t.tolist(), acc.tolist())},
            num_points=self.num_points,
            num_abstained=int(np.sum(self.predictions == -1)),
            num_draws=self.num_draws,
            confidence=self.confidence,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CertificationResult:
        """Rebuilds a result written by :meth:`to_dict` (validated).

        Raises:
            TypeError: ``data`` is not a mapping.
            ValueError: a field is missing or the schema version is unknown.
        """
        v.mapping_with("data", data, ("method", "norm", *_ARRAYS, "num_draws", "confidence"))
        # The JSON names its NPZ beside it; that is the file's business, not the value's.
        return spec_from_dict(cls, {k: x for k, x in data.items() if k != "arrays"})

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
    return save_result_files(
        directory, _file_stem(result.method), arrays={a: getattr(result, a) for a in _ARRAYS}, meta=meta
    )


def load_certification_result(path: str | os.PathLike[str]) -> CertificationResult:
    """Loads a result written by :func:`save_certification_result` (NPZ read without pickle).

    Args:
        path: the JSON file.

    Raises:
        FileNotFoundError: the JSON or its NPZ is missing.
        ValueError: the files are malformed.
    """
    return CertificationResult.from_dict(load_result_files(path, _ARRAYS))
