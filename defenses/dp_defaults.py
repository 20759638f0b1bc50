"""Training defaults for DP-SGD derived from public facts only (N, ε, δ), with their sources.

A user who names only a dataset, a model and a target ε should get a model worth auditing. The
values are functions of the number of members N, the target ε and δ — which the claim states, so
choosing them costs no privacy — never of the data. The five rules (clip norm, learning rate, lot
size ≈ 4·√N, epochs from the noise on the mean, the scale-invariant first layer's stride), their
sources and the measurements behind each constant are on the docs page "DP-SGD", section
"Defaults from public facts" (``docs/defenses/dpsgd.md``).

:func:`derive_dp_training` returns all four; :func:`resolve_dp_config` fills only the fields a
config left unset (``None``) and says which, so an explicit flag always wins. DP-SGD
(:func:`defenses.dpsgd.plan.plan_dpsgd`), compare grids and ``dpaudit train`` go through it, and any
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
    "COMPUTE_LIMITED",
    "SCALE_INVARIANT_FACTOR",
    "derived_learning_rate",
    "LOT_SIZE_PER_SQRT_N",
    "MIN_LOT_SIZE",
    "NOISE_PER_LOT",
    "MIN_EPOCHS",
    "MAX_EPOCHS",
    "MAX_STEPS",
    "gdp_mu",
    "DEFAULT_EPOCHS",
    "DPTrainingDefaults",
    "derive_dp_training",
    "derived_lot_size",
    "derived_epochs",
    "resolve_dp_config",
    "DERIVED_AT_INIT",
    "defaults_note",
]

#: Rule 1: C (De et al. 2022, §3.1).
CLIP_NORM = 1.0
#: Rule 2: lr with the update's norm ≤ lr·C (Sander et al. 2023, §3); doubled for a compute-limited run.
LEARNING_RATE = 0.5
COMPUTE_LIMITED = 4.0
#: Rule 5: the rate of a run whose first layer is scale-invariant, per regime of rule 2.
SCALE_INVARIANT_FACTOR = 2.0
#: Rule 3: L ≈ this × √N before rounding to a power of two (Abadi et al. 2016, §5.1; De et al. 2022, §3.2).
LOT_SIZE_PER_SQRT_N = 4.0
MIN_LOT_SIZE = 16
#: Rule 4: the largest noise on the mean, σ/L, the length may reach (Sander et al. 2023, §3).
NOISE_PER_LOT = 0.05
MIN_EPOCHS = 5.0
MAX_EPOCHS = 40.0
#: Rule 4: a compute budget in steps (public), so a default run takes minutes on a CPU.
MAX_STEPS = 500
#: Rule 4 without a target ε: the fixed length of a run whose σ is given (or defaulted).
DEFAULT_EPOCHS = 10

T = TypeVar("T")

#: The attribute (not a field: it neither enters the model id nor equality) in which a config
#: remembers the fields it derived when constructed (clip norm and learning rate need no N).
DERIVED_AT_INIT = "_derived_at_init"


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


def gdp_mu(epsilon: float, delta: float) -> float:
    """The μ of the μ-GDP mechanism that is exactly (ε, δ)-DP (Dong, Roth & Su 2022, Cor. 2.13).

    Solves δ = Φ(−ε/μ + μ/2) − e^ε·Φ(−ε/μ − μ/2) for μ by bisection (δ increases with μ).
    """
    eps = v.positive("epsilon", epsilon)
    d = v.open_unit("delta", delta)

    from scipy.special import log_ndtr

    def delta_of(mu: float) -> float:
        # e^ε·Φ(x) as exp(ε + log Φ(x)): e^ε alone overflows a float from ε ≈ 710 (a typed
        # --target-epsilon 1000), while the product itself is at most 1.
        return math.exp(float(log_ndtr(-eps / mu + mu / 2))) - math.exp(eps + float(log_ndtr(-eps / mu - mu / 2)))

    lo, hi = 1e-6, 1.0
    while delta_of(hi) < d and hi < 1e3:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if delta_of(mid) < d:
            lo = mid
        else:
            hi = mid
    return lo


def derived_epochs(*, target_epsilon: float | None, delta: float, num_members: int, lot_size: int) -> float:
    """Rule 4: whole epochs up to r²·μ²·L·N, within [``MIN_EPOCHS``, ``MAX_EPOCHS``] and ``MAX_STEPS`` steps.

    Non-decreasing in ε; ``DEFAULT_EPOCHS`` without a target.
    """
    if target_epsilon is None:
        return float(DEFAULT_EPOCHS)
    n = v.integer("num_members", num_members, minimum=1)
    lot = v.integer("lot_size", lot_size, minimum=1)
    noise_bound = _noise_bound_epochs(target_epsilon, delta, n, lot)
    step_bound = MAX_STEPS * lot / n
    return float(max(1, math.floor(min(max(noise_bound, MIN_EPOCHS), MAX_EPOCHS, step_bound))))


def _noise_bound_epochs(target_epsilon: float, delta: float, num_members: int, lot_size: int) -> float:
    return NOISE_PER_LOT**2 * gdp_mu(target_epsilon, delta) ** 2 * lot_size * num_members


def derived_learning_rate(
    *,
    target_epsilon: float | None,
    delta: float,
    num_members: int,
    lot_size: int,
    epochs: float,
    scale_invariant_first_layer: bool = False,
) -> float:
    """Rule 2: ``LEARNING_RATE``, doubled when rule 4's noise bound exceeds ``epochs`` ``COMPUTE_LIMITED``-fold.

    With ``scale_invariant_first_layer`` (rule 5) the result is multiplied by
    ``SCALE_INVARIANT_FACTOR``, squared for a compute-limited run.
    """
    factor = SCALE_INVARIANT_FACTOR if scale_invariant_first_layer else 1.0
    if target_epsilon is None:
        return LEARNING_RATE * factor
    bound = _noise_bound_epochs(
        target_epsilon,
        delta,
        v.integer("num_members", num_members, minimum=1),
        v.integer("lot_size", lot_size, minimum=1),
    )
    if bound >= COMPUTE_LIMITED * v.positive("epochs", epochs):
        return 2 * LEARNING_RATE * factor * factor
    return LEARNING_RATE * factor


def derive_dp_training(
    *,
    num_members: int,
    target_epsilon: float | None,
    delta: float,
    input_shape: Sequence[int] | None = None,
    model: str | None = None,
) -> DPTrainingDefaults:
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
    epochs = derived_epochs(target_epsilon=target_epsilon, delta=d, num_members=n, lot_size=lot)
    return DPTrainingDefaults(
        lot_size=lot,
        sampling_rate=lot / n,
        learning_rate=derived_learning_rate(
            target_epsilon=target_epsilon, delta=d, num_members=n, lot_size=lot, epochs=epochs
        ),
        epochs=epochs,
        clip_norm=CLIP_NORM,
        num_members=n,
        target_epsilon=None if target_epsilon is None else float(target_epsilon),
        delta=d,
    )


def _rate_lot(rate: float | None, num_members: int) -> int:
    """The lot q·N of a config that sets q (one setting neither q nor L has L filled in before this is read)."""
    if rate is None:
        raise v.invalid("sampling_rate", "sampling_rate or lot_size must be set, got neither")
    return max(1, round(float(rate) * num_members))


def resolve_dp_config(
    config: T, *, num_members: int, scale_invariant_first_layer: bool = False
) -> tuple[T, tuple[str, ...]]:
    """``config`` with its unset DP-SGD fields filled by :func:`derive_dp_training`, and their names.

    Fills ``lot_size`` when neither it nor ``sampling_rate`` is given, ``learning_rate`` and
    ``clip_norm`` when ``None``, and ``epochs`` when ``None`` unless the config is in budget
    mode (a target ε with a fixed σ: train until the budget is spent). Idempotent: a resolved
    config comes back unchanged with no names. Works on any dataclass with these fields
    (DP-SGD's config and Secure-SGD's, which extends it); its type is kept.

    Args:
        config: a frozen dataclass with the DP-SGD fields.
        num_members: N.
        scale_invariant_first_layer: the model's first layer is normalised by its own scale
            (rule 5; Secure-SGD's ``normalize`` control): a derived learning rate is raised.

    Returns:
        (resolved config, names of the fields that were derived).
    """
    n = v.integer("num_members", num_members, minimum=1)
    target: float | None = getattr(config, "target_epsilon", None)
    defaults = derive_dp_training(num_members=n, target_epsilon=target, delta=float(getattr(config, "delta", 1e-5)))
    fills: dict[str, int | float] = {}
    if getattr(config, "lot_size", None) is None and getattr(config, "sampling_rate", None) is None:
        fills["lot_size"] = defaults.lot_size
    if getattr(config, "clip_norm", None) is None:
        fills["clip_norm"] = defaults.clip_norm
    budget_mode = target is not None and getattr(config, "noise_multiplier", None) is not None
    if getattr(config, "epochs", None) is None and not budget_mode:
        # The length follows the lot size that will run, the user's if given (rule 4).
        rate = getattr(config, "sampling_rate", None)
        lot = fills.get("lot_size") or getattr(config, "lot_size", None) or _rate_lot(rate, n)
        fills["epochs"] = derived_epochs(
            target_epsilon=target, delta=defaults.delta, num_members=n, lot_size=min(int(lot), n)
        )
    earlier = tuple(getattr(config, DERIVED_AT_INIT, ()))
    if getattr(config, "learning_rate", None) is None or "learning_rate" in earlier:
        # Derived at construction without N (LEARNING_RATE); now N, L and the length are known.
        rate = getattr(config, "sampling_rate", None)
        run_lot = fills.get("lot_size") or getattr(config, "lot_size", None) or _rate_lot(rate, n)
        run_epochs = fills.get("epochs", getattr(config, "epochs", None))
        if run_epochs is None:
            lr = LEARNING_RATE * (SCALE_INVARIANT_FACTOR if scale_invariant_first_layer else 1.0)
        else:
            lr = derived_learning_rate(
                target_epsilon=target,
                delta=defaults.delta,
                num_members=n,
                lot_size=min(int(run_lot), n),
                epochs=float(run_epochs),
                scale_invariant_first_layer=scale_invariant_first_layer,
            )
        if lr != getattr(config, "learning_rate", None):
            fills["learning_rate"] = lr
    if not fills and not earlier:
        return config, ()
    # replace() builds a fresh config whose fields are all set, so it remembers nothing derived:
    # resolving again says nothing.
    order = ("lot_size", "learning_rate", "epochs", "clip_norm")
    return dataclasses.replace(config, **fills), tuple(k for k in order if k in fills or k in earlier)  # type: ignore[type-var]


_FLAGS = {
    "lot_size": "--lot-size",
    "learning_rate": "--learning-rate",
    "epochs": "--epochs",
    "clip_norm": "--clip-norm",
}


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
    facts = f"N={num_members}, " + (
        f"epsilon={target:g}, delta={getattr(config, 'delta', 0):g}" if target is not None else "no target epsilon"
    )
    flags = ", ".join(_FLAGS[name] for name in ("lot_size", "learning_rate", "epochs", "clip_norm") if name in derived)
    return f"defaults: {', '.join(parts)} — derived from {facts}; pass {flags} to override"
