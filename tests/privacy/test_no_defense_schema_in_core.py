"""The torch-free core reads no key of DP-SGD's configuration schema: the config type rebuilds its own claim.

The schema is :class:`defenses.dpsgd.config.DPSGDConfig`'s fields; a record's claim is rebuilt by
that type through :class:`dpaudit.privacy.record_claims.ClaimConfig`, so ``dpaudit/privacy/``
holds no string that reads one of them out of a stored configuration.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterator
from pathlib import Path

from defenses import DEFENSES
from defenses.dpsgd.config import DPSGDConfig
from dpaudit.privacy.claims import dpsgd_claim
from dpaudit.privacy.record_claims import CLAIM_REBUILDERS, ClaimConfig, check_record_claim

PRIVACY = Path(__file__).resolve().parents[2] / "dpaudit" / "privacy"


def _dpsgd_only_fields() -> set[str]:
    # Names another defense's schema shares (PATE's delta, DSSGD's target_epsilon, ...) are that
    # defense's keys too; the DP-SGD schema's own names are the rest.
    own = {f.name for f in dataclasses.fields(DPSGDConfig)}
    others = {
        f.name
        for spec in DEFENSES.values()
        if not issubclass(spec.config_type, DPSGDConfig)
        for f in dataclasses.fields(spec.config_type)
    }
    return own - others


def _key_reads(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """String constants used as a mapping key: ``m["k"]``, ``m.get("k")``, ``required(where, m, "k")``, ``"k" in m``."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            yield node.lineno, node.slice.value
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in ("get", "pop", "setdefault") and node.args:
                keys = node.args[:1]
            elif isinstance(func, ast.Name) and func.id == "required":
                keys = node.args[2:3]
            else:
                continue
            yield from ((k.lineno, k.value) for k in keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and isinstance(node.left.value, str)
            and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops)
        ):
            yield node.lineno, node.left.value


def _parameter_names(tree: ast.AST) -> set[str]:
    """Names the core's own functions take: the core may name them (``v.positive("noise_multiplier", x)``)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names |= {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    return names


def test_no_key_of_the_dpsgd_schema_is_read_in_dpaudit_privacy():
    schema = _dpsgd_only_fields()
    assert {"lot_size", "pca_components", "pca_noise", "noise_multiplier", "sampling_rate"} <= schema
    trees = {p: ast.parse(p.read_text(encoding="utf-8")) for p in sorted(PRIVACY.rglob("*.py"))}
    vocabulary = set().union(*(_parameter_names(t) for t in trees.values()))
    found = []
    for path, tree in trees.items():
        where = path.relative_to(PRIVACY.parents[1])
        found += [f"{where}:{line} reads config key {key!r}" for line, key in _key_reads(tree) if key in schema]
        # A schema name that is no parameter of the core has no business in it at all.
        found += [
            f"{where}:{n.lineno} names {n.value!r}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in schema - vocabulary
        ]
    assert not found, "DP-SGD's schema belongs to defenses/dpsgd/config.py (DPSGDConfig.rebuild_claim):\n" + "\n".join(
        found
    )


def test_the_dp_claim_is_rebuilt_by_the_config_type_through_the_registry(monkeypatch):
    # The registry's "dp" entry is the config's own rebuild: a config type answering otherwise changes the check.
    assert isinstance(DPSGDConfig(), ClaimConfig)
    claim = dpsgd_claim(sampling_rate=0.05, noise_multiplier=1.0, num_steps=20)
    config = {
        "noise_multiplier": 1.0,
        "sampling_rate": 0.05,
        "epochs": 1,
        "robustness_epsilon": 4.0,
    }  # a Secure-SGD record's extra field is not DP-SGD's
    metrics = {"sampling_rate": 0.05, "noise_multiplier": 1.0, "num_steps": 20}
    check_record_claim(claim, config=config, metrics=metrics, num_members=120)
    calls = []
    original = DPSGDConfig.rebuild_claim

    def spy(self, stored, *, metrics, num_members):
        calls.append((self.noise_multiplier, self.sampling_rate, num_members))
        return original(self, stored, metrics=metrics, num_members=num_members)

    monkeypatch.setattr(DPSGDConfig, "rebuild_claim", spy)
    assert "dp" in CLAIM_REBUILDERS
    check_record_claim(claim, config=config, metrics=metrics, num_members=120)
    assert calls == [(1.0, 0.05, 120)]
