"""What one audit is: :class:`AuditSpec`, validated once, and the choices it is made of.

``dpaudit audit`` builds the spec from its flags, ``dpaudit compare`` from a trained record;
:mod:`dpaudit.app.runs.audit.runner` runs it. The games it chooses among (:data:`THREATS`,
:data:`METHODS`) are read from :data:`attacks.audit.procedures.AUDIT_PROCEDURES`, which imports
torch (as the runner does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from attacks.audit.procedures import AUDIT_PROCEDURES
from dpaudit import _validate as v
from dpaudit.limits import LIMITS, above_limit, check_name, check_sizes, describe_number
from dpaudit.privacy.audit_bounds import ONE_RUN_BOUND_CHOICES, SCORE_BOUND_CHOICES
from dpaudit.privacy.audit_stats import THRESHOLD_STRATEGIES
from dpaudit.privacy.claims import PrivacyClaim

__all__ = [
    "CANARY_KINDS",
    "INIT_KINDS",
    "METHODS",
    "THREATS",
    "WHITE_BOX_CHUNK_STEPS",
    "WHITE_BOX_MOST_STEPS",
    "WORST_CASE_AUDITOR_RECORDS",
    "AuditSpec",
    "audit_defenses",
    "audit_threats",
    "black_box_games",
]


def audit_threats() -> tuple[str, ...]:
    """The threat models of the audit games registered now, in registration order (``--threat``)."""
    return tuple(dict.fromkeys(game.threat for game in AUDIT_PROCEDURES.values()))


def black_box_games() -> tuple[str, ...]:
    """The black-box audit games registered now, in registration order (``--method``; the white-box threat has one game,
    chosen by ``--threat`` alone)."""
    return tuple(name for name, game in AUDIT_PROCEDURES.items() if game.threat == "black-box")


#: The threat models of the registered audit games (``black-box``, ``white-box``).
THREATS: tuple[str, ...] = audit_threats()
#: The registered black-box games (``multi-run``, ``one-run``).
METHODS: tuple[str, ...] = black_box_games()
CANARY_KINDS = ("clipbkd", "mislabelled", "blank")
INIT_KINDS = ("random", "worst-case")
#: Auditor records a worst-case start is pre-trained on (Annamalai & De Cristofaro use half of MNIST).
WORST_CASE_AUDITOR_RECORDS = 30_000
#: White-box default length: never more steps than this in all (ε ≲ 0.6 would need more; the
#: result then says how far its ceiling is).
WHITE_BOX_MOST_STEPS = 300_000
#: White-box steps per training under ``budget_seconds`` (≈ 2–4 s each on one CPU core).
WHITE_BOX_CHUNK_STEPS = 2_000


@dataclass(frozen=True, kw_only=True)
class AuditSpec:
    """Everything one audit needs, validated once (``dpaudit audit`` builds it from its flags).

    Attributes:
        defense: a registered defense with a white-box trainer adapter
            (``defenses.DEFENSES[name].audit_trainer``); ignored when ``train_fn`` is given.
        train_fn: a third-party ``train(dataset, *, seed) -> nn.Module`` as ``module:function``
            or ``path/to/file.py:function`` (black-box games only; needs ``claim``).
        claim: the claim a ``train_fn`` is audited against.
        model_fn: with ``train_fn``: a zero-argument ``module:function`` (or ``file.py:function``)
            building the architecture ``train_fn`` trains, on which a worst-case start (or a
            blank canary's label) is crafted; default: ``model`` from the zoo.
        dataset: dataset name.
        model: zoo model for the suite's defense.
        model_options: its architecture options (``None``: the zoo's defaults).
        defense_config: further fields of the defense's config, for an audit of an exact
            trained configuration (``dpaudit compare`` passes its trained record's: momentum,
            weight decay, per-layer clipping, …); the fields this spec sets itself (σ, C, q,
            the steps, the learning rate, δ) take precedence.
        threat: ``black-box`` (final model only) or ``white-box`` (every released update).
        method: the black-box game, ``multi-run`` or ``one-run``.
        target_epsilon: calibrate σ so that the *audited claim* has ε_UB = this (black-box:
            the whole training, PLD accountant; white-box: one Gaussian step, analytic Gaussian
            mechanism of Balle & Wang 2018). Exactly one of it and ``noise_multiplier``.
        noise_multiplier: σ directly.
        delta: δ of both bounds.
        clip_norm: clipping norm C.
        sampling_rate: Poisson sampling rate q.
        epochs: epochs of 1/q steps (black-box default 10 when ``num_steps`` is not given).
        num_steps: steps T of each training (instead of ``epochs``). White-box default: the
            steps :func:`~dpaudit.privacy.audit_stats.gdp_observations_needed` says make the
            expected ε_LB 0.9 · ε_UB (at most :data:`WHITE_BOX_MOST_STEPS` in all), split over
            one training per worker; with ``budget_seconds``, :data:`WHITE_BOX_CHUNK_STEPS`
            per training.
        learning_rate: learning rate.
        num_members: training-set size (default: the dataset split's own).
        num_trials: multi-run: trainings per side (default 50); white-box: runs pooled
            (default 1, or one per worker when the steps are the default; with
            ``budget_seconds``, the most that will be run: default 10,000).
        num_canaries: one-run: canaries m.
        one_run_bound: one-run: ``steinke`` (Steinke, Nasr & Jagielski 2023) or ``fdp``
            (Mahloujifar, Melis & Chaudhuri 2025, Gaussian trade-off curve); see
            :func:`dpaudit.privacy.audit_procedures.audit_from_one_run`.
        canary: multi-run input canary, ``clipbkd``, ``mislabelled`` or ``blank`` (one all-zero
            input labelled with the class the starting model finds least likely).
        init: multi-run: where every training starts, ``random`` (the trainer's own seeded
            initialisation) or ``worst-case`` (Annamalai & De Cristofaro 2024: the model
            pre-trained non-privately on up to 30,000 records of the dataset that are not
            members, saved as ``initial_state.safetensors`` in the audit directory and passed
            to every training as ``initial_state``).
        group_size: multi-run canary copies k (ε_LB is divided by k).
        confidence: confidence of ε_LB.
        bound: ``auto`` (GDP when the audited claim's trade-off curve is Gaussian-family, else
            Clopper–Pearson; :func:`~dpaudit.privacy.audit_bounds.resolve_bound`), ``gdp`` (refused for
            other claims) or ``clopper-pearson`` (multi-run and white-box).
        strategy: honest threshold choice, ``bonferroni``, ``split`` or ``fixed`` (white-box
            Dirac only: one threshold from the claim; its default there).
        score: white-box score, ``dirac`` or ``norm``.
        budget_seconds: white-box: train and pool trials until this wall time is spent
            (instead of a fixed ``num_trials``); a rerun reuses the stored trials and adds more.
        workers: worker processes for trials (1: in this process), or a local Ray's CPUs.
        executor: where trials run: ``local`` (process pool), ``serial`` or ``ray``.
        address: Ray cluster address (``executor="ray"`` only; ``None`` starts a local Ray).
        ship_code: Ray sends this checkout's packages to the workers (:mod:`dpaudit.cluster`).
        seed: root seed.
        name: audit name under ``RUN_DIR/audits/`` (default derived from the configuration).
        data_root: data root (``None``: the default resolution).
        device: ``cpu`` or ``cuda[:N]``.
        batch_trials: train the multi-run game's trials many at once where the trainer's loop
            allows it (the project's DP-SGD on a small model, :mod:`dpaudit.app.runs.audit.batching`:
            the same models up to floating-point reordering); ``False``: one training per job.
        progress: report progress on stderr.
        i_know: accept sizes above the documented limits (:data:`dpaudit.limits.LIMITS`: trials,
            epochs, steps, canaries…), as ``--i-know`` does on the command line.
    """

    defense: str = "dpsgd"
    train_fn: str | None = None
    claim: PrivacyClaim | None = None
    model_fn: str | None = None
    dataset: str = "digits"
    model: str = "digits-mlp"
    model_options: Mapping[str, object] | None = None
    defense_config: Mapping[str, object] | None = None
    threat: str = "black-box"
    method: str = "multi-run"
    target_epsilon: float | None = None
    noise_multiplier: float | None = None
    delta: float = 1e-5
    clip_norm: float = 1.0
    sampling_rate: float = 0.01
    epochs: float | None = None
    num_steps: int | None = None
    learning_rate: float = 0.1
    num_members: int | None = None
    num_trials: int | None = None
    num_canaries: int = 100
    one_run_bound: str = "steinke"
    canary: str = "clipbkd"
    init: str = "random"
    group_size: int = 1
    confidence: float = 0.95
    bound: str = "auto"
    strategy: str | None = None
    score: str = "dirac"
    budget_seconds: float | None = None
    workers: int = 1
    executor: str = "local"
    address: str | None = None
    ship_code: bool = False
    seed: int = 0
    name: str | None = None
    data_root: str | None = None
    device: str = "cpu"
    batch_trials: bool = True
    progress: bool = True
    i_know: bool = False

    def __post_init__(self) -> None:
        v.choice("threat", self.threat, THREATS)
        v.choice("method", self.method, METHODS)
        v.choice("canary", self.canary, CANARY_KINDS)
        v.choice("init", self.init, INIT_KINDS)
        if self.init != "random" and (self.threat, self.method) != ("black-box", "multi-run"):
            raise v.invalid(
                "init",
                f"init={self.init!r} applies to the black-box multi-run game, got "
                f"threat={self.threat!r}, method={self.method!r}",
            )
        v.choice("one_run_bound", self.one_run_bound, ONE_RUN_BOUND_CHOICES)
        v.choice("bound", self.bound, SCORE_BOUND_CHOICES)
        if self.threat == "white-box":
            from attacks.audit.procedures import white_box_strategy

            object.__setattr__(self, "strategy", white_box_strategy(self.score, self.strategy))
        elif self.strategy is None:
            object.__setattr__(self, "strategy", "bonferroni")
        else:
            v.choice("strategy", self.strategy, THRESHOLD_STRATEGIES)
            if self.strategy == "fixed":
                raise v.invalid(
                    "strategy",
                    "strategy='fixed' takes its threshold from the white-box Dirac claim; "
                    f"with threat={self.threat!r} use bonferroni or split",
                )
        if self.budget_seconds is not None:
            object.__setattr__(self, "budget_seconds", v.positive("budget_seconds", self.budget_seconds))
            if self.threat != "white-box":
                raise v.invalid(
                    "budget_seconds",
                    "budget_seconds applies to threat='white-box' (trials of a fixed length "
                    f"pooled until the time is spent), got threat={self.threat!r}",
                )
        if self.one_run_bound != "steinke" and self.method != "one-run":
            raise v.invalid(
                "one_run_bound",
                f"one_run_bound applies to method='one-run', got method={self.method!r}, "
                f"one_run_bound={self.one_run_bound!r}",
            )
        object.__setattr__(self, "delta", v.open_unit("delta", self.delta))
        object.__setattr__(self, "confidence", v.open_unit("confidence", self.confidence))
        object.__setattr__(self, "sampling_rate", v.half_open_unit("sampling_rate", self.sampling_rate))
        object.__setattr__(self, "clip_norm", v.positive("clip_norm", self.clip_norm))
        object.__setattr__(self, "learning_rate", v.positive("learning_rate", self.learning_rate))
        object.__setattr__(self, "group_size", v.integer("group_size", self.group_size, minimum=1))
        object.__setattr__(self, "num_canaries", v.integer("num_canaries", self.num_canaries, minimum=2))
        object.__setattr__(self, "workers", v.integer("workers", self.workers, minimum=1))
        from dpaudit.executors import EXECUTORS

        v.choice("executor", self.executor, EXECUTORS)
        if self.address is not None and self.executor != "ray":
            raise v.invalid(
                "address", f"address={self.address!r} applies to executor='ray' only, got executor={self.executor!r}"
            )
        for name in ("num_trials", "num_steps", "num_members"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, v.integer(name, value, minimum=1))
        if self.target_epsilon is not None:
            object.__setattr__(self, "target_epsilon", v.positive("target_epsilon", self.target_epsilon))
        if self.noise_multiplier is not None:
            object.__setattr__(self, "noise_multiplier", v.positive("noise_multiplier", self.noise_multiplier))
        if self.epochs is not None:
            object.__setattr__(self, "epochs", v.positive("epochs", self.epochs))
        if self.num_steps is not None and self.epochs is not None:
            raise v.invalid(
                "epochs",
                f"give epochs or num_steps, not both; got epochs={self.epochs!r}, num_steps={self.num_steps!r}",
            )
        self._check_limits()
        if self.name is not None:
            check_name("name", self.name)
        # ASCII only: the audit's report files are named after it (reports/render.py's plain stems).
        if self.name is not None and not (
            self.name.isascii()
            and self.name.replace("-", "").replace("_", "").replace(".", "").isalnum()
            and not self.name.startswith(".")
        ):
            raise v.invalid("name", f"name must be a plain name (ASCII letters, digits, - _ .), got {self.name!r}")
        if self.model_fn is not None and (self.train_fn is None or (self.init == "random" and self.canary != "blank")):
            raise v.invalid(
                "model_fn",
                "model_fn builds the starting architecture of a train_fn audited with "
                "init='worst-case' or canary='blank'; "
                f"got model_fn={self.model_fn!r} with train_fn={self.train_fn!r}, "
                f"init={self.init!r}, canary={self.canary!r}",
            )
        if self.train_fn is not None and (self.model_options or self.defense_config):
            raise v.invalid(
                "model_options",
                "model_options and defense_config configure the suite's defense; a train_fn builds its own model",
            )
        if self.train_fn is None:
            if self.claim is not None:
                raise v.invalid("claim", f"claim applies to train_fn; defense {self.defense!r} builds its own claim")
            if (self.target_epsilon is None) == (self.noise_multiplier is None):
                raise v.invalid(
                    "target_epsilon",
                    "give exactly one of target_epsilon and noise_multiplier, got "
                    f"target_epsilon={self.target_epsilon!r}, "
                    f"noise_multiplier={self.noise_multiplier!r}",
                )
        else:
            if not isinstance(self.claim, PrivacyClaim):
                raise v.invalid("train_fn", f"train_fn needs the claim it is audited against, got claim={self.claim!r}")
            if self.threat == "white-box":
                raise v.invalid(
                    "threat",
                    "threat='white-box' needs a defense's white-box trainer hooks; a "
                    "third-party train_fn is audited black-box",
                )
            if self.target_epsilon is not None or self.noise_multiplier is not None:
                raise v.invalid(
                    "target_epsilon",
                    "target_epsilon/noise_multiplier configure the suite's defense; with "
                    "train_fn the claim comes from claim",
                )

    def _check_limits(self) -> None:
        """Every size against :data:`dpaudit.limits.LIMITS` (the limits the flags of ``dpaudit audit`` have)."""
        check_sizes(
            self,
            {
                "num_trials": "trials",
                "epochs": "epochs",
                "num_steps": "steps",
                "num_members": "members",
                "num_canaries": "canaries",
                "group_size": "group_size",
                "workers": "workers",
            },
        )
        if self.num_steps is None and self.epochs is not None:
            # A tiny sampling rate makes 1/q steps per epoch: the steps are what the time follows.
            steps = self.epochs * max(1, round(1.0 / self.sampling_rate))
            if above_limit("steps", steps, LIMITS["steps"], i_know=self.i_know):
                raise v.invalid(
                    "sampling_rate",
                    f"sampling_rate={self.sampling_rate:g} with epochs={self.epochs:g} is "
                    f"{steps:.3g} steps per training, above the limit "
                    f"{describe_number(LIMITS['steps'].maximum)} ({LIMITS['steps'].why}); "
                    "pass --i-know (i_know=True) to run it anyway",
                )

    @property
    def _white_box_default_length(self) -> bool:
        return self.threat == "white-box" and self.num_steps is None and self.epochs is None

    @property
    def white_box_total_steps(self) -> int:
        """White-box default: observations for an expected ε_LB of 0.9 · the step's ε_UB.

        The claim is one Gaussian step with σ (given, or calibrated to ``target_epsilon``), so
        μ = 1/σ; :func:`gdp_observations_needed` turns μ into a count (≈ 82,000 steps at
        ε = 1, 25,000 at 2, 8,000 at 4; δ = 1e-5, 95 %), capped at :data:`WHITE_BOX_MOST_STEPS`.
        """
        from dpaudit.privacy.audit_stats import gdp_observations_needed
        from dpaudit.privacy.gaussian import analytic_sigma

        sigma = (
            self.noise_multiplier
            if self.noise_multiplier is not None
            else analytic_sigma(epsilon=float(self.target_epsilon), delta=self.delta)  # type: ignore[arg-type]
        )
        return gdp_observations_needed(
            mu=1.0 / sigma, delta=self.delta, confidence=self.confidence, ratio=0.9, most=WHITE_BOX_MOST_STEPS
        )

    @property
    def resolved_num_trials(self) -> int:
        """Trainings: per side for multi-run (default 50); pooled runs for white-box; 1 for one-run."""
        if self.threat == "white-box":
            if self.num_trials is not None:
                return self.num_trials
            if self.budget_seconds is not None:
                return 10_000
            return self.workers if self._white_box_default_length and self.train_fn is None else 1
        if self.method == "multi-run":
            return self.num_trials if self.num_trials is not None else 50
        return 1

    @property
    def resolved_num_steps(self) -> int:
        """T of each training: ``num_steps``, else ``epochs`` of 1/q steps (black-box default 10 epochs).

        White-box without either: :data:`WHITE_BOX_CHUNK_STEPS` per training under a time
        budget, else :attr:`white_box_total_steps` split over :attr:`resolved_num_trials`.
        """
        if self.num_steps is not None:
            return self.num_steps
        if self._white_box_default_length and self.train_fn is None:
            if self.budget_seconds is not None:
                return WHITE_BOX_CHUNK_STEPS
            return -(-self.white_box_total_steps // self.resolved_num_trials)
        per_epoch = max(1, round(1.0 / self.sampling_rate))
        return max(1, round((self.epochs if self.epochs is not None else 10) * per_epoch))


def audit_defenses() -> tuple[str, ...]:
    """The registered defenses that carry a white-box trainer adapter (those ``audit`` can train)."""
    from defenses import DEFENSES

    return tuple(name for name, entry in DEFENSES.items() if entry.audit_trainer is not None)
