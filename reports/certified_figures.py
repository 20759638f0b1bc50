"""The certified report's figures: accuracy against radius per model, the models compared, accuracy against ε.

Every curve is one named prediction rule from radius 0, and each caption is read from the line
styles actually drawn (issue 46). Split from :mod:`reports.certified` (the page), which
re-exports these names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import to_hex, to_rgba
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure as MplFigure
from matplotlib.lines import Line2D
from matplotlib.ticker import PercentFormatter
from matplotlib.transforms import ScaledTranslation

from dpaudit.results import TrainedModel
from dpaudit.results.certified_numbers import ACCURACY_CONFIDENCE, counted_accuracy
from dpaudit.results.certify_summary import (
    UNNAMED_PREDICTION_RULE,
)
from dpaudit.results.record_accuracy import counted_test_accuracy
from reports.certified_runs import CertifiedRun
from reports.figures import Looks, legend_outside, new_axes, plain_log_ticks, setting_looks

__all__ = [
    "AccuracyEpsilonRow",
    "accuracy_epsilon_figure",
    "accuracy_epsilon_rows",
    "certified_caption",
    "certified_figure",
    "comparison_caption",
    "comparison_figure",
    "line_style_words",
]

DODGE_POINTS = 3.0

_STYLE_WORDS = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}


def _data_line(handle: Any) -> Line2D:
    """The line that carries a legend entry's style (an error-bar container's data line)."""
    return handle.lines[0] if isinstance(handle, ErrorbarContainer) else handle


def _dash_word(line: Line2D) -> str:
    """ "solid", "dotted", "dashed" or "dash-dot", from the dash pattern the line is drawn with.

    ``get_linestyle`` says "--" for every custom pattern, dots included, so the pattern itself is read.
    """
    style = str(line.get_linestyle())
    if style in ("None", "none", "", " "):
        return "no"
    if style in ("-", "solid"):
        return "solid"
    pattern = getattr(line, "_unscaled_dash_pattern", None)
    seq = pattern[1] if isinstance(pattern, tuple) and len(pattern) == 2 else None
    if not seq:
        return _STYLE_WORDS.get(style, "dashed")
    if len(seq) >= 4:
        return "dash-dot"
    return "dotted" if seq[0] <= 1.5 else "dashed"


def line_style_words(line: Line2D) -> str:
    """How a line looks, in the words a caption uses: "dotted line, filled markers"."""
    words = f"{_dash_word(line)} line"
    marker = line.get_marker()
    if marker in (None, "", "None", "none", " "):
        return words
    face = line.get_markerfacecolor()
    hollow = (isinstance(face, str) and face.lower() == "none") or to_rgba(face)[3] == 0 or to_hex(face) == "#ffffff"
    return f"{words}, {'open' if hollow else 'filled'} markers"


def _curves(ax: Axes, kind: str) -> list[tuple[str, Any]]:
    """(name, artist) of every curve of ``kind`` ("certified", "robust") drawn on ``ax``: an error-bar container, or a
    plain line; its name is the rest of its data line's gid."""
    out: list[tuple[str, Any]] = []
    seen = set()
    for c in ax.containers:
        if isinstance(c, ErrorbarContainer):
            seen.add(id(c.lines[0]))
            gid = c.lines[0].get_gid() or ""
            if gid.startswith(f"{kind}:"):
                out.append((gid.split(":", 1)[1], c))
    for line in ax.get_lines():
        gid = line.get_gid() or ""
        if id(line) not in seen and gid.startswith(f"{kind}:"):
            out.append((gid.split(":", 1)[1], line))
    return out


def _styles(curves: Sequence[tuple[str, Any]]) -> str:
    """ "pixeldp: solid line, filled markers; smoothing: dotted line, filled markers" — names sharing a look grouped."""
    groups: dict[str, list[str]] = {}
    for name, artist in curves:
        groups.setdefault(line_style_words(_data_line(artist)), []).append(name)
    return "; ".join(f"{', '.join(names)}: {words}" for words, names in groups.items())


def _offset(ax: Axes, curves: Sequence[tuple[str, Any]]) -> bool:
    return any(_data_line(a).get_transform() is not ax.transData for _, a in curves)


