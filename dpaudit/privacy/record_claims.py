"""A record's claim rebuilt from the record's own configuration and metrics, per claim kind.

A stored record states its privacy claim beside the configuration that produced it and the
measured run (steps taken, calibrated σ, queries answered). The claim is what every ε_UB is
evaluated from, so a record whose claim says σ = 10 while its configuration ran σ = 1 must not
be audited or reported: its ε_UB would be 0.17 where the mechanism gives 3.90. Each claim kind
registers, beside its claim, how its claim follows from ``(config, metrics, number of members)``,
without torch and without the defenses (reports verify records too), and :func:`check_record_claim`
compares the rebuilt claim with the stored one, naming the first field that differs.

The DP-SGD rebuild follows the mechanism of Abadi et al. (2016, Algorithm 1) with q, σ and T
resolved as the defense plans them (a calibrated σ or step count is checked to be the
calibration's answer by evaluating ε on both sides of it, rather than re-running the search);
DP-PCA (§4) composes a ``Gaussian(σ_p)`` event, Poisson-sampled when q_p < 1. DSSGD's DP upload
is rebuilt from its parameters (Shokri & Shmatikov 2015, §5). PATE's data-dependent RDP curve
(Papernot et al. 2018, §4) cannot be rebuilt without the vote matrix: its aggregator, noise,
query counts and analysis are rebuilt from the configuration, and the ε it states is checked
against the ε the run measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dp_accounting import dp_event as dpe

from dpaudit import _validate as v
from dpaudit.privacy.claims import DPClaim, NonPrivateClaim, PrivacyClaim, dpsgd_claim
from dpaudit.registry import Registry
from dpaudit.store import thaw

__all__ = [
    "RebuiltClaim",
    "ClaimRebuilder",
    "CLAIM_REBUILDERS",
    "ClaimRebuilderSpec",
    "register_claim_rebuilder",
    "required",
    "agree",
    "format_number",
    "RELATIVE_TOLERANCE",
    "rebuild_claim",
    "check_record_claim",
    "DPSGD_DEFAULT_SAMPLING_RATE",
]

#: DP-SGD's sampling rate when a configuration gives neither a lot size nor a rate (Abadi et al.'s 600 of 60,000).
DPSGD_DEFAULT_SAMPLING_RATE = 0.01
#: Relative tolerance of the σ calibration (:func:`dpaudit.privacy.calibration.calibrate_noise_multiplier`).
_CALIBRATION_TOLERANCE = 1e-3
RELATIVE_TOLERANCE = 1e-9


@dataclass(frozen=True, kw_only=True)
class RebuiltClaim:
    """The claim a record's configuration and metrics imply.

    Attributes:
        claim: the rebuilt claim (its description is not compared: it is prose).
        sources: for a claim field (by its path in :meth:`PrivacyClaim.to_dict`, e.g.
            ``event.event.event.noise_multiplier``, or by its last name), the record field it
            was rebuilt from (e.g. ``config noise_multiplier``), for error messages.
    """

    claim: PrivacyClaim
    sources: Mapping[str, str] = field(default_factory=dict)


#: ``rebuild(stored_claim, config, metrics, num_members) -> RebuiltClaim``; raises ``ValueError``
#: naming the field when the configuration and the metrics disagree with each other.
ClaimRebuilder = Callable[[PrivacyClaim, Mapping[str, Any], Mapping[str, Any], int], RebuiltClaim]


@dataclass(frozen=True)
class ClaimRebuilderSpec:
    """How claims of one kind are rebuilt from a record.

    Attributes:
        name: the claim kind (:attr:`PrivacyClaim.kind`).
        rebuild: the rebuild function.
    """

    name: str
    rebuild: ClaimRebuilder


#: Every claim kind's rebuilder, by kind. A kind registers its rebuilder beside its claim
#: (:func:`register_claim_rebuilder`); the first lookup imports every module of
#: :mod:`dpaudit.privacy`, so this module imports none of the kinds.
CLAIM_REBUILDERS: Registry[ClaimRebuilderSpec] = Registry("claim rebuilder", argument="claim", discover=("dpaudit.privacy",))


def register_claim_rebuilder(kind: str) -> Callable[[ClaimRebuilder], ClaimRebuilder]:
    """Decorator: registers how claims of ``kind`` are rebuilt from a record's config and metrics."""

    def add(fn: ClaimRebuilder) -> ClaimRebuilder:
        CLAIM_REBUILDERS.register(ClaimRebuilderSpec(kind, fn))
        return fn

    return add


def format_number(x: Any) -> str:
    """A number as error messages print it (floats by ``:g``)."""
    return f"{x:g}" if isinstance(x, float) else repr(x) if isinstance(x, str) else str(x)


