"""``dpaudit audit``'s terminal shows the ε point estimate by the report's rule (issue 48, item 5).

The rule — shown only with an interval that excludes 0 — is checked against the interval itself,
which :func:`dpaudit.privacy.estimate_interval.estimate_interval` computes independently of either
display; the terminal and the report must then agree on every result.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpaudit.app.common import fmt_eps
from dpaudit.app.verbs.audit import _result_lines
from dpaudit.privacy.audit_bounds import gaussian_step_claim
from dpaudit.privacy.audit_procedures import audit_from_scores
from reports.audit import _estimate_rows


def _tightness_line(result) -> str:
    [line] = [x for x in _result_lines(result, Path("runs/audit/x")) if x.strip().startswith("tightness")]
    return line


def test_terminal_and_report_show_the_same_estimate_by_the_same_rule() -> None:
    rng = np.random.default_rng(0)
    claim = gaussian_step_claim(noise_multiplier=1.0)
    chance = audit_from_scores(
        rng.normal(0, 1, 200), rng.normal(0, 1, 200), claim=claim, delta=1e-5, bound="clopper-pearson"
    )
    assert chance.epsilon_estimate > 0.3 and chance.details.estimate_interval[0] == 0.0  # at chance, yet ε̂ > 0
    line = _tightness_line(chance)
    # Old terminal: "(point estimate, not a bound: 0.4...)" where the report said "not shown".
    assert fmt_eps(chance.epsilon_estimate) not in line and "not shown" in line and "includes 0" in line
    assert _estimate_rows(chance)[0][1] == "not shown"
    strong = audit_from_scores(
        rng.normal(3, 1, 200), rng.normal(0, 1, 200), claim=claim, delta=1e-5, bound="clopper-pearson"
    )
    assert strong.details.estimate_interval[0] > 0
    line = _tightness_line(strong)
    assert f"not a bound: {fmt_eps(strong.epsilon_estimate)}" in line and "95% interval" in line
    assert _estimate_rows(strong)[0][1] == strong.epsilon_estimate
