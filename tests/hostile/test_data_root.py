"""A hostile data root (issue "Results that cannot lie", finding 6, its data-root part).

Before the fix a truncated MNIST file, or a CIFAR-10 batch carrying a pickle of anything but
arrays, was listed by ``dpaudit datasets`` as available and, when used, ended in exit 1
("internal error: EOFError / UnpicklingError"); a file altered after its ``MD5SUMS`` listing
was used silently; a ``--data-root`` naming nothing, or a file, was listed as an empty root.
Now ``dpaudit datasets`` lists such a dataset as ``unavailable: <file>: <reason>``, and
``train`` / ``audit`` / ``attack`` exit 2 with one line naming the file (or ``--data-root`` /
``$DPAUDIT_DATA_ROOT`` and the path).

The data roots are synthesised in ``tmp_path`` (tiny IDX files, fake CIFAR batches), so the
tests run without ``../shared/data``; one test also damages a copy of the real MNIST files and
skips when they are absent. Nothing a crafted pickle names is ever run: its payload would
create a sentinel file, and every test that writes one checks it was not created.
"""

from __future__ import annotations

import builtins
import gzip
import hashlib
import json
import os
import pickle
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from dpaudit.app.cli import main
from dpaudit.data import DATA_ROOT_ENV

SHARED_MNIST = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "mnist"
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CIFAR_FILES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")


pytestmark = pytest.mark.usefixtures("no_data_root")  # tests/conftest.py


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, err: str, *needles: str) -> str:
    """Exit 2, exactly one line on stderr (after any progress bars), no traceback, naming ``needles``."""
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err
    lines = [line for line in err.replace("\r", "\n").splitlines() if "error" in line]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# ----------------------------------------------------------------------------- synthetic data


def idx_bytes(array: np.ndarray) -> bytes:
    arr = np.ascontiguousarray(array, dtype=np.uint8)
    return bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def write_mnist(root: Path, folder: str = "mnist", *, n_train: int = 48, n_test: int = 24, seed: int = 0) -> Path:
    """Four tiny, valid, gzipped IDX files under ``root/folder``."""
    out = root / folder
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n in (("train", n_train), ("t10k", n_test)):
        (out / f"{split}-images-idx3-ubyte.gz").write_bytes(
            gzip.compress(idx_bytes(rng.integers(0, 256, (n, 28, 28))), mtime=0)
        )
        (out / f"{split}-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes(rng.integers(0, 10, n)), mtime=0))
    return out


def write_md5sums(folder: Path) -> None:
    lines = [
        f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.name}" for p in sorted(folder.iterdir()) if p.name != "MD5SUMS"
    ]
    (folder / "MD5SUMS").write_text("\n".join(lines) + "\n")


def truncate(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


class Payload:
    """Pickles to a call of ``builtins.open(sentinel, "w")``: unpickling it would create the file."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = str(sentinel)

    def __reduce__(self):
        return (builtins.open, (self.sentinel, "w"))


def write_cifar(root: Path, *, per_batch: int = 4, poisoned: str | None = None, sentinel: Path | None = None) -> Path:
    """Fake CIFAR-10 python batches; ``poisoned`` names a batch that also carries :class:`Payload`."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in CIFAR_FILES:
        batch = {
            b"batch_label": name.encode(),
            b"data": rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8),
            b"labels": rng.integers(0, 10, size=per_batch).tolist(),
        }
        if name == poisoned:
            assert sentinel is not None
            batch[b"filenames"] = Payload(sentinel)
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    return folder


def datasets_json(capsys, root: Path) -> dict:
    code, out, err = run(capsys, "datasets", "--data-root", str(root), "--json")
    assert code == 0, err
    return json.loads(out)["datasets"]


# ----------------------------------------------------------------------------- dpaudit datasets


def test_datasets_lists_a_truncated_mnist_file_as_unavailable_with_the_reason(capsys, tmp_path):
    write_mnist(tmp_path, "fashion-mnist")  # an intact neighbour stays available
    bad = write_mnist(tmp_path) / "train-images-idx3-ubyte.gz"
    truncate(bad, 300)
    data = datasets_json(capsys, tmp_path)
    assert data["fashion-mnist"]["available"] and data["fashion-mnist"]["num_train"] == 48
    mnist = data["mnist"]
    assert not mnist["available"] and mnist["num_train"] is None
    assert mnist["problem_file"] == str(bad)
    assert mnist["detail"].startswith(
        f"unavailable: {bad}: truncated: expected {16 + 48 * 784} bytes after decompression, got "
    )
    code, out, _ = run(capsys, "datasets", "--data-root", str(tmp_path))
    (line,) = [line for line in out.splitlines() if line.startswith("mnist ")]
    assert code == 0 and f"unavailable: {bad}: truncated" in line and " yes " not in line


