"""The certify run: certified vs conventional accuracy of a certifiable model (what ``dpaudit certify`` runs).

A record is certifiable when its defense stored a certification spec (the registry's
``certification``). For a record trained with a noise layer (``pixeldp``, ``agm``, ``hgm``,
``secure-sgd``) it

1. measures the first layer's sensitivity Δ_r on the loaded weights, in the attack norm
   (:func:`dpaudit.robustness.noise.layer_sensitivity`), so the certificate rests on the model itself;
2. draws the noise n times per test input (:func:`dpaudit.robustness.montecarlo.sample_scores`) and
   certifies each input with the defense's own mechanism: expected-score bounds at confidence
   1 − η, the robustness condition, and the largest radius over (ε', δ')
   (Lecuyer et al. 2019, Prop. 1; Phan et al. 2019, Eq. 10) — and with randomized smoothing
   of the same noise (Cohen et al. 2019, CERTIFY). The prediction is read from the same draws
   as the bounds, so they take both sides of every class at η/(2k)
   (:func:`dpaudit.robustness.score_bounds.count_bounds`); the conventional accuracy reported
   is that prediction's, the classifier the certificate covers, with its rule named
   (:func:`dpaudit.results.certify_summary.own_prediction_rule`);
3. attacks the same inputs with FGSM, I-FGSM, PGD and MIM (expectation over the noise) at
   the same radii; the soundness verdict (certified accuracy never above the robust accuracy
   the strongest attack leaves) comes from :func:`dpaudit.robustness.certification.soundness_violations`;
4. stores everything under ``run.certify_dir(model_id)`` (JSON + NPZ, atomic) with the typed
   :class:`~dpaudit.results.certify_summary.CertifySummary` as ``summary.json``. A rerun reuses
   a stored certificate or attack only when every parameter it was computed with matches.

For a randomized-smoothing record (``smoothing``: a base classifier f trained with Gaussian
input noise, :class:`~dpaudit.results.certification_spec.SmoothingCertificationSpec`) the same steps
run on f behind Gaussian noise on its input (:func:`dpaudit.robustness.noise.add_input_noise`, a
noise layer around the identity, Δ = 1 in L2): CERTIFY (Cohen et al. 2019) is its own and only
certificate, and the attacks target the smoothed classifier through expectation over the input
noise, exactly as they do a noise-layer model. Draws, n0 and α default to the record's spec.

A model without a certification spec (or a noise-layer spec without its noise layer) is refused
with :class:`NotCertifiable`: such a model has no certificate to compute.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attacks.evasion import EVASION_ATTACKS
from dpaudit import _validate as v
from dpaudit.app.runs.certify_attacks import _by_radius, _reusable, _violations, certify_subset, robust_accuracies
from dpaudit.locks import unit_lock
from dpaudit.results.certify_summary import (
    CertifySummary,
    SmoothingSummary,
    SoundnessViolation,
    own_prediction_rule,
    smoothing_prediction_rule,
)
from dpaudit.specs import PlainSpec, spec_field
from dpaudit.store import RunDir

if TYPE_CHECKING:
    from dpaudit.results.certification import CertificationResult
    from dpaudit.results.certification_spec import CertificationSpec, SmoothingCertificationSpec

from dpaudit.app.runs.certify_defaults import (
    CERTIFY_BUDGET_SECONDS,
    DEFAULT_RADII,
    MAX_DEFAULT_EXAMPLES,
    MIN_DEFAULT_EXAMPLES,
    certifiable_defenses,
    chosen_radii,
    default_num_examples,
    no_noise_layer_message,
)

__all__ = [
    "DEFAULT_ATTACKS",
    "DEFAULT_RADII",
    "CertifySpec",
    "NotCertifiable",
    "certifiable_defenses",
    "chosen_radii",
    "no_noise_layer_message",
    "run_certify",
]

#: Every registered evasion attack, in registration order (FGSM, I-FGSM, PGD, MIM built in).
DEFAULT_ATTACKS: tuple[str, ...] = EVASION_ATTACKS.names()
_BOUNDS = ("clopper-pearson", "hoeffding", "bernstein")
#: Where the own certificate's prediction comes from: its estimation draws, so its score bounds
#: are two-sided per class (:func:`dpaudit.robustness.score_bounds.count_bounds`).
OWN_BOUND_SELECTION = "same-draws"


class NotCertifiable(v.InvalidArgument):
    """The record has no noise layer or no certification spec to certify with."""

    argument = "target"


@dataclass(frozen=True, kw_only=True)
class CertifySpec:
    """Everything one certify run needs, validated once (``dpaudit certify`` builds it from its flags).

    Attributes:
        target: record directory (or a run directory holding exactly one record).
        radii: perturbation radii (in ``norm``) at which certified and robust accuracy are reported;
            ``None``: chosen from what the model certifies (:func:`chosen_radii`), so the smallest
            non-zero one has a non-zero certified accuracy whenever any test point is certified.
        attacks: evasion attacks to run (subset of fgsm, ifgsm, pgd, mim; empty: certify only).
        norm: attack norm; ``None`` = the norm the model was calibrated for.
        num_draws: n, noise draws per test input for the certificate (``None``: the record's
            spec's default, 2,000 for a noise layer and 10,000 for smoothing).
        num_examples: test inputs (a seeded subset of the test split); ``None``: as many as fit a
            stated time budget (:func:`default_num_examples`).
        confidence: 1 − η, the joint confidence of all expected-score bounds of one input.
        bound: ``clopper-pearson`` (argmax counts), ``hoeffding`` or ``bernstein`` (softmax).
        smoothing: also certify with randomized smoothing of the same noise.
        num_selection_draws: n0 of CERTIFY (independent draws that pick the class; ``None``:
            the spec's default, 100).
        smoothing_confidence: 1 − α of CERTIFY (Cohen et al.'s α = 0.001 is 0.999; ``None``:
            the spec's default, 0.999).
        num_eot_samples: noise draws averaged per attack gradient (``None``: the attack's default).
        seed: root seed (test subset, noise, attack starts).
        device: where to compute.
        data_root: data root for the record's dataset.
        batch_size: most rows per Monte Carlo forward pass.
        progress: progress and reuse notes on stderr.
        i_know: accept draws, examples, radii or EOT samples above the documented limits
            (:data:`dpaudit.limits.LIMITS`), as ``--i-know`` does on the command line.
    """

    target: str | Path
    radii: tuple[float, ...] | None = None
    attacks: tuple[str, ...] = DEFAULT_ATTACKS
    norm: str | None = None
    num_draws: int | None = None
    num_examples: int | None = None
    confidence: float = 0.95
    bound: str = "clopper-pearson"
    smoothing: bool = True
    num_selection_draws: int | None = None
    smoothing_confidence: float | None = None
    num_eot_samples: int | None = None
    seed: int = 0
    device: str = "cpu"
    data_root: str | None = None
    batch_size: int = 4096
    progress: bool = True
    i_know: bool = False

    def __post_init__(self) -> None:
        from attacks.evasion import EVASION_ATTACKS
        from dpaudit.limits import check_count, check_sizes

        if not isinstance(self.target, (str, Path)) or not str(self.target):
            raise v.invalid_type("target", f"target must be a path, got {self.target!r}")
        check_sizes(
            self,
            {
                "num_draws": "draws",
                "num_selection_draws": "draws",
                "num_examples": "examples",
                "num_eot_samples": "eot_samples",
            },
        )
        if self.radii is not None:
            check_count("radii", self.radii, "radii", i_know=self.i_know)
            radii = sorted({v.non_negative("radii", r) for r in self.radii})
            if not radii:
                raise v.invalid("radii", "radii must name at least one radius, got [] (None: chosen from the model)")
            object.__setattr__(self, "radii", tuple(radii))
        attacks = tuple(dict.fromkeys(self.attacks))
        for a in attacks:
            v.choice("attacks", a, tuple(EVASION_ATTACKS))
        object.__setattr__(self, "attacks", attacks)
        if self.num_draws is not None:
            object.__setattr__(self, "num_draws", v.integer("num_draws", self.num_draws, minimum=2))
        if self.num_examples is not None:
            object.__setattr__(self, "num_examples", v.integer("num_examples", self.num_examples, minimum=1))
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        v.choice("bound", self.bound, _BOUNDS)
        if self.num_selection_draws is not None:
            object.__setattr__(
                self, "num_selection_draws", v.integer("num_selection_draws", self.num_selection_draws, minimum=1)
            )
        if self.smoothing_confidence is not None:
            object.__setattr__(
                self, "smoothing_confidence", v.open_unit("smoothing_confidence", self.smoothing_confidence)
            )
        if self.num_eot_samples is not None:
            object.__setattr__(self, "num_eot_samples", v.integer("num_eot_samples", self.num_eot_samples, minimum=1))
        object.__setattr__(self, "batch_size", v.integer("batch_size", self.batch_size, minimum=1))


@dataclass(frozen=True, kw_only=True)
class _Resolved:
    """A certifiable record and what a :class:`CertifySpec` resolves to against its certification spec.

    ``noise_layer_spec`` is ``cspec`` when it certifies a noise layer, ``None`` for smoothing (its
    spec is about noise on the input); unset counts come from the record's spec; ``refusal`` is
    the :class:`NotCertifiable` message for this record.
    """

    rdir: Path
    record: Any
    cspec: CertificationSpec | SmoothingCertificationSpec
    noise_layer_spec: CertificationSpec | None
    norm: str
    num_draws: int
    num_selection_draws: int
    smoothing_confidence: float
    with_smoothing: bool
    refusal: str


@dataclass(frozen=True, kw_only=True)
class _CertificateKey(PlainSpec):
    """What a stored certificate must have been computed with to be reused (the start of its ``config``).

    Its ``to_dict`` is the stored key, in the order certificates have always stored it: the
    keys a smoothing certificate adds, and the dataset's file digests, are left out when unset.

    Attributes:
        num_draws, confidence, num_examples, seed, bound, norm: the run's certification parameters.
        weights_sha256: the certified weights.
        dataset_files: the test images' file digests (``None`` for bundled data, whose identity is fixed).
        smoothing_confidence, num_selection_draws: CERTIFY's α and n0 (``None`` in the own certificate's key).
    """

    num_draws: int
    confidence: float
    num_examples: int
    seed: int
    bound: str
    norm: str
    weights_sha256: str
    dataset_files: Mapping[str, str] | None = spec_field(default=None, omit="none")
    smoothing_confidence: float | None = spec_field(default=None, omit="none")
    num_selection_draws: int | None = spec_field(default=None, omit="none")


@dataclass(frozen=True, kw_only=True)
class _Inputs:
    """The certified test inputs and the noise they are certified under (what every certificate shares).

    Attributes:
        x, y: the test subset's features and labels; ``labels`` the same labels as int64.
        num_examples: how many (``len(pick)``).
        sensitivity: Δ of the noise layer in the attack norm; ``sigma`` its σ; ``per_unit`` σ/Δ.
        wanted: the key every stored certificate must match; ``wanted_smooth`` CERTIFY's.
        directory: ``run.certify_dir(model_id)``.
    """

    x: Any
    y: Any
    labels: np.ndarray
    num_examples: int
    sensitivity: float
    sigma: float
    per_unit: float
    wanted: _CertificateKey
    wanted_smooth: _CertificateKey
    directory: Path


def _resolve(spec: CertifySpec, run: RunDir) -> _Resolved:
    """Checks the arguments and the record's certification spec before any model is loaded."""
    from defenses import DEFENSES
    from dpaudit.app.records import verify_record
    from dpaudit.results import EVASION_NORMS
    from dpaudit.results.certification_spec import CertificationSpec
    from dpaudit.results.record import load_record, resolve_record_dir
    from dpaudit.store import thaw

    if not isinstance(spec, CertifySpec):
        raise v.invalid_type("spec", f"spec must be a CertifySpec, got {type(spec).__name__}")
    if not isinstance(run, RunDir):
        raise v.invalid_type("run", f"run must be a RunDir, got {type(run).__name__}")
    rdir = resolve_record_dir(spec.target)
    record = verify_record(load_record(rdir), rdir)  # a record contradicting itself: one line, before any work
    stored_spec = thaw(record.config).get("certification")
    refusal = no_noise_layer_message(record.model_id, record.defense)
    if stored_spec is None:
        raise NotCertifiable(refusal)
    cspec = CertificationSpec.from_dict(stored_spec)
    expected = DEFENSES[record.defense].certified_mechanism if record.defense in DEFENSES else None
    stated = (getattr(cspec, "mechanism", None), getattr(cspec, "max_epsilon", None))
    if expected is not None and stated != expected:
        # A record edited to another mechanism (or PixelDP without its ε ≤ 1 cap) would certify unsoundly.
        raise v.invalid(
            "target",
            f"record file {str(rdir / 'record.json')!r}: config.certification "
            f"mechanism={stated[0]!r}, max_epsilon={stated[1]!r} do not match "
            f"defense {record.defense!r} {expected!r}",
        )
    # Smoothing's spec is about noise on the input: the noise-layer certificate does not apply to it.
    noise_layer_spec = cspec if isinstance(cspec, CertificationSpec) else None
    norm = spec.norm if spec.norm is not None else cspec.attack_norm
    if norm not in cspec.norms:
        raise v.invalid(
            "norm",
            f"norm must be one of {', '.join(cspec.norms)} for a {cspec.kind} "
            f"certificate (defense {record.defense}), got {norm!r}",
        )
    if spec.attacks and norm not in EVASION_NORMS:
        raise v.invalid(
            "norm",
            f"norm must be one of {', '.join(EVASION_NORMS)} when attacks run, got "
            f"{norm!r} (pass attacks=() to certify only)",
        )
    # Unset counts come from the record's spec (CERTIFY's n = 10,000 for a smoothing model).
    return _Resolved(
        rdir=rdir,
        record=record,
        cspec=cspec,
        noise_layer_spec=noise_layer_spec,
        norm=norm,
        num_draws=spec.num_draws if spec.num_draws is not None else cspec.default_num_draws,
        num_selection_draws=spec.num_selection_draws
        if spec.num_selection_draws is not None
        else cspec.default_num_selection_draws,
        smoothing_confidence=spec.smoothing_confidence
        if spec.smoothing_confidence is not None
        else cspec.default_smoothing_confidence,
        with_smoothing=spec.smoothing or noise_layer_spec is None,
        refusal=refusal,
    )


def _load_certified_model(spec: CertifySpec, target: _Resolved) -> tuple[Any, Any, Any]:
    """``(model, noise layer, device)``: the certified classifier (refused without a noise layer)."""
    from dpaudit.results.certification_spec import SmoothingCertificationSpec
    from dpaudit.robustness.noise import add_input_noise, find_noise_layer
    from dpaudit.training import resolve_device
    from dpaudit.weights import load_model

    record = target.record
    dev = resolve_device(spec.device)
    model = load_model(target.rdir, device=dev)
    if isinstance(target.cspec, SmoothingCertificationSpec):
        # The certified classifier is the base model behind Gaussian input noise (Theorem 1).
        model = add_input_noise(model, input_shape=tuple(record.input_shape), noise_std=target.cspec.sigma)
    noise = find_noise_layer(model)
    if noise is None:
        raise NotCertifiable(target.refusal)
    if spec.progress:
        from dpaudit.app.plan import announce_plan, certify_plan

        assert spec.num_examples is not None  # set by _with_default_examples
        announce_plan(
            certify_plan(
                record=record,
                num_examples=spec.num_examples,
                num_draws=target.num_draws + target.num_selection_draws,
                device=str(dev),
            ),
            hint="--num-examples and --num-draws change it",
        )
    return model, noise, dev


def _inputs(spec: CertifySpec, target: _Resolved, noise: Any, run: RunDir) -> _Inputs:
    """The seeded test subset, the noise's measured Δ, and the keys stored certificates must match."""
    from dpaudit.data import dataset_files, load_dataset
    from dpaudit.results.record import WEIGHTS_FILE, weights_digest
    from dpaudit.robustness.noise import layer_sensitivity

    record = target.record
    bundle = load_dataset(record.dataset, data_root=spec.data_root)
    test = bundle.test
    assert spec.num_examples is not None  # set by _with_default_examples
    pick = certify_subset(len(test), num_examples=spec.num_examples, seed=spec.seed)
    x, y = test.features[pick], test.labels[pick]
    cdir = run.certify_dir(record.model_id)
    cdir.mkdir(parents=True, exist_ok=True)
    sensitivity = layer_sensitivity(noise, input_shape=bundle.input_shape, norm=target.norm)
    sigma = float(noise.noise_std)
    # Keyed on the weights too: a model retrained under the same id (train --force) is another
    # model, and its certificates are not the old ones. load_model has checked the file against
    # the record's digest; only a record older than digests needs the file hashed here.
    weights_sha256 = record.weights_sha256 or weights_digest(target.rdir / WEIGHTS_FILE)
    # ... and on the test images' files: a replaced file gives other examples to certify.
    data = dataset_files(record.dataset, data_root=spec.data_root)
    wanted = _CertificateKey(
        num_draws=target.num_draws,
        confidence=spec.confidence,
        num_examples=int(len(pick)),
        seed=spec.seed,
        bound=spec.bound,
        norm=target.norm,
        weights_sha256=weights_sha256,
        # Bundled data (digits) has a fixed identity: its certificates keep their keys.
        dataset_files=data or None,
    )
    return _Inputs(
        x=x,
        y=y,
        labels=y.numpy().astype(np.int64),
        num_examples=int(len(pick)),
        sensitivity=sensitivity,
        sigma=sigma,
        per_unit=sigma / sensitivity,
        wanted=wanted,
        wanted_smooth=dataclasses.replace(
            wanted,
            smoothing_confidence=target.smoothing_confidence,
            num_selection_draws=target.num_selection_draws,
        ),
        directory=cdir,
    )


def _stored_certificates(
    spec: CertifySpec, target: _Resolved, inputs: _Inputs
) -> tuple[CertificationResult | None, CertificationResult | None]:
    """The stored own and smoothing certificates that answer the same question (``None``: recompute)."""
    from dpaudit.results.certification import load_certification_result

    own_path = inputs.directory / f"certify-{target.record.defense}.json"
    smooth_path = inputs.directory / "certify-smoothing.json"
    own = load_certification_result(own_path) if target.noise_layer_spec is not None and own_path.is_file() else None
    # The measured Δ is part of the key: a certificate stored under another sensitivity (an older,
    # unsound L∞ bound behind a PCA projection, issue 29) is recomputed, never reprinted.
    # So is the bounds' selection: a certificate from before the bounds took both sides of every
    # class (its confidence was only 1 − 2η) is recomputed too.
    if own is not None and not _reusable(
        spec.progress,
        own_path,
        own.config,
        {**inputs.wanted.to_dict(), "sensitivity": inputs.sensitivity, "bound_selection": OWN_BOUND_SELECTION},
    ):
        own = None
    smooth = None
    if target.with_smoothing:
        smooth = load_certification_result(smooth_path) if smooth_path.is_file() else None
        if smooth is not None and not _reusable(
            spec.progress,
            smooth_path,
            smooth.config,
            {**inputs.wanted_smooth.to_dict(), "sigma_per_sensitivity": inputs.per_unit},
        ):
            smooth = None
    return own, smooth


def _own_certificate(
    spec: CertifySpec, target: _Resolved, inputs: _Inputs, mc: Any, noise_layer_spec: CertificationSpec
) -> CertificationResult:
    """The defense's own certificate from the estimation draws (Lecuyer et al. 2019, Prop. 1; Phan et al. 2019, Eq.
    10)."""
    from dpaudit.results.certification import CertificationResult
    from dpaudit.robustness.certification import certified_radius
    from dpaudit.robustness.score_bounds import count_bounds, mean_bounds

    # The prediction is read from the same draws as the bounds ("same-draws"): the bounds then
    # take both sides of every class at η/(2k), so the stated confidence is what they have.
    if spec.bound == "clopper-pearson":
        b = count_bounds(mc.counts, confidence=spec.confidence)
    else:
        b = mean_bounds(
            mc.mean, num_draws=target.num_draws, variances=mc.variance, method=spec.bound, confidence=spec.confidence
        )
    assert b.selection == OWN_BOUND_SELECTION
    own_radii = certified_radius(
        b.lower,
        b.upper,
        noise_per_sensitivity=inputs.per_unit,
        mechanism=noise_layer_spec.mechanism,
        max_epsilon=noise_layer_spec.max_epsilon,
    )
    return CertificationResult(
        method=target.record.defense,
        norm=target.norm,
        labels=inputs.labels,
        predictions=np.asarray(b.top, dtype=np.int64),
        radii=np.asarray(own_radii, dtype=float),
        num_draws=target.num_draws,
        confidence=spec.confidence,
        config={
            **inputs.wanted.to_dict(),
            "bound_selection": b.selection,
            "prediction_rule": own_prediction_rule(spec.bound, target.num_draws),
            "mechanism": noise_layer_spec.mechanism,
            "max_epsilon": noise_layer_spec.max_epsilon,
            "sensitivity": inputs.sensitivity,
            "noise_std": inputs.sigma,
            "draws_per_second": mc.draws_per_second,
            "seconds": mc.seconds,
        },
    )


def _certificates(
    spec: CertifySpec, target: _Resolved, inputs: _Inputs, model: Any, dev: Any
) -> tuple[CertificationResult | None, CertificationResult | None, float | None]:
    """``(own, smoothing, draws per second)``: reused where stored, else computed and stored
    (``own`` is ``None`` for a smoothing record, ``smoothing`` when it was not asked for)."""
    from dpaudit.results.certification import CertificationResult, save_certification_result
    from dpaudit.robustness.montecarlo import sample_scores
    from dpaudit.robustness.smoothing import smoothing_certify

    own, smooth = _stored_certificates(spec, target, inputs)
    stored_rate = own.config.get("draws_per_second") if own is not None else None
    # A stored number; anything else (absent, or an edited file) reads as unmeasured.
    draws_per_second = (
        float(stored_rate) if isinstance(stored_rate, (int, float)) and not isinstance(stored_rate, bool) else None
    )
    if (target.noise_layer_spec is not None and own is None) or (target.with_smoothing and smooth is None):
        # The estimation draws are shared: the own certificate and CERTIFY's estimation step use them.
        mc = sample_scores(
            model,
            inputs.x,
            num_draws=target.num_draws,
            seed=spec.seed,
            stream="certify-estimate",
            device=dev,
            batch_size=spec.batch_size,
            progress=spec.progress,
        )
        draws_per_second = mc.draws_per_second
        if target.noise_layer_spec is not None and own is None:
            own = _own_certificate(spec, target, inputs, mc, target.noise_layer_spec)
            save_certification_result(own, inputs.directory)
        if target.with_smoothing and smooth is None:
            sel = sample_scores(
                model,
                inputs.x,
                num_draws=target.num_selection_draws,
                seed=spec.seed,
                stream="certify-select",
                device=dev,
                batch_size=spec.batch_size,
            )
            # σ per unit of sensitivity: the layer's σ/Δ, or the input noise's σ (Δ = 1 in L2).
            preds, rad = smoothing_certify(
                sel.counts, mc.counts, sigma=inputs.per_unit, confidence=target.smoothing_confidence
            )
            smooth = CertificationResult(
                method="smoothing",
                norm=target.norm,
                labels=inputs.labels,
                predictions=np.asarray(preds, dtype=np.int64),
                radii=np.asarray(rad, dtype=float),
                num_draws=target.num_draws,
                confidence=target.smoothing_confidence,
                config={
                    **inputs.wanted_smooth.to_dict(),
                    "sigma_per_sensitivity": inputs.per_unit,
                    "prediction_rule": smoothing_prediction_rule(target.num_selection_draws),
                },
            )
            save_certification_result(smooth, inputs.directory)
    return own, smooth, draws_per_second


@dataclass(frozen=True, kw_only=True)
class _Outcome:
    """What the certify run measured, for :func:`_summary`."""

    own: CertificationResult | None
    smooth: CertificationResult | None
    draws_per_second: float | None
    robust: dict[str, dict[str, float]]
    violations: tuple[SoundnessViolation, ...]
    seconds: float
    radii: tuple[float, ...]
    radii_source: str | None = None


def _summary(spec: CertifySpec, target: _Resolved, inputs: _Inputs, outcome: _Outcome) -> CertifySummary:
    """The typed summary (``summary.json``) of one certify run."""
    record, radii, nls = target.record, outcome.radii, target.noise_layer_spec
    own, smooth = outcome.own, outcome.smooth
    # A smoothing model's own (and only) certificate is CERTIFY's.
    primary = own if own is not None else smooth
    assert primary is not None  # a noise-layer spec computes its own; any other computes smoothing
    return CertifySummary(
        model_id=record.model_id,
        defense=record.defense,
        dataset=record.dataset,
        norm=target.norm,
        radii=radii,
        num_examples=inputs.num_examples,
        num_draws=target.num_draws,
        confidence=spec.confidence if own is not None else primary.confidence,
        bound=spec.bound,
        seed=spec.seed,
        epsilon=float(record.metrics.get("epsilon", float("inf"))),
        delta=record.metrics.get("delta"),
        mechanism=nls.mechanism if nls is not None else target.cspec.kind,
        sensitivity=inputs.sensitivity,
        noise_std=inputs.sigma,
        noise_per_sensitivity=inputs.per_unit,
        robustness_epsilon=nls.robustness_epsilon if nls is not None else None,
        robustness_delta=nls.robustness_delta if nls is not None else None,
        attack_norm_bound=nls.attack_norm_bound if nls is not None else None,
        redistribute=nls.redistribute if nls is not None else False,
        draws_per_second=outcome.draws_per_second,
        conventional_accuracy=float(primary.conventional_accuracy),
        prediction_rule=own_prediction_rule(spec.bound, target.num_draws)
        if own is not None
        else smoothing_prediction_rule(target.num_selection_draws),
        certified_accuracy=_by_radius(radii, primary.certified_accuracy(radii)),
        robust_accuracy=outcome.robust,
        smoothing=(
            SmoothingSummary(
                conventional_accuracy=float(smooth.conventional_accuracy),
                prediction_rule=smoothing_prediction_rule(target.num_selection_draws),
                certified_accuracy=_by_radius(radii, smooth.certified_accuracy(radii)),
                confidence=target.smoothing_confidence,
                num_selection_draws=target.num_selection_draws,
            )
            if smooth is not None
            else None
        ),
        soundness_violations=outcome.violations,
        seconds=outcome.seconds,
        radii_source=outcome.radii_source,
    )


def _with_default_examples(spec: CertifySpec, target: _Resolved) -> CertifySpec:
    """``spec`` with its example count set: the given one, or :func:`default_num_examples` (said on stderr)."""
    if spec.num_examples is not None:
        return spec
    record = target.record
    n = default_num_examples(
        model_name=record.model_name,
        input_shape=tuple(record.input_shape),
        num_classes=int(record.num_classes),
        model_options=dict(record.model_options),
        draws=target.num_draws + target.num_selection_draws,
    )
    if spec.progress:
        print(
            f"certify: {n} test examples (default: as many as fit {CERTIFY_BUDGET_SECONDS / 60:g} minutes of "
            f"{target.num_draws + target.num_selection_draws} draws each on 2 CPU cores, within "
            f"[{MIN_DEFAULT_EXAMPLES}, {MAX_DEFAULT_EXAMPLES}]); --num-examples changes it",
            file=sys.stderr,
            flush=True,
        )
    return dataclasses.replace(spec, num_examples=n)


def run_certify(spec: CertifySpec, run: RunDir) -> CertifySummary:
    """Certifies and attacks one record under ``run``; returns the summary (also ``summary.json``).

    Raises:
        NotCertifiable: the record has no certification spec, or a noise-layer spec and no noise layer.
        FileNotFoundError: no record at ``spec.target``.
        ValueError: inconsistent options (named with their value).
    """
    from dpaudit.results.certify_summary import save_certify_summary

    target = _resolve(spec, run)
    spec = _with_default_examples(spec, target)
    model, noise, dev = _load_certified_model(spec, target)
    # Created only now, so a refused model leaves no empty run directory behind.
    run = run.create(command=" ".join(["dpaudit", *sys.argv[1:]]))
    with unit_lock(run.path, f"certify-{target.record.model_id}"):  # one writer per model's certificates
        inputs = _inputs(spec, target, noise, run)
        started = time.monotonic()
        own, smooth, draws_per_second = _certificates(spec, target, inputs, model, dev)
        # Without radii asked, the radii come from what the certificate certifies (never a fixed
        # list a model may certify nothing at: that reads as a vacuous 0 % everywhere).
        radii, radii_source = (spec.radii, None) if spec.radii is not None else chosen_radii(own, smooth)
        robust = robust_accuracies(
            model,
            inputs.x,
            inputs.y,
            attacks=spec.attacks,
            radii=radii,
            norm=target.norm,
            num_eot_samples=spec.num_eot_samples,
            seed=spec.seed,
            device=dev,
            directory=inputs.directory,
            progress=spec.progress,
        )
        violations = _violations(robust, (own, smooth), radii=radii, norm=target.norm)
        outcome = _Outcome(
            own=own,
            smooth=smooth,
            draws_per_second=draws_per_second,
            robust=robust,
            violations=tuple(violations),
            seconds=time.monotonic() - started,
            radii=radii,
            radii_source=radii_source,
        )
        summary = _summary(spec, target, inputs, outcome)
        save_certify_summary(summary, inputs.directory)
        return summary
