"""Small run directories built from result values alone (no torch, no training): one holding
audits, membership attacks and certify results, and a sample run per report kind for the
report-kind contract suite (:data:`REPORT_SAMPLES`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpaudit.privacy.claims import dpsgd_claim
from dpaudit.privacy.pate.analysis import analyze_gnmax
from dpaudit.privacy.pate.claim import pate_claim
from dpaudit.results import (
    AuditResult,
    CertificationResult,
    EvasionResult,
    InversionResult,
    Membership,
    MembershipResult,
    TrainedModel,
    save_audit_result,
    save_certification_result,
    save_evasion_result,
    save_inversion_result,
    save_membership_result,
)
from dpaudit.results.comparison import ComparisonResult, ComparisonRow, PooledMeasures, save_comparison
from dpaudit.store import RunDir, atomic_save_npz, atomic_write_json
from tests.check_samples import build_check_run


def _dpsgd_fields(claim) -> tuple[dict, dict]:
    """The config and metrics a DP-SGD run with ``claim``'s q, σ and T records (reports verify the claim against
    them)."""
    event = getattr(claim, "event", None)
    if event is None or not hasattr(event, "count"):
        return {}, {}
    sampled = event.event
    q, sigma, steps = sampled.sampling_probability, sampled.event.noise_multiplier, event.count
    config = {
        "noise_multiplier": sigma,
        "sampling_rate": q,
        "lot_size": None,
        "target_epsilon": None,
        "epochs": steps / max(1, round(1 / q)),
        "delta": 1e-5,
        "accountant": "pld",
    }
    return config, {"sampling_rate": q, "noise_multiplier": sigma, "num_steps": steps}


def with_true_id(rec: TrainedModel) -> TrainedModel:
    """``rec`` under the model id ``train`` gives the training it describes: the id ``report``'s
    record verifier (the one ``attack`` uses) expects, a digest of config, options, seed and members."""
    from defenses import DEFENSES
    from defenses._common import expected_model_id

    return dataclasses.replace(
        rec, model_id=expected_model_id(rec, derived_options=DEFENSES[rec.defense].derived_options)
    )


def bare_record(defense: str, *, config: dict, metrics: dict, claim=None, model_id: str = "unnamed") -> TrainedModel:
    """A digits-mlp record of ``defense`` on 20 members and 20 non-members, under ``model_id`` (no id check)."""
    return TrainedModel(
        model_id=model_id,
        defense=defense,
        model_name="digits-mlp",
        dataset="digits",
        input_shape=(1, 8, 8),
        num_classes=10,
        membership=Membership(members=np.arange(0, 20), non_members=np.arange(20, 40)),
        seed=0,
        config=config,
        metrics=metrics,
        **({"claim": claim} if claim is not None else {}),
    )


def trained(defense: str, claim=None, metrics=None) -> TrainedModel:
    """A digits-mlp record of ``defense`` (its DP-SGD config and metrics read from ``claim``), under its true id."""
    config, measured = _dpsgd_fields(claim)
    return with_true_id(bare_record(defense, config=config, metrics={**measured, **(metrics or {})}, claim=claim))


def _record(run: RunDir, defense: str, claim=None, metrics=None) -> TrainedModel:
    """Writes :func:`trained`'s record into ``run`` (``records/<its id>/record.json``) and returns it."""
    rec = trained(defense, claim, metrics)
    atomic_write_json(run.record_dir(rec.model_id) / "record.json", rec.to_dict())
    return rec


def sample_claim():
    """The DP-SGD claim of the sample runs' target (q = 0.01, σ = 1.1, T = 100)."""
    return dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.1, num_steps=100)


#: The sample runs' DP-SGD target, HGM model and non-private model, by their true ids (metrics are no part of an id).
DP_MODEL = trained("dpsgd", sample_claim()).model_id
HGM_MODEL = trained("hgm").model_id
NONPRIVATE_MODEL = trained("nonprivate").model_id


@pytest.fixture
def write_record():
    """:func:`_record` for report tests of other kinds: writes a digits-mlp record into a run."""
    return _record


