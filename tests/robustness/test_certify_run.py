"""The certify run end to end on a tiny HGM digits record: typed summary, soundness verdict,
refusal of a model without a noise layer, and reuse keyed on the certificate's parameters."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dpaudit.app.cli import main
from dpaudit.app.runs.certify import CertifySpec, NotCertifiable, run_certify
from dpaudit.app.runs.train import TrainSpec, default_config, train_or_load
from dpaudit.results.certification import load_certification_result, save_certification_result
from dpaudit.results.certify_summary import CertifySummary, SoundnessViolation, load_certify_summary
from dpaudit.store import RunDir

TINY = dict(
    num_draws=50,
    num_examples=20,
    radii=(0.05, 0.2),
    attacks=("fgsm", "pgd"),
    num_selection_draws=20,
    num_eot_samples=1,
    progress=True,
)


def _train(tmp_path: Path, defense: str, **overrides) -> tuple[RunDir, Path, str]:
    run = RunDir(tmp_path / "run").create(command="test")
    outcome = train_or_load(
        TrainSpec(
            defense=defense,
            config=default_config(defense, **overrides),
            model="hgm-cnn",
            dataset="digits",
            seed=0,
            device="cpu",
            progress=False,
        ),
        run,
    )
    return run, outcome.record_dir, outcome.record.model_id


@pytest.fixture(scope="module")
def hgm_record(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunDir, Path, str]:
    return _train(tmp_path_factory.mktemp("hgm"), "hgm", epochs=2, redistribution_pretrain_epochs=1)


@pytest.mark.extended
@pytest.mark.e2e
def test_certify_tiny_hgm_end_to_end_and_reuse(hgm_record, capsys: pytest.CaptureFixture[str]) -> None:
    run, rdir, model_id = hgm_record
    summary = run_certify(CertifySpec(target=rdir, **TINY), run)
    assert isinstance(summary, CertifySummary)
    assert summary.model_id == model_id and summary.defense == "hgm" and summary.radii == (0.05, 0.2)
    assert set(summary.certified_accuracy) == {"0.05", "0.2"} and set(summary.robust_accuracy) == {"fgsm", "pgd"}
    assert summary.smoothing is not None and summary.smoothing.num_selection_draws == 20
    assert all(isinstance(x, SoundnessViolation) for x in summary.soundness_violations)
    stored = load_certify_summary(run.certify_dir(model_id))
    assert stored == summary and CertifySummary.from_dict(json.loads(json.dumps(summary.to_dict()))) == summary
    assert "radii" in summary.to_dict() and "attack_sizes" not in summary.to_dict()
    capsys.readouterr()

    again = run_certify(CertifySpec(target=rdir, **TINY), run)
    err = capsys.readouterr().err
    assert (
        "reusing stored certificate certify-hgm.json" in err
        and "reusing stored certificate certify-smoothing.json" in err
    )
    assert again.certified_accuracy == summary.certified_accuracy

    changed = run_certify(CertifySpec(target=rdir, **{**TINY, "num_draws": 60, "smoothing_confidence": 0.99}), run)
    err = capsys.readouterr().err
    assert "recomputing certify-hgm.json: stored with {'num_draws': 50}, asked for {'num_draws': 60}" in err
    assert "recomputing certify-smoothing.json" in err and "'smoothing_confidence': 0.999" in err
    assert changed.num_draws == 60 and changed.smoothing is not None and changed.smoothing.confidence == 0.99


@pytest.mark.extended
def test_certify_recomputes_certificates_stored_under_another_sensitivity(
    hgm_record, capsys: pytest.CaptureFixture[str]
) -> None:
    # A certificate computed under an older, smaller Δ (the L∞ bound behind a PCA projection of
    # issue 29) has radii too large by the same factor: reusing it would reprint them.
    run, rdir, model_id = hgm_record
    spec = CertifySpec(target=rdir, **{**TINY, "attacks": ()})
    first = run_certify(spec, run)
    cdir = run.certify_dir(model_id)
    for name, key, factor in (("hgm", "sensitivity", 0.5), ("smoothing", "sigma_per_sensitivity", 2.0)):
        stored = load_certification_result(cdir / f"certify-{name}.json")
        save_certification_result(
            dataclasses.replace(stored, config={**stored.config, key: stored.config[key] * factor}), cdir
        )
    capsys.readouterr()
    again = run_certify(spec, run)
    err = capsys.readouterr().err
    assert f"recomputing certify-hgm.json: stored with {{'sensitivity': {first.sensitivity * 0.5!r}}}" in err
    assert "recomputing certify-smoothing.json: stored with {'sigma_per_sensitivity'" in err
    assert (
        load_certification_result(cdir / "certify-hgm.json").config["sensitivity"]
        == again.sensitivity
        == first.sensitivity
    )


@pytest.mark.extended
def test_certify_cli_exits_3_on_a_planted_soundness_violation(
    hgm_record, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import dpaudit.app.runs.certify as runs_certify

    run, rdir, model_id = hgm_record
    real = runs_certify.run_certify

    def planted(spec: CertifySpec, run: RunDir) -> CertifySummary:
        s = real(spec, run)
        # Plant what a broken certificate looks like: certified above what PGD left.
        bad = SoundnessViolation(certificate="hgm", radius=0.2, certified_accuracy=0.9, robust_accuracy=0.1)
        return dataclasses.replace(s, soundness_violations=(bad,))

    monkeypatch.setattr("dpaudit.app.verbs.certify.run_certify", planted)
    argv = [
        "certify",
        "--target",
        str(rdir),
        "--out",
        str(run.path),
        "--num-draws",
        "50",
        "--num-examples",
        "20",
        "--radii",
        "0.05,0.2",
        "--attack",
        "fgsm",
        "--num-selection-draws",
        "20",
        "--num-eot-samples",
        "1",
        "--quiet",
        "--json",
    ]
    assert main(argv) == 3
    out = json.loads(capsys.readouterr().out)
    assert out["soundness_violations"] == [
        {"certificate": "hgm", "radius": 0.2, "certified_accuracy": 0.9, "robust_accuracy": 0.1}
    ]
    assert out["radii"] == [0.05, 0.2]
    # The JSON names the classifier whose conventional and certified accuracy it reports.
    assert out["prediction_rule"] == "vote-count argmax over the 50 certification draws"
    assert (
        out["smoothing"]["prediction_rule"]
        == "CERTIFY: vote-count argmax over 20 selection draws, abstaining where p_A <= 1/2"
    )


def test_certify_refuses_a_model_without_noise_layer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run, rdir, model_id = _train(tmp_path, "nonprivate", epochs=1)
    with pytest.raises(NotCertifiable, match=f"model {model_id} \\(defense nonprivate\\) has no noise layer"):
        run_certify(CertifySpec(target=rdir, **TINY), run)
    capsys.readouterr()  # the training's own lines (one epoch leaves it at the guessing loss: warned)
    code = main(
        [
            "certify",
            "--target",
            str(rdir),
            "--out",
            str(run.path),
            "--num-draws",
            "50",
            "--num-examples",
            "20",
            "--quiet",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1
    assert (
        f"model {model_id} (defense nonprivate) has no noise layer; certify needs" in err
        and "hgm" in err
        and "'dpaudit train --defense NAME'" in err
        and "'dpaudit compare'" in err  # a command-line user is pointed at commands, not at a Python function
        and "run_evasion" not in err
    )
    assert not (run.certify_dir(model_id) / "summary.json").exists()
    fresh = tmp_path / "fresh-run"
    assert main(["certify", "--target", str(rdir), "--out", str(fresh), "--quiet"]) == 2
    assert not fresh.exists()  # a refused model leaves no empty run directory behind


def test_certify_spec_validates_its_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="radii"):
        CertifySpec(target=tmp_path, radii=())
    with pytest.raises(ValueError, match="smoothing_confidence"):
        CertifySpec(target=tmp_path, smoothing_confidence=1.5)
    with pytest.raises(ValueError, match="num_draws"):
        CertifySpec(target=tmp_path, num_draws=1)
    with pytest.raises(ValueError, match="attacks"):
        CertifySpec(target=tmp_path, attacks=("nope",))
    assert CertifySpec(target=tmp_path, radii=(0.2, 0.1, 0.2)).radii == (0.1, 0.2)


def test_certify_bad_radii_is_one_line_naming_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["certify", "--target", str(tmp_path), "--out", str(tmp_path), "--radii", "0.1,-2"]) == 2
    )  # argparse errors: one line, exit 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--radii" in err


@pytest.mark.parametrize("radii", ["0.1,,0.2", ",0.1", "0.1,", ""])
def test_radii_with_an_empty_item_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], radii: str) -> None:
    """Issue 11, finding 9: an empty item in --radii was silently dropped."""
    code = main(["certify", "--target", str(tmp_path), "--out", str(tmp_path / "run"), "--radii", radii])
    assert code == 2 and "--radii" in capsys.readouterr().err


def test_an_empty_out_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 11, finding 9: --out '' made the current directory a run directory."""
    assert main(["train", "--defense", "nonprivate", "--model", "digits-mlp", "--out", ""]) == 2
    assert "--out must name a path" in capsys.readouterr().err


