"""The report writer: sections of blocks → HTML and Markdown from Jinja2 templates, plus PNGs.

The only module of the suite that saves figures (docs/architecture.md, "Style": plotting functions take
results and an optional axes and return a figure; only the report writer saves files). A
report is a list of :class:`Section` s, each a list of blocks — :class:`Text`, :class:`Items`,
:class:`Table`, :class:`Figure` or :class:`Banner` — rendered through
``reports/templates/<kind>.html.j2`` and ``<kind>.md.j2`` (each extends one base layout) into
``<stem>.html`` and ``<stem>.md``. A :class:`Figure` with nothing to draw is written as words,
never as empty axes. Every file is written atomically through :mod:`dpaudit.store`, whose
writers give files the mode ``open`` would (0644 under the usual umask 022).

No torch here: reports render from stored results alone.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
import matplotlib

matplotlib.use("Agg")  # no display on servers and CI; must precede any canvas

from matplotlib.figure import Figure as MplFigure

from dpaudit import _validate as v
from dpaudit.store import atomic_write_bytes, atomic_write_text
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
    "accountant_table",
    "format_number",
    "TEMPLATE_DIR",
]

TEMPLATE_DIR = Path(__file__).parent / "templates"
_STEM = re.compile(r"[A-Za-z0-9_.-]+")


def format_number(x: Any, digits: int = 4) -> str:
    """Numbers for tables, by :func:`reports.numbers.format_cell` (∞, —, one precision); ``digits`` is kept for old callers."""
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


@dataclass(frozen=True, kw_only=True)
class Link:
    """A table cell that links another report (``href`` relative to the reports folder, HTML)."""

    text: str
    href: str


def _html_cell(x: Any) -> Any:
    if isinstance(x, Link):
        return markupsafe.Markup('<a href="{}">{}</a>').format(x.href, x.text)
    return format_number(x)


def _md_cell(x: Any) -> str:
    if isinstance(x, Link):
        # The Markdown reports sit beside the HTML ones: link the .md twin.
        target = x.href[: -len(".html")] + ".md" if x.href.endswith(".html") else x.href
        return f"[{x.text}]({target})".replace("|", "\\|")
    return format_number(x).replace("|", "\\|").replace("\n", " ")


@dataclass(frozen=True, kw_only=True)
class Table:
    """A table: column names, rows of cells, an optional caption."""

    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    caption: str = ""

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise v.invalid("rows", f"rows[{i}] has {len(row)} cells, expected {len(self.columns)} (columns {list(self.columns)})")


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
            raise v.invalid_type("figure", f"figure must be a matplotlib Figure or None, got {type(self.figure).__name__}")
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
    """A titled list of blocks (:class:`Text`, :class:`Items`, :class:`Table`, :class:`Figure`, :class:`Banner`; a ``str`` is a paragraph)."""

    title: str
    blocks: Sequence[Any] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class WrittenReport:
    """The files one report consists of."""

    html: Path
    markdown: Path
    figures: tuple[Path, ...] = ()


def accountant_table(epsilons: Mapping[str, float], *, delta: float, description: str = "", compared: str | None = None) -> Table | Text:
    """The claim's ε under every applicable accountant at ``delta`` (one row each), or why there is none."""
    if not epsilons:
        return Text(text=f"No accountant applies to this claim{f' ({description})' if description else ''}: it states no privacy mechanism, so ε is unbounded.")
    rows = [[name + (" (tightest; compared)" if name == compared else ""), float(eps)] for name, eps in epsilons.items()]
    return Table(columns=["accountant", f"ε at δ={delta:g}"], rows=rows, caption=f"Claim: {description}" if description else "")


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        autoescape=lambda name: name is not None and name.endswith(".html.j2"),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["num"] = _html_cell
    env.filters["mdcell"] = _md_cell
    return env


_ENV: jinja2.Environment | None = None


def _env() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = _environment()
    return _ENV


