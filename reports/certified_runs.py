"""The certified report's runs: each certify run directory read into one :class:`CertifiedRun`.

Split from :mod:`reports.certified` (the page), which re-exports these names.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dpaudit import _validate as v
from dpaudit.results import EvasionResult, TrainedModel, load_evasion_result, load_record
from dpaudit.results.certification import CertificationResult, load_certification_result
from dpaudit.results.certify_summary import (
    UNNAMED_PREDICTION_RULE,
    AttackedClassifier,
    CertificateReach,
    SoundnessViolation,
    StoredCertifySummary,
    attacked_prediction_rule,
    read_stored_summary,
)
from dpaudit.store import RunDir, read_json
from reports.numbers import fmt_upper_bound

__all__ = ["SUMMARY_FILE", "CertifiedRun", "load_certified_runs"]

SUMMARY_FILE = "summary.json"


@dataclass(frozen=True, kw_only=True)
class CertifiedRun:
    """What ``dpaudit certify`` stored for one model (and its record, when the run holds it).

    ``summary`` is read typed (:func:`dpaudit.results.certify_summary.read_stored_summary`); a
    mapping given here is read the same way.
    """

    summary: StoredCertifySummary
    certificates: Mapping[str, CertificationResult]
    attacks: Mapping[str, EvasionResult]
    record: TrainedModel | None = field(default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.summary, StoredCertifySummary):
            object.__setattr__(self, "summary", read_stored_summary(self.summary))

    def prediction_rule(self, certificate: str) -> str:
        """The classifier ``certificate`` covers, in words, as ``certify`` stored it (its conventional accuracy is this
        rule's)."""
        cert = self.certificates.get(certificate)
        rule = cert.config.get("prediction_rule") if cert is not None else None
        if not rule:
            s = self.summary
            own = certificate != "smoothing" or s.mechanism == "smoothing"
            rule = s.prediction_rule if own else s.smoothing_prediction_rule
        return str(rule) if rule else UNNAMED_PREDICTION_RULE

    @property
    def label(self) -> str:
        """Defense, its robustness parameters (ε_r, L; r = 1 when HGM's noise is not redistributed; σ for smoothing) and
        DP ε."""
        s = self.summary
        parts = [s.defense]
        if s.robustness_epsilon is not None and s.attack_norm_bound is not None:
            parts.append(f"ε_r={s.robustness_epsilon:g} L={s.attack_norm_bound:g}")
        elif s.mechanism == "smoothing" and s.noise_std is not None:
            parts.append(f"σ={s.noise_std:g}")
        if s.defense in ("hgm", "secure-sgd") and s.redistribute is False:
            parts.append("r=1")
        eps = s.epsilon
        if eps is not None and math.isfinite(eps):
            parts.append(f"DP ε={fmt_upper_bound(eps)}")
        return " ".join(parts)

    @property
    def radii(self) -> np.ndarray:
        """The perturbation radii the model was certified and attacked at."""
        return np.asarray(self.summary.radii, dtype=float)

    @property
    def soundness_violations(self) -> tuple[SoundnessViolation, ...]:
        """The violations ``certify`` stored (certificate, radius, certified and robust accuracy), in any stored
        form."""
        return self.summary.soundness_violations

    def strongest_robust_accuracy(self) -> np.ndarray | None:
        """Robust accuracy when an example counts as broken if *any* attack broke it."""
        if not self.attacks:
            return None
        success = np.zeros_like(next(iter(self.attacks.values())).success)
        for res in self.attacks.values():
            success = success | res.success
        return 1.0 - success.mean(axis=1)

    def attack_rule(self, attack: str) -> str:
        """The classifier ``attack`` ran against, in words, from its stored config (not necessarily a certificate's
        rule)."""
        return attacked_prediction_rule(self.attacks[attack].config)

    def reach(self) -> tuple[CertificateReach, ...]:
        """Each certificate's certified accuracy at the radii asked and the largest radius it certifies."""
        return tuple(
            dataclasses.replace(cert.reach(self.summary.model_id, self.radii), prediction_rule=self.prediction_rule(n))
            for n, cert in self.certificates.items()
        )

    def attacked(self) -> tuple[AttackedClassifier, ...]:
        """The classifier each attack ran against, with its clean accuracy's count."""
        return tuple(
            AttackedClassifier(
                model_id=self.summary.model_id,
                attack=name,
                prediction_rule=self.attack_rule(name),
                clean_correct=int(res.clean_correct.sum()),
                num_examples=res.num_examples,
            )
            for name, res in self.attacks.items()
        )

    def primary_certificate(self) -> CertificationResult | None:
        """The model's own certificate (CERTIFY for a smoothing model), whose classifier the summary's conventional
        accuracy is; ``None`` when not stored."""
        s = self.summary
        own = "smoothing" if s.mechanism == "smoothing" or s.defense == "smoothing" else s.defense
        return self.certificates.get(own)

    @property
    def curve_radii(self) -> np.ndarray:
        """The radii asked, with 0 in front: every curve and table starts at its classifier's clean accuracy."""
        return np.unique(np.concatenate([[0.0], self.radii]))


def _record(run: RunDir, model_id: str) -> TrainedModel | None:
    path = run.record_dir(model_id)
    return load_record(path) if (path / "record.json").is_file() else None


def load_certified_runs(run_dir: str | Path | RunDir) -> list[CertifiedRun]:
    """Every model certified in the run (sorted by defense, then model id)."""
    run = run_dir if isinstance(run_dir, RunDir) else RunDir(run_dir)
    out = []
    for d in run.certify_dirs():
        try:
            # Read typed here, so a malformed field is named with its file before anything renders.
            summary = read_stored_summary(read_json(d / SUMMARY_FILE))
        except ValueError as exc:
            raise v.invalid("summary", f"{str(d / SUMMARY_FILE)!r}: {exc}") from None
        certs = {
            p.stem.removeprefix("certify-"): load_certification_result(p) for p in sorted(d.glob("certify-*.json"))
        }
        radii = np.asarray(summary.radii, dtype=float)
        used = summary.attacks_run
        attacks = {}
        for p in sorted(d.glob("evasion-*.json")):
            res = load_evasion_result(p)
            # Only the attacks the summary's run used, at its radii: a result left by an earlier run
            # at other radii (or by a run with attacks when the last had none) is not this run's.
            same_radii = res.radii.shape == radii.shape and np.allclose(res.radii, radii)
            if same_radii and (used is None or res.attack in used):
                attacks[res.attack] = res
        out.append(
            CertifiedRun(summary=summary, certificates=certs, attacks=attacks, record=_record(run, summary.model_id))
        )
    return sorted(out, key=lambda r: (r.summary.defense, r.summary.model_id))


#: Offset between neighbouring attack curves, in points (display space, so the data stay exact).
