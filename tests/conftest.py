"""Shared fixtures: the offline data root and an isolated cache per test session."""

from __future__ import annotations

import os
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
