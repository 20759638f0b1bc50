"""A ``dpaudit compare`` grid: the TOML's tables validated into a :class:`CompareGrid`.

A *grid* (TOML, :func:`load_grid`) names a dataset, the defense settings to train (a parameter
given as a list expands into one setting per value, the non-private baseline always included),
the repeats (seeds), and the attacks every trained record faces. Its schema is read from the
registries: a ``[[defenses]]`` table names a registered defense and the fields of its config,
and each attack section names attacks of its registry (membership, evasion, inversion). Every
value is checked here, before any job starts (:mod:`dpaudit.app.runs.grid_checks`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dpaudit import _validate as v
from dpaudit.app.runs.compare.sections import (
    AttackSections,
    AuditSection,
    EvasionSection,
    InversionSection,
    MembershipSection,
    TopLevel,
)
from dpaudit.limits import LIMITS, check_count, check_depth, check_name, describe_number
from dpaudit.store import JsonObject, from_jsonable, safe_stem, to_jsonable

__all__ = [
    "COMPARE_SECTIONS",
    "EVALUATED_SECTIONS",
    "CompareGrid",
    "GridError",
    "Setting",
    "load_grid",
    "parse_grid",
]

#: Top-level keys of a grid, and the attack sections.
_TOP_KEYS = (
    "name",
    "dataset",
    "model",
    "model_options",
    "seeds",
    "member_fraction",
    "delta",
    "confidence",
    "device",
    "vulnerable_top_k",
    "defenses",
    "attacks",
)
#: The sections whose attacks every trained record faces, each named from its registry
#: (:func:`_attack_registries`), then the canary audit of the training algorithm.
EVALUATED_SECTIONS = ("membership", "evasion", "inversion")
COMPARE_SECTIONS = (*EVALUATED_SECTIONS, "audit")
#: Each section's keys: the fields of the value it is read into, in their order.
_SECTION_KEYS: dict[str, tuple[str, ...]] = {
    section: tuple(f.name for f in dataclasses.fields(cls))
    for section, cls in (
        ("membership", MembershipSection),
        ("evasion", EvasionSection),
        ("inversion", InversionSection),
        ("audit", AuditSection),
    )
}
_SETTING_KEYS = ("defense", "label", "family", "model", "model_options")
#: The registered defense every grid's accuracy loss is measured against (added when absent).
BASELINE_DEFENSE = "nonprivate"


class GridError(v.InvalidArgument):
    """A grid that cannot run; the message names the key (``dpaudit compare`` exits 2).

    Its ``argument`` is the TOML key path (``defenses[0].epochs``), which ``--json`` reports
    as it is rather than as a flag.
    """

    grid_key = True


def _fail(key: str, message: str) -> GridError:
    return GridError(f"{key}: {message}", argument=key)


def _key_of(where: str, exc: BaseException) -> str:
    """The key path of a value a validator refused inside table ``where`` (the table itself if unnamed)."""
    name = getattr(exc, "argument", None)
    return f"{where}.{name}" if isinstance(name, str) and name and not name.startswith("-") else where


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One defense setting: a registered defense with its config fields.

    Attributes:
        label: unique in the grid (``dpsgd-target_epsilon=1``; the grid's ``label`` if given).
        defense: registry key.
        family: the defense family its curve belongs to (the registry's ``family``).
        parameters: config field → value.
        model: zoo architecture.
        model_options: its options.
        origin: the grid table it came from (``defenses[1]``), for messages; not part of its key.
    """

    label: str
    defense: str
    family: str
    parameters: Mapping[str, object]
    model: str
    model_options: Mapping[str, object] = field(default_factory=dict)
    origin: str = ""

    def key(self) -> dict[str, object]:
        """What identifies the setting's trainings in their jobs' keys (the label and origin do not)."""
        return {
            "defense": self.defense,
            "parameters": dict(self.parameters),
            "model": self.model,
            "model_options": dict(self.model_options),
        }


