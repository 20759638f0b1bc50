"""Hostile inputs whose promise is exit 2 (one line naming the flag or key and the value), found by
a review of issue 43; each used to end in a crash, an internal error, or a failure after the work.

Only the command line and the Python API's public names are used here (no module added for the
fix), so that every test runs, and fails, against the code before it. Nothing trains: each case
is a refusal, and the work itself is replaced by a sentinel that fails the test if reached.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from dpaudit.app.cli import main

#: A grid that passes every check: the cases below change one value of it.
GRID = """
name = "g"
dataset = "digits"
model = "digits-mlp"
[[defenses]]
defense = "nonprivate"
epochs = 1
{extra}
"""


class Reached(BaseException):
    """The command got past its checks into the work."""


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    def stop(*args: object, **kwargs: object) -> None:
        raise Reached

    import dpaudit.app.runs.audit as audit_run
    import dpaudit.app.runs.compare as compare_run
    import dpaudit.app.runs.train as train_run

    monkeypatch.setattr(audit_run, "run_audit", stop)
    monkeypatch.setattr(train_run, "train_or_load", stop)
    monkeypatch.setattr(compare_run, "run_compare", stop)
    monkeypatch.setattr(compare_run, "train_job", stop)


def _refused(cli, argv: list[str], *, naming: str) -> str:
    code, out, err = cli.run(*argv)
    lines = err.strip().splitlines()
    assert code == 2, (argv, code, err[-2000:])
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err[-2000:]
    assert naming in lines[0], (naming, lines[0])
    return lines[0]


def _grid(tmp_path: Path, text: str) -> str:
    path = tmp_path / "grid.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _compare(tmp_path: Path, grid: str, *extra: str) -> list[str]:
    return ["compare", "--config", grid, "--out", str(tmp_path / "run"), *extra]


# --------------------------------------------------------------------------- grid values


@pytest.mark.parametrize("text", ["inf", "nan", "-inf"])
@pytest.mark.parametrize("key", ["label", "family"])
def test_grid_texts_that_json_reads_back_as_numbers_are_refused(
    text: str, key: str, cli, no_work, tmp_path: Path
) -> None:
    """A label "inf" trained, then broke the run: its JSON round trip made it a float."""
    from dpaudit.store import from_jsonable

    assert isinstance(from_jsonable(text), float)  # the results' JSON reads these back as numbers
    grid = _grid(
        tmp_path,
        GRID.format(
            extra=f'[[defenses]]\ndefense = "dpsgd"\ntarget_epsilon = 2.0\nepochs = 1\n{key} = {json.dumps(text)}\n'
        ),
    )
    _refused(cli, _compare(tmp_path, grid, "--dry-run"), naming=f"defenses[1].{key}")


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("label = 5", "defenses[1].label"),
        ("family = 5", "defenses[1].family"),
        ('model_options = "x"', "defenses[1].model_options"),
        ("model = 5", "defenses[1].model"),
        ('model = "no-such-model"', "defenses[1].model"),
    ],
)
def test_setting_values_of_the_wrong_type_or_unknown_exit_2_on_a_dry_run(
    line: str, key: str, cli, no_work, tmp_path: Path
) -> None:
    grid = _grid(
        tmp_path, GRID.format(extra=f'[[defenses]]\ndefense = "dpsgd"\ntarget_epsilon = 2.0\nepochs = 1\n{line}\n')
    )
    _refused(cli, _compare(tmp_path, grid, "--dry-run"), naming=key)
    _refused(cli, _compare(tmp_path, grid), naming=key)


@pytest.mark.parametrize(
    ("top", "key"),
    [
        ('model_options = "x"', "model_options"),
        ('device = "tpu:7"', "device"),
        ('device = "meta"', "device"),
        ("device = 5", "device"),
        ('name = "ε-sweep"', "name"),
        ('name = "δ"', "name"),
        ("name = 5", "name"),
        (f'name = "{"n" * 250}"', "name"),
    ],
)
def test_top_level_values_that_fail_after_training_are_refused_on_a_dry_run(
    top: str, key: str, cli, no_work, tmp_path: Path
) -> None:
    """A grid name with ε named the report's files, which allow ASCII only: it failed after every job."""
    text = GRID.format(extra="").replace('name = "g"\n', "")
    grid = _grid(tmp_path, f"{top}\n{text}")
    _refused(cli, _compare(tmp_path, grid, "--dry-run"), naming=key)


