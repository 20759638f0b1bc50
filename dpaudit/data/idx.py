"""MNIST-style IDX files: MNIST (LeCun et al. 1998) and Fashion-MNIST (Xiao, Rasul & Vollgraf 2017).

The four IDX files (``.gz`` or plain) are found under ``ROOT/<folder>/`` (the layout of
``../shared/data``) or torchvision's ``ROOT/<Class>/raw/``; they are read with
``torchvision.datasets.MNIST`` / ``FashionMNIST``, decompressing into the cache when needed.
(1, 28, 28), 10 classes, 60,000 / 10,000.

Every file is checked before torchvision sees it (whose reader asserts rather than reports):
the IDX header (unsigned bytes, 3 dimensions of 28x28 images or 1 of labels), the length the
header implies (after decompression for ``.gz``), the gzip CRC, matching image and label counts,
labels in 0..9, and the folder's ``MD5SUMS`` where there is one. A failure is a
:class:`~dpaudit.data.source.DatasetFileError` naming the file.
"""

from __future__ import annotations

import gzip
import io
import math
import os
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import torch

from dpaudit.data.containers import DatasetBundle, make_bundle
from dpaudit.data.integrity import checked_files, size_of, verify_checksum
from dpaudit.data.registry import register_dataset
from dpaudit.data.source import (
    DatasetFileError,
    DatasetInfo,
    DatasetNotFoundError,
    DatasetSource,
    cache_dir,
    missing_info,
    not_found,
    unusable_info,
)
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
        f"{root / folder / (_IDX_FILES[0] + '.gz')} and the other three IDX "
        f"files (or torchvision's {root / cls_name / 'raw' / _IDX_FILES[0]})",
        download=download,
    )


_IDX_UBYTE = 0x08  # the IDX type code of unsigned bytes, the only one MNIST-style files use
_GZIP_TRAILER = 8  # CRC32 + ISIZE
_GZIP_ERRORS = (EOFError, zlib.error, gzip.BadGzipFile, OSError)


def _kind(path: Path) -> str:
    return "images" if "-images-" in path.name else "labels"


def _gzip_size(path: Path) -> int:
    """Uncompressed size mod 2**32, from the gzip trailer (ISIZE), without decompressing."""
    with open(path, "rb") as fh:
        fh.seek(-4, os.SEEK_END)
        return int(struct.unpack("<I", fh.read(4))[0])


@contextmanager
def _opened(path: Path) -> Iterator[io.BufferedIOBase]:
    """``path`` opened for its IDX content (decompressed for ``.gz``), read errors as DatasetFileError."""
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as fh:
            yield fh
    except EOFError:
        raise DatasetFileError(path, "truncated: the compressed data ends early") from None
    except (zlib.error, gzip.BadGzipFile) as exc:
        raise DatasetFileError(path, f"not a valid gzip file: {exc}") from None
    except OSError as exc:
        raise DatasetFileError(path, f"unreadable: {exc.strerror or exc}") from None


def _idx_dims(path: Path) -> tuple[tuple[int, ...], int]:
    """The dimensions in ``path``'s IDX header and the length in bytes they imply.

    Raises:
        DatasetFileError: not an IDX file of unsigned bytes with the dimensions MNIST-style
            images (n, 28, 28) or labels (n,) have.
    """
    kind = _kind(path)
    want_ndim = 3 if kind == "images" else 1
    with _opened(path) as fh:
        magic = fh.read(4)
        if len(magic) < 4:
            raise DatasetFileError(path, f"truncated: {len(magic)} bytes of content, shorter than an IDX header")
        if magic[:2] != b"\x00\x00" or magic[2] != _IDX_UBYTE:
            raise DatasetFileError(
                path,
                f"not an IDX file of unsigned bytes: it starts with 0x{magic.hex()}, expected 0x0000080{want_ndim}",
            )
        ndim = magic[3]
        if ndim != want_ndim:
            raise DatasetFileError(path, f"not an IDX {kind} file: {ndim} dimensions, expected {want_ndim}")
        raw = fh.read(4 * ndim)
    if len(raw) < 4 * ndim:
        raise DatasetFileError(path, "truncated: the IDX header ends early")
    dims = tuple(int(d) for d in struct.unpack(f">{ndim}I", raw))
    if dims[0] == 0:
        raise DatasetFileError(path, f"empty: its IDX header declares 0 {kind}")
    if kind == "images" and dims[1:] != (28, 28):
        raise DatasetFileError(path, f"not a file of 28x28 images: its IDX header declares {dims[1]}x{dims[2]}")
    return dims, 4 + 4 * ndim + math.prod(dims)


