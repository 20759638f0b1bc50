"""Noisy aggregation of teacher votes: LNMax, GNMax and Confident-GNMax (numpy only).

A PATE query is answered from the vote histogram n(x) = (n_1, …, n_m), n_j = number of
teachers predicting class j (Papernot et al. 2017, "Semi-supervised Knowledge Transfer for
Deep Learning from Private Training Data", §2.1; Papernot et al. 2018, "Scalable Private
Learning with PATE", §4):

- **LNMax** (2017): argmax_j (n_j + Lap(b)), b = ``laplace_scale`` = 1/γ. Changing one
  teacher's vote moves two counts by one, so each answer is (2γ, 0)-DP — *not* (γ, 0);
  see ``docs/defenses/pate.md`` §6.
- **GNMax** (2018): argmax_j (n_j + N(0, σ²)).
- **Confident-GNMax** (2018, Algorithm 1): answer iff max_j n_j + N(0, σ1²) ≥ T, then GNMax
  with σ2; otherwise the query is not answered (⊥, label ``-1`` here).

Conventions:

- The vote matrix is indexed **by query**: row i is the histogram of query i, and its width
  is the number of classes given explicitly, never inferred from the labels seen (a public
  re-implementation got both wrong and reported a "very high ε", ``docs/defenses/pate.md`` §6).
- Ties in an argmax go to the lowest class index (``numpy.argmax``); with continuous noise
  they have probability zero, so the rule only matters for noiseless helpers like
  :func:`plurality`.
- Noise comes from the operating system's entropy when no seed is given (``seed=None``), as a
  private release needs: noise recomputable from a stored seed can be subtracted from the
  answers by anyone holding the record. A seed makes the aggregation reproducible — and then
  not private (:attr:`Aggregation.private` is false); it is drawn from
  :func:`dpaudit.seeding.numpy_rng` on a stream named after the aggregator and the step
  (``"pate", name, "argmax"`` / ``"threshold"``), independent of every other component's draws,
  including the other aggregators' under the same root seed. Noise is drawn for every query,
  answered or not, so the draw of query i does not depend on what happened to the others.
- Only whole vote counts are accepted: fractional (weighted) votes would change the
  sensitivity the privacy analysis assumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from dpaudit import _validate as v
from dpaudit.privacy.pate.votes import check_votes
from dpaudit.seeding import numpy_rng
from dpaudit.specs import PlainSpec
from dpaudit.store import JsonObject

__all__ = [
    "AGGREGATORS",
    "NOT_ANSWERED",
    "Aggregation",
    "AggregatorConfig",
    "ConfidentGNMaxConfig",
    "GNMaxConfig",
    "LNMaxConfig",
    "aggregate",
    "aggregator_config",
    "confident_gnmax",
    "gnmax",
    "lnmax",
    "plurality",
    "validate_votes",
    "vote_histogram",
]

NOT_ANSWERED = -1
"""The label of a query Confident-GNMax declined to answer (⊥)."""


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr


def vote_histogram(teacher_predictions: Any, *, num_classes: int) -> np.ndarray:
    """The vote matrix of a teacher ensemble: row i counts the teachers' labels for query i.

    Args:
        teacher_predictions: integer labels of shape ``(teachers, queries)``; entry (t, i) is
            teacher t's label for query i, in ``[0, num_classes)``. There is no "abstain"
            value: every teacher votes on every query.
        num_classes: m, the number of classes of the task (≥ 2). Given explicitly: a class
            no teacher predicted still gets its (zero) column.

    Returns:
        A read-only int64 array of shape ``(queries, num_classes)`` whose rows each sum to
        the number of teachers.

    Raises:
        TypeError: ``teacher_predictions`` does not hold integers, or ``num_classes`` is not
            an integer.
        ValueError: ``teacher_predictions`` is not 2-D or has no teacher, a label lies outside
            ``[0, num_classes)``, or ``num_classes`` < 2.
    """
    num_classes = v.integer("num_classes", num_classes, minimum=2)
    if hasattr(teacher_predictions, "detach") and hasattr(
        teacher_predictions, "numpy"
    ):  # a torch tensor, without importing torch
        teacher_predictions = teacher_predictions.detach().cpu().numpy()
    preds = np.asarray(teacher_predictions)
    if preds.ndim != 2:
        raise v.invalid(
            "teacher_predictions", f"teacher_predictions must be 2-D (teachers x queries), got shape {preds.shape}"
        )
    if preds.shape[0] < 1:
        raise v.invalid(
            "teacher_predictions", f"teacher_predictions must hold at least one teacher, got shape {preds.shape}"
        )
    if preds.size and preds.dtype.kind not in "iu":
        raise v.invalid_type(
            "teacher_predictions", f"teacher_predictions must hold integer labels, got dtype {preds.dtype}"
        )
    num_teachers, num_queries = preds.shape
    if preds.size:
        bad = (preds < 0) | (preds >= num_classes)
        if bad.any():
            t, i = (int(k) for k in np.argwhere(bad)[0])
            raise v.invalid(
                "teacher_predictions",
                f"teacher_predictions must hold labels in [0, {num_classes}) "
                f"(num_classes={num_classes}), got {int(preds[t, i])} from teacher {t} "
                f"on query {i}",
            )
    # One flat bincount over (query, label) pairs: the row is the query, the column the label.
    flat = np.arange(num_queries, dtype=np.int64)[None, :] * num_classes + preds.astype(np.int64, copy=False)
    counts = np.bincount(flat.ravel(), minlength=num_queries * num_classes)
    return _readonly(counts.astype(np.int64, copy=False).reshape(num_queries, num_classes))


def validate_votes(votes: Any, *, name: str = "votes") -> np.ndarray:
    """A vote matrix checked and returned as a read-only int64 ``(queries, classes)`` array.

    Floats are accepted when every entry is a whole number (an ``.npy`` written by another
    PATE implementation often is float); rows need not share a total.

    Args:
        votes: counts of shape ``(queries, classes)``, classes ≥ 2, every count ≥ 0.
        name: the argument name used in error messages.

    Raises:
        TypeError: ``votes`` is not numeric (or is boolean).
        ValueError: wrong shape, fewer than two classes, negative, non-finite or fractional
            counts.
    """
    # One validation for the aggregators and the analysis (dpaudit.privacy.pate); only the
    # analysis needs every row to count the same teachers.
    return check_votes(votes, name=name, equal_totals=False, allow_empty=True)


def plurality(votes: Any) -> np.ndarray:
    """The noiseless answer of each query: argmax_j n_j, ties to the lowest class index.

    Args:
        votes: a vote matrix (see :func:`validate_votes`).

    Returns:
        A read-only int64 array of shape ``(queries,)``.
    """
    arr = validate_votes(votes)
    return _readonly(np.argmax(arr, axis=1).astype(np.int64))


@dataclass(frozen=True, kw_only=True)
class LNMaxConfig(PlainSpec):
    """LNMax (Papernot et al. 2017): argmax_j (n_j + Lap(b)).

    Attributes:
        laplace_scale: b = 1/γ, the Laplace noise scale; each answer is (2/b, 0)-DP. The
            2017 MNIST/SVHN setting is b = 20 (γ = 0.05).
    """

    #: Stored as the aggregator's name, then its parameters (``to_dict`` / ``from_dict``:
    #: :class:`~dpaudit.specs.PlainSpec`).
    __spec_keys__: ClassVar[tuple[tuple[str, str], ...]] = (("aggregator", "name"),)
    name: ClassVar[str] = "lnmax"
    laplace_scale: float = 20.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "laplace_scale", v.positive("laplace_scale", self.laplace_scale))


@dataclass(frozen=True, kw_only=True)
class GNMaxConfig(PlainSpec):
    """GNMax (Papernot et al. 2018, §4.1): argmax_j (n_j + N(0, σ²)).

    Attributes:
        sigma: σ, the standard deviation of the Gaussian added to every count (2018 MNIST:
            40).
    """

    __spec_keys__: ClassVar[tuple[tuple[str, str], ...]] = (("aggregator", "name"),)
    name: ClassVar[str] = "gnmax"
    sigma: float = 40.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", v.positive("sigma", self.sigma))


@dataclass(frozen=True, kw_only=True)
class ConfidentGNMaxConfig(PlainSpec):
    """Confident-GNMax (Papernot et al. 2018, Algorithm 1).

    A query is answered iff max_j n_j + N(0, σ1²) ≥ T; an answered query gets the GNMax
    label with σ2; the others get ⊥ (:data:`NOT_ANSWERED`).

    Attributes:
        threshold: T, in votes (2018 MNIST: 200 of 250 teachers).
        threshold_sigma: σ1, the noise of the threshold check (2018 MNIST: 150).
        sigma: σ2, the noise of the GNMax step (2018 MNIST: 40).
    """

    __spec_keys__: ClassVar[tuple[tuple[str, str], ...]] = (("aggregator", "name"),)
    name: ClassVar[str] = "confident-gnmax"
    threshold: float = 200.0
    threshold_sigma: float = 150.0
    sigma: float = 40.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "threshold", v.non_negative("threshold", self.threshold))
        object.__setattr__(self, "threshold_sigma", v.positive("threshold_sigma", self.threshold_sigma))
        object.__setattr__(self, "sigma", v.positive("sigma", self.sigma))


AggregatorConfig = LNMaxConfig | GNMaxConfig | ConfidentGNMaxConfig

AGGREGATORS: dict[str, type[LNMaxConfig] | type[GNMaxConfig] | type[ConfidentGNMaxConfig]] = {
    LNMaxConfig.name: LNMaxConfig,
    GNMaxConfig.name: GNMaxConfig,
    ConfidentGNMaxConfig.name: ConfidentGNMaxConfig,
}
"""Aggregator name (``--aggregator`` value) → its config type."""


def aggregator_config(name: str, **params: Any) -> AggregatorConfig:
    """The config of aggregator ``name`` from its parameters (e.g. a stored ``to_dict()``).

    Args:
        name: one of :data:`AGGREGATORS`.
        **params: that config's fields; an ``aggregator`` key equal to ``name`` is ignored.

    Raises:
        ValueError: unknown name, unknown or bad parameter.
    """
    v.choice("aggregator", name, AGGREGATORS)
    params = dict(params)
    stored = params.pop("aggregator", name)
    if stored != name:
        raise v.invalid("aggregator", f"aggregator must match the parameters' aggregator {stored!r}, got {name!r}")
    cls = AGGREGATORS[name]
    fields = set(cls.__dataclass_fields__)
    unknown = sorted(set(params) - fields)
    if unknown:
        raise v.invalid(name, f"{name} takes parameters {sorted(fields)}, got unknown {unknown}")
    return cls(**params)


@dataclass(frozen=True, kw_only=True)
class Aggregation:
    """The outcome of a noisy aggregation, with every draw needed to re-check it.

    For answered queries ``labels == argmax(votes + noise, axis=1)``; for Confident-GNMax,
    ``answered == (votes.max(axis=1) + threshold_noise >= threshold)``.

    Attributes:
        aggregator: the aggregator's name (a key of :data:`AGGREGATORS`).
        config: the aggregator's configuration (its parameters; ``to_dict`` writes ``config.to_dict()``).
        seed: the root seed the noise streams were derived from; ``None`` when the noise came
            from the operating system's entropy (the only private case).
        votes: int64 ``(queries, classes)``, the vote matrix aggregated.
        labels: int64 ``(queries,)``; the released label, :data:`NOT_ANSWERED` (−1) for ⊥.
        answered: bool ``(queries,)``; all true for LNMax and GNMax.
        noise: float64 ``(queries, classes)``, the noise added to the counts in the argmax
            step (drawn for unanswered queries too, and unused there).
        threshold_noise: float64 ``(queries,)``, the noise of the threshold check;
            ``None`` for aggregators without one.
    """

    aggregator: str
    config: AggregatorConfig
    seed: int | None
    votes: np.ndarray
    labels: np.ndarray
    answered: np.ndarray
    noise: np.ndarray
    threshold_noise: np.ndarray | None

    @property
    def reproducible(self) -> bool:
        """Whether the noise was drawn from a seed (then anyone with the seed can remove it)."""
        return self.seed is not None

    @property
    def private(self) -> bool:
        """Whether the answers may be published as differentially private: noise from the OS's entropy."""
        return self.seed is None

    @property
    def noise_source(self) -> str:
        """One phrase for records and reports: where the noise came from and what that means."""
        return (
            "operating-system entropy (private)"
            if self.seed is None
            else f"seed {self.seed}: reproducible, not private"
        )

    @property
    def num_queries(self) -> int:
        """Queries asked."""
        return int(self.labels.shape[0])

    @property
    def num_answered(self) -> int:
        """Queries answered (not ⊥)."""
        return int(np.count_nonzero(self.answered))

    def to_dict(self) -> JsonObject:
        """JSON-able summary: aggregator, parameters, seed (``None``: entropy), noise source, counts and the released
        labels.

        The vote matrix and the noise are left out (save them as ``.npy`` beside it).
        """
        return {
            "aggregator": self.aggregator,
            "config": self.config.to_dict(),
            "seed": self.seed,
            "noise_source": self.noise_source,
            "num_queries": self.num_queries,
            "num_answered": self.num_answered,
            "labels": self.labels.tolist(),
        }


