"""DP-SGD training defaults from public facts (defenses/dp_defaults.py)."""

from __future__ import annotations

import dataclasses

import pytest
from dp_accounting import dp_event as dpe
from dp_accounting.pld import pld_privacy_accountant

from defenses.dp_defaults import (
    CLIP_NORM,
    DEFAULT_EPOCHS,
    LEARNING_RATE,
    MAX_EPOCHS,
    MAX_STEPS,
    MIN_EPOCHS,
    derive_dp_training,
    derived_epochs,
    derived_lot_size,
    gdp_mu,
    resolve_dp_config,
)
from defenses.dpsgd.config import DPSGDConfig
from defenses.dpsgd.plan import announce_plan, plan_dpsgd, resolve_config
from dpaudit.train_request import TrainRequest


def test_public_facts_in_values_out() -> None:
    d = derive_dp_training(num_members=718, target_epsilon=2.0, delta=1e-5)
    # 4·√718 ≈ 107 → 128; μ(2, 1e-5) ≈ 0.50, so 0.05²·0.50²·128·718 ≈ 58 epochs → capped at 40.
    assert (d.lot_size, d.learning_rate, d.clip_norm, d.epochs) == (128, LEARNING_RATE, CLIP_NORM, MAX_EPOCHS)
    assert d.sampling_rate == pytest.approx(128 / 718)
    assert derive_dp_training(num_members=60000, target_epsilon=2.0, delta=1e-5).lot_size == 1024
    # No target: σ is fixed, the length stays the old default.
    assert derive_dp_training(num_members=718, target_epsilon=None, delta=1e-5).epochs == DEFAULT_EPOCHS


def test_learning_rate_doubles_only_where_steps_not_noise_set_the_length() -> None:
    # digits at ε = 1, 2: the noise bound sets the length (lr 1 lost 2-8 points there); at ε = 8,
    # and on MNIST-sized N, the step budget or MAX_EPOCHS does (lr 1 gained 1-3 points).
    rates = {
        (n, e): derive_dp_training(num_members=n, target_epsilon=e, delta=1e-5).learning_rate
        for n in (718, 30000)
        for e in (1.0, 2.0, 8.0)
    }
    assert rates == {
        (718, 1.0): 0.5,
        (718, 2.0): 0.5,
        (718, 8.0): 1.0,
        (30000, 1.0): 1.0,
        (30000, 2.0): 1.0,
        (30000, 8.0): 1.0,
    }
    for n in (100, 718, 15081):
        lots = derived_lot_size(n)
        lrs = [
            derive_dp_training(num_members=n, target_epsilon=e, delta=1e-5).learning_rate
            for e in (0.25, 0.5, 1, 2, 4, 8, 32)
        ]
        assert lrs == sorted(lrs) and set(lrs) <= {LEARNING_RATE, 2 * LEARNING_RATE}, (n, lots)
    # a config that names its lr keeps it; one that does not gets the N-aware value
    assert (
        resolve_dp_config(DPSGDConfig(target_epsilon=2.0, learning_rate=0.3), num_members=30000)[0].learning_rate == 0.3
    )
    assert resolve_dp_config(DPSGDConfig(target_epsilon=2.0), num_members=30000)[0].learning_rate == 2 * LEARNING_RATE


