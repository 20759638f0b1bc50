"""``dpaudit attack inversion`` end to end on a tiny digits target: JSON contract, stored results, cache reuse,
report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dpaudit.results import load_inversion_result


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from dpaudit.app.runs.train import TrainSpec, default_config, train_or_load
    from dpaudit.store import RunDir

    run = RunDir(tmp_path_factory.mktemp("inversion") / "run")
    done = train_or_load(
        TrainSpec(
            defense="nonprivate",
            model="digits-mlp",
            dataset="digits",
            config=default_config("nonprivate", epochs=20),
            seed=0,
            progress=False,
        ),
        run,
    )
    return run.path, run.record_dir(done.record.model_id)


FAST = ["--max-iterations", "60", "--evaluator-epochs", "3", "--quiet"]


@pytest.mark.extended
def test_mi_face_json_contract_files_and_report(cli, digits_run: tuple[Path, Path]) -> None:
    run, record = digits_run
    code, out, err = cli.run(
        "attack",
        "inversion",
        "--target",
        str(record),
        "--attack",
        "mi-face",
        "--classes",
        "0-4",
        *FAST,
        "--out",
        str(run),
        "--json",
    )
    assert code == 0, err
    payload = json.loads(out)
    s = payload["attacks"]["mi-face"]
    for key in ("attack_accuracy_top1", "attack_accuracy_top5", "knn_distance", "psnr"):
        assert isinstance(s[key], float)
    assert 0.0 <= s["attack_accuracy_top1"] <= s["attack_accuracy_top5"] <= 1.0
    assert set(s["membership"]) >= {"auc", "tpr_at_fpr", "epsilon_lb"}
    assert s["membership"]["tpr_at_fpr"].keys() == {"0.001", "0.01"}
    assert 0.0 <= payload["evaluator_accuracy"] <= 1.0
    stored = load_inversion_result(Path(payload["result_dir"]) / "inversion-mi-face.json")
    assert stored.target_classes.tolist() == [0, 1, 2, 3, 4]
    assert stored.reconstructions.shape == (5, 1, 8, 8) and stored.reconstructions.dtype == np.float32
    assert 0.0 <= stored.reconstructions.min() and stored.reconstructions.max() <= 1.0
    assert stored.summary()["attack_accuracy_top1"] == s["attack_accuracy_top1"]
    # The count behind the evaluator's accuracy is stored, so a report can bound it (issue 46).
    tested = stored.metadata["evaluator_num_tested"]
    assert isinstance(tested, int) and tested > 0
    assert round(payload["evaluator_accuracy"] * tested) == pytest.approx(payload["evaluator_accuracy"] * tested)
    assert Path(payload["report"]).is_file() and "inversion" in Path(payload["report"]).name
    assert payload["trained"] and not payload["reused"]


@pytest.mark.extended
def test_rerun_reuses_the_cached_evaluator(cli, digits_run: tuple[Path, Path]) -> None:
    run, record = digits_run
    args = (
        "attack",
        "inversion",
        "--target",
        str(record),
        "--attack",
        "mi-face",
        "--classes",
        "0,1",
        *FAST,
        "--out",
        str(run),
        "--json",
    )
    cli.run(*args)
    code, out, err = cli.run(*args)
    assert code == 0, err
    payload = json.loads(out)
    assert "mi-face result" in payload["reused"] and not payload["trained"]
    # Another budget is another result: recomputed, the evaluator still reused.
    code, out, err = cli.run(*args[:-3], "--patience", "7", "--out", str(run), "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert "mi-face result" not in payload["reused"] and any(r.startswith("evaluator") for r in payload["reused"])


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--classes", "0,99"], "--classes"),
        (["--public-data", "mnist:5-9"], "--public-data"),
        (["--patience", "0"], "--patience"),
        (["--process", "blur"], "--process"),
    ],
)
def test_bad_input_exits_2_naming_the_flag(
    cli, digits_run: tuple[Path, Path], tmp_path: Path, extra: list[str], named: str
) -> None:
    _, record = digits_run
    code, _, err = cli.run(
        "attack", "inversion", "--target", str(record), "--attack", "mi-face", *extra, "--out", str(tmp_path / "out")
    )
    assert code == 2
    assert named in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("text", "classes"), [("mnist:5-9", (5, 6, 7, 8, 9)), ("faces:20-22,30", (20, 21, 22, 30)), ("digits", ())]
)
def test_public_data_parses_and_prints_back(text: str, classes: tuple[int, ...]) -> None:
    from dpaudit.app.runs.inversion import parse_public_data

    public = parse_public_data(text)
    assert public.classes == classes
    assert public.text() == text and parse_public_data(public.text()) == public


@pytest.mark.parametrize("text", ["bogus:1", "mnist:9-5", "mnist:1,1", "mnist:10", "mnist:a"])
def test_public_data_refuses_bad_text(text: str) -> None:
    from dpaudit.app.runs.inversion import parse_public_data

    with pytest.raises(ValueError, match="--public-data"):
        parse_public_data(text)


def test_public_data_the_target_saw_is_refused() -> None:
    from dpaudit.app.runs.inversion import check_public_data, parse_public_data

    with pytest.raises(ValueError, match="overlaps"):
        check_public_data(parse_public_data("mnist:4-9"), dataset="mnist", classes=(0, 1, 2, 3, 4))
    with pytest.raises(ValueError, match="shape"):
        check_public_data(parse_public_data("mnist:5-9"), dataset="digits", classes=(0, 1))
    check_public_data(parse_public_data("mnist:5-9"), dataset="mnist-0-4", classes=(0, 1, 2, 3, 4))


@pytest.mark.extended
def test_a_noise_layer_target_is_attacked_reproducibly(cli, tmp_path: Path) -> None:
    # PixelDP draws fresh noise on every forward pass from torch's global stream; the run seeds a
    # forked copy of it for the attack, so two runs agree.
    from dpaudit.app.runs.train import TrainSpec, default_config, train_or_load
    from dpaudit.store import RunDir

    recons = []
    for name in ("a", "b"):
        run = RunDir(tmp_path / name)
        done = train_or_load(
            TrainSpec(
                defense="pixeldp",
                model="digits-mlp",
                dataset="digits",
                config=default_config("pixeldp", epochs=2),
                seed=0,
                progress=False,
            ),
            run,
        )
        code, out, err = cli.run(
            "attack",
            "inversion",
            "--target",
            str(run.record_dir(done.record.model_id)),
            "--attack",
            "mi-face",
            "--classes",
            "0-2",
            *FAST,
            "--out",
            str(run.path),
            "--json",
        )
        assert code == 0, err
        recons.append(
            load_inversion_result(Path(json.loads(out)["result_dir"]) / "inversion-mi-face.json").reconstructions
        )
    np.testing.assert_array_equal(recons[0], recons[1])