def _length_problem(path: Path, expected: int, actual: int) -> DatasetFileError:
    after = " after decompression" if path.suffix == ".gz" else ""
    if actual < expected:
        return DatasetFileError(path, f"truncated: expected {expected} bytes{after}, got {actual}")
    return DatasetFileError(
        path, f"not a valid IDX file: its header implies {expected} bytes{after}, it holds {actual}"
    )


def _copy_counting(path: Path, out: IO[bytes] | None, expected: int) -> None:
    """Decompresses (or copies) ``path`` into ``out`` (or nowhere), checking its length.

    gzip's own checks run to the end (CRC32 and length of the trailer), so a damaged or
    truncated stream raises :class:`DatasetFileError` here rather than EOFError/zlib.error.

    Raises:
        DatasetFileError: the content is shorter or longer than ``expected`` bytes, or the
            gzip stream is damaged.
    """
    count = 0
    failed: OSError | None = None
    with _opened(path) as fh:
        while True:
            try:
                # read1: one decompression step at a time, so what came before a truncation is counted.
                chunk = fh.read1(1 << 20)
            except EOFError:
                raise _length_problem(path, expected, count) from None
            if not chunk:
                break
            count += len(chunk)
            if out is not None:
                try:
                    out.write(chunk)
                except OSError as exc:  # the cache's fault (e.g. a full disk), not the source's
                    failed = exc
                    break
    if failed is not None:
        raise failed
    if count != expected:
        raise _length_problem(path, expected, count)


def _check_idx_file(path: Path, *, full: bool) -> tuple[int, ...]:
    """Checks one IDX file's header and length; returns its dimensions.

    A plain file's length is its size. A ``.gz`` file's is read from its trailer when ``full``
    is False (cheap, for ``dpaudit datasets``; a truncated file's last bytes are not a trailer,
    so a truncation shows up as a mismatch, which is then confirmed by decompressing), and by
    decompressing the whole stream when ``full`` is True.
    """
    dims, expected = _idx_dims(path)
    if path.suffix != ".gz":
        actual = size_of(path)
        if actual != expected:
            raise _length_problem(path, expected, actual)
        return dims
    if not full:
        try:
            if size_of(path) > _GZIP_TRAILER and _gzip_size(path) == expected % 2**32:
                return dims
        except OSError as exc:
            raise DatasetFileError(path, f"unreadable: {exc.strerror or exc}") from None
    _copy_counting(path, None, expected)
    return dims


def _materialize(src: Path, dst: Path) -> None:
    """Puts a checked, uncompressed copy of ``src`` (``.gz`` or plain) at ``dst``, atomically.

    An existing ``dst`` is reused when its mtime matches the source and its size is the one
    the source's IDX header implies, so repeated loads and concurrent processes do no extra
    work and a changed source is noticed.

    Raises:
        DatasetFileError: ``src`` is not a complete IDX file of MNIST's shape.
    """
    _, expected = _idx_dims(src)
    st = src.stat()
    if dst.is_file():
        dst_st = dst.stat()
        if dst_st.st_mtime_ns == st.st_mtime_ns and dst_st.st_size == expected:
            return
    if src.suffix != ".gz" and st.st_size != expected:
        raise _length_problem(src, expected, st.st_size)
    dst.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = temp_file_beside(dst)
    try:
        with os.fdopen(fd, "wb") as out:
            _copy_counting(src, out, expected)
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, dst)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def _idx_folder(found: tuple[str, Path], name: str) -> Path:
    """The folder holding the four files of a layout :func:`_idx_source` found."""
    kind, where = found
    return where / _IDX_SETS[name][1] / "raw" if kind == "torchvision" else where


def _pick(folder: Path, f: str) -> Path:
    return folder / f if (folder / f).is_file() else folder / f"{f}.gz"


