"""Loading a record the suite will act on: checked against itself before any work starts.

:func:`dpaudit.results.record.load_record` validates every field of ``record.json`` on its own
(types, ranges, the claim's parameters). A record can still contradict itself: a claim saying
σ = 10 beside a config that ran σ = 1 would be audited and reported with ε_UB 0.17 where the
mechanism gives 3.90; a config edited after training, or a record moved under another name,
would be attacked as a model it is not; a digits record relabelled ``mnist`` would have an
evaluator trained on MNIST images picked by digits ids. :func:`load_verified_record` refuses
each, one line naming the field and both values, and every run that loads a record it acts on
goes through it (attack, certify, inversion, PATE, DSSGD, compare, a reused training), so one
run directory cannot show two ε_UB for one model.

Checks, in order:

1. the dataset is registered, with the record's input shape and number of classes;
2. the claim is of the kind the defense states for the config (:class:`defenses.DefenseSpec`);
3. the claim equals the one rebuilt from the config and metrics
   (:func:`dpaudit.privacy.record_claims.check_record_claim`);
4. the model id is the one the config, options, seed and number of members give;
5. the directory is named after the model id (a sub-model's after its own scheme).

``dpaudit report`` runs all five too (:func:`verify_record`) before it renders: a page must not
show a record ``attack`` would refuse. :func:`verify_record_claim` is the torch-free part (3 and
5), for callers that cannot load the defense registry.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from dpaudit import _validate as v
from dpaudit.results.record import RECORD_FILE, TrainedModel, load_record, resolve_record_dir

__all__ = ["load_verified_record", "verify_record", "verify_record_claim"]


def _refuse(directory: Path, record: TrainedModel, message: str) -> ValueError:
    # The user's record contradicts itself: a usage error about the record they named (exit 2).
    return v.invalid("target", f"{str(directory / RECORD_FILE)!r}: {message} (model id {record.model_id})")


def _shape(shape: Any) -> str:
    return "x".join(str(int(s)) for s in shape)


def verify_record_claim(
    record: TrainedModel, directory: str | os.PathLike[str], *, top_level: bool = True
) -> TrainedModel:
    """Checks that need neither torch nor the defenses: the claim against its config and metrics,
    and (for a record at the top of ``records/``, ``top_level``) the directory's name.

    Returns:
        ``record``.

    Raises:
        ValueError: one line naming the record file, the field and both values.
    """
    from dpaudit.privacy.record_claims import check_record_claim

    directory = Path(directory)
    try:
        check_record_claim(
            record.claim, config=record.config, metrics=record.metrics, num_members=len(record.membership.members)
        )
    except ValueError as exc:
        raise _refuse(directory, record, str(exc)) from None
    if top_level and directory.name != record.model_id:
        raise _refuse(
            directory, record, f"directory name {directory.name!r} does not match model_id={record.model_id!r}"
        )
    return record


def _check_dataset(record: TrainedModel, directory: Path) -> None:
    from dpaudit.data import DATASETS

    source = DATASETS.get(record.dataset)
    if source is None:
        raise _refuse(
            directory, record, f"dataset={record.dataset!r} is not a registered dataset ({', '.join(DATASETS)})"
        )
    if source.input_shape is not None and tuple(source.input_shape) != tuple(record.input_shape):
        raise _refuse(
            directory,
            record,
            f"input_shape={_shape(record.input_shape)} does not match dataset "
            f"{record.dataset!r} input shape {_shape(source.input_shape)}",
        )
    if source.num_classes != record.num_classes:
        raise _refuse(
            directory,
            record,
            f"num_classes={record.num_classes} does not match dataset "
            f"{record.dataset!r} num_classes={source.num_classes}",
        )


def verify_record(record: TrainedModel, directory: str | os.PathLike[str]) -> TrainedModel:
    """Refuses a record that contradicts itself, its defense or the dataset registry (see the module docstring).

    Args:
        record: the record loaded from ``directory``.
        directory: the record's directory.

    Returns:
        ``record``.

    Raises:
        ValueError: one line naming the record file, the field and both values.
    """
    from defenses import DEFENSES
    from defenses._common import expected_model_id

    directory = Path(directory)
    _check_dataset(record, directory)
    spec = DEFENSES.get(record.defense)
    if spec is None:
        raise _refuse(
            directory, record, f"defense={record.defense!r} is not a registered defense ({', '.join(DEFENSES)})"
        )
    kind = spec.claim_kind_for(record.config)
    if record.claim.kind != kind:
        raise _refuse(
            directory,
            record,
            f"claim kind={record.claim.kind!r} does not match {kind!r}, the kind "
            f"defense {record.defense!r} states for this config",
        )
    verify_record_claim(record, directory, top_level=False)
    identity = next(
        (
            found
            for s in DEFENSES.values()
            if s.submodel_identity is not None and (found := s.submodel_identity(record)) is not None
        ),
        None,
    )
    want_id, want_dir = (
        identity if identity is not None else (expected_model_id(record, derived_options=spec.derived_options),) * 2
    )
    if record.model_id != want_id:
        raise _refuse(
            directory,
            record,
            f"model_id={record.model_id!r} does not match {want_id!r}, the id of its "
            "config, model options, seed and number of members",
        )
    if directory.name != want_dir:
        raise _refuse(
            directory,
            record,
            f"directory name {directory.name!r} does not match "
            f"{'model_id' if identity is None else 'the sub-model name'}={want_dir!r}",
        )
    return record


def load_verified_record(path: str | os.PathLike[str]) -> TrainedModel:
    """:func:`dpaudit.results.record.load_record` followed by :func:`verify_record`.

    ``path`` may be a record directory, its ``record.json``, or a run directory with one record.

    Raises:
        ValueError: the record cannot be found, is invalid, or contradicts itself (one line).
    """
    directory = resolve_record_dir(path)
    return verify_record(load_record(directory), directory)
