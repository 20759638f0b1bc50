"""The audit report splits each audit's gap in one sentence (issue 33, item 3)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpaudit.privacy.claims import NonPrivateClaim, dpsgd_claim
from dpaudit.results.audit import AuditResult
from dpaudit.results.auditing import audit_from_scores
from reports.audit import audit_section, bounds_table, gap_sentence
from reports.render import Text

DELTA = 1e-5


def _result(**kw):
    base = dict(
        epsilon_lb=0.4, confidence=0.95, method="multi-run", bound="clopper-pearson", delta=DELTA, threshold_strategy="bonferroni", num_in=10, num_out=10, epsilon_ub=2.0, accountant="pld", ceiling=1.0
    )
    return AuditResult(**{**base, **kw})


def test_the_sentence_names_each_share():
    text = gap_sentence(_result(epsilon_last_iterate=1.5))
    assert text.startswith("Gap ε_UB − ε_LB = 1.6")
    assert "0.5 is what the black-box threat model hides" in text and "1.5 under the last-iterate heuristic" in text
    assert "0.5 is what the audit's size allows (its ceiling is 1)" in text and "0.6 is what the attack leaves" in text


@pytest.mark.parametrize(
    ("kw", "phrase"),
    [
        ({}, "not separated"),
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
    r = audit_from_scores(rng.normal(0.2, 1, 100), rng.normal(0, 1, 100), claim=dpsgd_claim(sampling_rate=0.1, noise_multiplier=3.0, num_steps=50), delta=DELTA)
    assert not r.violation
    section = audit_section(r)
    texts = [b.text for b in section.blocks if isinstance(b, Text)]
    assert any(t.startswith("Gap ε_UB − ε_LB") and "last-iterate" in t for t in texts)
    rows = bounds_table(r).rows
    assert any(str(row[0]).startswith("ε last-iterate") and row[1] == pytest.approx(0.944194, abs=1e-5) for row in rows)
    plain = audit_from_scores(rng.normal(1, 1, 100), rng.normal(0, 1, 100), claim=NonPrivateClaim(), delta=DELTA)
    assert not any(str(row[0]).startswith("ε last-iterate") for row in bounds_table(plain).rows)
