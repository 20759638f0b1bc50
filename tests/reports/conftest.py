"""A small run directory built from result values alone (no torch, no training)."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.privacy.claims import dpsgd_claim
from dpaudit.results import (
    AuditResult,
    CertificationResult,
    EvasionResult,
    Membership,
    MembershipResult,
    TrainedModel,
    save_audit_result,
    save_certification_result,
    save_evasion_result,
    save_membership_result,
)
from dpaudit.store import RunDir, atomic_save_npz, atomic_write_json

DP_MODEL = "dpsgd-digits-mlp-seed0"
HGM_MODEL = "hgm-digits-mlp-seed0"


def _dpsgd_fields(claim) -> tuple[dict, dict]:
    """The config and metrics a DP-SGD run with ``claim``'s q, σ and T records (reports verify the claim against them)."""
    event = getattr(claim, "event", None)
    if event is None or not hasattr(event, "count"):
        return {}, {}
    sampled = event.event
    q, sigma, steps = sampled.sampling_probability, sampled.event.noise_multiplier, event.count
    config = {"noise_multiplier": sigma, "sampling_rate": q, "lot_size": None, "target_epsilon": None, "epochs": steps / max(1, round(1 / q)), "delta": 1e-5, "accountant": "pld"}
    return config, {"sampling_rate": q, "noise_multiplier": sigma, "num_steps": steps}


def _record(run: RunDir, model_id: str, defense: str, claim=None, metrics=None) -> TrainedModel:
    config, measured = _dpsgd_fields(claim)
    rec = TrainedModel(
        model_id=model_id,
        defense=defense,
        model_name="digits-mlp",
        dataset="digits",
        input_shape=(1, 8, 8),
        num_classes=10,
        membership=Membership(members=np.arange(0, 20), non_members=np.arange(20, 40)),
        seed=0,
        config=config,
        metrics={**measured, **(metrics or {})},
        **({"claim": claim} if claim is not None else {}),
    )
    atomic_write_json(run.record_dir(model_id) / "record.json", rec.to_dict())
    return rec


@pytest.fixture
def write_record():
    """:func:`_record` for report tests of other kinds: writes a digits-mlp record into a run."""
    return _record


def build_run(path, *, audits=True, membership=True, certify=True) -> RunDir:
    run = RunDir(path).create(command="test")
    rng = np.random.default_rng(0)
    claim = dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.1, num_steps=100)
    _record(run, DP_MODEL, "dpsgd", claim=claim, metrics={"epsilon": 1.5, "delta": 1e-5, "test_accuracy": 0.9})
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
            save_membership_result(MembershipResult(attack=attack, model_id=DP_MODEL, sample_ids=np.arange(n), scores=scores, is_member=member), run.membership_dir(DP_MODEL))
    if certify:
        _record(run, HGM_MODEL, "hgm")
        n, radii = 30, [0.1, 0.3]
        labels = rng.integers(0, 10, n)
        d = run.certify_dir(HGM_MODEL)
        for method in ("hgm", "smoothing"):
            save_certification_result(
                CertificationResult(method=method, norm="l2", labels=labels, predictions=labels.copy(), radii=rng.uniform(0, 0.4, n), num_draws=100, confidence=0.95, config={}), d
            )
        for attack in ("fgsm", "pgd"):
            success = np.zeros((2, n), dtype=bool)
            success[1, :10] = True
            save_evasion_result(EvasionResult(attack=attack, norm="l2", radii=np.asarray(radii), success=success, clean_correct=np.ones(n, dtype=bool), max_perturbation=np.asarray(radii)), d)
        atomic_write_json(d / "summary.json", {"model_id": HGM_MODEL, "defense": "hgm", "norm": "l2", "radii": radii, "conventional_accuracy": 1.0, "soundness_violations": []})
    return run


@pytest.fixture
def full_run(tmp_path) -> RunDir:
    return build_run(tmp_path / "run")


@pytest.fixture
def make_run():
    """The builder itself, for tests that need a run with parts left out."""
    return build_run