def _prepare(out: Path, stem: str, sections: Sequence[Section]) -> tuple[list[dict[str, Any]], list[Path]]:
    """Sections as plain dicts for the templates; figures saved as PNGs beside the report."""
    prepared, figures = [], []
    for section in sections:
        if not isinstance(section, Section):
            raise v.invalid_type("sections", f"sections must hold Section values, got {type(section).__name__}")
        blocks: list[dict[str, Any]] = []
        for block in section.blocks:
            if isinstance(block, str):
                blocks.append({"kind": "text", "text": block.strip()})
            elif isinstance(block, Text):
                blocks.append({"kind": "text", "text": block.text})
            elif isinstance(block, Items):
                blocks.append({"kind": "items", "entries": list(block.items)})
            elif isinstance(block, Banner):
                blocks.append({"kind": "banner", "text": block.text, "level": block.level})
            elif isinstance(block, Table):
                blocks.append({"kind": "table", "columns": list(block.columns), "rows": [list(r) for r in block.rows], "caption": block.caption})
            elif isinstance(block, Figure):
                if block.figure is None or not has_data(block.figure):
                    blocks.append({"kind": "empty", "text": f"{block.caption.rstrip('.')}: {block.empty}." if block.caption else f"{block.empty}."})
                    continue
                png = f"{stem}-{block.name}.png"
                buf = io.BytesIO()
                # bbox_inches="tight" keeps the legend placed outside the axes inside the image.
                block.figure.savefig(buf, format="png", dpi=110, bbox_inches="tight")
                figures.append(atomic_write_bytes(out / png, buf.getvalue()))
                blocks.append({"kind": "figure", "src": png, "caption": block.caption, "alt": block.caption or block.name})
            else:
                raise TypeError(f"report blocks must be str, Text, Items, Table, Figure or Banner, got {type(block).__name__}")
        prepared.append({"title": section.title, "blocks": blocks})
    return prepared, figures


def write_report_files(directory: str | os.PathLike[str], sections: Sequence[Section], *, title: str, stem: str, kind: str = "report", intro: str = "") -> WrittenReport:
    """Writes ``<stem>.html``, ``<stem>.md`` and one PNG per figure into ``directory``.

    Args:
        directory: where to write (usually ``RunDir.reports_dir()``); created if missing.
        sections: the report's sections, in order.
        title: the report's title.
        stem: file name stem of the report and prefix of its figures.
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
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    prepared, figures = _prepare(out, stem, sections)
    context = {"title": title, "intro": intro, "sections": prepared}
    md = atomic_write_text(out / f"{stem}.md", _env().get_template(f"{kind}.md.j2").render(**context))
    page = atomic_write_text(out / f"{stem}.html", _env().get_template(f"{kind}.html.j2").render(**context))
    return WrittenReport(html=page, markdown=md, figures=tuple(figures))


def write_report(directory: str | os.PathLike[str], sections: Sequence[Section], *, title: str, stem: str = "report", kind: str = "report", intro: str = "") -> Path:
    """:func:`write_report_files`, returning the HTML report's path."""
    return write_report_files(directory, sections, title=title, stem=stem, kind=kind, intro=intro).html


def write_index(directory: str | os.PathLike[str], *, title: str, groups: Sequence[tuple[str, Sequence[tuple[str, str]]]], files: Sequence[str] = ()) -> tuple[Path, Path]:
    """Writes ``index.html`` and ``index.md`` linking every report.

    Args:
        directory: the reports directory.
        title: page title.
        groups: (heading, [(link text, file name relative to ``directory``), …]) per report kind.
        files: further files (CSV tables) to list.

    Returns:
        (index.html, index.md).
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    context = {
        "title": title,
        "intro": "",
        "groups": [{"title": g, "links": [{"text": t, "html": h, "md": Path(h).with_suffix(".md").name} for t, h in links]} for g, links in groups],
        "files": list(files),
    }
    md = atomic_write_text(out / "index.md", _env().get_template("index.md.j2").render(**context))
    page = atomic_write_text(out / "index.html", _env().get_template("index.html.j2").render(**context))
    return page, md
