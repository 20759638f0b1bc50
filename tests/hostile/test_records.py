"""Issue 11, findings 6, 8 and 9: records that cannot lie, and training that diverges leaves none.

Every test here works on a copy of one tiny trained run (``trained_run``, see conftest.py),
damages it as a hostile user could, and runs the real command line on it: the command must
exit 2 with one line naming the file and the field (and value), and print no traceback.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from dpaudit.privacy.claims import dpsgd_claim

#: ``dpaudit train`` arguments that find the ``trained_run`` fixture's record again (see conftest.py).
TRAIN_ARGS = (
    "--defense",
    "nonprivate",
    "--model",
    "digits-mlp",
    "--dataset",
    "digits",
    "--epochs",
    "1",
    "--seed",
    "0",
    "--quiet",
)


def one_line_error(code: int, err: str, *needles: str) -> str:
    """Exit 2, one error line, no traceback; every needle in that line."""
    assert code == 2, err
    assert "Traceback" not in err and "internal error" not in err, err
    lines = [line for line in err.replace("\r", "\n").splitlines() if "error" in line]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def run(trained_run: Path, tmp_path: Path) -> Path:
    """A private copy of the trained run."""
    return Path(shutil.copytree(trained_run, tmp_path / "run"))


def record_dir(run: Path) -> Path:
    (only,) = sorted((run / "records").iterdir())
    return only


def edit_record(run: Path, change: Any) -> Path:
    """Applies ``change(data)`` (returning the new JSON value) to the run's record.json."""
    path = record_dir(run) / "record.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps(change(data)))
    return path


def _set(data: dict, dotted: str, value: Any) -> dict:
    node = data
    keys = dotted.split(".")
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = value
    return data


def dpsgd_claim_dict() -> dict:
    return dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.1, num_steps=100).to_dict()


# ----------------------------------------------------------------------------- 1: the claim


# (field inside the claim, JSON value, what the message shows). NaN goes in as the string
# the suite writes for it ("nan"), which the reader turns back into a float.
TAMPERED_CLAIMS = [
    ("event.event.event.noise_multiplier", -1.1, "-1.1"),
    ("event.event.event.noise_multiplier", 0, "0"),
    ("event.event.event.noise_multiplier", "nan", "nan"),
    ("event.event.sampling_probability", 2, "2"),
    ("event.event.sampling_probability", 0, "0"),
    ("event.count", -100, "-100"),
    ("event.count", 2.5, "2.5"),
]


@pytest.mark.parametrize("field, value, shown", TAMPERED_CLAIMS)
def test_attack_on_a_record_with_a_tampered_claim_exits_2_naming_file_and_field(cli, run, field, value, shown):
    path = edit_record(run, lambda d: {**d, "claim": _set(dpsgd_claim_dict(), field, value)})
    code, _, err = cli.run(
        "attack", "membership", "--target", str(run), "--attack", "loss", "--out", str(run), "--quiet"
    )
    one_line_error(code, err, str(path), field.rsplit(".", 1)[1], shown)
    assert not (run / "attacks" / "membership" / record_dir(run).name).exists()


@pytest.mark.parametrize("field, value", [("config.delta", 2), ("metrics.delta", 0), ("config.delta", "nan")])
def test_a_record_stating_an_invalid_delta_is_refused(cli, run, field, value):
    path = edit_record(run, lambda d: {**_set(d, field, value), "claim": dpsgd_claim_dict()})
    code, _, err = cli.run(
        "attack", "membership", "--target", str(run), "--attack", "loss", "--out", str(run), "--quiet"
    )
    one_line_error(code, err, str(path), field)


@pytest.mark.parametrize(
    "field, value",
    [("robustness_delta", 2), ("robustness_epsilon", -1), ("attack_norm_bound", "nan"), ("noise_per_sensitivity", 0)],
)
def test_certify_on_tampered_certification_parameters_exits_2_naming_them(cli, run, tmp_path, field, value):
    spec = {
        "mechanism": "extended",
        "max_epsilon": None,
        "attack_norm": "l2",
        "robustness_epsilon": 4.0,
        "robustness_delta": 0.05,
        "attack_norm_bound": 0.2,
        "noise_per_sensitivity": 1.0,
        "redistribute": False,
    }
    path = edit_record(run, lambda d: _set(d, "config.certification", {**spec, field: value}))
    code, _, err = cli.run("certify", "--target", str(run), "--out", str(tmp_path / "out"), "--quiet")
    one_line_error(code, err, str(path), f"config.certification: {field}")


