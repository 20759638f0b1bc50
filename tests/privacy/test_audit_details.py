"""Typed audit and check details: the stored JSON object is the one written before the types existed, and no module
reads them by key."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from dpaudit.privacy.audit_bounds import gaussian_step_claim
from dpaudit.privacy.audit_procedures import audit_from_one_run, audit_from_scores
from dpaudit.results import audit_details
from dpaudit.results.audit import AuditResult
from dpaudit.results.audit_details import (
    AuditDetails,
    OneRunDetails,
    PateAuditDetails,
    ScoresDetails,
    UploadAuditDetails,
    WhiteBoxDetails,
    details_from_dict,
)
from dpaudit.results.check import CheckDetails, CheckOutcome

ROOT = Path(__file__).resolve().parents[2]
CLAIM = gaussian_step_claim(noise_multiplier=1.0)
CONTEXT = {
    "score": "negative canary loss",
    "audit_name": "multi-run-x",
    "init": "worst-case",
    "member_ids_sha256": "ab" * 8,
}


def _scores() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(1.0, 1.0, 40), rng.normal(0.0, 1.0, 40)


def _strict(value: object) -> str:
    return json.dumps(value, allow_nan=False)


def test_scores_details_are_written_in_the_order_the_procedure_always_wrote_them() -> None:
    # The key order stored result.json files hold: computed facts, the interval, then the caller's context.
    s_in, s_out = _scores()
    r = audit_from_scores(
        s_in, s_out, claim=CLAIM, delta=1e-5, strategy="split", bound="clopper-pearson", seed=3, details=CONTEXT
    )
    assert isinstance(r.details, ScoresDetails)
    stored = r.to_dict()["details"]
    head = [
        "threshold",
        "true_positives",
        "false_positives",
        "bounding_num_in",
        "bounding_num_out",
        "num_tests",
        "num_thresholds",
        "split_seed",
        "estimate_kind",
    ]
    assert list(stored) == [*head, "estimate_interval", "estimate_interval_confidence", *CONTEXT]
    # Independent of the type: the counts in the details are the ones of the bounding half.
    assert stored["bounding_num_in"] + stored["bounding_num_out"] <= 80 and r.details.split_seed == 3
    assert (r.details.score, r.details.audit_name, r.details.init, r.details.fingerprints) == (
        "negative canary loss",
        "multi-run-x",
        "worst-case",
        {"member_ids": "ab" * 8},
    )


@pytest.mark.parametrize("bound", ["steinke", "fdp"])
def test_every_details_type_round_trips_through_its_stored_json_byte_for_byte(bound: str) -> None:
    rng = np.random.default_rng(1)
    included = rng.random(120) < 0.5
    scores = rng.normal(0.0, 1.0, 120) + 1.5 * included
    results = [
        audit_from_one_run(scores, included, claim=CLAIM, delta=1e-5, details=CONTEXT, bound=bound),
        audit_from_scores(*_scores(), claim=CLAIM, delta=1e-5, details=CONTEXT),
        audit_from_scores(
            *_scores(),
            claim=CLAIM,
            delta=1e-5,
            method="white-box",
            threat_model="white-box",
            strategy="fixed",
            threshold=0.5,
        ),
    ]
    for r in results:
        text = _strict(r.to_dict())
        again = AuditResult.from_dict(json.loads(text))
        assert type(again.details) is type(r.details)
        assert _strict(again.to_dict()) == text
    assert [type(r.details) for r in results] == [OneRunDetails, ScoresDetails, WhiteBoxDetails]
    one = results[0].details
    assert (
        isinstance(one, OneRunDetails)
        and one.one_run_bound == bound
        and (one.tradeoff_curve is None) == (bound == "steinke")
    )


def test_a_mapping_with_a_known_shape_loads_as_its_type_and_a_hand_made_one_as_context() -> None:
    pate = {k: 0 for k in PateAuditDetails.HEAD} | {"planted_bug": "none"}
    assert type(details_from_dict(pate)) is PateAuditDetails and details_from_dict(pate).context == {
        "planted_bug": "none"
    }
    upload = dict.fromkeys(UploadAuditDetails.HEAD, 0) | {"game": audit_details.UPLOAD_GAME, "split_seed": None}
    del upload["split_seed"]
    assert type(details_from_dict(upload)) is UploadAuditDetails
    loose = {"bounding_num_in": 3, "estimate_kind": "x"}  # damaged: most of the IN/OUT facts missing
    kept = details_from_dict(loose)
    assert type(kept) is AuditDetails and kept.to_dict() == loose


def test_a_caller_key_that_names_a_computed_fact_overrides_it_in_place_as_before() -> None:
    # DSSGD's caller passes its own "threshold" (the SVT threshold); the stored object held it at
    # the IN/OUT threshold's place, and a loaded copy must equal the one built in code.
    s_in, s_out = _scores()
    r = audit_from_scores(s_in, s_out, claim=CLAIM, delta=1e-5, details={"threshold": 0.001, "dataset": "digits"})
    stored = r.to_dict()["details"]
    assert list(stored)[0] == "threshold" and stored["threshold"] == 0.001 and list(stored)[-1] == "dataset"
    assert (
        isinstance(r.details, ScoresDetails) and r.details.threshold == 0.001 and "threshold" not in r.details.context
    )


def test_check_details_keep_reason_and_error_first_and_the_evidence_after() -> None:
    failed = CheckDetails(reason="no --model-fn", error="training failed")
    assert failed.failed and list(failed.to_dict()) == ["reason", "error"]
    ran = CheckDetails(evidence={"records": 5, "statistic": "s"})
    assert not ran.failed and ran.to_dict() == {"records": 5, "statistic": "s"}
    outcome = CheckOutcome(
        name="lot-size",
        status="inconclusive",
        finding="lot-size: could not run",
        epsilon_lb=0.0,
        epsilon_ub=1.0,
        ceiling=0.0,
        confidence=0.9,
        num_trials=0,
        seconds=0.0,
        detects="d",
        misses="m",
        details={"reason": "r", "error": "training failed"},
    )
    assert outcome.details.failed and outcome.details.reason == "r"
    assert CheckOutcome.from_dict(json.loads(_strict(outcome.to_dict()))).to_dict() == outcome.to_dict()


#: The details types and the modules that define them (and so may read their stored keys);
#: results/inversion.py types an inversion attack's stored diagnostics (``SearchStops``).
_DEFINING = {"dpaudit/results/audit_details.py", "dpaudit/results/check.py", "dpaudit/results/inversion.py"}


def _key_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """Reads of ``<x>.details[...]`` / ``<x>.details.get(...)`` (or of a name ``details``) by a string key."""
    found = []
    for node in ast.walk(tree):
        target, key = None, None
        if isinstance(node, ast.Subscript):
            target, key = node.value, node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
        ):
            target, key = node.func.value, node.args[0]
        if target is None or not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            continue
        named = (isinstance(target, ast.Attribute) and target.attr == "details") or (
            isinstance(target, ast.Name) and target.id == "details"
        )
        if named:
            found.append((node.lineno, key.value))
    return found


def test_no_module_reads_audit_or_check_details_by_key_outside_the_types_own_module() -> None:
    offenders = []
    for package in ("dpaudit", "attacks", "defenses", "reports"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in _DEFINING:
                continue
            text = path.read_text(encoding="utf-8")
            if "details" in text:  # only these can read details; parsing the rest costs seconds
                offenders += [f"{rel}:{line}: details[{key!r}]" for line, key in _key_reads(ast.parse(text))]
    assert not offenders, "details read by key (read the typed attribute instead):\n" + "\n".join(offenders)


def test_the_key_scan_sees_both_forms_of_read() -> None:
    # The scan itself, on code that reads by key (as compare/jobs.py and reports/audit.py did).
    code = (
        'a = result.details["full_run_claim"]\nb = o.details.get("error")\nc = '
        'details["threshold"]\nd = result.details.full_run_claim\ne = '
        'x["details"]\n'
    )
    assert _key_reads(ast.parse(code)) == [(1, "full_run_claim"), (2, "error"), (3, "threshold")]


# Files written by the code before the details were typed (commit b294724, every producer; the
# DSSGD one with its clock stubbed): the typed values must load them and write the same bytes.
STORED = Path(__file__).resolve().parent / "stored_details"
_KIND = {
    "dssgd": UploadAuditDetails,
    "onerun_fdp": OneRunDetails,
    "pate_conf": PateAuditDetails,
    "scores_bonf": ScoresDetails,
    "scores_split": ScoresDetails,
    "wb_ctx": WhiteBoxDetails,
}


@pytest.mark.parametrize("name", sorted(_KIND))
def test_a_result_stored_before_the_types_loads_typed_and_is_written_back_byte_for_byte(
    name: str, tmp_path: Path
) -> None:
    from dpaudit.results.audit import load_audit_result, save_audit_result

    old = STORED / f"{name}.json"
    result = load_audit_result(old)
    assert type(result.details) is _KIND[name]
    assert save_audit_result(result, tmp_path).read_bytes() == old.read_bytes()


def test_the_procedures_write_the_bytes_the_old_code_wrote(tmp_path: Path) -> None:
    from dpaudit.results.audit import save_audit_result

    # The inputs the stored files were made from.
    rng = np.random.default_rng(0)
    s_in, s_out = rng.normal(1, 1, 60), rng.normal(0, 1, 60)
    scores = rng.normal(0, 1, 200)
    included = rng.random(200) < 0.5
    scores[included] += 1.5
    ctx = {
        "score": "negative canary loss",
        "audit_name": "mr-x",
        "init": "worst-case",
        "member_ids_sha256": "abc",
        "dataset_files": {"a.npz": "ff"},
        "train_fn_modules": {"m": {"file": "m.py", "sha256": "00"}},
    }
    made = {
        "scores_bonf": audit_from_scores(s_in, s_out, claim=CLAIM, delta=1e-5, details=ctx),
        "scores_split": audit_from_scores(
            s_in,
            s_out,
            claim=CLAIM,
            delta=1e-5,
            strategy="split",
            bound="clopper-pearson",
            seed=3,
            details=ctx,
            group_size=2,
        ),
        "onerun_fdp": audit_from_one_run(scores, included, claim=CLAIM, delta=1e-5, details=ctx, bound="fdp"),
    }
    for name, result in made.items():
        assert save_audit_result(result, tmp_path / name).read_bytes() == (STORED / f"{name}.json").read_bytes(), name


@pytest.mark.parametrize("name", ["check_0", "check_2"])
def test_a_check_outcome_stored_before_the_types_round_trips(name: str) -> None:
    text = (STORED / f"{name}.json").read_text()
    outcome = CheckOutcome.from_dict(json.loads(text))
    assert outcome.details.failed == (name == "check_0")
    assert json.dumps(outcome.to_dict(), allow_nan=True) == text
