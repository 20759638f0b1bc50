"""The certify run: certified vs conventional accuracy of a trained model (what ``dpaudit certify`` runs).

For a record trained with a noise
layer (``pixeldp``, ``agm``, ``hgm``, ``secure-sgd``) it

1. measures the first layer's sensitivity Δ_r on the loaded weights, in the attack norm
   (:func:`dpaudit.robustness.noise.layer_sensitivity`), so the certificate rests on the model itself;
2. draws the noise n times per test input (:func:`dpaudit.robustness.montecarlo.sample_scores`) and
   certifies each input with the defense's own mechanism: expected-score bounds at confidence
   1 − η, the robustness condition, and the largest attack size over (ε', δ')
   (Lecuyer et al. 2019, Prop. 1; Phan et al. 2019, Eq. 10) — and with randomized smoothing
   of the same noise (Cohen et al. 2019, CERTIFY);
3. attacks the same inputs with FGSM, I-FGSM, PGD and MIM (expectation over the noise) at
   the same sizes, and checks soundness: certified accuracy must never exceed the robust
   accuracy the strongest attack leaves (exit status 3 if it does — a bug);
4. stores everything under ``RUN_DIR/certify/<model id>/`` (JSON + NPZ, atomic; a rerun reuses
   what is there) and writes ``RUN_DIR/reports/certified.html``.

Models without a noise layer (``nonprivate``, ``dpsgd``) are attacked only, so their robust and
conventional accuracy appear in the same report.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit import _validate as v

__all__ = ["certify_record", "DEFAULT_ATTACK_SIZES", "DEFAULT_ATTACKS"]

DEFAULT_ATTACK_SIZES = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3)
DEFAULT_ATTACKS = ("fgsm", "ifgsm", "pgd", "mim")


def _same(stored: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(stored.get(k) == wanted[k] for k in wanted)


def certify_record(
    target: str | Path,
    *,
    out: str | Path,
    num_draws: int = 2000,
    attack_sizes: Sequence[float] = DEFAULT_ATTACK_SIZES,
    attacks: Sequence[str] = DEFAULT_ATTACKS,
    norm: str | None = None,
    num_examples: int = 500,
    confidence: float = 0.95,
    bound: str = "clopper-pearson",
    smoothing: bool = True,
    selection_draws: int = 100,
    smoothing_alpha: float = 0.001,
    eot_samples: int | None = None,
    seed: int = 0,
    device: str = "cpu",
    data_root: str | None = None,
    batch_size: int = 4096,
    progress: bool = True,
) -> dict[str, Any]:
    """Certifies and attacks one record; returns the summary (also stored as ``summary.json``).

    Args:
        target: record directory (or run directory holding one record).
        out: run directory to write results and the report into.
        num_draws: n, noise draws per test input for the certificate.
        attack_sizes: sizes (in ``norm``) at which certified and robust accuracy are reported.
        attacks: evasion attacks to run (subset of fgsm, ifgsm, pgd, mim).
        norm: attack norm; default the norm the model was calibrated for (else ``l2``).
        num_examples: test inputs (a seeded subset of the test split).
        confidence: 1 − η of the expected-score bounds.
        bound: ``clopper-pearson`` (argmax counts), ``hoeffding`` or ``bernstein`` (softmax).
        smoothing: also certify with randomized smoothing of the same noise.
        selection_draws: n0 of CERTIFY (independent draws that pick the class).
        smoothing_alpha: α of CERTIFY.
        eot_samples: noise draws averaged per attack gradient (default: the attack's).
        seed: root seed (test subset, noise, attack starts).
        device: where to compute.
        data_root: data root for the record's dataset.
        batch_size: most rows per Monte Carlo forward pass.
        progress: progress on stderr.

    Raises:
        ValueError: bad arguments (named with their value).
    """
    from attacks.evasion import EVASION_ATTACKS, run_evasion
    from dpaudit.data import load_dataset
    from dpaudit.results import EVASION_NORMS, load_evasion_result, save_evasion_result
    from dpaudit.results.certification import CertificationSpec
    from dpaudit.results.record import load_record, resolve_record_dir
    from dpaudit.robustness.certification import (
        CertificationResult,
        certified_radius,
        count_bounds,
        load_certification_result,
        mean_bounds,
        save_certification_result,
        smoothing_certify,
    )
    from dpaudit.robustness.montecarlo import sample_scores
    from dpaudit.robustness.noise import ATTACK_NORMS, find_noise_layer, is_randomized, layer_sensitivity
    from dpaudit.seeding import numpy_rng
    from dpaudit.store import RunDir, atomic_write_json, thaw
    from dpaudit.training import resolve_device
    from dpaudit.weights import load_model

    num_draws = v.integer("num_draws", num_draws, minimum=2)
    num_examples = v.integer("num_examples", num_examples, minimum=1)
    v.open_unit("confidence", confidence)
    bound = v.choice("bound", bound, ("clopper-pearson", "hoeffding", "bernstein"))
    selection_draws = v.integer("selection_draws", selection_draws, minimum=1)
    v.open_unit("smoothing_alpha", smoothing_alpha)
    sizes = sorted({v.non_negative("attack_sizes", s) for s in attack_sizes})
    if not sizes:
        raise ValueError("attack_sizes must name at least one size, got []")
    attacks = list(dict.fromkeys(attacks))
    for a in attacks:
        v.choice("attacks", a, tuple(EVASION_ATTACKS))
    dev = resolve_device(device)

    rdir = resolve_record_dir(target)
    record = load_record(rdir)
    stored = thaw(record.config).get("certification")
    spec = CertificationSpec.from_dict(stored) if stored is not None else None
    norm = v.choice("norm", norm if norm is not None else (spec.attack_norm if spec is not None else "l2"), ATTACK_NORMS)
    if attacks and norm not in EVASION_NORMS:
        raise ValueError(f"norm must be one of {', '.join(EVASION_NORMS)} when attacks run, got {norm!r} (pass attacks=() to certify only)")
    model = load_model(rdir, device=dev)
    bundle = load_dataset(record.dataset, data_root=data_root)
    test = bundle.test
    pick = np.sort(numpy_rng(seed, "certify-examples").choice(len(test), size=min(num_examples, len(test)), replace=False))
    x, y = test.features[pick], test.labels[pick]
    labels = y.numpy().astype(np.int64)

    run = RunDir(out).create(command=" ".join(["dpaudit", *sys.argv[1:]]))
    cdir = run.subdir("certify") / record.model_id
    cdir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    summary: dict[str, Any] = {
        "model_id": record.model_id,
        "defense": record.defense,
        "dataset": record.dataset,
        "norm": norm,
        "attack_sizes": sizes,
        "num_examples": int(len(pick)),
        "num_draws": num_draws,
        "confidence": confidence,
        "bound": bound,
        "seed": seed,
        "epsilon": record.metrics.get("epsilon", float("inf")),
        "delta": record.metrics.get("delta"),
    }
    wanted = {"num_draws": num_draws, "confidence": confidence, "num_examples": int(len(pick)), "seed": seed, "bound": bound, "norm": norm}

    certificates: dict[str, CertificationResult] = {}
    noise = find_noise_layer(model)
    if noise is not None and spec is not None:
        sensitivity = layer_sensitivity(noise, input_shape=bundle.input_shape, norm=norm)
        sigma = float(noise.noise_std)
        per_unit = sigma / sensitivity
        summary.update(
            sensitivity=sensitivity,
            noise_std=sigma,
            noise_per_sensitivity=per_unit,
            mechanism=spec.mechanism,
            robustness_epsilon=spec.robustness_epsilon,
            robustness_delta=spec.robustness_delta,
            attack_norm_bound=spec.attack_norm_bound,
            redistribute=spec.redistribute,
        )
        own = cdir / f"certify-{record.defense}.json"
        smooth = cdir / "certify-smoothing.json"
        cached = own.is_file() and _same(dict(load_certification_result(own).config), wanted)
        if cached and (smooth.is_file() or not smoothing):
            certificates[record.defense] = load_certification_result(own)
            if smoothing:
                certificates["smoothing"] = load_certification_result(smooth)
            summary["draws_per_second"] = certificates[record.defense].config.get("draws_per_second")
        else:
            mc = sample_scores(model, x, num_draws=num_draws, seed=seed, stream="certify-estimate", device=dev, batch_size=batch_size, progress=progress)
            if bound == "clopper-pearson":
                b = count_bounds(mc.counts, confidence=confidence)
            else:
                b = mean_bounds(mc.mean, num_draws=num_draws, variances=mc.variance, method=bound, confidence=confidence)
            radii = certified_radius(b.lower, b.upper, noise_per_sensitivity=per_unit, mechanism=spec.mechanism, max_epsilon=spec.max_epsilon)
            config = {
                **wanted,
                "mechanism": spec.mechanism,
                "max_epsilon": spec.max_epsilon,
                "sensitivity": sensitivity,
                "noise_std": sigma,
                "draws_per_second": mc.draws_per_second,
                "seconds": mc.seconds,
            }
            certificates[record.defense] = CertificationResult(
                method=record.defense,
                norm=norm,
                labels=labels,
                predictions=np.asarray(b.top, dtype=np.int64),
                radii=np.asarray(radii, dtype=float),
                num_draws=num_draws,
                confidence=confidence,
                config=config,
            )
            save_certification_result(certificates[record.defense], cdir)
            summary["draws_per_second"] = mc.draws_per_second
            if smoothing:
                sel = sample_scores(model, x, num_draws=selection_draws, seed=seed, stream="certify-select", device=dev, batch_size=batch_size)
                preds, rad = smoothing_certify(sel.counts, mc.counts, sigma=per_unit, alpha=smoothing_alpha)
                certificates["smoothing"] = CertificationResult(
                    method="smoothing",
                    norm=norm,
                    labels=labels,
                    predictions=np.asarray(preds, dtype=np.int64),
                    radii=np.asarray(rad, dtype=float),
                    num_draws=num_draws,
                    confidence=1 - smoothing_alpha,
                    config={**wanted, "selection_draws": selection_draws, "alpha": smoothing_alpha, "sigma_per_sensitivity": per_unit},
                )
                save_certification_result(certificates["smoothing"], cdir)
        summary["conventional_accuracy"] = float(certificates[record.defense].conventional_accuracy)
        summary["certified_accuracy"] = {f"{s:g}": float(a) for s, a in zip(sizes, certificates[record.defense].certified_accuracy(sizes))}
        if "smoothing" in certificates:
            sm = certificates["smoothing"]
            summary["smoothing"] = {
                "conventional_accuracy": float(sm.conventional_accuracy),
                "certified_accuracy": {f"{s:g}": float(a) for s, a in zip(sizes, sm.certified_accuracy(sizes))},
            }

    robust: dict[str, dict[str, float]] = {}
    results = {}
    for name in attacks:
        path = cdir / f"evasion-{name}-{norm}.json"
        res = load_evasion_result(path) if path.is_file() else None
        stale = res is not None and (
            list(map(float, res.radii)) != sizes
            or res.config.get("seed") != seed
            or res.num_examples != len(pick)
            or (eot_samples is not None and is_randomized(model) and res.config.get("eot_samples") != eot_samples)
        )
        if stale:
            res = None
        if res is None:
            res = run_evasion(model, x, y, attack=name, radii=sizes, norm=norm, eot_samples=eot_samples, seed=seed, device=dev, progress=progress)
            save_evasion_result(res, cdir)
        results[name] = res
        robust[name] = {f"{s:g}": float(a) for s, a in zip(sizes, res.robust_accuracy)}
    summary["robust_accuracy"] = robust
    if "conventional_accuracy" not in summary and results:
        summary["conventional_accuracy"] = float(next(iter(results.values())).clean_accuracy)

    from reports.certified import CertifiedRun, soundness_problems, write_certified_report

    run_value = CertifiedRun(summary=summary, certificates=certificates, attacks=results)
    problems = soundness_problems(run_value)
    summary["soundness_violations"] = [{"certificate": n, "size": s, "certified_accuracy": c, "robust_accuracy": r} for n, s, c, r in problems]
    summary["seconds"] = time.monotonic() - started
    atomic_write_json(cdir / "summary.json", summary)
    summary["report"] = str(write_certified_report(run.path))
    summary["result_dir"] = str(cdir)
    return summary
