"""Datasets and membership splits: the data every defense trains on and every attack scores.

The data layer reads canonical copies of the benchmark datasets from a *data root*
(``--data-root`` / ``$DPAUDIT_DATA_ROOT`` / ``~/.dpaudit/data``), never touches the network
unless asked (``download=True``), and falls back to scikit-learn's bundled 8×8 digits, which
always works offline (DESIGN.md, "Data").

Datasets (``DATASETS``):

* ``digits`` — UCI optical digits as bundled by scikit-learn, (1, 8, 8), 10 classes.
* ``mnist`` — LeCun, Bottou, Bengio & Haffner (1998), IDX files read through
  ``torchvision.datasets.MNIST``; (1, 28, 28), 60,000 / 10,000.
* ``fashion-mnist`` — Xiao, Rasul & Vollgraf (2017), same format and sizes.
* ``cifar10`` — Krizhevsky (2009), the python batches, read with a restricted unpickler
  (torchvision's loader calls ``pickle.load`` on them, and DESIGN.md "Style" forbids pickle
  for anything a user may have received from someone else); (3, 32, 32), 50,000 / 10,000.
* ``faces`` — AT&T / ORL faces (Samaria & Harter 1994), the model-inversion target of
  Fredrikson, Jha & Ristenpart (2015, §5); (1, 112, 92), 40 identities, images 1–7 of each
  identity train and 8–10 test; the 64×64 Olivetti arrays are a fallback.
* ``adult`` — UCI Adult / census income (Kohavi 1996): one-hot categoricals, min-max scaled
  numerics, label ``income > 50K``.

Every sample carries an integer *id*, unique across the train and test splits of a bundle
(train ``0..N-1``, test ``N..N+M-1``); membership ground truth is expressed in ids.
:func:`make_splits` draws the members / non-members / population split of the training set
used by membership-inference attacks with shadow or reference models (Shokri et al. 2017,
§V; Carlini et al. 2022, "Membership Inference Attacks From First Principles", §IV; Ye et al.
2022, "Enhanced Membership Inference Attacks", §3 for the population data).

Loaded datasets are cached in process; the tensors of a returned dataset are shared between
callers and must not be modified in place (copy them first, e.g. ``x = ds.features.clone()``).
"""

from __future__ import annotations

import functools
import gzip
import math
import numbers
import os
import pickle
import shutil
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpaudit import _validate as v
from dpaudit._validate import sorted_id_set
from dpaudit.store import temp_file_beside

__all__ = [
    "sorted_id_set",
    "DATASETS",
    "DATA_ROOT_ENV",
    "CACHE_ENV",
    "ArrayDataset",
    "DatasetBundle",
    "DatasetInfo",
    "DatasetNotFoundError",
    "Splits",
    "clear_cache",
    "dataset_info",
    "load_dataset",
    "make_splits",
    "resolve_data_root",
]

DATASETS: tuple[str, ...] = ("digits", "mnist", "fashion-mnist", "cifar10", "faces", "adult")
DATA_ROOT_ENV = "DPAUDIT_DATA_ROOT"
CACHE_ENV = "DPAUDIT_CACHE"
SPLITS_SCHEMA_VERSION = 1

