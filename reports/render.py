"""The report writer: sections of blocks → HTML, Markdown or LaTeX from Jinja2 templates, with every figure and table in
forms a paper takes.

The only module of the suite that saves figures (docs/architecture.md, "Style": plotting functions take
results and an optional axes and return a figure; only the report writer saves files). A
report is a list of :class:`Section` s, each a list of blocks — :class:`Text`, :class:`Items`,
:class:`Table`, :class:`Figure` or :class:`Banner` — rendered through
``reports/templates/<kind>.html.j2`` and ``<kind>.md.j2`` (each extends one base layout) into
``<stem>.html`` and ``<stem>.md``. A :class:`Figure` with nothing to draw is written as words,
never as empty axes. Every file is written atomically through :mod:`dpaudit.store`, whose
writers give files the mode ``open`` would (0644 under the usual umask 022).

Beside every page (:mod:`reports.exports`): each figure as ``<stem>-<name>.png`` (shown),
``.svg`` and ``.pdf``, with the data it draws as ``.csv``; each table as
``<stem>-<name>.csv`` and a LaTeX ``tabular`` ``.tex``; the page links them. The page format
is chosen with :func:`report_format` (``html``: HTML with its Markdown twin, the default;
``md``: Markdown only; ``latex``: ``<stem>.tex``, a standalone document that compiles with
pdflatex, whose body ``<stem>-body.tex`` the LaTeX index inputs). Every PDF embeds TrueType
fonts, as publishers ask. Rendering twice writes the same bytes.

No torch here: reports render from stored results alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypedDict

import jinja2
import markupsafe
import matplotlib

matplotlib.use("Agg")  # no display on servers and CI; must precede any canvas

from matplotlib.figure import Figure as MplFigure

from dpaudit import _validate as v
from dpaudit.store import atomic_write_text
from reports.exports import latex_text, save_figure, save_table
from reports.figures import has_data

__all__ = [
    "Text",
    "Items",
    "Table",
    "Link",
    "Figure",
    "Banner",
    "Section",
    "WrittenReport",
    "write_report",
    "write_report_files",
    "write_index",
    "write_index_files",
    "REPORT_FORMATS",
    "report_format",
    "current_format",
    "accountant_table",
    "format_number",
    "TEMPLATE_DIR",
    "safe_href",
    "md_text",
    "md_inline",
]

TEMPLATE_DIR = Path(__file__).parent / "templates"
_STEM = re.compile(r"[A-Za-z0-9_.-]+")

#: The page formats ``dpaudit report --format`` offers (``html`` writes its Markdown twin too).
REPORT_FORMATS = ("html", "md", "latex")
#: File suffix of the page of each format (what the index links and ``render_reports`` lists).
PAGE_SUFFIX = {"html": ".html", "md": ".md", "latex": ".tex"}
_FORMAT: contextvars.ContextVar[str] = contextvars.ContextVar("report_format", default="html")


def current_format() -> str:
    """The page format :func:`write_report_files` writes now (``html`` unless :func:`report_format` says otherwise)."""
    return _FORMAT.get()


@contextlib.contextmanager
def report_format(fmt: str) -> Iterator[str]:
    """Within the block, every report page is written in ``fmt`` (one of :data:`REPORT_FORMATS`).

    A context rather than an argument: report kinds call :func:`write_report_files` themselves,
    and the format is the caller's choice, not the kind's (a kind renders every format unchanged).

    Raises:
        ValueError: ``fmt`` is not one of :data:`REPORT_FORMATS`.
    """
    if fmt not in REPORT_FORMATS:
        raise v.invalid("format", f"format must be one of {', '.join(REPORT_FORMATS)}, got {fmt!r}")
    token = _FORMAT.set(fmt)
    try:
        yield fmt
    finally:
        _FORMAT.reset(token)


def format_number(x: Any, digits: int = 4) -> str:
    """Numbers for tables, by :func:`reports.numbers.format_cell` (∞, —, one precision); ``digits`` is kept for old
    callers."""
    from reports.numbers import format_cell

    return format_cell(x)


@dataclass(frozen=True, kw_only=True)
class Text:
    """A paragraph of plain text."""

    text: str


@dataclass(frozen=True, kw_only=True)
class Items:
    """A bulleted list of plain-text items."""

    items: Sequence[str]


_HREF_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def safe_href(href: Any) -> bool:
    """Whether ``href`` may appear as a link on a page: a relative path inside the reports folder.

    The allow-list every URL of a page passes: plain path segments (letters, digits, ``_ . -``;
    none ``.`` or ``..``, none starting with a dot) joined by ``/``. So no scheme
    (``javascript:``, ``https:``), no absolute path, no ``..`` out of the run, no query or
    fragment, no backslash. Every page, figure and table a report links is named this way.
    """
    return isinstance(href, str) and bool(href) and all(_HREF_SEGMENT.fullmatch(part) for part in href.split("/"))


# Markdown's own characters in text from results (labels, model ids, findings), backslash-escaped
# (CommonMark: any ASCII punctuation may be): ``<`` and ``&`` would start raw HTML or an entity,
# backticks code, brackets a link, ``|`` a table column, ``>`` a quote; the backslash too, so a
# backslash in the text cannot undo an escape. The HTML twin escapes the same text with markupsafe.
_MD_SPECIAL = re.compile(r"([\\<>&`|\[\]])")


def md_text(x: Any) -> str:
    """Text from a result as Markdown shows it literally (see :data:`_MD_SPECIAL`)."""
    return _MD_SPECIAL.sub(r"\\\1", str(x))


def md_inline(x: Any) -> str:
    """:func:`md_text` on one line (a table cell, a heading, a link's words): a newline would end the row."""
    return md_text(x).replace("\r", " ").replace("\n", " ")


@dataclass(frozen=True, kw_only=True)
class Link:
    """A table cell that links another report (``href`` relative to the reports folder, HTML).

    Raises:
        ValueError: ``href`` is not a relative path inside the reports folder (:func:`safe_href`).
    """

    text: str
    href: str

    def __post_init__(self) -> None:
        if not safe_href(self.href):
            raise v.invalid(
                "href",
                "href must be a relative path inside the reports folder (no scheme, no "
                f"'..', no absolute path), got {v.short(self.href)}",
            )


def _html_cell(x: Any) -> Any:
    if isinstance(x, Link):
        return markupsafe.Markup('<a href="{}">{}</a>').format(x.href, x.text)
    return format_number(x)


def _md_cell(x: Any) -> str:
    if isinstance(x, Link):
        # The Markdown reports sit beside the HTML ones: link the .md twin (the href passed safe_href: nothing to
        # escape).
        target = x.href[: -len(".html")] + ".md" if x.href.endswith(".html") else x.href
        return f"[{md_inline(x.text)}]({target})"
    return md_inline(format_number(x))


@dataclass(frozen=True, kw_only=True)
class Table:
    """A table: column names, rows of cells, an optional caption.

    ``name`` is the file stem of its CSV and LaTeX exports (``<page>-<name>.csv``); left empty,
    the table is numbered in page order (``<page>-table-1``).
    """

    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    caption: str = ""
    name: str = ""

    def __post_init__(self) -> None:
        if self.name and not _STEM.fullmatch(self.name):
            raise v.invalid("name", f"name must be a plain file stem (letters, digits, _ . -), got {self.name!r}")
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise v.invalid(
                    "rows",
                    f"rows[{i}] has {len(row)} cells, expected {len(self.columns)} (columns {list(self.columns)})",
                )


@dataclass(frozen=True, kw_only=True)
class Figure:
    """A matplotlib figure with a file name stem and a caption.

    ``figure`` is ``None`` (or a figure with nothing drawn) when there is nothing to plot; the
    report then shows ``empty`` in words instead of empty axes.
    """

    figure: MplFigure | None
    name: str
    caption: str = ""
    empty: str = "nothing to plot"

    def __post_init__(self) -> None:
        if self.figure is not None and not isinstance(self.figure, MplFigure):
            raise v.invalid_type(
                "figure", f"figure must be a matplotlib Figure or None, got {type(self.figure).__name__}"
            )
        if not _STEM.fullmatch(self.name):
            raise v.invalid("name", f"name must be a plain file stem (letters, digits, _ . -), got {self.name!r}")


@dataclass(frozen=True, kw_only=True)
class Banner:
    """A highlighted message (``level``: ``alert`` or ``ok``), e.g. an audit violation."""

    text: str
    level: str = "alert"

    def __post_init__(self) -> None:
        if self.level not in ("alert", "ok"):
            raise v.invalid("level", f"level must be 'alert' or 'ok', got {self.level!r}")


@dataclass(frozen=True, kw_only=True)
class Section:
    """A titled list of blocks (:class:`Text`, :class:`Items`, :class:`Table`, :class:`Figure`, :class:`Banner`; a
    ``str`` is a paragraph)."""

    title: str
    blocks: Sequence[Any] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class WrittenReport:
    """The files one report consists of.

    ``html`` and ``markdown`` name the page's HTML and Markdown whatever the format (the
    HTML path is the page's identity on the index); ``page`` is the file written in the
    format chosen. ``figures`` are the PNGs shown, ``exports`` every SVG, PDF, CSV and LaTeX
    file written beside the page for its figures and tables.
    """

    html: Path
    markdown: Path
    figures: tuple[Path, ...] = ()
    page: Path | None = None
    format: str = "html"
    exports: tuple[Path, ...] = ()


def accountant_table(
    epsilons: Mapping[str, float], *, delta: float, description: str = "", compared: str | None = None
) -> Table | Text:
    """The claim's ε under every applicable accountant at ``delta`` (one row each), or why there is none."""
    if not epsilons:
        return Text(
            text="No accountant applies to this "
            f"claim{f' ({description})' if description else ''}: it states no "
            "privacy mechanism, so ε is unbounded."
        )
    from reports.numbers import epsilon_ub_cell

    # Every accountant's ε is an upper bound: printed rounded up (the CSV export keeps the text too).
    rows = [
        [name + (" (tightest; compared)" if name == compared else ""), epsilon_ub_cell(float(eps))]
        for name, eps in epsilons.items()
    ]
    return Table(
        columns=["accountant", f"ε at δ={delta:g}"], rows=rows, caption=f"Claim: {description}" if description else ""
    )


class _Delimiters(TypedDict, total=False):
    """Jinja's delimiter options (its own defaults where not given)."""

    block_start_string: str
    block_end_string: str
    variable_start_string: str
    variable_end_string: str
    comment_start_string: str
    comment_end_string: str


def _environment(latex: bool = False) -> jinja2.Environment:
    options: _Delimiters = {}
    if latex:
        # LaTeX is made of braces: Jinja's delimiters become ((* *)), ((( ))) and ((= =)) there.
        options = {
            "block_start_string": "((*",
            "block_end_string": "*))",
            "variable_start_string": "(((",
            "variable_end_string": ")))",
            "comment_start_string": "((=",
            "comment_end_string": "=))",
        }
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=lambda name: name is not None and name.endswith(".html.j2"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        **options,
    )
    env.filters["num"] = _html_cell
    env.filters["mdcell"] = _md_cell
    env.filters["md"] = md_text
    env.filters["mdline"] = md_inline
    env.filters["tex"] = latex_text
    env.filters["texlabel"] = lambda x: re.sub(r"[^A-Za-z0-9:.-]", "-", str(x))
    return env


_ENVS: dict[bool, jinja2.Environment] = {}


def _env(latex: bool = False) -> jinja2.Environment:
    if latex not in _ENVS:
        _ENVS[latex] = _environment(latex)
    return _ENVS[latex]


def _table_cell(x: Any) -> str:
    """A table cell as the page prints it (a link as its words): what the LaTeX table shows."""
    return x.text if isinstance(x, Link) else format_number(x)


# What the templates are given: each block as its kind's fields (``b.kind`` picks the branch), its
# files already written beside the page and named by file name.


@dataclass(frozen=True, kw_only=True)
class _TextOut:
    kind: str  # "text", or "empty": a figure with nothing to plot, in its words
    text: str


@dataclass(frozen=True, kw_only=True)
class _ItemsOut:
    kind: ClassVar[str] = "items"
    entries: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class _BannerOut:
    kind: ClassVar[str] = "banner"
    text: str
    level: str


@dataclass(frozen=True, kw_only=True)
class _TableOut:
    kind: ClassVar[str] = "table"
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]  # cells as the table holds them (numbers, words, links, None)
    caption: str
    text_columns: tuple[bool, ...]  # a column of words is set flush left
    csv: str
    tex: str


