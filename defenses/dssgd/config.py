"""DSSGD's hyper-parameters (Shokri & Shmatikov 2015, §5: participants, θ_u, θ_d, selection, schedule, the DP upload).

:class:`DSSGDConfig` is what a user sets; :mod:`defenses.dssgd.plan` resolves how its budget is
spent and :mod:`defenses.dssgd.defense` trains it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from defenses.dssgd.plan import DEFAULT_ROUNDS, MAX_ROUNDS
from defenses.dssgd.protocol import SCHEDULES, LocalTraining, fraction_count
from defenses.dssgd.uploads import SELECTIONS, UploadRule
from dpaudit import _validate as v
from dpaudit.options import SizeLimit, option
from dpaudit.training import BATCH_LIMIT, EPOCH_LIMIT

__all__ = ["DSSGDConfig"]

_PARTICIPANT_LIMIT = SizeLimit(1000, "each participant is a local model trained every round")
_ROUND_LIMIT = SizeLimit(MAX_ROUNDS, "each round is one local training per participant")


@dataclass(frozen=True, kw_only=True)
class DSSGDConfig:
    """Hyperparameters of distributed selective SGD (Shokri & Shmatikov 2015).

    The defaults follow the paper's MNIST setting where it gives one (30 participants,
    θ_u = 0.1, θ_d = 1, largest-value selection, round-robin) and keep a run short otherwise.

    Attributes:
        participants: N, the number of participants (disjoint partitions of the members).
        rounds: R; every participant takes one turn per round. ``None`` means
            ``DEFAULT_ROUNDS``, except with ``target_epsilon`` and ``dp_epsilon`` both set: then
            as many rounds as the budget allows (:mod:`defenses.dssgd.plan`).
        upload_fraction: θ_u, the share of parameters a turn may upload.
        download_fraction: θ_d, the share of global parameters (largest ``stat``) downloaded.
        selection: ``largest`` |Δw_j| or ``random-threshold`` (random among |Δw_j| > τ).
        selection_threshold: τ of ``random-threshold``.
        schedule: ``round-robin``, ``random`` (a fresh order each round) or ``async``.
        local_epochs, batch_size, learning_rate: every participant's plain SGD per turn.
        standardize: inputs enter the network as (x − mean) / std (§6.1 of the paper), folded
            into the model's first layer (``model_options["input_standardization"]`` of every
            record): the training split's mean and std, or under a DP claim the split's
            population's (public data; :func:`defenses.dssgd.defense.standardization_source`).
        dp_epsilon: the DP variant's ε per uploaded parameter per turn (``None``: not private,
            or calibrated to ``target_epsilon``).
        target_epsilon: the budget each participant's data get, c·R·ε by pure composition:
            calibrates ``dp_epsilon`` for ``rounds``; with ``dp_epsilon`` set, the most rounds
            it allows, or with ``rounds`` too, exactly those if it allows them (else refused).
            Resolved per model by :func:`defenses.dssgd.plan.plan_dssgd`; the record keeps the
            config as asked and the resolved values in its metrics and claim.
        bound: γ, the DP variant's bound on uploaded values.
        threshold: τ, the DP variant's sparse-vector threshold.
        budget_split: ``sum`` (shares that add to ε) or ``seed`` (the seed's 8/9 + 2/9 as printed).
        observe_participant: whose uploads the server keeps for the server-seat attacks.
        baselines: also train the centralised and standalone reference rows.
    """

    participants: int = option(
        30,
        help="number of participants (disjoint partitions of the private members)",
        metavar="N",
        check=v.positive,
        limit=_PARTICIPANT_LIMIT,
    )
    rounds: int | None = option(
        None,
        kind=int,
        help="rounds; every participant takes one turn per round (default "
        f"{DEFAULT_ROUNDS}, or as many as --target-epsilon allows at "
        "--dp-epsilon)",
        metavar="R",
        check=v.positive,
        limit=_ROUND_LIMIT,
    )
    upload_fraction: float = option(
        0.1, help="theta_u: share of the parameter changes a turn uploads", metavar="THETA_U", check=v.positive
    )
    download_fraction: float = option(
        1.0,
        help="theta_d: share of the global parameters (most updated first) a turn downloads",
        metavar="THETA_D",
        check=v.positive,
    )
    selection: str = option(
        "largest",
        choices=SELECTIONS,
        help="which changes to upload: the largest, or random ones above --selection-threshold",
    )
    selection_threshold: float = option(
        0.0,
        help="random-threshold: only changes with |dw| above this are eligible",
        metavar="TAU",
        check=v.non_negative,
    )
    schedule: str = option(
        "round-robin",
        choices=SCHEDULES,
        help="turn order: fixed, a fresh random order each round, or asynchronous (all train at once)",
    )
    local_epochs: int = option(
        1, help="passes over a participant's data per turn", metavar="N", check=v.positive, limit=EPOCH_LIMIT
    )
    batch_size: int = option(32, help="examples per local SGD step", metavar="B", check=v.positive, limit=BATCH_LIMIT)
    learning_rate: float = option(0.05, help="local SGD step size", metavar="LR", check=v.positive)
    standardize: bool = option(
        True,
        help="standardise inputs by the training split's mean and std, as the paper "
        "does, or with a DP budget by the split's population's (public data); "
        "part of the network, so attacks see raw inputs",
    )
    dp_epsilon: float | None = option(
        None,
        help="DP variant: epsilon per uploaded parameter per turn (the paper's "
        "figure, not a total: each participant spends uploads per turn x rounds "
        "x E, said before training and claimed by the record)",
        metavar="E",
        check=v.positive,
    )
    target_epsilon: float | None = option(
        None,
        help="DP variant's budget: each participant's total epsilon (uploads per "
        "turn x rounds x --dp-epsilon, pure composition); calibrates "
        "--dp-epsilon for --rounds, or with --dp-epsilon the rounds (said "
        "before training)",
        metavar="EPS",
        check=v.positive,
    )
    bound: float = option(
        0.001,
        help="DP variant: gamma, uploaded values are bounded to [-gamma, gamma]",
        metavar="GAMMA",
        check=v.positive,
    )
    threshold: float = option(
        0.0001, help="DP variant: tau of the sparse-vector test on |dw|", metavar="TAU", check=v.non_negative
    )
    budget_split: str = option(
        "sum",
        choices=("sum", "seed"),
        help="DP variant: budget shares that sum to epsilon, or the seed's 8/9 + 2/9 as printed",
    )
    observe_participant: int = option(
        0,
        help="the participant whose uploads the server keeps for the server-seat attacks",
        metavar="I",
        check=v.non_negative,
    )
    baselines: bool = option(True, help="also train the centralised and standalone reference rows")

    # Absent from a config without a budget, so the records and ids of runs before it stay the same.
    _omit_when_default: ClassVar[tuple[str, ...]] = ("target_epsilon",)

    def __post_init__(self) -> None:
        v.integer("participants", self.participants, minimum=1)
        if self.target_epsilon is not None:
            v.positive("target_epsilon", self.target_epsilon)
        if self.rounds is None and (self.target_epsilon is None or self.dp_epsilon is None):
            # Resolved before the config is digested: a run that never named R keeps its model id.
            object.__setattr__(self, "rounds", DEFAULT_ROUNDS)
        if self.rounds is not None:
            v.integer("rounds", self.rounds, minimum=1)
        fraction_count("upload_fraction", self.upload_fraction, 1)
        fraction_count("download_fraction", self.download_fraction, 1)
        v.choice("schedule", self.schedule, SCHEDULES)
        v.choice("budget_split", self.budget_split, ("sum", "seed"))
        v.integer("observe_participant", self.observe_participant, minimum=0)
        if self.observe_participant >= self.participants:
            raise v.invalid(
                "observe_participant",
                f"observe_participant must be below participants ({self.participants}), "
                f"got {self.observe_participant!r}",
            )
        # Building them validates the upload rule's and the local SGD's fields (a budget's ε stands in for the
        # calibrated one).
        _ = (self._rule(self.target_epsilon if self.dp_epsilon is None else self.dp_epsilon), self.training)

    def resolved(self) -> bool:
        """Whether ``dp_epsilon`` and ``rounds`` are set (then the config is its own plan)."""
        return self.rounds is not None and (self.target_epsilon is None or self.dp_epsilon is not None)

    @property
    def rule(self) -> UploadRule:
        """The upload rule these settings describe (of a resolved config: see
        :func:`defenses.dssgd.plan.plan_dssgd`)."""
        if not self.resolved():
            # An unset dp_epsilon here would upload exact values under a budget: never a default.
            raise v.invalid(
                "dp_epsilon",
                "dp_epsilon is calibrated to target_epsilon from the model's parameter "
                "count: resolve the config with plan_dssgd first",
            )
        return self._rule(self.dp_epsilon)

    def _rule(self, dp_epsilon: float | None) -> UploadRule:
        return UploadRule(
            upload_fraction=self.upload_fraction,
            selection=self.selection,
            selection_threshold=self.selection_threshold,
            dp_epsilon=dp_epsilon,
            bound=self.bound,
            dp_threshold=self.threshold,
            budget_split=self.budget_split,
        )

    @property
    def training(self) -> LocalTraining:
        """Every participant's local SGD."""
        return LocalTraining(epochs=self.local_epochs, batch_size=self.batch_size, learning_rate=self.learning_rate)
