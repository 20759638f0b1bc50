"""No page calls the last-iterate ε a cap or an upper bound (issue 42, part 4).

The last-iterate ε of Steinke et al. (2024) is the final model's exact ε for linear losses, so a
lower bound on its worst case over losses, and a heuristic for others. Every sentence of the docs
and of a rendered audit report that names it is read: "cap", "upper bound" and "bound" must come
negated ("not an upper bound", "caps nothing"), and nothing may say the final model's ε "is only"
some number or that a share is "what the threat model hides" as if established.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
NEGATIONS = ("not", "never", "nothing", "neither", "nor", "no", "isn't")
CAPS = ("cap", "caps", "capped", "capping")


def sentences(text: str) -> list[str]:
    """Sentences of a page's text (markup and line breaks dropped), split where a full stop ends one."""
    text = re.sub(r"<[^>]+>", " ", html.unescape(text))
    text = re.sub(r"\s+", " ", text)
    return [s.strip() for s in re.split(r"(?<=\.)\s+(?=[A-Z(ε])", text) if s.strip()]


def misreadings(text: str) -> list[str]:
    """The sentences naming the last-iterate ε that present it as a cap, an upper bound or established."""
    bad = []
    for s in sentences(text):
        low = s.lower()
        if "last-iterate" not in low and "last iterate" not in low:
            continue
        words = re.findall(r"[\w'’-]+", low)
        for i, w in enumerate(words):
            claim = w in CAPS or (w == "upper" and i + 1 < len(words) and words[i + 1] in ("bound", "bounds"))
            # A negation up to six words before ("not an upper bound", "never a cap") or just after ("caps nothing").
            if claim and not any(n in words[max(0, i - 6) : i] + words[i + 1 : i + 3] for n in NEGATIONS):
                bad.append(s)
                break
        else:
            if re.search(r"\bis only\b|\bonly \d", low) or ("threat model hides" in low and "nothing" not in low):
                bad.append(s)
    return bad


def test_the_checker_catches_the_old_sentences():
    # The sentences of issue 42 that presented the last-iterate ε as a cap, and the right ones.
    assert misreadings("The final model's ε is only 3.41 (the last-iterate ε of the 200 steps run).")
    assert misreadings("ε_UB − ε last iterate = 0.5: what the threat model hides.")
    assert misreadings("what the attack leaves, capped at the last-iterate ε.")
    assert misreadings("The last-iterate ε is an upper bound on what the final model reveals.")
    assert not misreadings(
        "The last-iterate ε is exact for linear losses; a heuristic, not an upper bound, for others."
    )
    assert not misreadings("For linear losses the last-iterate ε is a lower bound on the worst case; it caps nothing.")


def _docs() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.md"))


@pytest.mark.parametrize("page", _docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_doc_page_calls_the_last_iterate_a_cap(page):
    assert misreadings(page.read_text()) == []


@pytest.mark.slow  # renders a report with its figures: tens of seconds on 2 cores
def test_no_rendered_audit_report_calls_it_a_cap(tmp_path):
    from dpaudit.app.runs.report import render_reports
    from dpaudit.privacy.audit_procedures import audit_from_scores
    from dpaudit.privacy.claims import dpsgd_claim
    from dpaudit.results.audit import save_audit_result
    from dpaudit.store import RunDir, atomic_save_npz
    from tests.reports.conftest import DP_MODEL, _record

    run = RunDir(tmp_path / "run").create(command="test")
    claim = dpsgd_claim(sampling_rate=0.1, noise_multiplier=1.0, num_steps=100)
    _record(run, DP_MODEL, "dpsgd", claim=claim, metrics={"delta": 1e-5, "test_accuracy": 0.9})
    rng = np.random.default_rng(0)
    s_in, s_out = rng.normal(1.0, 1, 100), rng.normal(0, 1, 100)
    result = audit_from_scores(s_in, s_out, claim=claim, delta=1e-5)
    assert (
        result.epsilon_last_iterate is not None and result.epsilon_last_iterate < result.epsilon_ub
    )  # a black-box audit: the heuristic is worded
    d = run.audit_dir("black")
    save_audit_result(result, d)
    atomic_save_npz(d / "scores.npz", in_scores=s_in, out_scores=s_out)
    pages = [p.read_text() for p in render_reports(run).audits]
    assert pages and all("last-iterate" in p for p in pages)
    assert [m for p in pages for m in misreadings(p)] == []
    assert all("exact for linear losses" in p for p in pages)
