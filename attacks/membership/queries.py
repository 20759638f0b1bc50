"""The queries of a membership attack: which ids it scores and under which augmentations.

LiRA's query augmentations (mirror, 1-pixel shifts; Carlini et al. 2022, §V-C) and the target's
members and non-members as the ids to score, checked against the dataset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from dpaudit import _validate as v
from dpaudit.data import DatasetBundle
from dpaudit.results.record import TrainedModel
from dpaudit.robustness.noise import seeded_noise
from dpaudit.seeding import numpy_rng
from dpaudit.training import predict_logits

__all__ = ["augmentations_for", "query_ids", "check_query", "choose_augmentations", "predict_queries"]

_FLIP_OK = {"fashion-mnist", "cifar10", "faces"}
_SHIFT_OK = {"mnist", "fashion-mnist", "cifar10", "faces"}
_SHIFTS = ((1, 0), (-1, 0), (0, 1), (0, -1))


def augmentations_for(dataset: str, input_shape: Sequence[int]) -> tuple[str, ...]:
    """LiRA's query augmentations that make sense for a dataset (Carlini et al. 2022, §V-C).

    Mirroring only where it preserves the label (not for digits); 1-pixel shifts for images
    large enough to survive them; none for the 8×8 digits and tabular data.

    Returns:
        Names, ``identity`` first: ``flip``, ``shift:DX:DY``, ``flip+shift:DX:DY``.
    """
    out = ["identity"]
    if len(tuple(input_shape)) != 3 or min(tuple(input_shape)[1:]) < 16:
        return tuple(out)
    flip = dataset in _FLIP_OK
    if flip:
        out.append("flip")
    if dataset in _SHIFT_OK:
        out += [f"shift:{dx}:{dy}" for dx, dy in _SHIFTS]
        if flip:
            out += [f"flip+shift:{dx}:{dy}" for dx, dy in _SHIFTS]
    return tuple(out)


def _shift(x: torch.Tensor, dx: int, dy: int) -> torch.Tensor:
    """Translates images by (dx, dy) pixels with zero fill (not wrap-around)."""
    out = torch.zeros_like(x)
    h, w = x.shape[-2:]
    out[..., max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = x[
        ..., max(-dy, 0) : h - max(dy, 0), max(-dx, 0) : w - max(dx, 0)
    ]
    return out


def _augment(x: torch.Tensor, name: str) -> torch.Tensor:
    if name == "identity":
        return x
    parts = name.split("+")
    for part in parts:
        if part == "flip":
            x = torch.flip(x, dims=(-1,))
        else:
            _, dx, dy = part.split(":")
            x = _shift(x, int(dx), int(dy))
    return x


def predict_queries(
    model: nn.Module, features: torch.Tensor, augs: Sequence[str], device: torch.device | str, *, seed: int, stream: str
) -> np.ndarray:
    """``(n, q, C)`` float32 logits of ``model`` (inference mode) on each augmentation.

    A randomized model (a noise layer) draws its noise from ``seed`` and ``stream`` (one stream
    per queried model), so the scores of a seeded attack are reproducible.
    """
    model.eval()
    with seeded_noise(model, seed, "membership-queries", stream, device=device):
        return np.stack([predict_logits(model, _augment(features, a), device=device).numpy() for a in augs], axis=1)


def query_ids(record: TrainedModel, *, max_per_side: int | None = None, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The ids an attack scores for a record: its members and non-members (canaries excluded).

    Args:
        record: the target's record.
        max_per_side: at most this many members and this many non-members (seeded subsample).
        seed: seed of the subsample.

    Returns:
        ``(sample_ids, is_member)``, sorted by id.
    """
    mem, non = record.membership.members, record.membership.non_members
    if max_per_side is not None:
        n = v.integer("max_per_side", max_per_side, minimum=1)
        rng = numpy_rng(seed, "query-subsample")
        mem = np.sort(rng.permutation(mem)[:n]) if mem.size > n else mem
        non = np.sort(rng.permutation(non)[:n]) if non.size > n else non
    ids = np.concatenate([mem, non])
    is_member = np.concatenate([np.ones(mem.size, bool), np.zeros(non.size, bool)])
    order = np.argsort(ids, kind="stable")
    return ids[order].astype(np.int64), is_member[order]


def check_query(
    record: TrainedModel, bundle: DatasetBundle, sample_ids: Any, is_member: Any
) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(sample_ids, is_member)``: the record's own when both are ``None``."""
    if sample_ids is None:
        if is_member is not None:
            raise v.invalid("is_member", "is_member was given without sample_ids")
        return query_ids(record)
    if is_member is None:
        raise v.invalid("is_member", "is_member is required with sample_ids")
    ids = np.array(sample_ids, copy=True)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise v.invalid_type(
            "sample_ids", f"sample_ids must be a 1-D array of integer ids, got dtype {ids.dtype} shape {ids.shape}"
        )
    ids = ids.astype(np.int64)
    member = np.array(is_member, copy=True)
    if member.dtype != bool or member.shape != ids.shape:
        raise v.invalid_type(
            "is_member",
            f"is_member must be a bool array of shape {ids.shape}, got dtype {member.dtype} shape {member.shape}",
        )
    if np.unique(ids).size != ids.size:
        raise v.invalid("sample_ids", "sample_ids must not repeat a sample id")
    bundle.all().positions(ids)  # raises ValueError naming an unknown id
    order = np.argsort(ids, kind="stable")  # the context's positions need sorted ids
    return ids[order], member[order]


def choose_augmentations(bundle: DatasetBundle, num_queries: int | None) -> tuple[str, ...]:
    """The first ``num_queries`` query augmentations (default 2 where any exists, else 1)."""
    augs_all = augmentations_for(bundle.name, bundle.input_shape)
    if num_queries is None:
        num_queries = 2 if len(augs_all) > 1 else 1
    num_queries = v.integer("num_queries", num_queries, minimum=1)
    if num_queries > len(augs_all):
        raise v.invalid(
            "num_queries",
            f"num_queries must be <= {len(augs_all)} for dataset {bundle.name!r} "
            f"(augmentations: {', '.join(augs_all)}), got {num_queries}",
        )
    return augs_all[:num_queries]
