"""Faces: AT&T / ORL (Samaria & Harter 1994), the model-inversion target of Fredrikson, Jha & Ristenpart (2015, §5).

``ROOT/orl_faces/s1..s40/1..10.pgm`` (1, 112, 92), or the 64×64 Olivetti arrays under
``ROOT/olivetti/`` as a fallback; 40 identities, images 1–7 of each identity train, 8–10 test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dpaudit.data.containers import DatasetBundle, make_bundle
from dpaudit.data.integrity import checked_files, verify_checksum
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

_ORL_SUBJECTS = 40
_ORL_IMAGES = 10
_FACES_TRAIN_PER_ID = 7  # images 1–7 of each identity train, 8–10 test


def _read_pgm(path: Path) -> np.ndarray:
    """A binary 8-bit PGM ('P5') as a uint8 (height, width) array.

    Raises:
        DatasetFileError: the file is unreadable, not an 8-bit binary PGM, or shorter than its
            header says.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetFileError(path, f"unreadable: {exc.strerror or exc}") from None
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
            raise DatasetFileError(path, "truncated: the PGM header ends early")
        tokens.append(raw[start:pos])
    pos += 1  # the single whitespace byte that ends the header
    if tokens[0] != b"P5":
        raise DatasetFileError(path, f"not a binary PGM: magic {tokens[0][:8]!r}, expected b'P5'")
    if not all(t.isdigit() and len(t) <= 6 for t in tokens[1:]):
        raise DatasetFileError(
            path,
            f"not a valid PGM: width, height and maxval must be integers, got {b' '.join(t[:8] for t in tokens[1:])!r}",
        )
    width, height, maxval = (int(t) for t in tokens[1:])
    if not 0 < maxval < 256:
        raise DatasetFileError(path, f"not an 8-bit PGM: maxval {maxval}")
    if len(raw) - pos < width * height:
        raise DatasetFileError(
            path,
            f"truncated: its header declares {width}x{height} pixels "
            f"({width * height} bytes), {max(len(raw) - pos, 0)} follow it",
        )
    pixels = np.frombuffer(raw, dtype=np.uint8, count=width * height, offset=pos)
    return pixels.reshape(height, width)


def _load_npy(path: Path) -> np.ndarray:
    """``np.load`` without pickles, its errors as :class:`DatasetFileError` naming the file."""
    try:
        return np.load(path, allow_pickle=False)
    except OSError as exc:
        raise DatasetFileError(path, f"unreadable: {exc.strerror or exc}") from None
    except (ValueError, EOFError, TypeError) as exc:
        # numpy says "cannot reshape", "Object arrays cannot be loaded", "mmap length" ...
        raise DatasetFileError(path, f"not a valid .npy array file: {exc}") from None


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
    return not_found(
        "faces",
        root,
        f"{_orl_path(root, 1, 1)} (AT&T/ORL faces, s1..s40/1..10.pgm) or "
        f"{root / 'olivetti' / 'olivetti_faces.npy'} with "
        "olivetti_faces_target.npy",
        download=download,
    )


def _per_identity_split(x: np.ndarray, y: np.ndarray, image_index: np.ndarray, source: str) -> DatasetBundle:
    train = image_index < _FACES_TRAIN_PER_ID
    # Stable order: by identity, then image number, so ids do not depend on file-system order.
    order_tr = np.lexsort((image_index[train], y[train]))
    order_te = np.lexsort((image_index[~train], y[~train]))
    x_tr, y_tr = x[train][order_tr], y[train][order_tr]
    x_te, y_te = x[~train][order_te], y[~train][order_te]
    return make_bundle(
        "faces",
        x_train=torch.from_numpy(np.ascontiguousarray(x_tr)),
        y_train=torch.from_numpy(y_tr.astype(np.int64)),
        x_test=torch.from_numpy(np.ascontiguousarray(x_te)),
        y_test=torch.from_numpy(y_te.astype(np.int64)),
        num_classes=_ORL_SUBJECTS,
        description=(
            f"{source}; 40 identities, per-identity split: images "
            f"1-{_FACES_TRAIN_PER_ID} train ({len(y_tr)}), "
            f"{_FACES_TRAIN_PER_ID + 1}-{_ORL_IMAGES} test ({len(y_te)})"
        ),
    )


def _orl_images(root: Path, folder: Path) -> tuple[list[np.ndarray], int]:
    """The 400 ORL images, checked (format, 112x92, ``MD5SUMS``), and how many were checksummed."""
    images, checksums = [], 0
    for s in range(1, _ORL_SUBJECTS + 1):
        for i in range(1, _ORL_IMAGES + 1):
            path = _orl_path(root, s, i)
            if not path.is_file():
                raise not_found("faces", root, f"{path} (the ORL folder is incomplete)")
            image = _read_pgm(path)
            if image.shape != (112, 92):
                raise DatasetFileError(
                    path, f"not an ORL face: {image.shape[0]}x{image.shape[1]} (rows x cols), expected 112x92"
                )
            checksums += verify_checksum(path, folder)
            images.append(image)
    return images, checksums