def _check_idx_set(name: str, folder: Path, *, full: bool) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """Checks the four files in ``folder``: checksums, headers, lengths, image/label counts.

    Returns:
        (train image dims, test image dims, number of files checked against MD5SUMS).
    """
    paths = [_pick(folder, f) for f in _IDX_FILES]
    # Format first: "truncated: expected N bytes, got M" says more than a checksum mismatch.
    dims = [_check_idx_file(path, full=full) for path in paths]
    checksums = sum(verify_checksum(path, folder) for path in paths)
    for images, labels, image_dims, label_dims in (
        (paths[0], paths[1], dims[0], dims[1]),
        (paths[2], paths[3], dims[2], dims[3]),
    ):
        if image_dims[0] != label_dims[0]:
            raise DatasetFileError(
                labels, f"inconsistent with {images.name}: {label_dims[0]} labels for {image_dims[0]} images"
            )
    return dims[0], dims[2], checksums


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
        _materialize(_pick(where, f), raw / f)
    return cache_root


def _load_idx(name: str, root: Path) -> DatasetBundle:
    import torchvision.datasets as tvd

    _, cls_name, pretty, cite = _IDX_SETS[name]
    found = _idx_source(name, root)
    if found is None:
        raise _idx_not_found(name, root, download=False)
    folder = _idx_folder(found, name)
    # Headers, plain lengths and checksums now; a .gz stream's length and CRC while it is
    # decompressed into the cache below (once, not twice).
    _check_idx_set(name, folder, full=found[0] == "torchvision")
    tv_root = _torchvision_idx_root(name, root)
    if tv_root is None:
        raise _idx_not_found(name, root, download=False)
    cls = getattr(tvd, cls_name)
    parts = []
    for train in (True, False):
        try:
            ds = cls(root=str(tv_root), train=train, download=False)
        except (AssertionError, RuntimeError, ValueError, OSError) as exc:
            # Not expected after the checks above (a file changed meanwhile?); still the data's fault.
            raise DatasetFileError(tv_root / cls_name / "raw", f"unreadable as {cls_name} IDX files: {exc}") from None
        x = ds.data.to(torch.float32).div_(255.0).unsqueeze(1).contiguous()
        y = torch.as_tensor(ds.targets, dtype=torch.int64)
        if y.numel() and (int(y.min()) < 0 or int(y.max()) > 9):
            labels = _pick(folder, _IDX_FILES[1 if train else 3])
            raise DatasetFileError(
                labels, f"not a file of digit labels: its values span [{int(y.min())}, {int(y.max())}], expected 0..9"
            )
        parts.append((x, y))
    (x_tr, y_tr), (x_te, y_te) = parts
    return make_bundle(
        name,
        x_train=x_tr,
        y_train=y_tr,
        x_test=x_te,
        y_test=y_te,
        num_classes=10,
        description=(
            f"{pretty} ({cite}), {len(y_tr)} train / {len(y_te)} test, 28x28 grey, "
            f"pixels/255; read with torchvision.datasets.{cls_name} from {found[1]}"
        ),
    )


def _download_idx(name: str, root: Path) -> None:
    import torchvision.datasets as tvd

    _, cls_name, _, _ = _IDX_SETS[name]
    cls = getattr(tvd, cls_name)
    for train in (True, False):
        cls(root=str(root), train=train, download=True)


def _idx_info(name: str, root: Path) -> DatasetInfo:
    found = _idx_source(name, root)
    if found is None:
        return missing_info(name, str(_idx_not_found(name, root, download=False)))
    folder = _idx_folder(found, name)
    try:
        train_dims, test_dims, checksums = _check_idx_set(name, folder, full=False)
    except DatasetFileError as err:
        return unusable_info(name, err)
    return DatasetInfo(
        name=name,
        available=True,
        num_train=int(train_dims[0]),
        num_test=int(test_dims[0]),
        input_shape=(1, *(int(d) for d in train_dims[1:])),
        num_classes=10,
        detail=str(folder),
        checked=checked_files(len(_IDX_FILES), checksums, "IDX headers and lengths"),
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


SOURCES = tuple(register_dataset(_idx_source_for(name)) for name in _IDX_SETS)
