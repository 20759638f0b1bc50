"""DSSGD runs beyond training: what the parameter server learns, and the audit of the DP upload.

Distributed selective SGD (Shokri & Shmatikov, CCS 2015) shows the server every participant's
sparse Δw. This module wires the server-seat attacks of :mod:`attacks.federated.uploads` and the canary
audit of :mod:`attacks.federated.dssgd_audit` to the protocol of :mod:`defenses.dssgd` (only the
application layer may import both):

* :func:`attack_uploads` reads the uploads a DSSGD record kept for its observed participant
  (``uploads.npz``, written by ``dpaudit train --defense dssgd``), reconstructs inputs from each
  turn's first-layer update and scores membership of the participant's data from the uploads;
* :func:`turn_leakage` measures the same reconstruction in the controlled setting of the paper's
  privacy question: one turn on a few examples (one SGD step), uploaded in full, sparsified to
  θ_u, or through the DP variant;
* :func:`audit_upload` plays the canary game on one participant's turn and sets ε_LB against the
  turn's composed ε_UB and the paper's per-parameter ε.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit import _validate as v
from dpaudit.results import MembershipResult
from dpaudit.results.membership import tpr_unresolved
from dpaudit.store import JsonObject, RunDir

__all__ = ["UPLOAD_ATTACK", "UploadAttackSummary", "LeakageRow", "attack_uploads", "turn_leakage", "audit_upload"]

#: Name of the membership attack that scores candidates from a participant's uploads.
UPLOAD_ATTACK = "dssgd-uploads"


@dataclass(frozen=True)
class UploadAttackSummary:
    """The server's view of one participant: reconstruction per turn and membership from all turns.

    Attributes:
        model_id: the federation's global record.
        participant: whose uploads were attacked.
        turns: turns (uploads) attacked.
        best_ssim_max: per turn, the best SSIM any reconstruction reached against the partition.
        distinct_recognised: per turn, how many different private inputs some reconstruction
            recognisably copies (SSIM ≥ :data:`attacks.federated.similarity.RECOGNISABLE_SSIM`).
        membership: the membership result of the uploads (members: the partition).
        reconstructions: the first attacked turn's reconstructions (k, *input_shape).
    """

    model_id: str
    participant: int
    turns: int
    best_ssim_max: tuple[float, ...]
    distinct_recognised: tuple[int, ...]
    membership: MembershipResult
    reconstructions: np.ndarray

    def summary(self) -> JsonObject:
        """JSON-ready scalars."""
        return {
            "model_id": self.model_id,
            "participant": self.participant,
            "turns": self.turns,
            "best_ssim_max": max(self.best_ssim_max, default=0.0),
            "best_ssim_mean_over_turns": float(np.mean(self.best_ssim_max)) if self.best_ssim_max else 0.0,
            "distinct_recognised_total": int(sum(self.distinct_recognised)),
            "membership_auc": self.membership.auc(),
            # null where the non-members cannot resolve 1 % FPR; the note says how many it needs.
            "membership_tpr_at_1pct_fpr": None
            if tpr_unresolved(0.01, self.membership.num_non_members)
            else self.membership.tpr_at_fpr(0.01),
            "membership_tpr_at_1pct_fpr_note": tpr_unresolved(0.01, self.membership.num_non_members),
        }


@dataclass(frozen=True)
class _Uploads:
    """What a DSSGD record kept of its observed participant (``uploads.npz``), for the server's attacks.

    Attributes:
        record: the federation's global record; ``rdir`` its directory.
        sizes: per kept turn, how many parameters it uploaded (cut to ``max_turns``).
        indices, values: the uploaded parameters of all turns, concatenated.
        member_ids: the participant's partition; ``participant`` its index.
    """

    rdir: Path
    record: Any
    sizes: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    member_ids: np.ndarray
    participant: int


def _load_uploads(target: str | os.PathLike[str], max_turns: int | None) -> _Uploads:
    """Reads the record's uploads (the target named when it is not a DSSGD record with ``uploads.npz``)."""
    from defenses import DEFENSES
    from defenses.dssgd.defense import UPLOADS_FILE
    from dpaudit.app.records import verify_record
    from dpaudit.results.record import load_record, resolve_record_dir

    try:
        rdir = resolve_record_dir(target)
    except ValueError as exc:
        raise v.invalid("target", f"target: {exc}") from None
    record = verify_record(load_record(rdir), rdir)  # a record contradicting itself: one line, before any work
    path = rdir / UPLOADS_FILE
    defense = DEFENSES.get(record.defense)
    # The uploads are an artefact of the defenses whose records this run works on (DSSGD's), nothing else's.
    if defense is None or defense.run_module != __name__ or not path.is_file():
        raise v.invalid(
            "target",
            f"target: {str(rdir)!r} is a {record.defense!r} record without "
            f"{UPLOADS_FILE}; the upload attacks need a DSSGD record (dpaudit train "
            "--defense dssgd)",
        )
    with np.load(path, allow_pickle=False) as z:
        sizes, indices, values = z["sizes"], z["indices"], z["values"]
        member_ids, participant = z["member_ids"].astype(np.int64), int(z["participant"])
    if max_turns is not None:
        sizes = sizes[: v.integer("max_turns", max_turns, minimum=1)]
    return _Uploads(
        rdir=rdir,
        record=record,
        sizes=sizes,
        indices=indices,
        values=values,
        member_ids=member_ids,
        participant=participant,
    )


