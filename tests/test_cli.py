"""CLI contract: JSON keys, exit statuses, one-line errors for every bad argument."""

import json
import subprocess
import sys

import pytest
import torch

from dpaudit.app.cli import main
from dpaudit.results.record import load_record
from dpaudit.weights import load_model


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_exit(capsys, *argv):
    """For argparse errors, which exit via SystemExit."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


EPS = ("epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "4", "--steps", "10000", "--delta", "1e-5")


def test_epsilon_json_reproduces_reference_vectors(capsys):
    code, out, _ = run(capsys, *EPS, "--json")
    assert code == 0
    data = json.loads(out)
    assert set(data) == {"moments", "rdp", "pld", "strong"}
    assert data["moments"] == pytest.approx(1.2586, abs=5e-5)
    assert data["rdp"] == pytest.approx(1.0355, abs=5e-5)
    assert data["pld"] == pytest.approx(0.947, rel=0.01)
    assert data["strong"] == pytest.approx(9.35, rel=0.01)


def test_epsilon_text_output(capsys):
    code, out, _ = run(capsys, *EPS, "--accountant", "moments")
    assert code == 0 and "1.2586" in out and "pld" not in out


def test_epsilon_solves_sigma_without_overshooting(capsys):
    code, out, _ = run(capsys, "epsilon", "--sampling-rate", "0.01", "--steps", "1000", "--delta", "1e-5", "--target-epsilon", "2", "--accountant", "rdp", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["solve"] == "noise_multiplier" and data["num_steps"] == 1000
    assert data["epsilon"]["rdp"] <= 2.0
    assert data["epsilon"]["rdp"] > 1.99


def test_epsilon_solves_steps(capsys):
    code, out, _ = run(
        capsys, "epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "4", "--delta", "1e-5", "--target-epsilon", "1.2586", "--solve", "steps", "--accountant", "moments", "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["epsilon"]["moments"] <= 1.2586
    assert 9_000 < data["num_steps"] <= 10_000


@pytest.mark.parametrize(
    "argv, needle",
    [
        (("--delta", "0"), "--delta"),
        (("--delta", "1"), "--delta"),
        (("--delta", "abc"), "'abc'"),
        (("--sampling-rate", "0"), "--sampling-rate"),
        (("--sampling-rate", "1.5"), "1.5"),
        (("--noise-multiplier", "0"), "--noise-multiplier"),
        (("--noise-multiplier", "-1"), "-1"),
        (("--noise-multiplier", "nan"), "nan"),
        (("--steps", "-5"), "--steps"),
        (("--steps", "0"), "--steps"),
        (("--steps", "2.5"), "'2.5'"),
        (("--accountant", "magic"), "magic"),
        (("--target-epsilon", "-1"), "--target-epsilon"),
        (("--solve", "delta"), "delta"),
    ],
)
def test_epsilon_bad_input_exits_2_with_one_line(capsys, argv, needle):
    base = dict(zip(EPS[1::2], EPS[2::2]))
    base.update(dict(zip(argv[0::2], argv[1::2])))
    args = ["epsilon"] + [x for kv in base.items() for x in kv]
    code, out, err = run_exit(capsys, *args)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (("epsilon", "--sampling-rate", "0.1", "--delta", "1e-5"), "--noise-multiplier"),
        (("epsilon", "--sampling-rate", "0.1", "--delta", "1e-5", "--noise-multiplier", "1", "--steps", "10", "--target-epsilon", "1"), "conflicts"),
        (("epsilon", "--sampling-rate", "0.1", "--delta", "1e-5", "--target-epsilon", "1", "--solve", "steps"), "--noise-multiplier"),
        (("epsilon", "--sampling-rate", "1", "--delta", "1e-5", "--noise-multiplier", "0.1", "--target-epsilon", "0.01", "--solve", "steps", "--accountant", "rdp"), "single step"),
    ],
)
def test_epsilon_inconsistent_arguments_exit_2(capsys, argv, needle):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1


def test_no_command_and_help(capsys):
    code, _, err = run_exit(capsys)
    assert code == 2 and "COMMAND" in err
    for verb in ("epsilon", "datasets", "train"):
        code, out, _ = run_exit(capsys, verb, "--help")
        assert code == 0 and "--json" in out


def test_datasets_lists_the_shared_root(capsys, shared_data):
    code, out, _ = run(capsys, "datasets", "--data-root", str(shared_data), "--json")
    assert code == 0
    data = json.loads(out)["datasets"]
    for name in ("digits", "mnist", "fashion-mnist", "faces", "adult"):
        assert data[name]["available"], name
    assert (data["mnist"]["num_train"], data["mnist"]["num_test"]) == (60_000, 10_000)
    assert (data["fashion-mnist"]["num_train"], data["fashion-mnist"]["num_test"]) == (60_000, 10_000)
    assert (data["digits"]["num_train"], data["digits"]["num_test"]) == (1437, 360)
    assert data["faces"]["num_train"] + data["faces"]["num_test"] == 400
    assert data["faces"]["num_classes"] == 40
    assert data["adult"]["num_classes"] == 2


def test_datasets_missing_root_says_so(capsys, tmp_path):
    code, out, _ = run(capsys, "datasets", "--data-root", str(tmp_path), "--json")
    data = json.loads(out)["datasets"]
    assert code == 0 and data["digits"]["available"] and not data["mnist"]["available"]
    assert str(tmp_path) in data["mnist"]["detail"]


TRAIN = ("train", "--defense", "nonprivate", "--dataset", "digits", "--model", "digits-mlp", "--epochs", "20", "--quiet")


def test_train_digits_writes_a_record_that_round_trips(capsys, tmp_path):
    code, out, err = run(capsys, *TRAIN, "--out", str(tmp_path), "--json")
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
    code, out2, err2 = run(capsys, *TRAIN, "--out", str(tmp_path), "--json")
    assert code == 0 and "reusing" in err2 and json.loads(out2)["model_id"] == data["model_id"]


def test_train_is_deterministic_under_a_seed(capsys, tmp_path):
    outs = []
    for sub in ("a", "b"):
        code, out, _ = run(capsys, *TRAIN, "--seed", "3", "--out", str(tmp_path / sub), "--json")
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
def test_train_bad_input_exits_2(capsys, tmp_path, argv, needle):
    base = dict(zip(TRAIN[1::2], TRAIN[2::2]))
    base.pop("--quiet", None)
    base.update(dict(zip(argv[0::2], argv[1::2])))
    args = ["train", *[x for kv in base.items() for x in kv], "--out", str(tmp_path)]
    code, out, err = run_exit(capsys, *args)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1


def test_train_runtime_errors_exit_2_with_one_line(capsys, tmp_path):
    code, out, err = run(capsys, "train", "--defense", "nonprivate", "--dataset", "mnist", "--model", "digits-mlp", "--data-root", str(tmp_path), "--out", str(tmp_path / "r"))
    assert code == 2 and str(tmp_path) in err and len(err.strip().splitlines()) == 1
    code, out, err = run(capsys, "train", "--defense", "nonprivate", "--dataset", "digits", "--model", "hgm-cnn", "--out", str(tmp_path / "r"), "--device", "tpu")
    assert code == 2 and "tpu" in err
    (tmp_path / "afile").write_text("")
    code, out, err = run(capsys, *TRAIN, "--out", str(tmp_path / "afile"))
    assert code == 2 and "afile" in err


def test_console_script_runs_as_a_process():
    proc = subprocess.run([sys.executable, "-m", "dpaudit.app.cli", "epsilon", "--sampling-rate", "0.5", "--noise-multiplier", "1", "--steps", "1", "--delta", "2"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--delta" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow  # a reproduction (5 epochs of full MNIST, ~1 min on 2 cores): opt in with -m slow
def test_baseline_mnist_reaches_97_percent(capsys, tmp_path, shared_data):
    code, out, err = run(
        capsys, "train", "--defense", "nonprivate", "--dataset", "mnist", "--model", "abadi-mnist", "--epochs", "5", "--data-root", str(shared_data), "--out", str(tmp_path), "--quiet", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["metrics"]["test_accuracy"] >= 0.97


AGM = [
    ((0.1, 1e-5), 30.749566),
    ((0.5, 1e-5), 7.031827),
    ((1, 1e-5), 3.730632),
    ((2, 1e-5), 1.993812),
    ((4, 1e-5), 1.081162),
    ((8, 1e-5), 0.600229),
    ((1, 1e-6), 4.224679),
    ((1, 0.05), 1.332778),
    ((4, 0.05), 0.545137),
    ((0.5, 0.3), 0.865869),
]
EGM = [((1, 1e-5), 4.854241), ((4, 1e-5), 1.285080), ((1, 0.05), 2.549790), ((4, 0.05), 0.754169)]


@pytest.mark.parametrize("target, sigma", AGM)
def test_epsilon_gaussian_analytic_vectors(capsys, target, sigma):
    eps, delta = target
    code, out, _ = run(capsys, "epsilon", "--mechanism", "gaussian", "--target-epsilon", str(eps), "--delta", str(delta), "--calibration", "analytic", "--json")
    assert code == 0 and round(json.loads(out)["sigma"]["analytic"], 6) == sigma


@pytest.mark.parametrize("target, sigma", EGM)
def test_epsilon_gaussian_extended_vectors(capsys, target, sigma):
    eps, delta = target
    code, out, _ = run(capsys, "epsilon", "--mechanism", "gaussian", "--target-epsilon", str(eps), "--delta", str(delta), "--json")
    data = json.loads(out)["sigma"]
    assert code == 0 and round(data["extended"], 6) == sigma
    assert (data["classical"] is None) == (eps > 1)


def test_epsilon_gaussian_exact_epsilon_inverts_calibration(capsys):
    code, out, _ = run(capsys, "epsilon", "--mechanism", "gaussian", "--noise-multiplier", "3.730632", "--delta", "1e-5", "--json")
    assert code == 0 and json.loads(out)["epsilon"] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (("--target-epsilon", "4", "--delta", "1e-5", "--calibration", "classical"), "<= 1"),
        (("--sampling-rate", "0.1", "--target-epsilon", "1", "--delta", "1e-5"), "dpsgd only"),
        (("--delta", "1e-5"), "--noise-multiplier or --target-epsilon"),
        (("--target-epsilon", "1", "--delta", "0.6", "--calibration", "extended"), "0.484"),
        (("--noise-multiplier", "1", "--target-epsilon", "1", "--delta", "1e-5"), "conflicts"),
    ],
)
def test_epsilon_gaussian_bad_input(capsys, argv, needle):
    code, out, err = run(capsys, "epsilon", "--mechanism", "gaussian", *argv)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1


def test_epsilon_gaussian_bad_sensitivity(capsys):
    code, _, err = run_exit(capsys, "epsilon", "--mechanism", "gaussian", "--noise-multiplier", "1", "--delta", "1e-5", "--sensitivity", "0")
    assert code == 2 and "--sensitivity" in err


def test_epsilon_dpsgd_needs_sampling_rate(capsys):
    code, _, err = run(capsys, "epsilon", "--noise-multiplier", "1", "--steps", "3", "--delta", "1e-5")
    assert code == 2 and "--sampling-rate" in err


DPSGD = ("train", "--defense", "dpsgd", "--dataset", "digits", "--model", "digits-mlp", "--clip-norm", "1", "--lot-size", "64", "--learning-rate", "0.5", "--quiet")


def test_train_dpsgd_budget_mode_from_the_cli(capsys, tmp_path):
    code, out, err = run(capsys, *DPSGD, "--noise-multiplier", "2", "--target-epsilon", "1", "--accountant", "rdp", "--out", str(tmp_path), "--json")
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
def test_train_dpsgd_bad_flags(capsys, tmp_path, argv, needle):
    code, out, err = run_exit(capsys, *DPSGD, *argv, "--out", str(tmp_path))
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1


def test_dpsgd_flags_refused_for_nonprivate(capsys, tmp_path):
    code, out, err = run(capsys, *TRAIN, "--clip-norm", "1", "--out", str(tmp_path))
    assert code == 2 and "--clip-norm" in err and "nonprivate" in err


def test_train_dpsgd_inconsistent_pca_is_a_usage_error(capsys, tmp_path):
    code, out, err = run(capsys, *DPSGD, "--noise-multiplier", "2", "--pca-components", "10", "--out", str(tmp_path))
    assert code == 2 and "pca" in err.lower() and len(err.strip().splitlines()) == 1
