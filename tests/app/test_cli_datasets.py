"""CLI contract of `dpaudit datasets`: what the shared data root holds, and a missing root."""

import json

import pytest


@pytest.mark.extended
def test_datasets_lists_the_shared_root(cli, shared_data):
    code, out, _ = cli.run("datasets", "--data-root", str(shared_data), "--json")
    assert code == 0
    data = json.loads(out)["datasets"]
    for name in ("digits", "mnist", "fashion-mnist", "faces", "adult"):
        assert data[name]["available"], name
    assert (data["mnist"]["num_train"], data["mnist"]["num_test"]) == (60_000, 10_000)
    assert (data["fashion-mnist"]["num_train"], data["fashion-mnist"]["num_test"]) == (60_000, 10_000)
    assert (data["digits"]["num_train"], data["digits"]["num_test"]) == (1437, 360)
    assert data["faces"]["num_train"] + data["faces"]["num_test"] == 400
    assert data["faces"]["num_classes"] == 40
    assert data["adult"]["num_classes"] == 2


def test_datasets_missing_root_says_so(cli, tmp_path):
    code, out, _ = cli.run("datasets", "--data-root", str(tmp_path), "--json")
    data = json.loads(out)["datasets"]
    assert code == 0 and data["digits"]["available"] and not data["mnist"]["available"]
    assert str(tmp_path) in data["mnist"]["detail"]


def test_datasets_lists_every_registered_source_with_its_description(cli, tmp_path):
    from dpaudit.data import DATASETS

    code, out, _ = cli.run("datasets", "--data-root", str(tmp_path), "--json")
    data = json.loads(out)["datasets"]
    assert code == 0 and list(data) == list(DATASETS)
    assert all(data[name]["description"] == source.description for name, source in DATASETS.items())


def test_datasets_says_what_it_verified_on_the_shared_root(cli, shared_data):
    # Availability is verified, not assumed: headers and lengths, and MD5SUMS where a folder has one.
    code, out, _ = cli.run("datasets", "--data-root", str(shared_data), "--json")
    data = json.loads(out)["datasets"]
    assert code == 0
    for name, files in (("mnist", 4), ("fashion-mnist", 4), ("faces", 400), ("adult", 2)):
        assert data[name]["available"] and f"MD5 of {files} against MD5SUMS" in data[name]["checked"], data[name]
        assert data[name]["problem_file"] is None
    code, text, _ = cli.run("datasets", "--data-root", str(shared_data))
    assert code == 0 and "(checked: IDX headers and lengths of 4 files; MD5 of 4 against MD5SUMS)" in text


def test_datasets_refuses_a_data_root_that_does_not_exist(cli, tmp_path):
    code, out, err = cli.run("datasets", "--data-root", str(tmp_path / "typo"))
    assert code == 2 and out == ""
    assert err.strip() == f"dpaudit datasets: error: --data-root={str(tmp_path / 'typo')!r} does not exist"
