"""CIFAR-10 (Krizhevsky 2009): the python batches, read with a restricted unpickler.

torchvision's loader calls ``pickle.load`` on the batches, and DESIGN.md "Style" forbids
pickle for anything a user may have received from someone else, so the batches are read by an
unpickler that resolves only numpy's array globals. (3, 32, 32), 10 classes, 50,000 / 10,000.
Not carried offline here; the loader still supports it when a user has the files.
"""

from __future__ import annotations

import numbers
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpaudit.data.containers import DatasetBundle, make_bundle
from dpaudit.data.source import DatasetInfo, DatasetNotFoundError, DatasetSource, missing_info, not_found

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
    return not_found(
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
    return make_bundle(
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
        return missing_info("cifar10", str(_cifar_not_found(root, download=False)))
    # Counting without unpickling 180 MB of batches: the small batches.meta records the batch
    # size (10,000 in the canonical release, assumed when the file is absent).
    per_batch = 10_000
    meta_path = folder / "batches.meta"
    if meta_path.is_file():
        meta = _restricted_load(meta_path)
        if isinstance(meta, dict):
            meta = {(k.decode("latin1") if isinstance(k, bytes) else k): val for k, val in meta.items()}
            value = meta.get("num_cases_per_batch", per_batch)
            if isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) > 0:
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


SOURCE = DatasetSource(
    name="cifar10",
    description="CIFAR-10 (Krizhevsky 2009), python batches, 3x32x32 colour, 50,000 train / 10,000 test",
    input_shape=(3, 32, 32),
    num_classes=10,
    files=tuple(f"{_CIFAR_DIR}/{f}" for f in _CIFAR_TRAIN + _CIFAR_TEST),
    load=_load_cifar10,
    info=_cifar_info,
    download=_download_cifar10,
)
