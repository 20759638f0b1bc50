"""``dpaudit check``: the flags, the exit statuses and what it prints, with the battery replaced by a fixed verdict.

The battery itself (its checks, their speed) is tested with the checks; here ``run_check`` is a
fake returning :func:`tests.check_samples.sample_report`, so the verb's contract is checked in
milliseconds: exit 3 with one line per violated check naming it, exit 0 otherwise, ``--json``
keys the snake_case fields, exit 2 with one line for every bad flag, before any training.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import dpaudit.app.runs.check as check_run
import dpaudit.app.verbs.check as check_verb
from dpaudit.results.check import save_check_report
from tests.check_samples import sample_report

CLAIM = ["--claim-noise-multiplier", "3", "--claim-sampling-rate", "0.1", "--claim-num-steps", "50"]


@pytest.fixture
def train_fn(tmp_path: Path) -> str:
    path = tmp_path / "mytrain.py"
    path.write_text(
        "import torch.nn as nn\n\n\ndef model():\n    return "
        "nn.Sequential(nn.Flatten(), nn.Linear(64, 10))\n\n\ndef train(dataset, "
        "*, seed, initial_state=None):\n    return model()\n"
    )
    return f"{path}:train"


class FakeBattery:
    """Stands in for :func:`dpaudit.app.runs.check.run_check`: records the spec, returns a fixed verdict."""

    def __init__(self, *, violated: bool = True, error: Exception | None = None) -> None:
        self.report = sample_report(violated=violated)
        self.error = error
        self.calls: list[tuple[object, object, bool]] = []

    def __call__(self, spec, run, *, progress=True):
        self.calls.append((spec, run, progress))
        if self.error is not None:
            raise self.error
        save_check_report(self.report, Path(run.path) / "checks")  # where the battery stores its verdict
        return self.report


@pytest.fixture
def battery(monkeypatch: pytest.MonkeyPatch):
    """Install a fake battery (violated by default); ``battery(violated=False)`` replaces it."""

    def install(**kwargs) -> FakeBattery:
        fake = FakeBattery(**kwargs)
        monkeypatch.setattr(check_run, "run_check", fake)
        return fake

    install.current = install()  # type: ignore[attr-defined]
    return install


def _argv(train_fn: str, out: Path, *extra: str) -> list[str]:
    return ["check", "--train-fn", train_fn, *CLAIM, "--out", str(out), "--quiet", *extra]


def test_a_violation_exits_3_with_one_line_per_violated_check_naming_it(cli, battery, train_fn, tmp_path):
    code, out, err = cli.run(*_argv(train_fn, tmp_path / "run", "--no-report"))
    assert code == 3, err
    report = battery.current.report
    violated = [line for line in out.splitlines() if line.strip().startswith("VIOLATED")]
    assert len(violated) == len(report.violations) == 1
    assert report.outcome("worst-case").finding in violated[0] and "worst-case" in violated[0]
    # the passed and inconclusive checks are listed too, never as violations
    for name in ("lot-size", "reused-noise"):
        (line,) = [ln for ln in out.splitlines() if report.outcome(name).finding in ln]
        assert not line.strip().startswith("VIOLATED")
    assert "ceiling 0.6" in out  # an inconclusive check says how far it could see


def test_no_violation_exits_0(cli, battery, train_fn, tmp_path):
    battery(violated=False)
    code, out, err = cli.run(*_argv(train_fn, tmp_path / "run", "--no-report"))
    assert code == 0, err
    assert not [line for line in out.splitlines() if "VIOLATED" in line]
    assert "no violation" in out


def test_the_spec_carries_every_flag(cli, battery, train_fn, tmp_path):
    argv = _argv(
        train_fn,
        tmp_path / "run",
        "--no-report",
        "--delta",
        "1e-6",
        "--confidence",
        "0.9",
        "--budget-minutes",
        "2.5",
        "--checks",
        "reused-noise,worst-case",
        "--seed",
        "7",
        "--num-workers",
        "2",
    )
    assert cli.run(*argv)[0] == 3
    ((spec, run, progress),) = battery.current.calls
    assert isinstance(spec, check_run.BatterySpec)
    assert (spec.train_fn, spec.model_fn, spec.delta, spec.confidence, spec.budget_minutes) == (
        train_fn,
        None,
        1e-6,
        0.9,
        2.5,
    )
    assert (spec.checks, spec.dataset, spec.seed, spec.num_workers) == (("reused-noise", "worst-case"), "digits", 7, 2)
    assert spec.claim.epsilon(delta=1e-5) == pytest.approx(0.97, abs=0.02)  # q=0.1, σ=3, T=50
    assert Path(run.path) == tmp_path / "run" and progress is False


def test_every_registered_check_runs_when_none_is_named(cli, battery, train_fn, tmp_path):
    cli.run(*_argv(train_fn, tmp_path / "run", "--no-report"))
    assert battery.current.calls[0][0].checks == check_verb.registered_checks()


@pytest.mark.extended
def test_json_is_one_object_of_snake_case_fields(cli, battery, train_fn, tmp_path):
    code, out, _ = cli.run(*_argv(train_fn, tmp_path / "run", "--json"))
    assert code == 3, _
    payload = json.loads(out)
    report = battery.current.report
    assert set(report.to_dict()) <= set(payload) and {"check_dir", "report", "junit"} <= set(payload)
    snake = re.compile(r"^[a-z][a-z0-9_]*$")
    assert all(snake.match(k) for k in payload)
    assert all(snake.match(k) for o in payload["outcomes"] for k in o)
    assert payload["exit_status"] == 3 and payload["violated"] is True and payload["junit"] is None
    assert [o["name"] for o in payload["outcomes"]] == [o.name for o in report.outcomes]
    assert Path(payload["report"]).name == "check.html" and Path(payload["report"]).is_file()


def test_junit_is_written_where_asked(cli, battery, train_fn, tmp_path):
    junit = tmp_path / "results.xml"
    code, out, _ = cli.run(*_argv(train_fn, tmp_path / "run", "--no-report", "--junit", str(junit), "--json"))
    assert code == 3 and json.loads(out)["junit"] == str(junit)
    assert b'<testcase classname="dpaudit.check" name="worst-case"' in junit.read_bytes()


def test_an_internal_failure_of_the_battery_exits_1(cli, battery, train_fn, tmp_path):
    battery(error=RuntimeError("boom"))
    code, _, err = cli.run(*_argv(train_fn, tmp_path / "run", "--no-report"))
    assert code == 1 and "internal error" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "flag", "says"),
    [
        (["--claim-noise-multiplier", "3"], "--claim-noise-multiplier", "go together"),
        ([], "--claim", "needs the claim"),
        (["--budget-minutes", "0"], "--budget-minutes", "0"),
        (["--budget-minutes", "-1"], "--budget-minutes", "-1"),
        (["--budget-minutes", "nan"], "--budget-minutes", "nan"),
        (["--budget-minutes", "abc"], "--budget-minutes", "abc"),
        (["--budget-minutes", "100000"], "--budget-minutes", "--i-know"),
        (["--checks", "bogus"], "--checks", "the registered checks are greybox-noise, greybox-normaliser"),
        (["--checks", "reused-noise,,worst-case"], "--checks", "commas"),
        (["--checks", "worst-case,worst-case"], "--checks", "more than once"),
        (["--junit", "{tmp}/missing/results.xml"], "--junit", "does not exist"),
        (["--junit", "{tmp}"], "--junit", "directory"),
        (["--junit", ""], "--junit", "file"),
        (["--confidence", "1.5"], "--confidence", "1.5"),
        (["--delta", "0"], "--delta", "0"),
        (["--dataset", "bogus"], "--dataset", "bogus"),
        (["--num-workers", "0"], "--num-workers", "0"),
    ],
)
def test_bad_flags_exit_2_with_one_line_before_any_training(cli, battery, train_fn, tmp_path, args, flag, says):
    claim = [] if args and args[0].startswith("--claim") or not args else CLAIM
    argv = [
        "check",
        "--train-fn",
        train_fn,
        *claim,
        *[a.format(tmp=tmp_path) for a in args],
        "--out",
        str(tmp_path / "run"),
        "--json",
    ]
    code, out, err = cli.run(*argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert flag in lines[0] and says in lines[0], lines[0]
    assert json.loads(out)["argument"] == flag
    assert battery.current.calls == []


@pytest.mark.parametrize("train", ["", "nocolon", "missing_module_xyz:train", "{tmp}/missing.py:train"])
def test_a_bad_train_fn_exits_2_naming_it(cli, battery, tmp_path, train):
    code, _, err = cli.run("check", "--train-fn", train.format(tmp=tmp_path), *CLAIM, "--out", str(tmp_path / "run"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--train-fn" in err, err
    assert battery.current.calls == []


def test_train_fn_is_required(cli, battery, tmp_path):
    code, _, err = cli.run("check", *CLAIM, "--out", str(tmp_path / "run"))
    assert code == 2 and "--train-fn" in err and len(err.strip().splitlines()) == 1


def test_the_claim_file_and_the_claim_flags_exclude_each_other(cli, battery, train_fn, tmp_path):
    claim = tmp_path / "claim.json"
    claim.write_text("{}")
    code, _, err = cli.run(
        "check", "--train-fn", train_fn, "--claim", str(claim), *CLAIM, "--out", str(tmp_path / "run")
    )
    assert code == 2 and "conflicts" in err and "--claim" in err


def test_the_registered_checks_come_from_the_registry_in_run_order():
    from attacks.audit.checks import CHECKS

    assert check_verb.registered_checks() == tuple(CHECKS.names())
    assert {"worst-case", "lot-size", "reused-noise"} <= set(CHECKS)  # the names the sample verdict uses


ROOT = Path(__file__).resolve().parents[2]


def test_the_ci_example_runs_a_command_this_parser_accepts(tmp_path, monkeypatch):
    """examples/ci/dpaudit-check.yml's `dpaudit check` line parses with today's flags and writes JUnit."""
    import shlex

    import yaml

    from dpaudit.app.cli import build_parser

    workflow = yaml.safe_load((ROOT / "examples" / "ci" / "dpaudit-check.yml").read_text(encoding="utf-8"))
    steps = [s for job in workflow["jobs"].values() for s in job["steps"]]
    (command,) = [s["run"] for s in steps if "run" in s and s["run"].lstrip().startswith("dpaudit check")]
    argv = shlex.split(command)[1:]
    monkeypatch.chdir(tmp_path)
    args = build_parser(argv).parse_args(argv)
    assert args.junit == "results.xml" and args.train_fn and args.model_fn and args.claim_num_steps
    published = [s for s in steps if "junit" in s.get("uses", "")]
    assert published and published[0]["with"]["report_paths"] == args.junit and published[0]["if"] == "always()"


def test_the_documentation_lists_every_registered_check():
    from attacks.audit.checks import CHECKS

    page = (ROOT / "docs" / "audits" / "check.md").read_text(encoding="utf-8")
    missing = [name for name in CHECKS if f"| `{name}` |" not in page]
    assert not missing, f"docs/audits/check.md §2 has no row for {missing}"


@pytest.mark.slow
def test_end_to_end_a_training_without_noise_exits_3_and_its_junit_validates(cli, tmp_path):
    """The real battery (one check, ~30 s on 2 cores) on the catalogue's no-noise bug: exit 3, its line, a valid JUnit
    file, the report page."""
    xmlschema = pytest.importorskip("xmlschema")
    fn = ROOT / "examples" / "dp_bugs" / "no_noise.py"
    junit = tmp_path / "results.xml"
    argv = [
        "check",
        "--train-fn",
        f"{fn}:train",
        "--model-fn",
        f"{fn}:model",
        *CLAIM,
        "--checks",
        "worst-case",
        "--budget-minutes",
        "1",
    ]
    code, out, err = cli.run(*argv, "--junit", str(junit), "--out", str(tmp_path / "run"), "--quiet")
    assert code == 3, err
    (line,) = [ln for ln in out.splitlines() if ln.strip().startswith("VIOLATED")]
    assert "worst-case: eps_LB" in line
    xmlschema.XMLSchema(str(Path(__file__).with_name("junit.xsd"))).validate(str(junit))
    assert (tmp_path / "run" / "reports" / "check.html").is_file()
