"""The public Python API: what a script, a notebook or the README's Python section imports.

Every script in ``scripts/`` imports from the project only this module (the architecture test
enforces it), so the suite's internals can move without breaking a client: a moved function is
one import line to fix, here. It belongs to the application layer (it may import ``attacks``,
``defenses`` and ``reports``, as ``dpaudit/app`` does).

What it offers:

* **Typed runs**, what the ``dpaudit`` verbs run (a typed spec and a run directory in, a typed
  result out): :class:`TrainSpec`, :func:`default_config`, :func:`train_or_load`;
  :class:`MembershipSpec`, :func:`run_membership`; :class:`AuditSpec`, :func:`run_audit`;
  :class:`BatterySpec`, :func:`run_check` (the conformance battery, ``dpaudit check``);
  :class:`CertifySpec`, :func:`run_certify`, :func:`certifiable_defenses`;
  :class:`InversionSpec`, :class:`PublicData`, :func:`run_inversion`; :class:`CompareSpec`,
  :func:`parse_grid`, :func:`run_compare`; PATE's :func:`attack_aggregator`; DSSGD's
  :func:`attack_uploads`, :func:`audit_upload`, :func:`turn_leakage`;
  :func:`render_reports`; :func:`cli_main` (the ``dpaudit`` command in-process: argv in, exit
  status out); the cost model :func:`seconds_per_example`, :data:`PER_EXAMPLE_GRADIENT_FACTOR`.
* **Run directories and stored results** (torch-free): :class:`RunDir`,
  :func:`atomic_write_json`, :func:`atomic_write_text`, :func:`read_json`, :func:`to_jsonable`,
  :func:`thaw`; :class:`TrainedModel`, :func:`load_record`; :class:`MembershipResult`,
  :func:`save_membership_result`; :class:`AuditResult` with its typed details
  (:class:`AuditDetails`, :class:`ScoresDetails`, :class:`WhiteBoxDetails`, :class:`OneRunDetails`,
  :class:`PateAuditDetails`, :class:`UploadAuditDetails`); :class:`EvasionResult`;
  :class:`InversionResult`; :class:`CertificationResult`, :func:`load_certification_result`;
  :class:`ComparisonResult`; :class:`CheckReport`, :class:`CheckOutcome`,
  :class:`CheckDetails`, :func:`load_check_report`.
* **Privacy and robustness mathematics** (torch-free but for :func:`expected_score_accuracy`,
  :func:`sample_scores` and :func:`find_noise_layer`): claims (:func:`dpsgd_claim`,
  :class:`DPClaim`), accountants (:data:`ACCOUNTANTS`, :func:`compute_epsilon`,
  :func:`sampled_gaussian_event`), Gaussian calibrations (:func:`gdp_epsilon`,
  :func:`analytic_sigma`, :func:`extended_sigma`), the ε_LB procedures
  (:func:`resolve_bound`, :func:`bound_from_scores`, :func:`one_run_bound_from_scores`,
  :func:`one_run_epsilon_lb`, :func:`uncorrected_gdp_estimate`,
  :func:`fdp_one_run_bound_from_scores`, :func:`fdp_one_run_epsilon_lb`,
  :func:`idealised_gaussian_counts`), the audits built on them (:func:`audit_from_scores`,
  :func:`audit_from_one_run`, :func:`audit_ceiling`: an :class:`AuditResult` from scores),
  certification (:func:`count_bounds`,
  :func:`certified_radius`, :func:`noise_multiplier`, :class:`AuthorsMixedDelta`) and its Monte
  Carlo (:func:`expected_score_accuracy`, :func:`sample_scores`, :func:`find_noise_layer`).
* **Data, models, seeds, devices and executors**: :func:`load_dataset`, :func:`make_splits`,
  :class:`DatasetNotFoundError`, :func:`build_model`, :func:`load_model`, :func:`evaluate`,
  :func:`resolve_device`, :func:`derive_seed`, :func:`numpy_rng`, :func:`torch_generator`,
  :class:`Job`, :class:`LocalExecutor`, :class:`RayExecutor`, :func:`make_executor`.
* **Registries**: :data:`DEFENSES`, :data:`MEMBERSHIP_ATTACKS`, :data:`INVERSION_ATTACKS`,
  :data:`CHECKS`.
* **Lower-level pieces** that benchmarks, ablations and reproductions time or vary below the
  runs (a benchmark of our DP-SGD step, PGD or MI-Face against another library's, the Secure-SGD
  ablation, PATE's teachers trained apart from their students, the aggregator audit game with a
  planted bug, a DSSGD federation on Flower, a report of extra sections):

  - defenses: :class:`TrainRequest` (what every defense's train function takes),
    :class:`DPSGDConfig`, :func:`train_dpsgd`, :class:`NonPrivateConfig`,
    :func:`train_nonprivate`, :class:`SecureSGDConfig`, :func:`train_secure_sgd`,
    :func:`auto_sensitivity_control`, :func:`derive_dp_training`,
    :func:`derived_learning_rate`, :class:`GradientClipper`, :func:`noisy_clipped_sum`;
    PATE's :func:`plan_pate_teachers`, :func:`train_teachers`, :class:`StudentConfig`,
    :func:`train_student`, :func:`aggregator_config`, :func:`planted_aggregator`,
    :func:`partition_ids`; DSSGD's :class:`FederationSetup`, :class:`LocalTraining`,
    :class:`UploadRule`, :data:`SCHEDULES`, :func:`flatten_parameters`, :func:`run_flower`,
    :func:`participant_record_dir`;
  - attacks: :func:`run_membership_attacks`, :class:`RMIAConfig`, :class:`RMIAOfflineConfig`,
    :class:`ShadowTraining`, :func:`plan_shadows`, :func:`ensure_shadows`;
    :func:`evasion_config`, :func:`run_evasion`; :class:`InversionOutput`,
    :func:`target_confidence`, :class:`EvaluatorConfig`, :class:`LabelledImages`,
    :func:`train_evaluator`, :func:`evaluator_accuracy`, :func:`evaluate_reconstructions`,
    :class:`MIFaceConfig`, :func:`run_mi_face`, :class:`GANConfig`; :func:`pate_audit`;
    :func:`ssim`;
  - reports: :func:`write_membership_report`, :func:`load_pate_runs`, :func:`pate_sections`,
    :class:`Section`, :class:`Table`, :class:`Text`, :func:`write_report_files`.

Every name is its source's own object, under its source's name (but ``cli_main``, the CLI's
``main``). Importing this module loads none of them: each is imported on first use (PEP 562
module ``__getattr__``, as Scientific Python's SPEC 1 lazy loading does), so
``from dpaudit.api import dpsgd_claim`` stays torch-free and a script's ``--help`` stays fast.
The import block under ``TYPE_CHECKING`` below is the one table of where each name lives: type
checkers read it, and :func:`__getattr__` is built from it.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from attacks.audit.checks import CHECKS
    from attacks.audit.pate import pate_audit
    from attacks.evasion import evasion_config, run_evasion
    from attacks.federated.similarity import ssim
    from attacks.inversion import INVERSION_ATTACKS
    from attacks.inversion.base import InversionOutput, target_confidence
    from attacks.inversion.evaluate import (
        EvaluatorConfig,
        LabelledImages,
        evaluate_reconstructions,
        evaluator_accuracy,
        train_evaluator,
    )
    from attacks.inversion.gmi import GANConfig
    from attacks.inversion.mi_face import MIFaceConfig, run_mi_face
    from attacks.membership import MEMBERSHIP_ATTACKS, RMIAConfig, RMIAOfflineConfig, run_membership_attacks
    from attacks.membership.shadows import ShadowTraining, ensure_shadows, plan_shadows
    from defenses import DEFENSES
    from defenses._common import bundle_for_members
    from defenses.clipping import GradientClipper
    from defenses.dp_defaults import derive_dp_training, derived_learning_rate
    from defenses.dpsgd.config import DPSGDConfig
    from defenses.dpsgd.plan import plan_dpsgd, resolve_config
    from defenses.dpsgd.training import DPSGDTrainer, noisy_clipped_sum, train_dpsgd
    from defenses.dssgd.flower import run_flower
    from defenses.dssgd.participants import participant_record_dir
    from defenses.dssgd.protocol import SCHEDULES, FederationSetup, LocalTraining, flatten_parameters
    from defenses.dssgd.uploads import UploadRule
    from defenses.noise_layer.configs import SecureSGDConfig
    from defenses.noise_layer.schedule import auto_sensitivity_control
    from defenses.noise_layer.secure_sgd import train_secure_sgd
    from defenses.nonprivate import NonPrivateConfig, train_nonprivate
    from defenses.pate.aggregators import aggregator_config
    from defenses.pate.defense import plan_pate_teachers
    from defenses.pate.partition import partition_ids
    from defenses.pate.planted import planted_aggregator
    from defenses.pate.student import StudentConfig, train_student
    from defenses.pate.teachers import plan_teachers, train_teachers
    from dpaudit.app.cli import main as cli_main
    from dpaudit.app.estimate import PER_EXAMPLE_GRADIENT_FACTOR, seconds_per_example
    from dpaudit.app.runs.audit import AuditSpec, run_audit
    from dpaudit.app.runs.certify import CertifySpec, certifiable_defenses, run_certify
    from dpaudit.app.runs.check import BatterySpec, run_check
    from dpaudit.app.runs.compare import CompareSpec, parse_grid, run_compare
    from dpaudit.app.runs.dssgd import attack_uploads, audit_upload, turn_leakage
    from dpaudit.app.runs.inversion import InversionSpec, PublicData, run_inversion
    from dpaudit.app.runs.membership import MembershipSpec, run_membership
    from dpaudit.app.runs.pate import attack_aggregator
    from dpaudit.app.runs.report import render_reports
    from dpaudit.app.runs.train import TrainSpec, default_config, train_or_load
    from dpaudit.batched import BatchedDPSGD, BatchedSGD, plan_batches, train_batched
    from dpaudit.data import DatasetNotFoundError, load_dataset, make_splits
    from dpaudit.executors import make_executor
    from dpaudit.executors.jobs import Job
    from dpaudit.executors.local import LocalExecutor
    from dpaudit.executors.ray_tasks import RayExecutor
    from dpaudit.models import build_model
    from dpaudit.privacy.accountants import ACCOUNTANTS, compute_epsilon
    from dpaudit.privacy.audit_bounds import resolve_bound
    from dpaudit.privacy.audit_procedures import audit_ceiling, audit_from_one_run, audit_from_scores
    from dpaudit.privacy.audit_stats import (
        bound_from_scores,
        one_run_bound_from_scores,
        one_run_epsilon_lb,
        uncorrected_gdp_estimate,
    )
    from dpaudit.privacy.claims import DPClaim, dpsgd_claim
    from dpaudit.privacy.events import sampled_gaussian_event
    from dpaudit.privacy.fdp_one_run import (
        fdp_one_run_bound_from_scores,
        fdp_one_run_epsilon_lb,
        idealised_gaussian_counts,
    )
    from dpaudit.privacy.gaussian import analytic_sigma, extended_sigma, gdp_epsilon
    from dpaudit.results import (
        AuditResult,
        CertificationResult,
        EvasionResult,
        InversionResult,
        MembershipResult,
        TrainedModel,
        load_certification_result,
        load_record,
        save_membership_result,
    )
    from dpaudit.results.audit_details import (
        AuditDetails,
        OneRunDetails,
        PateAuditDetails,
        ScoresDetails,
        UploadAuditDetails,
        WhiteBoxDetails,
    )
    from dpaudit.results.check import CheckDetails, CheckOutcome, CheckReport, load_check_report
    from dpaudit.results.comparison import ComparisonResult
    from dpaudit.results.numbers import fmt_lower_bound, fmt_upper_bound
    from dpaudit.results.record import resolve_record_dir
    from dpaudit.robustness.certification import AuthorsMixedDelta, certified_radius
    from dpaudit.robustness.montecarlo import expected_score_accuracy, sample_scores
    from dpaudit.robustness.multipliers import noise_multiplier
    from dpaudit.robustness.noise import find_noise_layer
    from dpaudit.robustness.score_bounds import count_bounds
    from dpaudit.seeding import derive_seed, numpy_rng, torch_generator
    from dpaudit.store import RunDir, atomic_write_json, atomic_write_text, read_json, thaw, to_jsonable
    from dpaudit.threads import ENV_VARIABLES as THREAD_ENV_VARIABLES
    from dpaudit.train_request import TrainRequest
    from dpaudit.training import evaluate, resolve_device
    from dpaudit.weights import load_model
    from reports.membership import write_membership_report
    from reports.pate import load_pate_runs, pate_sections
    from reports.render import Section, Table, Text, write_report_files

__all__ = [
    # Typed runs
    "TrainSpec",
    "TrainRequest",
    "default_config",
    "train_or_load",
    "MembershipSpec",
    "run_membership",
    "AuditSpec",
    "run_audit",
    "BatterySpec",
    "run_check",
    "CertifySpec",
    "certifiable_defenses",
    "run_certify",
    "InversionSpec",
    "PublicData",
    "run_inversion",
    "CompareSpec",
    "parse_grid",
    "run_compare",
    "attack_aggregator",
    "attack_uploads",
    "audit_upload",
    "turn_leakage",
    "render_reports",
    "cli_main",
    "PER_EXAMPLE_GRADIENT_FACTOR",
    "seconds_per_example",
    # Run directories and stored results
    "RunDir",
    "atomic_write_json",
    "atomic_write_text",
    "read_json",
    "thaw",
    "to_jsonable",
    "THREAD_ENV_VARIABLES",
    "TrainedModel",
    "load_record",
    "resolve_record_dir",
    "MembershipResult",
    "save_membership_result",
    "AuditResult",
    "AuditDetails",
    "ScoresDetails",
    "WhiteBoxDetails",
    "OneRunDetails",
    "PateAuditDetails",
    "UploadAuditDetails",
    "EvasionResult",
    "InversionResult",
    "CertificationResult",
    "load_certification_result",
    "ComparisonResult",
    "CheckOutcome",
    "CheckDetails",
    "CheckReport",
    "load_check_report",
    "fmt_lower_bound",
    "fmt_upper_bound",
    # Privacy and robustness mathematics
    "DPClaim",
    "dpsgd_claim",
    "ACCOUNTANTS",
    "compute_epsilon",
    "sampled_gaussian_event",
    "gdp_epsilon",
    "analytic_sigma",
    "extended_sigma",
    "resolve_bound",
    "audit_from_scores",
    "audit_from_one_run",
    "audit_ceiling",
    "bound_from_scores",
    "one_run_bound_from_scores",
    "one_run_epsilon_lb",
    "uncorrected_gdp_estimate",
    "fdp_one_run_bound_from_scores",
    "fdp_one_run_epsilon_lb",
    "idealised_gaussian_counts",
    "count_bounds",
    "certified_radius",
    "noise_multiplier",
    "AuthorsMixedDelta",
    "expected_score_accuracy",
    "sample_scores",
    "find_noise_layer",
    # Data, models, seeds, devices and executors
    "load_dataset",
    "make_splits",
    "DatasetNotFoundError",
    "build_model",
    "load_model",
    "evaluate",
    "resolve_device",
    "derive_seed",
    "numpy_rng",
    "torch_generator",
    "Job",
    "LocalExecutor",
    "RayExecutor",
    "make_executor",
    # Registries
    "DEFENSES",
    "MEMBERSHIP_ATTACKS",
    "INVERSION_ATTACKS",
    "CHECKS",
    # Lower-level pieces: many models at once
    "BatchedSGD",
    "BatchedDPSGD",
    "plan_batches",
    "train_batched",
    # Lower-level pieces: defenses
    "DPSGDConfig",
    "plan_dpsgd",
    "resolve_config",
    "train_dpsgd",
    "DPSGDTrainer",
    "bundle_for_members",
    "NonPrivateConfig",
    "train_nonprivate",
    "SecureSGDConfig",
    "train_secure_sgd",
    "auto_sensitivity_control",
    "derive_dp_training",
    "derived_learning_rate",
    "GradientClipper",
    "noisy_clipped_sum",
    "plan_pate_teachers",
    "plan_teachers",
    "train_teachers",
    "StudentConfig",
    "train_student",
    "aggregator_config",
    "planted_aggregator",
    "partition_ids",
    "FederationSetup",
    "LocalTraining",
    "UploadRule",
    "SCHEDULES",
    "flatten_parameters",
    "run_flower",
    "participant_record_dir",
    # Lower-level pieces: attacks
    "run_membership_attacks",
    "RMIAConfig",
    "RMIAOfflineConfig",
    "ShadowTraining",
    "plan_shadows",
    "ensure_shadows",
    "evasion_config",
    "run_evasion",
    "InversionOutput",
    "target_confidence",
    "EvaluatorConfig",
    "LabelledImages",
    "train_evaluator",
    "evaluator_accuracy",
    "evaluate_reconstructions",
    "MIFaceConfig",
    "run_mi_face",
    "GANConfig",
    "pate_audit",
    "ssim",
    # Lower-level pieces: reports
    "write_membership_report",
    "load_pate_runs",
    "pate_sections",
    "Section",
    "Table",
    "Text",
    "write_report_files",
]


def _sources() -> dict[str, tuple[str, str]]:
    """Exported name → (module, attribute), read from this file's ``if TYPE_CHECKING:`` imports."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    table: dict[str, tuple[str, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                if not (isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0):
                    raise ImportError(
                        f"dpaudit.api: only absolute 'from ... import' lines belong in its table (line {stmt.lineno})"
                    )
                table.update({alias.asname or alias.name: (stmt.module, alias.name) for alias in stmt.names})
    return table


_SOURCES = _sources()


def __getattr__(name: str) -> Any:
    """Imports ``name`` from its module on first use and keeps it, so later look-ups are plain attributes."""
    try:
        module, attribute = _SOURCES[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
