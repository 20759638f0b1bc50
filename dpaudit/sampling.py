"""Sampling that respects add/remove-one: each record's coin depends on (the step's key, its sample id) alone.

DP-SGD's lots (Abadi et al. 2016, §3.1) and DP-PCA's sample include each record independently
with probability q. Drawing those coins positionally (``rand(N) < q``) gives the right law, but
removing one record shifts every later record's coin, so D and a neighbour D′ trained with the
same seed draw unrelated lots; the neighbouring replay (docs/audits/replay.md) could then not
compare them step by step. Here each step draws one 64-bit key from its generator, and a record's
uniform is a keyed hash of its sample id (SplitMix64's output function): the same independent
Bernoulli(q) per record per step, and the same coins for every record D and D′ share.

In the core so that every trainer of lots draws them the same way: the one DP-SGD loop
(:mod:`defenses.dpsgd.training`, which imports it from :mod:`defenses.dpsgd.sampling`) and the
batched trainer (:mod:`dpaudit.batched`), whose models must draw exactly the lots their
separate runs would.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["keyed_uniforms", "poisson_lot", "step_key"]


def step_key(generator: torch.Generator) -> int:
    """One uniform 64-bit key from ``generator`` (one draw)."""
    return int(torch.randint(-(2**63), 2**63 - 1, (1,), dtype=torch.int64, generator=generator)) % 2**64


# SplitMix64's constants (Steele, Lea & Flood 2014, "Fast splittable pseudorandom number generators").
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def keyed_uniforms(key: int | np.ndarray, ids: np.ndarray) -> np.ndarray:
    """One uniform in [0, 1) per id, a function of (``key``, id) alone: SplitMix64's output function.

    Each id's value ignores every other id, so adding or removing a record leaves the others'
    values unchanged; distinct ids give independent-looking uniforms (SplitMix64 passes BigCrush).
    ``key`` may be a uint64 array that broadcasts against ``ids`` (k keys of shape (k, 1) give a
    (k, N) array: the batched trainer's k models' coins in one call, each row what its own key gives).
    """
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps modulo 2**64 by design
        z = np.uint64(key) + (np.asarray(ids, dtype=np.int64).astype(np.uint64) + np.uint64(1)) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def poisson_lot(
    members: int | np.ndarray | torch.Tensor, sampling_rate: float, *, generator: torch.Generator
) -> torch.Tensor:
    """Positions of one Poisson lot: each member included independently with probability q.

    Args:
        members: the members' sample ids (or a count N, for ids 0..N-1).
        sampling_rate: q.
        generator: draws this step's 64-bit key (one draw per call).

    Returns:
        The positions (indices into ``members``) in the lot, ascending.

    A member's coin at a step depends only on the step's key and its own sample id, never on its
    position, so D and a neighbour D ± one record draw the same lots up to that record under the
    same seed (the neighbouring replay, docs/audits/replay.md, checks this). Positional coins
    (``rand(N) < q``) would shift every later member's coin when one record is removed.
    """
    ids = (
        np.arange(members, dtype=np.int64)
        if isinstance(members, int)
        else np.asarray(members, dtype=np.int64).reshape(-1)
    )
    return torch.from_numpy(np.flatnonzero(keyed_uniforms(step_key(generator), ids) < sampling_rate))
