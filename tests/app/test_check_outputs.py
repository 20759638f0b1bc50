"""Outputs are written only where they may be (issue 43, item 2).

Before it, ``--junit PATH`` replaced whatever was at PATH by atomic rename: run as root,
``--junit /dev/full`` turned the device node into a regular file, a FIFO likewise, and
``--junit /proc/version`` failed only after the whole battery had run, naming no flag. Every
output path (``--junit``, and ``--out`` of every verb, through one shared check in the CLI) must
now be a regular file (a directory for ``--out``) or absent, in a directory that takes new files;
anything else is refused before any work with exit 2 naming the flag and the value.

Run as root, the devices are private nodes in ``tmp_path`` with the numbers of ``/dev/null`` and
``/dev/full``: run against code without the check, these tests then replace only those copies.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import dpaudit.app.runs.check as check_run
from tests.app.test_check_cli import CLAIM, FakeBattery

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")


@pytest.fixture
def battery(monkeypatch: pytest.MonkeyPatch) -> FakeBattery:
    fake = FakeBattery(violated=False)
    monkeypatch.setattr(check_run, "run_check", fake)
    return fake


@pytest.fixture
def train_fn(tmp_path: Path) -> str:
    path = tmp_path / "mytrain.py"
    path.write_text(
        "import torch.nn as nn\n\n\ndef train(dataset, *, seed, initial_state=None):\n    return nn.Linear(64, 10)\n"
    )
    return f"{path}:train"


def _device(name: str, minor: int):
    """A character device to write to: as root, a private node in ``tmp_path`` with the numbers of
    ``/dev/<name>`` (code that replaced it would replace only that copy, never the machine's own
    device); otherwise ``/dev/<name>`` itself, which no one but root can replace."""

    def make(tmp_path: Path) -> str:
        if os.geteuid() != 0:
            return f"/dev/{name}"
        path = tmp_path / name
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
        return str(path)

    return make


def _fifo(tmp_path: Path) -> str:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize(
    ("where", "says"),
    [
        (_device("null", 3), "character device"),
        (_device("full", 7), "character device"),
        (_fifo, "named pipe (FIFO)"),
        (lambda tmp: str(tmp), "is a directory"),
        (lambda tmp: "/proc/version", "refuses new files"),
        (lambda tmp: "/proc/dpaudit-results.xml", "refuses new files"),
        (lambda tmp: str(tmp / "missing" / "results.xml"), "does not exist"),
    ],
)
def test_junit_that_is_not_a_writable_regular_file_is_refused_before_any_work(
    cli, battery, train_fn, tmp_path, where, says
):
    target = where(tmp_path)
    if target.startswith("/proc") and not Path("/proc/version").exists():
        pytest.skip("no /proc here")
    before = os.stat(target).st_mode if os.path.exists(target) else None
    code, out, err = cli.run(
        "check", "--train-fn", train_fn, *CLAIM, "--out", str(tmp_path / "run"), "--junit", target, "--json"
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, (code, err)
    payload = json.loads(out)
    assert payload["argument"] == "--junit" and says in payload["error"] and target in payload["error"], payload[
        "error"
    ]
    assert battery.calls == []  # refused before the battery ran
    if before is not None:
        assert stat.S_IFMT(os.stat(target).st_mode) == stat.S_IFMT(before)  # still a device, a FIFO, a directory


@pytest.mark.parametrize(
    ("where", "says"),
    [
        (_device("null", 3), "not a directory"),
        (_fifo, "not a directory"),
        (lambda tmp: "/proc/dpaudit-run", "refuses new files"),
    ],
)
def test_out_that_is_a_special_file_or_in_a_read_only_place_is_refused(cli, battery, train_fn, tmp_path, where, says):
    target = where(tmp_path)
    if target.startswith("/proc") and not Path("/proc/version").exists():
        pytest.skip("no /proc here")
    code, out, err = cli.run("check", "--train-fn", train_fn, *CLAIM, "--out", target, "--json")
    assert code == 2, (code, err)
    payload = json.loads(out)
    assert payload["argument"] == "--out" and says in payload["error"] and target in payload["error"], payload["error"]
    assert battery.calls == []


def test_other_verbs_share_the_out_check(cli, tmp_path):
    """One helper in the CLI: ``dpaudit train --out FIFO`` is refused the same way, before any training."""
    fifo = _fifo(tmp_path)
    code, out, err = cli.run(
        "train", "--defense", "nonprivate", "--model", "digits-mlp", "--dataset", "digits", "--out", fifo, "--json"
    )
    assert code == 2 and json.loads(out)["argument"] == "--out" and stat.S_ISFIFO(os.stat(fifo).st_mode), err


def test_a_regular_junit_file_is_replaced_and_a_new_one_made(cli, battery, train_fn, tmp_path):
    existing = tmp_path / "old.xml"
    existing.write_text("old")
    for target in (existing, tmp_path / "new.xml"):
        code, _, err = cli.run(
            "check",
            "--train-fn",
            train_fn,
            *CLAIM,
            "--out",
            str(tmp_path / "run"),
            "--no-report",
            "--junit",
            str(target),
            "--quiet",
        )
        assert code == 0, err
        assert target.read_bytes().startswith(b"<?xml")


def test_a_model_above_the_parameter_limit_is_refused_before_any_training(cli, tmp_path):
    """``--model-fn`` building a model of more than ``LIMITS["model_parameters"]`` is refused (exit 2) before
    a single training; ``--i-know`` lifts the limit (a 2.2 M-parameter model once took 2.2 GB in a minute)."""
    from dpaudit.limits import LIMITS

    side = int(LIMITS["model_parameters"].maximum ** 0.5) + 1  # side² + side parameters: just above the limit
    path = tmp_path / "big.py"
    path.write_text(
        "import torch.nn as nn\n\nCALLS = []\n\n\n"
        f"def model():\n    return nn.Linear({side}, {side})\n\n\n"
        "def train(dataset, *, seed, initial_state=None):\n    raise AssertionError('trained despite the limit')\n"
    )
    code, out, err = cli.run(
        "check",
        "--train-fn",
        f"{path}:train",
        "--model-fn",
        f"{path}:model",
        *CLAIM,
        "--out",
        str(tmp_path / "run"),
        "--json",
    )
    assert code == 2 and len(err.strip().splitlines()) == 1, (code, err)
    payload = json.loads(out)
    assert payload["argument"] == "--model-fn" and f"{side * side + side:,} parameters" in payload["error"], payload
    assert "trained despite" not in err


def test_the_parameter_limit_counts_the_model_and_never_fails_for_a_broken_builder():
    import torch.nn as nn

    from dpaudit._validate import InvalidArgument
    from dpaudit.limits import LIMITS

    limit = int(LIMITS["model_parameters"].maximum)
    check_run._check_model_size(lambda: nn.Linear(10, 10), i_know=False)  # 110 parameters
    with pytest.raises(InvalidArgument, match="--model-fn"):
        check_run._check_model_size(lambda: nn.Linear(limit, 1), i_know=False)  # limit + 1 parameters
    check_run._check_model_size(lambda: nn.Linear(limit, 1), i_know=True)

    def broken():
        raise SystemExit(0)

    check_run._check_model_size(broken, i_know=False)  # the battery reports the failure where it calls it


@pytest.mark.extended
def test_a_battery_that_could_run_no_check_is_not_a_pass(cli, train_fn, tmp_path):
    """Without ``--model-fn`` no check can craft its start, so nothing trains: once exit 0 ("no
    violation"), which a CI gate read as a pass; now exit 2 naming what to add."""
    code, out, err = cli.run(
        "check", "--train-fn", train_fn, *CLAIM, "--out", str(tmp_path / "run"), "--json", "--no-report"
    )
    assert code == 2, (code, err)
    payload = json.loads(out)
    assert (
        payload["argument"] == "--train-fn"
        and "no check could run" in payload["error"]
        and "--model-fn" in payload["error"]
    ), payload