def test_datasets_lists_a_cifar_batch_carrying_a_pickle_as_unavailable(capsys, tmp_path):
    sentinel = tmp_path / "sentinel"
    folder = write_cifar(tmp_path / "root", poisoned="data_batch_3", sentinel=sentinel)
    cifar = datasets_json(capsys, tmp_path / "root")["cifar10"]
    assert not cifar["available"] and cifar["problem_file"] == str(folder / "data_batch_3")
    assert cifar["detail"].startswith(f"unavailable: {folder / 'data_batch_3'}: not a CIFAR-10 batch: ")
    assert "open, which a batch never holds" in cifar["detail"]  # io.open: how builtins.open pickles
    assert not sentinel.exists()


def test_datasets_lists_a_file_that_differs_from_md5sums_as_unavailable(capsys, tmp_path):
    folder = write_mnist(tmp_path)
    write_md5sums(folder)
    intact = datasets_json(capsys, tmp_path)["mnist"]
    assert intact["available"] and "MD5 of 4 against MD5SUMS" in intact["checked"]
    # A well-formed replacement (other labels, same shape): only the checksum can tell.
    labels = folder / "t10k-labels-idx1-ubyte.gz"
    labels.write_bytes(gzip.compress(idx_bytes(np.zeros(24, dtype=np.uint8)), mtime=0))
    mnist = datasets_json(capsys, tmp_path)["mnist"]
    assert not mnist["available"] and mnist["problem_file"] == str(labels)
    assert mnist["detail"].startswith(f"unavailable: {labels}: altered or damaged: its MD5 is ")
    assert str(folder / "MD5SUMS") in mnist["detail"]


def test_datasets_checks_a_damaged_copy_of_the_real_mnist(capsys, tmp_path):
    if not SHARED_MNIST.is_dir():
        pytest.skip(f"offline data not found at {SHARED_MNIST}")
    folder = tmp_path / "mnist"
    folder.mkdir()
    for f in (*IDX_FILES, "MD5SUMS"):
        name = f if f == "MD5SUMS" else f"{f}.gz"
        shutil.copyfile(SHARED_MNIST / name, folder / name)
    intact = datasets_json(capsys, tmp_path)["mnist"]
    assert intact["available"] and (intact["num_train"], intact["num_test"]) == (60_000, 10_000)
    bad = folder / "train-images-idx3-ubyte.gz"
    truncate(bad, 1000)
    mnist = datasets_json(capsys, tmp_path)["mnist"]
    assert not mnist["available"]
    assert mnist["detail"].startswith(
        f"unavailable: {bad}: truncated: expected 47040016 bytes after decompression, got "
    )
    code, _, err = run(
        capsys,
        "train",
        "--defense",
        "nonprivate",
        "--model",
        "abadi-mnist",
        "--dataset",
        "mnist",
        "--data-root",
        str(tmp_path),
        "--out",
        str(tmp_path / "run"),
    )
    assert_one_line_error(code, err, f"{bad} is truncated: expected 47040016 bytes after decompression, got ")


# ----------------------------------------------------------------------------- using a bad dataset


def _train(root: Path, out: Path, dataset: str = "mnist", model: str = "abadi-mnist") -> list[str]:
    return [
        "train",
        "--defense",
        "nonprivate",
        "--model",
        model,
        "--dataset",
        dataset,
        "--epochs",
        "1",
        "--data-root",
        str(root),
        "--out",
        str(out),
        "--quiet",
    ]


def _audit(root: Path, out: Path) -> list[str]:
    return [
        "audit",
        "--defense",
        "dpsgd",
        "--dataset",
        "mnist",
        "--model",
        "abadi-mnist",
        "--num-trials",
        "2",
        "--noise-multiplier",
        "1",
        "--epochs",
        "1",
        "--data-root",
        str(root),
        "--out",
        str(out),
        "--quiet",
        "--no-report",
    ]


