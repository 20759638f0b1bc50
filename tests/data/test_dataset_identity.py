"""A dataset's identity in the keys of stored records and results (issue 31, item 2).

Before it, replacing a dataset file under the data root (its ``MD5SUMS`` updated, so the data
was accepted) and rerunning ``dpaudit train`` into the same ``--out`` answered ``"reused":
true`` with the metrics of the old data. The data roots are tiny fake IDX sets in ``tmp_path``.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from dpaudit.app.cli import main
from dpaudit.data import clear_cache, dataset_files
from tests.hostile.test_data_root import write_md5sums, write_mnist

pytestmark = pytest.mark.usefixtures("no_data_root")  # tests/conftest.py


def _run(capsys, *argv):
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_dataset_files_are_the_md5_of_every_file_read(tmp_path):
    folder = write_mnist(tmp_path / "root")
    files = dataset_files("mnist", data_root=tmp_path / "root")
    # An independent reference: md5 of each file as written.
    assert files == {f"mnist/{p.name}": hashlib.md5(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}
    write_md5sums(folder)  # with a listing the digests are the listing's (checked on load): the same
    clear_cache()
    assert dataset_files("mnist", data_root=tmp_path / "root") == files
    assert dataset_files("mnist-0-4", data_root=tmp_path / "root") == files  # a class subset reads its parent's files
    assert dataset_files("digits") == {}  # bundled: a fixed identity, keys unchanged


@pytest.mark.e2e
def test_train_recomputes_after_a_dataset_file_changed_and_says_why(capsys, tmp_path):
    root, out = tmp_path / "root", tmp_path / "run"
    folder = write_mnist(root)
    write_md5sums(folder)
    argv = [
        "train",
        "--defense",
        "nonprivate",
        "--model",
        "abadi-mnist",
        "--dataset",
        "mnist",
        "--epochs",
        "1",
        "--data-root",
        str(root),
        "--out",
        str(out),
        "--json",
        "--quiet",
    ]
    code, stdout, err = _run(capsys, *argv)
    assert code == 0, err
    first = json.loads(stdout)
    clear_cache()  # each command is a new process
    code, stdout, err = _run(capsys, *argv)
    assert code == 0 and json.loads(stdout)["reused"] is True
    assert "reusing it, trained on the same 4 files of dataset mnist (MD5 match)" in err
    # The user replaces the training images and updates the listing, as `dpaudit datasets` asks.
    write_mnist(root, seed=1)
    write_md5sums(folder)
    clear_cache()
    code, stdout, err = _run(capsys, *argv)
    assert code == 0, err
    again = json.loads(stdout)
    assert again["reused"] is False and again["model_id"] == first["model_id"]
    assert again["dataset_files"] != first["dataset_files"] and again["metrics"] != first["metrics"]
    assert (
        "recomputing: dataset mnist's files changed since the stored record "
        f"{first['model_id']} (mnist/t10k-images-idx3-ubyte.gz, " in err
    )


@pytest.mark.slow  # 30 s: four DP-SGD trainings
@pytest.mark.e2e
def test_an_audit_on_changed_data_starts_afresh_and_says_why(capsys, tmp_path):
    root, out = tmp_path / "root", tmp_path / "run"
    folder = write_mnist(root)
    argv = [
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
        "--json",
        "--no-report",
    ]
    code, stdout, err = _run(capsys, *argv)
    assert code in (0, 3), err
    first = json.loads(stdout)
    other = write_mnist(tmp_path / "other", seed=2)  # other labels for the same images
    (folder / "train-labels-idx1-ubyte.gz").write_bytes((other / "train-labels-idx1-ubyte.gz").read_bytes())
    clear_cache()
    code, stdout, err = _run(capsys, *argv)
    assert code in (0, 3), err
    assert "reusing" not in err and json.loads(stdout)["audit_dir"] != first["audit_dir"]
    assert (
        "recomputing: dataset mnist's files changed "
        "(mnist/train-labels-idx1-ubyte.gz) since the stored trials in "
        f"{first['audit_dir']}" in err
    )


@pytest.mark.slow  # 10 s: two PATE trainings
@pytest.mark.e2e
def test_pate_teachers_of_the_old_data_are_moved_aside_not_reused(capsys, tmp_path):
    root, out = tmp_path / "root", tmp_path / "run"
    write_mnist(root)
    argv = [
        "train",
        "--defense",
        "pate",
        "--model",
        "abadi-mnist",
        "--dataset",
        "mnist",
        "--teachers",
        "2",
        "--queries",
        "8",
        "--epochs",
        "1",
    ]
    argv += ["--data-root", str(root), "--out", str(out), "--quiet", "--executor", "serial", "--json"]
    code, _, err = _run(capsys, *argv)
    assert code == 0, err
    write_mnist(root, seed=1)
    clear_cache()
    code, stdout, err = _run(capsys, *argv)
    assert code == 0, err
    assert json.loads(stdout)["reused"] is False
    assert (
        "recomputing: dataset mnist's files changed since the pate-teachers "
        f"cached in {out / 'records' / 'pate-teachers'} (" in err
    )
    assert "; 2 moved to " in err and len(list((out / "records" / "pate-teachers-stale").iterdir())) == 2


@pytest.mark.slow  # 9 s: a training and three certifications
@pytest.mark.e2e
def test_a_certificate_on_replaced_test_images_is_recomputed(capsys, tmp_path):
    """The record is not retrained (its weights key the certificate): only the test files changed."""
    import gzip

    import numpy as np

    from tests.hostile.test_data_root import idx_bytes

    root, out = tmp_path / "root", tmp_path / "run"
    folder = write_mnist(root)
    code, _, err = _run(
        capsys,
        "train",
        "--defense",
        "pixeldp",
        "--model",
        "abadi-mnist",
        "--dataset",
        "mnist",
        "--epochs",
        "1",
        "--data-root",
        str(root),
        "--out",
        str(out),
        "--quiet",
    )
    assert code == 0, err
    (record,) = (out / "records").iterdir()
    argv = [
        "certify",
        "--target",
        str(record),
        "--num-draws",
        "20",
        "--num-examples",
        "5",
        "--no-attacks",
        "--no-smoothing",
        "--data-root",
        str(root),
        "--out",
        str(out),
        "--json",
    ]
    assert _run(capsys, *argv)[0] == 0
    clear_cache()
    code, _, err = _run(capsys, *argv)
    assert code == 0 and "reusing stored certificate certify-pixeldp.json" in err
    images = np.random.default_rng(5).integers(0, 256, (24, 28, 28))
    (folder / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes(images), mtime=0))
    clear_cache()
    code, _, err = _run(capsys, *argv)
    assert code == 0, err
    assert (
        "recomputing certify-pixeldp.json: the dataset's files changed since "
        "the stored certificate (mnist/t10k-images-idx3-ubyte.gz)" in err
    )
