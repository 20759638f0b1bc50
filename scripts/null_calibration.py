"""Null calibration of every ε_LB procedure: how often does it flag a mechanism that meets its claim?

docs/architecture.md, "Soundness": every ε_LB procedure's false-violation rate is simulated under the null
at its claimed confidence. Each cell of the table pairs one procedure with one *ideal* mechanism
sitting exactly at its claimed ε (at δ = 1e-5), observed through its most powerful score (the
raw output, whose likelihood ratio is monotone in it), and counts the simulations in which the
procedure reports ε_LB > ε. A sound procedure at confidence 0.95 does so at most 5 % of the time;
the rate is printed with its own two-sided 95 % Clopper–Pearson interval. A cell whose interval
lies wholly above 1 − confidence is a soundness bug, and the script exits 1.

Mechanisms (score of one observation; "IN" = the canary / record is in the data):

* ``gaussian`` — the Gaussian mechanism, μ = 1: IN ~ N(1, 1), OUT ~ N(0, 1); ε exact from the
  μ-GDP curve (Balle & Wang 2018; Dong, Roth & Su 2022, Cor. 2.13).
* ``sampled-gaussian`` — one Poisson-sampled Gaussian step, q = 0.5, σ = 1 (what one DP-SGD step
  releases about a record that is sampled with probability q): IN ~ (1 − q) N(0, 1) + q N(1, 1),
  OUT ~ N(0, 1); ε by the PLD accountant of ``dp_accounting`` on the claim's event.
* ``laplace`` — the Laplace mechanism, pure ε₀ = 1: IN ~ Lap(1, 1), OUT ~ Lap(0, 1); ε(δ) =
  ε₀ + 2 ln(1 − δ) exactly.
* ``randomized-response`` — one bit, pure ε₀ = 1: P[1] = e^ε₀/(1 + e^ε₀) IN, 1/(1 + e^ε₀) OUT;
  ε(δ) = ln((p − δ)/(1 − p)) exactly.

Procedures, each called through its public function at confidence 0.95:

* ``multi-run CP`` — :func:`dpaudit.privacy.audit_stats.bound_from_scores`, Clopper–Pearson,
  Bonferroni over 20 thresholds (the audit's black-box default strategy);
* ``multi-run GDP`` — the same with ``method="gdp"`` (Nasr et al. 2023, §4);
* ``one-run Steinke`` — :func:`dpaudit.privacy.audit_stats.one_run_bound_from_scores` (Steinke,
  Nasr & Jagielski 2023, Thm 3.1), m canaries each included with probability ½;
* ``one-run f-DP`` — :func:`dpaudit.privacy.fdp_one_run.fdp_one_run_bound_from_scores` with the
  Gaussian curve, the one ``dpaudit audit --one-run-bound fdp`` uses (Mahloujifar, Melis &
  Chaudhuri 2025);
* ``membership`` — :meth:`dpaudit.results.MembershipResult.epsilon_bound`, the ε_LB every
  membership attack reports (members IN, non-members OUT);
* ``compare max`` — the row maximum of ``dpaudit compare``: 2 attacks (the raw score, and a weaker
  one with unit Gaussian noise added) × 2 seeds of membership bounds plus one multi-run audit
  (the bound :func:`dpaudit.privacy.audit_bounds.resolve_bound` picks for the claim), each taken at the
  Bonferroni level 1 − (1 − confidence)/5, as ``CompareGrid.bound_confidence`` does.

The GDP-shaped procedures (multi-run GDP, one-run f-DP) apply only to claims whose trade-off curve
is Gaussian-family (:attr:`dpaudit.privacy.claims.PrivacyClaim.trade_off_family`); with the other
mechanisms their cells are n/a, because the audit refuses them there. Randomized response has no
``dp_accounting`` event, so no claim object: it is a pure-ε mechanism, not Gaussian-family.

Power: the mean of ε_LB / ε over the same null simulations (how much of the true ε the procedure
certifies at this sample size; 1 would be a perfectly tight bound).

Sizes: ``--num-observations`` (default 2,000) observations per side for the multi-run,
membership and compare procedures; ``--num-canaries`` (default 2,000) canaries for the one-run
ones; ``--simulations`` (default 1,000) independent simulations per cell.

Usage: ``python scripts/null_calibration.py [--simulations 1000] [--seed 0] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dp_accounting import dp_event as dpe  # noqa: E402

from dpaudit.api import (  # noqa: E402
    DPClaim,
    MembershipResult,
    bound_from_scores,
    fdp_one_run_bound_from_scores,
    gdp_epsilon,
    one_run_bound_from_scores,
    resolve_bound,
)

DELTA = 1e-5
CONFIDENCE = 0.95
#: Bounds a ``compare`` row is the maximum of here: 2 attacks × 2 seeds + 1 audit.
COMPARE_ATTACKS, COMPARE_SEEDS = 2, 2
COMPARE_BOUNDS = COMPARE_ATTACKS * COMPARE_SEEDS + 1

Sampler = Callable[[np.random.Generator, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Mechanism:
    """An ideal mechanism at its claimed ε: a sampler of one score per inclusion flag, its ε, its claim."""

    name: str
    exact_epsilon: Callable[[], float]
    claim: DPClaim | None
    sample: Sampler
    note: str

    @functools.cached_property
    def epsilon(self) -> float:
        """ε at :data:`DELTA` (computed once, on first use: the PLD of the sampled step takes a second)."""
        return self.exact_epsilon()

    @property
    def gaussian_family(self) -> bool:
        return self.claim is not None and self.claim.trade_off_family == "gaussian"


def _gaussian(rng: np.random.Generator, inc: np.ndarray) -> np.ndarray:
    return rng.standard_normal(inc.shape) + inc


def _sampled_gaussian(q: float) -> Sampler:
    def sample(rng: np.random.Generator, inc: np.ndarray) -> np.ndarray:
        return rng.standard_normal(inc.shape) + (inc & (rng.random(inc.shape) < q))

    return sample


def _laplace(rng: np.random.Generator, inc: np.ndarray) -> np.ndarray:
    return rng.laplace(0.0, 1.0, inc.shape) + inc


def _randomized_response(eps0: float) -> Sampler:
    p = 1.0 / (1.0 + math.exp(-eps0))

    def sample(rng: np.random.Generator, inc: np.ndarray) -> np.ndarray:
        # Report the truth (1 for IN, 0 for OUT) with probability p.
        return (inc == (rng.random(inc.shape) < p)).astype(float)

    return sample


@functools.lru_cache(maxsize=1)
def mechanisms() -> tuple[Mechanism, ...]:
    """The four ideal mechanisms of the table, each exactly at its claimed ε at δ = :data:`DELTA`."""
    q, sigma = 0.5, 1.0
    sampled = DPClaim(
        event=dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(sigma)),
        description=f"one Poisson-sampled Gaussian step q={q:g} sigma={sigma:g}",
    )
    p = 1.0 / (1.0 + math.exp(-1.0))
    return (
        Mechanism(
            "gaussian",
            lambda: gdp_epsilon(mu=1.0, delta=DELTA),
            DPClaim(event=dpe.GaussianDpEvent(1.0), description="Gaussian mu=1"),
            _gaussian,
            "mu = 1, exact",
        ),
        Mechanism(
            "sampled-gaussian",
            lambda: sampled.epsilon(delta=DELTA, accountant="pld"),
            sampled,
            _sampled_gaussian(q),
            f"q = {q:g}, sigma = {sigma:g}, PLD",
        ),
        Mechanism(
            "laplace",
            lambda: 1.0 + 2.0 * math.log1p(-DELTA),
            DPClaim(event=dpe.LaplaceDpEvent(1.0), description="Laplace eps=1"),
            _laplace,
            "pure eps 1, exact",
        ),
        Mechanism(
            "randomized-response",
            lambda: math.log((p - DELTA) / (1.0 - p)),
            None,
            _randomized_response(1.0),
            "pure eps 1, exact",
        ),
    )


# ----------------------------------------------------------------------------- procedures
def _in_out(mech: Mechanism, rng: np.random.Generator, sims: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    return mech.sample(rng, np.ones((sims, n), dtype=bool)), mech.sample(rng, np.zeros((sims, n), dtype=bool))


def _one_run_draw(mech: Mechanism, rng: np.random.Generator, sims: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    inc = rng.random((sims, m)) < 0.5
    return mech.sample(rng, inc), inc


def multi_run(method: str) -> Callable[..., np.ndarray]:
    def run(mech: Mechanism, rng: np.random.Generator, sims: int, n: int, m: int) -> np.ndarray:
        s_in, s_out = _in_out(mech, rng, sims, n)
        return np.array(
            [
                bound_from_scores(s_in[i], s_out[i], delta=DELTA, confidence=CONFIDENCE, method=method).epsilon_lb
                for i in range(sims)
            ]
        )

    return run


def one_run_steinke(mech: Mechanism, rng: np.random.Generator, sims: int, n: int, m: int) -> np.ndarray:
    scores, inc = _one_run_draw(mech, rng, sims, m)
    return np.array(
        [
            one_run_bound_from_scores(scores[i], inc[i], delta=DELTA, confidence=CONFIDENCE, seed=i)[0]
            for i in range(sims)
        ]
    )


def one_run_fdp(mech: Mechanism, rng: np.random.Generator, sims: int, n: int, m: int) -> np.ndarray:
    scores, inc = _one_run_draw(mech, rng, sims, m)
    return np.array(
        [
            fdp_one_run_bound_from_scores(scores[i], inc[i], delta=DELTA, confidence=CONFIDENCE, seed=i)[0]
            for i in range(sims)
        ]
    )


def _membership_lb(s_in: np.ndarray, s_out: np.ndarray, confidence: float) -> float:
    scores = np.concatenate([s_in, s_out])
    result = MembershipResult(
        attack="ideal",
        model_id="null",
        sample_ids=np.arange(scores.size),
        scores=scores,
        is_member=np.arange(scores.size) < s_in.size,
    )
    return result.epsilon_bound(delta=DELTA, confidence=confidence).epsilon_lb


def membership(mech: Mechanism, rng: np.random.Generator, sims: int, n: int, m: int) -> np.ndarray:
    s_in, s_out = _in_out(mech, rng, sims, n)
    return np.array([_membership_lb(s_in[i], s_out[i], CONFIDENCE) for i in range(sims)])


def compare_max(mech: Mechanism, rng: np.random.Generator, sims: int, n: int, m: int) -> np.ndarray:
    level = 1.0 - (1.0 - CONFIDENCE) / COMPARE_BOUNDS
    # The row's audit takes the bound the audit would pick for the claim (no claim: Clopper–Pearson).
    audit_method = resolve_bound("auto", claim=mech.claim) if mech.claim is not None else "clopper-pearson"
    seeds = [_in_out(mech, rng, sims, n) for _ in range(COMPARE_SEEDS)]
    noise = [rng.standard_normal((sims, n)) for _ in range(2 * COMPARE_SEEDS)]
    a_in, a_out = _in_out(mech, rng, sims, n)
    out = np.empty(sims)
    for i in range(sims):
        bounds = [bound_from_scores(a_in[i], a_out[i], delta=DELTA, confidence=level, method=audit_method).epsilon_lb]
        for j, (s_in, s_out) in enumerate(seeds):
            bounds.append(_membership_lb(s_in[i], s_out[i], level))  # the raw score
            bounds.append(
                _membership_lb(s_in[i] + noise[2 * j][i], s_out[i] + noise[2 * j + 1][i], level)
            )  # a weaker attack
        out[i] = max(bounds)
    return out


#: (name, runner, needs a Gaussian-family claim).
PROCEDURES: list[tuple[str, Callable[..., np.ndarray], bool]] = [
    ("multi-run CP", multi_run("clopper-pearson"), False),
    ("multi-run GDP", multi_run("gdp"), True),
    ("one-run Steinke", one_run_steinke, False),
    ("one-run f-DP", one_run_fdp, True),
    ("membership", membership, False),
    ("compare max", compare_max, False),
]


# ----------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class Cell:
    procedure: str
    mechanism: str
    epsilon: float
    simulations: int
    violations: int
    rate: float
    rate_ci: tuple[float, float]
    mean_ratio: float
    seconds: float
    applicable: bool = True
    reason: str = ""

    @property
    def miscalibrated(self) -> bool:
        """The rate's whole 95 % interval lies above 1 − confidence: a soundness bug, not chance."""
        return self.applicable and self.rate_ci[0] > 1.0 - CONFIDENCE


