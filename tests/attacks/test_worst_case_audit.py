"""Black-box audits from a worst-case start (Annamalai & De Cristofaro, NeurIPS 2024; issue 15, item 2).

The auditor pre-trains the model on records that are not audited and starts every training
from there, with full-batch DP-GD (q = 1), so the final models with and without the canary
differ by its T clipped steps against the noise. The planted-bug rows use C = 2, where
"noise not multiplied by C" and "σ halved" both leave half the claimed noise, and a ClipBKD
canary whose gradient reaches C at the start (an all-zero input only moves an MLP's biases).
The design (R = 100 models per side, claimed μ = √20 / 2.98 ≈ 1.5) was chosen on ideal
Gaussian scores, where it catches a 2× noise bug in 40 of 40 seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import stats
from torch import nn

from attacks.audit.canaries import blank_canary, clipbkd_canaries, worst_case_initial_state
from attacks.audit.procedures import multi_run_audit
from attacks.audit.trials import accepts_initial_state
from defenses.dpsgd.training import load_initial_state
from defenses.planted_bugs import PlantedConfig, PlantedDPSGD
from dpaudit.data import load_dataset
from dpaudit.privacy.audit_stats import bound_from_scores, uncorrected_gdp_estimate
from dpaudit.privacy.gaussian import gdp_epsilon
from dpaudit.weights import load_weights, save_weights

DELTA = 1e-5
NUM_MEMBERS, NUM_STEPS, SIGMA, TRIALS = 50, 20, 2.98, 100


@pytest.fixture(scope="module")
def digits():
    torch.set_num_threads(1)
    return load_dataset("digits").train


def _planted(bug: str) -> PlantedDPSGD:
    return PlantedDPSGD(
        bug=bug,
        config=PlantedConfig(
            noise_multiplier=SIGMA, clip_norm=2.0, sampling_rate=1.0, num_steps=NUM_STEPS, learning_rate=0.01
        ),
    )


def _worst_case_audit(trainer, digits, tmp_path, *, seed: int):
    members = digits.subset(digits.ids[:NUM_MEMBERS].numpy())
    auditor = digits.subset(digits.ids[NUM_MEMBERS:].numpy())  # never audited
    start = trainer.build_model(members, seed=0)
    state = tmp_path / "start.safetensors"
    save_weights(state, worst_case_initial_state(start, auditor, seed=0))
    return multi_run_audit(
        train_fn=trainer.train,
        dataset=members,
        canaries=clipbkd_canaries(members, id_offset=10**6),
        claim=trainer.claim(),
        num_trials=TRIALS,
        directory=tmp_path / "audit",
        delta=DELTA,
        bound="gdp",
        seed=seed,
        progress=False,
        initial_state=state,
    )


# ----------------------------------------------------------------------------- the protocol
def _plain(dataset, *, seed):
    return nn.Linear(1, 1)


def _with_state(dataset, *, seed, initial_state=None):
    return nn.Linear(1, 1)


def _with_kwargs(dataset, *, seed, **options):
    return nn.Linear(1, 1)


def test_initial_state_is_optional_in_the_third_party_protocol():
    assert not accepts_initial_state(_plain)
    assert accepts_initial_state(_with_state)
    assert accepts_initial_state(_with_kwargs)
    assert not accepts_initial_state(len)  # a builtin without a Python signature


def test_a_train_fn_given_as_a_file_is_judged_by_its_own_signature(tmp_path):
    from dpaudit.callables import resolve_callable

    fns = tmp_path / "fns.py"
    fns.write_text(
        "def plain(dataset, *, seed):\n    pass\n\n\ndef able(dataset, *, seed, initial_state=None):\n    pass\n"
    )
    # the file wrapper takes (*args, **kwargs); the check must see the function behind it
    assert not accepts_initial_state(resolve_callable(f"{fns}:plain", argument="--train-fn"))
    assert accepts_initial_state(resolve_callable(f"{fns}:able", argument="--train-fn"))
    assert accepts_initial_state(resolve_callable("defenses.planted_bugs:train_noise_halved", argument="--train-fn"))


def test_a_function_without_initial_state_is_refused_before_any_training(digits, tmp_path):
    members = digits.subset(digits.ids[:10].numpy())
    state = tmp_path / "s.safetensors"
    save_weights(state, {"weight": torch.zeros(1, 1)})
    with pytest.raises(ValueError, match="initial_state") as err:
        multi_run_audit(
            train_fn=_plain,
            dataset=members,
            canaries=clipbkd_canaries(members, id_offset=10**6),
            claim=_planted("none").claim(),
            num_trials=1,
            directory=tmp_path / "a",
            delta=DELTA,
            progress=False,
            initial_state=state,
        )
    assert "_plain" in str(err.value)
    assert not (tmp_path / "a" / "trials").exists() or not any((tmp_path / "a" / "trials").iterdir())


def test_a_state_that_does_not_fit_names_what_differs():
    model = nn.Sequential(nn.Linear(3, 2))
    with pytest.raises(ValueError, match=r"missing \['0.bias'\]"):
        load_initial_state(model, {"0.weight": torch.zeros(2, 3)})
    with pytest.raises(ValueError, match=r"0.weight: \(3, 2\) vs \(2, 3\)"):
        load_initial_state(model, {"0.weight": torch.zeros(3, 2), "0.bias": torch.zeros(2)})
    with pytest.raises(TypeError, match="initial_state must be a mapping"):
        load_initial_state(model, [torch.zeros(2, 3)])  # type: ignore[arg-type]


@pytest.mark.extended
def test_every_training_starts_from_the_saved_state(digits, tmp_path):
    trainer = _planted("none")
    members = digits.subset(digits.ids[:NUM_MEMBERS].numpy())
    start = trainer.build_model(members, seed=0)
    state = worst_case_initial_state(start, digits.subset(digits.ids[NUM_MEMBERS:].numpy()), seed=0)
    save_weights(tmp_path / "s.safetensors", state)
    seen = []

    def record(dataset, *, seed, initial_state=None):
        seen.append(initial_state)
        return trainer.build_model(dataset, seed=seed)

    multi_run_audit(
        train_fn=record,
        dataset=members,
        canaries=clipbkd_canaries(members, id_offset=10**6),
        claim=trainer.claim(),
        num_trials=2,
        directory=tmp_path / "a",
        delta=DELTA,
        progress=False,
        initial_state=tmp_path / "s.safetensors",
    )
    assert len(seen) == 4
    for got in seen:
        assert set(got) == set(state)
        for k in state:
            torch.testing.assert_close(got[k], state[k])
    # ... and the noiseless planted loop with zero steps returns exactly that start.
    zero = PlantedDPSGD(bug="none", config=PlantedConfig(num_steps=1, learning_rate=1e-12, sampling_rate=1.0))
    model = zero.train(members, seed=3, initial_state=load_weights(tmp_path / "s.safetensors"))
    for k, t in model.state_dict().items():
        torch.testing.assert_close(t, state[k], atol=1e-6, rtol=0)


def test_the_worst_case_start_is_seeded_and_learns_the_auditor_data(digits):
    aux = digits.subset(digits.ids[200:].numpy())
    build = _planted("none").build_model
    before = build(aux, seed=0)
    with torch.no_grad():
        loss0 = float(nn.functional.cross_entropy(before(aux.features), aux.labels))
    a = worst_case_initial_state(build(aux, seed=0), aux, seed=1, epochs=2, learning_rate=0.1)
    b = worst_case_initial_state(build(aux, seed=0), aux, seed=1, epochs=2, learning_rate=0.1)
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=0, rtol=0)
    after = build(aux, seed=0)
    after.load_state_dict(a)
    with torch.no_grad():
        assert float(nn.functional.cross_entropy(after(aux.features), aux.labels)) < 0.8 * loss0
    with pytest.raises(ValueError, match="learning_rate"):
        worst_case_initial_state(build(aux, seed=0), aux, learning_rate=-1.0)


def test_the_blank_canary_is_zero_and_labelled_with_the_least_likely_class(digits):
    model = _planted("none").build_model(digits, seed=0)
    can = blank_canary(model, input_shape=digits.input_shape, num_classes=digits.num_classes, id_offset=5000)
    assert can.features.shape == (1, *digits.input_shape) and float(can.features.abs().sum()) == 0.0
    with torch.no_grad():
        assert int(can.labels[0]) == int(model(torch.zeros(1, *digits.input_shape)).argmin())
    assert list(can.ids) == [5000]
    with pytest.raises(TypeError, match="torch.nn.Module"):
        blank_canary("model", input_shape=digits.input_shape, num_classes=10, id_offset=0)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the published protocol's figure
def _their_figure(s_in: np.ndarray, s_out: np.ndarray, delta: float) -> float:
    """Written from the paper's description with scipy's binomtest: every score a threshold, CP per rate at 95 %."""
    best = 0.0
    for t in np.unique(np.concatenate([s_in, s_out])):
        fp, fn = int((s_out >= t).sum()), int((s_in < t).sum())
        fpr = stats.binomtest(fp, s_out.size).proportion_ci(confidence_level=0.9).high
        fnr = stats.binomtest(fn, s_in.size).proportion_ci(confidence_level=0.9).high
        mu = stats.norm.isf(fpr) - stats.norm.ppf(fnr)
        if np.isfinite(mu) and mu > 0:
            best = max(best, gdp_epsilon(mu=float(mu), delta=delta))
    return best


@pytest.mark.extended
@pytest.mark.parametrize("seed", range(3))
def test_uncorrected_estimate_is_the_published_protocol_and_exceeds_the_bound(seed):
    rng = np.random.default_rng(seed)
    s_in, s_out = rng.normal(2.0, 1.0, 100), rng.normal(0.0, 1.0, 100)
    est = uncorrected_gdp_estimate(s_in, s_out, delta=DELTA)
    assert est == pytest.approx(_their_figure(s_in, s_out, DELTA), rel=1e-6)
    assert est > bound_from_scores(s_in, s_out, delta=DELTA, method="gdp").epsilon_lb
    assert uncorrected_gdp_estimate(s_out, s_out, delta=DELTA) == 0.0  # null scores
    with pytest.raises(ValueError, match="confidence"):
        uncorrected_gdp_estimate(s_in, s_out, delta=DELTA, confidence=1.5)


# ----------------------------------------------------------------------------- planted bugs (docs/audits/statistics.md
# §6)
@pytest.mark.slow  # 8 s each; test_planted_bugs flags both bugs by default
@pytest.mark.parametrize("bug", ["noise-without-clip-norm", "noise-halved"])
def test_worst_case_audit_flags_the_bugs_that_change_the_noise(bug, digits, tmp_path):
    r = _worst_case_audit(_planted(bug), digits, tmp_path, seed=0)
    assert r.epsilon_ub == pytest.approx(gdp_epsilon(mu=math.sqrt(NUM_STEPS) / SIGMA, delta=DELTA), rel=1e-3)
    assert r.violation, f"{bug}: epsilon_lb {r.epsilon_lb:.3f} <= epsilon_ub {r.epsilon_ub:.3f}"


@pytest.mark.extended
@pytest.mark.parametrize(
    "seed",
    [
        0,
        pytest.param(1, marks=pytest.mark.slow),
        pytest.param(2, marks=pytest.mark.slow),
        pytest.param(3, marks=pytest.mark.slow),
        pytest.param(4, marks=pytest.mark.slow),
    ],
)
def test_worst_case_audit_never_flags_correct_dpsgd(seed, digits, tmp_path):
    r = _worst_case_audit(_planted("none"), digits, tmp_path, seed=seed)
    assert not r.violation, f"seed {seed}: epsilon_lb {r.epsilon_lb:.3f} > epsilon_ub {r.epsilon_ub:.3f}"
    assert r.epsilon_lb > 0  # the design sees the canary at all: a blind audit would pass trivially


# ----------------------------------------------------------------------------- the command line
def _main(capsys, *args):
    from dpaudit.app.cli import main

    capsys.readouterr()
    code = main(list(args))
    return code, capsys.readouterr()


_CHEAP = [
    "--dataset",
    "digits",
    "--model",
    "digits-mlp",
    "--num-members",
    "100",
    "--sampling-rate",
    "1",
    "--num-steps",
    "5",
    "--target-epsilon",
    "4",
    "--num-trials",
    "2",
]


@pytest.mark.cluster  # a CLI audit on a worker pool, run twice (~12 s): the cluster tier (.ci/run) runs it
def test_cli_worst_case_audit_end_to_end_and_a_rerun_reuses_the_start(tmp_path, capsys):
    import json

    argv = [
        "audit",
        "--threat",
        "black-box",
        "--method",
        "multi-run",
        *_CHEAP,
        "--init",
        "worst-case",
        "--canary",
        "blank",
        "--out",
        str(tmp_path / "run"),
        "--json",
    ]
    code, p = _main(capsys, *argv)
    assert code == 0, p.err
    out = json.loads(p.out)
    assert (
        out["method"] == "multi-run"
        and out["ceiling"] is not None
        and out["epsilon_ub"] == pytest.approx(4.0, rel=1e-3)
    )
    assert "crafting the worst-case start" in p.err
    states = list((tmp_path / "run" / "initial-states").glob("*/initial_state.safetensors"))
    assert len(states) == 1
    config = json.loads((tmp_path / "run" / "audits" / out["details"]["audit_name"] / "config.json").read_text())
    assert config["init"] == "worst-case" and config["canary"] == "blank" and config["sampling_rate"] == 1.0
    html = (tmp_path / "run" / "reports" / f"audit-{out['details']['audit_name']}.html").read_text()
    assert "start: worst-case" in html and "canary: blank" in html
    code, p = _main(capsys, *argv)
    assert code == 0 and "reusing the worst-case start" in p.err and "reusing 4 stored trials" in p.err, p.err
    # a random start is another audit (its own name), never mixed with these trials
    code, p = _main(capsys, *[a for a in argv if a not in ("--init", "worst-case")])
    assert code == 0 and json.loads(p.out)["details"]["audit_name"] != out["details"]["audit_name"]


@pytest.mark.parametrize(
    "extra, needle",
    [
        (
            ["--threat", "white-box", "--init", "worst-case"],
            "--init worst-case applies to --threat black-box --method multi-run",
        ),
        (
            ["--threat", "black-box", "--method", "one-run", "--init", "worst-case"],
            "--init worst-case applies to --threat black-box --method multi-run",
        ),
        (["--threat", "black-box", "--init", "best-case"], "--init"),
    ],
)
def test_cli_init_usage_errors_exit_2_in_one_line(extra, needle, tmp_path, capsys):
    code, p = _main(capsys, "audit", *_CHEAP, *extra, "--out", str(tmp_path / "run"))
    assert code == 2 and needle in p.err and "Traceback" not in p.err, p.err
    assert len([line for line in p.err.strip().splitlines() if "error" in line]) == 1, p.err
    assert not (tmp_path / "run" / "audits").exists()  # refused before any work


def test_cli_worst_case_refuses_a_train_fn_without_initial_state(tmp_path, capsys):
    fns = tmp_path / "fns.py"
    fns.write_text(
        "from torch import nn\n\n\ndef train(dataset, *, seed):\n    return "
        "nn.Sequential(nn.Flatten(), nn.Linear(64, 10))\n"
    )
    claim = ["--claim-noise-multiplier", "5", "--claim-sampling-rate", "1", "--claim-num-steps", "10"]
    argv = [
        "audit",
        "--train-fn",
        f"{fns}:train",
        *claim,
        "--dataset",
        "digits",
        "--model",
        "digits-mlp",
        "--num-trials",
        "2",
        "--num-members",
        "60",
        "--init",
        "worst-case",
        "--out",
        str(tmp_path / "run"),
    ]
    code, p = _main(capsys, *argv)
    assert code == 2, p.err
    lines = p.err.strip().splitlines()
    assert len(lines) == 1 and "initial_state" in lines[0] and "--train-fn" in lines[0] and "Traceback" not in p.err, (
        p.err
    )


# Opt-in: ~13 s of Ray start-up on 2 cores; tests/core/test_executors.py keeps the Ray executor in
# the default suite.
@pytest.mark.slow
def test_worst_case_trials_on_ray_match_the_local_ones(tmp_path, capsys):
    """The models fan out on Ray (the start travels inside each job) and give the same audit."""
    import json

    pytest.importorskip("ray")
    base = [
        "audit",
        "--threat",
        "black-box",
        "--method",
        "multi-run",
        *_CHEAP,
        "--init",
        "worst-case",
        "--canary",
        "blank",
        "--json",
        "--quiet",
        "--no-report",
    ]
    results = {}
    for kind in ("serial", "ray"):
        code, p = _main(capsys, *base, "--executor", kind, "--num-workers", "1", "--out", str(tmp_path / kind))
        assert code == 0, p.err
        results[kind] = json.loads(p.out)
        scores = np.load(tmp_path / kind / "audits" / results[kind]["details"]["audit_name"] / "scores.npz")
        results[kind]["scores"] = (scores["in_scores"].tolist(), scores["out_scores"].tolist())
    assert results["ray"]["scores"] == results["serial"]["scores"]
    assert results["ray"]["epsilon_lb"] == results["serial"]["epsilon_lb"]


def test_cli_address_needs_ray(tmp_path, capsys):
    code, p = _main(capsys, "audit", *_CHEAP, "--address", "auto", "--out", str(tmp_path / "run"))
    assert code == 2 and "--address='auto' needs --executor ray" in p.err, p.err


@pytest.mark.extended
def test_more_trials_on_a_rerun_reuse_the_stored_ones(tmp_path, capsys):
    """Trial i depends on i alone, so raising --num-trials trains only the new models (and lowering it uses a
    prefix)."""
    import json

    cheap = [
        a for a in _CHEAP if a not in ("--num-trials", "2", "--target-epsilon", "4")
    ]  # sigma given: no calibration to pay for
    base = [
        "audit",
        "--threat",
        "black-box",
        "--method",
        "multi-run",
        *cheap,
        "--noise-multiplier",
        "3",
        "--json",
        "--no-report",
        "--out",
        str(tmp_path / "run"),
    ]
    code, p = _main(capsys, *base, "--num-trials", "2")
    assert code == 0, p.err
    first = json.loads(p.out)
    trials = tmp_path / "run" / "audits" / first["details"]["audit_name"] / "trials"
    stamps = {f.name: f.stat().st_mtime_ns for f in trials.iterdir()}
    code, p = _main(capsys, *base, "--num-trials", "3")
    assert code == 0 and "reusing 4 stored trials" in p.err, p.err
    grown = json.loads(p.out)
    assert (grown["num_in"], grown["num_out"]) == (3, 3) and grown["details"]["audit_name"] == first["details"][
        "audit_name"
    ]
    assert all(
        trials.joinpath(n).stat().st_mtime_ns == t for n, t in stamps.items()
    )  # the first four were not retrained
    code, p = _main(capsys, *base, "--num-trials", "2")
    assert code == 0 and "reusing 4 stored trials" in p.err
    again = json.loads(p.out)
    assert (again["num_in"], again["epsilon_lb"]) == (first["num_in"], first["epsilon_lb"])
    # anything else that changes the trials is still refused, never mixed in
    from attacks.audit.trials import TrialStore

    with pytest.raises(ValueError, match="differs in seed"):
        TrialStore(
            trials.parent,
            {**json.loads((trials.parent / "config.json").read_text()), "seed": 99},
            resizable=("num_trials",),
        )


_OWN_ARCHITECTURE = """
import torch
from torch import nn