@dataclass(frozen=True)
class _ServerView:
    """What the server drew from the uploads, turn by turn (see :class:`UploadAttackSummary`)."""

    best_ssim_max: tuple[float, ...]
    distinct_recognised: tuple[int, ...]
    reconstructions: np.ndarray
    scores: np.ndarray


def _reconstruct_turns(
    model: Any, uploads: _Uploads, private: Any, candidates: Any, *, max_images: int, progress: bool
) -> _ServerView:
    """Reconstructs inputs from each turn's first-layer update and scores each candidate by its strongest turn."""
    from attacks.federated.uploads import first_layer_update, upload_membership_scores, upload_reconstruction_attack
    from dpaudit.progress import Progress

    sizes, record = uploads.sizes, uploads.record
    scores = np.zeros(candidates.shape[0])
    best, distinct, first = [], [], np.zeros((0, *record.input_shape), dtype=np.float32)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    with Progress(len(sizes), "server reconstructs from uploads", enabled=progress) as bar:
        for t in range(len(sizes)):
            idx, val = uploads.indices[offsets[t] : offsets[t + 1]], uploads.values[offsets[t] : offsets[t + 1]]
            rec = upload_reconstruction_attack(
                model,
                idx,
                val,
                input_shape=record.input_shape,
                private_images=private,
                private_ids=uploads.member_ids,
                max_images=max_images,
            )
            best.append(float(rec.best_ssim.max()) if rec.best_ssim.size else 0.0)
            distinct.append(rec.distinct_recognised)
            if t == 0:
                first = rec.reconstructions
            # A member may show in any turn: the server keeps the strongest evidence.
            scores = np.maximum(scores, upload_membership_scores(first_layer_update(model, idx, val), candidates))
            bar.update(1)
    return _ServerView(
        best_ssim_max=tuple(best), distinct_recognised=tuple(distinct), reconstructions=first, scores=scores
    )


