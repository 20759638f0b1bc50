"""The grey-box replay: one training on D, one on D′ = D + one auditor-chosen record, same randomness.

The training function is not changed: a :class:`torch.overrides.TorchFunctionMode` and the global
optimizer step hooks watch every torch call it makes while it runs (:func:`instrumented`, a
context manager that removes both, also when the training raises). What they see, per step:

* the **step** itself: an optimizer step that changed a parameter (the outermost of nested
  steps, so Opacus's ``DPOptimizer`` around ``SGD`` is one), or a round of in-place updates of
  parameters outside an optimizer (``p -= lr * update``);
* the **lot**: the rows of the dataset's feature tensor the step read (``features[lot]``, or one
  row at a time through a data loader);
* the **noise**: a Gaussian draw (``torch.randn``, ``torch.normal``, ``Tensor.normal_``, …)
  scaled by a constant, and its standard deviation, and the tensor it is added to — the
  mechanism's input, the pre-noise sum;
* the **normaliser**: a constant the noisy sum is divided by;
* **what reaches the parameters**: whether each update carries the noise.

The D′ run replays the D run's random draws (Cebere, Erb, Desfontaines, Bellet & Fitzsimons
2026, "Privacy in Theory, Bugs in Practice: Grey-Box Auditing of Differential Privacy
Libraries": record, then replay): a draw of the same shape gets the same values, a draw one
longer along a dimension (one more record) gets the recorded values and a fresh one for the added
record, a permutation gets the recorded one with the added record inserted where the fresh draw
put it. D′ also follows D's trajectory: each of its updates is replaced by D's after it is
recorded, so at every step both runs feed the mechanism from the same parameters, and the
pre-noise sums differ by the added record's contribution alone — its measured sensitivity. A
third run on D replays D's draws again: a different model then means state that survived the
runs in between.

What the hooks cannot see (arithmetic in NumPy or in an extension) is not guessed: a check
whose quantity was not observed says so (:mod:`attacks.audit.checks.greybox.checks`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.overrides import TorchFunctionMode

__all__ = ["Draw", "StepRecord", "Trace", "Recorder", "instrumented", "PairTrace", "run_pair"]

_MARK = "_dpaudit_greybox"  # attribute carried by tensors the recorder follows: ("gauss", std) or ("noisy", 0)

#: Random functions: their draws are recorded on D and replayed on D′.
RANDOM = frozenset(
    {
        "rand",
        "randn",
        "randint",
        "randperm",
        "rand_like",
        "randn_like",
        "randint_like",
        "normal",
        "normal_",
        "uniform_",
        "random_",
        "bernoulli",
        "bernoulli_",
        "exponential_",
        "multinomial",
        "poisson",
        "cauchy_",
        "log_normal_",
        "geometric_",
    }
)
GAUSSIAN = frozenset({"randn", "randn_like", "normal", "normal_"})
_ADD = frozenset({"add", "__add__", "__radd__", "add_", "__iadd__"})
_SUB = frozenset({"sub", "__sub__", "sub_", "__isub__"})
_MUL = frozenset({"mul", "__mul__", "__rmul__", "mul_", "__imul__", "multiply"})
_DIV = frozenset({"div", "__truediv__", "div_", "__itruediv__", "true_divide", "divide"})
_UPDATES = frozenset({"sub_", "__isub__", "add_", "__iadd__"})
#: Ops whose result is the same values (or a reshaping of them): a mark follows them.
_KEEP = frozenset(
    {
        "view",
        "view_as",
        "reshape",
        "reshape_as",
        "flatten",
        "clone",
        "detach",
        "contiguous",
        "to",
        "type_as",
        "float",
        "double",
        "squeeze",
        "unsqueeze",
        "__neg__",
        "neg",
    }
)
#: torch.nn.init's random initialisers (each fills its first argument in place).
_INIT = frozenset(
    {
        "uniform_",
        "normal_",
        "trunc_normal_",
        "kaiming_uniform_",
        "kaiming_normal_",
        "xavier_uniform_",
        "xavier_normal_",
        "orthogonal_",
        "sparse_",
    }
)
#: NumPy (or Python) data entering torch: arithmetic the hooks cannot follow.
_EXTERNAL = frozenset({"from_numpy", "as_tensor", "tensor", "asarray"})
#: Largest draw kept for replay (elements): bigger ones are drawn afresh and named as not replayed.
MAX_RECORDED = 5_000_000


@dataclass
class Draw:
    """One random call of a run, its values kept for replay when they depend on no tensor."""

    name: str
    shape: tuple[int, ...]
    value: torch.Tensor | None


@dataclass
class StepRecord:
    """What one step showed (mutable while the run goes on)."""

    kind: str = "manual"  # "optimizer" or "manual" (in-place updates of parameters)
    lot: list[int] = field(default_factory=list)
    sums: list[torch.Tensor] = field(default_factory=list)  # pre-noise sums, in the order noise was added
    stds: list[float | None] = field(default_factory=list)
    normalisers: list[float] = field(default_factory=list)
    updated: list[int] = field(default_factory=list)  # id() of each parameter updated by hand
    unnoised: list[str] = field(default_factory=list)  # shapes of updates that carried no noise
    updates: list[torch.Tensor] = field(default_factory=list)  # what reached the parameters
    update_gap: float = 0.0  # ‖what reached the parameters on D′ − on D‖ (D′ only)


@dataclass
class Trace:
    """Everything one instrumented run showed."""

    steps: list[StepRecord] = field(default_factory=list)
    draws: list[Draw] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)  # the control flow, as the hooks saw it
    gaussian_draws: int = 0
    external: int = 0  # float arrays brought into torch from outside during the run
    lots_seen: bool = False
    divergence: str | None = None  # first point where the D′ run left the D run's path
    divergence_step: int | None = None  # steps completed before it
    params_after: list[list[torch.Tensor]] = field(default_factory=list)  # D: after each optimizer step
    manual_updates: list[torch.Tensor] = field(default_factory=list)  # D: every hand update, in order
    state: dict[str, np.ndarray] = field(default_factory=dict)  # the returned model's floating tensors
    error: str | None = None


def _scalar(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, torch.Tensor) and x.numel() == 1 and not hasattr(x, _MARK):
        return float(x.detach().reshape(()))
    return None


def _mark(t: Any) -> tuple[str, float | None] | None:
    return getattr(t, _MARK, None) if isinstance(t, torch.Tensor) else None


def _set(t: Any, mark: tuple[str, float | None]) -> None:
    if isinstance(t, torch.Tensor):
        try:
            setattr(t, _MARK, mark)
        except (AttributeError, RuntimeError):  # a tensor subclass without a __dict__
            pass


def _has_tensor(values: Sequence[Any]) -> bool:
    return any(isinstance(a, torch.Tensor) for a in values)


class Recorder(TorchFunctionMode):
    """The mode that watches one run; ``reference`` (a D run's trace) makes it a replaying D′ run.

    Args:
        features: the feature tensor of the dataset the training gets (its rows are the lot).
        reference: the D run's trace to replay (``None``: record only).
        follow: replace each update by the reference's (the D′ run follows D's trajectory).
    """

    def __init__(self, features: torch.Tensor, *, reference: Trace | None = None, follow: bool = False) -> None:
        super().__init__()
        self.trace = Trace()
        self.reference = reference
        self.follow = follow and reference is not None
        self._features = features
        self._rows = int(features.shape[0])
        self._ptr = features.untyped_storage().data_ptr() if features.numel() else None
        self._current = StepRecord()
        self._phase = "collect"
        self._depth = 0
        self._versions: list[int] = []
        self._internal = False
        self._replaying = reference is not None
        self._manual_index = 0

    # -- steps -------------------------------------------------------------------------------
    def _close(self, kind: str) -> None:
        self._current.kind = kind
        self.trace.steps.append(self._current)
        self.trace.tokens.append(f"step:{kind}")
        self._current = StepRecord()
        self._phase = "collect"

    def _event(self) -> None:
        if self._phase == "update":  # a round of hand updates ends at the next thing a step does
            self._close("manual")

    def finish(self) -> None:
        if self._phase == "update":
            self._close("manual")

    def pre_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self._depth == 0:
            self._event()
            params = [p for g in optimizer.param_groups for p in g["params"]]
            self._versions = [p._version for p in params]
            for p in params:
                if p.grad is not None and _mark(p.grad) is None and p.requires_grad:
                    self._current.unnoised.append(f"gradient of a parameter of shape {tuple(p.shape)}")
        self._depth += 1

    def post_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._depth -= 1
        if self._depth != 0:
            return
        params = [p for g in optimizer.param_groups for p in g["params"]]
        if [p._version for p in params] == self._versions and len(params) == len(self._versions):
            self._current.unnoised.clear()  # a skipped step (accumulation): nothing was released
            return
        t = len(self.trace.steps)
        self._internal = True
        try:
            with torch.no_grad():
                if self.reference is None:
                    self.trace.params_after.append([p.detach().clone() for p in params])
                elif self.follow and t < len(self.reference.params_after):
                    ref = self.reference.params_after[t]
                    if [tuple(r.shape) for r in ref] == [tuple(p.shape) for p in params]:
                        gap = sum(float((p.detach().double() - r.double()).pow(2).sum()) for p, r in zip(params, ref))
                        self._current.update_gap = math.sqrt(gap)
                        for p, r in zip(params, ref):
                            p.copy_(r)
        finally:
            self._internal = False
        self._close("optimizer")

    # -- the mode ----------------------------------------------------------------------------
    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self._internal:
            return func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if name in RANDOM or (getattr(func, "__module__", "") == "torch.nn.init" and name in _INIT):
            # torch.nn.init's initialisers draw inside Python, where this mode no longer sees them: one draw each.
            return self._draw(func, name, args, kwargs)
        if name == "__getitem__" and args and self._is_features(args[0]):
            self._lot(args[1] if len(args) > 1 else None)
            return func(*args, **kwargs)
        if name in _UPDATES and args and isinstance(args[0], nn.Parameter) and self._depth == 0:
            return self._update(func, name, args, kwargs)
        if name in _ADD:
            return self._add(func, name, args, kwargs)
        if name in _MUL or name in _DIV:
            return self._scale(func, name, args, kwargs)
        if name in _SUB:
            out = func(*args, **kwargs)
            marks = [_mark(a) for a in args[:2]]
            if any(m is not None and m[0] == "noisy" for m in marks):
                _set(out, ("noisy", 0.0))
            return out
        if name in _EXTERNAL:
            out = func(*args, **kwargs)
            if args and isinstance(args[0], np.ndarray) and args[0].dtype.kind == "f":
                self.trace.external += 1
            return out
        out = func(*args, **kwargs)
        if name in _KEEP and args and _mark(args[0]) is not None:
            _set(out, _mark(args[0]))  # type: ignore[arg-type]
        return out

    def _is_features(self, t: Any) -> bool:
        if not isinstance(t, torch.Tensor) or self._ptr is None:
            return False
        if t is self._features:
            return True
        try:
            return t.untyped_storage().data_ptr() == self._ptr and t.shape == self._features.shape
        except RuntimeError:
            return False

    def _lot(self, index: Any) -> None:
        self._event()
        self.trace.lots_seen = True
        rows: list[int]
        if isinstance(index, torch.Tensor):
            idx = index.detach()
            if idx.dtype == torch.bool:
                idx = torch.nonzero(idx).flatten()
            rows = [int(i) % self._rows for i in idx.reshape(-1).tolist()]
        elif isinstance(index, int):
            rows = [index % self._rows]
        elif isinstance(index, slice):
            rows = list(range(self._rows))[index]
        elif isinstance(index, (list, tuple)) and all(isinstance(i, int) for i in index):
            rows = [i % self._rows for i in index]
        else:
            rows = list(range(self._rows))  # an index the hooks do not read: every row, conservatively
        self._current.lot.extend(rows)

    def _draw(self, func: Callable[..., Any], name: str, args: Any, kwargs: Any) -> Any:
        self._event()
        out = func(*args, **kwargs)
        self.trace.tokens.append(f"draw:{name}")
        inplace = name.endswith("_")
        replayable = not _has_tensor(args[1:] if inplace else args) and not _has_tensor(list(kwargs.values()))
        i = len(self.trace.draws)
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else ()
        keep = replayable and isinstance(out, torch.Tensor) and out.numel() <= MAX_RECORDED
        if self.reference is None:
            self.trace.draws.append(Draw(name, shape, out.detach().clone() if keep else None))
        else:
            self.trace.draws.append(Draw(name, shape, None))
            if self._replaying and isinstance(out, torch.Tensor):
                self._replay(i, name, shape, out, keep)
        if name in GAUSSIAN and isinstance(out, torch.Tensor):
            self.trace.gaussian_draws += 1
            _set(out, ("gauss", self._std(name, args, kwargs)))
        return out

    def _replay(self, i: int, name: str, shape: tuple[int, ...], out: torch.Tensor, keep: bool) -> None:
        assert self.reference is not None
        ref = self.reference.draws[i] if i < len(self.reference.draws) else None
        if ref is None or ref.name != name:
            self._diverge(
                f"random draw #{i + 1} is {name}{list(shape)} where the run on D drew "
                + ("nothing more" if ref is None else f"{ref.name}{list(ref.shape)}")
            )
            return
        if ref.value is None or not keep:
            return  # drawn from the data (multinomial on weights, …): nothing to replay
        rv = ref.value
        with torch.no_grad():
            if tuple(rv.shape) == shape:
                out.copy_(rv)
            elif name == "randperm" and len(shape) == 1 and shape[0] == rv.shape[0] + 1:
                added = int(shape[0] - 1)
                where = int(torch.nonzero(out == added).flatten()[0])
                out.copy_(torch.cat([rv[:where], rv.new_tensor([added]), rv[where:]]))
            elif len(shape) == rv.dim() and all(a >= b for a, b in zip(shape, rv.shape)):
                # More rows (the added record, or its copies): the recorded prefix, the rest fresh.
                out[tuple(slice(0, s) for s in rv.shape)].copy_(rv)
            else:
                self._diverge(
                    f"random draw #{i + 1} ({name}) has shape {list(shape)} where the run on D's had {list(rv.shape)}"
                )

    def _diverge(self, what: str) -> None:
        if self.trace.divergence is None:
            self.trace.divergence = f"{what} (at step {len(self.trace.steps) + 1})"
            self.trace.divergence_step = len(self.trace.steps)
        self._replaying = False

    @staticmethod
    def _std(name: str, args: Any, kwargs: Any) -> float | None:
        if name in ("randn", "randn_like"):
            return 1.0
        if name == "normal":
            std = kwargs.get("std", args[1] if len(args) > 1 else 1.0)
        else:  # normal_(self, mean=0, std=1)
            std = kwargs.get("std", args[2] if len(args) > 2 else 1.0)
        return _scalar(std)

    def _add(self, func: Callable[..., Any], name: str, args: Any, kwargs: Any) -> Any:
        a, b = (args[0], args[1]) if len(args) > 1 else (args[0], kwargs.get("other"))
        ma, mb = _mark(a), _mark(b)
        gauss = [m for m in (ma, mb) if m is not None and m[0] == "gauss"]
        if len(gauss) == 1 and isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            self._event()
            noise_mark, other = (ma, b) if ma is not None and ma[0] == "gauss" else (mb, a)
            assert noise_mark is not None
            if _mark(other) is None:  # the mechanism's input: the pre-noise sum
                self._current.sums.append(other.detach().double().clone())
                self._current.stds.append(noise_mark[1])
                self.trace.tokens.append(f"noise:{list(other.shape)}")
            out = func(*args, **kwargs)
            _set(out, ("noisy", 0.0))
            return out
        out = func(*args, **kwargs)
        if len(gauss) == 2:
            stds = [m[1] for m in gauss if m[1] is not None]
            _set(out, ("gauss", math.sqrt(sum(s * s for s in stds)) if len(stds) == 2 else None))
        elif any(m is not None and m[0] == "noisy" for m in (ma, mb)):
            _set(out, ("noisy", 0.0))
        return out

    def _scale(self, func: Callable[..., Any], name: str, args: Any, kwargs: Any) -> Any:
        out = func(*args, **kwargs)
        if len(args) < 2:
            return out
        a, b = args[0], args[1]
        ma, mb = _mark(a), _mark(b)
        if ma is not None and mb is None:
            mark, factor = ma, _scalar(b)
        elif mb is not None and ma is None and name in _MUL:
            mark, factor = mb, _scalar(a)
        else:
            return out
        if mark[0] == "gauss":
            std = mark[1]
            if factor is None or std is None:
                _set(out, ("gauss", None))
            else:
                _set(out, ("gauss", std / abs(factor) if name in _DIV else std * abs(factor)))
        else:
            if name in _DIV and factor is not None:
                self._current.normalisers.append(factor)
            _set(out, ("noisy", 0.0))
        return out

    def _update(self, func: Callable[..., Any], name: str, args: Any, kwargs: Any) -> Any:
        p, value = args[0], args[1] if len(args) > 1 else kwargs.get("other")
        if self._phase == "update" and id(p) in self._current.updated:
            self._close("manual")
        self._phase = "update"
        self._current.updated.append(id(p))
        if _mark(value) is None:
            self._current.unnoised.append(f"update of a parameter of shape {tuple(p.shape)}")
        self.trace.tokens.append(f"update:{list(p.shape)}")
        k = self._manual_index
        self._manual_index += 1
        if isinstance(value, torch.Tensor):
            v = value.detach()
            self._current.updates.append(v.double().clone())
            if self.reference is None:
                self.trace.manual_updates.append(v.clone())
            elif self.follow and k < len(self.reference.manual_updates):
                ref = self.reference.manual_updates[k]
                if ref.shape == v.shape:
                    self._current.update_gap = math.sqrt(
                        self._current.update_gap**2 + float((v.double() - ref.double()).pow(2).sum())
                    )
                    args = (p, ref, *args[2:])
        return func(*args, **kwargs)


@contextlib.contextmanager
def instrumented(recorder: Recorder) -> Iterator[Recorder]:
    """Runs the block under ``recorder`` and the global optimizer step hooks; both removed on exit, also on errors."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    pre = register_optimizer_step_pre_hook(recorder.pre_step)
    post = register_optimizer_step_post_hook(recorder.post_step)
    try:
        with recorder:
            yield recorder
        recorder.finish()
    finally:
        pre.remove()
        post.remove()