@dataclass(frozen=True, kw_only=True)
class CompareGrid:
    """A parsed, validated grid (see :func:`parse_grid`)."""

    name: str
    dataset: str
    settings: tuple[Setting, ...]
    baseline: str
    seeds: tuple[int, ...] = (0,)
    member_fraction: float = 0.5
    delta: float = 1e-5
    confidence: float = 0.95
    device: str = "cpu"
    vulnerable_top_k: int = 50
    membership: MembershipSection | None = None
    evasion: EvasionSection | None = None
    inversion: InversionSection | None = None
    audit: AuditSection | None = None
    source: JsonObject = field(default_factory=dict)

    @property
    def radii(self) -> tuple[float, ...]:
        return self.evasion.radii if self.evasion else ()

    def num_bounds(self) -> int:
        """How many ε_LB a row's best is the maximum of (for its Bonferroni correction)."""
        per_seed = len(self.membership.attacks) if self.membership else 0
        return max(1, per_seed * len(self.seeds) + (1 if self.audit else 0))

    def bound_confidence(self) -> float:
        """The confidence each ε_LB is taken at, so that their maximum holds at ``confidence``."""
        return 1 - (1 - self.confidence) / self.num_bounds()


def _as_list(key: str, value: Any) -> list[Any]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise _fail(key, "an empty list (give at least one value)")
    return values


def _number_list(key: str, value: Any, *, check: Callable[[str, Any], Any]) -> tuple[Any, ...]:
    try:
        return tuple(check(key, x) for x in _as_list(key, value))
    except (TypeError, ValueError) as exc:
        if isinstance(exc, GridError):
            raise
        raise _fail(key, str(exc)) from None


def _check_keys(where: str, table: Mapping[str, object], allowed: Sequence[str]) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise _fail(f"{where}.{unknown[0]}" if where else unknown[0], f"unknown key (allowed: {', '.join(allowed)})")