@dataclass(frozen=True, kw_only=True)
class _FigureOut:
    kind: ClassVar[str] = "figure"
    src: str  # the PNG the page shows
    svg: str
    pdf: str
    csv: str  # "" for a figure that draws only images
    caption: str
    alt: str


_BlockOut = _TextOut | _ItemsOut | _BannerOut | _TableOut | _FigureOut


@dataclass(frozen=True, kw_only=True)
class _SectionOut:
    title: str
    blocks: tuple[_BlockOut, ...]


def _block(block: Any, out: Path, stem: str, tables: list[int], exports: list[Path]) -> _BlockOut:
    """One block as the templates read it; a figure's or table's files written beside the page."""
    if isinstance(block, str):
        return _TextOut(kind="text", text=block.strip())
    if isinstance(block, Text):
        return _TextOut(kind="text", text=block.text)
    if isinstance(block, Items):
        return _ItemsOut(entries=tuple(block.items))
    if isinstance(block, Banner):
        return _BannerOut(text=block.text, level=block.level)
    if isinstance(block, Table):
        tables.append(1)
        files = save_table(
            block.columns,
            block.rows,
            out,
            f"{stem}-{block.name or f'table-{len(tables)}'}",
            _table_cell,
            caption=block.caption,
        )
        exports.extend(files.values())
        # A column of words is set flush left under a flush-left heading (numbers stay right-aligned).
        text = [
            bool(block.rows) and all(isinstance(r[j], (str, Link)) or r[j] is None for r in block.rows)
            for j in range(len(block.columns))
        ]
        return _TableOut(
            columns=tuple(block.columns),
            rows=tuple(tuple(r) for r in block.rows),
            caption=block.caption,
            text_columns=tuple(text),
            csv=files["csv"].name,
            tex=files["tex"].name,
        )
    if isinstance(block, Figure):
        if block.figure is None or not has_data(block.figure):
            return _TextOut(
                kind="empty",
                text=f"{block.caption.rstrip('.')}: {block.empty}." if block.caption else f"{block.empty}.",
            )
        files = save_figure(block.figure, out, f"{stem}-{block.name}")
        exports.extend(files.values())
        links = {k: p.name for k, p in files.items()}
        return _FigureOut(
            src=links["png"],
            svg=links["svg"],
            pdf=links["pdf"],
            csv=links.get("csv", ""),
            caption=block.caption,
            alt=block.caption or block.name,
        )
    raise TypeError(f"report blocks must be str, Text, Items, Table, Figure or Banner, got {type(block).__name__}")


