"""Configuration fields that describe their own command-line flag.

A defense's or an attack's configuration is a frozen dataclass; each field made with
:func:`option` carries its flag, help text, metavar, choices and a validator. The command line
is generated from these fields (:func:`add_option_flags`, :func:`options_from_args`), so a new
defense or attack needs no hand-written argparse code and no field can lack a flag
(docs/architecture.md, "Registries").

Several configs may share a flag (``--epochs`` for every trained defense): the flag is declared
once and must mean the same thing everywhere (same type, choices and help), which
:func:`add_option_flags` checks.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Collection, Mapping
from typing import Any

from dpaudit import _validate as v
from dpaudit.limits import SizeLimit, above_limit

__all__ = [
    "SizeLimit",
    "LIMIT_ATTR",
    "limit_action",
    "OptionSpec",
    "option",
    "option_specs",
    "add_option_flags",
    "options_from_args",
    "OptionConflictError",
    "check_config_sizes",
]

_KEY = "dpaudit_option"

#: The attribute of an argparse action that carries its :class:`SizeLimit`.
LIMIT_ATTR = "dpaudit_limit"


def limit_action(action: argparse.Action, maximum: float | SizeLimit, why: str = "") -> argparse.Action:
    """Attaches a :class:`~dpaudit.limits.SizeLimit` to a hand-written argparse flag; returns the action.

    ``maximum`` is an entry of :data:`dpaudit.limits.LIMITS` (the one table), or a number with
    its ``why`` for a limit of one verb alone.
    """
    setattr(action, LIMIT_ATTR, maximum if isinstance(maximum, SizeLimit) else SizeLimit(maximum, why))
    return action


@dataclasses.dataclass(frozen=True, kw_only=True)
class OptionSpec:
    """How one config field appears on the command line.

    Attributes:
        field: the dataclass field name (also the argparse ``dest``).
        flag: the flag, e.g. ``--noise-multiplier``.
        help: one line of help.
        kind: ``float``, ``int``, ``str`` or ``bool`` (a ``--flag/--no-flag`` pair).
        metavar: placeholder in ``--help``.
        choices: allowed values, if any.
        check: validator ``check(flag, value) -> value`` from :mod:`dpaudit._validate` (raises
            ValueError/TypeError naming the flag and value).
        default: the field's default (shown in ``--help``), or ``dataclasses.MISSING``.
        limit: the documented upper limit of a size field (exceeded only with ``--i-know``).
    """

    field: str
    flag: str
    help: str
    kind: type
    metavar: str | None = None
    choices: tuple[Any, ...] | None = None
    check: Callable[[str, Any], Any] | None = None
    default: Any = dataclasses.MISSING
    limit: SizeLimit | None = None

    def same_meaning(self, other: OptionSpec) -> bool:
        """Whether two configs may share this flag (same field and choices; int and float mix).

        ``--epochs`` is a whole number for SGD and a real number of expected passes for
        DP-SGD: the shared flag parses a float and each config takes it as its own type.
        """
        numeric = {int, float}
        kinds_agree = self.kind is other.kind or {self.kind, other.kind} <= numeric
        return (self.field, self.choices) == (other.field, other.choices) and kinds_agree


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Declared:
    """What :func:`option` stores in a field's metadata: the flag as declared (its default
    flag and the field's default are filled in by :func:`option_specs`)."""

    help: str
    flag: str | None
    kind: type
    metavar: str | None
    choices: tuple[Any, ...] | None
    check: Callable[[str, Any], Any] | None
    limit: SizeLimit | None


def option(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    flag: str | None = None,
    kind: type | None = None,
    metavar: str | None = None,
    choices: Collection[Any] | None = None,
    check: Callable[[str, Any], Any] | None = None,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    limit: SizeLimit | None = None,
) -> Any:
    """A dataclass field that declares its command-line flag.

    Args:
        default: the default value (``None`` for "decided by the defense").
        help: one line of help for ``--help``.
        flag: the flag; default ``--`` plus the field name with ``_`` as ``-``.
        kind: the value type; default the type of ``default`` (``float`` when it is ``None``).
        metavar: placeholder in ``--help``.
        choices: allowed values.
        check: validator ``check(flag, value) -> value``.
        default_factory: as for :func:`dataclasses.field`.
        limit: for a size (a count of steps, epochs, models…), its documented upper limit.

    Returns:
        A :func:`dataclasses.field` carrying the option's metadata.
    """
    if kind is None:
        kind = type(default) if default not in (None, dataclasses.MISSING) else float
        if choices and default in (None, dataclasses.MISSING):
            kind = type(next(iter(choices)))
    meta = {
        _KEY: _Declared(
            help=help,
            flag=flag,
            kind=kind,
            metavar=metavar,
            choices=tuple(choices) if choices is not None else None,
            check=check,
            limit=limit,
        )
    }
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def option_specs(config_type: type) -> tuple[OptionSpec, ...]:
    """The :class:`OptionSpec` of every field of ``config_type`` declared with :func:`option`.

    Raises:
        TypeError: ``config_type`` is not a dataclass.
    """
    if not dataclasses.is_dataclass(config_type):
        raise v.invalid_type("config_type", f"config_type must be a dataclass, got {config_type!r}")
    out = []
    for f in dataclasses.fields(config_type):
        meta = _metadata(config_type, f.name)
        if meta is None:
            continue
        out.append(
            OptionSpec(
                field=f.name,
                flag=meta.flag or "--" + f.name.replace("_", "-"),
                help=meta.help,
                kind=meta.kind,
                metavar=meta.metavar,
                choices=meta.choices,
                check=meta.check,
                default=f.default,
                limit=meta.limit,
            )
        )
    return tuple(out)


