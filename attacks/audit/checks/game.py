"""The distinguishing game every check plays, and the worst-case start it plays from.

A check trains ``train_fn`` R times on a crafted dataset D0 (OUT) and R times on D0 plus one
canary record (IN), with auditor-chosen seeds (trial i is IN iff i is odd, its seed derived from
the battery's root seed). A statistic of each final model, fixed before the evaluated trials are
seen, gives IN and OUT scores; ε_LB follows from them at the check's confidence with the bound the
claim admits (:func:`dpaudit.privacy.audit_bounds.resolve_bound`) and a Bonferroni-paid threshold
(:func:`dpaudit.privacy.audit_procedures.audit_from_scores`), and the ceiling is what a perfect attack on
the same counts gives. Any such statistic is sound: ε_LB is a post-processing of the outputs of
the claimed mechanism on neighbouring datasets (Kairouz, Oh & Viswanath 2015, Thm 2.1).

The start (Nasr et al. 2023, "Tight Auditing of Differentially Private Machine Learning", §4,
worst-case initialisation; Annamalai & De Cristofaro 2024): the last linear layer of ``model()``
whose outputs are the classes gets a large constant on class 0's bias, so every record labelled 0
has a vanishing gradient — D0 carries no signal — while a record labelled otherwise has a gradient
of nearly constant direction for the whole training, so the final model is the last iterate of a
linear-loss DP-SGD and IN and OUT differ by (times sampled)·C against the noise.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from attacks.audit.canaries import with_canaries
from attacks.audit.checks.spec import CheckCannotRun, CheckContext, CheckEvidence
from attacks.audit.trials import TrialFailed, TrialStore, run_trials
from dpaudit.data import ArrayDataset
from dpaudit.executors.jobs import Job
from dpaudit.privacy.audit_procedures import audit_from_scores
from dpaudit.results.audit import AuditResult
from dpaudit.seeding import derive_seed

__all__ = [
    "SATURATION",
    "Game",
    "Start",
    "worst_case_start",
    "relabelled",
    "check_trial",
    "warm_worker",
    "play",
    "bound_scores",
    "sides",
    "first",
    "copies",
    "margin_game",
    "evidence",
    "claimed_sampling_rate",
    "start_for",
]

#: Added to class 0's bias (beyond the logit spread): softmax mass e^-100 on other classes, and a margin
#: that noise far above the claimed one (a reused noise vector summed coherently over the steps) rarely eats.
SATURATION = 100.0
#: Candidate thresholds of each bound (Bonferroni-paid): quantiles 5 % apart, so a threshold falls
#: just above a mass of tied OUT scores (an un-noised tensor that stays put without the canary).
NUM_THRESHOLDS = 20
#: The canary's gradient norm at the start is raised to at least this (clipping norms C up to it
#: then clip it at every step, so noise not scaled by C shows), by at most MAX_SCALE.
CANARY_GRADIENT = 50.0
MAX_SCALE = 20.0
_PREFIX = "_module."  # Opacus's GradSampleModule wrapper


@dataclass(frozen=True)
class Start:
    """The crafted start: its state (safetensors bytes for the workers), and the canary."""

    state: bytes
    canary: ArrayDataset
    zero_gradient: ArrayDataset
    num_classes: int


def relabelled(pool: ArrayDataset, ids: Sequence[int], label: int | None) -> ArrayDataset:
    """The records of ``pool`` with positions ``ids``, every label set to ``label`` (kept if ``None``)."""
    idx = torch.as_tensor(list(ids), dtype=torch.long)
    labels = pool.labels.index_select(0, idx)
    if label is not None:
        labels = torch.full_like(labels, label)
    return ArrayDataset(
        name=pool.name,
        features=pool.features.index_select(0, idx),
        labels=labels,
        ids=pool.ids.index_select(0, idx),
        num_classes=pool.num_classes,
    )


def _last_class_layer(net: nn.Module, num_classes: int) -> nn.Linear:
    layers = [
        m for m in net.modules() if isinstance(m, nn.Linear) and m.out_features == num_classes and m.bias is not None
    ]
    if not layers:
        raise CheckCannotRun(f"the model has no nn.Linear with {num_classes} outputs and a bias to saturate")
    return layers[-1]


def worst_case_start(model_fn: Callable[[], Any], pool: ArrayDataset, *, seed: int) -> Start:
    """Saturates class 0 of ``model_fn()`` on ``pool`` and picks the canary with the largest gradient.

    Candidates: a large-norm input (every feature 1, the largest input in [0, 1]) and
    a few pool records of other classes, each with its own label; the canary is the one whose
    gradient norm at the start is largest (it is clipped to C at every step it is sampled).

    Raises:
        CheckCannotRun: ``model_fn`` fails or its model has no class layer to saturate.
    """
    from dpaudit.callables import UserCodeFailed, call_user, callable_label, describe_exception

    label = callable_label(model_fn)
    try:
        net = call_user(model_fn, label=f"the model function {label}")
    except UserCodeFailed as exc:
        raise CheckCannotRun(str(exc)) from None
    except Exception as exc:  # third-party code
        raise CheckCannotRun(f"the model function {label} raised {describe_exception(exc)}") from None
    if not isinstance(net, nn.Module):
        raise CheckCannotRun(f"the model function returned a {type(net).__name__}, not a torch.nn.Module")
    k = pool.num_classes
    layer = _last_class_layer(net, k)
    rng = np.random.default_rng(derive_seed(seed, "check", "start"))
    order = rng.permutation(len(pool))
    net.eval()
    inputs = pool.features.index_select(0, torch.as_tensor(order[:64]))
    bias0 = float(layer.bias[0].detach())
    _saturate(net, layer, inputs, bias0)
    others = [int(i) for i in order if int(pool.labels[int(i)]) != 0][:6]
    blank = ArrayDataset(
        name=pool.name,
        features=torch.ones_like(pool.features[:1]),
        labels=torch.ones(1, dtype=torch.long),
        ids=torch.tensor([int(pool.ids.max()) + 1]),
        num_classes=k,
    )
    candidates = [blank] + [relabelled(pool, [i], None) for i in others]
    norms = [_gradient_norm(net, c) for c in candidates]
    canary = candidates[int(np.argmax(norms))]
    if max(norms) < CANARY_GRADIENT:
        # A canary below the clipping norm carries only its own norm per step: scale the class
        # layer (every gradient before it scales with it) so it is clipped to C at every step.
        with torch.no_grad():
            layer.weight.mul_(min(MAX_SCALE, CANARY_GRADIENT / max(norms)))
        _saturate(net, layer, inputs, bias0)
    zero = [int(i) for i in order if int(i) not in others]
    from safetensors.torch import save

    state = save({key: t.detach().clone().contiguous() for key, t in net.state_dict().items()})
    return Start(state=state, canary=canary, zero_gradient=relabelled(pool, zero[:256], 0), num_classes=k)


def _saturate(net: nn.Module, layer: nn.Linear, inputs: torch.Tensor, bias0: float) -> None:
    with torch.no_grad():
        layer.bias[0] = bias0
        logits = net(inputs)
        layer.bias[0] = bias0 + SATURATION + float(logits.max() - logits.min())


def _gradient_norm(net: nn.Module, record: ArrayDataset) -> float:
    net.zero_grad()
    nn.functional.cross_entropy(net(record.features), record.labels).backward()
    return math.sqrt(sum(float((p.grad**2).sum()) for p in net.parameters() if p.grad is not None))


# ----------------------------------------------------------------------------- one trial
def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {key.removeprefix(_PREFIX): t.detach() for key, t in model.state_dict().items() if t.is_floating_point()}


def _margin(model: nn.Module, x: torch.Tensor, label: int) -> float:
    """The canary's logit margin over class 0, in float64 where the model allows it."""
    try:
        net = copy.deepcopy(model).double().eval()
        xs = x.double()
    except Exception:  # a model that cannot be copied or cast: float32 is enough
        net, xs = model.eval(), x
    with torch.no_grad():
        out = net(xs).double().reshape(-1)
    return float(out[label] - out[0])


