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

from dpaudit import _validate as v
from dpaudit.data.containers import DatasetBundle, make_bundle
from dpaudit.data.source import DatasetInfo, DatasetNotFoundError, DatasetSource, info_from_bundle

__all__ = ["class_subset_source", "parse_classes"]


def parse_classes(
    text: str, *, argument: str, num_classes: int | None = None, example: str = "0-9 or 0,3,7"
) -> tuple[int, ...]:
    """Labels written as a comma list of labels and ascending ranges (``5-9``, ``0,2,4``, ``20-39``).

    One parser for every flag that names classes (``--classes``, the class part of
    ``--public-data``), so they accept and refuse the same things.

    Args:
        text: the list as typed.
        argument: the flag named in errors.
        num_classes: when known, every label must lie in ``0 … num_classes − 1``.
        example: what a valid list looks like, for the error message.

    Returns:
        The labels in the order written.

    Raises:
        ValueError: a malformed or descending range, no label, a repeated label, or one out of
            range (naming ``argument`` and ``text``).
    """
    out: list[int] = []
    try:
        for part in filter(None, (t.strip() for t in str(text).split(","))):
            lo, dash, hi = part.partition("-")
            if dash and int(hi) < int(lo):
                raise ValueError(part)
            out += list(range(int(lo), int(hi) + 1)) if dash else [int(lo)]
    except ValueError:
        raise v.invalid(argument, f"{argument} must be labels or ranges such as {example}; got {text!r}") from None
    if not out:
        raise v.invalid(argument, f"{argument} must name at least one label, got {text!r}")
    if len(set(out)) != len(out) or min(out) < 0 or (num_classes is not None and max(out) >= num_classes):
        top = f"0..{num_classes - 1}" if num_classes is not None else "non-negative"
        raise v.invalid(argument, f"{argument} must be distinct {top} labels, got {text!r}")
    return tuple(out)


def class_subset_source(
    parent: DatasetSource, classes: tuple[int, ...], *, name: str, description: str
) -> DatasetSource:
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
        raise v.invalid(
            "classes",
            f"classes must be distinct labels of {parent.name!r} (0..{parent.num_classes - 1}), got {classes!r}",
        )

    def load(root: Path) -> DatasetBundle:
        try:
            full = parent.load(root)
        except DatasetNotFoundError as err:
            # The user asked for the subset: name it, and where its images come from.
            raise DatasetNotFoundError(
                str(err).replace(f"dataset {parent.name!r}", f"dataset {name!r} (classes of {parent.name!r})", 1)
            ) from None
        keep = torch.tensor(classes, dtype=torch.long)
        relabel = torch.full((full.num_classes,), -1, dtype=torch.long)
        relabel[keep] = torch.arange(len(classes))

        def part(split: str) -> tuple[torch.Tensor, torch.Tensor]:
            ds = getattr(full, split)
            mask = torch.isin(ds.labels, keep)
            return ds.features[mask], relabel[ds.labels[mask]]

        (x_tr, y_tr), (x_te, y_te) = part("train"), part("test")
        return make_bundle(
            name,
            x_train=x_tr,
            y_train=y_tr,
            x_test=x_te,
            y_test=y_te,
            num_classes=len(classes),
            description=f"{description} (from {full.description})",
        )

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
