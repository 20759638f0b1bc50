"""Datasets and membership splits: the data every defense trains on and every attack scores.

The data layer reads canonical copies of the benchmark datasets from a *data root*
(``--data-root`` / ``$DPAUDIT_DATA_ROOT`` / ``~/.dpaudit/data``), never touches the network
unless asked (``download=True``), and falls back to scikit-learn's bundled 8×8 digits, which
always works offline (docs/architecture.md, "Data root").

Modules:

* :mod:`~dpaudit.data.source` — what a registered source is (:class:`DatasetSource`), the
  data root (:func:`checked_data_root` refuses one that is missing, a file or unreadable), the
  "not found" error naming the dataset, the root and the expected path, and
  :class:`DatasetFileError` for a file that is present but truncated, corrupt or altered;
* :mod:`~dpaudit.data.integrity` — the ``MD5SUMS`` check every format applies to its files;
* :mod:`~dpaudit.data.registry` — :data:`DATASETS` (name → source), :func:`load_dataset`,
  :func:`dataset_info`, :func:`register_dataset`, :func:`dataset_files` (the checksums of what
  a load read: a dataset's identity in the keys of stored records and results);
* one module per format: :mod:`~dpaudit.data.digits` (embedded default),
  :mod:`~dpaudit.data.idx` (MNIST, Fashion-MNIST), :mod:`~dpaudit.data.cifar10`,
  :mod:`~dpaudit.data.faces` (AT&T/ORL, Olivetti), :mod:`~dpaudit.data.adult` (UCI Adult);
* :mod:`~dpaudit.data.containers` — :class:`ArrayDataset` and :class:`DatasetBundle`;
* :mod:`~dpaudit.data.splits` — membership ground truth (:class:`Splits`, :func:`make_splits`).

Every sample carries an integer *id*, unique across the train and test splits of a bundle
(train ``0..N-1``, test ``N..N+M-1``); membership ground truth is expressed in ids.
"""

from __future__ import annotations

from dpaudit._validate import sorted_id_set
from dpaudit.data.containers import ArrayDataset, DatasetBundle
from dpaudit.data.registry import DATASETS, clear_cache, dataset_files, dataset_info, load_dataset, register_dataset
from dpaudit.data.source import (
    CACHE_ENV,
    DATA_ROOT_ENV,
    DataRootError,
    DatasetFileError,
    DatasetInfo,
    DatasetNotFoundError,
    DatasetSource,
    checked_data_root,
    resolve_data_root,
)
from dpaudit.data.splits import SPLITS_SCHEMA_VERSION, Splits, make_splits

__all__ = [
    "sorted_id_set",
    "DATASETS",
    "DATA_ROOT_ENV",
    "CACHE_ENV",
    "SPLITS_SCHEMA_VERSION",
    "ArrayDataset",
    "DataRootError",
    "DatasetBundle",
    "DatasetFileError",
    "DatasetInfo",
    "DatasetNotFoundError",
    "DatasetSource",
    "Splits",
    "checked_data_root",
    "clear_cache",
    "dataset_files",
    "dataset_info",
    "load_dataset",
    "make_splits",
    "register_dataset",
    "resolve_data_root",
]
