"""The style module: one look for every plot of the suite, and the numbers written on them.

docs/architecture.md ("Style"): one fixed colour per method across every plot and report, legends outside
the data area, overlapping curves told apart by marker and line style, and no empty plot —
a plotting function that has nothing to draw returns ``None`` and the report says so in words.
Plotting functions take results and an optional axes and return a figure; only
:mod:`reports.render` saves files. What this module fixes for all of them:

* **colours**: a defense or attack takes its colour, marker and dash from its spec's ``style``
  (:func:`dpaudit.parts.part_style`), :data:`PALETTE` gives the audit quantities theirs;
  :data:`SERIES_COLOURS` holds 16 colours at least 18 CIE-Lab units apart (Okabe & Ito 2008
  and Tol 2021's colour-blind-safe sets), enough for the largest grid a report draws.
  :func:`setting_looks` colours a grid **per setting**: each family gets its own hue and its
  settings a ramp of that hue, each with its own marker (DP-SGD at ε = 1 and ε = 8 are two
  shades and two markers of one hue; PixelDP another hue);
* **series never alike**: :class:`Looks` hands every series of one axes a (colour, dash,
  marker) no other series of that axes has;
* **sizes**: tick labels, axis labels and legends at :data:`FONT_PT` (≥ 9 pt as the page shows
  them: the writer saves at :data:`SAVE_DPI` and a page is :data:`PAGE_WIDTH_IN` wide, so
  :func:`legend_outside` moves a legend under the axes when beside them it would widen the
  image past the page and shrink every font with it);
* **fonts in vector files**: TrueType (Type 42) in every PDF and PostScript file, set in
  matplotlib's ``rcParams`` when this module is imported;
* **numbers** on figures: :func:`eps_text` (ε to 2–3 significant digits, ∞ as "∞"),
  :func:`rate_text` (a rate as a percentage with the count it rests on).

Matplotlib runs on the Agg canvas (``matplotlib.figure.Figure``, no pyplot state), so nothing
here needs a display. Torch-free.
"""

from __future__ import annotations

import colorsys
import math
import textwrap
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers and CI; must precede any canvas

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex, to_rgb
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from dpaudit import _validate as v
from dpaudit.parts import PlotStyle, part_style
from dpaudit.results.numbers import fmt_epsilon, fmt_lower_bound, fmt_upper_bound

# Fonts embedded as TrueType (Type 42) in every PDF and PostScript file a figure is saved to, not
# matplotlib's default Type 3 (bitmaps to some viewers, refused by some submission systems).
matplotlib.rcParams["pdf.fonttype"] = 42
matplotlib.rcParams["ps.fonttype"] = 42

__all__ = [
    "PALETTE",
    "MARKERS",
    "LINESTYLES",
    "SERIES_COLOURS",
    "MARKER_CYCLE",
    "DASH_CYCLE",
    "FONT_PT",
    "SAVE_DPI",
    "PAGE_WIDTH_IN",
    "Looks",
    "style",
    "colour",
    "ramp",
    "setting_looks",
    "new_axes",
    "new_figure",
    "fit_page",
    "zero_and_log_axes",
    "plain_log_ticks",
    "resolved_roc",
    "roc_axes",
    "finish_axes",
    "legend_outside",
    "has_data",
    "eps_ub_text",
    "eps_lb_text",
    "eps_text",
    "rate_text",
]

#: Font size of tick labels, axis labels, titles and legends (points, as saved).
FONT_PT = 10.0
#: The report writer's PNG resolution and the width of a page's content column (992 CSS px):
#: an image wider than this is shrunk on the page, its fonts with it.
SAVE_DPI = 110
PAGE_WIDTH_IN = 992 / SAVE_DPI

