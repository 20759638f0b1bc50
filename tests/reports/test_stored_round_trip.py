"""Every stored sample result, loaded through its typed loader and saved again, gives back the same bytes.

The sample runs (``REPORT_SAMPLES``, built once per session by ``rendered_samples``) hold one
stored file of every kind the report kinds show. Loading a file and writing it again through
the value's own ``save`` must reproduce the file byte for byte (key order, omitted keys,
number spelling included): the same check that guards stored runs when a value's
serialisation changes (issue 44: one type-derived scheme in place of hand-written pairs).
A JSON file of a kind this table does not know fails the test, so a new stored kind is added here.

Re-saving what the current code wrote cannot see a change in how a value is written, so the
files under ``stored_v1/`` were written by the code before the serialisation moved to
:mod:`dpaudit.specs` (the sample runs of this folder, built at commit b294724): each must load
and save back to its exact bytes, its arrays unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from dpaudit.results.audit import load_audit_result, save_audit_result
from dpaudit.results.certification import load_certification_result, save_certification_result
from dpaudit.results.certify_summary import load_certify_summary, save_certify_summary
from dpaudit.results.check import load_check_report, save_check_report
from dpaudit.results.comparison import load_comparison, save_comparison
from dpaudit.results.evasion import load_evasion_result, save_evasion_result
from dpaudit.results.inversion import load_inversion_result, save_inversion_result
from dpaudit.results.membership import load_membership_result, save_membership_result
from dpaudit.results.record import RECORD_FILE, load_record
from dpaudit.store import atomic_write_json, load_npz, read_json
from reports.kinds import REPORT_KINDS


def _save_record(record: object, directory: Path) -> Path:
    # dpaudit.weights.save_record writes record.json so (after the weights, which are not re-saved here).
    return atomic_write_json(directory / RECORD_FILE, record.to_dict())  # type: ignore[attr-defined]


def _kind(path: Path, run: Path) -> tuple[Callable[[Path], object], Callable[[object, Path], Path]] | None:
    """The loader and saver of a stored file, by where the run layout puts it (None: not a stored result)."""
    parts = path.relative_to(run).parts
    name = path.name
    if parts == ("run.json",) or parts[0] == "reports":
        return None
    if parts[0] == "records" and name == RECORD_FILE:
        return load_record, _save_record
    if parts[0] == "compare" and name == "comparison.json":
        return load_comparison, save_comparison  # type: ignore[return-value]
    if parts[0] == "audits" and name == "result.json":
        return load_audit_result, save_audit_result  # type: ignore[return-value]
    if parts[0] == "checks" and name == "check.json":
        return load_check_report, save_check_report  # type: ignore[return-value]
    if parts[0] == "certify":
        if name == "summary.json":
            # The samples write a partial summary by hand (only the keys the certified page reads
            # raw); it becomes a stored result here once reports read summaries typed (issue 44).
            return None if "schema_version" not in read_json(path) else (load_certify_summary, save_certify_summary)  # type: ignore[return-value]
        if name.startswith("certify-"):
            return load_certification_result, save_certification_result  # type: ignore[return-value]
        if name.startswith("evasion-"):
            return load_evasion_result, save_evasion_result  # type: ignore[return-value]
    if parts[0] == "attacks":
        if name.startswith("inversion-"):
            return load_inversion_result, save_inversion_result  # type: ignore[return-value]
        return load_membership_result, save_membership_result  # type: ignore[return-value]
    pytest.fail(f"stored file {path.relative_to(run)} has no loader in this test: add its kind to _kind")


@pytest.mark.extended
@pytest.mark.parametrize("name", sorted(REPORT_KINDS))
def test_every_stored_sample_result_saves_back_to_the_same_bytes(name, rendered_samples, tmp_path):
    sample = rendered_samples.get(name)
    if sample is None:
        pytest.skip(f"report kind {name!r} has no sample run (the contract suite says so)")
    run = sample[0].path
    checked = 0
    for i, path in enumerate(sorted(run.rglob("*.json"))):
        kind = _kind(path, run)
        if kind is None:
            continue
        load, save = kind
        out = tmp_path / str(i)
        written = Path(save(load(path), out))
        assert written.name == path.name, f"{path.relative_to(run)} saved back as {written.name}"
        assert written.read_bytes() == path.read_bytes(), f"{path.relative_to(run)} changed when loaded and saved again"
        npz = path.with_suffix(".npz")
        if npz.is_file():  # the arrays beside it, stored the same way
            assert written.with_suffix(".npz").read_bytes() == npz.read_bytes(), (
                f"{npz.relative_to(run)} changed when loaded and saved again"
            )
        checked += 1
    assert checked, f"the sample run of {name!r} holds no stored result"


STORED = Path(__file__).parent / "stored_v1"
STORED_FILES = sorted(str(p.relative_to(STORED)) for p in STORED.rglob("*.json"))


def test_the_files_written_before_cover_every_stored_kind():
    kinds = {_kind(STORED / f, STORED) for f in STORED_FILES}
    assert (
        len(STORED_FILES) == 15 and None not in kinds and len(kinds) == 8
    )  # every kind but the certify summary (see _kind)


@pytest.mark.parametrize("name", STORED_FILES)
def test_a_file_written_before_loads_and_saves_back_to_its_bytes(name, tmp_path):
    path = STORED / name
    kind = _kind(path, STORED)
    assert kind is not None
    load, save = kind
    written = Path(save(load(path), tmp_path))
    text = written.read_text(encoding="utf-8")
    if written.name == "check.json":
        # The one key added since: the battery's diagnosis (derived from the outcomes, ignored on
        # load). Without it the file is the one written before, byte for byte.
        data = json.loads(text)
        assert sorted(data.pop("diagnosis")) == sorted(o["name"] for o in data["outcomes"] if o["status"] == "violated")
        text = json.dumps(data, indent=2) + "\n"
    assert text == path.read_text(encoding="utf-8")
    npz = path.with_suffix(".npz")
    if npz.is_file():
        before, after = load_npz(npz), load_npz(written.with_suffix(".npz"))
        assert sorted(before) == sorted(after) and all(
            before[k].dtype == after[k].dtype and np.array_equal(before[k], after[k]) for k in before
        )
