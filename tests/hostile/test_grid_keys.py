"""Every key of a ``dpaudit compare`` grid, given hostile values, exits 2 naming the key (issue 31).

The grid is a second way to set what the flags set, so it gets the flags' treatment
(``test_every_flag.py``): the keys are generated from the grid schema itself — each registered
defense's config options (a ``[[defenses]]`` table's keys) and the attack sections' keys that
:mod:`dpaudit.app.runs.grid_checks` maps to a verb's flag — so a key added later is covered, and
a section key the schema does not classify fails :func:`test_every_section_key_is_classified`.

Each case runs ``dpaudit compare`` in-process with the training job and ``run_compare`` replaced
by a sentinel: a value that got past the checks fails the test there, before any training.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dpaudit.app.cli import main

#: A valid setting the section cases attach their section to.
BASE = '[[defenses]]\ndefense = "dpsgd"\ntarget_epsilon = 2.0\nepochs = 1\n'
#: Section keys that are not one flag's value: checked by compare's parser itself.
SPECIAL_SECTION_KEYS = {"attacks", "shadows", "radii", "norm", "certify", "classes", "method"}
#: Limited keys whose config refuses them beyond the limit even with --i-know (as `train` does).
HARD_CAPPED = {
    ("pate", "student_epochs"): "the PATE student's config caps its epochs at the limit (defenses/pate/student.py)"
}


class Reached(BaseException):
    """The grid got past its checks into the work itself."""


@pytest.fixture
def no_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    import dpaudit.app.runs.compare as compare_run

    def stop(*args: object, **kwargs: object) -> None:
        raise Reached

    monkeypatch.setattr(compare_run, "run_compare", stop)
    monkeypatch.setattr(compare_run, "train_job", stop)


@dataclass(frozen=True)
class Key:
    """One grid key: its TOML text, the table it goes in, its limit (if a size)."""

    key: str  # as named in errors: defenses[0].epochs, attacks.membership.num_shadows
    owner: str  # the defense or the section
    toml_table: str  # the TOML before the key's line
    name: str  # the key's own name
    kind: str  # "number", "bool", "choice", "string"
    maximum: float | None

    def grid(self, value: Any) -> str:
        return f"{self.toml_table}{self.name} = {json.dumps(value)}\n"


def _setting_keys() -> Iterator[Key]:
    from defenses import DEFENSES
    from dpaudit.options import option_specs

    for defense, spec in DEFENSES.items():
        for o in option_specs(spec.config_type):
            kind = (
                "bool"
                if o.kind is bool
                else "choice"
                if o.choices
                else "number"
                if o.kind in (int, float)
                else "string"
            )
            yield Key(
                f"defenses[0].{o.field}",
                defense,
                f'[[defenses]]\ndefense = "{defense}"\n',
                o.field,
                kind,
                None if o.limit is None else o.limit.maximum,
            )


def _section_keys() -> Iterator[Key]:
    from dpaudit.app.runs.grid_checks import SECTION_FLAGS, verb_flag
    from dpaudit.options import LIMIT_ATTR

    for section, keys in SECTION_FLAGS.items():
        for name, (verb, flag) in keys.items():
            action = verb_flag(verb, flag)
            limit = getattr(action, LIMIT_ATTR, None)
            yield Key(
                f"attacks.{section}.{name}",
                section,
                f"{BASE}[attacks.{section}]\n",
                name,
                "choice" if action.choices else "number",
                None if limit is None else limit.maximum,
            )


SETTING_KEYS = list(_setting_keys())
SECTION_KEYS = list(_section_keys())
LIMITED = [k for k in SETTING_KEYS + SECTION_KEYS if k.maximum is not None]


def _hostile(key: Key) -> tuple[Any, ...]:
    if key.kind == "bool":
        return ("abc", -1)
    if key.kind in ("choice", "string"):
        return ("bogus", -1)
    return ("abc", -1, True)


def _refused(cli: Any, tmp_path: Path, key: Key, value: Any, *, limit: bool = False) -> str | None:
    """Why the case failed, or None: exit 2, one line, naming the key (and --i-know for a limit)."""
    path = tmp_path / "grid.toml"
    path.write_text(key.grid(value))
    try:
        code, out, err = cli.run("compare", "--config", str(path), "--out", str(tmp_path / "out"))
    except Reached:
        return f"{key.key} = {value!r}: accepted, a job would have started"
    lines = err.strip().splitlines()
    if code != 2 or len(lines) != 1:
        return f"{key.key} = {value!r}: exit {code}, {len(lines)} lines: {err.strip()[-300:]}"
    if key.key not in lines[0] or str(path) not in lines[0]:
        return f"{key.key} = {value!r}: the error does not name the key and the file: {lines[0]}"
    if limit and "--i-know" not in lines[0]:
        return f"{key.key} = {value!r}: a size above its limit should say --i-know: {lines[0]}"
    return None


def test_every_section_key_is_classified() -> None:
    """A section key compare's parser accepts is either one flag's value or checked by the parser."""
    from dpaudit.app.runs.compare.grid import _SECTION_KEYS
    from dpaudit.app.runs.grid_checks import SECTION_FLAGS

    for section, keys in _SECTION_KEYS.items():
        unclassified = set(keys) - set(SECTION_FLAGS.get(section, {})) - SPECIAL_SECTION_KEYS
        assert not unclassified, (
            f"[attacks.{section}] keys {sorted(unclassified)}: map them to their flag in grid_checks.SECTION_FLAGS"
        )
    assert LIMITED and len(SETTING_KEYS) > 50  # the schema was read


@pytest.mark.parametrize("key", LIMITED, ids=lambda k: f"{k.owner}-{k.name}")
def test_grid_key_above_its_limit_needs_i_know(
    key: Key, cli, no_jobs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 31 item 4: a size above its flag's or field's limit is refused before any job, naming the key."""
    assert key.maximum is not None
    problem = _refused(cli, tmp_path, key, int(key.maximum) + 1, limit=(key.owner, key.name) not in HARD_CAPPED)
    assert problem is None, problem
    if (key.owner, key.name) in HARD_CAPPED:
        return
    # With --i-know it runs (the estimate is the other gate, covered in tests/app/test_compare.py).
    from dpaudit.app.runs.compare import limits

    monkeypatch.setattr(limits, "estimate_seconds", lambda *a, **k: 0.0)
    with pytest.raises(Reached):
        main(["compare", "--config", str(tmp_path / "grid.toml"), "--out", str(tmp_path / "out"), "--i-know"])


def test_every_section_key_refuses_hostile_values(cli, no_jobs, tmp_path: Path) -> None:
    """Issue 31 item 6: a wrong type or a negative value of any section key is refused, named, at parse time."""
    failures = [p for k in SECTION_KEYS for value in _hostile(k) if (p := _refused(cli, tmp_path, k, value))]
    assert not failures, "\n".join(failures)


@pytest.mark.extended
@pytest.mark.parametrize("defense", sorted({k.owner for k in SETTING_KEYS}))
def test_every_setting_key_refuses_hostile_values(defense: str, cli, no_jobs, tmp_path: Path) -> None:
    """Every config option of every registered defense, as a grid key: a wrong type or a negative value is refused,
    named."""
    failures = [
        p
        for k in SETTING_KEYS
        if k.owner == defense
        for value in _hostile(k)
        if (p := _refused(cli, tmp_path, k, value))
    ]
    assert not failures, "\n".join(failures)
