"""A membership attack defined inside this test appears in the CLI help, runs end to end and passes the contract suite.

No file outside this test is changed to add it: registering a :class:`MembershipAttackSpec` in
:data:`attacks.membership.MEMBERSHIP_ATTACKS` is all the CLI, the run and the contract suite read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from scipy import special

from attacks import membership as mia
from dpaudit import _validate as v
from dpaudit.app.cli import main
from dpaudit.options import option


@dataclass(frozen=True, kw_only=True)
class ToyConfig:
    temperature: float = option(1.0, flag="--toy-temperature", help="toy: softmax temperature > 0", check=v.positive)

    def __post_init__(self) -> None:
        v.positive("temperature", self.temperature)


def _toy_run(context: mia.MembershipContext, config: ToyConfig) -> mia.MembershipResult:
    # Negative tempered cross-entropy of the true label: higher = member (Yeom et al. 2018, §3.2).
    z = context.query_logits().astype(np.float64) / config.temperature
    scores = z[np.arange(z.shape[0]), context.labels] - special.logsumexp(z, axis=1)
    return context.result("toy", scores, {"temperature": config.temperature})


TOY = mia.MembershipAttackSpec(name="toy", summary="tempered negative loss (after Yeom et al. 2018)", config_type=ToyConfig, run=_toy_run)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(mia.MEMBERSHIP_ATTACKS, "toy", TOY)
    return TOY


def test_toy_attack_in_help(toy, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["attack", "membership", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "toy" in out and "--toy-temperature" in out and "tempered negative loss" in out


@pytest.mark.e2e
def test_toy_attack_end_to_end(toy, capsys, tmp_path):
    from defenses.nonprivate import NonPrivateConfig, train_nonprivate
    from dpaudit.data import load_dataset, make_splits
    from dpaudit.store import RunDir
    from dpaudit.weights import save_record

    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0, num_members=60, num_non_members=60)
    record, model = train_nonprivate(bundle=bundle, splits=splits, model_name="digits-mlp", config=NonPrivateConfig(epochs=60), seed=0, progress=False)
    run = RunDir(tmp_path)
    save_record(record, model, run.record_dir(record.model_id))
    code = main(["attack", "membership", "--target", str(tmp_path), "--attack", "toy", "--toy-temperature", "2", "--out", str(tmp_path), "--json", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert set(data["attacks"]) == {"toy"} and data["attacks"]["toy"]["auc"] > 0.5
    stored = run.membership_dir(record.model_id) / "toy.json"
    assert stored.is_file() and json.loads(stored.read_text())["config"]["temperature"] == 2.0
    assert data["shadows"] == []  # no shadow models for an attack that names no pool


def test_toy_attack_bad_option_is_exit_2(toy, capsys, tmp_path):
    code = main(["attack", "membership", "--target", str(tmp_path), "--attack", "toy", "--toy-temperature", "0", "--out", str(tmp_path)])
    assert code == 2 and "--toy-temperature" in capsys.readouterr().err


def test_toy_attack_passes_the_contract_suite(toy, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "attacks"))  # importlib mode keeps tests/ off sys.path
    from test_membership_contract import check_attack_contract

    check_attack_contract(toy)
