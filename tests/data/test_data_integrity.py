"""Every dataset file is checked before use: format, length, ``MD5SUMS``; and the data root itself.

Each damaged file gives a :class:`DatasetFileError` (a ``ValueError``) whose one-line message
starts with the file, both from :func:`load_dataset` and, as ``unavailable: <file>: <reason>``,
from :func:`dataset_info`; never EOFError, zlib.error, BadGzipFile, AssertionError (torchvision)
or pickle.UnpicklingError as before. Files are synthesised in ``tmp_path``.
"""

from __future__ import annotations

import builtins
import gzip
import hashlib
import os
import pickle
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from dpaudit.data import DATA_ROOT_ENV, clear_cache, dataset_info, load_dataset
from dpaudit.data import cifar10 as cifar_mod
from dpaudit.data.integrity import md5_listing, verify_checksum
from dpaudit.data.source import DataRootError, DatasetFileError, checked_data_root

pytestmark = pytest.mark.usefixtures("no_data_root")  # tests/conftest.py


def idx_bytes(array) -> bytes:
    arr = np.ascontiguousarray(array, dtype=np.uint8)
    return bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def write_mnist(folder: Path, *, n_train: int = 12, n_test: int = 6, gz: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    for split, n in (("train", n_train), ("t10k", n_test)):
        for kind, arr in (("images-idx3", rng.integers(0, 256, (n, 28, 28))), ("labels-idx1", rng.integers(0, 10, n))):
            name = f"{split}-{kind}-ubyte"
            data = idx_bytes(arr)
            if gz:
                (folder / f"{name}.gz").write_bytes(gzip.compress(data, mtime=0))
            else:
                (folder / name).write_bytes(data)
    return folder


def info_of(root: Path, name: str):
    return {i.name: i for i in dataset_info(data_root=root)}[name]


def expect_refused(root: Path, name: str, path: Path, reason: str) -> None:
    """load_dataset raises DatasetFileError "<path> is <reason>..." and dataset_info lists it."""
    clear_cache()
    with pytest.raises(DatasetFileError) as exc:
        load_dataset(name, data_root=root)
    message = str(exc.value)
    assert isinstance(exc.value, ValueError) and "\n" not in message
    assert exc.value.path == path and message.startswith(f"{path} is {reason}"), message
    info = info_of(root, name)
    assert not info.available and info.problem_file == str(path)
    assert info.detail.startswith(f"unavailable: {path}: {reason}"), info.detail


# ----------------------------------------------------------------------------- IDX


def test_small_valid_idx_set_loads_and_is_listed_with_what_was_checked(tmp_path):
    write_mnist(tmp_path / "mnist")
    b = load_dataset("mnist", data_root=tmp_path)
    assert (len(b.train), len(b.test)) == (12, 6)
    info = info_of(tmp_path, "mnist")
    assert (
        info.available
        and (info.num_train, info.num_test) == (12, 6)
        and "IDX headers and lengths of 4 files" in info.checked
    )


@pytest.mark.parametrize(
    ("file", "content", "reason"),
    [
        (
            "train-images-idx3-ubyte.gz",
            gzip.compress(b"\x00\x00\x0d\x03" + b"\x00" * 20),
            "not an IDX file of unsigned bytes: it starts with 0x00000d03",
        ),
        (
            "train-images-idx3-ubyte.gz",
            gzip.compress(idx_bytes(np.zeros((12, 32, 32)))),
            "not a file of 28x28 images: its IDX header declares 32x32",
        ),
        (
            "train-labels-idx1-ubyte.gz",
            gzip.compress(idx_bytes(np.zeros((12, 2)))),
            "not an IDX labels file: 2 dimensions, expected 1",
        ),
        (
            "t10k-images-idx3-ubyte.gz",
            gzip.compress(idx_bytes(np.zeros((6, 28, 28))) + b"extra"),
            "not a valid IDX file: its header implies 4720 bytes after decompression, it holds 4725",
        ),
        (
            "t10k-images-idx3-ubyte.gz",
            gzip.compress(idx_bytes(np.random.default_rng(0).integers(0, 256, (6, 28, 28))))[:-300],
            "truncated: expected 4720 bytes after decompression, got ",
        ),
        ("t10k-images-idx3-ubyte.gz", b"\x1f\x8b", "truncated"),
        (
            "train-labels-idx1-ubyte.gz",
            gzip.compress(idx_bytes(np.zeros(0))),
            "empty: its IDX header declares 0 labels",
        ),
    ],
)
def test_malformed_idx_files_are_refused_naming_the_file(tmp_path, file, content, reason):
    folder = write_mnist(tmp_path / "mnist")
    (folder / file).write_bytes(content)
    expect_refused(tmp_path, "mnist", folder / file, reason)


def test_truncated_plain_idx_in_torchvision_layout_is_refused(tmp_path):
    raw = write_mnist(tmp_path / "MNIST" / "raw", gz=False)
    path = raw / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:1000])
    # torchvision's own reader would stop at an AssertionError (exit 1) here.
    expect_refused(tmp_path, "mnist", path, f"truncated: expected {16 + 12 * 784} bytes, got 1000")


