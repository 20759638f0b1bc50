"""Certified vs conventional accuracy reports (PixelDP, AGM, HGM, Secure-SGD, smoothing).

What a reader of Phan et al. (2019, Figs. 2–5) or Lecuyer et al. (2019, Fig. 3) looks for:

1. **certified accuracy against attack size** for every certified model (its own PixelDP-style
   certificate and the randomized-smoothing certificate of the same noise, Cohen et al. 2019),
   with the **empirical robust accuracy** under FGSM / I-FGSM / PGD / MIM on the same axes —
   the certificate must stay below what the attacks achieve, and a point above is flagged;
2. **conventional accuracy against the DP ε** of the training data, for Secure-SGD and DP-SGD;
3. the tables behind both, as CSV.

Torch-free: everything renders from the JSON + NPZ that ``dpaudit certify`` stored.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure as MplFigure

from dpaudit.results import EvasionResult, load_evasion_result
from dpaudit.robustness.certification import (
    CertificationResult,
    load_certification_result,
)
from dpaudit.store import atomic_write_text, read_json
from reports.render import Banner, Figure, Section, Table, write_report

__all__ = [
    "CertifiedRun",
    "load_certified_runs",
    "certified_figure",
    "comparison_figure",
    "accuracy_epsilon_figure",
    "certified_rows",
    "robust_rows",
    "accuracy_epsilon_rows",
    "soundness_problems",
    "write_certified_report",
]

SUMMARY_FILE = "summary.json"
_ATTACK_STYLE = {"fgsm": ":", "ifgsm": "-.", "pgd": "--", "mim": (0, (1, 3))}


@dataclass(frozen=True, kw_only=True)
class CertifiedRun:
    """What ``dpaudit certify`` stored for one model."""

    summary: Mapping[str, Any]
    certificates: Mapping[str, CertificationResult]
    attacks: Mapping[str, EvasionResult]

    @property
    def label(self) -> str:
        """Defense, its robustness parameters (ε_r, L; r = 1 when HGM's noise is not redistributed) and DP ε."""
        s = self.summary
        parts = [str(s["defense"])]
        if "robustness_epsilon" in s:
            parts.append(f"ε_r={s['robustness_epsilon']:g} L={s['attack_norm_bound']:g}")
        if s.get("defense") in ("hgm", "secure-sgd") and s.get("redistribute") is False:
            parts.append("r=1")
        eps = s.get("epsilon")
        if isinstance(eps, (int, float)) and math.isfinite(eps):
            parts.append(f"DP ε={eps:.2g}")
        return " ".join(parts)

    @property
    def sizes(self) -> np.ndarray:
        return np.asarray(self.summary["attack_sizes"], dtype=float)

    def strongest_robust_accuracy(self) -> np.ndarray | None:
        """Robust accuracy when an example counts as broken if *any* attack broke it."""
        if not self.attacks:
            return None
        success = np.zeros_like(next(iter(self.attacks.values())).success)
        for res in self.attacks.values():
            success = success | res.success
        return 1.0 - success.mean(axis=1)


def load_certified_runs(run_dir: str | Path) -> list[CertifiedRun]:
    """Every model certified in ``RUN_DIR/certify/*`` (sorted by defense, then model id)."""
    out = []
    for summary_path in sorted(Path(run_dir, "certify").glob(f"*/{SUMMARY_FILE}")):
        summary = read_json(summary_path)
        d = summary_path.parent
        certs = {p.stem.removeprefix("certify-"): load_certification_result(p) for p in sorted(d.glob("certify-*.json"))}
        attacks = {}
        for p in sorted(d.glob("evasion-*.json")):
            res = load_evasion_result(p)
            attacks[res.attack] = res
        out.append(CertifiedRun(summary=summary, certificates=certs, attacks=attacks))
    return sorted(out, key=lambda r: (str(r.summary["defense"]), str(r.summary["model_id"])))


def _axes(ax: Axes | None, size: tuple[float, float] = (6.0, 4.0)) -> tuple[MplFigure, Axes]:
    if ax is not None:
        return ax.figure, ax
    fig = MplFigure(figsize=size)
    return fig, fig.add_subplot(1, 1, 1)


def certified_figure(run: CertifiedRun, *, ax: Axes | None = None) -> MplFigure:
    """One model: certified accuracy (solid) and robust accuracy under each attack (dashed) vs size."""
    fig, ax = _axes(ax)
    sizes = run.sizes
    for name, cert in run.certificates.items():
        ax.plot(sizes, cert.certified_accuracy(sizes), marker="o", lw=2, label=f"certified: {name}")
    for name, res in run.attacks.items():
        ax.plot(res.radii, res.robust_accuracy, ls=_ATTACK_STYLE.get(name, "--"), marker=".", label=f"robust: {name}")
    ax.set_xlabel(f"attack size ({run.summary.get('norm', '')})")
    ax.set_ylabel("accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(run.label)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def comparison_figure(runs: Sequence[CertifiedRun], *, ax: Axes | None = None, include_smoothing: bool = True) -> MplFigure:
    """Every model's own certificate on one axes (and, dotted, smoothing of the same noise)."""
    fig, ax = _axes(ax, size=(9.0, 4.2))
    for i, run in enumerate(runs):
        color = f"C{i % 10}"
        conv = run.summary.get("conventional_accuracy", float("nan"))
        for name, cert in run.certificates.items():
            is_smooth = name == "smoothing"
            if is_smooth and not include_smoothing:
                continue
            ax.plot(
                run.sizes,
                cert.certified_accuracy(run.sizes),
                color=color,
                ls=":" if is_smooth else "-",
                marker="" if is_smooth else "o",
                label=f"{run.label}: {'smoothing' if is_smooth else 'certificate'} (conv. acc {conv:.3f})",
            )
    ax.set_xlabel("attack size")
    ax.set_ylabel("certified accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def accuracy_epsilon_rows(run_dir: str | Path, runs: Sequence[CertifiedRun]) -> list[dict[str, Any]]:
    """(defense, model id, DP ε, δ, conventional accuracy) for every record with a finite ε.

    Conventional accuracy is the Monte Carlo prediction's accuracy where the model was
    certified, else the record's test accuracy.
    """
    certified = {str(r.summary["model_id"]): r for r in runs}
    rows = []
    for path in sorted(Path(run_dir, "records").glob("*/record.json")):
        rec = read_json(path)
        metrics = rec.get("metrics", {})
        eps = metrics.get("epsilon")
        if not isinstance(eps, (int, float)) or not math.isfinite(eps):
            continue
        run = certified.get(rec["model_id"])
        acc = run.summary["conventional_accuracy"] if run is not None else metrics.get("test_accuracy", float("nan"))
        rows.append(
            {
                "defense": rec["defense"],
                "model_id": rec["model_id"],
                "epsilon": float(eps),
                "delta": metrics.get("delta"),
                "conventional_accuracy": float(acc),
                "source": "monte carlo" if run is not None else "record test accuracy",
            }
        )
    return sorted(rows, key=lambda r: (r["defense"], r["epsilon"]))


def accuracy_epsilon_figure(rows: Sequence[Mapping[str, Any]], *, ax: Axes | None = None) -> MplFigure:
    """Conventional accuracy against the training data's DP ε, one line per defense."""
    fig, ax = _axes(ax)
    for i, defense in enumerate(sorted({r["defense"] for r in rows})):
        pts = sorted((r["epsilon"], r["conventional_accuracy"]) for r in rows if r["defense"] == defense)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=f"C{i}", label=defense)
    ax.set_xscale("log")
    ax.set_xlabel("DP ε of the training data")
    ax.set_ylabel("conventional accuracy")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


def certified_rows(runs: Sequence[CertifiedRun]) -> list[dict[str, Any]]:
    """Long table: defense, model, certificate, size, certified accuracy, conventional accuracy."""
    rows = []
    for run in runs:
        for name, cert in run.certificates.items():
            for size, acc in zip(run.sizes, cert.certified_accuracy(run.sizes)):
                rows.append(
                    {
                        "defense": run.summary["defense"],
                        "model_id": run.summary["model_id"],
                        "certificate": name,
                        "norm": cert.norm,
                        "size": float(size),
                        "certified_accuracy": float(acc),
                        "conventional_accuracy": float(cert.conventional_accuracy),
                    }
                )
    return rows


def robust_rows(runs: Sequence[CertifiedRun]) -> list[dict[str, Any]]:
    """Long table: defense, model, attack, size, robust accuracy, clean accuracy."""
    rows = []
    for run in runs:
        for name, res in run.attacks.items():
            for size, acc in zip(res.radii, res.robust_accuracy):
                rows.append(
                    {
                        "defense": run.summary["defense"],
                        "model_id": run.summary["model_id"],
                        "attack": name,
                        "norm": res.norm,
                        "size": float(size),
                        "robust_accuracy": float(acc),
                        "clean_accuracy": float(res.clean_accuracy),
                    }
                )
    return rows


def soundness_problems(run: CertifiedRun, *, tolerance: float = 1e-9) -> list[tuple[str, float, float, float]]:
    """(certificate, size, certified acc, robust acc) wherever a certificate exceeds the strongest attack.

    ``tolerance`` absorbs float rounding only (two fractions of the same count computed in
    different orders); any real excess is at least one example, 1/n.
    """
    robust = run.strongest_robust_accuracy()
    if robust is None:
        return []
    out = []
    for name, cert in run.certificates.items():
        if cert.norm != run.summary.get("norm"):
            continue
        for size, c, r in zip(run.sizes, cert.certified_accuracy(run.sizes), robust):
            if c > r + tolerance:
                out.append((name, float(size), float(c), float(r)))
    return out


def _csv(rows: Sequence[Mapping[str, Any]]) -> str:
    if not rows:
        return ""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _run_table(runs: Sequence[CertifiedRun]) -> Table:
    rows = []
    for run in runs:
        s = run.summary
        rows.append(
            [
                s["defense"],
                s["model_id"],
                s.get("epsilon"),
                s.get("robustness_epsilon"),
                s.get("attack_norm_bound"),
                s.get("noise_std"),
                s.get("sensitivity"),
                s.get("conventional_accuracy"),
                s.get("num_examples"),
                s.get("num_draws"),
                s.get("draws_per_second"),
            ]
        )
    return Table(
        columns=["defense", "model", "DP ε", "ε_r", "L", "σ", "Δ_r", "conv. acc", "examples", "draws", "draws/s"],
        rows=rows,
        caption="σ: base noise std of the noise layer; Δ_r: its measured (r-weighted) sensitivity in the attack norm; conventional accuracy of the Monte Carlo prediction.",
    )


def write_certified_report(run_dir: str | Path, *, runs: Sequence[CertifiedRun] | None = None) -> Path:
    """Writes ``RUN_DIR/reports/certified.{html,md}``, its figures and CSV tables.

    Returns:
        The HTML report's path.
    """
    run_dir = Path(run_dir)
    runs = load_certified_runs(run_dir) if runs is None else list(runs)
    out = run_dir / "reports"
    out.mkdir(parents=True, exist_ok=True)
    eps_rows = accuracy_epsilon_rows(run_dir, runs)
    cert_rows, rob_rows = certified_rows(runs), robust_rows(runs)
    for name, rows in (("certified_accuracy.csv", cert_rows), ("robust_accuracy.csv", rob_rows), ("accuracy_vs_epsilon.csv", eps_rows)):
        atomic_write_text(out / name, _csv(rows))

    sections: list[Section] = []
    problems = {run.summary["model_id"]: soundness_problems(run) for run in runs}
    bad = {k: p for k, p in problems.items() if p}
    overview: list[Any] = []
    if bad:
        lines = "; ".join(f"{k}: {name} at size {size:g} certifies {c:.3f} > robust {r:.3f}" for k, ps in bad.items() for name, size, c, r in ps)
        overview.append(Banner(text=f"SOUNDNESS VIOLATION: a certificate exceeds the accuracy an attack left — a bug in the certificate or the noise. {lines}", level="alert"))
    elif runs:
        overview.append(Banner(text="Sound: at every attack size, certified accuracy ≤ robust accuracy under the strongest attack.", level="ok"))
    if runs:
        overview.append(_run_table(runs))
        overview.append(
            Figure(
                figure=comparison_figure(runs),
                name="comparison",
                caption="Certified accuracy against attack size: each model's own certificate (solid) and randomized smoothing of the same noise (dotted).",
            )
        )
    else:
        overview.append("No certified models in this run directory (run `dpaudit certify` first).")
    sections.append(Section(title="Certified accuracy", blocks=overview))
    for run in runs:
        blocks: list[Any] = [
            Figure(figure=certified_figure(run), name=f"model-{run.summary['model_id']}", caption="Certified accuracy (solid) against empirical robust accuracy under each attack (dashed).")
        ]
        rows = []
        robust = run.strongest_robust_accuracy()
        for j, size in enumerate(run.sizes):
            row: list[Any] = [float(size)]
            row += [float(c.certified_accuracy([size])[0]) for c in run.certificates.values()]
            row += [float(r.robust_accuracy[j]) for r in run.attacks.values()]
            row.append(None if robust is None else float(robust[j]))
            rows.append(row)
        cols = ["size", *(f"certified {n}" for n in run.certificates), *(f"robust {n}" for n in run.attacks), "robust (all attacks)"]
        blocks.append(Table(columns=cols, rows=rows))
        sections.append(Section(title=f"{run.label} — {run.summary['model_id']}", blocks=blocks))
    if eps_rows:
        sections.append(
            Section(
                title="Conventional accuracy against DP ε",
                blocks=[
                    Figure(figure=accuracy_epsilon_figure(eps_rows), name="accuracy-vs-epsilon", caption="Conventional accuracy against the training data's ε (at each record's δ)."),
                    Table(
                        columns=["defense", "model", "ε", "δ", "conv. acc", "source"],
                        rows=[[r["defense"], r["model_id"], r["epsilon"], r["delta"], r["conventional_accuracy"], r["source"]] for r in eps_rows],
                    ),
                ],
            )
        )
    sections.append(Section(title="Tables", blocks=["CSV beside this report: `certified_accuracy.csv`, `robust_accuracy.csv`, `accuracy_vs_epsilon.csv`."]))
    return write_report(out, sections, title="Certified vs conventional accuracy", stem="certified")
