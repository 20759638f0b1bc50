"""One look for every plot of the suite: a fixed colour, marker and line style per method.

docs/architecture.md ("Style"): one fixed colour per method across every plot and report, legends outside
the data area, overlapping curves told apart by marker and line style, and no empty plot —
a plotting function that has nothing to draw returns ``None`` and the report says so in words.
Plotting functions take results and an optional axes and return a figure; only
:mod:`reports.render` saves files.

Matplotlib runs on the Agg canvas (``matplotlib.figure.Figure``, no pyplot state), so nothing
here needs a display. Torch-free.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on servers and CI; must precede any canvas

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from dpaudit import _validate as v

__all__ = ["PALETTE", "MARKERS", "LINESTYLES", "style", "colour", "new_axes", "legend_outside", "has_data"]

#: The colour of each method, the same in every plot and report (colour-blind-safe hues first).
PALETTE: Mapping[str, str] = {
    # defenses and certificates
    "pixeldp": "#0072B2",
    "agm": "#E69F00",
    "hgm": "#009E73",
    "secure-sgd": "#CC79A7",
    "smoothing": "#56B4E9",
    "dpsgd": "#D55E00",
    "nonprivate": "#555555",
    # evasion attacks
    "fgsm": "#8C564B",
    "ifgsm": "#BCBD22",
    "pgd": "#D62728",
    "mim": "#9467BD",
    # membership attacks
    "loss": "#7F7F7F",
    "confidence": "#6B8E23",
    "entropy": "#A0522D",
    "modified-entropy": "#4B0082",
    "lira": "#1F77B4",
    "lira-offline": "#17BECF",
    "rmia": "#2CA02C",
    "rmia-offline": "#98DF8A",
    "shadow": "#FF7F0E",
    "threshold": "#8C8C00",
    # audits and references
    "epsilon_lb": "#D62728",
    "epsilon_ub": "#000000",
    "ceiling": "#117733",
    "in": "#D62728",
    "out": "#1F77B4",
    "chance": "#999999",
}

#: Marker per method, so curves that lie on top of each other remain distinguishable.
MARKERS: Mapping[str, str] = {
    "pixeldp": "o",
    "agm": "s",
    "hgm": "D",
    "secure-sgd": "^",
    "smoothing": "v",
    "dpsgd": "P",
    "nonprivate": "X",
    "fgsm": "o",
    "ifgsm": "s",
    "pgd": "^",
    "mim": "x",
    "loss": "o",
    "confidence": "s",
    "entropy": "^",
    "modified-entropy": "D",
    "lira": "s",
    "lira-offline": "D",
    "rmia": "^",
    "rmia-offline": "v",
    "shadow": "P",
    "threshold": "X",
    "epsilon_lb": "o",
    "ceiling": "s",
}

#: Line style per method (evasion attacks get four different dash patterns).
LINESTYLES: Mapping[str, str | tuple[int, tuple[int, ...]]] = {
    "fgsm": ":",
    "ifgsm": "-.",
    "pgd": "--",
    "mim": (0, (1, 1)),
    "smoothing": ":",
    "loss": ":",
    "confidence": "-.",
    "entropy": "--",
    "modified-entropy": (0, (3, 1, 1, 1)),
    "shadow": "-.",
    "lira-offline": "--",
    "rmia-offline": "--",
    "ceiling": "--",
}

# Methods the palette does not list get a colour from this ring, chosen by a stable hash of the
# name (never by order of appearance, which would change the colour from one plot to the next).
_FALLBACK = ("#393B79", "#637939", "#8C6D31", "#843C39", "#7B4173", "#3182BD", "#E6550D", "#31A354")
_FALLBACK_MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*")


def _key(method: str) -> str:
    return method.strip().lower()


def colour(method: str) -> str:
    """The fixed colour of ``method`` (case-insensitive)."""
    key = _key(method)
    if key in PALETTE:
        return PALETTE[key]
    return _FALLBACK[zlib.crc32(key.encode()) % len(_FALLBACK)]


def style(method: str) -> dict[str, Any]:
    """Keyword arguments for ``Axes.plot``: the method's colour, marker and line style."""
    key = _key(method)
    marker = MARKERS.get(key, _FALLBACK_MARKERS[zlib.crc32(key.encode()) % len(_FALLBACK_MARKERS)])
    return {"color": colour(key), "marker": marker, "linestyle": LINESTYLES.get(key, "-")}


def new_axes(ax: Axes | None = None, *, size: tuple[float, float] = (7.0, 4.0)) -> tuple[Figure, Axes]:
    """``ax`` and its figure, or a new Agg figure with one axes."""
    if ax is not None:
        fig = ax.figure
        if not isinstance(fig, Figure):
            raise v.invalid_type("ax", f"ax must belong to a Figure, got {type(fig).__name__}")
        return fig, ax
    fig = Figure(figsize=size)
    return fig, fig.add_subplot(1, 1, 1)


def legend_outside(ax: Axes, *, fontsize: float = 8) -> None:
    """The legend to the right of the axes, never over the data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False, fontsize=fontsize)


def has_data(fig: Figure) -> bool:
    """Whether any axes of ``fig`` holds a line, bar, collection or image with at least one point."""
    for ax in fig.axes:
        if any(np.size(line.get_xdata()) for line in ax.get_lines()) or ax.patches or ax.collections or ax.images:
            return True
    return False