@pytest.mark.extended
def test_report_on_a_run_whose_record_claim_was_tampered_exits_2(cli, reported):
    path = edit_record(
        reported, lambda d: {**d, "claim": _set(dpsgd_claim_dict(), "event.event.event.noise_multiplier", -1.1)}
    )
    code, _, err = cli.run("report", str(reported))
    one_line_error(code, err, str(path), "noise_multiplier", "-1.1")


def test_train_refuses_to_reuse_a_record_with_a_tampered_claim(cli, run):
    path = edit_record(run, lambda d: {**d, "claim": _set(dpsgd_claim_dict(), "event.event.sampling_probability", 2)})
    code, _, err = cli.run("train", *TRAIN_ARGS, "--out", str(run))
    one_line_error(code, err, str(path), "sampling_probability", "2")


@pytest.mark.extended
def test_an_untampered_run_still_works(cli, run):
    # The same record, loaded through the same checks, trains nothing and attacks fine.
    code, out, err = cli.run("train", *TRAIN_ARGS, "--out", str(run))
    assert code == 0, err
    code, out, err = cli.run(
        "attack", "membership", "--target", str(run), "--attack", "loss", "--out", str(run), "--quiet"
    )
    assert code == 0, err


# ----------------------------------------------------------------------------- 2: the weights' digest


def _replace_weights_keeping_the_model_id(run: Path) -> Path:
    """Other weights of the same shape, with this record's model id in the metadata."""
    from safetensors.torch import load_file, save_file

    weights = record_dir(run) / "model.safetensors"
    state = load_file(str(weights))
    first = next(iter(state))
    state[first] = state[first] + 1.0
    save_file(state, str(weights), metadata={"model_id": record_dir(run).name})
    return weights


def test_record_stores_the_digest_of_its_weights(run):
    import hashlib

    data = json.loads((record_dir(run) / "record.json").read_text())
    assert data["weights_sha256"] == hashlib.sha256((record_dir(run) / "model.safetensors").read_bytes()).hexdigest()


@pytest.mark.parametrize("verb", ["attack", "train"])
def test_weights_that_differ_from_the_record_are_refused(cli, run, verb):
    weights = _replace_weights_keeping_the_model_id(run)
    if verb == "attack":
        code, _, err = cli.run(
            "attack", "membership", "--target", str(run), "--attack", "loss", "--out", str(run), "--quiet"
        )
    else:
        code, _, err = cli.run("train", *TRAIN_ARGS, "--out", str(run))
    line = one_line_error(code, err, str(weights), "does not match its record", "sha256")
    assert "retrain or restore it" in line


def test_a_tampered_digest_field_is_refused(cli, run):
    path = edit_record(run, lambda d: {**d, "weights_sha256": "not-a-digest"})
    code, _, err = cli.run(
        "attack", "membership", "--target", str(run), "--attack", "loss", "--out", str(run), "--quiet"
    )
    one_line_error(code, err, str(path), "weights_sha256", "not-a-digest")


def test_a_record_saved_before_digests_is_accepted_on_its_model_id(run):
    """Decision: a record without weights_sha256 (older runs) loads; the model-id check still applies."""
    from dpaudit.weights import load_model

    edit_record(run, lambda d: {k: x for k, x in d.items() if k != "weights_sha256"})
    load_model(record_dir(run))  # no error
    _replace_weights_keeping_the_model_id(run)
    load_model(record_dir(run))  # nothing to compare against: accepted, as before digests existed


def test_weights_file_replaced_by_a_directory_is_named(cli, run):
    weights = record_dir(run) / "model.safetensors"
    weights.unlink()
    weights.mkdir()
    code, _, err = cli.run(
        "attack", "membership", "--target", str(run), "--attack", "loss", "--out", str(run), "--quiet"
    )
    one_line_error(code, err, str(weights))


# ----------------------------------------------------------------------------- 3: the record's shape


MALFORMED = {
    "a JSON list": lambda d: [d],
    "a JSON string": lambda d: "record",
    "no membership": lambda d: {k: x for k, x in d.items() if k != "membership"},
    "no claim": lambda d: {k: x for k, x in d.items() if k != "claim"},
    "claim is a number": lambda d: {**d, "claim": 3},
    "membership is a list": lambda d: {**d, "membership": [1, 2]},
    "member ids are strings": lambda d: _set(d, "membership.members", ["a", "b"]),
    "input_shape is a string": lambda d: {**d, "input_shape": "8x8"},
    "seed is a string": lambda d: {**d, "seed": "0"},
    "config is a list": lambda d: {**d, "config": [1]},
    "model_name is a number": lambda d: {**d, "model_name": 7},
}


@pytest.mark.parametrize("damage", sorted(MALFORMED))
def test_a_malformed_record_json_exits_2_naming_the_file(cli, run, damage):
    path = edit_record(run, MALFORMED[damage])
    code, _, err = cli.run(
        "attack", "membership", "--target", str(run), "--attack", "loss", "--out", str(run), "--quiet"
    )
    one_line_error(code, err, str(path))


