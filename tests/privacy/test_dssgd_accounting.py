"""The DSSGD DP-upload claim (dpaudit/privacy/dssgd.py): composed ε beside the paper's per-parameter figure."""

from __future__ import annotations

import json
import math

import pytest

from dpaudit.privacy.claims import NEIGHBOURING_RELATIONS, claim_from_dict
from dpaudit.privacy.dssgd import DSSGDClaim, noise_scales, round_epsilon, upload_costs


def _claim(split="sum", eps=0.5, c=1000, rounds=50, n=105_506, **kw):
    return DSSGDClaim.build(
        epsilon_per_parameter=eps,
        bound=0.01,
        threshold=0.001,
        uploads_per_round=c,
        num_rounds=rounds,
        num_parameters=n,
        split=split,
        **kw,
    )


@pytest.mark.parametrize("split", ["sum", "seed"])
def test_pure_epsilon_is_rounds_times_uploads_times_epsilon(split):
    for eps, c, rounds in [(0.5, 1000, 50), (0.01, 10_550, 30), (2.0, 1, 1)]:
        claim = _claim(split, eps, c, rounds)
        assert claim.epsilon(delta=1e-5, accountant="pure") == pytest.approx(rounds * c * eps, rel=1e-12)
        assert claim.epsilon_per_round == pytest.approx(c * eps, rel=1e-12)
        assert claim.epsilon_per_upload == pytest.approx(eps, rel=1e-12)
        assert claim.epsilon_per_parameter == eps


def test_costs_follow_from_the_scales():
    s = noise_scales(epsilon=1.0, bound=0.5, split="sum")
    sel, rel = upload_costs(
        sensitivity=s.sensitivity, threshold_scale=s.threshold, query_scale=s.query, release_scale=s.release
    )
    assert sel == pytest.approx(8 / 9) and rel == pytest.approx(1 / 9)
    assert s.sensitivity == 1.0
    # doubling every scale halves the cost
    sel2, rel2 = upload_costs(
        sensitivity=1.0, threshold_scale=2 * s.threshold, query_scale=2 * s.query, release_scale=2 * s.release
    )
    assert (sel2, rel2) == pytest.approx((sel / 2, rel / 2))
    assert round_epsilon(s, uploads=10) == pytest.approx(10.0)
    # an exhausted sweep pays its open segment's threshold shift, still below c·ε for uploads < c
    assert round_epsilon(s, uploads=9, exhausted=True) == pytest.approx(9 + 4 / 9)


def test_zcdp_is_tighter_than_pure_for_many_uploads_and_matches_its_formula():
    claim = _claim(eps=0.01, c=10_550, rounds=30)
    pure = claim.epsilon(delta=1e-5, accountant="pure")
    z = claim.epsilon(delta=1e-5, accountant="zcdp")
    rho = 30 * 10_550 * ((8 * 0.01 / 9) ** 2 + (0.01 / 9) ** 2) / 2
    assert z == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1e5)))
    assert z < pure / 10
    bound = claim.upper_bound(delta=1e-5)
    assert bound.accountant == "zcdp" and bound.epsilon == pytest.approx(z)
    assert set(bound.by_accountant) == {"pure", "zcdp"}


def test_description_shows_both_figures_and_neighbouring_relation():
    claim = _claim(eps=0.5, c=1000, rounds=50)
    assert "0.5 per parameter per round" in claim.description
    assert "25000" in claim.description and "c = 1000" in claim.description and "50 rounds" in claim.description
    assert "replace_one" in NEIGHBOURING_RELATIONS and claim.neighbouring == "replace_one"
    assert claim.kind == "dssgd-svt" and claim.accountants == ("pure", "zcdp")


@pytest.mark.parametrize("split", ["sum", "seed"])
def test_round_trip_through_json(split):
    claim = _claim(split)
    data = json.loads(json.dumps(claim.to_dict()))
    back = claim_from_dict(data)
    assert back == claim and isinstance(back, DSSGDClaim)
    assert back.epsilons(delta=1e-5) == claim.epsilons(delta=1e-5)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("epsilon_per_parameter", 0.0),
        ("epsilon_per_parameter", "1"),
        ("bound", -1.0),
        ("threshold", math.inf),
        ("split", "paper"),
        ("release_scale", 1.0),  # does not match the noise the ε buys
        ("threshold_scale", -2.0),
        ("sensitivity", 0.01),
        ("uploads_per_round", 0),
        ("uploads_per_round", 200_000),  # more than num_parameters
        ("num_rounds", -1),
        ("num_parameters", 1.5),
        ("neighbouring", "add_two"),
    ],
)
def test_bad_fields_are_refused_by_name(field, value):
    data = _claim().to_dict()
    data[field] = value
    with pytest.raises(ValueError, match=field):
        claim_from_dict(data)


def test_missing_field_and_bad_accountant_are_refused():
    data = _claim().to_dict()
    del data["query_scale"]
    with pytest.raises(ValueError, match="query_scale"):
        claim_from_dict(data)
    with pytest.raises(ValueError, match="accountant"):
        _claim().epsilon(delta=1e-5, accountant="pld")
    with pytest.raises(ValueError, match="delta"):
        _claim().epsilon(delta=0.0)


def test_dssgd_svt_claim_builds_the_same_claim():
    from dpaudit.privacy.dssgd import dssgd_svt_claim

    kw = dict(
        epsilon_per_parameter=0.5,
        bound=0.01,
        threshold=0.001,
        uploads_per_round=1000,
        num_rounds=50,
        num_parameters=105_506,
    )
    assert dssgd_svt_claim(**kw) == DSSGDClaim.build(**kw)