#: Colours far apart for colour-blind readers and in grey-scale print, most distinct first.
SERIES_COLOURS: tuple[str, ...] = (
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#E69F00",  # orange
    "#332288",  # indigo
    "#56B4E9",  # sky blue
    "#882255",  # wine
    "#999933",  # olive
    "#117733",  # green
    "#AA4499",  # purple
    "#44AA99",  # teal
    "#CC6677",  # rose
    "#8C564B",  # brown
    "#6B6B6B",  # grey
    "#000000",  # black
)
MARKER_CYCLE: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h", "p")
DASH_CYCLE: tuple[Any, ...] = (
    "-",
    "--",
    ":",
    "-.",
    (0, (5, 1, 1, 1, 1, 1)),
    (0, (1, 1)),
    (0, (8, 2)),
    (0, (3, 1, 1, 1)),
)

#: The colour of each method that is no registered part, the same in every plot and report. A
#: registered defense's or attack's colour, marker and dash come from its spec's ``style``
#: (:class:`dpaudit.parts.PlotStyle`, read through :func:`dpaudit.parts.part_style`). Methods
#: that can share an axes have hues far apart: the nine membership attacks, the four evasion
#: attacks, the defenses.
PALETTE: Mapping[str, str] = {
    # certificates and the planted bugs of the conformance battery's doubles
    "certified": "#0072B2",
    "planted-bug": "#8C564B",
    # the threshold attacks' family name in tables
    "threshold": "#44AA99",
    # audits and references
    "epsilon_lb": "#D55E00",
    "epsilon_ub": "#000000",
    "epsilon_last_iterate": "#0072B2",
    "ceiling": "#117733",
    "in": "#D55E00",
    "out": "#0072B2",
    "chance": "#999999",
}

#: Marker per method, so curves that lie on top of each other remain distinguishable.
MARKERS: Mapping[str, str] = {
    "certified": "o",
    "threshold": "X",
    "epsilon_lb": "o",
    "epsilon_ub": "s",
    "epsilon_last_iterate": "D",
    "ceiling": "^",
}

#: Line style per method that is no registered part (the evasion attacks' four dash patterns are in their specs).
LINESTYLES: Mapping[str, str | tuple[int, tuple[int, ...]]] = {
    "ceiling": "--",
}


def _key(method: str) -> str:
    return method.strip().lower()


def _spec_style(key: str) -> PlotStyle | None:
    # The listed names are no parts: no registry is loaded for them.
    return None if key in PALETTE else part_style(key)


def colour(method: str) -> str:
    """The fixed colour of ``method`` (case-insensitive): its spec's, else listed here, else by a stable hash of its
    name."""
    key = _key(method)
    if key in PALETTE:
        return PALETTE[key]
    spec = _spec_style(key)
    if spec is not None:
        return spec.colour
    # Never by order of appearance, which would change the colour from one plot to the next.
    return SERIES_COLOURS[zlib.crc32(key.encode()) % len(SERIES_COLOURS)]


def _marker(key: str, default: str) -> str:
    spec = _spec_style(key)
    return spec.marker if spec is not None else MARKERS.get(key, default)


def style(method: str) -> dict[str, Any]:
    """Keyword arguments for ``Axes.plot``: the method's colour, marker and line style (its spec's, where it declares
    one)."""
    key = _key(method)
    spec = _spec_style(key)
    if spec is not None:
        return spec.plot_kwargs()
    marker = MARKERS.get(key, MARKER_CYCLE[zlib.crc32(key.encode()) % len(MARKER_CYCLE)])
    return {"color": colour(key), "marker": marker, "linestyle": LINESTYLES.get(key, "-")}


def ramp(base: str, n: int) -> list[str]:
    """``n`` shades of ``base``'s hue, dark to light (the base itself when ``n`` is 1)."""
    if n <= 1:
        return [to_hex(base)]
    h, _, s = colorsys.rgb_to_hls(*to_rgb(base))
    return [to_hex(colorsys.hls_to_rgb(h, light, min(1.0, max(s, 0.45)))) for light in np.linspace(0.28, 0.62, n)]


def _dash_key(dash: Any) -> str:
    return (
        {"solid": "-", "dashed": "--", "dotted": ":", "dashdot": "-."}.get(dash, dash)
        if isinstance(dash, str)
        else repr(dash)
    )


