"""Soundness of the noise layer's sensitivities against brute force (DESIGN: sensitivities
against brute force).

Random small Linear / Conv1d / Conv2d / Conv3d blocks (random stride, padding, dilation and
padding mode), with or without a signed projection and a standardisation in front, with a
random redistribution r. For A = diag(r)^{-1/2} M, M the block's linear part materialised by
pushing the identity through it:

* ``l2`` must equal the largest singular value of A (SVD), ``l1`` its largest column norm:
  both are exact (Lecuyer et al. 2019, §3.3);
* ``linf`` is an upper bound: at least max ‖A s‖₂ over the corners s of the unit L∞ ball
  (all 2^d of them for d ≤ 12, else row sign patterns and random corners improved by sign
  ascent), equal to √(Σ_k ‖A_k‖₁²) computed from A, and within √K of the brute force (it
  never is looser: the corner sign(A_k) alone reaches ‖A_k‖₁). With nonnegative weights and
  nothing signed in front, the all-ones corner reaches the bound: there it is exact.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from dpaudit.robustness.noise import layer_sensitivity
from tests.soundness.noise_blocks import BlockSpec, block_specs, build, sign_vectors

_REL = 1e-6


def _check(spec: BlockSpec) -> None:
    built = build(spec)
    a = built.weighted
    k, d = a.shape
    code = {
        norm: layer_sensitivity(built.noise, input_shape=built.input_shape, norm=norm) for norm in ("l2", "l1", "linf")
    }

    l2 = float(torch.linalg.svdvals(a)[0])
    assert code["l2"] == pytest.approx(l2, rel=_REL, abs=1e-12), spec
    l1 = float(a.norm(dim=0).max())
    assert code["l1"] == pytest.approx(l1, rel=_REL, abs=1e-12), spec

    corners = sign_vectors(a, seed=spec.seed)
    reached = float((corners @ a.T).norm(dim=1).max())
    assert code["linf"] >= reached * (1 - _REL), spec
    assert code["linf"] == pytest.approx(float(a.abs().sum(1).pow(2).sum().sqrt()), rel=_REL, abs=1e-12), spec
    assert code["linf"] <= k**0.5 * reached * (1 + _REL), spec
    if spec.nonnegative and spec.projection_input is None:
        # |W| with nothing signed in front: the all-ones corner reaches the bound.
        ones = float((a @ torch.ones(d, dtype=torch.float64)).norm())
        assert code["linf"] == pytest.approx(ones, rel=_REL, abs=1e-12), spec


@settings(max_examples=60, deadline=None, derandomize=True)
@given(block_specs())
def test_sensitivities_against_brute_force(spec: BlockSpec) -> None:
    _check(spec)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, derandomize=True)
@given(block_specs())
def test_sensitivities_against_brute_force_many(spec: BlockSpec) -> None:
    _check(spec)
