"""A defense defined inside this test appears in ``dpaudit train --help``, trains end to end and passes the contract suite.

Nothing outside this test changes to add it: a :class:`defenses.DefenseSpec` in
:data:`defenses.DEFENSES` is all the CLI, the train run and the contract suite read.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

from defenses import DEFENSES, DefenseSpec, build_record
from dpaudit import _validate as v
from dpaudit.app.cli import main
from dpaudit.models import build_model
from dpaudit.options import option
from dpaudit.privacy.claims import NonPrivateClaim
from dpaudit.seeding import derive_seed


@dataclass(frozen=True, kw_only=True)
class ToyConfig:
    num_toy_steps: int = option(20, flag="--toy-steps", help="toy: full-batch gradient steps", metavar="N", check=v.positive)
    toy_learning_rate: float = option(0.5, help="toy: step size", metavar="LR", check=v.positive)

    def __post_init__(self) -> None:
        v.integer("num_toy_steps", self.num_toy_steps, minimum=1)
        v.positive("toy_learning_rate", self.toy_learning_rate)


def train_toy(*, bundle, splits, model_name, model_options=None, config=ToyConfig(), seed=0, device="cpu", progress=False):
    # Full-batch gradient descent on the members: deterministic given the seeded initialisation.
    started = time.monotonic()
    torch.manual_seed(derive_seed(seed, "toy-init"))
    model = build_model(model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes, **(model_options or {}))
    members = bundle.all().subset(splits.members)
    opt = torch.optim.SGD(model.parameters(), lr=config.toy_learning_rate)
    for _ in range(config.num_toy_steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(members.features), members.labels).backward()
        opt.step()
    model.eval()
    record = build_record(
        defense="toy",
        model=model,
        bundle=bundle,
        splits=splits,
        model_name=model_name,
        model_options=dict(model_options or {}),
        config=config,
        claim=NonPrivateClaim(),
        seed=seed,
        device=torch.device(device),
        started=started,
    )
    return record, model


TOY = DefenseSpec(name="toy", summary="full-batch gradient descent (a test's own defense)", config_type=ToyConfig, train=train_toy, claim_kind="nonprivate")


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(DEFENSES, "toy", TOY)
    return TOY


def test_toy_defense_in_train_help(toy, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "toy" in out and "--toy-steps" in out and "--toy-learning-rate" in out and "a test's own defense" in out


@pytest.mark.e2e
def test_toy_defense_trains_end_to_end(toy, capsys, tmp_path):
    argv = ["train", "--defense", "toy", "--model", "digits-mlp", "--toy-steps", "30", "--out", str(tmp_path), "--json", "--quiet"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["defense"] == "toy" and data["metrics"]["train_accuracy"] > 0.5
    assert (Path(data["record_path"]) / "record.json").is_file()
    assert json.loads((Path(data["record_path"]) / "record.json").read_text())["config"]["num_toy_steps"] == 30
    # a flag of another defense is refused for this one, naming both
    assert main(["train", "--defense", "toy", "--model", "digits-mlp", "--clip-norm", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--clip-norm" in err and "toy" in err


def test_toy_defense_passes_the_contract_suite(toy, monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "defenses"))  # importlib mode keeps tests/ off sys.path
    from test_defense_contract import check_defense_contract

    check_defense_contract(toy, tmp_path)
