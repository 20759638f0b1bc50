"""``dpaudit compare``'s typed hallways: job keys, the jobs' frozen outcomes, the torch-free
matrix, and a grid schema read from the registries (issue 32)."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest

from dpaudit.app.runs.compare import GridError, JobKey, condense, parse_grid
from dpaudit.results.compare_outcomes import (
    AuditOutcome,
    EvasionOutcome,
    InversionOutcome,
    MembershipMeasures,
    MembershipOutcome,
    SeedOutcomes,
    SettingOutcomes,
    TrainedOutcome,
)
from dpaudit.results.compare_outcomes import condense as condense_outcomes

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "dataset": "digits",
    "model": "digits-mlp",
    "defenses": [{"defense": "dpsgd", "epochs": 1, "target_epsilon": 2.0}],
}

# Outcomes as the job files of a stored grid hold them (the shape before they were typed).
MEASURES = {
    "auc": 0.6,
    "advantage": 0.2,
    "tpr_at_fpr": {"0.001": None, "0.01": 0.05},
    "epsilon_lb": 0.4,
    "num_samples": 100,
    "num_members": 50,
    "num_non_members": 50,
}
STORED = {
    "train": {
        "model_id": "m",
        "record_dir": "/r/m",
        "test_accuracy": 0.9,
        "epsilon_ub": {"none": math.inf},
        "data_dependent": False,
        "num_members": 50,
        "reused": False,
    },
    "membership": {
        "membership": {"loss": MEASURES, "lira": {}},
        "vulnerable": {"loss": {**MEASURES, "num_samples": 20}},
        "result_dir": "/r/a",
    },
    "evasion": {
        "robust_accuracy": {"0.5": 0.4},
        "certified_accuracy": {"0.5": 0.3},
        "conventional_accuracy": 0.9,
        "unsound": [],
        "certified": True,
    },
    "evasion-uncertified": {
        "robust_accuracy": {"0.5": 0.4},
        "certified_accuracy": {},
        "unsound": [],
        "certified": False,
    },
    "inversion": {"inversion_top1": {"mi-face": 0.3}},
    "audit": {
        "epsilon_lb": 0.5,
        "epsilon_ub": 2.0,
        "accountant": "rdp",
        "delta": 1e-5,
        "method": "audit (one-run, black-box)",
        "confidence": 0.95,
        "trained": {"num_steps": 10, "noise_multiplier": 1.1},
    },
}
TYPES = {
    "train": TrainedOutcome,
    "membership": MembershipOutcome,
    "evasion": EvasionOutcome,
    "evasion-uncertified": EvasionOutcome,
    "inversion": InversionOutcome,
    "audit": AuditOutcome,
}


def test_one_place_builds_a_jobs_key() -> None:
    assert str(JobKey.train("dpsgd-target_epsilon=1", 3)) == "train-dpsgd-target_epsilon=1-seed3"
    assert str(JobKey("membership", "pate", 0)) == "membership-pate-seed0"
    assert str(JobKey.audit("dpsgd")) == "audit-dpsgd"
    assert JobKey.train("a", 0) == JobKey("train", "a", 0) and len({JobKey.train("a", 0), JobKey("train", "a", 0)}) == 1


@pytest.mark.parametrize("kind", sorted(STORED))
def test_a_stored_outcome_reads_back_as_its_frozen_value_and_writes_the_same_file(kind: str) -> None:
    from dpaudit.store import to_jsonable

    typed = TYPES[kind].from_dict(STORED[kind])
    assert to_jsonable(typed.to_dict()) == to_jsonable(STORED[kind])  # stored grids keep their jobs
    assert TYPES[kind].from_dict(typed.to_dict()) == typed
    with pytest.raises(dataclasses.FrozenInstanceError):
        typed.__setattr__(next(f.name for f in dataclasses.fields(typed)), None)


def test_population_measures_of_nothing_measurable_stay_none_and_are_left_out_of_the_row() -> None:
    out = MembershipOutcome.from_dict(STORED["membership"])
    assert out.membership["lira"] is None and isinstance(out.membership["loss"], MembershipMeasures)
    assert out.membership["loss"].tpr_at_fpr == {0.001: None, 0.01: 0.05}


def _setting(label: str, defense: str, accuracy: float, epsilon: dict[str, float], **repeat: object) -> SettingOutcomes:
    trained = TrainedOutcome(model_id=f"{label}-id", test_accuracy=accuracy, epsilon_ub=epsilon)
    return SettingOutcomes(
        label=label,
        defense=defense,
        family=defense,
        parameters={},
        repeats=(SeedOutcomes(seed=0, trained=trained, **repeat),),
    )  # type: ignore[arg-type]


@pytest.mark.extended
def test_the_matrix_is_condensed_from_typed_outcomes_in_the_torch_free_core() -> None:
    membership = MembershipOutcome.from_dict(STORED["membership"])
    rows = [
        _setting("nonprivate", "nonprivate", 0.95, {"none": math.inf}),
        _setting(
            "dpsgd",
            "dpsgd",
            0.8,
            {"rdp": 0.3, "pld": 0.35},
            membership=membership,
            evasion=EvasionOutcome.from_dict(STORED["evasion"]),
        ),
    ]
    result = condense_outcomes(
        rows,
        name="g",
        dataset="digits",
        baseline="nonprivate",
        delta=1e-5,
        confidence=0.95,
        membership_attacks=("loss", "lira"),
        radii=(0.5,),
        vulnerable_top_k=20,
    )
    row = result.row("dpsgd")
    assert row.accuracy_loss == pytest.approx(0.15) and row.epsilon_lb == 0.4 and row.best_attack == "loss"
    assert (
        row.verdict == "violation" and row.findings[0] == "ε_LB 0.4 (loss) > ε_UB 0.3"
    )  # each bound its safe way: short floats read as themselves
    assert set(row.membership) == {"loss"} and row.vulnerable["loss"].num_samples == 20
    assert dict(row.certified_accuracy) == {"0.5": 0.3} and result.row("nonprivate").epsilon_ub == {}
    code = "import sys, dpaudit.results.compare_outcomes; print('torch' in sys.modules)"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.strip()
    assert loaded == "False"


def test_the_app_condenses_stored_and_typed_outcomes_alike() -> None:
    grid = parse_grid({**BASE, "attacks": {"membership": {"attacks": ["loss", "lira"], "num_shadows": 2}}})
    stored = {str(JobKey.train(s.label, 0)): {**STORED["train"], "model_id": s.label} for s in grid.settings}
    evaluated = {str(JobKey("membership", "dpsgd", 0)): STORED["membership"]}
    typed = {k: TrainedOutcome.from_dict(o) for k, o in stored.items()}
    assert condense(grid, stored, evaluated) == condense(
        grid, typed, {k: MembershipOutcome.from_dict(o) for k, o in evaluated.items()}
    )
    with pytest.raises(KeyError, match="no job 'train-other-seed0'"):
        condense(grid, {**stored, "train-other-seed0": STORED["train"]}, {})


def test_the_grid_schema_is_read_from_the_registries(monkeypatch: pytest.MonkeyPatch) -> None:
    # A part that registers itself is part of the grid with no edit in compare.
    from attacks.evasion import EVASION_ATTACKS
    from attacks.membership import MEMBERSHIP_ATTACKS
    from defenses import DEFENSES

    with pytest.raises(GridError, match="unknown membership attack 'toy'"):
        parse_grid({**BASE, "attacks": {"membership": {"attacks": ["toy"]}}})
    monkeypatch.setitem(MEMBERSHIP_ATTACKS, "toy", dataclasses.replace(MEMBERSHIP_ATTACKS["loss"], name="toy"))
    monkeypatch.setitem(
        DEFENSES, "toy-defense", dataclasses.replace(DEFENSES["nonprivate"], name="toy-defense", family="toys")
    )
    monkeypatch.setitem(
        EVASION_ATTACKS, "toy-evasion", dataclasses.replace(EVASION_ATTACKS["fgsm"], name="toy-evasion")
    )
    grid = parse_grid(
        {
            **BASE,
            "defenses": [{"defense": "toy-defense", "epochs": 1}],
            "attacks": {"membership": {"attacks": ["toy"]}, "evasion": {"attacks": ["toy-evasion"]}},
        }
    )
    assert grid.membership is not None and grid.membership.attacks == ("toy",)
    assert grid.evasion is not None and grid.evasion.attacks == ("toy-evasion",)
    assert [(s.defense, s.family) for s in grid.settings if s.defense == "toy-defense"] == [("toy-defense", "toys")]
    with pytest.raises(GridError, match=r"unknown defense 'nope' \(known: .*toy-defense"):
        parse_grid({**BASE, "defenses": [{"defense": "nope"}]})