def attack_uploads(
    *,
    target: str | os.PathLike[str],
    run: RunDir | None = None,
    max_turns: int | None = None,
    max_images: int = 16,
    seed: int = 0,
    data_root: str | None = None,
    progress: bool = True,
) -> UploadAttackSummary:
    """Attacks the uploads a DSSGD record kept for its observed participant.

    Args:
        target: the federation's global record directory (or its ``record.json``).
        run: where the membership result goes (``RUN_DIR/attacks/membership/<model id>/``);
            ``None`` keeps nothing.
        max_turns: attack at most the first this many turns (all when ``None``).
        max_images: reconstructions kept per turn.
        seed: seed of the non-member sample.
        data_root: the data root.
        progress: progress on stderr.

    Raises:
        ValueError: the target is not a DSSGD record with ``uploads.npz``, or its first layer is
            not fully connected.
    """
    import torch

    from dpaudit.data import load_dataset
    from dpaudit.locks import unit_lock
    from dpaudit.results import save_membership_result
    from dpaudit.seeding import numpy_rng
    from dpaudit.weights import load_model

    uploads = _load_uploads(target, max_turns)
    record, member_ids, participant, sizes = uploads.record, uploads.member_ids, uploads.participant, uploads.sizes
    max_images = v.integer("max_images", max_images, minimum=1)
    model = load_model(uploads.rdir)  # only its parameter layout is read
    bundle = load_dataset(record.dataset, data_root=data_root)
    data = bundle.all()
    # Non-members: as many as the partition, from the record's non-members (never another participant's data).
    rng = numpy_rng(v.integer("seed", seed, minimum=0), "dssgd-upload-non-members")
    pool = record.membership.non_members
    non_ids = np.sort(rng.permutation(pool)[: member_ids.size]) if pool.size > member_ids.size else pool
    private = data.subset(member_ids).features
    candidates = torch.cat([private, data.subset(non_ids).features])
    view = _reconstruct_turns(model, uploads, private, candidates, max_images=max_images, progress=progress)
    ids = np.concatenate([member_ids, non_ids])
    order = np.argsort(ids, kind="stable")
    membership = MembershipResult(
        attack=UPLOAD_ATTACK,
        model_id=record.model_id,
        sample_ids=ids[order],
        scores=view.scores[order],
        is_member=np.concatenate([np.ones(member_ids.size, bool), np.zeros(non_ids.size, bool)])[order],
        config={"participant": participant, "turns": len(sizes), "seed": seed},
        metadata={
            "dataset": record.dataset,
            "defense": "dssgd",
            "seat": "server",
            "members": f"participant {participant}'s partition",
        },
    )
    if run is not None:
        run.create(command="dpaudit dssgd uploads")
        with unit_lock(run.path, f"membership-{record.model_id}"):
            save_membership_result(membership, run.membership_dir(record.model_id))
    return UploadAttackSummary(
        model_id=record.model_id,
        participant=participant,
        turns=len(sizes),
        best_ssim_max=view.best_ssim_max,
        distinct_recognised=view.distinct_recognised,
        membership=membership,
        reconstructions=view.reconstructions,
    )


@dataclass(frozen=True)
class LeakageRow:
    """Reconstruction from single turns in one upload setting (means over the turns).

    Attributes:
        setting: a label, e.g. ``theta_u=0.1`` or ``dp eps=1``.
        upload_fraction: θ_u.
        dp_epsilon: ε per parameter of the DP variant (``None``: exact values).
        examples_per_turn: examples in the turn's one SGD step.
        turns: independent turns measured.
        best_ssim: mean over turns of the best SSIM any reconstruction reached.
        recognised_share: mean share of the turn's examples recognisably reconstructed.
        membership_auc: AUC of the upload membership score (turn's examples vs other inputs).
        example_reconstruction: one turn's best reconstruction, beside the input it matches.
    """

    setting: str
    upload_fraction: float
    dp_epsilon: float | None
    examples_per_turn: int
    turns: int
    best_ssim: float
    recognised_share: float
    membership_auc: float
    example_reconstruction: np.ndarray

    def summary(self) -> JsonObject:
        """JSON-ready scalars."""
        return {
            k: getattr(self, k)
            for k in (
                "setting",
                "upload_fraction",
                "dp_epsilon",
                "examples_per_turn",
                "turns",
                "best_ssim",
                "recognised_share",
                "membership_auc",
            )
        }


def _leakage_row(
    label: str,
    rule: Any,
    *,
    net: Any,
    data: Any,
    input_shape: tuple[int, ...],
    picks: Sequence[np.ndarray],
    deltas: Sequence[Any],
    examples_per_turn: int,
    seed: int,
) -> LeakageRow:
    """One upload setting of :func:`turn_leakage`: every turn's Δw uploaded by ``rule`` and attacked."""
    from sklearn.metrics import roc_auc_score

    from attacks.federated.uploads import first_layer_update, upload_membership_scores, upload_reconstruction_attack
    from dpaudit.seeding import torch_generator

    k = examples_per_turn
    best, share, aucs, example = [], [], [], np.zeros((0,), dtype=np.float32)
    for t, (pick, delta) in enumerate(zip(picks, deltas, strict=True)):
        idx, val = rule.choose(delta, generator=torch_generator(seed, "upload", label, t))
        private = data.features[pick[:k]]
        rec = upload_reconstruction_attack(
            net, idx, val, input_shape=input_shape, private_images=private, max_images=max(16, 2 * k)
        )
        best.append(float(rec.best_ssim.max()) if rec.best_ssim.size else 0.0)
        share.append(rec.distinct_recognised / k)
        s = upload_membership_scores(first_layer_update(net, idx, val), data.features[pick])
        aucs.append(float(roc_auc_score(np.arange(2 * k) < k, s)))  # the turn's k images against k others
        if t == 0 and rec.best_ssim.size:
            j = int(np.argmax(rec.best_ssim))
            example = np.stack([rec.reconstructions[j], private[int(rec.matched_ids[j])].numpy().astype(np.float32)])
    return LeakageRow(
        setting=label,
        upload_fraction=rule.upload_fraction,
        dp_epsilon=rule.dp_epsilon,
        examples_per_turn=k,
        turns=len(picks),
        best_ssim=float(np.mean(best)),
        recognised_share=float(np.mean(share)),
        membership_auc=float(np.mean(aucs)),
        example_reconstruction=example,
    )


