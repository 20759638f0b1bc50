"""Progress reporting on stderr for long work (training, shadow models, audit trials, Monte Carlo).

A thin layer over tqdm, so every long loop of the suite reports the same way: a live bar on a
terminal, and on a pipe or CI log a line at most every ``interval`` seconds (tqdm's
``mininterval``), never on stdout, so ``--json`` output stays one clean object.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tqdm import tqdm

__all__ = ["Progress"]


class Progress:
    """Counts ``total`` units of work and reports to ``stream`` (stderr by default).

    Args:
        total: the number of units expected.
        description: what is being counted ("train dpsgd …", "shadow models").
        enabled: set False to silence (``--quiet``).
        stream: where to write; stderr so that ``--json`` stdout stays clean.
        interval: least seconds between reports when not on a terminal.
    """

    def __init__(self, total: int, description: str, *, enabled: bool = True, stream: TextIO | None = None, interval: float = 5.0) -> None:
        self.total = max(int(total), 0)
        self.description = description
        self.enabled = enabled
        self.count = 0
        out = stream if stream is not None else sys.stderr
        tty = bool(getattr(out, "isatty", lambda: False)())
        self._bar: Any = None
        if enabled:
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
        if self._bar is None:
            return
        if info:
            self._bar.set_postfix({k: (f"{val:.4g}" if isinstance(val, float) else val) for k, val in info.items()}, refresh=False)
        self._bar.update(n)

    def write(self, message: str) -> None:
        """Prints one line above the bar (or plainly when disabled: not at all)."""
        if self._bar is not None:
            self._bar.write(message, file=self._bar.fp)

    def close(self) -> None:
        """Finishes the bar (idempotent)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