#: How long a training may run past the battery's budget before it is stopped and counted failed (seconds).
GRACE_SECONDS = 2.0


def _worker_stdout_to_stderr() -> None:
    """In a worker process, file descriptor 1 becomes a copy of 2, once: whatever user code (or a
    library it calls, in C) writes to stdout lands on stderr, never inside ``--json``'s object."""
    import multiprocessing

    if multiprocessing.parent_process() is None or getattr(_worker_stdout_to_stderr, "done", False):
        return
    try:
        sys.stdout.flush()
        os.dup2(2, 1)
    except (OSError, ValueError):  # no descriptors to speak of: the Python-level redirect remains
        pass
    _worker_stdout_to_stderr.done = True  # type: ignore[attr-defined]


@contextlib.contextmanager
def _time_limit(deadline: float | None) -> Iterator[None]:
    """Raises :class:`~dpaudit.callables.OutOfTime` into the code run inside once ``time.time()``
    passes ``deadline`` (SIGALRM; in the main thread only, where Python delivers signals)."""
    from dpaudit.callables import OutOfTime

    if (
        deadline is None
        or threading.current_thread() is not threading.main_thread()
        or not hasattr(signal, "setitimer")
    ):
        yield
        return

    def ring(signum: int, frame: Any) -> None:
        raise OutOfTime()

    previous = signal.signal(signal.SIGALRM, ring)
    try:
        left = deadline - time.time()
        if left <= 0:
            raise OutOfTime()
        signal.setitimer(signal.ITIMER_REAL, left)
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check_trial(
    *,
    train_fn: Any,
    dataset: ArrayDataset,
    seed: int,
    index: int,
    initial_state: bytes,
    probe: ArrayDataset | None,
    keep_state: bool,
    deadline: float | None = None,
) -> dict[str, np.ndarray]:
    """One training from the crafted start; the final model's statistics.

    The training function is third-party code, run through :func:`dpaudit.callables.call_user`:
    its prints go to stderr, and ``sys.exit``, any other ``BaseException``, a closed or replaced
    ``sys.stdout`` are this trial's failure, named after the function. A training still running at
    ``deadline`` (``time.time()``) is stopped and counted failed.

    Returns:
        ``{"seed", "margin" (the probe's logit margin, if a probe), "norm:<key>" (‖θ_T − θ_0‖ of
        every parameter; "buffer:<key>" for floating buffers), "state:<key>" (every floating
        tensor of the state dict,
        final tensor, flattened, when ``keep_state``)}``.

    Raises:
        TrialFailed: the training function failed, ran out of time or returned something unusable.
    """
    _worker_stdout_to_stderr()
    backstop = _kill_worker_after(deadline)
    try:
        return _check_trial(
            train_fn=train_fn,
            dataset=dataset,
            seed=seed,
            index=index,
            initial_state=initial_state,
            probe=probe,
            keep_state=keep_state,
            deadline=deadline,
        )
    finally:
        if backstop is not None:
            backstop.cancel()


