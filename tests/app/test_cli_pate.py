"""``dpaudit pate analyze``: docs/defenses/pate.md's test vectors through the command line, and bad vote matrices."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from dpaudit.privacy.pate import analysis


def _votes(tmp_path: Path, rows: list[list[int]], repeat: int = 1, name: str = "votes.npy") -> str:
    path = tmp_path / name
    np.save(path, np.array(rows * repeat, dtype=np.int64))
    return str(path)


ROW = [200, 30, 10, 10, 0, 0, 0, 0, 0, 0]


def test_lnmax_reproduces_the_2017_vector(cli, tmp_path: Path) -> None:
    """docs/defenses/pate.md §2: 100 queries of [200, 30, 10, 10, 0, …] at γ = 0.05, δ = 1e-5 → ε = 1.48508."""
    code, out, err = cli.run(
        "pate", "analyze", "--votes", _votes(tmp_path, [ROW], 100), "--laplace-scale", "20", "--delta", "1e-5", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["aggregator"] == "lnmax" and data["num_teachers"] == 250
    assert data["epsilon_data_dependent_realised"] == pytest.approx(1.48508, rel=1e-5)
    assert (
        data["epsilon_data_independent"] > data["epsilon_data_dependent_realised"]
        and data["sanitised"] is False
        and data["publishable"] is False
    )


def test_gnmax_and_confident_gnmax_match_the_library(cli, tmp_path: Path) -> None:
    votes = _votes(tmp_path, [ROW, [150, 50, 20, 10, 10, 5, 5, 0, 0, 0]], 50)
    code, out, err = cli.run("pate", "analyze", "--votes", votes, "--sigma", "40", "--json")
    assert code == 0, err
    want = analysis.analyze_gnmax(np.load(votes), sigma=40, delta=1e-5)
    data = json.loads(out)
    assert (
        data["epsilon_data_dependent_realised"] == pytest.approx(want.data_dependent.epsilon)
        and data["order"] == want.data_dependent.order
    )
    assert (
        data["epsilon_data_dependent_realised_improved"]
        <= data["epsilon_data_dependent_realised"]
        < data["epsilon_data_independent"]
    )
    code, out, err = cli.run(
        "pate", "analyze", "--votes", votes, "--sigma", "40", "--threshold", "200", "--threshold-sigma", "150", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["aggregator"] == "confident-gnmax"
    # P_ans = 0.5 for the rows whose maximum is 200 (docs/defenses/pate.md §3), much less for the others.
    assert 50 * 0.5 < data["expected_answered"] < 50 * 0.5 + 50 * 0.5


@pytest.mark.extended
def test_smooth_sensitivity_release_is_marked_and_seeded(cli, tmp_path: Path) -> None:
    votes = _votes(tmp_path, [ROW], 640)
    argv = [
        "pate",
        "analyze",
        "--votes",
        votes,
        "--sigma",
        "40",
        "--smooth-sensitivity-beta",
        "0.0329",
        "--smooth-sensitivity-sigma",
        "15",
        "--json",
    ]
    code, out, err = cli.run(*argv, "--seed", "0")
    assert code == 0, err
    release = json.loads(out)["release"]
    assert (
        release["epsilon_noisy_estimate"] > 0
        and release["beta"] == 0.0329
        and release["seed"] == 0
        and release["order_rule"] == "public"
    )
    code, out, _ = cli.run(*argv[:-1])
    assert "epsilon, released (noisy estimate, smooth sensitivity)" in out and "may be published" in out


@pytest.mark.parametrize(
    "rows, needle",
    [
        ([[3, -1, 0]], "--votes must be >= 0"),
        ([[2.5, 0.5, 0.0]], "integer counts"),
        ([[3, 0, 0], [2, 0, 0]], "rows must all sum"),
        ([[3], [3]], "at least 2 classes"),
    ],
)
def test_bad_vote_matrices_exit_2_with_one_line(cli, tmp_path: Path, rows: list[list[float]], needle: str) -> None:
    path = tmp_path / "bad.npy"
    np.save(path, np.array(rows))
    code, out, err = cli.run("pate", "analyze", "--votes", str(path), "--sigma", "40", "--json")
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert json.loads(out)["argument"] == "--votes"


def test_a_pickled_votes_file_is_refused_without_loading_it(cli, tmp_path: Path) -> None:
    path = tmp_path / "votes.npy"
    np.save(path, np.array([{"not": "votes"}], dtype=object), allow_pickle=True)
    code, _, err = cli.run("pate", "analyze", "--votes", str(path), "--sigma", "40")
    assert code == 2 and "not a plain .npy array" in err
    (tmp_path / "p.npy").write_bytes(pickle.dumps([1, 2]))
    code, _, err = cli.run("pate", "analyze", "--votes", str(tmp_path / "p.npy"), "--sigma", "40")
    assert code == 2 and "--votes" in err


@pytest.mark.parametrize(
    "extra, needle",
    [
        ([], "needs --sigma"),
        (["--laplace-scale", "20", "--sigma", "40"], "--sigma=40.0 does not apply to --aggregator lnmax"),
        (["--sigma", "40", "--threshold", "200"], "needs --threshold T and --threshold-sigma"),
        (
            ["--aggregator", "gnmax", "--sigma", "40", "--threshold", "200", "--threshold-sigma", "150"],
            "apply to --aggregator confident-gnmax",
        ),
        (["--sigma", "40", "--smooth-sensitivity-beta", "0.03"], "go together"),
        (
            ["--laplace-scale", "20", "--smooth-sensitivity-beta", "0.03", "--smooth-sensitivity-sigma", "15"],
            "not --aggregator lnmax",
        ),
    ],
)
def test_inconsistent_flags_exit_2(cli, tmp_path: Path, extra: list[str], needle: str) -> None:
    code, _, err = cli.run("pate", "analyze", "--votes", _votes(tmp_path, [ROW]), *extra)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- pate audit
AUDIT = ["pate", "audit", "--trials", "50000"]


@pytest.mark.parametrize(
    "noise",
    [
        ["--laplace-scale", "20"],
        ["--sigma", "40"],
        ["--aggregator", "confident-gnmax", "--threshold", "100", "--threshold-sigma", "150", "--sigma", "40"],
    ],
)
def test_audit_passes_the_real_aggregator_and_flags_the_noise_bug_with_exit_3(cli, noise: list[str]) -> None:
    code, out, err = cli.run(*AUDIT, *noise, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["violation"] is False and data["epsilon_lb"] <= data["epsilon_ub"] and data["planted_bug"] == "none"
    assert data["num_in"] == data["num_out"] == 50000 and data["bound"] == "clopper-pearson"
    code, out, err = cli.run(*AUDIT, *noise, "--planted-bug", "noise-scale-too-small", "--json")
    assert code == 3, err
    data = json.loads(out)
    assert data["violation"] is True and data["epsilon_lb"] > data["epsilon_ub"]


def test_audit_flags_a_threshold_without_noise_and_says_so(cli) -> None:
    argv = [
        *AUDIT,
        "--threshold",
        "200",
        "--threshold-sigma",
        "150",
        "--sigma",
        "40",
        "--planted-bug",
        "threshold-without-noise",
    ]
    code, out, _ = cli.run(*argv)
    assert code == 3 and "VIOLATION" in out and "not answered" in out
    code, out, _ = cli.run(*argv[:-2])
    assert code == 0 and "no violation" in out


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--sigma", "40", "--planted-bug", "threshold-without-noise"], "--planted-bug"),
        (["--aggregator", "lnmax"], "--laplace-scale"),
        ([], "--sigma"),
        (["--sigma", "40", "--threshold", "100"], "--threshold"),
        (["--sigma", "40", "--threshold", "300", "--threshold-sigma", "150"], "--threshold"),
        (["--sigma", "40", "--threshold", "10", "--threshold-sigma", "150"], "threshold"),
        (["--sigma", "40", "--trials", "0"], "--trials"),
        (["--sigma", "40", "--trials", str(10**8)], "--trials"),
        (["--sigma", "40", "--num-teachers", "1"], "--num-teachers"),
        (["--sigma", "40", "--num-classes", "1"], "--num-classes"),
        (["--sigma", "40", "--confidence", "1"], "--confidence"),
        (["--sigma", "40", "--delta", "0"], "--delta"),
        (["--sigma", "-1"], "--sigma"),
        (["--sigma", "40", "--planted-bug", "bogus"], "--planted-bug"),
    ],
)
def test_audit_bad_arguments_exit_2_with_one_line_naming_the_flag(cli, extra: list[str], flag: str) -> None:
    code, out, err = cli.run("pate", "audit", *extra)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and flag in lines[0] and "Traceback" not in err, err


def test_audit_size_limit_needs_i_know(cli) -> None:
    code, _, err = cli.run("pate", "audit", "--sigma", "40", "--trials", str(10**8))
    assert code == 2 and "--i-know" in err
    code, _, err = cli.run("pate", "audit", "--sigma", "40", "--num-classes", "5000", "--trials", str(10**6))
    assert code == 2 and "--i-know" in err and "--trials" in err


def test_audit_planted_bug_names_match_the_defenses() -> None:
    from defenses.pate.planted import PLANTED_PATE_BUGS
    from dpaudit.app.verbs.pate import PLANTED_BUGS

    assert PLANTED_BUGS == PLANTED_PATE_BUGS


def test_audit_help_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = (
        "import sys\nfrom dpaudit.app.cli import "
        "build_parser\nbuild_parser(['pate', 'audit', '--help'])\nprint('torch' "
        "in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------------------- analyze limits (issue 31)
def _header_only(path: Path, shape: tuple[int, int]) -> str:
    """A .npy that declares ``shape`` but holds no data: the limit must be read from the header."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": np.lib.format.dtype_to_descr(np.dtype("<i8")), "fortran_order": False, "shape": shape}
        )
    return str(path)


