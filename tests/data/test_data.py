"""Tests for dpaudit.data: loaders, dataset info, ids and subsets, membership splits, and the
restricted CIFAR-10 unpickler."""

from __future__ import annotations

import builtins
import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from dpaudit import data
from dpaudit.data import (
    DATA_ROOT_ENV,
    DATASETS,
    ArrayDataset,
    DatasetBundle,
    DatasetNotFoundError,
    Splits,
    cifar10,
    dataset_info,
    faces,
    idx,
    load_dataset,
    make_splits,
    resolve_data_root,
)


@pytest.fixture
def shared_root(shared_data: Path) -> Path:
    # The offline copies the session's conftest finds (skips when they are absent).
    return shared_data


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch, tmp_path_factory):
    # Never let a developer's environment or home cache leak into the tests.
    monkeypatch.delenv(DATA_ROOT_ENV, raising=False)
    monkeypatch.setenv("DPAUDIT_CACHE", str(tmp_path_factory.getbasetemp() / "dpaudit-cache"))


def _check_bundle(b: DatasetBundle, *, num_train: int, num_test: int, shape: tuple, num_classes: int) -> None:
    assert (len(b.train), len(b.test)) == (num_train, num_test)
    assert b.input_shape == shape == b.train.input_shape == b.test.input_shape
    assert b.num_classes == num_classes == b.train.num_classes
    for ds in (b.train, b.test):
        assert ds.features.dtype == torch.float32 and ds.labels.dtype == torch.int64 and ds.ids.dtype == torch.int64
        assert tuple(ds.features.shape) == (len(ds), *shape)
        lo, hi = torch.aminmax(ds.features)  # NaN would propagate and fail both checks
        assert float(lo) >= 0.0 and float(hi) <= 1.0
        assert int(ds.labels.min()) >= 0 and int(ds.labels.max()) < num_classes
    assert torch.equal(b.train.ids, torch.arange(num_train))
    assert torch.equal(b.test.ids, torch.arange(num_train, num_train + num_test))
    assert isinstance(b.description, str) and b.description


# ----------------------------------------------------------------------------- data root


def test_resolve_data_root_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert resolve_data_root() == tmp_path / "home" / ".dpaudit" / "data"
    monkeypatch.setenv(DATA_ROOT_ENV, str(tmp_path / "env"))
    assert resolve_data_root() == tmp_path / "env"
    assert resolve_data_root(tmp_path / "arg") == tmp_path / "arg"
    assert resolve_data_root(str(tmp_path / "x" / ".." / "arg")) == tmp_path / "arg"


@pytest.mark.parametrize("bad, exc", [(123, TypeError), ("", ValueError), ("   ", ValueError)])
def test_resolve_data_root_rejects_bad_values(bad, exc):
    with pytest.raises(exc, match="data_root"):
        resolve_data_root(bad)


def test_load_dataset_uses_env_data_root(monkeypatch, shared_root):
    monkeypatch.setenv(DATA_ROOT_ENV, str(shared_root))
    assert len(load_dataset("faces").train) == 280


# ----------------------------------------------------------------------------- digits


def test_digits_shapes_range_ids():
    from sklearn.datasets import load_digits

    b = load_dataset("digits")
    _check_bundle(b, num_train=1437, num_test=360, shape=(1, 8, 8), num_classes=10)
    raw = load_digits()
    everything = b.all()
    assert len(everything) == 1797
    assert torch.equal(everything.ids, torch.arange(1797))
    # A permutation of sklearn's data, pixels / 16.
    assert np.isclose(everything.features.double().sum().item() * 16, raw.data.sum())
    assert np.array_equal(np.bincount(everything.labels.numpy()), np.bincount(raw.target))
    # The split is part of the dataset: same across calls and data roots.
    again = load_dataset("DIGITS", data_root="/nonexistent")
    assert torch.equal(again.train.features, b.train.features)


def test_loads_are_cached():
    assert load_dataset("digits") is load_dataset("digits")


# ----------------------------------------------------------------------------- ArrayDataset


