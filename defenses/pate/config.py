"""PATE's hyperparameters: :class:`PATEConfig`, the options ``dpaudit train --defense pate`` takes.

A module of its own, as DP-SGD's and DSSGD's configs are: what a run may ask is one concept,
the pipeline that spends it (:mod:`defenses.pate.defense`) another. Values left unset are
resolved for each run by :func:`defenses.pate.plan.plan_pate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from defenses.nonprivate import NonPrivateConfig
from defenses.pate.aggregators import AGGREGATORS, aggregator_config
from defenses.pate.plan import DEFAULT_TEACHER_EPOCHS
from defenses.pate.student import StudentConfig
from dpaudit import _validate as v
from dpaudit.options import SizeLimit, option, option_specs
from dpaudit.training import EPOCH_LIMIT

__all__ = ["PATEConfig"]

_TEACHER_LIMIT = SizeLimit(10_000, "each teacher is one training")
_QUERY_LIMIT = SizeLimit(1_000_000, "each query is one forward pass of every teacher")


_AGGREGATOR_FIELDS = {
    "lnmax": ("laplace_scale",),
    "gnmax": ("sigma",),
    "confident-gnmax": ("threshold", "threshold_sigma", "sigma"),
}


@dataclass(frozen=True, kw_only=True)
class PATEConfig:
    """Hyperparameters of PATE (teachers, aggregator, privacy analysis and student).

    Values left ``None`` are derived for each run from public facts (members, public pool,
    classes, budget) by :func:`defenses.pate.plan.plan_pate`, which says on stderr what it chose:
    on MNIST's 57,000 members they are the 2018 setting (Papernot et al. 2018, §5: 250 teachers,
    Confident-GNMax with T = 200, σ1 = 150, σ2 = 40, 640 queries, δ = 1e-5). The record keeps
    the config as asked (its id); the values used are in its metrics and claim.

    Attributes:
        teachers: n, the number of teachers (disjoint partitions of the private members).
        aggregator: ``lnmax``, ``gnmax`` or ``confident-gnmax``; ``None``: ``gnmax`` with a budget
            (planned for every query, it gains nothing from the threshold), else ``confident-gnmax``.
        sigma: GNMax's noise std on the counts (σ2 of Confident-GNMax).
        threshold: Confident-GNMax's T (in votes).
        threshold_sigma: Confident-GNMax's σ1.
        laplace_scale: LNMax's Laplace scale b (each answer (2/b, 0)-DP).
        queries: public examples the student asks the aggregator to label.
        target_epsilon: privacy budget ε at ``delta``, met by the data-independent bound with every
            query charged as answered (the rule of :mod:`defenses.pate.plan`, as DP-SGD's).
        delta: δ of the budget and of the reported ε.
        analysis: ``data-dependent`` (the papers' bound; ε then depends on the votes) or
            ``data-independent``; ``None``: data-independent with a budget, else data-dependent.
        smooth_sensitivity_beta, smooth_sensitivity_sigma: publish a noisy estimate of the
            data-dependent ε with Gaussian noise scaled to its β-smooth sensitivity (2018, §4.2,
            Theorem 23); GNMax aggregators only. The noise comes from the operating system's
            entropy, not from the seed (the one step of a run that is not reproducible: a seeded
            release is not private), at an order fixed from public parameters.
        public_fraction: share of the test split (first by id) that is public query data.
        epochs, batch_size, learning_rate, momentum, weight_decay: every teacher's SGD (``epochs``
            ``None``: 20, or enough for 200 steps on a small partition).
        teacher_eval_examples: test examples each teacher record is evaluated on.
        student_epochs, student_batch_size, student_learning_rate, unlabeled_weight,
            unlabeled_ratio, pseudo_label_confidence: the student's training (``None``: the defaults of
            :class:`defenses.pate.student.StudentConfig`).
        semi_supervised: the student also learns from the public data that got no label.
        aggregator_seed: seed of the aggregator's noise; ``None`` (default): the operating
            system's entropy. A seeded run is reproducible and not private (its record says so):
            anyone with the seed can recompute the noise and subtract it from the answers.
    """

    teachers: int | None = option(
        None,
        kind=int,
        help="number of teachers (disjoint partitions of the private members) "
        "(default: one per 20 members, at most 250)",
        metavar="N",
        check=v.positive,
        limit=_TEACHER_LIMIT,
    )
    aggregator: str | None = option(
        None,
        choices=tuple(AGGREGATORS),
        help="noisy aggregation of the teachers' votes (default: confident-gnmax; "
        "gnmax with --target-epsilon, whose plan pays for every query anyway)",
    )
    sigma: float | None = option(
        None,
        help="GNMax noise std on the vote counts (sigma_2 of confident-gnmax) "
        "(default 0.16 x teachers; with --target-epsilon and --queries: "
        "calibrated); with --target-epsilon: the queries the budget allows",
        metavar="SIGMA",
        check=v.positive,
    )
    threshold: float | None = option(
        None,
        help="confident-gnmax: answer only when the top count plus N(0, "
        "threshold_sigma^2) reaches T (default 0.8 x teachers)",
        metavar="T",
        check=v.non_negative,
    )
    threshold_sigma: float | None = option(
        None,
        help="confident-gnmax: noise std of the threshold check (sigma_1) (default 3.75 x sigma)",
        metavar="SIGMA1",
        check=v.positive,
    )
    laplace_scale: float = option(
        20.0,
        help="lnmax: Laplace noise scale b on the vote counts (each answer (2/b, 0)-DP)",
        metavar="B",
        check=v.positive,
    )
    queries: int | None = option(
        None,
        kind=int,
        help="public examples the student asks the aggregator to label (default: at "
        "most 640 of the public pool; with --target-epsilon: as many as the "
        "budget allows at sigma = 0.16 x teachers)",
        metavar="Q",
        check=v.positive,
        limit=_QUERY_LIMIT,
    )
    target_epsilon: float | None = option(
        None,
        help="privacy budget epsilon at --delta, met by the data-independent bound "
        "whatever the votes: calibrates sigma for --queries, or with --sigma "
        "the number of queries (says which before training)",
        metavar="EPS",
        check=v.positive,
    )
    delta: float = option(1e-5, help="delta of the budget and of the reported epsilon", check=v.open_unit)
    analysis: str | None = option(
        None,
        choices=("data-dependent", "data-independent"),
        help="which PATE bound the record claims (default: data-independent with "
        "--target-epsilon, else data-dependent as the papers report)",
    )
    smooth_sensitivity_beta: float | None = option(
        None,
        help="publish the data-dependent epsilon by smooth sensitivity with this "
        "beta (with --smooth-sensitivity-sigma)",
        metavar="BETA",
        check=v.positive,
    )
    smooth_sensitivity_sigma: float | None = option(
        None,
        help="noise std of the smooth-sensitivity release, in units of the smooth sensitivity",
        metavar="SIGMA_SS",
        check=v.positive,
    )
    aggregator_seed: int | None = option(
        None,
        kind=int,
        help="seed of the aggregator's noise: makes the answers reproducible and NOT "
        "private (default: the operating system's entropy, as private answers "
        "need)",
        metavar="SEED",
        check=v.non_negative,
    )
    public_fraction: float = option(
        0.9,
        help="share of the test split (first by id) that is public query data; the rest evaluates the student",
        metavar="F",
        check=v.open_unit,
    )
    epochs: int | None = option(
        None,
        kind=int,
        help="passes of each teacher over its partition (default: 20, or enough for "
        "200 SGD steps on a small partition)",
        metavar="N",
        check=v.positive,
        limit=EPOCH_LIMIT,
    )
    batch_size: int = option(32, help="examples per SGD step", metavar="B", check=v.positive)
    learning_rate: float = option(0.05, help="SGD step size", metavar="LR", check=v.positive)
    momentum: float = option(0.9, help="heavy-ball momentum in [0, 1)", check=v.unit_interval_open_right)
    weight_decay: float = option(0.0, help="L2 penalty on the parameters", check=v.non_negative)
    teacher_eval_examples: int = option(
        1000, help="test examples each teacher record is evaluated on", metavar="N", check=v.positive
    )
    semi_supervised: bool = option(
        False, help="the student also learns from the public data the aggregator did not label"
    )
    student_epochs: int | None = option(
        None,
        kind=int,
        help="student: passes over the answered queries (semi-supervised: each step "
        "also draws unlabelled data) (default: the student trainer's)",
        metavar="N",
        check=v.positive,
        limit=EPOCH_LIMIT,
    )
    student_batch_size: int | None = option(
        None,
        kind=int,
        help="student: labelled examples per step (default: the student trainer's)",
        metavar="B",
        check=v.positive,
    )
    student_learning_rate: float | None = option(
        None, help="student: SGD step size (default: the student trainer's)", metavar="LR", check=v.positive
    )
    unlabeled_weight: float | None = option(
        None,
        help="semi-supervised student: weight of the unlabelled loss (default: the student trainer's)",
        metavar="W",
        check=v.non_negative,
    )
    unlabeled_ratio: int | None = option(
        None,
        kind=int,
        help="semi-supervised student: unlabelled examples per labelled one in a step (default: the student trainer's)",
        metavar="MU",
        check=v.positive,
    )
    pseudo_label_confidence: float | None = option(
        None,
        help="semi-supervised student: confidence a pseudo-label needs (default: the student trainer's)",
        metavar="P",
        check=v.open_unit,
    )

    #: Added after records were stored: a run without a budget (or a noise seed) keeps its record and id.
    _omit_when_default: ClassVar[tuple[str, ...]] = ("target_epsilon", "aggregator_seed")

    def __post_init__(self) -> None:
        for opt in option_specs(type(self)):  # each field's own check, by its field name
            value = getattr(self, opt.field)
            if value is not None and opt.check is not None:
                opt.check(opt.field, value)
        if self.aggregator_seed is not None:
            v.integer("aggregator_seed", self.aggregator_seed, minimum=0)
        for name in (
            "teachers",
            "queries",
            "epochs",
            "batch_size",
            "teacher_eval_examples",
            "student_epochs",
            "student_batch_size",
            "unlabeled_ratio",
        ):
            if getattr(self, name) is not None:
                v.integer(name, getattr(self, name), minimum=1)
        if self.aggregator is None:
            # A budget is planned as if every query were answered: Confident-GNMax's threshold step
            # would then only drop answers already paid for (measured: MNIST 0.65 against GNMax's
            # 0.74 at epsilon = 2). Without a budget the papers' Confident-GNMax (same id as before).
            object.__setattr__(self, "aggregator", "confident-gnmax" if self.target_epsilon is None else "gnmax")
        v.choice("aggregator", self.aggregator, tuple(AGGREGATORS))
        if self.analysis is None:
            # Resolved before the config is digested: a run without a budget keeps its model id.
            # A budget is met by the data-independent bound (the data-dependent ε is private).
            object.__setattr__(
                self, "analysis", "data-dependent" if self.target_epsilon is None else "data-independent"
            )
        v.choice("analysis", self.analysis, ("data-dependent", "data-independent"))
        if self.target_epsilon is not None and self.aggregator == "lnmax":
            raise v.invalid(
                "target_epsilon",
                f"target_epsilon={self.target_epsilon!r}: the budget is planned for "
                "gnmax and confident-gnmax, got aggregator 'lnmax' (give "
                "--laplace-scale and --queries instead)",
            )
        if self.resolved():
            self.aggregator_config()  # refuses a bad sigma / threshold / scale now, naming it
        self._teacher_sgd(self.epochs or DEFAULT_TEACHER_EPOCHS)  # refuses a bad batch size, rate, … now, naming it
        student = self.student_config()
        # A default is stored as the value it stands for, so the record (and its id) says how the
        # student was trained even if the trainer's defaults change later.
        for name, source in self._STUDENT_FIELDS.items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(student, source))
        beta, ss = self.smooth_sensitivity_beta, self.smooth_sensitivity_sigma
        if (beta is None) != (ss is None):
            raise v.invalid(
                "smooth_sensitivity_beta",
                f"smooth_sensitivity_beta and smooth_sensitivity_sigma go together, got beta={beta!r} and sigma={ss!r}",
            )
        if beta is not None:
            if self.target_epsilon is not None:
                # The plan spends the budget on the answers; publishing an estimate costs more on top of it.
                raise v.invalid(
                    "smooth_sensitivity_beta",
                    f"smooth_sensitivity_beta: target_epsilon={self.target_epsilon!r} is met "
                    "by the data-independent bound; a smooth-sensitivity release would "
                    "spend more than it (drop one)",
                )
            if self.aggregator == "lnmax":
                raise v.invalid(
                    "smooth_sensitivity_beta",
                    "smooth_sensitivity_beta: the smooth-sensitivity release is derived for "
                    "gnmax and confident-gnmax, got aggregator 'lnmax'",
                )
            if self.analysis != "data-dependent":
                raise v.invalid(
                    "smooth_sensitivity_beta",
                    "smooth_sensitivity_beta: only a data-dependent bound needs a "
                    "smooth-sensitivity release, got analysis 'data-independent'",
                )

    def resolved(self) -> bool:
        """Whether every value :func:`plan_pate` derives is set (then the config is its own plan)."""
        if self.aggregator is None:  # chosen by plan_pate
            return False
        return None not in (
            self.teachers,
            self.queries,
            self.epochs,
            *(getattr(self, f) for f in _AGGREGATOR_FIELDS[self.aggregator]),
        )

    def aggregator_config(self) -> Any:
        """The :mod:`defenses.pate.aggregators` config of the chosen aggregator (of a resolved config: see
        :func:`plan_pate`)."""
        if self.aggregator is None:
            raise v.invalid(
                "aggregator", "aggregator is chosen from the budget: resolve the config with plan_pate first"
            )
        missing = [f for f in _AGGREGATOR_FIELDS[self.aggregator] if getattr(self, f) is None]
        if missing:
            raise v.invalid(
                missing[0], f"{missing[0]} is derived from the data size: resolve the config with plan_pate first"
            )
        return aggregator_config(self.aggregator, **{f: getattr(self, f) for f in _AGGREGATOR_FIELDS[self.aggregator]})

    def _teacher_sgd(self, epochs: int) -> NonPrivateConfig:
        return NonPrivateConfig(
            epochs=epochs,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            momentum=self.momentum,
            weight_decay=self.weight_decay,
        )

    def teacher_config(self) -> NonPrivateConfig:
        """Every teacher's SGD (the non-private baseline's loop).

        Raises:
            ValueError: ``epochs`` is unset (derived from the partition size: resolve the config with
                :func:`~defenses.pate.plan.plan_pate` first).
        """
        if self.epochs is None:
            raise v.invalid(
                "epochs", "epochs is derived from the partition size: resolve the config with plan_pate first"
            )
        return self._teacher_sgd(self.epochs)

    #: PATEConfig field → :class:`StudentConfig` field.
    _STUDENT_FIELDS: ClassVar[dict[str, str]] = {
        "student_epochs": "epochs",
        "student_batch_size": "batch_size",
        "student_learning_rate": "learning_rate",
        "unlabeled_weight": "unlabeled_weight",
        "unlabeled_ratio": "unlabeled_ratio",
        "pseudo_label_confidence": "confidence",
    }

    def student_config(self) -> StudentConfig:
        """The student's training (a field left ``None`` takes :class:`StudentConfig`'s default)."""
        default = StudentConfig(semi_supervised=self.semi_supervised)
        return StudentConfig(
            semi_supervised=self.semi_supervised,
            epochs=default.epochs if self.student_epochs is None else self.student_epochs,
            batch_size=default.batch_size if self.student_batch_size is None else self.student_batch_size,
            learning_rate=default.learning_rate if self.student_learning_rate is None else self.student_learning_rate,
            unlabeled_weight=default.unlabeled_weight if self.unlabeled_weight is None else self.unlabeled_weight,
            unlabeled_ratio=default.unlabeled_ratio if self.unlabeled_ratio is None else self.unlabeled_ratio,
            confidence=default.confidence if self.pseudo_label_confidence is None else self.pseudo_label_confidence,
        )
