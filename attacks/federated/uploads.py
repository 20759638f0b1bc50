"""What the parameter server learns from a DSSGD participant's uploads.

In distributed selective SGD (Shokri & Shmatikov, CCS 2015) a participant uploads, per turn, a
sparse selection of Δw = w_after − w_before over the flat parameter vector (the concatenation of
``model.parameters()`` flattened, in order): int64 ``indices`` and the float ``values`` there.
The server sees these uploads by design. This module measures what they reveal.

**Reconstruction.** For a first fully-connected layer z = W x + b, one example's gradient is
δ xᵀ for W and δ for b (δ = ∂loss/∂z). Plain SGD sums such terms, so row i of ΔW divided by Δb_i is

    Σ_t δ_{t,i} x_t / Σ_t δ_{t,i},

a weighted mean of the examples for which hidden unit i was active (ReLU units at zero contribute
nothing). A row driven by one example is that example *exactly*, however many local steps or
epochs were taken; Phong et al. (2017, "Privacy-preserving deep learning: revisited and
enhanced", §3) and Geiping et al. (2020, §4) make the same observation. The DSSGD paper itself
(§5) releases individual Δw entries, so uploading even 1 % of the largest entries exposes the
brightest pixels of the examples (``docs/defenses/dssgd.md`` §5).

**Similarity.** Reconstructions are scored against the participant's private inputs with SSIM
(:mod:`attacks.federated.similarity`); one counts as recognisable at a best SSIM of at least
:data:`~attacks.federated.similarity.RECOGNISABLE_SSIM`.

**Membership.** :func:`upload_membership_scores` asks of each candidate input whether some
uploaded row of the first layer is a copy of it (see its docstring).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from attacks.federated.similarity import RECOGNISABLE_SSIM, match_reconstructions
from dpaudit import _validate as v
from dpaudit.store import JsonObject

__all__ = [
    "FirstLayerUpdate",
    "ReconstructionCandidates",
    "UploadReconstruction",
    "first_layer_update",
    "reconstruction_candidates",
    "reconstruct_inputs",
    "upload_membership_scores",
    "upload_reconstruction_attack",
]


#: Centred cosine (Pearson correlation) above which two reconstructions are the same image.
_DUPLICATE_CORRELATION = 0.95

#: Fewest uploaded entries a row needs to say anything about an input.
_MIN_ENTRIES = 3

#: Mean absolute disagreement (on inputs in [0, 1]) under which two bias rows read one input.
_MERGE_TOLERANCE = 0.01

# Slack on [0, 1] when checking that a bias-divided row is a weighted mean of inputs in [0, 1]:
# float32 division of exact copies lands a few ulps outside.
_RANGE_SLACK = 1e-3


@dataclass(frozen=True)
class FirstLayerUpdate:
    """The part of one upload that falls on the model's first (fully-connected) layer.

    Attributes:
        weight_delta: (out_features, in_features) uploaded Δw of the weight, 0 where not uploaded.
        bias_delta: (out_features,) uploaded Δw of the bias, 0 where not uploaded; None when the
            layer has no bias.
        weight_mask: bool, same shape as ``weight_delta``: True where an entry was uploaded.
        bias_mask: bool, same shape as ``bias_delta``; None when the layer has no bias.
        layer: the layer's qualified name in the model (e.g. ``"1"`` for ``Sequential``).
        input_mean, input_std: the standardisation the model applies before the layer
            (:class:`dpaudit.models.Standardize`; 0 and 1 when it sees raw inputs). The server
            knows it: it is part of the shared model.
    """

    weight_delta: torch.Tensor
    bias_delta: torch.Tensor | None
    weight_mask: torch.Tensor
    bias_mask: torch.Tensor | None
    layer: str
    input_mean: float = 0.0
    input_std: float = 1.0

    @property
    def in_features(self) -> int:
        return int(self.weight_delta.shape[1])

    @property
    def out_features(self) -> int:
        return int(self.weight_delta.shape[0])


def _first_layer_and_standardization(model: nn.Module) -> tuple[tuple[str, nn.Module], tuple[float, float]]:
    from dpaudit.layers import Standardize

    mean, std = 0.0, 1.0
    for name, module in model.named_modules():
        if isinstance(module, Standardize):
            mean, std = module.mean, module.std
        if isinstance(module, (nn.Linear, nn.modules.conv._ConvNd)):
            return (name, module), (mean, std)
    raise v.invalid("model", f"model has no nn.Linear or convolution layer to reconstruct from: {type(model).__name__}")


def first_layer_update(model: nn.Module, indices: Any, values: Any) -> FirstLayerUpdate:
    """Densifies the first layer's share of a sparse DSSGD upload.

    Args:
        model: the (global) model the upload refers to; only its parameter layout is read.
        indices: int64 positions in the flat parameter vector (``model.parameters()``
            flattened and concatenated in order), distinct.
        values: the uploaded Δw at ``indices`` (noisy and clipped in the DP variant).

    Returns:
        The first layer's update with masks of what was uploaded.

    Raises:
        ValueError: the first Linear/Conv layer is a convolution (reconstruction needs a
            fully-connected first layer), malformed or out-of-range ``indices``, duplicate
            indices, or ``values`` of another length or not finite.
    """
    (name, layer), (input_mean, input_std) = _first_layer_and_standardization(model)
    if not isinstance(layer, nn.Linear):
        raise v.invalid(
            "model",
            "model: reconstruction from uploads needs a fully-connected first "
            f"layer, but the first layer {name!r} is {layer!r}; "
            "a convolution's update mixes every patch of the input and is not a copy of it",
        )
    idx = torch.as_tensor(indices)
    val = torch.as_tensor(values)
    if idx.ndim != 1 or idx.dtype.is_floating_point or idx.dtype.is_complex or idx.dtype == torch.bool:
        raise v.invalid(
            "indices", f"indices must be a 1-D integer array, got dtype {idx.dtype} and shape {tuple(idx.shape)}"
        )
    if val.ndim != 1 or val.shape != idx.shape:
        raise v.invalid(
            "values", f"values must be a 1-D array as long as indices ({idx.numel()}), got shape {tuple(val.shape)}"
        )
    if not val.dtype.is_floating_point:
        val = val.to(torch.float64)
    if not bool(torch.isfinite(val).all()):
        raise v.invalid("values", "values must be finite, got NaN or infinity")
    idx = idx.to(torch.int64).cpu()
    val = val.detach().cpu()
    total = sum(p.numel() for p in model.parameters())
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= total):
        raise v.invalid(
            "indices",
            f"indices must lie in [0, {total}) (the model's parameter count), got "
            f"range [{int(idx.min())}, {int(idx.max())}]",
        )
    if torch.unique(idx).numel() != idx.numel():
        raise v.invalid("indices", "indices must be distinct: an upload names each parameter at most once")

    offsets: dict[int, int] = {}
    start = 0
    for p in model.parameters():
        offsets[id(p)] = start
        start += p.numel()

    def dense(param: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lo = offsets[id(param)]
        n = param.numel()
        inside = (idx >= lo) & (idx < lo + n)
        flat = torch.zeros(n, dtype=torch.float32)
        mask = torch.zeros(n, dtype=torch.bool)
        flat[idx[inside] - lo] = val[inside].to(torch.float32)
        mask[idx[inside] - lo] = True
        return flat.reshape(param.shape), mask.reshape(param.shape)

    weight, weight_mask = dense(layer.weight)
    bias: torch.Tensor | None = None
    bias_mask: torch.Tensor | None = None
    if layer.bias is not None:
        bias, bias_mask = dense(layer.bias)
    return FirstLayerUpdate(
        weight_delta=weight,
        bias_delta=bias,
        weight_mask=weight_mask,
        bias_mask=bias_mask,
        layer=name,
        input_mean=input_mean,
        input_std=input_std,
    )


@dataclass(frozen=True)
class ReconstructionCandidates:
    """Distinct reconstructions from one upload, most confident first.

    Attributes:
        images: (k, *input_shape) float32 in [0, 1].
        confidence: (k,) in [0, 1]; see :func:`reconstruction_candidates`.
        rows: (k,) the first-layer unit each image was read from.
        support: (k,) how many units' rows gave this same image (correlation > 0.95).
        from_bias: (k,) True where the image is ΔW_i / Δb_i, False where the bias was not
            uploaded and the row was rescaled instead.
    """

    images: torch.Tensor
    confidence: np.ndarray
    rows: np.ndarray
    support: np.ndarray
    from_bias: np.ndarray


def _check_shape(input_shape: Sequence[int], in_features: int) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in input_shape)
    except (TypeError, ValueError):
        raise v.invalid("input_shape", f"input_shape must be a tuple of positive ints, got {input_shape!r}") from None
    if not shape or any(s < 1 for s in shape):
        raise v.invalid("input_shape", f"input_shape must be a tuple of positive ints, got {input_shape!r}")
    if math.prod(shape) != in_features:
        raise v.invalid(
            "input_shape",
            f"input_shape {shape} has {math.prod(shape)} elements but the first "
            f"layer takes {in_features} features; reconstruction reads inputs only "
            "when the first layer sees the raw flattened input",
        )
    return shape


def _centred_unit(x: torch.Tensor) -> torch.Tensor:
    c = x - x.mean(dim=1, keepdim=True)
    return c / c.norm(dim=1, keepdim=True).clamp_min(1e-12)


def _merge_bias_rows(
    rank: Sequence[int], *, has_bias: torch.Tensor, mask: torch.Tensor, from_ratio: torch.Tensor, images: torch.Tensor
) -> tuple[list[list[int]], torch.Tensor]:
    """Groups the ranked rows whose bias-divided reads agree, and each group's merged image.

    Bias rows that read the same input — where their uploaded entries overlap (≥ 3 shared) they
    agree to within 0.01 on average — merge into one image, the mean over the entries any of them
    uploaded; a row without a bias (unknown scale) stays a group of its own.

    Returns:
        The groups (row positions, best-ranked first) and their ``(groups, width)`` images.
    """
    width = mask.shape[1]
    # One example's rows are exact copies, so a sparse (largest-|Δw|) upload that shows each row
    # only some pixels shows their union here.
    groups: list[list[int]] = []
    g_sum = torch.zeros(0, width, dtype=torch.float64)
    g_cnt = torch.zeros(0, width, dtype=torch.float64)
    for j in rank:
        if bool(has_bias[j]) and g_sum.shape[0]:
            seen = g_cnt > 0
            overlap = seen & mask[j]
            n_over = overlap.sum(dim=1)
            mean_g = g_sum / g_cnt.clamp_min(1)
            diff = ((mean_g - from_ratio[j]).abs() * overlap).sum(dim=1) / n_over.clamp_min(1)
            ok = (
                (n_over >= _MIN_ENTRIES)
                & (diff <= _MERGE_TOLERANCE)
                & torch.tensor([bool(has_bias[g[0]]) for g in groups])
            )
            if bool(ok.any()):
                k = int(torch.nonzero(ok)[0])
                groups[k].append(j)
                g_sum[k] += torch.where(mask[j], from_ratio[j], 0.0)
                g_cnt[k] += mask[j].to(torch.float64)
                continue
        groups.append([j])
        if bool(has_bias[j]):
            g_sum = torch.cat([g_sum, torch.where(mask[j], from_ratio[j], 0.0)[None]])
            g_cnt = torch.cat([g_cnt, mask[j].to(torch.float64)[None]])
        else:  # kept apart: its scale is unknown, so it never merges
            g_sum = torch.cat([g_sum, images[j][None]])
            g_cnt = torch.cat([g_cnt, torch.zeros(1, width, dtype=torch.float64)])
    merged = torch.stack(
        [(g_sum[k] / g_cnt[k].clamp_min(1)) if bool(has_bias[g[0]]) else g_sum[k] for k, g in enumerate(groups)]
    )
    return groups, merged


def reconstruction_candidates(update: FirstLayerUpdate, *, input_shape: Sequence[int]) -> ReconstructionCandidates:
    """Reads one candidate input from every uploaded first-layer row, ranks and de-duplicates them.

    Per row i with at least 3 uploaded weight entries:

    * **bias uploaded and non-zero:** x̂ = ΔW_i / Δb_i on the uploaded entries — exact when one
      example drove the row, a weighted mean of examples otherwise. Entries outside [0, 1] are
      clipped (inputs live there). Confidence is the fraction of uploaded entries of x̂ that
      already lay in [0, 1]: a weighted mean with weights of one sign stays in range, while
      noise (the DP variant) or opposite-sign mixtures fall out of it.
    * **bias not uploaded (or no bias):** ΔW_i = c·x for one example with unknown c. Inputs are
      non-negative, so c's sign is the sign of the row's sum; the row is flipped to make it
      positive, negatives are set to 0 and it is divided by its maximum (the scale is lost:
      the brightest pixel becomes 1). Confidence is |Σ ΔW_i| / Σ |ΔW_i|, which is 1 exactly
      when every entry has one sign, as a single example's row does.

    When the model standardises its inputs first (x' = (x − m) / s, known to the server as part
    of the shared model), the rows are copies of x', not x. The bias path maps the ratio back,
    x̂ = m + s · ΔW_i / Δb_i. Without the bias the row is c·(x − m) up to the sign of c, which is
    the sign of the row's largest entry (the brightest pixel lies furthest from the mean); the
    row divided by that entry is (x − m) / (1 − m) when the brightest pixel is 1, so
    x̂ = m + (1 − m) · row / max, and the consistency is measured on x̂ / (1 − m), which is
    non-negative for one example. With m = 0 and s = 1 both reduce to the cases above (the sign
    then comes from the row's sum, as for raw inputs).

    Entries that were not uploaded are 0 in the image: under largest-|Δw| selection they are
    the smallest entries of the row, i.e. the darkest pixels, so 0 is the best guess; under
    random selection they are unknown and 0 is the background of dark-background data.

    Rows are ranked by confidence, then by support (how many other rows read the same image,
    centred correlation > 0.95: pure single-example rows repeat exactly, mixtures do not), then
    by the uploaded norm of the row; near-duplicates of a higher-ranked image are dropped.

    Raises:
        ValueError: ``input_shape`` does not match the first layer's input features.
    """
    shape = _check_shape(input_shape, update.in_features)
    w = update.weight_delta.to(torch.float64)
    m = update.weight_mask
    counts = m.sum(dim=1)
    norms = w.norm(dim=1)
    keep = (counts >= _MIN_ENTRIES) & (norms > 0)
    if update.bias_delta is not None and update.bias_mask is not None:
        b = update.bias_delta.to(torch.float64)
        has_bias = update.bias_mask & (b.abs() > 1e-12 * norms.clamp_min(1e-30))
    else:
        b = torch.zeros(w.shape[0], dtype=torch.float64)
        has_bias = torch.zeros(w.shape[0], dtype=torch.bool)
    rows = torch.nonzero(keep).flatten()
    if rows.numel() == 0:
        empty = np.zeros(0)
        return ReconstructionCandidates(
            images=torch.zeros((0, *shape)),
            confidence=empty,
            rows=empty.astype(np.int64),
            support=empty.astype(np.int64),
            from_bias=empty.astype(bool),
        )
    wr, mr, hb = w[rows], m[rows], has_bias[rows]
    nentries = mr.sum(dim=1).to(torch.float64)

    mean, std = float(update.input_mean), float(update.input_std)
    # Bias path: ratio on uploaded entries, mapped back to raw inputs (identity for m = 0, s = 1).
    ratio = torch.where(mr, wr / torch.where(hb, b[rows], torch.ones_like(b[rows])).unsqueeze(1), torch.zeros_like(wr))
    ratio = torch.where(mr, mean + std * ratio, torch.zeros_like(wr))
    in_range = ((ratio >= -_RANGE_SLACK) & (ratio <= 1 + _RANGE_SLACK) & mr).sum(dim=1).to(torch.float64) / nentries
    from_ratio = ratio.clamp(0.0, 1.0)

    # No-bias path: fix the sign (the row's sum on raw inputs, its largest entry under
    # standardisation, where the background is negative), scale by the row's maximum.
    if mean != 0.0 or std != 1.0:
        peak = wr.gather(1, wr.abs().argmax(dim=1, keepdim=True)).squeeze(1)
        sign = torch.where(peak >= 0, 1.0, -1.0).to(torch.float64).unsqueeze(1)
    else:
        sign = torch.where(wr.sum(dim=1) >= 0, 1.0, -1.0).to(torch.float64).unsqueeze(1)
    unit_row = wr * sign / (wr * sign).amax(dim=1, keepdim=True).clamp_min(1e-30)
    raw = torch.where(mr, mean + (1.0 - mean) * unit_row, torch.zeros_like(wr))
    scaled = raw.clamp(0.0, 1.0)
    shifted = raw / max(1.0 - mean, 1e-12)  # x̂ / (1 − m): non-negative for one example
    consistency = shifted.sum(dim=1).abs() / shifted.abs().sum(dim=1).clamp_min(1e-30)

    images = torch.where(hb.unsqueeze(1), from_ratio, scaled)
    confidence = torch.where(hb, in_range, consistency)
    row_norm = norms[rows]
    rank = sorted(range(rows.numel()), key=lambda j: (-float(confidence[j]), -float(row_norm[j])))

    # Merge bias rows that read the same input (one example's rows are exact copies).
    groups, merged = _merge_bias_rows(rank, has_bias=hb, mask=mr, from_ratio=from_ratio, images=images)
    g_conf = torch.tensor([float(confidence[g].mean()) for g in groups], dtype=torch.float64)
    g_norm = torch.tensor([float(row_norm[g].max()) for g in groups], dtype=torch.float64)
    g_rows = torch.tensor([int(rows[g[0]]) for g in groups], dtype=torch.int64)
    g_bias = torch.tensor([bool(hb[g[0]]) for g in groups])
    g_support = torch.tensor([len(g) for g in groups], dtype=torch.int64)

    unit = _centred_unit(merged)
    corr = unit @ unit.T
    flat_image = merged.std(dim=1) < 1e-9  # constant images carry nothing; correlation is undefined
    order = sorted(range(len(groups)), key=lambda k: (-float(g_conf[k]), -int(g_support[k]), -float(g_norm[k])))
    chosen: list[int] = []
    for k in order:
        if flat_image[k] or any(float(corr[k, c]) > _DUPLICATE_CORRELATION for c in chosen):
            continue
        chosen.append(k)
    sel = torch.tensor(chosen, dtype=torch.int64)
    return ReconstructionCandidates(
        images=merged[sel].to(torch.float32).reshape(len(chosen), *shape),
        confidence=g_conf[sel].numpy().astype(np.float64),
        rows=g_rows[sel].numpy().astype(np.int64),
        support=g_support[sel].numpy().astype(np.int64),
        from_bias=g_bias[sel].numpy().astype(bool),
    )


def reconstruct_inputs(update: FirstLayerUpdate, *, input_shape: Sequence[int], max_images: int = 16) -> torch.Tensor:
    """Up to ``max_images`` distinct training inputs read off the upload, most confident first.

    See :func:`reconstruction_candidates` for how each image is read and ranked. Fewer than
    ``max_images`` come back when the upload holds fewer distinct rows.

    Returns:
        (k, *input_shape) float32 in [0, 1], k ≤ max_images.

    Raises:
        ValueError: ``max_images`` < 1, or ``input_shape`` does not match the first layer.
    """
    if isinstance(max_images, bool) or not isinstance(max_images, int) or max_images < 1:
        raise v.invalid("max_images", f"max_images must be a positive int, got {max_images!r}")
    return reconstruction_candidates(update, input_shape=input_shape).images[:max_images]


# ---------------------------------------------------------------------------------------------
# SSIM (Wang et al. 2004)


def upload_membership_scores(update: FirstLayerUpdate, candidates: Any, *, chunk: int = 1024) -> np.ndarray:
    """How strongly each candidate input appears in the upload: higher = more likely a member.

    Score = max over first-layer rows i (with ≥ 3 uploaded entries) of |ρ_i(x)|, the Pearson
    correlation between the uploaded entries of ΔW_i and the same entries of the candidate x.
    A row driven by one example is c·x (c of either sign, hence the absolute value), so a member
    scores 1 exactly in the single-example case and close to 1 whenever some unit was active
    mostly for it; centring makes the score blind to the offset and scale SGD puts on the row,
    and restricting to uploaded entries compares only what the server saw. Non-members only
    correlate as much as they resemble some member. A constant candidate (on a row's entries)
    scores 0 on that row.

    Args:
        update: from :func:`first_layer_update`.
        candidates: (n, *input_shape) inputs, flattened in the order the first layer reads them.

    Returns:
        (n,) float64 scores in [0, 1]; all 0 when no row has enough uploaded entries.

    Raises:
        ValueError: candidates of another size than the first layer's input, or not finite.
    """
    x = torch.as_tensor(candidates).detach().to(torch.float64).cpu()
    if x.ndim < 2 or math.prod(x.shape[1:]) != update.in_features:
        raise v.invalid(
            "candidates",
            f"candidates must have shape (n, *input_shape) with {update.in_features} "
            f"features per input, got {tuple(x.shape)}",
        )
    if not bool(torch.isfinite(x).all()):
        raise v.invalid("candidates", "candidates must be finite")
    x = x.reshape(x.shape[0], -1)
    w = update.weight_delta.to(torch.float64)
    m = update.weight_mask.to(torch.float64)
    cnt = m.sum(dim=1)
    good = (cnt >= _MIN_ENTRIES) & (w.norm(dim=1) > 0)
    out = np.zeros(x.shape[0])
    if not bool(good.any()):
        return out
    w, m, cnt = w[good] * m[good], m[good], cnt[good].unsqueeze(1)
    sw = w.sum(dim=1, keepdim=True)
    var_w = (w * w).sum(dim=1, keepdim=True) - sw**2 / cnt
    for s in range(0, x.shape[0], chunk):
        xc = x[s : s + chunk]
        sx = m @ xc.T
        sxx = m @ (xc * xc).T
        swx = w @ xc.T
        cov = swx - sw * sx / cnt
        var_x = sxx - sx**2 / cnt
        denom = (var_w.clamp_min(0) * var_x.clamp_min(0)).sqrt()
        rho = torch.where(denom > 1e-12 * cnt, cov / denom.clamp_min(1e-300), torch.zeros_like(cov))
        out[s : s + xc.shape[0]] = rho.abs().clamp(max=1.0).amax(dim=0).numpy()
    return out


# ---------------------------------------------------------------------------------------------
# The attack end to end


@dataclass(frozen=True)
class UploadReconstruction:
    """Result of the server's reconstruction attack on one upload (numpy only: JSON + NPZ).

    Attributes:
        reconstructions: (k, *input_shape) float32 in [0, 1], most confident first.
        confidence: (k,) from :func:`reconstruction_candidates`.
        best_ssim: (k,) each reconstruction's best SSIM against the private inputs.
        matched_ids: (k,) int64 sample id (or position) of the best-matching private input.
        threshold: SSIM at or above which a reconstruction is recognisable
            (:data:`RECOGNISABLE_SSIM` unless set).
        private_count: how many private inputs the reconstructions were matched against.
    """

    reconstructions: np.ndarray
    confidence: np.ndarray
    best_ssim: np.ndarray
    matched_ids: np.ndarray
    threshold: float
    private_count: int

    @property
    def recognisable(self) -> np.ndarray:
        """(k,) bool: best SSIM ≥ threshold."""
        return self.best_ssim >= self.threshold

    @property
    def fraction_recognisable(self) -> float:
        """Share of the returned reconstructions that are recognisable (0 when none came back)."""
        return float(self.recognisable.mean()) if self.best_ssim.size else 0.0

    @property
    def distinct_recognised(self) -> int:
        """How many different private inputs some recognisable reconstruction matches: the leak."""
        return int(np.unique(self.matched_ids[self.recognisable]).size)

    def summary(self) -> JsonObject:
        """JSON-ready scalars."""
        return {
            "reconstructions": int(self.best_ssim.size),
            "private_count": self.private_count,
            "threshold": self.threshold,
            "fraction_recognisable": self.fraction_recognisable,
            "distinct_recognised": self.distinct_recognised,
            "best_ssim_max": float(self.best_ssim.max()) if self.best_ssim.size else 0.0,
            "best_ssim_mean": float(self.best_ssim.mean()) if self.best_ssim.size else 0.0,
        }

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays, for ``np.savez``."""
        return {
            "reconstructions": self.reconstructions,
            "confidence": self.confidence,
            "best_ssim": self.best_ssim,
            "matched_ids": self.matched_ids,
        }


def upload_reconstruction_attack(
    model: nn.Module,
    indices: Any,
    values: Any,
    *,
    input_shape: Sequence[int],
    private_images: Any,
    private_ids: Any = None,
    max_images: int = 16,
    threshold: float = RECOGNISABLE_SSIM,
) -> UploadReconstruction:
    """Reconstructs inputs from one upload and scores them against the participant's inputs.

    Args:
        model: the model the upload's flat indices refer to.
        indices, values: the upload.
        input_shape: shape of one input, e.g. (1, 28, 28); 2-D shapes are single-channel.
        private_images: (n, *input_shape) the participant's inputs of that turn (or partition).
        private_ids: (n,) sample ids to report instead of positions.
        max_images: most reconstructions to keep.
        threshold: recognisability threshold on SSIM, in (0, 1].

    Raises:
        ValueError: see :func:`first_layer_update`, :func:`reconstruct_inputs`,
            :func:`match_reconstructions`; ``threshold`` outside (0, 1]; ``private_ids`` of
            another length than ``private_images``.
    """
    if not (isinstance(threshold, (int, float)) and 0 < threshold <= 1):
        raise v.invalid("threshold", f"threshold must lie in (0, 1], got {threshold!r}")
    update = first_layer_update(model, indices, values)
    cands = reconstruction_candidates(update, input_shape=input_shape)
    k = min(int(max_images), cands.images.shape[0]) if isinstance(max_images, int) and max_images >= 1 else -1
    if k < 0:
        raise v.invalid("max_images", f"max_images must be a positive int, got {max_images!r}")
    recons = cands.images[:k]
    priv = torch.as_tensor(private_images).detach().to(torch.float32).cpu()
    best, where = match_reconstructions(recons, priv)
    ids = np.arange(priv.shape[0], dtype=np.int64) if private_ids is None else np.asarray(private_ids, dtype=np.int64)
    if ids.shape != (priv.shape[0],):
        raise v.invalid(
            "private_ids", f"private_ids must have one id per private image ({priv.shape[0]}), got shape {ids.shape}"
        )
    return UploadReconstruction(
        reconstructions=recons.numpy().astype(np.float32),
        confidence=cands.confidence[:k],
        best_ssim=best,
        matched_ids=ids[where] if where.size else np.zeros(0, dtype=np.int64),
        threshold=float(threshold),
        private_count=int(priv.shape[0]),
    )
