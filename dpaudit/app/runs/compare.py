"""``dpaudit compare``: every defense of a grid under the same attacks, on the executors.

A *grid* (TOML, :func:`load_grid`) names a dataset, the defense settings to train (a parameter
given as a list expands into one setting per value, the non-private baseline always included),
the repeats (seeds), and the attacks every trained record faces: membership inference (any
registered attack; shadows shared between targets), evasion radii (certified accuracy where a
defense certifies), model inversion, and canary audits of the training algorithm.

The grid becomes independent jobs, run on the existing executors (a local process pool, or Ray
with an address) in two waves: every (setting, seed) trains (or finds its record), then every
trained record is attacked, certified and inverted, and every DP setting audited. Each job's
outcome is written atomically to ``RUN_DIR/compare/NAME/jobs/KEY.json`` with a hash of what
it was asked, so a rerun (or a run after an interruption) does only the jobs that are missing,
and says how many it reused. The trained records, shadows, certificates and attack results
land where the other verbs put them, so their reports drill down from the comparison.

The outcomes are condensed into a :class:`~dpaudit.results.comparison.ComparisonResult` (the
defense × measure matrix, computed here; ``reports.compare`` only renders it). Measures follow
Jayaraman & Evans (USENIX Security 2019, §4) — accuracy loss against the baseline, ε_UB under
each accountant, attack advantage against e^ε − 1 — and Aerni et al. (CCS 2024): membership on
the most vulnerable samples (ranked by the shadows alone, never the target) beside the average.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit import _validate as v
from dpaudit.results.comparison import ComparisonResult, ComparisonRow, mean_std, save_comparison
from dpaudit.store import RunDir, atomic_write_json, read_json, safe_stem, to_jsonable

__all__ = [
    "COMPARE_SECTIONS",
    "CompareGrid",
    "CompareSpec",
    "GridError",
    "Setting",
    "load_grid",
    "parse_grid",
    "run_compare",
]

#: FPRs the TPRs are read at (Carlini et al. 2022, §III: the low-FPR regime that matters).
COMPARE_FPRS = (0.001, 0.01)
#: Top-level keys of a grid, and the attack sections.
_TOP_KEYS = ("name", "dataset", "model", "model_options", "seeds", "member_fraction", "delta", "confidence", "device", "vulnerable_top_k", "defenses", "attacks")
COMPARE_SECTIONS = ("membership", "evasion", "inversion", "audit")
_SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "membership": ("attacks", "num_samples", "num_shadows", "shadows", "shadow_epochs", "num_population"),
    "evasion": ("attacks", "radii", "norm", "num_examples", "eot_samples", "num_draws", "certify"),
    "inversion": ("attacks", "classes", "evaluator_epochs", "iterations"),
    "audit": ("method", "threat", "num_canaries", "num_trials", "canary"),
}
_SETTING_KEYS = ("defense", "label", "family", "model", "model_options")


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
    parameters: Mapping[str, Any]
    model: str
    model_options: Mapping[str, Any] = field(default_factory=dict)
    origin: str = ""

    def key(self) -> dict[str, Any]:
        return {"defense": self.defense, "parameters": dict(self.parameters), "model": self.model, "model_options": dict(self.model_options)}


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
    membership: Mapping[str, Any] | None = None
    evasion: Mapping[str, Any] | None = None
    inversion: Mapping[str, Any] | None = None
    audit: Mapping[str, Any] | None = None
    source: Mapping[str, Any] = field(default_factory=dict)

    @property
    def radii(self) -> tuple[float, ...]:
        return tuple(self.evasion["radii"]) if self.evasion else ()

    def num_bounds(self) -> int:
        """How many ε_LB a row's best is the maximum of (for its Bonferroni correction)."""
        per_seed = len(self.membership["attacks"]) if self.membership else 0
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


def _check_keys(where: str, table: Mapping[str, Any], allowed: Sequence[str]) -> None:
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise _fail(f"{where}.{unknown[0]}" if where else unknown[0], f"unknown key (allowed: {', '.join(allowed)})")


def _label_value(x: Any) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _expand_setting(index: int, table: Mapping[str, Any], *, model: str, model_options: Mapping[str, Any]) -> list[Setting]:
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
        raise _fail(f"{where}.defense", f"must name one defense (a string), got {v.short(name)}; sweep defenses with one [[defenses]] table each")
    spec = DEFENSES.get(name)
    if spec is None:
        raise _fail(f"{where}.defense", f"unknown defense {name!r} (known: {', '.join(DEFENSES)})")
    fields = {f.name for f in dataclasses.fields(spec.config_type) if f.init}
    params = {k: val for k, val in table.items() if k not in _SETTING_KEYS}
    for key in params:
        if key not in fields:
            raise _fail(f"{where}.{key}", f"the {name} defense has no parameter {key!r} (its parameters: {', '.join(sorted(fields))})")
    if "target_epsilon" in params and "noise_multiplier" in fields and "noise_multiplier" not in params and "epochs" in params:
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
        base = table.get("label") or name
        label = base + "".join(f"-{k}={_label_value(chosen[k])}" for k in multi)
        settings.append(
            Setting(
                label=label,
                defense=name,
                family=str(table.get("family") or spec.family or name),
                parameters=chosen,
                model=str(table.get("model", model)),
                model_options=dict(table.get("model_options", model_options)),
                origin=where,
            )
        )
    return settings


def _sweep_size(table: Any) -> int:
    """How many settings a ``[[defenses]]`` table expands into, before expanding it."""
    if not isinstance(table, Mapping):
        return 1
    return math.prod(len(x) if isinstance(x, list) else 1 for k, x in table.items() if k not in _SETTING_KEYS)


def _section(section: str, table: Mapping[str, Any], key: str, default: Any = None) -> Any:
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


