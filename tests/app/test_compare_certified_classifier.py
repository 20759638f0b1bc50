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
    privacy, robust, certified = _matrix_tables(_result())[:3]
    assert "own prediction rule" in privacy.caption and "certificate covers" in certified.caption
    assert certified.columns[certified.columns.index("certified @ 0.1") - 1] == CERTIFIED_ACCURACY_COLUMN
    # Each table holds the accuracies of the one classifier it names: no robust accuracy beside a certified one.
    assert not any(c.startswith("certified") for c in robust.columns)
    assert not any(c.startswith(("robust", "attacked")) for c in certified.columns)


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


SMOOTHING_VOTE = "g by majority vote of 100 noise draws, never abstaining"


def _attacked(clean: int, robust: dict[str, float], certified: dict[str, float] | None = None) -> EvasionOutcome:
    return EvasionOutcome(
        robust_accuracy=robust,
        certified_accuracy=certified or {},
        conventional_accuracy=0.82 if certified else None,
        prediction_rule=smoothing_prediction_rule(100) if certified else None,
        certified=bool(certified),
        attacked_prediction_rule=SMOOTHING_VOTE,
        attacked_clean_correct=clean,
        num_examples=50,
    )


def test_robust_accuracy_sits_beside_the_clean_accuracy_of_the_classifier_attacked_with_intervals() -> None:
    """The review's smoothing row: robust 94% beside "certified classifier: accuracy" 82% (another rule)."""
    from reports.compare_matrix import ATTACKED_ACCURACY_COLUMN, ATTACKED_RULE_COLUMN, _matrix_tables

    setting = _setting("smoothing", "smoothing", (0.93, _attacked(49, {"0.1": 0.94, "0.3": 0.4}, {"0.1": 0.4})))
    setting = SettingOutcomes(
        label=setting.label,
        defense=setting.defense,
        family=setting.family,
        parameters={},
        repeats=tuple(
            SeedOutcomes(
                seed=r.seed,
                trained=TrainedOutcome(
                    model_id=r.trained.model_id, test_accuracy=0.925, epsilon_ub={"none": math.inf}, test_examples=360
                ),
                evasion=r.evasion,
            )
            for r in setting.repeats
        ),
    )
    result = condense(
        [setting], name="g", dataset="digits", baseline="smoothing", delta=1e-5, confidence=0.95, radii=(0.1, 0.3)
    )
    row = result.row("smoothing")
    assert row.attacked_prediction_rule == SMOOTHING_VOTE and row.attacked_clean_accuracy == pytest.approx(0.98)
    assert (row.test_examples, row.evaluated_examples) == (360, 50)
    assert ComparisonResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    robust = _matrix_tables(result)[1]
    assert robust.columns[1:3] == [ATTACKED_RULE_COLUMN, ATTACKED_ACCURACY_COLUMN]
    (cells,) = robust.rows
    assert cells[1] == SMOOTHING_VOTE
    # 49/50 clean, 47/50 at radius 0.1: each with its count and Clopper-Pearson interval, robust ≤ clean.
    assert str(cells[2]).startswith("98.0% (49/50) [") and str(cells[3]).startswith("94.0% (47/50) [")
    assert float(cells[3]) <= float(cells[2])
    test_acc = _matrix_tables(result)[0].rows[0][1]
    assert str(test_acc).startswith("92.5% (333/360) [")


def test_the_accuracy_of_several_repeats_gets_hoeffdings_interval() -> None:
    row = ComparisonRow(
        label="x", defense="nonprivate", family="nonprivate", model_ids=("a", "b"), test_accuracy=0.9, test_examples=360
    )
    e = row.accuracy_estimate(0.9, evaluated=False)
    assert e is not None and e.method == "hoeffding"
    assert e.high - e.value == pytest.approx(math.sqrt(math.log(2 / 0.05) / (2 * 360)))
    assert row.accuracy_estimate(0.9, evaluated=True) is None  # no evasion subset recorded: no interval invented


def test_the_compare_verdict_lists_a_certificate_vacuous_at_every_radius_of_the_grid() -> None:
    """The review's PixelDP row: 0% certified at 0.25, 0.5 and 1 against 93% unattacked, missing from the verdict."""
    from dpaudit.results.grid_verdicts import compare_verdict

    vacuous = _setting("pixeldp", "pixeldp", (0.91, _certified(0.93, {"0.1": 0.0, "0.3": 0.0}, PIXELDP_RULE)))
    useful = _setting("smoothing", "smoothing", (0.9, _certified(0.8, {"0.1": 0.6, "0.3": 0.0}, PIXELDP_RULE)))
    base = _setting("nonprivate", "nonprivate", (0.97, EvasionOutcome(robust_accuracy={"0.1": 0.9, "0.3": 0.5})))
    result = condense(
        [base, vacuous, useful],
        name="g",
        dataset="digits",
        baseline="nonprivate",
        delta=1e-5,
        confidence=0.95,
        radii=RADII,
    )
    verdict = compare_verdict(result)
    assert verdict.tone == "warn" and verdict.status == "vacuous at these radii"
    assert "pixeldp" in verdict.headline and "smoothing" not in verdict.headline
    assert any(
        line.startswith("pixeldp: certificate vacuous at these radii") and "93.0%" in line for line in verdict.lines
    )
    assert any(line.startswith("smoothing: no finding") for line in verdict.lines)
