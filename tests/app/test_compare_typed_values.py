"""``dpaudit compare``'s grid sections, job-key parts and pooled measures are typed values (issue 44).

The jobs' keys are hashes of what each job is asked: typing the sections must not change a byte of
what is hashed, or every stored grid would retrain. The references here are the plain tables the
grid parser built before the sections had types, written out by hand, hashed the way the job store
always hashed them; and the stored comparison's own JSON for the pooled measures.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from dpaudit.app.runs.compare import JobKey, parse_grid
from dpaudit.app.runs.compare.jobs import RecordDigest
from dpaudit.app.runs.compare.orchestration import _evaluation_wave, _grid_key, _GridKey, _train_wave
from dpaudit.results.compare_outcomes import TrainedOutcome
from dpaudit.results.comparison import ComparisonRow, PooledMeasures, load_comparison
from dpaudit.store import from_jsonable, to_jsonable

STORED = Path(__file__).resolve().parents[1] / "reports" / "stored_v1" / "compare" / "big" / "comparison.json"

GRID = {
    "name": "typed",
    "dataset": "digits",
    "model": "digits-mlp",
    "seeds": [0],
    "defenses": [{"defense": "dpsgd", "epochs": 1, "target_epsilon": [1.0, 2.0]}],
    "attacks": {
        "membership": {"attacks": ["loss"], "num_shadows": 4, "shadow_epochs": 2},
        "evasion": {"attacks": ["fgsm"], "radii": [0.3, 0.1, 0.3], "num_examples": 20, "certify": False},
        "inversion": {"attacks": ["mi-face"], "classes": [0, 1], "iterations": 5},
        "audit": {"method": "multi-run", "num_trials": 10},
    },
}

# What the parser made of each section when sections were plain tables: every key present (None
# included), lists, the defaults filled in; the audit with only the keys the grid gave.
LEGACY_SECTIONS = {
    "membership": {
        "attacks": ["loss"],
        "num_samples": None,
        "num_shadows": 4,
        "shadows": "shared",
        "shadow_epochs": 2,
        "num_population": 1000,
    },
    "evasion": {
        "attacks": ["fgsm"],
        "radii": [0.1, 0.3],
        "norm": "l2",
        "num_examples": 20,
        "eot_samples": None,
        "num_draws": None,
        "certify": False,
    },
    "inversion": {"attacks": ["mi-face"], "classes": [0, 1], "evaluator_epochs": None, "iterations": 5},
    "audit": {"method": "multi-run", "num_trials": 10},
}


def _legacy_hash(payload: object) -> str:
    # The job store's hash since its first version: sorted-key JSON of the payload, SHA-256, 16 hex digits.
    return hashlib.sha256(json.dumps(to_jsonable(payload), sort_keys=True).encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def grid():
    return parse_grid(GRID, source="typed.toml")


def test_each_section_serialises_to_the_table_its_jobs_were_keyed_on(grid) -> None:
    for section, legacy in LEGACY_SECTIONS.items():
        assert getattr(grid, section).to_dict() == legacy, section
    # An audit choice the grid leaves out stays out of the key (the audit's own default runs).
    assert grid.audit.threat is None and "threat" not in grid.audit.to_dict()


def test_job_hashes_are_those_of_the_plain_tables(grid, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dpaudit.app.runs.compare import jobs

    digest = {"model_id": "m", "weights_sha256": "ab" * 32, "claim": {"kind": "dp", "notes": ["n"]}}
    # The audit is keyed on its trained record's digest, read from the run: this test trains none.
    monkeypatch.setattr(jobs, "record_digest", lambda t: RecordDigest(**{**digest, "model_id": t.model_id}))
    legacy_grid = {"dataset": "digits", "member_fraction": 0.5, "delta": 1e-5, "confidence": 0.95, "device": "cpu"}
    gkey = _grid_key(grid, None)
    assert gkey.to_dict() == legacy_grid  # digits is bundled: no dataset_files key
    common = {"run_dir": str(tmp_path), "data_root": None}
    trains = _train_wave(grid, jobs_dir=tmp_path, gkey=gkey, common=common)
    assert len(trains) == 3  # the baseline and two ε
    for job in trains:
        s = next(s for s in grid.settings if JobKey.train(s.label, 0) == job.key)
        legacy_setting = {
            "defense": s.defense,
            "parameters": dict(s.parameters),
            "model": "digits-mlp",
            "model_options": {},
        }
        assert job.wanted == _legacy_hash({"grid": legacy_grid, "setting": legacy_setting, "seed": 0})
    trained = {
        JobKey.train(s.label, 0): TrainedOutcome(model_id=f"m-{s.label}", test_accuracy=0.5, epsilon_ub={"pld": 1.0})
        for s in grid.settings
    }
    versions = {"membership": 1, "evasion": 2, "inversion": 1}
    # A grid with an audit section makes every row's best the maximum of one more bound.
    bounds = 1 * 1 + 1
    evaluations = _evaluation_wave(grid, trained, jobs_dir=tmp_path, gkey=gkey, common=common)
    checked = 0
    for job in evaluations:
        if job.key.kind == "audit":
            s = next(s for s in grid.settings if JobKey.audit(s.label) == job.key)
            audit = {
                "grid": legacy_grid,
                "setting": {
                    "defense": s.defense,
                    "parameters": dict(s.parameters),
                    "model": s.model,
                    "model_options": {},
                },
                "audit": LEGACY_SECTIONS["audit"],
                "bounds": bounds,
                "trained": {**digest, "model_id": f"m-{s.label}"},
            }
            assert job.wanted == _legacy_hash(audit), job.key
            checked += 1
            continue
        payload = {
            "grid": legacy_grid,
            "model_id": f"m-{job.key.label}",
            job.key.kind: LEGACY_SECTIONS[job.key.kind],
            "top_k": 50,
            "bounds": bounds,
            "seed": 0,
            "version": versions[job.key.kind],
        }
        assert job.wanted == _legacy_hash(payload), job.key
        checked += 1
    assert checked == 3 * 3 + 2  # and one audit per DP-SGD setting


def test_the_key_parts_keep_their_keys() -> None:
    files = {"mnist/train-images-idx3-ubyte": "0" * 32}
    with_files = _GridKey(
        dataset="mnist", member_fraction=0.5, delta=1e-5, confidence=0.95, device="cpu", dataset_files=files
    )
    assert with_files.to_dict()["dataset_files"] == files
    claim = {"kind": "dp", "event": {"kind": "gaussian", "noise_multiplier": 1.0}, "notes": ("a", "b")}
    digest = RecordDigest(model_id="m", weights_sha256=None, claim=claim)
    assert digest.to_dict() == {
        "model_id": "m",
        "weights_sha256": None,
        "claim": {"kind": "dp", "event": {"kind": "gaussian", "noise_multiplier": 1.0}, "notes": ["a", "b"]},
    }


def test_stored_pooled_measures_load_typed_and_the_summary_reads_them() -> None:
    raw = from_jsonable(json.loads(STORED.read_text(encoding="utf-8")))
    result = load_comparison(STORED)
    summary = result.summary()["defenses"]
    assert isinstance(summary, dict)
    for stored, row in zip(raw["rows"], result.rows, strict=True):
        for field in ("membership", "vulnerable"):
            for attack, measures in stored[field].items():
                pooled = getattr(row, field)[attack]
                assert isinstance(pooled, PooledMeasures)
                assert (pooled.auc, pooled.auc_std, pooled.advantage, pooled.epsilon_lb) == (
                    measures["auc"],
                    measures["auc_std"],
                    measures["advantage"],
                    measures["epsilon_lb"],
                )
                assert dict(pooled.tpr_at_fpr) == measures["tpr_at_fpr"]
                assert pooled.num_members is None and "num_members" not in pooled.to_dict()
        expected = {
            a: {"auc": m["auc"], "advantage": m["advantage"], "tpr_at_fpr": m["tpr_at_fpr"]}
            for a, m in stored["membership"].items()
        }
        assert summary[row.label]["membership"] == expected


def test_a_row_refuses_measures_that_are_not_typed() -> None:
    untyped = {"auc": 0.6, "auc_std": 0.0, "advantage": 0.2, "tpr_at_fpr": {"0.01": 0.05}, "epsilon_lb": 0.1}
    with pytest.raises(TypeError, match=r"vulnerable\['loss'\] must be a PooledMeasures, got dict"):
        ComparisonRow(
            label="x", defense="nonprivate", family="nonprivate", test_accuracy=0.5, vulnerable={"loss": untyped}
        )
    pooled = PooledMeasures(**untyped)
    row = ComparisonRow(
        label="x", defense="nonprivate", family="nonprivate", test_accuracy=0.5, membership={"loss": pooled}
    )
    assert ComparisonRow.from_dict(row.to_dict()).membership["loss"] == pooled
