"""The ``dpaudit`` command line: the parser, the verbs it offers and the exit-status contract.

Conventions (docs/architecture.md, "Command line"): every verb has ``--help`` and ``--json``; progress
and logs go to stderr; with ``--json`` stdout carries exactly one JSON object whose keys are
the snake_case field names of the result. Exit status: 0 success, 2 bad usage or input (one
line naming the argument and the value, no traceback), 1 an internal failure, 3 an audit
that found ε_LB > ε_UB (or a certificate above what an attack left).

What counts as bad input is decided by the exception's type, never by its message: a
:class:`~dpaudit.app.common.UsageError`, an :class:`~dpaudit._validate.InvalidArgument` raised
by a check anywhere in the library (it carries the parameter's name, which becomes the verb's
flag in ``--json``'s ``argument``), or the file system refusing a path the user gave (the flag
found from the path). Anything else, a plain ``ValueError`` included, is a bug: exit 1.

Each verb is one module of :mod:`dpaudit.app.verbs` with ``register(subparsers)``; the heavy
imports (torch, the registries) happen inside the verbs, so ``dpaudit --help`` stays light.
This module itself imports only the standard library when loaded (the rest inside
:func:`main`), so that a Ctrl-C in the first moments of a command is caught by :func:`main`
like any later one: exit status 130 and one line, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import importlib
import json
import os
import signal
import stat
import sys
import tempfile
import traceback
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dpaudit.app.common import UsageError
    from dpaudit.limits import SizeLimit

__all__ = ["main", "build_parser", "UsageError", "VERBS", "OUTPUT_FILE", "output_problem", "check_output_paths"]

#: The exit status of an interrupted command (128 + SIGINT, as shells report it).
EXIT_INTERRUPTED = 130


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is (:func:`_on_sigterm`), so it ends as a Ctrl-C does.

    A ``KeyboardInterrupt``: every ``finally`` and lock release runs, the work finished so far (a
    record, a trial, a training's last checkpoint) is kept, and :func:`main` says one line and
    returns :data:`EXIT_INTERRUPTED`.
    """


def _on_sigterm(main_pid: int) -> Any:
    def handler(signum: int, frame: Any) -> None:
        if os.getpid() != main_pid:
            # A forked worker inherited the handler: it ends as SIGTERM ends any process, and its
            # parent (which is told by its own signal, or by the executor) reports the interruption.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        # A second SIGTERM during the clean-up would interrupt it with a traceback: the first one is enough.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated

    return handler


def _interrupted_message(exc: KeyboardInterrupt) -> str:
    cause = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
    return f"{cause}; finished results are kept, rerun to resume"


def __getattr__(name: str) -> Any:
    # ``UsageError`` is re-exported here, but imported only on first use (see the module docstring).
    if name == "UsageError":
        from dpaudit.app.common import UsageError

        return UsageError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The verbs, in the order ``dpaudit --help`` lists them (modules of ``dpaudit.app.verbs``), with
