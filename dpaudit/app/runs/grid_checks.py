"""One gate for the sizes and values of a ``dpaudit compare`` grid (issue 31).

A grid reaches the same trainings and attacks as the verbs' flags, so it answers to the same
rules: every key of an attack section stands for one flag of a verb (:data:`SECTION_FLAGS`) and
is checked by that flag's own validator and documented :class:`~dpaudit.options.SizeLimit`
(read from the parser, where the limit lives); every parameter of a ``[[defenses]]`` table is a
field of the defense's config and answers to the limit declared with it
(:func:`dpaudit.options.option` ``limit=``). On top, the whole plan has two limits of its own:
the number of jobs (:data:`JOB_LIMIT`) and the estimated time (over
:data:`~dpaudit.app.estimate.LONG_RUN_SECONDS`, the hour after which ``train`` and ``audit``
announce a run). Anything above a limit runs only with ``--i-know`` (``i_know=True`` in the
Python API: :func:`~dpaudit.app.runs.compare.parse_grid`,
:func:`~dpaudit.app.runs.compare.load_grid` and
:class:`~dpaudit.app.runs.compare.CompareSpec`).
"""

from __future__ import annotations

import argparse
import functools
import re
from typing import TYPE_CHECKING, Any

from dpaudit.limits import LIMITS, SizeLimit
from dpaudit.limits import describe_number as describe_number
from dpaudit.options import option_specs

if TYPE_CHECKING:
    pass

__all__ = [
    "JOB_LIMIT",
    "SECTION_FLAGS",
    "above_limit",
    "describe_number",
    "fails_alone",
    "inversion_classes",
    "section_value",
    "setting_limits",
    "verb_flag",
    "wrong_kind",
]

#: The most jobs a grid runs without ``--i-know``: a 2,000-value sweep or 500 seeds is far more
#: often a typo than a plan, and would train for days.
JOB_LIMIT = LIMITS["jobs"]

#: Each numeric or choice key of an attack section → the verb and flag it stands for: the grid
#: value is checked by that flag's validator and answers to its documented limit.
SECTION_FLAGS: dict[str, dict[str, tuple[str, str]]] = {
    "membership": {
        "num_samples": ("attack membership", "--num-samples"),
        "num_shadows": ("attack membership", "--num-shadows"),
        "num_population": ("attack membership", "--num-population"),
        "shadow_epochs": ("train", "--epochs"),
    },
    "evasion": {
        "num_examples": ("certify", "--num-examples"),
        "eot_samples": ("certify", "--num-eot-samples"),
        "num_draws": ("certify", "--num-draws"),
    },
    "inversion": {
        "evaluator_epochs": ("attack inversion", "--evaluator-epochs"),
        "iterations": ("attack inversion", "--max-iterations"),
    },
    "audit": {
        "num_canaries": ("audit", "--num-canaries"),
        "num_trials": ("audit", "--num-trials"),
        "threat": ("audit", "--threat"),
        "canary": ("audit", "--canary"),
    },
}


@functools.cache
def _verb_actions(verb: str) -> dict[str, argparse.Action]:
    from dpaudit.app.cli import _leaf_parsers, build_parser

    prog = f"dpaudit {verb}"
    for leaf in _leaf_parsers(build_parser(verb.split())):
        if leaf.prog == prog:
            return {opt: a for a in leaf._actions for opt in a.option_strings}
    raise KeyError(f"no verb {verb!r}")


def verb_flag(verb: str, flag: str) -> argparse.Action:
    """The argparse action of ``flag`` of ``dpaudit VERB`` (its ``type``, ``choices`` and limit)."""
    return _verb_actions(verb)[flag]


def above_limit(key: str, value: Any, limit: SizeLimit | None) -> str | None:
    """The message refusing ``key=value`` above ``limit`` (without ``--i-know``), or ``None``."""
    if limit is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not value > limit.maximum:
        return None
    return (
        f"{key}={describe_number(value)} is above the limit "
        f"{describe_number(limit.maximum)} ({limit.why}); pass --i-know to run "
        "it anyway"
    )


def section_value(key: str, value: Any, verb: str, flag: str) -> Any:
    """A section value checked as its flag checks it; the error names the TOML ``key``.

    Returns:
        The value as the flag's ``type`` converts it.

    Raises:
        ValueError: the value has the wrong type, fails the flag's validator, or is not one of
            its choices.
    """
    action = verb_flag(verb, flag)
    if action.choices is not None:
        if value not in action.choices:
            raise ValueError(f"{key} must be one of {', '.join(map(str, action.choices))}, got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} must be a number, got {value!r} ({type(value).__name__})")
    try:
        converted = action.type(repr(value)) if callable(action.type) else value
    except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
        # The flag's message names the flag (or its field): name the grid key instead, but not
        # inside a longer name (``--epochs`` in ``shadow_epochs``).
        names = "|".join(re.escape(n) for n in (flag, flag.lstrip("-").replace("-", "_")))
        message = re.sub(rf"(?<![\w.-])(?:{names})(?!\w)", key, str(exc))
        raise ValueError(message if key in message else f"{key}={value!r}: {message}") from None
    return converted


def wrong_kind(kind: type | None, value: Any) -> str | None:
    """What a setting value should have been, when its TOML type is not its option's kind (a
    config does not check every type itself: ``baselines = "no"`` would read as true)."""
    if kind is None or value is None or isinstance(value, list):
        return None
    if kind is bool:
        return None if isinstance(value, bool) else "true or false"
    if kind in (int, float):
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"
    if kind is str:
        return None if isinstance(value, str) else "a string"
    return None


def fails_alone(config_type: type, key: str, value: Any) -> bool:
    """Whether a config refuses ``key=value`` with every other field at its default."""
    try:
        config_type(**{key: tuple(value) if isinstance(value, list) else value})
    except (TypeError, ValueError):
        return True
    return False


def inversion_classes(key: str, value: Any, *, dataset: str) -> list[int] | None:
    """``attacks.inversion.classes``: labels of the dataset, as ``--classes`` takes them (a list or ``"0-4"``).

    Raises:
        ValueError: not labels, repeated, or outside the dataset's classes (naming ``key``).
    """
    from dpaudit.data import DATASETS
    from dpaudit.data.subsets import parse_classes

    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    if any(isinstance(x, bool) or not isinstance(x, (int, str)) for x in items):
        raise ValueError(f'{key}: must be labels (integers) or ranges such as "0-4", got {value!r}')
    num_classes = DATASETS[dataset].num_classes
    try:
        return list(
            parse_classes(
                ",".join(str(x) for x in items), argument=key, num_classes=num_classes, example='[0, 3, 7] or "0-4"'
            )
        )
    except ValueError as exc:
        raise ValueError(f"{exc} (the {dataset} dataset has {num_classes} classes)") from None


def setting_limits(defense: str) -> dict[str, SizeLimit]:
    """Config field → its documented limit, for a registered defense."""
    from defenses import DEFENSES

    return {s.field: s.limit for s in option_specs(DEFENSES[defense].config_type) if s.limit is not None}
