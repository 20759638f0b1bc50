"""The report run: render every stored result of a run directory as HTML + Markdown, with an index.

``render_reports(run_dir)`` finds audits, membership attacks and certify results through
:class:`dpaudit.store.RunDir` and writes, under ``RunDir.reports_dir()``:

* ``audit-<name>.{html,md}`` per audit (ε_LB beside ε_UB under every accountant, scores, ROC, and
  ε_LB with its ceiling against the number of trials, recomputed on prefixes of the scores);
* ``membership-<model>.{html,md}`` per attacked target (AUC, TPR@FPR, ε_LB, log–log ROC, the
  target's claimed ε under every accountant);
* ``certified.{html,md}`` (certified vs conventional accuracy vs radius; non-empty CSV tables);
* ``pate.{html,md}`` for PATE students (answers, data-dependent and data-independent ε, ε against
  queries answered, student accuracy against ε);
* ``inversion.{html,md}`` for model-inversion attacks (evaluator's attack accuracy, KNN distance,
  PSNR, members vs class average, inversion-based membership ε_LB beside the target's ε_UB, image
  grids per class, and the targets compared when there are several);
* ``index.{html,md}`` linking them all.

It recomputes no verdict: violations, tightness and soundness are read from the stored results.
Rendering needs no torch (DESIGN.md, "Import rule").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpaudit import _validate as v
from dpaudit.results import AuditResult, EpsilonByTrials, load_membership_result, load_record
from dpaudit.store import RunDir, load_npz

__all__ = ["ReportIndex", "NothingToRender", "render_reports"]


class NothingToRender(v.InvalidArgument):
    """The run directory holds no stored result any report could show."""

    argument = "run_dir"


@dataclass(frozen=True, kw_only=True)
class ReportIndex:
    """What :func:`render_reports` wrote (HTML pages per kind; Markdown, figures and tables beside them)."""

    index_html: Path
    index_md: Path
    audits: tuple[Path, ...] = ()
    membership: tuple[Path, ...] = ()
    certified: tuple[Path, ...] = ()
    pate: tuple[Path, ...] = ()
    inversion: tuple[Path, ...] = ()
    compare: tuple[Path, ...] = ()
    tables: tuple[Path, ...] = ()
    #: Stored verdicts the reports show as violations (audits with ε_LB > ε_UB, unsound certificates), read, never recomputed.
    violations: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.violations, tuple) or not all(isinstance(x, str) for x in self.violations):
            raise v.invalid_type("violations", f"violations must be a tuple of strings, got {self.violations!r}")
        for name in ("audits", "membership", "certified", "pate", "inversion", "compare", "tables"):
            value = getattr(self, name)
            if not isinstance(value, tuple) or not all(isinstance(p, Path) for p in value):
                raise TypeError(f"{name} must be a tuple of Paths, got {value!r}")

    @property
    def pages(self) -> tuple[Path, ...]:
        """Every HTML report the index links."""
        return self.compare + self.audits + self.membership + self.certified + self.pate + self.inversion


def _trials_curve(result: AuditResult, scores: Mapping[str, Any]) -> tuple[EpsilonByTrials | None, str]:
    """ε_LB and the ceiling on prefixes of the stored scores (the core computes; the report draws)."""
    from dpaudit.results.auditing import epsilon_lb_by_trials

    if not scores:
        return None, "no scores were stored for this audit"
    try:
        curve = epsilon_lb_by_trials(result, scores)
    except ValueError as exc:  # a stored result the prefixes cannot be audited for; the rest of the report stands
        return None, f"ε_LB against the number of trials could not be recomputed from the stored scores: {exc}"
    return curve, "the stored scores are not IN/OUT observations of a game this plot covers"


def _verify_records(run: RunDir, membership_dirs: list[Path]) -> None:
    """Refuses, before anything is written, a record that contradicts itself (claim against config
    and metrics, directory against id; :func:`dpaudit.app.records.verify_record_claim`): the pages
    would state an ε_UB the record's own run does not give, beside the one its jobs computed."""
    from dpaudit.app.records import verify_record_claim

    records = run.subdir("records")
    seen = set()
    for d in run.record_dirs():
        verify_record_claim(load_record(d), d)
        seen.add(d)
    for d in membership_dirs:  # a sub-model attacked (a PATE teacher, a DSSGD participant) is reported with its claim
        first = next(iter(sorted(d.glob("*.json"))), None)
        found = run.find_record_dir(load_membership_result(first).model_id) if first is not None else None
        if found is not None and found not in seen:
            verify_record_claim(load_record(found), found, top_level=found.parent == records)


