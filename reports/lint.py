"""The figure and page linter: what a reviewer finds wrong in a report at a glance, found by the test suite first.

Every check reads the objects a report is made of — the matplotlib figure as drawn, its caption,
the HTML page — never a picture of them, and returns one sentence per problem (an empty list
is a clean figure or page). docs/report-checks.md ("The linter") lists what it checks and why.

Figures (:func:`lint_figure`, on the figure as :mod:`reports.render` is about to save it):

* **overlapping text**: tick labels, axis labels, titles, annotations and legend entries are
  measured from their rendered bounding boxes; two that overlap read as one ("1,0002,000");
* **legend entries for nothing**: an entry whose artist draws no point (empty or all-NaN data,
  invisible, bars of zero size), error-bar symbols in the legend of a series without a single
  error bar, a stand-in handle no drawn artist of the axes looks like;
* **a reference line on the frame**: an ``axhline`` / ``axvline`` lying on the axes' edge is
  hidden by the frame (the limits must leave room around it);
* **single-point axes**: every series of an axes is one point (no curve to read);
* **captions that name a line style** ("solid", "dashed", "dotted", "dash-dotted") no line of
  the figure is drawn in.

Pages (:func:`lint_page_html`, on an HTML page as written):

* **fractions beside percentages**: a rate (accuracy, TPR, FPR, advantage, …) written as
  0.86 in one place and 59.0% in another on the same page;
* **a verdict whose colour disagrees with its finding**: a finding ("violation", "unsound",
  "leaks membership", …) in a green or neutral box, a clean result ("no violation", "sound",
  "no evidence") in a red one, an open question ("inconclusive", "vacuous", "too weak") in green.

A table wider than the page needs a browser to measure: :data:`TABLE_OVERFLOW_JS` runs in the
page (the test suite drives headless Chromium at 1,280 px) and :func:`table_overflow_problems`
words what it returns.

Torch-free; matplotlib on the Agg canvas.
"""

from __future__ import annotations

import contextlib
import html as html_lib
import itertools
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers and CI; must precede any canvas

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import Collection, LineCollection, PathCollection
from matplotlib.colors import to_hex, to_rgba
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text

__all__ = [
    "LINE_STYLE_WORDS",
    "TABLE_OVERFLOW_JS",
    "VERDICT_CLASSES",
    "line_style_of",
    "lint_figure",
    "lint_page_html",
    "overlapping_texts",
    "legend_ghosts",
    "edge_reference_lines",
    "single_point_axes",
    "caption_line_styles",
    "mixed_rate_forms",
    "verdict_colour_problems",
    "recording_legend_handles",
    "table_overflow_problems",
]

#: Two boxes overlapping by less than this (pixels, each way) touch rather than collide: anti-aliasing slack.
OVERLAP_SLACK_PX = 1.0
#: A reference line this close (pixels) to the axes' edge is drawn on the frame.
EDGE_PX = 3.0


# -- text --------------------------------------------------------------------------------------------------------


def _renderer(fig: Figure) -> Any:
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    if fig.stale or not getattr(fig, "_lint_drawn", False):
        canvas.draw()  # tick labels and legends take their places when the figure is drawn
        fig._lint_drawn = True  # type: ignore[attr-defined]  # drawn once for every check, until it changes
    return canvas.get_renderer()


def _shown(t: Text) -> bool:
    return bool(t.get_visible() and t.get_text().strip())


def _drawn_tick_labels(ax: Axes) -> Iterator[tuple[str, Text]]:
    """The tick labels the figure draws (only ticks inside the view: matplotlib keeps labels of others, unplaced)."""
    for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
        if not axis.get_visible():
            continue
        ticks = axis._update_ticks()  # type: ignore[union-attr]  # the ticks drawn, their labels placed: what Axis.draw draws
        for tick in ticks:
            for label in (tick.label1, tick.label2):
                if _shown(label):
                    yield f"{name} tick {label.get_text()!r}", label