def test_getitem_and_dataloader():
    b = load_dataset("digits")
    x, y = b.train[3]
    assert x.shape == (1, 8, 8) and int(y) == int(b.train.labels[3])
    assert torch.equal(b.train[-1][0], b.train.features[-1])
    with pytest.raises(IndexError):
        b.train[len(b.train)]
    loader = torch.utils.data.DataLoader(b.train, batch_size=100)
    xb, yb = next(iter(loader))
    assert xb.shape == (100, 1, 8, 8) and yb.dtype == torch.int64


def test_subset_by_ids_keeps_order():
    b = load_dataset("digits")
    ids = [1500, 7, 3, 1436]  # test and train ids, out of order
    sub = b.all().subset(ids)
    assert sub.ids.tolist() == ids
    assert torch.equal(sub.features[0], b.test.features[1500 - 1437])
    assert torch.equal(sub.features[1], b.train.features[7])
    assert sub.labels.tolist() == [int(b.all().labels[i]) for i in ids]
    assert len(b.train.subset(np.array([], dtype=np.int64))) == 0
    assert b.train.subset(torch.tensor([5])).ids.tolist() == [5]
    assert b.train.subset(i for i in (2, 1)).ids.tolist() == [2, 1]
    # subsets are copies: the cached bundle is unaffected by writes to them.
    sub.features.zero_()
    assert float(b.train.features[7].sum()) > 0


def test_subset_rejects_unknown_repeated_and_non_integer_ids():
    b = load_dataset("digits")
    with pytest.raises(ValueError, match="1437"):
        b.train.subset([0, 1437])  # a test id is not in train
    with pytest.raises(ValueError, match="repeat"):
        b.train.subset([4, 4])
    with pytest.raises(TypeError, match="ids"):
        b.train.subset([0.5, 1.0])


def test_array_dataset_is_immutable_and_validated():
    b = load_dataset("digits")
    with pytest.raises(AttributeError):
        b.train.features = torch.zeros(1)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        b.name = "x"  # type: ignore[misc]
    ok = dict(name="t", features=torch.zeros(3, 2), labels=[0, 1, 1], ids=[5, 6, 7], num_classes=2)
    assert ArrayDataset(**ok).input_shape == (2,)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ArrayDataset(**{**ok, "features": torch.full((3, 2), 2.0)})
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        ArrayDataset(**{**ok, "features": torch.full((3, 2), float("nan"))})
    with pytest.raises(TypeError, match="float32"):
        ArrayDataset(**{**ok, "features": torch.zeros(3, 2, dtype=torch.float64)})
    with pytest.raises(ValueError, match="labels"):
        ArrayDataset(**{**ok, "labels": [0, 1]})
    with pytest.raises(ValueError, match="labels"):
        ArrayDataset(**{**ok, "labels": [0, 1, 2]})
    with pytest.raises(ValueError, match="unique"):
        ArrayDataset(**{**ok, "ids": [5, 5, 7]})
    with pytest.raises(ValueError, match="num_classes"):
        ArrayDataset(**{**ok, "num_classes": 0})


def test_array_dataset_pickles_for_worker_processes():
    sub = load_dataset("digits").train.subset([9, 2])
    back = pickle.loads(pickle.dumps(sub))
    assert back.ids.tolist() == [9, 2] and torch.equal(back.features, sub.features)


# ----------------------------------------------------------------------------- MNIST-style


def test_mnist_from_gz_files(shared_root):
    cache = Path(os.environ["DPAUDIT_CACHE"])
    data.clear_cache()
    b = load_dataset("mnist", data_root=shared_root)
    _check_bundle(b, num_train=60000, num_test=10000, shape=(1, 28, 28), num_classes=10)
    assert float(b.train.features.max()) == 1.0
    assert np.bincount(b.train.labels.numpy()).tolist()[:3] == [5923, 6742, 5958]
    assert "mnist" in b.description.lower() and str(shared_root / "mnist") in b.description
    assert load_dataset("mnist", data_root=shared_root) is b
    # Decompressed atomically into the cache (no temp files left), in torchvision's layout.
    raw = cache / "MNIST" / "raw"
    assert sorted(p.name for p in raw.iterdir()) == sorted(idx._IDX_FILES)
    assert idx._idx_source("mnist", cache) == ("torchvision", cache)
    # A second materialization finds the files current and leaves them alone.
    before = (raw / idx._IDX_FILES[0]).stat().st_ino
    idx._torchvision_idx_root("mnist", shared_root)
    assert (raw / idx._IDX_FILES[0]).stat().st_ino == before


