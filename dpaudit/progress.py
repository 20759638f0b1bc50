"""Progress reporting on stderr for long work (training, shadow models, audit trials, Monte Carlo).

A thin layer over tqdm, so every long loop of the suite reports the same way: a live bar on a
terminal, and on a pipe or CI log a line at most every ``interval`` seconds (tqdm's
``mininterval``), never on stdout, so ``--json`` output stays one clean object.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from tqdm import tqdm

__all__ = ["Progress", "HEARTBEAT_SECONDS"]

#: Longest a waiting loop stays silent: work that runs elsewhere (a worker process, a Ray node)
#: cannot move the bar, so the waiting side says it is still waiting at least this often.
HEARTBEAT_SECONDS = 10.0


class Progress:
    """Counts ``total`` units of work and reports to ``stream`` (stderr by default).

    Args:
        total: the number of units expected.
        description: what is being counted ("train dpsgd …", "shadow models").
        enabled: set False to silence (``--quiet``).
        stream: where to write; stderr so that ``--json`` stdout stays clean.
        interval: least seconds between reports when not on a terminal.
    """

    def __init__(
        self, total: int, description: str, *, enabled: bool = True, stream: TextIO | None = None, interval: float = 5.0
    ) -> None:
        self.total = max(int(total), 0)
        self.description = description
        self.enabled = enabled
        self.count = 0
        self._last = time.monotonic()
        out = stream if stream is not None else sys.stderr
        tty = bool(getattr(out, "isatty", lambda: False)())
        self._bar: Any = None
        if enabled:
            from dpaudit.threads import say_pending

            say_pending(out)  # the command's thread plan, once, as its first work starts
            self._bar = tqdm(
                total=self.total,
                desc=description,
                file=out,
                mininterval=0.2 if tty else interval,
                # Off a terminal, carriage returns would pile up in logs: one line per report.
                dynamic_ncols=tty,
                ncols=None if tty else 100,
                ascii=not tty,
                leave=True,
            )

    def update(self, n: int = 1, **info: object) -> None:
        """Advances by ``n`` units; ``info`` (e.g. loss=0.3) is shown beside the count."""
        self.count += n
        self._last = time.monotonic()
        if self._bar is None:
            return
        if info:
            self._bar.set_postfix(
                {k: (f"{val:.4g}" if isinstance(val, float) else val) for k, val in info.items()}, refresh=False
            )
        self._bar.update(n)

    def write(self, message: str) -> None:
        """Prints one line above the bar (or plainly when disabled: not at all)."""
        if self._bar is not None:
            self._bar.write(message, file=self._bar.fp)

    @contextmanager
    def heartbeat(self, status: Callable[[], str] | None = None, *, seconds: float | None = None) -> Iterator[None]:
        """While the body waits on work that cannot report here, says so every ``seconds``.

        A line ``<description>: still working: <status()> (<elapsed> since the last update)``
        is written whenever the bar has not moved for ``seconds`` (default
        :data:`HEARTBEAT_SECONDS`), so a long job in a worker process never leaves the
        terminal silent. Without ``status`` the line says how many of the bar's units are
        still to come. Nothing happens when the bar is disabled.
        """
        if status is None:
            status = lambda: f"{self.total - self.count} of {self.total} still running or queued"
        if self._bar is None:
            yield
            return
        wait = HEARTBEAT_SECONDS if seconds is None else float(seconds)
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(wait / 4):
                idle = time.monotonic() - self._last
                if idle >= wait and self._bar is not None:
                    self.write(
                        f"{self.description}: still working: {status()} ({_duration(idle)} since the last update)"
                    )
                    self._last = time.monotonic()

        thread = threading.Thread(target=beat, name="progress-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def close(self) -> None:
        """Finishes the bar (idempotent)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _duration(seconds: float) -> str:
    """``42 s`` or ``3 min 05 s``: short enough for a heartbeat line."""
    whole = int(round(seconds))
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60:02d} s"