_DEFAULT_DATA_ROOT = Path("~/.dpaudit/data")
_SPLIT_FIELDS = ("members", "non_members", "population", "test")


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are not under the data root (and were not, or could not be, downloaded)."""


# ----------------------------------------------------------------------------- paths


def _as_path(name: str, value: Any) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {value!r}")
    text = os.fspath(value)
    if isinstance(text, bytes):
        raise TypeError(f"{name} must be a text path, got {value!r}")
    if not text.strip():
        raise ValueError(f"{name} must be a non-empty path, got {value!r}")
    return Path(os.path.abspath(os.path.expanduser(text)))


def resolve_data_root(data_root: str | os.PathLike[str] | None = None) -> Path:
    """The data root to read datasets from.

    Args:
        data_root: an explicit root; wins over the environment.

    Returns:
        ``data_root`` if given, else ``$DPAUDIT_DATA_ROOT`` if set and non-empty, else
        ``~/.dpaudit/data`` — as an absolute path (the directory need not exist).

    Raises:
        TypeError: ``data_root`` is not a path.
        ValueError: ``data_root`` is an empty string.
    """
    if data_root is not None:
        return _as_path("data_root", data_root)
    env = os.environ.get(DATA_ROOT_ENV, "").strip()
    if env:
        return _as_path(DATA_ROOT_ENV, env)
    return _as_path("data_root", _DEFAULT_DATA_ROOT)


def _cache_dir() -> Path:
    """Where decompressed copies go: ``$DPAUDIT_CACHE``, else ``$XDG_CACHE_HOME/dpaudit``, else ``~/.cache/dpaudit``."""
    env = os.environ.get(CACHE_ENV, "").strip()
    if env:
        return _as_path(CACHE_ENV, env)
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    base = Path(xdg) if xdg else Path("~/.cache")
    return _as_path(CACHE_ENV, base / "dpaudit")


def _not_found(name: str, root: Path, expected: str, *, download: bool = False) -> DatasetNotFoundError:
    msg = f"dataset {name!r} not found under data root {root}: expected {expected}"
    msg += f"; set {DATA_ROOT_ENV} or pass --data-root"
    if download:
        msg += " (download=True was given)"
    return DatasetNotFoundError(msg)


# ----------------------------------------------------------------------------- containers


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
            raise TypeError(f"name must be a non-empty string, got {name!r}")
        num_classes = v.integer("num_classes", num_classes, minimum=1)
        features = torch.as_tensor(features)
        if features.dtype != torch.float32:
            raise TypeError(f"features must be float32, got {features.dtype}")
        if features.ndim < 2:
            raise ValueError(f"features must have shape (n, *input_shape), got {tuple(features.shape)}")
        n = features.shape[0]
        if n and features.numel():
            lo, hi = torch.aminmax(features)
            # NaN fails both comparisons, so this also rejects NaN (and ±inf).
            if not (float(lo) >= 0.0 and float(hi) <= 1.0):
                raise ValueError(f"features must lie in [0, 1], got range [{float(lo)}, {float(hi)}]")
        labels_t = torch.as_tensor(np.asarray(labels) if not isinstance(labels, torch.Tensor) else labels)
        if labels_t.dtype != torch.int64:
            if labels_t.is_floating_point() or labels_t.dtype == torch.bool or labels_t.is_complex():
                raise TypeError(f"labels must be integers, got {labels_t.dtype}")
            labels_t = labels_t.to(torch.int64)
        if tuple(labels_t.shape) != (n,):
            raise ValueError(f"labels must have shape ({n},), got {tuple(labels_t.shape)}")
        if n and (int(labels_t.min()) < 0 or int(labels_t.max()) >= num_classes):
            raise ValueError(f"labels must lie in [0, {num_classes}), got range [{int(labels_t.min())}, {int(labels_t.max())}]")
        ids_np = v.id_array("ids", ids)
        if ids_np.shape != (n,):
            raise ValueError(f"ids must have shape ({n},), got {ids_np.shape}")
        if not v.all_unique(ids_np):
            raise ValueError("ids must be unique")
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
            raise TypeError(f"index must be an integer position, got {index!r}")
        i = int(index)
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for dataset of length {n}")
        return self._features[i], self._labels[i]

    def __repr__(self) -> str:
        return f"ArrayDataset(name={self._name!r}, n={len(self)}, input_shape={self.input_shape}, num_classes={self._num_classes})"

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
                raise ValueError(f"ids: sample id {int(wanted[0])} is not in dataset {self._name!r} (it is empty)")
            return np.zeros(0, dtype=np.int64)
        where = np.searchsorted(sorted_ids, wanted)
        where = np.minimum(where, sorted_ids.size - 1)
        missing = sorted_ids[where] != wanted
        if missing.any():
            bad = wanted[missing]
            raise ValueError(
                f"ids: sample id {int(bad[0])} is not in dataset {self._name!r}"
                + (f" ({bad.size} unknown ids in all)" if bad.size > 1 else "")
                + f"; its ids span [{int(sorted_ids[0])}, {int(sorted_ids[-1])}]"
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
            raise ValueError("ids must not repeat a sample id")
        index = torch.from_numpy(pos)
        return ArrayDataset(
            name=name or self._name,
            features=self._features.index_select(0, index),
            labels=self._labels.index_select(0, index),
            ids=self._ids.index_select(0, index),
            num_classes=self._num_classes,
        )


def _concat(name: str, parts: Sequence[ArrayDataset]) -> ArrayDataset:
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
            raise ValueError("train and test share sample ids")

    def all(self) -> ArrayDataset:
        """Train and test concatenated (train first), for :meth:`ArrayDataset.subset` by any id."""
        if not self._all:
            self._all.append(_concat(self.name, [self.train, self.test]))
        return self._all[0]


def _bundle(
    name: str,
    *,
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_test: torch.Tensor,
    y_test: torch.Tensor,
    num_classes: int,
    description: str,
) -> DatasetBundle:
    n_train, n_test = int(x_train.shape[0]), int(x_test.shape[0])
    train = ArrayDataset(name=f"{name}/train", features=x_train, labels=y_train, ids=np.arange(n_train, dtype=np.int64), num_classes=num_classes)
    test = ArrayDataset(
        name=f"{name}/test",
        features=x_test,
        labels=y_test,
        ids=np.arange(n_train, n_train + n_test, dtype=np.int64),
        num_classes=num_classes,
    )
    return DatasetBundle(name=name, train=train, test=test, num_classes=num_classes, input_shape=train.input_shape, description=description)


# ----------------------------------------------------------------------------- digits

_DIGITS_SEED = 0
_DIGITS_TRAIN_FRACTION = 0.8


def _load_digits() -> DatasetBundle:
    from sklearn.datasets import load_digits

    raw = load_digits()
    x = torch.from_numpy((raw.data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8))
    y = torch.from_numpy(raw.target.astype(np.int64))
    # A fixed permutation, independent of any user seed, so the train/test split is part of
    # the dataset's definition and sample ids mean the same thing in every run.
    perm = np.random.default_rng(_DIGITS_SEED).permutation(len(y))
    n_train = int(math.floor(_DIGITS_TRAIN_FRACTION * len(y)))
    tr, te = torch.from_numpy(perm[:n_train]), torch.from_numpy(perm[n_train:])
    return _bundle(
        "digits",
        x_train=x[tr].contiguous(),
        y_train=y[tr].contiguous(),
        x_test=x[te].contiguous(),
        y_test=y[te].contiguous(),
        num_classes=10,
        description=(f"scikit-learn bundled 8x8 digits (UCI optical recognition of handwritten digits), pixels/16; fixed split (seed {_DIGITS_SEED}): {n_train} train / {len(y) - n_train} test"),
    )


# ----------------------------------------------------------------------------- MNIST-style IDX

_IDX_FILES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
# dataset name -> (folder under our layout, torchvision class name, pretty name, citation)
_IDX_SETS = {
    "mnist": ("mnist", "MNIST", "MNIST handwritten digits", "LeCun et al. 1998"),
    "fashion-mnist": ("fashion-mnist", "FashionMNIST", "Fashion-MNIST", "Xiao, Rasul & Vollgraf 2017"),
}


def _idx_source(name: str, root: Path) -> tuple[str, Path] | None:
    """Where the IDX files are: ``("torchvision", root)`` if torchvision can read ``root`` as
    is, ``("files", folder)`` if ``folder`` holds all four files (``.gz`` or plain), else None."""
    folder, cls_name, _, _ = _IDX_SETS[name]
    raw = root / cls_name / "raw"
    if all((raw / f).is_file() for f in _IDX_FILES):
        return ("torchvision", root)
    for candidate in (root / folder, raw):
        if all((candidate / f).is_file() or (candidate / f"{f}.gz").is_file() for f in _IDX_FILES):
            return ("files", candidate)
    return None


def _idx_not_found(name: str, root: Path, download: bool) -> DatasetNotFoundError:
    folder, cls_name, _, _ = _IDX_SETS[name]
    return _not_found(
        name,
        root,
        f"{root / folder / (_IDX_FILES[0] + '.gz')} and the other three IDX files (or torchvision's {root / cls_name / 'raw' / _IDX_FILES[0]})",
        download=download,
    )


def _gzip_size(path: Path) -> int:
    """Uncompressed size mod 2**32, from the gzip trailer (ISIZE), without decompressing."""
    with open(path, "rb") as fh:
        fh.seek(-4, os.SEEK_END)
        return struct.unpack("<I", fh.read(4))[0]


def _materialize(src: Path, dst: Path) -> None:
    """Puts an uncompressed copy of ``src`` (``.gz`` or plain) at ``dst``, atomically.

    An existing ``dst`` is reused when its size and mtime match the source, so repeated loads
    and concurrent processes do no extra work and a changed source is noticed.
    """
    gz = src.suffix == ".gz"
    st = src.stat()
    want_size = _gzip_size(src) if gz else st.st_size
    if dst.is_file():
        dst_st = dst.stat()
        if dst_st.st_mtime_ns == st.st_mtime_ns and dst_st.st_size % 2**32 == want_size % 2**32:
            return
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_file_beside(dst)
    try:
        with os.fdopen(fd, "wb") as out:
            with gzip.open(src, "rb") if gz else open(src, "rb") as inp:
                shutil.copyfileobj(inp, out, 1 << 20)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, dst)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _torchvision_idx_root(name: str, root: Path) -> Path | None:
    """A root torchvision's class can read for ``name``, decompressing into the cache if needed."""
    found = _idx_source(name, root)
    if found is None:
        return None
    kind, where = found
    if kind == "torchvision":
        return where
    _, cls_name, _, _ = _IDX_SETS[name]
    cache_root = _cache_dir()
    raw = cache_root / cls_name / "raw"
    for f in _IDX_FILES:
        src = where / f"{f}.gz" if (where / f"{f}.gz").is_file() else where / f
        _materialize(src, raw / f)
    return cache_root


