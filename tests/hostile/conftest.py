"""Fixtures of the hostile-input suite: run ``dpaudit`` in-process, and one tiny trained run to tamper with.

Kept generic on purpose: every test module of ``tests/hostile`` may use them.

* ``cli`` — ``cli.run(*argv)`` returns (exit status, stdout, stderr) of ``dpaudit *argv``.
* ``trained_run`` — a run directory holding one non-private ``digits-mlp`` record trained
  for one epoch, made once per session (what ``dpaudit train --defense nonprivate --model
  digits-mlp --dataset digits --epochs 1 --seed 0 --out RUN`` makes); **copy it**
  (``shutil.copytree``) before changing anything in it.
* ``attacked_run`` — ``trained_run`` plus a stored ``loss`` membership attack on its record,
  made once per session; ``reported`` — a private copy of it per test (what ``report`` renders).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from dpaudit.app.cli import main


@dataclass
class CLI:
    capsys: pytest.CaptureFixture[str]

    def run(self, *argv: str) -> tuple[int, str, str]:
        """Exit status, stdout and stderr of ``dpaudit *argv``."""
        self.capsys.readouterr()  # drop anything printed before (e.g. by fixtures)
        code = main(list(argv))
        out, err = self.capsys.readouterr()
        return code, out, err


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> CLI:
    return CLI(capsys)


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run directory with one tiny non-private digits record (``records/<id>/``); copy before use."""
    from dpaudit.app.runs.train import TrainSpec, default_config, train_or_load
    from dpaudit.store import RunDir

    run = RunDir(tmp_path_factory.mktemp("hostile-trained") / "run")
    train_or_load(
        TrainSpec(
            defense="nonprivate",
            model="digits-mlp",
            dataset="digits",
            config=default_config("nonprivate", epochs=1),
            seed=0,
            progress=False,
        ),
        run,
    )
    return run.path


@pytest.fixture(scope="session")
def attacked_run(trained_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trained run plus a stored ``loss`` attack result (what ``report`` renders)."""
    path = Path(shutil.copytree(trained_run, tmp_path_factory.mktemp("hostile-attacked") / "run"))
    assert main(["attack", "membership", "--target", str(path), "--attack", "loss", "--out", str(path), "--quiet"]) == 0
    return path


@pytest.fixture
def reported(attacked_run: Path, tmp_path: Path) -> Path:
    """A private copy of ``attacked_run``."""
    return Path(shutil.copytree(attacked_run, tmp_path / "run"))
