"""The embedded default: scikit-learn's bundled 8×8 digits, which always work offline.

UCI optical recognition of handwritten digits (Alpaydin & Kaynak 1998) as bundled by
scikit-learn; (1, 8, 8), 10 classes, a fixed 80/20 train/test split.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from dpaudit.data.containers import DatasetBundle, make_bundle
from dpaudit.data.registry import register_dataset
from dpaudit.data.source import DatasetInfo, DatasetSource, info_from_bundle

__all__ = ["SOURCE"]

_DIGITS_SEED = 0
_DIGITS_TRAIN_FRACTION = 0.8


def _load_digits() -> DatasetBundle:
    from sklearn.datasets import load_digits

    raw = load_digits()
    x = torch.from_numpy((raw.data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8))
    y = torch.from_numpy(raw.target.astype(np.int64))
    # A fixed permutation, independent of any user seed, so the train/test split is part of
    # the dataset's definition and sample ids mean the same thing in every run.
    perm = np.random.default_rng(_DIGITS_SEED).permutation(len(y))
    n_train = int(math.floor(_DIGITS_TRAIN_FRACTION * len(y)))
    tr, te = torch.from_numpy(perm[:n_train]), torch.from_numpy(perm[n_train:])
    return make_bundle(
        "digits",
        x_train=x[tr].contiguous(),
        y_train=y[tr].contiguous(),
        x_test=x[te].contiguous(),
        y_test=y[te].contiguous(),
        num_classes=10,
        description=(
            "scikit-learn bundled 8x8 digits (UCI optical recognition of "
            f"handwritten digits), pixels/16; fixed split (seed {_DIGITS_SEED}): "
            f"{n_train} train / {len(y) - n_train} test"
        ),
    )


def _digits_info(root: Path) -> DatasetInfo:
    # Loaded through the registry's cache: the data is tiny and bundled, so this is cheap.
    from dpaudit.data.registry import load_dataset

    return info_from_bundle(load_dataset("digits"), "scikit-learn bundled (sklearn.datasets.load_digits)")


SOURCE = register_dataset(
    DatasetSource(
        name="digits",
        description="UCI optical digits bundled with scikit-learn, 8x8 grey, 1437 train / "
        "360 test; always available offline",
        input_shape=(1, 8, 8),
        num_classes=10,
        files=(),
        load=lambda root: _load_digits(),
        info=_digits_info,
        needs_root=False,
    )
)
