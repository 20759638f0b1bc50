"""A membership attack defined in a module of its own is found everywhere, with no edit elsewhere.

The toy attack lives in a temporary module written by this test; importing it registers it with
``MEMBERSHIP_ATTACKS.register(...)`` (as a built-in attack registers itself), and the teardown
unregisters it. Nothing else is told about it, yet it appears in ``dpaudit attack membership
--help``, runs end to end, is a valid name in a ``compare`` grid whose run scores it, renders in
``dpaudit report`` and is among the attacks the membership contract suite runs over.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from attacks.membership import MEMBERSHIP_ATTACKS, MembershipAttackSpec
from dpaudit.app.cli import main
from dpaudit.train_request import TrainRequest

MODULE = "dpaudit_toy_membership_attack"

TOY_SOURCE = '''
"""A toy membership attack: the tempered negative loss (after Yeom et al. 2018, §3.2)."""

from dataclasses import dataclass

import numpy as np
from scipy import special

from attacks.membership import MEMBERSHIP_ATTACKS, MembershipAttackSpec, MembershipContext
from dpaudit import _validate as v
from dpaudit.options import option
from dpaudit.results import MembershipResult


@dataclass(frozen=True, kw_only=True)
class ToyConfig:
    temperature: float = option(1.0, flag="--toy-temperature", help="toy: softmax temperature > 0", check=v.positive)

    def __post_init__(self) -> None:
        v.positive("temperature", self.temperature)


def run(context: MembershipContext, config: ToyConfig) -> MembershipResult:
    # Negative tempered cross-entropy of the true label: higher = member.
    z = context.query_logits().astype(np.float64) / config.temperature
    scores = z[np.arange(z.shape[0]), context.labels] - special.logsumexp(z, axis=1)
    return context.result("toy", scores, {"temperature": config.temperature})


TOY = MEMBERSHIP_ATTACKS.register(
    MembershipAttackSpec(
        name="toy", summary="tempered negative loss (after Yeom et al. 2018)", config_type=ToyConfig, run=run
    )
)
'''


def _import_toy(directory: Path) -> ModuleType:
    path = directory / f"{MODULE}.py"
    path.write_text(textwrap.dedent(TOY_SOURCE))
    spec = importlib.util.spec_from_file_location(MODULE, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MembershipAttackSpec]:
    assert "toy" not in MEMBERSHIP_ATTACKS
    module = _import_toy(tmp_path_factory.mktemp("toy-module"))
    try:
        yield module.TOY
    finally:
        MEMBERSHIP_ATTACKS.unregister("toy")
        sys.modules.pop(MODULE, None)
    assert "toy" not in MEMBERSHIP_ATTACKS


@pytest.fixture(scope="module")
def target_run(toy: MembershipAttackSpec, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A run directory holding one overfit digits target, and the target's id."""
    from defenses.nonprivate import NonPrivateConfig, train_nonprivate
    from dpaudit.data import load_dataset, make_splits
    from dpaudit.store import RunDir
    from dpaudit.weights import save_record

    tmp = tmp_path_factory.mktemp("toy-run")
    bundle = load_dataset("digits")
    splits = make_splits(bundle, seed=0, num_members=60, num_non_members=60)
    record, model = train_nonprivate(
        TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name="digits-mlp",
            config=NonPrivateConfig(epochs=60),
            seed=0,
            progress=False,
        )
    )
    save_record(record, model, RunDir(tmp).record_dir(record.model_id))
    return tmp, record.model_id


def test_the_registration_is_the_modules_own(toy: MembershipAttackSpec) -> None:
    assert MEMBERSHIP_ATTACKS["toy"] is toy and toy.run.__module__ == MODULE
    assert MEMBERSHIP_ATTACKS.names()[-1] == "toy"  # after every built-in attack


def test_toy_attack_in_help(toy: MembershipAttackSpec, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["attack", "membership", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "toy" in out and "--toy-temperature" in out and "tempered negative loss" in out


@pytest.mark.extended
@pytest.mark.e2e
def test_toy_attack_end_to_end_and_in_the_report(
    target_run: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from dpaudit.store import RunDir

    run_dir, model_id = target_run
    code = main(
        [
            "attack",
            "membership",
            "--target",
            str(run_dir),
            "--attack",
            "toy",
            "--toy-temperature",
            "2",
            "--out",
            str(run_dir),
            "--json",
            "--quiet",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    data = json.loads(out)
    assert set(data["attacks"]) == {"toy"} and data["attacks"]["toy"]["auc"] > 0.5
    stored = RunDir(run_dir).membership_dir(model_id) / "toy.json"
    assert stored.is_file() and json.loads(stored.read_text())["config"]["temperature"] == 2.0
    assert data["shadows"] == []  # no shadow models for an attack that names no pool

    code = main(["report", str(run_dir), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    pages = [Path(p) for p in _paths(json.loads(out))]
    membership_pages = [p for p in pages if p.suffix == ".html" and "membership" in p.name]
    assert membership_pages, pages
    assert any("toy" in p.read_text(encoding="utf-8") for p in membership_pages)


def _paths(value: object) -> list[str]:
    """Every string in ``dpaudit report --json``'s output that names an existing file."""
    if isinstance(value, str):
        return [value] if Path(value).is_file() else []
    if isinstance(value, dict):
        return [p for item in value.values() for p in _paths(item)]
    if isinstance(value, list):
        return [p for item in value for p in _paths(item)]
    return []


@pytest.mark.e2e
def test_toy_attack_in_a_compare_grid(toy: MembershipAttackSpec, tmp_path: Path) -> None:
    from dpaudit.app.runs.compare import CompareSpec, GridError, parse_grid, run_compare
    from dpaudit.store import RunDir

    data = {
        "name": "toy",
        "dataset": "digits",
        "seeds": [0],
        "defenses": [{"defense": "nonprivate", "epochs": 5}],
        "attacks": {"membership": {"attacks": ["loss", "toy"], "num_samples": 100}},
    }
    grid = parse_grid(data, source="toy.toml")
    assert grid.membership is not None and grid.membership.attacks == ("loss", "toy")
    with pytest.raises(GridError, match="unknown membership attack 'toyy'"):
        parse_grid({**data, "attacks": {"membership": {"attacks": ["toyy"]}}}, source="toy.toml")
    # In-process: the toy's module is registered in this process only.
    result = run_compare(CompareSpec(grid=grid, executor="serial", progress=False), RunDir(tmp_path / "run"))
    (row,) = result.rows
    scored = row.to_dict()["membership"]
    assert set(scored) == {"loss", "toy"} and scored["toy"]["auc"] == pytest.approx(
        scored["loss"]["auc"]
    )  # temperature 1 is the loss attack


def test_toy_attack_bad_option_is_exit_2(
    toy: MembershipAttackSpec, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(
        [
            "attack",
            "membership",
            "--target",
            str(tmp_path),
            "--attack",
            "toy",
            "--toy-temperature",
            "0",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 2 and "--toy-temperature" in capsys.readouterr().err


def test_toy_attack_is_in_the_contract_suite_and_passes_it(
    toy: MembershipAttackSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "attacks"))  # importlib mode keeps tests/ off sys.path
    from test_membership_contract import check_attack_contract, registered_attacks

    assert "toy" in registered_attacks()  # what the suite's parametrisation reads at collection
    check_attack_contract(toy)
