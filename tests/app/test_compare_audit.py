"""``dpaudit compare``'s ``[attacks.audit]``: the audit runs exactly the algorithm each setting trained.

The audit itself is replaced by a stand-in that builds the audit's trainer from the
:class:`~dpaudit.app.runs.audit.AuditSpec` the grid made (as :func:`run_audit` does) and records
what it would train: σ, q, the steps and its claim. Only the tiny trainings are real.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from dpaudit.app.runs import audit as audit_run
from dpaudit.app.runs.compare import CompareSpec, GridError, parse_grid, run_compare
from dpaudit.privacy.claims import event_to_dict
from dpaudit.results.audit import AuditResult
from dpaudit.results.record import load_record
from dpaudit.store import RunDir

# RDP and strong composition calibrate in milliseconds (a PLD calibration takes seconds).
BASE = {"dataset": "digits", "model": "digits-mlp", "delta": 1e-5, "defenses": [{"defense": "nonprivate", "epochs": 1}]}
DPSGD = {"defense": "dpsgd", "epochs": 1, "lot_size": 32, "clip_norm": 1.0, "learning_rate": 0.5}
ONE_RUN = {"audit": {"method": "one-run", "num_canaries": 20}}


# Two settings the old audit re-calibrated: σ calibrated by RDP at the setting's own δ, and budget
# mode (σ fixed, train until ε is spent: no epoch count, where the old audit fell back to 10).
EXACT = [
    {
        **DPSGD,
        "label": "own",
        "target_epsilon": 2.0,
        "accountant": "rdp",
        "delta": 1e-6,
        "momentum": 0.5,
        "model_options": {"hidden": 32},
    },
    {
        "defense": "dpsgd",
        "label": "budget",
        "noise_multiplier": 1.0,
        "target_epsilon": 2.0,
        "accountant": "rdp",
        "sampling_rate": 0.05,
    },
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run for every grid here: the non-private baseline is trained once."""
    return tmp_path_factory.mktemp("compare-audit") / "run"


@pytest.fixture(scope="module")
def exact(run_dir: Path) -> tuple[Any, list[dict[str, Any]]]:
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _compare(run_dir, "exact", EXACT, monkeypatch)


def _compare(
    run_dir: Path, name: str, settings: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, list[dict[str, Any]]]:
    """Runs a grid with the audit replaced by the stand-in; returns the result and what each audit trained."""
    seen: list[dict[str, Any]] = []

    def stand_in(spec: audit_run.AuditSpec, run: RunDir):
        members = spec.num_members or 700
        trainer, sigma = audit_run.trainer.audit_trainer(spec, num_members=members, num_steps=spec.resolved_num_steps)
        claim = trainer.claim(members)
        plan = claim.event  # SelfComposed(PoissonSampled(q, Gaussian(σ)), T)
        seen.append(
            {
                "name": spec.name,
                "delta": spec.delta,
                "sigma": sigma,
                "q": plan.event.sampling_probability,
                "steps": plan.count,
                "claim": claim,
                "trainer": trainer,
            }
        )
        # The claim's ε as an audit reports it, but for PLD (seconds per claim; no setting here uses it).
        by = {k: claim.epsilon(delta=spec.delta, accountant=k) for k in claim.accountants if k != "pld"}
        best = min(by, key=by.__getitem__)
        return AuditResult(
            epsilon_lb=0.5,
            confidence=spec.confidence,
            method="multi-run",
            bound="gdp",
            delta=spec.delta,
            threshold_strategy="bonferroni",
            num_in=8,
            num_out=8,
            epsilon_ub=by[best],
            accountant=best,
            epsilon_ub_by_accountant=by,
            claim_description=claim.description,
        )

    monkeypatch.setattr(audit_run, "run_audit", stand_in)
    grid = parse_grid({**BASE, "name": name, "defenses": [*BASE["defenses"], *settings], "attacks": ONE_RUN})
    result = run_compare(CompareSpec(grid=grid, executor="serial", progress=False), RunDir(run_dir))
    return result, seen