def _label_value(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _text(key: str, value: Any) -> str:
    """A label, a family or a name: a string within :data:`~dpaudit.limits.LIMITS` ``["label_length"]``
    that stays a string when the grid's results are written and read back as JSON (``"inf"``
    and ``"nan"`` would come back as floats, and every later read of the run would fail)."""
    try:
        check_name(key, value, name="label_length")
    except (TypeError, ValueError) as exc:
        raise _fail(key, str(exc).removeprefix(f"{key} ").removeprefix(f"{key}=")) from None
    if from_jsonable(value) is not value:
        raise _fail(key, f"{value!r} reads back from JSON as the number {from_jsonable(value)!r}; choose another text")
    return value


def _table(key: str, value: object) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise _fail(
            key,
            "must be a table of the model's options (e.g. { hidden = 64 }), got "
            f"{v.short(value)} ({type(value).__name__})",
        )
    return value


def _model(key: str, value: Any) -> str:
    from dpaudit.models import MODELS

    if not isinstance(value, str) or value not in MODELS:
        raise _fail(key, f"unknown model {v.short(value)} (known: {', '.join(MODELS)})")
    return value


def _expand_setting(index: int, table: object, *, model: str, model_options: Mapping[str, object]) -> list[Setting]:
    from defenses import DEFENSES
    from dpaudit.app.runs.grid_checks import fails_alone, wrong_kind
    from dpaudit.options import option_specs

    where = f"defenses[{index}]"
    if not isinstance(table, Mapping):
        raise _fail(where, f"must be a table, got {type(table).__name__}")
    name = table.get("defense")
    if name is None:
        raise _fail(f"{where}.defense", "missing (one of " + ", ".join(DEFENSES) + ")")
    if not isinstance(name, str):  # a list would be unhashable below: one defense per table
        raise _fail(
            f"{where}.defense",
            f"must name one defense (a string), got {v.short(name)}; sweep defenses with one [[defenses]] table each",
        )
    spec = DEFENSES.get(name)
    if spec is None:
        raise _fail(f"{where}.defense", f"unknown defense {name!r} (known: {', '.join(DEFENSES)})")
    fields = {f.name for f in dataclasses.fields(spec.config_type) if f.init}
    params = {k: val for k, val in table.items() if k not in _SETTING_KEYS}
    for key in params:
        if key not in fields:
            raise _fail(
                f"{where}.{key}",
                f"the {name} defense has no parameter {key!r} (its parameters: {', '.join(sorted(fields))})",
            )
    if (
        "target_epsilon" in params
        and "noise_multiplier" in fields
        and "noise_multiplier" not in params
        and "epochs" in params
    ):
        # A grid sweeps ε at a fixed training length (Jayaraman & Evans): σ is calibrated to each
        # target. DPSGDConfig now leaves σ unset by default and calibrates it the same way; the
        # explicit None stays because it is part of every such setting's job key, so removing it
        # would retrain every stored grid for nothing.
        params["noise_multiplier"] = None
    swept = {k: _as_list(f"{where}.{k}", val) for k, val in params.items()}
    kinds = {o.field: o.kind for o in option_specs(spec.config_type)}
    for k, values in swept.items():
        for x in values:
            wrong = wrong_kind(kinds.get(k), x)
            if wrong:
                raise _fail(f"{where}.{k}", f"must be {wrong} for the {name} defense, got {x!r}")
    names = list(swept)
    for key in ("label", "family"):
        if key in table:
            _text(f"{where}.{key}", table[key])
    setting_model = _model(f"{where}.model", table.get("model", model))
    setting_options = _table(f"{where}.model_options", table.get("model_options", model_options))
    settings = []
    for combo in itertools.product(*(swept[k] for k in names)):
        chosen = dict(zip(names, combo))
        try:
            spec.config_type(**{k: (tuple(x) if isinstance(x, list) else x) for k, x in chosen.items()})
        except (TypeError, ValueError) as exc:
            # The config names its field first ("epochs must be ..."): name the grid key instead.
            field_name = str(exc).split(" ", 1)[0]
            if field_name in chosen:
                raise GridError(f"{where}.{exc} (the {name} defense)", argument=f"{where}.{field_name}") from None
            # A nested config may word it by its own name (PATE's student "epochs"): the key
            # that fails on its own is the one to name.
            alone = next((k for k in chosen if fails_alone(spec.config_type, k, chosen[k])), None)
            if alone is not None:
                raise _fail(f"{where}.{alone}", f"{chosen[alone]!r} refused by the {name} defense: {exc}") from None
            raise _fail(where, f"{name}: {exc}") from None
        multi = [k for k in names if len(swept[k]) > 1]
        given = table.get("label")
        base = given if isinstance(given, str) and given else name
        label = _text(f"{where}.label", base + "".join(f"-{k}={_label_value(chosen[k])}" for k in multi))
        settings.append(
            Setting(
                label=label,
                defense=name,
                family=str(table.get("family") or spec.family or name),
                parameters=chosen,
                model=setting_model,
                model_options=dict(setting_options),
                origin=where,
            )
        )
    return settings


def _sweep_size(table: Any) -> int:
    """How many settings a ``[[defenses]]`` table expands into, before expanding it."""
    if not isinstance(table, Mapping):
        return 1
    return math.prod(len(x) if isinstance(x, list) else 1 for k, x in table.items() if k not in _SETTING_KEYS)


def _section(section: str, table: Mapping[str, object], key: str, default: Any = None) -> Any:
    """A section's numeric or choice value, checked by the validator of the flag it stands for."""
    from dpaudit.app.runs.grid_checks import SECTION_FLAGS, section_value

    value = table.get(key, default)
    if value is None:
        return None
    verb, flag = SECTION_FLAGS[section][key]
    try:
        return section_value(f"attacks.{section}.{key}", value, verb, flag)
    except ValueError as exc:
        raise GridError(str(exc), argument=f"attacks.{section}.{key}") from None


def _classes(value: Any, *, dataset: str) -> list[int] | None:
    from dpaudit.app.runs.grid_checks import inversion_classes

    try:
        return inversion_classes("attacks.inversion.classes", value, dataset=dataset)
    except ValueError as exc:
        raise GridError(str(exc)) from None


def _attack_names(section: str, value: object, registry: Mapping[str, object]) -> tuple[str, ...]:
    """The attacks a section names, each checked against its registry (the error names the key).

    Read only through mapping operations, so a part that registers itself is part of the grid's
    schema with no edit here.
    """
    key = f"attacks.{section}.attacks"
    names = tuple(str(a) for a in _as_list(key, value))
    for a in names:
        if a not in registry:
            raise _fail(key, f"unknown {section} attack {a!r} (known: {', '.join(registry)})")
    return names


def _top_level(data: object, *, source: str) -> TopLevel:
    """The grid's own keys: dataset, model, name, seeds, δ, confidence and the rest."""
    from dpaudit.data import DATASETS
    from dpaudit.models import MODELS

    if not isinstance(data, Mapping):
        raise GridError(f"{source}: must be a table of keys, got {type(data).__name__}")
    _check_keys("", data, _TOP_KEYS)
    dataset = data.get("dataset", "digits")
    if not isinstance(dataset, str) or dataset not in DATASETS:  # a list is unhashable
        raise _fail("dataset", f"unknown dataset {dataset!r} (known: {', '.join(DATASETS)})")
    model = data.get("model", "digits-mlp" if dataset == "digits" else None)
    if not isinstance(model, str) or model not in MODELS:
        raise _fail("model", f"unknown model {model!r} (known: {', '.join(MODELS)})")
    _table("model_options", data.get("model_options", {}))
    device = data.get("device", "cpu")
    if not isinstance(device, str):
        raise _fail("device", f"must be a string (cpu, cuda or cuda:N), got {v.short(device)}")
    from dpaudit.training import resolve_device

    try:
        resolve_device(device)
    except (TypeError, ValueError) as exc:
        raise _fail("device", str(exc)) from None
    try:
        seeds = tuple(v.integer("seeds", s, minimum=0) for s in _as_list("seeds", data.get("seeds", [0])))
        if len(set(seeds)) != len(seeds):
            raise _fail("seeds", f"repeats must be distinct seeds, got {list(seeds)}")
        member_fraction = v.open_unit("member_fraction", data.get("member_fraction", 0.5))
        delta = v.open_unit("delta", data.get("delta", 1e-5))
        confidence = v.open_unit("confidence", data.get("confidence", 0.95))
        vulnerable_top_k = v.integer("vulnerable_top_k", data.get("vulnerable_top_k", 50), minimum=1)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, GridError):
            raise
        raise GridError(str(exc), argument=getattr(exc, "argument", None)) from None
    name = _text("name", data["name"]) if "name" in data else Path(source).stem or "compare"
    stem = safe_stem(name, default="compare")
    if not stem.isascii() or len(stem) > LIMITS["label_length"].maximum:
        # The report's files are named after it, in letters, digits and - _ . only.
        raise _fail(
            "name",
            f"{v.short(name, 40)} must be written in ASCII letters, digits and - _ . "
            f"(at most {describe_number(LIMITS['label_length'].maximum)}) to name "
            "the report's files" + ("" if "name" in data else "; give the grid a `name`"),
        )
    return TopLevel(
        name=stem,
        dataset=dataset,
        model=model,
        seeds=seeds,
        device=device,
        member_fraction=member_fraction,
        delta=delta,
        confidence=confidence,
        vulnerable_top_k=vulnerable_top_k,
    )


