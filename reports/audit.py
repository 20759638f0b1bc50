"""Audit figures and the audit report section: ε_LB beside ε_UB, with the evidence.

Plots follow docs/architecture.md ("Style"): each takes results (and an optional matplotlib axes) and
returns a figure; saving is left to :mod:`reports.render`. Shown:

* a table of ε_LB (method, bound, confidence, δ, observation counts) beside ε_UB under every
  accountant, with a violation banner when ε_LB > ε_UB;
* IN/OUT score histograms;
* the ROC curve on log–log axes (Carlini et al. 2022, "Membership Inference Attacks From
  First Principles", §III: the low-FPR regime is what privacy is about);
* for one-run audits, ε_LB against the number of guesses (Steinke, Nasr & Jagielski 2023, Fig. 2);
* ε_LB and its ceiling (the largest ε_LB the design could show: a perfect attack on the same
  counts) against the number of trials or canaries, recomputed on prefixes of the stored scores
  by :func:`dpaudit.privacy.audit_trials.epsilon_lb_by_trials` and handed in as an
  :class:`~dpaudit.results.audit.EpsilonByTrials`: ε_LB far below a high ceiling is a weak
  attack; ε_LB at a low ceiling is a design that needs more trials;
* one sentence splitting the gap ε_UB − ε_LB into what the audit's size allows (the ceiling)
  and what the attack leaves, with what the last-iterate ε of Steinke et al. 2024 suggests
  beside it, worded as the linear-loss heuristic it is (:func:`gap_sentence`, from
  :attr:`~dpaudit.results.audit.AuditResult.gap`).

Bounds are written their safe way (:mod:`dpaudit.results.numbers`): ε_UB rounded up, ε_LB and
the ceiling (itself the ε_LB of a perfect attack) rounded down.

Torch-free: it renders from a stored :class:`~dpaudit.results.audit.AuditResult` and ``scores.npz``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np

from dpaudit.privacy.audit_stats import auc_interval, auc_score, clopper_pearson_interval
from dpaudit.results.audit import AuditResult, EpsilonByTrials, load_audit_result
from dpaudit.results.audit_details import (
    AuditDetails,
    OneRunDetails,
    ScoresDetails,
    WhiteBoxDetails,
)
from dpaudit.results.estimate_shown import shown_estimate
from dpaudit.results.numbers import (
    fmt_lower_bound,
    fmt_percent_lower_bound,
    fmt_percent_upper_bound,
    fmt_rate,
    fmt_upper_bound,
)
from dpaudit.results.verdicts import Verdict, audit_verdict
from dpaudit.store import RunDir, load_npz
from reports.audit_figures import (
    LAST_ITERATE_MEANING,
    bounds_caption,
    bounds_figure,
    ceiling_figure,
    guess_curve_figure,
    roc_figure,
    score_histogram,
    split_scores,
)
from reports.figures import eps_text
from reports.kinds import REPORT_KINDS, Page, ReportKind
from reports.numbers import epsilon_lb_cell, epsilon_ub_cell
from reports.render import Figure, Items, Section, Table, Text, accountant_table, format_number, write_report_files
from reports.verdict_box import verdict_section, with_status

__all__ = [
    "score_histogram",
    "roc_figure",
    "guess_curve_figure",
    "ceiling_figure",
    "bounds_figure",
    "bounds_caption",
    "bounds_table",
    "rates_table",
    "gap_sentence",
    "audit_section",
    "split_scores",
    "StoredAudit",
    "load_audits",
    "audit_page",
]


def _estimate_rows(result: AuditResult) -> list[list[Any]]:
    """The ε point estimate, only with its confidence interval and only when that interval excludes 0.

    The rule is :func:`dpaudit.results.estimate_shown.shown_estimate`, which ``dpaudit audit``'s
    terminal reads too.
    """
    shown = shown_estimate(result)
    if not shown.exists:
        return []
    if shown.value is None:
        if shown.low is None:
            return [["ε estimate (not a bound)", "not shown", shown.reason]]
        return [
            [
                "ε estimate (not a bound)",
                "not shown",
                f"its {shown.level:.0%} interval [0, {eps_text(shown.high)}] includes 0: "
                "no evidence of leakage beyond chance",
            ]
        ]
    return [
        [
            "ε estimate (not a bound)",
            shown.value,
            f"{shown.level:.0%} interval [{eps_text(shown.low)}, {eps_text(shown.high)}] at the estimate's own "
            f"threshold; {shown.kind}",
        ]
    ]


def bounds_table(result: AuditResult) -> Table:
    """ε_LB (with method, bound, confidence, δ and counts) beside ε_UB under each accountant."""
    rows: list[list[Any]] = [
        [
            "ε_LB (empirical lower bound)",
            epsilon_lb_cell(result.epsilon_lb),
            f"{result.method} / {result.bound} / {result.threshold_strategy}, "
            f"{result.confidence:.0%} confidence, δ={result.delta:g}, "
            f"{result.num_in} IN / {result.num_out} OUT"
            + (f", group size {result.group_size}" if result.group_size > 1 else ""),
        ]
    ]
    if result.ceiling is not None:
        rows.append(
            [
                "ceiling (largest ε_LB this design can show)",
                epsilon_lb_cell(result.ceiling),
                "the same counts, Bonferroni factor, confidence, δ and bound with a "
                "perfect attack; more trials raise it",
            ]
        )
    else:
        rows.append(
            [
                "ceiling (largest ε_LB this design can show)",
                None,
                "not recorded: this result was stored before ceilings were reported",
            ]
        )
    rows.append(
        [
            f"ε_UB (tightest accountant: {result.accountant})",
            epsilon_ub_cell(result.epsilon_ub),
            result.claim_description,
        ]
    )
    if result.epsilon_last_iterate is not None:
        rows.append(
            [
                f"last-iterate ε ({LAST_ITERATE_MEANING})",
                result.epsilon_last_iterate,
                "the final model's ε if the losses were linear (Steinke et al. 2024), "
                "so a lower bound on its worst case over losses; "
                "ε_UB minus it is what this heuristic suggests an audit of the final model cannot see",
            ]
        )
    rows += _estimate_rows(result)
    scored = result.details if isinstance(result.details, WhiteBoxDetails) else None
    comp = None if scored is None else scored.composed_estimate
    if comp:
        rows.append(
            [
                "full-run ε estimate (not a bound)",
                comp.epsilon,
                f"CLT composition of μ_LB over T={comp.num_steps} steps at q={comp.sampling_rate:g}",
            ]
        )
    full = None if scored is None else scored.full_run_claim
    if full:
        rows.append([f"full-run ε_UB {full.accountant} (context)", epsilon_ub_cell(full.epsilon_ub), full.description])
        if full.epsilon_last_iterate is not None:
            rows.append(
                [
                    "full-run last-iterate ε (context)",
                    full.epsilon_last_iterate,
                    f"the run's final model (Steinke et al. 2024): {LAST_ITERATE_MEANING}",
                ]
            )
    rows.append(["tightness ε_LB / ε_UB", result.tightness, ""])
    return Table(
        columns=["quantity", "ε", "how"],
        rows=rows,
        caption=f"δ = {result.delta:g}; confidence {result.confidence:.0%}.",
    )


def gap_sentence(result: AuditResult) -> str:
    """One sentence splitting ε_UB − ε_LB (:attr:`AuditResult.gap`): the design's share, the attack's, and what the
    last-iterate heuristic suggests.

    The design's share is what the ceiling cannot reach, the attack's the rest below it; both
    rest on bounds alone. The last-iterate ε of Steinke et al. (2024, "The Last Iterate
    Advantage", Theorem 1 / Heuristic 1) is the final model's exact ε for linear losses and a
    heuristic for others, so ε_UB minus it is worded as what that heuristic suggests, never as an
    established share, and it caps nothing. ε_UB is written rounded up, ε_LB and the ceiling
    rounded down (:mod:`dpaudit.results.numbers`); the shares, differences of bounds, to nearest.
    """
    g, f = result.gap, format_number
    ub_text, lb_text = fmt_upper_bound(result.epsilon_ub), fmt_lower_bound(result.epsilon_lb)
    if math.isinf(result.epsilon_ub):
        return "No gap to split: the claim guarantees nothing (ε_UB = ∞)."
    if result.violation:
        return f"No gap to split: ε_LB = {lb_text} exceeds ε_UB = {ub_text}, a violation."
    total = f"Gap ε_UB − ε_LB = {f(result.epsilon_ub - result.epsilon_lb)} (ε_UB = {ub_text}, ε_LB = {lb_text})"
    if result.ceiling is None:  # stored before ceilings: the design's share is unknown, not 0
        split = (
            "what the audit's size allows is not separated from what the attack "
            f"leaves (its ceiling was not recorded), {f(g['attack'])} in all"
        )
    else:
        split = (
            f"{f(g['design'])} is what the audit's size allows (its ceiling is "
            f"{fmt_lower_bound(result.ceiling)}) and {f(g['attack'])} is what the "
            "attack leaves"
        )
    li = result.epsilon_last_iterate
    if li is None:
        heuristic = " No last-iterate ε is defined for this claim (not DP-SGD) or it was not recorded."
    elif result.threat_model == "white-box":
        heuristic = " The threat model hides nothing: the white-box game observes every step, and ε_UB is one step's."
    else:
        heuristic = (
            f" The last-iterate ε of Steinke et al. 2024 is {f(li)} ({LAST_ITERATE_MEANING}): "
            "if this training's losses behaved like linear ones, "
            f"{f(g['last_iterate_heuristic'])} of ε_UB would be out of sight of an "
            "attack on the final model alone; "
            "that is what the heuristic suggests, not an established share, and it caps nothing."
        )
        if result.epsilon_lb > li:
            heuristic += (
                f" ε_LB exceeds the last-iterate ε by {f(result.epsilon_lb - li)}: this "
                "training's final model leaks more than a linear loss would."
            )
    return f"{total}: {split}.{heuristic}"


def _covered_lines(details: AuditDetails) -> list[str]:
    """What the fingerprints cover: the local modules the user's code imports, the dataset's files."""
    lines = []
    for key, flag in (("train_fn", "--train-fn"), ("model_fn", "--model-fn")):
        modules, unresolved = details.covered_modules(key)
        if modules:
            lines.append(
                f"{flag} imports, covered by its fingerprint: "
                + "; ".join(f"{file} {sha[:16]}" for _, (file, sha) in sorted(modules.items()))
            )
        if unresolved:
            lines.append(f"{flag} imports not found, not covered: {', '.join(unresolved)}")
    files = details.dataset_files
    if files:
        lines.append(
            "dataset files (MD5, reuse is keyed on them): "
            + "; ".join(f"{f} {str(md5)[:16]}" for f, md5 in sorted(files.items()))
        )
    return lines


def _evidence_lines(result: AuditResult) -> list[str]:
    """What the audit was: threat model, game, bound and its assumption, canary, start, score, fingerprints,
    coverage."""
    lines = [
        f"threat model: {result.threat_model}; game: {result.method}; bound: "
        f"{result.bound} ({result.threshold_strategy})",
        f"assumption of the bound: {result.assumption}"
        + (
            ""
            if result.assumption.startswith("none")
            else " — epsilon_lb is a lower bound only for mechanisms with this trade-off curve"
        ),
    ]
    if result.method == "white-box":
        lines.append(
            "compared claim: one un-sampled Gaussian step — the auditor inserts the "
            "Dirac gradient canary itself, so whenever it is IN it is certainly in "
            "the lot; each step is one observation of that mechanism"
        )
        canary = result.details.canary_coordinate
        if canary:
            lines.append(
                f"canary coordinate: {canary.parameter}[{canary.index}], magnitude "
                f"{format_number(canary.magnitude)}; {canary.reason}"
            )
    elif result.details.canary_name is not None:
        lines.append(
            f"canary: {result.details.canary_name}"
            + (f" × {result.group_size} copies" if result.group_size and result.group_size > 1 else "")
        )
    if result.method == "multi-run":
        # Where the trainings started decides how strong the game can be (Annamalai & De Cristofaro 2024).
        if result.details.init == "worst-case":
            lines.append(
                "start: worst-case: every training, IN and OUT, began from the model "
                "pre-trained non-privately on records that are not members (Annamalai & "
                "De Cristofaro 2024)"
            )
        else:
            lines.append("start: the trainer's own seeded initialisation (random)")
    lines.append(f"score: {result.details.score or 'n/a'}")
    # What the stored trials were keyed on: a rerun reuses them only when these match.
    prints = {k: val[:16] for k, val in result.details.fingerprints.items()}
    if prints:
        lines.append(
            "fingerprints (SHA-256, reuse is keyed on them): "
            + "; ".join(f"{k} {val}" for k, val in sorted(prints.items()))
        )
    lines += _covered_lines(result.details)
    lines.append(
        "an ε estimate is a point estimate, never a bound: it is shown only "
        "with its confidence interval, and only when that interval excludes 0; "
        "ε_LB is the bound"
    )
    return lines


#: Confidence of the intervals on the page's estimated rates (two-sided; the ε_LB keeps its own).
RATE_CONFIDENCE = 0.95


def _rate_row(what: str, successes: int, trials: int, how: str) -> list[str]:
    """A rate with its counts and two-sided Clopper–Pearson interval (ends rounded outwards)."""
    low, high = clopper_pearson_interval(successes, trials, confidence=RATE_CONFIDENCE)
    return [
        what,
        fmt_rate(successes, trials),
        f"[{fmt_percent_lower_bound(low)}, {fmt_percent_upper_bound(high)}]",
        how,
    ]


def rates_table(result: AuditResult, in_scores: np.ndarray, out_scores: np.ndarray) -> Table | None:
    """Every rate the audit estimated, each with its counts and a 95 % interval (``None`` when it stored none).

    TPR and FPR at the threshold the bound used (Clopper–Pearson on the bounding counts), a one-run
    audit's share of correct guesses (Clopper–Pearson), and the AUC of the stored scores (a
    stratified bootstrap: an AUC has no exact interval).
    """
    rows: list[list[str]] = []
    d = result.details
    if isinstance(d, ScoresDetails) and d.bounding_num_in > 0 and d.bounding_num_out > 0:
        at = "at the bound's threshold" + (f" {format_number(d.threshold)}" if d.threshold is not None else "")
        rows.append(_rate_row("TPR (IN guessed IN)", d.true_positives, d.bounding_num_in, f"{at}; Clopper–Pearson"))
        rows.append(_rate_row("FPR (OUT guessed IN)", d.false_positives, d.bounding_num_out, f"{at}; Clopper–Pearson"))
    if isinstance(d, OneRunDetails) and d.num_guesses > 0:
        rows.append(
            _rate_row(
                "correct guesses",
                d.num_correct,
                d.num_guesses,
                f"of the {d.num_guesses} canaries guessed; Clopper–Pearson",
            )
        )
    if in_scores.size and out_scores.size:
        auc = auc_score(in_scores, out_scores)
        low, high = auc_interval(in_scores, out_scores, confidence=RATE_CONFIDENCE)
        rows.append(
            [
                "AUC",
                f"{auc:.3f} ({in_scores.size} IN / {out_scores.size} OUT)",
                f"[{low:.3f}, {high:.3f}]",
                "area under the ROC of the stored scores; stratified bootstrap, 1,000 resamples",
            ]
        )
    if not rows:
        return None
    return Table(
        columns=["rate", "estimate (counts)", f"{RATE_CONFIDENCE:.0%} interval", "how"],
        rows=rows,
        caption=(
            f"Estimated rates with two-sided {RATE_CONFIDENCE:.0%} intervals: a rate on a few hundred "
            "observations moves by several points. They describe the attack; the bound (ε_LB) pays for "
            "its own uncertainty separately."
        ),
    )


def _ceiling_caption(result: AuditResult, unit: str) -> str:
    """The ceiling plot's caption; for one-run audits, why the ceiling can fall as canaries are added."""
    text = (
        "ε_LB with ε_UB (top) and, on a scale of its own, its ceiling (bottom: "
        f"a perfect attack on the same design) against the number of {unit}: "
        "each point audits the first n observations as the full audit did."
    )
    if result.method == "one-run":
        text += (
            " The ceiling need not rise with n: each prefix pays a Bonferroni "
            "factor over its own guess counts (the audit's counts scaled to the "
            "prefix, "
            "equal ones merged, so a longer prefix can pay for more of them), and a "
            "prefix's IN/OUT split is random, so a perfect attack that guesses k "
            "canaries OUT among fewer than k OUT ones must get some wrong. Both change from one prefix to the next."
        )
    return text


