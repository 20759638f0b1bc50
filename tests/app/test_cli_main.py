"""CLI contract of `dpaudit` itself: no command, `--help` on every verb, the console script as a process."""

import subprocess
import sys


def test_no_command_and_help(cli):
    code, _, err = cli.run_exit()
    assert code == 2 and "COMMAND" in err
    for verb in ("epsilon", "datasets", "train"):
        code, out, _ = cli.run_exit(verb, "--help")
        assert code == 0 and "--json" in out


def test_console_script_runs_as_a_process():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dpaudit.app.cli",
            "epsilon",
            "--sampling-rate",
            "0.5",
            "--noise-multiplier",
            "1",
            "--num-steps",
            "1",
            "--delta",
            "2",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "--delta" in proc.stderr and "Traceback" not in proc.stderr


def test_unusable_paths_are_usage_errors_in_a_process(tmp_path):
    """A name over NAME_MAX was a raw OSError traceback (exit 1); a symlink loop was "does not exist" (issue 31)."""
    (tmp_path / "loop").symlink_to("loop")
    for path, says in ((tmp_path / ("x" * 300), "255"), (tmp_path / "loop", "loop")):
        proc = subprocess.run(
            [sys.executable, "-m", "dpaudit.app.cli", "pate", "analyze", "--votes", str(path), "--sigma", "40"],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (
            proc.stderr
        )
        assert "--votes" in proc.stderr and says in proc.stderr, proc.stderr