def _settings(data: Mapping[str, object], *, model: str, num_seeds: int, i_know: bool) -> tuple[list[Setting], str]:
    """Every setting of the ``[[defenses]]`` tables, the baseline first; and the baseline's label."""
    from dpaudit.app.runs.grid_checks import JOB_LIMIT

    model_options = _table("model_options", data.get("model_options", {}))
    tables = data.get("defenses", [])
    if not isinstance(tables, list):
        raise _fail("defenses", "must be an array of tables ([[defenses]])")
    if not tables:
        # An empty file would otherwise train the baseline alone: almost surely the wrong file.
        raise _fail(
            "defenses",
            "the grid has no [[defenses]] table; a grid compares at least one "
            "defense with the non-private baseline (see "
            "examples/compare-digits.toml)",
        )
    planned = sum(_sweep_size(t) for t in tables) * num_seeds
    if (
        planned > 100 * JOB_LIMIT.maximum and not i_know
    ):  # counted before expanding, so that a sweep of millions does not hang here
        raise GridError(
            f"the grid makes at least {planned:,} jobs ({planned // num_seeds:,} "
            f"settings x {num_seeds:,} seed(s)), above the limit "
            f"{JOB_LIMIT.maximum:,.0f} ({JOB_LIMIT.why}); pass --i-know to run it "
            "anyway"
        )
    settings: list[Setting] = []
    for i, table in enumerate(tables):
        settings.extend(_expand_setting(i, table, model=model, model_options=model_options))
    if not any(s.defense == BASELINE_DEFENSE for s in settings):
        # The baseline every accuracy loss is measured against is always part of the grid.
        settings.insert(
            0, _expand_setting(len(tables), {"defense": BASELINE_DEFENSE}, model=model, model_options=model_options)[0]
        )
    labels = [s.label for s in settings]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise _fail("defenses", f"two settings share the label {dup[0]!r}; give them distinct `label`s")
    baseline = next(s.label for s in settings if s.defense == BASELINE_DEFENSE)
    # The baseline first: every row's accuracy loss refers to it.
    settings.sort(key=lambda s: s.label != baseline)
    return settings, baseline


