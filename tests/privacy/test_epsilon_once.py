"""One claim, one ε: a question already answered in the process is not asked of the accountant again (issue 48).

The PLD accountant costs seconds per evaluation on a small DP-SGD training; ``train`` used to
evaluate the claim's ε twice (once for the record, once for the printed bounds).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from dpaudit.privacy import accountants, claims
from dpaudit.privacy.accountant_names import ACCOUNTANTS, AccountantSpec
from dpaudit.privacy.claims import dpsgd_claim
from dpaudit.privacy.rdp_accountant import rdp_epsilon


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ε remembered from earlier tests, in the accountants' cache or the claims' mapping."""
    accountants.clear_epsilon_cache()
    monkeypatch.setattr(claims, "_EPSILONS", {})
    yield
    accountants.clear_epsilon_cache()


def _counting(name: str, calls: list[tuple[str, float]], *, answer: object = None) -> AccountantSpec:
    """The registered accountant ``name`` with its ε counted (and answered by ``answer`` when given)."""
    spec = ACCOUNTANTS[name]
    inner = spec.epsilon if answer is None else answer

    def epsilon(event: object, delta: float, neighbouring: str) -> float:
        calls.append((repr(event), delta))
        return inner(event, delta, neighbouring)  # type: ignore[operator]

    return dataclasses.replace(spec, epsilon=epsilon)


def test_the_same_question_reaches_the_accountant_once(fresh: None) -> None:
    calls: list[tuple[str, float]] = []
    pld: list[tuple[str, float]] = []  # answered by RDP here: the mapping asks every accountant
    with (
        ACCOUNTANTS.temporarily(_counting("rdp", calls)),
        ACCOUNTANTS.temporarily(_counting("pld", pld, answer=rdp_epsilon)),
    ):
        # Two equal claims built apart, asked directly and through the by-accountant mapping.
        a = dpsgd_claim(sampling_rate=0.1, noise_multiplier=1.2, num_steps=50)
        b = dpsgd_claim(sampling_rate=0.1, noise_multiplier=1.2, num_steps=50)
        first = a.epsilon(delta=1e-5, accountant="rdp")
        assert b.epsilon(delta=1e-5, accountant="rdp") == first
        assert b.epsilons(delta=1e-5)["rdp"] == first
        assert len(calls) == 1 and len(pld) == 1
        # The value is the accountant's own (the closed form it implements, computed directly).
        assert first == rdp_epsilon(a.event, 1e-5, "add_or_remove_one")
        # Another δ, or another claim, is another question.
        a.epsilon(delta=1e-6, accountant="rdp")
        dpsgd_claim(sampling_rate=0.1, noise_multiplier=1.2, num_steps=51).epsilon(delta=1e-5, accountant="rdp")
        assert len(calls) == 3
    # An accountant registered anew (here: the original back) is asked afresh, not answered from
    # what its predecessor said.
    again: list[tuple[str, float]] = []
    with ACCOUNTANTS.temporarily(_counting("rdp", again)):
        assert a.epsilon(delta=1e-5, accountant="rdp") == first
        assert len(again) == 1


def test_a_fallback_is_remembered_with_its_budget(fresh: None) -> None:
    """The memory budget is part of the question: a PLD answer within budget is not reused for a
    call whose budget sends it to the fallback, and vice versa."""
    calls: list[tuple[str, float]] = []
    with ACCOUNTANTS.temporarily(_counting("pld", calls, answer=rdp_epsilon)):
        event = dpsgd_claim(sampling_rate=0.5, noise_multiplier=2.0, num_steps=3).event
        tight = accountants.compute_epsilon_detailed(event, delta=1e-5, accountant="pld", memory_budget=1e3)
        assert tight.computed_by == "rdp" and calls == []
        full = accountants.compute_epsilon_detailed(event, delta=1e-5, accountant="pld")
        assert full.computed_by == "pld" and len(calls) == 1
        assert accountants.compute_epsilon_detailed(event, delta=1e-5, accountant="pld") == full
        assert len(calls) == 1


@pytest.mark.extended  # a DP-SGD training of digits: seconds
def test_a_dpsgd_training_asks_the_pld_accountant_once(
    fresh: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``train --defense dpsgd`` evaluates its claim's PLD ε once, for the record and the terminal
    alike (it was twice). The count is of the accountant's own function; its answer here is the
    RDP bound, so the test does not pay the PLD grid."""
    import json

    from dpaudit.app.cli import main

    calls: list[tuple[str, float]] = []
    with ACCOUNTANTS.temporarily(_counting("pld", calls, answer=rdp_epsilon)):
        argv = ["train", "--defense", "dpsgd", "--dataset", "digits", "--model", "digits-mlp", "--epochs", "1"]
        assert main([*argv, "--quiet", "--json", "--out", str(tmp_path / "run")]) == 0
    out = json.loads(capsys.readouterr().out)
    claim = claims.claim_from_dict(out["claim"])
    assert calls == [(repr(claim.event), out["delta"])]
    assert out["epsilon"]["pld"] == rdp_epsilon(claim.event, out["delta"], "add_or_remove_one")


@pytest.mark.extended  # a dozen PLD size probes of a calibration: seconds
def test_a_rehearsal_finds_a_calibrations_questions_and_remembers_no_stand_in(fresh: None) -> None:
    """A σ calibrated to a target asks PLD about a dozen σ's; rehearsed, none reaches the accountant
    (RDP answers), each distinct question is listed once, and none of the stand-in answers is
    what a later real question gets."""
    from defenses.dpsgd.config import DPSGDConfig
    from defenses.dpsgd.plan import accounting_questions, plan_dpsgd, run_claim

    calls: list[tuple[str, float]] = []
    with ACCOUNTANTS.temporarily(_counting("pld", calls)):
        config = DPSGDConfig(target_epsilon=4.0, epochs=2, lot_size=50, delta=1e-5)
        asked = accounting_questions(config, num_members=500)
        assert calls == []
        assert len(asked) >= 5 and {q.accountant for q in asked} == {"pld"}
        assert len({(repr(q.event), q.delta) for q in asked}) == len(asked)
        # The record's claim is among them: the σ the (RDP-answered) calibration ended on.
        with accountants.rehearsal():
            plan = plan_dpsgd(config, num_members=500)
        claim = run_claim(
            config, sampling_rate=plan.sampling_rate, noise_multiplier=plan.noise_multiplier, num_steps=plan.num_steps
        )
        assert repr(claim.event) in {repr(q.event) for q in asked}
    # Nothing the rehearsal said was kept: the same question, asked for real, reaches the accountant.
    real: list[tuple[str, float]] = []
    with ACCOUNTANTS.temporarily(_counting("pld", real, answer=rdp_epsilon)):
        claim.epsilon(delta=1e-5, accountant="pld")
        assert len(real) == 1
