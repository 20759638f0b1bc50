"""How recognisable a reconstructed input is: SSIM against the private inputs, and the best match of each
reconstruction.

Reconstructions are scored against a participant's private inputs with SSIM (Wang, Bovik,
Sheikh & Simoncelli 2004): Gaussian window 11×11, σ = 1.5, K1 = 0.01, K2 = 0.03, data range 1,
window shrunk to the largest odd size that fits on small images (7 on 8×8 digits). A
reconstruction counts as **recognisable** when its best SSIM against a private input is at least
:data:`RECOGNISABLE_SSIM` = 0.5: at that level the digit's strokes are in place and a person
names the right digit; unrelated MNIST-like digits score about 0.0–0.3 against each other, and
images of pure noise about 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from dpaudit import _validate as v

__all__ = ["RECOGNISABLE_SSIM", "ssim", "match_reconstructions"]

#: Best SSIM at or above which a reconstruction counts as a recognisable copy of a private input.
RECOGNISABLE_SSIM = 0.5


def _as_batch(x: Any, name: str) -> tuple[torch.Tensor, bool]:
    t = torch.as_tensor(x)
    if not (t.dtype.is_floating_point or t.dtype in (torch.uint8, torch.int64, torch.int32)):
        raise v.invalid(name, f"{name} must be a real image array, got dtype {t.dtype}")
    t = t.detach().to(torch.float64).cpu()
    if t.ndim == 2:
        t, single = t[None, None], True
    elif t.ndim == 3:
        t, single = t[None], True
    elif t.ndim == 4:
        single = False
    else:
        raise v.invalid(name, f"{name} must have shape (H, W), (C, H, W) or (N, C, H, W), got {tuple(t.shape)}")
    if t.numel() == 0:
        raise v.invalid(name, f"{name} must not be empty, got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise v.invalid(name, f"{name} must be finite")
    lo, hi = float(t.min()), float(t.max())
    if lo < -1e-6 or hi > 1 + 1e-6:
        raise v.invalid(name, f"{name} must lie in [0, 1] (SSIM's data range is 1), got values in [{lo:.4g}, {hi:.4g}]")
    return t, single


def _gaussian_window(size: int, sigma: float) -> torch.Tensor:
    r = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-(r**2) / (2 * sigma**2))
    g = g / g.sum()
    return torch.outer(g, g)


def ssim(a: Any, b: Any, *, window: int = 11, sigma: float = 1.5) -> torch.Tensor:
    """Structural similarity (Wang, Bovik, Sheikh & Simoncelli 2004, eq. 13) of images in [0, 1].

    Local means, variances and covariance are taken under a Gaussian window (default 11×11,
    σ = 1.5, as in the paper), over valid positions only; constants C1 = (0.01·L)², C2 =
    (0.03·L)² with data range L = 1. The window shrinks to the largest odd size that fits when
    an image is smaller (7 on 8×8 digits). Multi-channel images average the per-channel SSIM.

    Args:
        a, b: images of one shape: (H, W), (C, H, W) or a batch (N, C, H, W), values in [0, 1].
        window: odd window size ≥ 3.
        sigma: Gaussian σ of the window, > 0.

    Returns:
        A 0-d tensor for one image, or (N,) for a batch; 1 for identical images.

    Raises:
        ValueError: ``a`` or ``b`` of a bad shape, empty, not finite or outside [0, 1]; shapes
            that differ; images smaller than 3×3; a bad ``window`` or ``sigma``.
    """
    if isinstance(window, bool) or not isinstance(window, int) or window < 3 or window % 2 == 0:
        raise v.invalid("window", f"window must be an odd int ≥ 3, got {window!r}")
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise v.invalid("sigma", f"sigma must be a positive number, got {sigma!r}")
    ta, single = _as_batch(a, "a")
    tb, _ = _as_batch(b, "b")
    if ta.shape != tb.shape:
        raise v.invalid(
            "b", f"b must have the shape of a {tuple(torch.as_tensor(a).shape)}, got {tuple(torch.as_tensor(b).shape)}"
        )
    n, c, h, w = ta.shape
    size = min(window, h if h % 2 else h - 1, w if w % 2 else w - 1)
    if size < 3:
        raise v.invalid("a", f"a: images must be at least 3×3 for SSIM, got {h}×{w}")
    kernel = _gaussian_window(size, float(sigma))[None, None]
    x = ta.reshape(n * c, 1, h, w)
    y = tb.reshape(n * c, 1, h, w)
    mu_x = F.conv2d(x, kernel)
    mu_y = F.conv2d(y, kernel)
    var_x = F.conv2d(x * x, kernel) - mu_x**2
    var_y = F.conv2d(y * y, kernel) - mu_y**2
    cov = F.conv2d(x * y, kernel) - mu_x * mu_y
    c1, c2 = 0.01**2, 0.03**2
    smap = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x**2 + mu_y**2 + c1) * (var_x + var_y + c2))
    per_image = smap.reshape(n, c, -1).mean(dim=2).mean(dim=1)
    return per_image[0] if single else per_image


def match_reconstructions(recons: Any, private_images: Any, *, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Best SSIM of each reconstruction against a set of private inputs, and which one it was.

    Args:
        recons: (k, *shape) reconstructions in [0, 1], shape (C, H, W) or (H, W).
        private_images: (n, *shape) the participant's inputs in [0, 1].
        chunk: pairs scored at once (memory bound).

    Returns:
        (best_ssim (k,) float64, best_index (k,) int64 into ``private_images``); empty arrays
        when ``recons`` is empty.

    Raises:
        ValueError: shapes that do not agree, no private images, values outside [0, 1].
    """
    r = torch.as_tensor(recons).detach().to(torch.float64).cpu()
    p = torch.as_tensor(private_images).detach().to(torch.float64).cpu()
    if r.ndim not in (3, 4):
        raise v.invalid("recons", f"recons must have shape (k, H, W) or (k, C, H, W), got {tuple(r.shape)}")
    if p.ndim != r.ndim or p.shape[1:] != r.shape[1:]:
        raise v.invalid(
            "private_images",
            f"private_images must have shape (n, {', '.join(map(str, r.shape[1:]))}) like recons, got {tuple(p.shape)}",
        )
    if p.shape[0] == 0:
        raise v.invalid("private_images", "private_images must hold at least one image, got 0")
    if r.shape[0] == 0:
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    if r.ndim == 3:
        r, p = r[:, None], p[:, None]
    _as_batch(r, "recons")
    _as_batch(p, "private_images")
    k, n = r.shape[0], p.shape[0]
    scores = torch.empty(k, n, dtype=torch.float64)
    per = max(1, int(chunk) // n)
    for s in range(0, k, per):
        rr = r[s : s + per]
        a = rr[:, None].expand(-1, n, *rr.shape[1:]).reshape(-1, *rr.shape[1:])
        bb = p[None].expand(rr.shape[0], *p.shape).reshape(-1, *p.shape[1:])
        scores[s : s + rr.shape[0]] = ssim(a, bb).reshape(rr.shape[0], n)
    best, where = scores.max(dim=1)
    return best.numpy(), where.numpy().astype(np.int64)


# ---------------------------------------------------------------------------------------------
# Membership from uploads