def _noisy_argmax(votes: np.ndarray, noise: np.ndarray) -> np.ndarray:
    # np.argmax returns the first maximum: ties go to the lowest class index.
    return np.argmax(votes + noise, axis=1).astype(np.int64)


def lnmax(votes: Any, *, laplace_scale: float, seed: int | None) -> Aggregation:
    """LNMax (Papernot et al. 2017, §2.1): argmax_j (n_j + Lap(b)) for every query.

    Args:
        votes: vote matrix ``(queries, classes)`` (see :func:`validate_votes`).
        laplace_scale: b = 1/γ > 0.
        seed: root seed, the noise on stream ``("pate", "lnmax", "argmax")`` (reproducible, not
            private); ``None``: the operating system's entropy.

    Returns:
        An :class:`Aggregation` with every query answered.
    """
    return aggregate(votes, LNMaxConfig(laplace_scale=laplace_scale), seed=seed)


def gnmax(votes: Any, *, sigma: float, seed: int | None) -> Aggregation:
    """GNMax (Papernot et al. 2018, §4.1): argmax_j (n_j + N(0, σ²)) for every query.

    Args:
        votes: vote matrix ``(queries, classes)`` (see :func:`validate_votes`).
        sigma: σ > 0.
        seed: root seed, the noise on stream ``("pate", "gnmax", "argmax")`` (reproducible, not
            private); ``None``: the operating system's entropy.

    Returns:
        An :class:`Aggregation` with every query answered.
    """
    return aggregate(votes, GNMaxConfig(sigma=sigma), seed=seed)