@pytest.mark.extended
def test_report_on_a_record_json_that_is_a_list_exits_2(cli, reported):
    path = edit_record(reported, lambda d: [d])
    code, _, err = cli.run("report", str(reported))
    one_line_error(code, err, str(path), "JSON object")


def test_a_truncated_record_json_exits_2_naming_it(cli, run):
    path = record_dir(run) / "record.json"
    path.write_bytes(path.read_bytes()[:100])
    code, _, err = cli.run(
        "attack", "membership", "--target", str(run), "--attack", "loss", "--out", str(run), "--quiet"
    )
    one_line_error(code, err, str(path))


# ----------------------------------------------------------------------------- 4: absurd model sizes


def _model_options_refused(cli, run: Path, path: Path, *needles: str) -> None:
    """The command line refuses the edited options by the record's id (its digest hashes them),
    before loading anything; the weights loader, reached by a record whose id was recomputed,
    refuses them by their size before allocating."""
    from dpaudit.weights import load_model

    code, _, err = cli.run(
        "attack", "membership", "--target", str(run), "--attack", "loss", "--out", str(run), "--quiet"
    )
    one_line_error(code, err, str(path), "model_id=")
    with pytest.raises(ValueError) as exc:
        load_model(record_dir(run))
    for needle in needles:
        assert needle in str(exc.value), str(exc.value)


def test_model_options_asking_for_terabytes_are_refused_before_allocating(cli, run):
    # hidden = 10**10 on 8×8 digits: 7.5e11 parameters, 3 TB of float32 (the issue saw 2.5 TB asked for).
    path = edit_record(run, lambda d: {**d, "model_options": {"hidden": 10**10}})
    _model_options_refused(
        cli, run, path, "'hidden': 10000000000", "7.5e+11 parameters", "3 TB", "MAX_MODEL_PARAMETERS"
    )


def test_model_options_beyond_a_64_bit_count_are_refused(cli, run):
    path = edit_record(run, lambda d: {**d, "model_options": {"hidden": 10**30}})
    _model_options_refused(cli, run, path, "hidden=1000000000000000000000000000000", "MAX_MODEL_PARAMETERS")


def test_model_options_just_over_the_limit_name_the_estimated_size(cli, run):
    # 2**25 hidden units: each below the limit alone, 2.5e9 parameters in all.
    path = edit_record(run, lambda d: {**d, "model_options": {"hidden": 2**25}})
    _model_options_refused(cli, run, path, "'hidden': 33554432", "2.52e+09 parameters", "GB")


# ----------------------------------------------------------------------------- 5: corrupt run-directory files


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_report_with_a_truncated_npz_exits_2_naming_it(cli, reported):
    (npz,) = sorted((reported / "attacks" / "membership").glob("*/loss.npz"))
    _truncate(npz)
    code, _, err = cli.run("report", str(reported))
    one_line_error(code, err, str(npz), "corrupt", "delete it to recompute")


def test_report_with_a_npz_that_is_not_an_archive_exits_2_naming_it(cli, reported):
    (npz,) = sorted((reported / "attacks" / "membership").glob("*/loss.npz"))
    npz.write_bytes(b"\x80\x04not a zip at all")
    code, _, err = cli.run("report", str(reported))
    one_line_error(code, err, str(npz), "corrupt")


def test_report_with_a_truncated_result_json_exits_2_naming_it(cli, reported):
    (result,) = sorted((reported / "attacks" / "membership").glob("*/loss.json"))
    _truncate(result)
    code, _, err = cli.run("report", str(reported))
    one_line_error(code, err, str(result))


# ----------------------------------------------------------------------------- 6: divergence


@pytest.mark.parametrize("defense, lr", [("nonprivate", "1e10"), ("dpsgd", "1e30")])
def test_training_that_diverges_exits_2_and_writes_no_record(cli, tmp_path, defense, lr):
    out = tmp_path / "out"
    # A ReLU net: digits-mlp's tanh units saturate, so its loss stays finite for many steps.
    code, _, err = cli.run(
        "train",
        "--defense",
        defense,
        "--model",
        "tabular-mlp",
        "--epochs",
        "1",
        "--learning-rate",
        lr,
        "--out",
        str(out),
        "--quiet",
    )
    line = one_line_error(code, err, "training diverged", "at step", "--learning-rate")
    assert ("nan" in line) or ("inf" in line)
    assert not list(out.glob("records/*/record.json")) and not list(out.glob("records/*/model.safetensors"))
    assert math.isfinite(float(lr))
