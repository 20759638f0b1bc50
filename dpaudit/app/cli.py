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
import os
import sys
import traceback
from collections.abc import Sequence

from dpaudit.app.common import EXIT_INTERNAL, EXIT_USAGE, Parser, UsageError

__all__ = ["main", "build_parser", "UsageError", "VERBS"]

#: The verbs, in the order ``dpaudit --help`` lists them (modules of ``dpaudit.app.verbs``), with
#: their one-line help. Only the verb being run is imported, so ``dpaudit --help`` and
#: ``dpaudit epsilon`` never load torch or the registries.
VERBS: dict[str, str] = {
    "epsilon": "ε of DP-SGD under each accountant, σ or T for a target ε, one Gaussian mechanism",
    "datasets": "list the datasets available under the data root",
    "train": "train a registered defense and write its record",
    "audit": "empirical ε lower bound of a training procedure against its claimed ε",
    "attack": "run attacks (membership inference) against a trained model",
    "certify": "certified vs conventional accuracy of a noise-layer model, beside evasion attacks",
    "report": "render every stored result of a run directory as HTML and Markdown",
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpaudit`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser(argv)
    except Exception as exc:
        if os.environ.get("DPAUDIT_DEBUG"):
            traceback.print_exc()
        print(f"dpaudit: internal error while starting: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INTERNAL
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"dpaudit {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, TypeError, FileNotFoundError) as exc:
        # Validation errors from the library name the argument and value already.
        if args.debug:
            traceback.print_exc()
        print(f"dpaudit {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"dpaudit {args.command}: interrupted; finished results are kept, rerun to resume", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug or os.environ.get("DPAUDIT_DEBUG"):
            traceback.print_exc()
        print(f"dpaudit {args.command}: internal error: {type(exc).__name__}: {exc} (rerun with --debug for a traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
