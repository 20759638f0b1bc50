"""Soundness violations in both forms ``certify`` has stored them are read typed by the summary's loader, not by the
report.

Older summaries hold ``[certificate, radius, certified, robust]`` lists; current ones hold mappings.
The report's verdict must read the same from either, and the typed loader must accept both.
"""

from __future__ import annotations

import pytest

from dpaudit.results.certify_summary import CertifySummary, SoundnessViolation, stored_soundness_violations
from dpaudit.store import atomic_write_json
from reports.certified import CertifiedRun, certified_sections, load_certified_runs

NEW = [
    {"certificate": "hgm", "radius": 0.3, "certified_accuracy": 0.9, "robust_accuracy": 0.5},
    {"certificate": "smoothing", "radius": 0.1, "certified_accuracy": 0.75, "robust_accuracy": 0.625},
]
OLD = [[x["certificate"], x["radius"], x["certified_accuracy"], x["robust_accuracy"]] for x in NEW]


def _summary(violations: list) -> dict:
    # Every field CertifySummary writes (values a small HGM run could store).
    return {
        "schema_version": 1,
        "model_id": "hgm-digits-mlp-seed0-abc",
        "defense": "hgm",
        "dataset": "digits",
        "norm": "l2",
        "radii": [0.1, 0.3],
        "num_examples": 10,
        "num_draws": 100,
        "confidence": 0.95,
        "bound": "clopper-pearson",
        "seed": 0,
        "epsilon": "inf",
        "delta": None,
        "mechanism": "gaussian",
        "sensitivity": 1.0,
        "noise_std": 0.5,
        "noise_per_sensitivity": 0.5,
        "robustness_epsilon": 4.0,
        "robustness_delta": 1e-5,
        "attack_norm_bound": 0.2,
        "redistribute": True,
        "draws_per_second": None,
        "conventional_accuracy": 0.95,
        "certified_accuracy": {"0.1": 0.9, "0.3": 0.9},
        "robust_accuracy": {"pgd": {"0.1": 0.6, "0.3": 0.5}},
        "seconds": 1.0,
        "soundness_violations": violations,
    }


def test_both_stored_forms_load_as_the_same_typed_violations():
    expected = tuple(SoundnessViolation(**x) for x in NEW)
    assert stored_soundness_violations(NEW) == stored_soundness_violations(OLD) == expected
    assert stored_soundness_violations(None) == ()
    # The summary's own loader reads the old form too (it refused it before).
    assert CertifySummary.from_dict(_summary(OLD)).soundness_violations == expected
    assert CertifySummary.from_dict(_summary(OLD)).to_dict()["soundness_violations"] == NEW


@pytest.mark.parametrize(
    "bad",
    [
        [["hgm", 0.3, 0.9]],
        ["hgm"],
        {"certificate": "hgm"},
        [{"certificate": "hgm", "radius": 0.3, "certified_accuracy": 1.5, "robust_accuracy": 0.5}],
    ],
)
def test_a_malformed_entry_is_named(bad):
    with pytest.raises(ValueError, match="soundness_violations|certified_accuracy"):
        stored_soundness_violations(bad)


def test_the_report_verdict_reads_the_same_from_either_form(tmp_path):
    def verdict_lines(violations):
        run = CertifiedRun(summary=_summary(violations), certificates={}, attacks={})
        return certified_sections([run], [])[0]

    old, new = verdict_lines(OLD), verdict_lines(NEW)
    assert old == new
    text = repr(new)
    # The lines state each violation as stored: radius rounded down, certified accuracy down, robust up.
    assert (
        "hgm at radius 0.3 certifies 90.0% > 50.0% the attacks left" in text
        and "smoothing at radius 0.1 certifies 75.0% > 62.5%" in text
    )


def test_a_report_names_the_summary_file_with_a_malformed_violation(tmp_path):
    from dpaudit.store import RunDir

    run = RunDir(tmp_path / "run").create(command="test")
    d = run.certify_dir("hgm-digits-mlp-seed0-abc")
    atomic_write_json(d / "summary.json", _summary([["hgm", 0.3]]))
    with pytest.raises(ValueError, match=r"summary\.json'.*soundness_violations\[0\]"):
        load_certified_runs(run)


def test_the_stored_summary_reads_what_certify_wrote_and_what_older_files_lack():
    from dpaudit.results.certify_summary import read_stored_summary

    full = _summary(NEW)
    typed = CertifySummary.from_dict(full)
    stored = read_stored_summary(full)
    # Every field both types carry agrees with the strict loader's reading (ε "inf" included).
    for name in (
        "model_id",
        "defense",
        "radii",
        "norm",
        "epsilon",
        "delta",
        "mechanism",
        "sensitivity",
        "noise_std",
        "robustness_epsilon",
        "attack_norm_bound",
        "redistribute",
    ):
        assert getattr(stored, name) == getattr(typed, name), name
    for name in ("num_examples", "num_draws", "draws_per_second", "conventional_accuracy", "soundness_violations"):
        assert getattr(stored, name) == getattr(typed, name), name
    assert (
        stored.prediction_rule is None and typed.prediction_rule != stored.prediction_rule
    )  # not in this file: the strict type says so in words
    assert stored.attacks_run == ("pgd",) and stored.epsilon == float("inf")
    # A summary without the run's details (an older or a fixture's) reads them as None.
    small = read_stored_summary(
        {"model_id": "m", "defense": "hgm", "norm": "l2", "radii": [0.1], "soundness_violations": []}
    )
    assert (small.epsilon, small.num_draws, small.attacks_run, small.soundness_violations) == (None, None, None, ())
    with pytest.raises(ValueError, match="num_draws must be int, got '100'"):
        read_stored_summary({**full, "num_draws": "100"})
    with pytest.raises(ValueError, match="defense must be a non-empty string"):
        read_stored_summary({"model_id": "m", "radii": []})
