"""InversionResult: validation, derived metrics (top-1 / top-5 as defined), finding, round trip."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpaudit.results import InversionResult, MembershipResult, load_inversion_result, save_inversion_result


def _result(**over: object) -> InversionResult:
    k = 3
    img = np.full((k, 1, 4, 4), 0.5, dtype=np.float32)
    member = np.array([True, True, True, False, False, False])
    fields = dict(
        attack="mi-face",
        model_id="m",
        target_classes=np.array([0, 1, 2]),
        reconstructions=img,
        target_confidence=np.array([0.9, 0.5, 0.1]),
        # class 0: top-1 right; class 1: right only at rank 3; class 2: wrong everywhere
        evaluator_top5=np.array([[0, 1, 2], [2, 0, 1], [0, 1, 0]]),
        knn_distance=np.array([1.0, 2.0, 3.0]),
        knn_ids=np.array([0, 1, 2]),
        psnr=np.array([10.0, np.inf, 20.0]),
        # Only class 2 is nearer its class mean than any member: most classes are on the members' side.
        distance_to_mean=np.array([0.25, 0.1, 0.5]),
        distance_to_member=np.array([0.2, 0.05, 0.6]),
        distance_to_non_member=np.array([0.3, 0.3, 0.4]),
        nearest_member_ids=np.array([0, 1, 2]),
        nearest_non_member_ids=np.array([3, 4, 5]),
        class_means=img,
        nearest_members=img,
        nearest_non_members=img,
        membership=MembershipResult(
            attack="inversion-mi-face",
            model_id="m",
            sample_ids=np.arange(6),
            scores=np.array([3.0, 2, 1, 0, -1, -2]),
            is_member=member,
        ),
    )
    fields.update(over)
    return InversionResult(**fields)  # type: ignore[arg-type]


def test_top1_and_top5_follow_their_definitions() -> None:
    r = _result()
    assert r.top1_correct().tolist() == [True, False, False]
    assert r.top5_correct().tolist() == [True, True, False]
    assert r.attack_accuracy_top1 == pytest.approx(1 / 3)
    assert r.attack_accuracy_top5 == pytest.approx(2 / 3)


def test_summary_keys_psnr_mean_over_finite_and_finding() -> None:
    s = _result().metrics()
    assert s.psnr == pytest.approx(15.0)
    assert s.membership.auc == pytest.approx(1.0)
    assert s.closer_to_member == pytest.approx(2 / 3) and s.closer_to_mean == pytest.approx(1 / 3)
    # The --json form: the keys (and their order) the CLI printed before the summary was typed.
    plain = _result().summary()
    assert plain == s.to_dict()
    assert list(plain) == [
        "attack_accuracy_top1",
        "attack_accuracy_top5",
        "knn_distance",
        "psnr",
        "membership",
        "distance_to_mean",
        "distance_to_member",
        "distance_to_non_member",
        "closer_to_member",
        "closer_to_mean",
        "num_classes",
        "finding",
    ]
    assert list(plain["membership"]) == [
        "auc",
        "balanced_accuracy",
        "tpr_at_fpr",
        "tpr_at_fpr_notes",
        "epsilon_lb",
        "delta",
        "confidence",
        "num_members",
        "num_non_members",
    ]
    assert plain["membership"]["tpr_at_fpr"] == {"0.001": None, "0.01": None}  # 3 non-members resolve neither
    assert plain["membership"]["num_members"] == 3 and plain["num_classes"] == 3
    # AUC 1 on 3 members and 3 non-members bounds nothing (ε_LB = 0): it points towards members, no more.
    assert (
        "membership AUC 1.000" in s.finding
        and "leaks membership" not in s.finding
        and "too few candidates" in s.finding
    )
    n = 200  # the same perfect separation on 200 + 200 candidates is evidence (ε_LB > 0)
    many = MembershipResult(
        attack="inversion-mi-face",
        model_id="m",
        sample_ids=np.arange(2 * n),
        scores=np.r_[np.arange(n) + n, np.arange(n)].astype(float),
        is_member=np.arange(2 * n) < n,
    )
    assert "leaks membership" in _result(membership=many).finding()
    # Most reconstructions nearer the class mean than any member: a class average, whatever the score says.
    assert "recovers a class average" in _result(membership=many, distance_to_mean=np.array([0.1, 0.01, 0.5])).finding()


def test_round_trip_and_read_only(tmp_path) -> None:
    r = _result(config={"attack": {"step_size": 0.1}}, metadata={"seconds": 1.5})
    path = save_inversion_result(r, tmp_path)
    back = load_inversion_result(path)
    assert back == r
    assert not back.reconstructions.flags.writeable
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.attack = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"reconstructions": np.full((3, 1, 4, 4), 1.5, dtype=np.float32)}, "reconstructions"),
        ({"reconstructions": np.zeros((3, 1, 4, 4), dtype=np.float64)}, "reconstructions"),
        ({"class_means": np.zeros((3, 1, 5, 4), dtype=np.float32)}, "class_means"),
        ({"target_classes": np.array([0, 0, 2])}, "target_classes"),
        ({"knn_distance": np.array([1.0, np.nan, 1.0])}, "knn_distance"),
        ({"evaluator_top5": np.zeros((3, 6), dtype=np.int64)}, "evaluator_top5"),
        ({"target_confidence": np.array([0.5, 1.5, 0.5])}, "target_confidence"),
    ],
)
def test_bad_fields_are_refused_by_name(over: dict[str, object], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        _result(**over)