def test_mnist_torchvision_layouts(shared_root, tmp_path):
    # torchvision's layout holding only the .gz files: decompressed into the cache.
    raw = tmp_path / "gz" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for f in idx._IDX_FILES:
        (raw / f"{f}.gz").symlink_to(shared_root / "mnist" / f"{f}.gz")
    b = load_dataset("mnist", data_root=tmp_path / "gz")
    assert (len(b.train), len(b.test)) == (60000, 10000)
    assert str(raw) in b.description
    # torchvision's layout, uncompressed: read in place.
    cache_raw = Path(os.environ["DPAUDIT_CACHE"]) / "MNIST" / "raw"
    plain = tmp_path / "plain" / "MNIST" / "raw"
    plain.mkdir(parents=True)
    for f in idx._IDX_FILES:
        (plain / f).symlink_to(cache_raw / f)
    tv = load_dataset("mnist", data_root=tmp_path / "plain")
    assert torch.equal(tv.test.labels, b.test.labels)
    assert str(tmp_path / "plain") in tv.description


def test_fashion_mnist(shared_root):
    b = load_dataset("fashion_mnist", data_root=shared_root)
    assert b.name == "fashion-mnist"
    _check_bundle(b, num_train=60000, num_test=10000, shape=(1, 28, 28), num_classes=10)
    assert np.bincount(b.train.labels.numpy()).tolist() == [6000] * 10
    assert not torch.equal(b.test.features, load_dataset("mnist", data_root=shared_root).test.features)


# ----------------------------------------------------------------------------- faces


def test_faces_orl(shared_root):
    b = load_dataset("faces", data_root=shared_root)
    _check_bundle(b, num_train=280, num_test=120, shape=(1, 112, 92), num_classes=40)
    assert np.bincount(b.train.labels.numpy()).tolist() == [7] * 40
    assert np.bincount(b.test.labels.numpy()).tolist() == [3] * 40
    assert "ORL" in b.description
    # image 1 of subject s1 is train id 0; image 8 of s1 is the first test sample.
    first = faces._read_pgm(shared_root / "orl_faces" / "s1" / "1.pgm").astype(np.float32) / 255
    eighth = faces._read_pgm(shared_root / "orl_faces" / "s1" / "8.pgm").astype(np.float32) / 255
    assert np.array_equal(b.train.features[0, 0].numpy(), first)
    assert np.array_equal(b.test.features[0, 0].numpy(), eighth)


def test_faces_olivetti_fallback(shared_root, tmp_path):
    (tmp_path / "olivetti").symlink_to(shared_root / "olivetti", target_is_directory=True)
    b = load_dataset("faces", data_root=tmp_path)
    _check_bundle(b, num_train=280, num_test=120, shape=(1, 64, 64), num_classes=40)
    assert "Olivetti" in b.description
    assert np.bincount(b.test.labels.numpy()).tolist() == [3] * 40
    faces = np.load(shared_root / "olivetti" / "olivetti_faces.npy")
    assert np.array_equal(b.test.features[0, 0].numpy(), faces[7])  # subject 0, image 8


def test_read_pgm_with_comment(tmp_path):
    pixels = np.arange(12, dtype=np.uint8).reshape(3, 4)
    path = tmp_path / "x.pgm"
    path.write_bytes(b"P5\n# a comment\n4 3\n255\n" + pixels.tobytes())
    assert np.array_equal(faces._read_pgm(path), pixels)
    path.write_bytes(b"P2\n4 3\n255\n" + pixels.tobytes())
    with pytest.raises(ValueError, match="P5"):
        faces._read_pgm(path)


# ----------------------------------------------------------------------------- adult


