"""CLI contract of `dpaudit epsilon`: JSON keys, reference vectors, exit statuses, one-line errors."""

import json
import math

import pytest

from dpaudit.privacy import accountants
from dpaudit.privacy.accountant_names import ACCOUNTANTS
from tests.privacy.accounting_reference import moments_epsilon

EPS = ("epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "4", "--num-steps", "10000", "--delta", "1e-5")


def test_epsilon_json_reproduces_reference_vectors(cli):
    code, out, _ = cli.run(*EPS, "--json")
    assert code == 0
    data = json.loads(out)
    assert set(ACCOUNTANTS.names()) <= set(data)
    # which accountant produced each value: here each one itself (no fallback)
    assert data["computed_by"] == {n: n for n in ACCOUNTANTS.names()} and data["notes"] == {}
    assert data["moments"] == pytest.approx(
        moments_epsilon(0.01, 4.0, 10_000, 1e-5), rel=1e-9
    )  # 1.2586, by its closed form
    assert data["rdp"] == pytest.approx(1.0355, abs=5e-5)
    assert data["pld"] == pytest.approx(0.947, rel=0.01)
    # 9.35 before issue 29 (first-order amplification of the classical ε0, not a valid bound)
    assert data["strong"] == pytest.approx(16.844, rel=1e-3)


def test_epsilon_text_output(cli):
    code, out, _ = cli.run(*EPS, "--accountant", "moments")
    assert code == 0 and "1.2586" in out and "pld" not in out


@pytest.mark.extended
def test_epsilon_solves_sigma_without_overshooting(cli):
    code, out, _ = cli.run(
        "epsilon",
        "--sampling-rate",
        "0.01",
        "--num-steps",
        "1000",
        "--delta",
        "1e-5",
        "--target-epsilon",
        "2",
        "--accountant",
        "rdp",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["solve"] == "noise_multiplier" and data["num_steps"] == 1000
    assert data["epsilon"]["rdp"] <= 2.0
    assert data["epsilon"]["rdp"] > 1.99


def test_epsilon_solves_steps(cli):
    code, out, _ = cli.run(
        "epsilon",
        "--sampling-rate",
        "0.01",
        "--noise-multiplier",
        "4",
        "--delta",
        "1e-5",
        "--target-epsilon",
        "1.2586",
        "--solve",
        "num-steps",
        "--accountant",
        "moments",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    assert data["epsilon"]["moments"] <= 1.2586
    assert 9_000 < data["num_steps"] <= 10_000


@pytest.mark.parametrize(
    "argv, needle",
    [
        (("--delta", "0"), "--delta"),
        (("--delta", "1"), "--delta"),
        (("--delta", "abc"), "'abc'"),
        (("--sampling-rate", "0"), "--sampling-rate"),
        (("--sampling-rate", "1.5"), "1.5"),
        (("--noise-multiplier", "0"), "--noise-multiplier"),
        (("--noise-multiplier", "-1"), "-1"),
        (("--noise-multiplier", "nan"), "nan"),
        (("--num-steps", "-5"), "--num-steps"),
        (("--num-steps", "0"), "--num-steps"),
        (("--num-steps", "2.5"), "'2.5'"),
        (("--accountant", "magic"), "magic"),
        (("--target-epsilon", "-1"), "--target-epsilon"),
        (("--solve", "delta"), "delta"),
    ],
)
def test_epsilon_bad_input_exits_2_with_one_line(cli, argv, needle):
    base = dict(zip(EPS[1::2], EPS[2::2]))
    base.update(dict(zip(argv[0::2], argv[1::2])))
    args = ["epsilon"] + [x for kv in base.items() for x in kv]
    code, out, err = cli.run_exit(*args)
    assert code == 2 and (out == "" or "error" in json.loads(out))
    assert len(err.strip().splitlines()) == 1 and needle in err and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, needle",
    [
        (("epsilon", "--sampling-rate", "0.1", "--delta", "1e-5"), "--noise-multiplier"),
        (
            (
                "epsilon",
                "--sampling-rate",
                "0.1",
                "--delta",
                "1e-5",
                "--noise-multiplier",
                "1",
                "--num-steps",
                "10",
                "--target-epsilon",
                "1",
            ),
            "conflicts",
        ),
        (
            ("epsilon", "--sampling-rate", "0.1", "--delta", "1e-5", "--target-epsilon", "1", "--solve", "num-steps"),
            "--noise-multiplier",
        ),
        (
            (
                "epsilon",
                "--sampling-rate",
                "1",
                "--delta",
                "1e-5",
                "--noise-multiplier",
                "0.1",
                "--target-epsilon",
                "0.01",
                "--solve",
                "num-steps",
                "--accountant",
                "rdp",
            ),
            "single step",
        ),
    ],
)
def test_epsilon_inconsistent_arguments_exit_2(cli, argv, needle):
    code, out, err = cli.run(*argv)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1


AGM = [
    ((0.1, 1e-5), 30.749566),
    ((0.5, 1e-5), 7.031827),
    ((1, 1e-5), 3.730632),
    ((2, 1e-5), 1.993812),
    ((4, 1e-5), 1.081162),
    ((8, 1e-5), 0.600229),
    ((1, 1e-6), 4.224679),
    ((1, 0.05), 1.332778),
    ((4, 0.05), 0.545137),
    ((0.5, 0.3), 0.865869),
]
EGM = [((1, 1e-5), 4.854241), ((4, 1e-5), 1.285080), ((1, 0.05), 2.549790), ((4, 0.05), 0.754169)]


@pytest.mark.parametrize("target, sigma", AGM)
def test_epsilon_gaussian_analytic_vectors(cli, target, sigma):
    eps, delta = target
    code, out, _ = cli.run(
        "epsilon",
        "--mechanism",
        "gaussian",
        "--target-epsilon",
        str(eps),
        "--delta",
        str(delta),
        "--calibration",
        "analytic",
        "--json",
    )
    assert code == 0 and round(json.loads(out)["sigma"]["analytic"], 6) == sigma


@pytest.mark.parametrize("target, sigma", EGM)
def test_epsilon_gaussian_extended_vectors(cli, target, sigma):
    eps, delta = target
    code, out, _ = cli.run(
        "epsilon", "--mechanism", "gaussian", "--target-epsilon", str(eps), "--delta", str(delta), "--json"
    )
    data = json.loads(out)["sigma"]
    assert code == 0 and round(data["extended"], 6) == sigma
    assert (data["classical"] is None) == (eps > 1)


def test_epsilon_gaussian_exact_epsilon_inverts_calibration(cli):
    code, out, _ = cli.run(
        "epsilon", "--mechanism", "gaussian", "--noise-multiplier", "3.730632", "--delta", "1e-5", "--json"
    )
    assert code == 0 and json.loads(out)["epsilon"] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize(
    "argv, needle",
    [
        (("--target-epsilon", "4", "--delta", "1e-5", "--calibration", "classical"), "<= 1"),
        (("--sampling-rate", "0.1", "--target-epsilon", "1", "--delta", "1e-5"), "dpsgd only"),
        (("--delta", "1e-5"), "--noise-multiplier or --target-epsilon"),
        (("--target-epsilon", "1", "--delta", "0.6", "--calibration", "extended"), "0.484"),
        (("--noise-multiplier", "1", "--target-epsilon", "1", "--delta", "1e-5"), "conflicts"),
    ],
)
def test_epsilon_gaussian_bad_input(cli, argv, needle):
    code, out, err = cli.run("epsilon", "--mechanism", "gaussian", *argv)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1


def test_epsilon_gaussian_bad_sensitivity(cli):
    code, _, err = cli.run_exit(
        "epsilon", "--mechanism", "gaussian", "--noise-multiplier", "1", "--delta", "1e-5", "--sensitivity", "0"
    )
    assert code == 2 and "--sensitivity" in err


def test_epsilon_dpsgd_needs_sampling_rate(cli):
    code, _, err = cli.run("epsilon", "--noise-multiplier", "1", "--num-steps", "3", "--delta", "1e-5")
    assert code == 2 and "--sampling-rate" in err


# --------------------------------------------------------------------------------------------
# issue 11: bounded memory (finding 4), no exit 1 (finding 6), no silent cap (finding 9)
# --------------------------------------------------------------------------------------------

# T = 10^12 asked dp_accounting for a 4 TiB array (an immediate MemoryError, exit 1). The cases
# that grew past 18 GB before failing run in a memory-capped child: tests/hostile/test_epsilon_bounds.py.
HUGE_T = (
    "epsilon",
    "--sampling-rate",
    "0.01",
    "--noise-multiplier",
    "4",
    "--num-steps",
    str(10**12),
    "--delta",
    "1e-5",
)


def test_pld_beyond_its_memory_budget_falls_back_to_rdp_and_says_so(cli):
    code, out, err = cli.run(*HUGE_T, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["computed_by"]["pld"] == "rdp" and data["pld"] == data["rdp"]
    assert {n: by for n, by in data["computed_by"].items() if n != "pld"} == {
        "moments": "moments",
        "rdp": "rdp",
        "strong": "strong",
        "naive": "naive",
    }
    (line,) = [ln for ln in err.splitlines() if "using rdp instead" in ln]
    assert (
        line.startswith("dpaudit epsilon: pld: pld would need ~")
        and "GB" in line
        and "q=0.01, sigma=4, T=1000000000000" in line
    )


def test_pld_fallback_is_marked_in_the_text_output(cli):
    code, out, _ = cli.run(*HUGE_T, "--accountant", "pld")
    assert code == 0 and "(computed by rdp)" in out


def test_solve_num_steps_reports_reaching_the_cap(cli):
    # Was: "at most T = 10000000 steps" for a target of 10^6 that T = 10^7 is far from.
    argv = (
        "epsilon",
        "--sampling-rate",
        "0.01",
        "--noise-multiplier",
        "4",
        "--delta",
        "1e-5",
        "--target-epsilon",
        "1e6",
        "--solve",
        "num-steps",
        "--accountant",
        "rdp",
    )
    code, out, err = cli.run(*argv, "--max-num-steps", "1000", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["num_steps"] == 1000 and data["max_num_steps"] == 1000 and data["capped"] is True
    assert any("--max-num-steps 1000" in n and "no T <= 1000 reaches" in n for n in data["solver_notes"])
    assert "no T <= 1000 reaches epsilon=1e+06" in err
    code, out, _ = cli.run(*argv, "--max-num-steps", "1000")
    assert code == 0 and "no T <= 1000 reaches" in out


def test_solve_num_steps_below_the_cap_is_not_marked(cli):
    code, out, _ = cli.run(
        "epsilon",
        "--sampling-rate",
        "0.01",
        "--noise-multiplier",
        "4",
        "--delta",
        "1e-5",
        "--target-epsilon",
        "1.2586",
        "--solve",
        "num-steps",
        "--accountant",
        "moments",
        "--json",
    )
    data = json.loads(out)
    assert code == 0 and data["capped"] is False and data["max_num_steps"] == 10**7 and data["solver_notes"] == []


def test_max_num_steps_default_is_documented(cli):
    code, out, _ = cli.run_exit("epsilon", "--help")
    assert code == 0 and "--max-num-steps" in out and "10,000,000" in out


@pytest.mark.parametrize("value", ["0", "-3", "2.5", str(10**19)])
def test_max_num_steps_bad_values_exit_2(cli, value):
    code, _, err = cli.run_exit(
        "epsilon",
        "--sampling-rate",
        "0.01",
        "--noise-multiplier",
        "4",
        "--delta",
        "1e-5",
        "--target-epsilon",
        "1",
        "--solve",
        "num-steps",
        "--max-num-steps",
        value,
    )
    assert code == 2 and "--max-num-steps" in err and len(err.strip().splitlines()) == 1
    assert "unrecognized" not in err  # the flag exists, and the error is about its value


@pytest.mark.parametrize("sigma", ["1e-300", "1e300"])
def test_extreme_noise_multiplier_exits_0(cli, sigma):
    # Was: exit 1 (ZeroDivisionError / OverflowError).
    code, out, err = cli.run(
        "epsilon",
        "--sampling-rate",
        "0.01",
        "--noise-multiplier",
        sigma,
        "--num-steps",
        "10",
        "--delta",
        "1e-5",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    if sigma == "1e-300":
        assert all(data[n] == "inf" for n in ACCOUNTANTS.names())
        assert "exceeds the floating-point range" in data["notes"]["pld"]
    else:
        assert all(0.0 <= data[n] < 0.5 for n in ACCOUNTANTS.names())


@pytest.mark.extended
def test_solve_sigma_for_a_huge_target_says_where_the_search_stops(cli):
    code, out, err = cli.run(
        "epsilon",
        "--sampling-rate",
        "0.01",
        "--num-steps",
        "100",
        "--delta",
        "1e-5",
        "--target-epsilon",
        "1e300",
        "--accountant",
        "rdp",
        "--json",
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["noise_multiplier"] < 0.002 and any("smaller noise multipliers" in n for n in data["solver_notes"])


def test_gaussian_output_is_readable_for_extreme_values(cli):
    code, out, _ = cli.run("epsilon", "--mechanism", "gaussian", "--noise-multiplier", "1e-100", "--delta", "1e-5")
    assert code == 0 and len(out) < 200  # was ε printed with 200 digits of %f
    code, out, _ = cli.run(
        "epsilon",
        "--mechanism",
        "gaussian",
        "--target-epsilon",
        "1e300",
        "--delta",
        "1e-5",
        "--calibration",
        "analytic",
    )
    assert code == 0 and "0.000000" not in out and "e-151" in out  # was "0.000000"


def test_epsilon_verb_prints_a_declined_accountant(cli, monkeypatch):
    # DP-SGD events never make an accountant decline; stand one in to check the output.
    real = accountants.compute_epsilon_detailed

    def declining(event, *, delta, accountant, **kw):
        if accountant == "strong":
            return accountants.EpsilonResult(
                math.inf, "strong", "strong", "it composes Gaussian steps only", declined=True
            )
        return real(event, delta=delta, accountant=accountant, **kw)

    monkeypatch.setattr(accountants, "compute_epsilon_detailed", declining)
    args = ("epsilon", "--sampling-rate", "0.01", "--noise-multiplier", "4", "--num-steps", "100", "--delta", "1e-5")
    code, out, _ = cli.run(*args, "--accountant", "strong")
    assert code == 0 and "strong   declined: it composes Gaussian steps only" in out and "inf" not in out
    code, out, _ = cli.run(*args, "--json")
    data = json.loads(out)
    assert code == 0 and "strong" not in data and "strong" not in data["computed_by"]
    assert data["notes"] == {"strong": "declined: it composes Gaussian steps only"}
    assert data["naive"] > data["pld"]


def _printed_values(text: str) -> dict[str, float]:
    """Accountant → the number its line prints (a reader's parse: the first token after the name)."""
    out = {}
    for line in text.splitlines()[1:]:
        name, value = line.split()[:2]
        out[name] = math.inf if value == "inf" else float(value.replace(",", ""))
    return out


def test_no_upper_bound_is_printed_below_its_json_value(cli):
    # Issue 42, part 3: at this setting four decimals printed naive 2.69e-05 as 0.0000 and strong
    # 2.08e-04 as 0.0002, each below the bound it stands for.
    argv = ("epsilon", "--sampling-rate", "0.0001", "--noise-multiplier", "20", "--num-steps", "1", "--delta", "1e-12")
    code, text, _ = cli.run(*argv)
    assert code == 0
    code, raw, _ = cli.run(*argv, "--json")
    exact = {k: float(x) for k, x in json.loads(raw).items() if isinstance(x, (int, float))}
    printed = _printed_values(text)
    assert set(printed) == set(exact) and len(exact) == 5
    below = {name: (printed[name], value) for name, value in exact.items() if printed[name] < value}
    assert not below, below
    # ...and close to it, at four significant digits or more: a tiny bound keeps its digits.
    far = {name: (printed[name], value) for name, value in exact.items() if printed[name] > value * (1 + 1e-3)}
    assert not far, far
