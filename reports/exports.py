"""What a report hands a paper: every figure as PNG, SVG and PDF with its data as CSV, every table as CSV and LaTeX.

Used by :mod:`reports.render` (the one writer) only. The data behind a figure is read from the
matplotlib objects themselves — each axes' lines, bar containers, scatter offsets, error bars,
segments and filled areas — so every plotting function is covered without knowing what it
drew. The vector files are byte-identical from one rendering to the next: SVG ids come from a
fixed hash salt and neither SVG nor PDF records a date.

Torch-free.
"""

from __future__ import annotations

import csv
import io
import math
import re
import textwrap
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection, PathCollection, PolyCollection
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.patches import Polygon

from dpaudit.store import atomic_write_bytes, atomic_write_text

__all__ = ["FIGURE_FORMATS", "DATA_COLUMNS", "figure_data", "save_figure", "save_table", "latex_text", "latex_table"]

#: Vector and raster files written per figure (the page shows the PNG and links the others).
FIGURE_FORMATS = ("png", "svg", "pdf")
#: Columns of a figure's data CSV: one row per point (or segment, bar, area vertex) of one series.
DATA_COLUMNS = ("panel", "panel_title", "x_label", "y_label", "series", "type", "category", "x", "y", "x_end", "y_end")


@dataclass(frozen=True, kw_only=True)
class _Save:
    """How one figure format is saved: the metadata its backend would fill with a date or a version, left empty."""

    unset: tuple[str, ...]  # metadata keys given as None, so the backend writes none
    dpi: int | None = None  # None: the figure's own


# Dates and random ids are what make two renderings of the same figure differ.
_SAVE: dict[str, _Save] = {
    "png": _Save(dpi=110, unset=("Software",)),
    "svg": _Save(unset=("Date", "Creator")),
    "pdf": _Save(unset=("CreationDate", "ModDate", "Creator", "Producer")),
}
_RC: dict[str, str] = {"svg.hashsalt": "dpaudit-report", "svg.fonttype": "path"}


def _num(x: Any) -> str:
    """A value as CSV text: floats at full precision (repr), so the CSV is the data, not its rounding."""
    if x is None or (isinstance(x, np.ma.core.MaskedConstant)):
        return ""
    if isinstance(x, (float, np.floating)):
        return repr(float(x))
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return str(int(x))
    return str(x)


def _series_name(label: Any, fallback: str) -> str:
    text = str(label) if label is not None else ""
    # matplotlib names unlabelled artists "_child3" / "_nolegend_": an ordinal says as much.
    return fallback if not text or text.startswith("_") else text


def _categories(ax: Axes, axis: str) -> dict[float, str]:
    """Tick position → tick label of ``axis``, where the ticks carry words (bar charts of settings)."""
    ticks = ax.get_xticks() if axis == "x" else ax.get_yticks()
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return {round(float(t), 9): lab.get_text() for t, lab in zip(ticks, labels, strict=False) if lab.get_text()}


def _axes_rows(ax: Axes) -> Iterator[tuple[str, str, Any, Any, Any, Any, Any]]:
    """(series, type, category, x, y, x_end, y_end) for everything drawn on ``ax``."""
    owner: dict[int, str] = {}  # artist id → the label of the errorbar container holding it
    caplines: set[int] = set()
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer):
            data_line, caps, bars = container.lines
            label = _series_name(container.get_label(), "errorbar")
            if data_line is not None:
                owner[id(data_line)] = label
            caplines.update(id(c) for c in caps)
            owner.update({id(b): label for b in bars})
    for i, line in enumerate(ax.get_lines()):
        if id(line) in caplines:
            continue
        name = owner.get(id(line)) or _series_name(line.get_label(), f"line {i + 1}")
        xs, ys = np.ravel(line.get_xdata()).astype(object), np.ravel(line.get_ydata()).astype(object)
        # axhline / axvline span the axes: that coordinate is a fraction of the axes, not data.
        transform = line.get_transform()
        if transform == ax.get_yaxis_transform():
            xs = np.full(len(xs), None)
        elif transform == ax.get_xaxis_transform():
            ys = np.full(len(ys), None)
        for x, y in zip(xs, ys, strict=False):
            yield name, "line", "", x, y, None, None
    xcat, ycat = _categories(ax, "x"), _categories(ax, "y")
    for j, container in enumerate(ax.containers):
        if not isinstance(container, BarContainer):
            continue
        name = _series_name(container.get_label(), f"bars {j + 1}")
        horizontal = getattr(container, "orientation", "vertical") == "horizontal"
        for rect in container.patches:
            if horizontal:
                y = rect.get_y() + rect.get_height() / 2
                yield name, "barh", ycat.get(round(y, 9), ""), rect.get_x() + rect.get_width(), y, rect.get_x(), None
            else:
                x = rect.get_x() + rect.get_width() / 2
                yield name, "bar", xcat.get(round(x, 9), ""), x, rect.get_y() + rect.get_height(), None, rect.get_y()
    in_bars = {id(rect) for c in ax.containers if isinstance(c, BarContainer) for rect in c.patches}
    for k, patch in enumerate(ax.patches):
        # A step histogram is a polygon (its outline: bin edges and heights); frames and other rectangles are
        # decoration.
        if isinstance(patch, Polygon) and id(patch) not in in_bars:
            name = _series_name(patch.get_label(), f"area {k + 1}")
            for x, y in patch.get_xy():
                yield name, "area", "", x, y, None, None
    yield from _collection_rows(ax, owner)