def _olivetti_arrays(folder: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """The Olivetti arrays, checked (shapes, dtypes, targets, ``MD5SUMS``), and how many were checksummed."""
    faces_path, target_path = folder / "olivetti_faces.npy", folder / "olivetti_faces_target.npy"
    n = _ORL_SUBJECTS * _ORL_IMAGES
    faces = _load_npy(faces_path)
    target = _load_npy(target_path)
    if faces.shape != (n, 64, 64) or faces.dtype.kind != "f":
        raise DatasetFileError(
            faces_path, f"not the Olivetti faces: expected float (400, 64, 64), got {faces.dtype} {faces.shape}"
        )
    if target.shape != (n,) or target.dtype.kind not in "iu":
        raise DatasetFileError(
            target_path, f"not the Olivetti targets: expected integer (400,), got {target.dtype} {target.shape}"
        )
    if not np.all(target == np.arange(n) // _ORL_IMAGES):
        raise DatasetFileError(target_path, "not the Olivetti targets: sample i must have target i // 10")
    if not np.all(np.isfinite(faces)):
        raise DatasetFileError(faces_path, "not the Olivetti faces: it holds NaN or infinite pixels")
    checksums = verify_checksum(faces_path, folder) + verify_checksum(target_path, folder)
    return faces, target, checksums


def _load_faces(root: Path) -> DatasetBundle:
    found = _faces_source(root)
    if found is None:
        raise _faces_not_found(root, download=False)
    kind, folder = found
    if kind == "orl":
        images, _ = _orl_images(root, folder)
        labels = [s for s in range(_ORL_SUBJECTS) for _ in range(_ORL_IMAGES)]
        index = [i for _ in range(_ORL_SUBJECTS) for i in range(_ORL_IMAGES)]
        x = (np.stack(images).astype(np.float32) / 255.0)[:, None]
        source = f"AT&T/ORL faces (Samaria & Harter 1994) from {folder}, 1x112x92 PGM, pixels/255"
        return _per_identity_split(x, np.asarray(labels), np.asarray(index), source)
    faces, target, _ = _olivetti_arrays(folder)
    n = _ORL_SUBJECTS * _ORL_IMAGES
    x = np.clip(faces.astype(np.float32), 0.0, 1.0)[:, None]
    source = f"Olivetti faces arrays (AT&T/ORL, 64x64 version) from {folder}, 1x64x64"
    return _per_identity_split(x, target.astype(np.int64), np.arange(n) % _ORL_IMAGES, source)


def _faces_info(root: Path) -> DatasetInfo:
    found = _faces_source(root)
    if found is None:
        return missing_info("faces", str(_faces_not_found(root, download=False)))
    kind, folder = found
    n_train, n_test = _ORL_SUBJECTS * _FACES_TRAIN_PER_ID, _ORL_SUBJECTS * (_ORL_IMAGES - _FACES_TRAIN_PER_ID)
    if kind == "orl":
        missing = [
            str(_orl_path(root, s, i))
            for s in range(1, _ORL_SUBJECTS + 1)
            for i in range(1, _ORL_IMAGES + 1)
            if not _orl_path(root, s, i).is_file()
        ]
        if missing:
            return missing_info(
                "faces", f"ORL folder {folder} is incomplete: {len(missing)} missing, e.g. {missing[0]}"
            )
        shape: tuple[int, ...] = (1, 112, 92)
        count = _ORL_SUBJECTS * _ORL_IMAGES
        what = "PGM headers and sizes"
    else:
        shape = (1, 64, 64)
        count = 2
        what = "array shapes and targets"
    try:
        # Reading every image is cheap (4 MB for ORL), so the listing checks what the load checks.
        checksums = _orl_images(root, folder)[1] if kind == "orl" else _olivetti_arrays(folder)[2]
    except DatasetFileError as err:
        return unusable_info("faces", err)
    return DatasetInfo(
        name="faces",
        available=True,
        num_train=n_train,
        num_test=n_test,
        input_shape=shape,
        num_classes=_ORL_SUBJECTS,
        detail=str(folder),
        checked=checked_files(count, checksums, what),
    )


SOURCE = register_dataset(
    DatasetSource(
        name="faces",
        description="AT&T/ORL faces (Samaria & Harter 1994), 40 identities x 10 images, "
        "112x92 PGM (Olivetti 64x64 arrays as fallback); images 1-7 train, 8-10 "
        "test",
        input_shape=None,  # (1, 112, 92) from ORL, (1, 64, 64) from the Olivetti fallback
        num_classes=_ORL_SUBJECTS,
        files=tuple(f"orl_faces/s{s}/{i}.pgm" for s in range(1, _ORL_SUBJECTS + 1) for i in range(1, _ORL_IMAGES + 1)),
        load=_load_faces,
        info=_faces_info,
    )
)