def test_a_long_label_is_refused_before_the_work_naming_the_label(cli, no_work, tmp_path: Path) -> None:
    grid = _grid(
        tmp_path,
        GRID.format(
            extra=f'[[defenses]]\ndefense = "dpsgd"\ntarget_epsilon = 2.0\nepochs = 1\nlabel = "{"l" * 250}"\n'
        ),
    )
    _refused(cli, _compare(tmp_path, grid, "--dry-run"), naming="defenses[1].label")


@pytest.mark.parametrize("count", [1001, pytest.param(10**6, marks=pytest.mark.slow)])
def test_radii_above_their_count_limit_are_refused_at_once(count: int, cli, no_work, tmp_path: Path) -> None:
    radii = ", ".join(f"{(i + 1) * 1e-6:.6g}" for i in range(count))
    grid = _grid(tmp_path, GRID.format(extra=f"[attacks.evasion]\nradii = [{radii}]\n"))
    _refused(cli, _compare(tmp_path, grid, "--dry-run"), naming="attacks.evasion.radii")


@pytest.mark.slow
def test_a_million_epochs_are_refused_by_a_dry_run_in_seconds(cli, no_work, tmp_path: Path) -> None:
    """A 10⁶-long epochs list hung a dry run (which implied --i-know) where the real run refused in 6 s."""
    epochs = ", ".join(str(1 + i % 50) for i in range(10**6))
    grid = _grid(
        tmp_path, GRID.format(extra=f'[[defenses]]\ndefense = "dpsgd"\ntarget_epsilon = 2.0\nepochs = [{epochs}]\n')
    )
    message = _refused(cli, _compare(tmp_path, grid, "--dry-run"), naming="--i-know")
    assert "jobs" in message


def test_dry_run_applies_the_limits_of_the_real_run(cli, no_work, tmp_path: Path) -> None:
    """A grid above the job limit the real run refuses is refused by its dry run too (it implied --i-know)."""
    seeds = ", ".join(str(i) for i in range(300))  # 2 settings x 300 seeds x (training + membership) = 1,200 jobs
    many = _grid(
        tmp_path,
        GRID.format(
            extra='[[defenses]]\ndefense = "dpsgd"\ntarget_epsilon = 2.0\nepochs = '
            '1\n[attacks.membership]\nattacks = ["loss"]\n'
        ).replace('name = "g"', f'name = "g"\nseeds = [{seeds}]'),
    )
    _refused(cli, _compare(tmp_path, many), naming="--i-know")
    _refused(cli, _compare(tmp_path, many, "--dry-run"), naming="--i-know")


@pytest.mark.parametrize("depth", [2000, 10000])
def test_arrays_nested_thousands_deep_in_a_grid_exit_2(depth: int, cli, no_work, tmp_path: Path) -> None:
    grid = _grid(
        tmp_path,
        GRID.format(
            extra=f'[[defenses]]\ndefense = "dpsgd"\ntarget_epsilon = 2.0\nepochs = {"[" * depth}1{"]" * depth}\n'
        ),
    )
    _refused(cli, _compare(tmp_path, grid, "--dry-run"), naming="--config")


def test_parse_grid_refuses_data_nested_deeper_than_it_can_walk() -> None:
    from dpaudit.api import parse_grid
    from dpaudit.app.runs.compare import GridError

    deep: list = []
    inner = deep
    for _ in range(5000):
        inner.append([])
        inner = inner[0]
    with pytest.raises(GridError):
        parse_grid({"defenses": [{"defense": "nonprivate", "epochs": 1}], "model_options": {"hidden": deep}})


# --------------------------------------------------------------------------- overflow


