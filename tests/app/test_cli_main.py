"""CLI contract of `dpaudit` itself: no command, `--help` on every verb, the console script as a process."""

import subprocess
import sys

import pytest

from dpaudit.app.cli import main


def run_exit(capsys, *argv):
    """For argparse errors, which exit via SystemExit."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_no_command_and_help(capsys):
    code, _, err = run_exit(capsys)
    assert code == 2 and "COMMAND" in err
    for verb in ("epsilon", "datasets", "train"):
        code, out, _ = run_exit(capsys, verb, "--help")
        assert code == 0 and "--json" in out


def test_console_script_runs_as_a_process():
    proc = subprocess.run([sys.executable, "-m", "dpaudit.app.cli", "epsilon", "--sampling-rate", "0.5", "--noise-multiplier", "1", "--num-steps", "1", "--delta", "2"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--delta" in proc.stderr and "Traceback" not in proc.stderr
