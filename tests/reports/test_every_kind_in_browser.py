"""Every registered report kind, rendered from its sample run, read in headless Chromium as a reviewer would.

Parametrised over :data:`reports.kinds.REPORT_KINDS`, so a kind that registers itself (DSSGD,
train-only, checks, …) is opened here as soon as its sample run exists in ``REPORT_SAMPLES``.
A page passes when it logs no console error, every image loads, no table cell shows a missing
value (NaN, None, inf, …; :data:`tests.browser.MISSING_VALUE`), it shows its figures and
tables, links every export the writer wrote beside them, and carries a verdict box.
"""

from __future__ import annotations

import re

import pytest

from reports.kinds import REPORT_KINDS
from tests.browser import assert_clean

KINDS = sorted(REPORT_KINDS)

#: The CSS class of a page's verdict box (agreed with the verdicts work of issue 34, item 2).
VERDICT_CLASS = "verdict"
_VERDICT = re.compile(r'<[^>]+class="[^"]*\b' + VERDICT_CLASS + r'\b[^"]*"')


@pytest.mark.extended
@pytest.mark.parametrize("name", KINDS)
def test_every_page_of_every_kind_is_clean_in_chromium(name, rendered_samples, check_page):
    if rendered_samples[name] is None:
        pytest.fail(
            f"report kind {name!r} has no sample run: add a builder to REPORT_SAMPLES in tests/reports/conftest.py"
        )
    _, index = rendered_samples[name]
    pages = index.pages_of(name)
    assert pages, f"the sample run of {name!r} rendered no page"
    reports = [check_page(page) for page in pages]
    assert_clean(*reports)
    for page, report in zip(pages, reports, strict=True):
        html = page.read_text(encoding="utf-8")
        # Clean because its figures and tables loaded, not because it had none.
        assert report.num_images + report.num_cells > 0, f"{page.name} shows no figure and no table"
        for src in re.findall(r'<img src="([^"]+)"', html):
            stem = src.removesuffix(".png")
            for link in (f"{stem}.svg", f"{stem}.pdf"):
                assert f'href="{link}"' in html and (page.parent / link).is_file(), f"{page.name}: {src} without {link}"
        assert html.count("<table>") == html.count(">LaTeX</a>"), (
            f"{page.name}: a table without its CSV and LaTeX links"
        )
        assert _VERDICT.search(html), f'{page.name} has no verdict box (class="{VERDICT_CLASS}")'
