"""CIFAR-10 (Krizhevsky 2009): the python batches, read with a restricted unpickler.

torchvision's loader calls ``pickle.load`` on the batches, and docs/architecture.md "Style" forbids
pickle for anything a user may have received from someone else, so the batches are read by an
unpickler that imports nothing: the few numpy globals a batch names resolve to stand-ins that
accept only the arguments genuine array pickles pass. Anything else (another global, a direct
``numpy.ndarray`` call, an object dtype, a truncated or oversized file, a structure other than
``{data: uint8 (n, 3072), labels: n ints in 0..9}``) is a
:class:`~dpaudit.data.source.DatasetFileError` naming the batch ("... is not a CIFAR-10 batch:
..."), for ``dpaudit datasets`` as for the load. (3, 32, 32), 10 classes, 50,000 / 10,000.
Not carried offline here; the loader still supports it when a user has the files.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpaudit.data.containers import DatasetBundle, make_bundle
from dpaudit.data.integrity import checked_files, size_of, verify_checksum
from dpaudit.data.registry import register_dataset
from dpaudit.data.source import (
    DatasetFileError,
    DatasetInfo,
    DatasetNotFoundError,
    DatasetSource,
    missing_info,
    not_found,
    unusable_info,
)

__all__ = ["SOURCE"]

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


class _Refused(Exception):
    """The pickle asked for something a CIFAR-10 batch never needs (the message says what)."""


# The globals a CIFAR-10 batch needs are numpy's array reconstruction (protocols 2-4 use
# _reconstruct + ndarray + dtype, protocol 5 uses _frombuffer) and, for protocol-2 pickles
# written by Python 3, ``_codecs.encode`` for bytes. Each resolves to a stand-in below that
# accepts only the arguments those pickles pass, not to the function itself: ``numpy.ndarray``
# called directly could reserve terabytes, ``numpy.dtype`` could make object arrays, and
# ``_codecs.encode`` could run any registered codec. The stand-ins are instances of classes
# with no attributes to set (``__slots__ = ()``), so a BUILD opcode cannot alter them.


class _NdarrayToken:
    """What ``numpy.ndarray`` resolves to: a marker only :class:`_Reconstruct` accepts."""

    __slots__ = ()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise _Refused("it calls numpy.ndarray directly, which a pickled array never does")


class _Reconstruct:
    """``numpy.core.multiarray._reconstruct(ndarray, (0,), dtype)``, the empty array BUILD then fills."""

    __slots__ = ()

    def __call__(self, subtype: Any, shape: Any, dtype: Any) -> Any:
        if not isinstance(subtype, _NdarrayToken) or not isinstance(shape, tuple) or shape != (0,):
            raise _Refused("it calls numpy's array reconstruction with arguments a pickled array never has")
        return _numpy_global("numpy._core.multiarray", "_reconstruct")(np.ndarray, shape, _Dtype()(dtype))


class _Dtype:
    """``numpy.dtype`` for plain numeric, byte and text kinds (never object or structured ones)."""

    __slots__ = ()

    def __call__(self, spec: Any, align: Any = False, copy: Any = False) -> np.dtype:
        if not isinstance(spec, (str, bytes)):
            raise _Refused(f"it asks for a numpy dtype from a {type(spec).__name__}")
        text = spec.decode("latin1") if isinstance(spec, bytes) else spec
        try:
            # Always a fresh instance (what the pickle's copy=True asks for): BUILD then calls
            # __setstate__ on it, which must never reach numpy's shared dtype singletons.
            dtype = np.dtype(text, False, True)
        except TypeError:
            raise _Refused(f"it asks for an unknown numpy dtype {text[:40]!r}") from None
        if dtype.kind not in "biufcSU":
            raise _Refused(f"it asks for a numpy dtype of kind {dtype.kind!r} (a batch holds numbers and text only)")
        return dtype


class _FromBuffer:
    """``numpy.core.numeric._frombuffer`` (protocol 5): an array over bytes already read."""

    __slots__ = ()

    def __call__(self, buf: Any, dtype: Any, shape: Any, order: Any) -> Any:
        if (
            not isinstance(dtype, np.dtype)
            or dtype.kind not in "biufcSU"
            or not isinstance(shape, tuple)
            or order not in ("C", "F")
        ):
            raise _Refused("it calls numpy's frombuffer with arguments a pickled array never has")
        return _numpy_global("numpy._core.numeric", "_frombuffer")(buf, dtype, shape, order)


class _Latin1Encode:
    """``_codecs.encode(text, "latin1")``: how Python 3 writes bytes into a protocol-2 pickle."""

    __slots__ = ()

    def __call__(self, text: Any, encoding: Any = "utf-8") -> bytes:
        if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
            raise _Refused("it calls _codecs.encode other than for latin-1 text")
        return text.encode("latin1")


_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _Reconstruct(),
    ("numpy._core.multiarray", "_reconstruct"): _Reconstruct(),
    ("numpy.core.numeric", "_frombuffer"): _FromBuffer(),
    ("numpy._core.numeric", "_frombuffer"): _FromBuffer(),
    ("numpy", "ndarray"): _NdarrayToken(),
    ("numpy", "dtype"): _Dtype(),
    ("_codecs", "encode"): _Latin1Encode(),
}

# A genuine batch is about 31 MB (Python 2 pickle) or 46 MB (re-pickled by Python 3 with
# protocol 2); refusing much larger files before unpickling bounds the memory a bad file costs.
_MAX_BATCH_BYTES = 128 * 2**20


class _RestrictedUnpickler(pickle.Unpickler):
    """Unpickler that resolves only the stand-ins of ``_ALLOWED_GLOBALS``; it never imports."""

    def __init__(self, file: Any) -> None:
        super().__init__(file, encoding="latin1")

    def find_class(self, module: str, name: str) -> Any:
        stand_in = _ALLOWED_GLOBALS.get((module, name))
        if stand_in is None:
            raise _Refused(
                f"it refers to {module[:80]}.{name[:80]}, which a batch never holds; "
                "refusing to load it (the file may be malicious)"
            )
        return stand_in

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("it uses persistent ids, which a batch never holds")


def _not_a_batch(path: Path, why: str) -> DatasetFileError:
    return DatasetFileError(path, f"not a CIFAR-10 batch: {why}")


def _restricted_load(path: Path) -> Any:
    """The object pickled in ``path``, read with :class:`_RestrictedUnpickler`.

    Raises:
        DatasetFileError: the file is too large, truncated or malformed, or refers to anything
            but the numpy array machinery (nothing it names is imported or run).
    """
    size = size_of(path)
    if size > _MAX_BATCH_BYTES:
        raise _not_a_batch(path, f"{size} bytes, more than the {_MAX_BATCH_BYTES} any batch file takes")
    try:
        with open(path, "rb") as fh:
            return _RestrictedUnpickler(fh).load()
    except _Refused as exc:
        raise _not_a_batch(path, str(exc)) from None
    except EOFError:
        raise _not_a_batch(path, "the pickle ends early (truncated)") from None
    except OSError as exc:
        raise DatasetFileError(path, f"unreadable: {exc.strerror or exc}") from None
    except MemoryError:
        raise _not_a_batch(path, "its content does not fit in memory") from None
    except (
        pickle.UnpicklingError,
        ValueError,
        TypeError,
        AttributeError,
        KeyError,
        IndexError,
        struct.error,
        RecursionError,
    ) as exc:
        # Whatever else a malformed pickle makes the unpickler or numpy's setters raise.
        raise _not_a_batch(path, f"malformed pickle ({type(exc).__name__}: {exc})") from None


def _text_keys(obj: dict[Any, Any]) -> dict[Any, Any]:
    return {(k.decode("latin1") if isinstance(k, bytes) else k): val for k, val in obj.items()}


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(data uint8 (n, 3, 32, 32), labels int64 (n,)) from one CIFAR-10 python batch file.

    Raises:
        DatasetFileError: the file is not a CIFAR-10 batch (see :func:`_restricted_load`), or
            its content is not a dict with ``data`` (uint8, n x 3072) and ``labels`` (n
            integers in 0..9).
    """
    obj = _restricted_load(path)
    if not isinstance(obj, dict):
        raise _not_a_batch(path, f"expected a dict, got {type(obj).__name__}")
    entries = _text_keys(obj)
    if "data" not in entries or "labels" not in entries:
        raise _not_a_batch(path, f"expected keys 'data' and 'labels', got {sorted(map(str, entries))[:10]}")
    data = entries["data"]
    if (
        not isinstance(data, np.ndarray)
        or data.dtype != np.uint8
        or data.ndim != 2
        or data.shape[1] != 3 * 32 * 32
        or data.shape[0] == 0
    ):
        raise _not_a_batch(
            path,
            "'data' must be a uint8 array of shape (n, 3072), n >= 1, got "
            f"{type(data).__name__} {getattr(data, 'dtype', '')} "
            f"{getattr(data, 'shape', '')}",
        )
    raw_labels = entries["labels"]
    if isinstance(raw_labels, np.ndarray):
        labels = raw_labels
    elif isinstance(raw_labels, list) and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in raw_labels
    ):
        labels = np.asarray(raw_labels, dtype=np.int64)
    else:
        raise _not_a_batch(path, f"'labels' must be a list of integers, got {type(raw_labels).__name__}")
    if labels.shape != (data.shape[0],) or labels.dtype.kind not in "iu":
        raise _not_a_batch(
            path, f"'labels' must be {data.shape[0]} integers, got shape {labels.shape} dtype {labels.dtype}"
        )
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise _not_a_batch(path, f"labels must lie in [0, 9], got [{labels.min()}, {labels.max()}]")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def _check_meta(folder: Path) -> None:
    """``batches.meta``, when present, must be a plain dict (it is never used for the data)."""
    meta_path = folder / "batches.meta"
    if meta_path.is_file() and not isinstance(_restricted_load(meta_path), dict):
        raise _not_a_batch(meta_path, "expected a dict")