def _figure_texts(fig: Figure) -> Iterator[tuple[str, str, Text]]:
    """(group, where, text) of every text the figure draws; texts of one legend share a group."""
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        for where, t in _drawn_tick_labels(ax):
            yield f"axes {i}", f"axes {i} {where}", t
        for name, t in (("x label", ax.xaxis.label), ("y label", ax.yaxis.label)):
            if _shown(t):
                yield f"axes {i}", f"axes {i} {name} {t.get_text()[:40]!r}", t
        titles: Any = (ax.title, ax._left_title, ax._right_title)  # type: ignore[attr-defined]  # all three places
        for t in (*titles, *ax.texts):
            if _shown(t):
                yield f"axes {i}", f"axes {i} text {t.get_text()[:40]!r}", t
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            for t in (legend.get_title(), *legend.get_texts()):
                if _shown(t):
                    yield f"axes {i} legend", f"axes {i} legend {t.get_text()[:40]!r}", t
    for j, legend in enumerate(fig.legends):
        for t in (legend.get_title(), *legend.get_texts()):
            if _shown(t):
                yield f"figure legend {j}", f"figure legend {t.get_text()[:40]!r}", t
    for t in fig.texts:
        if _shown(t):
            yield "figure", f"figure text {t.get_text()[:40]!r}", t


def overlapping_texts(fig: Figure) -> list[str]:
    """Pairs of drawn texts (tick labels, axis labels, titles, annotations, legend entries) whose boxes overlap.

    Entries of one legend are laid out by the legend itself and are not compared with each other.
    """
    renderer = _renderer(fig)
    boxes = [(group, where, t.get_window_extent(renderer)) for group, where, t in _figure_texts(fig)]
    out = []
    for (g1, w1, b1), (g2, w2, b2) in itertools.combinations(boxes, 2):
        if g1 == g2 and g1.endswith("legend"):
            continue
        dx = min(b1.x1, b2.x1) - max(b1.x0, b2.x0)
        dy = min(b1.y1, b2.y1) - max(b1.y0, b2.y0)
        if dx > OVERLAP_SLACK_PX and dy > OVERLAP_SLACK_PX:
            out.append(f"{w1} overlaps {w2} ({dx:.0f} × {dy:.0f} px)")
    return out


# -- legends -----------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def recording_legend_handles() -> Iterator[None]:
    """Within the block, every legend remembers the artists it was made from (``_lint_handles``).

    A legend keeps only copies of its handles; the originals say whether the entry's series was
    drawn at all. :func:`legend_ghosts` reads them where they were recorded, and otherwise the
    labelled artists of the legend's axes.
    """
    init = Legend.__init__

    def remembering(self: Legend, parent: Any, handles: Any, labels: Any, *args: Any, **kwargs: Any) -> None:
        handles, labels = list(handles), list(labels)
        init(self, parent, handles, labels, *args, **kwargs)
        self._lint_handles = list(zip(handles, labels, strict=False))  # type: ignore[attr-defined]

    Legend.__init__ = remembering  # type: ignore[method-assign]
    try:
        yield
    finally:
        Legend.__init__ = init  # type: ignore[method-assign]


def _finite_points(x: Any, y: Any) -> int:
    xs = np.asarray(x, dtype=object).ravel()
    ys = np.asarray(y, dtype=object).ravel()
    n = 0
    for a, b in zip(xs, ys, strict=False):
        try:
            if math.isfinite(float(a)) and math.isfinite(float(b)):
                n += 1
        except (TypeError, ValueError):
            n += 1  # categorical (text) coordinates are drawn
    return n


def _line_points(line: Line2D) -> int:
    return _finite_points(line.get_xdata(), line.get_ydata())


def _segments_with_length(coll: LineCollection) -> int:
    n = 0
    for seg in coll.get_segments():
        seg = np.asarray(seg, dtype=float)
        if len(seg) >= 2 and np.all(np.isfinite(seg)) and np.ptp(seg, axis=0).max() > 0:
            n += 1
    return n


