"""PATE runs beyond training: the membership attack on a student's aggregator.

``dpaudit pate attack`` loads a PATE student's record, the teachers its ``private/pate.json`` names (from
the run's teacher cache), asks every teacher for its label on the student's members (the private
set) and non-members, answers each candidate through the record's own aggregator and scores
membership with :func:`attacks.membership.pate.aggregator_membership`. The result is stored with
the student's other membership results, so its report shows the aggregator beside the student.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit import _validate as v
from dpaudit.results import MembershipResult
from dpaudit.store import RunDir

__all__ = ["load_teacher_dirs", "attack_aggregator"]


def load_teacher_dirs(record_dir: Path) -> list[Path]:
    """The record directories of a PATE student's teachers, in teacher order.

    Raises:
        ValueError: no ``private/pate.json`` (nor, for older records, ``pate.json``) beside the
            record, or a teacher missing from the cache.
    """
    from dpaudit.store import read_json

    # The teachers' ids and partitions are private (private/pate.json, the cache path relative
    # to it); records written before that split keep them in the public pate.json.
    meta_path = record_dir / "private" / "pate.json"
    if not meta_path.is_file():
        meta_path = record_dir / "pate.json"
    if not meta_path.is_file():
        raise v.invalid("target", f"target: {str(record_dir)!r} has no pate.json (train it with `dpaudit train --defense pate --out RUN_DIR`)")
    meta = read_json(meta_path)
    try:
        cache = (meta_path.parent / meta["teachers"]["cache"]).resolve()
        ids = list(meta["teachers"]["teacher_ids"])
    except (KeyError, TypeError) as exc:
        raise v.invalid("target", f"target: {str(meta_path)!r} does not list the teachers ({exc})") from None
    dirs = [cache / t for t in ids]
    missing = [str(d) for d in dirs if not (d / "record.json").is_file()]
    if missing:
        raise v.invalid("target", f"target: {len(missing)} of the {len(ids)} teachers are missing from {str(cache)!r} (first: {missing[0]!r}); retrain with the same --out")
    return dirs


def attack_aggregator(
    *,
    target: str | os.PathLike[str],
    run: RunDir,
    repeats: int = 1,
    num_samples: int | None = None,
    seed: int = 0,
    data_root: str | None = None,
    device: str = "cpu",
    progress: bool = True,
) -> MembershipResult:
    """Runs the aggregator membership attack against a PATE student's record and stores it.

    Args:
        target: the student's record directory (or its ``record.json``).
        run: where results go (``RUN_DIR/attacks/membership/<model id>/``).
        repeats: answers per candidate (1 is what the claim covers).
        num_samples: at most this many members and non-members (seeded subsample).
        seed: seed of the subsample and of the aggregator's noise.
        data_root: the data root.
        device: where the teachers run.
        progress: progress on stderr.

    Raises:
        ValueError: the target is not a PATE student with its teachers.
    """
    from attacks.membership import query_ids
    from attacks.membership.pate import aggregator_membership
    from defenses import DEFENSES
    from defenses.pate.aggregators import aggregate
    from dpaudit.app.records import verify_record
    from dpaudit.app.runs.membership import _defense_config
    from dpaudit.data import load_dataset
    from dpaudit.locks import unit_lock
    from dpaudit.progress import Progress
    from dpaudit.results import save_membership_result
    from dpaudit.results.record import load_record, resolve_record_dir
    from dpaudit.store import thaw
    from dpaudit.training import predict_logits, resolve_device
    from dpaudit.weights import load_model

    try:
        rdir = resolve_record_dir(target)
    except ValueError as exc:
        raise v.invalid("target", f"target: {exc}") from None
    record = verify_record(load_record(rdir), rdir)  # a record contradicting itself: one line, before any work
    if record.defense != "pate":
        raise v.invalid("target", f"target: {str(rdir)!r} is a {record.defense!r} record; the aggregator attack needs a PATE student (--defense pate)")
    teacher_dirs = load_teacher_dirs(rdir)
    config = _defense_config(DEFENSES["pate"].config_type, thaw(record.config))
    seed = v.integer("seed", seed, minimum=0)
    ids, member = query_ids(record, max_per_side=num_samples, seed=seed)
    bundle = load_dataset(record.dataset, data_root=data_root)
    if not config.resolved():
        # Derived from public sizes only, exactly as the training derived them.
        from defenses.pate.defense import public_split
        from defenses.pate.plan import plan_pate

        num_public = len(public_split(bundle, config.public_fraction)[0])
        config = plan_pate(config, num_members=len(record.membership.members), num_public=num_public, num_classes=bundle.num_classes).config
    aggregator = config.aggregator_config()
    data = bundle.all().subset(ids)
    dev = resolve_device(device)
    preds = np.empty((len(teacher_dirs), len(ids)), dtype=np.int64)
    with Progress(len(teacher_dirs), "PATE teachers label the candidates", enabled=progress) as bar:
        for t, tdir in enumerate(teacher_dirs):
            model = load_model(tdir, device=dev)
            preds[t] = predict_logits(model, data.features, device=dev).argmax(1).numpy()
            bar.update(1)
    meta: dict[str, Any] = {"dataset": record.dataset, "defense": "pate", "fingerprints": {"weights_sha256": record.weights_sha256}}
    result = aggregator_membership(
        teacher_labels=preds,
        true_labels=data.labels.numpy().astype(np.int64),
        sample_ids=ids,
        is_member=member,
        num_classes=record.num_classes,
        answer=lambda votes, s: aggregate(votes, aggregator, seed=s).labels,
        config=aggregator.to_dict(),
        model_id=record.model_id,
        repeats=repeats,
        seed=seed,
        metadata=meta,
    )
    run.create(command="dpaudit pate attack")
    with unit_lock(run.path, f"membership-{record.model_id}"):
        save_membership_result(result, run.membership_dir(record.model_id))
    return result