def certified_caption(fig: MplFigure | None) -> str:
    """The caption of :func:`certified_figure`, read from the artists drawn (their line styles, bars and offsets)."""
    if fig is None or not fig.axes:
        return ""
    ax = fig.axes[0]
    certs, attacks = _curves(ax, "certified"), _curves(ax, "robust")
    parts = []
    if certs:
        parts.append(f"Certified accuracy of each certificate's classifier ({_styles(certs)})")
    if attacks:
        parts.append(f"robust accuracy left by each attack on the classifier it ran against ({_styles(attacks)})")
    text = " and ".join(parts) + " against the perturbation radius. "
    text = text[0].upper() + text[1:]
    text += (
        "Every curve starts at radius 0 at the clean accuracy of its own classifier; the classifiers "
        "are named in the table below, and two curves are one classifier only when the table says so. "
    )
    if any(isinstance(a, ErrorbarContainer) for _, a in [*certs, *attacks]):
        text += f"Vertical bars: {ACCURACY_CONFIDENCE:.0%} Clopper–Pearson intervals. "
    if _offset(ax, attacks):
        text += (
            f"Attack curves are offset sideways by {DODGE_POINTS:g} pt from one another so that coinciding curves "
            "stay visible; each point belongs at the radius below it."
        )
    return text.strip()


def _interval_bars(counts: np.ndarray, total: int, shares: np.ndarray) -> np.ndarray:
    """(2, K) error-bar lengths below and above each share: its Clopper–Pearson interval."""
    ci = [counted_accuracy(int(k), total) for k in counts]
    below = [max(0.0, a - c.low) for a, c in zip(shares, ci)]
    above = [max(0.0, c.high - a) for a, c in zip(shares, ci)]
    return np.array([below, above])


def certified_figure(run: CertifiedRun, *, ax: Axes | None = None) -> MplFigure | None:
    """One model: certified accuracy per certificate and robust accuracy per attack against radius, from radius 0.

    Each curve is one classifier's: a certificate's from its conventional accuracy at radius 0, an
    attack's from the clean accuracy of the classifier it ran against (which is not the same rule:
    the table names both), with its 95 % Clopper–Pearson interval as vertical bars. The caption
    is :func:`certified_caption`, read from the artists.

    Returns:
        The figure, or ``None`` when the model has neither a certificate nor an attack result.
    """
    if not run.certificates and not run.attacks:
        return None
    fig, ax = new_axes(ax, size=(7.5, 4.2))
    radii = run.curve_radii
    looks = Looks()
    for name, cert in run.certificates.items():
        own = name != "smoothing" or run.summary.mechanism == "smoothing"
        st = looks.method(name, linestyle="-" if own else ":")
        acc = cert.certified_accuracy(radii)
        ax.errorbar(
            radii,
            acc,
            yerr=_interval_bars(cert.num_certified(radii), cert.num_points, acc),
            **st,
            linewidth=2,
            markersize=6,
            elinewidth=0.8,
            capsize=0,
            label=f"certified: {name}",
            gid=f"certified:{name}",
        )
    n = len(run.attacks)
    for i, (name, res) in enumerate(run.attacks.items()):
        # Radius 0 is the clean accuracy of the attacked classifier (no attack needed there).
        x = res.radii if res.radii[0] == 0 else np.concatenate([[0.0], res.radii])
        acc = res.robust_accuracy if res.radii[0] == 0 else np.concatenate([[res.clean_accuracy], res.robust_accuracy])
        kept = np.rint(acc * res.num_examples).astype(int)
        extra: dict[str, Any] = {}
        if n > 1:
            # Attacks often leave the same accuracy: each curve is offset a few points sideways
            # (display space, so the data stay exact); the caption says so.
            dodge = ScaledTranslation((i - (n - 1) / 2) * DODGE_POINTS / 72, 0, fig.dpi_scale_trans)
            extra["transform"] = ax.transData + dodge
        ax.errorbar(
            x,
            acc,
            yerr=_interval_bars(kept, res.num_examples, acc),
            **looks.method(name),
            markersize=5,
            markerfacecolor="none",
            elinewidth=0.8,
            capsize=0,
            label=f"robust under {name}",
            gid=f"robust:{name}",
            **extra,
        )
    ax.set_xlabel(f"perturbation radius ({run.summary.norm})" if run.summary.norm else "perturbation radius")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))  # as the page's tables write accuracies
    ax.set_title(run.label)
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return fig