def run_cell(
    proc: str, mech: Mechanism, *, simulations: int, num_observations: int, num_canaries: int, seed: int
) -> Cell:
    """One cell: ``simulations`` independent audits of ``mech`` with ``proc``, seeded by (seed, cell)."""
    names = [p[0] for p in PROCEDURES]
    runner, needs_gaussian = PROCEDURES[names.index(proc)][1:]
    if needs_gaussian and not mech.gaussian_family:
        why = (
            "no claim kind (not Gaussian-family)"
            if mech.claim is None
            else f"claim is not Gaussian-family (trade_off_family={mech.claim.trade_off_family})"
        )
        return Cell(
            proc,
            mech.name,
            mech.epsilon,
            0,
            0,
            math.nan,
            (math.nan, math.nan),
            math.nan,
            0.0,
            applicable=False,
            reason=f"n/a: {why}; the audit refuses this bound",
        )
    mech_index = [m.name for m in mechanisms()].index(mech.name)
    rng = np.random.default_rng([seed, names.index(proc), mech_index])
    start = time.perf_counter()
    lbs = runner(mech, rng, simulations, num_observations, num_canaries)
    seconds = time.perf_counter() - start
    k = int(np.sum(lbs > mech.epsilon))
    ci = stats.binomtest(k, simulations).proportion_ci(confidence_level=0.95, method="exact")
    return Cell(
        proc,
        mech.name,
        mech.epsilon,
        simulations,
        k,
        k / simulations,
        (float(ci.low), float(ci.high)),
        float(np.mean(lbs) / mech.epsilon),
        seconds,
    )