def _attack_names(section: str, value: Any, registry: Mapping[str, Any]) -> list[str]:
    """The attacks a section names, each checked against its registry (the error names the key)."""
    key = f"attacks.{section}.attacks"
    names = [str(a) for a in _as_list(key, value)]
    for a in names:
        if a not in registry:
            raise _fail(key, f"unknown {section} attack {a!r} (known: {', '.join(registry)})")
    return names


def parse_grid(data: Mapping[str, Any], *, source: str = "grid", i_know: bool = False) -> CompareGrid:
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
    from attacks.evasion import EVASION_ATTACKS
    from attacks.inversion import INVERSION_ATTACKS
    from attacks.membership import MEMBERSHIP_ATTACKS
    from dpaudit.app.runs.grid_checks import JOB_LIMIT, plan_problems
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
    name = str(data.get("name") or Path(source).stem or "compare")
    try:
        seeds = tuple(v.integer("seeds", s, minimum=0) for s in _as_list("seeds", data.get("seeds", [0])))
        if len(set(seeds)) != len(seeds):
            raise _fail("seeds", f"repeats must be distinct seeds, got {list(seeds)}")
        member_fraction = v.open_unit("member_fraction", data.get("member_fraction", 0.5))
        delta = v.open_unit("delta", data.get("delta", 1e-5))
        confidence = v.open_unit("confidence", data.get("confidence", 0.95))
        top_k = v.integer("vulnerable_top_k", data.get("vulnerable_top_k", 50), minimum=1)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, GridError):
            raise
        raise GridError(str(exc), argument=getattr(exc, "argument", None)) from None
    model_options = data.get("model_options", {})
    tables = data.get("defenses", [])
    if not isinstance(tables, list):
        raise _fail("defenses", "must be an array of tables ([[defenses]])")
    if not tables:
        # An empty file would otherwise train the baseline alone: almost surely the wrong file.
        raise _fail("defenses", "the grid has no [[defenses]] table; a grid compares at least one defense with the non-private baseline (see examples/compare-digits.toml)")
    planned = sum(_sweep_size(t) for t in tables) * len(seeds)
    if planned > 100 * JOB_LIMIT.maximum and not i_know:  # counted before expanding, so that a sweep of millions does not hang here
        raise GridError(
            f"the grid makes at least {planned:,} jobs ({planned // len(seeds):,} settings x {len(seeds):,} seed(s)), above the limit {JOB_LIMIT.maximum:,.0f} ({JOB_LIMIT.why}); pass --i-know to run it anyway"
        )
    settings: list[Setting] = []
    for i, table in enumerate(tables):
        settings.extend(_expand_setting(i, table, model=model, model_options=model_options))
    if not any(s.defense == "nonprivate" for s in settings):
        # The baseline every accuracy loss is measured against is always part of the grid.
        settings.insert(0, _expand_setting(len(tables), {"defense": "nonprivate"}, model=model, model_options=model_options)[0])
    labels = [s.label for s in settings]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise _fail("defenses", f"two settings share the label {dup[0]!r}; give them distinct `label`s")
    baseline = next(s.label for s in settings if s.defense == "nonprivate")
    # The baseline first: every row's accuracy loss refers to it.
    settings.sort(key=lambda s: s.label != baseline)

    attacks = data.get("attacks", {})
    if not isinstance(attacks, Mapping):
        raise _fail("attacks", "must be a table")
    _check_keys("attacks", attacks, COMPARE_SECTIONS)
    sections: dict[str, dict[str, Any] | None] = {s: None for s in COMPARE_SECTIONS}
    for section, table in attacks.items():
        where = f"attacks.{section}"
        if not isinstance(table, Mapping):
            raise _fail(where, "must be a table")
        if section == "audit" and "epochs" in table:
            raise _fail(f"{where}.epochs", "an audit trains exactly the algorithm each setting trained, its steps included; change the setting's epochs instead")
        _check_keys(where, table, _SECTION_KEYS[section])
        sections[section] = dict(table)
    mem = sections["membership"]
    if mem is not None:
        names = _attack_names("membership", mem.get("attacks", ["loss"]), MEMBERSHIP_ATTACKS)
        shadows = mem.get("shadows", "shared")
        if shadows not in ("shared", "target"):
            raise _fail("attacks.membership.shadows", f"must be 'shared' (one non-private pool for every target) or 'target' (each target's own recipe), got {shadows!r}")
        mem = {
            "attacks": names,
            "num_samples": _section("membership", mem, "num_samples"),
            "num_shadows": _section("membership", mem, "num_shadows", 16),
            "shadows": shadows,
            "shadow_epochs": _section("membership", mem, "shadow_epochs"),
            "num_population": _section("membership", mem, "num_population", 1000),
        }
        if mem["num_shadows"] < 2:
            raise _fail("attacks.membership.num_shadows", f"must be at least 2 (shadow models in and out of each sample), got {mem['num_shadows']!r}")
        if mem["shadow_epochs"] is not None and not float(mem["shadow_epochs"]).is_integer():
            raise _fail("attacks.membership.shadow_epochs", f"must be a whole number (the shadows train non-privately), got {mem['shadow_epochs']!r}")
        if mem["shadow_epochs"] is not None:
            mem["shadow_epochs"] = int(mem["shadow_epochs"])
    eva = sections["evasion"]
    if eva is not None:
        names = _attack_names("evasion", eva.get("attacks", ["fgsm", "pgd"]), EVASION_ATTACKS)
        radii = sorted(set(_number_list("attacks.evasion.radii", eva.get("radii", [0.1, 0.3]), check=v.positive)))
        norm = eva.get("norm", "l2")
        if norm not in ("l2", "linf"):
            raise _fail("attacks.evasion.norm", f"must be 'l2' or 'linf', got {norm!r}")
        certify = eva.get("certify", True)
        if not isinstance(certify, bool):
            raise _fail("attacks.evasion.certify", f"must be true or false, got {certify!r}")
        eva = {
            "attacks": names,
            "radii": [float(r) for r in radii],
            "norm": norm,
            "num_examples": _section("evasion", eva, "num_examples", 200),
            "eot_samples": _section("evasion", eva, "eot_samples"),
            "num_draws": _section("evasion", eva, "num_draws"),
            "certify": certify,
        }
    inv = sections["inversion"]
    if inv is not None:
        names = _attack_names("inversion", inv.get("attacks", ["mi-face"]), INVERSION_ATTACKS)
        for a in names:
            if INVERSION_ATTACKS[a].prior is not None:
                raise _fail("attacks.inversion.attacks", f"{a!r} needs a prior trained on public data, which a grid does not configure yet; use an attack without one (e.g. mi-face)")
        inv = {
            "attacks": names,
            "classes": _classes(inv.get("classes"), dataset=dataset),
            "evaluator_epochs": _section("inversion", inv, "evaluator_epochs"),
            "iterations": _section("inversion", inv, "iterations"),
        }
    aud = sections["audit"]
    if aud is not None:
        method = aud.get("method", "one-run")
        if method not in ("one-run", "multi-run"):
            raise _fail("attacks.audit.method", f"must be 'one-run' or 'multi-run', got {method!r}")
        aud = {"method": method, **{k: _section("audit", aud, k) for k in ("threat", "num_canaries", "num_trials", "canary") if k in aud}}
    grid = CompareGrid(
        name=safe_stem(name, default="compare"),
        dataset=dataset,
        settings=tuple(settings),
        baseline=baseline,
        seeds=seeds,
        member_fraction=member_fraction,
        delta=delta,
        confidence=confidence,
        device=str(data.get("device", "cpu")),
        vulnerable_top_k=top_k,
        membership=mem,
        evasion=eva,
        inversion=inv,
        audit=aud,
        source=json.loads(json.dumps(to_jsonable(dict(data)))),
    )
    problems = plan_problems(grid)
    if problems and not i_know:
        raise GridError(problems[0])
    return grid


