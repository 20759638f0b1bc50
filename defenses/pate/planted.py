"""Deliberately broken PATE aggregators: the test that the aggregator audit actually works.

Used only by tests, demos and ``dpaudit pate audit --planted-bug``. Each variant has the
signature of :func:`defenses.pate.aggregators.aggregate` and records the *documented* config in
its :class:`~defenses.pate.aggregators.Aggregation`, so the claim made from it is the correct
one (Papernot et al. 2017, §3; 2018, §4) while the answers are not. A sound audit
(:mod:`attacks.audit.pate`) must flag each of them (ε_LB > ε_UB) and never the ``none``
variant, the real aggregator. The bugs:

``noise-scale-too-small``
    every noise scale (LNMax's Laplace b; GNMax's σ; Confident-GNMax's σ1 and σ2) is divided
    by ``factor`` (default 10) — a unit slip such as passing γ for 1/γ or a variance for a
    standard deviation — while the claim states the documented scale.
``threshold-without-noise``
    Confident-GNMax compares the largest count with T without its N(0, σ1²) noise: whether a
    query is answered then reveals whether max_j n_j ≥ T exactly, which one teacher can flip
    (the threshold step has no privacy at all).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from defenses.pate.aggregators import (
    NOT_ANSWERED,
    Aggregation,
    AggregatorConfig,
    ConfidentGNMaxConfig,
    GNMaxConfig,
    LNMaxConfig,
    aggregate,
    validate_votes,
)
from dpaudit import _validate as v

__all__ = [
    "PLANTED_PATE_BUGS",
    "planted_aggregator",
    "aggregate_noise_scale_too_small",
    "aggregate_threshold_without_noise",
]

PLANTED_PATE_BUGS = ("none", "noise-scale-too-small", "threshold-without-noise")
"""The ``--planted-bug`` values of ``dpaudit pate audit``; ``none`` is the real aggregator."""

#: Which aggregators each bug applies to.
_APPLIES_TO = {
    "none": ("lnmax", "gnmax", "confident-gnmax"),
    "noise-scale-too-small": ("lnmax", "gnmax", "confident-gnmax"),
    "threshold-without-noise": ("confident-gnmax",),
}

Aggregate = Callable[..., Aggregation]


def aggregate_noise_scale_too_small(
    votes: Any, config: AggregatorConfig, *, seed: int, factor: float = 10.0
) -> Aggregation:
    """The real aggregator with every noise scale divided by ``factor``; records the documented config.

    Args:
        votes: vote matrix ``(queries, classes)``.
        config: the documented aggregator config (what the claim states).
        seed: root seed, as for :func:`~defenses.pate.aggregators.aggregate`.
        factor: how much too small the noise is (> 1 for a bug).
    """
    f = v.positive("factor", factor)
    scaled: AggregatorConfig
    if isinstance(config, LNMaxConfig):
        scaled = dataclasses.replace(config, laplace_scale=config.laplace_scale / f)
    elif isinstance(config, GNMaxConfig):
        scaled = dataclasses.replace(config, sigma=config.sigma / f)
    elif isinstance(config, ConfidentGNMaxConfig):
        scaled = dataclasses.replace(config, sigma=config.sigma / f, threshold_sigma=config.threshold_sigma / f)
    else:
        raise v.invalid_type("config", f"config must be an aggregator config, got {type(config).__name__}")
    # The bug: the output says it used the documented scale.
    return dataclasses.replace(aggregate(votes, scaled, seed=seed), config=config)


def aggregate_threshold_without_noise(votes: Any, config: AggregatorConfig, *, seed: int) -> Aggregation:
    """Confident-GNMax whose threshold check is max_j n_j ≥ T with no noise; the GNMax step is the real one.

    Raises:
        ValueError: ``config`` is not a Confident-GNMax config (there is no threshold to forget).
    """
    if not isinstance(config, ConfidentGNMaxConfig):
        raise v.invalid(
            "planted_bug",
            "planted bug threshold-without-noise applies to confident-gnmax, got "
            f"aggregator {getattr(config, 'name', type(config).__name__)!r}",
        )
    real = aggregate(votes, config, seed=seed)
    arr = validate_votes(votes)
    answered = arr.max(axis=1) >= config.threshold
    labels = np.where(answered, np.argmax(arr + real.noise, axis=1), NOT_ANSWERED).astype(np.int64)
    zeros = np.zeros(arr.shape[0], dtype=np.float64)
    for a in (answered, labels, zeros):
        a.flags.writeable = False
    return dataclasses.replace(real, labels=labels, answered=answered, threshold_noise=zeros)


def planted_aggregator(bug: str, *, aggregator: str | None = None, factor: float = 10.0) -> Aggregate:
    """The aggregate function with planted bug ``bug`` (``none``: the real :func:`aggregate`).

    Args:
        bug: one of :data:`PLANTED_PATE_BUGS`.
        aggregator: when given, checked to be one the bug applies to.
        factor: the noise-scale factor of ``noise-scale-too-small``.

    Raises:
        ValueError: unknown bug, or one that does not apply to ``aggregator``.
    """
    v.choice("planted_bug", bug, PLANTED_PATE_BUGS)
    if aggregator is not None and aggregator not in _APPLIES_TO[bug]:
        raise v.invalid(
            "planted_bug",
            f"planted_bug {bug!r} applies to {', '.join(_APPLIES_TO[bug])}, got aggregator {aggregator!r}",
        )
    if bug == "noise-scale-too-small":
        f = v.positive("factor", factor)

        def scaled(votes: Any, config: AggregatorConfig, *, seed: int) -> Aggregation:
            return aggregate_noise_scale_too_small(votes, config, seed=seed, factor=f)

        return scaled
    if bug == "threshold-without-noise":
        return aggregate_threshold_without_noise
    return aggregate