def required(where: str, data: Mapping[str, Any], key: str) -> Any:
    """``data[key]``, or a ValueError naming the record part (``where``) that lacks it."""
    if key not in data:
        raise ValueError(f"{where} is missing {key!r}, which the claim is rebuilt from")
    return data[key]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=RELATIVE_TOLERANCE, abs_tol=0.0) or a == b
    return bool(a == b)


def agree(what: str, value: Any, against: str, expected: Any) -> None:
    """Refuses ``value`` (named ``what``) unless it equals ``expected`` (named ``against``)."""
    if not _same(value, expected):
        raise ValueError(f"{what}={format_number(value)} does not match {against}={format_number(expected)}")


def rebuild_claim(stored: PrivacyClaim, *, config: Mapping[str, Any], metrics: Mapping[str, Any], num_members: int) -> RebuiltClaim:
    """The claim of kind ``stored.kind`` that ``config`` and ``metrics`` imply.

    Raises:
        ValueError: no rebuilder for the kind, a field the rebuild needs is missing, or the
            configuration and the metrics disagree (named, with both values).
    """
    if stored.kind not in CLAIM_REBUILDERS:
        raise ValueError(f"claim kind {stored.kind!r} has no registered rebuilder, so the claim cannot be checked against the config; known: {', '.join(CLAIM_REBUILDERS)}")
    return CLAIM_REBUILDERS[stored.kind].rebuild(stored, thaw(config), thaw(metrics), v.integer("num_members", num_members, minimum=0))