def test_adult(shared_root):
    b = load_dataset("adult", data_root=shared_root)
    d = b.input_shape[0]
    _check_bundle(b, num_train=30162, num_test=15060, shape=(d,), num_classes=2)
    assert d > 14
    assert set(b.train.labels.unique().tolist()) == {0, 1} == set(b.test.labels.unique().tolist())
    assert 0.2 < b.train.labels.float().mean().item() < 0.3
    # each row is one-hot in every categorical block: 8 categoricals -> 8 ones beyond numerics
    assert torch.isfinite(b.train.features).all()


def test_adult_preprocessing_on_small_files(tmp_path):
    header = "age,workclass,fnlwgt,income\n"
    folder = tmp_path / "adult"
    folder.mkdir()
    (folder / "adult_train.csv").write_text(header + "20,Private,100,<=50K\n40,?,200,>50K\n60,State-gov,300,>50K\n")
    (folder / "adult_test.csv").write_text(header + "80,Private,50,>50K.\n30,Never-worked,200,<=50K.\n")
    b = load_dataset("adult", data_root=tmp_path)
    # row with '?' dropped; categories: Never-worked, Private, State-gov (union of files)
    assert (len(b.train), len(b.test), b.input_shape) == (2, 2, (5,))
    assert b.train.labels.tolist() == [0, 1] and b.test.labels.tolist() == [1, 0]
    assert b.train.features.tolist() == [[0, 0, 0, 1, 0], [1, 1, 0, 0, 1]]
    # test numerics scaled with train min/max, then clipped to [0, 1]
    assert b.test.features.tolist() == [[1, 0, 0, 1, 0], [0.25, 0.5, 1, 0, 0]]


# ----------------------------------------------------------------------------- info and errors


def test_dataset_info_on_shared_root(shared_root):
    infos = {i.name: i for i in dataset_info(data_root=shared_root)}
    assert list(infos) == list(DATASETS)
    expected = {
        "digits": (1437, 360, (1, 8, 8), 10),
        "mnist": (60000, 10000, (1, 28, 28), 10),
        "fashion-mnist": (60000, 10000, (1, 28, 28), 10),
        "faces": (280, 120, (1, 112, 92), 40),
    }
    for name, (n_tr, n_te, shape, k) in expected.items():
        info = infos[name]
        assert info.available, info.detail
        assert (info.num_train, info.num_test, info.input_shape, info.num_classes) == (n_tr, n_te, shape, k)
    assert infos["adult"].available and (infos["adult"].num_train, infos["adult"].num_test) == (30162, 15060)
    assert str(shared_root / "mnist") in infos["mnist"].detail
    cifar = infos["cifar10"]
    assert not cifar.available and cifar.num_train is None and "cifar-10-batches-py" in cifar.detail


def test_dataset_info_on_empty_root_never_raises(tmp_path):
    infos = dataset_info(data_root=tmp_path)
    assert [i.name for i in infos] == list(DATASETS)
    assert [i.available for i in infos] == [name == "digits" for name in DATASETS]
    assert all(str(tmp_path) in i.detail for i in infos[1:])


@pytest.mark.parametrize(
    "name, expected_file",
    [
        ("mnist", "mnist/train-images-idx3-ubyte.gz"),
        ("fashion-mnist", "fashion-mnist/train-images-idx3-ubyte.gz"),
        ("cifar10", "cifar-10-batches-py/data_batch_1"),
        ("faces", "orl_faces/s1/1.pgm"),
        ("adult", "adult/adult_train.csv"),
    ],
)
def test_missing_dataset_names_root_and_file(tmp_path, name, expected_file):
    with pytest.raises(DatasetNotFoundError) as err:
        load_dataset(name, data_root=tmp_path)
    assert isinstance(err.value, FileNotFoundError)
    msg = str(err.value)
    assert str(tmp_path) in msg and str(tmp_path / expected_file) in msg and DATA_ROOT_ENV in msg


def test_download_refused_for_datasets_without_a_downloader(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="cannot download"):
        load_dataset("faces", data_root=tmp_path, download=True)


