"""Disjoint teacher partitions of the private data, by sample id (Papernot et al. 2017, §2.1).

Each PATE teacher trains on its own partition, so changing one private example changes at
most one teacher and hence one vote: the sensitivity the aggregators' analysis rests on.
Partitions are drawn by sample id (not by position in some array) so that they can be
stored, reloaded and used as the membership ground truth of attacks against a teacher, and each
id's teacher is a keyed hash of the id alone (:func:`assign_teachers`), so that adding or
removing one record changes one partition, as the claim's neighbouring relation requires.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dpaudit import _validate as v
from dpaudit.seeding import derive_seed

__all__ = [
    "assign_teachers",
    "partition_ids",
    "partition_key",
    "partitions_from_membership",
    "teacher_membership",
    "teacher_of",
]


#: SplitMix64's constants (Steele, Lea and Flood 2014, "Fast splittable pseudorandom number generators").
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on uint64 (wrapping arithmetic): a bijection that mixes every bit."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def partition_key(seed: int) -> int:
    """The 63-bit key of the teacher assignment, derived from the root ``seed`` (stream ``("pate", "partition")``)."""
    return derive_seed(v.integer("seed", seed, minimum=0), "pate", "partition")


def assign_teachers(ids: Any, *, num_teachers: int, seed: int) -> np.ndarray:
    """The teacher of each id: a keyed hash of (key, id) modulo ``num_teachers``.

    ``teacher(id) = SplitMix64(SplitMix64(id) XOR key) mod n`` with ``key`` =
    :func:`partition_key` ``(seed)``. It depends on the id, the key and n only, never on the
    other ids: adding or removing one record changes exactly one teacher's training set, the
    neighbouring relation (``add_or_remove_one``) the aggregators' analysis assumes (one vote
    moves). Without the key the assignment is not predictable from the ids alone.

    Args:
        ids: non-negative integer sample ids (any order; duplicates allowed here).
        num_teachers: n ≥ 1.
        seed: root seed of the key.

    Returns:
        A read-only int64 array of teacher indices in ``[0, n)``, one per id.
    """
    query = v.id_array("ids", ids)
    if query.size and query.min() < 0:
        raise v.invalid("ids", f"ids must hold non-negative sample ids, got {int(query.min())}")
    n = v.integer("num_teachers", num_teachers, minimum=1)
    key = np.uint64(partition_key(seed))
    hashed = _splitmix64(_splitmix64(query.astype(np.uint64)) ^ key)
    out = (hashed % np.uint64(n)).astype(np.int64)
    out.flags.writeable = False
    return out


def partition_ids(ids: Any, *, num_teachers: int, seed: int) -> tuple[np.ndarray, ...]:
    """Cuts ``ids`` into ``num_teachers`` disjoint partitions, each id by a keyed hash of itself.

    Each id goes to teacher :func:`assign_teachers` (a keyed SplitMix64 hash of the id modulo
    n, the key derived from ``seed``), so a record's teacher depends only on (key, id, n): a
    neighbouring data set (one record added or removed) changes exactly one partition, by that
    record. Cutting a seeded permutation of the sorted ids into consecutive runs, as this
    function did before, gives equal sizes but moves every cut when one id leaves (on 1,000 ids
    and 50 teachers, removing one id changed all 50 partitions; docs/defenses/pate.md).

    The price is balance: the sizes are multinomial (mean len(ids)/n, standard deviation about
    its square root) rather than equal, which PATE's analysis does not need (it rests on each
    record being seen by one teacher, not on equal partitions).

    Args:
        ids: distinct non-negative integer sample ids of the private training set.
        num_teachers: n, between 1 and ``len(ids)``; every teacher must receive at least one id.
        seed: root seed of the hash key.

    Returns:
        ``num_teachers`` read-only, sorted int64 arrays; disjoint and covering ``ids``. The
        result does not depend on the order the ids were given in.

    Raises:
        TypeError: non-integer ids, ``num_teachers`` or ``seed``.
        ValueError: duplicate or negative ids, ``num_teachers`` < 1 or > ``len(ids)``, a negative
            seed, or a teacher that the hash gives no id (too many teachers for the ids).
    """
    pool = v.sorted_id_set("ids", ids)
    num_teachers = v.integer("num_teachers", num_teachers, minimum=1)
    if num_teachers > pool.size:
        raise v.invalid(
            "num_teachers", f"num_teachers must be at most the number of ids ({pool.size}), got {num_teachers}"
        )
    seed = v.integer("seed", seed, minimum=0)
    owner = assign_teachers(pool, num_teachers=num_teachers, seed=seed)
    sizes = np.bincount(owner, minlength=num_teachers)
    if (sizes == 0).any():
        empty = int(np.flatnonzero(sizes == 0)[0])
        raise v.invalid(
            "num_teachers",
            f"num_teachers={num_teachers}: the keyed hash of seed {seed} gives "
            f"teacher {empty} none of the {pool.size} ids "
            f"({int((sizes == 0).sum())} teachers empty); use fewer teachers (a "
            f"teacher's expected share is {pool.size / num_teachers:.3g} ids)",
        )
    parts = []
    for t in range(num_teachers):
        part = pool[owner == t].astype(np.int64)  # pool is sorted, so each part is too
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


def partitions_from_membership(membership: Mapping[str, object]) -> tuple[np.ndarray, ...]:
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
        raise v.invalid(
            "membership",
            "membership keys must be the teacher indices "
            f"'0'..'{len(membership) - 1}', got {sorted(map(str, membership))[:5]}",
        )
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
