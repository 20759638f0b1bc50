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
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dpaudit.options import LIMIT_ATTR, SizeLimit, option_specs

if TYPE_CHECKING:
    from dpaudit.app.runs.compare.grid import CompareGrid

__all__ = [
    "JOB_LIMIT",
    "SECTION_FLAGS",
    "above_limit",
    "count_jobs",
    "estimate_seconds",
    "fails_alone",
    "inversion_classes",
    "plan_problems",
    "section_value",
    "setting_limits",
    "verb_flag",
    "wrong_kind",
]

#: The most jobs a grid runs without ``--i-know``: a 2,000-value sweep or 500 seeds is far more
#: often a typo than a plan, and would train for days.
JOB_LIMIT = SizeLimit(1000, "each job is one training or one attack of a trained model")

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


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) < 1e18 else f"{x:g}"


def above_limit(key: str, value: Any, limit: SizeLimit | None) -> str | None:
    """The message refusing ``key=value`` above ``limit`` (without ``--i-know``), or ``None``."""
    if limit is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not value > limit.maximum:
        return None
    return f"{key}={_number(value)} is above the limit {_number(limit.maximum)} ({limit.why}); pass --i-know to run it anyway"


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
        return list(parse_classes(",".join(str(x) for x in items), argument=key, num_classes=num_classes, example='[0, 3, 7] or "0-4"'))
    except ValueError as exc:
        raise ValueError(f"{exc} (the {dataset} dataset has {num_classes} classes)") from None


def setting_limits(defense: str) -> dict[str, SizeLimit]:
    """Config field → its documented limit, for a registered defense."""
    from defenses import DEFENSES

    return {s.field: s.limit for s in option_specs(DEFENSES[defense].config_type) if s.limit is not None}


def count_jobs(grid: CompareGrid) -> int:
    """The jobs ``run_compare`` makes of a grid: one training per (setting, seed), one job per
    attack section per training, and one canary audit per auditable setting."""
    from defenses import DEFENSES
    from dpaudit.app.runs.compare.grid import EVALUATED_SECTIONS

    sections = sum(getattr(grid, k) is not None for k in EVALUATED_SECTIONS)
    audited = sum(1 for s in grid.settings if grid.audit is not None and DEFENSES[s.defense].audit_trainer is not None)
    return len(grid.settings) * len(grid.seeds) * (1 + sections) + audited


def plan_problems(grid: CompareGrid) -> list[str]:
    """Every size of a parsed grid above its limit: setting values, section values, total jobs."""
    problems = []
    for s in grid.settings:
        for name, limit in setting_limits(s.defense).items():
            message = above_limit(f"{s.origin or s.label}.{name}", s.parameters.get(name), limit)
            if message:
                problems.append(message)
    for section, keys in SECTION_FLAGS.items():
        table = getattr(grid, section)
        for key, (verb, flag) in keys.items() if table else ():
            message = above_limit(f"attacks.{section}.{key}", table.get(key), getattr(verb_flag(verb, flag), LIMIT_ATTR, None))
            if message:
                problems.append(message)
    jobs = count_jobs(grid)
    if jobs > JOB_LIMIT.maximum:
        from dpaudit.app.runs.compare.grid import EVALUATED_SECTIONS

        sections = [k for k in EVALUATED_SECTIONS if getattr(grid, k) is not None]
        problems.append(
            f"the grid makes {jobs:,} jobs ({len(grid.settings):,} settings x {len(grid.seeds):,} seed(s) x (training{''.join(' + ' + k for k in sections)}){' + audits' if grid.audit else ''}), "
            f"above the limit {_number(JOB_LIMIT.maximum)} ({JOB_LIMIT.why}); pass --i-know to run it anyway"
        )
    return problems


def _passes(parameters: Mapping[str, Any]) -> float:
    """Passes over the members a setting's training makes (DSSGD: rounds x local epochs)."""
    if parameters.get("rounds") is not None:
        return float(parameters["rounds"]) * float(parameters.get("local_epochs") or 1)
    return float(parameters.get("epochs") or 10) + float(parameters.get("student_epochs") or 0)


