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
        """Also for ``--help`` and ``--version``, which leave through SystemExit."""
        try:
            code: object = main(list(argv))
        except SystemExit as exc:
            code = exc.code if exc.code is not None else 0
        out, err = self.capsys.readouterr()
        return (code if isinstance(code, int) else 1), out, err


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> CLI:
    return CLI(capsys)