class Looks:
    """Hands each series of one axes a look no other series of that axes has.

    A series asks for the look it would like (its method's :func:`style`, or a setting's); it
    gets it unless another series of the axes already has that colour, dash and marker, in
    which case the marker, then the dash, then the colour moves on along its cycle.
    """

    def __init__(self) -> None:
        self._taken: set[tuple[str, str, str]] = set()

    def take(self, *, color: str, marker: str = "", linestyle: Any = "-") -> dict[str, Any]:
        """Keyword arguments for ``Axes.plot``: the wished-for look, or the nearest free one."""
        c, m, d = to_hex(color), marker, linestyle
        markers = [m, *(x for x in MARKER_CYCLE if x != m)]
        dashes = [d, *(x for x in DASH_CYCLE if _dash_key(x) != _dash_key(d))]
        for cc in [c, *(x for x in SERIES_COLOURS if x != c)]:
            for dd in dashes:
                for mm in markers:
                    key = (cc, _dash_key(dd), mm or "none")
                    if key not in self._taken:
                        self._taken.add(key)
                        return {"color": color if cc == c else cc, "marker": mm, "linestyle": dd}
        raise RuntimeError("more series than looks")  # pragma: no cover - over 2,000 looks per axes

    def method(self, method: str, **overrides: Any) -> dict[str, Any]:
        """:func:`style` of ``method`` (with ``overrides``), made unique in this axes."""
        return self.take(**{**style(method), **overrides})


