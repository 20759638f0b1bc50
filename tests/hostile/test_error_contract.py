"""One error contract (issue 31): bad input exits 2 naming a real flag, a bug exits 1 as an internal error.

A check in the library raises :class:`dpaudit._validate.InvalidArgument` (a ``ValueError``) with
the parameter's name, and the command line reports the flag of the verb being run; any other
exception — a plain ``ValueError`` included — is a bug of dpaudit: exit status 1, "internal
error", and a traceback only with ``--debug``. The flag in ``--json``'s ``argument`` comes from
the parser, never from the message's first word.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest

import dpaudit.app.runs.audit as audit_run
import dpaudit.app.runs.compare as compare_run
import dpaudit.app.runs.train as train_run
import dpaudit.privacy.accountants as accountants
from dpaudit import _validate as v
from dpaudit.privacy.pate import analysis as pate_analysis

EPSILON = ["epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "1", "--num-steps", "10", "--delta", "1e-5"]


@pytest.fixture
def votes(tmp_path: Path) -> str:
    path = tmp_path / "votes.npy"
    np.save(path, np.array([[200, 30, 10, 10, 0, 0, 0, 0, 0, 0]] * 20, dtype=np.int64))
    return str(path)


def _boom(exc: BaseException):
    def fail(*args: object, **kwargs: object) -> None:
        raise exc

    return fail


# (module, attribute to break, argv without --out) for verbs whose work is one call.
INJECTED = [
    (accountants, "compute_epsilon_detailed", EPSILON),
    (audit_run, "run_audit", ["audit", "--noise-multiplier", "1"]),
    (train_run, "train_or_load", ["train", "--defense", "nonprivate", "--model", "digits-mlp"]),
    (pate_analysis, "analyze_gnmax", ["pate", "analyze", "--sigma", "40"]),
]


@pytest.mark.parametrize(
    "exc", [ValueError("boom"), TypeError("boom"), KeyError("boom")], ids=lambda e: type(e).__name__
)
@pytest.mark.parametrize(("module", "name", "argv"), INJECTED, ids=[argv[0] for _, _, argv in INJECTED])
def test_a_bug_inside_the_library_is_an_internal_error(
    module,
    name: str,
    argv: list[str],
    exc: BaseException,
    cli,
    votes: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plain ValueError/TypeError from inside is a bug: exit 1, "internal error", never "bad usage" (exit 2)."""
    monkeypatch.setattr(module, name, _boom(exc))
    full = (
        [*argv, "--votes", votes]
        if argv[0] == "pate"
        else [*argv, "--out", str(tmp_path / "out")]
        if argv[0] != "epsilon"
        else argv
    )
    code, out, err = cli.run(*full, "--json")
    assert code == 1, err
    assert "internal error" in err and "boom" in err and "please report" in err and "--debug" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert json.loads(out) == {"error": err.split("error: ", 1)[1].strip(), "argument": None, "exit_status": 1}
    code, _, err = cli.run("--debug", *full)
    assert code == 1 and "Traceback" in err, err  # --debug shows where it happened