def build_run(path, *, audits=True, membership=True, certify=True) -> RunDir:
    run = RunDir(path).create(command="test")
    rng = np.random.default_rng(0)
    claim = dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.1, num_steps=100)
    _record(
        run,
        "dpsgd",
        claim=claim,
        metrics={
            "epsilon": 1.5,
            "delta": 1e-5,
            "test_accuracy": 0.9,
            "test_examples": 360,  # digits' test split: the count behind the accuracy's interval
            "test_correct": 324,
            "train_accuracy": 0.95,  # on the record's 20 members
            "non_member_accuracy": 0.85,  # on its 20 non-members
        },
    )
    if audits:
        eps = claim.epsilons(delta=1e-5)
        result = AuditResult(
            epsilon_lb=0.4,
            confidence=0.95,
            method="multi-run",
            bound="clopper-pearson",
            delta=1e-5,
            threshold_strategy="bonferroni",
            num_in=50,
            num_out=50,
            epsilon_ub=min(eps.values()),
            accountant=min(eps, key=eps.__getitem__),
            epsilon_ub_by_accountant=eps,
            claim_description=claim.description,
        )
        d = run.audit_dir("multi")
        save_audit_result(result, d)
        atomic_save_npz(d / "scores.npz", in_scores=rng.normal(1, 1, 50), out_scores=rng.normal(0, 1, 50))
    if membership:
        n = 200
        member = np.arange(n) < n // 2
        for attack, shift in (("loss", 0.5), ("lira", 1.0), ("rmia", 1.0)):
            scores = rng.normal(0, 1, n) + shift * member
            save_membership_result(
                MembershipResult(
                    attack=attack,
                    model_id=DP_MODEL,
                    sample_ids=np.arange(n),
                    scores=scores,
                    is_member=member,
                    labels=np.arange(n) % 10,
                ),
                run.membership_dir(DP_MODEL),
            )
    if certify:
        _record(run, "hgm")
        n, radii = 30, [0.1, 0.3]
        labels = rng.integers(0, 10, n)
        d = run.certify_dir(HGM_MODEL)
        for method in ("hgm", "smoothing"):
            save_certification_result(
                CertificationResult(
                    method=method,
                    norm="l2",
                    labels=labels,
                    predictions=labels.copy(),
                    radii=rng.uniform(0, 0.4, n),
                    num_draws=100,
                    confidence=0.95,
                    config={},
                ),
                d,
            )
        for attack in ("fgsm", "pgd"):
            success = np.zeros((2, n), dtype=bool)
            success[1, :10] = True
            save_evasion_result(
                EvasionResult(
                    attack=attack,
                    norm="l2",
                    radii=np.asarray(radii),
                    success=success,
                    clean_correct=np.ones(n, dtype=bool),
                    max_perturbation=np.asarray(radii),
                ),
                d,
            )
        atomic_write_json(
            d / "summary.json",
            {
                "model_id": HGM_MODEL,
                "defense": "hgm",
                "norm": "l2",
                "radii": radii,
                "conventional_accuracy": 1.0,
                "soundness_violations": [],
            },
        )
    return run


@pytest.fixture
def full_run(tmp_path) -> RunDir:
    return build_run(tmp_path / "run")


@pytest.fixture
def make_run():
    """The builder itself, for tests that need a run with parts left out."""
    return build_run


