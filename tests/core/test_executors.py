"""Executors: the same jobs give the same results in-process, on a process pool and on Ray."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attacks.membership.shadows import ShadowTraining, ensure_shadows, plan_shadows
from dpaudit.data import load_dataset, make_splits
from dpaudit.executors import make_executor
from dpaudit.executors.jobs import Job, SerialExecutor
from dpaudit.executors.local import LocalExecutor
from dpaudit.executors.ray_tasks import RayExecutor
from dpaudit.results.record import Membership, TrainedModel
from dpaudit.seeding import derive_seed

ROOT = Path(__file__).resolve().parents[2]


def _jobs(n):
    return [Job(key=f"j{i}", fn=derive_seed, kwargs={"seed": i}) for i in range(n)]


@pytest.fixture(scope="module")
def specs():
    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0, num_members=200, num_non_members=100)
    template = TrainedModel(
        model_id="t",
        defense="nonprivate",
        model_name="digits-mlp",
        dataset="digits",
        input_shape=(1, 8, 8),
        num_classes=10,
        membership=Membership(members=splits.members, non_members=splits.non_members, population=splits.population),
        seed=0,
    )
    return plan_shadows(
        template=template,
        pool_ids=splits.population,
        num_shadows=2,
        seed=7,
        kind="offline",
        training=ShadowTraining(epochs=4),
    )


@pytest.fixture(scope="module")
def serial_weights(specs):
    run = ensure_shadows(specs, directory=None, executor=SerialExecutor(), progress=False)
    return [m.state_dict() for m in run.models]


def _assert_same(models, reference):
    for model, ref in zip(models, reference):
        for k, t in model.state_dict().items():
            assert torch.equal(t, ref[k]), k


def test_serial_runs_jobs_in_order_and_restores_threads():
    before = torch.get_num_threads()
    out = list(SerialExecutor().run(_jobs(3)))
    assert [j.key for j, _ in out] == ["j0", "j1", "j2"] and [r for _, r in out] == [derive_seed(i) for i in range(3)]
    assert torch.get_num_threads() == before


def test_job_errors_carry_the_job_key():
    with pytest.raises(ValueError, match="seed must be an integer >= 0") as info:
        list(SerialExecutor().run([Job(key="bad-job", fn=derive_seed, kwargs={"seed": -1})]))
    assert any("bad-job" in note for note in getattr(info.value, "__notes__", []))


def test_jobs_validated():
    with pytest.raises(ValueError, match="unique keys"):
        list(SerialExecutor().run([_jobs(1)[0], _jobs(1)[0]]))
    with pytest.raises(TypeError, match="key must be a non-empty string"):
        Job(key="", fn=derive_seed)


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(kind="threads"), ValueError, "executor must be one of serial, local, ray; got 'threads'"),
        (dict(kind="local", address="auto"), ValueError, "address='auto' applies to executor 'ray' only"),
        (dict(kind="local", workers=0), ValueError, "workers must be an integer >= 1, got 0"),
    ],
)
def test_make_executor_rejects_bad_input(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        make_executor(**kwargs)


@pytest.mark.cluster  # real worker processes for several seconds: the cluster tier (.ci/run) runs it
def test_process_pool_trains_identical_shadows_and_stops_with_the_caller(specs, serial_weights):
    # One pool for both checks: starting a worker (spawn, then importing torch) costs seconds.
    with LocalExecutor(workers=2) as pool:
        run = ensure_shadows(specs, directory=None, executor=pool, progress=False)
        _assert_same(run.models, serial_weights)
        it = pool.run(_jobs(6))
        next(it)
        it.close()  # cancels the rest and stops the workers
        assert pool._pool is None


@pytest.mark.cluster  # 10 s of Ray start-up; the cluster tier (.ci/run) runs it beside the two-node tests
def test_ray_trains_identical_shadows(specs, serial_weights):
    pytest.importorskip("ray")
    # One Ray worker: each worker process imports torch (seconds), and identity is the point here.
    with RayExecutor(workers=1) as ray_exec:
        run = ensure_shadows(specs, directory=None, executor=ray_exec, progress=False)
    _assert_same(run.models, serial_weights)


def test_ray_absent_is_a_clear_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(ImportError, match=r"pip install 'dpaudit\[ray\]'"):
        make_executor("ray")


# ----------------------------------------------------------------------------- workers die with their parent
# A parent script run as a file: spawn workers re-import it, so its job functions need no package.
_PARENT = """
import os, sys, time
import numpy as np
from dpaudit.executors.jobs import Job
from dpaudit.executors.local import LocalExecutor


