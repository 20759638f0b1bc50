import json
import math

import pytest
from dp_accounting import dp_event as dpe

from dpaudit.privacy.accountant_names import ACCOUNTANTS
from dpaudit.privacy.accountants import compute_epsilon
from dpaudit.privacy.claims import (
    DPClaim,
    NonPrivateClaim,
    claim_from_dict,
    dpsgd_claim,
    event_from_dict,
    event_to_dict,
)
from dpaudit.privacy.events import sampled_gaussian_event
from tests.privacy.accounting_reference import moments_epsilon


def test_dpsgd_claim_matches_event_and_reference_vector():
    claim = dpsgd_claim(sampling_rate=0.01, noise_multiplier=4, num_steps=10_000)
    # Abadi et al.'s setting (their ε ≈ 1.26; 1.2586 here), against the moments accountant's closed form.
    assert claim.epsilon(delta=1e-5, accountant="moments") == pytest.approx(
        moments_epsilon(0.01, 4.0, 10_000, 1e-5), rel=1e-9
    )
    event = sampled_gaussian_event(sampling_rate=0.01, noise_multiplier=4, num_steps=10_000)
    assert claim.epsilon(delta=1e-5, accountant="rdp") == compute_epsilon(event, delta=1e-5, accountant="rdp")
    bound = claim.upper_bound(delta=1e-5)
    assert bound.accountant == "pld" and bound.epsilon == pytest.approx(0.947, rel=0.01)
    assert list(bound.by_accountant) == list(ACCOUNTANTS.names()) and bound.epsilon == min(bound.by_accountant.values())
    # Basic composition sums the per-step bounds strong composition composes: far looser.
    assert bound.by_accountant["naive"] > bound.by_accountant["strong"] > bound.by_accountant["pld"]


def test_nonprivate_claim_has_no_accountant_and_infinite_bound():
    bound = NonPrivateClaim().upper_bound(delta=1e-5)
    assert bound.by_accountant == {} and bound.accountant == "none" and math.isinf(bound.epsilon)


def test_claim_round_trips_through_json():
    claim = dpsgd_claim(sampling_rate=0.02, noise_multiplier=1.1, num_steps=500).compose(
        DPClaim(event=dpe.GaussianDpEvent(7.0), description="DP-PCA")
    )
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


# Issue 11, finding 8: a claim edited by hand (or damaged) loaded and was accounted as a guarantee.
@pytest.mark.parametrize(
    "field, value, match",
    [
        (
            ("event", "event", "event", "noise_multiplier"),
            -1.1,
            r"event\.event\.event\.noise_multiplier must be finite and > 0, got -1\.1",
        ),
        (("event", "event", "event", "noise_multiplier"), 0, r"noise_multiplier must be finite and > 0, got 0"),
        (("event", "event", "event", "noise_multiplier"), math.nan, r"noise_multiplier must not be NaN"),
        (("event", "event", "event", "noise_multiplier"), "1.1", r"noise_multiplier must be a real number, got '1.1'"),
        (
            ("event", "event", "sampling_probability"),
            2,
            r"event\.event\.sampling_probability must lie in \(0, 1\], got 2",
        ),
        (("event", "event", "sampling_probability"), 0.0, r"sampling_probability must lie in \(0, 1\], got 0.0"),
        (("event", "count"), -5, r"event\.count must be an integer >= 0, got -5"),
        (("event", "count"), 2.5, r"event\.count must be an integer, got 2\.5"),
        (("event", "count"), True, r"event\.count must be an integer, got True"),
    ],
)
def test_tampered_dp_claims_are_refused_naming_the_field_and_value(field, value, match):
    data = json.loads(json.dumps(dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.1, num_steps=100).to_dict()))
    node = data
    for key in field[:-1]:
        node = node[key]
    node[field[-1]] = value
    with pytest.raises(ValueError, match=match):
        claim_from_dict(data)


@pytest.mark.parametrize(
    "event, match",
    [
        (dpe.GaussianDpEvent(-1.0), "noise_multiplier"),
        (dpe.LaplaceDpEvent(0.0), "noise_multiplier"),
        (
            dpe.ComposedDpEvent([dpe.GaussianDpEvent(1.0), dpe.PoissonSampledDpEvent(1.5, dpe.GaussianDpEvent(1.0))]),
            r"event\.events\[1\]\.sampling_probability",
        ),
        (dpe.SampledWithoutReplacementDpEvent(10, 20, dpe.GaussianDpEvent(1.0)), "sample_size"),
        (dpe.SampledWithReplacementDpEvent(0, 1, dpe.GaussianDpEvent(1.0)), "source_dataset_size"),
    ],
)
def test_dp_claims_validate_their_event_on_construction(event, match):
    with pytest.raises(ValueError, match=match):
        DPClaim(event=event)


def test_valid_edge_values_are_accepted():
    # q = 1 (full batch) and T = 0 (nothing released) are valid mechanisms
    DPClaim(event=dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(1.0), 0))
    claim_from_dict(dpsgd_claim(sampling_rate=1.0, noise_multiplier=2, num_steps=3).to_dict())


def test_loading_goes_through_the_kind_s_own_validator():
    """A registered kind validates itself; claim_from_dict builds it through its from_dict."""
    from dataclasses import dataclass

    from dpaudit.privacy import claims as claims_module

    @dataclass(frozen=True, kw_only=True)
    class ToyClaim(claims_module.PrivacyClaim):
        kind = "toy-test-kind"
        temperature: float = 1.0

        def __post_init__(self) -> None:
            super().__post_init__()
            if not self.temperature > 0:
                raise ValueError(f"temperature must be > 0, got {self.temperature!r}")

        @classmethod
        def from_dict_fields(cls, data):
            return {"temperature": data["temperature"]}

        def epsilon(self, *, delta, accountant="pld"):
            return 1.0

    with claims_module.CLAIM_KINDS.temporarily(ToyClaim):
        assert claim_from_dict({"kind": "toy-test-kind", "temperature": 2.0}).temperature == 2.0
        with pytest.raises(ValueError, match="temperature must be > 0, got -3"):
            claim_from_dict({"kind": "toy-test-kind", "temperature": -3})
        with pytest.raises(ValueError, match="kind must be 'toy-test-kind'"):
            ToyClaim.from_dict({"kind": "dp"})
    assert "toy-test-kind" not in claims_module.CLAIM_KINDS


@pytest.mark.extended
def test_every_claim_kind_and_rebuilder_is_found_without_importing_its_module():
    # Kinds register beside their mathematics (PATE's in privacy/pate/claim.py, DSSGD's in
    # privacy/dssgd.py) and claims.py imports neither: a fresh process that loads a record
    # must still find them, through the registries' discovery of dpaudit.privacy.
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from dpaudit.privacy.claims import CLAIM_KINDS\n"
        "from dpaudit.privacy.record_claims import CLAIM_REBUILDERS\n"
        "assert 'dpaudit.privacy.pate.claim' not in sys.modules and 'dpaudit.privacy.dssgd' not in sys.modules\n"
        "print(sorted(CLAIM_KINDS), sorted(CLAIM_REBUILDERS), 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("]")
    kinds = "['dp', 'dssgd-svt', 'nonprivate', 'pate'"
    assert out[0] == kinds and out[1].strip() == kinds and out[2].strip() == "False"
