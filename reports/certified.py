"""Certified vs conventional accuracy reports (PixelDP, AGM, HGM, Secure-SGD, smoothing).

What a reader of Phan et al. (2019, Figs. 2–5) or Lecuyer et al. (2019, Fig. 3) looks for:

1. **certified accuracy against the perturbation radius** for every certified model (its own
   PixelDP-style certificate and the randomized-smoothing certificate of the same noise, Cohen
   et al. 2019; a ``smoothing`` model, trained with Gaussian input noise, has CERTIFY's
   certificate only) and the **empirical robust accuracy** under FGSM / I-FGSM / PGD / MIM on
   the same axes. Every curve is one classifier's and starts at radius 0 at that classifier's
   accuracy (a certificate's conventional accuracy, an attack's clean accuracy); a table names
   each curve's prediction rule, since a certificate's rule (e.g. CERTIFY, which abstains) and
   the rule an attack ran against (a vote that never abstains) differ;
2. every accuracy beside its count and 95 % Clopper–Pearson interval, on the page, in the CSV
   and in the LaTeX tables; captions read from the artists drawn;
3. **conventional accuracy against the DP ε** of the training data, where records carry one;
4. the tables behind them, as CSV (a CSV with no rows is not written).

The verdict (:func:`~dpaudit.results.verdicts.certified_verdict`) reads what ``dpaudit certify``
stored (``soundness_violations`` in its summary) and each certificate's reach at the radii asked
("vacuous at these radii" when it certifies nothing there); this module only renders it.
Torch-free: everything renders from stored JSON + NPZ.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import to_hex, to_rgba
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure as MplFigure
from matplotlib.lines import Line2D
from matplotlib.transforms import ScaledTranslation

from dpaudit import _validate as v
from dpaudit.results import EvasionResult, TrainedModel, load_evasion_result, load_record
from dpaudit.results.certification import CertificationResult, load_certification_result
from dpaudit.results.certified_numbers import ACCURACY_CONFIDENCE, CountedAccuracy, counted_accuracy
from dpaudit.results.certify_summary import (
    UNNAMED_PREDICTION_RULE,
    AttackedClassifier,
    CertificateReach,
    SoundnessViolation,
    StoredCertifySummary,
    attacked_prediction_rule,
    read_stored_summary,
)
from dpaudit.results.verdicts import Verdict, certified_verdict
from dpaudit.store import RunDir, atomic_write_text, read_json
from reports.certified_rows import CertifiedRow, RobustRow
from reports.figures import Looks, legend_outside, new_axes, setting_looks
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import Shown, epsilon_lb_cell, epsilon_ub_cell, fmt_percent, fmt_upper_bound
from reports.render import Figure, Section, Table, Text, WrittenReport, accountant_table, write_report_files
from reports.verdict_box import verdict_section, with_status

__all__ = [
    "CertifiedRun",
    "AccuracyEpsilonRow",
    "CertifiedRow",
    "RobustRow",
    "load_certified_runs",
    "certified_figure",
    "certified_caption",
    "comparison_figure",
    "comparison_caption",
    "line_style_words",
    "classifier_table",
    "accuracy_table",
    "accuracy_epsilon_figure",
    "certified_rows",
    "robust_rows",
    "accuracy_epsilon_rows",
    "certified_sections",
    "write_certified_tables",
    "write_certified_report",
    "render_certified",
    "CertifiedRuns",
    "load_certified",
    "certified_page",
]

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True, kw_only=True)
class CertifiedRun:
    """What ``dpaudit certify`` stored for one model (and its record, when the run holds it).

    ``summary`` is read typed (:func:`dpaudit.results.certify_summary.read_stored_summary`); a
    mapping given here is read the same way.
    """

    summary: StoredCertifySummary
    certificates: Mapping[str, CertificationResult]
    attacks: Mapping[str, EvasionResult]
    record: TrainedModel | None = field(default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.summary, StoredCertifySummary):
            object.__setattr__(self, "summary", read_stored_summary(self.summary))

    def prediction_rule(self, certificate: str) -> str:
        """The classifier ``certificate`` covers, in words, as ``certify`` stored it (its conventional accuracy is this
        rule's)."""
        cert = self.certificates.get(certificate)
        rule = cert.config.get("prediction_rule") if cert is not None else None
        if not rule:
            s = self.summary
            own = certificate != "smoothing" or s.mechanism == "smoothing"
            rule = s.prediction_rule if own else s.smoothing_prediction_rule
        return str(rule) if rule else UNNAMED_PREDICTION_RULE

    @property
    def label(self) -> str:
        """Defense, its robustness parameters (ε_r, L; r = 1 when HGM's noise is not redistributed; σ for smoothing) and
        DP ε."""
        s = self.summary
        parts = [s.defense]
        if s.robustness_epsilon is not None and s.attack_norm_bound is not None:
            parts.append(f"ε_r={s.robustness_epsilon:g} L={s.attack_norm_bound:g}")
        elif s.mechanism == "smoothing" and s.noise_std is not None:
            parts.append(f"σ={s.noise_std:g}")
        if s.defense in ("hgm", "secure-sgd") and s.redistribute is False:
            parts.append("r=1")
        eps = s.epsilon
        if eps is not None and math.isfinite(eps):
            parts.append(f"DP ε={fmt_upper_bound(eps)}")
        return " ".join(parts)

    @property
    def radii(self) -> np.ndarray:
        """The perturbation radii the model was certified and attacked at."""
        return np.asarray(self.summary.radii, dtype=float)

    @property
    def soundness_violations(self) -> tuple[SoundnessViolation, ...]:
        """The violations ``certify`` stored (certificate, radius, certified and robust accuracy), in any stored
        form."""
        return self.summary.soundness_violations

    def strongest_robust_accuracy(self) -> np.ndarray | None:
        """Robust accuracy when an example counts as broken if *any* attack broke it."""
        if not self.attacks:
            return None
        success = np.zeros_like(next(iter(self.attacks.values())).success)
        for res in self.attacks.values():
            success = success | res.success
        return 1.0 - success.mean(axis=1)

    def attack_rule(self, attack: str) -> str:
        """The classifier ``attack`` ran against, in words, from its stored config (not necessarily a certificate's
        rule)."""
        return attacked_prediction_rule(self.attacks[attack].config)

    def reach(self) -> tuple[CertificateReach, ...]:
        """Each certificate's certified accuracy at the radii asked and the largest radius it certifies."""
        return tuple(
            dataclasses.replace(cert.reach(self.summary.model_id, self.radii), prediction_rule=self.prediction_rule(n))
            for n, cert in self.certificates.items()
        )

    def attacked(self) -> tuple[AttackedClassifier, ...]:
        """The classifier each attack ran against, with its clean accuracy's count."""
        return tuple(
            AttackedClassifier(
                model_id=self.summary.model_id,
                attack=name,
                prediction_rule=self.attack_rule(name),
                clean_correct=int(res.clean_correct.sum()),
                num_examples=res.num_examples,
            )
            for name, res in self.attacks.items()
        )

    def primary_certificate(self) -> CertificationResult | None:
        """The model's own certificate (CERTIFY for a smoothing model), whose classifier the summary's conventional
        accuracy is; ``None`` when not stored."""
        s = self.summary
        own = "smoothing" if s.mechanism == "smoothing" or s.defense == "smoothing" else s.defense
        return self.certificates.get(own)

    @property
    def curve_radii(self) -> np.ndarray:
        """The radii asked, with 0 in front: every curve and table starts at its classifier's clean accuracy."""
        return np.unique(np.concatenate([[0.0], self.radii]))


def _record(run: RunDir, model_id: str) -> TrainedModel | None:
    path = run.record_dir(model_id)
    return load_record(path) if (path / "record.json").is_file() else None


def load_certified_runs(run_dir: str | Path | RunDir) -> list[CertifiedRun]:
    """Every model certified in the run (sorted by defense, then model id)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    out = []
    for d in run.certify_dirs():
        try:
            # Read typed here, so a malformed field is named with its file before anything renders.
            summary = read_stored_summary(read_json(d / SUMMARY_FILE))
        except ValueError as exc:
            raise v.invalid("summary", f"{str(d / SUMMARY_FILE)!r}: {exc}") from None
        certs = {
            p.stem.removeprefix("certify-"): load_certification_result(p) for p in sorted(d.glob("certify-*.json"))
        }
        radii = np.asarray(summary.radii, dtype=float)
        used = summary.attacks_run
        attacks = {}
        for p in sorted(d.glob("evasion-*.json")):
            res = load_evasion_result(p)
            # Only the attacks the summary's run used, at its radii: a result left by an earlier run
            # at other radii (or by a run with attacks when the last had none) is not this run's.
            same_radii = res.radii.shape == radii.shape and np.allclose(res.radii, radii)
            if same_radii and (used is None or res.attack in used):
                attacks[res.attack] = res
        out.append(
            CertifiedRun(summary=summary, certificates=certs, attacks=attacks, record=_record(run, summary.model_id))
        )
    return sorted(out, key=lambda r: (r.summary.defense, r.summary.model_id))


#: Offset between neighbouring attack curves, in points (display space, so the data stay exact).
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
    for run, name, cert in curves:
        own = name != "smoothing" or run.summary.mechanism == "smoothing"
        st = looks.take(**{**models[run.summary.model_id], "linestyle": "-" if own else ":"})
        if not own:
            st["markerfacecolor"] = "white"
        ax.plot(
            run.curve_radii,
            cert.certified_accuracy(run.curve_radii),
            **st,
            label=f"{run.label} [{run.summary.model_id}]: {name}",
            gid=f"certified:{'own certificate' if own else 'randomized smoothing of a noise layer'}",
        )
    ax.set_xlabel("perturbation radius")
    ax.set_ylabel("certified accuracy")
    ax.set_ylim(-0.02, 1.02)
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
    return (
        "Certified accuracy against radius, from radius 0 (the conventional accuracy of the certified "
        f"classifier): colour and marker name the model ({said}). A smoothing model's CERTIFY is its own "
        "certificate."
    )


@dataclass(frozen=True, kw_only=True)
class AccuracyEpsilonRow:
    """One record's conventional accuracy at its DP ε (a row of ``accuracy_vs_epsilon.csv``, columns in field order).

    Attributes:
        defense, model_id: the record.
        epsilon, delta: its DP ε at the δ its metrics state (``None`` when they state none).
        conventional_accuracy: of the classifier ``source`` names.
        source: where the accuracy comes from, with its prediction rule in words.
        num_points, correct: the count behind the accuracy, where it is known (a certified model's:
            its certificate's test points; a record stores no test-set size).
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
        ci = counted_accuracy(primary.num_correct, primary.num_points) if primary is not None else None
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
    """Conventional accuracy against the training data's DP ε, one line per defense (``None`` without rows)."""
    if not rows:
        return None
    fig, ax = new_axes(ax, size=(7.0, 4.0))
    looks = Looks()
    for defense in sorted({r.defense for r in rows}):
        pts = sorted((r.epsilon, r.conventional_accuracy) for r in rows if r.defense == defense)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], **looks.method(defense), label=defense)
    ax.set_xscale("log")
    ax.set_xlabel("DP ε of the training data")
    ax.set_ylabel("conventional accuracy")
    ax.grid(alpha=0.3, which="both")
    legend_outside(ax)
    return fig