def test_bad_dataset_name():
    with pytest.raises(ValueError, match=r"name.*digits, mnist, fashion-mnist, cifar10, faces, adult.*'svhn'"):
        load_dataset("svhn")
    with pytest.raises(TypeError, match="name"):
        load_dataset(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="download"):
        load_dataset("digits", download="yes")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- splits


def test_splits_deterministic_disjoint_and_covering():
    b = load_dataset("digits")
    s1, s2, s3 = make_splits(b, seed=1), make_splits(b, seed=1), make_splits(b, seed=2)
    assert s1 == s2 and s1 != s3
    assert not np.array_equal(s1.members, s3.members)
    assert (s1.dataset, s1.seed) == ("digits", 1)
    assert (len(s1.members), len(s1.non_members), len(s1.population)) == (718, 359, 360)
    parts = [s1.members, s1.non_members, s1.population]
    union = np.concatenate(parts)
    assert np.array_equal(np.sort(union), b.train.ids.numpy())  # disjoint and covering train
    assert np.array_equal(s1.test, b.test.ids.numpy())
    for arr in (*parts, s1.test):
        assert arr.dtype == np.int64 and np.all(np.diff(arr) > 0) and not arr.flags.writeable
    with pytest.raises(ValueError):
        s1.members[0] = 5
    members = b.all().subset(s1.members)
    assert len(members) == 718


def test_splits_count_overrides():
    b = load_dataset("digits")
    s = make_splits(b, seed=0, num_members=100, num_non_members=50)
    assert (len(s.members), len(s.non_members), len(s.population)) == (100, 50, 1437 - 150)
    s = make_splits(b, seed=0, member_fraction=1.0, non_member_fraction=0.0)
    assert (len(s.members), len(s.non_members), len(s.population)) == (1437, 0, 0)


def test_splits_round_trip_through_json():
    s = make_splits(load_dataset("digits"), seed=7, num_members=10, num_non_members=5)
    d = json.loads(json.dumps(s.to_dict()))
    assert isinstance(d["members"], list) and all(type(i) is int for i in d["members"])
    back = Splits.from_dict(d)
    assert back == s and back.members.dtype == np.int64 and not back.members.flags.writeable


def test_splits_validation():
    good = dict(dataset="digits", seed=0, members=[3, 1], non_members=[2], population=[], test=[10])
    s = Splits(**good)
    assert s.members.tolist() == [1, 3] and s.population.dtype == np.int64
    with pytest.raises(ValueError, match="members and non_members"):
        Splits(**{**good, "non_members": [3]})
    with pytest.raises(ValueError, match="population and test"):
        Splits.from_dict({**good, "population": [10]})
    with pytest.raises(ValueError, match="duplicate"):
        Splits(**{**good, "members": [1, 1]})
    with pytest.raises(TypeError, match="members"):
        Splits(**{**good, "members": [1.5]})
    with pytest.raises(TypeError, match="members"):
        Splits(**{**good, "members": [True]})
    with pytest.raises(ValueError, match="missing"):
        Splits.from_dict({"dataset": "digits", "seed": 0})
    with pytest.raises(ValueError, match="schema_version"):
        Splits.from_dict({**good, "schema_version": 99})


@pytest.mark.parametrize(
    "kwargs, exc, arg",
    [
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": 1.5}, TypeError, "seed"),
        ({"seed": 0, "member_fraction": 0.0}, ValueError, "member_fraction"),
        ({"seed": 0, "member_fraction": 1.5}, ValueError, "member_fraction"),
        ({"seed": 0, "non_member_fraction": 1.0}, ValueError, "non_member_fraction"),
        ({"seed": 0, "non_member_fraction": -0.1}, ValueError, "non_member_fraction"),
        ({"seed": 0, "member_fraction": 0.8, "non_member_fraction": 0.3}, ValueError, "member_fraction=0.8"),
        ({"seed": 0, "num_members": 0}, ValueError, "num_members"),
        ({"seed": 0, "num_members": 10**6}, ValueError, "num_members"),
        ({"seed": 0, "num_non_members": -1}, ValueError, "num_non_members"),
        ({"seed": 0, "num_members": 1000, "num_non_members": 1000}, ValueError, "num_non_members"),
    ],
)
def test_make_splits_bad_arguments(kwargs, exc, arg):
    with pytest.raises(exc, match=arg):
        make_splits(load_dataset("digits"), **kwargs)


