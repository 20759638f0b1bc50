"""How a record is certified: a noise layer's :class:`CertificationSpec` or a :class:`SmoothingCertificationSpec`
(torch-free).

A record states how it is certified in ``config["certification"]``: a noise layer's
:class:`CertificationSpec` (PixelDP, Lecuyer et al. 2019; HGM, Phan et al. 2019), or a
:class:`SmoothingCertificationSpec` for a base classifier certified by randomized smoothing of
its input (Cohen, Rosenfeld & Kolter 2019, Theorem 1 and CERTIFY), told apart by the stored
``kind`` (:func:`certification_spec_from_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from dpaudit import _validate as v
from dpaudit.specs import PlainSpec, spec_from_dict

__all__ = [
    "CERTIFICATION_NORMS",
    "CERTIFICATION_KINDS",
    "CertificationSpec",
    "SmoothingCertificationSpec",
    "certification_spec_from_dict",
]


#: Norms a certificate can be stated in.
CERTIFICATION_NORMS = ("l2", "linf", "l1")


#: The Gaussian calibrations a noise layer may use (see dpaudit.robustness.certification).
_MECHANISMS = ("classical", "analytic", "extended")
#: ``kind`` of a stored certification spec; a spec without one is a noise layer's (older records).
CERTIFICATION_KINDS = ("noise-layer", "smoothing")


@dataclass(frozen=True, kw_only=True)
class CertificationSpec(PlainSpec):
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

    #: Beside the spec, a record notes how the authors' code differed (noise_layer/training.py).
    __spec_ignored__: ClassVar[tuple[str, ...]] = ("kind", "authors_quirks", "authors_reference_delta")

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
            raise v.invalid(
                "robustness_epsilon",
                f"robustness_epsilon must be <= max_epsilon {self.max_epsilon!r} for "
                f"mechanism {self.mechanism!r}, got {self.robustness_epsilon!r}",
            )
        v.open_unit("robustness_delta", self.robustness_delta)
        v.positive("attack_norm_bound", self.attack_norm_bound)
        v.positive("noise_per_sensitivity", self.noise_per_sensitivity)

    def describe(self) -> str:
        """One line naming the robustness parameters (what ``train`` prints)."""
        noise = "heterogeneous" if self.redistribute else "isotropic"
        return (
            f"{noise} Gaussian noise layer ({self.mechanism}): "
            f"eps_r={self.robustness_epsilon:g}, delta_r={self.robustness_delta:g}, "
            f"L={self.attack_norm_bound:g} ({self.attack_norm})"
        )

    # Wider than PlainSpec's: a record's certification may be of either kind, read by its "kind".
    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CertificationSpec | SmoothingCertificationSpec:  # type: ignore[override]
        """Inverse of :meth:`to_dict` for every kind of certification spec a record may store.

        Every reader of ``config["certification"]`` (record validation, ``train``, ``certify``)
        comes through here, so a stored spec of another kind (``{"kind": "smoothing", …}``)
        is read as its own type by :func:`certification_spec_from_dict`.

        Raises:
            ValueError: a field is missing or invalid (named).
        """
        return certification_spec_from_dict(data)


@dataclass(frozen=True, kw_only=True)
class SmoothingCertificationSpec(PlainSpec):
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

    __spec_keys__: ClassVar[tuple[str, ...]] = ("kind",)  # then the fields in order

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
        object.__setattr__(
            self, "num_selection_draws", v.integer("num_selection_draws", self.num_selection_draws, minimum=1)
        )
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


def certification_spec_from_dict(data: object) -> CertificationSpec | SmoothingCertificationSpec:
    """Reads a stored certification spec by its ``kind`` (none: a noise layer's, as older records store it).

    Raises:
        TypeError: ``data`` is not a mapping.
        ValueError: an unknown kind, or a field missing or invalid (named).
    """
    if not isinstance(data, Mapping):
        raise v.invalid_type(None, f"certification spec must be a mapping, got {type(data).__name__}")
    kind = v.choice("kind", data.get("kind", "noise-layer"), CERTIFICATION_KINDS)
    if kind == "smoothing":
        return spec_from_dict(SmoothingCertificationSpec, data)
    return spec_from_dict(CertificationSpec, data)
