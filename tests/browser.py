"""Rendered HTML pages checked in a real browser: headless Chromium driven by Playwright.

A page passes when, once loaded, it logged no console error and raised no script error, every
request it made succeeded, every ``<img>`` decoded, and no table cell shows ``NaN``, ``None``,
``null``, ``undefined`` or ``inf`` in any spelling (a value the renderer failed to format;
an unbounded value reads ∞). A full-page screenshot is
saved either way, so a failure can be looked at.

The browser is the system's (Debian's ``chromium`` package), never one Playwright downloads, so
the tests need no network. Without Playwright or a Chromium binary the checks skip on a
developer machine and fail under CI (``CI`` or ``DPAUDIT_REQUIRE_BROWSER`` set), where
``.ci/run`` installs the package. ``DPAUDIT_CHROMIUM`` names another binary (e.g. Chrome), and
``DPAUDIT_SCREENSHOT_DIR`` a folder that keeps a copy of every screenshot.

Use the ``check_page`` fixture of ``tests/conftest.py`` in a test (one browser per test module)::

    from tests.browser import assert_clean

    def test_my_report_renders(check_page, tmp_path):
        html = render_my_report(tmp_path)
        assert_clean(check_page(html))

or, outside a fixture, ``assert_clean(check_page(html, tmp_path / "page.png"))`` from this module
(which starts a browser for that one page).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import pytest

#: Where a developer may point the tests at another Chromium or Chrome binary (e.g. off Debian).
CHROMIUM_ENV = "DPAUDIT_CHROMIUM"
#: When set (as by .ci/run), a missing Playwright or Chromium fails the test, as ``CI`` does.
REQUIRE_ENV = "DPAUDIT_REQUIRE_BROWSER"
#: When set, every screenshot is also copied into this folder, which outlives pytest's tmp_path.
SCREENSHOT_DIR_ENV = "DPAUDIT_SCREENSHOT_DIR"

# Whole words only: "nonprivate", "Nonetheless", "annotation", "information" or "inference" are
# not missing values. NaN and infinity in any spelling (nan, NAN, inf, -Inf, Infinity) are: a
# page writes an unbounded value as ∞ and a missing one as —.
MISSING_VALUE = re.compile(r"\b(?:None|null|undefined)\b|(?i:\b(?:nan|inf|infinity)\b)")

# Runs in the page: every <td>/<th> with where it sits, and every <img> that finished without an image.
_CELLS_JS = """() => Array.from(document.querySelectorAll("td, th")).map((cell) => {
    const table = cell.closest("table");
    return {
        tag: cell.tagName.toLowerCase(),
        text: cell.innerText.trim(),
        table: table ? Array.from(document.querySelectorAll("table")).indexOf(table) + 1 : 0,
        row: cell.parentElement ? cell.parentElement.rowIndex + 1 : 0,
        column: cell.cellIndex + 1,
    };
})"""
_BROKEN_IMAGES_JS = """() => Array.from(document.images)
    .filter((img) => img.complete && img.naturalWidth === 0)
    .map((img) => img.getAttribute("src") || img.currentSrc || "(no src)")"""


@dataclass(frozen=True)
class PageReport:
    """What :func:`check_page` found on one page; every list empty means the page is clean."""

    page: Path
    screenshot: Path
    #: Console messages of type "error" and uncaught script errors.
    console_errors: tuple[str, ...] = ()
    #: Requests that failed (a missing image, stylesheet or script), as "URL: reason".
    failed_requests: tuple[str, ...] = ()
    #: The ``src`` of every ``<img>`` that did not load.
    broken_images: tuple[str, ...] = ()
    #: Table cells showing NaN/None/null/undefined, as "table T row R column C: <td> 'text'".
    missing_value_cells: tuple[str, ...] = ()
    #: How many ``<img>`` and table cells the page has, so a test can tell "all loaded" from "none there".
    num_images: int = 0
    num_cells: int = 0

    @property
    def problems(self) -> tuple[str, ...]:
        """Every finding, one line each, labelled by kind."""
        return (
            *(f"console error: {m}" for m in self.console_errors),
            *(f"failed request: {m}" for m in self.failed_requests),
            *(f"image did not load: {m}" for m in self.broken_images),
            *(f"missing value in a table cell: {m}" for m in self.missing_value_cells),
        )


def assert_clean(*reports: PageReport) -> None:
    """Raise AssertionError listing every problem of every report given, if there is any.

    Args:
        *reports: What :func:`check_page` found, one per page; all are listed, not only the first bad one.

    Raises:
        AssertionError: A page logged an error, failed a request, showed a broken image or a missing value.
    """
    failures = []
    for report in reports:
        if report.problems:
            lines = "\n".join(f"  - {p}" for p in report.problems)
            failures.append(
                f"{report.page} has {len(report.problems)} problem(s) in headless "
                f"Chromium (screenshot: {report.screenshot}):\n{lines}"
            )
    if failures:
        raise AssertionError("\n".join(failures))


def _browser_required() -> bool:
    # CI must exercise the browser, so a missing browser there is a failure, not a silent skip.
    # .ci/run sets DPAUDIT_REQUIRE_BROWSER itself, in case the CI service does not set CI.
    return any(os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no") for name in ("CI", REQUIRE_ENV))


def _unavailable(reason: str) -> NoReturn:
    if _browser_required():
        pytest.fail(
            f"{reason}; CI must run the browser tests (.ci/run installs Debian's chromium package)", pytrace=False
        )
    pytest.skip(f"{reason}; the headless-browser checks of the HTML reports need it")


def find_chromium() -> str | None:
    """The Chromium binary to drive: ``$DPAUDIT_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH."""
    override = os.environ.get(CHROMIUM_ENV)
    if override:
        return override if Path(override).is_file() else shutil.which(override)
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """One headless Chromium that checks pages one after another (see :func:`chromium`)."""

    def __init__(self, browser: Any) -> None:
        self._browser = browser

    def check(self, html_path: Path | str, screenshot: Path | str) -> PageReport:
        """Open ``html_path`` in a fresh page, collect its problems and save a full-page screenshot.

        Args:
            html_path: The HTML file to open (through ``file://``, so relative image links resolve).
            screenshot: Where to save the PNG screenshot; its folder is created.

        Returns:
            The findings; pass them to :func:`assert_clean`.
        """
        html_path = Path(html_path).resolve()
        screenshot = Path(screenshot)
        if not html_path.is_file():
            raise FileNotFoundError(f"no HTML page at {html_path}")
        console: list[str] = []
        failed: list[str] = []
        # A fresh context per page: nothing cached from the page before hides a missing file.
        context = self._browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            page = context.new_page()
            page.on(
                "console", lambda msg: console.append(_located(msg.text, msg.location)) if msg.type == "error" else None
            )
            page.on("pageerror", lambda exc: console.append(f"uncaught {exc.name or 'Error'}: {exc.message}"))
            page.on("requestfailed", lambda req: failed.append(f"{req.url}: {req.failure or 'failed'}"))
            page.goto(html_path.as_uri(), wait_until="load")
            cells = page.evaluate(_CELLS_JS)
            broken = page.evaluate(_BROKEN_IMAGES_JS)
            num_images = page.evaluate("() => document.images.length")
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(screenshot), full_page=True)
        finally:
            context.close()
        keep = os.environ.get(SCREENSHOT_DIR_ENV)
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(screenshot, Path(keep) / screenshot.name)
        missing = [
            f"table {c['table']} row {c['row']} column {c['column']}: <{c['tag']}> {c['text']!r}"
            for c in cells
            if MISSING_VALUE.search(c["text"])
        ]
        return PageReport(
            page=html_path,
            screenshot=screenshot,
            console_errors=tuple(console),
            failed_requests=tuple(failed),
            broken_images=tuple(broken),
            missing_value_cells=tuple(missing),
            num_images=num_images,
            num_cells=len(cells),
        )


def _located(text: str, location: dict[str, Any] | None) -> str:
    if location and location.get("url"):
        return f"{text} ({location['url']}:{location.get('lineNumber', '?')})"
    return text


@contextmanager
def chromium() -> Iterator[Chromium]:
    """Start headless Chromium for the duration of a ``with`` block.

    Skips the calling test when Playwright or the browser is missing (fails it under CI).

    Yields:
        A :class:`Chromium` whose ``check`` opens one page at a time.
    """
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Playwright is not installed (pip install -e '.[test]')")
    executable = find_chromium()
    if executable is None:
        _unavailable(
            "no Chromium binary found (looked for chromium and chromium-browser on "
            f"PATH, and ${CHROMIUM_ENV}; on Debian: apt-get install chromium)"
        )
    with sync_playwright() as playwright:
        try:
            # The system browser, not a Playwright download; no sandbox, as CI containers run as root.
            browser = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        except Exception as exc:  # a browser that is there but does not start is a real failure, even off CI
            pytest.fail(f"headless Chromium at {executable} did not start: {exc}", pytrace=False)
        try:
            yield Chromium(browser)
        finally:
            browser.close()


def check_page(html_path: Path | str, screenshot: Path | str) -> PageReport:
    """Check one page in its own headless Chromium (the ``check_page`` fixture shares one browser).

    Args:
        html_path: The HTML file to open.
        screenshot: Where to save the full-page PNG screenshot.

    Returns:
        The findings; pass them to :func:`assert_clean`.
    """
    with chromium() as browser:
        return browser.check(html_path, screenshot)