def _record(run_dir: Path, result: Any, label: str):
    return load_record(RunDir(run_dir).record_dir(result.row(label).model_ids[0]))


def _audit_outcome(run_dir: Path, name: str, label: str) -> dict[str, Any]:
    jobs = RunDir(run_dir).compare_dir(name) / "jobs"
    return next(o for o in (json.loads(p.read_text()) for p in jobs.glob("*.json")) if o["job"] == f"audit-{label}")


def _assert_audits_the_record(seen: dict[str, Any], record: Any) -> None:
    assert seen["sigma"] == record.metrics["noise_multiplier"]
    assert seen["q"] == record.metrics["sampling_rate"] and seen["steps"] == record.metrics["num_steps"]
    assert event_to_dict(seen["claim"].event) == event_to_dict(record.claim.event)


def _seen(seen: list[dict[str, Any]], label: str) -> dict[str, Any]:
    (mine,) = [x for x in seen if re.search(rf"-{re.escape(label.replace('=', '_'))}(-|$)", x["name"])]
    return mine


@pytest.mark.extended
def test_audit_runs_the_trained_sigma_under_the_settings_accountant_and_delta(run_dir: Path, exact) -> None:
    # Issue 29, defect 6: σ was re-calibrated under the default accountant (PLD) at the grid's δ,
    # so a setting calibrated by RDP at its own δ was audited as another, less noisy algorithm.
    result, seen = exact
    record = _record(run_dir, result, "own")
    _assert_audits_the_record(_seen(seen, "own"), record)
    assert _seen(seen, "own")["delta"] == 1e-6  # the setting's δ, not the grid's
    # What does not enter the claim is the trained algorithm's too: its momentum, its architecture.
    trainer = _seen(seen, "own")["trainer"]
    assert trainer.config.momentum == 0.5 and dict(trainer.model_options) == {"hidden": 32}
    out = _audit_outcome(run_dir, "exact", "own")
    assert out["accountant"] == "rdp" and out["delta"] == 1e-6
    assert out["epsilon_ub"] == pytest.approx(record.claim.epsilon(delta=1e-6, accountant="rdp"), rel=1e-12)
    assert out["epsilon_ub"] <= 2.0 and out["trained"]["noise_multiplier"] == record.metrics["noise_multiplier"]


@pytest.mark.extended
def test_audit_runs_the_trained_rate_and_steps_without_fall_backs(run_dir: Path, exact) -> None:
    # Budget mode: q = 0.05 and the steps the budget allowed, not 10 epochs and a σ calibrated for them.
    result, seen = exact
    record = _record(run_dir, result, "budget")
    assert record.metrics["num_steps"] != 10 * 20
    _assert_audits_the_record(_seen(seen, "budget"), record)
    assert _seen(seen, "budget")["sigma"] == 1.0 and _seen(seen, "budget")["q"] == 0.05


