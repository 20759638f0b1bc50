"""The training function an audit of a registered defense runs: the defense's white-box trainer adapter.

Shared by the runner (:mod:`dpaudit.app.runs.audit.runner`), which trains with it, and the
plan (:mod:`dpaudit.app.runs.audit.batching`), which times it before the run.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dpaudit import _validate as v
from dpaudit.app.runs.audit.spec import AuditSpec, audit_defenses

__all__ = ["audit_trainer"]


def audit_trainer(spec: AuditSpec, *, num_members: int, num_steps: int) -> tuple[Any, float]:
    """The defense's white-box trainer for ``spec`` and the σ it runs with."""
    from defenses import DEFENSES
    from dpaudit.privacy.calibration import calibrate_noise_multiplier
    from dpaudit.privacy.gaussian import analytic_sigma

    entry = DEFENSES.get(spec.defense)
    if entry is None or entry.audit_trainer is None:
        raise v.invalid(
            "defense",
            f"defense {spec.defense!r} has no white-box trainer for audits; defenses "
            f"that do: {', '.join(audit_defenses()) or 'none'}",
        )
    sigma = spec.noise_multiplier
    if sigma is None:
        eps = float(spec.target_epsilon)  # type: ignore[arg-type]  # __post_init__ guarantees one of the two
        # The calibrated claim is the one the game compares against: one step for white-box, the run otherwise.
        if spec.threat == "white-box":
            sigma = analytic_sigma(epsilon=eps, delta=spec.delta)
        else:
            sigma = calibrate_noise_multiplier(
                target_epsilon=eps, delta=spec.delta, sampling_rate=spec.sampling_rate, num_steps=num_steps
            )
    per_epoch = max(1, round(1.0 / spec.sampling_rate))
    # The audit's training knobs, passed to the defense's config by field name: a defense whose
    # config lacks one of them cannot be audited with these options (said, not silently dropped).
    wanted = {
        "noise_multiplier": sigma,
        "clip_norm": spec.clip_norm,
        "sampling_rate": spec.sampling_rate,
        "expected_lot_size": spec.sampling_rate * num_members,
        "epochs": num_steps / per_epoch,
        "learning_rate": spec.learning_rate,
        "delta": spec.delta,
    }
    known = {f.name for f in dataclasses.fields(entry.config_type)}
    missing = sorted(set(wanted) - known) or sorted(set(spec.defense_config or {}) - known)
    if missing:
        raise v.invalid(
            "defense",
            f"defense {spec.defense!r}: its config {entry.config_type.__name__} has "
            f"no field(s) {', '.join(missing)} that the audit sets",
        )
    config = entry.config_type(**{**dict(spec.defense_config or {}), **wanted})
    options = {"model_options": dict(spec.model_options)} if spec.model_options else {}
    return entry.audit_trainer(config=config, model_name=spec.model, device=spec.device, **options), float(sigma)
