"""``dpaudit pate analyze``: the smooth-sensitivity release publishes nothing that undoes it, and
Confident-GNMax's ε says whether it is the realised or the expected cost (issue 29, defects 3 and 5).

The release (Papernot et al. 2018, §4.2, Theorem 23) must draw fresh noise unless a seed is given,
print no private quantity (the smooth sensitivity, the data-dependent ε or RDP, an order chosen from
the votes) and fix its order without the votes. The private quantities are recomputed here from the
library's public building blocks and searched for in the JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dpaudit.privacy.pate import analysis, mechanisms, smooth_sensitivity
from dpaudit.privacy.pate import votes as pate_votes

ROW = [200, 30, 10, 10, 0, 0, 0, 0, 0, 0]
RELEASE = ["--smooth-sensitivity-beta", "0.0329", "--smooth-sensitivity-sigma", "15"]


def _save(tmp_path: Path, name: str, array: np.ndarray) -> str:
    path = tmp_path / name
    np.save(path, array)
    return str(path)


def _split_votes(queries: int, seed: int) -> np.ndarray:
    """Votes far from unanimous (the data-dependent ε then prefers a low order)."""
    rng = np.random.default_rng(seed)
    return np.array([rng.multinomial(250, rng.dirichlet(np.full(10, 0.3))) for _ in range(queries)], dtype=np.int64)


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for k, x in node.items():
            yield f"{path}.{k}", k
            yield from _walk(x, f"{path}.{k}")
    elif isinstance(node, list):
        for i, x in enumerate(node):
            yield from _walk(x, f"{path}[{i}]")
    else:
        yield path, node


def _release_of(data: dict[str, Any]) -> dict[str, Any]:
    """The object of the JSON that describes the release (the one that names its beta)."""
    found = [node for where, node in _nodes(data) if isinstance(node, dict) and "beta" in node]
    assert len(found) == 1, found
    return found[0]


def _nodes(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    yield path, node
    if isinstance(node, dict):
        for k, x in node.items():
            yield from _nodes(x, f"{path}.{k}")


@pytest.mark.extended
def test_release_noise_is_fresh_without_a_seed_and_a_seed_says_not_private(cli, tmp_path: Path) -> None:
    # 200 queries and sigma_ss = 2 keep the noisy RDP clear of its clip at 0 (measured: no clip in
    # 100 draws), so two fresh draws differ; with 20 queries at sigma_ss = 15 both often clip to 0.
    votes = _save(tmp_path, "votes.npy", np.array([ROW] * 200, dtype=np.int64))
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
        "2",
        "--json",
    ]
    runs = [cli.run(*argv)[1] for _ in range(2)]
    assert runs[0] != runs[1], "two releases without --seed printed the same value"
    fresh = [json.loads(out) for out in runs]
    assert fresh[0]["release"]["epsilon_noisy_estimate"] != fresh[1]["release"]["epsilon_noisy_estimate"]
    assert all(
        r["release"]["seed"] is None and r["release"]["private"] is True and r["publishable"] is True for r in fresh
    )
    seeded = [json.loads(cli.run(*argv, "--seed", "7")[1]) for _ in range(2)]
    assert seeded[0]["release"]["epsilon_noisy_estimate"] == seeded[1]["release"]["epsilon_noisy_estimate"]
    assert (
        seeded[0]["release"]["reproducible"] is True
        and seeded[0]["release"]["private"] is False
        and seeded[0]["publishable"] is False
    )
    code, text, _ = cli.run(*argv[:-1], "--seed", "7")
    assert code == 0 and "REPRODUCIBLE, NOT PRIVATE" in text and "Do not publish" in text


@pytest.mark.extended
@pytest.mark.parametrize("aggregator", ["gnmax", "confident-gnmax"])
def test_release_json_holds_no_private_quantity(cli, tmp_path: Path, aggregator: str) -> None:
    votes = _split_votes(60, seed=1)
    answered = np.random.default_rng(2).random(60) < 0.5
    beta, sigma_ss, delta = 0.0329, 15.0, 1e-5
    noise = (
        ["--sigma", "40"]
        if aggregator == "gnmax"
        else [
            "--sigma",
            "40",
            "--threshold",
            "200",
            "--threshold-sigma",
            "150",
            "--answered",
            _save(tmp_path, "answered.npy", answered),
        ]
    )
    code, out, err = cli.run(
        "pate", "analyze", "--votes", _save(tmp_path, "votes.npy", votes), *noise, *RELEASE, "--seed", "3", "--json"
    )
    assert code == 0, err
    data = json.loads(out)
    lam = _release_of(data)["order"]
    # The private quantities, recomputed directly: at every order the old release could pick and at the one used.
    grid = [x for x in pate_votes.GNMAX_ORDERS if x < 1 / (2 * beta)]
    if aggregator == "gnmax":
        analyses = [
            analysis.analyze_gnmax(votes, sigma=40.0, delta=delta, orders=o) for o in (pate_votes.GNMAX_ORDERS, grid)
        ]
        per_row = [smooth_sensitivity.gnmax_local_sensitivities(r, sigma=40.0, order=lam) for r in votes]
        rdp_at = sum(mechanisms.gnmax_rdp(r, sigma=40.0, orders=[lam])[0] for r in votes)
    else:
        kw: dict[str, Any] = {"threshold": 200.0, "threshold_sigma": 150.0}
        analyses = [
            analysis.analyze_confident_gnmax(votes, **kw, sigma=40.0, delta=delta, orders=o, answered=a)
            for o in (pate_votes.GNMAX_ORDERS, grid)
            for a in (answered, None)
        ]
        per_row = [smooth_sensitivity.threshold_local_sensitivities(r, **kw, order=lam) for r in votes]
        per_row += [
            smooth_sensitivity.gnmax_local_sensitivities(r, sigma=40.0, order=lam, num_teachers=250)
            for r in votes[answered]
        ]
        rdp_at = sum(mechanisms.threshold_rdp(r, **kw, orders=[lam])[0] for r in votes) + sum(
            mechanisms.gnmax_rdp(r, sigma=40.0, orders=[lam])[0] for r in votes[answered]
        )
    ss = smooth_sensitivity.smooth_sensitivity(np.sum(per_row, axis=0), beta=beta)
    private = {"smooth sensitivity": ss, "data-dependent RDP at the release order": rdp_at}
    private["its ε"] = (
        rdp_at + smooth_sensitivity.gnss_rdp(beta=beta, sigma_ss=sigma_ss, order=lam) + math.log(1 / delta) / (lam - 1)
    )
    for i, a in enumerate(analyses):
        dep = a.data_dependent
        private |= {
            f"data-dependent ε {i}": dep.epsilon,
            f"improved {i}": dep.epsilon_improved,
            f"order {i}": dep.order,
            f"improved order {i}": dep.order_improved,
        }
        if dep.expected_answered is not None:
            private[f"expected answered {i}"] = dep.expected_answered
    # The votes chose another order than the release's (else the release's order is the data-chosen one).
    chosen = {k: x for k, x in private.items() if k.startswith("order")}
    assert lam not in chosen.values(), f"the release's order {lam} is the one the votes chose: {chosen}"
    # Public by construction (the votes' shape, δ, β, σ_ss, the data-independent bound at the
    # answered count): a private value may coincide with one of these (e.g. both orders 18.5).
    ind = analyses[0].data_independent
    public = {
        ind.epsilon,
        ind.order,
        lam,
        smooth_sensitivity.gnss_rdp(beta=beta, sigma_ss=sigma_ss, order=lam),
        beta,
        sigma_ss,
        delta,
        60,
        250,
        10,
        int(answered.sum()),
        3,
    }
    for where, value in _walk(data):
        if (
            any(isinstance(value, (int, float)) and math.isclose(value, x, rel_tol=1e-12) for x in public)
            and where.rsplit(".", 1)[-1] != "epsilon_noisy_estimate"
        ):
            continue
        if isinstance(value, str):
            assert not any(word in value.lower() for word in ("smooth_sensitivity", "noise")), (where, value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value != 0:
            hits = [name for name, x in private.items() if math.isclose(value, x, rel_tol=1e-9)]
            assert not hits, f"{where} = {value!r} is the private {hits}"


@pytest.mark.extended
def test_release_order_does_not_depend_on_the_votes(cli, tmp_path: Path) -> None:
    near_unanimous = np.array([[250, 0, 0, 0, 0, 0, 0, 0, 0, 0]] * 60, dtype=np.int64)
    split = _split_votes(60, seed=5)
    # The data-dependent analysis would pick different orders for these two matrices.
    grid = [x for x in pate_votes.GNMAX_ORDERS if x < 1 / (2 * 0.0329)]
    assert (
        analysis.analyze_gnmax(near_unanimous, sigma=10.0, delta=1e-5, orders=grid).data_dependent.order
        != analysis.analyze_gnmax(split, sigma=10.0, delta=1e-5, orders=grid).data_dependent.order
    )
    matrices = (near_unanimous, split, _split_votes(60, seed=6))
    orders = set()
    for i, votes in enumerate(matrices):
        code, out, err = cli.run(
            "pate", "analyze", "--votes", _save(tmp_path, f"v{i}.npy", votes), "--sigma", "10", *RELEASE, "--json"
        )
        assert code == 0, err
        orders.add(_release_of(json.loads(out))["order"])
    assert len(orders) == 1, orders
    # The same for Confident-GNMax with the same (public) number of answered queries.
    answered = np.zeros(60, dtype=bool)
    answered[:25] = True
    kw: dict[str, Any] = {
        "threshold": 200,
        "threshold_sigma": 150,
        "sigma": 10,
        "answered": answered,
        "delta": 1e-5,
        "beta": 0.0329,
        "sigma_ss": 15.0,
    }
    assert len({smooth_sensitivity.release_confident_gnmax_epsilon(votes, **kw).order for votes in matrices}) == 1


def test_confident_gnmax_names_its_expected_and_its_realised_cost(cli, tmp_path: Path) -> None:
    votes = _save(tmp_path, "votes.npy", np.array([ROW] * 50, dtype=np.int64))
    answered = np.zeros(50, dtype=bool)
    answered[:30] = True
    argv = ["pate", "analyze", "--votes", votes, "--sigma", "40", "--threshold", "200", "--threshold-sigma", "150"]
    code, text, _ = cli.run(*argv)
    assert (
        code == 0
        and "EXPECTED over the threshold step (not a bound for any one run)" in text
        and "realised" not in text.replace("the realised cost", "")
    )
    data = json.loads(cli.run(*argv, "--json")[1])
    assert (
        data["cost"] == "expected"
        and "epsilon_data_dependent_expected" in data
        and "epsilon_data_dependent_expected_improved" in data
    )
    assert not [k for k in data if k.startswith("epsilon_data_dependent") and "expected" not in k]
    with_mask = [*argv, "--answered", _save(tmp_path, "answered.npy", answered)]
    code, text, _ = cli.run(*with_mask)
    assert code == 0 and "realised (30 answered queries)" in text and "EXPECTED" not in text
    data = json.loads(cli.run(*with_mask, "--json")[1])
    assert data["cost"] == "realised" and data["num_answered"] == 30
    assert (
        not [k for k in data if "expected" in k and k != "expected_answered"]
        and "epsilon_data_dependent_realised" in data
    )
    # 30 answered where the expectation is 25 (P_ans = 0.5): the realised cost is the larger.
    assert (
        data["epsilon_data_dependent_realised"]
        > json.loads(cli.run(*argv, "--json")[1])["epsilon_data_dependent_expected"]
    )


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--seed", "1"], "--seed"),
        (["--smooth-sensitivity-order", "10"], "--smooth-sensitivity-order"),
        ([*RELEASE, "--smooth-sensitivity-order", "20"], "--smooth-sensitivity-order"),
    ],
)
def test_release_flags_without_a_release_or_out_of_range_exit_2(
    cli, tmp_path: Path, extra: list[str], flag: str
) -> None:
    votes = _save(tmp_path, "votes.npy", np.array([ROW] * 5, dtype=np.int64))
    code, _, err = cli.run("pate", "analyze", "--votes", votes, "--sigma", "40", *extra)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and flag in lines[0], err


def test_a_given_release_order_is_used_and_named(cli, tmp_path: Path) -> None:
    votes = _save(tmp_path, "votes.npy", np.array([ROW] * 5, dtype=np.int64))
    code, out, err = cli.run(
        "pate", "analyze", "--votes", votes, "--sigma", "40", *RELEASE, "--smooth-sensitivity-order", "12", "--json"
    )
    assert code == 0, err
    release = json.loads(out)["release"]
    assert release["order"] == 12.0 and release["order_rule"] == "given"
