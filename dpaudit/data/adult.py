"""UCI Adult / census income (Kohavi 1996): one-hot categoricals, min-max scaled numerics, label ``income > 50K``.

Reads the cleaned CSVs ``ROOT/adult/adult_train.csv`` and ``adult_test.csv``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpaudit.data.containers import DatasetBundle, make_bundle
from dpaudit.data.integrity import checked_files, verify_checksum
from dpaudit.data.registry import register_dataset
from dpaudit.data.source import (
    DatasetFileError,
    DatasetInfo,
    DatasetNotFoundError,
    DatasetSource,
    info_from_bundle,
    missing_info,
    not_found,
    unusable_info,
)

__all__ = ["SOURCE"]

_ADULT_LABEL = "income"


def _adult_paths(root: Path) -> tuple[Path, Path]:
    return root / "adult" / "adult_train.csv", root / "adult" / "adult_test.csv"


def _adult_not_found(root: Path, download: bool) -> DatasetNotFoundError:
    train, test = _adult_paths(root)
    return not_found("adult", root, f"{train} and {test}", download=download)


def _load_adult(root: Path) -> DatasetBundle:
    import pandas as pd

    train_path, test_path = _adult_paths(root)
    if not (train_path.is_file() and test_path.is_file()):
        raise _adult_not_found(root, download=False)
    frames = []
    for path in (train_path, test_path):
        try:
            df = pd.read_csv(path, na_values=["?"], skipinitialspace=True)
        except OSError as exc:
            raise DatasetFileError(path, f"unreadable: {exc.strerror or exc}") from None
        except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            # pandas' ParserError/EmptyDataError and UnicodeDecodeError, whatever their wording.
            raise DatasetFileError(path, f"not a readable CSV file: {exc}") from None
        if _ADULT_LABEL not in df.columns:
            raise DatasetFileError(
                path, f"not the Adult CSV: no {_ADULT_LABEL!r} column (columns: {list(df.columns)[:20]})"
            )
        df = df.dropna().reset_index(drop=True)
        if df.empty:
            raise DatasetFileError(path, "not the Adult CSV: no complete row")
        verify_checksum(path, path.parent)
        frames.append(df)
    train_df, test_df = frames
    if list(train_df.columns) != list(test_df.columns):
        raise DatasetFileError(test_path, f"inconsistent with {train_path.name}: the columns differ")

    def labels(df: Any, path: Path) -> np.ndarray:
        # The UCI test file writes '>50K.' where the training file writes '>50K'.
        text = df[_ADULT_LABEL].astype(str).str.strip().str.rstrip(".")
        bad = ~text.isin([">50K", "<=50K"])
        if bad.any():
            raise DatasetFileError(
                path, f"not the Adult CSV: unexpected {_ADULT_LABEL} value {text[bad].iloc[0][:40]!r}"
            )
        return (text == ">50K").to_numpy(dtype=np.int64)

    y_tr, y_te = labels(train_df, train_path), labels(test_df, test_path)
    features = [c for c in train_df.columns if c != _ADULT_LABEL]
    numeric = [
        c for c in features if pd.api.types.is_numeric_dtype(train_df[c]) and pd.api.types.is_numeric_dtype(test_df[c])
    ]
    categorical = [c for c in features if c not in numeric]

    lo = train_df[numeric].min().to_numpy(dtype=np.float64)
    span = train_df[numeric].max().to_numpy(dtype=np.float64) - lo
    span[span == 0] = 1.0

    # One category list per column from the union of both files, so train and test agree.
    categories = {
        c: sorted(np.union1d(train_df[c].astype(str).unique(), test_df[c].astype(str).unique()).tolist())
        for c in categorical
    }

    def encode(df: Any) -> np.ndarray:
        blocks = [np.clip((df[numeric].to_numpy(dtype=np.float64) - lo) / span, 0.0, 1.0)]
        for c in categorical:
            codes = pd.Categorical(df[c].astype(str), categories=categories[c]).codes
            blocks.append(np.eye(len(categories[c]), dtype=np.float64)[codes])
        return np.concatenate(blocks, axis=1).astype(np.float32)

    x_tr, x_te = encode(train_df), encode(test_df)
    return make_bundle(
        "adult",
        x_train=torch.from_numpy(x_tr),
        y_train=torch.from_numpy(y_tr),
        x_test=torch.from_numpy(x_te),
        y_test=torch.from_numpy(y_te),
        num_classes=2,
        description=(
            f"UCI Adult census income (Kohavi 1996) from {train_path.parent}: {len(y_tr)} train / {len(y_te)} test "
            f"after dropping rows with missing values; {len(numeric)} numeric columns min-max scaled on train "
            f"(test clipped to [0, 1]), {len(categorical)} categorical columns one-hot ({x_tr.shape[1]} features); "
            f"label income >50K"
        ),
    )


def _adult_info(root: Path) -> DatasetInfo:
    from dpaudit.data.registry import load_dataset  # cached: info and load share one parse

    train_path, test_path = _adult_paths(root)
    if not (train_path.is_file() and test_path.is_file()):
        return missing_info("adult", str(_adult_not_found(root, download=False)))
    try:
        bundle = load_dataset("adult", data_root=root)
    except DatasetNotFoundError as err:
        return missing_info("adult", str(err))
    except DatasetFileError as err:
        return unusable_info("adult", err)
    # The load verified any listed checksum; the memo makes asking again free.
    checksums = sum(verify_checksum(p, p.parent) for p in (train_path, test_path))
    return info_from_bundle(bundle, str(train_path.parent), checked_files(2, checksums, "CSV parse and labels"))


SOURCE = register_dataset(
    DatasetSource(
        name="adult",
        description="UCI Adult census income (Kohavi 1996), tabular, one-hot categoricals "
        "and min-max scaled numerics; label income >50K",
        input_shape=None,  # the one-hot width depends on the categories in the files
        num_classes=2,
        files=("adult/adult_train.csv", "adult/adult_test.csv"),
        load=_load_adult,
        info=_adult_info,
    )
)
