"""``dpaudit datasets``: which datasets the data root holds, with their sizes."""

from __future__ import annotations

import argparse

from dpaudit.app.common import (
    EXIT_OK,
    emit,
)

__all__ = ["register"]


def _cmd_datasets(args: argparse.Namespace) -> int:
    from dpaudit.data import DATASETS, dataset_info, resolve_data_root

    root = resolve_data_root(args.data_root)
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
                "description": DATASETS[i.name].description,
            }
            for i in infos
        },
    }
    lines = [f"data root: {root}", f"{'dataset':<14} {'available':<9} {'train':>7} {'test':>7}  {'shape':<12} classes  detail"]
    for i in infos:
        shape = "x".join(map(str, i.input_shape)) if i.input_shape else "-"
        lines.append(
            f"{i.name:<14} {'yes' if i.available else 'no':<9} {i.num_train if i.num_train is not None else '-':>7} "
            f"{i.num_test if i.num_test is not None else '-':>7}  {shape:<12} {i.num_classes if i.num_classes else '-':>7}  {i.detail}"
        )
    emit(args, payload, "\n".join(lines))
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``datasets`` to the ``dpaudit`` parser."""
    p = sub.add_parser("datasets", help="list datasets available under the data root", description="Which datasets are available under the data root, with their sizes.")
    p.add_argument("--data-root", metavar="DIR", help=f"data root (default: ${'DPAUDIT_DATA_ROOT'} or ~/.dpaudit/data)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=_cmd_datasets)