def certified_rows(runs: Sequence[CertifiedRun]) -> list[CertifiedRow]:
    """Long table: defense, model, certificate, radius (from 0), certified accuracy, conventional accuracy of the same
    classifier, its prediction rule, each accuracy with its count and 95 % Clopper–Pearson interval."""
    rows = []
    for run in runs:
        for name, cert in run.certificates.items():
            conv = counted_accuracy(cert.num_correct, cert.num_points)
            for radius, count in zip(run.curve_radii, cert.num_certified(run.curve_radii)):
                c = counted_accuracy(int(count), cert.num_points)
                rows.append(
                    CertifiedRow(
                        defense=run.summary.defense,
                        model_id=run.summary.model_id,
                        certificate=name,
                        norm=cert.norm,
                        radius=float(radius),
                        certified_accuracy=c.share,
                        conventional_accuracy=conv.share,
                        prediction_rule=run.prediction_rule(name),
                        num_points=cert.num_points,
                        certified_count=c.correct,
                        certified_ci_low=c.low,
                        certified_ci_high=c.high,
                        conventional_count=conv.correct,
                        conventional_ci_low=conv.low,
                        conventional_ci_high=conv.high,
                        confidence=ACCURACY_CONFIDENCE,
                    )
                )
    return rows


def _attack_points(res: EvasionResult) -> list[tuple[float, CountedAccuracy]]:
    """(radius, counted accuracy) of one attack from radius 0: the clean accuracy first, unless radius 0 was asked."""
    kept = (~res.success).sum(axis=1)
    points = [(float(r), counted_accuracy(int(k), res.num_examples)) for r, k in zip(res.radii, kept)]
    if res.radii[0] > 0:
        points.insert(0, (0.0, counted_accuracy(int(res.clean_correct.sum()), res.num_examples)))
    return points


