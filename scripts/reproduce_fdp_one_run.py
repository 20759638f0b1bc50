"""Reproduce the idealised one-run table of Mahloujifar, Melis & Chaudhuri (ICML 2025).

The idealised Gaussian mechanism: m canaries, each included independently with probability ½;
the auditor sees, per canary, score = μ·1{included} + N(0, 1) (the Gaussian mechanism run once
per canary), guesses IN for the top-k and OUT for the bottom-k scores, and bounds ε at
δ = 1e-5 with 95 % confidence from (m, r = 2k, v correct), with Steinke, Nasr & Jagielski
(2023) and with the f-DP bound (Gaussian trade-off curve, :mod:`dpaudit.privacy.fdp_one_run`).
μ = 2, 1, 0.5, 0.25 are the mechanisms of true ε 9.99, 4.37, 1.99, 0.92 at δ = 1e-5.

Three numbers per bound and row:

* ``expected``: the expected counts (:func:`idealised_gaussian_counts`), best k over a grid,
  deterministic;
* ``simulated``: mean ± standard error over seeded runs (seeds 0, 1, …, none dropped) of the
  best guess count per run over 50 log-spaced total guess counts from 10 to m (the grid of the
  Gaussian example in the authors' PrivacyGuard library). LABELLED AS THE PAPER'S PROTOCOL: the
  count is chosen after seeing the run and nothing is paid for the choice, so this is an
  idealised figure of what the bound can reach, not an audit;
* ``honest``: the first simulated run bounded as :func:`dpaudit.privacy.audit_procedures.audit_from_one_run`
  does it (Bonferroni over the default guess grid), which is what a user gets.

Why ``expected`` stays below the published f-DP column while ``simulated`` comes close: the f-DP
bound drops by about 0.7 in ε per wrong guess among the top scores, so the number of wrong
guesses, not its mean, drives it, and picking the count after the fact favours runs and counts
with few of them. The recursion itself agrees step for step with the authors' implementation
(see :mod:`dpaudit.privacy.fdp_one_run`).

Usage: ``python scripts/reproduce_fdp_one_run.py [--seeds 10] [--quick] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dpaudit.api import (  # noqa: E402
    fdp_one_run_bound_from_scores,
    fdp_one_run_epsilon_lb,
    gdp_epsilon,
    idealised_gaussian_counts,
    one_run_bound_from_scores,
    one_run_epsilon_lb,
)

DELTA = 1e-5
CONFIDENCE = 0.95
#: (μ, canaries m, published f-DP ε_LB, published Steinke ε_LB): the paper's table, docs/audits/statistics.md §8.
ROWS = ((2.0, 10**5, 8.16, 4.99), (1.0, 10**5, 3.61, 2.61), (0.5, 10**5, 1.59, 1.33), (0.25, 10**6, 0.82, 0.61))


def guess_grid(m: int, num: int = 60) -> list[int]:
    """k per side on a geometric grid from 50 to m/4 (both bounds peak well inside it)."""
    return sorted({int(k) for k in np.geomspace(50, m // 4, num)})


def best_over_k(m: int, counts: list[tuple[int, int]]) -> tuple[float, float, int, int]:
    """(best f-DP ε, best Steinke ε, r of the f-DP best, r of the Steinke best) over (r, v) pairs, uncorrected."""
    best_f = best_s = 0.0
    r_f = r_s = 0
    for r, c in counts:
        f = fdp_one_run_epsilon_lb(num_canaries=m, num_guesses=r, num_correct=c, delta=DELTA, confidence=CONFIDENCE)
        s = one_run_epsilon_lb(num_canaries=m, num_guesses=r, num_correct=c, delta=DELTA, confidence=CONFIDENCE)
        if f > best_f:
            best_f, r_f = f, r
        if s > best_s:
            best_s, r_s = s, r
    return best_f, best_s, r_f, r_s


def paper_grid(m: int, num: int = 50) -> list[int]:
    """Guesses per side for 50 log-spaced total guess counts from 10 to m (each ≥ 1, ≤ m/2)."""
    return sorted({max(1, int(n) // 2) for n in np.logspace(1, np.log10(m), num)})


def simulate(mu: float, m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([seed, m, int(mu * 1000)])
    included = rng.random(m) < 0.5
    return mu * included + rng.standard_normal(m), included


def counts_from_run(scores: np.ndarray, included: np.ndarray, ks: list[int]) -> list[tuple[int, int]]:
    order = np.argsort(-scores, kind="stable")
    top = np.cumsum(included[order])
    bottom = np.cumsum(~included[order[::-1]])
    return [(2 * k, int(top[k - 1] + bottom[k - 1])) for k in ks]


def pct(ours: float, published: float) -> float:
    return 100.0 * (ours - published) / published


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--seeds", type=int, default=20, help="simulated runs per row (default 20; the 10^6-canary row uses at most 10)"
    )
    p.add_argument("--quick", action="store_true", help="expected counts only (no simulation): seconds")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the measured figures here")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error(f"--seeds must be >= 1, got {args.seeds}")

    rows = []
    for mu, m, pub_f, pub_s in ROWS:
        t0 = time.perf_counter()
        ks = guess_grid(m)
        true_eps = gdp_epsilon(mu=mu, delta=DELTA)
        exp_f, exp_s, exp_rf, exp_rs = best_over_k(
            m, [idealised_gaussian_counts(mu=mu, num_canaries=m, num_guesses_per_side=k) for k in ks]
        )
        row: dict = {
            "mu": mu,
            "num_canaries": m,
            "true_epsilon": true_eps,
            "published": {"fdp": pub_f, "steinke": pub_s},
            "expected": {"fdp": exp_f, "steinke": exp_s, "fdp_num_guesses": exp_rf, "steinke_num_guesses": exp_rs},
        }
        if not args.quick:
            n = min(args.seeds, 10) if m > 10**5 else args.seeds
            sims_f, sims_s = [], []
            honest: dict = {}
            sim_ks = paper_grid(m)
            for seed in range(n):
                scores, included = simulate(mu, m, seed)
                f, s, _, _ = best_over_k(m, counts_from_run(scores, included, sim_ks))
                sims_f.append(f)
                sims_s.append(s)
                if seed == 0:
                    hf = fdp_one_run_bound_from_scores(
                        scores,
                        included,
                        delta=DELTA,
                        confidence=CONFIDENCE,
                        guess_counts=sorted({max(1, int(m * x)) for x in (0.02, 0.05, 0.1, 0.2, 0.5)}),
                    )
                    hs = one_run_bound_from_scores(scores, included, delta=DELTA, confidence=CONFIDENCE)
                    honest = {"fdp": hf[0], "steinke": hs[0]}
            row["simulated"] = {
                "runs": n,
                "fdp_mean": float(np.mean(sims_f)),
                "fdp_sd": float(np.std(sims_f, ddof=1)) if n > 1 else 0.0,
                "fdp_se": float(np.std(sims_f, ddof=1) / np.sqrt(n)) if n > 1 else 0.0,
                "steinke_mean": float(np.mean(sims_s)),
                "steinke_sd": float(np.std(sims_s, ddof=1)) if n > 1 else 0.0,
                "steinke_se": float(np.std(sims_s, ddof=1) / np.sqrt(n)) if n > 1 else 0.0,
                "fdp_runs": sims_f,
                "steinke_runs": sims_s,
            }
            row["honest"] = honest
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        print(f"  mu={mu:g} m={m:.0e}: {row['seconds']:.1f} s", file=sys.stderr, flush=True)

    print(
        f"\nIdealised Gaussian one-run audit, delta={DELTA:g}, {CONFIDENCE:.0%} "
        "confidence (Mahloujifar et al. 2025, table of "
        "docs/audits/statistics.md §8)\n"
    )
    head = (
        f"{'true eps':>8} {'m':>6} | {'f-DP pub':>8} {'expected':>8} {'Δ%':>6} "
        f"{'simulated':>12} {'Δ%':>6} | {'Stk pub':>7} {'expected':>8} {'Δ%':>6} "
        f"{'simulated':>12} {'Δ%':>6}"
    )
    if not args.quick:
        head += f" | {'honest f-DP':>11} {'honest Stk':>10}"
    print(head)
    print("-" * len(head))
    for row in rows:
        pf, ps = row["published"]["fdp"], row["published"]["steinke"]
        ef, es = row["expected"]["fdp"], row["expected"]["steinke"]
        line = f"{row['true_epsilon']:8.2f} {row['num_canaries']:6.0e} | {pf:8.2f} {ef:8.2f} {pct(ef, pf):+6.1f}"
        if "simulated" in row:
            sim = row["simulated"]
            line += f" {sim['fdp_mean']:6.2f}±{sim['fdp_se']:<5.2f} {pct(sim['fdp_mean'], pf):+6.1f}"
        else:
            line += f" {'-':>12} {'':>6}"
        line += f" | {ps:7.2f} {es:8.2f} {pct(es, ps):+6.1f}"
        if "simulated" in row:
            sim = row["simulated"]
            line += f" {sim['steinke_mean']:6.2f}±{sim['steinke_se']:<5.2f} {pct(sim['steinke_mean'], ps):+6.1f}"
            line += f" | {row['honest']['fdp']:11.2f} {row['honest']['steinke']:10.2f}"
        print(line)
    print(
        "\nexpected: expected counts, best k (uncorrected); simulated (paper's "
        "protocol): mean ± standard error over seeds 0..n-1,"
        "\n  best of 50 log-spaced guess counts per run, chosen after the fact "
        "and uncorrected (an idealised figure, not an audit);"
        "\nhonest: one run, Bonferroni over the default guess grid (what `dpaudit audit --method one-run` reports)."
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"delta": DELTA, "confidence": CONFIDENCE, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
