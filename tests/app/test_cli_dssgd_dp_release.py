"""A DSSGD record trained with ``--target-epsilon`` holds nothing computed from private data outside the mechanism
(issue 42)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from dpaudit.app.records import load_verified_record
from dpaudit.data import load_dataset

_TRAIN = [
    "train",
    "--defense",
    "dssgd",
    "--dataset",
    "digits",
    "--model",
    "digits-mlp",
    "--participants",
    "3",
    "--rounds",
    "2",
    "--target-epsilon",
    "2",
    "--quiet",
]

#: Every metric a DP DSSGD record may hold, by why it may: the auditor's evaluation of the released
#: model (as every record's), public settings, post-processing of the uploads (the mechanism's
#: output), wall time, and the membership ground truth's summary. Anything new must be placed here.
_EVALUATION = {
    "train_accuracy",
    "train_loss",
    "non_member_accuracy",
    "non_member_loss",
    "test_accuracy",
    "test_loss",
    "test_examples",  # the test set's size and the correct count behind test_accuracy (its interval)
    "test_correct",
    "chance_accuracy",
    "near_chance",
    "guess_loss",  # the test set's label entropy (as chance_accuracy reads the test set)
    "near_chance_by",
}
_PUBLIC = {
    "engine",
    "num_parameters",
    "uploads_per_turn",
    "run_rounds",
    "run_dp_epsilon",
    "download_count",
    "uploads_applied",
}
_FROM_UPLOADS = {"parameters_updated", "observed_upload_sizes_mean"}
_TIMING = {"train_seconds", "seconds_per_round"}
_GROUND_TRUTH = {"partition_sizes"}


def _digits_mlp_parameters() -> int:
    # digits-mlp: 64 -> 64 -> 10 with biases (docs/defenses/dssgd.md's test setting): 4,810.
    return 64 * 64 + 64 + 64 * 10 + 10


def test_a_target_epsilon_record_keeps_no_private_statistic(cli, tmp_path: Path) -> None:
    code, _, err = cli.run(*_TRAIN, "--out", str(tmp_path))
    assert code == 0, err
    (rdir,) = [p for p in (tmp_path / "records").glob("dssgd-*") if p.name != "dssgd-participants"]
    record = load_verified_record(rdir)
    assert record.claim.kind == "dssgd-svt"

    # The standardisation is the population's (public: neither member nor non-member), recomputed here from the ids the
    # record names.
    bundle = load_dataset("digits")
    population = record.membership.population
    assert population.size > 0 and not np.isin(population, record.membership.members).any()
    x = bundle.all().subset(population).features.numpy().astype(np.float64)
    mean, std = record.model_options["input_standardization"]
    assert math.isclose(mean, x.mean(), rel_tol=1e-5) and math.isclose(std, x.std(ddof=1), rel_tol=1e-5)
    whole = bundle.train.features.numpy().astype(
        np.float64
    )  # what the record held before: the training split's, members included
    assert not math.isclose(mean, whole.mean(), rel_tol=1e-4)

    # Every metric is accounted for, and the public ones are their closed forms.
    m = record.metrics
    assert set(m) <= _EVALUATION | _PUBLIC | _FROM_UPLOADS | _TIMING | _GROUND_TRUTH, set(m) - (
        _EVALUATION | _PUBLIC | _FROM_UPLOADS | _TIMING | _GROUND_TRUTH
    )
    n = _digits_mlp_parameters()
    c = round(0.1 * n)
    assert (m["num_parameters"], m["uploads_per_turn"], m["run_rounds"], m["uploads_applied"], m["download_count"]) == (
        n,
        c,
        2,
        3 * 2,
        n,
    )
    assert math.isclose(m["run_dp_epsilon"], 2 / (c * 2), rel_tol=1e-12)
    owners = np.asarray(record.membership.owners)
    assert list(m["partition_sizes"]) == np.bincount(owners, minlength=3).tolist()

    # The observed uploads are the sparse-vector release's output only (bounded noisy values), beside the ground truth.
    with np.load(rdir / "uploads.npz", allow_pickle=False) as up:
        assert set(up.files) == {"participant", "rounds", "sizes", "indices", "values", "member_ids", "num_parameters"}
        assert np.abs(up["values"]).max() <= record.config["bound"] and up["sizes"].max() <= c
        assert math.isclose(m["observed_upload_sizes_mean"], float(up["sizes"].mean()))
    # No participant's local model reached the server, so none is kept; nothing in the record mentions a loss of the
    # uploads.
    assert not any((tmp_path / "records" / "dssgd-participants").glob("*/participant-*"))
    assert "loss" not in json.dumps({k: v for k, v in m.items() if k not in _EVALUATION})


def test_standardize_without_public_data_is_refused_before_anything_is_written(cli, tmp_path: Path) -> None:
    out = tmp_path / "run"
    # 0.7502 of digits' 1,437 training ids are members and a quarter non-members: no population is left.
    code, stdout, err = cli.run(*_TRAIN, "--member-fraction", "0.7502", "--out", str(out))
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err
    assert "--standardize (standardize=True" in err and "target_epsilon=2.0" in err and "--no-standardize" in err
    assert not out.exists()
    code, _, err = cli.run(
        *_TRAIN, "--member-fraction", "0.7502", "--no-standardize", "--no-baselines", "--out", str(out)
    )
    assert code == 0, err