def warm_worker() -> int:
    """Loads what a trial needs into a worker (torch, this module, the weights reader) before the
    budget starts: a worker's first imports are start-up, not the training the budget measures."""
    import dpaudit.weights  # noqa: F401 - imported for its cost

    _worker_stdout_to_stderr()
    return os.getpid()


def _kill_worker_after(deadline: float | None) -> threading.Timer | None:
    """In a worker process, a timer that ends the process :data:`GRACE_SECONDS` after ``deadline``.

    The backstop for a training stuck in one native call, which the SIGALRM of :func:`_time_limit`
    cannot interrupt; the battery sees the worker die past the deadline and counts the trial failed.
    """
    import multiprocessing

    if deadline is None or multiprocessing.parent_process() is None:
        return None
    timer = threading.Timer(max(0.0, deadline + GRACE_SECONDS - time.time()), os._exit, args=(70,))
    timer.daemon = True
    timer.start()
    return timer


def _check_trial(
    *,
    train_fn: Any,
    dataset: ArrayDataset,
    seed: int,
    index: int,
    initial_state: bytes,
    probe: ArrayDataset | None,
    keep_state: bool,
    deadline: float | None,
) -> dict[str, np.ndarray]:
    from dpaudit.callables import OutOfTime, UserCodeFailed, call_user, callable_label, describe_exception
    from dpaudit.weights import weights_from_bytes

    start = weights_from_bytes(initial_state)
    where = f"trial {index} (seed {seed}, {len(dataset)} record{'s' if len(dataset) != 1 else ''})"
    label = callable_label(train_fn)
    try:
        with _time_limit(deadline):
            model = call_user(
                train_fn,
                dataset,
                seed=seed,
                initial_state={k: t.clone() for k, t in start.items()},
                label=f"the training function {label}",
            )
            if not isinstance(model, nn.Module):
                raise TrialFailed(
                    f"the training function {label} returned a {type(model).__name__}, not a "
                    f"torch.nn.Module, in {where}",
                    index,
                    seed,
                )
            # The returned model is user code too (its forward, its state_dict).
            return call_user(
                _statistics,
                model,
                start=start,
                probe=probe,
                keep_state=keep_state,
                where=where,
                index=index,
                seed=seed,
                label=f"the model {label} returned",
            )
    except TrialFailed:
        raise
    except OutOfTime:
        raise TrialFailed(
            f"the training function {label} was stopped in {where}: it ran past the "
            f"battery's time budget (+{GRACE_SECONDS:g} s grace)",
            index,
            seed,
        ) from None
    except UserCodeFailed as exc:
        raise TrialFailed(f"{exc} in {where}", index, seed) from None
    except Exception as exc:  # third-party code
        raise TrialFailed(
            f"the training function {label} raised {describe_exception(exc)} in {where}", index, seed
        ) from None


