"""Contract suite: one table of assertions over every registered membership-inference attack.

:func:`check_attack_contract` takes a :class:`attacks.membership.MembershipAttackSpec`, and the
parametrisation reads :data:`attacks.membership.MEMBERSHIP_ATTACKS` at collection, so an attack
registered from any module (see ``tests/app/test_toy_attack.py``) runs through the same checks: it runs on a tiny
overfit digits target, returns a :class:`MembershipResult` for the
queried ids whose scores are finite with "higher = member" (AUC above chance), is deterministic
under a seed, and its config rejects a bad value with a ValueError naming the field.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import re

import numpy as np
import pytest
import torch

from attacks.membership import (
    MEMBERSHIP_ATTACKS,
    MembershipAttackSpec,
    MembershipContext,
    build_context,
    choose_augmentations,
    plan_pools,
    query_ids,
    train_pools,
)
from attacks.membership.shadows import ShadowTraining
from dpaudit.options import add_option_flags, option_specs
from dpaudit.results import MembershipResult
from dpaudit.train_request import TrainRequest

NUM_SHADOWS = 4


@functools.cache
def tiny_context(seed: int = 0) -> MembershipContext:
    """An overfit digits-mlp (60 members, 60 non-members) and 4 online + 4 offline shadows, evaluated once."""
    from defenses.nonprivate import NonPrivateConfig, train_nonprivate
    from dpaudit.data import load_dataset, make_splits

    torch.set_num_threads(1)  # tiny models on a shared 2-core machine
    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0, num_members=60, num_non_members=60)
    record, model = train_nonprivate(
        TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name="digits-mlp",
            config=NonPrivateConfig(epochs=80),
            seed=0,
            progress=False,
        )
    )
    ids, member = query_ids(record)
    # Every pool, so that any attack (whichever pool it names) finds its models.
    everyone = {n: (s, s.config_type(**_count_kwargs(s))) for n, s in MEMBERSHIP_ATTACKS.items() if s.shadow_pool}
    pools = plan_pools(everyone, record=record, sample_ids=ids, seed=seed, num_population=200, train_size=60)
    # Shadows overfit like the target (its own epochs), or LiRA is miscalibrated.
    models, _, _ = train_pools(
        pools,
        record=record,
        seed=seed,
        train_size=60,
        training=ShadowTraining.from_config(record.config),
        directory=None,
        progress=False,
    )
    augs = choose_augmentations(bundle, None)
    return build_context(
        record=record,
        model=model,
        bundle=bundle,
        sample_ids=ids,
        is_member=member,
        seed=seed,
        augmentations=augs,
        pools=pools,
        shadow_models=models,
    )


def _count_kwargs(spec: MembershipAttackSpec) -> dict[str, int]:
    return {spec.shadow_count_field: NUM_SHADOWS} if spec.shadow_count_field else {}


def check_attack_contract(spec: MembershipAttackSpec) -> MembershipResult:
    """Asserts the membership-attack contract for ``spec``; returns its result on the tiny target."""
    assert isinstance(spec, MembershipAttackSpec)
    assert spec.name and spec.summary and re.search(r"\d{4}", spec.summary), (
        f"{spec.name}: the summary should cite its paper (author year)"
    )
    assert dataclasses.is_dataclass(spec.config_type) and spec.config_type.__dataclass_params__.frozen, (
        f"{spec.name}: config_type must be a frozen dataclass"
    )
    fields = {f.name for f in dataclasses.fields(spec.config_type)}
    assert {o.field for o in option_specs(spec.config_type)} == fields, (
        f"{spec.name}: every config field must be declared with dpaudit.options.option"
    )
    add_option_flags(argparse.ArgumentParser(), {spec.name: spec.config_type})  # the CLI can be generated

    # Bad values are rejected at construction, naming the field.
    for o in option_specs(spec.config_type):
        if o.kind in (int, float):
            with pytest.raises(ValueError, match=re.escape(o.field)):
                spec.config_type(**{**_count_kwargs(spec), o.field: -1})

    context = tiny_context()
    config = spec.config_type(**_count_kwargs(spec))
    assert spec.num_shadow_models(config) == (NUM_SHADOWS if spec.shadow_pool else 0)
    result = spec.run(context, config)
    assert isinstance(result, MembershipResult), f"{spec.name}: run must return a MembershipResult"
    assert result.attack == spec.name and result.model_id == context.model_id
    np.testing.assert_array_equal(result.sample_ids, context.sample_ids)
    np.testing.assert_array_equal(result.is_member, context.is_member)
    # Each queried example's class is kept, for the report's per-class breakdown.
    assert result.labels is not None, f"{spec.name}: the result must keep the examples' labels"
    np.testing.assert_array_equal(result.labels, context.universe_labels[context.query_positions])
    assert result.scores.shape == context.sample_ids.shape and result.scores.dtype == np.float64
    assert np.all(np.isfinite(result.scores))
    assert result.auc() > 0.5, (
        f"{spec.name}: AUC {result.auc():.3f} on an overfit target; scores must be higher for members"
    )
    again = spec.run(context, config)
    np.testing.assert_array_equal(again.scores, result.scores, err_msg=f"{spec.name}: not deterministic under a seed")
    return result


def registered_attacks() -> list[str]:
    """The attacks the contract suite runs over: whatever the registry holds when the tests are collected."""
    return list(MEMBERSHIP_ATTACKS)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Read at collection, not at import: an attack registered by then (a plugin, a conftest, a
    # module imported earlier) is checked like the built-in ones.
    if metafunc.function.__name__ == "test_registered_attack_meets_the_contract":
        metafunc.parametrize("name", registered_attacks())


@pytest.mark.extended
def test_registered_attack_meets_the_contract(name):
    spec = MEMBERSHIP_ATTACKS[name]
    assert spec.name == name
    check_attack_contract(spec)


def test_all_configs_share_flags_consistently():
    flags = add_option_flags(argparse.ArgumentParser(), {n: s.config_type for n, s in MEMBERSHIP_ATTACKS.items()})
    assert "--num-shadows" in flags and all(f.startswith("--") for f in flags)


def test_context_lacking_a_pool_is_a_clear_error():
    context = dataclasses.replace(tiny_context(), shadows={})
    with pytest.raises(ValueError, match="'lira' needs the online shadow pool"):
        MEMBERSHIP_ATTACKS["lira"].run(context, MEMBERSHIP_ATTACKS["lira"].config_type())
