"""In-memory datasets whose samples carry stable integer ids, and a dataset's train/test bundle.

Every sample carries an integer *id*, unique across the train and test splits of a bundle
(train ``0..N-1``, test ``N..N+M-1``); membership ground truth is expressed in ids (see
:mod:`dpaudit.data.splits`).
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dpaudit import _validate as v

__all__ = ["ArrayDataset", "DatasetBundle", "concat", "make_bundle"]


class ArrayDataset(torch.utils.data.Dataset):
    """An in-memory labelled dataset whose samples carry stable integer ids.

    ``ds[i]`` is ``(features[i], labels[i])`` so that any standard PyTorch training loop or
    ``DataLoader`` works on it; :meth:`subset` selects by sample id, not position.

    The tensors are shared, not copied, by :func:`load_dataset` and by every caller of a
    cached bundle: treat them as read-only.

    Args:
        name: the dataset's name (``"mnist"``, ``"mnist/train"``, ...).
        features: float32 values in ``[0, 1]``, shape ``(n, *input_shape)``.
        labels: int64 class labels in ``[0, num_classes)``, shape ``(n,)``.
        ids: int64 sample ids, unique, shape ``(n,)``.
        num_classes: the number of classes.

    Raises:
        TypeError: a tensor has the wrong dtype, or an argument the wrong type.
        ValueError: shapes disagree, values are out of range, or ids repeat.
    """

    __slots__ = ("_name", "_features", "_labels", "_ids", "_num_classes", "_id_index")

    def __init__(
        self,
        *,
        name: str,
        features: torch.Tensor | np.ndarray,
        labels: torch.Tensor | np.ndarray | Sequence[int],
        ids: torch.Tensor | np.ndarray | Sequence[int],
        num_classes: int,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise v.invalid_type("name", f"name must be a non-empty string, got {name!r}")
        num_classes = v.integer("num_classes", num_classes, minimum=1)
        features = torch.as_tensor(features)
        if features.dtype != torch.float32:
            raise v.invalid_type("features", f"features must be float32, got {features.dtype}")
        if features.ndim < 2:
            raise v.invalid("features", f"features must have shape (n, *input_shape), got {tuple(features.shape)}")
        n = features.shape[0]
        if n and features.numel():
            lo, hi = torch.aminmax(features)
            # NaN fails both comparisons, so this also rejects NaN (and ±inf).
            if not (float(lo) >= 0.0 and float(hi) <= 1.0):
                raise v.invalid("features", f"features must lie in [0, 1], got range [{float(lo)}, {float(hi)}]")
        labels_t = torch.as_tensor(np.asarray(labels) if not isinstance(labels, torch.Tensor) else labels)
        if labels_t.dtype != torch.int64:
            if labels_t.is_floating_point() or labels_t.dtype == torch.bool or labels_t.is_complex():
                raise v.invalid_type("labels", f"labels must be integers, got {labels_t.dtype}")
            labels_t = labels_t.to(torch.int64)
        if tuple(labels_t.shape) != (n,):
            raise v.invalid("labels", f"labels must have shape ({n},), got {tuple(labels_t.shape)}")
        if n and (int(labels_t.min()) < 0 or int(labels_t.max()) >= num_classes):
            raise v.invalid(
                "labels",
                f"labels must lie in [0, {num_classes}), got range [{int(labels_t.min())}, {int(labels_t.max())}]",
            )
        ids_np = v.id_array("ids", ids)
        if ids_np.shape != (n,):
            raise v.invalid("ids", f"ids must have shape ({n},), got {ids_np.shape}")
        if not v.all_unique(ids_np):
            raise v.invalid("ids", "ids must be unique")
        self._name = name
        self._features = features
        self._labels = labels_t
        self._ids = torch.from_numpy(ids_np.copy())
        self._num_classes = num_classes
        self._id_index: tuple[np.ndarray, np.ndarray] | None = None

    def __setattr__(self, key: str, value: Any) -> None:
        if key in ArrayDataset.__slots__ and not hasattr(self, key):
            object.__setattr__(self, key, value)
        elif key == "_id_index":  # lazily built lookup table, not part of the value
            object.__setattr__(self, key, value)
        else:
            raise AttributeError(f"ArrayDataset is immutable; cannot set {key!r}")

    # -- value
    @property
    def name(self) -> str:
        return self._name

    @property
    def features(self) -> torch.Tensor:
        """float32 ``(n, *input_shape)`` in ``[0, 1]``; shared, do not modify in place."""
        return self._features

    @property
    def labels(self) -> torch.Tensor:
        """int64 ``(n,)``; shared, do not modify in place."""
        return self._labels

    @property
    def ids(self) -> torch.Tensor:
        """int64 ``(n,)`` sample ids; shared, do not modify in place."""
        return self._ids

    @property
    def num_classes(self) -> int:
        return self._num_classes

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(int(s) for s in self._features.shape[1:])

    # -- Dataset protocol
    def __len__(self) -> int:
        return int(self._features.shape[0])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(index, bool) or not isinstance(index, (numbers.Integral, torch.Tensor)):
            raise v.invalid_type("index", f"index must be an integer position, got {index!r}")
        i = int(index)
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for dataset of length {n}")
        return self._features[i], self._labels[i]

    def __repr__(self) -> str:
        return (
            f"ArrayDataset(name={self._name!r}, n={len(self)}, "
            f"input_shape={self.input_shape}, num_classes={self._num_classes})"
        )

    # -- selection
    def positions(self, ids: Iterable[int] | np.ndarray | torch.Tensor) -> np.ndarray:
        """Positions (row indices) of the given sample ids, in the given order.

        Args:
            ids: sample ids present in this dataset.

        Returns:
            int64 positions, one per id.

        Raises:
            TypeError: ``ids`` are not integers.
            ValueError: an id is not in this dataset.
        """
        if isinstance(ids, Iterable) and not isinstance(ids, (np.ndarray, torch.Tensor, Sequence, str, bytes)):
            ids = list(ids)  # generators, sets, dict views
        wanted = v.id_array("ids", ids)
        if self._id_index is None:
            own = self._ids.numpy()
            order = np.argsort(own, kind="stable")
            self._id_index = (own[order], order)
        sorted_ids, order = self._id_index
        if sorted_ids.size == 0:
            if wanted.size:
                raise v.invalid(
                    "ids", f"ids: sample id {int(wanted[0])} is not in dataset {self._name!r} (it is empty)"
                )
            return np.zeros(0, dtype=np.int64)
        where = np.searchsorted(sorted_ids, wanted)
        where = np.minimum(where, sorted_ids.size - 1)
        missing = sorted_ids[where] != wanted
        if missing.any():
            bad = wanted[missing]
            raise v.invalid(
                "ids",
                f"ids: sample id {int(bad[0])} is not in dataset {self._name!r}"
                + (f" ({bad.size} unknown ids in all)" if bad.size > 1 else "")
                + f"; its ids span [{int(sorted_ids[0])}, {int(sorted_ids[-1])}]",
            )
        return order[where].astype(np.int64, copy=False)

    def subset(self, ids: Iterable[int] | np.ndarray | torch.Tensor, *, name: str | None = None) -> ArrayDataset:
        """The samples with the given ids, in the given order.

        Args:
            ids: sample ids present in this dataset, without repeats.
            name: name of the result (defaults to this dataset's name).

        Returns:
            A new ``ArrayDataset`` (its tensors are copies).

        Raises:
            TypeError: ``ids`` are not integers.
            ValueError: an id is unknown or repeated.
        """
        pos = self.positions(ids)
        if not v.all_unique(pos):
            raise v.invalid("ids", "ids must not repeat a sample id")
        index = torch.from_numpy(pos)
        return ArrayDataset(
            name=name or self._name,
            features=self._features.index_select(0, index),
            labels=self._labels.index_select(0, index),
            ids=self._ids.index_select(0, index),
            num_classes=self._num_classes,
        )


def concat(name: str, parts: Sequence[ArrayDataset]) -> ArrayDataset:
    """The datasets in ``parts`` one after another, as one dataset called ``name`` (ids must stay unique)."""
    return ArrayDataset(
        name=name,
        features=torch.cat([p.features for p in parts]),
        labels=torch.cat([p.labels for p in parts]),
        ids=torch.cat([p.ids for p in parts]),
        num_classes=parts[0].num_classes,
    )


@dataclass(frozen=True, kw_only=True, eq=False)
class DatasetBundle:
    """A dataset's train and test splits with the facts attacks and defenses need.

    Sample ids are unique across both splits: train ids ``0..N-1``, test ids ``N..N+M-1``.

    Attributes:
        name: one of :data:`DATASETS`.
        train: the training split.
        test: the test split.
        num_classes: number of classes.
        input_shape: shape of one sample (``(C, H, W)`` for images, ``(d,)`` for tables).
        description: where the data came from and how it was prepared.
    """

    name: str
    train: ArrayDataset
    test: ArrayDataset
    num_classes: int
    input_shape: tuple[int, ...]
    description: str
    _all: list[ArrayDataset] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            ds = getattr(self, split)
            if not isinstance(ds, ArrayDataset):
                raise TypeError(f"{split} must be an ArrayDataset, got {type(ds).__name__}")
            if ds.num_classes != self.num_classes:
                raise ValueError(f"{split}.num_classes is {ds.num_classes}, bundle says {self.num_classes}")
            if ds.input_shape != tuple(self.input_shape):
                raise ValueError(f"{split}.input_shape is {ds.input_shape}, bundle says {tuple(self.input_shape)}")
        object.__setattr__(self, "input_shape", tuple(int(s) for s in self.input_shape))
        tr, te = self.train.ids.numpy(), self.test.ids.numpy()
        separated = not tr.size or not te.size or tr.max() < te.min() or te.max() < tr.min()
        if not separated and np.intersect1d(tr, te).size:
            raise v.invalid("train", "train and test share sample ids")

    def all(self) -> ArrayDataset:
        """Train and test concatenated (train first), for :meth:`ArrayDataset.subset` by any id."""
        if not self._all:
            self._all.append(concat(self.name, [self.train, self.test]))
        return self._all[0]


def make_bundle(
    name: str,
    *,
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    num_classes: int,
    description: str,
) -> DatasetBundle:
    """A bundle from a source's decoded arrays, numbering train ids ``0..N-1`` and test ids ``N..N+M-1``.

    Args:
        name: the dataset's registered name.
        x_train: float32 training features in ``[0, 1]``.
        y_train: int64 training labels.
        x_test: float32 test features in ``[0, 1]``.
        y_test: int64 test labels.
        num_classes: number of classes.
        description: where the data came from and how it was prepared.

    Returns:
        The :class:`DatasetBundle`.

    Raises:
        TypeError, ValueError: as :class:`ArrayDataset` and :class:`DatasetBundle` do.
    """
    n_train, n_test = int(x_train.shape[0]), int(x_test.shape[0])
    train = ArrayDataset(
        name=f"{name}/train",
        features=x_train,
        labels=y_train,
        ids=np.arange(n_train, dtype=np.int64),
        num_classes=num_classes,
    )
    test = ArrayDataset(
        name=f"{name}/test",
        features=x_test,
        labels=y_test,
        ids=np.arange(n_train, n_train + n_test, dtype=np.int64),
        num_classes=num_classes,
    )
    return DatasetBundle(
        name=name,
        train=train,
        test=test,
        num_classes=num_classes,
        input_shape=train.input_shape,
        description=description,
    )
