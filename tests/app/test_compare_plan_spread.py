"""A compare grid's plan spreads its work over the workers once (issue 48, item 2).

``estimate_seconds`` gives the grid's wall time on W workers (its trainings' work / W); the plan
holds one job's time on one worker and divides by the workers itself. The plan once divided by
the jobs only, so the workers counted twice: ``scripts/check_estimates.py`` measured a 2-worker
grid at 0.41x its estimate's middle.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dpaudit.app.estimate import Estimate
from dpaudit.app.runs.compare import limits
from dpaudit.app.runs.compare.grid import count_jobs, load_grid

GRID = """
name = "spread"
dataset = "digits"
model = "digits-mlp"
seeds = [0, 1]
[[defenses]]
defense = "nonprivate"
epochs = 2
[[defenses]]
defense = "dpsgd"
target_epsilon = 4.0
epochs = 2
"""


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_plans_wall_time_is_the_estimated_work_over_the_workers_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int
) -> None:
    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    grid = load_grid(path)
    jobs = count_jobs(grid)
    work = 120.0 * jobs  # seconds of work on one worker: 120 s a job

    def estimate(_grid, *, data_root, workers):  # the grid's wall time on `workers`, as estimate_seconds gives it
        return Estimate(low=work / workers, high=work / workers)

    monkeypatch.setattr(limits, "estimate_seconds", estimate)
    plan = limits.grid_plan(grid, data_root=None, workers=workers, executor="serial")
    assert plan.job_seconds == pytest.approx(120.0)
    # Without start-up (a plan made outside a command): whole jobs per worker, 120 s each.
    expected = -(-jobs // workers) * 120.0
    assert plan.wall_range(workers).low == pytest.approx(expected, abs=jobs * 1.0)