def _prepare(out: Path, stem: str, sections: Sequence[Section]) -> tuple[list[_SectionOut], list[Path], list[Path]]:
    """Sections as the templates read them; figures and tables written beside the report.

    Returns:
        (the sections, the PNGs shown, every export file written).
    """
    prepared: list[_SectionOut] = []
    tables: list[int] = []
    exports: list[Path] = []
    for section in sections:
        if not isinstance(section, Section):
            raise v.invalid_type("sections", f"sections must hold Section values, got {type(section).__name__}")
        blocks = tuple(_block(block, out, stem, tables, exports) for block in section.blocks)
        prepared.append(_SectionOut(title=section.title, blocks=blocks))
    figures = [p for p in exports if p.suffix == ".png"]
    return prepared, figures, [p for p in exports if p.suffix != ".png"]


def _template(kind: str, fmt: str) -> str:
    """The template of ``kind`` in ``fmt``; a kind without a LaTeX template of its own uses the shared one."""
    if fmt == "latex":
        return f"{kind}.tex.j2" if (TEMPLATE_DIR / f"{kind}.tex.j2").is_file() else "page.tex.j2"
    return f"{kind}.{fmt}.j2"


def write_report_files(
    directory: str | os.PathLike[str],
    sections: Sequence[Section],
    *,
    title: str,
    stem: str,
    kind: str = "report",
    intro: str = "",
) -> WrittenReport:
    """Writes the page ``<stem>`` in the current :func:`report_format`, with its figures and tables, into ``directory``.

    ``html`` (the default) writes ``<stem>.html`` and ``<stem>.md``; ``md`` only ``<stem>.md``;
    ``latex`` ``<stem>.tex`` (standalone) and ``<stem>-body.tex``. Every format writes each
    figure as PNG, SVG, PDF and data CSV, and each table as CSV and LaTeX.

    Args:
        directory: where to write (usually ``RunDir.reports_dir()``); created if missing.
        sections: the report's sections, in order.
        title: the report's title.
        stem: file name stem of the report and prefix of its figures and tables.
        kind: the template pair to use (``audit``, ``membership``, ``certified`` or ``report``).
        intro: a paragraph under the title.

    Returns:
        The files written.

    Raises:
        ValueError: ``stem`` is not a plain file stem, or no template exists for ``kind``.
        TypeError: a block of an unknown kind.
    """
    if not _STEM.fullmatch(stem):
        raise v.invalid("stem", f"stem must be a plain file stem (letters, digits, _ . -), got {stem!r}")
    if not (TEMPLATE_DIR / f"{kind}.html.j2").is_file():
        raise v.invalid("kind", f"kind must name a report template in {TEMPLATE_DIR}, got {kind!r}")
    fmt = current_format()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    prepared, figures, exports = _prepare(out, stem, sections)
    context = {"title": title, "intro": intro, "sections": prepared}
    html, md = out / f"{stem}.html", out / f"{stem}.md"
    if fmt == "latex":
        body = atomic_write_text(
            out / f"{stem}-body.tex", _env(latex=True).get_template(_template(kind, fmt)).render(**context)
        )
        page = atomic_write_text(
            out / f"{stem}.tex",
            _env(latex=True).get_template("standalone.tex.j2").render(title=title, inputs=[body.stem]),
        )
        exports.append(body)
    else:
        page = atomic_write_text(md, _env().get_template(_template(kind, "md")).render(**context))
        if fmt == "html":
            page = atomic_write_text(html, _env().get_template(_template(kind, "html")).render(**context))
    return WrittenReport(html=html, markdown=md, figures=tuple(figures), page=page, format=fmt, exports=tuple(exports))


