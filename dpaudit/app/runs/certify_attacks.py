"""The attack side of the certify run: the inputs it attacks and what the attacks leave there.

Split from :mod:`dpaudit.app.runs.certify` (which computes the certificates) because the compare
grid's evasion jobs use the same pieces for a model that does not certify: the seeded test subset
(:func:`certify_subset`), every evasion attack's robust accuracy on it, reusing a stored result
that answers the same question (:func:`robust_accuracies`), and the reuse check itself, which the
certify run also applies to its stored certificates. The soundness check — no certificate above
the robust accuracy the strongest attack leaves — is here beside the attacks it reads.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dpaudit.results.certify_summary import AttackedClassifier, SoundnessViolation

if TYPE_CHECKING:
    from dpaudit.results.certification import CertificationResult

__all__ = ["attacked_classifier", "certify_subset", "robust_accuracies"]


def _note(progress: bool, text: str) -> None:
    if progress:
        print(text, file=sys.stderr)


def _mismatch(
    stored: Mapping[str, object], wanted: Mapping[str, object]
) -> tuple[dict[str, object], dict[str, object]]:
    """The parameters on which a stored result differs from what is asked (empty: reusable).

    Both are parameter maps compared key by key: the stored one is whatever the result's JSON
    holds (its keys differ between versions), so values are only compared, never used.
    """
    keys = [k for k in wanted if stored.get(k) != wanted[k]]
    return {k: stored.get(k) for k in keys}, {k: wanted[k] for k in keys}


def _reusable(
    progress: bool,
    path: Path,
    stored: Mapping[str, object] | None,
    wanted: Mapping[str, object],
    *,
    what: str = "certificate",
) -> bool:
    if stored is None:
        return False
    was, asked = _mismatch(stored, wanted)
    if "dataset_files" in asked:  # digests say nothing to a reader: name the files instead
        from dpaudit.data.registry import changed_files

        current = asked.pop("dataset_files")  # file name -> digest (the run's own key)
        files = changed_files(was.pop("dataset_files"), dict(current) if isinstance(current, Mapping) else {})
        _note(
            progress,
            f"recomputing {path.name}: the dataset's files changed since the stored {what} ({files})"
            + (f"; stored with {was}, asked for {asked}" if asked else ""),
        )
        return False
    if was or asked:
        _note(progress, f"recomputing {path.name}: stored with {was}, asked for {asked}")
        return False
    _note(progress, f"reusing stored {what} {path.name}")
    return True


def _by_radius(radii: tuple[float, ...], values: Any) -> dict[str, float]:
    return {f"{r:g}": float(a) for r, a in zip(radii, values)}


def certify_subset(num_test: int, *, num_examples: int, seed: int) -> np.ndarray:
    """The sorted test positions a seed attacks and certifies (``certify`` and ``compare`` agree on them)."""
    from dpaudit.seeding import numpy_rng

    return np.sort(
        numpy_rng(seed, "certify-examples").choice(num_test, size=min(num_examples, num_test), replace=False)
    )


def robust_accuracies(
    model: Any,
    x: Any,
    y: Any,
    *,
    attacks: Sequence[str],
    radii: tuple[float, ...],
    norm: str,
    num_eot_samples: int | None,
    seed: int,
    device: Any,
    directory: Path,
    progress: bool,
) -> dict[str, dict[str, float]]:
    """Each evasion attack's robust accuracy by radius, reusing a result stored in ``directory``
    when it answers the same question (radii, seed, examples; for a randomized model the EOT
    draws asked and confirmed breaks), and saying so on stderr with ``progress``."""
    from attacks.evasion import CONFIRM_SAMPLES, run_evasion
    from dpaudit.results import load_evasion_result, save_evasion_result
    from dpaudit.robustness.noise import is_randomized

    randomized = is_randomized(model)
    robust: dict[str, dict[str, float]] = {}
    for name in attacks:
        path = directory / f"evasion-{name}-{norm}.json"
        res = load_evasion_result(path) if path.is_file() else None
        if res is not None:
            stored: dict[str, object] = {
                "radii": [float(r) for r in res.radii],
                "seed": res.config.get("seed"),
                "num_examples": res.num_examples,
            }
            asked: dict[str, object] = {"radii": list(radii), "seed": seed, "num_examples": int(len(y))}
            if randomized:
                if num_eot_samples is not None:
                    stored["num_eot_samples"], asked["num_eot_samples"] = res.config.get("eot_samples"), num_eot_samples
                # Breaks of a randomized model count only when fresh draws confirm them; a result
                # from before that rule (no confirmation) is not the same measurement.
                stored["confirm_samples"], asked["confirm_samples"] = res.config.get("confirm_samples"), CONFIRM_SAMPLES
            if not _reusable(progress, path, stored, asked, what="attack result"):
                res = None
        if res is None:
            res = run_evasion(
                model,
                x,
                y,
                attack=name,
                radii=list(radii),
                norm=norm,
                eot_samples=num_eot_samples,
                seed=seed,
                device=device,
                progress=progress,
            )
            save_evasion_result(res, directory)
        robust[name] = _by_radius(radii, res.robust_accuracy)
    return robust


def attacked_classifier(
    directory: Path, *, model_id: str, attacks: Sequence[str], norm: str
) -> AttackedClassifier | None:
    """The classifier the evasion attacks stored in ``directory`` ran against, with its clean count.

    Robust accuracy is only read against the clean accuracy of the same prediction rule: for a
    noise layer or smoothing the attacked rule (a majority vote that never abstains) is another
    classifier than the record's own or the certificate's. For a randomized model each attack
    draws its own noise, so their clean counts can differ by a few; the fewest is given, the one
    the strongest attack's robust accuracy (the least over attacks at each radius) cannot exceed.

    Returns:
        That classifier, or ``None`` when none of ``attacks`` has a stored result here.
    """
    from dpaudit.results import load_evasion_result
    from dpaudit.results.certify_summary import attacked_prediction_rule

    found = []
    for name in attacks:
        path = directory / f"evasion-{name}-{norm}.json"
        if path.is_file():
            res = load_evasion_result(path)
            found.append((int(res.clean_correct.sum()), name, res))
    if not found:
        return None
    correct, name, res = min(found, key=lambda f: f[0])
    return AttackedClassifier(
        model_id=model_id,
        attack=name,
        prediction_rule=attacked_prediction_rule(res.config),
        clean_correct=correct,
        num_examples=res.num_examples,
    )


def _violations(
    robust: Mapping[str, Mapping[str, float]],
    certificates: Sequence[CertificationResult | None],
    *,
    radii: tuple[float, ...],
    norm: str,
) -> list[SoundnessViolation]:
    """Radii where a certificate claims more than the strongest attack leaves."""
    from dpaudit.robustness.certification import soundness_violations

    violations: list[SoundnessViolation] = []
    if robust:
        # Soundness is checked against the strongest attack at each radius (lowest robust accuracy).
        strongest = np.min(np.array([[accs[f"{r:g}"] for r in radii] for accs in robust.values()]), axis=0)
        for cert in certificates:
            if cert is not None and cert.norm == norm:
                violations += soundness_violations(
                    cert.certified_accuracy(radii), strongest, radii=radii, certificate=cert.method, tolerance=1e-9
                )
    return violations