@pytest.mark.extended
@pytest.mark.filterwarnings("ignore:moments:RuntimeWarning")  # σ = 4 strains its order grid; the bound stays valid
def test_grid_sweeping_the_accountant_audits_each_settings_own_sigma(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, seen = _compare(
        run_dir, "sweep", [{**DPSGD, "target_epsilon": 2.0, "accountant": ["rdp", "strong"]}], monkeypatch
    )
    labels = ["dpsgd-accountant=rdp", "dpsgd-accountant=strong"]
    records = [_record(run_dir, result, label) for label in labels]
    assert records[0].metrics["noise_multiplier"] < records[1].metrics["noise_multiplier"]  # two different algorithms
    assert len(seen) == 2
    for label, record in zip(labels, records):
        _assert_audits_the_record(_seen(seen, label), record)
        # The matrix's ε_UB under the setting's accountant is the audit's (δ is the grid's here).
        out = _audit_outcome(run_dir, "sweep", label)
        assert out["epsilon_ub"] == result.row(label).epsilon_ub[record.config["accountant"]]


@pytest.mark.extended
def test_changed_training_is_another_audit(run_dir: Path, exact, monkeypatch: pytest.MonkeyPatch) -> None:
    # The audit's key holds the trained record's digest and claim: a record trained again
    # differently (here: other weights) is audited again, with the setting unchanged.
    again, seen = _compare(run_dir, "exact", EXACT, monkeypatch)
    assert again.jobs_run == 0 and not seen
    path = RunDir(run_dir).record_dir(again.row("budget").model_ids[0]) / "record.json"
    stored = path.read_text()
    try:
        path.write_text(json.dumps({**json.loads(stored), "weights_sha256": "0" * 64}))
        changed, seen = _compare(run_dir, "exact", EXACT, monkeypatch)
    finally:
        path.write_text(stored)
    assert changed.jobs_run == 1 and len(seen) == 1 and "-budget-" in seen[0]["name"]  # that audit alone


def test_record_without_a_value_or_with_another_claim_fails_naming_the_setting(run_dir: Path, exact) -> None:
    from dp_accounting.dp_event import GaussianDpEvent

    from dpaudit.app.runs.compare import trained_algorithm
    from dpaudit.privacy.claims import DPClaim

    record = _record(run_dir, exact[0], "own")
    assert trained_algorithm(record, label="own").noise_multiplier == record.metrics["noise_multiplier"]
    lacking = dataclasses.replace(record, metrics={k: x for k, x in record.metrics.items() if k != "num_steps"})
    with pytest.raises(ValueError, match=r"setting 'own': .* has no num_steps"):
        trained_algorithm(lacking, label="own")
    # DP-PCA composed in: the audit's trainer would run DP-SGD alone, another algorithm.
    composed = dataclasses.replace(record, claim=DPClaim(event=GaussianDpEvent(4.0)).compose(record.claim))
    with pytest.raises(ValueError, match=r"setting 'own': its claim .* cannot be audited"):
        trained_algorithm(composed, label="own")


def test_audit_section_refuses_its_own_epochs() -> None:
    # The audit trains the setting's steps; an `epochs` of its own would audit another algorithm.
    with pytest.raises(GridError, match=r"attacks\.audit\.epochs: .*change the setting's epochs"):
        parse_grid({**BASE, "defenses": [DPSGD], "attacks": {"audit": {"epochs": 2}}})


def test_audit_lower_bound_joins_the_row_only_at_a_delta_it_bounds() -> None:
    # ε(δ) falls as δ grows: an ε_LB at the setting's δ = 1e-6 is no lower bound at the grid's 1e-5.
    from dpaudit.app.runs.compare import condense

    grid = parse_grid({**BASE, "defenses": [{**DPSGD, "target_epsilon": 2.0}], "attacks": ONE_RUN})
    trained = {
        "train-nonprivate-seed0": {
            "model_id": "a",
            "test_accuracy": 0.9,
            "epsilon_ub": {"none": math.inf},
            "data_dependent": False,
        },
        "train-dpsgd-seed0": {
            "model_id": "b",
            "test_accuracy": 0.8,
            "epsilon_ub": {"rdp": 2.0, "pld": 1.5},
            "data_dependent": False,
        },
    }
    for delta, best in ((1e-6, 0.0), (1e-5, 1.7), (1e-4, 1.7)):
        audit = {
            "epsilon_lb": 1.7,
            "epsilon_ub": 2.5,
            "delta": delta,
            "method": "audit (one-run, black-box)",
            "accountant": "rdp",
        }
        row = condense(grid, trained, {"audit-dpsgd": audit}).row("dpsgd")
        assert row.epsilon_lb == best
        assert row.verdict == ("violation" if best else "no violation")