def nap(seconds, marker_dir):
    open(f"{marker_dir}/{os.getpid()}", "w").close()  # tells the test this worker is in its job
    time.sleep(seconds)


if __name__ == "__main__":
    mode = sys.argv[1]
    pool = LocalExecutor(workers=2, start_method=sys.argv[2] if len(sys.argv) > 2 else "spawn")
    if mode == "orphans":  # workers busy for a minute; the test SIGKILLs this process
        pool._pdeathsig = sys.argv[3] == "pdeathsig"
        jobs = [Job(key=f"j{i}", fn=nap, kwargs={"seconds": 60, "marker_dir": sys.argv[4]}) for i in range(4)]
        for _ in pool.run(jobs):
            pass
    else:  # stop early while workers are sending results of tens of MB
        it = pool.run([Job(key=f"j{i}", fn=np.zeros, kwargs={"shape": 4_000_000}) for i in range(200)])
        for n, _ in enumerate(it):
            if n == 10:
                break
        it.close()
        print("closed", flush=True)
"""


def _proc_stat(pid):
    try:
        raw = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()  # state, ppid, pgrp, session, ...


def _descendants(root):
    table = {int(p): st for p in os.listdir("/proc") if p.isdigit() and (st := _proc_stat(p)) is not None}
    found, frontier = set(), [root]
    while frontier:
        parent = frontier.pop()
        kids = {pid for pid, st in table.items() if int(st[1]) == parent} - found
        found |= kids
        frontier.extend(kids)
    return found


def _alive(pid):
    st = _proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")  # a zombie runs nothing


@pytest.mark.cluster  # kills real parents of real pools, for each start method: the cluster tier (.ci/run)
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds processes through Linux's /proc")
@pytest.mark.parametrize(
    "start_method, guard",
    [
        ("spawn", "pdeathsig"),  # Linux: the kernel kills the worker with its parent
        ("spawn", "watchdog"),  # elsewhere (macOS): the worker's thread sees the parent's pipe close
        ("forkserver", "pdeathsig"),  # the fork server exits with the parent, its workers with it
    ],
)
def test_workers_and_resource_tracker_die_when_the_parent_is_killed(tmp_path, start_method, guard):
    script = tmp_path / "parent.py"
    script.write_text(_PARENT)
    markers = tmp_path / "in-job"
    markers.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(script), "orphans", start_method, guard, str(markers)],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
        env=_env(),
    )
    procs: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while len(list(markers.iterdir())) < 2:  # both workers are in a job
            assert time.monotonic() < deadline and proc.poll() is None, (
                "the pool's workers did not start their jobs within 120 s"
            )
            time.sleep(0.1)
        procs = _descendants(proc.pid)
        assert len(procs) >= 3 and any("resource_tracker" in _cmdline(p) for p in procs), {
            p: _cmdline(p) for p in procs
        }
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = {p: _cmdline(p) for p in procs if _alive(p)}
        assert not left, f"alive 10 s after the parent was killed: {left}"
    finally:
        proc.kill()
        for p in procs:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.cluster  # real workers streaming large results: the cluster tier (.ci/run) runs it
def test_stopping_a_run_while_workers_send_large_results_does_not_hang(tmp_path):
    # A worker terminated half-way through sending its result used to leave the pool's manager
    # thread waiting for the rest for ever: the caller, then interpreter exit, hung.
    script = tmp_path / "parent.py"
    script.write_text(_PARENT)
    try:
        done = subprocess.run(
            [sys.executable, str(script), "early-stop"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=90,
            env=_env(),
        )
    except subprocess.TimeoutExpired:
        pytest.fail("stopping the run early hung")
    assert done.returncode == 0 and "closed" in done.stdout, done.stderr
    assert "Traceback" not in done.stderr, done.stderr


def _cmdline(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