# ----------------------------------------------------------------------------- MD5SUMS


def test_md5sums_listing_formats_and_refusal(tmp_path):
    folder = write_mnist(tmp_path / "mnist")
    names = sorted(p.name for p in folder.iterdir())
    digests = {n: hashlib.md5((folder / n).read_bytes()).hexdigest() for n in names}
    # md5sum's text and binary markers, a "./" prefix, a comment and a blank line.
    (folder / "MD5SUMS").write_text(
        f"# made by md5sum\n\n{digests[names[0]]}  ./{names[0]}\n{digests[names[1]].upper()} *{names[1]}\n"
    )
    assert md5_listing(folder) == {names[0]: digests[names[0]], names[1]: digests[names[1]]}
    assert verify_checksum(folder / names[0], folder) and verify_checksum(folder / names[1], folder)
    assert not verify_checksum(folder / names[2], folder)  # not listed: checked by format only
    assert "MD5 of 2 against MD5SUMS" in info_of(tmp_path, "mnist").checked
    (folder / "MD5SUMS").write_text("this is not a listing\n")
    expect_refused(tmp_path, "mnist", folder / "MD5SUMS", "not an MD5SUMS listing: line 1 is not '<md5> <file>'")


def test_a_rewrite_is_noticed_even_when_size_and_mtime_are_restored(tmp_path):
    folder = write_mnist(tmp_path / "mnist", gz=False)
    labels = folder / "train-labels-idx1-ubyte"
    (folder / "MD5SUMS").write_text(f"{hashlib.md5(labels.read_bytes()).hexdigest()}  {labels.name}\n")
    assert verify_checksum(labels, folder)
    st = labels.stat()
    forged = idx_bytes(np.full(12, 3))
    assert len(forged) == st.st_size
    labels.write_bytes(forged)
    os.utime(labels, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(DatasetFileError, match="altered or damaged"):
        verify_checksum(labels, folder)


# ----------------------------------------------------------------------------- CIFAR-10


def _cifar_folder(root: Path, per_batch: int = 2) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in (*cifar_mod._CIFAR_TRAIN, *cifar_mod._CIFAR_TEST):
        batch = {b"data": np.zeros((per_batch, 3072), np.uint8), b"labels": [1] * per_batch}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    return folder


def _proto2(*ops: bytes) -> bytes:
    return b"\x80\x02" + b"".join(ops) + b"."


# Hand-written pickles that use only the allowed globals, but not the way numpy's pickles do.
_DIRECT_NDARRAY = _proto2(b"cnumpy\nndarray\n", b"J\x40\x42\x0f\x00\x85", b"R")  # numpy.ndarray((1000000,))
_OBJECT_DTYPE = _proto2(b"cnumpy\ndtype\n", b"X\x02\x00\x00\x00O8\x89\x88\x87", b"R")  # numpy.dtype("O8", False, True)
_OTHER_CODEC = _proto2(
    b"c_codecs\nencode\n", b"X\x03\x00\x00\x00abcX\x04\x00\x00\x00zlib\x86", b"R"
)  # _codecs.encode("abc", "zlib")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (_DIRECT_NDARRAY, "it calls numpy.ndarray directly"),
        (_OBJECT_DTYPE, "it asks for a numpy dtype of kind 'O'"),
        (_OTHER_CODEC, "it calls _codecs.encode other than for latin-1 text"),
        (
            pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]}, protocol=2)[:-40],
            "the pickle ends early",
        ),
        (b"not a pickle at all", "malformed pickle"),
        (pickle.dumps([1, 2, 3]), "expected a dict, got list"),
    ],
)
def test_cifar_batches_misusing_the_allowed_globals_are_refused(tmp_path, content, reason):
    folder = _cifar_folder(tmp_path)
    (folder / "data_batch_2").write_bytes(content)
    expect_refused(tmp_path, "cifar10", folder / "data_batch_2", f"not a CIFAR-10 batch: {reason}")


def test_cifar_stand_ins_cannot_be_altered_by_a_build_opcode(tmp_path):
    # BUILD with a slot state would setattr on the object it is applied to; the stand-ins for
    # numpy.dtype etc. have no attribute to set, so a batch cannot change how later ones load.
    build = _proto2(b"cnumpy\ndtype\n", b"N}X\x08\x00\x00\x00__call__Nsb\x86", b"b")
    path = tmp_path / "batch"
    path.write_bytes(build)
    with pytest.raises(DatasetFileError, match="not a CIFAR-10 batch"):
        cifar_mod._restricted_load(path)
    assert cifar_mod._ALLOWED_GLOBALS[("numpy", "dtype")]("u1") == np.dtype("u1")


