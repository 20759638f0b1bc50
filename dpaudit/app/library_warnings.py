"""Warnings raised by libraries (matplotlib, torch, scipy, …) go to a log, never into a verb's output.

A verb's stdout (and, with ``--json``, its one JSON object) and the lines it prints on stderr are
what a user reads; a library's ``UserWarning`` about a legend or a deprecated argument is nothing
the user can act on, and in ``compare``'s output it read as a problem of the run. While a verb
runs, :func:`library_warnings_to_log` sends every warning whose code lies outside this checkout's
packages to the ``dpaudit.library_warnings`` logger: silent by default, shown on stderr with
``dpaudit --debug`` (or ``DPAUDIT_DEBUG=1``). A warning issued by dpaudit's own code is still
shown as Python shows it: it is addressed to the user.

Standard library only: :mod:`dpaudit.app.cli` enters it before anything heavy is imported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

__all__ = ["LOGGER_NAME", "library_warnings_to_log", "is_own_code"]

LOGGER_NAME = "dpaudit.library_warnings"
#: This checkout's packages: a warning raised from a file under one of them is dpaudit's own.
_OWN_PACKAGES = ("dpaudit", "attacks", "defenses", "reports")
_ROOT = Path(__file__).resolve().parents[2]


def is_own_code(filename: str) -> bool:
    """Whether ``filename`` (a warning's origin) is a module of this checkout's packages."""
    try:
        rel = Path(filename).resolve().relative_to(_ROOT)
    except (ValueError, OSError):
        return False
    return bool(rel.parts) and rel.parts[0] in _OWN_PACKAGES


@contextlib.contextmanager
def library_warnings_to_log(*, show: bool) -> Iterator[logging.Logger]:
    """Within the block, library warnings are logged (to stderr only when ``show``), dpaudit's shown as usual.

    The warning filters are left as they are (a warning "ignore"d stays ignored; one shown once
    per location is logged once); only where a shown warning goes changes. Everything is
    restored on exit.

    Args:
        show: also write the log to stderr (``--debug``).

    Yields:
        The logger the warnings go to.
    """
    logger = logging.getLogger(LOGGER_NAME)
    handler: logging.Handler = logging.StreamHandler(sys.stderr) if show else logging.NullHandler()
    handler.setFormatter(logging.Formatter("library warning: %(message)s"))
    saved = (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False  # never reaches a root handler that would print it
    with warnings.catch_warnings():  # restores showwarning and the filters on exit
        original = warnings.showwarning

        def route(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if is_own_code(filename):
                original(message, category, filename, lineno, file, line)
                return
            logger.warning("%s:%s: %s: %s", os.path.basename(filename), lineno, category.__name__, message)

        warnings.showwarning = route
        try:
            yield logger
        finally:
            logger.removeHandler(handler)
            logger.setLevel(saved[0])
            logger.propagate = saved[1]