def test_lot_size_grows_with_n_and_stays_a_power_of_two_or_a_quarter_of_n() -> None:
    sizes = [derived_lot_size(n) for n in range(1, 200_000, 997)]
    assert sizes == sorted(sizes)
    for n in (1, 3, 64, 100, 718, 15081, 30000, 60000):
        lot = derived_lot_size(n)
        assert 1 <= lot <= n
        assert lot == max(1, n // 4) or lot & (lot - 1) == 0


def test_epochs_grow_with_epsilon_within_the_bounds_and_the_step_budget() -> None:
    for n in (100, 718, 15081, 60000):
        lot = derived_lot_size(n)
        epochs = [
            derived_epochs(target_epsilon=e, delta=1e-5, num_members=n, lot_size=lot)
            for e in (0.1, 0.5, 1, 2, 4, 8, 16, 64)
        ]
        assert epochs == sorted(epochs)
        for e in epochs:
            assert 1 <= e <= MAX_EPOCHS
            assert e * n / lot <= MAX_STEPS + 1e-9 or e == 1
            assert e >= min(MIN_EPOCHS, MAX_STEPS * lot / n) - 1


@pytest.mark.extended
def test_gdp_mu_matches_the_gaussian_mechanism_under_dp_accounting() -> None:
    # μ-GDP is exactly the Gaussian mechanism with σ = 1/μ at sensitivity 1 (Dong et al. 2022, Thm. 2.7).
    for eps, delta in ((0.5, 1e-5), (1.0, 1e-5), (2.0, 1e-6), (8.0, 1e-5)):
        mu = gdp_mu(eps, delta)
        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(dpe.GaussianDpEvent(1.0 / mu))
        assert acc.get_epsilon(delta) == pytest.approx(eps, rel=2e-3)


def test_only_unset_fields_are_filled_and_resolving_is_idempotent() -> None:
    given = DPSGDConfig(target_epsilon=2.0, lot_size=64, learning_rate=0.3)
    resolved, derived = resolve_dp_config(given, num_members=718)
    assert set(derived) == {"clip_norm", "epochs"}
    assert (resolved.lot_size, resolved.learning_rate, resolved.clip_norm) == (64, 0.3, CLIP_NORM)
    assert resolved.epochs == derived_epochs(
        target_epsilon=2.0, delta=1e-5, num_members=718, lot_size=64
    )  # the user's lot size
    assert resolve_dp_config(resolved, num_members=718) == (resolved, ())
    # a sampling rate counts as a lot size; budget mode (σ given, no epochs) keeps its open length
    assert "lot_size" not in resolve_dp_config(DPSGDConfig(sampling_rate=0.1), num_members=718)[1]
    assert resolve_dp_config(DPSGDConfig(target_epsilon=2.0, noise_multiplier=3.0), num_members=718)[0].epochs is None


def test_secure_sgd_config_resolves_the_same_way_and_keeps_its_type() -> None:
    from defenses.noise_layer.configs import SecureSGDConfig

    resolved, derived = resolve_dp_config(SecureSGDConfig(target_epsilon=2.0), num_members=718)
    assert type(resolved) is SecureSGDConfig and set(derived) == {"lot_size", "learning_rate", "clip_norm", "epochs"}
    plain = resolve_dp_config(DPSGDConfig(target_epsilon=2.0), num_members=718)[0]
    assert all(getattr(resolved, k) == getattr(plain, k) for k in ("lot_size", "learning_rate", "clip_norm", "epochs"))


@pytest.mark.extended
def test_the_derivation_never_reads_data(monkeypatch) -> None:
    import dpaudit.data

    def refuse(*args, **kwargs):
        raise AssertionError("the defaults read the data")

    monkeypatch.setattr(dpaudit.data, "load_dataset", refuse)
    plan = plan_dpsgd(DPSGDConfig(target_epsilon=2.0, accountant="rdp"), num_members=718)
    assert plan.sampling_rate == pytest.approx(128 / 718)


@pytest.mark.extended
def test_the_plan_announces_the_derived_defaults(capsys) -> None:
    plan = plan_dpsgd(DPSGDConfig(target_epsilon=2.0, accountant="rdp"), num_members=718)
    announce_plan(plan)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "dpsgd defaults: lot size 128 (q=0.1783), lr 0.5, epochs 40, clip 1 — "
        "derived from N=718, epsilon=2, delta=1e-05; pass --lot-size, "
        "--learning-rate, --epochs, --clip-norm to override"
    )
    assert err[1].startswith("dpsgd budget: sigma = ")
    # everything named: nothing derived, nothing said about defaults
    named = DPSGDConfig(target_epsilon=2.0, lot_size=64, learning_rate=0.5, clip_norm=1.0, epochs=30, accountant="rdp")
    assert plan_dpsgd(named, num_members=718).defaults is None


