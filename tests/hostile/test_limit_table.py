"""The one limit table (:data:`dpaudit.limits.LIMITS`) against everything that should read it.

Generated from the table and from the parser: each spec field of the Python API that stands for a
limited size accepts the limit and refuses limit + 1 (naming the field) unless ``i_know=True``;
every limited flag of every verb carries a limit of the table (or one its verb alone documents)
and the command line's check refuses it one above; a hard limit holds even with ``i_know``; every
entry of the table is exercised by some case here or in ``test_issue43_refusals.py``; and
docs/cli.md lists exactly the table.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dpaudit.limits import LIMITS, SizeLimit, check_depth, check_name, check_parameter_count, limits_markdown


def _claim() -> Any:
    from dpaudit.api import dpsgd_claim

    return dpsgd_claim(noise_multiplier=1.0, sampling_rate=0.01, num_steps=10)


def _audit(**kw: Any) -> Any:
    from dpaudit.api import AuditSpec

    return AuditSpec(target_epsilon=1.0, **kw)


def _train(*, i_know: bool = False, **kw: Any) -> Any:
    from dpaudit.api import TrainSpec, default_config

    workers = {"num_workers": kw.pop("num_workers")} if "num_workers" in kw else {}
    return TrainSpec(
        defense="nonprivate", model="digits-mlp", config=default_config("nonprivate", **kw), i_know=i_know, **workers
    )


def _battery(**kw: Any) -> Any:
    from dpaudit.api import BatterySpec

    return BatterySpec(train_fn="module:train", claim=_claim(), **kw)


def _certify(**kw: Any) -> Any:
    from dpaudit.api import CertifySpec

    if "radii" in kw:  # the count of radii is the size: that many distinct radii
        kw["radii"] = tuple(float(i + 1) for i in range(kw["radii"]))
    return CertifySpec(target="record", **kw)


def _membership(*, i_know: bool = False, **kw: Any) -> Any:
    from attacks.membership import MEMBERSHIP_ATTACKS
    from dpaudit.api import MembershipSpec

    attack = {}
    if "num_shadows" in kw:
        attack["num_shadows"] = kw.pop("num_shadows")
    return MembershipSpec(
        attacks={"lira": MEMBERSHIP_ATTACKS["lira"].config_type(**attack)}, target="record", i_know=i_know, **kw
    )


def _inversion(*, i_know: bool = False, **kw: Any) -> Any:
    from dpaudit.api import InversionSpec, MIFaceConfig

    return InversionSpec(target=Path("record"), attacks={"mi-face": MIFaceConfig(**kw)}, i_know=i_know)


@dataclass(frozen=True)
class SpecCase:
    limit: str  # the entry of LIMITS
    spec: str
    field: str  # the spec's (or its config's) field, named by the error
    make: Callable[..., Any]


#: Each size field of the Python API's specs, with the entry of the table it answers to.
SPEC_CASES = [
    SpecCase("trials", "AuditSpec", "num_trials", _audit),
    SpecCase("epochs", "AuditSpec", "epochs", _audit),
    SpecCase("steps", "AuditSpec", "num_steps", _audit),
    SpecCase("members", "AuditSpec", "num_members", _audit),
    SpecCase("canaries", "AuditSpec", "num_canaries", _audit),
    SpecCase("group_size", "AuditSpec", "group_size", _audit),
    SpecCase("workers", "AuditSpec", "workers", _audit),
    SpecCase("epochs", "TrainSpec", "epochs", _train),
    SpecCase("batch_size", "TrainSpec", "batch_size", _train),
    SpecCase("workers", "TrainSpec", "num_workers", _train),
    SpecCase("budget_minutes", "BatterySpec", "budget_minutes", _battery),
    SpecCase("trials", "BatterySpec", "trials", _battery),
    SpecCase("workers", "BatterySpec", "num_workers", _battery),
    SpecCase("draws", "CertifySpec", "num_draws", _certify),
    SpecCase("draws", "CertifySpec", "num_selection_draws", _certify),
    SpecCase("examples", "CertifySpec", "num_examples", _certify),
    SpecCase("eot_samples", "CertifySpec", "num_eot_samples", _certify),
    SpecCase("samples", "MembershipSpec", "num_samples", _membership),
    SpecCase("queries", "MembershipSpec", "num_queries", _membership),
    SpecCase("population", "MembershipSpec", "num_population", _membership),
    SpecCase("workers", "MembershipSpec", "num_workers", _membership),
    SpecCase("shadows", "MembershipSpec", "num_shadows", _membership),
    SpecCase("inversion_steps", "InversionSpec", "max_iterations", _inversion),
    SpecCase("restarts", "InversionSpec", "restarts", _inversion),
]

#: Entries checked by a case other than a spec field: a count, a file, a name.
OTHER_CASES = {
    "jobs": "test_issue43_refusals.py::test_dry_run_applies_the_limits_of_the_real_run, "
    "and test_compare's job-limit tests",
    "radii": "test_radii_count_is_limited (here) and test_issue43_refusals.py (grid radii)",
    "composed_events": "test_issue43_refusals.py::test_a_claim_file_of_many_composed_events_is_refused_at_once",
    "nesting_depth": "test_hard_limits_hold_even_with_i_know (here)",
    "name_length": "test_hard_limits_hold_even_with_i_know (here)",
    "label_length": "test_hard_limits_hold_even_with_i_know (here)",
    "model_parameters": "test_parameter_count_limit_counts_every_parameter (here)",
}


def test_every_entry_of_the_table_is_exercised() -> None:
    by_flag = {
        name for name, entry in LIMITS.items() if any(limit is entry for *_, limit in _limited_flags())
    }  # test_every_limited_flag_...
    covered = {c.limit for c in SPEC_CASES} | set(OTHER_CASES) | by_flag
    assert covered == set(LIMITS), f"untested: {sorted(set(LIMITS) - covered)}; stale: {sorted(covered - set(LIMITS))}"
    for name, limit in LIMITS.items():
        assert limit.maximum > 0 and limit.why, name


@pytest.mark.parametrize("case", SPEC_CASES, ids=lambda c: f"{c.spec}.{c.field}")
def test_each_spec_accepts_the_limit_and_refuses_one_above_unless_i_know(case: SpecCase) -> None:
    limit = LIMITS[case.limit]
    assert not limit.hard
    top = int(limit.maximum) if float(limit.maximum).is_integer() else limit.maximum
    case.make(**{case.field: top})
    with pytest.raises(ValueError, match=case.field) as caught:
        case.make(**{case.field: top + 1})
    assert getattr(caught.value, "argument", None) == case.field and "i_know" in str(caught.value)
    case.make(**{case.field: top + 1}, i_know=True)


def test_radii_count_is_limited() -> None:
    top = int(LIMITS["radii"].maximum)
    _certify(radii=top)
    with pytest.raises(ValueError, match="radii"):
        _certify(radii=top + 1)
    _certify(radii=top + 1, i_know=True)


def test_hard_limits_hold_even_with_i_know() -> None:
    name = int(LIMITS["name_length"].maximum)
    _audit(name="a" * name)
    for i_know in (False, True):
        with pytest.raises(ValueError, match="name"):
            _audit(name="a" * (name + 1), i_know=i_know)
    label = int(LIMITS["label_length"].maximum)
    assert check_name("label", "l" * label, name="label_length") == "l" * label
    with pytest.raises(ValueError, match="label"):
        check_name("label", "l" * (label + 1), name="label_length")
    depth = int(LIMITS["nesting_depth"].maximum)

    def nested(levels: int) -> list[Any]:
        value: list[Any] = []
        for _ in range(levels - 1):
            value = [value]
        return value

    check_depth("grid", nested(depth))
    with pytest.raises(ValueError, match="nested more than"):
        check_depth("grid", nested(depth + 1))
    assert all(LIMITS[n].hard for n in ("name_length", "label_length", "nesting_depth"))


def test_parameter_count_limit_counts_every_parameter() -> None:
    """The count is Σ numel over the parameters: a Linear(a, b) has a·b + b (closed form)."""
    from torch import nn

    top = int(LIMITS["model_parameters"].maximum)
    inputs = 999
    outputs = top // (inputs + 1)  # inputs·outputs + outputs = top exactly
    assert check_parameter_count("--model-fn", nn.Linear(inputs, outputs)) == top
    with pytest.raises(ValueError, match="--model-fn") as caught:
        check_parameter_count("--model-fn", nn.Sequential(nn.Linear(inputs, outputs), nn.Linear(1, 1, bias=False)))
    assert f"{top + 1:,}" in str(caught.value)
    assert check_parameter_count("--model-fn", top + 1, i_know=True) == top + 1


# --------------------------------------------------------------------------- the command line


#: Limits a verb documents for itself (not sizes shared with any other entry point).
VERB_OWN = {
    ("dpaudit pate analyze", "--num-classes"),
    ("dpaudit pate analyze", "--trials"),
    ("dpaudit pate audit", "--trials"),
    ("dpaudit pate attack", "--num-samples"),
}


def _limited_flags() -> list[tuple[str, str, str, SizeLimit]]:
    from dpaudit.app.cli import _leaf_parsers, build_parser
    from dpaudit.options import LIMIT_ATTR

    out = []
    for leaf in _leaf_parsers(build_parser(None)):
        for action in leaf._actions:
            limit = getattr(action, LIMIT_ATTR, None)
            if limit is not None:
                out.append((leaf.prog, action.option_strings[-1], action.dest, limit))
    return out


def test_every_limited_flag_documents_and_enforces_its_limit() -> None:
    from dpaudit.app.cli import check_size_limits
    from dpaudit.app.common import UsageError

    flags = _limited_flags()
    assert flags
    table = list(LIMITS.values())
    for prog, flag, dest, limit in flags:
        assert limit.maximum > 0 and limit.why, (prog, flag)
        # Sizes shared with the grid or the Python API come from the table (by identity, not a copy).
        assert any(limit is entry for entry in table) or (prog, flag) in VERB_OWN or not _shared(prog, flag), (
            prog,
            flag,
            limit,
        )
        triple = ((dest, flag, limit),)
        top = int(limit.maximum)
        check_size_limits(argparse.Namespace(**{dest: top, "_size_limits": triple}))
        with pytest.raises(UsageError, match=flag):
            check_size_limits(argparse.Namespace(**{dest: top + 1, "_size_limits": triple}))
        check_size_limits(argparse.Namespace(**{dest: top + 1, "_size_limits": triple, "i_know": True}))


def _shared(prog: str, flag: str) -> bool:
    """Whether the size a flag sets is also set from a grid or a spec (then its limit must be the table's)."""
    from dpaudit.app.runs.grid_checks import SECTION_FLAGS

    in_grid = any(
        f"dpaudit {verb}" == prog and f == flag for keys in SECTION_FLAGS.values() for verb, f in keys.values()
    )
    in_specs = flag in {
        "--num-trials",
        "--num-steps",
        "--num-members",
        "--num-canaries",
        "--group-size",
        "--num-workers",
        "--budget-minutes",
        "--num-draws",
        "--num-examples",
        "--num-eot-samples",
    }
    return in_grid or in_specs


def test_docs_list_exactly_the_table() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    start = page.index("<!-- limits-table")
    body = page[page.index("\n", start) + 1 : page.index("<!-- /limits-table -->")]
    assert body == limits_markdown(), (
        "docs/cli.md's limit table differs from dpaudit.limits.LIMITS: paste limits_markdown()'s output"
    )