def _membership_section(table: Mapping[str, object]) -> MembershipSection:
    from attacks.membership import MEMBERSHIP_ATTACKS

    names = _attack_names("membership", table.get("attacks", ["loss"]), MEMBERSHIP_ATTACKS)
    shadows = table.get("shadows", "shared")
    if shadows not in ("shared", "target"):
        raise _fail(
            "attacks.membership.shadows",
            "must be 'shared' (one non-private pool for every target) or 'target' "
            f"(each target's own recipe), got {shadows!r}",
        )
    num_samples = _section("membership", table, "num_samples")
    num_shadows = _section("membership", table, "num_shadows", 16)
    shadow_epochs = _section("membership", table, "shadow_epochs")
    num_population = _section("membership", table, "num_population", 1000)
    if num_shadows < 2:
        raise _fail(
            "attacks.membership.num_shadows",
            f"must be at least 2 (shadow models in and out of each sample), got {num_shadows!r}",
        )
    if shadow_epochs is not None and not float(shadow_epochs).is_integer():
        raise _fail(
            "attacks.membership.shadow_epochs",
            f"must be a whole number (the shadows train non-privately), got {shadow_epochs!r}",
        )
    return MembershipSection(
        attacks=names,
        num_samples=num_samples,
        num_shadows=num_shadows,
        shadows=str(shadows),
        shadow_epochs=None if shadow_epochs is None else int(shadow_epochs),
        num_population=num_population,
    )


def _evasion_section(table: Mapping[str, object], *, i_know: bool = False) -> EvasionSection:
    from attacks.evasion import EVASION_ATTACKS
    from dpaudit.results import EVASION_NORMS

    names = _attack_names("evasion", table.get("attacks", ["fgsm", "pgd"]), EVASION_ATTACKS)
    given = table.get("radii")
    if isinstance(given, list):  # counted before each is checked: a million radii would take that long
        try:
            check_count("attacks.evasion.radii", given, "radii", i_know=i_know)
        except ValueError as exc:
            raise GridError(str(exc), argument="attacks.evasion.radii") from None
    radii = sorted(set(_number_list("attacks.evasion.radii", table.get("radii", [0.1, 0.3]), check=v.positive)))
    norm = table.get("norm", "l2")
    if norm not in EVASION_NORMS:
        raise _fail(
            "attacks.evasion.norm", f"must be {' or '.join(repr(n) for n in sorted(EVASION_NORMS))}, got {norm!r}"
        )
    certify = table.get("certify", True)
    if not isinstance(certify, bool):
        raise _fail("attacks.evasion.certify", f"must be true or false, got {certify!r}")
    return EvasionSection(
        attacks=names,
        radii=tuple(float(r) for r in radii),
        norm=str(norm),
        num_examples=_section("evasion", table, "num_examples", 200),
        eot_samples=_section("evasion", table, "eot_samples"),
        num_draws=_section("evasion", table, "num_draws"),
        certify=certify,
    )