def _why_not_drawn(handle: Any) -> str | None:
    """Why ``handle`` (an artist or container a legend entry stands for) draws nothing; None when it draws."""
    if isinstance(handle, ErrorbarContainer):
        data_line, _caps, bars = handle.lines
        if data_line is not None and not _line_points(data_line) and not any(_segments_with_length(b) for b in bars):
            return "its error-bar series has no point"
        if (handle.has_xerr or handle.has_yerr) and not any(b.get_visible() and _segments_with_length(b) for b in bars):
            return "its legend symbol shows error bars, but no error bar of the series has a length"
        return None
    if isinstance(handle, BarContainer):
        sized = [
            p
            for p in handle.patches
            if p.get_visible()
            and math.isfinite(p.get_width())
            and math.isfinite(p.get_height())
            and p.get_width() != 0
            and p.get_height() != 0
        ]
        return None if sized else f"none of its {len(handle.patches)} bar(s) has a size"
    if isinstance(handle, Line2D):
        if not handle.get_visible():
            return "its line is not visible"
        return None if _line_points(handle) else "its line has no finite point"
    if isinstance(handle, PathCollection):
        if not handle.get_visible():
            return "its points are not visible"
        offsets = np.asarray(handle.get_offsets(), dtype=float).reshape(-1, 2)
        return None if np.isfinite(offsets).all(axis=1).any() else "its scatter has no finite point"
    if isinstance(handle, LineCollection):
        return None if _segments_with_length(handle) else "its segments have no length"
    if isinstance(handle, Collection | Patch):
        return None if handle.get_visible() else "it is not visible"
    return None


def _is_empty_key(handle: Any) -> bool:
    """An empty line plotted only to put a key in the legend (``ax.plot([], [], "ko", label="filled: ε_UB")``)."""
    return isinstance(handle, Line2D) and np.size(handle.get_xdata()) == 0


def _key_is_drawn(handle: Any, fig: Figure) -> bool:
    """Whether what a stand-in legend handle shows (a marker, a dash, a colour) is drawn by some artist of ``fig``."""
    looks = set().union(*(_drawn_looks(a) for a in fig.axes)) if fig.axes else set()
    look = _look(handle)
    if look is None:
        return True  # a handle of a kind the linter cannot read is given the benefit of the doubt
    if look[0] == "patch":
        return look in looks
    _, colour_, dash, marker = look
    lines = [x for x in looks if x[0] == "line"]
    if marker not in ("None", "none", ""):
        return any(x[3] == marker for x in lines)
    return any(x[2] == dash for x in lines) or any(x[1] == colour_ for x in lines)


def _look(artist: Any) -> tuple[str, ...] | None:
    """The colour (and dash and marker) a stand-in legend handle promises, to find the drawn artist it stands for."""
    if isinstance(artist, ErrorbarContainer):
        artist = artist.lines[0]
    if isinstance(artist, BarContainer):
        artist = artist.patches[0] if artist.patches else None
    if isinstance(artist, Line2D):
        return ("line", to_hex(artist.get_color()), line_style_of(artist), str(artist.get_marker()))
    if isinstance(artist, Patch):
        return ("patch", to_hex(artist.get_facecolor()))
    return None


def _drawn_looks(ax: Axes) -> set[tuple[str, ...]]:
    looks: set[tuple[str, ...]] = set()
    for line in ax.get_lines():
        if line.get_visible() and _line_points(line):
            looks.add(("line", to_hex(line.get_color()), line_style_of(line), str(line.get_marker())))
    for patch in ax.patches:
        if patch.get_visible():
            looks.add(("patch", to_hex(patch.get_facecolor())))
            looks.add(("patch", to_hex(patch.get_edgecolor())))
    for coll in ax.collections:
        if coll.get_visible():
            for c in (*coll.get_facecolor(), *coll.get_edgecolor()):
                looks.add(("patch", to_hex(c)))
    return looks


def _entries(ax: Axes, legend: Legend) -> list[tuple[Any, str]]:
    recorded = getattr(legend, "_lint_handles", None)
    if recorded is not None:
        return list(recorded)
    shown = {t.get_text() for t in legend.get_texts()}
    return [(h, lab) for h, lab in zip(*ax.get_legend_handles_labels(), strict=True) if lab in shown]


