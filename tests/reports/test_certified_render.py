"""``render_certified`` returns what its signature and docstring say: (the report's files, the CSV files).

It returned ``_write``'s 3-tuple (with the index link) under a 2-tuple annotation; mypy over
``reports/`` (issue 44) found it, and unpacking two values failed.
"""

from __future__ import annotations

import pytest

from reports.certified import render_certified


@pytest.mark.extended
def test_render_certified_returns_the_report_and_its_csv_files(full_run):
    result = render_certified(full_run)
    assert len(result) == 2
    written, csv_files = result
    assert written.html.is_file() and written.html.parent == full_run.reports_dir()
    assert csv_files and all(p.suffix == ".csv" and p.is_file() for p in csv_files)
