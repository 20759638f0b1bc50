"""Checkpoints of a training in progress, so that a rerun of the same command continues it.

A training that runs under :func:`checkpoints_in` (``dpaudit train`` and every run that trains
through :func:`dpaudit.app.runs.train.train_or_load` put it there, in
``RUN_DIR/checkpoints/<model_id>/``) asks :func:`checkpointer` for its phase's
:class:`Checkpointer` and saves, at most every :func:`interval_seconds` (45 s by default), all
that its remaining steps depend on: the model's and the optimiser's state, every random
generator it draws from (its own seeded ones and torch's, NumPy's and Python's global ones), its
step counters and what it has counted so far (DP-SGD's steps, from which the accountant composes
its claim). A rerun finds the checkpoint by the same key, restores it, says one line
(``resumed … from step k of T (checkpoint of …)``), and ends at the model an uninterrupted run
with the same seed ends at: on a CPU, bit for bit (docs/architecture.md, "Trainings resume").

Files are written with :func:`dpaudit.store.atomic_write_bytes` (a crash leaves the previous
checkpoint or none) by ``torch.save`` of tensors, numbers, strings and containers only, and read
back with ``torch.load(weights_only=True)``, which refuses anything else: a checkpoint never
unpickles an arbitrary object. A checkpoint whose fingerprint (what the training is, its
initial model and data) differs from the training asking for it is ignored, so two trainings
never resume from each other's state. A training with no scope (a library call, a shadow or a
teacher trained in a worker) checkpoints nothing.

Outside the scope nothing here costs more than one context-variable read per training.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dpaudit import _validate as v
from dpaudit.store import atomic_write_bytes, safe_stem

__all__ = [
    "CHECKPOINTS_DIR",
    "DEFAULT_SECONDS",
    "INTERVAL_ENV",
    "Checkpointer",
    "GeneratorState",
    "Resumed",
    "checkpointer",
    "checkpoints_in",
    "fingerprint",
    "global_rng_state",
    "interval_seconds",
    "remove_checkpoints",
    "restore_global_rng",
    "stage_result",
]

#: Where a run directory keeps the checkpoints of its trainings in progress (one folder per model id).
CHECKPOINTS_DIR = "checkpoints"
#: Seconds between two checkpoints of one training: long enough that writing them costs a
#: negligible share of the training (a small model's state is written in milliseconds), short
#: enough that an interruption loses under a minute of work.
DEFAULT_SECONDS = 45.0
#: The environment variable that overrides :data:`DEFAULT_SECONDS` (0: after every step; tests).
INTERVAL_ENV = "DPAUDIT_CHECKPOINT_SECONDS"
_FORMAT = 1
_SUFFIX = ".ckpt.pt"

_SCOPE: ContextVar[Path | None] = ContextVar("dpaudit_checkpoint_scope", default=None)


def interval_seconds() -> float:
    """Seconds between checkpoints: :data:`INTERVAL_ENV` when set, else :data:`DEFAULT_SECONDS`.

    Raises:
        dpaudit._validate.InvalidArgument: the variable is not a non-negative number (named).
    """
    text = os.environ.get(INTERVAL_ENV, "").strip()
    if not text:
        return DEFAULT_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds >= 0 or seconds == float("inf"):
        raise v.invalid(INTERVAL_ENV, f"{INTERVAL_ENV} must be a number of seconds >= 0, got {text!r}")
    return seconds


@contextlib.contextmanager
def checkpoints_in(directory: str | os.PathLike[str]) -> Iterator[Path]:
    """Trainings started inside keep their checkpoints in ``directory`` (one file per phase).

    Args:
        directory: the training's own folder, keyed by what it trains (its model id), so a
            rerun of the same command finds it.

    Yields:
        The directory (created when the first checkpoint is written).
    """
    path = Path(directory)
    token = _SCOPE.set(path)
    try:
        yield path
    finally:
        _SCOPE.reset(token)


def remove_checkpoints(directory: str | os.PathLike[str]) -> None:
    """Deletes a training's checkpoints (its record is written: they are no longer needed)."""
    path = Path(directory)
    shutil.rmtree(path, ignore_errors=True)
    parent = path.parent
    if parent.name == CHECKPOINTS_DIR:
        with contextlib.suppress(OSError):
            parent.rmdir()  # only when no other training's checkpoints are left in it