def audit_section(
    result: AuditResult,
    scores: Mapping[str, np.ndarray] | None = None,
    *,
    title: str = "Audit",
    trials_curve: EpsilonByTrials | None = None,
    no_trials_curve: str = "no IN/OUT scores were stored for this audit",
) -> Section:
    """The report section of one audit: bounds, ε per accountant, evidence, figures (the verdict box is
    :func:`audit_page`'s).

    Args:
        result: the stored audit result.
        scores: its ``scores.npz``, if stored.
        title: the section title.
        trials_curve: ε_LB and the ceiling on prefixes of the scores (computed by the caller).
        no_trials_curve: what the report says in place of that plot when it is ``None``.
    """
    # The verdict (violation / no violation / inconclusive) is the page's box: audit_verdict, drawn by audit_page.
    blocks: list[Any] = []
    blocks.append(Text(text=gap_sentence(result)))
    blocks.append(bounds_table(result))
    blocks.append(
        Figure(
            figure=bounds_figure(result),
            name="bounds",
            caption="The audit on one line; the bars are the gap between ε_LB and ε_UB. " + bounds_caption(result),
            empty="no finite ε_UB and no ceiling to set ε_LB against (the table above gives it)",
        )
    )
    epsilons = dict(result.epsilon_ub_by_accountant) or (
        {result.accountant: result.epsilon_ub} if math.isfinite(result.epsilon_ub) else {}
    )
    blocks.append(
        accountant_table(epsilons, delta=result.delta, description=result.claim_description, compared=result.accountant)
    )
    blocks.append(Items(items=_evidence_lines(result)))
    s_in, s_out = split_scores(scores) if scores else (np.zeros(0), np.zeros(0))
    drawable = bool(s_in.size and s_out.size)
    if (rates := rates_table(result, s_in, s_out)) is not None:
        blocks.append(rates)
    why = "no IN/OUT scores were stored for this audit" if not scores else "one of the IN/OUT score sets is empty"
    blocks.append(
        Figure(
            figure=score_histogram(s_in, s_out) if drawable else None,
            name="scores",
            caption="IN and OUT scores (higher = IN)",
            empty=why,
        )
    )
    blocks.append(
        Figure(
            figure=roc_figure(s_in, s_out) if drawable else None,
            name="roc",
            caption="ROC of the threshold test, log–log axes; the AUC in the legend with its 95% bootstrap "
            "interval (the rates table gives the counts)",
            empty=why,
        )
    )
    blocks.append(
        Figure(
            figure=ceiling_figure(trials_curve, result) if trials_curve is not None else None,
            name="ceiling",
            caption=_ceiling_caption(result, trials_curve.unit if trials_curve else "observations"),
            empty=no_trials_curve,
        )
    )
    if result.method == "one-run":
        blocks.append(
            Figure(
                figure=guess_curve_figure(result)
                if isinstance(result.details, OneRunDetails) and result.details.guess_curve
                else None,
                name="guesses",
                caption=(
                    "One-run ε_LB against the number of guesses r: each point is a bound on "
                    "its own, at the stated confidence for that r alone; "
                    "the curve's highest point is not a bound (choosing it needs the "
                    "Bonferroni factor the headline ε_LB pays), so a point above ε_UB is no "
                    "violation"
                ),
                empty="the audit stored no guess curve",
            )
        )
    return Section(title=title, blocks=blocks)


