"""One style, enforced: every figure the reports write, checked from the figure objects.

Each sample run (the contract samples of every report kind, and the crowded runs of
:mod:`tests.reports.figure_runs`) is rendered by ``dpaudit report``'s own path; every
matplotlib figure it saves is caught at ``Figure.savefig`` and checked:

* no two labelled series in one axes share colour, dash pattern and marker (a reader of a
  grey-scale print or a colour-blind reader must still tell them apart);
* every legend entry, tick label and axis label reads at 9 pt or more *as the page shows it*:
  the writer saves at 110 dpi and the page shows an image at most as wide as its content
  column (64rem less the padding: 992 px), so a wider figure is shrunk and its fonts with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import Collection
from matplotlib.colors import to_hex, to_rgb
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.figure import Figure as MplFigure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from dpaudit.app.runs.report import render_reports
from dpaudit.store import RunDir
from tests.reports.conftest import REPORT_SAMPLES
from tests.reports.figure_runs import FIGURE_RUNS

#: The report writer's PNG resolution and the widest an image is shown on a page (CSS pixels).
SAVE_DPI = 110
CONTENT_PX = 992
MIN_PT = 9.0

RUNS = {**{f"sample-{k}": b for k, b in REPORT_SAMPLES.items()}, **FIGURE_RUNS}


def figures_of(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> list[MplFigure]:
    """Every figure ``dpaudit report`` saves for ``run``, in the order it saves them (each once)."""
    caught: list[MplFigure] = []
    save = MplFigure.savefig

    def spy(self: MplFigure, *args: Any, **kwargs: Any) -> None:
        # Caught, not rasterised: the checks read the figure objects, and skipping the PNG
        # (and any vector copy) keeps this walk over every report fast.
        if not any(f is self for f in caught):
            caught.append(self)

    monkeypatch.setattr(MplFigure, "savefig", spy)
    render_reports(run)
    monkeypatch.setattr(MplFigure, "savefig", save)
    return caught


def _dash(line: Line2D) -> str:
    if line.get_linestyle() in ("None", "none", " ", ""):
        return "none"
    _, seq = line._unscaled_dash_pattern  # the one place matplotlib keeps the pattern itself
    return "solid" if not seq else ",".join(f"{x:g}" for x in seq)


def _marker(line: Line2D) -> str:
    m = line.get_marker()
    return "none" if m in (None, "None", "none", "", " ") else str(m)


def series_key(handle: Artist) -> tuple[str, str, str]:
    """(colour, dash pattern, marker) of a legend handle, whatever artist drew it."""
    if isinstance(handle, ErrorbarContainer):
        handle = handle.lines[0]
    if isinstance(handle, BarContainer):
        handle = handle.patches[0]
    if isinstance(handle, Line2D):
        return to_hex(handle.get_color()), _dash(handle), _marker(handle)
    if isinstance(handle, Patch):
        return to_hex(handle.get_facecolor()), str(handle.get_linestyle()), "patch"
    if isinstance(handle, Collection):
        colours = handle.get_facecolor() if len(handle.get_facecolor()) else handle.get_edgecolor()
        return to_hex(colours[0]), str(handle.get_linestyle()[0]), "collection"
    return type(handle).__name__, "", ""


def name_of(fig: MplFigure) -> str:
    for ax in fig.axes:
        for text in (ax.get_title(), ax.get_ylabel(), ax.get_xlabel()):
            if text.strip():
                return text
    return f"figure of {len(fig.axes)} axes"


def clashes(fig: MplFigure) -> list[str]:
    """Pairs of labelled series in one axes that share colour, dash and marker."""
    out = []
    for i, ax in enumerate(fig.axes):
        seen: dict[tuple[str, str, str], str] = {}
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            key = series_key(handle)
            if key in seen:
                out.append(f"axes {i}: {seen[key]!r} and {label!r} are both {key}")
            seen.setdefault(key, label)
    return out


def _canvas(fig: MplFigure) -> FigureCanvasAgg:
    return fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)


def shown_scale(fig: MplFigure) -> float:
    """How much the page shrinks the figure's image: 1 up to the content width, less beyond."""
    renderer = _canvas(fig).get_renderer()
    width_px = fig.get_tightbbox(renderer).width * SAVE_DPI
    return min(1.0, CONTENT_PX / width_px)


def _texts(fig: MplFigure) -> Iterator[tuple[str, Any]]:
    _canvas(fig).draw()  # tick labels exist once the figure is laid out
    for i, ax in enumerate(fig.axes):
        for axis in (ax.xaxis, ax.yaxis):
            for t in axis.get_ticklabels(which="both"):
                if t.get_visible() and t.get_text().strip() and axis.get_visible():
                    yield f"axes {i} tick {t.get_text()!r}", t
            if axis.label.get_text().strip():
                yield f"axes {i} axis label {axis.label.get_text()[:30]!r}", axis.label
        legend = ax.get_legend()
        if legend is not None:
            for t in legend.get_texts():
                yield f"axes {i} legend {t.get_text()[:30]!r}", t
    for legend in fig.legends:
        for t in legend.get_texts():
            yield f"figure legend {t.get_text()[:30]!r}", t


def small_fonts(fig: MplFigure) -> list[str]:
    """Legend entries, tick and axis labels under 9 pt as the page shows them."""
    scale = shown_scale(fig)
    return [
        f"{where}: {t.get_fontsize() * scale:.1f} pt shown ({t.get_fontsize():g} pt × {scale:.2f})"
        for where, t in _texts(fig)
        if t.get_fontsize() * scale < MIN_PT - 1e-6
    ]


#: Kinds whose page is tables and text by design (a trained model's record, claim and metrics).
TABLES_ONLY = frozenset({"sample-models"})

