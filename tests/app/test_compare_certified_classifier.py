"""The compare matrix reads certified accuracy against the certified classifier's own accuracy (issue 42, part 5).

A noise-layer record's "test acc." is the argmax of its expected scores over the whole test set,
and smoothing's is the base model on clean inputs; the certified columns are about another
classifier (the vote-count argmax over the certification draws, or CERTIFY with abstentions
counted wrong) on certify's test subset. The row carries that classifier's name and accuracy,
and the matrix puts them right before "certified @ r".
"""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

from dpaudit.results.certify_summary import own_prediction_rule, smoothing_prediction_rule
from dpaudit.results.compare_outcomes import EvasionOutcome, SeedOutcomes, SettingOutcomes, TrainedOutcome, condense
from dpaudit.results.comparison import ComparisonResult, ComparisonRow, load_comparison, save_comparison

RADII = (0.1, 0.3)
PIXELDP_RULE = own_prediction_rule("clopper-pearson", 100)
# Two repeats of a PixelDP setting as certify measured them: the certified classifier's accuracy
# on the certified subset, and its certified accuracy per radius (never above it).
PIXELDP_REPEATS = ((0.84, {"0.1": 0.80, "0.3": 0.10}), (0.90, {"0.1": 0.82, "0.3": 0.0}))
SMOOTHING_REPEAT = (0.70, {"0.1": 0.66, "0.3": 0.52})


def _setting(label: str, defense: str, *repeats: tuple[float, EvasionOutcome]) -> SettingOutcomes:
    seeds = tuple(
        SeedOutcomes(
            seed=i,
            trained=TrainedOutcome(model_id=f"{label}-{i}", test_accuracy=acc, epsilon_ub={"none": math.inf}),
            evasion=evasion,
        )
        for i, (acc, evasion) in enumerate(repeats)
    )
    return SettingOutcomes(label=label, defense=defense, family=defense, parameters={}, repeats=seeds)


def _certified(conventional: float | None, certified: dict[str, float], rule: str | None) -> EvasionOutcome:
    robust = {r: min(1.0, a + 0.05) for r, a in certified.items()}
    return EvasionOutcome(
        robust_accuracy=robust,
        certified_accuracy=certified,
        conventional_accuracy=conventional,
        prediction_rule=rule,
        certified=True,
    )


def _result() -> ComparisonResult:
    settings = [
        _setting("nonprivate", "nonprivate", (0.97, EvasionOutcome(robust_accuracy={"0.1": 0.9, "0.3": 0.5}))),
        # The record's own accuracy (0.95, 0.96) is well above the certified classifier's: the matrix must not pair
        # them.
        _setting(
            "pixeldp",
            "pixeldp",
            *(
                (0.95 + 0.01 * i, _certified(conv, cert, PIXELDP_RULE))
                for i, (conv, cert) in enumerate(PIXELDP_REPEATS)
            ),
        ),
        _setting(
            "smoothing",
            "smoothing",
            (0.93, _certified(SMOOTHING_REPEAT[0], SMOOTHING_REPEAT[1], smoothing_prediction_rule(100))),
        ),
    ]
    return condense(
        settings, name="g", dataset="digits", baseline="nonprivate", delta=1e-5, confidence=0.95, radii=RADII
    )