def estimate_seconds(grid: CompareGrid, *, data_root: str | None, workers: int | None) -> float:
    """A rough, measured estimate of a grid's time: the trainings it makes (targets, shadows, audit
    trials) x the measured seconds per example of its model (:mod:`dpaudit.app.estimate`), spread
    over the workers. Attacks, evaluation and data loading are left out, so it errs low; 0.0 when
    the dataset's size or the model's speed cannot be found here (no estimate beats a wrong one).
    """
    from defenses import DEFENSES
    from dpaudit.app.estimate import PER_EXAMPLE_GRADIENT_FACTOR, seconds_per_example
    from dpaudit.data import DATASETS
    from dpaudit.data.source import checked_data_root

    source = DATASETS[grid.dataset]
    try:
        info = source.info(checked_data_root(data_root) if source.needs_root else checked_data_root(None, allow_missing=True))
    except (OSError, ValueError):
        return 0.0
    if not info.num_train or not info.input_shape:
        return 0.0
    members = info.num_train * grid.member_fraction
    total = 0.0
    for s in grid.settings:
        per = seconds_per_example(s.model, input_shape=info.input_shape, num_classes=source.num_classes, device=grid.device, model_options=dict(s.model_options))
        factor = PER_EXAMPLE_GRADIENT_FACTOR if DEFENSES[s.defense].per_example_gradients else 1.0
        one = _passes(s.parameters) * members * per * factor
        total += len(grid.seeds) * one
        if grid.membership is not None and grid.membership["shadows"] == "target":
            total += len(grid.seeds) * grid.membership["num_shadows"] * one
        if grid.audit is not None and DEFENSES[s.defense].audit_trainer is not None:
            trials = 1 if grid.audit["method"] == "one-run" else 2 * grid.audit.get("num_trials", 50)
            total += trials * float(s.parameters.get("epochs") or 10) * members * per * PER_EXAMPLE_GRADIENT_FACTOR
    if grid.membership is not None and grid.membership["shadows"] == "shared":
        base = grid.settings[0]
        per = seconds_per_example(base.model, input_shape=info.input_shape, num_classes=source.num_classes, device=grid.device, model_options=dict(base.model_options))
        total += len(grid.seeds) * grid.membership["num_shadows"] * float(grid.membership["shadow_epochs"] or 10) * members * per
    return total / max(1, workers or os.cpu_count() or 1)


def check_plan(grid: CompareGrid, *, i_know: bool, data_root: str | None, workers: int | None, progress: bool) -> None:
    """A grid's sizes against their limits, and its estimated time against the hour after which
    ``train`` and ``audit`` announce a run: above either, only with ``i_know`` (then announced).

    Raises:
        GridError: the first size above its limit, or the estimate, with what to change.
    """
    from dpaudit.app.estimate import LONG_RUN_SECONDS, announce_if_long, describe_duration
    from dpaudit.app.runs.compare import GridError

    problems = plan_problems(grid)
    if problems and not i_know:
        raise GridError(problems[0])
    seconds = estimate_seconds(grid, data_root=data_root, workers=workers)
    if seconds > LONG_RUN_SECONDS and not i_know:
        raise GridError(
            f"the grid ({count_jobs(grid):,} jobs) is estimated to take {describe_duration(seconds)} on this machine, above {LONG_RUN_SECONDS / 3600:g} h; "
            "fewer settings, seeds, epochs or shadows shorten it; pass --i-know to run it anyway"
        )
    if progress:
        jobs = count_jobs(grid)
        one = estimate_seconds(grid, data_root=data_root, workers=1) / max(jobs, 1)
        announce_if_long(seconds, f"the grid ({jobs:,} jobs)", hint="--num-workers changes it", jobs=jobs, job_seconds=one)
