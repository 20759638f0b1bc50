"""A record's claim rebuilt from its config and metrics (dpaudit.privacy.record_claims), per claim kind.

Each case builds the config and metrics a run records and the claim it states, checks that the
honest triple passes, and that an edit of the claim (or of the metrics) is refused naming the
field. Calibrated values are produced by the accountants' own calibration functions, which the
check does not call (it evaluates ε on both sides of the stated value instead).
"""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event as dpe

from dpaudit.privacy.calibration import calibrate_noise_multiplier, calibrate_num_steps
from dpaudit.privacy.claims import DPClaim, NonPrivateClaim, dpsgd_claim
from dpaudit.privacy.dssgd import dssgd_svt_claim
from dpaudit.privacy.pate.claim import PATEClaim
from dpaudit.privacy.record_claims import CLAIM_REBUILDERS, check_record_claim

N = 120
BASE = {
    "noise_multiplier": 1.0,
    "sampling_rate": 0.05,
    "lot_size": None,
    "target_epsilon": None,
    "epochs": 1,
    "delta": 1e-5,
    "accountant": "pld",
    "pca_components": None,
}


def _metrics(q, sigma, steps):
    return {"sampling_rate": q, "noise_multiplier": sigma, "num_steps": steps}


def test_every_builtin_claim_kind_has_a_rebuilder():
    assert {"dp", "nonprivate", "pate", "dssgd-svt"} <= set(CLAIM_REBUILDERS)


def test_dpsgd_claim_passes_and_each_edit_is_named():
    claim = dpsgd_claim(sampling_rate=0.05, noise_multiplier=1.0, num_steps=20)
    check_record_claim(claim, config=BASE, metrics=_metrics(0.05, 1.0, 20), num_members=N)
    edits = [
        (
            dpsgd_claim(sampling_rate=0.05, noise_multiplier=10.0, num_steps=20),
            "claim event.event.event.noise_multiplier=10 does not match config noise_multiplier=1",
        ),
        (
            dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.0, num_steps=20),
            "claim event.event.sampling_probability=0.01 does not match config sampling_rate=0.05",
        ),
        (
            dpsgd_claim(sampling_rate=0.05, noise_multiplier=1.0, num_steps=2),
            "claim event.count=2 does not match config epochs x steps per epoch=20",
        ),
    ]
    for bad, message in edits:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            check_record_claim(bad, config=BASE, metrics=_metrics(0.05, 1.0, 20), num_members=N)
    with pytest.raises(ValueError, match="metrics noise_multiplier=10 does not match config noise_multiplier=1"):
        check_record_claim(claim, config=BASE, metrics=_metrics(0.05, 10.0, 20), num_members=N)
    with pytest.raises(ValueError, match="metrics num_steps=20 does not match config epochs=2"):
        check_record_claim(claim, config={**BASE, "epochs": 2}, metrics=_metrics(0.05, 1.0, 20), num_members=N)


def test_lot_size_sets_the_rate_from_the_number_of_members():
    config = {**BASE, "sampling_rate": None, "lot_size": 6}
    claim = dpsgd_claim(sampling_rate=0.05, noise_multiplier=1.0, num_steps=20)
    check_record_claim(claim, config=config, metrics=_metrics(0.05, 1.0, 20), num_members=N)
    with pytest.raises(ValueError, match="metrics sampling_rate=0.05 does not match config lot_size / members"):
        check_record_claim(claim, config=config, metrics=_metrics(0.05, 1.0, 20), num_members=2 * N)


@pytest.mark.extended
def test_a_calibrated_sigma_must_be_the_calibration_s_answer():
    config = {
        **BASE,
        "noise_multiplier": None,
        "target_epsilon": 2.0,
        "accountant": "rdp",
    }  # RDP: the PLD search takes ~20 s here
    sigma = calibrate_noise_multiplier(
        target_epsilon=2.0, delta=1e-5, sampling_rate=0.05, num_steps=20, accountant="rdp"
    )
    check_record_claim(
        dpsgd_claim(sampling_rate=0.05, noise_multiplier=sigma, num_steps=20),
        config=config,
        metrics=_metrics(0.05, sigma, 20),
        num_members=N,
    )
    for wrong in (
        1.5 * sigma,
        0.8 * sigma,
    ):  # more noise claimed than calibrated (ε understated), or less (budget overshot)
        with pytest.raises(ValueError, match="is not the noise multiplier calibrated to config target_epsilon=2"):
            check_record_claim(
                dpsgd_claim(sampling_rate=0.05, noise_multiplier=wrong, num_steps=20),
                config=config,
                metrics=_metrics(0.05, wrong, 20),
                num_members=N,
            )


