"""The ``dpaudit`` command line: the parser, the verbs it offers and the exit-status contract.

Conventions (DESIGN.md, "Command line"): every verb has ``--help`` and ``--json``; progress
and logs go to stderr; with ``--json`` stdout carries exactly one JSON object whose keys are
the snake_case field names of the result. Exit status: 0 success, 2 bad usage or input (one
line naming the argument and the value, no traceback), 1 an internal failure, 3 an audit
that found ε_LB > ε_UB (or a certificate above what an attack left).

Each verb is one module of :mod:`dpaudit.app.verbs` with ``register(subparsers)``; the heavy
imports (torch, the registries) happen inside the verbs, so ``dpaudit --help`` stays light.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
import traceback
from collections.abc import Iterator, Sequence

from dpaudit.app.common import EXIT_INTERNAL, EXIT_USAGE, Parser, UsageError
from dpaudit.options import LIMIT_ATTR, SizeLimit

__all__ = ["main", "build_parser", "UsageError", "VERBS"]

#: The verbs, in the order ``dpaudit --help`` lists them (modules of ``dpaudit.app.verbs``), with
#: their one-line help. Only the verb being run is imported, so ``dpaudit --help`` and
#: ``dpaudit epsilon`` never load torch or the registries.
VERBS: dict[str, str] = {
    "epsilon": "ε of DP-SGD under each accountant, σ or T for a target ε, one Gaussian mechanism",
    "datasets": "list the datasets available under the data root",
    "train": "train a registered defense and write its record",
    "audit": "empirical ε lower bound of a training procedure against its claimed ε",
    "attack": "run attacks (membership inference, model inversion, DSSGD uploads) against a trained model",
    "certify": "certified vs conventional accuracy of a noise-layer model, beside evasion attacks",
    "compare": "every defense of a grid under the same attacks: privacy evidence, guarantees and utility side by side",
    "report": "render every stored result of a run directory as HTML and Markdown",
    "pate": "PATE: the privacy analysis of a teacher-vote matrix from any implementation",
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``dpaudit`` parser.

    Args:
        argv: the arguments about to be parsed. When they name a verb, only that verb is fully
            registered (the others appear by name and help), which keeps start-up light;
            ``None`` registers every verb fully (for tests that enumerate every flag).
    """
    parser = Parser(prog="dpaudit", description="Attack-and-audit evaluation suite for privacy-preserving deep learning.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on internal errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    chosen = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    for name, summary in VERBS.items():
        if chosen is None or name == chosen:
            importlib.import_module(f"dpaudit.app.verbs.{name}").register(sub)
        else:
            sub.add_parser(name, help=summary)
    for leaf in _leaf_parsers(parser):
        _install_limits(leaf)
    return parser


def _leaf_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser of the tree that runs something (``dpaudit attack membership``, not ``attack``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield parser
    for action in subs:
        for child in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
            yield from _leaf_parsers(child)


def _install_limits(parser: argparse.ArgumentParser) -> None:
    """Documents each size flag's limit in ``--help`` and adds ``--i-know`` where a verb has one.

    The limits live on the flags themselves (:func:`dpaudit.options.option` ``limit=`` for
    generated flags, :func:`dpaudit.options.limit_action` for hand-written ones), so a new
    registered defense or attack brings its own.
    """
    limited = [a for a in parser._actions if getattr(a, LIMIT_ATTR, None) is not None]
    if not limited:
        return
    for action in limited:
        lim: SizeLimit = getattr(action, LIMIT_ATTR)
        action.help = f"{action.help or ''} (at most {_number(lim.maximum)} without --i-know)".strip()
    parser.add_argument("--i-know", action="store_true", help="accept sizes above the documented limits (long runs, large memory)")
    parser.set_defaults(_size_limits=tuple((a.dest, a.option_strings[-1], getattr(a, LIMIT_ATTR)) for a in limited))


def check_size_limits(args: argparse.Namespace) -> None:
    """Refuses a size above its documented limit unless ``--i-know`` was given.

    Raises:
        UsageError: names the flag, the value, the limit and what each unit costs.
    """
    if getattr(args, "i_know", False):
        return
    for dest, flag, lim in getattr(args, "_size_limits", ()):
        value = getattr(args, dest, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > lim.maximum:
            raise UsageError(f"{flag}={_number(value)} is above the limit {_number(lim.maximum)} ({lim.why}); pass --i-know to run it anyway", argument=flag)


def check_device(args: argparse.Namespace) -> None:
    """Refuses a ``--device`` this machine does not have before any work starts (exit 2, not 1)."""
    device = getattr(args, "device", None)
    if device is None or device in ("auto", "cpu"):
        return
    from dpaudit.training import resolve_device

    try:
        resolve_device(device)
    except (ValueError, RuntimeError) as exc:
        raise UsageError(f"--device={device!r}: {exc}", argument="--device") from None


def _number(x: float) -> str:
    """A limit or a size as people write it: ``1,000,000`` rather than ``1e+06``."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e18 else f"{x:g}"


#: A library error names its argument first ("num_steps must be ..." or "--radii: ..."); the JSON
#: error object reports it as the flag a user would type.
_LEADING_NAME = re.compile(r"^(--[a-z][a-z0-9-]*|[a-z][a-z0-9_]*)(?=[ :=])")


def _argument_of(exc: BaseException) -> str | None:
    named = getattr(exc, "argument", None)
    if named:
        return str(named)
    found = _LEADING_NAME.match(str(exc))
    if found is None:
        return None
    name = found.group(1)
    return name if name.startswith("--") else "--" + name.replace("_", "-")


def _report_error(argv: Sequence[str], prog: str, message: str, *, argument: str | None, status: int) -> int:
    """One line on stderr; with ``--json`` also one JSON object on stdout (DESIGN.md, "Command line")."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    if "--json" in argv:
        sys.stdout.write(json.dumps({"error": message, "argument": argument, "exit_status": status}) + "\n")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpaudit`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or bool(os.environ.get("DPAUDIT_DEBUG"))
    try:
        parser = build_parser(argv)
    except Exception as exc:
        if debug:
            traceback.print_exc()
        return _report_error(argv, "dpaudit", f"internal error while starting: {type(exc).__name__}: {exc}", argument=None, status=EXIT_INTERNAL)
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return _report_error(argv, exc.prog or "dpaudit", str(exc), argument=exc.argument, status=EXIT_USAGE)
    prog = " ".join(["dpaudit", args.command, *(kind for kind in (getattr(args, "attack_kind", None), getattr(args, "pate_kind", None)) if kind)])
    try:
        check_size_limits(args)
        check_device(args)
        return int(args.func(args))
    except UsageError as exc:
        return _report_error(argv, prog, str(exc), argument=exc.argument, status=EXIT_USAGE)
    except (ValueError, TypeError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError) as exc:
        # Validation errors from the library name the argument (or file) and value already;
        # file errors are about a path the user gave.
        if debug:
            traceback.print_exc()
        message = str(exc) if not isinstance(exc, OSError) or not exc.filename else f"{exc.filename}: {exc.strerror or exc}"
        return _report_error(argv, prog, " ".join(message.split()), argument=_argument_of(exc), status=EXIT_USAGE)
    except KeyboardInterrupt:
        return _report_error(argv, prog, "interrupted; finished results are kept, rerun to resume", argument=None, status=130)
    except Exception as exc:
        if debug:
            traceback.print_exc()
        return _report_error(argv, prog, f"internal error: {type(exc).__name__}: {exc} (rerun with --debug for a traceback)", argument=None, status=EXIT_INTERNAL)


if __name__ == "__main__":
    sys.exit(main())
