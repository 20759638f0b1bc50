"""A worker's library warnings go to the command's log, not the terminal (issue 48, item 5).

Shadow models, PATE teachers, audit trials and grid cells run in the executors' worker
processes, which print to the same terminal as the command. The job here is NumPy's mean of an
empty array, whose ``RuntimeWarning`` ("Mean of empty slice") NumPy raises from its own code: a
library warning, in a fresh ``spawn`` worker.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.app.library_warnings import library_warnings_to_log
from dpaudit.executors.jobs import Job
from dpaudit.executors.local import LocalExecutor

pytestmark = pytest.mark.extended  # a spawned worker imports NumPy and dpaudit: seconds


def _run_warning_job() -> float:
    with LocalExecutor(workers=1, threads_per_worker=1) as pool:
        ((_, result),) = list(pool.run([Job(key="warns", fn=np.mean, kwargs={"a": np.zeros(0)})]))
    return float(result)


def test_a_workers_library_warning_stays_off_the_terminal(capfd: pytest.CaptureFixture[str]) -> None:
    with library_warnings_to_log(show=False):
        assert math.isnan(_run_warning_job())
    out, err = capfd.readouterr()
    assert "Mean of empty slice" not in out + err and "Warning" not in out + err


def test_the_log_holds_a_workers_library_warning(capfd: pytest.CaptureFixture[str]) -> None:
    # Shown (`dpaudit --debug`), the worker's log writes each record as the command's does.
    with library_warnings_to_log(show=True):
        assert math.isnan(_run_warning_job())
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "Mean of empty slice" in line]
    assert len(lines) == 1 and lines[0].startswith("library warning: ") and "RuntimeWarning" in lines[0], err


def test_without_the_commands_routing_a_worker_warns_as_python_does(capfd: pytest.CaptureFixture[str]) -> None:
    """Library use (no command around the pool): the worker leaves warnings as Python shows them."""
    assert math.isnan(_run_warning_job())
    err = capfd.readouterr().err
    assert "RuntimeWarning: Mean of empty slice" in err and "library warning" not in err