def render_reports(run_dir: str | os.PathLike[str] | RunDir) -> ReportIndex:
    """Renders every stored result of ``run_dir`` and the index page.

    Args:
        run_dir: a run directory written by train / audit / attack / certify.

    Returns:
        The files written, per kind.

    Raises:
        ValueError: ``run_dir`` is not a directory, or a record in it contradicts itself (one
            line naming the field, before anything is written).
        NothingToRender: it holds no audit, membership, certify, PATE or inversion result.
    """
    from reports.audit import audit_section
    from reports.certified import load_certified_runs, render_certified
    from reports.compare import load_comparisons, render_compare
    from reports.inversion import INVERSION_REPORT_STEM, inversion_sections, inversion_summary, load_inversion_targets
    from reports.membership import membership_report_stem, membership_sections
    from reports.pate import load_pate_runs, pate_sections
    from reports.render import Section, write_index, write_report_files

    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    if not run.path.is_dir():
        raise v.invalid("run_dir", f"run_dir must be a directory, got {str(run.path)!r}")
    audit_dirs, membership_dirs, certify_runs = run.audit_dirs(), run.membership_dirs(), load_certified_runs(run)
    pate_runs = load_pate_runs(run) if run.subdir("records").is_dir() else []
    inversion_targets = load_inversion_targets(run)
    comparisons = load_comparisons(run)
    if not audit_dirs and not membership_dirs and not certify_runs and not pate_runs and not inversion_targets and not comparisons:
        raise NothingToRender(
            f"run_dir {str(run.path)!r} holds no audit, membership-attack, certify or PATE results and no model-inversion results to render "
            "(run dpaudit audit, attack membership, attack inversion, certify or train --defense pate into it first)"
        )
    _verify_records(run, membership_dirs)
    out = run.reports_dir()
    out.mkdir(parents=True, exist_ok=True)
    groups: list[tuple[str, list[tuple[str, str]]]] = []
    violations: list[str] = []
    tables: list[Path] = []

    compared: list[Path] = []
    for result in comparisons:
        written, files = render_compare(run, result)
        compared.append(written.html)
        tables += files
        violations += [f"compare {result.name} / {r.label}: {r.verdict}: {'; '.join(r.findings)}" for r in result.violations]
    if compared:
        groups.append(("Defenses compared under attack", [(f"{r.name}: {len(r.rows)} defense settings on {r.dataset}", p.name) for r, p in zip(comparisons, compared)]))

    from dpaudit.results import load_audit_result

    audits: list[Path] = []
    for d in audit_dirs:
        result = load_audit_result(d)
        if result.violation:
            violations.append(f"audit {d.name}: epsilon_lb {result.epsilon_lb:.4g} > epsilon_ub {result.epsilon_ub:.4g} ({result.accountant})")
        scores = load_npz(d / "scores.npz") if (d / "scores.npz").is_file() else {}
        curve, why = _trials_curve(result, scores)
        section: Section = audit_section(result, scores, title="Bounds and evidence", trials_curve=curve, no_trials_curve=why)
        page = write_report_files(out, [section], title=f"Audit {d.name}", stem=f"audit-{d.name}", kind="audit").html
        audits.append(page)
    if audits:
        groups.append(("Audits", [(p.stem.removeprefix("audit-"), p.name) for p in audits]))

    members: list[Path] = []
    for d in membership_dirs:
        results = [load_membership_result(p) for p in sorted(d.glob("*.json"))]
        if not results:
            continue
        model_id = results[0].model_id
        # A sub-model (a PATE teacher, a DSSGD participant) is a record in a cache under records/.
        found = run.find_record_dir(model_id)
        epsilons, description = None, ""
        if found is not None:
            record = load_record(found)
            delta = float(record.metrics.get("delta") or record.config.get("delta") or 1e-5)
            epsilons, description = record.claim.epsilons(delta=delta), record.claim.statement()
        else:
            delta = 1e-5
        page = write_report_files(
            out,
            membership_sections(results, epsilons=epsilons, claim_description=description, delta=delta),
            title=f"Membership inference against {model_id}",
            stem=membership_report_stem(model_id),
            kind="membership",
        ).html
        members.append(page)
    if members:
        groups.append(("Membership inference", [(p.stem.removeprefix("membership-"), p.name) for p in members]))

    certified: list[Path] = []
    for cr in certify_runs:
        if cr.soundness_violations:
            violations.append(f"certify {cr.summary['model_id']}: {len(cr.soundness_violations)} soundness violation(s)")
    if certify_runs:
        written, certified_tables = render_certified(run, runs=certify_runs)
        tables += certified_tables
        certified.append(written.html)
        groups.append(("Certified robustness", [(f"certified vs conventional accuracy ({len(certify_runs)} model(s))", written.html.name)]))

    pate: list[Path] = []
    if pate_runs:
        pate.append(write_report_files(out, pate_sections(pate_runs), title="PATE students", stem="pate", kind="report").html)
        groups.append(("PATE", [(f"PATE students ({len(pate_runs)})", pate[0].name)]))

    inversion: list[Path] = []
    if inversion_targets:
        inversion.append(write_report_files(out, inversion_sections(inversion_targets), title="Model inversion", stem=INVERSION_REPORT_STEM, kind="inversion").html)
        counts = inversion_summary(inversion_targets)
        groups.append(("Model inversion", [(f"model inversion ({', '.join(counts['attacks'])}) against {counts['targets']} target(s)", inversion[0].name)]))

    index_html, index_md = write_index(out, title=f"Reports of {run.path.name}", groups=groups, files=[p.name for p in tables])
    return ReportIndex(
        index_html=index_html,
        index_md=index_md,
        audits=tuple(audits),
        membership=tuple(members),
        certified=tuple(certified),
        pate=tuple(pate),
        inversion=tuple(inversion),
        compare=tuple(compared),
        tables=tuple(tables),
        violations=tuple(violations),
    )