def comparison_figure(
    runs: Sequence[CertifiedRun], *, ax: Axes | None = None, include_smoothing: bool = True
) -> MplFigure | None:
    """Every model's certificates on one axes, from radius 0: colour and marker name the model, the line the
    certificate.

    A model's own certificate and the randomized-smoothing certificate of its noise differ in
    line style and marker fill (:func:`comparison_caption` reads which from the artists), so
    PixelDP's smoothing curve and a smoothing model's curve differ in colour and marker, and a
    model's two curves share its colour (models of one defense: shades of its hue).

    Returns:
        The figure, or ``None`` when no model holds a certificate.
    """
    curves = [
        (run, name, cert)
        for run in runs
        for name, cert in run.certificates.items()
        if include_smoothing or name != "smoothing"
    ]
    if not curves:
        return None
    fig, ax = new_axes(ax, size=(8.0, 4.2))
    models = setting_looks([(run.summary.model_id, run.summary.defense) for run in runs if run.certificates])
    looks = Looks()
    n = len(curves)
    for i, (run, name, cert) in enumerate(curves):
        # The legend names a curve by its model's label, with the model id only where two models share
        # a label, and the certificate only where the label does not already name it.
        shared = sum(1 for run2, _, _ in curves if run2.label == run.label and run2 is not run) > 0
        legend = run.label + (f" [{run.summary.model_id}]" if shared else "")
        legend += "" if name.lower() in run.label.lower() else f": {name}"
        own = name != "smoothing" or run.summary.mechanism == "smoothing"
        st = looks.take(**{**models[run.summary.model_id], "linestyle": "-" if own else ":"})
        if not own:
            st["markerfacecolor"] = "white"
        acc = cert.certified_accuracy(run.curve_radii)
        extra: dict[str, Any] = {}
        if n > 1:
            # Curves often certify alike: each is offset a few points sideways (display space, the data stay
            # exact) so that its interval bars stay apart from the others'; the caption says so.
            dodge = ScaledTranslation((i - (n - 1) / 2) * DODGE_POINTS / 72, 0, fig.dpi_scale_trans)
            extra["transform"] = ax.transData + dodge
        ax.errorbar(
            run.curve_radii,
            acc,
            # Each certified accuracy is a count of the certified test points: its Clopper–Pearson interval.
            yerr=_interval_bars(cert.num_certified(run.curve_radii), cert.num_points, acc),
            **st,
            elinewidth=0.8,
            capsize=0,
            label=legend,
            gid=f"certified:{'own certificate' if own else 'randomized smoothing of a noise layer'}",
            **extra,
        )
    # An offset curve does not widen the data limits (its transform is not the data's): the radii set them.
    radii = np.concatenate([np.asarray(run.curve_radii, dtype=float) for run, _, _ in curves])
    lo, hi = float(radii.min()), float(radii.max())
    pad = 0.05 * (hi - lo) if hi > lo else 0.05
    ax.set_xlim(lo - pad, hi + pad)
    ax.set_xlabel("perturbation radius")
    ax.set_ylabel("certified accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))  # as the page's tables write accuracies
    ax.grid(alpha=0.3)
    legend_outside(ax)
    return fig


def comparison_caption(fig: MplFigure | None) -> str:
    """The caption of :func:`comparison_figure`, read from the artists drawn."""
    if fig is None or not fig.axes:
        return ""
    looks: dict[str, list[str]] = {}
    for kind, line in _curves(fig.axes[0], "certified"):
        words = line_style_words(_data_line(line))
        if words not in looks.setdefault(kind, []):
            looks[kind].append(words)
    said = "; ".join(f"{kind}: {' or '.join(w)}" for kind, w in looks.items())
    curves = _curves(fig.axes[0], "certified")
    text = (
        "Certified accuracy against radius, from radius 0 (the conventional accuracy of the certified "
        f"classifier): colour and marker name the model ({said}). A smoothing model's CERTIFY is its own "
        "certificate."
    )
    if any(isinstance(a, ErrorbarContainer) for _, a in curves):
        text += f" Vertical bars: {ACCURACY_CONFIDENCE:.0%} Clopper–Pearson intervals of each certified count."
    if _offset(fig.axes[0], curves):
        text += (
            f" Curves are offset sideways by {DODGE_POINTS:g} pt from one another so that their bars stay apart; "
            "each point belongs at the radius below it."
        )
    return text


@dataclass(frozen=True, kw_only=True)
class AccuracyEpsilonRow:
    """One record's conventional accuracy at its DP ε (a row of ``accuracy_vs_epsilon.csv``, columns in field order).

    Attributes:
        defense, model_id: the record.
        epsilon, delta: its DP ε at the δ its metrics state (``None`` when they state none).
        conventional_accuracy: of the classifier ``source`` names.
        source: where the accuracy comes from, with its prediction rule in words.
        num_points, correct: the count behind the accuracy, where it is known (a certified model's:
            its certificate's test points; a record's: its test set, where the record holds its size).
        ci_low, ci_high: its 95 % Clopper–Pearson interval, where the count is known.
    """

    defense: str
    model_id: str
    epsilon: float
    delta: float | None
    conventional_accuracy: float
    source: str
    num_points: int | None = None
    correct: int | None = None
    ci_low: float | None = None
    ci_high: float | None = None


def accuracy_epsilon_rows(records: Sequence[TrainedModel], runs: Sequence[CertifiedRun]) -> list[AccuracyEpsilonRow]:
    """(defense, model id, DP ε, δ, conventional accuracy) for every record with a finite ε.

    Conventional accuracy is that of the classifier the model's own certificate covers where the
    model was certified, else the record's test accuracy; ``source`` names the prediction rule
    either way (a noise-layer record's test accuracy is its expected-softmax argmax over a few
    noise draws, which is not the vote-count argmax a Clopper–Pearson certificate covers).
    """
    certified = {r.summary.model_id: r for r in runs}
    rows = []
    for rec in records:
        eps = rec.metrics.get("epsilon")
        if not isinstance(eps, (int, float)) or not math.isfinite(eps):
            continue
        run = certified.get(rec.model_id)
        acc = run.summary.conventional_accuracy if run is not None else rec.metrics.get("test_accuracy")
        if not isinstance(acc, (int, float)):
            continue
        primary = run.primary_certificate() if run is not None else None
        if primary is not None:
            ci = counted_accuracy(primary.num_correct, primary.num_points)
        elif run is None and (est := counted_test_accuracy(rec.metrics)) is not None and est.count is not None:
            # The record's own test accuracy, over the test-set size build_record stores beside it.
            ci = counted_accuracy(est.count, int(est.total or 0))
        else:
            ci = None
        rows.append(
            AccuracyEpsilonRow(
                defense=rec.defense,
                model_id=rec.model_id,
                epsilon=float(eps),
                delta=rec.metrics.get("delta"),
                conventional_accuracy=float(acc),
                num_points=ci.total if ci else None,
                correct=ci.correct if ci else None,
                ci_low=ci.low if ci else None,
                ci_high=ci.high if ci else None,
                source=f"certify: {run.summary.prediction_rule or UNNAMED_PREDICTION_RULE}"
                if run is not None
                else _record_rule(rec),
            )
        )
    return sorted(rows, key=lambda r: (r.defense, r.epsilon))


def _record_rule(rec: TrainedModel) -> str:
    """The prediction rule behind a record's test accuracy, in words."""
    draws = rec.metrics.get("test_accuracy_draws")
    return (
        f"record test accuracy: expected-softmax argmax over {draws} noise draws"
        if draws
        else "record test accuracy: the trained model on clean inputs"
    )


def accuracy_epsilon_figure(rows: Sequence[AccuracyEpsilonRow], *, ax: Axes | None = None) -> MplFigure | None:
    """Conventional accuracy against the training data's DP ε, one line per defense, with each accuracy's 95 %
    Clopper–Pearson interval as a vertical bar where its count is known.

    Returns:
        The figure, or ``None`` without rows or when no defense has two models (every series would
        be one point: the table beside it reads better than an axes of single markers).
    """
    by_defense = {
        d: sorted((r for r in rows if r.defense == d), key=lambda r: r.epsilon) for d in {r.defense for r in rows}
    }
    if not any(len({r.epsilon for r in pts}) > 1 for pts in by_defense.values()):
        return None
    fig, ax = new_axes(ax, size=(7.0, 4.0))
    looks = Looks()
    for defense in sorted(by_defense):
        pts = by_defense[defense]
        xs, ys = [r.epsilon for r in pts], [r.conventional_accuracy for r in pts]
        st = looks.method(defense)
        bars = [(r.ci_low, r.ci_high) for r in pts if r.ci_low is not None and r.ci_high is not None]
        if len(bars) == len(pts):
            yerr = np.array([[max(0.0, y - lo) for y, (lo, _) in zip(ys, bars, strict=True)],
                             [max(0.0, hi - y) for y, (_, hi) in zip(ys, bars, strict=True)]])  # fmt: skip
            ax.errorbar(xs, ys, yerr=yerr, **st, elinewidth=0.8, capsize=0, label=defense)
        else:
            # No count for some accuracy (a record stored before counts were kept): no bar pretends to one.
            ax.plot(xs, ys, **st, label=defense)
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)  # ε as the tables write it (1, 2, 5, 10), not 10⁰ and 2×10⁰
    ax.set_xlabel("DP ε of the training data")
    ax.set_ylabel("conventional accuracy")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax.grid(alpha=0.3, which="both")
    legend_outside(ax)
    return fig