def legend_ghosts(fig: Figure) -> list[str]:
    """Legend entries whose series the figure does not draw."""
    out = []
    legends: list[tuple[int, Axes | None, Legend | None]] = [(i, ax, ax.get_legend()) for i, ax in enumerate(fig.axes)]
    legends += [(-1, fig.axes[0] if fig.axes else None, lg) for lg in fig.legends]
    for i, ax, legend in legends:
        if legend is None or ax is None or not legend.get_visible():
            continue
        where = f"axes {i} legend" if i >= 0 else "figure legend"
        for handle, label in _entries(ax, legend):
            if _is_on_a_figure(handle) and not _is_empty_key(handle):
                why = _why_not_drawn(handle)
            else:
                # A stand-in (a key to an encoding: "filled: ε_UB") is fine when what it shows is drawn somewhere.
                why = None if _key_is_drawn(handle, fig) else "it is a stand-in handle whose look no drawn artist has"
            if why is not None:
                out.append(f"{where} entry {label!r}: {why}")
    return out


def _is_on_a_figure(handle: Any) -> bool:
    if isinstance(handle, ErrorbarContainer | BarContainer):
        parts: list[Any] = (
            [a for a in (handle.lines[0],) if a is not None] if isinstance(handle, ErrorbarContainer) else []
        )
        parts += list(handle.patches) if isinstance(handle, BarContainer) else []
        return any(getattr(p, "axes", None) is not None for p in parts)
    return getattr(handle, "axes", None) is not None


# -- reference lines and single points -----------------------------------------------------------------------------


def _is_axhline(ax: Axes, line: Line2D) -> bool:
    return line.get_transform() == ax.get_yaxis_transform()


def _is_axvline(ax: Axes, line: Line2D) -> bool:
    return line.get_transform() == ax.get_xaxis_transform()


def edge_reference_lines(fig: Figure) -> list[str]:
    """Horizontal and vertical reference lines (``axhline`` / ``axvline``) drawn on the axes' frame."""
    _renderer(fig)
    out = []
    for i, ax in enumerate(fig.axes):
        box = ax.bbox
        for line in ax.get_lines():
            if not line.get_visible() or not _line_points(line):
                continue
            name = line.get_label() if not str(line.get_label()).startswith("_") else "unlabelled line"
            if _is_axhline(ax, line):
                y = float(np.asarray(line.get_ydata(), dtype=float)[0])
                py = ax.transData.transform((ax.get_xlim()[0], y))[1]
                if min(abs(py - box.y0), abs(py - box.y1)) <= EDGE_PX:
                    out.append(f"axes {i}: the horizontal line {name!r} at y = {y:g} lies on the frame")
            elif _is_axvline(ax, line):
                x = float(np.asarray(line.get_xdata(), dtype=float)[0])
                px = ax.transData.transform((x, ax.get_ylim()[0]))[0]
                if min(abs(px - box.x0), abs(px - box.x1)) <= EDGE_PX:
                    out.append(f"axes {i}: the vertical line {name!r} at x = {x:g} lies on the frame")
    return out


def single_point_axes(fig: Figure) -> list[str]:
    """Axes whose every series (lines, scatters; reference lines aside) is at most one point."""
    out = []
    for i, ax in enumerate(fig.axes):
        counts = [
            _line_points(line)
            for line in ax.get_lines()
            if line.get_visible() and not _is_axhline(ax, line) and not _is_axvline(ax, line)
        ]
        counts += [
            int(np.isfinite(np.asarray(c.get_offsets(), dtype=float).reshape(-1, 2)).all(axis=1).sum())
            for c in ax.collections
            if isinstance(c, PathCollection) and c.get_visible()
        ]
        counts = [c for c in counts if c > 0]
        other = any(isinstance(c, BarContainer) for c in ax.containers) or ax.images
        if counts and max(counts) == 1 and not other:
            out.append(f"axes {i} ({ax.get_title() or ax.get_ylabel() or 'untitled'}): every series is one point")
    return out


