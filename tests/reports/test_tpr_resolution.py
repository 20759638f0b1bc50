"""A TPR at FPR f is shown only where the non-members can resolve it (issue 30, item 5)."""

import json

import numpy as np
import pytest

from dpaudit.results import MembershipResult


def _result(num_members: int = 359, num_non_members: int = 359) -> MembershipResult:
    rng = np.random.default_rng(0)
    scores = np.concatenate([rng.normal(1.0, 1.0, num_members), rng.normal(0.0, 1.0, num_non_members)])
    is_member = np.arange(num_members + num_non_members) < num_members
    return MembershipResult(
        attack="loss", model_id="m", sample_ids=np.arange(len(scores)), scores=scores, is_member=is_member
    )


def test_min_non_members_is_one_over_the_fpr():
    from dpaudit.results.membership import min_non_members, tpr_unresolved

    assert min_non_members(0.001) == 1000 and min_non_members(0.01) == 100 and min_non_members(1.0) == 1
    assert tpr_unresolved(0.01, 100) is None and tpr_unresolved(0.01, 99) == "n/a: needs ≥ 100 non-members (has 99)"
    with pytest.raises(ValueError, match="fpr"):
        min_non_members(0.0)


def test_359_non_members_resolve_1_percent_but_not_a_tenth_of_a_percent():
    s = _result().summary()
    assert s["tpr_at_fpr"]["0.001"] is None and s["tpr_at_fpr_notes"] == {
        "0.001": "n/a: needs ≥ 1000 non-members (has 359)"
    }
    assert isinstance(s["tpr_at_fpr"]["0.01"], float)
    json.dumps(s, allow_nan=False)  # strict JSON: null, not NaN
    assert _result(num_non_members=1000).summary()["tpr_at_fpr_notes"] == {}


def test_membership_report_shows_n_a_and_the_counts_beside_the_rates():
    from reports.membership import tpr_table

    table = tpr_table([_result()])
    assert table.columns[-1] == "members / non-members"
    row = table.rows[0]
    assert row[1] == "n/a: needs ≥ 1000 non-members (has 359)" and isinstance(row[2], float) and row[3] == "359 / 359"


def test_compare_cells_say_n_a_for_an_unresolved_rate():
    from dpaudit.results.comparison import PooledMeasures
    from reports.compare_matrix import _counts, _tpr

    m = PooledMeasures(
        auc=0.6,
        auc_std=0.0,
        advantage=0.1,
        tpr_at_fpr={"0.001": None, "0.01": 0.05},
        epsilon_lb=0.0,
        num_members=359,
        num_non_members=359,
    )
    assert _tpr(m, "0.001") == "n/a: needs ≥ 1000 non-members" and _tpr(m, "0.01") == pytest.approx(0.05)
    assert _counts(m) == "359 / 359"


def test_membership_cli_table_prints_n_a_with_the_reason():
    from dpaudit.app.verbs.attack import _rate

    s = _result().metrics()
    assert _rate(s, "0.001") == "n/a" and _rate(s, "0.01") == f"{s.tpr_at_fpr['0.01']:.4f}"