#: Crowded runs whose rendering is slow (audit prefixes recomputed, two certified models): run
#: with ``-m slow``; their misleading-figure fixes are checked fast in test_misleading_figures.py.
SLOW_RUNS = frozenset({"audits-white-box-one-run", "certified-pixeldp-smoothing"})
PARAMS = [pytest.param(name, marks=pytest.mark.slow) if name in SLOW_RUNS else name for name in sorted(RUNS)]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], list[MplFigure]]]:
    """The figures each sample run saves, rendering a run the first time a test asks for it."""
    cache: dict[str, list[MplFigure]] = {}
    mp = pytest.MonkeyPatch()

    def figures(name: str) -> list[MplFigure]:
        if name not in cache:
            cache[name] = figures_of(RUNS[name](tmp_path_factory.mktemp(name) / "run"), mp)
        return cache[name]

    yield figures
    mp.undo()


@pytest.mark.extended
@pytest.mark.parametrize("run", PARAMS)
def test_no_two_series_of_one_axes_look_alike(rendered, run):
    figs = rendered(run)
    if run in TABLES_ONLY:
        assert not figs, f"{run} now saves figures: walk them (drop it from TABLES_ONLY)"
        return
    assert figs, f"{run} saved no figure"
    bad = {name_of(f): c for f in figs if (c := clashes(f))}
    assert not bad, f"{run}: series that cannot be told apart: {bad}"


@pytest.mark.extended
@pytest.mark.parametrize("run", PARAMS)
def test_legends_ticks_and_labels_read_at_9pt(rendered, run):
    bad = {name_of(f): s for f in rendered(run) if (s := small_fonts(f))}
    assert not bad, f"{run}: text under {MIN_PT:g} pt as shown: {bad}"


def test_the_checks_catch_look_alike_series_and_small_legends():
    # Without this, checks that looked at nothing would pass every figure above.
    fig = MplFigure(figsize=(6, 4))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 1], color="C1", linestyle="--", marker="o", label="DP-SGD ε = 1")
    ax.plot([0, 1], [1, 0], color="C1", linestyle=(0, (3.7, 1.6)), marker="o", label="DP-SGD ε = 8")  # '--' spelled out
    ax.errorbar([0, 1], [0.5, 0.5], yerr=0.1, color="C1", marker="s", label="PixelDP")
    ax.plot([0, 1], [0.2, 0.2], color="C1", marker="s", label="PATE")
    ax.legend(fontsize=6)
    assert len(clashes(fig)) == 2
    assert any("legend" in s for s in small_fonts(fig))
    wide = MplFigure(figsize=(18, 3))
    wide.add_subplot().plot([0, 1], [0, 1], label="x")
    wide.axes[0].legend(fontsize=10)
    assert shown_scale(wide) < 0.7 and small_fonts(wide)


def test_every_report_kind_is_walked():
    from reports.kinds import REPORT_KINDS

    assert set(REPORT_KINDS) <= set(REPORT_SAMPLES), "a report kind without a sample run escapes the style test"


def test_series_looks_are_unique_and_settings_are_coloured_per_setting():
    from reports.figures import SERIES_COLOURS, Looks, setting_looks

    looks = Looks()
    taken = [looks.method("dpsgd") for _ in range(40)]
    assert len({(s["color"].lower(), str(s["linestyle"]), s["marker"]) for s in taken}) == 40
    grid = setting_looks(
        [("dpsgd ε=1", "dpsgd"), ("dpsgd ε=8", "dpsgd"), ("pixeldp", "certified"), ("pate", "pate"), ("dssgd", "dssgd")]
    )
    assert len({g["color"] for g in grid.values()}) == 5 and len({g["marker"] for g in grid.values()}) >= 4
    assert grid["dpsgd ε=1"]["marker"] != grid["dpsgd ε=8"]["marker"]
    # Two families whose fixed colours coincide still get two hues.
    clash = setting_looks([("a", "certified"), ("b", "pixeldp")])  # both blue in the palette
    assert clash["a"]["color"] != clash["b"]["color"]
    assert len(set(SERIES_COLOURS)) == len(SERIES_COLOURS) >= 12


def test_figure_numbers():
    from reports.figures import eps_text, rate_text

    # Figures write ε as the tables do: one format on the page.
    assert [eps_text(x) for x in (0.0, 0.97123, 1.3149, 52.4, float("inf"), None, float("nan"))] == [
        "0",
        "0.971",
        "1.31",
        "52.4",
        "∞",
        "—",
        "—",
    ]
    assert rate_text(0.0123, 400) == "1.23% (n = 400)" and rate_text(0.0004) == "0.04%"


def _lab(hex_colour: str) -> np.ndarray:
    """CIE L*a*b* (D65) of an sRGB colour."""
    rgb = np.array(to_rgb(hex_colour))
    lin = np.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)
    xyz = (
        np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
        @ lin
        / np.array([0.95047, 1.0, 1.08883])
    )
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_series_colours_and_the_nine_attacks_are_far_apart():
    # "Similar greens" (rmia, rmia-offline, lira-offline) were told apart by nothing but a shade.
    from reports.figures import SERIES_COLOURS, colour
    from tests.reports.figure_runs import MEMBERSHIP_ATTACKS

    for group, least in ((SERIES_COLOURS, 18.0), ([colour(a) for a in MEMBERSHIP_ATTACKS], 18.0)):
        gaps = [float(np.linalg.norm(_lab(a) - _lab(b))) for i, a in enumerate(group) for b in group[i + 1 :]]
        assert min(gaps) >= least, f"two colours of one group are only {min(gaps):.1f} CIE-Lab units apart"