# -- line styles named in captions ----------------------------------------------------------------------------------

#: The line styles a caption may name, as matplotlib draws them (see :func:`line_style_of`).
LINE_STYLE_WORDS = ("solid", "dashed", "dotted", "dash-dotted")
_STYLE_IN_TEXT = re.compile(r"\b(dash-?dot(?:ted)?|solid|dashed|dotted)\b", re.IGNORECASE)


def line_style_of(line: Line2D | None = None, *, dashes: Sequence[float] | None = None) -> str:
    """What a reader calls the dash pattern of ``line`` (or of the on/off ``dashes``): solid, dashed, dotted,
    dash-dotted, or "none" for a line of markers only.

    Dots are strokes no longer than the gaps' order of size (≤ 1.5 line widths); a pattern of
    long and short strokes is dash-dotted.
    """
    if line is not None:
        if line.get_linestyle() in ("None", "none", " ", ""):
            return "none"
        _, seq = line._unscaled_dash_pattern  # type: ignore[attr-defined]  # the one place matplotlib keeps the pattern itself
        dashes = seq or ()
    on = [float(x) for x in (dashes or ())][::2]
    if not on:
        return "solid"
    if max(on) <= 1.5:
        return "dotted"
    if min(on) <= 1.5:
        return "dash-dotted"
    return "dashed"


def _styles_drawn(fig: Figure) -> set[str]:
    styles: set[str] = set()
    for ax in fig.axes:
        for line in ax.get_lines():
            if line.get_visible() and _line_points(line) and (line.get_linewidth() or 0) > 0:
                styles.add(line_style_of(line))
        for patch in ax.patches:  # outlines: a step histogram's edge, a bar's border
            if patch.get_visible() and (patch.get_linewidth() or 0) > 0 and to_rgba(patch.get_edgecolor())[3] > 0:
                if patch.get_linestyle() in ("None", "none", " ", ""):
                    continue
                _, seq = getattr(patch, "_unscaled_dash_pattern", (0, None))
                styles.add(line_style_of(dashes=seq or ()))
        for coll in ax.collections:
            if isinstance(coll, LineCollection) and coll.get_visible() and _segments_with_length(coll):
                patterns: Any = coll.get_linestyle()  # (offset, on-off sequence or None) per segment
                for _, seq in patterns:
                    styles.add(line_style_of(dashes=seq or ()))
    return styles


def caption_line_styles(fig: Figure, caption: str) -> list[str]:
    """Line styles the caption names that no line of the figure is drawn in."""
    named = {m.lower().replace("dashdot", "dash-dot") for m in _STYLE_IN_TEXT.findall(caption or "")}
    named = {"dash-dotted" if w.startswith("dash-dot") else w for w in named}
    drawn = _styles_drawn(fig)
    return [
        f"the caption says {word!r}, but no line of the figure is {word} (drawn: {', '.join(sorted(drawn)) or 'none'})"
        for word in sorted(named)
        if word not in drawn
    ]


def lint_figure(fig: Figure, caption: str = "") -> list[str]:
    """Every problem the figure checks find in ``fig`` shown under ``caption`` (empty: none)."""
    return [
        *(f"overlapping text: {p}" for p in overlapping_texts(fig)),
        *(f"legend entry not drawn: {p}" for p in legend_ghosts(fig)),
        *(f"reference line on the frame: {p}" for p in edge_reference_lines(fig)),
        *(f"single-point axes: {p}" for p in single_point_axes(fig)),
        *(f"caption vs line style: {p}" for p in caption_line_styles(fig, caption)),
    ]


# -- pages ------------------------------------------------------------------------------------------------------------

