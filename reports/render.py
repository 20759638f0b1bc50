"""The report writer: sections of Markdown text, tables and figures → HTML + Markdown + PNGs.

The only module of the suite that saves figures (DESIGN.md, "Style": plotting functions take
results and an optional axes and return a figure; only the report writer saves files). A
report is a list of :class:`Section` s, each a list of blocks — Markdown text (a ``str``), a
:class:`Table`, a :class:`Figure` or a :class:`Banner` — written as ``<stem>.html`` (self-
contained apart from the PNGs beside it) and ``<stem>.md``. Every file is written atomically
(:mod:`dpaudit.store`), so a crash never leaves a half-written report under its final name.

No torch here: reports render from stored results alone.
"""

from __future__ import annotations

import html
import io
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers and CI; must precede pyplot

from matplotlib.figure import Figure as MplFigure

from dpaudit.store import atomic_write_bytes, atomic_write_text

__all__ = ["Table", "Figure", "Banner", "Section", "write_report", "format_number"]


def format_number(x: Any, digits: int = 4) -> str:
    """Numbers for tables: ∞ as "inf", floats to ``digits`` significant places."""
    if isinstance(x, bool) or x is None:
        return "—" if x is None else ("yes" if x else "no")
    if isinstance(x, float):
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        if math.isnan(x):
            return "nan"
        return f"{x:.{digits}g}"
    return str(x)


@dataclass(frozen=True, kw_only=True)
class Table:
    """A table: column names, rows of cells, an optional caption."""

    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    caption: str = ""

    def __post_init__(self) -> None:
        for i, row in enumerate(self.rows):
            if len(row) != len(self.columns):
                raise ValueError(f"rows[{i}] has {len(row)} cells, expected {len(self.columns)} (columns {list(self.columns)})")


@dataclass(frozen=True, kw_only=True)
class Figure:
    """A matplotlib figure with a file name stem and a caption."""

    figure: MplFigure
    name: str
    caption: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.figure, MplFigure):
            raise TypeError(f"figure must be a matplotlib Figure, got {type(self.figure).__name__}")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise ValueError(f"name must be a plain file stem (letters, digits, _ . -), got {self.name!r}")


@dataclass(frozen=True, kw_only=True)
class Banner:
    """A highlighted message (``level``: ``alert`` or ``ok``), e.g. an audit violation."""

    text: str
    level: str = "alert"


@dataclass(frozen=True, kw_only=True)
class Section:
    """A titled list of blocks: Markdown ``str``, :class:`Table`, :class:`Figure`, :class:`Banner`."""

    title: str
    blocks: Sequence[Any] = field(default_factory=list)


_CSS = """
body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}
th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}caption{caption-side:bottom;font-size:.9em;color:#555}
figure{margin:1rem 0}figcaption{font-size:.9em;color:#555}img{max-width:100%}
.banner{padding:.8rem 1rem;border-radius:4px;font-weight:600;margin:1rem 0}
.alert{background:#fde2e1;border:1px solid #d33;color:#900}.ok{background:#e3f5e1;border:1px solid #3a3;color:#161}
code{background:#f4f4f4;padding:0 .2rem}
"""


def _inline(text: str) -> str:
    """Markdown inline markup (code, bold, italics) to HTML, escaping everything else."""
    out = html.escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    out = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", out)
    return re.sub(r"(?<!\*)\*([^*]+)\*(?!\*)", r"<em>\1</em>", out)


def _markdown_to_html(text: str) -> str:
    """The Markdown subset reports use: headings, paragraphs, '-' lists."""
    parts: list[str] = []
    for para in re.split(r"\n\s*\n", text.strip()):
        lines = para.splitlines()
        if all(line.lstrip().startswith(("- ", "* ")) for line in lines):
            items = "".join(f"<li>{_inline(line.lstrip()[2:])}</li>" for line in lines)
            parts.append(f"<ul>{items}</ul>")
        elif lines and lines[0].startswith("#"):
            level = min(6, len(lines[0]) - len(lines[0].lstrip("#")) + 1)
            parts.append(f"<h{level}>{_inline(lines[0].lstrip('#').strip())}</h{level}>")
            if len(lines) > 1:
                parts.append(f"<p>{_inline(' '.join(lines[1:]))}</p>")
        else:
            parts.append(f"<p>{_inline(' '.join(lines))}</p>")
    return "\n".join(parts)


def _table_md(t: Table) -> str:
    head = "| " + " | ".join(t.columns) + " |\n|" + "---|" * len(t.columns) + "\n"
    body = "".join("| " + " | ".join(format_number(c).replace("|", "\\|") for c in row) + " |\n" for row in t.rows)
    return head + body + (f"\n*{t.caption}*\n" if t.caption else "")


def _table_html(t: Table) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in t.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(format_number(c))}</td>" for c in row) + "</tr>" for row in t.rows)
    cap = f"<caption>{_inline(t.caption)}</caption>" if t.caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_report(directory: str | os.PathLike[str], sections: Sequence[Section], *, title: str, stem: str = "report") -> Path:
    """Writes ``<stem>.html``, ``<stem>.md`` and one PNG per figure into ``directory``.

    Args:
        directory: where to write (usually ``RUN_DIR/reports``); created if missing.
        sections: the report's sections, in order.
        title: the report's title.
        stem: file name stem of the report and prefix of its figures.

    Returns:
        The path of the HTML report.

    Raises:
        TypeError: a block of an unknown kind.
    """
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", stem):
        raise ValueError(f"stem must be a plain file stem (letters, digits, _ . -), got {stem!r}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    md: list[str] = [f"# {title}\n"]
    body: list[str] = [f"<h1>{html.escape(title)}</h1>"]
    for section in sections:
        if not isinstance(section, Section):
            raise TypeError(f"sections must hold Section values, got {type(section).__name__}")
        md.append(f"## {section.title}\n")
        body.append(f"<h2>{html.escape(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, str):
                md.append(block.strip() + "\n")
                body.append(_markdown_to_html(block))
            elif isinstance(block, Banner):
                md.append(f"> **{block.text}**\n")
                body.append(f'<div class="banner {html.escape(block.level)}">{_inline(block.text)}</div>')
            elif isinstance(block, Table):
                md.append(_table_md(block))
                body.append(_table_html(block))
            elif isinstance(block, Figure):
                png = f"{stem}-{block.name}.png"
                buf = io.BytesIO()
                block.figure.savefig(buf, format="png", dpi=110, bbox_inches="tight")
                atomic_write_bytes(out / png, buf.getvalue())
                md.append(f"![{block.caption or block.name}]({png})\n" + (f"\n*{block.caption}*\n" if block.caption else ""))
                cap = f"<figcaption>{_inline(block.caption)}</figcaption>" if block.caption else ""
                body.append(f'<figure><img src="{html.escape(png)}" alt="{html.escape(block.caption or block.name)}">{cap}</figure>')
            else:
                raise TypeError(f"report blocks must be str, Table, Figure or Banner, got {type(block).__name__}")
    page = f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n' + "\n".join(body) + "\n</body></html>\n"
    atomic_write_text(out / f"{stem}.md", "\n".join(md))
    return atomic_write_text(out / f"{stem}.html", page)
