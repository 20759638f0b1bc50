"""Where a library's warning goes: a log, never a verb's output, in the command and in its workers.

A verb's stdout (and, with ``--json``, its one JSON object) and the lines it prints on stderr are
what a user reads; a library's ``UserWarning`` about a legend or a deprecated argument is nothing
the user can act on. :func:`route_library_warnings` sends every warning whose code lies outside
this checkout's packages to the ``dpaudit.library_warnings`` logger — silent, or on stderr as
``library warning: …`` when shown (``dpaudit --debug``) — and leaves dpaudit's own warnings as
Python shows them (they are addressed to the user).

The command installs it for the length of a verb (:mod:`dpaudit.app.library_warnings`); the
executors' workers (shadow models, PATE teachers, audit trials, grid cells: fresh processes that
print to the same terminal) install it in their initialiser with the command's setting, which
:func:`worker_setting` reads. Standard library only.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

__all__ = ["LOGGER_NAME", "is_own_code", "route_library_warnings", "worker_setting", "route_in_worker"]

LOGGER_NAME = "dpaudit.library_warnings"
#: This checkout's packages: a warning raised from a file under one of them is dpaudit's own.
_OWN_PACKAGES = ("dpaudit", "attacks", "defenses", "reports")
_ROOT = Path(__file__).resolve().parents[1]
#: The routing in force in this process: None (none), else whether the log is shown.
_SHOWN: bool | None = None


def is_own_code(filename: str) -> bool:
    """Whether ``filename`` (a warning's origin) is a module of this checkout's packages."""
    try:
        rel = Path(filename).resolve().relative_to(_ROOT)
    except (ValueError, OSError):
        return False
    return bool(rel.parts) and rel.parts[0] in _OWN_PACKAGES


def route_library_warnings(*, show: bool) -> Callable[[], None]:
    """Sends library warnings to the log from now on (to stderr only when ``show``); returns the
    function that undoes it (the logger's handler, level and propagation, and ``showwarning``).

    The warning filters are left as they are (a warning "ignore"d stays ignored; one shown once
    per location is logged once); only where a shown warning goes changes.
    """
    global _SHOWN
    logger = logging.getLogger(LOGGER_NAME)
    handler: logging.Handler = logging.StreamHandler(sys.stderr) if show else logging.NullHandler()
    handler.setFormatter(logging.Formatter("library warning: %(message)s"))
    saved = (logger.level, logger.propagate, warnings.showwarning, _SHOWN)
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False  # never reaches a root handler that would print it
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
    _SHOWN = bool(show)

    def undo() -> None:
        global _SHOWN
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
        warnings.showwarning = saved[2]
        _SHOWN = saved[3]

    return undo


def worker_setting() -> bool | None:
    """What a worker started now should do with library warnings: None (as Python does: no
    routing is in force here, e.g. library use), else whether the log is shown."""
    return _SHOWN


def route_in_worker(show: bool | None) -> None:
    """A worker's initialiser's part: the command's routing (:func:`worker_setting`), once per process."""
    if show is None or _SHOWN is not None:
        return
    route_library_warnings(show=show)