def write_report(
    directory: str | os.PathLike[str],
    sections: Sequence[Section],
    *,
    title: str,
    stem: str = "report",
    kind: str = "report",
    intro: str = "",
) -> Path:
    """:func:`write_report_files`, returning the page's path (the HTML report under the default format)."""
    written = write_report_files(directory, sections, title=title, stem=stem, kind=kind, intro=intro)
    return written.page or written.html


def write_index_files(
    directory: str | os.PathLike[str],
    *,
    title: str,
    groups: Sequence[tuple[str, Sequence[tuple[str, str]]]],
    files: Sequence[str] = (),
) -> tuple[Path, ...]:
    """Writes the index linking every report in the current :func:`report_format`.

    ``html``: ``index.html`` and ``index.md``; ``md``: ``index.md``; ``latex``: ``index.tex``, one
    document that inputs every page's body (``<stem>-body.tex``), so the whole run compiles
    into one PDF.

    Args:
        directory: the reports directory.
        title: page title.
        groups: (heading, [(link text, HTML page name relative to ``directory``), …]) per report kind.
        files: further files (CSV tables) to list.

    Returns:
        The index files written, the current format's first.
    """
    fmt = current_format()
    for target in [h for _, links in groups for _, h in links] + list(files):
        if not safe_href(target):
            raise v.invalid(
                "groups",
                "every index link must be a relative path inside the reports folder "
                f"(safe_href), got {v.short(target, 300)}",
            )
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "latex":
        inputs = [Path(h).stem + "-body" for _, links in groups for _, h in links]
        return (
            atomic_write_text(
                out / "index.tex", _env(latex=True).get_template("standalone.tex.j2").render(title=title, inputs=inputs)
            ),
        )
    context = {
        "title": title,
        "intro": "",
        "groups": [
            {"title": g, "links": [{"text": t, "html": h, "md": Path(h).with_suffix(".md").name} for t, h in links]}
            for g, links in groups
        ],
        "files": list(files),
        # The HTML pages are linked only where they are written (--format md writes none).
        "html": fmt == "html",
    }
    md = atomic_write_text(out / "index.md", _env().get_template("index.md.j2").render(**context))
    if fmt == "md":
        return (md,)
    return atomic_write_text(out / "index.html", _env().get_template("index.html.j2").render(**context)), md


def write_index(
    directory: str | os.PathLike[str],
    *,
    title: str,
    groups: Sequence[tuple[str, Sequence[tuple[str, str]]]],
    files: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Writes ``index.html`` and ``index.md`` linking every report (:func:`write_index_files` in the ``html`` format).

    Returns:
        (index.html, index.md).
    """
    with report_format("html"):
        page, md = write_index_files(directory, title=title, groups=groups, files=files)
    return page, md