def inversion_result(
    model_id: str, attack: str, *, k: int = 4, shape=(1, 8, 8), top1: float = 1.0, seed: int = 0
) -> InversionResult:
    """An inversion of ``k`` classes of which a share ``top1`` the evaluator labels correctly."""
    rng = np.random.default_rng(seed)
    classes = np.arange(k, dtype=np.int64)
    imgs = [rng.uniform(0, 1, (k, *shape)).astype(np.float32) for _ in range(4)]
    right = np.arange(k) < round(top1 * k)
    first = np.where(right, classes, (classes + 1) % k)
    top5 = np.stack([first, *[(first + j) % k for j in range(1, min(5, k))]], axis=1)
    n = 40
    member = np.arange(n) < n // 2
    membership = MembershipResult(
        attack=f"inversion-{attack}",
        model_id=model_id,
        sample_ids=np.arange(n),
        scores=rng.normal(0, 1, n) + member,
        is_member=member,
    )
    return InversionResult(
        attack=attack,
        model_id=model_id,
        target_classes=classes,
        reconstructions=imgs[0],
        target_confidence=rng.uniform(0, 1, k),
        evaluator_top5=top5,
        knn_distance=np.full(k, 1.2345),
        knn_ids=np.arange(k),
        psnr=np.full(k, 17.25),
        distance_to_mean=np.full(k, 0.1),
        distance_to_member=np.full(k, 0.2),
        distance_to_non_member=np.full(k, 0.3),
        nearest_member_ids=np.arange(k),
        nearest_non_member_ids=np.arange(k) + 100,
        class_means=imgs[1],
        nearest_members=imgs[2],
        nearest_non_members=imgs[3],
        membership=membership,
        config={"attack": {"steps": 100}},
        metadata={"seconds": 1.5, "evaluator_accuracy": 0.95, "num_dataset_classes": 10},
    )


@pytest.fixture
def make_inversion_result():
    """:func:`inversion_result`, for tests that build inversion results of their own."""
    return inversion_result


def build_inversion_run(path) -> RunDir:
    """One target with its record, inverted by one attack."""
    run = RunDir(path).create(command="test")
    _record(
        run,
        "dpsgd",
        claim=dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.1, num_steps=100),
        metrics={"test_accuracy": 0.9, "delta": 1e-5},
    )
    save_inversion_result(inversion_result(DP_MODEL, "mi-face", top1=0.5), run.inversion_dir(DP_MODEL))
    return run


def build_pate_run(path) -> RunDir:
    """One GNMax student whose claim is the data-dependent analysis of a small, confident vote matrix."""
    run = RunDir(path).create(command="test")
    queries, sigma, delta = 20, 40.0, 1e-5
    votes = np.zeros((queries, 10), dtype=np.int64)
    votes[:, 0], votes[:, 1] = 230, 20  # 250 teachers, a clear plurality on every query
    claim = pate_claim(
        analyze_gnmax(votes, sigma=sigma, delta=delta), parameters={"sigma": sigma}, num_answered=queries
    )
    rec = TrainedModel(
        model_id="unnamed",
        defense="pate",
        model_name="digits-mlp",
        dataset="digits",
        input_shape=(1, 8, 8),
        num_classes=10,
        membership=Membership(members=np.arange(0, 20), non_members=np.arange(20, 40)),
        seed=0,
        config={
            "aggregator": "gnmax",
            "teachers": 250,
            "sigma": sigma,
            "queries": queries,
            "delta": delta,
            "analysis": "data-dependent",
            "epochs": 1,
            "semi_supervised": False,
        },
        metrics={
            "num_teachers": 250,
            "num_queries": queries,
            "num_answered": queries,
            "answer_accuracy": 1.0,
            "epsilon_data_dependent_realised": claim.epsilon(delta=delta),
            "test_accuracy": 0.8,
            "test_examples": 360,
            "test_correct": 288,
        },
        claim=claim,
    )
    rec = with_true_id(rec)
    model_id = rec.model_id
    atomic_write_json(run.record_dir(model_id) / "record.json", rec.to_dict())
    curve = np.array(
        [
            pate_claim(
                analyze_gnmax(votes[: i + 1], sigma=sigma, delta=delta), parameters={"sigma": sigma}, num_answered=i + 1
            ).epsilon(delta=delta)
            for i in range(queries)
        ]
    )
    atomic_save_npz(run.record_dir(model_id) / "pate.npz", answered=np.ones(queries, dtype=bool), epsilon_curve=curve)
    return run


