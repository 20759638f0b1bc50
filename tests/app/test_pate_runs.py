"""``dpaudit pate``: the verb parses and prints, :mod:`dpaudit.app.runs.pate` does the work (issue 44).

The run is checked against the library functions it dispatches to (a second path to the same
numbers), and the verb module against the rule that it holds no analysis: it imports no
mathematics, attack or defense, only the run and the constants its ``--help`` prints.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpaudit._validate import InvalidArgument
from dpaudit.app.runs.pate import AggregatorAuditSpec, AnalyzeSpec, ReleaseSpec, analyze_vote_file, audit_aggregator
from dpaudit.privacy.pate import analysis, smooth_sensitivity

ROOT = Path(__file__).resolve().parents[2]
ROWS = [[200, 30, 10, 10, 0, 0, 0, 0, 0, 0], [150, 50, 20, 10, 10, 5, 5, 0, 0, 0]] * 10


@pytest.fixture
def vote_file(tmp_path: Path) -> str:
    path = tmp_path / "votes.npy"
    np.save(path, np.array(ROWS, dtype=np.int64))
    return str(path)


def test_analyze_votes_dispatches_to_each_aggregators_own_analysis() -> None:
    votes = np.array(ROWS)
    mask = np.arange(len(ROWS)) % 3 == 0
    assert analysis.analyze_votes(votes, aggregator="lnmax", laplace_scale=20.0, delta=1e-5) == analysis.analyze_lnmax(
        votes, laplace_scale=20.0, delta=1e-5
    )
    assert analysis.analyze_votes(votes, aggregator="gnmax", sigma=40.0, delta=1e-5) == analysis.analyze_gnmax(
        votes, sigma=40.0, delta=1e-5
    )
    for answered in (None, mask):
        got = analysis.analyze_votes(
            votes,
            aggregator="confident-gnmax",
            threshold=200.0,
            threshold_sigma=150.0,
            sigma=40.0,
            delta=1e-5,
            answered=answered,
        )
        assert got == analysis.analyze_confident_gnmax(
            votes, threshold=200.0, threshold_sigma=150.0, sigma=40.0, delta=1e-5, answered=answered
        )


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"aggregator": "gnmax"}, "sigma"),
        ({"aggregator": "gnmax", "sigma": 40.0, "laplace_scale": 20.0}, "laplace_scale"),
        ({"aggregator": "lnmax", "laplace_scale": 20.0, "answered": np.ones(20, dtype=bool)}, "answered"),
        ({"aggregator": "confident-gnmax", "sigma": 40.0, "threshold": 200.0}, "threshold_sigma"),
        ({"aggregator": "bogus", "sigma": 40.0}, "aggregator"),
    ],
)
def test_analyze_votes_names_a_missing_or_foreign_parameter(kwargs: dict[str, object], argument: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        analysis.analyze_votes(np.array(ROWS), delta=1e-5, **kwargs)  # type: ignore[arg-type]
    assert caught.value.argument == argument


def test_release_epsilon_is_each_aggregators_release_and_needs_the_answered_mask() -> None:
    votes = np.array(ROWS[:4])  # a release walks every query's local sensitivity: few queries keep it cheap
    mask = np.array([True, False, False, True])
    common = {"delta": 1e-5, "beta": 0.0329, "sigma_ss": 15.0, "seed": 3}
    assert smooth_sensitivity.release_epsilon(
        votes, aggregator="gnmax", sigma=40.0, **common
    ) == smooth_sensitivity.release_gnmax_epsilon(votes, sigma=40.0, **common)  # type: ignore[arg-type]
    got = smooth_sensitivity.release_epsilon(
        votes, aggregator="confident-gnmax", threshold=200.0, threshold_sigma=150.0, sigma=40.0, answered=mask, **common
    )  # type: ignore[arg-type]
    assert got == smooth_sensitivity.release_confident_gnmax_epsilon(
        votes, threshold=200.0, threshold_sigma=150.0, sigma=40.0, answered=mask, **common
    )  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument) as caught:
        smooth_sensitivity.release_epsilon(
            votes, aggregator="confident-gnmax", threshold=200.0, threshold_sigma=150.0, sigma=40.0, **common
        )  # type: ignore[arg-type]
    assert caught.value.argument == "answered"
    with pytest.raises(InvalidArgument) as caught:
        smooth_sensitivity.release_epsilon(votes, aggregator="lnmax", sigma=40.0, **common)  # type: ignore[arg-type]
    assert caught.value.argument == "aggregator"


def test_the_run_returns_the_librarys_analysis_and_a_release_keeps_nothing_private(vote_file: str) -> None:
    private = analyze_vote_file(AnalyzeSpec(votes=vote_file, aggregator="gnmax", sigma=40.0, delta=1e-5))
    want = analysis.analyze_gnmax(np.array(ROWS), sigma=40.0, delta=1e-5)
    assert (private.num_queries, private.num_teachers, private.num_classes) == (20, 250, 10)
    assert (
        private.data_independent == want.data_independent
        and private.data_dependent == want.data_dependent
        and private.release is None
    )
    payload = private.to_dict()
    assert payload["epsilon_data_dependent_realised"] == want.data_dependent.epsilon and payload["publishable"] is False

    released = analyze_vote_file(
        AnalyzeSpec(
            votes=vote_file,
            aggregator="gnmax",
            sigma=40.0,
            delta=1e-5,
            release=ReleaseSpec(beta=0.0329, sigma_ss=15.0, seed=3),
        )
    )
    assert released.data_dependent is None  # the private ε is not even held
    assert released.release == smooth_sensitivity.release_gnmax_epsilon(
        np.array(ROWS), sigma=40.0, delta=1e-5, beta=0.0329, sigma_ss=15.0, seed=3
    )
    payload = released.to_dict()
    assert not {k for k in payload if k.startswith("epsilon_data_dependent") or k in ("order", "expected_answered")}
    assert (
        payload["release"]["epsilon_noisy_estimate"] == released.release.epsilon_noisy_estimate
        and payload["publishable"] is False
    )  # seeded: not private


def test_the_run_names_the_flag_of_a_bad_file(tmp_path: Path, vote_file: str) -> None:
    np.save(tmp_path / "mask.npy", np.ones(7, dtype=bool))
    with pytest.raises(InvalidArgument) as caught:
        analyze_vote_file(
            AnalyzeSpec(
                votes=vote_file,
                aggregator="confident-gnmax",
                threshold=200.0,
                threshold_sigma=150.0,
                sigma=40.0,
                delta=1e-5,
                answered=str(tmp_path / "mask.npy"),
            )
        )
    assert caught.value.argument == "--answered" and "shape (20,)" in str(caught.value)
    np.save(tmp_path / "frac.npy", np.array([[1.5, 2.5]]))
    with pytest.raises(InvalidArgument) as caught:
        analyze_vote_file(AnalyzeSpec(votes=str(tmp_path / "frac.npy"), aggregator="gnmax", sigma=40.0, delta=1e-5))
    assert caught.value.argument == "--votes"


def test_the_aggregator_audit_run_catches_the_planted_bug() -> None:
    # A threshold check without noise answers every query on D and none on D': the game must see it.
    spec = AggregatorAuditSpec(
        aggregator="confident-gnmax",
        parameters=(("threshold", 40.0), ("threshold_sigma", 10.0), ("sigma", 5.0)),
        planted_bug="threshold-without-noise",
        num_teachers=50,
        trials=2000,
    )
    audit = audit_aggregator(spec)
    assert audit.result.violation and audit.result.epsilon_lb > audit.result.epsilon_ub
    payload = audit.to_dict()
    assert list(payload)[:4] == ["aggregator", "parameters", "planted_bug", "trials"] and payload["parameters"] == {
        "threshold": 40.0,
        "threshold_sigma": 10.0,
        "sigma": 5.0,
    }


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_pate_verb_imports_no_mathematics_attack_or_defense() -> None:
    # Verbs parse, build a spec, call a run and print: the analysis lives in the run and in privacy/pate.
    allowed = {
        "__future__",
        "argparse",
        "typing",
        "dpaudit",
        "dpaudit.app.common",
        "dpaudit.options",
        "dpaudit.privacy.pate.votes",
        "dpaudit.app.runs.pate",
        "dpaudit.app.runs.report",
        "dpaudit.store",
    }
    extra = _imports(ROOT / "dpaudit" / "app" / "verbs" / "pate.py") - allowed
    assert not extra, f"dpaudit/app/verbs/pate.py imports {sorted(extra)}: put the work in dpaudit/app/runs/pate.py"


@pytest.mark.extended
def test_pate_analyze_runs_without_torch(vote_file: str) -> None:
    code = (
        "import sys\nfrom dpaudit.app.cli import main\nassert main(['pate', "
        f"'analyze', '--votes', {vote_file!r}, '--sigma', '40', '--json']) == "
        "0\nprint('torch' in sys.modules, file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stderr.strip().splitlines()[-1] == "False"