def _inversion_section(table: Mapping[str, object], *, dataset: str) -> InversionSection:
    from attacks.inversion import INVERSION_ATTACKS

    names = _attack_names("inversion", table.get("attacks", ["mi-face"]), INVERSION_ATTACKS)
    for a in names:
        if INVERSION_ATTACKS[a].prior is not None:
            raise _fail(
                "attacks.inversion.attacks",
                f"{a!r} needs a prior trained on public data, which a grid does not "
                "configure yet; use an attack without one (e.g. mi-face)",
            )
    classes = _classes(table.get("classes"), dataset=dataset)
    return InversionSection(
        attacks=names,
        classes=None if classes is None else tuple(classes),
        evaluator_epochs=_section("inversion", table, "evaluator_epochs"),
        iterations=_section("inversion", table, "iterations"),
    )


def _audit_section(table: Mapping[str, object]) -> AuditSection:
    from dpaudit.app.runs.audit import METHODS

    method = table.get("method", "one-run")
    if method not in METHODS:
        raise _fail(
            "attacks.audit.method",
            f"must be {' or '.join(repr(m) for m in sorted(METHODS, reverse=True))}, got {method!r}",
        )
    # A choice the grid leaves out is the audit's default, and absent from the job's key.
    given = {k: _section("audit", table, k) for k in ("threat", "num_canaries", "num_trials", "canary") if k in table}
    return AuditSection(method=str(method), **given)


def _attack_sections(data: Mapping[str, object], *, dataset: str, i_know: bool = False) -> AttackSections:
    """Each attack section as the jobs read it (``None``: absent), every value checked."""
    attacks = data.get("attacks", {})
    if not isinstance(attacks, Mapping):
        raise _fail("attacks", "must be a table")
    _check_keys("attacks", attacks, COMPARE_SECTIONS)
    tables: dict[str, Mapping[str, object]] = {}
    for section, table in attacks.items():
        where = f"attacks.{section}"
        if not isinstance(table, Mapping):
            raise _fail(where, "must be a table")
        if section == "audit" and "epochs" in table:
            raise _fail(
                f"{where}.epochs",
                "an audit trains exactly the algorithm each setting trained, its steps "
                "included; change the setting's epochs instead",
            )
        _check_keys(where, table, _SECTION_KEYS[section])
        tables[section] = dict(table)
    # In the order the sections always were checked, whatever the order of the TOML.
    membership = _membership_section(tables["membership"]) if "membership" in tables else None
    evasion = _evasion_section(tables["evasion"], i_know=i_know) if "evasion" in tables else None
    inversion = _inversion_section(tables["inversion"], dataset=dataset) if "inversion" in tables else None
    audit = _audit_section(tables["audit"]) if "audit" in tables else None
    return AttackSections(membership=membership, evasion=evasion, inversion=inversion, audit=audit)


def count_jobs(grid: CompareGrid) -> int:
    """The jobs ``run_compare`` makes of a grid: one training per (setting, seed), one job per
    attack section per training, and one canary audit per auditable setting."""
    from defenses import DEFENSES

    sections = sum(getattr(grid, k) is not None for k in EVALUATED_SECTIONS)
    audited = sum(1 for s in grid.settings if grid.audit is not None and DEFENSES[s.defense].audit_trainer is not None)
    return len(grid.settings) * len(grid.seeds) * (1 + sections) + audited


