"""The conventional accuracy beside a certified accuracy is of the same classifier, and says which (issue 42, part 5).

The summary refuses a certified accuracy above its classifier's, reads summaries stored before
the rule was named, and the certified report's tables carry each certificate's rule.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.results.certification import CertificationResult
from dpaudit.results.certify_summary import (
    UNNAMED_PREDICTION_RULE,
    CertifySummary,
    SmoothingSummary,
    own_prediction_rule,
    smoothing_prediction_rule,
)


def _summary(**overrides) -> CertifySummary:
    fields = dict(
        model_id="m",
        defense="pixeldp",
        dataset="digits",
        norm="l2",
        radii=(0.0, 0.1),
        num_examples=4,
        num_draws=100,
        confidence=0.95,
        bound="clopper-pearson",
        seed=0,
        epsilon=float("inf"),
        delta=None,
        mechanism="classical",
        sensitivity=1.0,
        noise_std=0.3,
        noise_per_sensitivity=0.3,
        robustness_epsilon=1.0,
        robustness_delta=0.05,
        attack_norm_bound=0.1,
        redistribute=False,
        draws_per_second=None,
        conventional_accuracy=0.75,
        certified_accuracy={"0": 0.75, "0.1": 0.5},
        robust_accuracy={},
        prediction_rule=own_prediction_rule("clopper-pearson", 100),
    )
    return CertifySummary(**{**fields, **overrides})


def test_rules_name_the_classifier_each_bound_covers() -> None:
    assert own_prediction_rule("clopper-pearson", 2000) == "vote-count argmax over the 2000 certification draws"
    assert (
        own_prediction_rule("hoeffding", 500)
        == own_prediction_rule("bernstein", 500)
        == "expected-softmax argmax over the 500 certification draws"
    )
    assert "100 selection draws" in smoothing_prediction_rule(100) and "abstaining" in smoothing_prediction_rule(100)


def test_a_certified_accuracy_above_its_classifiers_accuracy_is_refused() -> None:
    # Certified points are correctly predicted points of the same classifier: never more of them.
    with pytest.raises(ValueError, match="certified_accuracy must not exceed the conventional accuracy 0.75"):
        _summary(certified_accuracy={"0": 0.8, "0.1": 0.5})
    with pytest.raises(ValueError, match="certified_accuracy"):
        SmoothingSummary(
            conventional_accuracy=0.5,
            certified_accuracy={"0.25": 0.6},
            confidence=0.999,
            num_selection_draws=100,
            prediction_rule=smoothing_prediction_rule(100),
        )
    with pytest.raises(TypeError, match="prediction_rule"):
        _summary(prediction_rule="")


def test_summaries_round_trip_their_rule_and_older_ones_read_as_unnamed() -> None:
    s = _summary(
        smoothing=SmoothingSummary(
            conventional_accuracy=0.5,
            certified_accuracy={"0": 0.5, "0.1": 0.25},
            confidence=0.999,
            num_selection_draws=100,
            prediction_rule=smoothing_prediction_rule(100),
        )
    )
    data = s.to_dict()
    assert data["prediction_rule"] == "vote-count argmax over the 100 certification draws"
    assert data["smoothing"]["prediction_rule"] == smoothing_prediction_rule(100)
    assert CertifySummary.from_dict(data) == s
    del data["prediction_rule"], data["smoothing"]["prediction_rule"]
    old = CertifySummary.from_dict(data)
    assert (
        old.prediction_rule == UNNAMED_PREDICTION_RULE
        and old.smoothing is not None
        and old.smoothing.prediction_rule == UNNAMED_PREDICTION_RULE
    )


def test_the_certified_report_tables_carry_each_certificates_rule() -> None:
    from reports.certified import CertifiedRun, certified_rows

    labels = np.array([0, 1, 2, 3])
    own = CertificationResult(
        method="pixeldp",
        norm="l2",
        labels=labels,
        predictions=np.array([0, 1, 2, 0]),
        radii=np.array([0.2, 0.0, 0.05, 0.3]),
        num_draws=100,
        confidence=0.95,
        config={"prediction_rule": own_prediction_rule("clopper-pearson", 100)},
    )
    smooth = CertificationResult(
        method="smoothing",
        norm="l2",
        labels=labels,
        predictions=np.array([0, -1, 2, 3]),
        radii=np.array([0.1, 0.0, 0.3, 0.2]),
        num_draws=100,
        confidence=0.999,
    )
    summary = _summary(
        smoothing=SmoothingSummary(
            conventional_accuracy=0.75,
            certified_accuracy={"0": 0.75, "0.1": 0.75},
            confidence=0.999,
            num_selection_draws=20,
            prediction_rule=smoothing_prediction_rule(20),
        )
    ).to_dict()
    run = CertifiedRun(summary=summary, certificates={"pixeldp": own, "smoothing": smooth}, attacks={})
    rows = certified_rows([run])
    by = {(r.certificate, r.radius): r for r in rows}
    # The stored certificate's own rule, else the summary's (the smoothing certificate here has none in its config).
    assert by[("pixeldp", 0.0)].prediction_rule == "vote-count argmax over the 100 certification draws"
    assert by[("smoothing", 0.0)].prediction_rule == smoothing_prediction_rule(20)
    # Same classifier: at radius 0 the certified accuracy is the conventional one (3 of 4 correct predictions).
    assert by[("pixeldp", 0.0)].certified_accuracy == by[("pixeldp", 0.0)].conventional_accuracy == 0.75
    assert by[("smoothing", 0.0)].certified_accuracy <= by[("smoothing", 0.0)].conventional_accuracy
    # Where the accuracy-against-ε table falls back on a record's test accuracy, it names that rule too.
    from types import SimpleNamespace

    from reports.certified_figures import _record_rule

    assert (
        _record_rule(SimpleNamespace(metrics={"test_accuracy": 0.9, "test_accuracy_draws": 16}))
        == "record test accuracy: expected-softmax argmax over 16 noise draws"
    )
    assert (
        _record_rule(SimpleNamespace(metrics={"test_accuracy": 0.9}))
        == "record test accuracy: the trained model on clean inputs"
    )