def _metadata(config_type: type, name: str) -> _Declared | None:
    # A subclass that only changes a default (``robustness_epsilon: float = 4.0``) redeclares
    # the field without metadata; the flag, help and checks are inherited from the base.
    for klass in config_type.__mro__:
        if dataclasses.is_dataclass(klass):
            for f in dataclasses.fields(klass):
                meta = f.metadata.get(_KEY)
                if f.name == name and isinstance(meta, _Declared):
                    return meta
    return None


class OptionConflictError(ValueError):
    """Two configs declare the same flag with different meanings."""


_KIND_NAMES = {int: "an integer", float: "a number", str: "a string"}


def _argparse_type(spec: OptionSpec) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = spec.kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{spec.flag} expects {_KIND_NAMES.get(spec.kind, 'a ' + spec.kind.__name__)}, got {text!r}"
            ) from None
        if spec.check is not None:
            try:
                value = spec.check(spec.flag, value)
            except (ValueError, TypeError) as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    parse.__name__ = spec.flag
    return parse


def add_option_flags(parser: argparse.ArgumentParser, groups: Mapping[str, type]) -> dict[str, OptionSpec]:
    """Adds one flag per distinct option of the given config types.

    Args:
        parser: where to add the flags.
        groups: a title (e.g. a defense name) → its config type. Flags shared by several types
            are added once, to a "shared" group.

    Returns:
        Flag → spec, for every flag added.

    Raises:
        OptionConflictError: a flag is declared with different meanings.
    """
    by_flag: dict[str, OptionSpec] = {}
    by_flag_all: dict[str, list[OptionSpec]] = {}
    owners: dict[str, list[str]] = {}
    for title, config_type in groups.items():
        for spec in option_specs(config_type):
            seen = by_flag.get(spec.flag)
            if seen is not None and not seen.same_meaning(spec):
                raise OptionConflictError(
                    f"flag {spec.flag} means field {seen.field!r} ({seen.kind.__name__}) in "
                    f"one config and {spec.field!r} ({spec.kind.__name__}) in {title!r}"
                )
            if seen is None:
                by_flag[spec.flag] = spec
            elif seen.kind is not spec.kind:  # int and float: parse a float, each config checks its own type
                by_flag[spec.flag] = dataclasses.replace(
                    seen, kind=float, check=seen.check if seen.check is spec.check else None
                )
            owners.setdefault(spec.flag, []).append(title)
            by_flag_all.setdefault(spec.flag, []).append(spec)
    shared = (
        parser.add_argument_group("options shared by several of them")
        if any(len(o) > 1 for o in owners.values())
        else None
    )
    per_title = {}
    for flag, spec in by_flag.items():
        names = owners[flag]
        if len(names) > 1:
            group = shared
            by_help: dict[str, list[str]] = {}
            for t, o in zip(names, by_flag_all[flag]):
                by_help.setdefault(o.help, []).append(t)
            if (
                len(by_help) > 1
            ):  # one field name, worded differently per config (PATE's and DSSGD's --threshold): show each wording once
                spec = dataclasses.replace(spec, help="; ".join(f"[{', '.join(ts)}] {h}" for h, ts in by_help.items()))
            suffix = f" [{', '.join(names)}]" if len(by_help) == 1 else ""
        else:
            if names[0] not in per_title:
                per_title[names[0]] = parser.add_argument_group(f"{names[0]} options")
            group = per_title[names[0]]
            suffix = ""
        # A shared flag's default may differ per config, so only a single owner's default is shown.
        default = (
            ""
            if len(names) > 1 or spec.default in (None, dataclasses.MISSING) or spec.kind is bool
            else f" (default {spec.default})"
        )
        assert group is not None
        if spec.kind is bool:
            group.add_argument(
                spec.flag,
                dest=spec.field,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=spec.help + default + suffix,
            )
        else:
            action = group.add_argument(
                spec.flag,
                dest=spec.field,
                type=_argparse_type(spec),
                choices=spec.choices,
                metavar=spec.metavar,
                default=None,
                help=spec.help + default + suffix,
            )
            limits = [o.limit for o in by_flag_all[flag] if o.limit is not None]
            if limits:  # configs sharing a flag may differ in limit: the strictest applies
                setattr(action, LIMIT_ATTR, min(limits, key=lambda lim: lim.maximum))
    return by_flag


def options_from_args(
    args: argparse.Namespace, config_type: type, flags: Mapping[str, OptionSpec], *, owner: str
) -> dict[str, object]:
    """The keyword arguments of ``config_type`` given on the command line.

    Raises:
        ValueError: a flag was given that ``config_type`` has no field for (names the flag and
            ``owner``, e.g. the defense).
    """
    mine = {s.field: s for s in option_specs(config_type)}
    out: dict[str, object] = {}
    for flag, spec in flags.items():
        value = getattr(args, spec.field, None)
        if value is None:
            continue
        if spec.field not in mine:
            raise v.invalid(flag, f"{flag}={value!r} does not apply to {owner}")
        if mine[spec.field].kind is int and isinstance(value, float):
            if not value.is_integer():
                raise v.invalid(flag, f"{flag} must be a whole number for {owner}, got {value!r}")
            value = int(value)
        out[spec.field] = value
    return out


def check_config_sizes(config: Any, *, i_know: bool) -> None:
    """Each size field of a defense's or an attack's config against the limit it declares
    (:func:`option` ``limit=``, the limit of its flag), waived by ``i_know``."""
    if config is None or not dataclasses.is_dataclass(config):
        return
    for option in option_specs(type(config)):
        message = above_limit(option.field, getattr(config, option.field, None), option.limit, i_know=i_know)
        if message is not None:
            raise v.invalid(option.field, message)