def _collection_rows(ax: Axes, owner: dict[int, str]) -> Iterator[tuple[str, str, Any, Any, Any, Any, Any]]:
    for k, coll in enumerate(ax.collections):
        name = owner.get(id(coll)) or _series_name(coll.get_label(), f"collection {k + 1}")
        if isinstance(coll, PathCollection):  # scatter
            for x, y in np.asarray(coll.get_offsets()):
                yield name, "scatter", "", x, y, None, None
        elif isinstance(coll, LineCollection):  # error bars, vlines / hlines
            kind = "errorbar" if id(coll) in owner else "segment"
            for seg in coll.get_segments():
                if len(seg) >= 2:
                    yield name, kind, "", seg[0][0], seg[0][1], seg[-1][0], seg[-1][1]
        elif isinstance(coll, PolyCollection):  # fill_between: the area's outline
            for path in coll.get_paths():
                for x, y in np.asarray(path.vertices):
                    yield name, "area", "", x, y, None, None


def figure_data(fig: Figure) -> list[tuple[str, ...]]:
    """The data drawn in ``fig``, one row per point, as CSV cells under :data:`DATA_COLUMNS`.

    Images (picture grids) carry no series and give no rows. Axes are numbered from 1 in the
    order the figure holds them (a twin axes is a panel of its own).
    """
    rows: list[tuple[str, ...]] = []
    for p, ax in enumerate(fig.axes, start=1):
        head = (str(p), ax.get_title(), ax.get_xlabel(), ax.get_ylabel())
        for series, kind, category, x, y, x_end, y_end in _axes_rows(ax):
            rows.append((*head, series, kind, str(category), _num(x), _num(y), _num(x_end), _num(y_end)))
    return rows


def _csv(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def save_figure(fig: Figure, out: Path, base: str) -> dict[str, Path]:
    """Writes ``<base>.png``, ``.svg``, ``.pdf`` and, where it drew any series, ``<base>.csv``.

    The PDF embeds its fonts as TrueType (Type 42), as publishers' PDF checks ask, whatever the
    page format: Type 3 fonts are bitmaps to some viewers and rejected by some submission systems.

    Args:
        fig: the figure.
        out: the folder.
        base: the files' stem.

    Returns:
        Format (``png``, ``svg``, ``pdf``, ``csv``) → path written.
    """
    written: dict[str, Path] = {}
    rc: Any = {**_RC, "pdf.fonttype": 42, "ps.fonttype": 42}  # (matplotlib types rc keys as literals)
    with matplotlib.rc_context(rc):
        bbox: Any = "tight"  # keeps the legend placed outside the axes inside the image
        for fmt in FIGURE_FORMATS:
            buf = io.BytesIO()
            save = _SAVE[fmt]
            fig.savefig(buf, format=fmt, bbox_inches=bbox, dpi=save.dpi, metadata=dict.fromkeys(save.unset))
            written[fmt] = atomic_write_bytes(out / f"{base}.{fmt}", buf.getvalue())
            if fmt == "png":
                # The same tight box for the vector files, measured once: "tight" would lay the figure
                # out again per format, half the cost of each (savefig's own padding, 0.1 inch, absorbs
                # the backends' slightly different text extents).
                bbox = fig.get_tightbbox(FigureCanvasAgg(fig).get_renderer()).padded(
                    matplotlib.rcParams["savefig.pad_inches"]
                )
    rows = figure_data(fig)
    if rows:
        written["csv"] = atomic_write_text(out / f"{base}.csv", _csv(DATA_COLUMNS, rows))
    return written


# Characters the reports print, as pdflatex understands them without any Unicode set-up.
_LATEX_CHARS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "ε": r"$\varepsilon$",
    "δ": r"$\delta$",
    "σ": r"$\sigma$",
    "α": r"$\alpha$",
    "β": r"$\beta$",
    "γ": r"$\gamma$",
    "λ": r"$\lambda$",
    "μ": r"$\mu$",
    "τ": r"$\tau$",
    "Δ": r"$\Delta$",
    "∞": r"$\infty$",
    "≤": r"$\leq$",
    "≥": r"$\geq$",
    "≈": r"$\approx$",
    "≠": r"$\neq$",
    "±": r"$\pm$",
    "×": r"$\times$",
    "·": r"$\cdot$",
    "√": r"$\surd$",
    "→": r"$\rightarrow$",
    "←": r"$\leftarrow$",
    "↑": r"$\uparrow$",
    "↓": r"$\downarrow$",
    "∈": r"$\in$",
    "−": "-",
    "–": "--",
    "—": "---",
    "…": r"\ldots{}",
    "’": "'",
    "‘": "`",
    "“": "``",
    "”": "''",
    "✓": "yes",
    "✗": "no",
    "²": r"$^2$",
    "½": r"$\frac12$",
    "\u00a0": "~",
}


