"""Disjoint teacher partitions of the private data, by sample id (Papernot et al. 2017, §2.1).

Each PATE teacher trains on its own partition, so changing one private example changes at
most one teacher and hence one vote: the sensitivity the aggregators' analysis rests on.
Partitions are drawn by sample id (not by position in some array) so that they can be
stored, reloaded and used as the membership ground truth of attacks against a teacher.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dpaudit import _validate as v
from dpaudit.seeding import numpy_rng

__all__ = ["partition_ids", "partitions_from_membership", "teacher_membership", "teacher_of"]


def partition_ids(ids: Any, *, num_teachers: int, seed: int) -> tuple[np.ndarray, ...]:
    """Cuts ``ids`` into ``num_teachers`` disjoint partitions of near-equal size.

    The ids are sorted, then permuted with the seeded stream ``("pate", "partition")`` and
    split into consecutive runs, so the result depends only on the set of ids, the number
    of teachers and the seed (not on the order the ids were given in).

    Args:
        ids: distinct non-negative integer sample ids of the private training set.
        num_teachers: n, between 1 and ``len(ids)`` (every teacher gets at least one id).
        seed: root seed of the permutation.

    Returns:
        ``num_teachers`` read-only, sorted int64 arrays; disjoint, covering ``ids``, sizes
        differing by at most one (the larger ones first).

    Raises:
        TypeError: non-integer ids, ``num_teachers`` or ``seed``.
        ValueError: duplicate or negative ids, ``num_teachers`` < 1 or > ``len(ids)``, or a
            negative seed.
    """
    pool = v.sorted_id_set("ids", ids)
    num_teachers = v.integer("num_teachers", num_teachers, minimum=1)
    if num_teachers > pool.size:
        raise v.invalid("num_teachers", f"num_teachers must be at most the number of ids ({pool.size}), got {num_teachers}")
    seed = v.integer("seed", seed, minimum=0)
    shuffled = numpy_rng(seed, "pate", "partition").permutation(pool)
    parts = []
    for chunk in np.array_split(shuffled, num_teachers):
        part = np.sort(chunk).astype(np.int64)
        part.flags.writeable = False
        parts.append(part)
    return tuple(parts)


def _check_partitions(partitions: Sequence[Any], name: str) -> tuple[np.ndarray, ...]:
    if isinstance(partitions, (str, bytes)) or not isinstance(partitions, Sequence):
        raise v.invalid_type(name, f"{name} must be a sequence of id arrays, got {type(partitions).__name__}")
    parts = tuple(v.sorted_id_set(f"{name}[{t}]", p) for t, p in enumerate(partitions))
    if parts:
        joined = np.concatenate(parts)
        uniq, counts = np.unique(joined, return_counts=True)
        if (counts > 1).any():
            dup = int(uniq[counts > 1][0])
            owners = [t for t, p in enumerate(parts) if np.isin(dup, p)]
            raise v.invalid(name, f"{name} must be disjoint, got id {dup} in teachers {owners}")
    return parts


def teacher_membership(partitions: Sequence[Any]) -> dict[str, list[int]]:
    """The JSON-able membership of every teacher: ``{"0": [ids…], "1": […], …}``.

    Keys are decimal teacher indices (strings, so a JSON round trip returns the same
    mapping); values are the teacher's sorted sample ids as plain ints.

    Args:
        partitions: one id array per teacher, e.g. from :func:`partition_ids`.

    Raises:
        TypeError: ``partitions`` is not a sequence of integer id arrays.
        ValueError: duplicate ids within or across teachers, or negative ids.
    """
    parts = _check_partitions(partitions, "partitions")
    return {str(t): p.tolist() for t, p in enumerate(parts)}


def partitions_from_membership(membership: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
    """The inverse of :func:`teacher_membership` (e.g. after reading it back from JSON).

    Args:
        membership: mapping from teacher index (``"0"`` … ``"n-1"``, every one present) to
            its sample ids.

    Returns:
        One read-only, sorted int64 array per teacher, in teacher order.

    Raises:
        ValueError: keys are not exactly ``"0"`` … ``"n-1"``, or the partitions overlap.
    """
    if not isinstance(membership, Mapping):
        raise v.invalid_type("membership", f"membership must be a mapping, got {type(membership).__name__}")
    expected = [str(t) for t in range(len(membership))]
    if sorted(membership, key=str) != sorted(expected) or any(not isinstance(k, str) for k in membership):
        raise v.invalid("membership", f"membership keys must be the teacher indices '0'..'{len(membership) - 1}', got {sorted(map(str, membership))[:5]}")
    return _check_partitions([membership[k] for k in expected], "membership")


def teacher_of(partitions: Sequence[Any], ids: Any) -> np.ndarray:
    """The teacher that trained on each of ``ids`` (−1 for ids no teacher saw).

    Args:
        partitions: one id array per teacher (disjoint).
        ids: integer sample ids to look up.

    Returns:
        A read-only int64 array of the same length as ``ids``.
    """
    parts = _check_partitions(partitions, "partitions")
    query = v.id_array("ids", ids)
    out = np.full(query.shape, -1, dtype=np.int64)
    for t, p in enumerate(parts):
        out[np.isin(query, p)] = t
    out.flags.writeable = False
    return out
