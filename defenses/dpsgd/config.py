"""DP-SGD's hyper-parameters (Abadi et al. 2016, Algorithm 1; §3.1 and §5.1 for their roles).

:class:`DPSGDConfig` is what a user sets; :func:`defenses.dpsgd.plan.plan_dpsgd` turns it into
what a run does (q, σ, the number of steps), and :mod:`defenses.dp_defaults` derives the values
left unset from public facts. :meth:`DPSGDConfig.rebuild_claim` rebuilds a stored record's claim
from its configuration (the :class:`dpaudit.privacy.record_claims.ClaimConfig` protocol), so the
schema's keys are read here and nowhere in the core.

Torch-free: the claim check of ``report`` loads this module without the training code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dp_accounting import dp_event as dpe

from defenses.dp_defaults import CLIP_NORM, DEFAULT_EPOCHS, DERIVED_AT_INIT, LEARNING_RATE, derived_lot_size
from dpaudit import _validate as v
from dpaudit.limits import LIMITS
from dpaudit.options import option
from dpaudit.privacy.accountants import ACCOUNTANTS
from dpaudit.privacy.claims import DPClaim, PrivacyClaim, dpsgd_claim
from dpaudit.privacy.record_claims import (
    RELATIVE_TOLERANCE,
    RebuiltClaim,
    agree,
    format_number,
    register_claim_config,
    required,
)

__all__ = ["SAMPLING_MODES", "CLIPPING_METHODS", "DEFAULT_NOISE_MULTIPLIER", "DEFAULT_SAMPLING_RATE", "DPSGDConfig"]

SAMPLING_MODES = ("poisson", "shuffle-non-private-accounting")
#: Per-example gradient engines (:mod:`defenses.clipping`); named here so the config stays torch-free.
CLIPPING_METHODS = ("auto", "hooks", "vmap")
#: The sampling rate a stored configuration with neither a lot size nor a rate was run at (Abadi et al.'s 600 of
#: 60,000).
DEFAULT_SAMPLING_RATE = 0.01
#: Relative tolerance of the σ calibration (:func:`dpaudit.privacy.calibration.calibrate_noise_multiplier`).
_CALIBRATION_TOLERANCE = 1e-3
EPOCH_LIMIT = LIMITS["epochs"]
BATCH_LIMIT = LIMITS["batch_size"]
#: σ of a run without ``target_epsilon`` and without ``noise_multiplier``. With a target, σ is
#: calibrated instead: a default σ would silently turn the target into a step budget.
DEFAULT_NOISE_MULTIPLIER = 1.1


def _optional(name: str, value: Any, check: Callable[[str, Any], Any]) -> None:
    if value is not None:
        check(name, value)


@dataclass(frozen=True, kw_only=True)
class DPSGDConfig:
    """Hyperparameters of DP-SGD (+ DP-PCA); every privacy argument is keyword-only.

    Attributes:
        noise_multiplier: σ, noise std / clipping norm. ``None`` with ``target_epsilon`` set
            means: calibrate σ so that ``epochs`` epochs meet the target; ``None`` without a
            target is stored as ``DEFAULT_NOISE_MULTIPLIER`` (so the config, and the model id
            digested from it, are those of a run that named σ = 1.1).
        clip_norm: C, the per-example L2 bound (total bound with ``per_layer``). ``None``:
            derived (:mod:`defenses.dp_defaults`, rule 1).
        lot_size: expected lot size L; the sampling rate is q = L / N (N = number of
            members). Give this or ``sampling_rate``, not both.
        sampling_rate: q directly, in (0, 1]. With neither given, L is derived from N
            (:mod:`defenses.dp_defaults`, rule 3).
        expected_lot_size: the public divisor of the noisy sum; ``None`` → q·N.
        target_epsilon: privacy budget ε: calibrates σ for ``epochs``; with
            ``noise_multiplier`` set, train for as many steps as the budget allows, or with
            ``epochs`` too, exactly those epochs if the budget allows them (else refused).
        delta: δ of the budget and of the reported ε.
        accountant: accountant of the budget (one of ``dpaudit.privacy.accountants.ACCOUNTANTS``).
        epochs: number of epochs (expected passes, 1/q steps each). ``None`` means
            ``DEFAULT_EPOCHS`` without a target; with ``target_epsilon`` and no
            ``noise_multiplier``, derived from ε (:mod:`defenses.dp_defaults`, rule 4); with
            both, as many steps as the budget allows.
        learning_rate: initial learning rate lr0. ``None``: derived (rule 2).
        final_learning_rate: floor of the linear decay; ``None`` → constant learning rate.
        lr_decay_epochs: epochs over which the rate decays linearly to the floor.
        momentum: heavy-ball momentum (0 = plain SGD).
        weight_decay: L2 penalty (applied to parameters, not data: no privacy cost).
        per_layer: clip each layer (a module's own parameters, e.g. a Linear's weight and
            bias together) to C/√(#layers) instead of the whole gradient to C; the total
            sensitivity, and so the noise σ·C, is unchanged.
        sampling: ``poisson`` (private) or ``shuffle-non-private-accounting`` (fixed-size
            lots from a shuffle; the claim's accounting does not strictly apply).
        pca_components: k for DP-PCA into the model's Projection (``None`` = no PCA).
        pca_noise: σ_p of DP-PCA (required with ``pca_components``).
        pca_sampling_rate: Poisson rate of the sample DP-PCA uses (1 = all members).
        clipping_method: ``auto`` / ``hooks`` / ``vmap`` (see :mod:`defenses.clipping`).
        physical_batch_size: most examples per forward/backward pass (lots are split; exact).
    """

    noise_multiplier: float | None = option(
        None,
        help=f"sigma = noise std / clip norm (default {DEFAULT_NOISE_MULTIPLIER} "
        "without --target-epsilon, calibrated with it); with --target-epsilon: "
        "train until the budget is spent, or --epochs if the budget allows",
        metavar="SIGMA",
        check=v.positive,
    )
    clip_norm: float | None = option(
        None, help="per-example L2 clipping norm C (default derived: 1)", metavar="C", check=v.positive
    )
    lot_size: int | None = option(
        None,
        kind=int,
        help="expected lot size L (sampling rate q = L / members); or give "
        "--sampling-rate (default derived from the number of members)",
        metavar="L",
        check=v.positive,
    )
    sampling_rate: float | None = option(
        None,
        help="Poisson sampling rate q in (0, 1] (default: --lot-size derived from the number of members)",
        metavar="Q",
        check=v.half_open_unit,
    )
    expected_lot_size: float | None = option(
        None, help="public divisor of the noisy sum (default q x members)", metavar="L", check=v.positive
    )
    target_epsilon: float | None = option(
        None,
        help="privacy budget epsilon at --delta: calibrates sigma for --epochs; with "
        "--noise-multiplier, the number of steps (says which before training)",
        metavar="EPS",
        check=v.positive,
    )
    delta: float = option(1e-5, help="delta of the budget and of the reported epsilon", check=v.open_unit)
    accountant: str = option("pld", choices=ACCOUNTANTS, help="accountant of the budget")
    epochs: float | None = option(
        None,
        kind=float,
        help="epochs (1/q steps each); default 10, or derived from --target-epsilon, "
        "or as many as the budget allows with --target-epsilon and "
        "--noise-multiplier",
        metavar="N",
        check=v.positive,
        limit=EPOCH_LIMIT,
    )
    learning_rate: float | None = option(
        None, help="initial learning rate (default derived: 0.5)", metavar="LR", check=v.positive
    )
    final_learning_rate: float | None = option(
        None, help="floor of the linear learning-rate decay (default: constant rate)", metavar="LR", check=v.positive
    )
    lr_decay_epochs: float = option(
        10.0, help="epochs over which the rate decays to the floor", metavar="N", check=v.positive
    )
    momentum: float = option(0.0, help="heavy-ball momentum in [0, 1)", check=v.unit_interval_open_right)
    weight_decay: float = option(0.0, help="L2 penalty on the parameters", check=v.non_negative)
    per_layer: bool = option(False, help="clip each layer to C / sqrt(#layers) instead of the whole gradient to C")
    sampling: str = option(
        "poisson", choices=SAMPLING_MODES, help="lot sampling (shuffle lots do not meet the claim's accounting)"
    )
    pca_components: int | None = option(
        None,
        kind=int,
        help="DP-PCA projection to K components (models with a Projection, e.g. abadi-mnist)",
        metavar="K",
        check=v.positive,
    )
    pca_noise: float | None = option(
        None, help="DP-PCA noise multiplier (with --pca-components)", metavar="SIGMA_P", check=v.positive
    )
    pca_sampling_rate: float = option(
        1.0, help="Poisson rate of the sample DP-PCA uses", metavar="Q", check=v.half_open_unit
    )
    clipping_method: str = option("auto", choices=CLIPPING_METHODS, help="per-example gradient engine")
    physical_batch_size: int = option(
        1024,
        help="most examples per forward/backward pass (lots are split; exact)",
        metavar="B",
        check=v.positive,
        limit=BATCH_LIMIT,
    )

    def __post_init__(self) -> None:
        _optional("noise_multiplier", self.noise_multiplier, v.positive)
        _optional("clip_norm", self.clip_norm, v.positive)
        _optional("learning_rate", self.learning_rate, v.positive)
        # C and lr depend on no fact a config lacks (rules 1-2 of defenses.dp_defaults), so they are
        # derived here: every reader (Secure-SGD's pretraining, the claim's text) sees a value.
        # Which ones were derived is remembered, outside the fields, for the defaults note.
        derived = []
        for name, value in (("clip_norm", CLIP_NORM), ("learning_rate", LEARNING_RATE)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)
                derived.append(name)
        object.__setattr__(self, DERIVED_AT_INIT, tuple(derived))
        if self.lot_size is not None and self.sampling_rate is not None:
            raise v.invalid(
                "lot_size",
                "give lot_size or sampling_rate, not both; got "
                f"lot_size={self.lot_size!r}, sampling_rate={self.sampling_rate!r}",
            )
        _optional("lot_size", self.lot_size, lambda n, x: v.integer(n, x, minimum=1))
        _optional("sampling_rate", self.sampling_rate, v.half_open_unit)
        _optional("expected_lot_size", self.expected_lot_size, v.positive)
        _optional("target_epsilon", self.target_epsilon, v.positive)
        v.open_unit("delta", self.delta)
        v.choice("accountant", self.accountant, ACCOUNTANTS)
        _optional("epochs", self.epochs, v.positive)
        if self.target_epsilon is None and self.noise_multiplier is None:
            # Resolved before the config is digested: a run that never named σ keeps its model id.
            object.__setattr__(self, "noise_multiplier", DEFAULT_NOISE_MULTIPLIER)
        if self.epochs is None and self.target_epsilon is None:
            # With a target, None means derived from ε (no σ) or budget mode (σ given). The
            # default is remembered as derived: a defense that caps a derived length to its time
            # budget (Secure-SGD) caps this one too, and never one the user named.
            object.__setattr__(self, "epochs", DEFAULT_EPOCHS)
            object.__setattr__(self, DERIVED_AT_INIT, (*derived, "epochs"))
        _optional("final_learning_rate", self.final_learning_rate, v.positive)
        v.positive("lr_decay_epochs", self.lr_decay_epochs)
        if not 0 <= v.real("momentum", self.momentum) < 1:
            raise v.invalid("momentum", f"momentum must lie in [0, 1), got {self.momentum!r}")
        v.non_negative("weight_decay", self.weight_decay)
        if not isinstance(self.per_layer, bool):
            raise v.invalid_type("per_layer", f"per_layer must be a bool, got {self.per_layer!r}")
        v.choice("sampling", self.sampling, SAMPLING_MODES)
        _optional("pca_components", self.pca_components, lambda n, x: v.integer(n, x, minimum=1))
        _optional("pca_noise", self.pca_noise, v.positive)
        if (self.pca_components is None) != (self.pca_noise is None):
            raise v.invalid(
                "pca_components",
                "pca_components and pca_noise go together (DP-PCA needs both), got "
                f"pca_components={self.pca_components!r}, pca_noise={self.pca_noise!r}",
            )
        v.half_open_unit("pca_sampling_rate", self.pca_sampling_rate)
        v.choice("clipping_method", self.clipping_method, CLIPPING_METHODS)
        v.integer("physical_batch_size", self.physical_batch_size, minimum=1)

    def rate(self, num_members: int) -> float:
        """The sampling rate q for ``num_members`` members."""
        n = v.integer("num_members", num_members, minimum=1)
        if self.sampling_rate is not None:
            return float(self.sampling_rate)
        if self.lot_size is None:
            return derived_lot_size(n) / n
        if self.lot_size > n:
            raise v.invalid("lot_size", f"lot_size must be <= the number of members ({n}), got {self.lot_size!r}")
        return self.lot_size / n

    # -- the claim of a stored record (dpaudit.privacy.record_claims.ClaimConfig) ---------------

    @classmethod
    def from_record_config(cls, config: Mapping[str, object]) -> DPSGDConfig:
        """The DP-SGD configuration a record stored (a Secure-SGD record's other fields are left out).

        Raises:
            ValueError: σ is missing (it would otherwise read as the default σ), or a field is invalid.
        """
        if "noise_multiplier" not in config:
            raise ValueError("config is missing 'noise_multiplier', which the claim is rebuilt from")
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        try:
            # Stored JSON values: __post_init__ checks each one's type and range, naming the field.
            return cls(**{name: value for name, value in config.items() if name in names})  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise ValueError(f"config: {exc}") from None

    def _claim_rate(self, num_members: int) -> tuple[float, str]:
        # As the run planned q; the source names the field for error messages.
        if self.sampling_rate is not None:
            return float(self.sampling_rate), "config sampling_rate"
        if self.lot_size is not None:
            return self.lot_size / max(num_members, 1), f"config lot_size / members ({num_members})"
        return DEFAULT_SAMPLING_RATE, "the default sampling_rate"

    def _pca_event(self) -> dpe.DpEvent | None:
        """DP-PCA (Abadi et al. 2016, §4): a ``Gaussian(σ_p)`` event, Poisson-sampled when q_p < 1."""
        if self.pca_components is None or self.pca_noise is None:
            return None
        event: dpe.DpEvent = dpe.GaussianDpEvent(float(self.pca_noise))
        q_p = float(self.pca_sampling_rate)
        return dpe.PoissonSampledDpEvent(q_p, event) if q_p < 1.0 else event

    def _dp_event(self, *, q: float, sigma: float, steps: int) -> dpe.DpEvent:
        event = dpsgd_claim(sampling_rate=q, noise_multiplier=sigma, num_steps=steps).event
        pca = self._pca_event()
        if pca is None:
            return event
        return pca if steps == 0 else dpe.ComposedDpEvent([pca, event])

    def rebuild_claim(self, stored: PrivacyClaim, *, metrics: Mapping[str, object], num_members: int) -> RebuiltClaim:
        """The DP claim this configuration implies (Abadi et al. 2016, Algorithm 1), with q, σ and T as the run planned
        them.

        A calibrated σ or step count is checked to be the calibration's answer by evaluating ε
        on both sides of it rather than by searching again.

        Raises:
            ValueError: ``metrics`` and the configuration disagree (both values named).
        """
        n = num_members
        q, q_source = self._claim_rate(n)
        agree("metrics sampling_rate", required("metrics", metrics, "sampling_rate"), q_source, q)
        sigma_cfg, target = self.noise_multiplier, self.target_epsilon
        epochs = self.epochs
        steps_per_epoch = max(1, round(1.0 / q))
        cap = None if epochs is None else max(1, round(float(epochs) * steps_per_epoch))
        steps = v.integer("metrics.num_steps", required("metrics", metrics, "num_steps"), minimum=0)
        sigma_metric = v.positive("metrics.noise_multiplier", required("metrics", metrics, "noise_multiplier"))
        pca = self._pca_event() is not None
        dp_path = "event.events[1]" if pca and steps > 0 else "event"
        gauss_path = f"{dp_path}.event.event" if q < 1.0 else f"{dp_path}.event"
        sources = {f"{dp_path}.event.sampling_probability": q_source}
        if pca:
            sources.update(
                {
                    "event.events[0].noise_multiplier": "config pca_noise",
                    "event.events[0].event.noise_multiplier": "config pca_noise",
                    "event.events[0].sampling_probability": "config pca_sampling_rate",
                }
            )

        def eps(s: float, t: int) -> float:
            return DPClaim(event=self._dp_event(q=q, sigma=s, steps=t)).epsilon(
                delta=self.delta, accountant=self.accountant
            )

        if sigma_cfg is not None:
            sigma = float(sigma_cfg)
            agree("metrics noise_multiplier", sigma_metric, "config noise_multiplier", sigma)
            sources[f"{gauss_path}.noise_multiplier"] = "config noise_multiplier"
        else:
            # σ was calibrated to the target: the smallest σ (to the calibration's tolerance) with
            # ε ≤ target, so ε at σ is within the target and ε just below σ is beyond it.
            sigma = sigma_metric
            target_eps = float(v.positive("config.target_epsilon", target))
            lower = sigma * (1.0 - 1.001 * _CALIBRATION_TOLERANCE)
            if eps(sigma, steps) > target_eps * (1 + RELATIVE_TOLERANCE) or (
                lower > 2e-3 and eps(lower, steps) <= target_eps
            ):
                raise ValueError(
                    f"metrics noise_multiplier={format_number(sigma)} is not the noise "
                    "multiplier calibrated to config "
                    f"target_epsilon={format_number(target_eps)} over {steps} steps "
                    f"under config accountant={self.accountant!r} (a record calibrated by an "
                    "older, unsound naive/strong analysis is one: retrain it with --force)"
                )
            sources[f"{gauss_path}.noise_multiplier"] = "metrics noise_multiplier (calibrated to config target_epsilon)"
        if target is None or sigma_cfg is None:
            if steps != cap:
                raise ValueError(
                    f"metrics num_steps={steps} does not match config "
                    f"epochs={format_number(epochs)}, which is {cap} steps of "
                    f"{steps_per_epoch} per epoch"
                )
            sources[f"{dp_path}.count"] = "config epochs x steps per epoch"
        else:
            # Budget mode: as many steps as the target allows, up to the cap.
            target_eps = float(target)
            beyond = steps != cap and eps(sigma, steps + 1) <= target_eps
            if (
                steps < 1
                or eps(sigma, steps) > target_eps * (1 + RELATIVE_TOLERANCE)
                or beyond
                or (cap is not None and steps > cap)
            ):
                raise ValueError(
                    f"metrics num_steps={steps} is not the number of steps config "
                    f"target_epsilon={format_number(target_eps)} allows at "
                    f"noise_multiplier={format_number(sigma)} "
                    f"under config accountant={self.accountant!r} (a record planned by an "
                    "older, unsound naive/strong analysis is one: retrain it with --force)"
                )
            sources[f"{dp_path}.count"] = "metrics num_steps (the steps config target_epsilon allows)"
        return RebuiltClaim(claim=DPClaim(event=self._dp_event(q=q, sigma=sigma, steps=steps)), sources=sources)


# DP-SGD's claims, and Secure-SGD's (whose DP part is this configuration), are rebuilt by it.
register_claim_config("dp", DPSGDConfig.from_record_config)
