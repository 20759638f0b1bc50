"""The audit report splits each audit's gap in one sentence (issue 33, item 3), the last-iterate ε worded as the
heuristic it is (issue 42, part 4)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from dpaudit.privacy.audit_procedures import audit_from_scores
from dpaudit.privacy.claims import NonPrivateClaim, dpsgd_claim
from dpaudit.results.audit import AuditResult
from reports.audit import audit_section, bounds_table, gap_sentence
from reports.render import Text
from tests.privacy.last_iterate_reference import quadrature_epsilon

DELTA = 1e-5


def _result(**kw):
    base = dict(
        epsilon_lb=0.4,
        confidence=0.95,
        method="multi-run",
        bound="clopper-pearson",
        delta=DELTA,
        threshold_strategy="bonferroni",
        num_in=10,
        num_out=10,
        epsilon_ub=2.0,
        accountant="pld",
        ceiling=1.0,
    )
    return AuditResult(**{**base, **kw})


def _number_after(text: str, lead: str) -> float:
    """The number printed right after ``lead`` (thousands separators dropped)."""
    match = re.search(re.escape(lead) + r"(-?[0-9][0-9,]*(?:\.[0-9]+)?(?:e[-+][0-9]+)?)", text)
    assert match, (lead, text)
    return float(match.group(1).replace(",", ""))


def test_the_sentence_splits_the_gap_on_bounds_and_words_the_heuristic_as_one():
    r = _result(epsilon_last_iterate=1.5, epsilon_ub=2.0004, epsilon_lb=0.40006)
    text = gap_sentence(r)
    # The bounds read their safe way: ε_UB not below itself, ε_LB not above.
    assert _number_after(text, "(ε_UB = ") >= r.epsilon_ub and _number_after(text, ", ε_LB = ") <= r.epsilon_lb
    # The two shares are read off ε_UB, the ceiling and ε_LB alone, and add up to the gap.
    design = float(re.search(r"([0-9.]+) is what the audit's size allows", text).group(1))
    attack = float(re.search(r"([0-9.]+) is what the attack leaves", text).group(1))
    assert design == pytest.approx(r.epsilon_ub - r.ceiling, abs=1e-2) and attack == pytest.approx(
        r.ceiling - r.epsilon_lb, abs=1e-2
    )
    # The last-iterate ε is named for what it is, and nothing is said to be hidden as a fact.
    assert "exact for linear losses" in text and "heuristic, not an upper bound" in text and "caps nothing" in text
    assert "threat model hides" not in text and "prediction" not in text


def test_the_attack_share_does_not_move_with_the_last_iterate():
    # Old wording capped "what the attack leaves" at min(last-iterate, ceiling): 0.3 − 0.2 = 0.1 here.
    base = dict(epsilon_lb=0.2, ceiling=3.0)
    share = {
        li: float(
            re.search(
                r"([0-9.]+) is what the attack leaves", gap_sentence(_result(epsilon_last_iterate=li, **base))
            ).group(1)
        )
        for li in (0.3, 1.5, None)
    }
    assert share[0.3] == share[1.5] == share[None] == pytest.approx(2.0 - 0.2)


@pytest.mark.parametrize(
    ("kw", "phrase"),
    [
        ({}, "No last-iterate ε is defined"),
        ({"epsilon_last_iterate": 0.3, "ceiling": 3.0}, "exceeds the last-iterate ε by 0.1"),
        ({"epsilon_lb": 2.5, "ceiling": 3.0, "epsilon_last_iterate": 1.5}, "a violation"),
        ({"epsilon_ub": math.inf}, "guarantees nothing"),
        ({"ceiling": None, "epsilon_last_iterate": 1.5}, "ceiling was not recorded"),
        ({"method": "white-box", "threat_model": "white-box", "epsilon_last_iterate": 2.0}, "hides nothing"),
    ],
)
def test_every_case_is_worded(kw, phrase):
    assert phrase in gap_sentence(_result(**kw))


def test_the_section_and_table_show_it():
    rng = np.random.default_rng(0)
    r = audit_from_scores(
        rng.normal(0.2, 1, 100),
        rng.normal(0, 1, 100),
        claim=dpsgd_claim(sampling_rate=0.1, noise_multiplier=3.0, num_steps=50),
        delta=DELTA,
    )
    assert not r.violation
    section = audit_section(r)
    texts = [b.text for b in section.blocks if isinstance(b, Text)]
    assert any(t.startswith("Gap ε_UB − ε_LB") and "last-iterate" in t for t in texts)
    rows = bounds_table(r).rows
    # The row's value against a direct quadrature of the last-iterate curve of that claim (q = 0.1, σ = 3, T = 50).
    li = quadrature_epsilon(0.1, 3.0, 50, DELTA)
    assert any(
        str(row[0]).startswith("last-iterate ε (exact for linear losses") and row[1] == pytest.approx(li, abs=1e-5)
        for row in rows
    )
    # The bounds' cells print their safe way; the CSV and the page read the same text.
    cells = {str(row[0]).split(" (")[0]: row[1] for row in rows}
    assert (
        float(str(cells["ε_UB"])) >= r.epsilon_ub
        and float(str(cells["ε_LB"])) <= r.epsilon_lb
        and float(str(cells["ceiling"])) <= r.ceiling
    )
    plain = audit_from_scores(rng.normal(1, 1, 100), rng.normal(0, 1, 100), claim=NonPrivateClaim(), delta=DELTA)
    assert not any("last-iterate" in str(row[0]) for row in bounds_table(plain).rows)