def test_a_grid_or_cli_run_without_values_gets_the_record_of_the_explicit_values() -> None:
    from defenses._common import model_id_for
    from dpaudit.app.runs.train import default_config, resolve_defaults
    from dpaudit.data import load_dataset, make_splits

    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0)
    n = len(splits.members)
    implicit, note = resolve_defaults(default_config("dpsgd", target_epsilon=2.0), num_members=n)
    d = derive_dp_training(num_members=n, target_epsilon=2.0, delta=1e-5)
    explicit, none = resolve_defaults(
        default_config(
            "dpsgd",
            target_epsilon=2.0,
            lot_size=d.lot_size,
            learning_rate=d.learning_rate,
            clip_norm=d.clip_norm,
            epochs=d.epochs,
        ),
        num_members=n,
    )
    assert note is not None and none is None
    ids = {
        model_id_for(
            TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=c, seed=0), defense="dpsgd"
        )
        for c in (implicit, explicit)
    }
    assert len(ids) == 1
    assert dataclasses.asdict(implicit) == dataclasses.asdict(explicit)
    assert resolve_config(implicit, num_members=n) == (implicit, None)


def test_a_normalised_first_layer_gets_the_raised_rate_and_a_free_or_orthogonal_one_does_not() -> None:
    from defenses.dp_defaults import SCALE_INVARIANT_FACTOR, derived_learning_rate
    from defenses.noise_layer.configs import SecureSGDConfig
    from defenses.noise_layer.schedule import scale_invariant_first_layer
    from defenses.noise_layer.secure_sgd import resolve_secure_sgd_config

    # Rule 5: ×2 where the noise sets the length (digits at ε = 2), ×4 where compute does (N = 30,000).
    noise_bound = {"target_epsilon": 2.0, "delta": 1e-5, "num_members": 718, "lot_size": 128, "epochs": 40.0}
    compute_bound = {"target_epsilon": 2.0, "delta": 1e-5, "num_members": 30000, "lot_size": 512, "epochs": 8.0}
    assert (
        derived_learning_rate(**noise_bound, scale_invariant_first_layer=True)
        == SCALE_INVARIANT_FACTOR * derived_learning_rate(**noise_bound)
        == 1.0
    )
    assert (
        derived_learning_rate(**compute_bound, scale_invariant_first_layer=True)
        == SCALE_INVARIANT_FACTOR**2 * derived_learning_rate(**compute_bound)
        == 4.0
    )
    # auto → normalize on an MLP's Linear first layer, → orthogonal on a convolution
    mlp = {"model_name": "digits-mlp", "model_options": {}, "input_shape": (64,), "num_classes": 10}
    cnn = {"model_name": "hgm-cnn", "model_options": {}, "input_shape": (1, 28, 28), "num_classes": 10}
    assert scale_invariant_first_layer(SecureSGDConfig(target_epsilon=2.0), **mlp)
    assert not scale_invariant_first_layer(SecureSGDConfig(target_epsilon=2.0), **cnn)
    assert not scale_invariant_first_layer(
        SecureSGDConfig(target_epsilon=2.0, sensitivity_control="scale-noise"), **mlp
    )
    assert scale_invariant_first_layer(SecureSGDConfig(target_epsilon=2.0, sensitivity_control="normalize"), **cnn)
    assert not scale_invariant_first_layer(DPSGDConfig(target_epsilon=2.0), **mlp)
    resolved, note = resolve_secure_sgd_config(SecureSGDConfig(target_epsilon=2.0), num_members=718, **mlp)
    assert resolved.learning_rate == 1.0 and note is not None and "lr 1," in note and "normalised first layer" in note
    assert (
        resolve_secure_sgd_config(SecureSGDConfig(target_epsilon=2.0), num_members=718, **cnn)[0].learning_rate
        == LEARNING_RATE
    )
    # a named rate always wins, and a resolved config resolves to itself
    assert (
        resolve_secure_sgd_config(SecureSGDConfig(target_epsilon=2.0, learning_rate=0.3), num_members=718, **mlp)[
            0
        ].learning_rate
        == 0.3
    )
    assert resolve_secure_sgd_config(resolved, num_members=718, **mlp) == (resolved, None)
