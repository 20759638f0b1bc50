"""Training defaults for DP-SGD derived from public facts only (N, ε, δ), with their sources.

A user who names only a dataset, a model and a target ε should get a model worth auditing.
The values below are not tuned on anyone's data at run time: they are functions of the number
of members N, the target ε and δ, which are public (the claim states them), so choosing them
costs no privacy. Input shape and model are accepted for the same reason but no rule uses them
yet: the rules act on the clipped update, whose scale C·lr does not depend on the architecture.

Rules (each is what the cited work found; the constants were checked against small sweeps on
digits, Adult, MNIST and Fashion-MNIST, ``scripts/bench_defaults.py``):

1. **Clip norm C = 1.** De et al. (2022, "Unlocking high-accuracy differentially private image
   classification through scale", §3.1 and App. C) clip at C = 1 throughout and find that, once
   C is small enough that almost every per-example gradient is clipped, accuracy depends only on
   lr·C (the update becomes a mean of normalised gradients); Tramèr & Boneh (2021, "Differentially
   private learning needs better features", App. B) find the same, sweeping C in [0.1, 4].
2. **Learning rate independent of N and of the lot size.** The update divides the noisy clipped
   sum by the expected lot size, so its norm is ≤ lr·C whatever L is; Sander et al. (2023, "TAN
   without a burn", §3) show that at a fixed number of steps and fixed σ/L the training is
   unchanged when L and σ are scaled together with lr fixed. lr = ``LEARNING_RATE`` with plain
   SGD (no momentum: Papernot et al. 2021 and De et al. 2022 report none or little gain under
   DP, and our sweeps found momentum 0.9 at this step size diverging).
3. **Lot size L ≈ c·√N, rounded to a power of two, at least ``MIN_LOT_SIZE``.** Abadi et al.
   (2016, "Deep learning with differential privacy", §5.1 and Fig. 4) use lots of ≈ √N (600 for
   60,000; "a lot size of about √N"); larger lots with σ calibrated to the target trade steps for
   less noise on the mean (De et al. 2022, §3.2; Sander et al. 2023, §3) until too few steps
   remain, which is why the rule grows like √N rather than like N. Capped at N/4, so that one
   epoch still holds at least four steps.
4. **Epochs grow with ε, bounded.** At a fixed ε, a longer training needs a larger σ; the sweeps
   of De et al. (2022, Fig. 3) and Abadi et al. (2016, §5.2, "Number of epochs") find the best
   length growing with the budget. epochs = ``BASE_EPOCHS``·(ε/2)^½, clamped to
   [``MIN_EPOCHS``, ``MAX_EPOCHS``]: 21 epochs at ε = 1, 30 at ε = 2, 60 at ε = 8.
   Without a target ε (σ fixed by the user or its default) the length stays ``DEFAULT_EPOCHS``.

:func:`derive_dp_training` returns all four; :func:`resolve_dp_config` fills only the fields a
config left unset (``None``) and says which, so an explicit flag always wins. DP-SGD
(:func:`defenses.dpsgd.plan_dpsgd`), compare grids and ``dpaudit train`` go through it, and any
config with the DP-SGD fields (Secure-SGD's) can be resolved the same way.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from dpaudit import _validate as v

__all__ = [
    "CLIP_NORM",
    "LEARNING_RATE",
    "LOT_SIZE_PER_SQRT_N",
    "MIN_LOT_SIZE",
    "BASE_EPOCHS",
    "MIN_EPOCHS",
    "MAX_EPOCHS",
    "DEFAULT_EPOCHS",
    "DPTrainingDefaults",
    "derive_dp_training",
    "derived_lot_size",
    "derived_epochs",
    "resolve_dp_config",
    "defaults_note",
]

#: Rule 1: C (De et al. 2022, §3.1).
CLIP_NORM = 1.0
#: Rule 2: lr with the update's norm ≤ lr·C (Sander et al. 2023, §3).
LEARNING_RATE = 0.5
#: Rule 3: L ≈ this × √N before rounding to a power of two (Abadi et al. 2016, §5.1).
LOT_SIZE_PER_SQRT_N = 2.0
MIN_LOT_SIZE = 16
#: Rule 4: epochs at ε = 2, scaled by (ε/2)^½ and clamped.
BASE_EPOCHS = 30.0
MIN_EPOCHS = 10.0
MAX_EPOCHS = 60.0
#: Rule 4 without a target ε: the fixed length of a run whose σ is given (or defaulted).
DEFAULT_EPOCHS = 10

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class DPTrainingDefaults:
    """Derived DP-SGD hyperparameters and the public facts they came from.

    Attributes:
        lot_size: expected lot size L (rule 3).
        sampling_rate: q = L / N.
        learning_rate: lr (rule 2).
        epochs: training length in epochs (rule 4).
        clip_norm: C (rule 1).
        num_members: N, the number of members trained on.
        target_epsilon: ε the length was derived for (``None``: no target).
        delta: δ of the target.
    """

    lot_size: int
    sampling_rate: float
    learning_rate: float
    epochs: float
    clip_norm: float
    num_members: int
    target_epsilon: float | None
    delta: float


def derived_lot_size(num_members: int) -> int:
    """Rule 3: the power of two nearest to ``LOT_SIZE_PER_SQRT_N``·√N, within [``MIN_LOT_SIZE``, N/4] (and ≤ N).

    Non-decreasing in N.
    """
    n = v.integer("num_members", num_members, minimum=1)
    raw = LOT_SIZE_PER_SQRT_N * math.sqrt(n)
    size = 2 ** round(math.log2(max(raw, 1.0)))
    size = max(size, MIN_LOT_SIZE)
    size = min(size, max(1, n // 4))
    return int(min(size, n))


def derived_epochs(target_epsilon: float | None) -> float:
    """Rule 4: ``BASE_EPOCHS``·(ε/2)^½ clamped to [``MIN_EPOCHS``, ``MAX_EPOCHS``], rounded to whole epochs.

    Non-decreasing in ε; ``DEFAULT_EPOCHS`` without a target.
    """
    if target_epsilon is None:
        return float(DEFAULT_EPOCHS)
    eps = v.positive("target_epsilon", target_epsilon)
    return float(round(min(MAX_EPOCHS, max(MIN_EPOCHS, BASE_EPOCHS * math.sqrt(eps / 2.0)))))


def derive_dp_training(*, num_members: int, target_epsilon: float | None, delta: float, input_shape: Sequence[int] | None = None, model: str | None = None) -> DPTrainingDefaults:
    """DP-SGD hyperparameters from public facts only (module docstring, rules 1-4).

    Args:
        num_members: N, the number of examples trained on (public: it fixes q = L/N).
        target_epsilon: the budget ε (``None``: σ is fixed, the length is ``DEFAULT_EPOCHS``).
        delta: δ of the budget.
        input_shape: shape of one example (accepted for future rules; unused).
        model: zoo architecture name (accepted for future rules; unused).

    Returns:
        The derived values; never looks at any example.

    Raises:
        ValueError: a bad N, ε or δ (named).
    """
    n = v.integer("num_members", num_members, minimum=1)
    if target_epsilon is not None:
        v.positive("target_epsilon", target_epsilon)
    d = v.open_unit("delta", delta)
    del input_shape, model  # public too, but no rule needs them (module docstring)
    lot = derived_lot_size(n)
    return DPTrainingDefaults(
        lot_size=lot,
        sampling_rate=lot / n,
        learning_rate=LEARNING_RATE,
        epochs=derived_epochs(target_epsilon),
        clip_norm=CLIP_NORM,
        num_members=n,
        target_epsilon=None if target_epsilon is None else float(target_epsilon),
        delta=d,
    )


def resolve_dp_config(config: T, *, num_members: int) -> tuple[T, tuple[str, ...]]:
    """``config`` with its unset DP-SGD fields filled by :func:`derive_dp_training`, and their names.

    Fills ``lot_size`` when neither it nor ``sampling_rate`` is given, ``learning_rate`` and
    ``clip_norm`` when ``None``, and ``epochs`` when ``None`` unless the config is in budget
    mode (a target ε with a fixed σ: train until the budget is spent). Idempotent: a resolved
    config comes back unchanged with no names. Works on any dataclass with these fields
    (DP-SGD's config and Secure-SGD's, which extends it); its type is kept.

    Args:
        config: a frozen dataclass with the DP-SGD fields.
        num_members: N.

    Returns:
        (resolved config, names of the fields that were derived).
    """
    n = v.integer("num_members", num_members, minimum=1)
    target: float | None = getattr(config, "target_epsilon", None)
    defaults = derive_dp_training(num_members=n, target_epsilon=target, delta=float(getattr(config, "delta", 1e-5)))
    fills: dict[str, Any] = {}
    if getattr(config, "lot_size", None) is None and getattr(config, "sampling_rate", None) is None:
        fills["lot_size"] = defaults.lot_size
    if getattr(config, "learning_rate", None) is None:
        fills["learning_rate"] = defaults.learning_rate
    if getattr(config, "clip_norm", None) is None:
        fills["clip_norm"] = defaults.clip_norm
    budget_mode = target is not None and getattr(config, "noise_multiplier", None) is not None
    if getattr(config, "epochs", None) is None and not budget_mode:
        fills["epochs"] = defaults.epochs
    if not fills:
        return config, ()
    return dataclasses.replace(config, **fills), tuple(fills)  # type: ignore[type-var]


_FLAGS = {"lot_size": "--lot-size", "learning_rate": "--learning-rate", "epochs": "--epochs", "clip_norm": "--clip-norm"}


def defaults_note(config: Any, derived: Sequence[str], *, num_members: int) -> str | None:
    """One line saying which values were derived and from what (``None`` when nothing was).

    Example: ``defaults: lot size 64 (q=0.0891), lr 0.5, epochs 30, clip 1 — derived from
    N=718, epsilon=2, delta=1e-05; pass --lot-size, --learning-rate, --epochs, --clip-norm to
    override``.
    """
    if not derived:
        return None
    parts = []
    for name in ("lot_size", "learning_rate", "epochs", "clip_norm"):
        if name not in derived:
            continue
        value = getattr(config, name)
        if name == "lot_size":
            parts.append(f"lot size {value} (q={value / num_members:.4g})")
        elif name == "learning_rate":
            parts.append(f"lr {value:g}")
        elif name == "epochs":
            parts.append(f"epochs {value:g}")
        else:
            parts.append(f"clip {value:g}")
    target = getattr(config, "target_epsilon", None)
    facts = f"N={num_members}, " + (f"epsilon={target:g}, delta={getattr(config, 'delta', 0):g}" if target is not None else "no target epsilon")
    flags = ", ".join(_FLAGS[name] for name in ("lot_size", "learning_rate", "epochs", "clip_norm") if name in derived)
    return f"defaults: {', '.join(parts)} — derived from {facts}; pass {flags} to override"