# A Greek letter with a subscript is one symbol in a paper: ε_LB → $\varepsilon_{\mathrm{LB}}$ (a word
# subscript upright), σ₁ → $\sigma_{1}$; a superscript is raised: 10⁻⁵ → 10$^{-5}$.
_GREEK = "εδσαβγλμτΔ"
_SUBSCRIPTS = "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₒₓₕₖₗₘₙₚₛₜᵢⱼᵣᵤᵥ"
_SUPERSCRIPTS = "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁱⁿ"
_SCRIPTED = re.compile(
    rf"(?P<g1>[{_GREEK}])_(?P<word>[A-Za-z0-9]+)"
    rf"|(?P<g2>[{_GREEK}])?(?P<sub>[{_SUBSCRIPTS}]+)"
    rf"|(?P<sup>[{_SUPERSCRIPTS}]+)"
)


def _script_text(chars: str) -> str:
    """Unicode sub- or superscript characters as the ASCII they stand for (₁ → 1, ⁻ → -)."""
    plain = unicodedata.normalize("NFKD", chars).replace("\u2212", "-")
    return _latex_chars(plain).replace("$", "")


def _scripted(m: re.Match[str]) -> str:
    if m["word"] is not None:
        return "$" + _LATEX_CHARS[m["g1"]].strip("$") + r"_{\mathrm{" + m["word"] + "}}$"
    if m["sub"] is not None:
        base = _LATEX_CHARS[m["g2"]].strip("$") if m["g2"] else ""
        return "$" + base + "_{" + _script_text(m["sub"]) + "}$"
    return "$^{" + _script_text(m["sup"]) + "}$"


def latex_text(text: Any) -> str:
    """``text`` as LaTeX source for pdflatex: specials escaped, Greek and symbols as math, plain ASCII out.

    Sub- and superscripts are typeset as such (ε_LB, σ₁, 10⁻⁵), and symbols side by side are one
    formula (never ``$$``, which would open display math). A character with no mapping is
    written as its ASCII decomposition (é → e) or, failing that, ``?`` — so the page always
    compiles, whatever a label holds.
    """
    text = str(text)
    parts, last = [], 0
    for m in _SCRIPTED.finditer(text):
        parts += [_latex_chars(text[last : m.start()]), _scripted(m)]
        last = m.end()
    out = "".join(parts) + _latex_chars(text[last:])
    return re.sub(r"(?<!\\)\$\$", "", out)  # "$\sigma$$_{1}$" is one formula, "$\sigma_{1}$"


def _latex_chars(text: str) -> str:
    out = []
    for ch in text:
        if ch in _LATEX_CHARS:
            out.append(_LATEX_CHARS[ch])
        elif ord(ch) < 128:
            out.append(ch)
        else:
            ascii_form = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
            out.append(_latex_chars(ascii_form) if ascii_form else "?")
    return "".join(out)


def _csv_cell(x: Any) -> str:
    text = getattr(x, "text", None)  # a Link cell: its words, not the page it points at
    if isinstance(text, str):
        return text
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return _num(x)


#: What the LaTeX pages give a table: the text width of a 10 pt article with 2 cm margins on US
#: letter, in points, and the table font, ``\small`` (9 pt), whose characters the splitter counts
#: at :data:`CHAR_PT` each (generously: digits are 4.6 pt) with :data:`COLSEP_PT` between columns.
TEXT_WIDTH_PT = 500.0
CHAR_PT = 5.0
COLSEP_PT = 12.0
#: A column of words wider than this (points) wraps in a paragraph column rather than widen the table.
WRAP_PT = 200.0


def _shown_len(tex: str) -> int:
    """About how many characters wide ``tex`` is set: a command counts as one glyph, braces and math signs none."""
    return len(re.sub(r"[{}$^_]", "", re.sub(r"\\[A-Za-z]+", "x", tex)))


