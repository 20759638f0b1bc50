"""The compare matrix gives the last-iterate ε beside ε_UB (issue 33, item 3): outcome, row, JSON, table and CSV."""

from __future__ import annotations

import csv
import io
import math

import pytest

from dpaudit.results.compare_outcomes import SeedOutcomes, SettingOutcomes, TrainedOutcome, condense
from dpaudit.results.comparison import ComparisonResult, ComparisonRow

LAST_ITERATE = 0.944194039195  # q = 0.1, σ = 3, T = 50 at δ = 1e-5 (quadrature, tests/privacy/test_last_iterate.py)


def _setting(label: str, defense: str, epsilon: dict[str, float], li: float | None) -> SettingOutcomes:
    trained = TrainedOutcome(model_id=f"{label}-id", test_accuracy=0.9, epsilon_ub=epsilon, epsilon_last_iterate=li)
    return SettingOutcomes(
        label=label, defense=defense, family=defense, parameters={}, repeats=(SeedOutcomes(seed=0, trained=trained),)
    )


def _result() -> ComparisonResult:
    rows = [
        _setting("nonprivate", "nonprivate", {"none": math.inf}, None),
        _setting("dpsgd", "dpsgd", {"pld": 0.97, "rdp": 1.2}, LAST_ITERATE),
        _setting("pate", "pate", {"pld": 2.0}, None),
    ]
    return condense(rows, name="g", dataset="digits", baseline="nonprivate", delta=1e-5, confidence=0.95)


def test_trained_outcome_round_trips_and_old_outcomes_keep_their_shape() -> None:
    t = TrainedOutcome(model_id="m", test_accuracy=0.9, epsilon_ub={"pld": 0.97}, epsilon_last_iterate=LAST_ITERATE)
    assert TrainedOutcome.from_dict(t.to_dict()) == t
    old = {
        "model_id": "m",
        "record_dir": "",
        "test_accuracy": 0.9,
        "epsilon_ub": {"pld": 0.97},
        "data_dependent": False,
        "reused": False,
    }
    back = TrainedOutcome.from_dict(old)
    assert back.epsilon_last_iterate is None and back.to_dict() == old


def test_rows_carry_it_and_the_json_has_it() -> None:
    result = _result()
    assert result.row("dpsgd").epsilon_last_iterate == pytest.approx(LAST_ITERATE)
    assert result.row("pate").epsilon_last_iterate is None and result.row("nonprivate").epsilon_last_iterate is None
    back = ComparisonResult.from_dict(result.to_dict())
    assert back.row("dpsgd").epsilon_last_iterate == pytest.approx(LAST_ITERATE)
    assert result.summary()["defenses"]["dpsgd"]["epsilon_last_iterate"] == pytest.approx(LAST_ITERATE)
    stored = result.row("dpsgd").to_dict()
    del stored["epsilon_last_iterate"]  # a comparison stored before it was recorded
    assert ComparisonRow.from_dict(stored).epsilon_last_iterate is None
    with pytest.raises(ValueError, match="epsilon_last_iterate"):
        ComparisonRow(label="x", defense="dpsgd", family="dpsgd", test_accuracy=0.5, epsilon_last_iterate=-1.0)


def test_table_and_csv_have_the_column_beside_eps_ub() -> None:
    from reports.compare_matrix import LAST_ITERATE_COLUMN, _csv, matrix_rows

    columns, rows = matrix_rows(_result())
    # Named for what it is (issue 42, part 4): a heuristic, not a cap or a bound.
    assert "heuristic" in LAST_ITERATE_COLUMN and "bound" not in LAST_ITERATE_COLUMN
    i = columns.index(LAST_ITERATE_COLUMN)
    assert columns[i - 1] == "ε_UB (tightest)" and columns[i + 1] == "ε_LB"
    by_label = {r[0]: r for r in rows}
    assert (
        by_label["dpsgd"][i] == pytest.approx(LAST_ITERATE, abs=1e-3) and by_label["pate"][i] is None
    )  # a missing cell, drawn as —
    parsed = list(csv.reader(io.StringIO(_csv(columns, rows))))
    assert parsed[0][i] == LAST_ITERATE_COLUMN and float(
        next(r for r in parsed if r[0] == "dpsgd")[i]
    ) == pytest.approx(LAST_ITERATE, abs=1e-3)
