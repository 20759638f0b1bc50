"""Two writers on one run directory: the second is refused naming the first, nothing is mixed (issue 11)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpaudit.locks import RunInUse, unit_lock

AUDIT = ["audit", "--noise-multiplier", "2", "--num-trials", "2", "--num-steps", "20", "--num-members", "100", "--name", "same", "--no-report", "--quiet"]


def test_a_held_lock_refuses_a_second_holder_and_is_released(tmp_path: Path) -> None:
    with unit_lock(tmp_path, "audit-x"):
        with pytest.raises(RunInUse, match=rf"pid {os.getpid()}"):
            with unit_lock(tmp_path, "audit-x"):
                pass
        with unit_lock(tmp_path, "audit-y"):  # another unit of the same run is free
            pass
    with unit_lock(tmp_path, "audit-x"):  # released on exit
        pass


def test_a_second_audit_into_the_same_directory_is_refused_then_resumes(cli, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with unit_lock(out, "audit-same"):
        code, stdout, err = cli.run(*AUDIT, "--out", str(out), "--json")
        assert code == 2 and "in use" in err and f"pid {os.getpid()}" in err and len(err.strip().splitlines()) == 1
        assert json.loads(stdout)["exit_status"] == 2
    assert not list((out / "audits").glob("same/trials/*")), "the refused run wrote trials"
    code, stdout, err = cli.run(*AUDIT, "--out", str(out), "--json")
    assert code in (0, 3), err
    first = json.loads(stdout)
    code, stdout, err = cli.run(*AUDIT, "--out", str(out), "--json")
    assert code in (0, 3) and json.loads(stdout)["epsilon_lb"] == first["epsilon_lb"]


def test_the_lock_dies_with_a_killed_holder(tmp_path: Path) -> None:
    """A SIGKILLed writer leaves no stale lock: the kernel drops flock locks with the process."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from dpaudit.locks import unit_lock\nwith unit_lock(sys.argv[1], 'audit-z'):\n    print('held', flush=True); time.sleep(60)", str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(RunInUse, match=rf"pid {holder.pid}"):
            with unit_lock(tmp_path, "audit-z"):
                pass
    finally:
        holder.kill()
        holder.wait(timeout=10)
    deadline = time.monotonic() + 10
    while True:
        try:
            with unit_lock(tmp_path, "audit-z"):
                break
        except RunInUse:
            assert time.monotonic() < deadline, "the lock outlived its SIGKILLed holder"
            time.sleep(0.1)