def _load_idx(name: str, root: Path) -> DatasetBundle:
    import torchvision.datasets as tvd

    _, cls_name, pretty, cite = _IDX_SETS[name]
    found = _idx_source(name, root)
    tv_root = _torchvision_idx_root(name, root)
    if found is None or tv_root is None:
        raise _idx_not_found(name, root, download=False)
    cls = getattr(tvd, cls_name)
    parts = []
    for train in (True, False):
        ds = cls(root=str(tv_root), train=train, download=False)
        x = ds.data.to(torch.float32).div_(255.0).unsqueeze(1).contiguous()
        y = torch.as_tensor(ds.targets, dtype=torch.int64)
        parts.append((x, y))
    (x_tr, y_tr), (x_te, y_te) = parts
    return _bundle(
        name,
        x_train=x_tr,
        y_train=y_tr,
        x_test=x_te,
        y_test=y_te,
        num_classes=10,
        description=(f"{pretty} ({cite}), {len(y_tr)} train / {len(y_te)} test, 28x28 grey, pixels/255; read with torchvision.datasets.{cls_name} from {found[1]}"),
    )


def _download_idx(name: str, root: Path) -> None:
    import torchvision.datasets as tvd

    _, cls_name, _, _ = _IDX_SETS[name]
    cls = getattr(tvd, cls_name)
    for train in (True, False):
        cls(root=str(root), train=train, download=True)