@pytest.mark.parametrize("verb", ["train", "audit", "attack"])
def test_using_a_truncated_mnist_file_exits_2_naming_it(capsys, tmp_path, verb):
    bad_root = tmp_path / "bad"
    bad = write_mnist(bad_root) / "train-images-idx3-ubyte.gz"
    truncate(bad, 300)
    if verb == "train":
        argv = _train(bad_root, tmp_path / "run")
    elif verb == "audit":
        argv = _audit(bad_root, tmp_path / "run")
    else:
        # A record trained on an intact root, attacked with the damaged one.
        write_mnist(tmp_path / "good")
        code, out, err = run(capsys, *_train(tmp_path / "good", tmp_path / "run"), "--json")
        assert code == 0, err
        record = json.loads(out)["record_path"]
        argv = [
            "attack",
            "membership",
            "--target",
            str(record),
            "--attack",
            "loss",
            "--data-root",
            str(bad_root),
            "--out",
            str(tmp_path / "run"),
            "--quiet",
        ]
    code, _, err = run(capsys, *argv)
    assert_one_line_error(code, err, f"{bad} is truncated: expected {16 + 48 * 784} bytes after decompression, got ")


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("flip", "is not a valid gzip file: "),  # the CRC (or the deflate stream) catches it
        ("not-gzip", "is not a valid gzip file: "),
        ("labels-out-of-range", "is not a file of digit labels: its values span [0, 12]"),
        ("count-mismatch", "is inconsistent with t10k-images-idx3-ubyte.gz: 23 labels for 24 images"),
    ],
)
def test_using_a_corrupt_mnist_file_exits_2_naming_it(capsys, tmp_path, damage, reason):
    folder = write_mnist(tmp_path)
    if damage == "flip":
        target = folder / "train-images-idx3-ubyte.gz"
        raw = bytearray(target.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        target.write_bytes(bytes(raw))
    elif damage == "not-gzip":
        target = folder / "train-labels-idx1-ubyte.gz"
        target.write_bytes(b"this is not gzip data at all, just text of some length\n" * 4)
    elif damage == "labels-out-of-range":
        target = folder / "t10k-labels-idx1-ubyte.gz"
        target.write_bytes(gzip.compress(idx_bytes(np.array([0] * 23 + [12])), mtime=0))
    else:
        target = folder / "t10k-labels-idx1-ubyte.gz"
        target.write_bytes(gzip.compress(idx_bytes(np.zeros(23)), mtime=0))
    code, _, err = run(capsys, *_train(tmp_path, tmp_path / "run"))
    assert_one_line_error(code, err, f"{target} {reason}")


def test_using_a_file_that_differs_from_md5sums_exits_2_naming_it(capsys, tmp_path):
    folder = write_mnist(tmp_path)
    write_md5sums(folder)
    labels = folder / "train-labels-idx1-ubyte.gz"
    labels.write_bytes(gzip.compress(idx_bytes(np.ones(48)), mtime=0))  # well-formed, but not the listed file
    code, _, err = run(capsys, *_train(tmp_path, tmp_path / "run"))
    assert_one_line_error(code, err, f"{labels} is altered or damaged: its MD5 is ", str(folder / "MD5SUMS"))
    assert not (tmp_path / "run" / "records").exists() or not any((tmp_path / "run" / "records").iterdir())


def test_using_a_cifar_batch_carrying_a_pickle_exits_2_and_runs_nothing(capsys, tmp_path):
    sentinel = tmp_path / "sentinel"
    folder = write_cifar(tmp_path / "root", poisoned="data_batch_1", sentinel=sentinel)
    code, _, err = run(capsys, *_train(tmp_path / "root", tmp_path / "run", dataset="cifar10", model="cifar10-cnn"))
    assert_one_line_error(
        code, err, f"{folder / 'data_batch_1'} is not a CIFAR-10 batch: ", "open, which a batch never holds"
    )
    assert not sentinel.exists()


def test_using_a_truncated_cifar_batch_exits_2_naming_it(capsys, tmp_path):
    folder = write_cifar(tmp_path / "root")
    truncate(folder / "test_batch", 100)
    code, _, err = run(capsys, *_train(tmp_path / "root", tmp_path / "run", dataset="cifar10", model="cifar10-cnn"))
    assert_one_line_error(code, err, f"{folder / 'test_batch'} is not a CIFAR-10 batch: ")


# ----------------------------------------------------------------------------- the data root itself


def _bad_root(tmp_path: Path, kind: str) -> Path:
    if kind == "missing":
        return tmp_path / "no-such-root"
    path = tmp_path / "a-file"
    path.write_text("not a directory\n")
    return path


@pytest.mark.parametrize("kind, problem", [("missing", "does not exist"), ("file", "is not a directory")])
@pytest.mark.parametrize("verb", ["datasets", "train"])
def test_a_bad_data_root_option_exits_2_naming_it(capsys, tmp_path, kind, problem, verb):
    root = _bad_root(tmp_path, kind)
    argv = ["datasets", "--data-root", str(root)] if verb == "datasets" else _train(root, tmp_path / "run")
    code, out, err = run(capsys, *argv)
    # Refused by the verb's argument check or by the data layer: either names flag, path, problem.
    assert_one_line_error(code, err, f"--data-root={str(root)!r} {problem}")
    assert out == ""


@pytest.mark.parametrize("kind, problem", [("missing", "does not exist"), ("file", "is not a directory")])
def test_a_bad_data_root_variable_exits_2_naming_it(capsys, monkeypatch, tmp_path, kind, problem):
    root = _bad_root(tmp_path, kind)
    monkeypatch.setenv(DATA_ROOT_ENV, str(root))
    for argv in (
        ["datasets"],
        [
            "train",
            "--defense",
            "nonprivate",
            "--model",
            "abadi-mnist",
            "--dataset",
            "mnist",
            "--out",
            str(tmp_path / "run"),
        ],
    ):
        code, _, err = run(capsys, *argv)
        assert_one_line_error(code, err, f"{DATA_ROOT_ENV}={str(root)!r} {problem}")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any directory")
def test_an_unreadable_data_root_exits_2_naming_it(capsys, tmp_path):
    root = tmp_path / "locked"
    root.mkdir()
    root.chmod(0)
    try:
        code, _, err = run(capsys, "datasets", "--data-root", str(root))
    finally:
        root.chmod(0o755)
    assert_one_line_error(code, err, f"--data-root={str(root)!r} cannot be read")