def turn_leakage(
    *,
    dataset: str = "mnist",
    model: str = "dssgd-mlp",
    examples_per_turn: int = 1,
    upload_fractions: Sequence[float] = (1.0, 0.1, 0.01),
    dp_epsilons: Sequence[float] = (),
    dp_upload_fraction: float = 0.1,
    bound: float = 0.001,
    threshold: float = 0.0001,
    turns: int = 20,
    learning_rate: float = 0.05,
    standardize: bool = True,
    seed: int = 0,
    data_root: str | None = None,
) -> list[LeakageRow]:
    """What the server reconstructs from one turn, with and without sparsification and DP.

    A fresh model (the zoo's initialisation) takes one SGD step on ``examples_per_turn`` examples
    (the participant's whole turn), and uploads Δw as DSSGD would: all of it, the largest θ_u
    share (exact values), or through the DP variant's sparse-vector release. Each upload is
    attacked with :func:`attacks.federated.uploads.upload_reconstruction_attack` (private set: the turn's
    examples) and :func:`attacks.federated.uploads.upload_membership_scores` (the turn's examples against
    as many other inputs). Every setting sees the same turns. With ``standardize`` (the DSSGD
    default) the network standardises its inputs as a federation's does, and the server, which
    knows the shared model, reads its uploads back to raw inputs.

    Raises:
        ValueError: a count or fraction out of range (named).
    """
    import torch

    from defenses.dssgd.protocol import LocalTraining, assign_parameters, flatten_parameters, local_sgd
    from defenses.dssgd.uploads import UploadRule
    from dpaudit.data import load_dataset
    from dpaudit.models import build_model, input_statistics
    from dpaudit.seeding import numpy_rng, torch_generator

    k = v.integer("examples_per_turn", examples_per_turn, minimum=1)
    turns = v.integer("turns", turns, minimum=1)
    seed = v.integer("seed", seed, minimum=0)
    settings: list[tuple[str, UploadRule]] = [
        (f"theta_u={f:g}", UploadRule(upload_fraction=f)) for f in upload_fractions
    ]
    settings += [
        (
            f"dp eps={e:g} (theta_u={dp_upload_fraction:g})",
            UploadRule(upload_fraction=dp_upload_fraction, dp_epsilon=e, bound=bound, dp_threshold=threshold),
        )
        for e in dp_epsilons
    ]
    bundle = load_dataset(dataset, data_root=data_root)
    data = bundle.all()
    torch.manual_seed(seed)
    net = build_model(
        model,
        input_shape=bundle.input_shape,
        num_classes=bundle.num_classes,
        input_standardization=input_statistics(bundle.train.features) if standardize else None,
    )
    initial = flatten_parameters(net)
    training = LocalTraining(epochs=1, batch_size=k, learning_rate=learning_rate)
    rng = numpy_rng(seed, "dssgd-turn-leakage")
    picks = [rng.choice(len(data.labels), size=2 * k, replace=False) for _ in range(turns)]
    deltas = []
    for t, pick in enumerate(picks):
        assign_parameters(net, initial)
        local_sgd(
            net,
            data.features[pick[:k]],
            data.labels[pick[:k]],
            training=training,
            generator=torch_generator(seed, "turn", t),
        )
        deltas.append(flatten_parameters(net) - initial)
    return [
        _leakage_row(
            label,
            rule,
            net=net,
            data=data,
            input_shape=bundle.input_shape,
            picks=picks,
            deltas=deltas,
            examples_per_turn=k,
            seed=seed,
        )
        for label, rule in settings
    ]


