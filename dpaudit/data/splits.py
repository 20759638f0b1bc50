"""Membership splits: which training ids a target model saw, which it did not, and the rest.

:func:`make_splits` draws the members / non-members / population split of the training set
used by membership-inference attacks with shadow or reference models (Shokri et al. 2017,
§V; Carlini et al. 2022, "Membership Inference Attacks From First Principles", §IV; Ye et al.
2022, "Enhanced Membership Inference Attacks", §3 for the population data). Splits are kept
apart from loading: they depend only on a bundle's ids.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from dpaudit import _validate as v
from dpaudit.data.containers import DatasetBundle
from dpaudit.specs import PlainSpec

__all__ = ["SPLITS_SCHEMA_VERSION", "Splits", "make_splits"]

SPLITS_SCHEMA_VERSION = 1
_SPLIT_FIELDS = ("members", "non_members", "population", "test")


@dataclass(frozen=True, kw_only=True, eq=False)
class Splits(PlainSpec):
    """Membership ground truth over a dataset's sample ids.

    ``members`` train the target model; ``non_members`` are held out from it and serve as
    the "out" side of a membership game; ``population`` is the rest of the training split,
    never seen by the target, for shadow / reference models; ``test`` is the test split.
    Arrays are sorted, read-only int64. Equality compares all fields.

    Attributes:
        dataset: the dataset name.
        seed: the seed the split was drawn with.
        members: ids of the target's training members.
        non_members: held-out ids from the same distribution.
        population: remaining training ids, for shadow / reference models.
        test: ids of the test split.

    Raises:
        TypeError: ids are not integers, or ``seed`` not an integer.
        ValueError: ids repeat, are negative, or two sets share an id.
    """

    #: Stored first (:class:`~dpaudit.specs.PlainSpec`); a stored version must equal it.
    __spec_keys__: ClassVar[tuple[str, ...]] = ("schema_version",)
    schema_version: ClassVar[int] = SPLITS_SCHEMA_VERSION

    dataset: str
    seed: int
    members: np.ndarray
    non_members: np.ndarray
    population: np.ndarray
    test: np.ndarray

    def __post_init__(self) -> None:
        if not isinstance(self.dataset, str) or not self.dataset:
            raise v.invalid_type("dataset", f"dataset must be a non-empty string, got {self.dataset!r}")
        object.__setattr__(self, "seed", v.integer("seed", self.seed, minimum=0))
        for name in _SPLIT_FIELDS:
            object.__setattr__(self, name, v.sorted_id_set(name, getattr(self, name)))
        for i, a in enumerate(_SPLIT_FIELDS):
            for b in _SPLIT_FIELDS[i + 1 :]:
                overlap = np.intersect1d(getattr(self, a), getattr(self, b))
                if overlap.size:
                    raise v.invalid(
                        a, f"{a} and {b} must be disjoint, but share {overlap.size} ids, e.g. {int(overlap[0])}"
                    )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Splits):
            return NotImplemented
        return (
            self.dataset == other.dataset
            and self.seed == other.seed
            and all(np.array_equal(getattr(self, f), getattr(other, f)) for f in _SPLIT_FIELDS)
        )

    __hash__ = None  # type: ignore[assignment]


def make_splits(
    bundle: DatasetBundle,
    *,
    seed: int,
    member_fraction: float = 0.5,
    non_member_fraction: float = 0.25,
    num_members: int | None = None,
    num_non_members: int | None = None,
) -> Splits:
    """Draws members, non-members and population from a bundle's training ids.

    A permutation of the training ids from ``np.random.default_rng(seed)`` is cut into
    members, non-members and the rest (population), so the split is a deterministic function
    of ``seed`` (pass a component stream, e.g. ``seeding.derive_seed(root, "splits")``).
    Counts are ``floor(fraction * N)`` unless given explicitly.

    Args:
        bundle: the dataset.
        seed: non-negative integer seed.
        member_fraction: share of training ids that are members, in (0, 1].
        non_member_fraction: share of training ids that are non-members, in [0, 1).
        num_members: number of members (overrides ``member_fraction``), >= 1.
        num_non_members: number of non-members (overrides ``non_member_fraction``), >= 0.

    Returns:
        The :class:`Splits`; ``test`` holds every test id.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: a fraction or count is out of range, or members and non-members together
            exceed the training set.
    """
    if not isinstance(bundle, DatasetBundle):
        raise v.invalid_type("bundle", f"bundle must be a DatasetBundle, got {type(bundle).__name__}")
    seed = v.integer("seed", seed, minimum=0)
    train_ids = bundle.train.ids.numpy()
    n = train_ids.size
    if num_members is None:
        member_fraction = v.half_open_unit("member_fraction", member_fraction)
        num_members = int(math.floor(member_fraction * n))
        if num_members < 1:
            raise v.invalid(
                "member_fraction", f"member_fraction={member_fraction!r} of {n} training samples selects no members"
            )
    else:
        num_members = v.integer("num_members", num_members, minimum=1)
    if num_non_members is None:
        non_member_fraction = v.real("non_member_fraction", non_member_fraction)
        if not 0.0 <= non_member_fraction < 1.0:
            raise v.invalid(
                "non_member_fraction", f"non_member_fraction must lie in [0, 1), got {non_member_fraction!r}"
            )
        num_non_members = int(math.floor(non_member_fraction * n))
    else:
        num_non_members = v.integer("num_non_members", num_non_members, minimum=0)
    if num_members > n:
        raise v.invalid(
            "num_members", f"num_members must be <= {n} (the training set of {bundle.name!r}), got {num_members}"
        )
    if num_members + num_non_members > n:
        raise v.invalid(
            "num_members",
            f"num_members + num_non_members must be <= {n} (the training set of {bundle.name!r}), got "
            f"{num_members} + {num_non_members} (member_fraction={member_fraction!r}, "
            f"non_member_fraction={non_member_fraction!r})",
        )
    perm = np.random.default_rng(seed).permutation(train_ids)
    return Splits(
        dataset=bundle.name,
        seed=seed,
        members=perm[:num_members],
        non_members=perm[num_members : num_members + num_non_members],
        population=perm[num_members + num_non_members :],
        test=bundle.test.ids.numpy(),
    )
