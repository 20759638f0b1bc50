"""Issue 48, "training that resumes": a DP-SGD, a Secure-SGD and a PATE training stopped mid-run
and rerun end at the weights (SHA-256) of an uninterrupted run, and say they resumed.

The stop is injected where the run has gone past its last checkpoint: checkpoints are taken
after every step (``DPAUDIT_CHECKPOINT_SECONDS=0``), and the (k+1)-th raises
``KeyboardInterrupt`` instead of writing, so step k+1 is done, lost and redone by the rerun.
A separate test sends a real SIGTERM to a ``dpaudit train`` process.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dpaudit import checkpoint as ck

ROOT = Path(__file__).resolve().parents[2]

DPSGD = ("--defense", "dpsgd", "--epochs", "1", "--lot-size", "64", "--noise-multiplier", "1")
SECURE_SGD = (
    "--defense",
    "secure-sgd",
    "--epochs",
    "1",
    "--lot-size",
    "96",
    "--noise-multiplier",
    "1",
    "--redistribution-pretrain-epochs",
    "2",
)
# A seeded aggregator: by default its noise comes from the operating system, and no two runs
# (interrupted or not) label the student's queries alike.
PATE = (
    "--defense",
    "pate",
    "--teachers",
    "4",
    "--threshold",
    "2",
    "--threshold-sigma",
    "1",
    "--sigma",
    "1",
    "--queries",
    "60",
    "--student-epochs",
    "6",
    "--aggregator-seed",
    "5",
    "--executor",
    "serial",
)


def _argv(flags: tuple[str, ...], out: Path) -> list[str]:
    return ["train", "--dataset", "digits", "--model", "digits-mlp", *flags, "--quiet", "--out", str(out)]


def _weights(out: Path) -> str:
    (weights,) = (out / "records").glob("*/model.safetensors")  # the record itself (PATE's teachers lie deeper)
    return hashlib.sha256(weights.read_bytes()).hexdigest()


def _stop_at(monkeypatch: pytest.MonkeyPatch, phases: dict[str, int]) -> None:
    """The next run stops at the checkpoint after the first ``phases[needle]`` of the phase whose name holds needle."""
    original = ck.Checkpointer.save
    seen: dict[str, int] = {}

    def save(self: ck.Checkpointer, step: int, state: dict) -> None:
        for needle, keep in phases.items():
            if needle in self.what:
                seen[needle] = seen.get(needle, 0) + 1
                if seen[needle] > keep:
                    raise KeyboardInterrupt
        original(self, step, state)

    monkeypatch.setattr(ck.Checkpointer, "save", save)


@pytest.mark.extended
@pytest.mark.parametrize(
    "flags, stops, said",
    [
        (DPSGD, [{"dpsgd": 4}], ["resumed dpsgd training of digits-mlp on digits from step 4 of "]),
        (
            SECURE_SGD,
            # First inside the noise-free pre-training, then inside the DP-SGD steps.
            [{"redistribution": 5}, {"secure-sgd training": 3}],
            [
                "resumed redistribution pretrain training of digits-mlp on digits from step 5 of ",
                "resumed the redistribution vector (noise-free pre-training): reused from the checkpoint of",
                "resumed secure-sgd training of digits-mlp on digits from step 3 of ",
            ],
        ),
        (
            PATE,
            [{"PATE student": 5}],
            [
                "resumed the aggregator's noisy answers: reused from the checkpoint of",
                "resumed the PATE student's training (",
            ],
        ),
    ],
    ids=["dpsgd", "secure-sgd", "pate"],
)
def test_a_stopped_training_rerun_ends_at_the_uninterrupted_weights(cli, tmp_path, monkeypatch, flags, stops, said):
    monkeypatch.setenv(ck.INTERVAL_ENV, "0")
    code, _, err = cli.run(*_argv(flags, tmp_path / "whole"))
    assert code == 0, err
    expected = _weights(tmp_path / "whole")
    out = tmp_path / "stopped"
    messages = ""
    for stop in stops:
        with monkeypatch.context() as m:
            _stop_at(m, stop)
            code, _, err = cli.run(*_argv(flags, out))
        assert code == 130 and "interrupted; finished results are kept, rerun to resume" in err
        assert not list((out / "records").glob("*/record.json"))
        messages += err
    code, _, err = cli.run(*_argv(flags, out))
    assert code == 0, err
    messages += err
    for line in said:
        assert line in messages
    assert _weights(out) == expected
    assert not (out / ck.CHECKPOINTS_DIR).exists()  # removed once the record is written


def _start(argv: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        ck.INTERVAL_ENV: "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    with open(cwd / "stderr.txt", "wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "dpaudit.app.cli", *argv],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
        )


@pytest.mark.extended
def test_sigterm_ends_a_training_like_ctrl_c_and_the_rerun_resumes_it(cli, tmp_path, monkeypatch):
    monkeypatch.setenv(ck.INTERVAL_ENV, "0")
    flags = ("--defense", "dpsgd", "--epochs", "4", "--lot-size", "32", "--noise-multiplier", "1")
    out = tmp_path / "run"
    proc = _start(_argv(flags, out), tmp_path)
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if list(out.glob(f"{ck.CHECKPOINTS_DIR}/*/*.ckpt.pt")):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the training ended before its first checkpoint"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 130
    err = (tmp_path / "stderr.txt").read_text()
    assert err.strip().splitlines()[-1] == (
        "dpaudit train: error: terminated (SIGTERM); finished results are kept, rerun to resume"
    )
    assert "Traceback" not in err

    code, _, err = cli.run(*_argv(flags, out))
    assert code == 0, err
    assert "resumed dpsgd training of digits-mlp on digits from step " in err
    code, _, err = cli.run(*_argv(flags, tmp_path / "whole"))
    assert code == 0, err
    assert _weights(out) == _weights(tmp_path / "whole")


def test_a_bad_checkpoint_interval_is_bad_input_naming_the_variable(cli, tmp_path, monkeypatch):
    monkeypatch.setenv(ck.INTERVAL_ENV, "soon")
    code, _, err = cli.run(*_argv(("--defense", "nonprivate", "--epochs", "1"), tmp_path))
    assert code == 2 and f"{ck.INTERVAL_ENV} must be a number of seconds >= 0, got 'soon'" in err
    assert err.count("\n") == 1 and not list((tmp_path / "records").glob("*/record.json"))
