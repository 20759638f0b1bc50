"""DSSGD on a real Flower federation on this machine: ``flower-superlink``, one ``flower-supernode``
per participant and ``flwr run`` (:mod:`defenses.dssgd.deployment`), over loopback only.

Every process gets its own FLWR_HOME (state, installed apps) under the test's temporary
directory, free ports chosen at run time, and is ended (with every process it started) when the
test ends, passed or not. A real SuperNode starts a fresh ClientApp process for every message and
polls the SuperLink every 3 s, so a turn costs seconds: these tests are ``cluster``-marked.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("flwr")

from defenses.dssgd.deployment import setup_from_run_config
from defenses.dssgd.flower import read_outcome

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "examples" / "dssgd-flower"
BIN = Path(sys.executable).parent

#: The federation both tests run: 3 participants on digits, sequential turns.
SETTINGS = {
    "dataset": "digits",
    "model": "digits-mlp",
    "seed": 3,
    "member-fraction": 0.5,
    "participants": 3,
    "upload-fraction": 0.1,
    "download-fraction": 0.5,
    "schedule": "round-robin",
    "batch-size": 16,
    "learning-rate": 0.1,
}


def _free_ports(count: int) -> list[int]:
    socks = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _children(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc), deepest last."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, pp in parent.items() if pp in frontier]
        found += kids
        frontier = kids
    return found


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


class LocalFederation:
    """A SuperLink and ``n`` SuperNodes on 127.0.0.1, as separate processes."""

    def __init__(self, root: Path, n: int) -> None:
        self.root = root
        self.n = n
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        link_port, *node_ports = _free_ports(1 + n)
        self.address = f"127.0.0.1:{link_port}"
        self.node_ports = node_ports

    def _env(self, name: str) -> dict[str, str]:
        home = self.root / name
        home.mkdir(parents=True, exist_ok=True)
        return {
            **os.environ,
            # The SuperLink and SuperNodes start flower-superexec / flwr-serverapp / flwr-clientapp by name.
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
            # One thread per process, as the simulation's Ray workers: the same float reductions.
            "OMP_NUM_THREADS": "1",
            "FLWR_HOME": str(home),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
        }

    def _start(self, name: str, args: list[str]) -> None:
        with (self.root / f"{name}.log").open("wb") as log:
            self.procs[name] = subprocess.Popen(
                args, env=self._env(name), stdout=log, stderr=subprocess.STDOUT, cwd=self.root, start_new_session=True
            )

    def start(self) -> None:
        port = self.address.rsplit(":", 1)[1]
        self._start(
            "superlink",
            [
                str(BIN / "flower-superlink"),
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                port,
                "--disable-runtime-dependency-installation",
            ],
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.procs["superlink"].poll() is not None:
                    raise RuntimeError(f"the SuperLink did not start: {self.log('superlink')}") from None
                time.sleep(0.2)
        for i, node_port in enumerate(self.node_ports):
            self._start(
                f"supernode-{i}",
                [
                    str(BIN / "flower-supernode"),
                    "--insecure",
                    "--superlink",
                    self.address,
                    "--port",
                    str(node_port),
                    "--node-config",
                    f"partition-id={i} num-partitions={self.n}",
                ],
            )

    def run(self, run_config: dict[str, object]) -> None:
        """``flwr run`` of the DSSGD app against this federation (returns once the run is submitted)."""
        home = self.root / "cli"
        home.mkdir(exist_ok=True)
        (home / "config.toml").write_text(
            "[superlink]\ndefault = "
            '"local-dssgd"\n\n[superlink.local-dssgd]\naddress = '
            f'"{self.address}"\ninsecure = true\n'
        )
        overrides = " ".join(f"{k}={_toml(v)}" for k, v in run_config.items())
        done = subprocess.run(
            [str(BIN / "flwr"), "run", str(APP), "local-dssgd", "--run-config", overrides],
            env=self._env("cli"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr

    def wait(self, result_dir: Path, timeout: float) -> float:
        """Seconds until the ServerApp wrote its outcome or failure (fails after ``timeout``)."""
        start = time.monotonic()
        while not ((result_dir / "outcome.json").exists() or (result_dir / "failure.json").exists()):
            assert self.procs["superlink"].poll() is None, self.log("superlink")
            assert time.monotonic() - start < timeout, f"no result within {timeout:g} s\n{self.log('superlink')}"
            time.sleep(0.2)
        return time.monotonic() - start

    def kill(self, name: str) -> None:
        """SIGKILL a process and everything it started (a machine that went away)."""
        proc = self.procs[name]
        for pid in [proc.pid, *_children(proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=10)

    def close(self) -> None:
        """Ends every process this federation started, with their children (SIGTERM, then SIGKILL)."""
        pids = []
        for proc in self.procs.values():
            pids += [proc.pid, *_children(proc.pid)]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(
                Path(f"/proc/{pid}").exists() and "Z" not in _state(pid) for pid in pids
            ):
                time.sleep(0.1)
        for proc in self.procs.values():
            proc.wait(timeout=10)

    def log(self, name: str) -> str:
        return (self.root / f"{name}.log").read_text(errors="replace")[-3000:]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


@pytest.fixture
def federation(tmp_path):
    fed = LocalFederation(tmp_path, n=3)
    try:
        fed.start()
        yield fed
    finally:
        fed.close()
    leftover = [
        pid for proc in fed.procs.values() for pid in [proc.pid] if Path(f"/proc/{pid}").exists() and _state(pid) != "Z"
    ]
    assert not leftover, f"processes left running: {leftover}"


def test_a_real_federation_ends_bitwise_where_the_simulation_ends(federation, tmp_path):
    from defenses.dssgd.flower import run_flower
    from defenses.dssgd.protocol import run_local

    rounds = 2
    result_dir = tmp_path / "result"
    federation.run({**SETTINGS, "rounds": rounds, "turn-timeout": 300.0, "result-dir": str(result_dir)})
    federation.wait(result_dir, timeout=400)
    got = read_outcome(result_dir, 3)

    setup = setup_from_run_config({**SETTINGS, "rounds": rounds})
    want = run_flower(
        setup, rounds=rounds, download_fraction=SETTINGS["download-fraction"], schedule="round-robin", num_workers=2
    )
    assert got.missed_turns == ()
    assert got.uploads_applied == want.uploads_applied == 3 * rounds
    assert torch.equal(got.parameters, want.parameters)
    assert torch.equal(got.stat, want.stat)
    for g, w in zip(got.local_parameters, want.local_parameters, strict=True):
        assert g is not None and torch.equal(g, w)
    # The participants really trained and the server really applied their uploads.
    assert not torch.equal(got.parameters, setup.initial)
    assert [json.loads(line)["participant"] for line in (result_dir / "progress.jsonl").read_text().splitlines()] == [
        0,
        1,
        2,
    ] * rounds
    # The in-process engine (this process's threads) agrees to float tolerance.
    local = run_local(setup, rounds=rounds, download_fraction=SETTINGS["download-fraction"], schedule="round-robin")
    assert torch.allclose(got.parameters, local.parameters, atol=1e-5)


def test_a_supernode_killed_mid_round_costs_one_timeout_and_is_recorded(federation, tmp_path):
    result_dir = tmp_path / "result"
    # Above the slowest live turn seen here (about 20 s with the 2-core machine 7x oversubscribed:
    # each message starts a ClientApp process that imports torch and dpaudit).
    turn_timeout = 45.0
    federation.run({**SETTINGS, "rounds": 2, "turn-timeout": turn_timeout, "result-dir": str(result_dir)})
    progress = result_dir / "progress.jsonl"
    deadline = time.monotonic() + 300
    while not (progress.exists() and progress.read_text().count("\n") >= 1):  # participant 0 uploaded
        assert time.monotonic() < deadline, federation.log("superlink")
        time.sleep(0.2)
    federation.kill("supernode-2")  # mid-round 0, before participant 2's turn
    seconds = federation.wait(result_dir, timeout=turn_timeout + 240)
    got = read_outcome(result_dir, 3)
    # Participant 2 missed both its turns (dropped after the first); the others took all theirs.
    assert got.missed_turns == ((0, 2), (1, 2))
    assert got.uploads_applied == 4
    why = json.loads((result_dir / "outcome.json").read_text())["dropped"]
    assert list(why) == ["2"]
    assert got.local_parameters[2] is None and all(p is not None for p in got.local_parameters[:2])
    events = [json.loads(line) for line in progress.read_text().splitlines()]
    assert [(e["round"], e["participant"]) for e in events] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # One wait for participant 2, between participant 1's round-0 upload and participant 0's
    # round-1 upload: the turn-timeout, or less where the SuperLink reported the node
    # unavailable first (two missed heartbeats); round 1 skips participant 2 at once.
    gaps = [b["seconds"] - a["seconds"] for a, b in zip(events, events[1:])]
    assert gaps[2] < turn_timeout and gaps[1] < turn_timeout + 2 * max(gaps[0], gaps[2]), gaps
    print(f"run ended {seconds:.1f} s after the kill; gaps between uploads {gaps}; why: {why}")
