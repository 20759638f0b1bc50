"""DP-SGD with the moments accountant, and DP-PCA preprocessing (Abadi et al. 2016): the one training loop.

Implements Algorithm 1 of Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar & Zhang, "Deep
Learning with Differential Privacy" (CCS 2016):

1. **Lots.** Each step draws a lot by Poisson sampling: every member is included
   independently with probability q = L/N (§3.1, "Lots"; the lot size varies), its coin a
   keyed hash of its sample id (:mod:`defenses.dpsgd.sampling`), so a neighbouring dataset
   draws the same lots up to its one record. A
   fixed-size shuffling mode exists only as an explicitly labelled option
   (``sampling="shuffle-non-private-accounting"``): the accounting assumes Poisson
   sampling, so its claim says the guarantee does not strictly hold.
2. **Clip.** Each example's gradient is clipped to L2 norm C (``clip_norm``), or each layer
   to C_l = C/√(#layers) with ``per_layer`` (§3.1 "Per-layer and time-dependent
   parameters"), computed without per-example gradients by :mod:`defenses.clipping`.
3. **Noise.** The clipped sum gets N(0, σ²C²I) once per lot (σ = ``noise_multiplier``; with
   per-layer clipping C is the total sensitivity √(Σ C_l²)), and is divided by the *public*
   expected lot size q·N — never the realised lot size, which depends on the data.
4. **Descend.** Plain or momentum SGD (momentum only post-processes the released noisy
   gradients), with the paper's schedule: linear decay from ``learning_rate`` to
   ``final_learning_rate`` over ``lr_decay_epochs`` epochs, then constant (§5.1).

**Budget** (:mod:`defenses.dpsgd.plan`): :func:`~defenses.dpsgd.plan.plan_dpsgd` decides how
a run spends ``target_epsilon`` and says so before training. The record's claim is built from
the steps actually taken (counted, not planned).

**Defaults.** Lot size, learning rate, clip norm and (with a target and no σ) the number of
epochs that the user left unset are derived from public facts only — N, ε, δ — by
:mod:`defenses.dp_defaults` (each rule with its source there); :func:`plan_dpsgd` and
:func:`train_dpsgd` resolve them first and say which on stderr, and the record stores the
resolved values, so its id and claim are those of a run that named them.

**DP-PCA** (:mod:`defenses.dpsgd.pca`, §4) fills the model's projection before training.

**The release hook.** What one step releases — steps 2 and 3 — is a :class:`Release` built by
``release=`` (default :class:`ClippedRelease`). A defense that trains through this loop with
another mechanism passes its own (Secure-SGD's reproduction of its authors' batch clipping,
:mod:`defenses.noise_layer.authors`); lots, schedule, optimiser, seed streams, hooks and record
stay this loop's.

**The neighbouring replay** (:func:`defenses.dpsgd.replay.replay_dpsgd`, docs/audits/replay.md): ``observer=`` (a
:class:`StepObserver`) sees each step's clipped sum before the noise, with the lot's sample ids,
and ``pca_observer=`` DP-PCA's covariance; without them the loop pays one ``None`` check per step.

**White-box hooks** (for audits in the threat model of §2: the adversary sees every update):

* ``on_step(step_index, noisy_update, lot_size)`` receives, after every step, the released
  quantity Σ_i clip(g_i) + N(0, σ²C²I) as ``{parameter name: tensor}`` (before division by
  the expected lot size) and the realised lot size. The tensors are fresh and not reused.
* ``canary_gradient(step_index) -> {name: tensor} | flat tensor | None`` injects an extra
  per-step "gradient canary" (Nasr et al. 2021, "Adversary Instantiation", §4; Jagielski et
  al. 2020) into the clipped sum *before* the noise. It is clipped exactly like one
  example's gradient (flat or per layer), so it is one more record under the same claim.
  A flat tensor is split over parameters in :func:`parameter_names` order.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from defenses._common import build_record, bundle_for_members
from defenses.dpsgd.config import DPSGDConfig
from defenses.dpsgd.pca import PCAObserver, dp_pca, find_projection
from defenses.dpsgd.plan import DPSGDPlan, announce_plan, learning_rate_at, plan_dpsgd, resolve_config, run_claim
from defenses.dpsgd.release import (
    ClippedRelease,
    Release,
    ReleaseFactory,
    StepObserver,
    noisy_clipped_sum,
    parameter_names,
)
from defenses.dpsgd.sampling import keyed_uniforms, poisson_lot
from dpaudit import _validate as v
from dpaudit.checkpoint import Checkpointer, checkpointer, global_rng_state, restore_global_rng
from dpaudit.data import ArrayDataset
from dpaudit.models import build_model
from dpaudit.privacy.claims import PrivacyClaim, dpsgd_claim
from dpaudit.progress import Progress
from dpaudit.results.record import TrainedModel
from dpaudit.robustness.noise import is_randomized
from dpaudit.seeding import derive_seed, torch_generator
from dpaudit.train_request import TrainRequest
from dpaudit.training import check_loss, evaluate

__all__ = [
    "DPSGDTrainer",
    "train_dpsgd",
    "Release",
    "ReleaseFactory",
    "ClippedRelease",
    "noisy_clipped_sum",
    "parameter_names",
    "poisson_lot",
    "keyed_uniforms",
    "StepObserver",
    "load_initial_state",
]

OnStep = Callable[[int, dict[str, torch.Tensor], int], None]
CanaryGradient = Callable[[int], "dict[str, torch.Tensor] | torch.Tensor | None"]
OnEpoch = Callable[[int, nn.Module], None]


def load_initial_state(model: nn.Module, state: Mapping[str, torch.Tensor]) -> None:
    """Loads ``state`` into ``model`` strictly, or says which names or shapes disagree.

    Raises:
        ValueError: the state does not fit the architecture (missing, unexpected or
            mis-shaped entries, named).
    """
    if not isinstance(state, Mapping):
        raise v.invalid_type(
            "initial_state",
            f"initial_state must be a mapping of parameter names to tensors, got {type(state).__name__}",
        )
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = sorted(
        f"{k}: {tuple(state[k].shape)} vs {tuple(own[k].shape)}"
        for k in set(own) & set(state)
        if tuple(state[k].shape) != tuple(own[k].shape)
    )
    if missing or unexpected or shapes:
        parts = [
            f"missing {missing}" if missing else "",
            f"unexpected {unexpected}" if unexpected else "",
            f"shapes differ ({'; '.join(shapes)})" if shapes else "",
        ]
        raise v.invalid("initial_state", f"initial_state does not fit the model: {', '.join(p for p in parts if p)}")
    model.load_state_dict({k: torch.as_tensor(t) for k, t in state.items()}, strict=True)


class _Lots:
    """Draws each step's lot: Poisson (private), or fixed-size lots from a shuffle (labelled non-private)."""

    def __init__(self, ids: np.ndarray, *, sampling_rate: float, sampling: str, generator: torch.Generator) -> None:
        self.ids, self.n, self.q, self.poisson, self.generator = (
            ids,
            len(ids),
            sampling_rate,
            sampling == "poisson",
            generator,
        )
        self.order: list[torch.Tensor] = []

    def draw(self) -> torch.Tensor:
        if self.poisson:
            return poisson_lot(self.ids, self.q, generator=self.generator)
        # A shuffle is positional: one record more or less changes every fixed-size lot, so this
        # mode does not respect add/remove (its claim says so; the replay reports it).
        if not self.order:
            size = max(1, round(self.q * self.n))
            self.order = list(torch.randperm(self.n, generator=self.generator).split(size))
            if len(self.order) > 1 and len(self.order[-1]) < size:
                self.order.pop()  # fixed-size lots only
        return self.order.pop(0)


