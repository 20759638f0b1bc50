"""PATE runs: the analysis of a vote matrix, the audit game of an aggregator, the membership attack on a student's
aggregator.

``dpaudit pate analyze`` (:func:`analyze_vote_file`) reads a vote matrix from any implementation
(refused from its ``.npy`` header above the documented limits of
:mod:`dpaudit.privacy.pate.votes`, before it is loaded), checks it, and analyses it with
:func:`dpaudit.privacy.pate.analysis.analyze_votes`; with a :class:`ReleaseSpec` it publishes the
data-dependent ε through :func:`dpaudit.privacy.pate.smooth_sensitivity.release_epsilon` and keeps
no private value. Its result, :class:`VoteAnalysis`, is what the verb prints.

``dpaudit pate audit`` (:func:`audit_aggregator`) plays :func:`attacks.audit.pate.pate_audit`
against the real aggregator of :mod:`defenses.pate.aggregators` or a planted bug of
:mod:`defenses.pate.planted`.

``dpaudit pate attack`` (:func:`attack_aggregator`) loads a PATE student's record, the teachers its
``private/pate.json`` names (from the run's teacher cache), asks every teacher for its label on the
student's members (the private set) and non-members, answers each candidate through the record's
own aggregator and scores membership with :func:`attacks.membership.pate.aggregator_membership`.
The result is stored with the student's other membership results, so its report shows the
aggregator beside the student.

Torch-free but for :func:`attack_aggregator`, which loads the teachers when it runs.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attacks.audit.pate import pate_audit
from defenses import DEFENSES
from defenses.pate.aggregators import aggregate, aggregator_config
from defenses.pate.planted import planted_aggregator
from dpaudit import _validate as v
from dpaudit.app.records import verify_record
from dpaudit.app.runs.membership_shadows import defense_config
from dpaudit.limits import check_npy, npy_header
from dpaudit.locks import unit_lock
from dpaudit.privacy.pate import votes as pate_votes
from dpaudit.privacy.pate.analysis import PateEpsilon, analyze_votes
from dpaudit.privacy.pate.smooth_sensitivity import SmoothSensitivityRelease, release_epsilon
from dpaudit.progress import Progress
from dpaudit.results import MembershipResult, save_membership_result
from dpaudit.results.audit import AuditResult
from dpaudit.results.audit_details import PateAuditDetails
from dpaudit.results.record import TrainedModel, load_record, resolve_record_dir
from dpaudit.store import JsonObject, RunDir, read_json, thaw

__all__ = [
    "handles_record",
    "ReleaseSpec",
    "AnalyzeSpec",
    "VoteAnalysis",
    "analyze_vote_file",
    "AggregatorAuditSpec",
    "AggregatorAudit",
    "audit_aggregator",
    "load_teacher_dirs",
    "attack_aggregator",
]


# ----------------------------------------------------------------------------- pate analyze
@dataclass(frozen=True, kw_only=True)
class ReleaseSpec:
    """The smooth-sensitivity release of a data-dependent ε (Papernot et al. 2018, §4.2).

    Attributes:
        beta: β of the smooth sensitivity.
        sigma_ss: σ_ss, the release noise in units of SS_β.
        order: the RDP order, fixed without the votes (``None``: chosen from public parameters).
        seed: the release noise's seed (``None``: the operating system's entropy, as a private
            release needs; a seed makes it reproducible and not private).
    """

    beta: float
    sigma_ss: float
    order: float | None = None
    seed: int | None = None


@dataclass(frozen=True, kw_only=True)
class AnalyzeSpec:
    """What ``dpaudit pate analyze`` analyses: a vote matrix file, its aggregator and its noise.

    Attributes:
        votes: path of the ``.npy`` vote matrix (queries × classes counts).
        aggregator: ``"gnmax"``, ``"confident-gnmax"`` or ``"lnmax"``.
        delta: the δ.
        sigma: GNMax's σ (σ2 of Confident-GNMax).
        threshold: Confident-GNMax's T.
        threshold_sigma: Confident-GNMax's σ1.
        laplace_scale: LNMax's b.
        answered: path of the boolean ``.npy`` of the answered queries (Confident-GNMax).
        release: publish the data-dependent ε by smooth sensitivity instead of showing it.
        i_know: accept a matrix above the documented limits.
    """

    votes: str
    aggregator: str
    delta: float
    sigma: float | None = None
    threshold: float | None = None
    threshold_sigma: float | None = None
    laplace_scale: float | None = None
    answered: str | None = None
    release: ReleaseSpec | None = None
    i_know: bool = False


@dataclass(frozen=True, kw_only=True)
class VoteAnalysis:
    """What the analysis of a vote matrix may show: a release holds no private value.

    Attributes:
        aggregator: the aggregator analysed.
        num_queries: rows of the matrix.
        num_teachers: the teachers (every row's total).
        num_classes: columns of the matrix.
        delta: the δ.
        num_answered: the answered queries (public: the mechanism's output), when given.
        data_independent: the bound that ignores the votes (public).
        data_dependent: the bound from the votes (private), ``None`` when released.
        release: the smooth-sensitivity release, ``None`` for the private analysis.
    """

    aggregator: str
    num_queries: int
    num_teachers: int
    num_classes: int
    delta: float
    num_answered: int | None
    data_independent: PateEpsilon
    data_dependent: PateEpsilon | None
    release: SmoothSensitivityRelease | None

    def to_dict(self) -> JsonObject:
        """The ``--json`` object: public values first, then the private analysis or the release."""
        ind = self.data_independent
        out: JsonObject = {
            "aggregator": self.aggregator,
            "num_queries": self.num_queries,
            "num_teachers": self.num_teachers,
            "num_classes": self.num_classes,
            "delta": self.delta,
            "epsilon_data_independent": ind.epsilon,
            "order_data_independent": ind.order,
        }
        if self.num_answered is not None:
            out["num_answered"] = self.num_answered
        if self.release is not None:
            release: JsonObject = {f.name: getattr(self.release, f.name) for f in dataclasses.fields(self.release)}
            return {
                **out,
                "data_dependent": True,
                "sanitised": True,
                "publishable": not self.release.reproducible,
                "release": release,
            }
        dep = self.data_dependent
        assert dep is not None  # an analysis without a release keeps its data-dependent bound
        key = f"epsilon_data_dependent_{dep.cost}"
        out.update({key: dep.epsilon, f"{key}_improved": dep.epsilon_improved, "order": dep.order, "cost": dep.cost})
        out.update({"data_dependent": True, "sanitised": False, "publishable": False})
        if self.aggregator == "confident-gnmax":
            out["expected_answered"] = dep.expected_answered
        return out


def _gb(num_bytes: float) -> str:
    return f"{num_bytes / 1e9:.1f} GB" if num_bytes >= 1e9 else f"{num_bytes / 1e6:.0f} MB"


def check_votes_size(path: str, *, release: bool) -> None:
    """Refuses a vote matrix above the documented limits of :mod:`dpaudit.privacy.pate.votes`, from its header, before
    loading it."""
    try:
        shape, _ = npy_header("--votes", path)
    except (OSError, ValueError):
        return  # unreadable: loading it says why
    if len(shape) != 2:
        return
    queries, classes = shape
    if release and queries > pate_votes.MAX_RELEASE_QUERIES:
        raise v.invalid(
            "--votes",
            f"--votes={path!r} holds {queries:,} queries, above the limit "
            f"{pate_votes.MAX_RELEASE_QUERIES:,} of the smooth-sensitivity release "
            "(each query's local sensitivity is walked over the teachers, 10-20 ms "
            "each); pass --i-know to run it anyway",
        )
    if queries > pate_votes.MAX_QUERIES:
        raise v.invalid(
            "--votes",
            f"--votes={path!r} holds {queries:,} queries, above the limit "
            f"{pate_votes.MAX_QUERIES:,} (each query's data-dependent RDP is "
            "evaluated in turn, about 1 ms each); pass --i-know to run it anyway",
        )
    if queries * classes > pate_votes.MAX_VOTE_CELLS:
        cells = queries * classes
        raise v.invalid(
            "--votes",
            f"--votes={path!r} holds {queries:,} x {classes:,} = {cells:,} counts, "
            f"above the limit {pate_votes.MAX_VOTE_CELLS:,} "
            f"(the analysis holds about {pate_votes.BYTES_PER_CELL} bytes per count: "
            f"{_gb(cells * pate_votes.BYTES_PER_CELL)}); pass --i-know to run it "
            "anyway",
        )


def load_array(flag: str, path: str, *, ndim: int) -> np.ndarray:
    """The array of a ``.npy`` file, refused from its header (before any loading) unless it has ``ndim`` dimensions."""
    check_npy(flag, path, ndim=ndim)
    try:
        return np.asarray(np.load(Path(path), allow_pickle=False))
    except ValueError as exc:  # an object array (a pickle) or a malformed header
        raise v.invalid(flag, f"{flag}={path!r} is not a plain .npy array ({str(exc).splitlines()[0]})") from None
    except (OSError, EOFError) as exc:
        raise v.invalid(flag, f"{flag}={path!r} cannot be read as .npy ({exc})") from None


class _LazyProgress:
    """Progress on stderr for an analysis of many queries, started at the first query done (so an
    error found before the work stays the one line on stderr)."""

    def __init__(self, queries: int, *, release: bool) -> None:
        self.queries = queries
        every = pate_votes.PROGRESS_QUERIES
        self.enabled = queries >= (every // 10 if release else every)
        self.bar: Progress | None = None

    def update(self, n: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            self.bar = Progress(self.queries, "pate analyze: queries")
        self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def analyze_vote_file(spec: AnalyzeSpec) -> VoteAnalysis:
    """Loads, checks and analyses the vote matrix of ``spec`` (progress on stderr for a long one).

    Raises:
        InvalidArgument: a matrix above the limits (without ``i_know``), not a plain 2-D ``.npy``
            of integer counts with equal row totals, an ``answered`` mask of another shape or
            type, or release parameters the release refuses; each names the flag it is about.
    """
    if not spec.i_know:
        check_votes_size(spec.votes, release=spec.release is not None)
    try:
        votes = pate_votes.check_votes(load_array("--votes", spec.votes, ndim=2), name="--votes")
    except (ValueError, TypeError) as exc:
        if isinstance(exc, v.InvalidArgument) and exc.argument == "--votes":
            raise
        raise v.invalid("--votes", str(exc)) from None
    answered = None
    if spec.answered is not None:
        answered = load_array("--answered", spec.answered, ndim=1)
        if answered.dtype != bool or answered.shape != (votes.shape[0],):
            raise v.invalid(
                "--answered",
                f"--answered must be a boolean .npy of shape ({votes.shape[0]},) (one "
                f"entry per query), got {answered.dtype} {answered.shape}",
            )
    bar = _LazyProgress(int(votes.shape[0]), release=spec.release is not None)
    try:
        # A release shows the progress of its own (longer) walk over the queries, not the analysis's.
        analysis = analyze_votes(
            votes,
            aggregator=spec.aggregator,
            delta=spec.delta,
            sigma=spec.sigma,
            threshold=spec.threshold,
            threshold_sigma=spec.threshold_sigma,
            laplace_scale=spec.laplace_scale,
            answered=answered,
            progress=None if spec.release is not None else bar.update,
        )
        release = None if spec.release is None else _release(spec, votes, answered, bar)
    finally:
        bar.close()
    return VoteAnalysis(
        aggregator=spec.aggregator,
        num_queries=int(votes.shape[0]),
        num_teachers=int(votes[0].sum()),
        num_classes=int(votes.shape[1]),
        delta=spec.delta,
        num_answered=None if answered is None else int(answered.sum()),
        data_independent=analysis.data_independent,
        data_dependent=analysis.data_dependent if release is None else None,
        release=release,
    )


def _release(
    spec: AnalyzeSpec, votes: np.ndarray, answered: np.ndarray | None, bar: _LazyProgress
) -> SmoothSensitivityRelease:
    """The smooth-sensitivity release of ``spec``'s data-dependent ε (GNMax or Confident-GNMax)."""
    smooth = spec.release
    assert smooth is not None and spec.sigma is not None  # the caller releases only when asked; both aggregators have σ
    try:
        return release_epsilon(
            votes,
            aggregator=spec.aggregator,
            sigma=spec.sigma,
            delta=spec.delta,
            beta=smooth.beta,
            sigma_ss=smooth.sigma_ss,
            threshold=spec.threshold,
            threshold_sigma=spec.threshold_sigma,
            answered=answered,
            seed=smooth.seed,
            order=smooth.order,
            progress=bar.update,
        )
    except ValueError as exc:  # the library names beta / sigma_ss / order; the user typed these flags
        if isinstance(exc, v.InvalidArgument) and exc.argument in ("sigma", "threshold_sigma"):
            raise  # about --sigma / --threshold-sigma themselves (too small for a release): the CLI names them
        raise v.invalid(
            "--smooth-sensitivity-beta",
            f"--smooth-sensitivity-beta={smooth.beta:g} --smooth-sensitivity-sigma={smooth.sigma_ss:g}: {exc}",
        ) from None


# ----------------------------------------------------------------------------- pate audit
@dataclass(frozen=True, kw_only=True)
class AggregatorAuditSpec:
    """What ``dpaudit pate audit`` plays: an aggregator, its noise, the game's size.

    Attributes:
        aggregator: ``"gnmax"``, ``"confident-gnmax"`` or ``"lnmax"``.
        parameters: the aggregator's noise parameters, by its config's field names.
        planted_bug: a bug of :data:`defenses.pate.planted.PLANTED_PATE_BUGS` (``"none"``: the real aggregator).
        num_teachers: N.
        num_classes: K.
        trials: answers drawn on each histogram.
        delta: δ of both bounds.
        confidence: confidence of ε_LB.
        seed: root seed of the noise.
    """

    aggregator: str
    parameters: tuple[tuple[str, float], ...]
    planted_bug: str = "none"
    num_teachers: int = 250
    num_classes: int = 10
    trials: int = 100_000
    delta: float = 1e-5
    confidence: float = 0.95
    seed: int = 0


@dataclass(frozen=True, kw_only=True)
class AggregatorAudit:
    """The audit of an aggregator: what was played and the audit result.

    Attributes:
        spec: the game played.
        result: ε_LB against the per-query ε_UB.
    """

    spec: AggregatorAuditSpec
    result: AuditResult

    @property
    def details(self) -> PateAuditDetails:
        """The game's facts (the two vote histograms, the event, the tests tried), typed."""
        details = self.result.details
        if not isinstance(details, PateAuditDetails):
            raise TypeError(f"the aggregator audit must return PateAuditDetails, got {type(details).__name__}")
        return details

    def to_dict(self) -> dict[str, object]:
        """The ``--json`` object: the aggregator, its parameters, the bug, the trials, then the result."""
        spec = self.spec
        return {
            "aggregator": spec.aggregator,
            "parameters": dict(spec.parameters),
            "planted_bug": spec.planted_bug,
            "trials": spec.trials,
            **self.result.to_dict(),
        }


def audit_aggregator(spec: AggregatorAuditSpec) -> AggregatorAudit:
    """Plays the neighbouring-votes game of :func:`attacks.audit.pate.pate_audit` against the real or planted
    aggregator."""
    config = aggregator_config(spec.aggregator, **dict(spec.parameters))
    result = pate_audit(
        planted_aggregator(spec.planted_bug, aggregator=spec.aggregator),
        config,
        num_teachers=spec.num_teachers,
        num_classes=spec.num_classes,
        trials=spec.trials,
        delta=spec.delta,
        confidence=spec.confidence,
        seed=spec.seed,
        details={"planted_bug": spec.planted_bug},
    )
    return AggregatorAudit(spec=spec, result=result)


# ----------------------------------------------------------------------------- pate attack
def load_teacher_dirs(record_dir: Path) -> list[Path]:
    """The record directories of a PATE student's teachers, in teacher order.

    Raises:
        ValueError: no ``private/pate.json`` (nor, for older records, ``pate.json``) beside the
            record, or a teacher missing from the cache.
    """
    # The teachers' ids and partitions are private (private/pate.json, the cache path relative
    # to it); records written before that split keep them in the public pate.json.
    meta_path = record_dir / "private" / "pate.json"
    if not meta_path.is_file():
        meta_path = record_dir / "pate.json"
    if not meta_path.is_file():
        raise v.invalid(
            "target",
            f"target: {str(record_dir)!r} has no pate.json (train it with `dpaudit "
            "train --defense pate --out RUN_DIR`)",
        )
    meta = read_json(meta_path)
    try:
        cache = (meta_path.parent / meta["teachers"]["cache"]).resolve()
        ids = list(meta["teachers"]["teacher_ids"])
    except (KeyError, TypeError) as exc:
        raise v.invalid("target", f"target: {str(meta_path)!r} does not list the teachers ({exc})") from None
    dirs = [cache / t for t in ids]
    missing = [str(d) for d in dirs if not (d / "record.json").is_file()]
    if missing:
        raise v.invalid(
            "target",
            f"target: {len(missing)} of the {len(ids)} teachers are missing from "
            f"{str(cache)!r} (first: {missing[0]!r}); retrain with the same --out",
        )
    return dirs


def handles_record(record: TrainedModel) -> bool:
    """Whether ``record``'s defense names this module as the run of its own verb (its ``DefenseSpec.run_module``)."""
    spec = DEFENSES.get(record.defense)
    return spec is not None and spec.run_module == __name__


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
    # What loads the teachers (and torch) is imported here, so that the analysis and the audit stay torch-free.
    from attacks.membership import query_ids
    from attacks.membership.pate import aggregator_membership
    from dpaudit.data import load_dataset
    from dpaudit.training import predict_logits, resolve_device
    from dpaudit.weights import load_model

    try:
        rdir = resolve_record_dir(target)
    except ValueError as exc:
        raise v.invalid("target", f"target: {exc}") from None
    record = verify_record(load_record(rdir), rdir)  # a record contradicting itself: one line, before any work
    if not handles_record(record):
        raise v.invalid(
            "target",
            f"target: {str(rdir)!r} is a {record.defense!r} record; the aggregator "
            "attack needs a PATE student (--defense pate)",
        )
    teacher_dirs = load_teacher_dirs(rdir)
    config = defense_config(DEFENSES[record.defense].config_type, thaw(record.config))
    seed = v.integer("seed", seed, minimum=0)
    ids, member = query_ids(record, max_per_side=num_samples, seed=seed)
    bundle = load_dataset(record.dataset, data_root=data_root)
    if not config.resolved():
        # Derived from public sizes only, exactly as the training derived them.
        from defenses.pate.defense import public_split
        from defenses.pate.plan import plan_pate

        num_public = len(public_split(bundle, config.public_fraction)[0])
        config = plan_pate(
            config, num_members=len(record.membership.members), num_public=num_public, num_classes=bundle.num_classes
        ).config
    aggregator = config.aggregator_config()
    data = bundle.all().subset(ids)
    dev = resolve_device(device)
    preds = np.empty((len(teacher_dirs), len(ids)), dtype=np.int64)
    with Progress(len(teacher_dirs), "PATE teachers label the candidates", enabled=progress) as bar:
        for t, tdir in enumerate(teacher_dirs):
            model = load_model(tdir, device=dev)
            preds[t] = predict_logits(model, data.features, device=dev).argmax(1).numpy()
            bar.update(1)
    meta: JsonObject = {
        "dataset": record.dataset,
        "defense": "pate",
        "fingerprints": {"weights_sha256": record.weights_sha256},
    }
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