def setting_looks(settings: Sequence[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """A look per setting of a grid, coloured per setting and grouped by family.

    Args:
        settings: (setting label, family) in the order the grid lists them.

    Returns:
        label → ``{"color", "marker", "linestyle"}``: each family its own hue (its fixed
        colour unless another family took it), its settings a dark-to-light ramp of that hue,
        and every setting a marker of its own within the figure.
    """
    families: dict[str, list[str]] = {}
    for label, family in settings:
        families.setdefault(family, []).append(label)
    hues: dict[str, str] = {}
    for family in families:
        wish = colour(family)
        hues[family] = (
            wish if wish not in hues.values() else next((c for c in SERIES_COLOURS if c not in hues.values()), wish)
        )
    out: dict[str, dict[str, Any]] = {}
    for i, (family, labels) in enumerate(families.items()):
        shades = ramp(hues[family], len(labels))
        first = _marker(_key(family), MARKER_CYCLE[i % len(MARKER_CYCLE)])
        marks = [first, *(m for m in MARKER_CYCLE if m != first)]
        for j, label in enumerate(labels):
            out[label] = {"color": shades[j], "marker": marks[j % len(marks)], "linestyle": "-"}
    return out


def _renderer(fig: Figure) -> Any:
    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    return canvas.get_renderer()


def finish_axes(ax: Axes) -> None:
    """The suite's text sizes on one axes: ticks, axis labels and title at :data:`FONT_PT`."""
    ax.tick_params(axis="both", which="both", labelsize=FONT_PT)
    ax.xaxis.label.set_fontsize(FONT_PT)
    ax.yaxis.label.set_fontsize(FONT_PT)
    ax.title.set_fontsize(FONT_PT)


def new_figure(size: tuple[float, float]) -> Figure:
    """An Agg figure of ``size`` inches (never wider than the page)."""
    width, height = size
    fig = Figure(figsize=(min(width, PAGE_WIDTH_IN), height))
    FigureCanvasAgg(fig)
    return fig


def new_axes(ax: Axes | None = None, *, size: tuple[float, float] = (7.0, 4.0)) -> tuple[Figure, Axes]:
    """``ax`` and its figure, or a new Agg figure with one axes, in the suite's text sizes."""
    if ax is not None:
        fig = ax.figure
        if not isinstance(fig, Figure):
            raise v.invalid_type("ax", f"ax must belong to a Figure, got {type(fig).__name__}")
        finish_axes(ax)
        return fig, ax
    fig = new_figure(size)
    ax = fig.add_subplot(1, 1, 1)
    finish_axes(ax)
    return fig, ax


def legend_outside(ax: Axes, *, fontsize: float = FONT_PT, wrap: int = 48) -> None:
    """The legend beside the axes, never over the data — or under them when beside them it would
    widen the image past the page (the page would then shrink every font of the figure).

    Call it last: the placement measures the figure as drawn. Tick and label sizes are set to
    the suite's (:func:`finish_axes`) on the way.
    """
    finish_axes(ax)
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    fontsize = max(fontsize, FONT_PT)
    fig = ax.figure
    legend = ax.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(1.02, 1.0),
        borderaxespad=0.0,
        frameon=False,
        fontsize=fontsize,
    )
    if not isinstance(fig, Figure):
        return
    renderer = _renderer(fig)
    if fig.get_tightbbox(renderer).width <= PAGE_WIDTH_IN:
        return
    legend.remove()
    # Under the axes' own box (tick labels and x label included), in as many columns as fit.
    box = ax.get_tightbbox(renderer)
    assert box is not None  # the axes are drawn: they hold the legend
    top = ax.transAxes.inverted().transform((0.0, box.y0))[1] - 0.04
    wrapped = [textwrap.fill(label, wrap) for label in labels]
    for ncol in (3, 2, 1):
        if ncol > len(labels):
            continue
        legend = ax.legend(
            handles,
            wrapped,
            loc="upper left",
            bbox_to_anchor=(0.0, top),
            borderaxespad=0.0,
            frameon=False,
            fontsize=fontsize,
            ncol=ncol,
        )
        if ncol == 1 or fig.get_tightbbox(renderer).width <= PAGE_WIDTH_IN:
            return
        legend.remove()


def has_data(fig: Figure) -> bool:
    """Whether any axes of ``fig`` holds a line, bar, collection or image with at least one point."""
    for ax in fig.axes:
        if any(np.size(line.get_xdata()) for line in ax.get_lines()) or ax.patches or ax.collections or ax.images:
            return True
    return False


def eps_text(x: float | None, *, digits: int = 3) -> str:
    """An ε that is not a bound (an estimate, a difference) for a figure, to nearest as every table writes it
    (:func:`dpaudit.results.numbers.fmt_epsilon`)."""
    return fmt_epsilon(None if x is None or (isinstance(x, float) and math.isnan(x)) else x, digits)


def eps_ub_text(x: float | None, *, digits: int = 3) -> str:
    """An upper bound (ε_UB) for a figure, rounded up (:func:`dpaudit.results.numbers.fmt_upper_bound`)."""
    return fmt_upper_bound(None if x is None or (isinstance(x, float) and math.isnan(x)) else x, digits)


def eps_lb_text(x: float | None, *, digits: int = 3) -> str:
    """A lower bound (ε_LB, a ceiling) for a figure, rounded down (:func:`dpaudit.results.numbers.fmt_lower_bound`)."""
    return fmt_lower_bound(None if x is None or (isinstance(x, float) and math.isnan(x)) else x, digits)


def rate_text(rate: float | None, n: int | None = None) -> str:
    """A rate for a figure: a percentage (three significant digits), with the count it rests on."""
    if rate is None or math.isnan(float(rate)):
        return "—"
    pct = 100.0 * float(rate)
    text = f"{pct:.3g}%" if pct >= 0.1 or pct == 0 else f"{pct:.2g}%"
    return text if n is None else f"{text} (n = {n:,})"


def fit_page(fig: Figure, *, width: float = PAGE_WIDTH_IN) -> Figure:
    """Narrows ``fig`` until its image (tight box, legends outside the axes included) fits the page width.

    The page would otherwise shrink the image, and every font of it, to fit.
    """
    renderer = _renderer(fig)
    for _ in range(4):
        excess = fig.get_tightbbox(renderer).width - width
        if excess <= 0.01:
            break
        w, h = fig.get_size_inches()
        fig.set_size_inches(max(w - excess * 1.05, 2.0), h)
    return fig


def zero_and_log_axes(fig: Figure, *, zero_label: str = "0\nno evidence") -> tuple[Axes, Axes]:
    """(zero panel, log panel) side by side sharing y: ε = 0 has no place on a log axis, so it
    gets a narrow linear panel of its own at the left instead of an arbitrary left edge.

    The zero panel shows one tick, at 0, labelled ``zero_label``; draw there what is exactly 0.
    """
    zero, main = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [1, 9], "wspace": 0.04})
    zero.set_xlim(-1.0, 1.0)
    zero.set_xticks([0.0], [zero_label])
    zero.spines["right"].set_visible(False)
    main.spines["left"].set_linestyle((0, (2, 2)))
    main.tick_params(axis="y", which="both", left=False)
    main.set_xscale("log")
    plain_log_ticks(main.xaxis)
    for ax in (zero, main):
        finish_axes(ax)
    return zero, main