def format_table(cells: list[Cell]) -> str:
    rows = [
        "| procedure | mechanism (ε at δ=1e-5) | false-violation rate [95 % CI] | mean ε_LB / ε |",
        "|---|---|---|---|",
    ]
    for c in cells:
        if not c.applicable:
            rows.append(f"| {c.procedure} | {c.mechanism} ({c.epsilon:.3f}) | {c.reason} | — |")
            continue
        flag = " **MISCALIBRATED**" if c.miscalibrated else ""
        rows.append(
            f"| {c.procedure} | {c.mechanism} ({c.epsilon:.3f}) | "
            f"{c.violations}/{c.simulations} = {c.rate:.3f} [{c.rate_ci[0]:.3f}, "
            f"{c.rate_ci[1]:.3f}]{flag} | {c.mean_ratio:.3f} |"
        )
    return "\n".join(rows)


#: (q, σ) of single Poisson-sampled Gaussian steps, and the rate floors, of :func:`gdp_at_exact_rates`.
EXACT_RATE_STEPS = ((0.01, 1.0), (0.1, 1.0), (0.5, 1.0))
EXACT_RATE_FLOORS = (1e-3, 1e-4, 1e-5)


def gdp_at_exact_rates(*, sampling_rate: float, noise_multiplier: float, floor: float) -> float:
    """The GDP ε at δ fitted to one sampled Gaussian step's *exact* rates: the limit of the GDP bound with unlimited
    observations.

    Over thresholds t whose FPR and FNR both stay ≥ ``floor`` (about 10/n with n observations per
    side), μ(t) = Φ⁻¹(1 − FPR) − Φ⁻¹(FNR) on the rates of OUT ~ N(0, 1) against IN ~ (1 − q) N(0, 1)
    + q N(1/σ, 1); the largest μ's ε (Dong, Roth & Su 2022, Cor. 2.13). Where this exceeds the
    step's PLD ε, the GDP assumption does not hold for the step and a large enough audit of it
    would flag a correct implementation: why results of sampled claims say "approximate".
    """
    t = np.linspace(-12.0, 12.0, 200_001)
    fpr = stats.norm.sf(t)
    fnr = (1 - sampling_rate) * stats.norm.cdf(t) + sampling_rate * stats.norm.cdf(t - 1.0 / noise_multiplier)
    ok = (fpr >= floor) & (fnr >= floor)
    mu = float(np.max(stats.norm.isf(fpr[ok]) - stats.norm.ppf(fnr[ok])))
    return gdp_epsilon(mu=mu, delta=DELTA) if mu > 0 else 0.0


