"""The dataset registry: one :class:`~dpaudit.data.source.DatasetSource` per format, and the loader that reads it.

``DATASETS`` maps each name to its source; the CLI's ``--dataset`` choices, ``dpaudit
datasets`` and :func:`load_dataset` all read it. Each source registers itself where it is
defined, with a module-level :func:`register_dataset` call, so adding a dataset is one module in
:mod:`dpaudit.data`: the first lookup imports every module of the package (the built-in formats
first, in the order the CLI lists them) and this module imports none of them.

Loaded datasets are cached in process per (name, data root); the tensors of a returned
dataset are shared between callers and must not be modified in place.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
import pickle
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dpaudit import _validate as v
from dpaudit.data.containers import DatasetBundle
from dpaudit.data.integrity import recording_reads
from dpaudit.data.source import (
    DatasetFileError,
    DatasetInfo,
    DatasetNotFoundError,
    DatasetSource,
    checked_data_root,
    missing_info,
    resolve_data_root,
    unusable_info,
)
from dpaudit.registry import Registry

__all__ = [
    "DATASETS",
    "changed_files",
    "clear_cache",
    "dataset_files",
    "dataset_info",
    "load_dataset",
    "register_dataset",
]

#: Every dataset source by name, in registration order; any module of :mod:`dpaudit.data` that
#: registers a source is found on the first lookup.
DATASETS: Registry[DatasetSource] = Registry("dataset", argument="name", discover=("dpaudit.data",))

#: The built-in formats, imported (by name) as soon as this module is, so they are registered,
#: and listed, in this order whichever of them a process imports first.
_BUILT_IN = (
    "dpaudit.data.digits",
    "dpaudit.data.idx",
    "dpaudit.data.cifar10",
    "dpaudit.data.faces",
    "dpaudit.data.adult",
    "dpaudit.data.gmi_halves",
)

_registered: set[str] = set()


def register_dataset(source: DatasetSource) -> DatasetSource:
    """Adds a dataset source to :data:`DATASETS` (the CLI's ``--dataset`` choices read it).

    Args:
        source: the source; its name must not be registered yet.

    Returns:
        ``source``, so a module can write ``SOURCE = register_dataset(DatasetSource(...))``.

    Raises:
        TypeError: ``source`` is not a :class:`DatasetSource`.
        ValueError: a source of that name is already registered.
    """
    if not isinstance(source, DatasetSource):
        raise v.invalid_type("source", f"source must be a DatasetSource, got {type(source).__name__}")
    # Checked against the names registered so far, not by a lookup: a lookup would start
    # discovery from inside the importing dataset module and reorder the listing.
    if source.name in _registered:
        raise v.invalid("source", f"source: a dataset named {source.name!r} is already registered")
    DATASETS.register(source)
    _registered.add(source.name)
    return source


def _normalize_name(name: Any) -> str:
    if not isinstance(name, str):
        raise v.invalid_type("name", f"name must be a string, one of {', '.join(DATASETS)}; got {name!r}")
    key = name.strip().lower().replace("_", "-")
    if key not in DATASETS:
        raise v.invalid("name", f"name must be one of {', '.join(DATASETS)}; got {name!r}")
    return key


# What each cached load read: (name, root) → {file: md5} (see dataset_files).
_reads: dict[tuple[str, Path | None], dict[str, str]] = {}


@functools.cache
def _cached(key: tuple[str, Path | None]) -> DatasetBundle:
    name, root = key
    # Sources bundled with a library ignore the root; they are cached under None.
    with recording_reads() as reads:
        bundle = DATASETS[name].load(root if root is not None else Path())
    _reads[key] = _relative_to(reads, root)
    return bundle


def _relative_to(reads: dict[str, str], root: Path | None) -> dict[str, str]:
    out = {}
    for path, md5 in reads.items():
        p = Path(path)
        rel = p.relative_to(root).as_posix() if root is not None and p.is_relative_to(root) else str(p)
        out[rel] = md5
    return dict(sorted(out.items()))


def clear_cache() -> None:
    """Forgets every dataset loaded in this process (after the files under a data root changed)."""
    _cached.cache_clear()
    _reads.clear()


def dataset_files(name: str, *, data_root: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """The identity of a dataset's data: ``{file relative to the data root: MD5}`` of every file its load read.

    Part of the key of every stored record and result made from the dataset, so a file replaced
    under the data root (its ``MD5SUMS`` updated too, so the load accepts it) makes them be
    recomputed instead of reused. The digests are those the load's ``MD5SUMS`` check computed
    (:func:`dpaudit.data.integrity.recording_reads`); a file the listing does not name is hashed
    once per process. A source that reads no file through that check (a third-party source)
    is identified by a SHA-256 of its loaded arrays, under the key ``"<arrays>"``.

    Data bundled with a library (``digits``) has a fixed identity: the result is empty, and
    keys of runs on it are what they were before datasets had identities.

    Raises:
        As :func:`load_dataset`.
    """
    key = _normalize_name(name)
    if not DATASETS[key].needs_root:
        return {}
    bundle = load_dataset(key, data_root=data_root)
    root = checked_data_root(data_root)
    reads = _reads.get((key, root))
    if not reads:
        digest = hashlib.sha256()
        for split in (bundle.train, bundle.test):
            for tensor in (split.features, split.labels, split.ids):
                digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
        reads = {"<arrays>": digest.hexdigest()}
    return dict(reads)


def changed_files(stored: Any, current: dict[str, str]) -> str:
    """Which files differ between a stored :func:`dataset_files` and the current one, for a message."""
    old = dict(stored) if isinstance(stored, Mapping) else {}  # a stored result's frozen config too
    parts = [f for f in sorted(set(old) | set(current)) if old.get(f) != current.get(f)]
    shown = ", ".join(parts[:3]) + (f" and {len(parts) - 3} more" if len(parts) > 3 else "")
    return shown or "none"


def _download(name: str, root: Path, missing: DatasetNotFoundError) -> None:
    fetch = DATASETS[name].download
    if fetch is None:
        raise DatasetNotFoundError(
            f"{missing} (download=True was given); dpaudit cannot download {name!r}, copy its files there"
        )
    fetch(root)


def load_dataset(
    name: str, *, data_root: str | os.PathLike[str] | None = None, download: bool = False
) -> DatasetBundle:
    """Loads a dataset's train and test splits.

    Results are cached per (name, data root) in this process, so repeated calls are cheap;
    the returned tensors are shared between callers and must not be modified in place.

    Args:
        name: one of :data:`DATASETS` (case and ``_``/``-`` insensitive).
        data_root: where the dataset files are; see :func:`resolve_data_root`. Ignored for
            ``digits``, which is bundled with scikit-learn.
        download: if the files are missing, download them into the data root first (only
            sources with a ``download`` function: ``mnist``, ``fashion-mnist`` and ``cifar10``,
            through torchvision; needs network).

    Returns:
        The dataset as a :class:`DatasetBundle`.

    Raises:
        TypeError: ``name`` is not a string or ``download`` not a bool.
        ValueError: ``name`` is not a known dataset.
        DataRootError: (a ``ValueError``) an explicitly given root does not exist, or the root
            is not a readable directory.
        DatasetFileError: (a ``ValueError``) a file is present but truncated, corrupt, not in
            its format (e.g. a CIFAR-10 batch pickling anything but arrays), or differs from
            its folder's ``MD5SUMS``; the message names the file.
        DatasetNotFoundError: the files are missing (and were not downloaded).
    """
    key = _normalize_name(name)
    if not isinstance(download, bool):
        raise v.invalid_type("download", f"download must be a bool, got {download!r}")
    resolve_data_root(data_root)  # a data_root of the wrong type is an error even where unused
    if not DATASETS[key].needs_root:
        return _cached((key, None))
    root = checked_data_root(data_root, allow_missing=download)
    try:
        return _cached((key, root))
    except DatasetNotFoundError as err:
        if not download:
            raise
        missing = err
    try:
        _download(key, root, missing)
    except DatasetNotFoundError:
        raise
    except Exception as exc:  # network errors surface as RuntimeError/URLError/OSError from torchvision
        raise DatasetNotFoundError(f"{missing}; downloading failed: {exc}") from exc
    return _cached((key, root))


def dataset_info(*, data_root: str | os.PathLike[str] | None = None) -> list[DatasetInfo]:
    """Which datasets are available under the data root, with their sizes.

    Cheap: sizes come from file headers and layouts, not from decoding the data (``adult``
    and ``digits``, which are small, are loaded).

    Args:
        data_root: the data root; see :func:`resolve_data_root`.

    Returns:
        One :class:`DatasetInfo` per entry of :data:`DATASETS`, in that order. A missing
        dataset, or one whose files fail their checks (format, length, ``MD5SUMS``), is
        reported with ``available=False`` and the reason, never raised.

    Raises:
        TypeError: ``data_root`` is not a path.
        DataRootError: (a ``ValueError``) an explicitly given root does not exist, or the root
            is not a readable directory (the default ``~/.dpaudit/data`` may be absent).
    """
    root = checked_data_root(data_root)
    out = []
    for name, source in DATASETS.items():
        try:
            info = source.info(root)
        except DatasetFileError as err:
            info = unusable_info(name, err)
        except (OSError, ValueError, EOFError, struct.error, pickle.UnpicklingError) as err:
            info = missing_info(name, f"unavailable: unreadable under {root}: {' '.join(str(err).split())}")
        out.append(info)
    return out


# Last, so that every name the dataset modules import from here exists while they run.
for _module in _BUILT_IN:
    importlib.import_module(_module)