@pytest.mark.parametrize("epsilon", [1000.0, 1e9, 1e300])
def test_dp_defaults_for_huge_target_epsilons_are_finite(epsilon: float) -> None:
    """--target-epsilon 1000 (or 1e9) raised OverflowError: e^ε overflows a float from ε ≈ 710."""
    from dpaudit.api import derive_dp_training

    defaults = derive_dp_training(num_members=718, target_epsilon=epsilon, delta=1e-5)
    small = derive_dp_training(num_members=718, target_epsilon=8.0, delta=1e-5)
    assert math.isfinite(defaults.learning_rate) and defaults.epochs >= small.epochs  # non-decreasing in ε


def test_gdp_mu_solves_its_equation_where_e_to_the_epsilon_overflows() -> None:
    """μ for ε = 1000 still satisfies δ = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (checked in log space, independently)."""
    from scipy.special import log_ndtr, logsumexp

    from defenses.dp_defaults import gdp_mu

    eps, delta = 1000.0, 1e-5
    mu = gdp_mu(eps, delta)
    first, second = log_ndtr(-eps / mu + mu / 2), eps + log_ndtr(-eps / mu - mu / 2)
    achieved = float(np.exp(logsumexp([first, second], b=[1.0, -1.0])))
    assert achieved == pytest.approx(delta, rel=1e-3)


def test_pate_laplace_scale_below_what_floats_hold_exits_2(cli, tmp_path: Path) -> None:
    votes = tmp_path / "votes.npy"
    np.save(votes, np.array([[5, 3, 2], [1, 8, 1], [0, 0, 10]]))
    _refused(cli, ["pate", "analyze", "--votes", str(votes), "--laplace-scale", "1e-300"], naming="--laplace-scale")
    # The refusal sits where the analysis stops being computable: 4/b = ln(largest float).
    edge = 4.0 / math.log(sys.float_info.max)
    _refused(
        cli, ["pate", "analyze", "--votes", str(votes), "--laplace-scale", repr(edge * 0.99)], naming="--laplace-scale"
    )
    code, _, err = cli.run("pate", "analyze", "--votes", str(votes), "--laplace-scale", repr(edge * 1.01))
    assert code == 0, err


# --------------------------------------------------------------------------- devices, executors, Ctrl-C


@pytest.mark.parametrize("device", ["mps", "meta", "xpu", "cuda:99"])
def test_devices_this_suite_cannot_run_on_exit_2(device: str, cli, no_work, tmp_path: Path) -> None:
    argv = [
        "train",
        "--defense",
        "nonprivate",
        "--model",
        "digits-mlp",
        "--epochs",
        "1",
        "--device",
        device,
        "--out",
        str(tmp_path / "run"),
    ]
    _refused(cli, argv, naming="--device")


@pytest.mark.parametrize("verb", ["compare", "train"])
def test_executor_ray_without_ray_exits_2(
    verb: str, cli, no_work, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a, **k: None if name == "ray" else real(name, *a, **k)
    )
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails, as without Ray
    if verb == "compare":
        argv = _compare(tmp_path, _grid(tmp_path, GRID.format(extra="")), "--executor", "ray")
    else:
        argv = [
            "train",
            "--defense",
            "pate",
            "--model",
            "digits-mlp",
            "--executor",
            "ray",
            "--out",
            str(tmp_path / "run"),
        ]
    _refused(cli, argv, naming="--executor")


def test_ctrl_c_while_starting_is_one_line_and_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import dpaudit.app.cli as cli_module

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "build_parser", interrupted)
    assert main(["epsilon", "--noise-multiplier", "1", "--sampling-rate", "0.01", "--num-steps", "10"]) == 130
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "interrupted" in err


def test_the_entry_point_loads_no_heavy_module_before_main() -> None:
    """What the console script imports before ``main`` runs is outside any handler: keep it to the standard library."""
    import subprocess

    code = "import sys, dpaudit.app.cli; print(sorted(m for m in ('numpy', 'torch', 'scipy') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"


# --------------------------------------------------------------------------- the Python API's specs


