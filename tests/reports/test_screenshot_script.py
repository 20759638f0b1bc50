"""``scripts/screenshot_reports.py``: a run directory in, one 1,280 px full-page screenshot per page out.

A module of its own: the script drives its own Playwright, which cannot run beside the
``check_page`` fixture's browser in the same thread.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from PIL import Image

from tests.browser import _unavailable, find_chromium
from tests.reports.conftest import REPORT_SAMPLES

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "screenshot_reports.py"


# A browser of its own and a rendering: a few seconds the default suite spends on the pages themselves.
@pytest.mark.slow
def test_the_screenshot_script_shoots_every_page_at_1280_px(tmp_path, capsys):
    if importlib.util.find_spec("playwright") is None or find_chromium() is None:
        _unavailable("Playwright or Chromium is missing")  # skips, or fails under CI as every browser test does
    spec = importlib.util.spec_from_file_location("screenshot_reports", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    run = REPORT_SAMPLES["pate"](tmp_path / "pate")
    assert script.main([str(run.path), "--out", str(tmp_path / "shots")]) == 0
    listed = [Path(line) for line in capsys.readouterr().out.split()]
    assert [p.name for p in listed] == ["pate--index.png", "pate--pate.png"]
    for shot in listed:
        with Image.open(shot) as image:
            assert image.width == 1280 and image.height >= 900
