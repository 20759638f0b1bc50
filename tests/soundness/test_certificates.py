"""Soundness of the noise-layer certificates where the exact robust radius is known (DESIGN:
certificates against the strongest attack where the exact radius is computable).

The model is a random small noise-layer block (tests.soundness.noise_blocks: Linear or Conv,
signed projection or not, random r) followed by a two-class linear head with logit difference
g(h) = u·h + c. With h = M x + b + σ √r ⊙ z, the argmax is class 1 with probability
p₁ = Φ(g(x)/(σ ‖√r ⊙ u‖)) and the expected softmax score of class 1 is E[sigmoid(g(x) + σ ‖√r ⊙ u‖ Z)],
both on the side of ½ that g(x) is on. So the prediction of the expected scores (PixelDP,
Lecuyer et al. 2019, Proposition 1) and of the smoothed classifier (Cohen et al. 2019,
Theorem 1) is sign(g(x)), and the smallest input change that flips it has size exactly
|g(x)| / ‖Mᵀu‖_* (the dual norm: L2 for L2, L1 for L∞, L∞ for L1); the attack x − sign(g)·R·e
along the dual's extreme direction e reaches it, and the test checks that it does.

Two checks, both through the library's API with the sensitivity the certify run uses
(σ/Δ, Δ = :func:`layer_sensitivity` of the installed r):

* **exact scores**: the expected argmax and softmax scores computed exactly (the softmax by
  adaptive quadrature) go straight into :func:`certified_radius` as both bounds, for the
  classical (ε' ≤ 1), analytic and extended calibrations. No Monte Carlo enters, so every
  certified radius must be ≤ the exact one: a single violation is a bug. Smoothing's radius
  with the exact p_A must be ≤ it too, and equal to it where u is the extreme direction of an
  exact sensitivity (L2, L1): that catches a Δ that is too large as well as one too small.
* **Monte Carlo**: :func:`sample_scores` draws the noise, and the certificates are computed as
  ``dpaudit certify`` does (Clopper–Pearson counts, Hoeffding means, CERTIFY's smoothing
  radius). Each holds with probability ≥ its confidence per point, so the number of points
  whose certificate exceeds the exact radius (the exact radius is 0 where the estimated class
  is not sign(g)) may not exceed the binomial count that has probability < 1e-6.

The head's direction u is either random or aligned with the worst input direction of the
attack norm (the top singular vector, the best L∞ corner, the largest column), where the
exact radius comes closest to what the sensitivity allows: an under-estimated Δ shows there.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import integrate, stats
from torch import nn

from dpaudit.robustness.certification import certified_radius
from dpaudit.robustness.montecarlo import sample_scores
from dpaudit.robustness.noise import layer_sensitivity
from dpaudit.robustness.score_bounds import count_bounds, mean_bounds
from dpaudit.robustness.smoothing import smoothing_certify
from tests.soundness.noise_blocks import BlockSpec, block_specs, build, sign_vectors

MECHANISMS = (("classical", 1.0), ("analytic", None), ("extended", None))
NORMS = ("l2", "linf", "l1")
NUM_POINTS = 16
_REL = 1e-9


def _sigmoid_times_density(z: float, a: float, scale: float) -> float:
    """sigmoid(a + scale·z) φ(z) in plain floats (scipy.stats per point costs 100× more)."""
    t = a + scale * z
    sig = 1.0 / (1.0 + math.exp(-t)) if t >= 0 else math.exp(t) / (1.0 + math.exp(t))
    return sig * math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


class Case:
    """A two-class noise-layer model, its points, and what is known exactly about them."""

    def __init__(self, spec: BlockSpec, *, norm: str, aligned: bool, spread: float, seed: int) -> None:
        self.norm = norm
        built = build(spec)
        self.built = built
        a, r = built.weighted, built.redistribution
        g = torch.Generator().manual_seed(seed)
        if not aligned:
            v = torch.randn(a.shape[0], generator=g, dtype=torch.float64)
        elif norm == "l2":
            v = torch.linalg.svd(a, full_matrices=False).U[:, 0]
        elif norm == "linf":
            corners = sign_vectors(a, seed=seed)
            v = a @ corners[(corners @ a.T).norm(dim=1).argmax()]
        else:
            v = a[:, a.norm(dim=0).argmax()]
        # A block whose outputs all sit on padding is the zero map: its prediction never moves.
        assume(float(v.norm()) > 1e-12)
        self.u = v / r.sqrt()  # √r ⊙ u = v: the direction in the space where the noise is isotropic
        self.mtu = built.matrix.T @ self.u
        head = nn.Linear(a.shape[0], 2).double()
        with torch.no_grad():
            head.weight.zero_()
            head.weight[1] = self.u
            head.bias.zero_()
        self.model = nn.Sequential(built.noise, nn.Flatten(), head)
        self.x = torch.randn(NUM_POINTS, *built.input_shape, generator=g, dtype=torch.float64)
        g0 = self.margin()
        with torch.no_grad():
            head.bias[1] = -float(
                g0.quantile(0.5)
            )  # half the points on each side (the interpolated median: none at g = 0)
        self.g = self.margin()
        # σ puts the largest |g| at about 3/spread noise standard deviations: p from ½ to Φ(3/spread).
        sigma = max(float(self.g.abs().max()), 1e-12) * spread / (3.0 * float(v.norm()))
        built.noise.set_noise(sigma)
        self.sigma = sigma
        self.scale = sigma * float(v.norm())  # the std of the noise on g, σ ‖√r ⊙ u‖
        self.sensitivity = layer_sensitivity(built.noise, input_shape=built.input_shape, norm=norm)

    def margin(self, x: torch.Tensor | None = None) -> torch.Tensor:
        """g at each point, noise-free, through the model itself."""
        noise = self.built.noise
        noise.enabled = False
        try:
            with torch.no_grad():
                logits = self.model(self.x if x is None else x)
        finally:
            noise.enabled = True
        return logits[:, 1] - logits[:, 0]

    def dual(self) -> float:
        return float(self.mtu.norm(p={"l2": 2, "linf": 1, "l1": float("inf")}[self.norm]))

    def exact_radius(self) -> np.ndarray:
        return (self.g.abs() / self.dual()).numpy()

    def attack(self, radius: np.ndarray) -> torch.Tensor:
        """x − sign(g)·radius·e, e the unit-norm direction that moves g fastest."""
        if self.norm == "l2":
            e = self.mtu / self.mtu.norm()
        elif self.norm == "linf":
            e = torch.sign(self.mtu)
        else:
            j = int(self.mtu.abs().argmax())
            e = torch.zeros_like(self.mtu)
            e[j] = torch.sign(self.mtu[j])
        step = torch.as_tensor(radius)[:, None] * e[None, :] * torch.sign(self.g)[:, None]
        return self.x - step.reshape(self.x.shape)

    def exact_scores(self) -> tuple[np.ndarray, np.ndarray]:
        """(P(argmax = sign(g)'s class), E[softmax score of that class]) at each point.

        The first is Φ(|g|/scale). The second is ∫ sigmoid(|g| + scale·z) φ(z) dz by adaptive
        quadrature, minus its error estimate: a value above the truth could only make a sound
        certificate look unsound, one below only weakens the check.
        """
        a = self.g.abs().numpy()
        argmax = stats.norm.cdf(a / self.scale)
        softmax = np.empty_like(a)
        for i, ai in enumerate(a):
            value, err = integrate.quad(
                _sigmoid_times_density,
                -40,
                40,
                args=(float(ai), self.scale),
                points=[-ai / self.scale],
                limit=200,
                epsabs=1e-13,
            )
            softmax[i] = min(value - err, 1.0)
        return argmax, softmax


def _cases() -> st.SearchStrategy[tuple[BlockSpec, str, bool, float, int]]:
    return st.tuples(
        block_specs(), st.sampled_from(NORMS), st.booleans(), st.floats(0.2, 3.0), st.integers(0, 2**31 - 1)
    )


def _make(params: tuple[BlockSpec, str, bool, float, int]) -> Case:
    spec, norm, aligned, spread, seed = params
    case = Case(spec, norm=norm, aligned=aligned, spread=spread, seed=seed)
    # u orthogonal to M's range (or a zero block) makes the prediction constant: nothing to check.
    assume(case.dual() > 1e-9 * float(case.u.norm()) * max(1.0, float(case.built.matrix.abs().max())))
    assume(bool((case.g.abs() > 1e-9).all()))
    return case


def _check_exact(params: tuple[BlockSpec, str, bool, float, int]) -> None:
    spec, _, aligned, spread, seed = params
    for norm in NORMS:  # one block, every norm: the cheap part is the certificate, not the model
        _check_exact_norm((spec, norm, aligned, spread, seed))


def _check_exact_norm(params: tuple[BlockSpec, str, bool, float, int]) -> None:
    case = _make(params)
    exact = case.exact_radius()
    # The exact radius is reached: the attack just past it flips every prediction.
    flipped = case.margin(case.attack(exact * (1 + 1e-6) + 1e-12))
    assert bool((torch.sign(flipped) != torch.sign(case.g)).all()), params
    per_unit = case.sigma / case.sensitivity
    # Smoothing's radius σ/Δ · Φ⁻¹(p_A) with the exact p_A (CERTIFY with infinitely many draws)
    # is |g|/(‖√r ⊙ u‖ Δ): with u along the extreme direction of an exact Δ (L2's top singular
    # vector, L1's largest column) it *is* the exact radius, so an over-estimated Δ shows too.
    cohen = per_unit * case.g.abs().numpy() / case.scale
    assert np.all(cohen <= exact * (1 + 1e-7)), (params, cohen, exact)
    if aligned_exact(params):
        np.testing.assert_allclose(cohen, exact, rtol=1e-6, err_msg=str(params))
    for p_top in case.exact_scores():
        for mechanism, max_epsilon in MECHANISMS:
            cert = certified_radius(
                p_top, 1.0 - p_top, noise_per_sensitivity=per_unit, mechanism=mechanism, max_epsilon=max_epsilon
            )
            assert np.all(cert <= exact * (1 + _REL) + 1e-12), (params, mechanism, cert, exact)


def aligned_exact(params: tuple[BlockSpec, str, bool, float, int]) -> bool:
    """u along the extreme direction of a norm whose sensitivity is exact (L2, L1)."""
    return params[2] and params[1] in ("l2", "l1")


def _allowed(num: int, failure: float) -> int:
    """The violation count a sound certificate exceeds with probability ≤ 1e-6 (binomial tail)."""
    return int(stats.binom.isf(1e-6, num, failure))


def _check_monte_carlo(params: tuple[BlockSpec, str, bool, float, int], num_draws: int) -> None:
    case = _make(params)
    exact = case.exact_radius()
    truth = (case.g > 0).numpy().astype(np.int64)
    per_unit = case.sigma / case.sensitivity
    seed = params[-1]
    mc = sample_scores(case.model, case.x, num_draws=num_draws, seed=seed, stream="certify-estimate")
    sel = sample_scores(case.model, case.x, num_draws=100, seed=seed, stream="certify-select")
    checks = []
    for bounds in (
        count_bounds(mc.counts, confidence=0.95),
        mean_bounds(mc.mean, num_draws=num_draws, method="hoeffding", confidence=0.95),
    ):
        for mechanism, max_epsilon in MECHANISMS:
            cert = certified_radius(
                bounds.lower, bounds.upper, noise_per_sensitivity=per_unit, mechanism=mechanism, max_epsilon=max_epsilon
            )
            checks.append((f"{bounds.method}/{mechanism}", bounds.top, cert, 0.05))
    preds, radii = smoothing_certify(sel.counts, mc.counts, sigma=per_unit, confidence=0.999)
    checks.append(("smoothing", preds, radii, 0.001))
    for name, top, cert, failure in checks:
        reference = np.where(top == truth, exact, 0.0)
        violations = int(np.sum(cert > reference * (1 + _REL) + 1e-12))
        assert violations <= _allowed(NUM_POINTS, failure), (params, name, cert, reference)


@pytest.mark.extended
@settings(max_examples=20, deadline=None, derandomize=True)
@given(_cases())
def test_certificates_never_exceed_the_exact_radius(params: tuple[BlockSpec, str, bool, float, int]) -> None:
    _check_exact(params)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(_cases())
def test_monte_carlo_certificates_fail_no_more_often_than_their_confidence(
    params: tuple[BlockSpec, str, bool, float, int],
) -> None:
    _check_monte_carlo(params, num_draws=500)


@pytest.mark.slow
@settings(max_examples=600, deadline=None, derandomize=True)
@given(_cases())
def test_certificates_never_exceed_the_exact_radius_many(params: tuple[BlockSpec, str, bool, float, int]) -> None:
    _check_exact(params)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, derandomize=True)
@given(_cases())
def test_monte_carlo_certificates_fail_no_more_often_than_their_confidence_many(
    params: tuple[BlockSpec, str, bool, float, int],
) -> None:
    _check_monte_carlo(params, num_draws=2000)
