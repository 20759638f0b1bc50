import json
import math

import pytest
from dp_accounting import dp_event as dpe

from dpaudit.privacy.accountants import (
    ACCOUNTANTS,
    compute_epsilon,
    sampled_gaussian_event,
)
from dpaudit.privacy.claims import (
    DPClaim,
    NonPrivateClaim,
    claim_from_dict,
    dpsgd_claim,
    event_from_dict,
    event_to_dict,
)


def test_dpsgd_claim_matches_event_and_reference_vector():
    claim = dpsgd_claim(sampling_rate=0.01, noise_multiplier=4, num_steps=10_000)
    assert claim.epsilon(delta=1e-5, accountant="moments") == pytest.approx(1.2586, abs=5e-5)
    event = sampled_gaussian_event(sampling_rate=0.01, noise_multiplier=4, num_steps=10_000)
    assert claim.epsilon(delta=1e-5, accountant="rdp") == compute_epsilon(event, delta=1e-5, accountant="rdp")
    bound = claim.upper_bound(delta=1e-5)
    assert bound.accountant == "pld" and bound.epsilon == pytest.approx(0.947, rel=0.01)
    assert set(bound.by_accountant) == {"moments", "rdp", "pld", "strong"} and bound.epsilon == min(bound.by_accountant.values())


def test_nonprivate_claim_has_no_accountant_and_infinite_bound():
    bound = NonPrivateClaim().upper_bound(delta=1e-5)
    assert bound.by_accountant == {} and bound.accountant == "none" and math.isinf(bound.epsilon)


def test_claim_round_trips_through_json():
    claim = dpsgd_claim(sampling_rate=0.02, noise_multiplier=1.1, num_steps=500).compose(DPClaim(event=dpe.GaussianDpEvent(7.0), description="DP-PCA"))
    again = claim_from_dict(json.loads(json.dumps(claim.to_dict())))
    assert again.event == claim.event
    assert again.description == claim.description
    assert again.epsilon(delta=1e-5, accountant="rdp") == claim.epsilon(delta=1e-5, accountant="rdp")


def test_composition_costs_more_than_either_part():
    a = dpsgd_claim(sampling_rate=0.01, noise_multiplier=4, num_steps=1000)
    b = DPClaim(event=dpe.GaussianDpEvent(16.0))
    both = a.compose(b)
    for acc in ("moments", "rdp", "pld"):
        assert both.epsilon(delta=1e-5, accountant=acc) > a.epsilon(delta=1e-5, accountant=acc)


def test_nonprivate_claim_is_infinite_not_none():
    claim = NonPrivateClaim()
    assert not claim.is_private
    for acc in ACCOUNTANTS:
        assert claim.epsilon(delta=1e-5, accountant=acc) == math.inf
    assert claim_from_dict(claim.to_dict()).epsilon(delta=1e-5) == math.inf


def test_claims_are_immutable():
    claim = dpsgd_claim(sampling_rate=0.01, noise_multiplier=4, num_steps=10)
    with pytest.raises(AttributeError):
        claim.event = dpe.NoOpDpEvent()  # type: ignore[misc]


@pytest.mark.parametrize(
    "data, match",
    [
        ({"kind": "pate"}, "kind"),
        ({"kind": "dp"}, "event"),
        ({"kind": "dp", "event": {"type": "os.system", "command": "true"}}, "unknown event type"),
        ({"kind": "dp", "event": {"type": "GaussianDpEvent"}}, "noise_multiplier"),
        ("not a dict", "JSON object"),
        ({"kind": "dp", "event": {"type": "NoOpDpEvent"}, "neighbouring": "swap"}, "neighbouring"),
    ],
)
def test_bad_claim_files_are_refused(data, match):
    with pytest.raises(ValueError, match=match):
        claim_from_dict(data)


def test_event_whitelist_refuses_unstorable_events():
    with pytest.raises(TypeError, match="cannot be stored"):
        event_to_dict(dpe.UnsupportedDpEvent())
    assert event_from_dict(event_to_dict(dpe.NonPrivateDpEvent())) == dpe.NonPrivateDpEvent()


def test_claims_say_which_accountants_apply_and_evaluate_under_each():
    claim = dpsgd_claim(sampling_rate=0.01, noise_multiplier=4, num_steps=1000)
    assert claim.accountants == ACCOUNTANTS
    eps = claim.epsilons(delta=1e-5)
    assert list(eps) == list(ACCOUNTANTS) and all(0 < e < math.inf for e in eps.values())
    assert NonPrivateClaim().accountants == () and NonPrivateClaim().epsilons(delta=1e-5) == {}