def plain_log_ticks(axis: Any, *, count: bool = False, percent: bool = False) -> None:
    """Ticks of a log-scaled axis (``ax.xaxis`` or ``ax.yaxis``) at 1, 2 and 5 per decade, written
    as plain numbers (:func:`eps_text`; whole numbers with thousands separators for a ``count``;
    a rate as a percentage, as the pages' tables write rates, for ``percent``), with no minor
    labels to collide with them."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    if percent:
        axis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x * 100:g}%"))
    else:
        axis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}" if count and x >= 1 else eps_text(x)))
    axis.set_minor_formatter(NullFormatter())


def roc_axes(ax: Axes, *, fpr_floor: float, tpr_floor: float, fpr_label: str) -> None:
    """Log–log ROC axes from the floors a sample resolves to 1, with the chance diagonal and rates
    as percentages (as the pages' tables write rates)."""
    grid = np.logspace(np.log10(max(fpr_floor, tpr_floor)), 0, 50)
    ax.plot(grid, grid, linestyle="--", color=colour("chance"), linewidth=0.8, label="chance")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(fpr_floor, 1.0)
    ax.set_ylim(tpr_floor, 1.0)
    for axis in (ax.xaxis, ax.yaxis):
        plain_log_ticks(axis, percent=True)
        # Percent labels are wide: 1-2-5 per decade collide along an axis of four or more decades
        # ("0.01%0.02%0.05%", the second review), so such an axis keeps one tick a decade.
        low, high = axis.get_view_interval()
        if low > 0 and np.log10(high / low) >= 3:
            axis.set_major_locator(LogLocator(base=10, subs=(1.0,)))
    ax.set_xlabel(fpr_label)
    ax.set_ylabel("true-positive rate")


def resolved_roc(
    fpr: np.ndarray, tpr: np.ndarray, *, num_members: int, num_non_members: int
) -> tuple[np.ndarray, np.ndarray]:
    """An empirical ROC cut to what its sample resolves, for log–log axes.

    The curve starts at FPR = 1/non-members (one false positive), with the largest TPR of any
    threshold at or below that FPR: below it the empirical ROC is a single step the sample cannot
    resolve, so it is not drawn (the rule of the membership tables' "n/a"). A TPR of 0 sits on the
    floor, half a member (0.5/members), so that a log axis can show it.

    Args:
        fpr: the ROC's false-positive rates, ascending.
        tpr: its true-positive rates, in the same order.
        num_members: the IN observations (members) the TPRs count.
        num_non_members: the OUT observations (non-members) the FPRs count.

    Returns:
        ``(fpr, tpr)`` to draw with ``drawstyle="steps-post"``.
    """
    start = 1.0 / max(num_non_members, 1)
    fpr, tpr = np.asarray(fpr, float), np.asarray(tpr, float)
    at_start = tpr[fpr <= start]
    keep = fpr > start
    x = np.concatenate([[start], fpr[keep]])
    y = np.concatenate([[at_start.max() if at_start.size else 0.0], tpr[keep]])
    return x, np.maximum(y, 0.5 / max(num_members, 1))