def _first_difference(stored: Any, rebuilt: Any, path: str) -> tuple[str, Any, Any] | None:
    if isinstance(stored, Mapping) and isinstance(rebuilt, Mapping):
        for key in [*rebuilt, *(k for k in stored if k not in rebuilt)]:
            if key == "description" and not path:
                continue
            if key not in stored or key not in rebuilt:
                return (f"{path}.{key}".lstrip("."), stored.get(key), rebuilt.get(key))
            found = _first_difference(stored[key], rebuilt[key], f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(stored, (list, tuple)) and isinstance(rebuilt, (list, tuple)):
        if len(stored) != len(rebuilt):
            return (f"{path} length".lstrip("."), len(stored), len(rebuilt))
        for i, (a, b) in enumerate(zip(stored, rebuilt)):
            found = _first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if _same(stored, rebuilt) else (path.lstrip("."), stored, rebuilt)


def check_record_claim(stored: PrivacyClaim, *, config: Mapping[str, Any], metrics: Mapping[str, Any], num_members: int) -> None:
    """Refuses a stored claim that differs from the one its record's config and metrics imply.

    Every field that ε_UB depends on is compared (numbers to a relative 1e-9); the description
    is prose and is not.

    Raises:
        ValueError: one line, ``claim FIELD=stored does not match SOURCE=rebuilt``.
    """
    rebuilt = rebuild_claim(stored, config=config, metrics=metrics, num_members=num_members)
    found = _first_difference(stored.to_dict(), rebuilt.claim.to_dict(), "")
    if found is None:
        return
    where, got, want = found
    leaf = where.rsplit(".", 1)[-1].split("[")[0]
    source = rebuilt.sources.get(where) or rebuilt.sources.get(leaf) or f"the value rebuilt from its config and metrics, {leaf}"
    raise ValueError(f"claim {where}={format_number(got)} does not match {source}={format_number(want)}")


@register_claim_rebuilder("nonprivate")
def _nonprivate(stored: PrivacyClaim, config: Mapping[str, Any], metrics: Mapping[str, Any], num_members: int) -> RebuiltClaim:
    # ε = ∞ under every accountant: nothing in the config can make it smaller. Which defenses
    # may carry it is the defense registry's business (DefenseSpec.claim_kind_for).
    return RebuiltClaim(claim=NonPrivateClaim(neighbouring=stored.neighbouring, description=stored.description))


def _dpsgd_rate(config: Mapping[str, Any], n: int) -> tuple[float, str]:
    rate, lot = config.get("sampling_rate"), config.get("lot_size")
    if rate is not None:
        return float(v.half_open_unit("config.sampling_rate", rate)), "config sampling_rate"
    if lot is not None:
        return v.integer("config.lot_size", lot, minimum=1) / max(n, 1), f"config lot_size / members ({n})"
    return DPSGD_DEFAULT_SAMPLING_RATE, "the default sampling_rate"


def _pca_event(config: Mapping[str, Any]) -> dpe.DpEvent | None:
    if config.get("pca_components") is None or config.get("authors_batch_clipping") is True:
        return None  # the authors' batch-clipping path accounts DP-SGD alone
    event: dpe.DpEvent = dpe.GaussianDpEvent(float(v.positive("config.pca_noise", required("config", config, "pca_noise"))))
    q_p = float(config.get("pca_sampling_rate", 1.0))
    return dpe.PoissonSampledDpEvent(q_p, event) if q_p < 1.0 else event


def _dp_event(config: Mapping[str, Any], *, q: float, sigma: float, steps: int) -> dpe.DpEvent:
    event = dpsgd_claim(sampling_rate=q, noise_multiplier=sigma, num_steps=steps).event
    pca = _pca_event(config)
    if pca is None:
        return event
    return pca if steps == 0 else dpe.ComposedDpEvent([pca, event])


@register_claim_rebuilder("dp")
def _dp(stored: PrivacyClaim, config: Mapping[str, Any], metrics: Mapping[str, Any], num_members: int) -> RebuiltClaim:
    """DP-SGD (and Secure-SGD's DP-SGD part): q, σ, T as the defense plans them."""
    n = num_members
    q, q_source = _dpsgd_rate(config, n)
    agree("metrics sampling_rate", required("metrics", metrics, "sampling_rate"), q_source, q)
    sigma_cfg, target = config.get("noise_multiplier", "missing"), config.get("target_epsilon")
    if sigma_cfg == "missing":
        raise ValueError("config is missing 'noise_multiplier', which the claim is rebuilt from")
    epochs = config.get("epochs")
    steps_per_epoch = max(1, round(1.0 / q))
    cap = None if epochs is None else max(1, round(float(epochs) * steps_per_epoch))
    steps = v.integer("metrics.num_steps", required("metrics", metrics, "num_steps"), minimum=0)
    sigma_metric = v.positive("metrics.noise_multiplier", required("metrics", metrics, "noise_multiplier"))
    pca = _pca_event(config) is not None
    dp_path = "event.events[1]" if pca and steps > 0 else "event"
    gauss_path = f"{dp_path}.event.event" if q < 1.0 else f"{dp_path}.event"
    sources = {f"{dp_path}.event.sampling_probability": q_source}
    if pca:
        sources.update(
            {"event.events[0].noise_multiplier": "config pca_noise", "event.events[0].event.noise_multiplier": "config pca_noise", "event.events[0].sampling_probability": "config pca_sampling_rate"}
        )
    delta, accountant = config.get("delta", 1e-5), config.get("accountant", "pld")

    def eps(s: float, t: int) -> float:
        return DPClaim(event=_dp_event(config, q=q, sigma=s, steps=t)).epsilon(delta=delta, accountant=accountant)

    if sigma_cfg is not None:
        sigma = float(v.positive("config.noise_multiplier", sigma_cfg))
        agree("metrics noise_multiplier", sigma_metric, "config noise_multiplier", sigma)
        sources[f"{gauss_path}.noise_multiplier"] = "config noise_multiplier"
    else:
        # σ was calibrated to the target: the smallest σ (to the calibration's tolerance) with
        # ε ≤ target, so ε at σ is within the target and ε just below σ is beyond it.
        sigma = sigma_metric
        target_eps = float(v.positive("config.target_epsilon", target))
        lower = sigma * (1.0 - 1.001 * _CALIBRATION_TOLERANCE)
        if eps(sigma, steps) > target_eps * (1 + RELATIVE_TOLERANCE) or (lower > 2e-3 and eps(lower, steps) <= target_eps):
            raise ValueError(
                f"metrics noise_multiplier={format_number(sigma)} is not the noise multiplier calibrated to config target_epsilon={format_number(target_eps)} over {steps} steps "
                f"under config accountant={config.get('accountant')!r} (a record calibrated by an older, unsound naive/strong analysis is one: retrain it with --force)"
            )
        sources[f"{gauss_path}.noise_multiplier"] = "metrics noise_multiplier (calibrated to config target_epsilon)"
    if target is None or sigma_cfg is None:
        if steps != cap:
            raise ValueError(f"metrics num_steps={steps} does not match config epochs={format_number(epochs)}, which is {cap} steps of {steps_per_epoch} per epoch")
        sources[f"{dp_path}.count"] = "config epochs x steps per epoch"
    else:
        # Budget mode: as many steps as the target allows, up to the cap.
        target_eps = float(v.positive("config.target_epsilon", target))
        beyond = steps != cap and eps(sigma, steps + 1) <= target_eps
        if steps < 1 or eps(sigma, steps) > target_eps * (1 + RELATIVE_TOLERANCE) or beyond or (cap is not None and steps > cap):
            raise ValueError(
                f"metrics num_steps={steps} is not the number of steps config target_epsilon={format_number(target_eps)} allows at noise_multiplier={format_number(sigma)} "
                f"under config accountant={config.get('accountant')!r} (a record planned by an older, unsound naive/strong analysis is one: retrain it with --force)"
            )
        sources[f"{dp_path}.count"] = "metrics num_steps (the steps config target_epsilon allows)"
    claim = DPClaim(event=_dp_event(config, q=q, sigma=sigma, steps=steps))
    return RebuiltClaim(claim=claim, sources=sources)
