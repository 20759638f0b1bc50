"""Audit results, procedures and the ``dpaudit audit`` verb (audit.md §1–5).

Statistical tier: on a simulated Gaussian release with exactly known ε, the white-box per-step
pipeline (canary hooks → scores → bound) gives ε_LB ≤ true ε in ≥ 95 % of seeded repetitions,
and ≈ 0 when IN and OUT are identically distributed.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from dpaudit.data import ArrayDataset
from dpaudit.privacy.audit import (
    AuditResult,
    audit_from_one_run,
    audit_from_scores,
    composed_gdp_epsilon,
    gaussian_step_claim,
    load_audit_result,
    save_audit_result,
)
from dpaudit.privacy.claims import dpsgd_claim
from dpaudit.privacy.gaussian import gaussian_epsilon

ROOT = Path(__file__).resolve().parents[1]
DELTA = 1e-5


def _result(**kw):
    base = dict(epsilon_lb=1.0, confidence=0.95, method="multi-run", bound="gdp", delta=DELTA, threshold_strategy="bonferroni", num_in=10, num_out=10, epsilon_ub=2.0, accountant="pld")
    return AuditResult(**{**base, **kw})


def test_audit_result_properties_and_round_trip(tmp_path):
    r = _result(epsilon_ub_by_accountant={"pld": 2.0, "rdp": 2.3}, epsilon_estimate=1.5, details={"a": [1, 2]})
    assert not r.violation and r.tightness == pytest.approx(0.5)
    assert _result(epsilon_lb=3.0).violation
    assert _result(epsilon_ub=math.inf).tightness == 0.0
    save_audit_result(r, tmp_path)
    back = load_audit_result(tmp_path)
    assert back.to_dict() == r.to_dict()
    inf = _result(epsilon_ub=math.inf)
    save_audit_result(inf, tmp_path / "x")
    assert json.loads((tmp_path / "x" / "result.json").read_text())["epsilon_ub"] == "inf"
    assert load_audit_result(tmp_path / "x").epsilon_ub == math.inf


@pytest.mark.parametrize(
    "kw",
    [
        dict(epsilon_lb=-1.0),
        dict(confidence=1.0),
        dict(method="nope"),
        dict(bound="x"),
        dict(delta=0.0),
        dict(num_in=-1),
        dict(threshold_strategy="best"),
        dict(epsilon_ub=-1.0),
        dict(method="one-run"),
    ],
)
def test_audit_result_validation(kw):
    with pytest.raises((ValueError, TypeError)):
        _result(**kw)


def test_audit_from_scores_and_one_run_keep_estimates_apart():
    rng = np.random.default_rng(0)
    claim = gaussian_step_claim(noise_multiplier=1.0)
    r = audit_from_scores(rng.normal(1, 1, 3000), rng.normal(0, 1, 3000), claim=claim, delta=DELTA, method="white-box", threat_model="white-box")
    assert r.accountant == "pld" and r.epsilon_ub == pytest.approx(gaussian_epsilon(delta=DELTA, sigma=1.0), rel=1e-3)
    assert 0 < r.epsilon_lb < r.epsilon_ub and r.epsilon_estimate is not None
    inc = rng.random(400) < 0.5
    one = audit_from_one_run(rng.normal(size=400) + 5 * inc, inc, claim=dpsgd_claim(sampling_rate=0.01, noise_multiplier=1.0, num_steps=100), delta=DELTA)
    assert one.method == "one-run" and one.violation and one.details["guess_curve"]


def test_composed_estimate_matches_clt_formula():
    from dpaudit.privacy.gaussian import gdp_epsilon

    mu = 0.01 * math.sqrt(1000 * math.expm1(1.0))
    assert composed_gdp_epsilon(mu_step=1.0, sampling_rate=0.01, num_steps=1000, delta=DELTA) == pytest.approx(gdp_epsilon(mu=mu, delta=DELTA))
    assert composed_gdp_epsilon(mu_step=0.0, sampling_rate=0.01, num_steps=10, delta=DELTA) == 0.0


# ----------------------------------------------------------------------------- white-box statistics
class GaussianRelease:
    """A fake DP-SGD whose every step is exactly the Gaussian mechanism about the Dirac canary.

    The canary (magnitude ≥ C) is clipped to C, the release is clip(canary) + N(0, σ²C²):
    μ = 1/σ, so ε of one step is known exactly (Balle & Wang 2018). ``shift`` replaces the
    clipped canary's value (0: identical IN and OUT distributions).
    """

    def __init__(self, sigma: float, steps: int, clip: float = 1.0, shift: float | None = None) -> None:
        self.sigma, self.steps, self.clip, self.shift = sigma, steps, clip, shift

    def build_model(self, dataset):
        return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(dataset.input_shape)), 2))

    def __call__(self, dataset, *, seed, on_step, canary_gradient):
        g = torch.Generator().manual_seed(seed)
        for t in range(self.steps):
            canary = canary_gradient(t)
            w = torch.randn(2, 3, generator=g) * self.sigma * self.clip
            if canary is not None:
                c = canary["1.weight"]
                w += c * min(1.0, self.clip / float(c.norm())) if self.shift is None else (c != 0) * self.shift
            on_step(t, {"1.weight": w, "1.bias": torch.randn(2, generator=g)}, 1)
        return self.build_model(dataset)


def _tiny():
    x = torch.rand(20, 3)
    x[:, 0] = 0  # feature 0 is never on: its weights' clean gradients are structurally zero
    return ArrayDataset(name="tiny", features=x, labels=torch.randint(0, 2, (20,)), ids=np.arange(20), num_classes=2)


@pytest.mark.parametrize(
    "bound, strategy",
    [("gdp", "bonferroni"), ("clopper-pearson", "split"), pytest.param("gdp", "split", marks=pytest.mark.slow), pytest.param("clopper-pearson", "bonferroni", marks=pytest.mark.slow)],
)
def test_white_box_per_step_coverage_on_gaussian_release(tmp_path, bound, strategy):
    from attacks.audit_procedures import white_box_audit

    sigma = 1.0
    true_eps = gaussian_epsilon(delta=DELTA, sigma=sigma)
    data = _tiny()
    reps = 200
    below = 0
    lbs = []
    for rep in range(reps):
        r = white_box_audit(
            trainer=GaussianRelease(sigma, 300),
            dataset=data,
            noise_multiplier=sigma,
            clip_norm=1.0,
            directory=tmp_path / f"{bound}-{strategy}-{rep}",
            delta=DELTA,
            bound=bound,
            strategy=strategy,
            seed=rep,
            progress=False,
        )
        assert r.epsilon_ub == pytest.approx(true_eps, rel=1e-3)
        assert r.details["canary"]["decoupled"]
        below += r.epsilon_lb <= true_eps
        lbs.append(r.epsilon_lb)
    assert below / reps >= 0.95
    assert np.mean(lbs) > 0.2  # the test has power: it is not trivially 0


def test_white_box_identical_distributions_give_about_zero(tmp_path):
    from attacks.audit_procedures import white_box_audit

    r = white_box_audit(trainer=GaussianRelease(1.0, 4000, shift=0.0), dataset=_tiny(), noise_multiplier=1.0, clip_norm=1.0, directory=tmp_path, delta=DELTA, progress=False)
    assert r.epsilon_lb < 0.15


def test_white_box_resumes_finished_trials(tmp_path):
    from attacks.audit_procedures import white_box_audit

    kw = dict(dataset=_tiny(), noise_multiplier=1.0, clip_norm=1.0, directory=tmp_path, delta=DELTA, num_trials=2, progress=False)
    first = white_box_audit(trainer=GaussianRelease(1.0, 100), **kw)
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "trials").iterdir()}
    (tmp_path / "trials" / "trial-00001.npz").unlink()
    second = white_box_audit(trainer=GaussianRelease(1.0, 100), **kw)
    assert (tmp_path / "trials" / "trial-00000.npz").stat().st_mtime_ns == stamps[tmp_path / "trials" / "trial-00000.npz"]
    assert second.epsilon_lb == pytest.approx(first.epsilon_lb)
    with pytest.raises(ValueError, match="different configuration"):
        white_box_audit(trainer=GaussianRelease(1.0, 100), **{**kw, "noise_multiplier": 2.0})


# ----------------------------------------------------------------------------- black-box games
def _memoriser(dataset, *, seed):
    """A 'training' that memorises: a lookup of the training points (maximally non-private)."""

    class Lookup(nn.Module):
        def __init__(self):
            super().__init__()
            self.keys = nn.Parameter(dataset.features.reshape(len(dataset), -1).clone(), requires_grad=False)
            self.labels = dataset.labels.clone()

        def forward(self, x):
            d = torch.cdist(x.reshape(len(x), -1), self.keys)
            hit = d.min(1).values < 1e-6
            out = torch.zeros(len(x), int(dataset.num_classes))
            out[hit, self.labels[d.argmin(1)][hit]] = 20.0
            return out

    return Lookup()


def test_multi_run_and_one_run_flag_a_memoriser(tmp_path):
    from attacks.audit_procedures import multi_run_audit, one_run_audit
    from attacks.canaries import mislabelled_canaries

    data = _tiny()
    pool = ArrayDataset(name="pool", features=torch.rand(300, 3), labels=torch.randint(0, 2, (300,)), ids=np.arange(100, 400), num_classes=2)
    claim = dpsgd_claim(sampling_rate=0.1, noise_multiplier=5.0, num_steps=10)
    one = mislabelled_canaries(pool, num_canaries=1, seed=0, id_offset=1000)
    r = multi_run_audit(train_fn=_memoriser, dataset=data, canaries=one, claim=claim, num_trials=30, directory=tmp_path / "m", delta=DELTA, progress=False)
    assert r.violation and r.num_in == r.num_out == 30
    cans = mislabelled_canaries(pool, num_canaries=200, seed=0, id_offset=1000)
    r1 = one_run_audit(train_fn=_memoriser, dataset=data, canaries=cans, claim=claim, directory=tmp_path / "o", delta=DELTA, progress=False)
    assert r1.violation and r1.method == "one-run"


# ----------------------------------------------------------------------------- CLI
def _cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "dpaudit.app.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def _main(capsys, *args):
    """The CLI in this process (saves the interpreter start-up of a subprocess)."""
    from dpaudit.app.cli import main

    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr()


def test_cli_white_box_audit_json_and_report(tmp_path, capsys):
    out = tmp_path / "run"
    code, p = _main(capsys, "audit", "--threat", "white-box", "--epsilon", "2", "--sampling-rate", "0.05", "--steps", "400", "--num-members", "200", "--out", str(out), "--json", "--quiet")
    assert code == 0, p.err
    d = json.loads(p.out)
    for key in ("epsilon_lb", "epsilon_ub", "accountant", "confidence", "delta", "method", "violation", "tightness"):
        assert key in d
    assert d["method"] == "white-box" and d["epsilon_ub"] == pytest.approx(2.0, rel=1e-6) and not d["violation"]
    html = Path(d["report"])
    assert html.is_file() and html.with_suffix(".md").is_file()
    assert "ε_LB" in html.read_text() and list(html.parent.glob("*.png"))


def test_cli_usage_errors_exit_2(tmp_path):
    p = _cli("audit", "--out", str(tmp_path), "--epsilon", "1", "--noise-multiplier", "2")
    assert p.returncode == 2 and "exactly one" in p.stderr
    p = _cli("audit", "--out", str(tmp_path), "--train-fn", "scripts/opacus_train_fn.py:train")
    assert p.returncode == 2 and "claim" in p.stderr
    p = _cli("audit", "--out", str(tmp_path), "--train-fn", "nosuchmodule_xyz:train", "--claim-noise-multiplier", "1", "--claim-sampling-rate", "0.1", "--claim-steps", "10")
    assert p.returncode == 2 and "nosuchmodule_xyz" in p.stderr
    assert p.stderr.count("\n") == 1


def test_cli_flags_a_broken_training_function_with_exit_3(tmp_path, capsys):
    claim = tmp_path / "claim.json"
    claim.write_text(json.dumps(dpsgd_claim(sampling_rate=0.1, noise_multiplier=5.0, num_steps=10).to_dict()))
    code, p = _main(
        capsys,
        "audit",
        "--train-fn",
        f"{ROOT}/tests/test_audit.py:_memoriser",
        "--claim",
        str(claim),
        "--method",
        "one-run",
        "--canaries",
        "200",
        "--num-members",
        "100",
        "--out",
        str(tmp_path / "run"),
        "--json",
        "--quiet",
        "--no-report",
    )
    assert code == 3, p.err
    assert json.loads(p.out)["violation"] is True


def test_opacus_train_fn_audit(tmp_path, capsys):
    """An Opacus DP-SGD through --train-fn is not flagged; silently broken variants are."""
    pytest.importorskip("opacus")
    args = [
        "--threat",
        "black-box",
        "--method",
        "one-run",
        "--canaries",
        "200",
        "--num-members",
        "300",
        "--claim-noise-multiplier",
        "6.6",
        "--claim-sampling-rate",
        "0.1",
        "--claim-steps",
        "300",
        "--json",
        "--quiet",
        "--no-report",
    ]
    found = {}
    for fn in ("train", "train_no_noise", "train_extra_nonprivate_epochs"):
        code, p = _main(capsys, "audit", "--train-fn", str(ROOT / f"scripts/opacus_train_fn.py:{fn}"), "--out", str(tmp_path / fn), *args)
        assert code in (0, 3), p.err
        found[fn] = json.loads(p.out)
    assert not found["train"]["violation"]
    assert found["train_no_noise"]["violation"] and found["train_extra_nonprivate_epochs"]["violation"]
