"""Code under test cannot decide ``dpaudit check``'s exit status or write its stdout (issue 43, item 5).

Before it: a training function calling ``sys.exit(0)`` made ``check`` exit 0 with empty stdout
(under ``--json`` too) and no ``check.json``; ``sys.exit(3)`` read as a violation;
``raise SystemExit(0)`` at import exited 0; a battery whose every training raised exited 0 "no
violation"; a ``BaseException``, a closed ``sys.stdout`` or an exception whose ``__str__`` raises
ended in a traceback or an internal error; the code's prints landed inside ``--json``'s object; and
a hanging training outlived ``--budget-minutes``. Each case here runs one check (worst-case) on a
file written to ``tmp_path``; failing trainings fail at once, so the module costs a few seconds.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

CLAIM = ["--claim-noise-multiplier", "3", "--claim-sampling-rate", "0.1", "--claim-num-steps", "50"]

HEADER = """\
import os
import sys
import time

import torch.nn as nn


class Boom(BaseException):
    pass


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no words")


def model():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


"""


def _write(tmp_path: Path, body: str, *, top: str = "") -> str:
    path = tmp_path / "mytrain.py"
    path.write_text(
        HEADER
        + top
        + "\n\ndef train(dataset, *, seed, initial_state=None):\n"
        + "".join(f"    {line}\n" for line in body.splitlines())
    )
    return str(path)


def _argv(path: str, tmp_path: Path, *extra: str) -> list[str]:
    return [
        "check",
        "--train-fn",
        f"{path}:train",
        "--model-fn",
        f"{path}:model",
        *CLAIM,
        "--checks",
        "worst-case",
        "--out",
        str(tmp_path / "run"),
        "--no-report",
        *extra,
    ]


@pytest.mark.extended
@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("sys.exit(0)", "mytrain.py:train raised SystemExit: 0"),
        pytest.param(
            "sys.exit(3)", "mytrain.py:train raised SystemExit: 3", marks=pytest.mark.slow
        ),  # as exit(0); the default tier keeps its cost down
        ("raise Boom('out')", "mytrain.py:train raised Boom: out"),
        pytest.param("raise Unprintable()", "mytrain.py:train raised Unprintable in trial 0", marks=pytest.mark.slow),
        ("raise ValueError('every training fails')", "mytrain.py:train raised ValueError: every training fails"),
        ("sys.stdout.close()\nreturn model()", "mytrain.py:train closed sys.stdout"),
        pytest.param(
            "sys.stderr = open(os.devnull, 'w')\nreturn model()",
            "mytrain.py:train replaced sys.stderr",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_training_that_exits_raises_or_takes_the_streams_fails_the_battery_with_exit_2(cli, tmp_path, body, says):
    junit = tmp_path / "results.xml"
    code, out, err = cli.run(*_argv(_write(tmp_path, body), tmp_path, "--json", "--junit", str(junit)))
    assert code == 2, (code, out, err)
    payload = json.loads(out)  # exactly one JSON object, whatever the code did to its streams
    assert payload["exit_status"] == 2 and payload["argument"] == "--train-fn"
    assert says in payload["error"] and "no check got a training through" in payload["error"], payload["error"]
    assert err.count("dpaudit check: error:") == 1 and "Traceback" not in err
    # What was run is still recorded: check.json, and the JUnit file says error, not skipped.
    assert (tmp_path / "run" / "checks" / "check.json").is_file()
    xml = junit.read_text(encoding="utf-8")
    assert '<error message="worst-case: the training failed: ' in xml and "<skipped" not in xml and 'errors="1"' in xml


def test_system_exit_at_import_is_bad_input_naming_the_flag(cli, tmp_path):
    path = _write(tmp_path, "return model()", top="raise SystemExit(0)")
    code, out, err = cli.run(*_argv(path, tmp_path, "--json"))
    assert code == 2, (code, out, err)
    payload = json.loads(out)
    assert payload["argument"] == "--train-fn" and "mytrain.py (at import) raised SystemExit: 0" in payload["error"]


def test_what_the_code_prints_goes_to_stderr_and_json_stays_one_object(cli, tmp_path):
    body = "print('TRAIN-NOISE')\nnet = model()\nnet.load_state_dict(initial_state)\nreturn net"
    path = _write(tmp_path, body, top="print('IMPORT-NOISE')")
    code, out, err = cli.run(*_argv(path, tmp_path, "--json", "--budget-minutes", "0.01"))  # one wave of 4 trainings
    assert code == 0, (code, out, err)
    assert json.loads(out)["outcomes"][0]["num_trials"] >= 4  # parses: nothing else on stdout
    assert "TRAIN-NOISE" not in out and "IMPORT-NOISE" not in out
    assert "TRAIN-NOISE" in err and "IMPORT-NOISE" in err


@pytest.mark.extended
def test_a_hanging_training_is_stopped_at_the_budget_and_counted_failed(cli, tmp_path):
    """--budget-minutes 0.01 (0.6 s) plus the documented 2 s grace: the battery ends, not the test's patience."""
    from attacks.audit.checks.game import GRACE_SECONDS

    junit = tmp_path / "results.xml"
    started = time.monotonic()
    code, out, err = cli.run(
        *_argv(_write(tmp_path, "time.sleep(10**6)"), tmp_path, "--budget-minutes", "0.01", "--junit", str(junit))
    )
    seconds = time.monotonic() - started
    assert code == 2, (code, out, err)
    assert "was stopped" in err and "ran past the battery's time budget" in err
    assert seconds < 0.6 + GRACE_SECONDS + 10  # start-up and the worst-case start on a loaded machine
    assert '<error message="worst-case: the training failed: ' in junit.read_text(encoding="utf-8")


@pytest.mark.slow  # spawns two workers (~10 s of start-up)
def test_in_workers_prints_go_to_stderr_and_exits_are_failures(cli, tmp_path):
    ok = _write(
        tmp_path,
        "print('WORKER-NOISE')\nos.write(1, b'FD-NOISE\\n')\nnet = "
        "model()\nnet.load_state_dict(initial_state)\nreturn net",
    )
    code, out, err = cli.run(*_argv(ok, tmp_path, "--json", "--budget-minutes", "0.05", "--num-workers", "2"))
    assert code == 0, (code, out, err)
    json.loads(out)
    assert "WORKER-NOISE" not in out
    (tmp_path / "run2").mkdir()
    bad = _write(tmp_path, "sys.exit(0)")
    code, out, err = cli.run(
        *[
            a if a != str(tmp_path / "run") else str(tmp_path / "run2")
            for a in _argv(bad, tmp_path, "--json", "--num-workers", "2")
        ]
    )
    assert code == 2 and "mytrain.py:train raised SystemExit: 0" in json.loads(out)["error"], (code, out, err)
    hang = _write(tmp_path, "time.sleep(10**6)")
    started = time.monotonic()
    code, out, err = cli.run(*_argv(hang, tmp_path, "--budget-minutes", "0.01", "--num-workers", "2"))
    # Two workers spawned and warmed, then 0.6 s of budget and the 2 s grace: it ends (before, never).
    assert code == 2 and "was stopped" in err and time.monotonic() - started < 120, (code, out, err)
