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
from dpaudit.results.record_accuracy import repeats_accuracy_estimate
from reports.numbers import (
    Shown,
    epsilon_cell,
    epsilon_lb_cell,
    epsilon_ub_cell,
    fmt_percent,
    fmt_percent_upper_bound,
    fmt_rate,
    fmt_upper_bound,
    interval_cell,
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
#: The classifier the robust columns are about (the one the evasion attacks ran against) and its accuracy on the
#: unperturbed examples: robust accuracy is read against this, never against another rule's accuracy.
ATTACKED_RULE_COLUMN = "attacked classifier"
ATTACKED_ACCURACY_COLUMN = "attacked classifier: clean accuracy"
#: What a comparison stored before the certified classifier was recorded says about it.
NOT_RECORDED = "not recorded (compared before it was stored)"

__all__ = [
    "ATTACKED_ACCURACY_COLUMN",
    "ATTACKED_RULE_COLUMN",
    "CERTIFIED_ACCURACY_COLUMN",
    "CERTIFIED_RULE_COLUMN",
    "CEILING_COLUMN",
    "LAST_ITERATE_COLUMN",
    "matrix_rows",
]

_DASH = "—"


def _tpr(m: PooledMeasures | None, fpr: str, *, repeats: int = 1) -> Any:
    """A TPR cell: the rate with its interval (its counts for one repeat), or why the non-members cannot resolve it
    (never a bare dash)."""
    if m is None:
        return _DASH
    if fpr in m.tpr_at_fpr and m.tpr_at_fpr[fpr] is None:
        return f"n/a: needs ≥ {min_non_members(float(fpr))} non-members"
    tpr, members = m.tpr_at_fpr.get(fpr), m.num_members
    if isinstance(tpr, (int, float)) and isinstance(members, int) and members > 0:
        # A share of the members, with its interval; the stored rate stays the cell's value (the CSV).
        estimate = repeats_accuracy_estimate(float(tpr), members, repeats=repeats)
        if estimate is not None:
            return interval_cell(estimate)
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


def _auc(m: PooledMeasures | None) -> Any:
    """An AUC cell with its bootstrap interval where the comparison stored one."""
    if m is None:
        return _DASH
    e = m.auc_estimate()
    return interval_cell(e, percent=False) if e is not None else _num(m.auc)


def _advantage(m: PooledMeasures | None) -> Any:
    """An advantage cell (a percentage) with its interval where the comparison stored one."""
    if m is None:
        return _DASH
    e = m.advantage_estimate()
    return interval_cell(e) if e is not None else _share(m.advantage)


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


def _accuracy(row: ComparisonRow, x: float | None, *, evaluated: bool, bound: Any = percent_cell) -> Any:
    """One of the row's accuracies with its interval and, for one repeat, its count; ``bound`` rounds it its safe way
    where the row stored no count to give an interval on (a comparison stored before they were kept)."""
    estimate = row.accuracy_estimate(x, evaluated=evaluated) if x is not None and math.isfinite(x) else None
    return interval_cell(estimate) if estimate is not None else _pct(x, bound)


def _certified_classifier(row: ComparisonRow) -> list[Any]:
    """The certified classifier's name and accuracy without attack, the cells before "certified @ r"."""
    if not row.certified_accuracy:
        return ["does not certify", "does not certify"]
    rule = row.certified_prediction_rule or NOT_RECORDED
    accuracy = (
        NOT_RECORDED
        if row.certified_conventional_accuracy is None
        else _accuracy(row, row.certified_conventional_accuracy, evaluated=True)
    )
    return [rule, accuracy]


def _inversion(row: ComparisonRow) -> Any:
    """The best inversion top-1 accuracy with its count and interval where the row recorded the classes inverted."""
    e = row.inversion_estimate()
    return interval_cell(e) if e is not None else _pct(row.inversion_top1)


def _attacked(result: ComparisonResult) -> bool:
    """Some row was attacked by evasion: the matrix then names the attacked classifier and gives its clean accuracy."""
    return any(r.robust_accuracy for r in result.rows)


def _attacked_classifier(row: ComparisonRow) -> list[Any]:
    """The attacked classifier's name and clean accuracy, the cells before "robust @ r"."""
    if not row.robust_accuracy:
        return [_DASH, _DASH]
    rule = row.attacked_prediction_rule or NOT_RECORDED
    accuracy = (
        NOT_RECORDED
        if row.attacked_clean_accuracy is None
        else _accuracy(row, row.attacked_clean_accuracy, evaluated=True)
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
    attacked = _attacked(result)
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
    columns += [ATTACKED_RULE_COLUMN, ATTACKED_ACCURACY_COLUMN] if attacked else []
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
            _accuracy(r, r.test_accuracy, evaluated=False),
            _points(r.test_accuracy_std),
            _points(r.accuracy_loss),
            ub_cell,
            epsilon_cell(r.epsilon_last_iterate),
            epsilon_lb_cell(r.epsilon_lb),
            r.best_attack or _DASH,
        ]
        repeats = max(1, len(r.model_ids))
        cells += [attack or _DASH, _auc(m)]
        cells += [_tpr(m, f, repeats=repeats) for f in fprs]
        cells += [
            _advantage(m),
            # The ceiling is an upper bound on a share: a percentage rounded up, like the advantage beside it.
            Shown(_ceiling(ub, result.delta), fmt_percent_upper_bound(_ceiling(ub, result.delta)))
            if r.epsilon_ub
            else Shown(1.0, fmt_percent(1.0)),
            _inversion(r),
        ]
        cells += _attacked_classifier(r) if attacked else []
        cells += [
            _accuracy(r, r.robust_accuracy.get(f"{x:g}"), evaluated=True, bound=percent_ub_cell) for x in result.radii
        ]
        cells += _certified_classifier(r) if certifies else []
        cells += [
            _accuracy(r, r.certified_accuracy.get(f"{x:g}"), evaluated=True, bound=percent_lb_cell)
            if r.certified_accuracy
            else "does not certify"
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
        f"the row's claim (the same noise, {len(names)} analyses).",
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
                    _auc(m),
                    _advantage(m),
                    *(_tpr(m, f, repeats=max(1, len(r.model_ids))) for f in fprs),
                    epsilon_lb_cell(m.epsilon_lb),
                    _counts(m),
                ]
            )
            v = r.vulnerable.get(attack)
            if v is not None:
                vulnerable.append(
                    [
                        r.label,
                        attack,
                        _auc(v),
                        *(_tpr(v, f, repeats=max(1, len(r.model_ids))) for f in fprs),
                        _counts(v),
                    ]
                )
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
                f"members, with counts.{_rates_note(result)} {_NA_NOTE}{_dropped_note(dropped)}"
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