def _label(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9:.-]", "-", text)


def _header(text: str, width: int, align: str) -> str:
    """A heading, wrapped to ``width`` characters in a nested tabular when longer (never wider than its column)."""
    lines = textwrap.wrap(text, max(width, 1), break_long_words=False) or [""]
    if len(lines) == 1:
        return latex_text(text)
    inner = r" \\ ".join(latex_text(line) for line in lines)
    return rf"\begin{{tabular}}[b]{{@{{}}{align}@{{}}}}{inner}\end{{tabular}}"


def latex_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    cell: Callable[[Any], str],
    *,
    caption: str = "",
    label: str = "",
) -> str:
    r"""The table as LaTeX a page or a paper inputs: booktabs ``longtable`` s set in ``\small`` (9 pt), never shrunk.

    A table wider than the text is split by columns into several tables, each repeating the
    first (key) column; a long one breaks across pages with its heading repeated. Long
    headings wrap; a column of long words becomes a paragraph column. Each part carries a
    ``\caption`` and a ``\label`` (``label``, then ``label-2``, … for the parts after the
    first). Needs the ``booktabs``, ``longtable`` and ``array`` packages.
    """
    texts = [[latex_text(cell(x)) for x in row] for row in rows]
    n = len(columns)
    words = [j == 0 or any(isinstance(r[j], str) for r in rows) for j in range(n)]
    align = ["l" if w else "r" for w in words]
    cells_len = [max([_shown_len(r[j]) for r in texts] or [0]) for j in range(n)]
    # A heading wraps at its longest word, but not below 10 characters a line (or its whole length, when shorter).
    head_len = [max([len(w) for w in str(c).split()] + [min(len(str(c)), 10)]) for c in columns]
    chars = [max(cells_len[j], head_len[j], 1) for j in range(n)]
    spec = []
    for j in range(n):
        if chars[j] * CHAR_PT > WRAP_PT:
            # A long cell wraps in a paragraph column, a number's column too (a rate with a sentence
            # saying why it has no interval), set flush right as its other cells are.
            flush = r"\raggedright" if words[j] else r"\raggedleft"
            spec.append(rf">{{{flush}\arraybackslash}}p{{{WRAP_PT:g}pt}}")
            chars[j] = int(WRAP_PT // CHAR_PT)
        else:
            spec.append(align[j])
    width = [chars[j] * CHAR_PT + COLSEP_PT for j in range(n)]
    # Columns in parts that fit the text width, each part led by the key column.
    parts: list[list[int]] = []
    for j in range(1, n):
        if parts and sum(width[k] for k in parts[-1]) + width[j] <= TEXT_WIDTH_PT:
            parts[-1].append(j)
        else:
            parts.append([0, j])
    parts = parts or [[0]]
    caption = caption.strip() or "Columns: " + ", ".join(str(c) for c in columns) + "."
    out = []
    for p, part in enumerate(parts):
        head = " & ".join(_header(str(columns[j]), chars[j], align[j]) for j in part) + r" \\"
        tag = _label(label) + (f"-{p + 1}" if p else "")
        more = f" (part {p + 1} of {len(parts)}: columns {', '.join(str(columns[j]) for j in part[1:])})"
        title = latex_text(caption + (more if len(parts) > 1 else ""))
        out += [
            r"\begingroup\small",
            rf"\begin{{longtable}}{{{''.join(spec[j] for j in part)}}}",
            rf"\caption{{{title}}}" + (rf"\label{{{tag}}}" if label else "") + r" \\",
            r"\toprule",
            head,
            r"\midrule",
            r"\endfirsthead",
            r"\toprule",
            head,
            r"\midrule",
            r"\endhead",
            r"\bottomrule",
            r"\endlastfoot",
            *(" & ".join(r[j] for j in part) + r" \\" for r in texts),
            r"\end{longtable}",
            r"\endgroup",
        ]
    return "\n".join(out) + "\n"


def save_table(
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    out: Path,
    base: str,
    cell: Callable[[Any], str],
    *,
    caption: str = "",
) -> dict[str, Path]:
    """Writes ``<base>.csv`` (values at full precision) and ``<base>.tex`` (the page's formatting, as
    :func:`latex_table` sets it, labelled ``tab:<base>``)."""
    return {
        "csv": atomic_write_text(
            out / f"{base}.csv", _csv(list(columns), [[_csv_cell(x) for x in row] for row in rows])
        ),
        "tex": atomic_write_text(
            out / f"{base}.tex", latex_table(columns, rows, cell, caption=caption, label=f"tab:{base}")
        ),
    }
