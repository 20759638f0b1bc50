"""Randomized smoothing as a defense (Cohen, Rosenfeld & Kolter 2019): Gaussian-augmented training,
CERTIFY's radius R = σ Φ⁻¹(p_A) (Theorem 1), abstention, and the train → certify round trip."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import special, stats
from torch import nn

import defenses.nonprivate as nonprivate
from defenses import DEFENSES
from defenses.smoothing import SmoothingConfig, train_smoothing
from dpaudit.app.cli import main
from dpaudit.data import load_dataset, make_splits
from dpaudit.results.certification_spec import CertificationSpec, SmoothingCertificationSpec
from dpaudit.robustness import smoothing
from dpaudit.robustness.montecarlo import sample_scores
from dpaudit.robustness.noise import add_input_noise, is_randomized
from dpaudit.store import thaw
from dpaudit.train_request import TrainRequest

torch.set_num_threads(1)

N0, N = 20, 200
CONFIDENCE = 0.999


@pytest.fixture(scope="module")
def digits():
    bundle = load_dataset("digits")
    return bundle, make_splits(bundle, seed=0, num_members=120, num_non_members=60)


class _Constant(nn.Module):
    """Always predicts ``label`` (a perfectly confident base classifier), whatever the noise."""

    def __init__(self, label: int, num_classes: int = 10) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.zeros(()))  # a parameter, so add_input_noise finds a device
        self.label, self.num_classes = label, num_classes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(x.shape[0], self.num_classes)
        logits[:, self.label] = 1.0
        return logits + 0.0 * self.scale


def _certify(base: nn.Module, x: torch.Tensor, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    model = add_input_noise(base, input_shape=tuple(x.shape[1:]), noise_std=sigma)
    sel = sample_scores(model, x, num_draws=N0, seed=0, stream="select")
    est = sample_scores(model, x, num_draws=N, seed=0, stream="estimate")
    return smoothing.smoothing_certify(sel.counts, est.counts, sigma=sigma, confidence=CONFIDENCE)


def test_registered_with_a_nonprivate_claim_and_its_spec(digits):
    spec = DEFENSES["smoothing"]
    assert spec.claim_kind == "nonprivate" and spec.config_type is SmoothingConfig and spec.certification is not None
    bundle, splits = digits
    config = SmoothingConfig(smoothing_sigma=0.5, epochs=10, batch_size=32)
    record, model = train_smoothing(
        TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=config, seed=1, progress=False)
    )
    assert record.defense == "smoothing" and record.claim.kind == "nonprivate" and not record.claim.is_private
    assert math.isinf(record.claim.upper_bound(delta=1e-5).epsilon)  # robustness, not privacy
    stored = CertificationSpec.from_dict(thaw(record.config)["certification"])
    assert stored == SmoothingCertificationSpec(sigma=0.5) == spec.certification(config)
    assert (stored.num_selection_draws, stored.num_draws, stored.confidence, stored.attack_norm) == (
        100,
        10_000,
        0.999,
        "l2",
    )
    assert record.metrics["test_accuracy"] > 0.3 and not is_randomized(model)  # the released model is the base f


def test_augmentation_noises_the_training_inputs_at_sigma(digits, monkeypatch):
    bundle, splits = digits
    clean = bundle.all().subset(splits.members).features
    batches: list[torch.Tensor] = []
    seen: list[torch.Tensor] = []
    real_batches, real_build = nonprivate.shuffled_batches, nonprivate.build_model

    def spy_batches(*args, **kwargs):
        for idx in real_batches(*args, **kwargs):
            batches.append(idx.clone())
            yield idx

    def spy_build(*args, **kwargs):
        model = real_build(*args, **kwargs)
        model.register_forward_pre_hook(lambda m, inp: seen.append(inp[0].detach().clone()) if m.training else None)
        return model

    monkeypatch.setattr(nonprivate, "shuffled_batches", spy_batches)
    monkeypatch.setattr(nonprivate, "build_model", spy_build)
    sigma = 0.5
    train_smoothing(
        TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name="digits-mlp",
            config=SmoothingConfig(smoothing_sigma=sigma, epochs=2, batch_size=32),
            seed=0,
            progress=False,
        )
    )
    assert len(seen) == len(batches) > 0
    residual = torch.cat([x - clean[idx] for x, idx in zip(seen, batches)]).flatten()
    assert residual.numel() == 2 * len(clean) * clean[0].numel()
    assert abs(float(residual.std()) - sigma) < 0.03 * sigma and abs(float(residual.mean())) < 0.02
    assert float((residual == 0).float().mean()) < 1e-3  # every input is noised, none passes clean


def test_certify_on_a_constant_classifier_gives_sigma_times_probit_of_the_bound():
    x = torch.rand(5, 1, 8, 8)
    sigma = 0.5
    predictions, radii = _certify(_Constant(3), x, sigma)
    # All N votes for c_A: p_A = BetaInv(α; N, 1) = α^(1/N) (Clopper–Pearson, one-sided).
    p_a = stats.beta.ppf(1 - CONFIDENCE, N, 1)
    assert p_a == pytest.approx((1 - CONFIDENCE) ** (1 / N), rel=1e-12)
    assert predictions.tolist() == [3] * 5
    assert np.all(radii == sigma * special.ndtri(p_a))


def test_abstains_when_the_lower_bound_is_at_most_one_half(monkeypatch):
    # A coin flip under the noise: class 0 iff the noised first pixel exceeds its clean value 0.5.
    class Coin(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            above = (x.flatten(1)[:, 0] > 0.5).float() * self.w
            return torch.stack([above, 1 - above], dim=1)

    predictions, radii = _certify(Coin(), torch.full((4, 1, 8, 8), 0.5), 0.25)
    assert predictions.tolist() == [-1] * 4 and radii.tolist() == [0.0] * 4
    # Exactly ½ abstains too (Cohen et al.'s CERTIFY certifies only p_A > ½).
    monkeypatch.setattr(smoothing, "smoothing_lower_bound", lambda n_a, n, confidence: np.full(np.shape(n_a), 0.5))
    counts = np.array([[N, 0]])
    predictions, radii = smoothing.smoothing_certify(counts[:, :] * 0 + [[N0, 0]], counts, sigma=1.0)
    assert predictions.tolist() == [-1] and radii.tolist() == [0.0]


def test_radius_grows_with_sigma_for_a_perfectly_confident_classifier():
    x = torch.rand(3, 1, 8, 8)
    radii = [float(_certify(_Constant(1), x, sigma)[1][0]) for sigma in (0.25, 0.5, 1.0)]
    assert radii[0] > 0 and radii[0] < radii[1] < radii[2]
    assert radii[1] == pytest.approx(2 * radii[0]) and radii[2] == pytest.approx(4 * radii[0])


@pytest.mark.parametrize("sigma", [0.0, -0.5, float("nan"), float("inf"), 1e300])
def test_bad_sigma_names_the_argument_and_value(sigma):
    with pytest.raises(ValueError, match=r"smoothing_sigma.*got") as exc:
        SmoothingConfig(smoothing_sigma=sigma)
    assert repr(sigma) in str(exc.value) or str(sigma) in str(exc.value)
    if sigma <= 0 or not math.isfinite(sigma):
        with pytest.raises(ValueError, match="sigma"):
            SmoothingCertificationSpec(sigma=sigma)


@pytest.mark.parametrize("value", ["0", "nan", "-1", "1e300"])
def test_bad_sigma_on_the_cli_exits_2_naming_the_flag(value, tmp_path, capsys):
    code = main(
        [
            "train",
            "--defense",
            "smoothing",
            "--smoothing-sigma",
            value,
            "--dataset",
            "digits",
            "--model",
            "digits-mlp",
            "--quiet",
            "--out",
            str(tmp_path),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "--smoothing-sigma" in err and repr(float(value)) in err.lower() and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.extended
def test_train_and_certify_round_trip_through_the_cli(tmp_path, capsys):
    out = str(tmp_path / "run")
    code = main(
        [
            "train",
            "--defense",
            "smoothing",
            "--smoothing-sigma",
            "0.5",
            "--dataset",
            "digits",
            "--model",
            "digits-mlp",
            "--epochs",
            "5",
            "--quiet",
            "--out",
            out,
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    trained = json.loads(captured.out)
    assert (
        trained["defense"] == "smoothing"
        and trained["robustness"]["kind"] == "smoothing"
        and trained["robustness"]["sigma"] == 0.5
    )

    argv = [
        "certify",
        "--target",
        trained["record_path"],
        "--radii",
        "0.25,0.5",
        "--num-draws",
        str(N),
        "--num-selection-draws",
        str(N0),
    ]
    argv += [
        "--num-examples",
        "30",
        "--attack",
        "pgd,fgsm",
        "--num-eot-samples",
        "2",
        "--quiet",
        "--out",
        out,
        "--json",
    ]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    s = json.loads(captured.out)
    assert s["defense"] == "smoothing" and s["mechanism"] == "smoothing" and s["norm"] == "l2"
    assert s["noise_std"] == 0.5 and s["sensitivity"] == 1.0 and s["robustness_epsilon"] is None and s["num_draws"] == N
    assert s["smoothing"]["num_selection_draws"] == N0 and s["smoothing"]["confidence"] == CONFIDENCE
    assert s["certified_accuracy"] == s["smoothing"]["certified_accuracy"] and set(s["certified_accuracy"]) == {
        "0.25",
        "0.5",
    }
    assert 0 < s["certified_accuracy"]["0.25"] <= s["conventional_accuracy"]
    # Soundness: certified accuracy never exceeds what the strongest attack on the smoothed model left.
    assert s["soundness_violations"] == []
    for r in ("0.25", "0.5"):
        assert s["certified_accuracy"][r] <= min(accs[r] for accs in s["robust_accuracy"].values())
    cdir = Path(out) / "certify" / s["model_id"]
    stored = json.loads((cdir / "certify-smoothing.json").read_text())
    assert stored["method"] == "smoothing" and not list(cdir.glob("certify-nonprivate*"))
    # Every certified radius is σ Φ⁻¹ of a Clopper–Pearson lower bound with N draws: at most that of N of N.
    radii = np.load(cdir / "certify-smoothing.npz")["radii"]
    assert radii.max() <= 0.5 * special.ndtri((1 - CONFIDENCE) ** (1 / N)) + 1e-12
    report = Path(s["report"]).with_suffix(".md").read_text()
    assert "smoothing σ=0.5" in report and "certified smoothing" in report

    # L2 is the only norm Theorem 1 certifies.
    code = main(
        [
            "certify",
            "--target",
            trained["record_path"],
            "--norm",
            "linf",
            "--no-attacks",
            "--num-draws",
            "20",
            "--quiet",
            "--out",
            out,
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "linf" in err