def fingerprint(*parts: object) -> str:
    """A digest of what identifies one training: strings, numbers, arrays, tensors and mappings of them."""
    digest = hashlib.sha256()

    def feed(part: object) -> None:
        if isinstance(part, torch.Tensor):
            t = part.detach().cpu().contiguous()
            digest.update(f"tensor{tuple(t.shape)}{t.dtype}".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        elif isinstance(part, np.ndarray):
            digest.update(f"array{part.shape}{part.dtype}".encode())
            digest.update(np.ascontiguousarray(part).tobytes())
        elif isinstance(part, Mapping):
            for key in sorted(part, key=str):
                digest.update(f"key:{key}".encode())
                feed(part[key])
        elif isinstance(part, (list, tuple)):
            digest.update(f"seq{len(part)}".encode())
            for item in part:
                feed(item)
        else:
            digest.update(f"{type(part).__name__}:{part!r}".encode())
        digest.update(b"\0")

    for part in parts:
        feed(part)
    return digest.hexdigest()


def global_rng_state() -> dict[str, Any]:
    """The global generators a training may draw from: torch's (CPU, CUDA when in use), NumPy's, Python's."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": list(torch.cuda.get_rng_state_all()) if torch.cuda.is_initialized() else [],
        # NumPy's key array as a tensor: torch.load(weights_only=True) reads no NumPy objects.
        "numpy": [str(name), torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos), int(has_gauss), cached],
        "python": random.getstate(),
    }


def restore_global_rng(state: Mapping[str, Any]) -> None:
    """Puts back what :func:`global_rng_state` saved."""
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


class GeneratorState:
    """A seeded generator a training's hook draws from, as the ``stateful`` its checkpoints keep.

    Args:
        generator: the generator (e.g. randomized smoothing's augmentation noise).
    """

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.generator.set_state(state["generator"])


def _when(stamp: float) -> str:
    return datetime.fromtimestamp(stamp, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True, kw_only=True)
class Resumed:
    """A checkpoint read back.

    Attributes:
        step: steps the training had finished when it was written.
        total: the training's steps in all.
        saved_at: when it was written (seconds since the epoch).
        state: what the training saved (tensors, numbers, strings and containers of them).
    """

    step: int
    total: int
    saved_at: float
    state: Mapping[str, Any]


class Checkpointer:
    """Saves one training phase's state at most every ``interval_s`` seconds, and reads it back.

    Args:
        path: the checkpoint file.
        what: the training in words (``dpsgd training of digits-mlp on digits``), for the resume line.
        total: the phase's steps in all.
        fingerprint: :func:`fingerprint` of what identifies the training (a checkpoint of
            another is ignored).
        interval_s: seconds between checkpoints (0: after every step).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        what: str,
        total: int,
        fingerprint: str,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.what = what
        self.total = v.integer("total", total, minimum=0)
        self.fingerprint = fingerprint
        self.interval_s = v.non_negative("interval_s", interval_s)
        self._clock = clock
        self._last = clock()

    def resume(self) -> Resumed | None:
        """The saved state of this training (said in one line on stderr), or ``None`` to start afresh.

        A file that cannot be read (from an older version, damaged outside dpaudit) or that
        belongs to another training is set aside with a line saying so, never trusted.
        """
        if not self.path.is_file():
            return None
        try:
            blob = torch.load(io.BytesIO(self.path.read_bytes()), map_location="cpu", weights_only=True)
            meta = blob["meta"]
            ok = (
                meta["format"] == _FORMAT
                and meta["fingerprint"] == self.fingerprint
                and int(meta["total"]) == self.total
                and 0 < int(meta["step"]) <= self.total
            )
        except Exception as exc:  # any unreadable file: the training starts afresh, saying why
            print(
                f"ignoring the checkpoint {self.path} ({type(exc).__name__}: {str(exc)[:120]}); "
                f"training {self.what} from the start",
                file=sys.stderr,
                flush=True,
            )
            return None
        if not ok:
            print(
                f"ignoring the checkpoint {self.path}: it is of another training; training {self.what} from the start",
                file=sys.stderr,
                flush=True,
            )
            return None
        resumed = Resumed(
            step=int(meta["step"]), total=self.total, saved_at=float(meta["saved_at"]), state=blob["state"]
        )
        # The thread count can change the last bits of a sum, and the default plan counts the cores
        # other work keeps busy: the rest of the training runs with the threads its first part ran.
        saved_threads = meta.get("threads")
        same = ""
        if isinstance(saved_threads, int) and saved_threads >= 1 and saved_threads != torch.get_num_threads():
            torch.set_num_threads(saved_threads)
            same = f", with its {saved_threads} intra-op thread{'s' if saved_threads != 1 else ''} as before"
        print(
            f"resumed {self.what} from step {resumed.step} of {resumed.total} "
            f"(checkpoint of {_when(resumed.saved_at)}{same})",
            file=sys.stderr,
            flush=True,
        )
        self._last = self._clock()
        return resumed

    def due(self) -> bool:
        """Whether the interval has passed since the last checkpoint (or the start)."""
        return self._clock() - self._last >= self.interval_s

    def save(self, step: int, state: Mapping[str, Any]) -> None:
        """Writes ``state`` as the checkpoint after ``step`` finished steps (atomically)."""
        buffer = io.BytesIO()
        meta = {
            "format": _FORMAT,
            "fingerprint": self.fingerprint,
            "what": self.what,
            "step": int(step),
            "total": self.total,
            "saved_at": time.time(),
            "threads": torch.get_num_threads(),
        }
        torch.save({"meta": meta, "state": dict(state)}, buffer)
        atomic_write_bytes(self.path, buffer.getvalue())
        self._last = self._clock()

    def finish(self) -> None:
        """Deletes the checkpoint: the phase ended (what it made is kept by its caller from here on)."""
        self.path.unlink(missing_ok=True)

    def maybe_save(self, step: int, build: Callable[[], Mapping[str, Any]]) -> bool:
        """Saves ``build()`` after ``step`` steps when :meth:`due` and steps remain; returns whether it did.

        The state is built only when it is written, so a step between checkpoints pays one clock read.
        """
        if step >= self.total or not self.due():
            return False
        self.save(step, build())
        return True


def checkpointer(phase: str, *, what: str, total: int, identity: Sequence[object]) -> Checkpointer | None:
    """The checkpointer of one training phase under the current :func:`checkpoints_in`, or ``None`` outside one.

    Args:
        phase: the phase's name (``dpsgd``, ``redistribution pretrain``); with the identity's
            digest it names the file, so phases of one name never share one.
        what: the training in words, for the resume line.
        total: the phase's steps in all.
        identity: what identifies the training (its settings, seed, initial model, data), digested
            by :func:`fingerprint` only under a scope: outside one a training pays nothing.
    """
    scope = _SCOPE.get()
    if scope is None:
        return None
    digest = fingerprint(*identity)
    # The fingerprint in the name: phases of one name within a training (PATE's teachers, when
    # they train in this process) never overwrite each other's checkpoints.
    return Checkpointer(
        scope / f"{safe_stem(phase, default='training')}-{digest[:16]}{_SUFFIX}",
        what=what,
        total=total,
        fingerprint=digest,
        interval_s=interval_seconds(),
    )


def stage_result(name: str, *, what: str, identity: Sequence[object], compute: Callable[[], Any]) -> Any:
    """A finished stage's result, kept until the training's record is written.

    The result is a tensor or a container of tensors, numbers and strings (Secure-SGD's
    redistribution vector, PATE's noisy answers).

    Under :func:`checkpoints_in`, a rerun reads the tensor back (saying so) instead of computing
    it again; outside one it is computed.

    Args:
        name: the stage, unique within the training.
        what: the stage in words, for the line said on reuse.
        identity: what determines the result (digested by :func:`fingerprint` under a scope only).
        compute: computes it.
    """
    scope = _SCOPE.get()
    if scope is None:
        return compute()
    digest = fingerprint(*identity)
    path = scope / f"{safe_stem(name, default='stage')}.result.pt"
    if path.is_file():
        try:
            blob = torch.load(io.BytesIO(path.read_bytes()), map_location="cpu", weights_only=True)
            if blob["meta"]["fingerprint"] == digest and blob["meta"]["format"] == _FORMAT:
                print(
                    f"resumed {what}: reused from the checkpoint of {_when(float(blob['meta']['saved_at']))}",
                    file=sys.stderr,
                    flush=True,
                )
                return blob["value"]
        except Exception:  # an unreadable result is computed again, below
            pass
    value = compute()
    buffer = io.BytesIO()
    meta = {"format": _FORMAT, "fingerprint": digest, "what": what, "saved_at": time.time()}
    torch.save({"meta": meta, "value": value.detach().cpu() if isinstance(value, torch.Tensor) else value}, buffer)
    atomic_write_bytes(path, buffer.getvalue())
    return value