@dataclass(frozen=True, kw_only=True)
class StoredAudit:
    """One audit of a run directory, as its page shows it.

    Attributes:
        name: the audit's directory name.
        result: its stored result.
        scores: its ``scores.npz`` (empty when none was stored).
        trials_curve: ε_LB and the ceiling on prefixes of the scores, or ``None``.
        no_trials_curve: why there is no such curve, for the page.
    """

    name: str
    result: AuditResult
    scores: Mapping[str, np.ndarray] = field(default_factory=dict)
    trials_curve: EpsilonByTrials | None = None
    no_trials_curve: str = "no scores were stored for this audit"


def _trials_curve(result: AuditResult, scores: Mapping[str, np.ndarray]) -> tuple[EpsilonByTrials | None, str]:
    """ε_LB and the ceiling on prefixes of the stored scores (the core computes; the report draws)."""
    from dpaudit.privacy.audit_trials import epsilon_lb_by_trials

    if not scores:
        return None, "no scores were stored for this audit"
    try:
        curve = epsilon_lb_by_trials(result, scores)
    except ValueError as exc:  # a stored result the prefixes cannot be audited for; the rest of the report stands
        return None, f"ε_LB against the number of trials could not be recomputed from the stored scores: {exc}"
    return curve, "the stored scores are not IN/OUT observations of a game this plot covers"


