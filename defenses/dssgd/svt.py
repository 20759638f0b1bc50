"""The differentially private upload of DSSGD: sparse-vector selection and noisy release.

Shokri & Shmatikov (CCS 2015, §5) and the seed's algorithm (``shared/seeds/004_*``, "Differentially
Private DSSGD"): visit Δw's entries in a random order; compare each bounded |Δw_j| plus
Laplace noise with a noisy threshold; upload a noisy bounded copy of each entry that passes,
redrawing the threshold noise after every upload (step (d), "Goto Step 1"), until c entries
are uploaded. That is Dwork & Roth's NumericSparse (The Algorithmic Foundations of DP, 2014,
Algorithm 3, Theorem 3.28): c above-threshold segments, each (s1·ε)-DP, and c Laplace
releases. Scales and costs live in :mod:`dpaudit.privacy.dssgd`, the one place they are defined.

Departures from the seed, each for privacy: values are bounded to [−γ, γ] *before* the release
noise is added (the seed adds it to the raw value, of unbounded sensitivity) and bounded again
after (post-processing); entries are visited without replacement, and the sweep ends with
fewer than c uploads when every entry has been visited.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from dpaudit import _validate as v
from dpaudit.privacy.dssgd import NoiseScales, noise_scales

__all__ = ["noise_scales", "NoiseScales", "svt_upload"]

# First search window of one segment; doubled while no entry passes, so a segment costs
# O(log gap) numpy calls whether passes are frequent or rare.
_WINDOW = 64


def _laplace(n: int, scale: float, generator: torch.Generator) -> np.ndarray:
    """``n`` draws of Lap(scale) as the difference of two Exp(1) draws (no log(0) at the edges)."""
    e = torch.empty(2, n, dtype=torch.float64).exponential_(generator=generator)
    return (scale * (e[0] - e[1])).numpy()


def svt_upload(
    delta: torch.Tensor,
    *,
    count: int,
    epsilon: float,
    bound: float,
    threshold: float,
    split: str = "sum",
    generator: torch.Generator,
    observe: Callable[[np.ndarray], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Selects and noisily releases at most ``count`` entries of ``delta`` (the DP upload).

    Args:
        delta: a participant's Δw (any shape; entries are indexed in its flattened order).
        count: c, the most entries to upload (θ_u·|Δw|).
        epsilon: the paper's ε per uploaded parameter per round; the round costs at most
            ``count``·ε (see :class:`dpaudit.privacy.dssgd.DSSGDClaim`).
        bound: γ; every value is bounded to [−γ, γ] first, so Δf = 2γ.
        threshold: τ, compared with the bounded |Δw_j| (both with Laplace noise).
        split: ``"sum"`` (default, shares 8/9 and 1/9 of ε) or ``"seed"`` (the seed's 8/9 and
            2/9 with its σ(ε2) = 2Δf/ε2, which releases with the same noise).
        generator: the source of every random draw (visiting order and all noise).
        observe: receives a copy of the bounded values (float64, ``delta``'s flattened order):
            the mechanism's input before any noise, each entry of sensitivity Δf = 2γ (the
            neighbouring replay's hook; ``None`` in training).

    Returns:
        ``(indices, values)``: int64 indices into the flattened ``delta`` in upload order (unique)
        and the noisy values in [−γ, γ], in ``delta``'s dtype.

    Raises:
        ValueError: a non-finite or empty ``delta``, or an invalid argument (named, with its value).
        TypeError: ``delta`` is not a floating tensor or ``generator`` not a ``torch.Generator``.
    """
    if not isinstance(delta, torch.Tensor) or not delta.is_floating_point():
        raise v.invalid_type("delta", f"delta must be a floating-point torch.Tensor, got {v.short(delta)}")
    if not isinstance(generator, torch.Generator):
        raise v.invalid_type("generator", f"generator must be a torch.Generator, got {v.short(generator)}")
    n = delta.numel()
    if n == 0:
        raise v.invalid("delta", "delta must have at least one entry, got an empty tensor")
    c = v.integer("count", count, minimum=1)
    scales = noise_scales(epsilon=epsilon, bound=bound, split=split)
    tau = v.real("threshold", threshold)
    if not np.isfinite(tau):
        raise v.invalid("threshold", f"threshold must be finite, got {threshold!r}")
    flat = delta.detach().reshape(-1).to(device="cpu", dtype=torch.float64)
    if not bool(torch.isfinite(flat).all()):
        raise v.invalid("delta", "delta must be finite, got NaN or infinite entries")
    gamma = scales.bound
    # Bound first: every later step (query and release) sees values of sensitivity Δf = 2γ.
    x = flat.clamp(-gamma, gamma).numpy()
    if observe is not None:
        observe(x.copy())
    c = min(c, n)

    # Every random draw up front, in a fixed order, so a seeded generator fixes the output.
    # Drawing noise for entries never visited changes nothing: each draw is independent and
    # used at most once (fresh query noise per visit, fresh threshold noise per segment).
    order = torch.randperm(n, generator=generator).numpy()
    noisy = np.abs(x[order]) + _laplace(n, scales.query, generator)
    thresholds = tau + _laplace(c, scales.threshold, generator)
    release = _laplace(c, scales.release, generator)

    picked = np.empty(c, dtype=np.int64)
    used = 0
    pos = 0
    while used < c and pos < n:
        t = thresholds[used]
        window = _WINDOW
        while pos < n:
            hit = np.flatnonzero(noisy[pos : pos + window] >= t)
            if hit.size:
                pos += int(hit[0])
                picked[used] = pos
                used += 1
                pos += 1
                break
            pos += window
            window *= 2
    idx = order[picked[:used]]
    values = np.clip(x[idx] + release[:used], -gamma, gamma)
    return torch.from_numpy(idx.astype(np.int64)), torch.from_numpy(values).to(delta.dtype)
