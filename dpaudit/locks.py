"""One writer per result: an advisory lock on each unit of a run directory.

Results are written atomically, so two processes writing the same run directory never leave a
torn file; but two audits of *different* configurations started together into the same audit
directory could both find it empty and interleave their trials, and two trainings of the same
record would do the work twice. Each run therefore holds a lock on the unit it writes (an
audit, a record, a certification, a membership result) for as long as it works on it; a
second process asking for the same unit is refused at once with the holder's pid and command,
instead of waiting silently.

The lock is ``fcntl.flock`` on a small file under ``RUN_DIR/.locks/``: the kernel drops it
when its holder exits for any reason (SIGKILL included), so a crash never leaves a stale lock.
On a platform without ``fcntl`` the lock is a no-op (atomic writes still keep files whole).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from dpaudit._validate import InvalidArgument

__all__ = ["RunInUse", "unit_lock", "command_lock"]

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]


class RunInUse(InvalidArgument):
    """Another process is writing the same unit of the run directory (exit status 2)."""

    argument = "out"


def _lock_name(unit: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", unit)[:200] + ".lock"


@contextlib.contextmanager
def unit_lock(run_path: str | os.PathLike[str], unit: str, *, label: str | None = None) -> Iterator[None]:
    """Holds the lock of ``unit`` (e.g. ``"audit-multi-run-1a2b"``) in the run directory.

    ``label`` is how the refusal names the unit (default: ``unit`` itself).

    Raises:
        RunInUse: another live process holds it; the message names its pid and command.
    """
    if fcntl is None:
        yield
        return
    locks = Path(run_path) / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    path = locks / _lock_name(unit)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            raise RunInUse(
                f"{Path(run_path)} is in use: {label or unit} is being written by "
                f"{holder}; wait for it to finish, or use another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} ({' '.join(['dpaudit', *sys.argv[1:]])[:300]})".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def command_lock(run_path: str | os.PathLike[str] | None, key: str) -> Iterator[None]:
    """Holds the lock of one command (``key``: its verb and arguments) on the run directory.

    Taken by the command line from the raw arguments, before it builds the parser (which
    imports torch for some verbs) or loads data, so that a second identical run into the same
    ``--out`` is refused at once rather than after its start-up. The unit locks taken inside the work stay the real
    guarantee
    (different commands may write the same unit); this one only makes the common mistake
    cheap. A run directory this call had to create, and left holding nothing but the lock, is
    removed again, so a command refused later for bad input leaves no empty ``--out``.

    Raises:
        RunInUse: the same command is running into the same directory; names its pid.
    """
    if run_path is None or fcntl is None:
        yield
        return
    run = Path(run_path).expanduser()
    created = [p for p in (run, *run.parents) if not p.exists()]
    with unit_lock(run, key, label="the same command"):
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                (run / ".locks" / _lock_name(key)).unlink()
            for directory in (run / ".locks", *created):  # deepest first; a non-empty one stays
                with contextlib.suppress(OSError):
                    directory.rmdir()