def robust_rows(runs: Sequence[CertifiedRun]) -> list[RobustRow]:
    """Long table: defense, model, attack, radius (from 0), robust accuracy, clean accuracy of the attacked classifier
    and its prediction rule, each accuracy with its count and 95 % Clopper–Pearson interval."""
    rows = []
    for run in runs:
        for name, res in run.attacks.items():
            clean = counted_accuracy(int(res.clean_correct.sum()), res.num_examples)
            for radius, c in _attack_points(res):
                rows.append(
                    RobustRow(
                        defense=run.summary.defense,
                        model_id=run.summary.model_id,
                        attack=name,
                        norm=res.norm,
                        radius=radius,
                        robust_accuracy=c.share,
                        clean_accuracy=clean.share,
                        prediction_rule=run.attack_rule(name),
                        num_examples=res.num_examples,
                        robust_count=c.correct,
                        robust_ci_low=c.low,
                        robust_ci_high=c.high,
                        clean_count=clean.correct,
                        clean_ci_low=clean.low,
                        clean_ci_high=clean.high,
                        confidence=ACCURACY_CONFIDENCE,
                    )
                )
    return rows


def _csv(rows: Sequence[CertifiedRow | RobustRow | AccuracyEpsilonRow]) -> str:
    """The rows as CSV, one column per field of their type (in field order)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[f.name for f in dataclasses.fields(rows[0])])
    writer.writeheader()
    writer.writerows(dataclasses.asdict(r) for r in rows)
    return buf.getvalue()


def write_certified_tables(
    directory: Path, runs: Sequence[CertifiedRun], eps_rows: Sequence[AccuracyEpsilonRow]
) -> list[Path]:
    """Writes the CSV tables that have rows (a table without rows is neither written nor listed); removes stale empty
    ones."""
    written = []
    tables: tuple[tuple[str, Sequence[CertifiedRow | RobustRow | AccuracyEpsilonRow]], ...] = (
        ("certified_accuracy.csv", certified_rows(runs)),
        ("robust_accuracy.csv", robust_rows(runs)),
        ("accuracy_vs_epsilon.csv", eps_rows),
    )
    for name, rows in tables:
        path = directory / name
        if rows:
            written.append(atomic_write_text(path, _csv(rows)))
        elif path.is_file() and path.stat().st_size == 0:
            path.unlink()  # left by older versions, which always wrote the file
    return written


def _run_table(runs: Sequence[CertifiedRun]) -> Table:
    rows = []
    for run in runs:
        s = run.summary
        rows.append(
            [
                s.defense,
                s.model_id,
                epsilon_ub_cell(s.epsilon),  # an upper bound: rounded up, as in the section titles
                s.robustness_epsilon,
                s.attack_norm_bound,
                s.noise_std,
                s.sensitivity,
                s.num_examples,
                s.num_draws,
                s.draws_per_second,
            ]
        )
    return Table(
        columns=["defense", "model", "DP ε", "ε_r", "L", "σ", "Δ_r", "examples", "draws", "draws/s"],
        rows=rows,
        caption=(
            "σ: base noise std of the noise layer (of the input noise for a "
            "smoothing model, whose ε_r and L are blank); "
            "Δ_r: its measured (r-weighted) sensitivity in the attack norm. Each model's "
            "accuracies, with the classifier each is of, are in its own section below."
        ),
    )


def _claim_block(run: CertifiedRun) -> Any:
    if run.record is None:
        return Text(text="The model's record is not in this run directory, so its privacy claim cannot be shown.")
    delta = run.record.metrics.get("delta") or run.summary.delta or 1e-5
    return accountant_table(
        run.record.claim.epsilons(delta=float(delta)), delta=float(delta), description=run.record.claim.statement()
    )


def _cell(c: CountedAccuracy) -> Shown:
    """An accuracy beside its count ("82.5% (33/40)"); its value is the share (CSV, sorting)."""
    return Shown(c.share, c.text.split(";")[0] + ")")


def _ci_cell(c: CountedAccuracy) -> Shown:
    """Its interval, "67.2–92.7%"; its value is the lower end."""
    return Shown(c.low, c.interval_text)


def runs_verdict(runs: Sequence[CertifiedRun]) -> Verdict:
    """Unsound, vacuous at these radii, not checked or sound (:func:`~dpaudit.results.verdicts.certified_verdict`),
    from what ``certify`` stored for each model."""
    return certified_verdict(
        [
            (r.summary.model_id, [x.to_dict() for x in r.soundness_violations], bool(r.certificates and r.attacks))
            for r in runs
        ],
        reach=[x for r in runs for x in r.reach()],
        attacked=[x for r in runs for x in r.attacked()],
    )


def classifier_table(run: CertifiedRun) -> Table:
    """Every curve of the model's figure, the classifier it is of, and that classifier's accuracy at radius 0."""
    rows: list[list[Any]] = []
    for name, cert in run.certificates.items():
        c = counted_accuracy(cert.num_correct, cert.num_points)
        rows.append(
            [
                f"certified {name}",
                run.prediction_rule(name),
                _cell(c),
                _ci_cell(c),
                epsilon_lb_cell(cert.largest_certified_radius),  # a radius certified: rounded down
            ]
        )
    for name, res in run.attacks.items():
        c = counted_accuracy(int(res.clean_correct.sum()), res.num_examples)
        rows.append([f"robust under {name}", run.attack_rule(name), _cell(c), _ci_cell(c), None])
    return Table(
        columns=["curve", "classifier (prediction rule)", "accuracy at radius 0", "95% CI", "largest certified radius"],
        rows=rows,
        name=f"classifiers-{run.summary.model_id}",
        caption=(
            "Radius 0 is the conventional accuracy of a certificate's classifier (an abstention counts as "
            "wrong) and the clean accuracy of the classifier an attack ran against. A certificate's "
            "rule and an attack's rule can differ, so their radius-0 accuracies can differ; a robust "
            "accuracy reads against its own classifier's clean accuracy, never against another's. "
            f"Intervals: two-sided {ACCURACY_CONFIDENCE:.0%} Clopper–Pearson on the counts. Largest certified "
            "radius: over the correctly predicted test points."
        ),
    )


def accuracy_table(run: CertifiedRun) -> Table:
    """Accuracy of every curve at every radius (from 0), beside its count and 95 % interval."""
    curves: list[tuple[str, list[tuple[float, CountedAccuracy]]]] = [
        (
            f"certified {name}",
            [
                (float(r), counted_accuracy(int(k), cert.num_points))
                for r, k in zip(run.curve_radii, cert.num_certified(run.curve_radii))
            ],
        )
        for name, cert in run.certificates.items()
    ]
    curves += [(f"robust under {name}", _attack_points(res)) for name, res in run.attacks.items()]
    if len(run.attacks) > 1:
        first = next(iter(run.attacks.values()))
        broken = np.zeros_like(first.success)
        for res in run.attacks.values():
            broken = broken | res.success
        kept = (~broken).sum(axis=1)
        pts = [(float(r), counted_accuracy(int(k), first.num_examples)) for r, k in zip(first.radii, kept)]
        if first.radii[0] > 0:
            clean = np.ones(first.num_examples, dtype=bool)
            for res in run.attacks.values():
                clean &= res.clean_correct
            pts.insert(0, (0.0, counted_accuracy(int(clean.sum()), first.num_examples)))
        curves.append(("robust under all attacks", pts))
    rows = [
        [Shown(r, f"{r:g}"), label, _cell(c), _ci_cell(c)]
        for r in sorted({r for _, pts in curves for r, _ in pts})
        for label, pts in curves
        for rr, c in pts
        if rr == r
    ]
    return Table(
        columns=["radius", "curve", "accuracy", "95% CI"],
        rows=rows,
        name=f"accuracy-{run.summary.model_id}",
        caption=(
            "Certified accuracy is a lower bound on the robust accuracy of the certificate's classifier, "
            "and an attack's robust accuracy an upper bound on that of the classifier it ran against "
            "(the classifiers are named in the table above). Robust under all attacks: an example counts "
            "as broken if any attack broke it."
        ),
    )


def certified_sections(
    runs: Sequence[CertifiedRun], eps_rows: Sequence[AccuracyEpsilonRow], csv_files: Sequence[Path] = ()
) -> list[Section]:
    """The certified report's sections: verdict, overview, one section per model, accuracy vs ε."""
    overview: list[Any] = []
    # The verdict is judged in the core from what certify stored; the page draws the box.
    verdict = runs_verdict(runs)
    if runs:
        overview.append(_run_table(runs))
        fig = comparison_figure(runs)
        overview.append(
            Figure(
                figure=fig,
                name="comparison",
                caption=comparison_caption(fig),
                empty="no model in this run holds a certificate (none has a noise layer)",
            )
        )
    else:
        overview.append(Text(text="No certified models in this run directory (run dpaudit certify first)."))
    sections = [verdict_section(verdict), Section(title="Certified accuracy", blocks=overview)]
    for run in runs:
        blocks: list[Any] = [_claim_block(run)]
        fig = certified_figure(run)
        blocks.append(
            Figure(
                figure=fig,
                name=f"model-{run.summary.model_id}",
                caption=certified_caption(fig),
                empty="no certificate and no attack result stored for this model",
            )
        )
        if run.certificates or run.attacks:
            blocks += [classifier_table(run), accuracy_table(run)]
        sections.append(Section(title=f"{run.label} — {run.summary.model_id}", blocks=blocks))
    eps_table = Table(
        columns=["defense", "model", "ε", "δ", "conv. acc", "95% CI", "source"],
        rows=[
            [
                r.defense,
                r.model_id,
                r.epsilon,
                r.delta,
                _cell(counted_accuracy(r.correct, r.num_points))
                if r.correct is not None and r.num_points
                else Shown(r.conventional_accuracy, fmt_percent(r.conventional_accuracy)),
                _ci_cell(counted_accuracy(r.correct, r.num_points)) if r.correct is not None and r.num_points else None,
                r.source,
            ]
            for r in eps_rows
        ],
        caption=(
            "A certified model's accuracy is its own certificate's classifier's, with its count and "
            f"{ACCURACY_CONFIDENCE:.0%} Clopper–Pearson interval; a record stores its test accuracy "
            "without the test-set size, so an uncertified record's accuracy has no interval (—)."
        ),
    )
    sections.append(
        Section(
            title="Conventional accuracy against DP ε",
            blocks=[
                Figure(
                    figure=accuracy_epsilon_figure(eps_rows),
                    name="accuracy-vs-epsilon",
                    caption="Conventional accuracy against the training data's ε (at each record's δ)",
                    empty="no record in this run has a finite DP ε",
                ),
                *([eps_table] if eps_rows else []),
            ],
        )
    )
    if csv_files:
        sections.append(
            Section(
                title="Tables",
                blocks=[Text(text="CSV beside this report: " + ", ".join(p.name for p in csv_files) + ".")],
            )
        )
    return sections


