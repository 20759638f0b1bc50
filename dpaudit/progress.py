"""Progress reporting on stderr for long work (training epochs, shadow models, audit trials).

Deliberately tiny: a counter that rewrites one line on a terminal and prints a line at most
every few seconds otherwise (CI logs), so long runs show they are alive without flooding.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Counts ``total`` units of work and reports to ``stream`` (stderr by default).

    Args:
        total: the number of units expected.
        description: what is being counted ("epochs", "shadow models").
        enabled: set False to silence (``--quiet``).
        stream: where to write; stderr so that ``--json`` stdout stays clean.
        interval: seconds between reports when not on a terminal.
    """

    def __init__(self, total: int, description: str, *, enabled: bool = True, stream: TextIO | None = None, interval: float = 5.0) -> None:
        self.total = max(int(total), 0)
        self.description = description
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.count = 0
        self.start = time.monotonic()
        self._last = 0.0
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def update(self, n: int = 1, **info: object) -> None:
        """Advances by ``n`` units; ``info`` (e.g. loss=0.3) is shown beside the count."""
        self.count += n
        now = time.monotonic()
        done = self.count >= self.total
        if not self.enabled or (not done and now - self._last < (0.2 if self._tty else self.interval)):
            return
        self._last = now
        elapsed = now - self.start
        eta = elapsed / self.count * (self.total - self.count) if self.count else 0.0
        extra = " ".join(f"{k}={val:.4g}" if isinstance(val, float) else f"{k}={val}" for k, val in info.items())
        line = f"{self.description}: {self.count}/{self.total} [{elapsed:.0f}s elapsed, ~{eta:.0f}s left] {extra}".rstrip()
        if self._tty:
            self.stream.write("\r" + line + ("\n" if done else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled and self._tty and self.count < self.total:
            self.stream.write("\n")
