"""Two writers on one run directory: the second is refused naming the first, nothing is mixed (issue 11)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dpaudit.locks import RunInUse, unit_lock

AUDIT = [
    "audit",
    "--noise-multiplier",
    "2",
    "--num-trials",
    "2",
    "--num-steps",
    "20",
    "--num-members",
    "100",
    "--name",
    "same",
    "--no-report",
    "--quiet",
]


def test_a_held_lock_refuses_a_second_holder_and_is_released(tmp_path: Path) -> None:
    with unit_lock(tmp_path, "audit-x"):
        with pytest.raises(RunInUse, match=rf"pid {os.getpid()}"):
            with unit_lock(tmp_path, "audit-x"):
                pass
        with unit_lock(tmp_path, "audit-y"):  # another unit of the same run is free
            pass
    with unit_lock(tmp_path, "audit-x"):  # released on exit
        pass


@pytest.mark.extended
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
        [
            sys.executable,
            "-c",
            "import sys, time; from dpaudit.locks import unit_lock\nwith "
            "unit_lock(sys.argv[1], 'audit-z'):\n    print('held', flush=True); "
            "time.sleep(60)",
            str(tmp_path),
        ],
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


def test_an_identical_second_run_is_refused_before_any_work(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two identical runs into one --out: the second is refused at once, not after its start-up (issue 31).

    The first run (a thread of this process, its work blocked) holds the run; the second would
    spend 5 s in its work before reaching the audit's own lock, and must be refused well before.
    """
    import dpaudit.app.runs.audit as audit_run
    from dpaudit.app.cli import main

    entered, release = threading.Event(), threading.Event()

    def work(*args: object, **kwargs: object) -> None:
        if not entered.is_set():
            entered.set()
            release.wait(60)
        else:
            time.sleep(5)

    monkeypatch.setattr(audit_run, "run_audit", work)
    argv = [*AUDIT, "--out", str(tmp_path / "run")]
    first = threading.Thread(target=main, args=(argv,))
    first.start()
    try:
        assert entered.wait(60), "the first run did not reach its work"
        started = time.monotonic()
        code, stdout, err = cli.run(*argv, "--json")
        elapsed = time.monotonic() - started
    finally:
        release.set()
        first.join(60)
    assert code == 2 and "in use" in err and f"pid {os.getpid()}" in err and len(err.strip().splitlines()) == 1, err
    assert json.loads(stdout)["argument"] == "--out"
    assert elapsed < 3.0, f"refused only after {elapsed:.1f} s"


_HOLDER = """
import sys, time
import dpaudit.app.runs.audit as audit_run
from dpaudit.app.cli import main

def work(*args, **kwargs):
    print("working", flush=True)
    time.sleep(120)

audit_run.run_audit = work
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_an_identical_second_process_is_refused_before_its_start_up(tmp_path: Path) -> None:
    """The same with both runs processes of their own: the second is refused before its start-up.

    The first run is a real ``dpaudit audit`` process whose work is a long sleep; the second, a
    fresh ``dpaudit audit`` process, would import torch and build its parser (seconds; ~15-20 s
    on a loaded machine) before reaching any lock taken after parsing.
    """
    argv = [*AUDIT, "--out", str(tmp_path / "run")]
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, *argv], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "working", (
            "the first run did not start"
        )
        started = time.monotonic()
        second = subprocess.run(
            [sys.executable, "-m", "dpaudit.app.cli", *argv, "--json"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=300,
        )
        elapsed = time.monotonic() - started
        assert second.returncode == 2 and "in use" in second.stderr and f"pid {holder.pid}" in second.stderr, (
            second.stderr
        )
        assert json.loads(second.stdout)["argument"] == "--out"
        assert elapsed < 3.0, f"refused only after {elapsed:.1f} s"
    finally:
        holder.kill()
        holder.wait(timeout=10)
