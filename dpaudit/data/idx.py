"""MNIST-style IDX files: MNIST (LeCun et al. 1998) and Fashion-MNIST (Xiao, Rasul & Vollgraf 2017).

The four IDX files (``.gz`` or plain) are found under ``ROOT/<folder>/`` (the layout of
``../shared/data``) or torchvision's ``ROOT/<Class>/raw/``; they are read with
``torchvision.datasets.MNIST`` / ``FashionMNIST``, decompressing into the cache when needed.
(1, 28, 28), 10 classes, 60,000 / 10,000.
"""

from __future__ import annotations

import gzip
import os
import shutil
import struct
from pathlib import Path

import torch

from dpaudit.data.containers import DatasetBundle, make_bundle
from dpaudit.data.source import DatasetInfo, DatasetNotFoundError, DatasetSource, cache_dir, missing_info, not_found
from dpaudit.store import temp_file_beside

__all__ = ["SOURCES"]

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
    return not_found(
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
    cache_root = cache_dir()
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
    return make_bundle(
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
        return missing_info(name, str(_idx_not_found(name, root, download=False)))
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


def _idx_source_for(name: str) -> DatasetSource:
    folder, _, pretty, cite = _IDX_SETS[name]
    return DatasetSource(
        name=name,
        description=f"{pretty} ({cite}), IDX files, 28x28 grey, 60,000 train / 10,000 test",
        input_shape=(1, 28, 28),
        num_classes=10,
        files=tuple(f"{folder}/{f}.gz" for f in _IDX_FILES),
        load=lambda root: _load_idx(name, root),
        info=lambda root: _idx_info(name, root),
        download=lambda root: _download_idx(name, root),
    )


SOURCES = tuple(_idx_source_for(name) for name in _IDX_SETS)