def _interval_note(result: ComparisonResult) -> str:
    repeats = len(result.rows[0].model_ids) if result.rows else 1
    how = (
        "Clopper–Pearson on the count"
        if repeats == 1
        else f"Hoeffding's, for a mean of {repeats} models on the same number of examples"
    )
    return f" Brackets: 95% intervals ({how})."


def _rates_note(result: ComparisonResult) -> str:
    """How the membership table's intervals were made."""
    return (
        _interval_note(result)
        + " The AUC's is a bootstrap interval and the advantage's combines Clopper–Pearson intervals on its TPR and "
        "FPR counts; over several repeats each repeat's is at its Bonferroni share of 95% and the ends are averaged."
    )


def _evaluation_tables(result: ComparisonResult, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[Table]:
    """Evasion, certification and inversion, one table each, so that every accuracy in a table is about the one
    classifier that table names beside it (never a robust accuracy beside another rule's clean accuracy)."""
    col = {c: i for i, c in enumerate(columns)}
    robust = [c for c in columns if c.startswith("robust @ ")]
    certified = [c for c in columns if c.startswith("certified @ ")]
    tables = []
    if _attacked(result):
        picked = [ATTACKED_RULE_COLUMN, ATTACKED_ACCURACY_COLUMN, *robust]
        tables.append(
            Table(
                columns=["setting", *picked],
                rows=[[r[0], *(r[col[c]] for c in picked)] for x, r in zip(result.rows, rows) if x.robust_accuracy],
                caption=(
                    "Robust accuracy: the accuracy the strongest evasion attack leaves at each radius "
                    f"({', '.join(f'{x:g}' for x in result.radii)}), of the classifier the attacks "
                    "ran against, named in its column; its accuracy on the same examples unattacked (the fewest any "
                    "attack found, for a randomized model) is beside it, and robust accuracy is at most it. An attack "
                    "gives an upper bound on robustness: rounded up where no interval is given."
                    + _interval_note(result)
                ),
            )
        )
    if _certifies(result):
        picked = [CERTIFIED_RULE_COLUMN, CERTIFIED_ACCURACY_COLUMN, *certified]
        tables.append(
            Table(
                columns=["setting", *picked],
                rows=[[r[0], *(r[col[c]] for c in picked)] for x, r in zip(result.rows, rows) if x.certified_accuracy],
                caption=(
                    "Certified accuracy at each radius, of the classifier the certificate covers, named in its column "
                    "(for a noise layer the vote-count or expected-softmax argmax over the certification draws, for "
                    "smoothing Cohen et al.'s CERTIFY with abstentions counted wrong); its accuracy without attack on "
                    "the same examples is beside it, and certified accuracy at any radius is at most it. A certificate "
                    "of 0% at every radius is vacuous there (the verdict lists it)." + _interval_note(result)
                ),
            )
        )
    if any(x.inversion_top1 is not None for x in result.rows):
        tables.append(
            Table(
                columns=["setting", "inversion top-1"],
                rows=[
                    [r[0], r[col["inversion top-1"]]] for x, r in zip(result.rows, rows) if x.inversion_top1 is not None
                ],
                caption=(
                    "Inversion: top-1 accuracy of an evaluation classifier on the reconstructions (one per class), "
                    "the best attack's, highest over repeats, with its count; its 95% Clopper–Pearson interval is "
                    "split over the attacks and repeats it is the highest of, as the largest of several estimates is "
                    "selected. The evaluation classifier's own accuracy is on each row's inversion page."
                ),
            )
        )
    return tables


def _matrix_tables(result: ComparisonResult) -> list[Any]:
    """The defense × measure matrix as tables: privacy, then evasion and inversion, the drill-down links, ε_UB per
    accountant."""
    columns, rows = matrix_rows(result)
    # The matrix is wide: privacy columns in one table, evasion and inversion in a second (the
    # CSV has every column). Spread over repeats and the ceiling ride in the cells beside them.
    col = {c: i for i, c in enumerate(columns)}
    privacy_cols = [
        "setting",
        "test acc. [95%] ± sd",
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
    evaluation = _evaluation_tables(result, columns, rows)
    accuracy_note = ""
    if _certifies(result) or _attacked(result):
        accuracy_note = (
            " Test acc. is the accuracy of each record's own prediction rule on the whole test set (for a noise-layer "
            "defense the argmax of the expected scores over its noise draws, for smoothing the base model on clean "
            "inputs); robust and certified accuracies are about the classifiers their own tables name, each beside "
            "that classifier's accuracy without attack."
        )
    return [
        Table(
            columns=privacy_cols,
            rows=privacy_rows,
            caption=(
                f"Mean over {len(result.rows[0].model_ids)} repeat(s) (± their standard deviation where there "
                "are several). Accuracy loss is "
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
                f"{accuracy_note}{_rates_note(result)}{na_note}{_dropped_note(dropped)}"
            ),
        ),
        *evaluation,
        *([t] if (t := _links_table(result)) else []),
        *([t] if (t := _accountant_table(result)) else []),
    ]
