"""No silent minutes: every verb's work goes through the progress helper (issue 30, item 5).

A fake clock in units of work: every ``nn.Module`` call advances it by one, and every report of
an enabled :class:`dpaudit.progress.Progress` (an update or a line) is a tick. A loop that
reports nothing shows up as a gap that grows with its budget, so each verb runs twice, at a
budget and at four times it, and the longest silent stretch must not grow with the budget:
the wall-clock gap between progress lines then stays that of one unit of work (one step, one
shadow model, one trial), whatever the budget — never minutes.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import torch

from dpaudit.progress import Progress

TRAIN = ("train", "--dataset", "digits", "--model", "digits-mlp")


class WorkClock:
    """Counts module calls; records the count at every enabled progress report."""

    def __init__(self) -> None:
        self.work = 0
        self.ticks: list[int] = []

    def longest_silence(self) -> int:
        """Most module calls between two reports, or before the first / after the last."""
        marks = [0, *self.ticks, self.work]
        return max(b - a for a, b in zip(marks, marks[1:]))


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> WorkClock:
    c = WorkClock()
    call = torch.nn.Module.__call__

    def counted(self: torch.nn.Module, *a: object, **k: object) -> object:
        c.work += 1
        return call(self, *a, **k)

    update, write = Progress.update, Progress.write

    def ticked(method: Callable[..., None]) -> Callable[..., None]:
        def inner(self: Progress, *a: object, **k: object) -> None:
            if self._bar is not None:
                c.ticks.append(c.work)
            method(self, *a, **k)

        return inner

    monkeypatch.setattr(torch.nn.Module, "__call__", counted)
    monkeypatch.setattr(Progress, "update", ticked(update))
    monkeypatch.setattr(Progress, "write", ticked(write))
    return c


def _silence(cli, clock: WorkClock, argv: tuple[str, ...]) -> int:
    clock.work, clock.ticks = 0, []
    code, _, err = cli.run(*argv)
    assert code == 0, err
    assert clock.ticks, f"{argv[0]} reported no progress at all"
    return clock.longest_silence()


def _grows(small: int, big: int) -> bool:
    # Four times the budget: a silent loop's stretch grows about fourfold; a reported one not at all.
    return big > 1.5 * small + 20


@pytest.mark.slow
def test_train_reports_every_step(cli, clock, tmp_path):
    base = (*TRAIN, "--defense", "nonprivate", "--out")
    small = _silence(cli, clock, (*base, str(tmp_path / "a"), "--epochs", "1"))
    big = _silence(cli, clock, (*base, str(tmp_path / "b"), "--epochs", "4"))
    assert not _grows(small, big), (small, big)


@pytest.mark.slow
def test_attack_inversion_reports_every_step(cli, clock, tmp_path):
    code, out, err = cli.run(
        *TRAIN, "--defense", "nonprivate", "--epochs", "1", "--quiet", "--out", str(tmp_path), "--json"
    )
    assert code == 0, err
    target = json.loads(out)["record_path"]
    base = (
        "attack",
        "inversion",
        "--target",
        target,
        "--attack",
        "mi-face",
        "--classes",
        "0-1",
        "--evaluator-epochs",
        "1",
        "--patience",
        "1000",
        "--cost-threshold",
        "0",
    )
    small = _silence(cli, clock, (*base, "--out", str(tmp_path / "a"), "--max-iterations", "100"))
    big = _silence(cli, clock, (*base, "--out", str(tmp_path / "b"), "--max-iterations", "400"))
    assert not _grows(small, big), (small, big)


def _target(cli, tmp_path, *flags: str) -> str:
    code, out, err = cli.run(*TRAIN, *flags, "--quiet", "--out", str(tmp_path / "target"), "--json")
    assert code == 0, err
    return str(json.loads(out)["record_path"])


@pytest.mark.slow
def test_attack_membership_reports_every_shadow(cli, clock, tmp_path):
    target = _target(cli, tmp_path, "--defense", "nonprivate", "--epochs", "2")
    base = ("attack", "membership", "--target", target, "--attack", "lira", "--num-samples", "50")
    small = _silence(cli, clock, (*base, "--out", str(tmp_path / "a"), "--num-shadows", "2"))
    big = _silence(cli, clock, (*base, "--out", str(tmp_path / "b"), "--num-shadows", "8"))
    assert not _grows(small, big), (small, big)


@pytest.mark.slow
def test_audit_reports_every_trial(cli, clock, tmp_path):
    base = (
        "audit",
        "--threat",
        "white-box",
        "--target-epsilon",
        "2",
        "--sampling-rate",
        "0.1",
        "--num-steps",
        "20",
        "--num-members",
        "50",
        "--num-workers",
        "1",
    )
    small = _silence(cli, clock, (*base, "--out", str(tmp_path / "a"), "--num-trials", "1"))
    big = _silence(cli, clock, (*base, "--out", str(tmp_path / "b"), "--num-trials", "4"))
    assert not _grows(small, big), (small, big)


@pytest.mark.slow
def test_certify_reports_every_draw(cli, clock, tmp_path):
    target = _target(cli, tmp_path, "--defense", "pixeldp", "--epochs", "1")
    base = ("certify", "--target", target, "--attack", "fgsm", "--num-examples", "20")
    small = _silence(cli, clock, (*base, "--out", str(tmp_path / "a"), "--num-draws", "20"))
    big = _silence(cli, clock, (*base, "--out", str(tmp_path / "b"), "--num-draws", "80"))
    assert not _grows(small, big), (small, big)


def test_pate_analyze_reports_every_query_of_a_smooth_sensitivity_release(cli, clock, tmp_path, monkeypatch):
    # No model here: the per-query loop must report as it goes (10,000 queries of 250 teachers
    # take a minute on one core; it once ran silently). The bar starts from 1,000 queries and
    # reports every RELEASE_PROGRESS_EVERY of them; both are lowered so 40 queries show it.
    import numpy as np

    from dpaudit.privacy.pate import smooth_sensitivity as pate_lib
    from dpaudit.privacy.pate import votes as pate_votes

    monkeypatch.setattr(pate_votes, "PROGRESS_QUERIES", 10)
    monkeypatch.setattr(pate_lib, "RELEASE_PROGRESS_EVERY", 1)
    votes = np.random.default_rng(0).multinomial(250, [0.6] + [0.4 / 9] * 9, size=40)
    np.save(tmp_path / "votes.npy", votes)
    code, _, err = cli.run(
        "pate",
        "analyze",
        "--votes",
        str(tmp_path / "votes.npy"),
        "--aggregator",
        "gnmax",
        "--sigma",
        "40",
        "--smooth-sensitivity-beta",
        "0.0329",
        "--smooth-sensitivity-sigma",
        "15",
    )
    assert code == 0, err
    assert len(clock.ticks) >= 40 and "pate analyze: queries" in err


def test_compare_says_it_is_still_working_while_jobs_run_elsewhere(cli, tmp_path, monkeypatch):
    # A grid's jobs train in worker processes that cannot move the parent's bar, so the parent
    # says what is pending whenever the bar has not moved for HEARTBEAT_SECONDS (10 s; here 0.05).
    import time

    from dpaudit import progress
    from dpaudit.app.runs.compare import jobs

    monkeypatch.setattr(progress, "HEARTBEAT_SECONDS", 0.05)
    train_job = jobs.train_job

    def slow_train_job(**kwargs: object) -> object:
        time.sleep(0.5)  # a job that takes ten heartbeats, however fast this machine trains
        return train_job(**kwargs)

    monkeypatch.setattr(jobs, "train_job", slow_train_job)
    grid = tmp_path / "grid.toml"
    grid.write_text(
        'name = "cadence"\ndataset = "digits"\nmodel = "digits-mlp"\nseeds = '
        '[0]\n[[defenses]]\ndefense = "nonprivate"\nepochs = 3\n'
    )
    code, _, err = cli.run("compare", "--config", str(grid), "--out", str(tmp_path / "run"), "--executor", "serial")
    assert code == 0, err
    assert "compare cadence: still working: 1 job running or queued (train-nonprivate" in err, err


def test_heartbeat_speaks_only_while_the_bar_is_idle():
    import io
    import time

    stream = io.StringIO()
    with Progress(3, "waiting", stream=stream) as bar, bar.heartbeat(lambda: "2 jobs queued", seconds=0.05):
        time.sleep(0.3)
    lines = [line for line in stream.getvalue().splitlines() if "still working" in line]
    assert 2 <= len(lines) <= 8 and lines[0].startswith("waiting: still working: 2 jobs queued ("), lines
    counted = io.StringIO()  # without a status, the bar's own count says what is left
    with Progress(4, "trials", stream=counted) as bar, bar.heartbeat(seconds=0.05):
        bar.update(1)
        time.sleep(0.2)
    assert "trials: still working: 3 of 4 still running or queued (" in counted.getvalue()
    quiet = io.StringIO()
    with Progress(3, "off", stream=quiet, enabled=False) as bar, bar.heartbeat(lambda: "x", seconds=0.01):
        time.sleep(0.05)
    assert quiet.getvalue() == ""


@pytest.mark.slow
def test_attack_uploads_reports_every_turn(cli, clock, tmp_path):
    flags = (
        "--defense",
        "dssgd",
        "--participants",
        "3",
        "--upload-fraction",
        "0.1",
        "--observe-participant",
        "0",
        "--no-baselines",
    )
    small_target = _target(cli, tmp_path / "s", *flags, "--rounds", "2")
    big_target = _target(cli, tmp_path / "b", *flags, "--rounds", "8")
    small = _silence(cli, clock, ("attack", "uploads", "--target", small_target, "--out", str(tmp_path / "s")))
    big = _silence(cli, clock, ("attack", "uploads", "--target", big_target, "--out", str(tmp_path / "b")))
    assert not _grows(small, big), (small, big)
