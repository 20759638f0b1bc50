"""A small digits federation for the DSSGD tests (shared by the protocol, Flower and missing-participant tests)."""

from __future__ import annotations

import torch

from defenses.dssgd.protocol import FederationSetup, LocalTraining, flatten_parameters
from defenses.dssgd.uploads import UploadRule
from defenses.pate.partition import partition_ids
from dpaudit.data import DatasetBundle
from dpaudit.models import build_model


def digits_federation(
    bundle: DatasetBundle, members, *, participants: int, rule: UploadRule, batch_size: int = 16, seed: int = 0
) -> FederationSetup:
    """``participants`` digits-mlp participants over ``members``, one local epoch at lr 0.1, initialised at ``seed``."""
    torch.manual_seed(seed)
    model = build_model("digits-mlp", input_shape=bundle.input_shape, num_classes=bundle.num_classes)
    return FederationSetup(
        dataset=bundle.name,
        data_root=None,
        partitions=partition_ids(members, num_teachers=participants, seed=seed),
        model_name="digits-mlp",
        model_options={},
        rule=rule,
        training=LocalTraining(epochs=1, batch_size=batch_size, learning_rate=0.1),
        seed=seed,
        initial=flatten_parameters(model),
    )