def _comparison_row(
    label: str, defense: str, *, epsilon_ub: dict, epsilon_lb: float, accuracy: float, **fields
) -> ComparisonRow:
    # 100 members / 100 non-members: TPR at 0.1 % FPR is unresolved (needs 1,000 non-members), as in a
    # real digits grid; the 20 most vulnerable samples (10 non-members) resolve no FPR of the grid at all.
    loss = PooledMeasures(
        auc=0.5 + epsilon_lb / 10,
        auc_std=0.0,
        advantage=epsilon_lb / 10,
        tpr_at_fpr={"0.001": None, "0.01": 0.02, "0.1": round(0.1 + epsilon_lb / 10, 2)},  # a count of 100
        epsilon_lb=epsilon_lb,
        num_samples=200,
        num_members=100,
        num_non_members=100,
        auc_low=0.42 + epsilon_lb / 10,  # as a one-repeat comparison stores them: bootstrap AUC, combined advantage
        auc_high=0.58 + epsilon_lb / 10,
        advantage_low=epsilon_lb / 10 - 0.12,
        advantage_high=epsilon_lb / 10 + 0.12,
    )
    vulnerable = PooledMeasures(
        auc=0.55 + epsilon_lb / 10,
        auc_std=0.0,
        advantage=epsilon_lb / 8,
        tpr_at_fpr={"0.001": None, "0.01": None, "0.1": None},
        epsilon_lb=0.0,
        num_samples=20,
        num_members=10,
        num_non_members=10,
        auc_low=0.3 + epsilon_lb / 10,
        auc_high=0.8 + epsilon_lb / 10,
        advantage_low=epsilon_lb / 8 - 0.4,
        advantage_high=epsilon_lb / 8 + 0.4,
    )
    return ComparisonRow(
        label=label,
        defense=defense,
        family=defense,
        model_ids=(f"{defense}-seed0",),
        test_accuracy=accuracy,
        epsilon_ub=epsilon_ub,
        epsilon_lb=epsilon_lb,
        best_attack="loss" if epsilon_lb > 0 else None,
        membership={"loss": loss},
        vulnerable={"loss": vulnerable},
        **fields,
    )


def build_compare_run(path) -> RunDir:
    """A stored comparison: a non-private baseline whose attack shows leakage (ε_LB 0.94, no claim), a DP-SGD
    setting whose stored verdict is a violation and one whose attacks show nothing."""
    run = RunDir(path).create(command="test")
    rows = (
        _comparison_row("nonprivate", "nonprivate", epsilon_ub={}, epsilon_lb=0.94, accuracy=0.95),
        _comparison_row(
            "dpsgd-target_epsilon=1",
            "dpsgd",
            epsilon_ub={"pld": 1.0, "rdp": 1.2},
            epsilon_lb=1.5,
            accuracy=0.9,
            parameters={"target_epsilon": 1.0},
            accuracy_loss=0.05,
            verdict="violation",
            findings=("epsilon_lb 1.5 > epsilon_ub 1 (pld)",),
        ),
        _comparison_row(
            "dpsgd-target_epsilon=8",
            "dpsgd",
            epsilon_ub={"pld": 8.0, "rdp": 8.6},
            epsilon_lb=0.0,
            accuracy=0.93,
            parameters={"target_epsilon": 8.0},
            accuracy_loss=0.02,
        ),
    )
    result = ComparisonResult(
        name="grid",
        dataset="digits",
        rows=rows,
        baseline="nonprivate",
        delta=1e-5,
        confidence=0.95,
        fprs=(0.001, 0.01, 0.1),
        vulnerable_top_k=20,
    )
    save_comparison(result, run.compare_dir(result.name))
    return run


