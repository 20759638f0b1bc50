"""Faces: AT&T / ORL (Samaria & Harter 1994), the model-inversion target of Fredrikson, Jha & Ristenpart (2015, §5).

``ROOT/orl_faces/s1..s40/1..10.pgm`` (1, 112, 92), or the 64×64 Olivetti arrays under
``ROOT/olivetti/`` as a fallback; 40 identities, images 1–7 of each identity train, 8–10 test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from dpaudit.data.containers import DatasetBundle, make_bundle
from dpaudit.data.source import DatasetInfo, DatasetNotFoundError, DatasetSource, missing_info, not_found

__all__ = ["SOURCE"]

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
    return not_found(
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
    return make_bundle(
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
                    raise not_found("faces", root, f"{path} (the ORL folder is incomplete)")
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
        return missing_info("faces", str(_faces_not_found(root, download=False)))
    kind, folder = found
    n_train, n_test = _ORL_SUBJECTS * _FACES_TRAIN_PER_ID, _ORL_SUBJECTS * (_ORL_IMAGES - _FACES_TRAIN_PER_ID)
    if kind == "orl":
        missing = [str(_orl_path(root, s, i)) for s in range(1, _ORL_SUBJECTS + 1) for i in range(1, _ORL_IMAGES + 1) if not _orl_path(root, s, i).is_file()]
        if missing:
            return missing_info("faces", f"ORL folder {folder} is incomplete: {len(missing)} missing, e.g. {missing[0]}")
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


SOURCE = DatasetSource(
    name="faces",
    description="AT&T/ORL faces (Samaria & Harter 1994), 40 identities x 10 images, 112x92 PGM (Olivetti 64x64 arrays as fallback); images 1-7 train, 8-10 test",
    input_shape=None,  # (1, 112, 92) from ORL, (1, 64, 64) from the Olivetti fallback
    num_classes=_ORL_SUBJECTS,
    files=tuple(f"orl_faces/s{s}/{i}.pgm" for s in range(1, _ORL_SUBJECTS + 1) for i in range(1, _ORL_IMAGES + 1)),
    load=_load_faces,
    info=_faces_info,
)
