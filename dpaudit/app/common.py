"""What every verb of the command line shares: exit statuses, the one-line usage error, argument
types that validate through :mod:`dpaudit._validate`, the flags every verb declares the same way,
and the one place that prints a result (text, or exactly one JSON object with ``--json``).

Kept free of torch so that ``dpaudit --help`` and ``dpaudit epsilon`` start quickly.
"""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
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
    "fmt_eps_lb",
    "fmt_eps_ub",
    "delta_type",
    "seed_type",
    "positive_int",
    "path_type",
    "path_problem",
    "add_common",
]

EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, EXIT_VIOLATION = 0, 1, 2, 3


class UsageError(Exception):
    """Bad usage or input; becomes one line on stderr (and a JSON object with ``--json``), exit 2.

    Attributes:
        argument: the flag or file the error is about (``--num-shadows``, a path), when known;
            ``--json`` reports it so a script need not parse the message.
        prog: the command the error belongs to (``dpaudit attack membership``), when known.
    """

    def __init__(self, message: str, *, argument: str | None = None, prog: str | None = None) -> None:
        super().__init__(message)
        self.argument = argument
        self.prog = prog


_ARGPARSE_ARGUMENT = re.compile(r"^argument (\S+?):")
_ARGPARSE_REQUIRED = re.compile(r"^the following arguments are required: ([^, ]+)")


class Parser(argparse.ArgumentParser):
    """argparse whose errors become a :class:`UsageError` (one line, exit 2, JSON with ``--json``).

    argparse would print the usage block and exit itself; raising lets :func:`dpaudit.app.cli.main`
    report every usage error the same way, whether argparse or a verb found it.
    """

    def error(self, message: str) -> NoReturn:
        found = _ARGPARSE_ARGUMENT.match(message) or _ARGPARSE_REQUIRED.match(message)
        argument = found.group(1).split("/")[-1] if found else None
        rest = message[found.end() :].lstrip() if found and found.re is _ARGPARSE_ARGUMENT else ""
        if argument and rest.startswith(argument):  # "argument --x: --x=… is …" says the flag twice
            message = rest
        raise UsageError(message, argument=argument, prog=self.prog)


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


#: What ``stat`` says about a path the user gave, as the end of "--flag='...' ...".
_PATH_ERRNO = {
    errno.ELOOP: "is a symbolic link loop (or a chain of too many links)",
    errno.ENAMETOOLONG: "is too long for this file system",
    errno.EACCES: "cannot be reached: permission denied",
    errno.EPERM: "cannot be reached: operation not permitted",
    errno.ENOTDIR: "goes through a file as if it were a directory",
}


def _name_max(p: Path) -> int:
    """The longest file name (bytes) the file system under ``p`` allows; 255 where it does not say."""
    for q in (p, *p.parents):
        try:
            return int(os.pathconf(q, "PC_NAME_MAX"))
        except (OSError, ValueError):
            continue
    return 255


def path_problem(p: Path) -> str | None:
    """Why ``p`` cannot be used as a path at all (too long a name, a link loop, no access), or None.

    A missing path is not a problem here (the caller decides whether it must exist); ``stat``
    follows links, so a loop anywhere along the path shows as ``ELOOP``.
    """
    longest = max((len(os.fsencode(part)) for part in p.parts), default=0)
    if longest > (limit := _name_max(p)):
        return f"has a name of {longest} bytes, more than the {limit} this file system allows"
    try:
        os.stat(p)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return _PATH_ERRNO.get(exc.errno or 0, f"cannot be used: {exc.strerror or exc}")
    return None


def path_type(flag: str, *, must_exist: str | None) -> Callable[[str], str]:
    """An argparse ``type`` for a path: never empty, and checked before any work starts.

    Beyond existence and kind, a path the file system would refuse (a name over ``NAME_MAX``, a
    symbolic link loop, a component without access) is refused here, naming the flag, rather
    than as an ``OSError`` somewhere in the work.

    Args:
        flag: the flag, for the message.
        must_exist: ``"file"``, ``"dir"``, ``"any"`` (a file or a directory), or ``None`` for a
            directory that may be created (``--out``) but must not be an existing file.
    """

    def parse(text: str) -> str:
        if not text.strip():
            raise argparse.ArgumentTypeError(f"{flag} must name a path, got an empty string")
        p = Path(text).expanduser()
        problem = path_problem(p)
        if problem is not None:
            raise argparse.ArgumentTypeError(f"{flag}={v.short(text)} {problem}")
        if must_exist is None:
            if p.exists() and not p.is_dir():
                raise argparse.ArgumentTypeError(f"{flag}={text!r} exists and is not a directory")
            if not p.exists() and p.is_symlink():
                raise argparse.ArgumentTypeError(f"{flag}={text!r} is a symbolic link to nothing (a dangling link)")
        elif not p.exists():
            raise argparse.ArgumentTypeError(f"{flag}={text!r} does not exist")
        elif must_exist == "file" and not p.is_file():
            raise argparse.ArgumentTypeError(f"{flag}={text!r} is not a file")
        elif must_exist == "dir" and not p.is_dir():
            raise argparse.ArgumentTypeError(f"{flag}={text!r} is not a directory")
        return text

    parse.__name__ = flag
    return parse


delta_type = arg("--delta", v.open_unit)
seed_type = positive_int("--seed", 0)


