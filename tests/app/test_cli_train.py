"""CLI contract of `dpaudit train`: records that round-trip, determinism, bad flags exit 2 with one line."""

import json

import pytest
import torch

from dpaudit.results.record import load_record
from dpaudit.weights import load_model

TRAIN = (
    "train",
    "--defense",
    "nonprivate",
    "--dataset",
    "digits",
    "--model",
    "digits-mlp",
    "--epochs",
    "20",
    "--quiet",
)


def test_train_digits_writes_a_record_that_round_trips(cli, tmp_path):
    code, out, err = cli.run(*TRAIN, "--out", str(tmp_path), "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["metrics"]["test_accuracy"] > 0.9
    assert data["epsilon"] == {} and data["epsilon_ub"] == "inf"  # no accountant applies; strict JSON: "inf" string
    record = load_record(data["record_path"])
    assert record.defense == "nonprivate" and not record.claim.is_private
    assert len(record.membership.members) == 718 and len(record.membership.non_members) > 0
    model = load_model(data["record_path"])
    from dpaudit.data import load_dataset

    test = load_dataset("digits").test
    acc = (model(test.features).argmax(1) == test.labels).float().mean().item()
    assert acc == pytest.approx(data["metrics"]["test_accuracy"], abs=1e-6)
    # a rerun finds the finished record and reuses it instead of retraining
    code, out2, err2 = cli.run(*TRAIN, "--out", str(tmp_path), "--json")
    assert code == 0 and "reusing" in err2 and json.loads(out2)["model_id"] == data["model_id"]


def test_train_is_deterministic_under_a_seed(cli, tmp_path):
    outs = []
    for sub in ("a", "b"):
        code, out, _ = cli.run(*TRAIN, "--seed", "3", "--out", str(tmp_path / sub), "--json")
        assert code == 0
        outs.append(json.loads(out))
    assert outs[0]["metrics"]["test_accuracy"] == outs[1]["metrics"]["test_accuracy"]
    a, b = (load_model(o["record_path"]) for o in outs)
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


@pytest.mark.parametrize(
    "argv, needle",
    [
        (("--defense", "magic"), "magic"),
        (("--dataset", "imagenet"), "imagenet"),
        (("--model", "resnet"), "resnet"),
        (("--epochs", "0"), "--epochs"),
        (("--batch-size", "-3"), "--batch-size"),
        (("--learning-rate", "0"), "--learning-rate"),
        (("--seed", "-1"), "--seed"),
        (("--member-fraction", "1.5"), "--member-fraction"),
        (("--delta", "2"), "--delta"),
    ],
)
def test_train_bad_input_exits_2(cli, tmp_path, argv, needle):
    base = dict(zip(TRAIN[1::2], TRAIN[2::2]))
    base.pop("--quiet", None)
    base.update(dict(zip(argv[0::2], argv[1::2])))
    args = ["train", *[x for kv in base.items() for x in kv], "--out", str(tmp_path)]
    code, out, err = cli.run_exit(*args)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1


def test_train_runtime_errors_exit_2_with_one_line(cli, tmp_path):
    code, out, err = cli.run(
        "train",
        "--defense",
        "nonprivate",
        "--dataset",
        "mnist",
        "--model",
        "digits-mlp",
        "--data-root",
        str(tmp_path),
        "--out",
        str(tmp_path / "r"),
    )
    assert code == 2 and str(tmp_path) in err and len(err.strip().splitlines()) == 1
    code, out, err = cli.run(
        "train",
        "--defense",
        "nonprivate",
        "--dataset",
        "digits",
        "--model",
        "hgm-cnn",
        "--out",
        str(tmp_path / "r"),
        "--device",
        "tpu",
    )
    assert code == 2 and "tpu" in err
    (tmp_path / "afile").write_text("")
    code, out, err = cli.run(*TRAIN, "--out", str(tmp_path / "afile"))
    assert code == 2 and "afile" in err


@pytest.mark.slow  # a reproduction (5 epochs of full MNIST, ~1 min on 2 cores): opt in with -m slow
def test_baseline_mnist_reaches_97_percent(cli, tmp_path, shared_data):
    code, out, err = cli.run(
        "train",
        "--defense",
        "nonprivate",
        "--dataset",
        "mnist",
        "--model",
        "abadi-mnist",
        "--epochs",
        "5",
        "--data-root",
        str(shared_data),
        "--out",
        str(tmp_path),
        "--quiet",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["metrics"]["test_accuracy"] >= 0.97


DPSGD = (
    "train",
    "--defense",
    "dpsgd",
    "--dataset",
    "digits",
    "--model",
    "digits-mlp",
    "--clip-norm",
    "1",
    "--lot-size",
    "64",
    "--learning-rate",
    "0.5",
    "--quiet",
)


def test_train_dpsgd_budget_mode_from_the_cli(cli, tmp_path):
    code, out, err = cli.run(
        *DPSGD,
        "--noise-multiplier",
        "2",
        "--target-epsilon",
        "1",
        "--accountant",
        "rdp",
        "--out",
        str(tmp_path),
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    record = load_record(data["record_path"])
    assert record.defense == "dpsgd" and record.claim.is_private
    assert data["epsilon"]["rdp"] <= 1.0
    assert record.metrics["num_steps"] > 1
    # the claim describes the steps actually taken
    assert f"T={record.metrics['num_steps']}" in record.claim.description


@pytest.mark.parametrize(
    "argv, needle",
    [
        (("--clip-norm", "0"), "--clip-norm"),
        (("--lot-size", "0"), "--lot-size"),
        (("--noise-multiplier", "-2"), "--noise-multiplier"),
        (("--pca", "0"), "--pca"),
        (("--pca-noise", "0"), "--pca-noise"),
        (("--accountant", "magic"), "magic"),
        (("--sampling", "shuffle"), "shuffle"),
    ],
)
def test_train_dpsgd_bad_flags(cli, tmp_path, argv, needle):
    code, out, err = cli.run_exit(*DPSGD, *argv, "--out", str(tmp_path))
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1


def test_dpsgd_flags_refused_for_nonprivate(cli, tmp_path):
    code, out, err = cli.run(*TRAIN, "--clip-norm", "1", "--out", str(tmp_path))
    assert code == 2 and "--clip-norm" in err and "nonprivate" in err


def test_train_dpsgd_inconsistent_pca_is_a_usage_error(cli, tmp_path):
    code, out, err = cli.run(*DPSGD, "--noise-multiplier", "2", "--pca-components", "10", "--out", str(tmp_path))
    assert code == 2 and "pca" in err.lower() and len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- budget mode (issue 30, item 1)
BUDGET = (
    "train",
    "--defense",
    "dpsgd",
    "--dataset",
    "digits",
    "--model",
    "digits-mlp",
    "--clip-norm",
    "1",
    "--lot-size",
    "64",
    "--learning-rate",
    "0.5",
    "--target-epsilon",
    "2",
    "--delta",
    "1e-5",
)
RDP = (
    "--accountant",
    "rdp",
)  # fast to calibrate (under PLD, the run: sigma = 1.1 reaches epsilon = 2 after 8 steps)


@pytest.mark.extended
def test_target_epsilon_with_epochs_calibrates_sigma_for_exactly_those_epochs(cli, tmp_path):
    # Once σ defaulted to 1.1, so the target became a step budget: 8 steps, --epochs ignored.
    code, out, err = cli.run(*BUDGET, *RDP, "--epochs", "2", "--out", str(tmp_path), "--json")
    assert code == 0, err
    m = json.loads(out)["metrics"]
    assert m["num_steps"] == 22  # 2 epochs of round(718 / 64) = 11 steps
    assert m["noise_multiplier"] > 1.1 and m["epsilon"] <= 2.0
    assert f"sigma = {m['noise_multiplier']:.4g} calibrated so that 2 epochs (22 steps) spend epsilon = 2" in err


@pytest.mark.extended
def test_target_epsilon_with_an_explicit_sigma_says_how_many_steps_it_allows(cli, tmp_path):
    code, out, err = cli.run(*BUDGET, *RDP, "--noise-multiplier", "1.1", "--out", str(tmp_path), "--json")
    assert code == 0, err
    assert json.loads(out)["metrics"]["num_steps"] == 2
    assert "sigma = 1.1 reaches epsilon = 2 after 2 steps (0.178 epochs); training stops there" in err


def test_target_epsilon_sigma_and_epochs_beyond_the_budget_are_refused(cli, tmp_path):
    code, out, err = cli.run(*BUDGET, *RDP, "--noise-multiplier", "1.1", "--epochs", "30", "--out", str(tmp_path))
    assert code == 2 and out == "" and not (tmp_path / "records").exists()  # refused before anything is written
    assert len(err.strip().splitlines()) == 1 and "epochs=30 needs 330 steps" in err and "after 2 steps" in err
    # within the budget, the epochs are trained exactly
    code, out, err = cli.run(
        *BUDGET, *RDP, "--noise-multiplier", "4", "--epochs", "1", "--out", str(tmp_path), "--json"
    )
    assert code == 0, err
    assert (
        json.loads(out)["metrics"]["num_steps"] == 11
        and "sigma = 4 and 1 epochs (11 steps) stay within epsilon = 2" in err
    )


@pytest.mark.extended
@pytest.mark.parametrize(
    "keys",
    [
        {"target_epsilon": 2.0, "epochs": 3.0},
        {"target_epsilon": 2.0},
        {"target_epsilon": 2.0, "noise_multiplier": 4.0, "epochs": 1.0},
        {"epochs": 2.0},
    ],
)
def test_grid_and_cli_plan_the_same_run_for_the_same_keys(keys):
    from defenses import DEFENSES
    from defenses.dpsgd.plan import plan_dpsgd
    from dpaudit.app.cli import build_parser
    from dpaudit.app.runs.compare import parse_grid
    from dpaudit.app.runs.train import default_config
    from dpaudit.options import options_from_args

    common = {"lot_size": 64, "clip_norm": 1.0, "accountant": "rdp"}
    setting = parse_grid({"dataset": "digits", "defenses": [{"defense": "dpsgd", **common, **keys}]}).settings[-1]
    grid_config = default_config("dpsgd", **setting.parameters)
    argv = ["train", "--defense", "dpsgd", "--model", "digits-mlp", "--out", "unused"]
    for k, val in {**common, **keys}.items():
        argv += ["--" + k.replace("_", "-"), str(val)]
    args = build_parser().parse_args(argv)
    cli_config = DEFENSES["dpsgd"].config_type(
        **options_from_args(args, DEFENSES["dpsgd"].config_type, args.defense_flags, owner="dpsgd")
    )
    assert cli_config == grid_config
    assert plan_dpsgd(cli_config, num_members=718) == plan_dpsgd(grid_config, num_members=718)