def load_grid(path: str | Path, *, i_know: bool = False) -> CompareGrid:
    """Reads a TOML grid (standard library ``tomllib``; ``tomli`` on Python 3.10); ``i_know`` as for :func:`parse_grid`."""
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
    return parse_grid(data, source=str(p), i_know=i_know)


# ----------------------------------------------------------------------------- jobs


def _hash(payload: Any) -> str:
    return hashlib.sha256(json.dumps(to_jsonable(payload), sort_keys=True).encode()).hexdigest()[:16]


def _job_file(jobs_dir: Path, key: str) -> Path:
    """Where a job's outcome is kept: a readable stem plus a hash of the exact key (stems may collide)."""
    return jobs_dir / f"{safe_stem(key, default='job')}-{hashlib.sha256(key.encode()).hexdigest()[:8]}.json"


def _stored(path: Path, wanted: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        data = read_json(path)
    except ValueError:
        return None  # a corrupt outcome is redone, not trusted
    return data if isinstance(data, dict) and data.get("job_hash") == wanted else None


def train_job(*, grid: CompareGrid, setting: Setting, seed: int, run_dir: str, data_root: str | None) -> dict[str, Any]:
    """Trains (or finds) one (setting, seed); returns what the matrix needs of the record."""
    from dpaudit.app.runs.train import TrainSpec, default_config, train_or_load

    spec = TrainSpec(
        defense=setting.defense,
        config=default_config(setting.defense, **{k: (tuple(x) if isinstance(x, list) else x) for k, x in setting.parameters.items()}),
        model=setting.model,
        dataset=grid.dataset,
        model_options=dict(setting.model_options),
        seed=seed,
        member_fraction=grid.member_fraction,
        data_root=data_root,
        device=grid.device,
        progress=False,
        executor="serial",
    )
    outcome = train_or_load(spec, RunDir(run_dir))
    record = outcome.record
    claim = record.claim
    epsilons: dict[str, float] = {}
    if claim.is_private:
        epsilons = {k: float(e) for k, e in claim.epsilons(delta=grid.delta).items()}
    else:
        epsilons = {"none": math.inf}
    return {
        "model_id": record.model_id,
        "record_dir": str(outcome.record_dir),
        "test_accuracy": float(record.metrics.get("test_accuracy", math.nan)),
        "epsilon_ub": epsilons,
        "data_dependent": bool(claim.data_dependent),
        "num_members": len(record.membership.members),
        "reused": outcome.reused,
    }


def _record_digest(trained: Mapping[str, Any]) -> dict[str, Any]:
    """What identifies a trained record for the jobs keyed on it: its id, its weights' digest, its claim."""
    from dpaudit.results.record import load_record

    record = load_record(trained["record_dir"])
    return {"model_id": record.model_id, "weights_sha256": record.weights_sha256, "claim": record.claim.to_dict()}


def _attack_configs(registry: Mapping[str, Any], names: Sequence[str], **shared: Any) -> dict[str, Any]:
    """Each named attack's config, with the grid's ``shared`` settings where the config has the field
    (``None`` leaves the attack's default)."""
    configs = {}
    for name in names:
        ctype = registry[name].config_type
        fields = {f.name for f in dataclasses.fields(ctype)}
        configs[name] = ctype(**{k: val for k, val in shared.items() if val is not None and k in fields})
    return configs


def inversion_configs(inv: Mapping[str, Any]) -> dict[str, Any]:
    """Each attack's config of a grid's ``[attacks.inversion]`` section.

    ``iterations`` bounds each attack's search through the field the attack names for it
    (MI-Face's ``max_iterations``, GMI's ``gmi_iterations``); absent, each keeps its default.
    """
    from attacks.inversion import INVERSION_ATTACKS

    configs = _attack_configs(INVERSION_ATTACKS, inv["attacks"])
    if inv.get("iterations") is None:
        return configs
    return {name: dataclasses.replace(c, **{field: int(inv["iterations"])}) if (field := INVERSION_ATTACKS[name].iterations_field) else c for name, c in configs.items()}


def _membership_measures(result: Any, *, delta: float, confidence: float, where: np.ndarray | None = None) -> dict[str, Any]:
    from dpaudit.results import MembershipResult

    if where is not None:
        result = MembershipResult(attack=result.attack, model_id=result.model_id, sample_ids=result.sample_ids[where], scores=result.scores[where], is_member=result.is_member[where])
    if result.is_member.all() or not result.is_member.any():
        return {}
    s = result.summary(fprs=COMPARE_FPRS, delta=delta, confidence=confidence)
    return {
        "auc": float(s["auc"]),
        "advantage": float(2 * s["balanced_accuracy"] - 1),
        # None where the non-members cannot resolve the FPR (MembershipResult.summary says why).
        "tpr_at_fpr": {f: (None if t is None else float(t)) for f, t in s["tpr_at_fpr"].items()},
        "epsilon_lb": float(s["epsilon_lb"]),
        "num_samples": int(len(result.scores)),
        "num_members": int(s["num_members"]),
        "num_non_members": int(s["num_non_members"]),
    }


def _mean_rate(rates: Sequence[float | None]) -> float | None:
    """Mean rate over repeats; None (unresolved) if any repeat could not resolve it."""
    return None if any(r is None for r in rates) else mean_std([float(r) for r in rates])[0]  # type: ignore[arg-type]


def membership_job(*, grid: CompareGrid, trained: Mapping[str, Any], seed: int, run_dir: str, data_root: str | None) -> dict[str, Any]:
    """Every membership attack of the grid against one record, with the vulnerable-sample measures."""
    from attacks.membership import MEMBERSHIP_ATTACKS
    from dpaudit.app.runs.membership import VULNERABILITY_FILE, MembershipSpec, run_membership
    from dpaudit.store import load_npz

    mem = grid.membership
    assert mem is not None
    configs = _attack_configs(MEMBERSHIP_ATTACKS, mem["attacks"], num_shadows=mem["num_shadows"])
    shadow: dict[str, Any] = {}
    if mem["shadows"] == "shared":
        shadow = {"shadow_defense": "nonprivate", "shadow_config": {"epochs": mem["shadow_epochs"]} if mem["shadow_epochs"] else {}}
    spec = MembershipSpec(
        attacks=configs,
        target=trained["record_dir"],
        seed=seed,
        num_samples=mem["num_samples"],
        num_population=mem["num_population"],
        executor="serial",
        data_root=data_root,
        device=grid.device,
        progress=False,
        **shadow,
    )
    out = run_membership(spec, RunDir(run_dir))
    # Each ε_LB is taken at the Bonferroni level of the row's best-of-all maximum.
    level = grid.bound_confidence()
    measures = {a: _membership_measures(r, delta=grid.delta, confidence=level) for a, r in out.results.items()}
    vulnerable: dict[str, Any] = {}
    vpath = out.result_dir / VULNERABILITY_FILE if out.result_dir is not None else None
    if vpath is not None and vpath.is_file():
        arrays = load_npz(vpath)
        score = arrays["vulnerability"]
        order = np.argsort(-score, kind="stable")[: min(grid.vulnerable_top_k, int(np.isfinite(score).sum()))]
        top = set(arrays["sample_ids"][order].tolist())
        for a, r in out.results.items():
            where = np.isin(r.sample_ids, list(top))
            vulnerable[a] = _membership_measures(r, delta=grid.delta, confidence=level, where=where)
    return {"membership": measures, "vulnerable": {a: m for a, m in vulnerable.items() if m}, "result_dir": str(out.result_dir)}


def _strongest_by_radius(robust: Mapping[str, Mapping[str, float]], radii: Sequence[float]) -> dict[str, float]:
    """Per radius, the lowest robust accuracy any attack left (the strongest attack there)."""
    return {f"{r:g}": float(min(accs[f"{r:g}"] for accs in robust.values())) for r in radii} if robust else {}


def evasion_job(*, grid: CompareGrid, trained: Mapping[str, Any], seed: int, run_dir: str, data_root: str | None) -> dict[str, Any]:
    """Robust accuracy under the grid's evasion attacks; certified accuracy where the defense certifies."""
    from dpaudit.app.records import load_verified_record
    from dpaudit.app.runs.certify import CertifySpec, certifiable_defenses, certify_subset, robust_accuracies, run_certify
    from dpaudit.data import load_dataset
    from dpaudit.weights import load_model

    eva = grid.evasion
    assert eva is not None
    run = RunDir(run_dir)
    record = load_verified_record(trained["record_dir"])
    radii = tuple(eva["radii"])
    if eva["certify"] and record.defense in certifiable_defenses():
        summary = run_certify(
            CertifySpec(
                target=trained["record_dir"],
                radii=radii,
                attacks=tuple(eva["attacks"]),
                norm=eva["norm"],
                num_draws=eva["num_draws"],
                num_examples=eva["num_examples"],
                num_eot_samples=eva["eot_samples"],
                seed=seed,
                device=grid.device,
                data_root=data_root,
                progress=False,
            ),
            run,
        )
        return {
            "robust_accuracy": _strongest_by_radius(summary.robust_accuracy, radii),
            "certified_accuracy": dict(summary.certified_accuracy),
            "conventional_accuracy": float(summary.conventional_accuracy),
            "unsound": [f"{x.certificate} at radius {x.radius:g}: certified {x.certified_accuracy:.3f} > robust {x.robust_accuracy:.3f}" for x in summary.soundness_violations],
            "certified": True,
        }
    # A model that does not certify is attacked on the test examples certify would take for the
    # seed, with certify's stored-result reuse, so every row of the matrix faces the same inputs.
    test = load_dataset(record.dataset, data_root=data_root).test
    pick = certify_subset(len(test), num_examples=eva["num_examples"], seed=seed)
    robust = robust_accuracies(
        load_model(trained["record_dir"], device=grid.device),
        test.features[pick],
        test.labels[pick],
        attacks=eva["attacks"],
        radii=radii,
        norm=eva["norm"],
        num_eot_samples=eva["eot_samples"],
        seed=seed,
        device=grid.device,
        directory=run.subdir("attacks") / "evasion" / safe_stem(record.model_id, default="target"),
        progress=False,
    )
    return {"robust_accuracy": _strongest_by_radius(robust, radii), "certified_accuracy": {}, "unsound": [], "certified": False}


def inversion_job(*, grid: CompareGrid, trained: Mapping[str, Any], seed: int, run_dir: str, data_root: str | None) -> dict[str, Any]:
    """Model inversion against one record: the best top-1 accuracy of the evaluation classifier."""
    from attacks.inversion.evaluate import EvaluatorConfig
    from dpaudit.app.runs.inversion import InversionSpec, run_inversion

    inv = grid.inversion
    assert inv is not None
    configs = inversion_configs(inv)
    evaluator = EvaluatorConfig(evaluator_epochs=inv["evaluator_epochs"]) if inv.get("evaluator_epochs") else EvaluatorConfig()
    out = run_inversion(
        InversionSpec(
            target=Path(trained["record_dir"]),
            attacks=configs,
            classes=tuple(inv["classes"]) if inv.get("classes") else None,
            evaluator=evaluator,
            seed=seed,
            data_root=data_root,
            device=grid.device,
            progress=False,
        ),
        RunDir(run_dir),
    )
    return {"inversion_top1": {a: float(r.attack_accuracy_top1) for a, r in out.results.items()}}


#: Config fields an audit sets from the trained record itself (σ, C, q, the steps, the learning rate,
#: δ), or that would make its trainer derive them again (a lot size, a budget, its accountant).
_AUDIT_SETS = ("noise_multiplier", "clip_norm", "sampling_rate", "lot_size", "expected_lot_size", "target_epsilon", "accountant", "epochs", "learning_rate", "delta")


def trained_algorithm(record: Any, *, label: str) -> dict[str, Any]:
    """What an audit of ``record``'s training must run, read from the record alone: σ, q and the
    steps as trained, C, the learning rate, the accountant and δ of its budget, the members' count.

    Raises:
        ValueError: naming the setting, when the record lacks one of them (nothing is guessed
            or re-calibrated), or when its claim is not the DP-SGD claim of (q, σ, T) alone
            (DP-PCA composed in), which is the algorithm an audit trains.
    """
    from dpaudit.privacy.claims import DPClaim, dpsgd_claim, event_to_dict
    from dpaudit.store import thaw

    config, metrics = thaw(record.config), record.metrics
    algo = {k: metrics.get(k) for k in ("noise_multiplier", "sampling_rate", "num_steps")}
    algo.update({k: config.get(k) for k in ("clip_norm", "learning_rate", "accountant", "delta")})
    missing = [k for k, x in algo.items() if x is None]
    if missing:
        raise v.invalid("attacks.audit", f"setting {label!r}: its trained record {record.model_id} has no {', '.join(missing)}; the audit runs the trained algorithm and guesses none of it")
    ours = dpsgd_claim(sampling_rate=algo["sampling_rate"], noise_multiplier=algo["noise_multiplier"], num_steps=algo["num_steps"])
    if not isinstance(record.claim, DPClaim) or event_to_dict(record.claim.event) != event_to_dict(ours.event):
        raise v.invalid("attacks.audit", f"setting {label!r}: its claim ({record.claim.description}) is not {ours.description} alone, the algorithm an audit trains; it cannot be audited")
    return {**algo, "num_members": len(record.membership.members)}


def audit_job(*, grid: CompareGrid, setting: Setting, trained: Mapping[str, Any], name: str, run_dir: str, data_root: str | None) -> dict[str, Any]:
    """A canary audit of exactly the algorithm that trained the setting's (first seed's) record.

    σ, q, the steps, C, the learning rate, the members' count, the architecture and the rest of
    the config are the record's (:func:`trained_algorithm`), never re-calibrated or defaulted.
    The audit runs at the setting's δ; its ε_UB is the trained claim's ε there under the
    setting's accountant (white-box: of one step, the unit its ε_LB measures), the matrix's
    number for that accountant when the setting's δ is the grid's.
    """
    from defenses import DEFENSES
    from dpaudit.app.runs.audit import AuditSpec, run_audit
    from dpaudit.results.record import load_record
    from dpaudit.store import thaw

    aud = grid.audit
    assert aud is not None
    record = load_record(trained["record_dir"])
    algo = trained_algorithm(record, label=setting.label)
    fields = {f.name for f in dataclasses.fields(DEFENSES[setting.defense].config_type) if f.init}
    spec = AuditSpec(
        defense=setting.defense,
        dataset=record.dataset,
        model=record.model_name,
        model_options=dict(record.model_options) or None,
        defense_config={k: x for k, x in thaw(record.config).items() if k in fields and k not in _AUDIT_SETS},
        method=aud["method"],
        delta=algo["delta"],
        confidence=grid.bound_confidence(),  # it competes with the membership bounds for the row's best
        noise_multiplier=algo["noise_multiplier"],
        clip_norm=algo["clip_norm"],
        sampling_rate=algo["sampling_rate"],
        num_steps=algo["num_steps"],
        learning_rate=algo["learning_rate"],
        num_members=algo["num_members"],
        seed=0,
        workers=1,
        executor="serial",
        data_root=data_root,
        device=grid.device,
        progress=False,
        name=name,
        **{k: aud[k] for k in ("threat", "num_canaries", "num_trials", "canary") if k in aud},
    )
    result = run_audit(spec, RunDir(run_dir))
    # The audit's own claim must be the trained one: else it trained another algorithm.
    accountant = algo["accountant"]
    claimed = float(record.claim.epsilon(delta=algo["delta"], accountant=accountant))
    audited = (result.details["full_run_claim"]["epsilon_ub_by_accountant"] if result.threat_model == "white-box" else result.epsilon_ub_by_accountant).get(accountant)
    if audited is None or not math.isclose(audited, claimed, rel_tol=1e-9):
        raise RuntimeError(f"internal error: setting {setting.label!r} trained a claim of ε={claimed!r} ({accountant}, δ={algo['delta']:g}), its audit one of ε={audited!r}")
    ub = float(result.epsilon_ub) if result.threat_model == "white-box" else claimed
    return {
        "epsilon_lb": float(result.epsilon_lb),
        "epsilon_ub": ub,
        "accountant": accountant,
        "delta": float(algo["delta"]),
        # The bound's assumption travels with it into the matrix (GDP only for Gaussian-family claims).
        "method": f"audit ({result.method}, {result.threat_model}; assumption: {result.assumption})",
        "confidence": float(result.confidence),
        "trained": {k: algo[k] for k in ("noise_multiplier", "sampling_rate", "num_steps", "clip_norm", "learning_rate", "num_members")},
    }


# ----------------------------------------------------------------------------- the run


@dataclass(frozen=True, kw_only=True)
class CompareSpec:
    """One ``dpaudit compare`` run.

    Attributes:
        grid: the parsed grid.
        executor: ``local`` (process pool), ``ray`` or ``serial``.
        num_workers: parallel jobs (``None``: the executor's default).
        address: Ray cluster address (``executor="ray"`` only; the run directory must then be
            on a filesystem every node shares).
        ship_code: Ray sends this checkout's packages to the workers (:mod:`dpaudit.cluster`).
        data_root: data root.
        progress: progress on stderr.
        command: the command line, for the run manifest.
        i_know: accept a grid above the documented limits — a setting's or section's size, more
            than :data:`~dpaudit.app.runs.grid_checks.JOB_LIMIT` jobs, or an estimated time over
            an hour — as ``--i-know`` does on the command line. Checked here, so the Python API
            passes the same gate as ``dpaudit compare``.
    """

    grid: CompareGrid
    executor: str = "local"
    num_workers: int | None = None
    address: str | None = None
    ship_code: bool = False
    data_root: str | None = None
    progress: bool = True
    command: str = ""
    i_know: bool = False

    def __post_init__(self) -> None:
        from dpaudit.executors import EXECUTORS

        if not isinstance(self.grid, CompareGrid):
            raise v.invalid_type("grid", f"grid must be a CompareGrid, got {type(self.grid).__name__}")
        v.choice("executor", self.executor, EXECUTORS)
        if self.num_workers is not None:
            v.integer("num_workers", self.num_workers, minimum=1)
        if self.address is not None and self.executor != "ray":
            raise v.invalid("address", f"address={self.address!r} needs executor 'ray', got {self.executor!r}")
        if not isinstance(self.i_know, bool):
            raise v.invalid_type("i_know", f"i_know must be a bool, got {self.i_know!r}")
        from dpaudit.app.runs.grid_checks import check_plan

        check_plan(self.grid, i_know=self.i_know, data_root=self.data_root, workers=1 if self.executor == "serial" else self.num_workers, progress=self.progress)


_EVALUATIONS: dict[str, Callable[..., dict[str, Any]]] = {"membership": membership_job, "evasion": evasion_job, "inversion": inversion_job}
#: Raised when what a section measures changes, so stored outcomes of the old measurement are redone
#: (evasion 2: models that do not certify are attacked on certify's test subset).
_SECTION_VERSIONS = {"membership": 1, "evasion": 2, "inversion": 1}


def _named_job(*, fn: Callable[..., dict[str, Any]], key: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Runs one job; a ValueError / TypeError (a bad parameter of the grid) names the job."""
    try:
        return fn(**kwargs)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, v.InvalidArgument):  # a bad parameter of the grid: still the user's (exit 2)
            raise v.invalid(exc.argument, f"job {key}: {exc}") from exc
        raise ValueError(f"job {key}: {exc}") from exc


class _LazyExecutor:
    """One executor for both waves, started only when a job actually has to run (a rerun that
    finds every outcome stored starts no pool and no Ray)."""

    def __init__(self, spec: CompareSpec) -> None:
        self.spec = spec
        self.executor: Any = None

    def get(self) -> Any:
        from dpaudit.executors import make_executor

        if self.executor is None:
            self.executor = make_executor(
                self.spec.executor,
                workers=self.spec.num_workers,
                address=self.spec.address,
                ship_code=self.spec.ship_code,
                datasets=(self.spec.grid.dataset,),
                data_root=self.spec.data_root,
                num_gpus=self._gpus(),
            )
            self.executor.__enter__()
        return self.executor

    def _gpus(self) -> float:
        """One share for every job of the grid: the largest model's (:func:`dpaudit.cluster.gpu_share`)."""
        grid = self.spec.grid
        if self.spec.executor != "ray" or not str(grid.device).startswith("cuda"):
            return 0.0
        from dpaudit.app.plan import count_parameters, ray_gpus
        from dpaudit.data import load_dataset

        bundle = load_dataset(grid.dataset, data_root=self.spec.data_root)  # cached: the run has loaded it
        largest = max(count_parameters(s.model, input_shape=bundle.input_shape, num_classes=bundle.num_classes, model_options=dict(s.model_options)) for s in grid.settings)
        return ray_gpus(grid.device, largest)

    def __enter__(self) -> _LazyExecutor:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.executor is not None:
            self.executor.__exit__(*exc)


def _run_wave(jobs: list[tuple[str, Path, str, Callable[..., Any], dict[str, Any]]], *, executor: _LazyExecutor, bar: Any, counts: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Runs the jobs whose outcome is not stored yet; returns key → outcome for all of them."""
    from dpaudit.executors.jobs import Job

    done: dict[str, dict[str, Any]] = {}
    todo = []
    for key, path, wanted, fn, kwargs in jobs:
        stored = _stored(path, wanted)
        if stored is not None:
            done[key] = stored
            counts["reused"] += 1
            bar.update(1)
        else:
            todo.append((key, path, wanted, fn, kwargs))
    if not todo:
        return done
    targets = {key: (path, wanted) for key, path, wanted, _, _ in todo}
    pending = [key for key, *_ in todo]

    def waiting() -> str:
        head = ", ".join(pending[:3]) + (f" and {len(pending) - 3} more" if len(pending) > 3 else "")
        return f"{len(pending)} job{'s' if len(pending) != 1 else ''} running or queued ({head})"

    # Jobs train in worker processes whose progress cannot reach this bar: say what is pending.
    with bar.heartbeat(waiting):
        for job, outcome in executor.get().run([Job(key=key, fn=_named_job, kwargs={"fn": fn, "key": key, "kwargs": kwargs}) for key, _, _, fn, kwargs in todo]):
            path, wanted = targets[job.key]
            stored = {**outcome, "job_hash": wanted, "job": job.key}
            atomic_write_json(path, stored)  # at once: an interrupted grid keeps every finished job
            done[job.key] = stored
            pending.remove(job.key)
            counts["run"] += 1
            bar.update(1, last=job.key)
    return done


def run_compare(spec: CompareSpec, run: RunDir) -> ComparisonResult:
    """Trains every setting × seed, attacks every record, condenses the matrix and stores it.

    Returns:
        The :class:`ComparisonResult` (also written to ``RUN_DIR/compare/NAME/comparison.json``).
    """
    from defenses import DEFENSES
    from dpaudit.data import dataset_files
    from dpaudit.progress import Progress

    grid = spec.grid
    started = time.monotonic()
    run.create(command=spec.command)
    base = run.compare_dir(grid.name)
    jobs_dir = base / "jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    common = {"run_dir": str(run.path), "data_root": spec.data_root}
    gkey = {k: to_jsonable(getattr(grid, k)) for k in ("dataset", "member_fraction", "delta", "confidence", "device")}
    # Every job reads the dataset: a file replaced under the data root redoes them all (bundled
    # data such as digits has a fixed identity and no entry, so its stored jobs keep their keys).
    data = dataset_files(grid.dataset, data_root=spec.data_root)
    if data:
        gkey["dataset_files"] = data

    train_jobs = []
    for s in grid.settings:
        for seed in grid.seeds:
            key = f"train-{s.label}-seed{seed}"
            train_jobs.append((key, _job_file(jobs_dir, key), _hash({"grid": gkey, "setting": s.key(), "seed": seed}), train_job, {"grid": grid, "setting": s, "seed": seed, **common}))
    sections = [k for k in _EVALUATIONS if getattr(grid, k) is not None]
    audited = [s for s in grid.settings if grid.audit is not None and DEFENSES[s.defense].audit_trainer is not None]
    total = len(train_jobs) * (1 + len(sections)) + len(audited)
    counts = {"run": 0, "reused": 0}
    with Progress(total, f"compare {grid.name}", enabled=spec.progress) as bar, _LazyExecutor(spec) as executor:
        trained = _run_wave(train_jobs, executor=executor, bar=bar, counts=counts)
        eval_jobs = []
        for s in grid.settings:
            for seed in grid.seeds:
                t = trained[f"train-{s.label}-seed{seed}"]
                for section in sections:
                    key = f"{section}-{s.label}-seed{seed}"
                    wanted = _hash(
                        {
                            "grid": gkey,
                            "model_id": t["model_id"],
                            section: getattr(grid, section),
                            "top_k": grid.vulnerable_top_k,
                            "bounds": grid.num_bounds(),
                            "seed": seed,
                            "version": _SECTION_VERSIONS[section],
                        }
                    )
                    eval_jobs.append((key, _job_file(jobs_dir, key), wanted, _EVALUATIONS[section], {"grid": grid, "trained": t, "seed": seed, **common}))
        for s in audited:
            # The audit runs after (and on) the trained record: a changed training is another audit.
            key = f"audit-{s.label}"
            t = trained[f"train-{s.label}-seed{grid.seeds[0]}"]
            wanted = _hash({"grid": gkey, "setting": s.key(), "audit": grid.audit, "bounds": grid.num_bounds(), "trained": _record_digest(t)})
            name = f"compare-{grid.name}-{safe_stem(s.label, default='setting')}-{wanted[:8]}"
            eval_jobs.append((key, _job_file(jobs_dir, key), wanted, audit_job, {"grid": grid, "setting": s, "trained": t, "name": name, **common}))
        evaluated = _run_wave(eval_jobs, executor=executor, bar=bar, counts=counts)
    result = condense(grid, trained, evaluated, seconds=time.monotonic() - started, jobs_run=counts["run"], jobs_reused=counts["reused"])
    save_comparison(result, base)
    return result


def _links(model_ids: Sequence[str], sections: Sequence[str], *, certifies: bool) -> dict[str, str]:
    """Drill-down reports of a row, relative to the run's reports folder (rendered by ``report``).

    Evasion results of a model that does not certify appear only in the matrix: the certified
    report lists certified models, so such a row gets no "certified" link.
    """
    from reports.membership import membership_report_stem

    links: dict[str, str] = {}
    if "membership" in sections and model_ids:
        links["membership"] = f"{membership_report_stem(model_ids[0])}.html"
    if "evasion" in sections and certifies:
        links["certified"] = "certified.html"
    if "inversion" in sections:
        links["inversion"] = "inversion.html"
    return links


def condense(
    grid: CompareGrid, trained: Mapping[str, Mapping[str, Any]], evaluated: Mapping[str, Mapping[str, Any]], *, seconds: float = 0.0, jobs_run: int = 0, jobs_reused: int = 0
) -> ComparisonResult:
    """The defense × measure matrix from the jobs' outcomes (pure: no training, no I/O)."""
    from defenses import DEFENSES

    base_acc, _ = mean_std([trained[f"train-{grid.baseline}-seed{seed}"]["test_accuracy"] for seed in grid.seeds])
    sections = [k for k in _EVALUATIONS if getattr(grid, k) is not None]
    rows = []
    for s in grid.settings:
        outs = [trained[f"train-{s.label}-seed{seed}"] for seed in grid.seeds]
        acc, acc_std = mean_std([o["test_accuracy"] for o in outs])
        eps_ub = {k: float(e) for k, e in outs[0]["epsilon_ub"].items() if k != "none"}
        private = bool(eps_ub)
        candidates: list[tuple[float, str]] = []
        membership: dict[str, Any] = {}
        vulnerable: dict[str, Any] = {}
        inversion: float | None = None
        robust: dict[str, list[float]] = {}
        certified: dict[str, list[float]] = {}
        findings: list[str] = []
        unsound = False
        mem_runs = [evaluated.get(f"membership-{s.label}-seed{seed}") for seed in grid.seeds]
        if grid.membership is not None:
            for attack in grid.membership["attacks"]:
                for target, runs in ((membership, [m["membership"].get(attack) for m in mem_runs if m]), (vulnerable, [m["vulnerable"].get(attack) for m in mem_runs if m])):
                    runs = [r for r in runs if r]
                    if not runs:
                        continue
                    auc, auc_std = mean_std([r["auc"] for r in runs])
                    target[attack] = {
                        "auc": auc,
                        "auc_std": auc_std,
                        "advantage": mean_std([r["advantage"] for r in runs])[0],
                        "tpr_at_fpr": {f: _mean_rate([r["tpr_at_fpr"][f] for r in runs]) for f in runs[0]["tpr_at_fpr"]},
                        "epsilon_lb": max(r["epsilon_lb"] for r in runs),
                        "num_samples": runs[0]["num_samples"],
                        **{k: min(r[k] for r in runs) for k in ("num_members", "num_non_members") if all(k in r for r in runs)},
                    }
                    if target is membership:
                        candidates.extend((r["epsilon_lb"], attack) for r in runs)
        audit = evaluated.get(f"audit-{s.label}")
        if audit:
            # The audit's ε_LB is at the setting's δ; it bounds ε at the grid's δ (the row's) too
            # when that δ is no larger, since ε(δ) only falls as δ grows.
            if audit.get("delta", grid.delta) >= grid.delta:
                candidates.append((audit["epsilon_lb"], audit["method"]))
            if audit["epsilon_lb"] > audit["epsilon_ub"]:
                findings.append(f"{audit['method']}: ε_LB {audit['epsilon_lb']:.3f} > its claim's ε_UB {audit['epsilon_ub']:.3f}")
        best_lb, best_attack = max(candidates, default=(0.0, None))
        if best_lb <= 0.0:
            best_attack = None  # no attack showed anything: no attack "achieved" ε_LB = 0
        for seed in grid.seeds:
            e = evaluated.get(f"evasion-{s.label}-seed{seed}")
            if e:
                for r, a in e["robust_accuracy"].items():
                    robust.setdefault(r, []).append(a)
                for r, a in e["certified_accuracy"].items():
                    certified.setdefault(r, []).append(a)
                if e["unsound"]:
                    unsound = True
                    findings.extend(f"seed {seed}: certificate unsound: {u}" for u in e["unsound"])
            i = evaluated.get(f"inversion-{s.label}-seed{seed}")
            if i and i["inversion_top1"]:
                best = max(i["inversion_top1"].values())
                inversion = best if inversion is None else max(inversion, best)
        if private and best_lb > min(eps_ub.values()):
            findings.insert(0, f"ε_LB {best_lb:.3f} ({best_attack}) > ε_UB {min(eps_ub.values()):.3f}")
        verdict = "no violation"
        if private and best_lb > min(eps_ub.values()) or (audit and audit["epsilon_lb"] > audit["epsilon_ub"]):
            verdict = "violation"
        elif unsound:
            verdict = "certificate unsound"
        model_ids = tuple(o["model_id"] for o in outs)
        rows.append(
            ComparisonRow(
                label=s.label,
                defense=s.defense,
                family=s.family,
                parameters=dict(s.parameters),
                model_ids=model_ids,
                test_accuracy=acc,
                test_accuracy_std=acc_std,
                accuracy_loss=base_acc - acc,
                epsilon_ub=eps_ub if private else {},
                epsilon_ub_data_dependent=bool(outs[0]["data_dependent"]),
                epsilon_lb=float(best_lb),
                best_attack=best_attack,
                membership=membership,
                vulnerable=vulnerable,
                inversion_top1=inversion,
                robust_accuracy={r: mean_std(a)[0] for r, a in robust.items()},
                certified_accuracy={r: mean_std(a)[0] for r, a in certified.items()},
                verdict=verdict,
                findings=tuple(findings),
                links=_links(model_ids, sections, certifies=DEFENSES[s.defense].certification is not None and bool(grid.evasion and grid.evasion["certify"])),
            )
        )
    return ComparisonResult(
        name=grid.name,
        dataset=grid.dataset,
        rows=tuple(rows),
        baseline=grid.baseline,
        delta=grid.delta,
        confidence=grid.confidence,
        fprs=COMPARE_FPRS,
        radii=grid.radii,
        vulnerable_top_k=grid.vulnerable_top_k if grid.membership is not None else 0,
        grid=dict(grid.source),
        seconds=seconds,
        jobs_run=jobs_run,
        jobs_reused=jobs_reused,
    )
