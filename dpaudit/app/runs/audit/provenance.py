"""What an audit's trials are made of, as part of its name: the code and data fingerprints.

Stored trials are reused only by an audit of the same code and data; when a run holds trials
of this very audit made by other code or data, the audit says why it starts afresh.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dpaudit.callables import callable_fingerprint, code_fingerprint, resolve_callable
from dpaudit.store import RunDir, to_jsonable

__all__ = [
    "audit_hash",
    "code_keys",
    "resolve_train_fn",
    "say_if_superseded",
    "superseded_reasons",
    "train_fn_fingerprint",
]


def audit_hash(config: Mapping[str, object]) -> str:
    """The short hash an audit's default name ends in."""
    return hashlib.sha256(json.dumps(to_jsonable(dict(config)), sort_keys=True).encode()).hexdigest()[:8]


#: Keys of an audit's configuration that say what its trials were made *of* (code, data), not
#: how: an audit differing from a stored one only in them is the same audit of other code or data.
_IDENTITY_KEYS = ("train_fn_modules", "train_fn_unresolved", "model_fn_modules", "model_fn_unresolved", "dataset_files")


def code_keys(prefix: str, spec: str, *, argument: str, progress: bool) -> dict[str, object]:
    """``<prefix>_sha256`` of the code behind ``spec``, with the local modules it covers.

    The modules (name → file and SHA-256) are listed only when the code imports any, so audits
    of self-contained code keep the names they always had; imports found nowhere are said on
    stderr (and listed beside the modules).
    """
    code = code_fingerprint(spec, argument=argument)
    keys: dict[str, object] = {f"{prefix}_sha256": code.sha256}
    if code.modules:
        keys[f"{prefix}_modules"] = code.covered()
        if code.unresolved:
            keys[f"{prefix}_unresolved"] = list(code.unresolved)
    if code.unresolved and progress:
        print(
            f"{argument} {spec}: import{'s' if len(code.unresolved) != 1 else ''} "
            f"{', '.join(code.unresolved)} not found; not part of the code's "
            "fingerprint",
            file=sys.stderr,
        )
    return keys


def _mapping(config: Mapping[str, object], key: str) -> Mapping[str, object]:
    """``config[key]`` when it is a mapping (absent, ``null`` or damaged: empty)."""
    found = config.get(key)
    return found if isinstance(found, Mapping) else {}


def _file(module: object) -> str:
    """The file a :meth:`~dpaudit.callables.CodeFingerprint.covered` entry names."""
    return str(module.get("file")) if isinstance(module, Mapping) else str(module)


def _what_changed(ours: Mapping[str, object], stored: Mapping[str, object], differ: list[str]) -> list[str]:
    """Why the stored trials are not these, in words: the files that changed."""
    from dpaudit.data.registry import changed_files

    reasons = []
    for prefix in ("train_fn", "model_fn"):
        if f"{prefix}_sha256" not in differ:
            continue
        new, old = _mapping(ours, f"{prefix}_modules"), _mapping(stored, f"{prefix}_modules")
        files = [_file(new[n]) for n in sorted(new) if n in old and old[n] != new[n]]
        added = [_file(new[n]) for n in sorted(new) if n not in old]
        removed = [_file(old[n]) for n in sorted(old) if n not in new]
        source = Path(str(ours.get(prefix, "")).rpartition(":")[0]).name or prefix
        if files:
            reasons.append(f"{', '.join(files)} changed")
        if added:
            reasons.append(f"{source} now imports {', '.join(added)}")
        if removed:
            reasons.append(f"{source} no longer imports {', '.join(removed)}")
        if not (files or added or removed):
            reasons.append(f"{source} (or the version of a package it imports) changed")
    if "dataset_files" in differ:
        if stored.get("dataset_files") is None:
            reasons.append(f"the stored trials do not name the files of dataset {ours.get('dataset')}")
        else:
            current = {str(k): str(x) for k, x in _mapping(ours, "dataset_files").items()}  # file → SHA-256
            reasons.append(
                f"dataset {ours.get('dataset')}'s files changed ({changed_files(stored.get('dataset_files'), current)})"
            )
    if "member_ids_sha256" in differ:
        reasons.append("the member ids differ (another data root?)")
    return reasons


def superseded_reasons(ours: Mapping[str, object], stored: Mapping[str, object]) -> list[str]:
    """Every way the stored key ``stored`` differs from ``ours``, in words (files, then other settings).

    The code and data differences are worded as :func:`say_if_superseded` words them; any other
    key that differs is named with both values (``--seed 0 -> 7``), a long value by name alone.
    """
    ours = json.loads(json.dumps(to_jsonable(dict(ours))))
    differ = sorted(k for k in set(ours) | set(stored) if stored.get(k) != ours.get(k))
    reasons = _what_changed(ours, stored, differ)
    worded = {"member_ids_sha256", "dataset_files"} | {
        k for k in differ if k.endswith("_sha256") or k.endswith("_modules") or k.endswith("_unresolved")
    }
    for k in differ:
        if k in worded:
            continue
        old, new = stored.get(k), ours.get(k)
        shown = f"{old!r} -> {new!r}" if len(repr(old)) + len(repr(new)) <= 60 else "differs"
        reasons.append(f"{k.replace('_', '-') if k in ('seed', 'dataset', 'train_fn', 'model_fn') else k} {shown}")
    unique = list(dict.fromkeys(reasons))  # a file both --train-fn and --model-fn name is said once
    return unique or [f"{', '.join(differ)} differ"]


def say_if_superseded(run: RunDir, name: str, cfg: Mapping[str, object]) -> None:
    """Says so when the run holds trials of this very audit made by other code or other data.

    Those trials are never reused (the fingerprints are part of the audit's name); the line tells
    a user who reran after editing their training function, a module it imports, or a dataset
    file, why nothing was reused: ``recomputing: helper.py changed since the stored trials in …``.
    """
    from dpaudit.store import read_json

    ours = json.loads(json.dumps(to_jsonable(dict(cfg))))
    for config_file in sorted((run.path / "audits").glob("*/config.json")):
        if config_file.parent.name == name:
            continue
        try:
            stored = read_json(config_file)
        except ValueError:
            continue
        # What a trial depends on, as stored: the game's own counters (method, seed …) are in both.
        differ = sorted(k for k in set(ours) | (set(stored) & set(_IDENTITY_KEYS)) if stored.get(k) != ours.get(k))
        if differ and all(k.endswith("_sha256") or k in _IDENTITY_KEYS for k in differ):
            why = "; ".join(_what_changed(ours, stored, differ)) or f"{', '.join(differ)} differ"
            print(
                f"recomputing: {why} since the stored trials in {config_file.parent}; "
                f"starting afresh in {run.audit_dir(name)}",
                file=sys.stderr,
            )


def resolve_train_fn(spec: str) -> Callable[..., Any]:
    """A third-party ``train(dataset, *, seed) -> nn.Module`` from ``module:function`` or ``file.py:function``.

    Raises:
        ValueError: the spec is malformed or does not name a callable (names ``--train-fn``).
    """
    return resolve_callable(spec, argument="--train-fn")


def train_fn_fingerprint(spec: str) -> str:
    """The fingerprint of the code behind a ``--train-fn`` spec (:func:`dpaudit.callables.callable_fingerprint`).

    Stored trials are reused only by an audit of the same code: the fingerprint is part of the
    audit's configuration, so editing the training function (or upgrading a package it imports)
    starts a fresh audit instead of handing back the verdict of the old code (issue "Results
    that cannot lie", finding 1).
    """
    return callable_fingerprint(spec, argument="--train-fn")