def test_make_splits_needs_a_bundle():
    with pytest.raises(TypeError, match="bundle"):
        make_splits("digits", seed=0)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- CIFAR-10


def _write_fake_cifar(folder: Path, *, per_batch: int, protocol: int) -> dict[str, tuple[np.ndarray, list[int]]]:
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    written = {}
    for name in (*cifar10._CIFAR_TRAIN, *cifar10._CIFAR_TEST):
        arr = rng.integers(0, 256, size=(per_batch, 3072), dtype=np.uint8)
        labels = rng.integers(0, 10, size=per_batch).tolist()
        batch = {
            b"batch_label": name.encode(),
            b"data": arr,
            b"labels": labels,
            b"filenames": [f"img{i}.png".encode() for i in range(per_batch)],
        }
        (folder / name).write_bytes(pickle.dumps(batch, protocol=protocol))
        written[name] = (arr, labels)
    meta = {b"num_cases_per_batch": per_batch, b"label_names": [b"airplane"] * 10, b"num_vis": 3072}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta, protocol=protocol))
    return written


@pytest.mark.parametrize(
    "protocol, layout", [(2, "cifar-10-batches-py"), (4, "cifar10/cifar-10-batches-py"), (5, "cifar-10-batches-py")]
)
def test_cifar10_fake_batches(tmp_path, protocol, layout):
    written = _write_fake_cifar(tmp_path / layout, per_batch=4, protocol=protocol)
    b = load_dataset("cifar10", data_root=tmp_path)
    _check_bundle(b, num_train=20, num_test=4, shape=(3, 32, 32), num_classes=10)
    arr, labels = written["data_batch_2"]
    assert np.allclose(b.train.features[4:8].numpy(), arr.reshape(4, 3, 32, 32) / 255.0)
    assert b.train.labels[4:8].tolist() == labels
    assert b.test.labels.tolist() == written["test_batch"][1]
    info = {i.name: i for i in dataset_info(data_root=tmp_path)}["cifar10"]
    assert info.available and (info.num_train, info.num_test, info.input_shape) == (20, 4, (3, 32, 32))


class _Evil:
    """Unpickling this opens (creates) a file: any code path that runs it is unsafe."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (builtins.open, (self.path, "w"))


@pytest.mark.parametrize("where", ["top", "value", "object_array"])
def test_cifar10_malicious_pickle_is_refused(tmp_path, where):
    # Sanity check that the payload is live under plain pickle.
    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(_Evil(probe))).close()
    assert probe.exists()

    folder = tmp_path / "root" / "cifar-10-batches-py"
    _write_fake_cifar(folder, per_batch=2, protocol=4)
    sentinel = tmp_path / "sentinel"
    evil = _Evil(sentinel)
    payload = {
        "top": evil,
        "value": {b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1], b"x": evil},
        "object_array": {b"data": np.array([evil], dtype=object), b"labels": [0]},
    }[where]
    (folder / "data_batch_3").write_bytes(pickle.dumps(payload))
    data.clear_cache()
    with pytest.raises(ValueError, match=r"data_batch_3 is not a CIFAR-10 batch: "):
        load_dataset("cifar10", data_root=tmp_path / "root")
    assert not sentinel.exists()


def test_cifar10_malformed_batch_rejected(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    _write_fake_cifar(folder, per_batch=2, protocol=4)
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": np.zeros((2, 10), np.uint8), b"labels": [0, 1]}))
    with pytest.raises(ValueError, match="3072"):
        load_dataset("cifar10", data_root=tmp_path)


def test_cifar10_malicious_meta_reported_by_info(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    _write_fake_cifar(folder, per_batch=2, protocol=4)
    sentinel = tmp_path / "sentinel"
    (folder / "batches.meta").write_bytes(pickle.dumps(_Evil(sentinel)))
    info = {i.name: i for i in dataset_info(data_root=tmp_path)}["cifar10"]
    assert not info.available and "refusing" in info.detail
    assert not sentinel.exists()
