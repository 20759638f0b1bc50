"""Contract suite: every registered defense trains, round-trips, claims, repeats and rejects bad configs.

:func:`check_defense_contract` is what a new defense must pass; the parametrised test runs it
over :data:`defenses.DEFENSES` as registered at collection time, and a test that registers a
defense of its own (``tests/app/test_toy_defense.py``) calls it directly.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from defenses import DEFENSES, DefenseSpec
from dpaudit.app.records import verify_record
from dpaudit.data import load_dataset, make_splits
from dpaudit.options import option_specs
from dpaudit.privacy.record_claims import CLAIM_REBUILDERS
from dpaudit.results.certification_spec import CertificationSpec
from dpaudit.results.record import load_record
from dpaudit.store import thaw
from dpaudit.train_request import TrainRequest
from dpaudit.weights import load_model, save_record

# The smallest settings of the fields a defense may have: a contract check, not a reproduction.
_TINY = {
    "epochs": 1,
    "batch_size": 32,
    "sampling_rate": 0.05,
    "redistribution_pretrain_epochs": 1,
    "redistribution_examples": 64,
    "physical_batch_size": 256,
    # PATE: a handful of teachers, a few queries, a threshold five teachers can reach.
    "teachers": 5,
    "queries": 40,
    "threshold": 3.0,
    "student_epochs": 2,
    # PATE's aggregator noise comes from OS entropy unless seeded: the same-seed check needs the seed
    # (a seeded run is reproducible and, its record says, not private).
    "aggregator_seed": 0,
    # DSSGD: three participants, two rounds.
    "participants": 3,
    "rounds": 2,
    "baselines": False,
}
# Settings that switch a defense into another privacy mode (DSSGD: the DP upload). The contract
# trains each defense at its default mode and, where one of these applies, in that mode too.
_PRIVATE_MODES = {"dp_epsilon": 1.0}


def tiny_config(spec: DefenseSpec, *, private_mode: bool = True):
    names = {f.name for f in dataclasses.fields(spec.config_type)}
    wanted = {**_TINY, **(_PRIVATE_MODES if private_mode else {})}
    kwargs = {k: v for k, v in wanted.items() if k in names}
    if "lot_size" in names and "sampling_rate" in kwargs:
        kwargs.setdefault("lot_size", None)
    return spec.config_type(**kwargs)


def _train(spec: DefenseSpec, config, *, seed: int):
    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0, num_members=120, num_non_members=60)
    return spec.train(
        TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name="digits-mlp",
            model_options={},
            config=config,
            seed=seed,
            device="cpu",
            progress=False,
        )
    )


def _numeric_options(spec: DefenseSpec):
    return [o for o in option_specs(spec.config_type) if o.kind in (int, float) and o.choices is None]


def check_defense_contract(spec: DefenseSpec, tmp_path) -> None:
    """Asserts the contract every registered defense meets (see the module docstring)."""
    assert spec.name and spec.summary and (isinstance(spec.claim_kind, str) or callable(spec.claim_kind))
    assert dataclasses.is_dataclass(spec.config_type) and spec.config_type.__dataclass_params__.frozen
    fields = {f.name for f in dataclasses.fields(spec.config_type)}
    assert {o.field for o in option_specs(spec.config_type)} == fields, "every config field must declare its flag"

    # The claim a training returns has the kind the registry declares for its configuration, at
    # the defense's default privacy mode and in the other mode it has (DSSGD without and with DP).
    default = tiny_config(spec, private_mode=False)
    config = tiny_config(spec)
    if config != default:
        plain, _ = _train(spec, default, seed=3)
        assert plain.claim.kind == spec.claim_kind_for(default), (spec.name, "default config", plain.claim.kind)
    record, model = _train(spec, config, seed=3)
    assert record.defense == spec.name and record.claim.kind == spec.claim_kind_for(config)
    assert len(record.membership.members) == 120 and 0.0 <= record.metrics["test_accuracy"] <= 1.0

    # the record and its weights round-trip exactly
    rdir = tmp_path / record.model_id
    save_record(record, model, rdir)
    again = load_record(rdir)
    assert again.model_id == record.model_id and again.claim.to_dict() == record.claim.to_dict()
    assert np.array_equal(again.membership.members, record.membership.members)
    loaded = load_model(rdir)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))

    # the stored record passes the checks every run makes before acting on it: the claim its
    # kind rebuilds from the config and metrics, the model id and directory, the dataset
    # (a defense whose claim kind has no rebuilder fails here)
    kind = spec.claim_kind_for(record.config)
    assert kind in CLAIM_REBUILDERS, f"claim kind {kind!r} registers no rebuilder in dpaudit.privacy.record_claims"
    verify_record(again, rdir)

    # the claim is present and evaluable under its applicable accountants
    bound = record.claim.upper_bound(delta=1e-5)
    if record.claim.is_private:
        assert bound.by_accountant and math.isfinite(bound.epsilon) and bound.epsilon > 0
    else:
        assert math.isinf(bound.epsilon)

    # a certifiable defense stores the spec certify reads back
    if spec.certification is not None:
        stored = CertificationSpec.from_dict(thaw(record.config)["certification"])
        # Defaults derived from the input (Secure-SGD's L) are resolved as training resolved them.
        resolved = config.for_input(record.input_shape) if hasattr(config, "for_input") else config
        assert stored == spec.certification(resolved)

    # the same seed gives the same model
    _, twin = _train(spec, config, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), twin.state_dict().values()))

    # a bad value of any numeric field is refused with an error that names the field
    for opt in _numeric_options(spec):
        with pytest.raises((ValueError, TypeError)) as exc:
            spec.config_type(**{opt.field: -1})
        assert opt.field in str(exc.value), (opt.field, str(exc.value))


# Secure-SGD pretrains a model to estimate its sensitivity before training: ~14 s on 2 cores.
_SLOW = {"secure-sgd"}


@pytest.mark.extended
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW else n for n in DEFENSES])
def test_registered_defense_meets_the_contract(name, tmp_path):
    check_defense_contract(DEFENSES[name], tmp_path)
