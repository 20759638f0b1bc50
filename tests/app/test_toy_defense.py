"""A defense defined in a module of its own, and nowhere else, is found by every part of the suite.

The toy defense below is written to a temporary module that registers itself
(``DEFENSES.register(...)``) as every defense in ``defenses/`` does; nothing outside that
module names it. It appears in ``dpaudit train --help`` and trains end to end, ``dpaudit
compare``'s grid parses and trains a setting of it, ``dpaudit report`` shows it, and the
contract suite, parametrised from the registry at collection, collects and passes it. The
module is unregistered at teardown.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from defenses import DEFENSES
from dpaudit.app.cli import main

ROOT = Path(__file__).resolve().parents[2]
MODULE = "toy_defense_of_a_test"

TOY_MODULE = '''
"""A toy defense: full-batch gradient descent on the members (a test's own)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from defenses._common import build_record
from defenses.registry import DEFENSES, DefenseSpec
from dpaudit import _validate as v
from dpaudit.models import build_model
from dpaudit.options import option
from dpaudit.privacy.claims import NonPrivateClaim
from dpaudit.seeding import derive_seed
from dpaudit.train_request import TrainRequest


@dataclass(frozen=True, kw_only=True)
class ToyConfig:
    num_toy_steps: int = option(
        20, flag="--toy-steps", help="toy: full-batch gradient steps", metavar="N", check=v.positive
    )
    toy_learning_rate: float = option(0.5, help="toy: step size", metavar="LR", check=v.positive)

    def __post_init__(self) -> None:
        v.integer("num_toy_steps", self.num_toy_steps, minimum=1)
        v.positive("toy_learning_rate", self.toy_learning_rate)


def train_toy(request: TrainRequest[ToyConfig], /):
    # Deterministic given the seeded initialisation.
    started = time.monotonic()
    bundle, config = request.bundle, request.config
    torch.manual_seed(derive_seed(request.seed, "toy-init"))
    model = build_model(
        request.model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes, **request.model_options
    )
    members = bundle.all().subset(request.splits.members)
    opt = torch.optim.SGD(model.parameters(), lr=config.toy_learning_rate)
    for _ in range(config.num_toy_steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(members.features), members.labels).backward()
        opt.step()
    model.eval()
    return build_record(request, defense="toy", model=model, claim=NonPrivateClaim(), started=started), model


DEFENSES.register(
    DefenseSpec(
        name="toy",
        summary="full-batch gradient descent (a test's own defense)",
        config_type=ToyConfig,
        train=train_toy,
        claim_kind="nonprivate",
    )
)
'''

GRID = """
name = "toy-grid"
dataset = "digits"
model = "digits-mlp"
seeds = [0]

[[defenses]]
defense = "nonprivate"
epochs = 1

[[defenses]]
defense = "toy"
num_toy_steps = [5, 30]
"""


@pytest.fixture
def toy_module(tmp_path: Path):
    """Imports the toy's module from ``tmp_path`` (it registers itself); unregisters it afterwards."""
    path = tmp_path / "modules" / f"{MODULE}.py"
    path.parent.mkdir()
    path.write_text(TOY_MODULE)
    spec = importlib.util.spec_from_file_location(MODULE, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module
    try:
        spec.loader.exec_module(module)
        yield path
    finally:
        if "toy" in DEFENSES:
            DEFENSES.unregister("toy")
        sys.modules.pop(MODULE, None)


def test_toy_defense_in_train_help(toy_module, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["train", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "toy" in out and "--toy-steps" in out and "--toy-learning-rate" in out and "a test's own defense" in out


def test_toy_is_gone_after_teardown() -> None:
    assert "toy" not in DEFENSES and MODULE not in sys.modules


@pytest.mark.e2e
def test_toy_defense_trains_end_to_end(toy_module, capsys, tmp_path: Path) -> None:
    argv = [
        "train",
        "--defense",
        "toy",
        "--model",
        "digits-mlp",
        "--toy-steps",
        "30",
        "--out",
        str(tmp_path / "run"),
        "--json",
        "--quiet",
    ]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["defense"] == "toy" and data["metrics"]["train_accuracy"] > 0.5
    assert (Path(data["record_path"]) / "record.json").is_file()
    assert json.loads((Path(data["record_path"]) / "record.json").read_text())["config"]["num_toy_steps"] == 30
    # a flag of another defense is refused for this one, naming both
    assert (
        main(["train", "--defense", "toy", "--model", "digits-mlp", "--clip-norm", "1", "--out", str(tmp_path / "run")])
        == 2
    )
    err = capsys.readouterr().err
    assert "--clip-norm" in err and "toy" in err


@pytest.mark.e2e
def test_toy_defense_in_a_compare_grid_and_its_report(toy_module, capsys, tmp_path: Path) -> None:
    grid, run = tmp_path / "grid.toml", tmp_path / "compare"
    grid.write_text(GRID)
    assert main(["compare", "--config", str(grid), "--out", str(run), "--executor", "serial", "--quiet", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    rows = data["defenses"]
    toys = ["toy-num_toy_steps=5", "toy-num_toy_steps=30"]
    assert set(toys) <= set(rows) and data["jobs_run"] == 3, sorted(rows)
    assert all(rows[label]["defense"] == "toy" and rows[label]["verdict"] == "no violation" for label in toys)
    # more steps of gradient descent fit better: the grid trained each setting as its parameters say
    assert rows["toy-num_toy_steps=30"]["test_accuracy"] > rows["toy-num_toy_steps=5"]["test_accuracy"]

    # `dpaudit report` renders the run again from its stored results: the toy's rows are on the
    # compare page (removed first, so it is this render's), which the index links
    page = Path(data["report"])
    page.unlink()
    assert main(["report", str(run), "--json"]) == 0
    index = Path(json.loads(capsys.readouterr().out)["index"])
    assert page.is_file() and all(label in page.read_text() for label in toys)
    assert page.name in index.read_text()


def _fresh_contract_suite():
    """tests/defenses/test_defense_contract.py, imported now (as a collection would, with the registry as it is)."""
    spec = importlib.util.spec_from_file_location(
        "contract_suite_of_the_toy", ROOT / "tests" / "defenses" / "test_defense_contract.py"
    )
    assert spec is not None and spec.loader is not None
    suite = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite)
    return suite


def test_contract_suite_parametrises_over_the_toy_and_it_passes(toy_module, tmp_path: Path) -> None:
    suite = _fresh_contract_suite()
    (marker,) = [m for m in suite.test_registered_defense_meets_the_contract.pytestmark if m.name == "parametrize"]
    names = [p.values[0] if hasattr(p, "values") else p for p in marker.args[1]]
    assert "toy" in names and set(names) >= {"nonprivate", "dpsgd"}
    suite.check_defense_contract(DEFENSES["toy"], tmp_path)


@pytest.mark.slow
def test_contract_suite_collects_and_passes_the_toy(toy_module) -> None:
    # A fresh pytest imports the toy's module as a plugin, before collection: the suite's
    # parametrisation over the registry then holds the toy, and its checks run on it.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(toy_module.parent), str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        MODULE,
        "-p",
        "no:cacheprovider",
        "tests/defenses/test_defense_contract.py",
        "-k",
        "toy",
        "-rA",
    ]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (
        "PASSED tests/defenses/test_defense_contract.py::test_registered_defense_meets_the_contract[toy]" in done.stdout
    ), done.stdout[-3000:]
    assert "1 passed" in done.stdout