def _statistics(
    model: nn.Module,
    *,
    start: dict[str, torch.Tensor],
    probe: ArrayDataset | None,
    keep_state: bool,
    where: str,
    index: int,
    seed: int,
) -> dict[str, np.ndarray]:
    from dpaudit.callables import describe_exception

    out: dict[str, np.ndarray] = {"seed": np.array(seed)}
    final = _state(model)
    params = {key.removeprefix(_PREFIX) for key, _ in model.named_parameters()}
    for key, t in final.items():
        before = start.get(key)
        delta = t.double() - before.double() if before is not None and before.shape == t.shape else t.double()
        # Parameters and buffers apart: a buffer (BatchNorm's statistics) follows the data un-noised.
        out[f"{'norm' if key in params else 'buffer'}:{key}"] = np.array(float(torch.linalg.vector_norm(delta)))
        if keep_state:
            out[f"state:{key}"] = t.reshape(-1).double().numpy()
    if probe is not None:
        try:
            out["margin"] = np.array(_margin(model, probe.features, int(probe.labels[0])))
        except Exception as exc:
            raise TrialFailed(
                "the returned model cannot score an input of shape "
                f"{tuple(probe.features.shape)} in {where}: {describe_exception(exc)}",
                index,
                seed,
            ) from exc
    return out


# ----------------------------------------------------------------------------- the game
@dataclass(frozen=True)
class Game:
    """One IN/OUT game: D0, the canary, the start, what each trial keeps."""

    name: str
    out_data: ArrayDataset
    canary: ArrayDataset
    start: bytes
    probe: ArrayDataset | None = None
    keep_state: bool = False


def sides(num: int) -> np.ndarray:
    """Trial i is IN iff i is odd (fixed by the index, never by an outcome)."""
    return np.arange(num) % 2 == 1


