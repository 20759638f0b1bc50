"""What every verb of the command line shares: exit statuses, the one-line usage error, argument
types that validate through :mod:`dpaudit._validate`, the flags every verb declares the same way,
and the one place that prints a result (text, or exactly one JSON object with ``--json``).

Kept free of torch so that ``dpaudit --help`` and ``dpaudit epsilon`` start quickly.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from dpaudit import _validate as v

__all__ = [
    "EXIT_OK",
    "EXIT_INTERNAL",
    "EXIT_USAGE",
    "EXIT_VIOLATION",
    "UsageError",
    "Parser",
    "arg",
    "emit",
    "fmt_eps",
    "delta_type",
    "seed_type",
    "positive_int",
    "add_common",
]

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_VIOLATION = 0, 1, 2, 3


class UsageError(Exception):
    """Bad usage or input detected after parsing; becomes one line on stderr and exit 2."""


class Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line (no usage dump) and exits 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def arg(name: str, check: Callable[[str, Any], Any], convert: Callable[[str], Any] = float) -> Callable[[str], Any]:
    """An argparse ``type`` that converts, then validates with a shared validator."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {convert.__name__}, got {text!r}") from None
        try:
            return check(name, value)
        except (ValueError, TypeError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = name
    return parse


def positive_int(name: str, minimum: int = 1) -> Callable[[str], Any]:
    """An argparse ``type`` for an integer count of at least ``minimum``."""
    return arg(name, lambda n, x: v.integer(n, x, minimum=minimum), int)


delta_type = arg("--delta", v.open_unit)
seed_type = positive_int("--seed", 0)


def add_common(parser: argparse.ArgumentParser, *, out: bool = False, seed: bool = False, data_root: bool = False, device: str | None = None, quiet: bool = False) -> None:
    """Declares the flags several verbs share, once, with one wording.

    ``--json`` is always added; the others on request. ``device`` is the default device.
    """
    if out:
        parser.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory to write into (created if missing; reruns resume)")
    if seed:
        parser.add_argument("--seed", type=seed_type, default=0, help="root seed (default 0)")
    if data_root:
        parser.add_argument("--data-root", metavar="DIR", help="data root (default: $DPAUDIT_DATA_ROOT or ~/.dpaudit/data)")
    if device is not None:
        parser.add_argument("--device", default=device, help=f"auto, cpu or cuda[:N] (default {device})")
    if quiet:
        parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def emit(args: argparse.Namespace, payload: dict[str, Any], text: str) -> None:
    """Prints the result: ``text`` for people, or ``payload`` as one JSON object with ``--json``."""
    from dpaudit.store import to_jsonable

    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(to_jsonable(payload), allow_nan=False) + "\n")
    else:
        sys.stdout.write(text.rstrip("\n") + "\n")


def fmt_eps(x: float) -> str:
    """ε for a terminal: four decimals, or ``inf``."""
    return "inf" if math.isinf(x) else f"{x:.4f}"
