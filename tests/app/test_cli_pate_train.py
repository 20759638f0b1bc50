"""``dpaudit train --defense pate``: the student's record, the saved votes, the teacher cache, attacks on it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dpaudit.results.record import load_record
from dpaudit.store import load_npz, read_json

# Eight teachers on digits: a threshold of 6 with σ1 = 2 answers most of the (mostly unanimous) queries.
_TRAIN = [
    "train", "--defense", "pate", "--dataset", "digits", "--model", "digits-mlp", "--teachers", "8",
    "--threshold", "6", "--threshold-sigma", "2", "--sigma", "1", "--queries", "120", "--student-epochs", "20",
    "--executor", "serial", "--quiet", "--json",
]  # fmt: skip


@pytest.fixture(scope="module")
def pate_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    from dpaudit.app.cli import main

    out = tmp_path_factory.mktemp("pate") / "run"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main([*_TRAIN, "--out", str(out)]) == 0
    return out, json.loads(buf.getvalue())


@pytest.mark.extended
def test_the_student_record_carries_the_pate_claim_and_the_private_set(pate_run) -> None:
    out, payload = pate_run
    assert payload["claim"]["kind"] == "pate" and payload["data_dependent"] is True and payload["sanitised"] is False
    rdir = Path(payload["record_path"])
    record = load_record(rdir)
    # The partitions and teachers are private: under the record's private/, not in its public pate.json.
    meta = read_json(rdir / "private" / "pate.json")
    public = read_json(rdir / "pate.json")
    assert "partitions" not in public["teachers"] and public["teachers"]["num_teachers"] == 8
    assert (
        record.metrics["aggregator_noise"] == "operating-system entropy (private)"
        and "seed" not in public["aggregation"]
    )
    partitions = [np.asarray(p) for p in meta["teachers"]["partitions"].values()]
    assert len(partitions) == 8
    # the student's members are exactly the union of the teachers' disjoint partitions
    union = np.sort(np.concatenate(partitions))
    assert np.array_equal(union, np.unique(union)) and np.array_equal(union, record.membership.members)
    assert record.metrics["num_queries"] == 120 and 0 < record.metrics["num_answered"] <= 120
    # the student was evaluated on the held-out part of the test split only
    assert record.metrics["num_eval"] + record.metrics["num_public"] == 360
    # each teacher is a record of its own, in the run's teacher cache, with its partition as members
    cache = out / "records" / "pate-teachers"
    assert (rdir / "private" / meta["teachers"]["cache"]).resolve() == cache.resolve()
    first = load_record(cache / meta["teachers"]["teacher_ids"][0])
    assert np.array_equal(first.membership.members, np.sort(partitions[0]))


@pytest.mark.extended
def test_the_saved_votes_reproduce_the_claim_through_pate_analyze(pate_run, cli, tmp_path) -> None:
    _, payload = pate_run
    rdir = Path(payload["record_path"])
    votes = np.load(rdir / "private" / "votes.npy", allow_pickle=False)
    arrays, secret = load_npz(rdir / "pate.npz"), load_npz(rdir / "private" / "pate.npz")
    assert votes.shape == (120, 10) and np.all(votes.sum(axis=1) == 8)
    assert (
        not (rdir / "votes.npy").exists() and "votes" not in arrays and "noise" not in arrays
    )  # the published side holds no votes nor noise
    assert np.array_equal(secret["votes"], votes)
    assert arrays["epsilon_curve"].shape == (120,) and np.all(np.diff(arrays["epsilon_curve"]) >= -1e-12)
    assert arrays["epsilon_curve"][-1] == pytest.approx(payload["epsilon_ub"], rel=1e-9)
    answered = arrays["answered"]
    assert int(answered.sum()) == load_record(rdir).metrics["num_answered"]
    # the released labels are the noisy argmax of the stored votes and noise
    labels = arrays["labels"]
    assert np.array_equal(labels[answered], np.argmax(votes + secret["noise"], axis=1)[answered])
    np.save(tmp_path / "answered.npy", answered)
    code, out, err = cli.run(
        "pate",
        "analyze",
        "--votes",
        str(rdir / "private" / "votes.npy"),
        "--sigma",
        "1",
        "--threshold",
        "6",
        "--threshold-sigma",
        "2",
        "--answered",
        str(tmp_path / "answered.npy"),
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["epsilon_data_dependent_realised"] == pytest.approx(payload["epsilon_ub"], rel=1e-9)


@pytest.mark.extended
def test_a_rerun_reuses_the_student_and_another_aggregator_reuses_the_teachers(pate_run, cli) -> None:
    out, payload = pate_run
    code, stdout, _ = cli.run(*_TRAIN, "--out", str(out))
    assert code == 0 and json.loads(stdout)["reused"] is True
    code, stdout, err = cli.run(*_TRAIN, "--aggregator", "gnmax", "--out", str(out))
    assert code == 0, err
    other = json.loads(stdout)
    assert other["model_id"] != payload["model_id"]
    assert other["metrics"]["teachers_reused"] == 8 and other["metrics"]["teachers_trained"] == 0
    assert other["claim"]["aggregator"] == "gnmax" and other["metrics"]["num_answered"] == 120


@pytest.mark.extended
def test_the_student_and_a_single_teacher_are_attacked_like_any_record(pate_run, cli) -> None:
    out, payload = pate_run
    teacher = read_json(Path(payload["record_path"]) / "private" / "pate.json")["teachers"]["teacher_ids"][0]
    for target in (payload["record_path"], str(out / "records" / "pate-teachers" / teacher)):
        code, stdout, err = cli.run(
            "attack", "membership", "--target", target, "--attack", "loss", "--out", str(out), "--quiet", "--json"
        )
        assert code == 0, err
        result = json.loads(stdout)
        assert 0 <= result["attacks"]["loss"]["auc"] <= 1 and result["attacks"]["loss"]["epsilon_lb"] >= 0


@pytest.mark.extended
@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--queries", "5000"], "queries"),
        (["--teachers", "5000"], "teachers"),
        (["--threshold", "1000"], "threshold"),
        (["--smooth-sensitivity-beta", "0.1"], "smooth_sensitivity"),
        (["--aggregator", "lnmax", "--smooth-sensitivity-beta", "0.1", "--smooth-sensitivity-sigma", "1"], "lnmax"),
    ],
)
def test_bad_pate_settings_exit_2_naming_them(cli, tmp_path, extra, needle) -> None:
    code, _, err = cli.run(*[a for a in _TRAIN if a != "--json"], *extra, "--out", str(tmp_path / "run"))
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0], err


@pytest.mark.extended
def test_the_aggregator_is_attacked_from_the_cli_and_joins_the_student_report(pate_run, cli) -> None:
    out, payload = pate_run
    code, stdout, err = cli.run(
        "pate", "attack", "--target", payload["record_path"], "--out", str(out), "--quiet", "--json"
    )
    assert code == 0, err
    result = json.loads(stdout)
    assert result["attack"] == "pate-aggregator" and result["covered_by_claim"] is True
    assert 0 <= result["auc"] <= 1 and result["epsilon_lb"] >= 0
    assert (out / "attacks" / "membership" / payload["model_id"] / "pate-aggregator.json").is_file()
    assert "pate-aggregator" in Path(result["report"]).read_text(encoding="utf-8")
    # the PATE page of the run's reports says the ε is data-dependent and not sanitised
    page = (out / "reports" / "pate.html").read_text(encoding="utf-8")
    assert "data-dependent" in page and "not sanitised" in page


@pytest.mark.extended
def test_the_aggregator_attack_refuses_a_record_that_is_not_a_pate_student(pate_run, cli) -> None:
    out, payload = pate_run
    teacher = read_json(Path(payload["record_path"]) / "private" / "pate.json")["teachers"]["teacher_ids"][0]
    code, _, err = cli.run(
        "pate", "attack", "--target", str(out / "records" / "pate-teachers" / teacher), "--out", str(out)
    )
    assert code == 2 and "--target" in err and len(err.strip().splitlines()) == 1
