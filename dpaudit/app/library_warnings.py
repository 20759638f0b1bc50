"""Warnings raised by libraries (matplotlib, torch, scipy, …) go to a log, never into a verb's output.

A verb's stdout (and, with ``--json``, its one JSON object) and the lines it prints on stderr are
what a user reads; a library's ``UserWarning`` about a legend or a deprecated argument is nothing
the user can act on, and in ``compare``'s output it read as a problem of the run. While a verb
runs, :func:`library_warnings_to_log` sends every warning whose code lies outside this checkout's
packages to the ``dpaudit.library_warnings`` logger: silent by default, shown on stderr with
``dpaudit --debug`` (or ``DPAUDIT_DEBUG=1``). A warning issued by dpaudit's own code is still
shown as Python shows it: it is addressed to the user. The routing itself lives in
:mod:`dpaudit.library_warnings`, which the executors' workers apply too (a worker's warnings
reach the same terminal).

Standard library only: :mod:`dpaudit.app.cli` enters it before anything heavy is imported.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator

from dpaudit.library_warnings import LOGGER_NAME, is_own_code, route_library_warnings

__all__ = ["LOGGER_NAME", "library_warnings_to_log", "is_own_code"]


@contextlib.contextmanager
def library_warnings_to_log(*, show: bool) -> Iterator[logging.Logger]:
    """Within the block, library warnings are logged (to stderr only when ``show``), dpaudit's shown as usual.

    The warning filters are left as they are (a warning "ignore"d stays ignored; one shown once
    per location is logged once); only where a shown warning goes changes. Everything is
    restored on exit. Workers the block's executors start do the same
    (:func:`dpaudit.library_warnings.route_in_worker`).

    Args:
        show: also write the log to stderr (``--debug``).

    Yields:
        The logger the warnings go to.
    """
    with warnings.catch_warnings():  # restores showwarning and the filters on exit
        undo = route_library_warnings(show=show)
        try:
            yield logging.getLogger(LOGGER_NAME)
        finally:
            undo()