def confident_gnmax(
    votes: Any, *, threshold: float, threshold_sigma: float, sigma: float, seed: int | None
) -> Aggregation:
    """Confident-GNMax (Papernot et al. 2018, Algorithm 1).

    Args:
        votes: vote matrix ``(queries, classes)`` (see :func:`validate_votes`).
        threshold: T ≥ 0, in votes.
        threshold_sigma: σ1 > 0, noise of the threshold check.
        sigma: σ2 > 0, noise of the GNMax step.
        seed: root seed; streams ``("pate", "confident-gnmax", "threshold")`` and
            ``("pate", "confident-gnmax", "argmax")`` (reproducible, not private); ``None``: the
            operating system's entropy.

    Returns:
        An :class:`Aggregation`; unanswered queries have label :data:`NOT_ANSWERED`.
    """
    return aggregate(
        votes, ConfidentGNMaxConfig(threshold=threshold, threshold_sigma=threshold_sigma, sigma=sigma), seed=seed
    )


def aggregate(votes: Any, config: AggregatorConfig, *, seed: int | None) -> Aggregation:
    """Answers every query of ``votes`` with the aggregator ``config`` describes.

    Args:
        votes: vote matrix ``(queries, classes)`` (see :func:`validate_votes`).
        config: an :class:`LNMaxConfig`, :class:`GNMaxConfig` or
            :class:`ConfidentGNMaxConfig`.
        seed: root seed of the noise streams (see the module docstring): reproducible, not
            private; ``None``: noise from the operating system's entropy.

    Returns:
        The :class:`Aggregation`, with the noise drawn so that it can be re-checked.

    Raises:
        TypeError: ``config`` is not an aggregator config, ``seed`` neither ``None`` nor an integer.
        ValueError: a bad vote matrix or a negative seed.
    """
    if not isinstance(config, (LNMaxConfig, GNMaxConfig, ConfidentGNMaxConfig)):
        raise v.invalid_type(
            "config",
            f"config must be one of {', '.join(c.__name__ for c in AGGREGATORS.values())}, got {type(config).__name__}",
        )
    if seed is not None:
        seed = v.integer("seed", seed, minimum=0)
    arr = validate_votes(votes)
    shape = arr.shape
    if seed is None:
        # Fresh OS entropy (SeedSequence() reads it), split into the two steps' independent streams.
        argmax_seq, threshold_seq = np.random.SeedSequence().spawn(2)
        argmax_rng, threshold_rng = np.random.default_rng(argmax_seq), np.random.default_rng(threshold_seq)
    else:
        argmax_rng, threshold_rng = (
            numpy_rng(seed, "pate", config.name, "argmax"),
            numpy_rng(seed, "pate", config.name, "threshold"),
        )
    threshold_noise: np.ndarray | None = None
    if isinstance(config, LNMaxConfig):
        noise = argmax_rng.laplace(0.0, config.laplace_scale, size=shape)
        answered = np.ones(shape[0], dtype=bool)
    elif isinstance(config, GNMaxConfig):
        noise = argmax_rng.normal(0.0, config.sigma, size=shape)
        answered = np.ones(shape[0], dtype=bool)
    else:
        drawn = np.asarray(threshold_rng.normal(0.0, config.threshold_sigma, size=(shape[0],)), dtype=np.float64)
        noise = argmax_rng.normal(0.0, config.sigma, size=shape)
        answered = arr.max(axis=1) + drawn >= config.threshold
        threshold_noise = _readonly(drawn)
    labels = np.where(answered, _noisy_argmax(arr, noise), NOT_ANSWERED).astype(np.int64)
    return Aggregation(
        aggregator=config.name,
        config=config,
        seed=seed,
        votes=arr,
        labels=_readonly(labels),
        answered=_readonly(answered),
        noise=_readonly(noise),
        threshold_noise=threshold_noise,
    )