@dataclass
class _Hooks:
    """The white-box and training hooks of :func:`train_dpsgd` (module docstring)."""

    on_step: OnStep | None = None
    canary_gradient: CanaryGradient | None = None
    on_epoch: OnEpoch | None = None
    after_step: Callable[[int, nn.Module], None] | None = None
    observer: StepObserver | None = None


@dataclass
class _Tally:
    """What the loop counted: steps taken, lot sizes, canary steps, the summed loss."""

    steps_taken: int = 0
    lot_sizes: list[int] = field(default_factory=list)
    canary_steps: int = 0
    loss_total: float = 0.0
    loss_count: int = 0
    # Per completed epoch (the record's "history"): steps so far, the epoch's mean training loss, test accuracy.
    history: list[dict[str, float]] = field(default_factory=list)

    @property
    def loss_mean(self) -> float:
        return self.loss_total / max(self.loss_count, 1)

    def close_epoch(self, model: nn.Module, *, test: ArrayDataset | None, device: torch.device) -> None:
        """Epoch-end bookkeeping: the epoch's mean loss (on the parameters before each of its steps) and, when a
        test split is given, the model's test accuracy now — under a forked RNG, so the run's draws are unchanged."""
        before_total = sum(h["loss_total"] for h in self.history)
        before_count = sum(h["loss_count"] for h in self.history)
        entry = {
            "steps": float(self.steps_taken),
            "loss_total": self.loss_total - before_total,
            "loss_count": float(self.loss_count - before_count),
        }
        # A randomized model (a noise layer) would draw its noise for the evaluation: left out. So is the one-example
        # placeholder test split of the audit trainers (bundle_for_members): nothing to learn from it, and the
        # grey-box replay that watches those trainings should see the training alone.
        if test is not None and len(test) > 1 and not is_randomized(model):
            with torch.random.fork_rng(devices=[]):
                entry["test_accuracy"] = evaluate(model, test.features, test.labels, device=device)["accuracy"]
            model.train()
        self.history.append(entry)

    def history_metrics(self, num_test: int) -> dict[str, list[float] | int]:
        """The history as the record stores it (empty for a run shorter than an epoch)."""
        if not self.history:
            return {}
        out: dict[str, list[float] | int] = {
            "epoch": [float(i + 1) for i in range(len(self.history))],
            "steps": [float(h["steps"]) for h in self.history],
            "train_loss": [h["loss_total"] / max(h["loss_count"], 1.0) for h in self.history],
        }
        if all("test_accuracy" in h for h in self.history):
            out["test_accuracy"] = [h["test_accuracy"] for h in self.history]
            out["test_examples"] = num_test
        return out