#: Words that make a number a rate (a share of examples), in a table heading or just before the number.
_RATE_WORDS = (
    r"accuracy|accuracies|acc|tpr|fpr|true[- ]positive rate|false[- ]positive rate|advantage|success rate|top-1"
)
_RATE_HEAD = re.compile(rf"\b(?:{_RATE_WORDS})\b", re.IGNORECASE)
_PERCENT_HEAD = re.compile(r"\(\s*%\s*\)|\bin %|\bpercent\b", re.IGNORECASE)  # "accuracy (%)": the unit
# A percentage, or a difference of percentages in percentage points ("5.0 pp"): the same form.
_PERCENT = re.compile(r"^\s*[<>≤≥~≈]?\s*[−-]?\d+(?:\.\d+)?\s*(?:%|pp\b)")
_FRACTION = re.compile(r"^\s*[<>≤≥~≈]?\s*(?:0?\.\d+|1\.0+|0|1)(?![\d.%])")
# In running text: a rate word, then up to a few words (not another number), then the number.
_RATE_IN_TEXT = re.compile(
    rf"\b(?:{_RATE_WORDS})\b(?:\s+(?:of|is|was|at|=|:|only|about|the|classifier|model|conventional|clean|robust|"
    rf"certified|under|attack|its|own)){{0,4}}\s*[=:]?\s*(\d+(?:\.\d+)?)(\s*%)?",
    re.IGNORECASE,
)


@dataclass(frozen=True, kw_only=True)
class _RateSeen:
    form: str  # "percent" or "fraction"
    where: str


def _text_of(fragment: str) -> str:
    return html_lib.unescape(re.sub(r"<[^>]+>", " ", fragment))


def _table_rates(page: str) -> Iterator[_RateSeen]:
    for t, table in enumerate(re.findall(r"<table\b.*?</table>", page, re.S), start=1):
        heads = [_text_of(h) for h in re.findall(r"<th\b[^>]*>(.*?)</th>", table, re.S)]
        pct_cols = {j for j, h in enumerate(heads) if _RATE_HEAD.search(h) and _PERCENT_HEAD.search(h)}
        rate_cols = {j for j, h in enumerate(heads) if _RATE_HEAD.search(h)} - pct_cols
        for row in re.findall(r"<tr\b[^>]*>(.*?)</tr>", table, re.S):
            cells = [_text_of(c) for c in re.findall(r"<td\b[^>]*>(.*?)</td>", row, re.S)]
            for j, cell in enumerate(cells):
                if j in pct_cols:
                    # A "(%)" heading makes every number under it a percentage.
                    if re.match(r"^\s*\d", cell):
                        yield _RateSeen(form="percent", where=f"table {t} column {heads[j]!r}: {cell.strip()!r}")
                    continue
                if j not in rate_cols:
                    continue
                if _PERCENT.match(cell):
                    yield _RateSeen(form="percent", where=f"table {t} column {heads[j]!r}: {cell.strip()!r}")
                elif _FRACTION.match(cell):
                    yield _RateSeen(form="fraction", where=f"table {t} column {heads[j]!r}: {cell.strip()!r}")


def _text_rates(page: str) -> Iterator[_RateSeen]:
    body = re.sub(r"<table\b.*?</table>", " ", page, flags=re.S)
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", body, flags=re.S)
    text = re.sub(r"\s+", " ", _text_of(body))
    for m in _RATE_IN_TEXT.finditer(text):
        number, percent = m.group(1), m.group(2)
        snippet = text[max(0, m.start() - 10) : m.end() + 5].strip()
        if percent:
            yield _RateSeen(form="percent", where=f"text {snippet!r}")
        elif "." in number and float(number) <= 1.0:
            yield _RateSeen(form="fraction", where=f"text {snippet!r}")


def mixed_rate_forms(page: str) -> list[str]:
    """Rates written as fractions in one place of the page and as percentages in another."""
    seen = [*_table_rates(page), *_text_rates(page)]
    pct = [s for s in seen if s.form == "percent"]
    frac = [s for s in seen if s.form == "fraction"]
    if pct and frac:
        return [
            f"rates as fractions ({len(frac)}, e.g. {frac[0].where}) and as percentages "
            f"({len(pct)}, e.g. {pct[0].where}) on one page"
        ]
    return []


#: The verdict box's colour classes (reports/templates/_blocks.html.j2) and what each says to a reader.
VERDICT_CLASSES = {"alert": "red", "warn": "amber", "info": "blue", "ok": "green"}