def _idx_header(path: Path) -> tuple[int, ...]:
    """Dimensions from an IDX header (magic: 0, 0, dtype code, ndim; then ndim big-endian u32)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        magic = fh.read(4)
        if len(magic) != 4 or magic[:2] != b"\x00\x00":
            raise ValueError(f"{path} is not an IDX file")
        ndim = magic[3]
        return struct.unpack(f">{ndim}I", fh.read(4 * ndim))


def _idx_info(name: str, root: Path) -> DatasetInfo:
    found = _idx_source(name, root)
    if found is None:
        return _missing_info(name, str(_idx_not_found(name, root, download=False)))
    folder = found[1] / _IDX_SETS[name][1] / "raw" if found[0] == "torchvision" else found[1]

    def pick(f: str) -> Path:
        return folder / f if (folder / f).is_file() else folder / f"{f}.gz"

    train_dims = _idx_header(pick(_IDX_FILES[0]))
    test_dims = _idx_header(pick(_IDX_FILES[2]))
    return DatasetInfo(
        name=name,
        available=True,
        num_train=int(train_dims[0]),
        num_test=int(test_dims[0]),
        input_shape=(1, *(int(d) for d in train_dims[1:])),
        num_classes=10,
        detail=str(folder),
    )


# ----------------------------------------------------------------------------- CIFAR-10

_CIFAR_DIR = "cifar-10-batches-py"
_CIFAR_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
_CIFAR_TEST = ("test_batch",)


def _numpy_global(module: str, name: str) -> Any:
    import importlib

    # numpy 2 moved numpy.core to numpy._core; pickles written by either name must load.
    for mod in (module, module.replace("numpy.core", "numpy._core", 1), module.replace("numpy._core", "numpy.core", 1)):
        try:
            return getattr(importlib.import_module(mod), name)
        except (ImportError, AttributeError):
            continue
    raise pickle.UnpicklingError(f"cannot resolve {module}.{name}")


# The only globals a CIFAR-10 batch needs: numpy's array reconstruction (protocols 2–4 use
# _reconstruct + ndarray + dtype, protocol 5 uses _frombuffer) and, for protocol-2 pickles
# written by Python 3, ``_codecs.encode`` for bytes. None of them runs user-chosen code.
_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("_codecs", "encode"),
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the numpy array globals in ``_ALLOWED_GLOBALS``."""

    def __init__(self, file: Any, *, source: str) -> None:
        super().__init__(file, encoding="latin1")
        self._source = source

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS:
            if module == "_codecs":
                import _codecs

                return _codecs.encode
            return _numpy_global(module, name)
        raise pickle.UnpicklingError(
            f"refusing to load global {module}.{name} from {self._source}: CIFAR-10 batch files hold only numpy arrays, lists and strings, so this file is not a genuine batch (and may be malicious)"
        )