@pytest.mark.parametrize(
    ("shape", "extra", "needle"),
    [
        ((1_000_000, 10), [], "holds 1,000,000 queries, above the limit 100,000"),
        (
            (10_000, 10_000),
            [],
            "holds 10,000 x 10,000 = 100,000,000 counts, above the limit 10,000,000 "
            "(the analysis holds about 24 bytes per count: 2.4 GB)",
        ),
        (
            (20_000, 10),
            ["--smooth-sensitivity-beta", "0.03", "--smooth-sensitivity-sigma", "15"],
            "holds 20,000 queries, above the limit 10,000 of the smooth-sensitivity release",
        ),
    ],
    ids=["queries", "memory", "release"],
)
def test_analyze_limit_needs_i_know(cli, tmp_path: Path, shape: tuple[int, int], extra: list[str], needle: str) -> None:
    """Issue 31 item 4: an over-limit vote matrix is refused from its header, before loading it."""
    votes = _header_only(tmp_path / "big.npy", shape)
    code, out, err = cli.run("pate", "analyze", "--votes", votes, "--sigma", "40", *extra)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert needle in err and "pass --i-know" in err and "--votes" in err
    # With --i-know it goes on to load the file (here: no data behind the header).
    code, _, err = cli.run("pate", "analyze", "--votes", votes, "--sigma", "40", *extra, "--i-know")
    assert code == 2 and "could only read 0 elements" in err


