"""The ``cli`` fixture: run ``dpaudit`` in-process and capture what it printed."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from dpaudit.app.cli import main


@dataclass
class CLI:
    capsys: pytest.CaptureFixture[str]

    def run(self, *argv: str) -> tuple[int, str, str]:
        """Exit status, stdout and stderr of ``dpaudit *argv``."""
        code = main(list(argv))
        out, err = self.capsys.readouterr()
        return code, out, err

    def run_exit(self, *argv: str) -> tuple[int, str, str]:
        """For argparse errors and ``--help``, which leave through SystemExit."""
        with pytest.raises(SystemExit) as exc:
            main(list(argv))
        out, err = self.capsys.readouterr()
        code = exc.value.code
        return (code if isinstance(code, int) else 1), out, err


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> CLI:
    return CLI(capsys)