def exact_rate_rows() -> list[dict[str, float]]:
    rows = []
    for q, sigma in EXACT_RATE_STEPS:
        claim = DPClaim(event=dpe.PoissonSampledDpEvent(q, dpe.GaussianDpEvent(sigma)))
        eps = claim.epsilon(delta=DELTA, accountant="pld")
        for floor in EXACT_RATE_FLOORS:
            rows.append(
                {
                    "sampling_rate": q,
                    "noise_multiplier": sigma,
                    "rate_floor": floor,
                    "pld_epsilon": eps,
                    "gdp_epsilon": gdp_at_exact_rates(sampling_rate=q, noise_multiplier=sigma, floor=floor),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--simulations", type=int, default=1000, help="simulations per cell (default 1,000)")
    parser.add_argument(
        "--num-observations",
        type=int,
        default=2000,
        help="observations per side, multi-run / membership / compare (default 2,000)",
    )
    parser.add_argument(
        "--num-canaries", type=int, default=2000, help="canaries of the one-run procedures (default 2,000)"
    )
    parser.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    parser.add_argument(
        "--procedures", nargs="*", choices=[p[0] for p in PROCEDURES], help="only these procedures (default all)"
    )
    parser.add_argument("--json", metavar="FILE", help="write the measured figures here")
    args = parser.parse_args(argv)
    if args.simulations < 1 or args.num_observations < 2 or args.num_canaries < 4:
        parser.error("--simulations must be >= 1, --num-observations >= 2, --num-canaries >= 4")
    started = time.perf_counter()
    cells = []
    for proc, _, _ in PROCEDURES:
        if args.procedures and proc not in args.procedures:
            continue
        for mech in mechanisms():
            cell = run_cell(
                proc,
                mech,
                simulations=args.simulations,
                num_observations=args.num_observations,
                num_canaries=args.num_canaries,
                seed=args.seed,
            )
            cells.append(cell)
            print(
                f"{proc:16s} {mech.name:20s} "
                + (f"{cell.violations}/{cell.simulations} ({cell.seconds:.1f} s)" if cell.applicable else "n/a"),
                file=sys.stderr,
            )
    total = time.perf_counter() - started
    print(format_table(cells))
    print(
        f"\nconfidence {CONFIDENCE}, delta {DELTA:g}; {args.simulations} "
        f"simulations per cell; {args.num_observations} observations per side "
        f"(multi-run, membership, compare), {args.num_canaries} canaries (one-run); seed {args.seed}; {total:.0f} s"
    )
    exact = exact_rate_rows()
    print(
        "\nGDP fitted to one Poisson-sampled Gaussian step's exact rates (the "
        "GDP bound's limit with unlimited observations):"
    )
    print("| q | sigma | rates >= | PLD epsilon | GDP-fit epsilon |\n|---|---|---|---|---|")
    for r in exact:
        flag = " (above: GDP is not a lower bound here)" if r["gdp_epsilon"] > r["pld_epsilon"] else ""
        print(
            f"| {r['sampling_rate']:g} | {r['noise_multiplier']:g} | "
            f"{r['rate_floor']:g} | {r['pld_epsilon']:.4f} | "
            f"{r['gdp_epsilon']:.4f}{flag} |"
        )
    bad = [c for c in cells if c.miscalibrated]
    if args.json:
        payload = {
            "confidence": CONFIDENCE,
            "delta": DELTA,
            "simulations": args.simulations,
            "num_observations": args.num_observations,
            "num_canaries": args.num_canaries,
            "seed": args.seed,
            "seconds": total,
            "power": "mean epsilon_lb / epsilon over the null simulations",
            "mechanisms": {
                m.name: {"epsilon": m.epsilon, "gaussian_family": m.gaussian_family, "note": m.note}
                for m in mechanisms()
            },
            "cells": [
                {
                    "procedure": c.procedure,
                    "mechanism": c.mechanism,
                    "applicable": c.applicable,
                    **(
                        {
                            "epsilon": c.epsilon,
                            "simulations": c.simulations,
                            "violations": c.violations,
                            "rate": c.rate,
                            "rate_ci": list(c.rate_ci),
                            "mean_ratio": c.mean_ratio,
                            "seconds": c.seconds,
                        }
                        if c.applicable
                        else {"reason": c.reason}
                    ),
                }
                for c in cells
            ],
            "miscalibrated": [f"{c.procedure} x {c.mechanism}" for c in bad],
            "gdp_at_exact_rates": exact,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    if bad:
        print("MISCALIBRATED: " + ", ".join(f"{c.procedure} x {c.mechanism}" for c in bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