def _cifar_dir(root: Path) -> Path | None:
    for candidate in (root / _CIFAR_DIR, root / "cifar10" / _CIFAR_DIR):
        if all((candidate / f).is_file() for f in _CIFAR_TRAIN + _CIFAR_TEST):
            return candidate
    return None


def _cifar_not_found(root: Path, download: bool) -> DatasetNotFoundError:
    return not_found(
        "cifar10",
        root,
        f"{root / _CIFAR_DIR / 'data_batch_1'} ... data_batch_5 and test_batch "
        f"(or {root / 'cifar10' / _CIFAR_DIR / 'data_batch_1'} ...)",
        download=download,
    )


def _load_cifar10(root: Path) -> DatasetBundle:
    folder = _cifar_dir(root)
    if folder is None:
        raise _cifar_not_found(root, download=False)
    _check_meta(folder)
    for f in _CIFAR_TRAIN + _CIFAR_TEST:
        verify_checksum(folder / f, folder)

    def read(files: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        batches = [_read_cifar_batch(folder / f) for f in files]
        x = np.concatenate([b[0] for b in batches])
        y = np.concatenate([b[1] for b in batches])
        return torch.from_numpy(x).to(torch.float32).div_(255.0), torch.from_numpy(y)

    x_tr, y_tr = read(_CIFAR_TRAIN)
    x_te, y_te = read(_CIFAR_TEST)
    return make_bundle(
        "cifar10",
        x_train=x_tr,
        y_train=y_tr,
        x_test=x_te,
        y_test=y_te,
        num_classes=10,
        description=(
            f"CIFAR-10 (Krizhevsky 2009), {len(y_tr)} train / {len(y_te)} test, "
            f"3x32x32, pixels/255; python batches from {folder} read with a "
            "restricted unpickler"
        ),
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
        return missing_info("cifar10", str(_cifar_not_found(root, download=False)))
    # Every batch is read (restricted) and its structure checked, so "available" means the load
    # will succeed; about 0.2 s a batch, and the counts are the real ones.
    counts = {}
    checksums = 0
    try:
        _check_meta(folder)
        for f in _CIFAR_TRAIN + _CIFAR_TEST:
            counts[f] = len(_read_cifar_batch(folder / f)[1])
            checksums += verify_checksum(folder / f, folder)
    except DatasetFileError as err:
        return unusable_info("cifar10", err)
    return DatasetInfo(
        name="cifar10",
        available=True,
        num_train=sum(counts[f] for f in _CIFAR_TRAIN),
        num_test=sum(counts[f] for f in _CIFAR_TEST),
        input_shape=(3, 32, 32),
        num_classes=10,
        detail=str(folder),
        checked=checked_files(len(counts), checksums, "batch structure (restricted unpickler)"),
    )


SOURCE = register_dataset(
    DatasetSource(
        name="cifar10",
        description="CIFAR-10 (Krizhevsky 2009), python batches, 3x32x32 colour, 50,000 train / 10,000 test",
        input_shape=(3, 32, 32),
        num_classes=10,
        files=tuple(f"{_CIFAR_DIR}/{f}" for f in _CIFAR_TRAIN + _CIFAR_TEST),
        load=_load_cifar10,
        info=_cifar_info,
        download=_download_cifar10,
    )
)