@dataclass(frozen=True, kw_only=True)
class CertifiedRuns:
    """Every model certified in a run directory, and every record's accuracy against its DP ε (one page).

    Attributes:
        runs: what ``dpaudit certify`` stored per model (:func:`load_certified_runs`).
        eps_rows: conventional accuracy against ε (:func:`accuracy_epsilon_rows`).
    """

    runs: tuple[CertifiedRun, ...]
    eps_rows: tuple[AccuracyEpsilonRow, ...] = ()


def _certified(run: RunDir, runs: Sequence[CertifiedRun]) -> CertifiedRuns:
    records = [load_record(d) for d in run.record_dirs()]
    return CertifiedRuns(runs=tuple(runs), eps_rows=tuple(accuracy_epsilon_rows(records, runs)))


def load_certified(run: RunDir) -> list[CertifiedRuns]:
    """The run's certified models as the one item of the certified report (none when nothing was certified)."""
    runs = load_certified_runs(run)
    return [_certified(run, runs)] if runs else []


def _write(out: Path, item: CertifiedRuns) -> tuple[WrittenReport, list[Path], str]:
    out.mkdir(parents=True, exist_ok=True)
    csv_files = write_certified_tables(out, item.runs, item.eps_rows)
    sections = certified_sections(item.runs, item.eps_rows, csv_files)
    written = write_report_files(
        out, sections, title="Certified vs conventional accuracy", stem="certified", kind="certified"
    )
    return written, csv_files, with_status(f"certified vs conventional accuracy ({len(item.runs)} model(s))", sections)