def test_the_same_check_raised_as_invalid_input_is_a_usage_error(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """What makes exit 2 is the exception's type (raised by a check), and --json names the verb's flag for the
    parameter."""
    monkeypatch.setattr(
        accountants,
        "compute_epsilon_detailed",
        _boom(v.invalid("noise_multiplier", "noise_multiplier is refused here")),
    )
    code, out, err = cli.run(*EPSILON, "--json")
    assert code == 2 and json.loads(out)["argument"] == "--noise-multiplier", err
    monkeypatch.setattr(
        accountants,
        "compute_epsilon_detailed",
        _boom(v.invalid("lot_size", "lot_size must be <= the number of members")),
    )
    code, out, err = cli.run(*EPSILON, "--json")
    assert code == 2 and json.loads(out)["argument"] is None, err  # no such flag on `epsilon`: none, not "--lot-size"


@pytest.mark.parametrize(
    "message",
    [
        "the training set is empty",
        "job train-x: boom",
        "o2 must be finite",
        "run directory is corrupt",
        "record file is invalid",
        "weights do not fit",
    ],
)
def test_the_argument_is_never_guessed_from_the_message(message: str, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old CLI made "--the", "--job", "--o2", "--run", "--record", "--weights" out of a message's first word."""
    monkeypatch.setattr(accountants, "compute_epsilon_detailed", _boom(v.invalid(None, message)))
    code, out, err = cli.run(*EPSILON, "--json")
    assert code == 2 and json.loads(out)["argument"] is None, (out, err)


@pytest.mark.parametrize(
    ("grid", "key"),
    [
        ('[[defenses]]\ndefense = ["pixeldp", "agm"]\n', "defenses[0].defense"),
        ('dataset = ["digits"]\n[[defenses]]\ndefense = "dpsgd"\n', "dataset"),
        ('[[defenses]]\ndefense = "dpsgd"\nepochs = -1\n', "defenses[0].epochs"),
        ('seeds = [0, 0]\n[[defenses]]\ndefense = "dpsgd"\n', "seeds"),
    ],
)
def test_a_bad_grid_names_its_key(grid: str, key: str, cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A list where one defense goes was "unhashable type: 'list'" with argument "--unhashable"; now the TOML key."""
    monkeypatch.setattr(compare_run, "run_compare", _boom(AssertionError("the grid was accepted")))
    path = tmp_path / "grid.toml"
    path.write_text(grid)
    code, out, err = cli.run("compare", "--config", str(path), "--out", str(tmp_path / "out"), "--json")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert json.loads(out)["argument"] == key and key.rsplit(".", 1)[-1] in err, (out, err)
    assert not (tmp_path / "out").exists(), "a refused command left its --out behind"


def test_invalid_argument_is_a_value_error_that_survives_pickling() -> None:
    """Library callers keep catching ValueError/TypeError; a process pool carries the argument back."""
    import pickle

    with pytest.raises(ValueError, match="num_steps"):
        v.integer("num_steps", 0, minimum=1)
    with pytest.raises(TypeError):
        v.integer("num_steps", 1.5)
    exc = pickle.loads(pickle.dumps(v.invalid("num_steps", "num_steps must be >= 1")))
    assert isinstance(exc, v.InvalidArgument) and exc.argument == "num_steps" and str(exc) == "num_steps must be >= 1"
    assert pickle.loads(pickle.dumps(compare_run.GridError("seeds: bad", argument="seeds"))).argument == "seeds"


def test_a_sigma_below_the_float_range_gives_infinity_both_ways_without_a_warning(cli, votes: str) -> None:
    """--sigma 1e-300: λ/σ² overflows; both ε are inf (no RuntimeWarning, no finite data-dependent ε beside an infinite
    one)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = cli.run("pate", "analyze", "--votes", votes, "--sigma", "1e-300", "--json")
        assert code == 0, err
        payload = json.loads(out)
        assert payload["epsilon_data_independent"] == "inf" and payload["epsilon_data_dependent_realised"] == "inf", (
            payload
        )
        for analysis in (
            pate_analysis.analyze_gnmax(np.load(votes), sigma=1e-300, delta=1e-5),
            pate_analysis.analyze_gnmax(np.load(votes), sigma=1e-160, delta=1e-5),
            pate_analysis.analyze_confident_gnmax(
                np.load(votes), threshold=200, threshold_sigma=1e-300, sigma=40, delta=1e-5
            ),
        ):
            assert math.isinf(analysis.data_independent.epsilon) and math.isinf(analysis.data_dependent.epsilon)
        code, out, err = cli.run(
            "pate",
            "analyze",
            "--votes",
            votes,
            "--sigma",
            "1e-300",
            "--smooth-sensitivity-beta",
            "0.03",
            "--smooth-sensitivity-sigma",
            "15",
            "--json",
        )
        assert code == 2 and "--sigma" in err and len(err.strip().splitlines()) == 1, err
        assert json.loads(out)["argument"] == "--sigma"