def _turn_claim(rule: Any, *, num_parameters: int) -> Any:
    """The ε_UB of ONE turn uploaded by ``rule``: c uploads composed (``num_rounds=1``), none without DP."""
    from dpaudit.privacy.claims import NonPrivateClaim, PrivacyClaim
    from dpaudit.privacy.dssgd import dssgd_svt_claim

    claim: PrivacyClaim
    if rule.dp_epsilon is None:
        claim = NonPrivateClaim(description="DSSGD upload without DP")
    else:
        claim = dssgd_svt_claim(
            epsilon_per_parameter=rule.dp_epsilon,
            bound=rule.bound,
            threshold=rule.dp_threshold,
            split=rule.budget_split,
            uploads_per_round=rule.count(num_parameters),
            num_rounds=1,
            num_parameters=num_parameters,
        )
    return claim


def audit_upload(
    *,
    dataset: str = "mnist",
    model: str = "dssgd-mlp",
    partition_size: int = 100,
    upload_fraction: float = 0.001,
    dp_epsilon: float | None = 1.0,
    bound: float = 0.001,
    threshold: float = 0.0001,
    budget_split: str = "sum",
    batch_size: int = 32,
    learning_rate: float = 0.05,
    trials: int = 1000,
    delta: float = 1e-5,
    confidence: float = 0.95,
    seed: int = 0,
    data_root: str | None = None,
    progress: bool = True,
) -> Any:
    """The canary audit of one participant's DSSGD turn (:func:`attacks.federated.dssgd_audit.dssgd_upload_audit`).

    The participant holds ``partition_size`` examples; the canary
    (:func:`attacks.federated.dssgd_audit.pixel_canary`) lights the input positions that are zero across
    them, so only it moves the weights there. Each trial is one turn (one local epoch of plain
    SGD from the same downloaded model) with or without the canary, uploaded as DSSGD does. The
    claim set against ε_LB is ONE turn's: c uploads composed (``num_rounds=1``), and the result
    also carries the paper's per-parameter ε. The network sees raw inputs: the canary's pixels
    are zero in every other example only before standardisation, which would shift them.

    Returns:
        The :class:`dpaudit.results.audit.AuditResult`.
    """
    import torch

    from attacks.federated.dssgd_audit import canary_coordinates, dssgd_upload_audit, pixel_canary
    from defenses.dssgd.protocol import LocalTraining, assign_parameters, flatten_parameters, local_sgd
    from defenses.dssgd.uploads import UploadRule
    from dpaudit.data import load_dataset
    from dpaudit.models import build_model
    from dpaudit.seeding import numpy_rng, torch_generator

    n = v.integer("partition_size", partition_size, minimum=1)
    bundle = load_dataset(dataset, data_root=data_root)
    data = bundle.all()
    pick = numpy_rng(v.integer("seed", seed, minimum=0), "dssgd-audit-partition").choice(
        len(data.labels), size=n, replace=False
    )
    x, y = data.features[pick], data.labels[pick]
    torch.manual_seed(seed)
    net = build_model(model, input_shape=bundle.input_shape, num_classes=bundle.num_classes)
    initial = flatten_parameters(net)
    canary = pixel_canary(x, y, num_classes=bundle.num_classes)
    coords = canary_coordinates(net, canary)
    rule = UploadRule(
        upload_fraction=upload_fraction,
        dp_epsilon=dp_epsilon,
        bound=bound,
        dp_threshold=threshold,
        budget_split=budget_split,
    )
    training = LocalTraining(epochs=1, batch_size=batch_size, learning_rate=learning_rate)
    claim = _turn_claim(rule, num_parameters=initial.numel())

    def turn(*, include_canary: bool, seed: int) -> tuple[Any, Any]:
        xs, ys = (
            (torch.cat([x, canary.features[None]]), torch.cat([y, torch.tensor([canary.label])]))
            if include_canary
            else (x, y)
        )
        assign_parameters(net, initial)
        local_sgd(net, xs, ys, training=training, generator=torch_generator(seed, "batches"))
        return rule.choose(flatten_parameters(net) - initial, generator=torch_generator(seed, "upload"))

    return dssgd_upload_audit(
        turn_fn=turn,
        coordinates=coords,
        trials=trials,
        claim=claim,
        delta=delta,
        confidence=confidence,
        seed=seed,
        progress=progress,
        details={
            "dataset": dataset,
            "model": model,
            "partition_size": n,
            "upload_fraction": upload_fraction,
            "dp_epsilon": dp_epsilon,
            "bound": bound,
            "threshold": threshold,
        },
    )