def load_audits(run: RunDir) -> list[StoredAudit]:
    """Every finished audit of the run, by name, with its scores and its ε_LB-against-trials curve."""
    audits = []
    for d in run.audit_dirs():
        result = load_audit_result(d)
        scores = load_npz(d / "scores.npz") if (d / "scores.npz").is_file() else {}
        curve, why = _trials_curve(result, scores)
        audits.append(StoredAudit(name=d.name, result=result, scores=scores, trials_curve=curve, no_trials_curve=why))
    return audits


def stored_audit_verdict(audit: StoredAudit) -> Verdict:
    """The audit page's verdict: :func:`~dpaudit.results.verdicts.audit_verdict` of the stored result."""
    return audit_verdict(audit.result)


def audit_page(audit: StoredAudit, out: Path) -> Page:
    """Writes ``audit-<name>.{html,md}`` and its figures into ``out``."""
    result = audit.result
    section = audit_section(
        result,
        audit.scores,
        title="Bounds and evidence",
        trials_curve=audit.trials_curve,
        no_trials_curve=audit.no_trials_curve,
    )
    sections = [verdict_section(stored_audit_verdict(audit)), section]
    page = write_report_files(out, sections, title=f"Audit {audit.name}", stem=f"audit-{audit.name}", kind="audit").html
    violations = (
        (
            f"audit {audit.name}: epsilon_lb {fmt_lower_bound(result.epsilon_lb, 4)} "
            f"> epsilon_ub {fmt_upper_bound(result.epsilon_ub, 4)} "
            f"({result.accountant})",
        )
        if result.violation
        else ()
    )
    return Page(html=page, link=with_status(audit.name, sections), violations=violations)


REPORT_KINDS.register(
    ReportKind(
        name="audits", group="Audits", order=20, load=load_audits, verdict=stored_audit_verdict, render=audit_page
    )
)