@dataclass
class _Resume:
    """What a checkpoint of the loop holds besides the model and optimiser (:mod:`dpaudit.checkpoint`).

    Attributes:
        checkpoint: where and how often the loop's state is saved.
        generators: the seeded streams the loop draws from (lots, noise), by name.
        stateful: the caller's hooks' own state across steps (``state_dict``/``load_state_dict``;
            Secure-SGD's noise schedule), or ``None``.
    """

    checkpoint: Checkpointer
    generators: dict[str, torch.Generator]
    stateful: Any = None

    def state(self, model: nn.Module, opt: torch.optim.Optimizer, lots: _Lots, tally: _Tally) -> dict[str, Any]:
        return {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "generators": {name: g.get_state() for name, g in self.generators.items()},
            "global_rng": global_rng_state(),
            # The steps composed so far are the accountant's state: the claim is built from them.
            "tally": dataclasses.asdict(tally),
            "lots_order": list(lots.order),
            "hooks": self.stateful.state_dict() if self.stateful is not None else {},
        }

    def restore(self, model: nn.Module, opt: torch.optim.Optimizer, lots: _Lots, tally: _Tally) -> int:
        """Loads the last checkpoint, if any, into the loop's objects; returns the steps it had finished."""
        resumed = self.checkpoint.resume()
        if resumed is None:
            return 0
        state = resumed.state
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        for name, g in self.generators.items():
            g.set_state(state["generators"][name])
        restore_global_rng(state["global_rng"])
        for name, value in state["tally"].items():
            setattr(tally, name, value)
        lots.order = list(state["lots_order"])
        if self.stateful is not None:
            self.stateful.load_state_dict(state["hooks"])
        return resumed.step


