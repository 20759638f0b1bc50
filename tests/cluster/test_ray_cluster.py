"""A real two-node Ray cluster on this machine: losing a node mid-run, a killed driver, a node
with other code or data (issue "Beyond one machine for real").

Each node is a ``ray start --block`` of its own (``--num-cpus 1``, its own ``--temp-dir`` and
ports, ``--node-ip-address 127.0.0.1``) in a session of its own, so that every process of the
node — raylet, agents, workers — is in one process group: killing the group is losing the
machine, and nothing else is touched (``ray stop`` would stop every Ray of this user, other
engineers' included). ``dpaudit`` runs as a separate driver with ``--executor ray --address``.

Opt-in (``-m cluster``; ``.ci/run`` runs them): starting the nodes and their workers takes
about a minute on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from attacks.membership.shadows import MODELS_PER_BATCH

pytest.importorskip("ray")

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="finds processes through Linux's /proc"),
]

ROOT = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).with_name("ray"))
PACKAGES = ("dpaudit", "attacks", "defenses", "reports")
#: The offline data root every node uses (the olivetti test needs it; the rest run on digits).
SHARED_DATA = next(
    (
        p
        for p in (
            Path(os.environ.get("DPAUDIT_DATA_ROOT", "/nonexistent")),
            ROOT.parent / "shared" / "data",
            ROOT.parents[1] / "shared" / "data",
        )
        if (p / "olivetti").is_dir()
    ),
    None,
)
#: Start-up and runs on a loaded 2-core machine (seconds).
TIMEOUT_S = 400.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session_of(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else int(fields[3])


def _in_session(sid: int) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != sid and _session_of(int(p)) == sid]


def _titles(pids: list[int]) -> list[str]:
    out = []
    for pid in pids:
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip())
        except OSError:
            pass
    return out


class Node:
    """One ``ray start --block`` and everything it started (its session)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], temp_dir: Path) -> None:
        self.name = name
        ports = {
            "--node-manager-port": _free_port(),
            "--object-manager-port": _free_port(),
            "--dashboard-agent-listen-port": _free_port(),
            "--dashboard-agent-grpc-port": _free_port(),
            "--metrics-export-port": _free_port(),
            "--runtime-env-agent-port": _free_port(),
        }
        low = _free_port()
        cmd = [
            RAY,
            "start",
            "--block",
            "--num-cpus",
            "1",
            "--node-ip-address",
            "127.0.0.1",
            "--temp-dir",
            str(temp_dir),
            "--disable-usage-stats",
        ]
        cmd += [str(x) for kv in ports.items() for x in kv] + [
            "--min-worker-port",
            str(low),
            "--max-worker-port",
            str(low + 40),
            *args,
        ]
        self.port = ports["--node-manager-port"]  # how the cluster's node table names this node
        self.log = temp_dir.with_suffix(".log")
        self.proc = subprocess.Popen(
            cmd, env=env, start_new_session=True, stdout=self.log.open("wb"), stderr=subprocess.STDOUT
        )

    def processes(self) -> list[int]:
        return _in_session(self.proc.pid) + ([self.proc.pid] if _session_of(self.proc.pid) is not None else [])

    def kill(self) -> None:
        """Loses the machine: SIGKILL to every process of the node, then waits for them to go."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        deadline = time.monotonic() + 30
        while self.processes() and time.monotonic() < deadline:
            for pid in self.processes():  # a process that left the group (none seen, but be sure)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)


class Cluster:
    """A head node and worker nodes on this machine, each in its own temp dir and session."""

    def __init__(self, base: Path) -> None:
        # Ray's socket paths must stay under 107 bytes: a short directory of our own in /tmp.
        self.base = Path(__import__("tempfile").mkdtemp(prefix="dpr", dir="/tmp"))
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.nodes: list[Node] = []
        self.head = self._start(
            "head",
            [
                "--head",
                "--port",
                str(self.port),
                "--include-dashboard=false",
                "--ray-client-server-port",
                str(_free_port()),
            ],
            {},
        )
        self._wait_for(self.head)

    def env(self, extra: dict[str, str]) -> dict[str, str]:
        data = {"DPAUDIT_DATA_ROOT": str(SHARED_DATA)} if SHARED_DATA is not None else {}
        return {
            **os.environ,
            **data,
            "PYTHONPATH": str(ROOT),
            "OMP_NUM_THREADS": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            **extra,
        }

    def _start(self, name: str, args: list[str], extra: dict[str, str]) -> Node:
        node = Node(name, args, self.env(extra), self.base / f"{name}{len(self.nodes)}")
        self.nodes.append(node)
        return node

    def add_worker(self, extra_env: dict[str, str] | None = None) -> Node:
        node = self._start("w", ["--address", self.address], extra_env or {})
        self._wait_for(node)
        return node

    def alive_ports(self) -> set[int]:
        """Node-manager ports of the nodes the cluster counts as alive (a killed node stays
        "alive" until its health checks fail, about 15 s)."""
        code = (
            f"import ray; ray.init(address={self.address!r}, log_to_driver=False, "
            "logging_level='ERROR'); print([n['NodeManagerPort'] for n in "
            "ray.nodes() if n['Alive']])"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=self.env({}), cwd="/"
        )
        return (
            set(json.loads(out.stdout.strip().splitlines()[-1]))
            if out.returncode == 0 and out.stdout.strip()
            else set()
        )

    def _wait_for(self, node: Node) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            if node.port in self.alive_ports():
                return
            if node.proc.poll() is not None:
                raise RuntimeError(f"ray start of node {node.name} exited {node.proc.returncode}; see {node.log}")
            time.sleep(1.0)
        raise RuntimeError(f"node {node.name} did not join the cluster; logs in {self.base}")

    def close(self) -> None:
        for node in reversed(self.nodes):
            node.kill()
        left = [pid for node in self.nodes for pid in node.processes()]
        shutil.rmtree(self.base, ignore_errors=True)
        assert not left, f"processes of the cluster still running: {_titles(left)}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("ray"))
    try:
        yield c
    finally:
        c.close()
    # Nothing of ours anywhere: no process mentions the cluster's directory.
    ours = [t for t in _titles([int(p) for p in os.listdir("/proc") if p.isdigit()]) if str(c.base) in t]
    assert not ours, f"orphaned processes: {ours}"


# ----------------------------------------------------------------------------- helpers
def _dpaudit(
    argv: list[str], env: dict[str, str], *, wait: bool = True
) -> subprocess.Popen[bytes] | subprocess.CompletedProcess[str]:
    # Not from the checkout: Ray puts the driver's working directory first on every worker's
    # sys.path, which on one machine would hide each node's own copy of the code.
    cmd = [sys.executable, "-m", "dpaudit.app.cli", *argv]
    cwd = "/"
    if wait:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=cwd)
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, cwd=cwd
    )


def _wait_until(predicate, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(
                f"the run ended before {what}: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
            )
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _busy_on(node: Node) -> bool:
    """A job of ours is running on ``node`` (Ray titles a worker by the task it runs)."""
    return any(t.startswith("ray::_ray_call") for t in _titles(node.processes()))


def _no_partial_files(root: Path) -> None:
    partial = [p for p in root.rglob(".*.tmp")]
    assert not partial, f"partial files left: {partial}"


def _finish(proc: subprocess.Popen[bytes]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=TIMEOUT_S)
    return proc.returncode, out.decode(), err.decode()


def _attacks(payload: dict) -> dict:
    return {k: {m: val for m, val in r.items() if m != "seconds"} for k, r in payload["attacks"].items()}


GRID = """
name = "cluster"
dataset = "digits"
model = "digits-mlp"
seeds = [0, 1]
[[defenses]]
defense = "nonprivate"
epochs = 30
[[defenses]]
defense = "nonprivate"
label = "short"
epochs = 20
[[defenses]]
defense = "dpsgd"
target_epsilon = 4.0
epochs = 10
lot_size = 64
[attacks.membership]
attacks = ["loss"]
num_samples = 200
"""


def _matrix(run: Path) -> list[dict]:
    data = json.loads((run / "compare" / "cluster" / "comparison.json").read_text())
    return [{k: val for k, val in r.items() if k not in ("links", "seconds")} for r in data["rows"]]


# ----------------------------------------------------------------------------- the tests
#: Shadows train in batched jobs of MODELS_PER_BATCH: three jobs, so that with one CPU on the
#: head node one of them runs on the worker node the test kills.
SHADOWS = 3 * MODELS_PER_BATCH


def test_a_shadow_pool_survives_losing_a_worker_node(cluster: Cluster, tmp_path: Path) -> None:
    env = cluster.env({})
    target = tmp_path / "target"
    done = _dpaudit(
        [
            "train",
            "--defense",
            "nonprivate",
            "--dataset",
            "digits",
            "--model",
            "digits-mlp",
            "--epochs",
            "40",
            "--out",
            str(target),
            "--quiet",
        ],
        env,
    )
    assert done.returncode == 0, done.stderr
    attack = [
        "attack",
        "membership",
        "--target",
        str(target),
        "--attack",
        "lira",
        "--num-shadows",
        str(SHADOWS),
        "--json",
        "--quiet",
    ]
    local = _dpaudit([*attack, "--executor", "serial", "--out", str(tmp_path / "local")], env)
    assert local.returncode == 0, local.stderr

    worker = cluster.add_worker()
    out = tmp_path / "ray"
    proc = _dpaudit([*attack, "--executor", "ray", "--address", cluster.address, "--out", str(out)], env, wait=False)
    shadows = lambda: list(out.glob("attacks/shadows/*/record.json"))
    # Killed while it trains a shadow (its first job there: the worker still imports torch, so
    # this window is seconds long even for tiny models).
    _wait_until(lambda: _busy_on(worker), proc, "a shadow training on the worker node")
    worker.kill()
    code, stdout, err = _finish(proc)
    assert code == 0 and stdout.strip(), (code, stdout, err)
    on_ray = json.loads(stdout)
    assert _attacks(on_ray) == _attacks(json.loads(local.stdout))
    # Each shadow trained and stored once: a retried job reaches the driver once.
    assert [(p["num_models"], p["num_trained"], p["num_reused"]) for p in on_ray["shadows"]] == [(SHADOWS, SHADOWS, 0)]
    assert len(shadows()) == SHADOWS
    _no_partial_files(out)


def test_a_grid_survives_losing_a_node_and_resumes_after_its_driver_is_killed(cluster: Cluster, tmp_path: Path) -> None:
    env = cluster.env({})
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    local = _dpaudit(
        [
            "compare",
            "--config",
            str(grid),
            "--executor",
            "serial",
            "--out",
            str(tmp_path / "local"),
            "--json",
            "--quiet",
        ],
        env,
    )
    assert local.returncode == 0, local.stderr
    expected = _matrix(tmp_path / "local")
    jobs = json.loads(local.stdout)["jobs_run"]

    # Losing a node: every job still finishes, once, with the same numbers as on one machine.
    worker = cluster.add_worker()
    out = tmp_path / "ray"
    argv = ["compare", "--config", str(grid), "--executor", "ray", "--address", cluster.address, "--json", "--quiet"]
    proc = _dpaudit([*argv, "--out", str(out)], env, wait=False)
    stored = lambda run: list((run / "compare" / "cluster" / "jobs").glob("*.json"))
    _wait_until(lambda: _busy_on(worker), proc, "a job running on the worker node")
    worker.kill()
    code, stdout, err = _finish(proc)
    assert code == 0, err
    summary = json.loads(stdout)
    assert (summary["jobs_run"], summary["jobs_reused"]) == (jobs, 0)
    assert len(stored(out)) == jobs
    assert _matrix(out) == expected
    _no_partial_files(out)

    # A driver killed mid-grid: its run resumes, reusing what was stored.
    cluster.add_worker()
    again = tmp_path / "killed"
    proc = _dpaudit([*argv, "--out", str(again)], env, wait=False)
    _wait_until(lambda: stored(again), proc, "a job stored")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    kept = len(stored(again))
    rerun = _dpaudit([*argv[:-2], "--out", str(again)], env)
    assert rerun.returncode == 0, rerun.stderr
    assert f"jobs: {jobs - kept} run, {kept} reused" in rerun.stdout, rerun.stdout
    assert _matrix(again) == expected
    _no_partial_files(again)
    # The killed driver's jobs died with it (Ray's fate sharing): none still runs on a node.
    deadline = time.monotonic() + 30
    while any(_busy_on(n) for n in cluster.nodes) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(_busy_on(n) for n in cluster.nodes)


def _copy_packages(dest: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _worker_with_edited_code(cluster: Cluster, tmp_path: Path) -> Node:
    """A worker node whose checkout has one line appended to ``dpaudit/models.py``."""
    copy = _copy_packages(tmp_path / "checkout")
    with (copy / "dpaudit" / "models.py").open("a") as f:
        f.write("\n# edited on this node only\n")
    return cluster.add_worker({"PYTHONPATH": str(copy)})


def test_a_node_with_other_code_is_refused_before_any_job(cluster: Cluster, tmp_path: Path) -> None:
    node = _worker_with_edited_code(cluster, tmp_path)
    try:
        grid = tmp_path / "grid.toml"
        grid.write_text(GRID)
        out = tmp_path / "run"
        done = _dpaudit(
            [
                "compare",
                "--config",
                str(grid),
                "--executor",
                "ray",
                "--address",
                cluster.address,
                "--out",
                str(out),
                "--quiet",
            ],
            cluster.env({}),
        )
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, done.stderr
        assert (
            len(lines) == 1
            and "worker node" in lines[0]
            and "code fingerprint" in lines[0]
            and "dpaudit/models.py" in lines[0]
        ), lines
        assert not list(out.glob("compare/*/jobs/*.json")), "a job ran on a refused cluster"
    finally:
        node.kill()


def test_shipped_code_runs_on_a_node_with_another_checkout(cluster: Cluster, tmp_path: Path) -> None:
    # The node of the refusal above, with --ship-code: Ray sends the driver's packages
    # (runtime_env py_modules), every node then reports the driver's code, and the grid runs.
    node = _worker_with_edited_code(cluster, tmp_path)
    try:
        grid = tmp_path / "grid.toml"
        grid.write_text(
            'name = "shipped"\ndataset = "digits"\nmodel = "digits-mlp"\nseeds = '
            '[0, 1]\n[[defenses]]\ndefense = "nonprivate"\nepochs = 2\n'
        )
        done = _dpaudit(
            [
                "compare",
                "--config",
                str(grid),
                "--executor",
                "ray",
                "--address",
                cluster.address,
                "--ship-code",
                "--out",
                str(tmp_path / "run"),
                "--json",
                "--quiet",
            ],
            cluster.env({}),
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["jobs_run"] == 2
    finally:
        node.kill()


def test_a_node_with_other_data_is_refused_before_any_job(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hashlib

    import ray

    from dpaudit.cluster import ClusterMismatch
    from dpaudit.executors.jobs import Job
    from dpaudit.executors.ray_tasks import RayExecutor

    if SHARED_DATA is None:
        pytest.skip("the offline face images are not found")
    # The same data root variable, another directory: one image changed, its MD5SUMS updated
    # (so the load there accepts it, as after a careless re-download).
    other = tmp_path / "data"
    shutil.copytree(SHARED_DATA / "orl_faces", other / "orl_faces")
    image = other / "orl_faces" / "s1" / "1.pgm"
    image.chmod(0o644)
    data = bytearray(image.read_bytes())
    data[-1] ^= 0xFF
    image.write_bytes(bytes(data))
    sums = other / "orl_faces" / "MD5SUMS"
    sums.chmod(0o644)
    digest = hashlib.md5(bytes(data)).hexdigest()
    sums.write_text(
        "".join(
            f"{digest}  ./s1/1.pgm\n" if line.endswith(" ./s1/1.pgm") else line + "\n"
            for line in sums.read_text().splitlines()
        )
    )
    node = cluster.add_worker({"DPAUDIT_DATA_ROOT": str(other)})
    monkeypatch.setenv("DPAUDIT_DATA_ROOT", str(SHARED_DATA))
    monkeypatch.chdir("/")  # see _dpaudit: this process is the driver here
    ran = tmp_path / "ran"
    try:
        with RayExecutor(address=cluster.address, datasets=("faces",)) as ex:
            with pytest.raises(
                ClusterMismatch,
                match=r"dataset 'faces' differs from the driver's \(orl_faces/s1/1.pgm: MD5 "
                r"[0-9a-f]{12} there, 28ca1775a8af here\)",
            ):
                list(ex.run([Job(key="touch", fn=Path.touch, kwargs={"self": ran})]))
        assert not ran.exists()
    finally:
        if ray.is_initialized():
            ray.shutdown()
        node.kill()
