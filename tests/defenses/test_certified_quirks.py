"""The authors' code's behaviours as explicit options of HGM / Secure-SGD (docs/defenses/noise-layer.md §2 (a)–(f)).

Each option is off by default and, when on, changes exactly what its help says: (a) noise std
σ r_k instead of σ √r_k, (b) the heuristic Δ_r, (c) one training noise draw reused at every
step, (d) batch-mean clipping in DP-SGD, (e) Σ r = 16·16·C instead of K, (f) the mixed δ of the
certification. A record trained with any of them names them; defaults stay bit-identical.
Everything here is tiny (digits, one epoch): the file runs in seconds on one CPU thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from defenses import DEFENSES
from defenses._common import config_dict
from defenses.noise_layer.authors import AUTHORS_QUIRKS, authors_batch_mean_gradient
from defenses.noise_layer.configs import HGMConfig, SecureSGDConfig
from dpaudit.data import load_dataset, make_splits
from dpaudit.models import build_model
from dpaudit.options import add_option_flags, options_from_args
from dpaudit.privacy.gaussian import extended_sigma
from dpaudit.results.certification import CertificationResult, save_certification_result
from dpaudit.results.record import load_record
from dpaudit.robustness.certification import AuthorsMixedDelta, certified_radius
from dpaudit.robustness.noise import (
    NoiseLayer,
    authors_heuristic_sensitivity,
    find_noise_layer,
    layer_sensitivity,
    redistribution_from_gradients,
)
from dpaudit.store import RunDir, thaw
from dpaudit.train_request import TrainRequest
from dpaudit.weights import save_record

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reproduce_hgm.py"
HGM_TINY = dict(epochs=1, batch_size=32, redistribution_pretrain_epochs=1, redistribution_examples=64)
SECURE_TINY = dict(epochs=1, sampling_rate=0.1, redistribution_pretrain_epochs=1, redistribution_examples=64)
NOISE_LAYER_OPTIONS = (
    "authors_noise_scale_r",
    "authors_heuristic_sensitivity",
    "authors_fixed_training_noise",
    "authors_redistribution_total",
    "authors_mixed_delta",
)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def digits():
    bundle = load_dataset("digits")
    return bundle, make_splits(bundle, seed=0, num_members=120, num_non_members=60)


_TRAINED: dict[tuple, tuple] = {}


def _train(digits, defense: str, model_name: str = "digits-mlp", **overrides):
    """Trains (once per module) ``defense`` with the tiny config plus ``overrides``, seed 0."""
    key = (defense, model_name, tuple(sorted(overrides.items())))
    if key not in _TRAINED:
        bundle, splits = digits
        base = HGM_TINY if defense == "hgm" else SECURE_TINY
        config = DEFENSES[defense].config_type(**{**base, **overrides})
        _TRAINED[key] = DEFENSES[defense].train(
            TrainRequest(bundle=bundle, splits=splits, model_name=model_name, config=config, seed=0, progress=False)
        )
    return _TRAINED[key]


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


# --------------------------------------------------------------------------------------------
# Defaults: unchanged, and every option explicitly off is the same run
# --------------------------------------------------------------------------------------------
@pytest.mark.extended
@pytest.mark.parametrize(
    ("defense", "options"),
    [("hgm", NOISE_LAYER_OPTIONS), ("secure-sgd", (*NOISE_LAYER_OPTIONS, "authors_batch_clipping"))],
)
def test_defaults_are_bit_identical_to_every_option_explicitly_off(
    digits, defense: str, options: tuple[str, ...]
) -> None:
    record, model = _train(digits, defense)
    off_record, off_model = _train(digits, defense, **dict.fromkeys(options, False))
    assert _same_weights(model, off_model)
    assert record.model_id == off_record.model_id and record.claim.to_dict() == off_record.claim.to_dict()
    assert thaw(record.config) == thaw(off_record.config)
    # A default record (and so its id) looks as it did before the options existed.
    assert not [k for k in record.config if k.startswith("authors_")]
    assert not [k for k in record.config["certification"] if k.startswith("authors_")]
    assert "authors' code" not in record.claim.description
    assert not [k for k in config_dict(DEFENSES[defense].config_type()) if k.startswith("authors_")]
    assert set(options) <= {f.name for f in dataclasses.fields(DEFENSES[defense].config_type)}


# --------------------------------------------------------------------------------------------
# (a) noise std σ r_k instead of σ √r_k
# --------------------------------------------------------------------------------------------
def test_noise_scale_r_gives_std_ratio_r_not_sqrt_r(digits) -> None:
    _, model = _train(digits, "hgm")
    record_q, model_q = _train(digits, "hgm", authors_noise_scale_r=True)
    paper, quirk = find_noise_layer(model), find_noise_layer(model_q)
    r = paper.redistribution.double()  # the same seed gives the same r: only the option differs
    assert float(r.max() / r.min()) > 2.0
    per_unit_paper = (paper.noise_scale() / paper.noise_std).double()
    per_unit_quirk = (quirk.noise_scale() / quirk.noise_std).double()
    assert torch.allclose(per_unit_paper, r.sqrt(), rtol=1e-5)
    assert torch.allclose(per_unit_quirk, r, rtol=1e-4)
    i, j = int(r.argmax()), int(r.argmin())
    assert float(per_unit_quirk[i] / per_unit_quirk[j]) == pytest.approx(float(r[i] / r[j]), rel=1e-4)
    assert float(per_unit_paper[i] / per_unit_paper[j]) == pytest.approx(math.sqrt(float(r[i] / r[j])), rel=1e-4)
    # Measured from draws: the released layer adds σ r_k.
    quirk.generator = torch.Generator().manual_seed(0)
    try:
        draws = quirk.add_noise(torch.zeros(4000, *quirk.output_shape))
    finally:
        quirk.generator = None
    stds = draws.std(0).double()
    assert float(stds[i] / stds[j]) == pytest.approx(float(r[i] / r[j]), rel=0.1)
    # The calibration still assumes σ √r_k: its Δ_r is weighted by r, not by the r² installed.
    assert record_q.metrics["first_layer_sensitivity"] == pytest.approx(
        layer_sensitivity(quirk, input_shape=(1, 8, 8), redistribution=r.float()), rel=1e-5
    )
    assert record_q.metrics["first_layer_sensitivity_released"] == pytest.approx(
        layer_sensitivity(quirk, input_shape=(1, 8, 8)), rel=1e-6
    )
    assert record_q.config["authors_quirks"] == ("noise-scale-r",)
    assert "noise-scale-r" in record_q.claim.description and "does not meet" in record_q.claim.description


# --------------------------------------------------------------------------------------------
# (b) the heuristic Δ_r
# --------------------------------------------------------------------------------------------
@pytest.mark.extended
def test_heuristic_sensitivity_is_kernel_over_root_r_and_below_the_bound(digits) -> None:
    record, model = _train(
        digits,
        "hgm",
        "hgm-cnn",
        authors_heuristic_sensitivity=True,
        attack_norm="linf",
        sensitivity_control="scale-noise",
    )
    noise = find_noise_layer(model)
    weight = noise.layer.weight.detach().double().numpy()  # (32, 1, 5, 5)
    r = noise.redistribution.double().numpy()  # (32, 8, 8)
    assert r.sum() == pytest.approx(r.size, rel=1e-4)  # without (e), Σ r = K
    by_hand = np.linalg.svd(weight.reshape(32, -1), compute_uv=False)[0] / math.sqrt(
        np.linalg.svd(r.reshape(32, -1), compute_uv=False)[0]
    )
    assert authors_heuristic_sensitivity(noise) == pytest.approx(by_hand, rel=1e-9)
    # Training used the heuristic for the released noise: σ = c·L·Δ_heuristic ...
    assert record.metrics["first_layer_sensitivity"] == pytest.approx(by_hand, rel=1e-6)
    per_unit = record.config["certification"]["noise_per_sensitivity"]
    assert float(noise.noise_std) == pytest.approx(per_unit * by_hand, rel=1e-5)
    # ... instead of the bound √(Σ_k ‖W_k‖₁² / r_k) the mathematics uses for linf, which it undercuts.
    rows_l1 = np.abs(weight).reshape(32, -1).sum(1)[:, None, None] * np.ones((1, 8, 8))
    bound = math.sqrt(float((rows_l1**2 / r).sum()))  # padding makes border rows smaller; the interior dominates
    exact_bound = layer_sensitivity(noise, input_shape=(1, 8, 8), norm="linf")
    assert exact_bound <= bound + 1e-9 and record.metrics["first_layer_sensitivity_released"] == pytest.approx(
        exact_bound, rel=1e-6
    )
    assert by_hand < exact_bound
    assert "heuristic-sensitivity" in record.claim.description


# --------------------------------------------------------------------------------------------
# (c) one training noise draw reused at every step
# --------------------------------------------------------------------------------------------
def _training_noise(
    digits, monkeypatch: pytest.MonkeyPatch, **overrides
) -> tuple[list[torch.Tensor], list, torch.nn.Module]:
    seen: list[torch.Tensor] = []
    fixed: list = []
    real = NoiseLayer.add_noise

    def spy(self: NoiseLayer, h: torch.Tensor) -> torch.Tensor:
        out = real(self, h)
        if self.training and float(self.noise_std) > 0:
            seen.append((out - h).detach().clone())
            fixed.append(None if self.fixed_noise is None else self.fixed_noise.clone())
        return out

    monkeypatch.setattr(NoiseLayer, "add_noise", spy)
    bundle, splits = digits
    config = HGMConfig(**{**HGM_TINY, "noise_ramp_fraction": 0.0, **overrides})  # constant σ: step noises comparable
    _, model = DEFENSES["hgm"].train(
        TrainRequest(bundle=bundle, splits=splits, model_name="digits-mlp", config=config, seed=0, progress=False)
    )
    monkeypatch.setattr(NoiseLayer, "add_noise", real)
    return seen, fixed, model


def test_fixed_training_noise_reuses_one_draw_and_the_released_model_draws_fresh(
    digits, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen, fixed, model = _training_noise(digits, monkeypatch, authors_fixed_training_noise=True)
    assert len(seen) >= 3  # a few SGD steps
    assert all(f is not None and torch.equal(f, fixed[0]) for f in fixed)  # the very same tensor every step
    first = seen[0][0]
    for step_noise in seen:  # every step, every example of the lot: the same noise
        assert torch.allclose(step_noise, first.expand_as(step_noise), atol=1e-5)
    noise = find_noise_layer(model)
    assert noise.fixed_noise is None
    a, b = noise.add_noise(torch.zeros(2, *noise.output_shape)), noise.add_noise(torch.zeros(2, *noise.output_shape))
    assert not torch.allclose(a, b)

    seen_paper, fixed_paper, _ = _training_noise(digits, monkeypatch)
    assert all(f is None for f in fixed_paper)
    assert not torch.allclose(seen_paper[0][0], seen_paper[1][0], atol=1e-3)  # fresh noise at every step
    assert not torch.allclose(seen_paper[0][0], seen_paper[0][1], atol=1e-3)  # and for every example


# --------------------------------------------------------------------------------------------
# (d) batch-mean clipping in Secure-SGD's DP-SGD
# --------------------------------------------------------------------------------------------
def test_batch_clipping_clips_the_mean_not_each_example(digits) -> None:
    bundle, _ = digits
    x, y = bundle.train.features[:8].clone(), bundle.train.labels[:8].clone()
    x[0] *= 200.0  # one example with a huge gradient
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        # ReLU: a tanh layer saturates, and the huge example's gradient would stay small.
        model = build_model(
            "digits-mlp", input_shape=bundle.input_shape, num_classes=bundle.num_classes, hidden=128, activation="relu"
        )
    params = dict(model.named_parameters())
    clip = 1.0
    got, _ = authors_batch_mean_gradient(model, params, x, y, clip_norm=clip, physical_batch_size=3)
    per_example = [
        torch.autograd.grad(torch.nn.functional.cross_entropy(model(x[i : i + 1]), y[i : i + 1]), list(params.values()))
        for i in range(8)
    ]
    assert math.sqrt(sum(float(g.norm()) ** 2 for g in per_example[0])) > 100 * clip  # never clipped on its own
    for k, (name, p) in enumerate(params.items()):
        mean = sum(g[k] for g in per_example) / 8
        want = (
            mean * min(1.0, clip / float(mean.norm())) if p.ndim >= 2 else mean
        )  # weights clipped as a whole, biases not
        assert torch.allclose(got[name], want, rtol=1e-5, atol=1e-7), name
    # One example moves the pre-noise update far more than per-example clipping allows (C / L).
    without, _ = authors_batch_mean_gradient(model, params, x[1:], y[1:], clip_norm=clip, physical_batch_size=3)
    shift = math.sqrt(sum(float((got[n] - without[n]).norm()) ** 2 for n in params))
    assert shift > 4 * clip / 8


@pytest.mark.extended
def test_batch_clipping_run_says_its_epsilon_is_not_a_guarantee(digits) -> None:
    record, model = _train(digits, "secure-sgd")
    quirk, quirk_model = _train(digits, "secure-sgd", authors_batch_clipping=True)
    assert not _same_weights(model, quirk_model)
    assert quirk.config["authors_quirks"] == ("batch-clipping",) and quirk.config["authors_batch_clipping"] is True
    assert "batch-clipping" in quirk.claim.description and "NOT a valid guarantee" in quirk.claim.description
    assert "NOT a valid guarantee" not in record.claim.description
    assert quirk.claim.to_dict()["event"] == record.claim.to_dict()["event"]  # the DP-SGD event, for reference only
    assert quirk.metrics["epsilon"] == pytest.approx(record.metrics["epsilon"])


# --------------------------------------------------------------------------------------------
# (e) Σ r = 16·16·C instead of K
# --------------------------------------------------------------------------------------------
@pytest.mark.extended
def test_redistribution_total_is_the_codes_total_not_k(digits) -> None:
    record, model = _train(digits, "hgm", "hgm-cnn", authors_redistribution_total=True)
    r = find_noise_layer(model).redistribution
    assert tuple(r.shape) == (32, 8, 8)
    assert float(r.double().sum()) == pytest.approx(16 * 16 * 32, rel=1e-4)  # 8,192, not K = 2,048
    assert record.metrics["redistribution_sum"] == pytest.approx(8192, rel=1e-4)
    assert "redistribution-total" in record.claim.description
    _, paper = _train(digits, "hgm", "hgm-cnn")
    assert float(find_noise_layer(paper).redistribution.double().sum()) == pytest.approx(2048, rel=1e-4)
    with pytest.raises(ValueError, match="authors_redistribution_total"):  # a Linear first layer has no channels
        _train(digits, "hgm", "digits-mlp", authors_redistribution_total=True)


# --------------------------------------------------------------------------------------------
# (f) the mixed δ of the certification
# --------------------------------------------------------------------------------------------
def test_mixed_delta_scales_every_radius_by_the_multiplier_ratio() -> None:
    lower = np.array([0.99735, 0.93609, 0.77600, 0.57132, 0.3])
    upper = np.array([0.00265, 0.06391, 0.17165, 0.37806, 0.6])
    per_unit = 0.2 * extended_sigma(epsilon=4.0, delta=0.05)
    honest = certified_radius(lower, upper, noise_per_sensitivity=per_unit, mechanism="extended")
    mix = AuthorsMixedDelta(robustness_epsilon=4.0, robustness_delta=0.05)
    assert mix.reference_delta == 1e-5
    factor = extended_sigma(epsilon=4.0, delta=1e-5) / extended_sigma(epsilon=4.0, delta=0.05)
    assert mix.factor("extended") == pytest.approx(factor, rel=1e-12) and factor > 1.5
    mixed = certified_radius(
        lower, upper, noise_per_sensitivity=per_unit, mechanism="extended", authors_mixed_delta=mix
    )
    assert honest[:4].min() > 0 and honest[4] == 0.0
    assert np.allclose(mixed, honest * factor, rtol=1e-12, atol=0)


def test_mixed_delta_record_and_the_scripts_row(digits, tmp_path: Path) -> None:
    record, model = _train(digits, "hgm", authors_mixed_delta=True)
    cert = thaw(record.config)["certification"]
    assert cert["authors_reference_delta"] == 1e-5 and cert["authors_quirks"] == ["mixed-delta"]
    assert "NOT certificates" in record.claim.description
    run = RunDir(tmp_path / "run").create(command="test")
    save_record(record, model, run.record_dir(record.model_id))
    again = load_record(run.record_dir(record.model_id))  # the extra keys pass the record's validation
    assert thaw(again.config)["certification"]["authors_reference_delta"] == 1e-5
    # The script reports the code's sizes from the stored (honest) certificate.
    radii = np.array([0.0, 0.05, 0.1, 0.2, 0.3])
    stored = CertificationResult(
        method="hgm",
        norm="l2",
        labels=np.zeros(5, dtype=np.int64),
        predictions=np.zeros(5, dtype=np.int64),
        radii=radii,
        num_draws=10,
        confidence=0.95,
    )
    cdir = run.certify_dir(record.model_id)
    cdir.mkdir(parents=True, exist_ok=True)
    save_certification_result(stored, cdir)
    spec = importlib.util.spec_from_file_location("reproduce_hgm_quirks", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    sizes = (0.1, 0.2, 0.3, 0.4)
    got = mod.authors_mixed_delta_accuracy(run, again, sizes)
    factor = AuthorsMixedDelta(robustness_epsilon=4.0, robustness_delta=0.05).factor("extended")
    assert got == {f"{s:g}": float(np.mean(radii * factor >= s)) for s in sizes}
    assert mod.authors_mixed_delta_accuracy(run, _train(digits, "hgm")[0], sizes) is None


def test_reproduction_script_has_rows_with_every_option_on() -> None:
    spec = importlib.util.spec_from_file_location("reproduce_hgm_rows", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    p = {**mod.QUICK, "dp_learning_rate": 0.1, "authors_code": True}
    rows = {label: (defense, kw) for label, defense, kw in mod._models(p)}
    hgm, secure = rows["hgm-authors-code"], rows["secure-sgd-authors-code-eps8"]
    assert hgm[0] == "hgm" and all(hgm[1][name] is True for name in NOISE_LAYER_OPTIONS)
    assert secure[0] == "secure-sgd" and all(secure[1][name] is True for name in AUTHORS_QUIRKS)
    for defense, kw in (hgm, secure):
        assert DEFENSES[defense].config_type(**kw)  # valid configs
    assert not [label for label, *_ in mod._models({**p, "authors_code": False}) if "authors-code" in label]


# --------------------------------------------------------------------------------------------
# Flags and bad values
# --------------------------------------------------------------------------------------------
def test_options_are_flags_saying_what_the_maths_does_instead() -> None:
    parser = argparse.ArgumentParser()
    flags = add_option_flags(parser, {name: spec.config_type for name, spec in DEFENSES.items()})
    for name in AUTHORS_QUIRKS:
        opt = flags["--" + name.replace("_", "-")]
        assert opt.kind is bool and opt.default is False
        assert "AUTHORS' CODE" in opt.help and ("maths" in opt.help or "Theorem" in opt.help)
    args = parser.parse_args(["--authors-noise-scale-r", "--authors-batch-clipping"])
    assert options_from_args(args, SecureSGDConfig, flags, owner="--defense secure-sgd") == {
        "authors_noise_scale_r": True,
        "authors_batch_clipping": True,
    }
    with pytest.raises(ValueError, match="--authors-batch-clipping"):  # not an HGM option
        options_from_args(args, HGMConfig, flags, owner="--defense hgm")
    with pytest.raises(ValueError, match="--authors-noise-scale-r"):  # not a PixelDP option
        options_from_args(
            parser.parse_args(["--authors-noise-scale-r"]),
            DEFENSES["pixeldp"].config_type,
            flags,
            owner="--defense pixeldp",
        )


@pytest.mark.parametrize("name", list(AUTHORS_QUIRKS))
@pytest.mark.parametrize("value", [1, "yes", None])
def test_a_non_bool_option_is_refused_naming_it(name: str, value) -> None:
    config_type = SecureSGDConfig if name == "authors_batch_clipping" else HGMConfig
    with pytest.raises(TypeError) as exc:
        config_type(**{name: value})
    assert name in str(exc.value) and repr(value) in str(exc.value)


def test_inconsistent_or_out_of_range_values_are_refused_naming_them() -> None:
    for name in ("authors_noise_scale_r", "authors_redistribution_total"):
        with pytest.raises(ValueError, match=f"{name}=True needs redistribute=True.*False"):
            HGMConfig(redistribute=False, **{name: True})
    with pytest.raises(ValueError, match="authors_batch_clipping=True does not support DP-PCA, got pca_components=4"):
        SecureSGDConfig(authors_batch_clipping=True, pca_components=4, pca_noise=1.0)
    with pytest.raises(ValueError, match="reference_delta must lie in \\(0, 1\\), got 0.0"):
        AuthorsMixedDelta(robustness_epsilon=4.0, robustness_delta=0.05, reference_delta=0.0)
    with pytest.raises(ValueError, match="robustness_delta must lie in \\(0, 1\\), got 1.5"):
        AuthorsMixedDelta(robustness_epsilon=4.0, robustness_delta=1.5)
    with pytest.raises(ValueError, match="authors_mixed_delta=.*extended"):  # δ_r = 0.6 > 0.484: no extended multiplier
        AuthorsMixedDelta(robustness_epsilon=4.0, robustness_delta=0.6).factor("extended")
    with pytest.raises(TypeError, match="authors_mixed_delta must be an AuthorsMixedDelta or None, got 0.5"):
        certified_radius(
            np.array([0.9]), np.array([0.05]), noise_per_sensitivity=1.0, mechanism="extended", authors_mixed_delta=0.5
        )  # type: ignore[arg-type]
    layer = NoiseLayer(torch.nn.Linear(4, 3), (3,))
    with pytest.raises(ValueError, match="total=5.0"):
        layer.set_noise(0.1, torch.ones(3), total=5.0)
    with pytest.raises(ValueError, match="total must be finite and > 0, got -1.0"):
        layer.set_noise(0.1, torch.ones(3), total=-1.0)
    with pytest.raises(TypeError, match="enabled must be a bool, got 'yes'"):
        layer.fix_noise("yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="redistribution must have shape"):
        layer_sensitivity(layer, input_shape=(4,), redistribution=torch.ones(2))
    with pytest.raises(ValueError, match="total must be finite and > 0, got 0"):
        redistribution_from_gradients(torch.randn(5, 3), total=0)
    assert float(redistribution_from_gradients(torch.randn(5, 3), total=12.0).sum()) == pytest.approx(12.0, rel=1e-6)
