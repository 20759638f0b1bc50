"""Every URL on a page is a relative path inside the reports folder, and the Markdown twin shows
text from results literally (issue 43, part B). The twin is read back by an independent CommonMark
renderer (markdown-it-py), not by comparing against the escaper's own output."""

from __future__ import annotations

import pytest

from reports.render import (
    Link,
    Section,
    Table,
    Text,
    md_inline,
    md_text,
    safe_href,
    write_index_files,
    write_report_files,
)

HOSTILE = [
    "javascript:alert(1)",
    "JavaScript:alert(1)",
    "https://example.org/a.html",
    "//example.org/a.html",
    "/etc/passwd",
    "../../../../etc/passwd",
    "a/../../b.html",
    "..",
    ".",
    "",
    "a\\b.html",
    "a.html?x=1",
    "a.html#x",
    ".hidden.html",
    " a.html",
    "a b.html",
    3,
    None,
]


@pytest.mark.parametrize(
    "href",
    [
        "membership-dpsgd-digits-digits-mlp-seed0-0a1b2c3d.html",
        "certified.html",
        "compare-grid-matrix.csv",
        "figures/x.png",
        "a_b-c.d.svg",
    ],
)
def test_the_names_the_writer_links_pass(href):
    assert safe_href(href)


@pytest.mark.parametrize("href", HOSTILE, ids=[repr(h) for h in HOSTILE])
def test_anything_else_is_refused_where_a_link_is_made(href):
    assert not safe_href(href)
    with pytest.raises(ValueError, match="href must be a relative path inside the reports folder"):
        Link(text="x", href=href)  # type: ignore[arg-type]


def test_the_index_refuses_a_link_out_of_the_reports_folder(tmp_path):
    with pytest.raises(ValueError, match="relative path inside the reports folder"):
        write_index_files(tmp_path, title="t", groups=[("g", [("evil", "javascript:alert(1)")])])


TEXT = "a <b>c</b> & d `e` [f](javascript:g) | h \\<i> > j"


def test_markdown_escapes_leave_the_text_as_commonmark_shows_it():
    markdown_it = pytest.importorskip("markdown_it")
    md = markdown_it.MarkdownIt("commonmark")  # raw HTML on, as GitHub-like renderers read the twin
    rendered = md.render(md_text(TEXT))
    # Shown literally: no tag, no link, no code span, and the text itself survives (HTML-escaped by the renderer).
    assert "<b>" not in rendered and "<a " not in rendered and "<code>" not in rendered and "<i>" not in rendered
    assert rendered.strip() == "<p>" + TEXT.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") + "</p>"
    assert "\n" not in md_inline("a\nb\r\nc")


def test_a_table_cell_and_a_heading_keep_the_markdown_table_whole(tmp_path):
    markdown_it = pytest.importorskip("markdown_it")
    written = write_report_files(
        tmp_path,
        [
            Section(
                title="<h1>x</h1>",
                blocks=[
                    Table(
                        columns=["setting | x", "value"],
                        rows=[["a | b\n# c", 1.0], [Link(text="[x](javascript:y)", href="b.html"), 2.0]],
                    ),
                    Text(text="<script>x</script>"),
                ],
            )
        ],
        title="T <script>",
        stem="esc",
    )
    md = written.markdown.read_text(encoding="utf-8")
    html = markdown_it.MarkdownIt("commonmark").enable("table").render(md)
    assert "<script>" not in html and "<h1>x</h1>" not in html and 'href="javascript:' not in html
    # Two columns in every row: the pipes inside cells stay text.
    assert html.count("<th>") == 2 and html.count("<td>") == 4 and "setting | x" in html and "a | b # c" in html
    assert '<a href="b.md">[x](javascript:y)</a>' in html  # the allowed link, to the Markdown twin, its words literal
