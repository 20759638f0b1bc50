"""The HTML reports in a real browser: no console error, no broken image, no NaN/None cell (headless Chromium)."""

from __future__ import annotations

import pytest
from PIL import Image

from dpaudit.app.runs.report import render_reports
from tests.browser import MISSING_VALUE, assert_clean


@pytest.mark.extended
def test_every_report_page_renders_cleanly_in_chromium(full_run, check_page):
    index = render_reports(full_run)
    assert len(index.pages) == 3  # the audit, the membership attacks and the certified page
    reports = [check_page(page) for page in (index.index_html, *index.pages)]
    assert_clean(*reports)
    for report in reports[1:]:
        # Clean because its figures and tables loaded, not because it had none.
        assert report.num_images > 0 and report.num_cells > 0, report.page
    for report in reports:
        with Image.open(report.screenshot) as shot:
            lo, hi = shot.convert("L").getextrema()
        assert hi - lo > 100, f"{report.screenshot} is blank"


@pytest.mark.extended
def test_the_checker_catches_a_broken_image_a_missing_value_and_script_errors(check_page, tmp_path):
    # Without this, a checker that never looked at the page would pass every report above.
    page = tmp_path / "broken.html"
    page.write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>broken</title></head><body>"
        '<img src="missing.png" alt="gone">'
        "<table><tr><th>metric</th><th>value</th></tr>"
        "<tr><td>nonprivate</td><td>NaN</td></tr>"
        "<tr><td>Nonetheless</td><td>0.5</td></tr></table>"
        '<script>console.error("x")</script>'
        '<script>throw new Error("boom")</script>'
        "</body></html>"
    )
    report = check_page(page)
    assert report.broken_images == ("missing.png",)
    assert report.missing_value_cells == ("table 1 row 2 column 2: <td> 'NaN'",)
    assert any(m.startswith("x") for m in report.console_errors)
    assert "uncaught Error: boom" in report.console_errors
    assert any("missing.png" in m for m in report.failed_requests)
    assert report.screenshot.is_file() and report.num_images == 1 and report.num_cells == 6
    with pytest.raises(AssertionError, match="image did not load: missing.png") as raised:
        assert_clean(report)
    assert "missing value in a table cell" in str(raised.value) and "console error: x" in str(raised.value)


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        "nan",
        "NAN",
        "-nan",
        "None",
        "null",
        "undefined",
        "0.3 ± nan",
        "(None)",
        "ε = NaN",
        "inf",
        "-inf",
        "+Inf",
        "INF",
        "Infinity",
        "-infinity",
        "ε_UB = inf",
        "[0.1, inf)",
    ],
)
def test_missing_values_are_whole_words(text):
    assert MISSING_VALUE.search(text)


@pytest.mark.parametrize(
    "text",
    [
        "nonprivate",
        "Nonetheless",
        "annotation",
        "nullable",
        "Finance",
        "0.5",
        "",
        "∞",
        "information",
        "inference",
        "infeasible",
        "nanoseconds",
    ],
)
def test_words_that_merely_contain_them_are_not_missing_values(text):
    assert not MISSING_VALUE.search(text)