def test_budget_mode_steps_must_be_the_most_the_target_allows():
    config = {**BASE, "noise_multiplier": 2.0, "target_epsilon": 1.0, "epochs": 10, "accountant": "rdp"}
    steps = calibrate_num_steps(
        target_epsilon=1.0, delta=1e-5, sampling_rate=0.05, noise_multiplier=2.0, max_steps=200, accountant="rdp"
    )
    assert 3 < steps < 200
    check_record_claim(
        dpsgd_claim(sampling_rate=0.05, noise_multiplier=2.0, num_steps=steps),
        config=config,
        metrics=_metrics(0.05, 2.0, steps),
        num_members=N,
    )
    for wrong in (steps - 3, steps + 3):
        with pytest.raises(
            ValueError, match=f"metrics num_steps={wrong} is not the number of steps config target_epsilon=1 allows"
        ):
            check_record_claim(
                dpsgd_claim(sampling_rate=0.05, noise_multiplier=2.0, num_steps=wrong),
                config=config,
                metrics=_metrics(0.05, 2.0, wrong),
                num_members=N,
            )


def test_dp_pca_is_composed_and_cannot_be_dropped():
    config = {**BASE, "pca_components": 10, "pca_noise": 4.0, "pca_sampling_rate": 0.5}
    dpsgd = dpsgd_claim(sampling_rate=0.05, noise_multiplier=1.0, num_steps=20)
    pca = DPClaim(event=dpe.PoissonSampledDpEvent(0.5, dpe.GaussianDpEvent(4.0)))
    check_record_claim(pca.compose(dpsgd), config=config, metrics=_metrics(0.05, 1.0, 20), num_members=N)
    with pytest.raises(ValueError, match="claim event.type"):
        check_record_claim(dpsgd, config=config, metrics=_metrics(0.05, 1.0, 20), num_members=N)
    weaker = DPClaim(event=dpe.PoissonSampledDpEvent(0.5, dpe.GaussianDpEvent(8.0))).compose(dpsgd)
    with pytest.raises(
        ValueError, match=r"claim event.events\[0\].event.noise_multiplier=8 does not match config pca_noise=4"
    ):
        check_record_claim(weaker, config=config, metrics=_metrics(0.05, 1.0, 20), num_members=N)


def _pate(rdp_scale: float = 1.0) -> PATEClaim:
    orders = (2.0, 4.0, 8.0, 16.0)
    # GNMax's data-independent RDP, λ/σ² per answer (Papernot et al. 2018, Proposition 8), 30 answers.
    return PATEClaim(
        aggregator="gnmax",
        parameters={"sigma": 40.0},
        num_queries=30,
        num_answered=30,
        orders=orders,
        rdp=tuple(rdp_scale * 30 * o / 40.0**2 for o in orders),
        analysis="data-independent",
    )


def test_pate_claim_is_checked_against_config_and_the_measured_epsilon():
    config = {
        "aggregator": "gnmax",
        "sigma": 40.0,
        "threshold": 200.0,
        "threshold_sigma": 150.0,
        "laplace_scale": 20.0,
        "queries": 30,
        "delta": 1e-5,
        "analysis": "data-independent",
    }
    claim = _pate()
    metrics = {"num_queries": 30, "num_answered": 30, "epsilon_data_independent": claim.epsilon(delta=1e-5)}
    check_record_claim(claim, config=config, metrics=metrics, num_members=N)
    with pytest.raises(
        ValueError, match="claim epsilon at config delta=1e-05=.* does not match metrics epsilon_data_independent"
    ):
        check_record_claim(_pate(0.5), config=config, metrics=metrics, num_members=N)
    with pytest.raises(ValueError, match="claim parameters.sigma=40 does not match config sigma=80"):
        check_record_claim(claim, config={**config, "sigma": 80.0}, metrics=metrics, num_members=N)