def _restricted_load(path: Path) -> Any:
    with open(path, "rb") as fh:
        return _RestrictedUnpickler(fh, source=str(path)).load()


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(data uint8 (n, 3, 32, 32), labels int64 (n,)) from one CIFAR-10 python batch file."""
    obj = _restricted_load(path)
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a dict, got {type(obj).__name__}")
    entries = {(k.decode("latin1") if isinstance(k, bytes) else k): val for k, val in obj.items()}
    if "data" not in entries or "labels" not in entries:
        raise ValueError(f"{path}: expected keys 'data' and 'labels', got {sorted(map(str, entries))}")
    data = entries["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{path}: 'data' must be a uint8 array of shape (n, 3072), got {type(data).__name__} {getattr(data, 'dtype', '')} {getattr(data, 'shape', '')}")
    labels = np.asarray(entries["labels"])
    if labels.shape != (data.shape[0],) or labels.dtype.kind not in "iu":
        raise ValueError(f"{path}: 'labels' must be {data.shape[0]} integers, got shape {labels.shape} dtype {labels.dtype}")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError(f"{path}: labels must lie in [0, 9], got [{labels.min()}, {labels.max()}]")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def _cifar_dir(root: Path) -> Path | None:
    for candidate in (root / _CIFAR_DIR, root / "cifar10" / _CIFAR_DIR):
        if all((candidate / f).is_file() for f in _CIFAR_TRAIN + _CIFAR_TEST):
            return candidate
    return None


def _cifar_not_found(root: Path, download: bool) -> DatasetNotFoundError:
    return _not_found(
        "cifar10",
        root,
        f"{root / _CIFAR_DIR / 'data_batch_1'} ... data_batch_5 and test_batch (or {root / 'cifar10' / _CIFAR_DIR / 'data_batch_1'} ...)",
        download=download,
    )


def _load_cifar10(root: Path) -> DatasetBundle:
    folder = _cifar_dir(root)
    if folder is None:
        raise _cifar_not_found(root, download=False)

    def read(files: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        batches = [_read_cifar_batch(folder / f) for f in files]
        x = np.concatenate([b[0] for b in batches])
        y = np.concatenate([b[1] for b in batches])
        return torch.from_numpy(x).to(torch.float32).div_(255.0), torch.from_numpy(y)

    x_tr, y_tr = read(_CIFAR_TRAIN)
    x_te, y_te = read(_CIFAR_TEST)
    return _bundle(
        "cifar10",
        x_train=x_tr,
        y_train=y_tr,
        x_test=x_te,
        y_test=y_te,
        num_classes=10,
        description=(f"CIFAR-10 (Krizhevsky 2009), {len(y_tr)} train / {len(y_te)} test, 3x32x32, pixels/255; python batches from {folder} read with a restricted unpickler"),
    )


def _download_cifar10(root: Path) -> None:
    # Only torchvision's downloader (URL + md5 check); its CIFAR10 class would pickle.load the
    # batches, which the restricted reader above replaces.
    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import download_and_extract_archive

    download_and_extract_archive(CIFAR10.url, str(root), filename=CIFAR10.filename, md5=CIFAR10.tgz_md5)


def _cifar_info(root: Path) -> DatasetInfo:
    folder = _cifar_dir(root)
    if folder is None:
        return _missing_info("cifar10", str(_cifar_not_found(root, download=False)))
    # Counting without unpickling 180 MB of batches: the small batches.meta records the batch
    # size (10,000 in the canonical release, assumed when the file is absent).
    per_batch = 10_000
    meta_path = folder / "batches.meta"
    if meta_path.is_file():
        meta = _restricted_load(meta_path)
        if isinstance(meta, dict):
            meta = {(k.decode("latin1") if isinstance(k, bytes) else k): val for k, val in meta.items()}
            value = meta.get("num_cases_per_batch", per_batch)
            if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value > 0:
                per_batch = int(value)
    return DatasetInfo(
        name="cifar10",
        available=True,
        num_train=per_batch * len(_CIFAR_TRAIN),
        num_test=per_batch * len(_CIFAR_TEST),
        input_shape=(3, 32, 32),
        num_classes=10,
        detail=str(folder),
    )


# ----------------------------------------------------------------------------- faces

_ORL_SUBJECTS = 40
_ORL_IMAGES = 10
_FACES_TRAIN_PER_ID = 7  # images 1–7 of each identity train, 8–10 test


def _read_pgm(path: Path) -> np.ndarray:
    """A binary 8-bit PGM ('P5') as a uint8 (height, width) array."""
    raw = path.read_bytes()
    tokens: list[bytes] = []
    pos = 0
    while len(tokens) < 4:
        while pos < len(raw) and raw[pos : pos + 1].isspace():
            pos += 1
        if raw[pos : pos + 1] == b"#":
            while pos < len(raw) and raw[pos : pos + 1] not in (b"\n", b"\r"):
                pos += 1
            continue
        start = pos
        while pos < len(raw) and not raw[pos : pos + 1].isspace() and raw[pos : pos + 1] != b"#":
            pos += 1
        if start == pos:
            raise ValueError(f"{path}: truncated PGM header")
        tokens.append(raw[start:pos])
    pos += 1  # the single whitespace byte that ends the header
    if tokens[0] != b"P5":
        raise ValueError(f"{path}: not a binary PGM (magic {tokens[0]!r}, expected b'P5')")
    width, height, maxval = (int(t) for t in tokens[1:])
    if not 0 < maxval < 256:
        raise ValueError(f"{path}: only 8-bit PGM is supported, got maxval {maxval}")
    pixels = np.frombuffer(raw, dtype=np.uint8, count=width * height, offset=pos)
    return pixels.reshape(height, width)


def _orl_path(root: Path, subject: int, image: int) -> Path:
    return root / "orl_faces" / f"s{subject}" / f"{image}.pgm"


def _faces_source(root: Path) -> tuple[str, Path] | None:
    if _orl_path(root, 1, 1).is_file():
        return ("orl", root / "orl_faces")
    oli = root / "olivetti"
    if (oli / "olivetti_faces.npy").is_file() and (oli / "olivetti_faces_target.npy").is_file():
        return ("olivetti", oli)
    return None


def _faces_not_found(root: Path, download: bool) -> DatasetNotFoundError:
    return _not_found(
        "faces",
        root,
        f"{_orl_path(root, 1, 1)} (AT&T/ORL faces, s1..s40/1..10.pgm) or {root / 'olivetti' / 'olivetti_faces.npy'} with olivetti_faces_target.npy",
        download=download,
    )


def _per_identity_split(x: np.ndarray, y: np.ndarray, image_index: np.ndarray, source: str) -> DatasetBundle:
    train = image_index < _FACES_TRAIN_PER_ID
    # Stable order: by identity, then image number, so ids do not depend on file-system order.
    order_tr = np.lexsort((image_index[train], y[train]))
    order_te = np.lexsort((image_index[~train], y[~train]))
    x_tr, y_tr = x[train][order_tr], y[train][order_tr]
    x_te, y_te = x[~train][order_te], y[~train][order_te]
    return _bundle(
        "faces",
        x_train=torch.from_numpy(np.ascontiguousarray(x_tr)),
        y_train=torch.from_numpy(y_tr.astype(np.int64)),
        x_test=torch.from_numpy(np.ascontiguousarray(x_te)),
        y_test=torch.from_numpy(y_te.astype(np.int64)),
        num_classes=_ORL_SUBJECTS,
        description=(f"{source}; 40 identities, per-identity split: images 1-{_FACES_TRAIN_PER_ID} train ({len(y_tr)}), {_FACES_TRAIN_PER_ID + 1}-{_ORL_IMAGES} test ({len(y_te)})"),
    )


def _load_faces(root: Path) -> DatasetBundle:
    found = _faces_source(root)
    if found is None:
        raise _faces_not_found(root, download=False)
    kind, folder = found
    if kind == "orl":
        images, labels, index = [], [], []
        for s in range(1, _ORL_SUBJECTS + 1):
            for i in range(1, _ORL_IMAGES + 1):
                path = _orl_path(root, s, i)
                if not path.is_file():
                    raise _not_found("faces", root, f"{path} (the ORL folder is incomplete)")
                images.append(_read_pgm(path))
                labels.append(s - 1)
                index.append(i - 1)
        shapes = {im.shape for im in images}
        if shapes != {(112, 92)}:
            raise ValueError(f"ORL faces under {folder} must all be 112x92 (rows x cols), got {sorted(shapes)}")
        x = (np.stack(images).astype(np.float32) / 255.0)[:, None]
        source = f"AT&T/ORL faces (Samaria & Harter 1994) from {folder}, 1x112x92 PGM, pixels/255"
        return _per_identity_split(x, np.asarray(labels), np.asarray(index), source)
    faces = np.load(folder / "olivetti_faces.npy", allow_pickle=False)
    target = np.load(folder / "olivetti_faces_target.npy", allow_pickle=False)
    n = _ORL_SUBJECTS * _ORL_IMAGES
    if faces.shape != (n, 64, 64) or target.shape != (n,):
        raise ValueError(f"Olivetti arrays under {folder} must have shapes (400, 64, 64) and (400,), got {faces.shape} and {target.shape}")
    if not (np.all(target == np.arange(n) // _ORL_IMAGES)):
        raise ValueError(f"olivetti_faces_target.npy under {folder} must be i // 10 for sample i")
    x = np.clip(faces.astype(np.float32), 0.0, 1.0)[:, None]
    source = f"Olivetti faces arrays (AT&T/ORL, 64x64 version) from {folder}, 1x64x64"
    return _per_identity_split(x, target.astype(np.int64), np.arange(n) % _ORL_IMAGES, source)


def _faces_info(root: Path) -> DatasetInfo:
    found = _faces_source(root)
    if found is None:
        return _missing_info("faces", str(_faces_not_found(root, download=False)))
    kind, folder = found
    n_train, n_test = _ORL_SUBJECTS * _FACES_TRAIN_PER_ID, _ORL_SUBJECTS * (_ORL_IMAGES - _FACES_TRAIN_PER_ID)
    if kind == "orl":
        missing = [str(_orl_path(root, s, i)) for s in range(1, _ORL_SUBJECTS + 1) for i in range(1, _ORL_IMAGES + 1) if not _orl_path(root, s, i).is_file()]
        if missing:
            return _missing_info("faces", f"ORL folder {folder} is incomplete: {len(missing)} missing, e.g. {missing[0]}")
        shape: tuple[int, ...] = (1, 112, 92)
    else:
        arr = np.load(folder / "olivetti_faces.npy", mmap_mode="r", allow_pickle=False)
        shape = (1, *arr.shape[1:])
    return DatasetInfo(
        name="faces",
        available=True,
        num_train=n_train,
        num_test=n_test,
        input_shape=shape,
        num_classes=_ORL_SUBJECTS,
        detail=str(folder),
    )


# ----------------------------------------------------------------------------- adult

_ADULT_LABEL = "income"


def _adult_paths(root: Path) -> tuple[Path, Path]:
    return root / "adult" / "adult_train.csv", root / "adult" / "adult_test.csv"


def _adult_not_found(root: Path, download: bool) -> DatasetNotFoundError:
    train, test = _adult_paths(root)
    return _not_found("adult", root, f"{train} and {test}", download=download)


def _load_adult(root: Path) -> DatasetBundle:
    import pandas as pd

    train_path, test_path = _adult_paths(root)
    if not (train_path.is_file() and test_path.is_file()):
        raise _adult_not_found(root, download=False)
    frames = []
    for path in (train_path, test_path):
        df = pd.read_csv(path, na_values=["?"], skipinitialspace=True)
        if _ADULT_LABEL not in df.columns:
            raise ValueError(f"{path}: no {_ADULT_LABEL!r} column (columns: {list(df.columns)})")
        df = df.dropna().reset_index(drop=True)
        frames.append(df)
    train_df, test_df = frames
    if list(train_df.columns) != list(test_df.columns):
        raise ValueError(f"{train_path} and {test_path} have different columns")

    def labels(df: Any, path: Path) -> np.ndarray:
        # The UCI test file writes '>50K.' where the training file writes '>50K'.
        text = df[_ADULT_LABEL].astype(str).str.strip().str.rstrip(".")
        bad = ~text.isin([">50K", "<=50K"])
        if bad.any():
            raise ValueError(f"{path}: unexpected {_ADULT_LABEL} value {text[bad].iloc[0]!r}")
        return (text == ">50K").to_numpy(dtype=np.int64)

    y_tr, y_te = labels(train_df, train_path), labels(test_df, test_path)
    features = [c for c in train_df.columns if c != _ADULT_LABEL]
    numeric = [c for c in features if pd.api.types.is_numeric_dtype(train_df[c]) and pd.api.types.is_numeric_dtype(test_df[c])]
    categorical = [c for c in features if c not in numeric]

    lo = train_df[numeric].min().to_numpy(dtype=np.float64)
    span = train_df[numeric].max().to_numpy(dtype=np.float64) - lo
    span[span == 0] = 1.0

    # One category list per column from the union of both files, so train and test agree.
    categories = {c: sorted(np.union1d(train_df[c].astype(str).unique(), test_df[c].astype(str).unique()).tolist()) for c in categorical}

    def encode(df: Any) -> np.ndarray:
        blocks = [np.clip((df[numeric].to_numpy(dtype=np.float64) - lo) / span, 0.0, 1.0)]
        for c in categorical:
            codes = pd.Categorical(df[c].astype(str), categories=categories[c]).codes
            blocks.append(np.eye(len(categories[c]), dtype=np.float64)[codes])
        return np.concatenate(blocks, axis=1).astype(np.float32)

    x_tr, x_te = encode(train_df), encode(test_df)
    return _bundle(
        "adult",
        x_train=torch.from_numpy(x_tr),
        y_train=torch.from_numpy(y_tr),
        x_test=torch.from_numpy(x_te),
        y_test=torch.from_numpy(y_te),
        num_classes=2,
        description=(
            f"UCI Adult census income (Kohavi 1996) from {train_path.parent}: {len(y_tr)} train / {len(y_te)} test "
            f"after dropping rows with missing values; {len(numeric)} numeric columns min-max scaled on train "
            f"(test clipped to [0, 1]), {len(categorical)} categorical columns one-hot ({x_tr.shape[1]} features); "
            f"label income >50K"
        ),
    )


def _adult_info(root: Path) -> DatasetInfo:
    train_path, _ = _adult_paths(root)
    try:
        bundle = _cached(("adult", root))
    except DatasetNotFoundError as err:
        return _missing_info("adult", str(err))
    return _info_from_bundle(bundle, str(train_path.parent))


# ----------------------------------------------------------------------------- loading


def _normalize_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, one of {', '.join(DATASETS)}; got {name!r}")
    key = name.strip().lower().replace("_", "-")
    if key not in DATASETS:
        raise ValueError(f"name must be one of {', '.join(DATASETS)}; got {name!r}")
    return key


@functools.cache
def _cached(key: tuple[str, Path | None]) -> DatasetBundle:
    name, root = key
    if name == "digits":
        return _load_digits()
    assert root is not None  # internal invariant: only digits ignores the data root
    if name in _IDX_SETS:
        return _load_idx(name, root)
    if name == "cifar10":
        return _load_cifar10(root)
    if name == "faces":
        return _load_faces(root)
    if name == "adult":
        return _load_adult(root)
    raise ValueError(f"name must be one of {', '.join(DATASETS)}; got {name!r}")


def clear_cache() -> None:
    """Forgets every dataset loaded in this process (after the files under a data root changed)."""
    _cached.cache_clear()


def _download(name: str, root: Path) -> None:
    if name in _IDX_SETS:
        _download_idx(name, root)
    elif name == "cifar10":
        _download_cifar10(root)
    else:
        err = _faces_not_found(root, True) if name == "faces" else _adult_not_found(root, True)
        raise DatasetNotFoundError(f"{err}; dpaudit cannot download {name!r}, copy its files there")


def load_dataset(name: str, *, data_root: str | os.PathLike[str] | None = None, download: bool = False) -> DatasetBundle:
    """Loads a dataset's train and test splits.

    Results are cached per (name, data root) in this process, so repeated calls are cheap;
    the returned tensors are shared between callers and must not be modified in place.

    Args:
        name: one of :data:`DATASETS` (case and ``_``/``-`` insensitive).
        data_root: where the dataset files are; see :func:`resolve_data_root`. Ignored for
            ``digits``, which is bundled with scikit-learn.
        download: if the files are missing, download them into the data root first (only
            ``mnist``, ``fashion-mnist`` and ``cifar10``, through torchvision; needs network).

    Returns:
        The dataset as a :class:`DatasetBundle`.

    Raises:
        TypeError: ``name`` is not a string or ``download`` not a bool.
        ValueError: ``name`` is not a known dataset, or a file is malformed.
        DatasetNotFoundError: the files are missing (and were not downloaded).
        pickle.UnpicklingError: a CIFAR-10 batch file refers to anything but numpy arrays.
    """
    key = _normalize_name(name)
    if not isinstance(download, bool):
        raise TypeError(f"download must be a bool, got {download!r}")
    root = resolve_data_root(data_root)
    if key == "digits":
        return _cached(("digits", None))
    try:
        return _cached((key, root))
    except DatasetNotFoundError as err:
        if not download:
            raise
        missing = err
    try:
        _download(key, root)
    except DatasetNotFoundError:
        raise
    except Exception as exc:  # network errors surface as RuntimeError/URLError/OSError from torchvision
        raise DatasetNotFoundError(f"{missing}; downloading failed: {exc}") from exc
    return _cached((key, root))


# ----------------------------------------------------------------------------- info


@dataclass(frozen=True, kw_only=True)
class DatasetInfo:
    """What :func:`dataset_info` found for one dataset.

    Attributes:
        name: one of :data:`DATASETS`.
        available: whether :func:`load_dataset` would find the files.
        num_train: training samples (None if unavailable).
        num_test: test samples (None if unavailable).
        input_shape: shape of one sample (None if unavailable).
        num_classes: number of classes (None if unavailable).
        detail: the path found, or why the dataset is unavailable.
    """

    name: str
    available: bool
    num_train: int | None
    num_test: int | None
    input_shape: tuple[int, ...] | None
    num_classes: int | None
    detail: str


def _missing_info(name: str, why: str) -> DatasetInfo:
    return DatasetInfo(name=name, available=False, num_train=None, num_test=None, input_shape=None, num_classes=None, detail=why)


def _info_from_bundle(bundle: DatasetBundle, detail: str) -> DatasetInfo:
    return DatasetInfo(
        name=bundle.name,
        available=True,
        num_train=len(bundle.train),
        num_test=len(bundle.test),
        input_shape=bundle.input_shape,
        num_classes=bundle.num_classes,
        detail=detail,
    )


def dataset_info(*, data_root: str | os.PathLike[str] | None = None) -> list[DatasetInfo]:
    """Which datasets are available under the data root, with their sizes.

    Cheap: sizes come from file headers and layouts, not from decoding the data (``adult``
    and ``digits``, which are small, are loaded).

    Args:
        data_root: the data root; see :func:`resolve_data_root`.

    Returns:
        One :class:`DatasetInfo` per entry of :data:`DATASETS`, in that order. A missing or
        unreadable dataset is reported with ``available=False``, never raised.

    Raises:
        TypeError: ``data_root`` is not a path.
    """
    root = resolve_data_root(data_root)
    out = []
    for name in DATASETS:
        try:
            if name == "digits":
                info = _info_from_bundle(_cached(("digits", None)), "scikit-learn bundled (sklearn.datasets.load_digits)")
            elif name in _IDX_SETS:
                info = _idx_info(name, root)
            elif name == "cifar10":
                info = _cifar_info(root)
            elif name == "faces":
                info = _faces_info(root)
            else:
                info = _adult_info(root)
        except (OSError, ValueError, EOFError, struct.error, pickle.UnpicklingError) as err:
            info = _missing_info(name, f"unreadable under {root}: {err}")
        out.append(info)
    return out


# ----------------------------------------------------------------------------- splits


@dataclass(frozen=True, kw_only=True, eq=False)
class Splits:
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

    dataset: str
    seed: int
    members: np.ndarray
    non_members: np.ndarray
    population: np.ndarray
    test: np.ndarray

    def __post_init__(self) -> None:
        if not isinstance(self.dataset, str) or not self.dataset:
            raise TypeError(f"dataset must be a non-empty string, got {self.dataset!r}")
        object.__setattr__(self, "seed", v.integer("seed", self.seed, minimum=0))
        for name in _SPLIT_FIELDS:
            object.__setattr__(self, name, v.sorted_id_set(name, getattr(self, name)))
        for i, a in enumerate(_SPLIT_FIELDS):
            for b in _SPLIT_FIELDS[i + 1 :]:
                overlap = np.intersect1d(getattr(self, a), getattr(self, b))
                if overlap.size:
                    raise ValueError(f"{a} and {b} must be disjoint, but share {overlap.size} ids, e.g. {int(overlap[0])}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Splits):
            return NotImplemented
        return self.dataset == other.dataset and self.seed == other.seed and all(np.array_equal(getattr(self, f), getattr(other, f)) for f in _SPLIT_FIELDS)

    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict (ids as lists of ints), readable by :meth:`from_dict`."""
        out: dict[str, Any] = {"schema_version": SPLITS_SCHEMA_VERSION, "dataset": self.dataset, "seed": self.seed}
        out.update({f: getattr(self, f).tolist() for f in _SPLIT_FIELDS})
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Splits:
        """Rebuilds splits written by :meth:`to_dict`, validating them.

        Args:
            data: a mapping with ``dataset``, ``seed`` and the four id lists.

        Returns:
            The splits.

        Raises:
            TypeError: ``data`` is not a mapping, or holds values of the wrong type.
            ValueError: a key is missing, the schema version is unknown, or sets overlap.
        """
        v.mapping_with("data", data, ("dataset", "seed", *_SPLIT_FIELDS))
        version = data.get("schema_version", SPLITS_SCHEMA_VERSION)
        if version != SPLITS_SCHEMA_VERSION:
            raise ValueError(f"schema_version must be {SPLITS_SCHEMA_VERSION}, got {version!r}")
        return cls(dataset=data["dataset"], seed=data["seed"], **{f: data[f] for f in _SPLIT_FIELDS})


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
        raise TypeError(f"bundle must be a DatasetBundle, got {type(bundle).__name__}")
    seed = v.integer("seed", seed, minimum=0)
    train_ids = bundle.train.ids.numpy()
    n = train_ids.size
    if num_members is None:
        member_fraction = v.half_open_unit("member_fraction", member_fraction)
        num_members = int(math.floor(member_fraction * n))
        if num_members < 1:
            raise ValueError(f"member_fraction={member_fraction!r} of {n} training samples selects no members")
    else:
        num_members = v.integer("num_members", num_members, minimum=1)
    if num_non_members is None:
        non_member_fraction = v.real("non_member_fraction", non_member_fraction)
        if not 0.0 <= non_member_fraction < 1.0:
            raise ValueError(f"non_member_fraction must lie in [0, 1), got {non_member_fraction!r}")
        num_non_members = int(math.floor(non_member_fraction * n))
    else:
        num_non_members = v.integer("num_non_members", num_non_members, minimum=0)
    if num_members > n:
        raise ValueError(f"num_members must be <= {n} (the training set of {bundle.name!r}), got {num_members}")
    if num_members + num_non_members > n:
        raise ValueError(
            f"num_members + num_non_members must be <= {n} (the training set of {bundle.name!r}), got "
            f"{num_members} + {num_non_members} (member_fraction={member_fraction!r}, "
            f"non_member_fraction={non_member_fraction!r})"
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