def plan_problems(grid: CompareGrid) -> list[str]:
    """Every size of a parsed grid above its limit: setting values, section values, total jobs."""
    from dpaudit.app.runs.grid_checks import (
        JOB_LIMIT,
        SECTION_FLAGS,
        above_limit,
        describe_number,
        setting_limits,
        verb_flag,
    )
    from dpaudit.options import LIMIT_ATTR

    problems = []
    for s in grid.settings:
        for name, limit in setting_limits(s.defense).items():
            message = above_limit(f"{s.origin or s.label}.{name}", s.parameters.get(name), limit)
            if message:
                problems.append(message)
    for section, keys in SECTION_FLAGS.items():
        table = getattr(grid, section)
        for key, (verb, flag) in keys.items() if table else ():
            message = above_limit(
                f"attacks.{section}.{key}", getattr(table, key), getattr(verb_flag(verb, flag), LIMIT_ATTR, None)
            )
            if message:
                problems.append(message)
    jobs = count_jobs(grid)
    if jobs > JOB_LIMIT.maximum:
        sections = [k for k in EVALUATED_SECTIONS if getattr(grid, k) is not None]
        problems.append(
            f"the grid makes {jobs:,} jobs ({len(grid.settings):,} settings x "
            f"{len(grid.seeds):,} seed(s) x "
            f"(training{''.join(' + ' + k for k in sections)}){' + audits' if grid.audit else ''}), "
            f"above the limit {describe_number(JOB_LIMIT.maximum)} ({JOB_LIMIT.why}); pass --i-know to run it anyway"
        )
    return problems


def parse_grid(data: Mapping[str, object], *, source: str = "grid", i_know: bool = False) -> CompareGrid:
    """Validates a grid (the TOML's tables) into a :class:`CompareGrid`.

    Every value is checked here, before any job starts, by the validator of the flag it stands
    for (:mod:`dpaudit.app.runs.grid_checks`), and every size against its documented limit.

    Args:
        data: the grid's tables.
        source: where it came from (a file name), for the grid's default name.
        i_know: accept sizes above the documented limits (a setting's or section's value, the
            number of jobs), as ``--i-know`` does.

    Raises:
        GridError: one line naming the offending key — an unknown defense or attack, a
            parameter the defense does not have, an empty list, a bad value, a size above its
            limit (without ``i_know``), a grid without ``[[defenses]]``.
    """
    try:
        check_depth("grid", data)
    except ValueError as exc:
        raise GridError(f"{source}: {exc}", argument="--config") from None
    top = _top_level(data, source=source)
    settings, baseline = _settings(data, model=top.model, num_seeds=len(top.seeds), i_know=i_know)
    sections = _attack_sections(data, dataset=top.dataset, i_know=i_know)
    grid = CompareGrid(
        name=top.name,
        dataset=top.dataset,
        settings=tuple(settings),
        baseline=baseline,
        seeds=top.seeds,
        member_fraction=top.member_fraction,
        delta=top.delta,
        confidence=top.confidence,
        device=top.device,
        vulnerable_top_k=top.vulnerable_top_k,
        membership=sections.membership,
        evasion=sections.evasion,
        inversion=sections.inversion,
        audit=sections.audit,
        source=json.loads(json.dumps(to_jsonable(dict(data)))),
    )
    problems = plan_problems(grid)
    if problems and not i_know:
        raise GridError(problems[0])
    return grid


def load_grid(path: str | Path, *, i_know: bool = False) -> CompareGrid:
    """Reads a TOML grid (standard library ``tomllib``; ``tomli`` on Python 3.10); ``i_know`` as for
    :func:`parse_grid`."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    p = Path(path)
    if not p.is_file():
        raise GridError(f"--config: no grid file at {str(p)!r}", argument="--config")
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise GridError(f"--config: {p} is not valid TOML: {exc}", argument="--config") from None
    except RecursionError:  # the parser recurses once per nesting level of an array or table
        raise GridError(
            f"--config: {p} nests its values deeper than a grid can (arrays within arrays)", argument="--config"
        ) from None
    return parse_grid(data, source=str(p), i_know=i_know)