#: their one-line help. Only the verb being run is imported, so ``dpaudit --help`` and
#: ``dpaudit epsilon`` never load torch or the registries.
VERBS: dict[str, str] = {
    "epsilon": "ε of DP-SGD under each accountant, σ or T for a target ε, one Gaussian mechanism",
    "datasets": "list the datasets available under the data root",
    "train": "train a registered defense and write its record",
    "audit": "empirical ε lower bound of a training procedure against its claimed ε",
    "check": "conformance battery: targeted audits that catch DP-training bugs, one verdict per check (JUnit for CI)",
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
    from dpaudit.app.common import Parser

    parser = Parser(
        prog="dpaudit", description="Attack-and-audit evaluation suite for privacy-preserving deep learning."
    )
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


def plan_command_threads(args: argparse.Namespace) -> Any:
    """Decides the command's thread plan (:mod:`dpaudit.threads`), applies it here and says it once.

    The workers are those the verb runs at once: its ``--num-workers`` (the cores available when
    a local pool's is not given), 1 for a serial executor, a verb without workers or a verb
    that says it starts no pool (``uses_pool``). Verbs without ``--threads`` (``epsilon``,
    ``datasets``, ``report``: they compute too little) keep torch's own setting.
    """
    from dpaudit import threads

    flag = getattr(args, "threads", None)
    threads.start_command(flag)
    if not hasattr(args, "threads"):
        return None
    workers = getattr(args, "num_workers", None)
    executor = getattr(args, "executor", None)
    uses_pool = getattr(args, "uses_pool", None)
    if executor == "serial" or executor is None and workers is None or uses_pool is not None and not uses_pool(args):
        workers = 1
    elif workers is None:
        workers = threads.available_cores()
    plan = threads.plan_threads(workers=int(workers))
    threads.apply_threads(plan)
    threads.announce(plan, quiet=bool(getattr(args, "quiet", False)))
    return plan


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
    from dpaudit.options import LIMIT_ATTR

    limited = [a for a in parser._actions if getattr(a, LIMIT_ATTR, None) is not None]
    if not limited:
        return
    for action in limited:
        lim: SizeLimit = getattr(action, LIMIT_ATTR)
        action.help = f"{action.help or ''} (at most {_number(lim.maximum)} without --i-know)".strip()
    parser.add_argument(
        "--i-know", action="store_true", help="accept sizes above the documented limits (long runs, large memory)"
    )
    parser.set_defaults(_size_limits=tuple((a.dest, a.option_strings[-1], getattr(a, LIMIT_ATTR)) for a in limited))


def check_size_limits(args: argparse.Namespace) -> None:
    """Refuses a size above its documented limit unless ``--i-know`` was given (a hard limit: even then).

    Raises:
        UsageError: names the flag, the value, the limit and what each unit costs.
    """
    from dpaudit.app.common import UsageError

    i_know = bool(getattr(args, "i_know", False))
    for dest, flag, lim in getattr(args, "_size_limits", ()):
        value = getattr(args, dest, None)
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and value > lim.maximum
            and (lim.hard or not i_know)
        ):
            tail = "" if lim.hard else "; pass --i-know to run it anyway"
            raise UsageError(
                f"{flag}={_number(value)} is above the limit {_number(lim.maximum)} ({lim.why}){tail}", argument=flag
            )


def check_device(args: argparse.Namespace) -> None:
    """Refuses a ``--device`` this machine does not have before any work starts (exit 2, not 1)."""
    from dpaudit.app.common import UsageError

    device = getattr(args, "device", None)
    if device is None or device in ("auto", "cpu"):
        return
    from dpaudit.training import resolve_device

    try:
        resolve_device(device)
    except (ValueError, RuntimeError) as exc:
        raise UsageError(f"--device={device!r}: {exc}", argument="--device") from None


#: The attribute an argparse action carries when its value is a file the verb writes (``--junit``):
#: :func:`check_output_paths` checks it, with every ``--out``, before any work starts.
OUTPUT_FILE = "dpaudit_output_file"

_KINDS = (
    (stat.S_ISCHR, "character device"),
    (stat.S_ISBLK, "block device"),
    (stat.S_ISFIFO, "named pipe (FIFO)"),
    (stat.S_ISSOCK, "socket"),
)


def _creatable_in(directory: os.PathLike[str] | str) -> str | None:
    """Why no new file can be made in ``directory`` (what an atomic write does first), or None."""
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".dpaudit-probe-")
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    os.unlink(probe)
    return None


def output_problem(text: str, *, directory: bool) -> str | None:
    """Why ``text`` cannot be written as an output (a file, or with ``directory`` a run directory), or None.

    Outputs are written by atomic rename, which would put a regular file in place of whatever is
    there: a device (``/dev/null``, ``/dev/full``), a FIFO or a socket is refused, as is a file
    where a directory is meant and a directory where a file is. The file (or the nearest existing
    directory above a run directory to be made) must lie in a directory that accepts a new file —
    found by making and removing one, so ``/proc/version`` is refused before any work, not after.
    """
    from pathlib import Path

    p = Path(text).expanduser()
    try:
        st: os.stat_result | None = os.stat(p)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return f"cannot be used: {exc.strerror or exc}"
    if st is not None:
        kind = next((name for test, name in _KINDS if test(st.st_mode)), None)
        if kind is not None:
            return (
                f"is a {kind}, not a regular {'directory' if directory else 'file'}; "
                "dpaudit writes its outputs only to regular files and directories"
            )
        if directory and not stat.S_ISDIR(st.st_mode):
            return "exists and is not a directory"
        if not directory and stat.S_ISDIR(st.st_mode):
            return "is a directory; name the file to write"
        if directory:
            why = _creatable_in(p)
            return None if why is None else f"is a directory that refuses new files ({why})"
    parent = p.parent if str(p.parent) else Path(".")
    if directory:  # a run directory is made with its parents: the nearest existing one must take it
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
    if not parent.is_dir():
        return f"cannot be written: its directory {str(parent)!r} does not exist"
    why = _creatable_in(parent)
    if why is not None:
        return f"cannot be written: its directory {str(parent)!r} refuses new files ({why})"
    return None


