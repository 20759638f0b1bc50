"""Defenses: training procedures that return a record (model, membership, privacy claim).

Each defense registers a :class:`DefenseSpec` in :data:`DEFENSES`; the CLI and experiment
runner look defenses up here, so adding one needs no change elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from defenses._common import build_record, expected_model_id, model_id_for
from defenses.certified import (
    AGMConfig,
    HGMConfig,
    PixelDPConfig,
    SecureSGDConfig,
    certification_spec,
    train_agm,
    train_hgm,
    train_pixeldp,
    train_secure_sgd,
)
from defenses.dpsgd import DPSGDConfig, DPSGDTrainer, train_dpsgd
from defenses.dssgd.defense import DERIVED_OPTIONS as DSSGD_DERIVED_OPTIONS
from defenses.dssgd.defense import PARTICIPANT_CACHE, DSSGDConfig, dssgd_claim_kind, dssgd_report_lines, participant_identity, train_dssgd
from defenses.nonprivate import NonPrivateConfig, train_nonprivate
from defenses.pate.defense import TEACHER_CACHE, PATEConfig, train_pate
from defenses.pate.teachers import teacher_identity
from defenses.smoothing import SmoothingConfig, train_smoothing
from defenses.smoothing import certification_spec as smoothing_certification_spec

__all__ = ["DefenseSpec", "DEFENSES", "build_record", "expected_model_id", "model_id_for"]


@dataclass(frozen=True, kw_only=True)
class DefenseSpec:
    """A registered defense: everything the CLI, the runs and the reports need to know about it.

    Attributes:
        name: registry key (``--defense`` value, ``record.defense``).
        summary: one line for ``--help`` and reports (cite the paper).
        config_type: frozen dataclass of the defense's hyper-parameters.
        train: ``train(*, bundle, splits, model_name, model_options, config, seed, device,
            progress) -> (TrainedModel, nn.Module)``.
        claim_kind: the :class:`dpaudit.privacy.claims.PrivacyClaim` kind its records carry,
            or, for a defense whose kind depends on its configuration, a function
            ``claim_kind(config) -> str`` taking the config object or a stored record's config
            mapping (DSSGD: ``dssgd-svt`` with the DP upload, else ``nonprivate``, and its
            participants' local models are non-private); read it through :meth:`claim_kind_for`.
            A loaded record's claim is rebuilt from its config and metrics by the kind's
            rebuilder (:mod:`dpaudit.privacy.record_claims`), which every kind must register.
        audit_trainer: optional white-box adapter for audits: ``audit_trainer(config=...,
            model_name=..., device=...)`` returns an
            :class:`attacks.audit_procedures.HookedTrainer`.
        certification: optional ``certification(config) -> CertificationSpec |
            SmoothingCertificationSpec`` for defenses ``certify`` can certify: a noise layer in
            the model (PixelDP, HGM) or Gaussian smoothing of its input (Cohen et al. 2019).
        report_lines: optional ``report_lines(record) -> list[str]``: lines ``dpaudit train``
            prints after the common ones (DSSGD: its reference rows and engine).
        submodels: for a defense that trains sub-models on an executor and caches them in the
            run (PATE's teachers), the name of that cache (``RUN_DIR/records/NAME/``); ``train``
            then also takes ``workspace=`` (a :class:`dpaudit.training.TrainWorkspace`, or
            ``None`` to keep nothing).
        family: the family ``dpaudit compare`` draws one privacy–utility curve for (``None``:
            the defense is its own family); PixelDP, AGM and HGM share ``noise-layer``.
        derived_options: model options the defense derives itself and stores on the record
            (the noise layer of the certified defenses, DSSGD's input standardisation), which
            its model id does not hash (:func:`defenses._common.expected_model_id`).
        submodel_identity: for a defense with sub-models, ``submodel_identity(record) ->
            (model_id, directory_name) | None``: what a sub-model's record (a PATE teacher, a
            DSSGD participant) must be called, or ``None`` for a record that is not one.
    """

    name: str
    summary: str
    config_type: type
    train: Callable[..., Any]
    claim_kind: str | Callable[[Any], str]
    audit_trainer: Callable[..., Any] | None = None
    certification: Callable[[Any], Any] | None = None
    submodels: str | None = None
    report_lines: Callable[[Any], list[str]] | None = None
    family: str | None = None
    derived_options: tuple[str, ...] = ()
    submodel_identity: Callable[[Any], tuple[str, str] | None] | None = None

    def claim_kind_for(self, config: Any) -> str:
        """The claim kind a training with ``config`` returns, or a record with this stored config carries."""
        return self.claim_kind(config) if callable(self.claim_kind) else self.claim_kind


def _certification(defense: str) -> Callable[[Any], Any]:
    return lambda config: certification_spec(defense, config)


DEFENSES: dict[str, DefenseSpec] = {
    "nonprivate": DefenseSpec(name="nonprivate", config_type=NonPrivateConfig, train=train_nonprivate, claim_kind="nonprivate", summary="non-private SGD baseline (ε = ∞)"),
    "dpsgd": DefenseSpec(
        name="dpsgd",
        config_type=DPSGDConfig,
        train=train_dpsgd,
        claim_kind="dp",
        audit_trainer=DPSGDTrainer,
        summary="DP-SGD with Poisson lots, per-example clipping and Gaussian noise (+ DP-PCA) (Abadi et al. 2016)",
    ),
    "pixeldp": DefenseSpec(
        name="pixeldp",
        config_type=PixelDPConfig,
        train=train_pixeldp,
        claim_kind="nonprivate",
        certification=_certification("pixeldp"),
        derived_options=("noise_layer",),
        family="noise-layer",
        summary="noise layer after the first layer, classical Gaussian calibration (eps_r <= 1) (Lecuyer et al. 2019)",
    ),
    "agm": DefenseSpec(
        name="agm",
        config_type=AGMConfig,
        train=train_agm,
        claim_kind="nonprivate",
        certification=_certification("agm"),
        derived_options=("noise_layer",),
        family="noise-layer",
        summary="PixelDP's noise layer with the analytic Gaussian calibration (Balle & Wang 2018)",
    ),
    "hgm": DefenseSpec(
        name="hgm",
        config_type=HGMConfig,
        train=train_hgm,
        claim_kind="nonprivate",
        certification=_certification("hgm"),
        derived_options=("noise_layer",),
        family="noise-layer",
        summary="heterogeneous Gaussian noise layer, any eps_r > 0 (Phan et al. 2019)",
    ),
    "secure-sgd": DefenseSpec(
        name="secure-sgd",
        config_type=SecureSGDConfig,
        train=train_secure_sgd,
        claim_kind="dp",
        certification=_certification("secure-sgd"),
        derived_options=("noise_layer",),
        summary="HGM noise layer + DP-SGD: DP for the training data and certified robustness (Phan et al. 2019)",
    ),
    "smoothing": DefenseSpec(
        name="smoothing",
        config_type=SmoothingConfig,
        train=train_smoothing,
        claim_kind="nonprivate",
        certification=smoothing_certification_spec,
        summary="randomized smoothing: base model trained with Gaussian input noise, certified in L2 by CERTIFY (Cohen et al. 2019)",
    ),
    "pate": DefenseSpec(
        name="pate",
        config_type=PATEConfig,
        train=train_pate,
        claim_kind="pate",
        submodels=TEACHER_CACHE,
        submodel_identity=teacher_identity,
        summary="teachers on disjoint partitions, noisy vote aggregation (LNMax/GNMax/Confident-GNMax), released student (Papernot et al. 2017, 2018)",
    ),
    "dssgd": DefenseSpec(
        name="dssgd",
        config_type=DSSGDConfig,
        train=train_dssgd,
        claim_kind=dssgd_claim_kind,
        submodels=PARTICIPANT_CACHE,
        submodel_identity=participant_identity,
        derived_options=DSSGD_DERIVED_OPTIONS,
        report_lines=dssgd_report_lines,
        summary="distributed selective SGD: participants upload a selected fraction of their updates to a parameter server, optionally by the sparse vector technique (Shokri & Shmatikov 2015)",
    ),
}
