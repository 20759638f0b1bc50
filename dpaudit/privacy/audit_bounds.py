"""Which bound an audit of a claim may use, and the claims and compositions audits are stated against (torch-free).

* :func:`resolve_bound` — ``auto`` resolved for a claim: the Gaussian-DP estimator of Nasr et al.
  (2023, §4) for Gaussian-family claims, Clopper–Pearson (Kairouz, Oh & Viswanath 2015,
  Thm 2.1) otherwise; ``gdp`` refused for a claim outside the family;
* :func:`gaussian_step_claim` — the claim of ONE un-sampled Gaussian step, the mechanism the
  white-box per-step game exercises;
* :func:`composed_gdp_epsilon` — the central-limit composition of per-step μ over T
  Poisson-sampled steps (Dong, Roth & Su 2019, Thm 3.5; Nasr et al. 2023, §4). An
  approximation, reported only as an *estimate*, never as a bound.

The audits that use them, and the :class:`~dpaudit.results.audit.AuditResult` they return, are
in :mod:`dpaudit.privacy.audit_procedures`.
"""

from __future__ import annotations

import math

from dpaudit import _validate as v
from dpaudit.privacy.claims import DPClaim, PrivacyClaim
from dpaudit.privacy.gaussian import gdp_epsilon

__all__ = [
    "ONE_RUN_BOUND_CHOICES",
    "SCORE_BOUND_CHOICES",
    "not_gaussian_error",
    "resolve_bound",
    "gaussian_step_claim",
    "composed_gdp_epsilon",
]

#: ``audit_from_one_run(bound=…)``: Steinke et al. (2023) or the f-DP bound of Mahloujifar et al. (2025).
ONE_RUN_BOUND_CHOICES = ("steinke", "fdp")

#: ``audit_from_scores(bound=…)``: ``auto`` is GDP for claims whose trade-off curve is Gaussian-family, else
#: Clopper–Pearson.
SCORE_BOUND_CHOICES = ("auto", "gdp", "clopper-pearson")


def not_gaussian_error(bound: str, claim: PrivacyClaim) -> ValueError:
    """The refusal of a Gaussian-curve bound for a claim outside the Gaussian family."""
    return ValueError(
        f"bound={bound!r} assumes a Gaussian trade-off curve, and the claim of "
        f"kind {claim.kind!r} ({claim.statement() or 'no description'}) is not "
        "Gaussian-family "
        "(its trade_off_family is None): a Gaussian curve fitted to its scores "
        "can exceed its true epsilon (a pure epsilon = 1 Laplace mechanism "
        "reads 4.4). "
        f"Use {'auto or clopper-pearson' if bound == 'gdp' else 'steinke'}"
    )


def resolve_bound(bound: str, *, claim: PrivacyClaim) -> str:
    """The bound an IN/OUT audit of ``claim`` uses: ``gdp`` or ``clopper-pearson``.

    ``auto`` picks the GDP estimator of Nasr et al. (2023, §4) when the claim's trade-off curve
    is Gaussian-family (:attr:`PrivacyClaim.trade_off_family`) and Clopper–Pearson (Kairouz, Oh
    & Viswanath 2015, Thm 2.1), valid for every (ε, δ)-DP mechanism, otherwise. An explicit
    ``gdp`` on any other claim is refused rather than labelled: its number is no lower bound on
    anything the claim states, so a "violation" from it would be a false alarm.

    Raises:
        ValueError: an unknown bound, or ``gdp`` for a claim that is not Gaussian-family.
    """
    bound = v.choice("bound", bound, SCORE_BOUND_CHOICES)
    if not isinstance(claim, PrivacyClaim):
        raise v.invalid_type("claim", f"claim must be a PrivacyClaim, got {type(claim).__name__}")
    gaussian = claim.trade_off_family == "gaussian"
    if bound == "auto":
        return "gdp" if gaussian else "clopper-pearson"
    if bound == "gdp" and not gaussian:
        raise not_gaussian_error(bound, claim)
    return bound


def gaussian_step_claim(*, noise_multiplier: float, description: str | None = None) -> DPClaim:
    """The claim of one un-sampled Gaussian mechanism with noise σ·C on sensitivity C.

    This is what one DP-SGD step releases about a record that is certainly in the lot (the
    auditor inserted it): Σ clip(g_i) + N(0, σ²C²I) is a Gaussian mechanism with μ = 1/σ
    (Abadi et al. 2016, §3.1; Dong, Roth & Su 2019, Thm 2.7).
    """
    from dp_accounting import dp_event as dpe

    sigma = v.positive("noise_multiplier", noise_multiplier)
    desc = description or f"one un-sampled Gaussian step, sigma={sigma:g} (mu = 1/sigma = {1 / sigma:.4g})"
    return DPClaim(event=dpe.GaussianDpEvent(sigma), description=desc)


def composed_gdp_epsilon(*, mu_step: float, sampling_rate: float, num_steps: int, delta: float) -> float:
    """ε at δ of μ_total = q·√(T·(e^{μ_step²} − 1)): the CLT composition of T sampled steps.

    Dong, Roth & Su (2019, Thm 3.5/Cor. 5.4); used by Nasr et al. (2023, §4) to compose
    per-step audits. It is an asymptotic *approximation* (it can under- or over-state the
    exact composition), so audits report it only as ``epsilon_estimate``.
    """
    mu = v.non_negative("mu_step", mu_step)
    q = v.half_open_unit("sampling_rate", sampling_rate)
    t = v.integer("num_steps", num_steps, minimum=1)
    delta = v.open_unit("delta", delta)
    if mu == 0:
        return 0.0
    total = q * math.sqrt(t * math.expm1(min(mu * mu, 700.0)))
    return gdp_epsilon(mu=total, delta=delta) if total > 0 else 0.0
