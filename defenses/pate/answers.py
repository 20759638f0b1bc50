"""PATE's noisy answers, drawn once per training however often the training is resumed.

Kept apart from :mod:`defenses.pate.aggregators` (NumPy only) because the answers are kept in a
training's checkpoints (:mod:`dpaudit.checkpoint`, tensors).
"""

from __future__ import annotations

import numpy as np
import torch

from defenses.pate.aggregators import Aggregation, AggregatorConfig, aggregate
from dpaudit.checkpoint import stage_result

__all__ = ["aggregate_once"]


def aggregate_once(votes: np.ndarray, config: AggregatorConfig, *, seed: int | None) -> Aggregation:
    """:func:`~defenses.pate.aggregators.aggregate`, its answers kept until the training's record is written.

    Under :func:`dpaudit.checkpoint.checkpoints_in` the answers (and their noise) are stored, and
    a rerun of an interrupted training reuses them. Aggregating again would draw fresh noise (the
    operating system's, by default) on the same votes and hand the student other labels than
    those its checkpoint was trained on, so it could not resume. Outside a scope it is
    :func:`aggregate` itself.

    Args:
        votes: the vote matrix.
        config: the aggregator's configuration.
        seed: its noise seed (``None``: the operating system's entropy).
    """
    drawn: list[Aggregation] = []

    def compute() -> dict[str, object]:  # tensors, lists of tensors and a name: what the stage stores
        agg = aggregate(votes, config, seed=seed)
        drawn.append(agg)
        return {
            "aggregator": agg.aggregator,
            "labels": torch.from_numpy(np.array(agg.labels)),
            "answered": torch.from_numpy(np.array(agg.answered)),
            "noise": torch.from_numpy(np.array(agg.noise)),
            "threshold_noise": [] if agg.threshold_noise is None else [torch.from_numpy(np.array(agg.threshold_noise))],
        }

    stored = stage_result(
        "pate aggregation",
        what="the aggregator's noisy answers",
        identity=("pate aggregation", repr(config), seed, votes),
        compute=compute,
    )
    if drawn:
        return drawn[0]
    return Aggregation(
        aggregator=stored["aggregator"],
        config=config,
        seed=seed,
        votes=votes,
        labels=stored["labels"].numpy(),
        answered=stored["answered"].numpy(),
        noise=stored["noise"].numpy(),
        threshold_noise=stored["threshold_noise"][0].numpy() if stored["threshold_noise"] else None,
    )
