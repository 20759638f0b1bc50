"""The jobs of a ``dpaudit compare`` grid: one training per (setting, seed), then membership,
evasion and inversion against each trained record, and a canary audit per auditable setting.

Each job is a module-level function (a worker process imports it by name) taking the parsed grid
and the typed outcome of the training it evaluates, and returning its own frozen outcome
(:mod:`dpaudit.results.compare_outcomes`). Jobs are named by a :class:`JobKey`, the one place
their key strings are built.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from dpaudit import _validate as v
from dpaudit.app.runs.compare.grid import BASELINE_DEFENSE, EVALUATED_SECTIONS, CompareGrid, Setting
from dpaudit.app.runs.compare.sections import EvasionSection, InversionSection
from dpaudit.results.audit import AuditResult
from dpaudit.results.audit_details import WhiteBoxDetails
from dpaudit.results.certify_summary import AttackedClassifier
from dpaudit.results.compare_outcomes import (
    COMPARE_FPRS,
    AuditOutcome,
    EvasionOutcome,
    InversionOutcome,
    MembershipMeasures,
    MembershipOutcome,
    TrainedOutcome,
    same_value,
)
from dpaudit.results.numbers import fmt_lower_bound, fmt_upper_bound
from dpaudit.specs import PlainSpec, spec_field
from dpaudit.store import RunDir, safe_stem, thaw

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "EVALUATION_KINDS",
    "JobKey",
    "RecordDigest",
    "TrainedAlgorithm",
    "audit_job",
    "evasion_job",
    "inversion_configs",
    "inversion_job",
    "membership_job",
    "train_job",
    "trained_algorithm",
]

#: The evaluations every trained record faces, each a section of the grid (in the order they run).
EVALUATION_KINDS = EVALUATED_SECTIONS


@dataclass(frozen=True)
class JobKey:
    """A job's name in the grid: ``train-LABEL-seedN``, ``membership-LABEL-seedN`` …, ``audit-LABEL``.

    The string is the job's identity in the run store (its outcome file and the ``job`` field
    in it), so it is built here alone.

    Attributes:
        kind: ``train``, one of :data:`EVALUATION_KINDS`, or ``audit`` (one per setting).
        label: the setting's label.
        seed: the repeat (``None`` for an audit, which runs on the first seed's record).
    """

    kind: str
    label: str
    seed: int | None = None

    @classmethod
    def train(cls, label: str, seed: int) -> JobKey:
        return cls("train", label, seed)

    @classmethod
    def audit(cls, label: str) -> JobKey:
        return cls("audit", label)

    def __str__(self) -> str:
        return f"{self.kind}-{self.label}" if self.seed is None else f"{self.kind}-{self.label}-seed{self.seed}"


# ----------------------------------------------------------------------------- training


def train_job(*, grid: CompareGrid, setting: Setting, seed: int, run_dir: str, data_root: str | None) -> TrainedOutcome:
    """Trains (or finds) one (setting, seed); returns what the matrix needs of the record."""
    from dpaudit.app.runs.train import TrainSpec, default_config, train_or_load

    spec = TrainSpec(
        defense=setting.defense,
        config=default_config(
            setting.defense, **{k: (tuple(x) if isinstance(x, list) else x) for k, x in setting.parameters.items()}
        ),
        model=setting.model,
        dataset=grid.dataset,
        model_options=dict(setting.model_options),
        seed=seed,
        member_fraction=grid.member_fraction,
        data_root=data_root,
        device=grid.device,
        progress=False,
        executor="serial",
        i_know=True,  # the grid's sizes were held against the same limits when it was planned (check_plan)
    )
    outcome = train_or_load(spec, RunDir(run_dir))
    record = outcome.record
    claim = record.claim
    from dpaudit.privacy.last_iterate import claim_last_iterate_epsilon
    from dpaudit.results.record_accuracy import stored_test_examples

    if claim.is_private:
        epsilons = {k: float(e) for k, e in claim.epsilons(delta=grid.delta).items()}
    else:
        epsilons = {"none": math.inf}
    return TrainedOutcome(
        model_id=record.model_id,
        record_dir=str(outcome.record_dir),
        test_accuracy=float(record.metrics.get("test_accuracy", math.nan)),
        epsilon_ub=epsilons,
        data_dependent=bool(claim.data_dependent),
        epsilon_last_iterate=claim_last_iterate_epsilon(claim, delta=grid.delta),
        num_members=len(record.membership.members),
        reused=outcome.reused,
        test_examples=stored_test_examples(record.metrics),
    )


@dataclass(frozen=True, kw_only=True)
class RecordDigest(PlainSpec):
    """What identifies a trained record for the jobs keyed on it (its ``to_dict`` enters their hash).

    Attributes:
        model_id: the record's id.
        weights_sha256: its weights' digest (``None`` for a record saved without one).
        claim: its privacy claim in the claim's own stored form.
    """

    model_id: str
    weights_sha256: str | None
    claim: Mapping[str, object] = spec_field(encode=thaw)


def record_digest(trained: TrainedOutcome) -> RecordDigest:
    """The :class:`RecordDigest` of a trained (setting, seed)'s record, read from the run."""
    from dpaudit.results.record import load_record

    record = load_record(trained.record_dir)
    return RecordDigest(model_id=record.model_id, weights_sha256=record.weights_sha256, claim=record.claim.to_dict())


# ----------------------------------------------------------------------------- membership


class _AttackSpec(Protocol):
    """What the jobs read of a registered attack: the type of its config."""

    @property
    def config_type(self) -> type[DataclassInstance]: ...


def _attack_configs(
    registry: Mapping[str, _AttackSpec], names: Sequence[str], **shared: int | None
) -> dict[str, DataclassInstance]:
    """Each named attack's config, with the grid's ``shared`` settings where the config has the field
    (``None`` leaves the attack's default)."""
    configs: dict[str, DataclassInstance] = {}
    for name in names:
        ctype = registry[name].config_type
        fields = {f.name for f in dataclasses.fields(ctype)}
        configs[name] = ctype(**{k: val for k, val in shared.items() if val is not None and k in fields})
    return configs


#: The coverage of the intervals the comparison's tables give (jointly over a row's repeats).
INTERVAL_CONFIDENCE = 0.95


def _membership_measures(
    result: Any, *, delta: float, confidence: float, repeats: int, where: np.ndarray | None = None
) -> MembershipMeasures | None:
    """One attack's measures on one record; its intervals at the 95 % of the page split over ``repeats`` (Bonferroni),
    so that the matrix's means over repeats keep an interval that holds jointly."""
    from dpaudit.results import MembershipResult
    from dpaudit.results.membership_rates import membership_rates

    if where is not None:
        result = MembershipResult(
            attack=result.attack,
            model_id=result.model_id,
            sample_ids=result.sample_ids[where],
            scores=result.scores[where],
            is_member=result.is_member[where],
        )
    if result.is_member.all() or not result.is_member.any():
        return None
    s = result.summary(fprs=COMPARE_FPRS, delta=delta, confidence=confidence)
    level = 1.0 - (1.0 - INTERVAL_CONFIDENCE) / repeats
    rates = membership_rates(result, fprs=(), confidence=level)
    return MembershipMeasures(
        auc_low=rates.auc.low,
        auc_high=rates.auc.high,
        advantage_low=rates.advantage.low,
        advantage_high=rates.advantage.high,
        interval_confidence=level,
        auc=float(s["auc"]),
        advantage=float(2 * s["balanced_accuracy"] - 1),
        # None where the non-members cannot resolve the FPR (MembershipResult.summary says why).
        tpr_at_fpr={f: (None if t is None else float(t)) for f, t in s["tpr_at_fpr"].items()},
        epsilon_lb=float(s["epsilon_lb"]),
        num_samples=int(len(result.scores)),
        num_members=int(s["num_members"]),
        num_non_members=int(s["num_non_members"]),
    )


def membership_job(
    *, grid: CompareGrid, trained: TrainedOutcome, seed: int, run_dir: str, data_root: str | None
) -> MembershipOutcome:
    """Every membership attack of the grid against one record, with the vulnerable-sample measures."""
    from attacks.membership import MEMBERSHIP_ATTACKS
    from dpaudit.app.runs.membership import VULNERABILITY_FILE, MembershipSpec, run_membership
    from dpaudit.store import load_npz

    mem = grid.membership
    assert mem is not None
    configs = _attack_configs(MEMBERSHIP_ATTACKS, mem.attacks, num_shadows=mem.num_shadows)
    # Shared shadows: one non-private pool for every target (else each target's own recipe).
    shared = mem.shadows == "shared"
    spec = MembershipSpec(
        attacks=configs,
        target=trained.record_dir,
        seed=seed,
        num_samples=mem.num_samples,
        num_population=mem.num_population,
        executor="serial",
        data_root=data_root,
        device=grid.device,
        progress=False,
        i_know=True,  # the grid's sizes were held against the same limits when it was planned (check_plan)
        shadow_defense=BASELINE_DEFENSE if shared else None,
        shadow_config={"epochs": mem.shadow_epochs} if shared and mem.shadow_epochs else {},
    )
    out = run_membership(spec, RunDir(run_dir))
    # Each ε_LB is taken at the Bonferroni level of the row's best-of-all maximum.
    level = grid.bound_confidence()
    measures = {
        a: _membership_measures(r, delta=grid.delta, confidence=level, repeats=len(grid.seeds))
        for a, r in out.results.items()
    }
    vulnerable: dict[str, MembershipMeasures] = {}
    vpath = out.result_dir / VULNERABILITY_FILE if out.result_dir is not None else None
    if vpath is not None and vpath.is_file():
        arrays = load_npz(vpath)
        score = arrays["vulnerability"]
        order = np.argsort(-score, kind="stable")[: min(grid.vulnerable_top_k, int(np.isfinite(score).sum()))]
        top = set(arrays["sample_ids"][order].tolist())
        for a, r in out.results.items():
            m = _membership_measures(
                r, delta=grid.delta, confidence=level, repeats=len(grid.seeds), where=np.isin(r.sample_ids, list(top))
            )
            if m is not None:
                vulnerable[a] = m
    return MembershipOutcome(membership=measures, vulnerable=vulnerable, result_dir=str(out.result_dir))


# ----------------------------------------------------------------------------- evasion


def _strongest_by_radius(robust: Mapping[str, Mapping[str, float]], radii: Sequence[float]) -> dict[str, float]:
    """Per radius, the lowest robust accuracy any attack left (the strongest attack there)."""
    return {f"{r:g}": float(min(accs[f"{r:g}"] for accs in robust.values())) for r in radii} if robust else {}


def _with_attacked(outcome: EvasionOutcome, attacked: AttackedClassifier | None) -> EvasionOutcome:
    """``outcome`` with the classifier the attacks ran against and its clean count (unchanged when none was stored)."""
    if attacked is None:
        return outcome
    return dataclasses.replace(
        outcome,
        attacked_prediction_rule=attacked.prediction_rule,
        attacked_clean_correct=attacked.clean_correct,
        num_examples=attacked.num_examples,
    )


def _certified_evasion(
    eva: EvasionSection, *, trained: TrainedOutcome, grid: CompareGrid, seed: int, run: RunDir, data_root: str | None
) -> EvasionOutcome:
    from dpaudit.app.runs.certify import CertifySpec, run_certify
    from dpaudit.app.runs.certify_attacks import attacked_classifier

    radii = eva.radii
    summary = run_certify(
        CertifySpec(
            target=trained.record_dir,
            radii=radii,
            attacks=eva.attacks,
            norm=eva.norm,
            num_draws=eva.num_draws,
            num_examples=eva.num_examples,
            num_eot_samples=eva.eot_samples,
            seed=seed,
            device=grid.device,
            data_root=data_root,
            progress=False,
            i_know=True,  # the grid's sizes were held against the same limits when it was planned (check_plan)
        ),
        run,
    )
    attacked = attacked_classifier(
        run.certify_dir(summary.model_id), model_id=summary.model_id, attacks=eva.attacks, norm=eva.norm
    )
    outcome = EvasionOutcome(
        robust_accuracy=_strongest_by_radius(summary.robust_accuracy, radii),
        certified_accuracy=dict(summary.certified_accuracy),
        conventional_accuracy=float(summary.conventional_accuracy),
        prediction_rule=summary.prediction_rule,
        # Certified accuracy is a lower bound (rounded down), the robust accuracy attacks left an upper one (rounded
        # up).
        unsound=tuple(
            f"{x.certificate} at radius {x.radius:g}: certified "
            f"{fmt_lower_bound(x.certified_accuracy)} > robust "
            f"{fmt_upper_bound(x.robust_accuracy)}"
            for x in summary.soundness_violations
        ),
        certified=True,
    )
    return _with_attacked(outcome, attacked)


def evasion_job(
    *, grid: CompareGrid, trained: TrainedOutcome, seed: int, run_dir: str, data_root: str | None
) -> EvasionOutcome:
    """Robust accuracy under the grid's evasion attacks; certified accuracy where the defense certifies."""
    from dpaudit.app.records import load_verified_record
    from dpaudit.app.runs.certify import certifiable_defenses
    from dpaudit.app.runs.certify_attacks import attacked_classifier, certify_subset, robust_accuracies
    from dpaudit.data import load_dataset
    from dpaudit.weights import load_model

    eva = grid.evasion
    assert eva is not None
    run = RunDir(run_dir)
    record = load_verified_record(trained.record_dir)
    if eva.certify and record.defense in certifiable_defenses():
        return _certified_evasion(eva, trained=trained, grid=grid, seed=seed, run=run, data_root=data_root)
    # A model that does not certify is attacked on the test examples certify would take for the
    # seed, with certify's stored-result reuse, so every row of the matrix faces the same inputs.
    radii = eva.radii
    test = load_dataset(record.dataset, data_root=data_root).test
    pick = certify_subset(len(test), num_examples=eva.num_examples, seed=seed)
    directory = run.subdir("attacks") / "evasion" / safe_stem(record.model_id, default="target")
    robust = robust_accuracies(
        load_model(trained.record_dir, device=grid.device),
        test.features[pick],
        test.labels[pick],
        attacks=eva.attacks,
        radii=radii,
        norm=eva.norm,
        num_eot_samples=eva.eot_samples,
        seed=seed,
        device=grid.device,
        directory=directory,
        progress=False,
    )
    attacked = attacked_classifier(directory, model_id=record.model_id, attacks=eva.attacks, norm=eva.norm)
    return _with_attacked(EvasionOutcome(robust_accuracy=_strongest_by_radius(robust, radii)), attacked)


# ----------------------------------------------------------------------------- inversion


def inversion_configs(inv: InversionSection) -> dict[str, DataclassInstance]:
    """Each attack's config of a grid's ``[attacks.inversion]`` section.

    ``iterations`` bounds each attack's search through the field the attack names for it
    (MI-Face's ``max_iterations``, GMI's ``gmi_iterations``); absent, each keeps its default.
    """
    from attacks.inversion import INVERSION_ATTACKS

    configs = _attack_configs(INVERSION_ATTACKS, inv.attacks)
    if inv.iterations is None:
        return configs
    return {
        name: dataclasses.replace(c, **{field: int(inv.iterations)})
        if (field := INVERSION_ATTACKS[name].iterations_field)
        else c
        for name, c in configs.items()
    }


def inversion_job(
    *, grid: CompareGrid, trained: TrainedOutcome, seed: int, run_dir: str, data_root: str | None
) -> InversionOutcome:
    """Model inversion against one record: the best top-1 accuracy of the evaluation classifier."""
    from attacks.inversion.evaluate import EvaluatorConfig
    from dpaudit.app.runs.inversion import InversionSpec, run_inversion

    inv = grid.inversion
    assert inv is not None
    evaluator = EvaluatorConfig(evaluator_epochs=inv.evaluator_epochs) if inv.evaluator_epochs else EvaluatorConfig()
    out = run_inversion(
        InversionSpec(
            target=Path(trained.record_dir),
            attacks=inversion_configs(inv),
            classes=inv.classes or None,
            evaluator=evaluator,
            seed=seed,
            data_root=data_root,
            device=grid.device,
            progress=False,
            i_know=True,  # the grid's sizes were held against the same limits when it was planned (check_plan)
        ),
        RunDir(run_dir),
    )
    return InversionOutcome(
        inversion_top1={a: float(r.attack_accuracy_top1) for a, r in out.results.items()},
        num_classes=same_value([r.num_classes for r in out.results.values()]),
    )


# ----------------------------------------------------------------------------- audit


#: Config fields an audit sets from the trained record itself (σ, C, q, the steps, the learning rate,
#: δ), or that would make its trainer derive them again (a lot size, a budget, its accountant).
_AUDIT_SETS = (
    "noise_multiplier",
    "clip_norm",
    "sampling_rate",
    "lot_size",
    "expected_lot_size",
    "target_epsilon",
    "accountant",
    "epochs",
    "learning_rate",
    "delta",
)


@dataclass(frozen=True, kw_only=True)
class TrainedAlgorithm:
    """The DP-SGD algorithm a record was trained with, as its record states it."""

    noise_multiplier: float
    sampling_rate: float
    num_steps: int
    clip_norm: float
    learning_rate: float
    accountant: str
    delta: float
    num_members: int


def trained_algorithm(record: Any, *, label: str) -> TrainedAlgorithm:
    """What an audit of ``record``'s training must run, read from the record alone: σ, q and the
    steps as trained, C, the learning rate, the accountant and δ of its budget, the members' count.

    Raises:
        ValueError: naming the setting, when the record lacks one of them (nothing is guessed
            or re-calibrated), or when its claim is not the DP-SGD claim of (q, σ, T) alone
            (DP-PCA composed in), which is the algorithm an audit trains.
    """
    from dpaudit.privacy.claims import DPClaim, dpsgd_claim, event_to_dict
    from dpaudit.store import thaw

    config, metrics = thaw(record.config), record.metrics
    algo = {k: metrics.get(k) for k in ("noise_multiplier", "sampling_rate", "num_steps")}
    algo.update({k: config.get(k) for k in ("clip_norm", "learning_rate", "accountant", "delta")})
    missing = [k for k, x in algo.items() if x is None]
    if missing:
        raise v.invalid(
            "attacks.audit",
            f"setting {label!r}: its trained record {record.model_id} has no "
            f"{', '.join(missing)}; the audit runs the trained algorithm and guesses "
            "none of it",
        )
    ours = dpsgd_claim(
        sampling_rate=algo["sampling_rate"], noise_multiplier=algo["noise_multiplier"], num_steps=algo["num_steps"]
    )
    if not isinstance(record.claim, DPClaim) or event_to_dict(record.claim.event) != event_to_dict(ours.event):
        raise v.invalid(
            "attacks.audit",
            f"setting {label!r}: its claim ({record.claim.description}) is not "
            f"{ours.description} alone, the algorithm an audit trains; it cannot be "
            "audited",
        )
    return TrainedAlgorithm(
        noise_multiplier=algo["noise_multiplier"],
        sampling_rate=algo["sampling_rate"],
        num_steps=algo["num_steps"],
        clip_norm=algo["clip_norm"],
        learning_rate=algo["learning_rate"],
        accountant=algo["accountant"],
        delta=algo["delta"],
        num_members=len(record.membership.members),
    )


def audit_job(
    *, grid: CompareGrid, setting: Setting, trained: TrainedOutcome, name: str, run_dir: str, data_root: str | None
) -> AuditOutcome:
    """A canary audit of exactly the algorithm that trained the setting's (first seed's) record.

    σ, q, the steps, C, the learning rate, the members' count, the architecture and the rest of
    the config are the record's (:func:`trained_algorithm`), never re-calibrated or defaulted.
    The audit runs at the setting's δ; its ε_UB is the trained claim's ε there under the
    setting's accountant (white-box: of one step, the unit its ε_LB measures), the matrix's
    number for that accountant when the setting's δ is the grid's.
    """
    from defenses import DEFENSES
    from dpaudit.app.runs.audit import AuditSpec, run_audit
    from dpaudit.results.record import load_record
    from dpaudit.store import thaw

    aud = grid.audit
    assert aud is not None
    record = load_record(trained.record_dir)
    algo = trained_algorithm(record, label=setting.label)
    fields = {f.name for f in dataclasses.fields(DEFENSES[setting.defense].config_type) if f.init}
    spec = AuditSpec(
        defense=setting.defense,
        dataset=record.dataset,
        model=record.model_name,
        model_options=dict(record.model_options) or None,
        # The rest of the trained config travels as it is; what the algorithm above fixes is set once.
        defense_config={k: x for k, x in thaw(record.config).items() if k in fields and k not in _AUDIT_SETS},
        method=aud.method,
        confidence=grid.bound_confidence(),  # it competes with the membership bounds for the row's best
        delta=algo.delta,
        noise_multiplier=algo.noise_multiplier,
        clip_norm=algo.clip_norm,
        sampling_rate=algo.sampling_rate,
        num_steps=algo.num_steps,
        learning_rate=algo.learning_rate,
        num_members=algo.num_members,
        seed=0,
        workers=1,
        executor="serial",
        data_root=data_root,
        device=grid.device,
        i_know=True,  # the grid's sizes were held against the same limits when it was planned (check_plan)
        progress=False,
        name=name,
        # The audit's own default for a choice the grid leaves out.
        **{
            k: getattr(aud, k)
            for k in ("threat", "num_canaries", "num_trials", "canary")
            if getattr(aud, k) is not None
        },
    )
    result = run_audit(spec, RunDir(run_dir))
    # The audit's own claim must be the trained one: else it trained another algorithm.
    accountant = algo.accountant
    claimed = float(record.claim.epsilon(delta=algo.delta, accountant=accountant))
    audited = _audited_by_accountant(result).get(accountant)
    if audited is None or not math.isclose(audited, claimed, rel_tol=1e-9):
        raise RuntimeError(
            f"internal error: setting {setting.label!r} trained a claim of "
            f"ε={claimed!r} ({accountant}, δ={algo.delta:g}), its audit one of "
            f"ε={audited!r}"
        )
    return AuditOutcome(
        epsilon_lb=float(result.epsilon_lb),
        epsilon_ub=float(result.epsilon_ub) if result.threat_model == "white-box" else claimed,
        accountant=accountant,
        delta=float(algo.delta),
        # The bound's assumption travels with it into the matrix (GDP only for Gaussian-family claims).
        method=f"audit ({result.method}, {result.threat_model}; assumption: {result.assumption})",
        confidence=float(result.confidence),
        trained={
            "noise_multiplier": algo.noise_multiplier,
            "sampling_rate": algo.sampling_rate,
            "num_steps": algo.num_steps,
            "clip_norm": algo.clip_norm,
            "learning_rate": algo.learning_rate,
            "num_members": algo.num_members,
        },
    )


def _audited_by_accountant(result: AuditResult) -> Mapping[str, float]:
    """ε_UB by accountant of the claim the audit trained: a white-box audit's run-level claim (its own ε_UB is one
    step's)."""
    if result.threat_model != "white-box":
        return result.epsilon_ub_by_accountant
    full = result.details.full_run_claim if isinstance(result.details, WhiteBoxDetails) else None
    return {} if full is None else full.epsilon_ub_by_accountant