def test_dssgd_claim_is_rebuilt_from_its_parameters():
    config = {"dp_epsilon": 1.0, "bound": 0.001, "threshold": 3.0, "budget_split": "sum", "rounds": 2}
    metrics = {"uploads_per_turn": 961, "num_parameters": 9610}
    claim = dssgd_svt_claim(
        epsilon_per_parameter=1.0, bound=0.001, threshold=3.0, uploads_per_round=961, num_rounds=2, num_parameters=9610
    )
    check_record_claim(claim, config=config, metrics=metrics, num_members=N)
    fewer = dssgd_svt_claim(
        epsilon_per_parameter=1.0, bound=0.001, threshold=3.0, uploads_per_round=961, num_rounds=1, num_parameters=9610
    )
    with pytest.raises(ValueError, match="claim num_rounds=1 does not match config rounds=2"):
        check_record_claim(fewer, config=config, metrics=metrics, num_members=N)


def test_a_dssgd_budget_is_planned_again_from_the_asked_config():
    """A budget's config keeps dp_epsilon (or rounds) unset: c x R x dp_epsilon must spend the target, checked
    independently here."""
    base = {"bound": 0.001, "threshold": 3.0, "budget_split": "sum", "upload_fraction": 0.1, "target_epsilon": 2.0}
    eps = 2.0 / (961 * 2)  # the pure composition spends exactly the target
    config, metrics = (
        {**base, "dp_epsilon": None, "rounds": 2},
        {"uploads_per_turn": 961, "num_parameters": 9610, "run_dp_epsilon": eps, "run_rounds": 2},
    )
    claim = dssgd_svt_claim(
        epsilon_per_parameter=eps, bound=0.001, threshold=3.0, uploads_per_round=961, num_rounds=2, num_parameters=9610
    )
    check_record_claim(claim, config=config, metrics=metrics, num_members=N)
    over = dssgd_svt_claim(
        epsilon_per_parameter=2 * eps,
        bound=0.001,
        threshold=3.0,
        uploads_per_round=961,
        num_rounds=2,
        num_parameters=9610,
    )
    with pytest.raises(ValueError, match="epsilon_per_parameter"):
        check_record_claim(over, config=config, metrics=metrics, num_members=N)
    with pytest.raises(ValueError, match="metrics run_dp_epsilon=.* does not match"):
        check_record_claim(claim, config=config, metrics={**metrics, "run_dp_epsilon": 2 * eps}, num_members=N)
    # dp_epsilon given, rounds left to the budget: floor(2 / (961 x 0.001)) = 2
    config = {**base, "dp_epsilon": 0.001, "rounds": None}
    claim = dssgd_svt_claim(
        epsilon_per_parameter=0.001,
        bound=0.001,
        threshold=3.0,
        uploads_per_round=961,
        num_rounds=2,
        num_parameters=9610,
    )
    check_record_claim(claim, config=config, metrics={**metrics, "run_rounds": 2}, num_members=N)
    with pytest.raises(ValueError, match="metrics run_rounds=3 does not match"):
        check_record_claim(claim, config=config, metrics={**metrics, "run_rounds": 3}, num_members=N)


def test_a_non_private_claim_needs_no_parameters_and_a_kind_without_rebuilder_is_refused():
    check_record_claim(NonPrivateClaim(), config={}, metrics={}, num_members=N)
    assert math.isinf(NonPrivateClaim().epsilon(delta=1e-5))
    with pytest.raises(ValueError, match="config is missing 'noise_multiplier'"):
        check_record_claim(
            dpsgd_claim(sampling_rate=0.05, noise_multiplier=1.0, num_steps=20),
            config={"sampling_rate": 0.05},
            metrics=_metrics(0.05, 1.0, 20),
            num_members=N,
        )