def play(ctx: CheckContext, game: Game, *, trials: int, budget_seconds: float) -> list[dict[str, np.ndarray]]:
    """Runs trials 0, 1, … of ``game`` in waves until ``trials`` or the budget; returns them in order.

    Stopping depends on elapsed time only, never on outcomes, so ε_LB stays sound. Stored trials
    of the same game (a rerun) are reused without spending the budget. Every training gets
    ``ctx.deadline``: one still running then is stopped and the check fails (:class:`TrialFailed`).
    """
    config = {
        "check": ctx.directory.name,
        "game": game.name,
        "train_fn": ctx.train_spec,
        "seed": ctx.seed,
        "records": len(game.out_data),
        "trials": trials,
    }
    store = TrialStore(ctx.directory / game.name, config, resizable=("trials",))
    canary = game.canary

    def job(i: int) -> tuple[int, Job]:
        data = with_canaries(game.out_data, canary) if i % 2 == 1 else game.out_data
        seed = derive_seed(ctx.seed, "check", ctx.directory.name, game.name, i)
        kwargs = {
            "train_fn": ctx.train_fn,
            "dataset": data,
            "seed": seed,
            "index": i,
            "initial_state": game.start,
            "probe": game.probe,
            "keep_state": game.keep_state,
            "deadline": ctx.deadline,
        }
        return i, Job(key=f"{ctx.directory.name}/{game.name}/{i}", fn=check_trial, kwargs=kwargs)

    done = 0
    while done < trials and store.done(done):
        done += 1
    if done and ctx.progress:
        print(
            f"{ctx.directory.name}: reusing {done} stored "
            f"trial{'s' if done != 1 else ''} of game {game.name!r} from "
            f"{store.path}",
            file=sys.stderr,
            flush=True,
        )
    width = 4 * max(1, getattr(ctx.executor, "workers", None) or 1)
    started, last_wave, fresh = time.monotonic(), 0.0, done
    while done < trials:
        if done > fresh and time.monotonic() - started + last_wave > budget_seconds:
            break
        if ctx.deadline is not None and time.time() + last_wave > ctx.deadline - GRACE_SECONDS and done > fresh:
            break  # the battery's own budget ends before another wave would
        wave = list(range(done, min(trials, done + width)))
        t0 = time.monotonic()
        try:
            run_trials(
                store,
                [job(i) for i in wave],
                ctx.executor,
                f"{ctx.directory.name} ({game.name}: trials {wave[0] + 1}-{wave[-1] + 1} of {trials})",
                ctx.progress,
            )
        except RuntimeError as exc:
            if ctx.deadline is None or time.time() < ctx.deadline:
                raise
            # A worker ended by its backstop (_kill_worker_after): a training stuck past the budget.
            first = wave[0]
            seed = derive_seed(ctx.seed, "check", ctx.directory.name, game.name, first)
            message = (
                f"a training of trials {first}-{wave[-1]} was stopped with its worker: "
                f"it ran past the battery's time budget (+{GRACE_SECONDS:g} s grace) in "
                "native code"
            )
            raise TrialFailed(message, first, seed) from exc
        last_wave, done = time.monotonic() - t0, wave[-1] + 1
    return [store.load(i) for i in range(done)]


def finite(scores: np.ndarray) -> np.ndarray:
    """NaN (a diverged training) as the lowest score, ±∞ clipped: a fixed post-processing, so sound."""
    s = np.asarray(scores, dtype=float)
    return np.nan_to_num(s, nan=-1e300, posinf=1e300, neginf=-1e300)


def bound_scores(
    ctx: CheckContext,
    scores: np.ndarray,
    is_in: np.ndarray,
    *,
    num_tests: int = 1,
    details: Mapping[str, object] | None = None,
) -> AuditResult:
    """ε_LB of IN/OUT scores at the check's confidence, paying ``num_tests`` (sub-games, tensors) by Bonferroni."""
    s = finite(scores)
    confidence = 1.0 - (1.0 - ctx.confidence) / num_tests
    return audit_from_scores(
        s[is_in],
        s[~is_in],
        claim=ctx.claim,
        delta=ctx.delta,
        confidence=confidence,
        bound="auto",
        strategy="bonferroni",
        num_thresholds=NUM_THRESHOLDS,
        details=details,
    )