def add_common(
    parser: argparse.ArgumentParser,
    *,
    out: bool = False,
    seed: bool = False,
    data_root: bool = False,
    device: str | None = None,
    quiet: bool = False,
    executor: str | None = None,
) -> None:
    """Declares the flags several verbs share, once, with one wording.

    ``--json`` is always added; the others on request. ``device`` is the default device;
    ``executor`` names what the executor runs (``--executor``, ``--num-workers``, ``--address``).
    """
    if out:
        parser.add_argument(
            "--out",
            required=True,
            type=path_type("--out", must_exist=None),
            metavar="RUN_DIR",
            help="run directory to write into (created if missing; reruns resume)",
        )
    if seed:
        parser.add_argument("--seed", type=seed_type, default=0, help="root seed (default 0)")
    if data_root:
        parser.add_argument(
            "--data-root",
            type=path_type("--data-root", must_exist="dir"),
            metavar="DIR",
            help="data root (default: $DPAUDIT_DATA_ROOT or ~/.dpaudit/data)",
        )
    if device is not None:
        parser.add_argument("--device", default=device, help=f"auto, cpu or cuda[:N] (default {device})")
    if quiet:
        parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
        # The verbs that compute (they are the ones with progress) take the thread plan's flag.
        parser.add_argument(
            "--threads",
            type=positive_int("--threads"),
            metavar="N",
            help="torch intra-op threads of each process (default: the cores available / the "
            "parallel workers, or $DPAUDIT_THREADS / $OMP_NUM_THREADS; see docs/performance.md)",
        )
    if executor is not None:
        from dpaudit.executors import EXECUTORS
        from dpaudit.limits import LIMITS
        from dpaudit.options import limit_action

        parser.add_argument(
            "--executor",
            choices=EXECUTORS,
            default="local",
            help=f"where {executor} train: local process pool (default), ray, or serial (in-process)",
        )
        limit_action(
            parser.add_argument(
                "--num-workers",
                type=positive_int("--num-workers"),
                metavar="W",
                help="parallel workers (default: CPU count)",
            ),
            LIMITS["workers"],
        )
        parser.add_argument(
            "--address", metavar="ADDR", help="Ray cluster address (with --executor ray; default: start a local Ray)"
        )
        parser.add_argument(
            "--ship-code",
            action="store_true",
            help="with --executor ray: send this checkout's packages to every node (Ray "
            "runtime_env py_modules) instead of using the dpaudit installed there; "
            "torch and the other dependencies must still be installed on each node",
        )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def check_executor_flags(args: argparse.Namespace) -> None:
    """``--address`` names a Ray cluster and needs ``--executor ray`` (one line, exit 2, before any work)."""
    if args.address is not None and not args.address.strip():
        raise UsageError(
            "--address must name a Ray cluster (host:port or 'auto'), got an empty string", argument="--address"
        )
    if args.address is not None and args.executor != "ray":
        raise UsageError(
            f"--address={args.address!r} needs --executor ray, got --executor {args.executor}", argument="--address"
        )
    if getattr(args, "ship_code", False) and args.executor != "ray":
        raise UsageError(f"--ship-code needs --executor ray, got --executor {args.executor}", argument="--ship-code")


def check_record(flag: str, path: str) -> Any:
    """The record at ``path`` (a record directory, its record.json, or a run with one record), loaded.

    A missing or corrupt record, or one that contradicts itself (:func:`dpaudit.app.records.verify_record`),
    is the user's file: one line naming ``flag``, before any work.
    """
    from dpaudit.app.records import load_verified_record

    try:
        return load_verified_record(path)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}", argument=flag) from None


def emit(args: argparse.Namespace, payload: Mapping[str, object], text: str) -> None:
    """Prints the result: ``text`` for people, or ``payload`` as one JSON object with ``--json``."""
    from dpaudit.store import to_jsonable

    if getattr(args, "json", False):
        sys.stdout.write(json.dumps(to_jsonable(payload), allow_nan=False) + "\n")
    else:
        sys.stdout.write(text.rstrip("\n") + "\n")


def _terminal_digits(x: float) -> int:
    # Four decimals as the terminal always showed, but never fewer than four significant digits:
    # a tiny ε keeps its digits instead of reading 0.0000.
    return 4 if x == 0 or not math.isfinite(x) else max(4, math.floor(math.log10(abs(x))) + 5)


def fmt_eps(x: float) -> str:
    """An ε that is a point estimate (not a bound) for a terminal, to nearest, or ``inf``."""
    from dpaudit.results.numbers import fmt_epsilon

    return "inf" if math.isinf(x) else fmt_epsilon(x, _terminal_digits(x))


def fmt_eps_ub(x: float) -> str:
    """An upper bound (ε_UB, a δ) for a terminal: four decimals (at least four significant digits) rounded *up*, or
    ``inf``.

    Never printed below its value, and a tiny one keeps its digits (2.695e-05, not 0.0000).
    """
    from dpaudit.results.numbers import fmt_upper_bound

    return "inf" if math.isinf(x) else fmt_upper_bound(x, _terminal_digits(x))


def fmt_eps_lb(x: float) -> str:
    """A lower bound (ε_LB, an audit's ceiling) for a terminal: four decimals (at least four significant digits) rounded
    *down*."""
    from dpaudit.results.numbers import fmt_lower_bound

    return "inf" if math.isinf(x) else fmt_lower_bound(x, _terminal_digits(x))