def certified_page(item: CertifiedRuns, out: Path) -> Page:
    """Writes ``certified.{html,md}``, its figures and non-empty CSV tables into ``out``."""
    # The soundness verdicts are the ones ``certify`` stored; the page only shows them.
    violations = tuple(
        f"certify {cr.summary.model_id}: {len(cr.soundness_violations)} soundness violation(s)"
        for cr in item.runs
        if cr.soundness_violations
    )
    written, csv_files, link = _write(out, item)
    return Page(html=written.html, link=link, tables=tuple(csv_files), violations=violations)


def write_certified_report(run_dir: str | Path | RunDir, *, runs: Sequence[CertifiedRun] | None = None) -> Path:
    """Writes ``certified.{html,md}``, its figures and non-empty CSV tables into the run's reports directory; returns
    the HTML path."""
    return render_certified(run_dir, runs=runs)[0].html


def render_certified(
    run_dir: str | Path | RunDir, *, runs: Sequence[CertifiedRun] | None = None
) -> tuple[WrittenReport, list[Path]]:
    """Writes the certified report and its CSV tables; returns (the report's files, the CSV files)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    written, csv_files, _ = _write(
        run.reports_dir(), _certified(run, load_certified_runs(run) if runs is None else list(runs))
    )
    return written, csv_files


REPORT_KINDS.register(
    ReportKind(
        name="certified",
        group="Certified robustness",
        order=40,
        load=load_certified,
        verdict=lambda item: runs_verdict(item.runs),
        render=certified_page,
    )
)