def test_python_api_specs_refuse_the_sizes_the_flags_refuse() -> None:
    """AuditSpec(num_trials=10**8), TrainSpec(epochs=10**8), BatterySpec(budget_minutes=1e9),
    CertifySpec(num_draws=10**12) all started."""
    from dpaudit.api import AuditSpec, BatterySpec, CertifySpec, TrainSpec, default_config, dpsgd_claim

    cases = [
        (lambda: AuditSpec(target_epsilon=1.0, num_trials=10**8), "num_trials"),
        (
            lambda: TrainSpec(
                defense="nonprivate", model="digits-mlp", config=default_config("nonprivate", epochs=10**8)
            ),
            "epochs",
        ),
        (
            lambda: BatterySpec(
                train_fn="m:f",
                claim=dpsgd_claim(noise_multiplier=1.0, sampling_rate=0.01, num_steps=10),
                budget_minutes=1e9,
            ),
            "budget_minutes",
        ),
        (lambda: CertifySpec(target="rec", num_draws=10**12), "num_draws"),
        (lambda: CertifySpec(target="rec", radii=tuple(float(i + 1) for i in range(10**6))), "radii"),
    ]
    for make, name in cases:
        with pytest.raises(ValueError, match=name) as caught:
            make()
        assert getattr(caught.value, "argument", None) == name


@pytest.mark.parametrize("name", ["a" * 250, "ε-audit"])
def test_audit_names_no_report_file_can_carry_exit_2_before_the_work(name: str, cli, no_work, tmp_path: Path) -> None:
    """A 250-character --name failed after the audit, blaming --out; one with ε failed at its report (ASCII file
    stems)."""
    argv = [
        "audit",
        "--target-epsilon",
        "1",
        "--num-steps",
        "10",
        "--num-trials",
        "2",
        "--name",
        name,
        "--out",
        str(tmp_path / "run"),
    ]
    _refused(cli, argv, naming="--name")


# --------------------------------------------------------------------------- files


@pytest.mark.parametrize("count", [1001, pytest.param(100_000, marks=pytest.mark.slow)])
def test_a_claim_file_of_many_composed_events_is_refused_at_once(count: int, tmp_path: Path) -> None:
    """100,000 events ran past 240 s in the accountants; the count is known before any event is built."""
    import argparse
    import time

    from dpaudit.app.common import UsageError
    from dpaudit.app.train_fn_flags import claim_from_args

    event = {
        "type": "PoissonSampledDpEvent",
        "sampling_probability": 0.01,
        "event": {"type": "GaussianDpEvent", "noise_multiplier": 1.0},
    }
    path = tmp_path / "claim.json"
    path.write_text(json.dumps({"kind": "dp", "event": {"type": "ComposedDpEvent", "events": [event] * count}}))
    args = argparse.Namespace(
        claim=str(path), claim_noise_multiplier=None, claim_sampling_rate=None, claim_num_steps=None, i_know=False
    )
    started = time.monotonic()
    with pytest.raises(UsageError, match="--claim"):
        claim_from_args(args)
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("depth", [900, 5000])
def test_a_claim_file_nested_deep_is_refused(depth: int, tmp_path: Path) -> None:
    import argparse

    from dpaudit.app.common import UsageError
    from dpaudit.app.train_fn_flags import claim_from_args

    # Written as text: json.dumps itself recurses once per level.
    event = (
        '{"type": "SelfComposedDpEvent", "count": 1, "event": ' * depth
        + '{"type": "GaussianDpEvent", "noise_multiplier": 1.0}'
        + "}" * depth
    )
    path = tmp_path / "claim.json"
    path.write_text('{"kind": "dp", "event": ' + event + "}")
    args = argparse.Namespace(
        claim=str(path), claim_noise_multiplier=None, claim_sampling_rate=None, claim_num_steps=None, i_know=False
    )
    with pytest.raises(UsageError, match="--claim"):
        claim_from_args(args)


@pytest.mark.parametrize("shape", [(40,), (4, 5, 2)])
def test_npy_of_the_wrong_dimension_is_refused_from_its_header(
    shape: tuple[int, ...], cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    votes = tmp_path / "votes.npy"
    np.save(votes, np.ones(shape, dtype=np.int64))

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the array was loaded before its header was checked")

    monkeypatch.setattr(np, "load", never)
    _refused(cli, ["pate", "analyze", "--votes", str(votes), "--sigma", "2"], naming="--votes")