def check_output_paths(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuses, before any work, an ``--out`` or an output file (:data:`OUTPUT_FILE`) that cannot be written.

    Raises:
        UsageError: names the flag and the value.
    """
    for action in parser._actions:
        value = getattr(args, action.dest, None) if action.dest not in (None, argparse.SUPPRESS) else None
        is_file = bool(getattr(action, OUTPUT_FILE, False))
        if not isinstance(value, str) or not value.strip() or not (is_file or "--out" in action.option_strings):
            continue
        problem = output_problem(value, directory=not is_file)
        if problem is not None:
            flag = action.option_strings[-1]
            from dpaudit.app.common import UsageError

            raise UsageError(f"{flag}={value!r} {problem}", argument=flag)


def check_executor(args: argparse.Namespace) -> None:
    """Refuses ``--executor ray`` where Ray is not installed, before any work (exit 2, as ``attack membership``)."""
    import importlib.util

    from dpaudit.app.common import UsageError

    if getattr(args, "executor", None) == "ray" and importlib.util.find_spec("ray") is None:
        raise UsageError(
            "--executor ray needs Ray, which is not installed here: pip install "
            "'dpaudit[ray]' (or pip install 'ray>=2.9'), or use --executor local",
            argument="--executor",
        )


def _number(x: float) -> str:
    """A limit or a size as people write it: ``1,000,000`` rather than ``1e+06``."""
    from dpaudit.limits import describe_number

    return describe_number(x)


def _leaf_of(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the verb being run (``dpaudit attack membership``), found through the parsed choices."""
    node = parser
    while True:
        subs = [a for a in node._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, subs[0].dest, None) if subs else None
        if chosen is None or chosen not in subs[0].choices:
            return node
        node = subs[0].choices[chosen]


def _flag_of(parser: argparse.ArgumentParser, name: str | None) -> str | None:
    """The flag of ``parser`` that parameter ``name`` (``num_steps``, ``--votes``) came from, or None.

    Looked up among the parser's own actions, never guessed from a message: a library name with
    no flag of this verb (an internal parameter, a field set from a file) gives None.
    """
    if not isinstance(name, str) or not name:
        return None
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if name in action.option_strings:
            return name
        if not action.option_strings and name in (action.dest, action.metavar):
            return str(action.metavar or action.dest)
    wanted = name.lstrip("-").replace("-", "_")
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or action.dest == "help":
            continue
        if action.dest == wanted or f"--{wanted.replace('_', '-')}" in action.option_strings:
            return action.option_strings[-1] if action.option_strings else str(action.metavar or action.dest)
    return None


#: Errors of the file system about a path the user gave (or a file under it): bad input, not a bug.
_USER_ERRNOS = frozenset(
    {
        errno.ENOENT,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EACCES,
        errno.EPERM,
        errno.ENAMETOOLONG,
        errno.ELOOP,
        errno.EROFS,
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EEXIST,
    }
)


def _path_flag(parser: argparse.ArgumentParser, args: argparse.Namespace, filename: object) -> str | None:
    """The flag whose value the path ``filename`` lies in (``--out`` for ``RUN/.locks/x``), or None."""
    if not isinstance(filename, (str, bytes, os.PathLike)):
        return None
    target = os.fsdecode(filename)
    best: tuple[int, str] | None = None
    for action in parser._actions:
        value = getattr(args, action.dest, None) if action.dest not in (None, argparse.SUPPRESS) else None
        if not isinstance(value, str) or not value.strip():
            continue
        paths = {value, value.rpartition(":")[0] or value}  # FILE.py:FUNCTION flags name a file too
        for form in {*paths, *(os.path.abspath(os.path.expanduser(p)) for p in paths)}:
            if (
                target == form
                or target.startswith(form.rstrip(os.sep) + os.sep)
                or (form.endswith(os.sep) and target.startswith(form))
            ):
                flag = action.option_strings[-1] if action.option_strings else str(action.metavar or action.dest)
                if best is None or len(form) > best[0]:
                    best = (len(form), flag)
    return None if best is None else best[1]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _naming(message: str, flag: str | None) -> str:
    """``message``, led by the flag it is about where the library named only its parameter (``upload_fraction must
    ...``)."""
    return f"{flag}: {message}" if flag and flag.startswith("--") and flag not in message else message


def _report_error(argv: Sequence[str], prog: str, message: str, *, argument: str | None, status: int) -> int:
    """One line on stderr; with ``--json`` also one JSON object on stdout (docs/architecture.md, "Command line").

    ``argument`` is a flag of the verb that was run (or a grid's TOML key, or a positional's
    name), or null when the error is about no single flag.
    """
    print(f"{prog}: error: {message}", file=sys.stderr)
    if "--json" in argv:
        sys.stdout.write(json.dumps({"error": message, "argument": argument or None, "exit_status": status}) + "\n")
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dpaudit`` console script; returns the exit status.

    The error contract: a :class:`UsageError`, or an :class:`~dpaudit._validate.InvalidArgument`
    from any check in the library, or the file system refusing a path the user gave, is bad
    input (exit 2, one line, the flag it is about); any other exception is a bug of dpaudit
    (exit 1, "internal error", a traceback with ``--debug``).
    """
    whole_process = argv is None
    from dpaudit.app.library_warnings import library_warnings_to_log

    argv = list(sys.argv[1:] if argv is None else argv)
    previous = None
    try:
        with contextlib.suppress(ValueError):  # ValueError: not the main thread (a test calling main)
            previous = signal.signal(signal.SIGTERM, _on_sigterm(os.getpid()))
        from dpaudit.app import estimate

        # Plans count the command's own start-up in their wall time (dpaudit.app.estimate).
        estimate.start_command(whole_process=whole_process)
        # Library warnings (matplotlib's in compare, …) go to a log shown with --debug, never the output.
        with library_warnings_to_log(show="--debug" in argv or bool(os.environ.get("DPAUDIT_DEBUG"))):
            return _locked_main(argv)
    except KeyboardInterrupt as exc:
        # Caught here, above every import of the suite (this module loads only the standard
        # library), so that even a Ctrl-C (or SIGTERM) during start-up ends in one line and 130.
        return _report_error(
            argv,
            _prog_of(argv),
            _interrupted_message(exc),
            argument=None,
            status=EXIT_INTERRUPTED,
        )
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _locked_main(argv: list[str]) -> int:
    from dpaudit.app.common import EXIT_USAGE
    from dpaudit.locks import RunInUse, command_lock

    with contextlib.ExitStack() as stack:
        # One writer per command and run directory, taken from the raw arguments before anything
        # heavy is imported (building some verbs' parsers imports torch): an identical second run
        # is refused at once. The unit locks inside the work still guard different commands that
        # would write the same result.
        try:
            stack.enter_context(command_lock(_out_of(argv), _command_key(argv)))
        except RunInUse as exc:
            return _report_error(argv, _prog_of(argv), str(exc), argument="--out", status=EXIT_USAGE)
        except OSError:
            pass  # an --out the file system refuses: the parser reports it, naming the flag
        return _main(argv)


def _main(argv: list[str]) -> int:
    from dpaudit._validate import InvalidArgument
    from dpaudit.app.common import EXIT_INTERNAL, EXIT_USAGE, UsageError

    debug = "--debug" in argv or bool(os.environ.get("DPAUDIT_DEBUG"))
    try:
        parser = build_parser(argv)
    except Exception as exc:
        if debug:
            traceback.print_exc()
        return _report_error(
            argv,
            "dpaudit",
            f"internal error while starting: {type(exc).__name__}: {exc}",
            argument=None,
            status=EXIT_INTERNAL,
        )
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return _report_error(argv, exc.prog or "dpaudit", str(exc), argument=exc.argument, status=EXIT_USAGE)
    leaf = _leaf_of(parser, args)
    prog = leaf.prog
    try:
        check_size_limits(args)
        check_device(args)
        check_output_paths(leaf, args)
        check_executor(args)
        plan_command_threads(args)
        return int(args.func(args))
    except UsageError as exc:
        return _report_error(
            argv,
            prog,
            _naming(_one_line(str(exc)), _flag_of(leaf, exc.argument)),
            argument=_flag_of(leaf, exc.argument),
            status=EXIT_USAGE,
        )
    except InvalidArgument as exc:
        if debug:
            traceback.print_exc()
        # A check names a parameter, a flag, a grid key, or the user's file it refused (read_json).
        named = (
            exc.argument
            if getattr(exc, "grid_key", False)
            else _flag_of(leaf, exc.argument) or _path_flag(leaf, args, exc.argument)
        )
        return _report_error(argv, prog, _naming(_one_line(str(exc)), named), argument=named, status=EXIT_USAGE)
    except OSError as exc:
        if debug:
            traceback.print_exc()
        if exc.filename is None or exc.errno not in _USER_ERRNOS:
            if isinstance(
                exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError)
            ):  # e.g. a dataset not found
                return _report_error(argv, prog, _one_line(str(exc)), argument=None, status=EXIT_USAGE)
            return _internal(argv, prog, exc)
        flag = _path_flag(leaf, args, exc.filename)
        name = os.fsdecode(exc.filename)
        shown = name if len(name) <= 120 else name[:60] + "..." + name[-40:]
        message = f"{shown}: {exc.strerror or exc}"
        return _report_error(
            argv, prog, _one_line(f"{flag}: {message}" if flag else message), argument=flag, status=EXIT_USAGE
        )
    except KeyboardInterrupt as exc:
        return _report_error(
            argv,
            prog,
            _interrupted_message(exc),
            argument=None,
            status=EXIT_INTERRUPTED,
        )
    except SystemExit as exc:
        # Nothing of dpaudit's exits from inside a verb; user code that does is caught where it is
        # called (dpaudit.callables.call_user), and whatever slipped past must not pick the status.
        if debug:
            traceback.print_exc()
        return _internal(argv, prog, exc)
    except Exception as exc:
        if debug:
            traceback.print_exc()
        return _internal(argv, prog, exc)


def _internal(argv: Sequence[str], prog: str, exc: BaseException) -> int:
    from dpaudit.app.common import EXIT_INTERNAL

    text = _one_line(str(exc))
    return _report_error(
        argv,
        prog,
        f"internal error: {type(exc).__name__}: {text} (please report it; rerun with --debug for a traceback)",
        argument=None,
        status=EXIT_INTERNAL,
    )


#: Flags that change how a command runs or prints, not what it writes (with whether they take a value).
_PRESENTATION = {
    "--json": False,
    "--quiet": False,
    "--debug": False,
    "--i-know": False,
    "--num-workers": True,
    "--executor": True,
    "--address": True,
    "--ship-code": False,
    "--device": True,
    "--threads": True,
}


def _out_of(argv: Sequence[str]) -> str | None:
    """The ``--out`` of the raw arguments (None when absent or empty: the parser reports that)."""
    for i, a in enumerate(argv):
        if a == "--out" and i + 1 < len(argv):
            return argv[i + 1] if argv[i + 1].strip() else None
        if a.startswith("--out="):
            return a[len("--out=") :] if a[len("--out=") :].strip() else None
    return None


def _command_key(argv: Sequence[str]) -> str:
    """What identifies a command for :func:`~dpaudit.locks.command_lock`: its arguments, as typed."""
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in _PRESENTATION:
            skip = _PRESENTATION[name] and "=" not in a
            continue
        kept.append(a)
    return "command-" + hashlib.sha256("\0".join(kept).encode()).hexdigest()[:16]


def _prog_of(argv: Sequence[str]) -> str:
    """``dpaudit attack membership`` from the raw arguments (for an error before parsing)."""
    words: list[str] = []
    for a in argv:
        if a.startswith("-") or len(words) == 2:
            break
        words.append(a)
    return " ".join(["dpaudit", *words])


if __name__ == "__main__":
    sys.exit(main())
