"""The one table of documented limits, and the checks every entry point applies with it.

A count, a size or a magnitude a user types (``--epochs``, a grid's ``radii``, a claim file's
composed events, ``AuditSpec(num_trials=...)``) has a documented upper limit: above it the
value is far more often a typo than an intent, and it would run for hours, exhaust memory or
overflow before failing. Every entry point — the command line's flags, a ``compare`` grid, a
claim file, a ``.npy`` header and the Python API's spec constructors — reads its limit from
:data:`LIMITS`, so a limit is stated once, documented once (docs/cli.md, "Limits") and tested
once (tests/hostile/test_limit_table.py iterates this table).

A limit is exceeded only on purpose: ``--i-know`` on the command line, ``i_know=True`` on a spec.
A *hard* limit cannot be exceeded at all: it is where a file name, the parser's recursion or a
float stops working, so no intent makes the value usable.

Torch-free and light: the command line imports it before parsing.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from dpaudit import _validate as v

__all__ = [
    "SizeLimit",
    "LIMITS",
    "describe_number",
    "above_limit",
    "check_limit",
    "check_count",
    "check_sizes",
    "check_name",
    "check_depth",
    "npy_header",
    "check_npy",
    "check_parameter_count",
    "limits_markdown",
]


@dataclasses.dataclass(frozen=True)
class SizeLimit:
    """The documented upper limit of a size argument (a count of models, steps, draws…).

    A value above ``maximum`` is refused unless the user passes ``--i-know`` (``i_know=True``):
    such sizes are far more often a typo (``--num-shadows 100000``) than an intent, and they
    would otherwise run silently for hours or exhaust memory.

    Attributes:
        maximum: the largest value accepted without ``--i-know``.
        why: what each unit costs, for the error message (``"each shadow is one training"``).
        hard: ``--i-know`` does not lift it (a file name's length, the parser's nesting).
    """

    maximum: float
    why: str
    hard: bool = False


#: Every documented limit, by name. The command line's flags, grid keys, claim files and the
#: Python API's specs refer to these entries (never to a literal of their own), and
#: docs/cli.md's table is checked against this one.
LIMITS: Mapping[str, SizeLimit] = {
    # Training
    "epochs": SizeLimit(10_000, "each epoch is one pass over the training set"),
    "batch_size": SizeLimit(65_536, "a batch is held in memory at once"),
    "steps": SizeLimit(10**6, "each step is one noisy gradient per trial"),
    "members": SizeLimit(10**7, "the members are held in memory"),
    "model_parameters": SizeLimit(
        10**6,
        "check trains a --train-fn model many times over, with per-example "
        "gradients: 2.2 million parameters took 2.2 GB of memory within a "
        "minute",
    ),
    # Audits
    "trials": SizeLimit(10**4, "each trial is one full training"),
    "canaries": SizeLimit(10**5, "the canaries join the training set"),
    "group_size": SizeLimit(10**4, "each copy joins the training set"),
    "budget_minutes": SizeLimit(24 * 60, "the battery trains until the budget is spent"),
    # Attacks and certification
    "shadows": SizeLimit(1024, "each shadow model is one full training of the target's defense"),
    "draws": SizeLimit(10**6, "each draw is one forward pass per example"),
    "examples": SizeLimit(10**5, "each example is certified with every draw and attacked"),
    "eot_samples": SizeLimit(10**4, "each sample is one gradient per attack step"),
    "radii": SizeLimit(1000, "each radius is one attack of every example"),
    "queries": SizeLimit(256, "each query is one forward pass of every model over the data"),
    "samples": SizeLimit(10**7, "scores are held in memory for every model"),
    "inversion_steps": SizeLimit(10**6, "each step is one forward and backward pass over every class (and restart)"),
    "restarts": SizeLimit(1000, "each restart is one more inversion of every class"),
    "latent_dim": SizeLimit(10_000, "the generator's first layer grows with it"),
    "critic_steps": SizeLimit(1000, "the generator learns once per this many critic steps"),
    "population": SizeLimit(10**6, "each is scored by every reference model"),
    # Plans and inputs
    "jobs": SizeLimit(1000, "each job is one training or one attack of a trained model"),
    "workers": SizeLimit(1024, "each worker is a process"),
    "composed_events": SizeLimit(
        1000,
        "each event of a claim is accounted in turn by every accountant: 1,000 took 20 s, 10,000 more than 3 minutes",
    ),
    "nesting_depth": SizeLimit(64, "a value nested deeper is no grid or claim, and parsing it recurses", hard=True),
    "name_length": SizeLimit(
        200,
        "a name becomes directory and report file names, which with their "
        "suffixes must stay within the 255 bytes a file name may have",
        hard=True,
    ),
    "label_length": SizeLimit(
        90,
        "a grid's name and each setting's label make up its audits' names "
        "(compare-NAME-LABEL-HASH), within name_length",
        hard=True,
    ),
}


def describe_number(x: float) -> str:
    """A limit or a size as people write it: ``1,000,000`` rather than ``1e+06``."""
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e18 else f"{x:g}"


def above_limit(argument: str, value: Any, limit: SizeLimit | None, *, i_know: bool = False) -> str | None:
    """The message refusing ``argument=value`` above ``limit``, or ``None`` when it is within (or waived).

    ``i_know`` waives a limit that is not hard. Bools and non-numbers are not sizes (their own
    checks refuse them).
    """
    # typeshed's numbers.Real declares no __gt__; every concrete Real compares with a float, so read it as one.
    if (
        limit is None
        or isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not cast(float, value) > limit.maximum
    ):
        return None
    if limit.hard:
        return (
            f"{argument}={describe_number(float(value))} is above the limit "
            f"{describe_number(limit.maximum)} ({limit.why})"
        )
    if i_know:
        return None
    return (
        f"{argument}={describe_number(float(value))} is above the limit "
        f"{describe_number(limit.maximum)} ({limit.why}); pass --i-know "
        "(i_know=True) to run it anyway"
    )


def check_limit(argument: str, value: Any, name: str, *, i_know: bool = False) -> Any:
    """Refuses ``value`` above :data:`LIMITS` ``[name]`` unless ``i_know`` (never, for a hard limit).

    Returns:
        ``value``, unchanged.

    Raises:
        InvalidArgument: names ``argument``, the value, the limit and what each unit costs.
    """
    message = above_limit(argument, value, LIMITS[name], i_know=i_know)
    if message is not None:
        raise v.invalid(argument, message)
    return value


def check_sizes(spec: Any, fields: Mapping[str, str]) -> None:
    """Each ``field`` of ``spec`` against its entry of :data:`LIMITS`, waived by ``spec.i_know``.

    Args:
        spec: a spec of the Python API with an ``i_know`` field (``TrainSpec``, ``AuditSpec``…).
        fields: its field → the name of the entry it answers to (``{"num_trials": "trials"}``).

    Raises:
        InvalidArgument: a value above its limit (named by its field), or an ``i_know`` that is
            not a bool.
    """
    i_know = spec.i_know
    if not isinstance(i_know, bool):
        raise v.invalid_type("i_know", f"i_know must be a bool, got {i_know!r}")
    for field, name in fields.items():
        check_limit(field, getattr(spec, field), name, i_know=i_know)


def check_count(argument: str, items: Any, name: str, *, i_know: bool = False) -> None:
    """Refuses a list (or any sized collection) of more than :data:`LIMITS` ``[name]`` items.

    Anything without a length (a generator) is left to the caller's own checks.
    """
    if not hasattr(items, "__len__"):
        return
    size = len(items)
    limit = LIMITS[name]
    if size > limit.maximum and (limit.hard or not i_know):
        tail = "" if limit.hard else "; pass --i-know (i_know=True) to run it anyway"
        raise v.invalid(
            argument,
            f"{argument} has {size:,} values, above the limit {describe_number(limit.maximum)} ({limit.why}){tail}",
        )


def check_name(argument: str, value: Any, *, name: str = "name_length") -> str:
    """A non-empty string no longer than :data:`LIMITS` ``[name]`` characters (a run's, a grid's or a setting's name).

    Raises:
        InvalidArgument: not a string, empty, or too long (naming ``argument``).
    """
    if not isinstance(value, str):
        raise v.invalid_type(argument, f"{argument} must be a string, got {v.short(value)} ({type(value).__name__})")
    if not value.strip():
        raise v.invalid(argument, f"{argument} must not be empty, got {value!r}")
    limit = LIMITS[name]
    if len(value) > limit.maximum:
        raise v.invalid(
            argument,
            f"{argument}={v.short(value, 40)} has {len(value)} characters, above the "
            f"limit {describe_number(limit.maximum)} ({limit.why})",
        )
    return value


def check_depth(argument: str, value: Any) -> Any:
    """Refuses parsed data (lists and mappings) nested deeper than :data:`LIMITS` ``["nesting_depth"]``.

    Walked without recursion, so a hostile value cannot exhaust the stack here.

    Returns:
        ``value``, unchanged.
    """
    limit = int(LIMITS["nesting_depth"].maximum)
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth >= limit:
            raise v.invalid(
                argument, f"{argument} is nested more than {limit} levels deep ({LIMITS['nesting_depth'].why})"
            )
        stack.extend((c, depth + 1) for c in children)
    return value


def npy_header(argument: str, path: str | Path) -> tuple[tuple[int, ...], Any]:
    """The shape and dtype a ``.npy`` file declares, read from its header without loading the array.

    Raises:
        InvalidArgument: the file is not a ``.npy`` array (names ``argument`` and the path).
    """
    import numpy as np

    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(f)
    except (ValueError, EOFError) as exc:
        raise v.invalid(
            argument,
            f"{argument}={str(path)!r} is not a plain .npy array "
            f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})",
        ) from None
    return tuple(int(n) for n in shape), dtype


def check_npy(argument: str, path: str | Path, *, ndim: int) -> tuple[int, ...]:
    """Refuses a ``.npy`` file whose header declares other than ``ndim`` dimensions (or Python objects), before it is
    loaded.

    Returns:
        The declared shape.
    """
    shape, dtype = npy_header(argument, path)
    if dtype.hasobject:
        raise v.invalid(
            argument,
            f"{argument}={str(path)!r} is not a plain .npy array (it holds Python "
            "objects, which loading would unpickle)",
        )
    if len(shape) != ndim:
        raise v.invalid(
            argument, f"{argument}={str(path)!r} must hold a {ndim}-D array, its header declares shape {shape}"
        )
    return shape


def check_parameter_count(argument: str, model: Any, *, i_know: bool = False) -> int:
    """Refuses a model of more parameters than :data:`LIMITS` ``["model_parameters"]`` unless ``i_know``.

    Args:
        argument: what the model came from (a flag such as ``--train-fn``), for the message.
        model: a ``torch.nn.Module`` (anything with ``parameters()``) or a parameter count.

    Returns:
        The number of parameters.
    """
    count = int(model) if isinstance(model, numbers.Integral) else sum(int(p.numel()) for p in model.parameters())
    limit = LIMITS["model_parameters"]
    if count > limit.maximum and not i_know:
        raise v.invalid(
            argument,
            f"{argument}: the model has {count:,} parameters, above the limit "
            f"{describe_number(limit.maximum)} ({limit.why}); pass --i-know "
            "(i_know=True) to run it anyway",
        )
    return count


def limits_markdown() -> str:
    """:data:`LIMITS` as the Markdown table of docs/cli.md ("Limits"; a test keeps the page equal to it)."""
    rows = ["| limit | at most | why | `--i-know` lifts it |", "|---|---:|---|---|"]
    for name, limit in LIMITS.items():
        rows.append(f"| `{name}` | {describe_number(limit.maximum)} | {limit.why} | {'no' if limit.hard else 'yes'} |")
    return "\n".join(rows) + "\n"