def _certified_inputs(rdir: Path, num_examples: int, seed: int):
    """The model, test inputs and labels a certify run certifies (recomputed here, not read from the run)."""
    from dpaudit.app.runs.certify_attacks import certify_subset
    from dpaudit.data import load_dataset
    from dpaudit.weights import load_model

    test = load_dataset("digits").test
    pick = certify_subset(len(test), num_examples=num_examples, seed=seed)
    return load_model(rdir), test.features[pick], test.labels[pick].numpy()


@pytest.mark.extended
def test_conventional_accuracy_is_the_certified_classifiers_own(hgm_record, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 42, part 5: the accuracy printed beside the certified accuracy must be that of the
    # classifier the certificate covers: for Clopper–Pearson, the vote-count argmax of the
    # certification draws (not the record's 16-draw expected-softmax argmax).
    import numpy as np

    from dpaudit.robustness.montecarlo import sample_scores

    run, rdir, model_id = hgm_record
    spec = CertifySpec(target=rdir, **{**TINY, "attacks": (), "radii": (0.0, 0.05, 0.2)})
    s = run_certify(spec, run)
    model, x, y = _certified_inputs(rdir, TINY["num_examples"], seed=0)
    votes = sample_scores(model, x, num_draws=TINY["num_draws"], seed=0, stream="certify-estimate").counts
    assert s.conventional_accuracy == pytest.approx(np.mean(votes.argmax(axis=1) == y))
    assert s.prediction_rule == "vote-count argmax over the 50 certification draws"
    assert s.certified_accuracy["0"] <= s.conventional_accuracy
    assert s.smoothing is not None and s.smoothing.prediction_rule.startswith(
        "CERTIFY: vote-count argmax over 20 selection draws"
    )
    assert s.smoothing.certified_accuracy["0"] <= s.smoothing.conventional_accuracy
    # The rule travels with the numbers: JSON, text and the certificate's own config.
    cdir = run.certify_dir(model_id)
    assert load_certify_summary(cdir).prediction_rule == s.prediction_rule
    assert load_certification_result(cdir / "certify-hgm.json").config["prediction_rule"] == s.prediction_rule
    # A certificate stored before the bounds took both sides of every class is recomputed.
    stored = load_certification_result(cdir / "certify-hgm.json")
    save_certification_result(
        dataclasses.replace(stored, config={k: val for k, val in stored.config.items() if k != "bound_selection"}), cdir
    )
    capsys.readouterr()
    run_certify(spec, run)
    assert (
        "recomputing certify-hgm.json: stored with {'bound_selection': None}, "
        "asked for {'bound_selection': 'same-draws'}" in capsys.readouterr().err
    )


@pytest.mark.slow
def test_certify_text_names_the_classifier_of_both_accuracies(hgm_record, capsys: pytest.CaptureFixture[str]) -> None:
    run, rdir, model_id = hgm_record
    argv = [
        "certify",
        "--target",
        str(rdir),
        "--out",
        str(run.path),
        "--num-draws",
        "50",
        "--num-examples",
        "20",
        "--radii",
        "0,0.05,0.2",
        "--no-attacks",
        "--num-selection-draws",
        "20",
        "--quiet",
    ]
    assert main(argv) == 0
    text = capsys.readouterr().out
    s = load_certify_summary(run.certify_dir(model_id))
    assert (
        f"conventional accuracy {s.conventional_accuracy:.4f} of the classifier "
        "certified as hgm: vote-count argmax over the 50 certification draws" in text
    )
    assert s.smoothing is not None
    assert (
        f"conventional accuracy {s.smoothing.conventional_accuracy:.4f} of the "
        "classifier certified as smoothing: CERTIFY: vote-count argmax over 20 "
        "selection draws" in text
    )


def test_a_smoothing_models_certified_accuracy_at_radius_0_stays_within_its_classifiers(tmp_path: Path) -> None:
    import numpy as np

    from dpaudit.robustness.montecarlo import sample_scores
    from dpaudit.robustness.noise import add_input_noise
    from dpaudit.robustness.smoothing import smoothing_certify

    run = RunDir(tmp_path / "run").create(command="test")
    config = default_config("smoothing", epochs=2, smoothing_sigma=0.5)
    outcome = train_or_load(
        TrainSpec(
            defense="smoothing",
            config=config,
            model="digits-mlp",
            dataset="digits",
            seed=0,
            device="cpu",
            progress=False,
        ),
        run,
    )
    s = run_certify(CertifySpec(target=outcome.record_dir, **{**TINY, "attacks": (), "radii": (0.0, 0.25)}), run)
    assert (
        s.prediction_rule.startswith("CERTIFY: vote-count argmax over 20 selection draws") and s.smoothing is not None
    )
    assert s.certified_accuracy["0"] <= s.conventional_accuracy
    # CERTIFY recomputed from fresh calls on the same streams: its predictions' accuracy is the conventional one.
    model, x, y = _certified_inputs(outcome.record_dir, TINY["num_examples"], seed=0)
    noisy = add_input_noise(model, input_shape=tuple(outcome.record.input_shape), noise_std=0.5)
    sel = sample_scores(noisy, x, num_draws=20, seed=0, stream="certify-select").counts
    est = sample_scores(noisy, x, num_draws=50, seed=0, stream="certify-estimate").counts
    preds, _ = smoothing_certify(sel, est, sigma=0.5, confidence=0.999)
    assert s.conventional_accuracy == pytest.approx(np.mean(preds == y))


@pytest.mark.extended
def test_certify_without_radii_reports_where_the_model_certifies(hgm_record) -> None:
    # Issue 46: fixed default radii beyond what a model certifies read as 0 % everywhere (and a
    # green "sound"); without radii, certify picks them from its own certificate's radii.
    from dpaudit.app.runs.certify import DEFAULT_RADII

    run, rdir, model_id = hgm_record
    summary = run_certify(CertifySpec(target=rdir, **{**TINY, "radii": None, "attacks": ("fgsm",)}), run)
    own = load_certification_result(run.certify_dir(model_id) / "certify-hgm.json")
    assert summary.radii[0] == 0.0 and summary.radii_source and "chosen by certify" in summary.radii_source
    correct = own.predictions == own.labels
    if (own.radii[correct] > 0).any():
        smallest = summary.radii[1]
        # Brute force over the stored per-point radii: something is certified at the smallest radius.
        assert int(((own.radii >= smallest) & correct).sum()) > 0
        assert summary.certified_accuracy[f"{smallest:g}"] > 0
        assert max(summary.radii) <= own.radii[correct].max()
    else:
        assert summary.radii == (0.0, *DEFAULT_RADII)
    assert set(summary.robust_accuracy["fgsm"]) == {f"{r:g}" for r in summary.radii}
    assert load_certify_summary(run.certify_dir(model_id)).radii_source == summary.radii_source
