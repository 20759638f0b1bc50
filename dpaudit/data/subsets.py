"""Class subsets of a registered dataset: the private halves of the generative model-inversion setting.

Zhang et al. (2020, "The Secret Revealer", §4.1) train the target on *private* classes and the
attacker's GAN on *public* data of the same domain that the target never saw: MNIST digits 0–4
private and 5–9 public; for faces, identities disjoint from the private ones. A subset source
keeps the parent's images of the chosen classes, relabels them 0…k−1 in order, and numbers the
samples afresh (train first), so a target trained on it has a k-way output and its records,
splits and attacks work as for any dataset. The public half is named on the attack's command
line as ``PARENT:CLASSES`` (e.g. ``mnist:5-9``), in the parent's labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import torch

from dpaudit.data.containers import DatasetBundle, make_bundle
from dpaudit.data.source import DatasetInfo, DatasetNotFoundError, DatasetSource, info_from_bundle

__all__ = ["class_subset_source"]


def class_subset_source(parent: DatasetSource, classes: tuple[int, ...], *, name: str, description: str) -> DatasetSource:
    """A source holding ``parent``'s samples of ``classes``, relabelled ``0 … len(classes) − 1``.

    Args:
        parent: the registered source to take images from.
        classes: the parent's labels to keep, in the order of their new labels.
        name: the subset's registry name.
        description: one line for ``dpaudit datasets``.

    Raises:
        ValueError: ``classes`` is empty, repeats a label, or names one the parent lacks.
    """
    if not classes or len(set(classes)) != len(classes) or min(classes) < 0 or max(classes) >= parent.num_classes:
        raise ValueError(f"classes must be distinct labels of {parent.name!r} (0..{parent.num_classes - 1}), got {classes!r}")

    def load(root: Path) -> DatasetBundle:
        try:
            full = parent.load(root)
        except DatasetNotFoundError as err:
            # The user asked for the subset: name it, and where its images come from.
            raise DatasetNotFoundError(str(err).replace(f"dataset {parent.name!r}", f"dataset {name!r} (classes of {parent.name!r})", 1)) from None
        keep = torch.tensor(classes, dtype=torch.long)
        relabel = torch.full((full.num_classes,), -1, dtype=torch.long)
        relabel[keep] = torch.arange(len(classes))

        def part(split: str) -> tuple[torch.Tensor, torch.Tensor]:
            ds = getattr(full, split)
            mask = torch.isin(ds.labels, keep)
            return ds.features[mask], relabel[ds.labels[mask]]

        (x_tr, y_tr), (x_te, y_te) = part("train"), part("test")
        return make_bundle(name, x_train=x_tr, y_train=y_tr, x_test=x_te, y_test=y_te, num_classes=len(classes), description=f"{description} (from {full.description})")

    def info(root: Path) -> DatasetInfo:
        parent_info = parent.info(root)
        if not parent_info.available:
            return dataclasses.replace(parent_info, name=name)
        return info_from_bundle(load(root), description, parent_info.checked)

    loader: Callable[[Path], DatasetBundle] = load
    return DatasetSource(
        name=name,
        description=description,
        input_shape=parent.input_shape,
        num_classes=len(classes),
        files=parent.files,
        load=loader,
        info=info,
        download=parent.download,
        needs_root=parent.needs_root,
    )