def test_cifar_batch_far_larger_than_any_batch_is_refused_unread(tmp_path):
    folder = _cifar_folder(tmp_path)
    with open(folder / "test_batch", "wb") as fh:
        fh.truncate(cifar_mod._MAX_BATCH_BYTES + 1)  # sparse: nothing is written
    expect_refused(
        tmp_path, "cifar10", folder / "test_batch", f"not a CIFAR-10 batch: {cifar_mod._MAX_BATCH_BYTES + 1} bytes"
    )


def test_cifar_genuine_layouts_still_load_and_are_counted(tmp_path):
    folder = _cifar_folder(tmp_path, per_batch=3)
    # protocol 5 (out-of-band capable, _frombuffer) for one batch
    (folder / "data_batch_5").write_bytes(
        pickle.dumps({"data": np.full((3, 3072), 7, np.uint8), "labels": np.array([0, 1, 2])}, protocol=5)
    )
    b = load_dataset("cifar10", data_root=tmp_path)
    assert (len(b.train), len(b.test)) == (15, 3)
    info = info_of(tmp_path, "cifar10")
    assert info.available and (info.num_train, info.num_test) == (15, 3) and "batch structure" in info.checked


# ----------------------------------------------------------------------------- faces and adult


def test_truncated_pgm_is_refused(tmp_path):
    for s in range(1, 41):
        (tmp_path / "orl_faces" / f"s{s}").mkdir(parents=True)
        for i in range(1, 11):
            (tmp_path / "orl_faces" / f"s{s}" / f"{i}.pgm").write_bytes(b"P5\n92 112\n255\n" + bytes(92 * 112))
    assert info_of(tmp_path, "faces").available
    bad = tmp_path / "orl_faces" / "s7" / "3.pgm"
    bad.write_bytes(b"P5\n92 112\n255\n" + bytes(500))
    expect_refused(tmp_path, "faces", bad, "truncated: its header declares 92x112 pixels (10304 bytes), 500 follow it")


def test_olivetti_array_holding_pickles_is_refused(tmp_path):
    folder = tmp_path / "olivetti"
    folder.mkdir()
    np.save(folder / "olivetti_faces.npy", np.array([builtins.open], dtype=object), allow_pickle=True)
    np.save(folder / "olivetti_faces_target.npy", np.arange(400) // 10)
    expect_refused(tmp_path, "faces", folder / "olivetti_faces.npy", "not a valid .npy array file: ")


def test_adult_csv_that_is_not_a_csv_is_refused(tmp_path):
    folder = tmp_path / "adult"
    folder.mkdir()
    (folder / "adult_train.csv").write_bytes(b"\xff\xfe\x00garbage\x00\n\x80\x81")
    (folder / "adult_test.csv").write_text("age,income\n30,<=50K.\n")
    expect_refused(tmp_path, "adult", folder / "adult_train.csv", "not a readable CSV file: ")


# ----------------------------------------------------------------------------- the data root


def test_checked_data_root(monkeypatch, tmp_path):
    assert checked_data_root(tmp_path) == tmp_path
    with pytest.raises(DataRootError, match=re.escape(f"--data-root={str(tmp_path / 'nope')!r} does not exist")):
        checked_data_root(tmp_path / "nope")
    assert checked_data_root(tmp_path / "nope", allow_missing=True) == tmp_path / "nope"  # a download creates it
    (tmp_path / "f").write_text("x")
    with pytest.raises(DataRootError, match="is not a directory"):
        checked_data_root(tmp_path / "f")
    with pytest.raises(DataRootError, match="is not a directory"):
        checked_data_root(tmp_path / "f" / "sub")
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path / "env-nope"))
    with pytest.raises(
        DataRootError, match=re.escape(f"{DATA_ROOT_ENV}={str(tmp_path / 'env-nope')!r} does not exist")
    ):
        checked_data_root()
    # The default root may be absent on a fresh install: it reads as empty.
    monkeypatch.delenv(DATA_ROOT_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert checked_data_root() == tmp_path / "home" / ".dpaudit" / "data"
    assert [i.available for i in dataset_info()] == [i.name == "digits" for i in dataset_info()]


def test_load_dataset_refuses_a_missing_explicit_root_but_digits_ignores_it(tmp_path):
    with pytest.raises(DataRootError, match="--data-root=.* does not exist"):
        load_dataset("mnist", data_root=tmp_path / "nope")
    with pytest.raises(DataRootError, match="does not exist"):
        dataset_info(data_root=tmp_path / "nope")
    assert len(load_dataset("digits", data_root=tmp_path / "nope").train) == 1437


def test_no_error_is_a_raw_decoder_exception(tmp_path):
    # The kinds the command line used to report as "internal error" (exit 1).
    folder = write_mnist(tmp_path / "mnist")
    for damage in (b"", b"\x1f\x8b\x08\x00", gzip.compress(b"")[:-1], b"x" * 64):
        (folder / "train-labels-idx1-ubyte.gz").write_bytes(damage)
        clear_cache()
        with pytest.raises(DatasetFileError):
            load_dataset("mnist", data_root=tmp_path)
