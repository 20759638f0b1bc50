"""Contract over every registered dataset source, and registering a new source from a test."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from dpaudit.app.cli import main
from dpaudit.data import (
    DATASETS,
    DatasetInfo,
    DatasetNotFoundError,
    DatasetSource,
    clear_cache,
    dataset_info,
    load_dataset,
    register_dataset,
)
from dpaudit.data.containers import make_bundle

ROOTED = [name for name, source in DATASETS.items() if source.needs_root]


@pytest.mark.parametrize("name", list(DATASETS))
def test_every_source_describes_itself(name):
    source = DATASETS[name]
    assert source.name == name
    assert source.description and source.num_classes >= 1
    if source.needs_root:
        assert source.files, "a source read from the data root must say which files it needs"
    assert all(not Path(f).is_absolute() for f in source.files)


@pytest.mark.parametrize("name", ROOTED)
def test_missing_files_name_the_dataset_root_and_expected_path(name, tmp_path):
    clear_cache()
    with pytest.raises(DatasetNotFoundError) as exc:
        load_dataset(name, data_root=tmp_path)
    message = str(exc.value)
    assert repr(name) in message and str(tmp_path) in message
    assert str(DATASETS[name].expected_paths(tmp_path)[0]) in message


@pytest.mark.parametrize("name", ROOTED)
def test_info_reports_a_missing_dataset_without_raising(name, tmp_path):
    (info,) = [i for i in dataset_info(data_root=tmp_path) if i.name == name]
    assert not info.available and str(tmp_path) in info.detail


@pytest.mark.parametrize("name", [n for n, s in DATASETS.items() if s.download is None and s.needs_root])
def test_download_refused_for_sources_without_a_downloader(name, tmp_path):
    with pytest.raises(DatasetNotFoundError, match="cannot download"):
        load_dataset(name, data_root=tmp_path, download=True)


def _toy_bundle(root: Path):
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.random((30, 4), dtype=np.float32))
    y = torch.from_numpy(rng.integers(0, 3, size=30))
    return make_bundle(
        "toy-table",
        x_train=x[:20],
        y_train=y[:20],
        x_test=x[20:],
        y_test=y[20:],
        num_classes=3,
        description="a toy table defined in a test",
    )


def _toy_info(root: Path) -> DatasetInfo:
    return DatasetInfo(
        name="toy-table", available=True, num_train=20, num_test=10, input_shape=(4,), num_classes=3, detail="in-test"
    )


@pytest.mark.extended
def test_a_source_registered_in_a_test_is_loadable_listed_and_a_cli_choice(monkeypatch, capsys):
    toy = DatasetSource(
        name="toy-table",
        description="toy",
        input_shape=(4,),
        num_classes=3,
        files=(),
        load=_toy_bundle,
        info=_toy_info,
        needs_root=False,
    )
    monkeypatch.setitem(DATASETS, "toy-table", toy)
    clear_cache()
    try:
        bundle = load_dataset("toy_table")
        assert (len(bundle.train), len(bundle.test), bundle.num_classes) == (20, 10, 3)
        assert any(i.name == "toy-table" and i.available for i in dataset_info())
        with pytest.raises(SystemExit):
            main(["train", "--help"])
        assert "toy-table" in capsys.readouterr().out
    finally:
        clear_cache()


def test_register_refuses_duplicates_and_non_sources():
    with pytest.raises(ValueError, match="already registered"):
        register_dataset(DATASETS["digits"])
    with pytest.raises(TypeError, match="source"):
        register_dataset("digits")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "exc", "arg"),
    [
        ({"name": ""}, TypeError, "name"),
        ({"name": "Toy_Table"}, ValueError, "name"),
        ({"num_classes": 0}, ValueError, "num_classes"),
        ({"load": None}, TypeError, "load"),
    ],
)
def test_source_validates_its_fields(changes, exc, arg):
    fields = {
        "name": "toy",
        "description": "toy",
        "input_shape": (4,),
        "num_classes": 3,
        "files": (),
        "load": _toy_bundle,
        "info": _toy_info,
    }
    with pytest.raises(exc, match=arg):
        DatasetSource(**{**fields, **changes})


@pytest.mark.extended
def test_the_listing_order_does_not_depend_on_which_dataset_module_a_process_imports_first():
    # Sources register themselves where they are defined; the built-in ones are registered in
    # one fixed order however the process reaches them (the CLI lists them in that order).
    import subprocess
    import sys

    code = (
        "import dpaudit.data.adult, dpaudit.data.cifar10\nfrom dpaudit.data import DATASETS\nprint(' '.join(DATASETS))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[:8] == ["digits", "mnist", "fashion-mnist", "cifar10", "faces", "adult", "mnist-0-4", "faces-1-20"]
