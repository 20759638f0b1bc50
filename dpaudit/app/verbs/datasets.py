"""``dpaudit datasets``: which datasets the data root holds, with their sizes.

"Available" is verified, not assumed: each dataset's files are checked as its loader checks
them (headers and lengths, batch structure, ``MD5SUMS`` where the folder has one), and a
dataset whose file fails is listed as ``unavailable: <file>: <reason>``. A data root given by
``--data-root`` or ``$DPAUDIT_DATA_ROOT`` that does not exist, is not a directory or cannot be
read is an error (exit 2) naming where it came from and the path.
"""

from __future__ import annotations

import argparse

from dpaudit.app.common import (
    EXIT_OK,
    add_common,
    emit,
)

__all__ = ["register"]


def _cmd_datasets(args: argparse.Namespace) -> int:
    from dpaudit.data import DATASETS, dataset_info
    from dpaudit.data.source import checked_data_root

    root = checked_data_root(args.data_root)
    infos = dataset_info(data_root=args.data_root)
    payload = {
        "data_root": str(root),
        "datasets": {
            i.name: {
                "available": i.available,
                "num_train": i.num_train,
                "num_test": i.num_test,
                "input_shape": list(i.input_shape) if i.input_shape else None,
                "num_classes": i.num_classes,
                "detail": i.detail,
                "checked": i.checked,
                "problem_file": i.problem_file,
                "description": DATASETS[i.name].description,
            }
            for i in infos
        },
    }
    lines = [
        f"data root: {root}",
        f"{'dataset':<14} {'available':<9} {'train':>7} {'test':>7}  {'shape':<12} classes  detail",
    ]
    for i in infos:
        shape = "x".join(map(str, i.input_shape)) if i.input_shape else "-"
        lines.append(
            f"{i.name:<14} {'yes' if i.available else 'no':<9} {i.num_train if i.num_train is not None else '-':>7} "
            f"{i.num_test if i.num_test is not None else '-':>7}  {shape:<12} "
            f"{i.num_classes if i.num_classes else '-':>7}  {i.detail}"
            + (f" (checked: {i.checked})" if i.checked else "")
        )
    emit(args, payload, "\n".join(lines))
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``datasets`` to the ``dpaudit`` parser."""
    p = sub.add_parser(
        "datasets",
        help="list datasets available under the data root",
        description="Which datasets are available under the data root, with their sizes.",
    )
    add_common(p, data_root=True)
    p.set_defaults(func=_cmd_datasets)