# What a verdict's status says, most specific first: (pattern, the colours it may be drawn in, what it is).
_STATUS_COLOURS: tuple[tuple[re.Pattern[str], frozenset[str], str], ...] = (
    (re.compile(r"\b(inconclusive|vacuous|too weak|withheld|not checked|no claim|no attacks?)\b"),
     frozenset({"warn", "info"}), "an open question"),
    (re.compile(r"\bno (violation|evidence|leak)|\bnothing\b|^sound\b|\bclass only\b"),
     frozenset({"ok", "warn", "info"}), "a clean result"),
    (re.compile(r"\b(violation|unsound|leaks?|identifies|reconstructs|broken|fails?)\b"),
     frozenset({"alert", "warn"}), "a finding"),
)  # fmt: skip


#: A green "no violation" / "no evidence" must say what the evidence could have shown (issue 46): one of these.
_POWER_WORDS = re.compile(
    r"could (?:have|not have) shown|could have detected|ceiling|perfect attack|power|smallest .* (?:resolve|detect)",
    re.IGNORECASE,
)
_ABSENCE = re.compile(r"\bno (violation|evidence|leak)")


def verdict_colour_problems(page: str) -> list[str]:
    """The page's verdict boxes whose colour disagrees with the status they print, or with the power behind it: a
    green "no violation" or "no evidence" that does not say what its evidence could have shown is a status word's
    colour, not the audit's."""
    out = []
    for m in re.finditer(
        r'<section class="verdict verdict-(\w+)"[^>]*>\s*<p class="verdict-status">(.*?)</p>(.*?)</section>', page, re.S
    ):
        tone, status = m.group(1), _text_of(m.group(2)).strip()
        if tone == "ok" and _ABSENCE.search(status.lower()) and not _POWER_WORDS.search(_text_of(m.group(3))):
            out.append(f"verdict {status!r} is green but does not state its power (what the audit could have shown)")
        if tone not in VERDICT_CLASSES:
            out.append(f"verdict {status!r} in an unknown colour class {tone!r}")
            continue
        for pattern, allowed, meaning in _STATUS_COLOURS:
            if pattern.search(status.lower()):
                if tone not in allowed:
                    out.append(
                        f"verdict {status!r} is {meaning} but drawn {VERDICT_CLASSES[tone]} "
                        f"(verdict-{tone}; expected {' or '.join(VERDICT_CLASSES[a] for a in sorted(allowed))})"
                    )
                break
    return out


def lint_page_html(page: str) -> list[str]:
    """Every problem the page checks find in the HTML text ``page`` (empty: none)."""
    return [
        *(f"mixed rate forms: {p}" for p in mixed_rate_forms(page)),
        *(f"verdict colour: {p}" for p in verdict_colour_problems(page)),
    ]


#: Runs in a page (a browser at the page width): every table whose right edge passes the viewport's, or its column's.
TABLE_OVERFLOW_JS = """() => {
    const width = document.documentElement.clientWidth;
    return Array.from(document.querySelectorAll("table")).map((table, i) => {
        const box = table.getBoundingClientRect();
        const column = table.parentElement.getBoundingClientRect();
        const head = Array.from(table.querySelectorAll("th")).map((th) => th.innerText.trim()).join(" | ");
        return {index: i + 1, right: box.right, width: box.width, viewport: width, column: column.right,
                head: head.slice(0, 80)};
    }).filter((t) => t.right > t.viewport + 0.5 || t.right > t.column + 0.5);
}"""


def table_overflow_problems(found: Sequence[dict[str, Any]], *, viewport: int = 1280) -> list[str]:
    """:data:`TABLE_OVERFLOW_JS`'s findings as sentences."""
    return [
        f"table {t['index']} ({t['head']!r}) is {t['width']:.0f} px wide and ends at {t['right']:.0f} px, past the "
        f"{'page' if t['right'] > t['viewport'] + 0.5 else 'text column'} at {viewport} px"
        for t in found
    ]
