"""Where a PATE record keeps its teachers' ids: ``private/pate.json`` now, ``pate.json`` in records written before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpaudit.app.runs.pate import load_teacher_dirs


def _cache(run: Path, ids: list[str]) -> Path:
    cache = run / "records" / "pate-teachers"
    for t in ids:
        (cache / t).mkdir(parents=True)
        (cache / t / "record.json").write_text("{}")
    return cache


def test_the_teachers_are_found_under_private_and_in_older_records(tmp_path: Path) -> None:
    ids = ["t0", "t1"]
    cache = _cache(tmp_path, ids)
    new = tmp_path / "records" / "student-new"
    (new / "private").mkdir(parents=True)
    # The published pate.json holds no teacher ids; the cache path is relative to private/.
    (new / "pate.json").write_text(json.dumps({"teachers": {"num_teachers": 2, "private": "private/pate.json"}}))
    (new / "private" / "pate.json").write_text(
        json.dumps({"teachers": {"cache": "../../pate-teachers", "teacher_ids": ids}})
    )
    assert load_teacher_dirs(new) == [(cache / t).resolve() for t in ids]
    old = tmp_path / "records" / "student-old"
    old.mkdir(parents=True)
    (old / "pate.json").write_text(json.dumps({"teachers": {"cache": "../pate-teachers", "teacher_ids": ids}}))
    assert load_teacher_dirs(old) == [(cache / t).resolve() for t in ids]
    with pytest.raises(ValueError, match="no pate.json"):
        load_teacher_dirs(tmp_path / "records" / "pate-teachers")