def model():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.Tanh(), nn.Linear(16, 10))


def train(dataset, *, seed, initial_state=None):
    net = model()
    if initial_state is not None:
        net.load_state_dict(initial_state)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        nn.functional.cross_entropy(net(dataset.features), dataset.labels).backward()
        opt.step()
    return net
"""


def test_worst_case_start_on_the_users_own_architecture(tmp_path, capsys):
    """--model-fn builds the architecture a --train-fn trains; without it a zoo start does not fit and says so in one
    line."""
    fns = tmp_path / "fns.py"
    fns.write_text(_OWN_ARCHITECTURE)
    claim = ["--claim-noise-multiplier", "5", "--claim-sampling-rate", "1", "--claim-num-steps", "3"]
    base = [
        "audit",
        "--train-fn",
        f"{fns}:train",
        *claim,
        "--dataset",
        "digits",
        "--num-members",
        "60",
        "--num-trials",
        "2",
        "--init",
        "worst-case",
        "--no-report",
    ]
    code, p = _main(capsys, *base, "--model-fn", f"{fns}:model", "--out", str(tmp_path / "own"))
    assert code == 0, p.err
    assert "crafting the worst-case start" in p.err
    code, p = _main(capsys, *base, "--out", str(tmp_path / "zoo"))  # digits-mlp's start into a 16-unit network
    assert code == 2, p.err
    line = [x for x in p.err.strip().splitlines() if "error" in x]
    assert len(line) == 1 and "size mismatch" in line[0] and "trial 0" in line[0] and "Traceback" not in p.err, p.err
    code, p = _main(capsys, "audit", "--model-fn", f"{fns}:model", *_CHEAP, "--out", str(tmp_path / "x"))
    assert code == 2 and "--model-fn builds the starting architecture of a --train-fn" in p.err, p.err