def test_analyze_limit_with_i_know_runs_and_shows_progress(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond a (here lowered) limit --i-know runs it; a long analysis shows its progress on stderr."""
    from dpaudit.privacy.pate import votes as pate_votes

    monkeypatch.setattr(pate_votes, "MAX_QUERIES", 100)
    monkeypatch.setattr(pate_votes, "PROGRESS_QUERIES", 100)
    monkeypatch.setattr(pate_votes, "PROGRESS_EVERY", 50)
    votes = _votes(tmp_path, [ROW], 300)
    code, _, err = cli.run("pate", "analyze", "--votes", votes, "--sigma", "40")
    assert code == 2 and "holds 300 queries, above the limit 100" in err
    code, out, err = cli.run("pate", "analyze", "--votes", votes, "--sigma", "40", "--i-know", "--json")
    assert code == 0, err
    assert json.loads(out)["num_queries"] == 300
    assert "pate analyze: queries" in err and "300/300" in err


@pytest.mark.extended
def test_analyze_progress_counts_every_query() -> None:
    seen: list[int] = []
    votes = np.array([ROW] * 2_345)
    plain = analysis.analyze_gnmax(votes, sigma=40, delta=1e-5)
    assert analysis.analyze_gnmax(votes, sigma=40, delta=1e-5, progress=seen.append) == plain
    assert sum(seen) == 2_345 and len(seen) == 3


def test_analyze_help_documents_the_limits(cli) -> None:
    code, out, _ = cli.run_exit("pate", "analyze", "--help")
    text = " ".join(out.split())
    assert (
        code == 0
        and "--i-know" in text
        and "100,000 queries" in text
        and "10,000,000 counts" in text
        and "10,000 queries" in text
    )