def copies(data: ArrayDataset, n: int) -> ArrayDataset:
    """``n`` copies of the first record of ``data`` (fresh ids): every lot of them has the same statistics."""
    idx = torch.zeros(n, dtype=torch.long)
    ids = torch.arange(n, dtype=torch.long) + int(data.ids.max()) + 1_000_000
    return ArrayDataset(
        name=data.name,
        features=data.features.index_select(0, idx),
        labels=data.labels.index_select(0, idx),
        ids=ids,
        num_classes=data.num_classes,
    )


def first(data: ArrayDataset, n: int) -> ArrayDataset:
    """The first ``n`` records of ``data``."""
    return relabelled(data, range(n), None)


def margin_game(ctx: CheckContext, *, records: int, default_trials: int) -> CheckEvidence:
    """The worst-case game on ``records`` zero-gradient records: the canary's logit margin scores each trial."""
    start = start_for(ctx)
    game = Game(
        name=f"records-{records}",
        out_data=first(start.zero_gradient, records),
        canary=start.canary,
        start=start.state,
        probe=start.canary,
    )
    trials = play(ctx, game, trials=ctx.trials or default_trials, budget_seconds=ctx.budget_seconds)
    scores, is_in = np.array([float(t["margin"]) for t in trials]), sides(len(trials))
    details = {
        "records": records,
        "canary_label": int(start.canary.labels[0]),
        "statistic": "the canary's logit margin over class 0",
    }
    return evidence(ctx, scores, is_in, details=details)


def evidence(
    ctx: CheckContext, scores: np.ndarray, is_in: np.ndarray, *, num_tests: int = 1, details: Mapping[str, object]
) -> CheckEvidence:
    """ε_LB and the ceiling of one scored game (0 and 0 when a side has no trial)."""
    if is_in.sum() == 0 or (~is_in).sum() == 0:
        return CheckEvidence(epsilon_lb=0.0, ceiling=0.0, num_trials=int(is_in.size), details=details)
    r = bound_scores(ctx, scores, is_in, num_tests=num_tests)
    info = {**details, "bound": r.bound, "num_in": r.num_in, "num_out": r.num_out, "assumption": r.assumption}
    return CheckEvidence(
        epsilon_lb=r.epsilon_lb, ceiling=float(r.ceiling or 0.0), num_trials=int(is_in.size), details=info
    )


def claimed_sampling_rate(ctx: CheckContext, default: float = 0.1) -> float:
    """The Poisson rate q the claim states (its first sampled event), ``default`` if it states none."""

    def walk(node: Any) -> float | None:
        if isinstance(node, dict):
            if "sampling_probability" in node:
                return float(node["sampling_probability"])
            for value in node.values():
                found = walk(value)
                if found is not None:
                    return found
        return None

    to_dict = getattr(ctx.claim, "to_dict", None)
    found = walk(to_dict()) if callable(to_dict) else None
    return found if found is not None and 0 < found <= 1 else default


def start_for(ctx: CheckContext) -> Start:
    """The worst-case start on ``ctx``'s model and pool.

    Raises:
        CheckCannotRun: no model function.
    """
    from dpaudit.callables import UserCodeFailed, call_user, callable_label

    if ctx.model_fn is None:
        raise CheckCannotRun("no --model-fn: the worst-case start is crafted on the model's architecture")
    try:
        # The model's own forward runs here too (saturating it, measuring gradients): user code.
        return call_user(
            worst_case_start,
            ctx.model_fn,
            ctx.pool,
            seed=ctx.seed,
            label=f"the model of {callable_label(ctx.model_fn)}",
        )
    except UserCodeFailed as exc:
        raise CheckCannotRun(str(exc)) from None
