"""Shared fixtures: the offline data root, an isolated cache per test session, and the headless-browser page check."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    # Decompressed dataset copies go to a per-session cache, never the user's home.
    os.environ.setdefault("DPAUDIT_CACHE", str(tmp_path_factory.mktemp("dpaudit-cache")))
    if SHARED_DATA.is_dir():
        os.environ.setdefault("DPAUDIT_DATA_ROOT", str(SHARED_DATA))


@pytest.fixture
def shared_data() -> Path:
    if not (SHARED_DATA / "mnist").is_dir():
        pytest.skip(f"offline data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def no_data_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """No developer data root or cache leaks in, and no dataset loaded by another test is reused."""
    from dpaudit.data import DATA_ROOT_ENV, clear_cache

    monkeypatch.delenv(DATA_ROOT_ENV, raising=False)
    monkeypatch.setenv("DPAUDIT_CACHE", str(tmp_path / "cache"))
    clear_cache()
    yield
    clear_cache()


@pytest.fixture(scope="module")
def _chromium():
    """One headless Chromium per test module (starting it costs about a second); skips without one, fails under CI."""
    from tests.browser import chromium

    with chromium() as browser:
        yield browser


@pytest.fixture
def check_page(_chromium, request: pytest.FixtureRequest, tmp_path: Path):
    """``check_page(html, screenshot=None)``: open an HTML page in headless Chromium; returns a
    ``tests.browser.PageReport``.

    Pass the report to ``tests.browser.assert_clean``. The screenshot goes to ``screenshot``, else
    to ``tmp_path/screenshots/<test>-<page>.png`` (a copy into ``$DPAUDIT_SCREENSHOT_DIR`` when set).
    """
    test_name = re.sub(r"[^\w.-]+", "_", request.node.name)

    def check(html: Path | str, screenshot: Path | str | None = None):
        html = Path(html)
        return _chromium.check(
            html, screenshot if screenshot is not None else tmp_path / "screenshots" / f"{test_name}-{html.stem}.png"
        )

    return check