def _initial_model(
    request: TrainRequest[DPSGDConfig],
    members: ArrayDataset,
    *,
    initial_state: Mapping[str, torch.Tensor] | None,
    pca_observer: PCAObserver | None = None,
) -> nn.Module:
    """The seeded (or given) initial model, with DP-PCA's projection filled in (``request`` resolved)."""
    bundle, config, seed = request.bundle, request.config, request.seed
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(derive_seed(seed, "init"))  # inside fork_rng: global state restored after
        model = build_model(
            request.model_name, input_shape=bundle.input_shape, num_classes=bundle.num_classes, **request.model_options
        )
    if initial_state is not None:
        load_initial_state(model, initial_state)
    if config.pca_components is not None:
        matrix = dp_pca(
            members.features,
            num_components=config.pca_components,
            noise=float(config.pca_noise),  # type: ignore[arg-type]
            sampling_rate=config.pca_sampling_rate,
            generator=torch_generator(seed, "pca"),
            ids=members.ids.numpy(),
            observer=pca_observer,
        )
        find_projection(model).set(matrix)
    return model


def _run_steps(
    model: nn.Module,
    mechanism: Release,
    members: ArrayDataset,
    *,
    config: DPSGDConfig,
    plan: DPSGDPlan,
    lots: _Lots,
    hooks: _Hooks,
    bar: Progress,
    device: torch.device,
    resume: _Resume | None = None,
    test: ArrayDataset | None = None,
) -> _Tally:
    """Algorithm 1's loop: per step a lot, its release, the schedule's learning rate, one optimiser step.

    With ``resume``, it starts from the last checkpoint (when one exists) and saves one at most
    every checkpoint interval.
    """
    params = mechanism.parameters()
    assert config.learning_rate is not None  # resolve_config derives it before any run
    opt = torch.optim.SGD(
        list(params.values()), lr=config.learning_rate, momentum=config.momentum, weight_decay=config.weight_decay
    )
    x, y = members.features.to(device), members.labels.to(device)
    tally = _Tally()
    start = resume.restore(model, opt, lots, tally) if resume is not None else 0
    if start:
        bar.update(start, loss=tally.loss_mean)
    for step in range(start, plan.num_steps):
        lot = lots.draw().to(device)
        canary = hooks.canary_gradient(step) if hooks.canary_gradient is not None else None
        tally.canary_steps += canary is not None
        if hooks.observer is not None:
            _observe(mechanism, hooks.observer, step, members.ids, lot, model)
        update, loss_sum = mechanism(x, y, lot, canary=canary)
        lr = learning_rate_at(config, step / plan.steps_per_epoch)
        # The loss is computed on the parameters before this step's update: NaN here means the
        # previous steps diverged, and nothing of this run may become a record.
        check_loss(loss_sum, step=step, epoch=step // plan.steps_per_epoch, learning_rate=lr, hint="or --clip-norm")
        tally.loss_total += loss_sum
        tally.loss_count += int(lot.numel())
        if hooks.on_step is not None:  # the released sum itself, before the division by L
            hooks.on_step(
                step, {name: t.detach() * plan.expected_lot_size for name, t in update.items()}, int(lot.numel())
            )
        for group in opt.param_groups:
            group["lr"] = lr
        for name, p in params.items():
            p.grad = update[name]
        opt.step()
        if hooks.after_step is not None:
            hooks.after_step(step, model)
        tally.steps_taken += 1
        tally.lot_sizes.append(int(lot.numel()))
        bar.update(1, loss=tally.loss_mean)
        if tally.steps_taken % plan.steps_per_epoch == 0:
            tally.close_epoch(model, test=test, device=device)
        if hooks.on_epoch is not None and tally.steps_taken % plan.steps_per_epoch == 0:
            hooks.on_epoch(tally.steps_taken // plan.steps_per_epoch - 1, model)
            model.train()
        if resume is not None:
            resume.checkpoint.maybe_save(step + 1, functools.partial(resume.state, model, opt, lots, tally))
    for p in params.values():
        p.grad = None
    return tally


def _observe(
    mechanism: Release, observer: StepObserver, step: int, ids: Any, lot: torch.Tensor, model: nn.Module
) -> None:
    """Points the release's pre-noise callback at ``observer`` for this step (and calls its ``before_lot``, if any)."""
    if not hasattr(mechanism, "pre_noise"):
        raise v.invalid(
            "observer",
            f"the release {type(mechanism).__name__} exposes no pre-noise value to "
            "observe (it has no pre_noise attribute)",
        )
    lot_ids = np.asarray(ids)[lot.cpu().numpy()]
    before_lot = getattr(observer, "before_lot", None)
    if before_lot is not None:
        before_lot(step, lot_ids, model)
    mechanism.pre_noise = lambda total: observer(step, total, lot_ids)


def _model_options(config: DPSGDConfig, model_options: Mapping[str, object]) -> dict[str, object]:
    """The architecture options, with DP-PCA's number of components filled in from the config."""
    options = dict(model_options)
    if config.pca_components is not None:
        given = options.setdefault("pca_components", config.pca_components)
        if given != config.pca_components:
            raise v.invalid(
                "model_options",
                f"model_options pca_components={given!r} disagrees with "
                f"config.pca_components={config.pca_components!r}",
            )
    return options


def train_dpsgd(
    request: TrainRequest[DPSGDConfig],
    /,
    *,
    on_step: OnStep | None = None,
    canary_gradient: CanaryGradient | None = None,
    on_epoch: OnEpoch | None = None,
    prepare_model: Callable[[nn.Module], None] | None = None,
    after_step: Callable[[int, nn.Module], None] | None = None,
    progress_label: str = "dpsgd",
    initial_state: Mapping[str, torch.Tensor] | None = None,
    release: ReleaseFactory = ClippedRelease,
    observer: StepObserver | None = None,
    pca_observer: PCAObserver | None = None,
    stateful: Any = None,
) -> tuple[TrainedModel, nn.Module]:
    """Trains a zoo model on the split's members with DP-SGD (+ DP-PCA).

    Args:
        request: what to train: only its split's members are trained on (N = their number); its
            config (a :class:`DPSGDConfig`) holds the hyperparameters and privacy parameters; its
            model options get ``pca_components`` filled in from the config; initialisation,
            DP-PCA, lots and noise use independent streams of its seed.
        on_step: white-box hook ``(step_index, noisy_update, lot_size)`` (module docstring).
        canary_gradient: per-step gradient canary ``step_index -> dict | flat tensor | None``.
        on_epoch: ``(epoch_index, model)`` after every ``steps_per_epoch`` steps (evaluation);
            a resumed run calls it for the epochs after its checkpoint only, so what must
            survive a resume is kept in the loop's tally, which the checkpoints hold.
        prepare_model: called once with the built model (on ``device``, after DP-PCA) before
            training, e.g. to install a noise layer (Secure-SGD).
        after_step: ``(step_index, model)`` after every optimiser step; it may only
            post-process the released parameters (e.g. rescale a layer), which costs no privacy.
        progress_label: the defense named on the progress bar (a wrapping defense passes its own).
        initial_state: parameters (and buffers) to start from instead of the seeded random
            initialisation, e.g. an auditor's crafted worst-case start (Annamalai & De
            Cristofaro 2024); loaded strictly, before DP-PCA. Public: it costs no privacy
            as long as it does not depend on the members.
        release: builds what each step releases (module docstring, "The release hook");
            default Algorithm 1's per-example clipping and Gaussian noise.
        observer: sees (and may replace) each step's pre-noise clipped sum with the lot's
            sample ids (:class:`StepObserver`; the neighbouring replay). The release must
            expose ``pre_noise`` (:class:`ClippedRelease` does).
        pca_observer: the same for DP-PCA's pre-noise covariance (:data:`defenses.dpsgd.pca.PCAObserver`).
        stateful: state the caller's hooks keep across steps (an object with ``state_dict()`` and
            ``load_state_dict()``: Secure-SGD's noise schedule), saved in the checkpoints.

    Under :func:`dpaudit.checkpoint.checkpoints_in` (every ``train_or_load``), the loop saves
    its state at most every checkpoint interval and a rerun resumes from it, ending at the same
    model (bit-identical on a CPU). A run with white-box hooks or observers (audits, the
    neighbouring replay) sees every step itself and is never resumed.

    Returns:
        The record (claim from the steps actually taken) and the trained module (eval mode).

    Raises:
        ValueError: inconsistent options (e.g. a PCA config for a model without Projection),
            or a budget that cannot be met.
    """
    started = time.monotonic()
    config = request.config
    if not isinstance(config, DPSGDConfig):
        raise v.invalid_type("config", f"config must be a DPSGDConfig, got {type(config).__name__}")
    options = _model_options(config, request.model_options)
    device = torch.device(request.device)
    members = request.bundle.all().subset(request.splits.members)
    plan = plan_dpsgd(config, num_members=len(members))
    announce_plan(plan, label=progress_label, enabled=request.progress)
    config, _ = resolve_config(config, num_members=len(members))  # the record stores the values that ran
    # What ran is what the record's id hashes: the resolved config, the options with DP-PCA's components.
    request = dataclasses.replace(request, config=config, model_options=options)
    model = _initial_model(request, members, initial_state=initial_state, pca_observer=pca_observer)
    model.to(device).train()
    if prepare_model is not None:
        prepare_model(model)
    noise_generator = torch_generator(request.seed, "noise", device=device)
    mechanism = release(model, config=config, plan=plan, generator=noise_generator)
    lots = _Lots(
        members.ids.numpy(),
        sampling_rate=plan.sampling_rate,
        sampling=config.sampling,
        generator=torch_generator(request.seed, "lots"),
    )
    hooks = _Hooks(
        on_step=on_step, canary_gradient=canary_gradient, on_epoch=on_epoch, after_step=after_step, observer=observer
    )
    resume = None
    # A run whose hooks watch every step (white-box audits, the replay) must see all of them.
    watched = any(h is not None for h in (on_step, canary_gradient, observer, pca_observer))
    what = f"{progress_label} training of {request.model_name} on {request.bundle.name}"
    ckpt = (
        None
        if watched
        else checkpointer(
            progress_label,
            what=what,
            total=plan.num_steps,
            identity=(what, repr(config), request.seed, model.state_dict(), members.ids),
        )
    )
    if ckpt is not None:
        resume = _Resume(
            checkpoint=ckpt, generators={"lots": lots.generator, "noise": noise_generator}, stateful=stateful
        )
    try:
        with Progress(
            plan.num_steps,
            f"train {progress_label} {request.model_name} on {request.bundle.name}",
            enabled=request.progress,
        ) as bar:
            tally = _run_steps(
                model,
                mechanism,
                members,
                config=config,
                plan=plan,
                lots=lots,
                hooks=hooks,
                bar=bar,
                device=device,
                resume=resume,
                test=request.bundle.test,
            )
        if resume is not None:
            resume.checkpoint.finish()
    finally:
        mechanism.close()
    model.eval()
    return _dpsgd_record(model, tally, request, plan=plan, started=started, noise_std=mechanism.noise_std), model


def _dpsgd_record(
    model: nn.Module,
    tally: _Tally,
    request: TrainRequest[DPSGDConfig],
    *,
    plan: DPSGDPlan,
    started: float,
    noise_std: float,
) -> TrainedModel:
    """The record of a finished run: its claim from the steps actually taken, never the planned ones."""
    config = request.config
    claim = run_claim(
        config, sampling_rate=plan.sampling_rate, noise_multiplier=plan.noise_multiplier, num_steps=tally.steps_taken
    )
    epsilon = claim.epsilon(delta=config.delta, accountant=config.accountant)
    if config.target_epsilon is not None and epsilon > config.target_epsilon * (1 + 1e-9):
        raise RuntimeError(
            f"internal error: DP-SGD spent epsilon={epsilon!r} > target_epsilon={config.target_epsilon!r}"
        )
    return build_record(
        request,
        defense="dpsgd",
        model=model,
        claim=claim,
        started=started,
        extra_metrics={
            "num_steps": tally.steps_taken,
            "epochs_completed": tally.steps_taken * plan.sampling_rate,
            "sampling_rate": plan.sampling_rate,
            "noise_multiplier": plan.noise_multiplier,
            "noise_std": noise_std,
            "expected_lot_size": plan.expected_lot_size,
            "mean_lot_size": float(sum(tally.lot_sizes) / max(len(tally.lot_sizes), 1)),
            "epsilon": epsilon,
            "epsilon_accountant": config.accountant,
            "delta": config.delta,
            "gradient_canary_steps": tally.canary_steps,
            "train_loss_mean": tally.loss_mean,
            # Per epoch: loss and test accuracy over training; ε per epoch is the claim's at "steps" (the report).
            **({"history": h} if (h := tally.history_metrics(len(request.bundle.test))) else {}),
        },
    )


@dataclass(frozen=True, kw_only=True)
class DPSGDTrainer:
    """The suite's DP-SGD (:func:`train_dpsgd`) as an auditable training function.

    Picklable; ``train`` follows the third-party protocol and ``__call__`` exposes the
    white-box hooks. The config must fix σ and the sampling rate (not a lot size, not a
    target ε) and a public ``expected_lot_size``, so that adding a canary changes neither
    the claim nor the normaliser (dividing by q·N with N counting the canary would itself be
    a data-dependent normaliser).

    Attributes:
        config: a :class:`defenses.dpsgd.config.DPSGDConfig`.
        model_name: zoo architecture.
        model_options: its options.
        device: where to train.
    """

    config: Any
    model_name: str = "digits-mlp"
    model_options: Mapping[str, Any] = field(default_factory=dict)
    device: str = "cpu"

    def build_model(self, dataset: ArrayDataset) -> nn.Module:
        return build_model(
            self.model_name,
            input_shape=dataset.input_shape,
            num_classes=dataset.num_classes,
            **dict(self.model_options),
        )

    def claim(self, num_members: int) -> PrivacyClaim:
        plan = plan_dpsgd(self.config, num_members=num_members)
        clip_norm = resolve_config(self.config, num_members=num_members)[0].clip_norm
        return dpsgd_claim(
            sampling_rate=plan.sampling_rate,
            noise_multiplier=plan.noise_multiplier,
            num_steps=plan.num_steps,
            description=f"DP-SGD q={plan.sampling_rate:g} sigma={plan.noise_multiplier:.4g} "
            f"T={plan.num_steps} C={clip_norm:g}",
        )

    def __call__(
        self,
        dataset: ArrayDataset,
        *,
        seed: int,
        on_step: Callable[..., None] | None = None,
        canary_gradient: Callable[[int], Any] | None = None,
        initial_state: Mapping[str, torch.Tensor] | None = None,
    ) -> nn.Module:
        bundle, splits = bundle_for_members(dataset)
        request = TrainRequest(
            bundle=bundle,
            splits=splits,
            model_name=self.model_name,
            model_options=self.model_options,
            config=self.config,
            seed=seed,
            device=self.device,
            progress=False,
        )
        _, model = train_dpsgd(
            request,
            on_step=on_step,
            canary_gradient=canary_gradient,
            initial_state=initial_state,
        )
        return model

    def train(
        self, dataset: ArrayDataset, *, seed: int, initial_state: Mapping[str, torch.Tensor] | None = None
    ) -> nn.Module:
        """The third-party protocol, with its optional ``initial_state`` (worst-case-start audits)."""
        return self(dataset, seed=seed, initial_state=initial_state)