def build_dssgd_run(path) -> RunDir:
    """A DSSGD federation with the DP upload, its record built as ``train --defense dssgd`` writes it (baselines
    included)."""
    from dpaudit.privacy.dssgd import dssgd_svt_claim

    run = RunDir(path).create(command="test")
    eps, params, c, rounds = 0.002, 4810, 481, 2
    config = {
        "participants": 3,
        "rounds": rounds,
        "upload_fraction": 0.1,
        "download_fraction": 1.0,
        "selection": "largest",
        "selection_threshold": 0.0,
        "schedule": "round-robin",
        "local_epochs": 1,
        "batch_size": 32,
        "learning_rate": 0.05,
        "standardize": True,
        "dp_epsilon": eps,
        "bound": 0.001,
        "threshold": 0.0001,
        "budget_split": "sum",
        "observe_participant": 0,
        "baselines": True,
        "split_seed": 0,
    }
    metrics = {
        "train_accuracy": 0.56,
        "test_accuracy": 0.55,
        "test_examples": 360,
        "test_correct": 198,
        "engine": "local",
        "num_parameters": params,
        "uploads_per_turn": c,
        "run_rounds": rounds,
        "run_dp_epsilon": eps,
        "download_count": params,
        "uploads_applied": 6,
        "parameters_updated": 966,
        "seconds_per_round": 0.01,
        "partition_sizes": [10, 10, 10],
        "standalone_test_accuracy": 0.58,
        "standalone_test_accuracy_min": 0.53,
        "standalone_test_accuracy_max": 0.61,
        "centralised_test_accuracy": 302 / 360,  # a count of the 360 test examples, as a run stores it
        "local_test_accuracy_mean": 0.5,
        "local_test_examples": 360,
        "chance_accuracy": 0.13,
        "near_chance": False,
    }
    claim = dssgd_svt_claim(
        epsilon_per_parameter=eps,
        bound=0.001,
        threshold=0.0001,
        uploads_per_round=c,
        num_rounds=rounds,
        num_parameters=params,
        split="sum",
    )
    rec = TrainedModel(
        model_id="unnamed",
        defense="dssgd",
        model_name="digits-mlp",
        dataset="digits",
        input_shape=(1, 8, 8),
        num_classes=10,
        membership=Membership(members=np.arange(0, 30), non_members=np.arange(30, 60), owners=np.arange(30) % 3),
        seed=0,
        config=config,
        metrics=metrics,
        claim=claim,
    )
    rec = with_true_id(rec)
    atomic_write_json(run.record_dir(rec.model_id) / "record.json", rec.to_dict())
    return run


def build_train_run(path) -> RunDir:
    """What ``dpaudit train`` alone leaves: a DP-SGD record and a non-private one, nothing attacked."""
    run = RunDir(path).create(command="test")
    _record(
        run,
        "dpsgd",
        claim=dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.1, num_steps=100),
        metrics={"test_accuracy": 0.9, "train_accuracy": 0.92, "delta": 1e-5},
    )
    _record(run, "nonprivate", metrics={"test_accuracy": 0.95})
    return run


#: A sample run directory per report kind (what the contract suite renders each kind from).
REPORT_SAMPLES = {
    "compare": build_compare_run,
    "audits": lambda path: build_run(path, membership=False, certify=False),
    "membership": lambda path: build_run(path, audits=False, certify=False),
    "certified": lambda path: build_run(path, audits=False, membership=False),
    "pate": build_pate_run,
    "inversion": build_inversion_run,
    "dssgd": build_dssgd_run,
    "models": build_train_run,
    "checks": build_check_run,
}


@pytest.fixture
def report_samples():
    """:data:`REPORT_SAMPLES`: report kind name → a builder of its sample run (``builder(path) -> RunDir``)."""
    return dict(REPORT_SAMPLES)


@pytest.fixture(scope="session")
def rendered_samples(tmp_path_factory):
    """Every registered report kind's sample run rendered once (HTML), for the read-only checks of a
    session: kind name → (the run, its :class:`~dpaudit.app.runs.report.ReportIndex`). A kind without
    a sample maps to None (the contract suite says which builder is missing)."""
    from dpaudit.app.runs.report import render_reports
    from reports.kinds import REPORT_KINDS

    rendered = {}
    for name in sorted(REPORT_KINDS):
        builder = REPORT_SAMPLES.get(name)
        run = builder(tmp_path_factory.mktemp(f"sample-{name}") / "run") if builder is not None else None
        rendered[name] = (run, render_reports(run)) if run is not None else None
    return rendered