@dataclass(frozen=True)
class PairTrace:
    """The three runs: on D, on D′ = D + the added record (replayed, following D), on D again (replayed)."""

    d: Trace
    d_added: Trace
    d_again: Trace
    records: int  # |D|; the added record is row ``records`` of D′
    seconds: float


def _state(model: Any) -> dict[str, np.ndarray]:
    if not isinstance(model, nn.Module):
        return {}
    return {
        k.removeprefix("_module."): t.detach().double().reshape(-1).numpy().copy()
        for k, t in model.state_dict().items()
        if t.is_floating_point()
    }


def _one(
    train_fn: Callable[..., Any], dataset: Any, *, seed: int, reference: Trace | None, follow: bool, label: str
) -> Trace:
    from dpaudit.callables import UserCodeFailed, call_user, describe_exception

    recorder = Recorder(dataset.features, reference=reference, follow=follow)
    try:
        with instrumented(recorder):
            model = call_user(train_fn, dataset, seed=seed, label=label)
    except UserCodeFailed as exc:
        recorder.trace.error = str(exc)
        return recorder.trace
    except Exception as exc:  # third-party code
        recorder.trace.error = f"{label} raised {describe_exception(exc)}"
        return recorder.trace
    recorder.trace.state = _state(model)
    return recorder.trace


def run_pair(
    train_fn: Callable[..., Any], base: Any, added: Any, *, seed: int, label: str, again: bool = True
) -> PairTrace:
    """Trains on ``base`` (D), on ``added`` (D′, one more record, last), and on D again, all with the same seed.

    Args:
        train_fn: ``train(dataset, *, seed)`` (third-party code, run through
            :func:`dpaudit.callables.call_user`).
        base: D (an ``ArrayDataset``).
        added: D′: D's rows, then one more.
        seed: the one seed of the three runs.
        label: how messages name the training function.
        again: also train on D a second time (the state check's run); ``False``: ``d_again`` is ``d``.
    """
    import time

    started = time.process_time()
    d = _one(train_fn, base, seed=seed, reference=None, follow=False, label=label)
    d_added = _one(train_fn, added, seed=seed, reference=d, follow=True, label=label)
    d_again = _one(train_fn, base, seed=seed, reference=d, follow=False, label=label) if again else d
    return PairTrace(d=d, d_added=d_added, d_again=d_again, records=len(base), seconds=time.process_time() - started)