def test_the_row_carries_the_certified_classifiers_accuracy_as_the_mean_over_repeats() -> None:
    result = _result()
    pixeldp = result.row("pixeldp")
    assert pixeldp.certified_conventional_accuracy == pytest.approx((0.84 + 0.90) / 2)
    assert pixeldp.certified_prediction_rule == "vote-count argmax over the 100 certification draws"
    assert pixeldp.test_accuracy == pytest.approx(0.955)  # the record's classifier, kept apart
    assert result.row("smoothing").certified_prediction_rule.startswith("CERTIFY")  # type: ignore[union-attr]
    base = result.row("nonprivate")
    assert base.certified_conventional_accuracy is None and base.certified_prediction_rule is None
    summary = result.summary()["defenses"]
    assert (
        summary["pixeldp"]["certified_conventional_accuracy"] == pytest.approx(0.87)
        and "certified_conventional_accuracy" not in summary["nonprivate"]
    )
    assert ComparisonResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_the_matrix_gives_the_certified_classifiers_accuracy_right_before_its_certified_columns() -> None:
    from reports.compare_matrix import (
        CERTIFIED_ACCURACY_COLUMN,
        CERTIFIED_RULE_COLUMN,
        _csv,
        _matrix_tables,
        matrix_rows,
    )

    columns, rows = matrix_rows(_result())
    first = columns.index("certified @ 0.1")
    assert columns[first - 2 : first] == [CERTIFIED_RULE_COLUMN, CERTIFIED_ACCURACY_COLUMN]
    by_label = {r[0]: r for r in rows}
    for label, accuracies in (("pixeldp", [c for c, _ in PIXELDP_REPEATS]), ("smoothing", [SMOOTHING_REPEAT[0]])):
        row = by_label[label]
        own = row[first - 1]
        assert float(own) == pytest.approx(sum(accuracies) / len(accuracies)) and str(own).endswith("%")
        # At the smallest radius, certified accuracy is that of the same classifier on the same inputs, so at most its
        # accuracy.
        assert float(row[first]) <= float(own)
        assert float(row[columns.index("test acc.")]) > float(
            row[first]
        )  # what the matrix printed beside it before: another classifier
    assert by_label["pixeldp"][first - 2] == PIXELDP_RULE
    assert by_label["nonprivate"][first - 2 : first + len(RADII)] == ["does not certify"] * (2 + len(RADII))
    parsed = list(csv.reader(io.StringIO(_csv(columns, rows))))
    assert (
        parsed[0][first - 1] == CERTIFIED_ACCURACY_COLUMN
        and next(r for r in parsed if r[0] == "pixeldp")[first - 1] == "87.0%"
    )
    # The captions say which classifier each accuracy is.
    privacy, attacks = _matrix_tables(_result())[:2]
    assert "own prediction rule" in privacy.caption and "certified classifier" in attacks.caption
    assert attacks.columns[attacks.columns.index("certified @ 0.1") - 1] == CERTIFIED_ACCURACY_COLUMN


def test_a_comparison_stored_before_it_was_recorded_loads_and_saves_the_same_bytes(tmp_path) -> None:
    from reports.compare_matrix import CERTIFIED_ACCURACY_COLUMN, NOT_RECORDED, matrix_rows

    old = _result().to_dict()
    for row in old["rows"]:
        row.pop("certified_conventional_accuracy", None)
        row.pop("certified_prediction_rule", None)
    stored = tmp_path / "comparison.json"
    stored.write_text(json.dumps(old, indent=2, sort_keys=True))
    loaded = load_comparison(stored)
    assert all(r.certified_conventional_accuracy is None for r in loaded.rows)
    again = save_comparison(loaded, tmp_path / "again")
    assert json.loads(again.read_text()) == old
    # A certifying row of such a comparison says the accuracy was not recorded, never the record's.
    columns, rows = matrix_rows(loaded)
    assert {r[0]: r for r in rows}["pixeldp"][columns.index(CERTIFIED_ACCURACY_COLUMN)] == NOT_RECORDED
    # A grid where nothing certifies keeps its matrix as it was.
    plain = ComparisonResult(
        name="p",
        dataset="digits",
        rows=(loaded.row("nonprivate"),),
        baseline="nonprivate",
        delta=1e-5,
        confidence=0.95,
        fprs=(0.01,),
        radii=RADII,
    )
    assert CERTIFIED_ACCURACY_COLUMN not in matrix_rows(plain)[0]


def test_evasion_outcomes_stored_without_a_rule_keep_their_shape() -> None:
    old = {
        "robust_accuracy": {"0.5": 0.4},
        "certified_accuracy": {"0.5": 0.3},
        "conventional_accuracy": 0.9,
        "unsound": [],
        "certified": True,
    }
    back = EvasionOutcome.from_dict(old)
    assert back.prediction_rule is None and back.to_dict() == old
    named = EvasionOutcome.from_dict({**old, "prediction_rule": PIXELDP_RULE})
    assert EvasionOutcome.from_dict(named.to_dict()) == named and named.prediction_rule == PIXELDP_RULE
    # A repeat without the accuracy leaves the row's unknown rather than a mean over some repeats.
    mixed = _setting(
        "pixeldp",
        "pixeldp",
        (0.9, _certified(0.8, {"0.1": 0.7}, PIXELDP_RULE)),
        (0.9, _certified(None, {"0.1": 0.7}, None)),
    )
    row = condense(
        [mixed], name="g", dataset="digits", baseline="pixeldp", delta=1e-5, confidence=0.95, radii=(0.1,)
    ).row("pixeldp")
    assert row.certified_conventional_accuracy is None and row.certified_prediction_rule is None


@pytest.mark.parametrize("value", [1.5, -0.1, math.nan])
def test_a_certified_accuracy_outside_the_unit_interval_is_refused_by_name(value: float) -> None:
    with pytest.raises(ValueError, match="certified_conventional_accuracy"):
        ComparisonRow(
            label="x", defense="pixeldp", family="certified", test_accuracy=0.5, certified_conventional_accuracy=value
        )
