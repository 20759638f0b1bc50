"""The verdict of every page kind, judged from stored values (issue 34, item 2): each status reachable.

The shared verdicts live in the core; the PATE, DSSGD and trained-model verdicts beside their report kinds.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from dpaudit.privacy.claims import dpsgd_claim
from dpaudit.privacy.pate.analysis import analyze_gnmax
from dpaudit.privacy.pate.claim import pate_claim
from dpaudit.results import AuditResult, MembershipResult, load_record
from dpaudit.results.comparison import load_comparison
from dpaudit.results.grid_verdicts import compare_verdict
from dpaudit.results.verdicts import (
    Verdict,
    audit_verdict,
    certified_verdict,
    inversion_verdict,
    lowest_resolvable_fpr,
    membership_verdict,
    most_severe,
    rank_attacks,
)
from reports.dssgd import dssgd_verdict
from reports.pate import pate_verdict
from reports.train import train_verdict


def _audit(lb: float, ub: float, ceiling: float | None) -> AuditResult:
    return AuditResult(
        epsilon_lb=lb,
        confidence=0.95,
        method="multi-run",
        bound="clopper-pearson",
        delta=1e-5,
        threshold_strategy="bonferroni",
        num_in=50,
        num_out=50,
        epsilon_ub=ub,
        accountant="pld",
        ceiling=ceiling,
    )


@pytest.mark.parametrize(
    ("lb", "ub", "ceiling", "status", "tone"),
    [
        (2.0, 1.0, 4.0, "violation", "alert"),
        (0.3, 5.0, 2.0, "inconclusive", "warn"),  # even a perfect attack reaches 2 ≤ 5
        (0.3, 1.0, 4.0, "no violation", "ok"),
        (0.3, 1.0, None, "no violation", "ok"),  # an old result without a ceiling cannot be called inconclusive
        (0.0, math.inf, 3.0, "no claim", "info"),  # ε_UB = ∞: nothing to violate, never "inconclusive"
    ],
)
def test_audit_verdict(lb, ub, ceiling, status, tone):
    verdict = audit_verdict(_audit(lb, ub, ceiling))
    assert (verdict.status, verdict.tone) == (status, tone)
    if status == "inconclusive":
        assert "ceiling" not in verdict.headline or "2" in verdict.headline
        assert "ε_LB = 2 ≤ ε_UB" in verdict.headline
    assert "∞" in audit_verdict(_audit(0.0, math.inf, 3.0)).headline


def _membership(attack: str, *, shift: float, n: int = 200, seed: int = 0) -> MembershipResult:
    rng = np.random.default_rng(seed)
    member = np.arange(n) < n // 2
    return MembershipResult(
        attack=attack,
        model_id="m",
        sample_ids=np.arange(n),
        scores=rng.normal(0, 1, n) + shift * member,
        is_member=member,
    )


def test_attacks_rank_by_strength_not_by_name():
    weak, strong, middle = _membership("aaa", shift=0.0), _membership("zzz", shift=4.0), _membership("mmm", shift=1.5)
    assert [a.result.attack for a in rank_attacks([weak, strong, middle])] == ["zzz", "mmm", "aaa"]


def test_lowest_resolvable_fpr_follows_the_number_of_non_members():
    assert (
        lowest_resolvable_fpr(200) == 0.01
        and lowest_resolvable_fpr(1000) == 0.001
        and lowest_resolvable_fpr(50) == 0.1
        and lowest_resolvable_fpr(9) is None
    )


def test_membership_verdict_names_the_strongest_attack_its_tpr_with_counts_and_the_targets_accuracy():
    results = [_membership("loss", shift=0.0), _membership("lira", shift=4.0)]
    leaks = membership_verdict(results, epsilon_ub=math.inf, target_accuracy=0.9)
    assert leaks.status == "leaks membership" and leaks.tone == "warn"
    assert "lira" in leaks.headline and "90.0%" in leaks.headline and "ε_UB = ∞" in leaks.headline
    assert any(
        "TPR" in line and "/100)" in line and "1% FPR" in line for line in leaks.lines
    )  # 100 members, 100 non-members
    violation = membership_verdict(results, epsilon_ub=0.1)
    assert violation.status == "violation" and violation.tone == "alert"
    quiet = membership_verdict([_membership("loss", shift=0.0, seed=3)], epsilon_ub=1.0)
    assert quiet.status == "no evidence" and quiet.tone == "ok"
    assert membership_verdict([]).status == "no attacks"


def test_certified_verdict():
    bad = {"certificate": "hgm", "radius": 0.3, "certified_accuracy": 0.9, "robust_accuracy": 0.5}
    unsound = certified_verdict([("m", [bad], True)])
    assert unsound.status == "unsound" and unsound.tone == "alert" and "90.0% > 50.0%" in unsound.lines[0]
    assert certified_verdict([("m", [], True), ("n", [], False)]).status == "sound"
    assert certified_verdict([("m", [], False)]).status == "not checked"


def test_certified_verdict_reads_typed_violations_and_refuses_a_damaged_one_by_name():
    from dpaudit import _validate as v
    from dpaudit.results.certify_summary import SoundnessViolation

    typed = SoundnessViolation(certificate="hgm", radius=0.3, certified_accuracy=0.9, robust_accuracy=0.5)
    stored = {"certificate": "hgm", "radius": 0.3, "certified_accuracy": 0.9, "robust_accuracy": 0.5}
    # The typed value and its stored mapping say the same, word for word.
    assert certified_verdict([("m", [typed], True)]) == certified_verdict([("m", [stored], True)])
    assert "hgm at radius 0.3" in certified_verdict([("m", [typed], True)]).lines[0]
    with pytest.raises(v.InvalidArgument) as err:
        certified_verdict([("m", [{k: x for k, x in stored.items() if k != "robust_accuracy"}], True)])
    assert err.value.argument == "robust_accuracy"


def test_inversion_verdict(make_inversion_result):
    members = _membership("inversion-mi-face", shift=4.0, n=40)
    chance_scores = _membership("inversion-mi-face", shift=0.0, n=40, seed=5)
    # Nearer a member (0.2) than the class mean (0.3) in every class: the table agrees with the score.
    identifies = dataclasses.replace(
        make_inversion_result("m", "mi-face", top1=0.5), membership=members, distance_to_mean=np.full(4, 0.3)
    )
    assert inversion_verdict([identifies], num_dataset_classes=10).status == "identifies members"
    assert (
        inversion_verdict([identifies], num_dataset_classes=10, epsilon_ub=0.01).tone == "alert"
    )  # ε_LB above the claim
    class_only = dataclasses.replace(make_inversion_result("m", "mi-face", top1=1.0), membership=chance_scores)
    assert inversion_verdict([class_only], num_dataset_classes=10).status == "class only"
    nothing = dataclasses.replace(
        make_inversion_result("m", "mi-face", top1=0.0), membership=chance_scores, distance_to_mean=np.full(4, 0.3)
    )
    assert inversion_verdict([nothing], num_dataset_classes=10).status == "nothing"


def test_pate_verdict_reports_the_analysis(tmp_path, report_samples):
    votes = np.zeros((20, 10), dtype=np.int64)
    votes[:, 0], votes[:, 1] = 230, 20
    analysis = analyze_gnmax(votes, sigma=40.0, delta=1e-5)
    record = load_record(report_samples["pate"](tmp_path / "run").record_dirs()[0])
    dependent = pate_verdict([record])
    assert dependent.status == "data-dependent ε" and dependent.tone == "warn" and "80.0%" in dependent.headline
    independent = dataclasses.replace(
        record, claim=pate_claim(analysis, parameters={"sigma": 40.0}, num_answered=20, data_dependent=False)
    )
    assert pate_verdict([independent]).status == "data-independent ε"
    sanitised = dataclasses.replace(
        record,
        claim=dataclasses.replace(
            record.claim,
            orders=(record.claim.orders[0],),
            rdp=(record.claim.rdp[0],),
            smooth_sensitivity={"beta": 0.1, "sigma_ss": 1.0},
        ),
    )
    assert pate_verdict([sanitised]).status == "data-dependent ε, sanitised"
    assert pate_verdict([]).status == "no students"


def test_dssgd_verdict(tmp_path, report_samples):
    record = load_record(report_samples["dssgd"](tmp_path / "run").record_dirs()[0])
    worse = dssgd_verdict(record)  # 55% federated against 58% alone
    assert (
        worse.status == "no gain"
        and "55.0%" in worse.headline
        and "58.0% [" in worse.headline  # the mean over participants, with its (Hoeffding) interval
        and "83.9% (302/360) [" in worse.headline
    )
    assert any("481 of 4,810" in line for line in worse.lines) and "ε_UB" in worse.headline
    better = dataclasses.replace(record, metrics={**record.metrics, "test_accuracy": 0.8})
    assert dssgd_verdict(better).status == "federation helps"
    assert (
        dssgd_verdict(dataclasses.replace(record, metrics={**record.metrics, "near_chance": True})).status
        == "near chance"
    )
    alone = {k: x for k, x in record.metrics.items() if not k.startswith("standalone")}
    assert dssgd_verdict(dataclasses.replace(record, metrics=alone)).status == "trained"


def test_train_verdict(tmp_path, write_record):
    from dpaudit.store import RunDir

    run = RunDir(tmp_path / "run").create(command="test")
    dp = write_record(
        run,
        "dpsgd",
        claim=dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.1, num_steps=100),
        metrics={"test_accuracy": 0.9},
    )
    verdict = train_verdict(dp)
    assert (
        verdict.status == "private"
        and "90.0% test accuracy" in verdict.headline
        and "the tightest of" in verdict.headline
    )
    assert train_verdict(write_record(run, "nonprivate")).status == "no privacy claim"


def test_compare_verdict(tmp_path, report_samples):
    run = report_samples["compare"](tmp_path / "run")
    result = load_comparison(run.compare_dirs()[0])
    bad = compare_verdict(result)
    assert bad.status == "violation" and "dpsgd-target_epsilon=1 (violation)" in bad.headline
    # Every row, findings first (tests/reports/test_compare_findings.py), then the power of each DP row without one.
    rows, power = bad.lines[: len(result.rows)], bad.lines[len(result.rows) :]
    assert all(any(line.startswith(f"{r.label}:") for line in rows) for r in result.rows)
    quiet = [r.label for r in result.rows if r.epsilon_ub and r.epsilon_lb == 0 and r.verdict == "no violation"]
    assert [line.split(":")[1].strip() for line in power] == quiet
    fine = dataclasses.replace(
        result,
        rows=tuple(
            dataclasses.replace(r, verdict="no violation", findings=(), epsilon_lb=0.0, best_attack=None)
            for r in result.rows
        ),
    )
    assert compare_verdict(fine).status == "no violation"


def test_a_page_of_several_subjects_leads_with_the_most_severe():
    ok, alert = (
        Verdict(status="nothing", headline="Fine.", tone="ok"),
        Verdict(status="identifies members", headline="Leaks.", tone="alert"),
    )
    lead = most_severe([("a", ok), ("b", alert)])
    assert lead.status == "identifies members" and lead.headline == "b: Leaks." and "a: Fine." in lead.lines
    with pytest.raises(ValueError, match="tone"):
        Verdict(status="x", headline="y", tone="purple")


def test_a_recognisable_class_that_is_no_class_average_is_called_class_only_on_both_lines(make_inversion_result):
    # The second review: on four targets the verdict said "class only" (the evaluator recognised the
    # classes) while the page's reading line said "neither clearly a class average nor a member".
    chance_scores = _membership("inversion-mi-face", shift=0.0, n=40, seed=5)
    result = dataclasses.replace(
        make_inversion_result("m", "mi-face", top1=1.0), membership=chance_scores, distance_to_mean=np.full(4, 0.3)
    )
    near_mean = int(result.closer_to_mean().sum())
    assert near_mean <= result.num_classes / 2  # not the class average in pixel distance
    verdict = inversion_verdict([result], num_dataset_classes=10)
    assert verdict.status == "class only"
    assert f"{near_mean} of {result.num_classes} are nearer the class mean" in verdict.headline
    reading = result.finding()
    assert "neither clearly a class average" not in reading and "in pixel distance" in reading
