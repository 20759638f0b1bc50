"""The thread plan (issue 48, item 1): cores, workers, the environment and ``--threads``, in that order of
strength, and a pool's workers really running with it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dpaudit import threads
from dpaudit.executors import LocalExecutor, SerialExecutor
from dpaudit.executors.jobs import Job

#: The real once-per-command count, for the tests of it (the others pin it at 0, below).
_COMMAND_BUSY = threads._command_busy


@pytest.fixture(autouse=True)
def _no_flag(monkeypatch: pytest.MonkeyPatch):
    # The plans these tests check must not depend on what else runs on the machine (the suite
    # itself, another job): no core counts as busy unless a test says so.
    monkeypatch.setattr(threads, "_command_busy", lambda: 0)
    threads.set_thread_flag(None)
    yield
    threads.set_thread_flag(None)


@pytest.mark.parametrize(
    "cores, workers, intra",
    [(2, 1, 2), (2, 2, 1), (8, 2, 4), (8, 3, 2), (16, 5, 3), (2, 8, 1), (1, 1, 1), (64, 64, 1)],
)
def test_the_default_never_runs_more_busy_threads_than_cores(cores: int, workers: int, intra: int) -> None:
    plan = threads.plan_threads(workers=workers, cores=cores, env={})
    assert plan.intra_op == intra and plan.inter_op == 1 and plan.source == "the cores available"
    # The invariant, wherever there are at least as many cores as workers; more workers than
    # cores get one thread each (no fewer is possible).
    assert plan.busy_threads <= max(cores, workers)
    assert plan.intra_op == max(1, cores // workers)


def test_explicit_environment_wins_over_the_default_and_the_flag_over_both() -> None:
    env = {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "5"}
    plan = threads.plan_threads(workers=2, cores=8, env=env)
    assert (plan.intra_op, plan.source) == (3, "OMP_NUM_THREADS")
    assert threads.plan_threads(workers=2, cores=8, env={"MKL_NUM_THREADS": "5"}).intra_op == 5
    plan = threads.plan_threads(workers=2, cores=8, env={**env, "DPAUDIT_THREADS": "6"})
    assert (plan.intra_op, plan.source) == (6, "DPAUDIT_THREADS")
    plan = threads.plan_threads(workers=2, cores=8, env={**env, "DPAUDIT_THREADS": "6"}, flag=7)
    assert (plan.intra_op, plan.source) == (7, "--threads")
    # An empty variable is no setting at all (as OpenMP reads it).
    assert threads.plan_threads(workers=1, cores=8, env={"DPAUDIT_THREADS": " ", "OMP_NUM_THREADS": "2"}).intra_op == 2
    threads.set_thread_flag(4)  # the command's flag, as the CLI records it
    assert threads.plan_threads(workers=2, cores=8, env=env).intra_op == 4


@pytest.mark.parametrize("text", ["zero", "0", "-1", "1.5"])
def test_a_bad_variable_is_named_with_its_value(text: str) -> None:
    with pytest.raises(ValueError, match=rf"OMP_NUM_THREADS must .*{text!r}"):
        threads.plan_threads(workers=1, cores=2, env={"OMP_NUM_THREADS": text})


def test_the_line_says_threads_workers_cores_and_where_they_come_from() -> None:
    plan = threads.plan_threads(workers=2, cores=2, env={})
    assert plan.line() == "threads: 1 intra-op × 2 workers on 2 cores (from the cores available)"
    over = threads.plan_threads(workers=2, cores=2, env={"OMP_NUM_THREADS": "2"})
    assert over.line().endswith("(from OMP_NUM_THREADS) — more busy threads than cores")


def test_cores_are_the_affinity_capped_by_a_cgroup_quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cpu_max = tmp_path / "cpu.max"
    missing = (str(tmp_path / "quota"), str(tmp_path / "period"))
    cpu_max.write_text("150000 100000\n")  # 1.5 CPUs: two threads can use them
    assert threads._cgroup_cores(str(cpu_max), missing) == 2
    cpu_max.write_text("max 100000\n")
    assert threads._cgroup_cores(str(cpu_max), missing) is None
    quota, period = tmp_path / "quota", tmp_path / "period"
    quota.write_text("300000"), period.write_text("100000")
    assert threads._cgroup_cores(str(tmp_path / "none"), (str(quota), str(period))) == 3
    quota.write_text("-1")  # v1's "no quota"
    assert threads._cgroup_cores(str(tmp_path / "none"), (str(quota), str(period))) is None
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(threads, "_cgroup_cores", lambda: 3)
    assert threads.available_cores() == 3
    monkeypatch.setattr(threads, "_cgroup_cores", lambda: None)
    assert threads.available_cores() == 4


def test_the_plan_is_said_once_per_command_as_work_starts_and_not_when_quiet(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from dpaudit.progress import Progress

    plan = threads.plan_threads(workers=1, cores=2, env={})
    threads.start_command(None)
    assert threads.announce(plan, quiet=True) is False
    with Progress(1, "work"):
        pass
    assert "threads:" not in capsys.readouterr().err
    threads.start_command(None)
    assert threads.announce(plan) is True
    assert capsys.readouterr().err == ""  # nothing yet: a refusal before any work stays one line
    for _ in range(2):
        with Progress(1, "work"):
            pass
    err = capsys.readouterr().err
    assert err.count("threads:") == 1 and err.startswith(plan.line() + "\n")
    threads.start_command(None)


def test_the_executors_take_the_plan_for_their_worker_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "available_cores", lambda: 8)
    monkeypatch.setattr(threads, "_USER_ENV", {})
    assert LocalExecutor(workers=2).threads_per_worker == 4
    assert LocalExecutor().workers == 8 and LocalExecutor().threads_per_worker == 1
    assert SerialExecutor().threads_per_worker == 8
    threads.set_thread_flag(3)
    assert LocalExecutor(workers=2).threads_per_worker == 3 and SerialExecutor().threads_per_worker == 3


def _threads_here() -> tuple[int, int, str]:
    import torch

    return torch.get_num_threads(), torch.get_num_interop_threads(), os.environ.get("OMP_NUM_THREADS", "")


@pytest.mark.extended  # a spawned worker imports torch: seconds
def test_a_pool_worker_runs_with_the_planned_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    # The parent runs with one thread (the house's OMP_NUM_THREADS=1) and plans 2 for the worker:
    # only the worker's initializer can have set them.
    monkeypatch.setattr(threads, "_USER_ENV", {})
    monkeypatch.setattr(threads, "available_cores", lambda: 4)
    with LocalExecutor(workers=2) as pool:
        assert pool.threads_per_worker == 2
        ((_, seen),) = list(pool.run([Job(key="threads", fn=_threads_here)]))
    assert seen == (2, 1, "2")


@pytest.mark.extended  # the train verb's parser imports every defense: seconds
def test_the_cli_applies_the_flag_and_refuses_a_bad_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    from dpaudit.app.cli import build_parser, main, plan_command_threads

    argv = ["train", "--defense", "nonprivate", "--model", "digits-mlp", "--out", str(tmp_path / "run")]
    before = torch.get_num_threads()
    try:
        plan = plan_command_threads(build_parser(argv).parse_args([*argv, "--threads", "3"]))
        # A training without sub-models computes alone: one worker, whatever --num-workers' default.
        assert (plan.intra_op, plan.workers, plan.source) == (3, 1, "--threads")
        assert torch.get_num_threads() == 3
        assert threads.say_pending()  # what the first progress bar would say
        assert capsys.readouterr().err.count("threads: 3 intra-op × 1 worker on") == 1
        assert main([*argv, "--threads", "0"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--threads" in err[0]
        assert not (tmp_path / "run").exists()
    finally:
        torch.set_num_threads(before)
        threads.start_command(None)


@pytest.mark.parametrize(
    "cores, workers, busy, intra",
    [(2, 1, 1, 1), (2, 1, 0, 2), (8, 1, 3, 5), (8, 2, 3, 2), (2, 2, 1, 1), (4, 1, 9, 1)],
)
def test_cores_busy_with_other_work_are_not_planned(cores: int, workers: int, busy: int, intra: int) -> None:
    # A 2-thread training beside one busy process ran 2.9x its quiet time (its threads wait for the
    # one parked by the neighbour): the default plans the free cores only.
    plan = threads.plan_threads(workers=workers, cores=cores, env={}, busy=busy)
    assert plan.intra_op == intra and plan.busy == min(busy, cores - 1)
    assert (plan.source == "the cores free") == (busy > 0)
    assert ("busy with other work" in plan.line()) == (busy > 0)
    # What the user gives still wins, busy or not.
    assert threads.plan_threads(workers=workers, cores=cores, env={"OMP_NUM_THREADS": "3"}, busy=busy).intra_op == 3


def test_busy_cores_are_the_least_runnable_count_less_this_process(tmp_path: Path) -> None:
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.52 0.41 0.30 3/211 4242\n")
    assert threads.busy_cores(samples=2, interval=0.0, path=str(loadavg)) == 2
    loadavg.write_text("0.52 0.41 0.30 1/211 4242\n")
    assert threads.busy_cores(samples=1, path=str(loadavg)) == 0
    assert threads.busy_cores(samples=1, path=str(tmp_path / "absent")) == 0
    loadavg.write_text("garbled\n")
    assert threads.busy_cores(samples=1, path=str(loadavg)) == 0


def test_the_busy_count_is_taken_once_per_command(monkeypatch: pytest.MonkeyPatch) -> None:
    # A later plan of the same command (a pool started after another) must not count the command's
    # own workers as other work.
    counts = iter([1, 0, 0])
    monkeypatch.setattr(threads, "_command_busy", _COMMAND_BUSY)
    monkeypatch.setattr(threads, "busy_cores", lambda: next(counts))
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    monkeypatch.setattr(threads, "_USER_ENV", {})
    threads.start_command(None)
    assert threads.plan_threads().busy == 1 and threads.plan_threads(workers=2).busy == 1
    threads.start_command(None)
    assert threads.plan_threads().busy == 0


@pytest.mark.skipif(not Path("/proc/loadavg").is_file(), reason="reads /proc/loadavg (Linux)")
def test_a_busy_neighbour_process_is_counted() -> None:
    import subprocess
    import sys

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert threads.busy_cores() >= 1  # runnable in every sample, whatever else runs
    finally:
        spinner.kill()
        spinner.wait()
