"""Run directories that fill every figure of the reports to the size real runs reach.

The contract samples (``REPORT_SAMPLES`` in this folder's conftest) hold one or two series per
plot; the style test needs the crowded cases the reports are read at: a compare grid of a dozen
settings (DP-SGD at several ε, two PixelDP models, PATE, DSSGD, smoothing), nine membership
attacks on one ROC, a certified page with PixelDP and smoothing certificates under four attacks,
a white-box audit whose ceiling dwarfs ε_UB and a one-run audit. Built from result values alone
(no torch, no training).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpaudit.privacy.audit_bounds import gaussian_step_claim
from dpaudit.privacy.audit_procedures import audit_from_one_run, audit_from_scores
from dpaudit.privacy.claims import dpsgd_claim
from dpaudit.results import (
    CertificationResult,
    EvasionResult,
    MembershipResult,
    save_audit_result,
    save_certification_result,
    save_evasion_result,
    save_membership_result,
)
from dpaudit.results.certify_summary import own_prediction_rule, smoothing_prediction_rule
from dpaudit.results.comparison import ComparisonResult, ComparisonRow, PooledMeasures, save_comparison
from dpaudit.store import RunDir, atomic_save_npz, atomic_write_json
from tests.reports.conftest import DP_MODEL, _record

#: The nine membership attacks a full membership run stores against one target.
MEMBERSHIP_ATTACKS = (
    "loss",
    "confidence",
    "entropy",
    "modified-entropy",
    "shadow",
    "lira",
    "lira-offline",
    "rmia",
    "rmia-offline",
)


def _row(
    label: str,
    defense: str,
    family: str,
    *,
    eps_ub: float | None,
    eps_lb: float,
    acc: float,
    radii=(0.1, 0.3),
    certifies: bool = False,
) -> ComparisonRow:
    m = PooledMeasures(
        auc=0.5 + eps_lb / 10,
        auc_std=0.0,
        advantage=min(1.0, eps_lb / 10),
        tpr_at_fpr={"0.01": 0.02},
        epsilon_lb=eps_lb,
        num_members=100,
        num_non_members=100,
        # Intervals as a one-repeat comparison stores them (bootstrap AUC, combined Clopper–Pearson advantage).
        auc_low=max(0.0, 0.45 + eps_lb / 10),
        auc_high=min(1.0, 0.55 + eps_lb / 10),
        advantage_low=max(-1.0, eps_lb / 10 - 0.12),
        advantage_high=min(1.0, eps_lb / 10 + 0.12),
    )
    return ComparisonRow(
        label=label,
        defense=defense,
        family=family,
        model_ids=(f"{label}-seed0",),
        test_accuracy=acc,
        epsilon_ub={} if eps_ub is None else {"pld": eps_ub},
        epsilon_lb=eps_lb,
        best_attack="loss" if eps_lb > 0 else None,
        membership={"loss": m},
        vulnerable={"loss": m},
        robust_accuracy={f"{r:g}": max(0.0, acc - 0.5 * r - 0.01 * len(label)) for r in radii},
        certified_accuracy={f"{r:g}": max(0.0, acc - r) for r in radii} if certifies else {},
        # The certified classifier is not the record's: its own accuracy on certify's subset, at least its certified
        # accuracy.
        certified_conventional_accuracy=acc - 0.05 if certifies else None,
        certified_prediction_rule=(
            smoothing_prediction_rule(100) if defense == "smoothing" else own_prediction_rule("clopper-pearson", 1000)
        )
        if certifies
        else None,
        # Counts behind every accuracy's interval; the attacked classifier (a vote that never abstains, for a noise
        # layer or smoothing) scores its own clean accuracy, above the robust accuracy at every radius.
        test_examples=100,
        evaluated_examples=100,
        attacked_prediction_rule=(
            "g by majority vote of 100 noise draws, never abstaining"
            if certifies
            else "the model's deterministic argmax (no noise drawn)"
        ),
        attacked_clean_accuracy=round(acc + 0.01, 2),
    )


def build_big_compare_run(path: Path) -> RunDir:
    """A grid of twelve settings: ε_LB = 0 on some, two settings of several families."""
    run = RunDir(path).create(command="test")
    rows = [
        _row("nonprivate", "nonprivate", "nonprivate", eps_ub=None, eps_lb=2.0, acc=0.97),
        *(
            _row(f"dpsgd-target_epsilon={e:g}", "dpsgd", "dpsgd", eps_ub=e, eps_lb=lb, acc=0.8 + 0.02 * i)
            for i, (e, lb) in enumerate(((0.5, 0.0), (1, 0.0), (2, 0.3), (4, 0.6), (8, 1.1)))
        ),
        _row("pixeldp-L=0.1", "pixeldp", "certified", eps_ub=1.0, eps_lb=0.0, acc=0.85, certifies=True),
        _row("pixeldp-L=0.3", "pixeldp", "certified", eps_ub=3.0, eps_lb=0.2, acc=0.82, certifies=True),
        _row("agm", "agm", "certified", eps_ub=2.0, eps_lb=0.1, acc=0.84, certifies=True),
        _row("smoothing-sigma=0.25", "smoothing", "smoothing", eps_ub=None, eps_lb=1.0, acc=0.9, certifies=True),
        _row("pate-gnmax", "pate", "pate", eps_ub=2.5, eps_lb=0.0, acc=0.88),
        _row("dssgd-theta=0.1", "dssgd", "dssgd", eps_ub=6.0, eps_lb=0.4, acc=0.86),
    ]
    result = ComparisonResult(
        name="big",
        dataset="digits",
        rows=tuple(rows),
        baseline="nonprivate",
        delta=1e-5,
        confidence=0.95,
        fprs=(0.01,),
        radii=(0.1, 0.3),
    )
    save_comparison(result, run.compare_dir(result.name))
    return run


def build_nine_attack_run(path: Path) -> RunDir:
    """One DP-SGD target attacked by the nine membership attacks, several ranking alike."""
    run = RunDir(path).create(command="test")
    _record(
        run,
        "dpsgd",
        claim=dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.1, num_steps=100),
        metrics={"test_accuracy": 0.9, "delta": 1e-5},
    )
    rng = np.random.default_rng(1)
    n = 400
    member = np.arange(n) < n // 2
    base = rng.normal(0, 1, n)
    for i, attack in enumerate(MEMBERSHIP_ATTACKS):
        scores = base + (0.2 + 0.1 * (i // 2)) * member + 0.05 * rng.normal(0, 1, n)
        save_membership_result(
            MembershipResult(
                attack=attack, model_id=DP_MODEL, sample_ids=np.arange(n), scores=scores, is_member=member
            ),
            run.membership_dir(DP_MODEL),
        )
    return run


def build_certified_run(path: Path) -> RunDir:
    """A PixelDP model (its own and the smoothing certificate) and a smoothing model, under four attacks."""
    run = RunDir(path).create(command="test")
    rng = np.random.default_rng(2)
    n, radii = 40, [0.1, 0.2, 0.3]
    for defense, certs in (("pixeldp", ("pixeldp", "smoothing")), ("smoothing", ("smoothing",))):
        model_id = _record(run, defense).model_id
        labels = rng.integers(0, 10, n)
        d = run.certify_dir(model_id)
        for method in certs:
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
        for attack in ("fgsm", "ifgsm", "pgd", "mim"):
            success = np.zeros((len(radii), n), dtype=bool)
            success[1:, :5] = True
            success[2:, :12] = True
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
        summary = {
            "model_id": model_id,
            "defense": defense,
            "norm": "l2",
            "radii": radii,
            "conventional_accuracy": 0.9,
            "soundness_violations": [],
        }
        if defense == "smoothing":
            summary |= {"mechanism": "smoothing", "noise_std": 0.25}
        atomic_write_json(d / "summary.json", summary)
    return run


def build_audit_run(path: Path) -> RunDir:
    """A white-box audit of 200 steps (GDP bound: a ceiling far above ε_UB) and a one-run audit of 300 canaries."""
    run = RunDir(path).create(command="test")
    rng = np.random.default_rng(3)
    steps = 200
    step = gaussian_step_claim(noise_multiplier=1.0)
    s_in, s_out = rng.normal(1.0, 1.0, steps), rng.normal(0.0, 1.0, steps)
    white = audit_from_scores(s_in, s_out, claim=step, delta=1e-5, method="white-box", threat_model="white-box")
    d = run.audit_dir("white-box")
    save_audit_result(white, d)
    atomic_save_npz(d / "scores.npz", in_scores=s_in, out_scores=s_out)
    m = 300
    included = rng.random(m) < 0.5
    scores = rng.normal(0, 1, m) + 0.3 * included
    one = audit_from_one_run(
        scores, included, claim=dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.1, num_steps=100), delta=1e-5
    )
    d = run.audit_dir("one-run")
    save_audit_result(one, d)
    atomic_save_npz(d / "scores.npz", scores=scores, included=included)
    return run


#: Crowded runs beside the contract samples: name → builder(path) -> RunDir.
FIGURE_RUNS = {
    "compare-grid": build_big_compare_run,
    "membership-nine": build_nine_attack_run,
    "certified-pixeldp-smoothing": build_certified_run,
    "audits-white-box-one-run": build_audit_run,
}
