"""The comparison report's defense × measure matrix: its cells, its tables and its CSV.

What :mod:`reports.compare` shows as tables, kept apart from its figures and page assembly: one
row per defense setting with the verdict, accuracy, ε_UB (tightest, and per accountant), ε_LB,
the strongest membership attack's measures beside the DP ceiling, robust and certified
accuracy, and the links to each row's own reports. :func:`matrix_rows` is the one source of the
cells, so the HTML tables and the CSV never disagree. Torch-free, like every report module: it
reads a stored :class:`~dpaudit.results.comparison.ComparisonResult` and computes nothing new.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

from dpaudit.privacy.audit_stats import advantage_ceiling
from dpaudit.results.comparison import ComparisonResult, ComparisonRow, PooledMeasures
from dpaudit.results.membership import min_non_members
from reports.numbers import (
    Shown,
    epsilon_cell,
    epsilon_lb_cell,
    epsilon_ub_cell,
    fmt_percent,
    fmt_percent_upper_bound,
    fmt_rate,
    fmt_upper_bound,
    percent_cell,
    percent_lb_cell,
    percent_ub_cell,
)
from reports.render import Link, Table

#: The matrix's column of the last-iterate ε (Steinke et al. 2024): a heuristic, never a cap or an upper bound.
LAST_ITERATE_COLUMN = "last-iterate ε (heuristic)"
#: The classifier the certified columns are about, and its accuracy without attack: certified
#: accuracy is read against this, never against "test acc." (the record's own prediction rule).
CERTIFIED_RULE_COLUMN = "certified classifier"
CERTIFIED_ACCURACY_COLUMN = "certified classifier: accuracy"
#: What a comparison stored before the certified classifier was recorded says about it.
NOT_RECORDED = "not recorded (compared before it was stored)"

__all__ = [
    "CERTIFIED_ACCURACY_COLUMN",
    "CERTIFIED_RULE_COLUMN",
    "CEILING_COLUMN",
    "LAST_ITERATE_COLUMN",
    "matrix_rows",
]

_DASH = "—"


def _tpr(m: PooledMeasures | None, fpr: str) -> Any:
    """A TPR cell: the rate, or why the non-members cannot resolve it (never a bare dash)."""
    if m is None:
        return _DASH
    if fpr in m.tpr_at_fpr and m.tpr_at_fpr[fpr] is None:
        return f"n/a: needs ≥ {min_non_members(float(fpr))} non-members"
    tpr, members = m.tpr_at_fpr.get(fpr), m.num_members
    if isinstance(tpr, (int, float)) and isinstance(members, int) and members > 0:
        # A share of the members, with its counts; the stored rate stays the cell's value (the CSV).
        return Shown(float(tpr), fmt_rate(round(float(tpr) * members), members))
    # A result stored without its member count: the rate alone, still a percentage like every rate of the page.
    return _pct(tpr)


def _pct(x: Any, cell: Any = percent_cell) -> Any:
    """An accuracy as a percentage (its value kept for the CSV), missing as an em dash; ``cell`` rounds a bound its safe
    way."""
    return cell(float(x)) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else _num(x)


def _points(x: Any) -> Any:
    """A difference of accuracies (the accuracy loss) in percentage points: 0.05 → "5.0 pp" (value kept for the CSV).

    The page writes every rate as a percentage; a loss written 0.05 beside an accuracy of 95.0% mixes the two.
    """
    if not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x):
        return _num(x)
    return Shown(float(x), f"{fmt_percent(float(x)).rstrip('%')}\u00a0pp")  # no break between number and unit


def _share(x: Any) -> Any:
    """A rate that is no accuracy (an advantage TPR − FPR) as a percentage, like every rate of the page."""
    return _pct(x) if x is not None else _DASH


def _num(x: Any, digits: int = 3) -> Any:
    """A cell: a number rounded, ∞ kept, anything missing as an em dash (never NaN or None)."""
    if x is None:
        return _DASH
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        x = float(x)
        if math.isnan(x):
            return _DASH
        if math.isinf(x):
            return "∞"
        return round(x, digits)
    return x


def _strongest(row: ComparisonRow) -> tuple[str | None, PooledMeasures | None]:
    """The membership attack with the largest AUC (the row's strongest), and its measures."""
    if not row.membership:
        return None, None
    name = max(row.membership, key=lambda a: row.membership[a].auc)
    return name, row.membership[name]


#: The advantage ceiling's column: the tight (ε, δ) bound, not Yeom et al.'s min(e^ε − 1, 1), which is 1 for
#: every ε ≥ ln 2 and so separates no setting of a grid.
CEILING_COLUMN = "advantage ceiling (e^ε−1+2δ)/(e^ε+1)"


def _ceiling(eps: float, delta: float) -> float:
    """The largest membership advantage an (ε, δ)-DP model allows (see
    :func:`~dpaudit.privacy.audit_stats.advantage_ceiling`)."""
    return advantage_ceiling(eps, delta=delta)


def _certifies(result: ComparisonResult) -> bool:
    """Some row certifies: the matrix then names the certified classifier and gives its accuracy."""
    return any(r.certified_accuracy for r in result.rows)


def _certified_classifier(row: ComparisonRow) -> list[Any]:
    """The certified classifier's name and accuracy without attack, the cells before "certified @ r"."""
    if not row.certified_accuracy:
        return ["does not certify", "does not certify"]
    rule = row.certified_prediction_rule or NOT_RECORDED
    accuracy = (
        NOT_RECORDED if row.certified_conventional_accuracy is None else _pct(row.certified_conventional_accuracy)
    )
    return [rule, accuracy]


def matrix_rows(result: ComparisonResult) -> tuple[list[str], list[list[Any]]]:
    """The defense × measure matrix as columns and cells (shared by the HTML table and the CSV).

    Where a row certifies, the certified accuracies follow the certified classifier's name and
    its own accuracy without attack: "test acc." is the record's prediction rule, which for a
    noise-layer defense or smoothing is another classifier than the one certified.
    """
    fprs = [f"{f:g}" for f in result.fprs]
    certifies = _certifies(result)
    columns = [
        "setting",
        "defense",
        "test acc.",
        "± (repeats)",
        "acc. loss",
        "ε_UB (tightest)",
        LAST_ITERATE_COLUMN,
        "ε_LB",
        "best attack",
        "strongest MIA",
        "AUC",
    ]
    columns += [f"TPR @ {float(f):.1%} FPR" for f in fprs]
    columns += ["advantage", CEILING_COLUMN, "inversion top-1"]
    columns += [f"robust @ {r:g}" for r in result.radii]
    # Only a grid with a certifying row has the two columns: one without keeps its matrix as it was.
    columns += [CERTIFIED_RULE_COLUMN, CERTIFIED_ACCURACY_COLUMN] if certifies else []
    columns += [f"certified @ {r:g}" for r in result.radii] + ["verdict"]
    rows = []
    for r in result.rows:
        attack, m = _strongest(r)
        ub = r.epsilon_ub_best
        # Bounds print their safe way: ε_UB and the advantage ceiling up, ε_LB and certified accuracy down.
        ub_cell: Any = epsilon_ub_cell(ub) if r.epsilon_ub else "∞ (no DP claim)"
        if r.epsilon_ub and r.epsilon_ub_data_dependent:
            ub_cell = f"{fmt_upper_bound(ub)} (data-dependent)"
        cells: list[Any] = [
            r.label,
            r.defense,
            _pct(r.test_accuracy),
            _points(r.test_accuracy_std),
            _points(r.accuracy_loss),
            ub_cell,
            epsilon_cell(r.epsilon_last_iterate),
            epsilon_lb_cell(r.epsilon_lb),
            r.best_attack or _DASH,
        ]
        cells += [attack or _DASH, _num(None if m is None else m.auc)]
        cells += [_tpr(m, f) for f in fprs]
        cells += [
            _share(None if m is None else m.advantage),
            # The ceiling is an upper bound on a share: a percentage rounded up, like the advantage beside it.
            Shown(_ceiling(ub, result.delta), fmt_percent_upper_bound(_ceiling(ub, result.delta)))
            if r.epsilon_ub
            else Shown(1.0, fmt_percent(1.0)),
            _num(r.inversion_top1),
        ]
        cells += [_pct(r.robust_accuracy.get(f"{x:g}"), percent_ub_cell) for x in result.radii]
        cells += _certified_classifier(r) if certifies else []
        cells += [
            _pct(r.certified_accuracy.get(f"{x:g}"), percent_lb_cell) if r.certified_accuracy else "does not certify"
            for x in result.radii
        ]
        cells.append(r.verdict)
        rows.append(cells)
    return columns, rows


def _csv(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(columns)
    for row in rows:
        w.writerow([c.text if isinstance(c, Link) else c for c in row])
    return buf.getvalue()


def _accountant_table(result: ComparisonResult) -> Table | None:
    names: list[str] = []
    for r in result.rows:
        names += [a for a in r.epsilon_ub if a not in names]
    if not names:
        return None
    rows = [
        [
            r.label,
            *(_DASH if r.epsilon_ub.get(a) is None else epsilon_ub_cell(r.epsilon_ub[a]) for a in names),
            "yes" if r.epsilon_ub_data_dependent else "no",
        ]
        for r in result.rows
        if r.epsilon_ub
    ]
    return Table(
        columns=["setting", *names, "data-dependent"],
        rows=rows,
        caption=f"ε_UB at δ = {result.delta:g} under every accountant that can analyse "
        "the row's claim (the same noise, four analyses).",
    )


def _counts(m: PooledMeasures | None) -> str:
    """The members / non-members a row's rates rest on (a dash for results stored before they were kept)."""
    if m is None or m.num_non_members is None:
        return _DASH
    return f"{m.num_members} / {m.num_non_members}"


#: A TPR cell the non-members cannot resolve, as the HTML tables show it (the CSV keeps the long form).
_NA = "n/a"
#: What a short "n/a" cell means, said once per table.
_NA_NOTE = "n/a: too few non-members to resolve that FPR (TPR at FPR f needs at least 1/f of them)."


def _unresolved(cell: Any) -> bool:
    """A cell with no value: missing, a dash, or an FPR the non-members cannot resolve."""
    return cell is None or cell == _DASH or (isinstance(cell, str) and cell.startswith("n/a"))


def _compact(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], droppable: Sequence[str]
) -> tuple[list[str], list[list[Any]], list[str]]:
    """The table as a page shows it: a ``droppable`` column no row has a value in is left out (its name
    returned, for the caption), and an unresolved TPR cell shrinks to "n/a" so that a row stays one line."""
    keep = [i for i, c in enumerate(columns) if c not in droppable or not all(_unresolved(r[i]) for r in rows)]
    dropped = [c for i, c in enumerate(columns) if i not in keep]
    cells = [[_NA if isinstance(r[i], str) and r[i].startswith("n/a") else r[i] for i in keep] for r in rows]
    return [columns[i] for i in keep], cells, dropped


def _dropped_note(dropped: Sequence[str]) -> str:
    if not dropped:
        return ""
    return f" Left out, as no row has a value there (the CSV keeps them): {', '.join(dropped)}."


def _membership_table(result: ComparisonResult) -> list[Table]:
    """The membership measures, population and most vulnerable samples in two tables that fit the page.

    Columns no row resolves (TPR at an FPR below what the non-members can resolve) are left out and
    named in the caption; an unresolved cell reads "n/a" (its reason, once, in the caption).
    """
    fprs = [f"{f:g}" for f in result.fprs]
    tpr_cols = [f"TPR @ {float(f):.1%}" for f in fprs]
    population, vulnerable = [], []
    for r in result.rows:
        for attack, m in r.membership.items():
            population.append(
                [
                    r.label,
                    attack,
                    _num(m.auc),
                    _share(m.advantage),
                    *(_tpr(m, f) for f in fprs),
                    epsilon_lb_cell(m.epsilon_lb),
                    _counts(m),
                ]
            )
            v = r.vulnerable.get(attack)
            if v is not None:
                vulnerable.append([r.label, attack, _num(v.auc), *(_tpr(v, f) for f in fprs), _counts(v)])
    if not population:
        return []
    cols, rows, dropped = _compact(
        ["setting", "attack", "AUC", "advantage", *tpr_cols, "ε_LB", "members / non-members"], population, tpr_cols
    )
    tables = [
        Table(
            columns=cols,
            rows=rows,
            caption=(
                "Every queried sample: mean over repeats; ε_LB is the largest over repeats. TPR as a share of the "
                f"members, with counts. {_NA_NOTE}{_dropped_note(dropped)}"
            ),
        )
    ]
    if vulnerable:
        cols, rows, dropped = _compact(
            ["setting", "attack", "AUC", *tpr_cols, "members / non-members"], vulnerable, tpr_cols
        )
        tables.append(
            Table(
                columns=cols,
                rows=rows,
                caption=(
                    f"The same measures on the {result.vulnerable_top_k} most vulnerable samples, ranked by how far "
                    "their IN and OUT shadow statistics lie apart — the shadows alone decide, never the target, so "
                    f"the subset's rates are honest. {_NA_NOTE}{_dropped_note(dropped)}"
                ),
            )
        )
    return tables


def _links_table(result: ComparisonResult) -> Table | None:
    rows = []
    for r in result.rows:
        if r.links:
            rows.append([r.label, ", ".join(r.model_ids), *[Link(text=k, href=h) for k, h in sorted(r.links.items())]])
    if not rows:
        return None
    width = max(len(x) for x in rows)
    rows = [x + [_DASH] * (width - len(x)) for x in rows]
    return Table(
        columns=["setting", "trained models", *[f"report {i + 1}" for i in range(width - 2)]],
        rows=rows,
        caption="The reports each row's numbers come from.",
    )


def _matrix_tables(result: ComparisonResult) -> list[Any]:
    """The defense × measure matrix as tables: privacy, then evasion and inversion, the drill-down links, ε_UB per
    accountant."""
    columns, rows = matrix_rows(result)
    # The matrix is wide: privacy columns in one table, evasion and inversion in a second (the
    # CSV has every column). Spread over repeats and the ceiling ride in the cells beside them.
    split = columns.index("inversion top-1")
    col = {c: i for i, c in enumerate(columns)}
    privacy_cols = [
        "setting",
        "test acc. (± sd)",
        "acc. loss",
        "ε_UB (tightest)",
        LAST_ITERATE_COLUMN,
        "ε_LB",
        "best attack",
        "strongest MIA",
        "AUC",
        *columns[col["AUC"] + 1 : col["advantage"]],
        "advantage (ceiling)",
    ]
    privacy_rows = []
    for r in rows:
        acc = r[col["test acc."]]
        sd = r[col["± (repeats)"]]
        privacy_rows.append(
            [
                r[0],
                f"{acc} (± {sd})" if isinstance(sd, float) and sd > 0 else acc,
                *(
                    r[col[c]]
                    for c in (
                        "acc. loss",
                        "ε_UB (tightest)",
                        LAST_ITERATE_COLUMN,
                        "ε_LB",
                        "best attack",
                        "strongest MIA",
                        "AUC",
                    )
                ),
                *r[col["AUC"] + 1 : col["advantage"]],
                f"{r[col['advantage']]} (≤ {r[col[CEILING_COLUMN]]})" if r[col["advantage"]] != _DASH else _DASH,
            ]
        )
    tpr_cols = list(columns[col["AUC"] + 1 : col["advantage"]])
    privacy_cols, privacy_rows, dropped = _compact(privacy_cols, privacy_rows, [*tpr_cols, LAST_ITERATE_COLUMN])
    na_note = f" {_NA_NOTE}" if any(c == _NA for r in privacy_rows for c in r) else ""
    attack_cols = ["setting", *columns[split:-1]]
    attack_rows = [[r[0], *r[split:-1]] for r in rows]
    attack_caption = (
        "Inversion: top-1 accuracy of an evaluation classifier on the "
        "reconstructions. Robust accuracy: the strongest evasion attack at each "
        "radius; certified where the defense certifies."
    )
    accuracy_note = ""
    if _certifies(result):
        # Certified accuracy is only read against the accuracy of the classifier it certifies.
        which = (
            " The certified columns are about the certified classifier, named in "
            "its column (for a noise layer the vote-count or expected-softmax "
            "argmax "
            "over the certification draws, for smoothing Cohen et al.'s CERTIFY "
            "with abstentions counted wrong); its accuracy without attack, on the "
            "same "
            "test subset, is given beside them, and certified accuracy at any "
            "radius is at most it. Test accuracy in the first table is the record's "
            "own "
            "prediction rule, a different classifier for the noise-layer defenses and smoothing."
        )
        attack_caption += which
        accuracy_note = (
            " Test acc. is the accuracy of each record's own prediction rule on the "
            "whole test set (for a noise-layer defense the argmax of the expected "
            "scores over "
            "its noise draws, for smoothing the base model on clean inputs), not of "
            "the classifier the certified columns describe: that one's accuracy is "
            "beside them."
        )
    return [
        Table(
            columns=privacy_cols,
            rows=privacy_rows,
            caption=(
                f"Mean over {len(result.rows[0].model_ids)} repeat(s). Accuracy loss is "
                f"against the non-private baseline ({result.baseline}). ε_LB is the best "
                "over every attack "
                f"and repeat, valid jointly at {result.confidence:.0%} (Bonferroni); "
                "Rates are percentages and the accuracy loss and spread percentage points (pp); "
                "membership attacks' ε_LB are Clopper–Pearson bounds, which assume "
                "nothing of the "
                "trade-off curve, and an audit's names its own assumption; the "
                "strongest MIA is the one with the largest AUC. Advantage = max over "
                "thresholds of TPR − FPR; "
                "an (ε, δ)-DP model's is at most (e^ε − 1 + 2δ)/(e^ε + 1), the tight bound of the "
                "hypothesis-testing view of DP (Kairouz et al. 2015), given in brackets; Yeom et al.'s "
                "e^ε − 1 reaches 1 at ε = ln 2 and would say nothing above it. The "
                "last-iterate ε (Steinke et al. 2024; DP-SGD claims, — for other "
                "defenses) is the final model's exact ε "
                "if the losses were linear, and a heuristic, not an upper bound, for "
                "other losses: ε_UB minus it is what that heuristic suggests releasing "
                "only the final "
                "model hides, not an established share. ε_UB and the advantage ceiling are rounded up, ε_LB down."
                f"{accuracy_note}{na_note}{_dropped_note(dropped)}"
            ),
        ),
        *(
            [
                Table(
                    columns=attack_cols,
                    rows=attack_rows,
                    caption=attack_caption,
                )
            ]
            if any(r.inversion_top1 is not None or r.robust_accuracy for r in result.rows)
            else []
        ),
        *([t] if (t := _links_table(result)) else []),
        *([t] if (t := _accountant_table(result)) else []),
    ]
