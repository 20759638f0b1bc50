"""``dpaudit certify``: certified vs conventional accuracy of a trained model.

Part of the application layer (DESIGN.md, "Import rule"). For a record trained with a noise
layer (``pixeldp``, ``agm``, ``hgm``, ``secure-sgd``) it

1. measures the first layer's sensitivity Δ_r on the loaded weights, in the attack norm
   (:func:`dpaudit.noise.layer_sensitivity`), so the certificate rests on the model itself;
2. draws the noise n times per test input (:func:`dpaudit.montecarlo.sample_scores`) and
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

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpaudit import _validate as v

__all__ = ["register", "certify_record", "DEFAULT_ATTACK_SIZES"]

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
    from dpaudit.results import EVASION_NORMS
    from dpaudit.certification import (
        CertificationResult, certified_radius, count_bounds, load_certification_result, mean_bounds, save_certification_result, smoothing_certify,
    )
    from dpaudit.data import load_dataset
    from dpaudit.montecarlo import sample_scores
    from dpaudit.noise import ATTACK_NORMS, find_noise_layer, is_randomized, layer_sensitivity
    from dpaudit.records import load_model, load_record, resolve_record_dir
    from dpaudit.results import load_evasion_result, save_evasion_result
    from dpaudit.seeding import numpy_rng
    from dpaudit.store import RunDir, atomic_write_json, thaw
    from dpaudit.training import resolve_device

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
    spec = thaw(record.config).get("certification")
    norm = v.choice("norm", norm if norm is not None else (spec or {}).get("attack_norm", "l2"), ATTACK_NORMS)
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
        "model_id": record.model_id, "defense": record.defense, "dataset": record.dataset, "norm": norm,
        "attack_sizes": sizes, "num_examples": int(len(pick)), "num_draws": num_draws, "confidence": confidence, "bound": bound, "seed": seed,
        "epsilon": record.metrics.get("epsilon", float("inf")), "delta": record.metrics.get("delta"),
    }
    wanted = {"num_draws": num_draws, "confidence": confidence, "num_examples": int(len(pick)), "seed": seed, "bound": bound, "norm": norm}

    certificates: dict[str, CertificationResult] = {}
    noise = find_noise_layer(model)
    if noise is not None and spec is not None:
        sensitivity = layer_sensitivity(noise, input_shape=bundle.input_shape, norm=norm)
        sigma = float(noise.noise_std)
        per_unit = sigma / sensitivity
        summary.update(
            sensitivity=sensitivity, noise_std=sigma, noise_per_sensitivity=per_unit, mechanism=spec["mechanism"],
            robustness_epsilon=spec["robustness_epsilon"], robustness_delta=spec["robustness_delta"], attack_norm_bound=spec["attack_norm_bound"],
            redistribute=spec.get("redistribute"),
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
            radii = certified_radius(b.lower, b.upper, noise_per_sensitivity=per_unit, mechanism=spec["mechanism"], max_epsilon=spec["max_epsilon"])
            config = {**wanted, "mechanism": spec["mechanism"], "max_epsilon": spec["max_epsilon"], "sensitivity": sensitivity,
                      "noise_std": sigma, "draws_per_second": mc.draws_per_second, "seconds": mc.seconds}
            certificates[record.defense] = CertificationResult(
                method=record.defense, norm=norm, labels=labels, predictions=np.asarray(b.top, dtype=np.int64), radii=np.asarray(radii, dtype=float),
                num_draws=num_draws, confidence=confidence, config=config,
            )
            save_certification_result(certificates[record.defense], cdir)
            summary["draws_per_second"] = mc.draws_per_second
            if smoothing:
                sel = sample_scores(model, x, num_draws=selection_draws, seed=seed, stream="certify-select", device=dev, batch_size=batch_size)
                preds, rad = smoothing_certify(sel.counts, mc.counts, sigma=per_unit, alpha=smoothing_alpha)
                certificates["smoothing"] = CertificationResult(
                    method="smoothing", norm=norm, labels=labels, predictions=np.asarray(preds, dtype=np.int64), radii=np.asarray(rad, dtype=float),
                    num_draws=num_draws, confidence=1 - smoothing_alpha,
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
            list(map(float, res.radii)) != sizes or res.config.get("seed") != seed or res.num_examples != len(pick)
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


def _sizes(shared: dict[str, Any]) -> Any:
    def parse(text: str) -> list[float]:
        try:
            values = [float(t) for t in text.replace(",", " ").split()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"--attack-sizes must be numbers separated by commas, got {text!r}") from None
        if not values or any(not (s >= 0) or s == float("inf") for s in values):
            raise argparse.ArgumentTypeError(f"--attack-sizes must be finite numbers >= 0, got {text!r}")
        return values

    parse.__name__ = "--attack-sizes"
    return parse


def _cmd_certify(args: argparse.Namespace, shared: dict[str, Any]) -> int:
    UsageError = shared["UsageError"]
    attacks = [a for group in (args.attack or [",".join(DEFAULT_ATTACKS)]) for a in group.split(",") if a]
    if args.no_attacks:
        attacks = []
    try:
        summary = certify_record(
            args.target, out=args.out, num_draws=args.draws, attack_sizes=args.attack_sizes or list(DEFAULT_ATTACK_SIZES), attacks=attacks,
            norm=args.norm, num_examples=args.num_examples, confidence=args.confidence, bound=args.bound, smoothing=not args.no_smoothing,
            selection_draws=args.selection_draws, smoothing_alpha=args.smoothing_alpha, eot_samples=args.eot_samples, seed=args.seed,
            device=args.device, data_root=args.data_root, progress=not args.quiet,
        )
    except FileNotFoundError as exc:
        raise UsageError(f"--target {args.target!r}: {exc}") from None
    lines = [f"certified {summary['model_id']} on {summary['num_examples']} test examples ({summary['norm']} attacks)"]
    if "certified_accuracy" in summary:
        lines.append(
            f"  noise std {summary['noise_std']:.4g}, sensitivity {summary['sensitivity']:.4g}, {summary['num_draws']} draws "
            f"({summary['draws_per_second']:.0f} draws/s)"
        )
    lines.append(f"  conventional accuracy {summary['conventional_accuracy']:.4f}")
    head = "  " + f"{'size':<22}" + "".join(f"{s:>7g}" for s in summary["attack_sizes"])
    lines.append(head)
    if "certified_accuracy" in summary:
        lines.append("  " + f"{'certified ' + summary['defense']:<22}" + "".join(f"{a:7.3f}" for a in summary["certified_accuracy"].values()))
    if "smoothing" in summary:
        lines.append("  " + f"{'certified smoothing':<22}" + "".join(f"{a:7.3f}" for a in summary["smoothing"]["certified_accuracy"].values()))
    for name, accs in summary["robust_accuracy"].items():
        lines.append("  " + f"{'robust ' + name:<22}" + "".join(f"{a:7.3f}" for a in accs.values()))
    bad = summary["soundness_violations"]
    if bad:
        lines.append(f"  SOUNDNESS VIOLATION at sizes {sorted({b['size'] for b in bad})}: a certificate exceeds an attack's robust accuracy")
    lines.append(f"  results: {summary['result_dir']}\n  report: {summary['report']}")
    payload = {k: summary[k] for k in summary if k != "smoothing"} | ({"smoothing": summary["smoothing"]} if "smoothing" in summary else {})
    payload.setdefault("certified_accuracy", {})
    shared["emit"](args, payload, "\n".join(lines))
    return shared["EXIT_VIOLATION"] if bad else shared["EXIT_OK"]


def register(sub: argparse._SubParsersAction, shared: dict[str, Any]) -> None:
    """Adds ``certify`` to the ``dpaudit`` parser."""
    arg = shared["arg"]
    p = sub.add_parser(
        "certify",
        help="certified vs conventional accuracy (PixelDP/AGM/HGM/Secure-SGD, randomized smoothing) and evasion attacks",
        description=(
            "Monte Carlo certification of a noise-layer model (Lecuyer et al. 2019; Phan et al. 2019) and randomized smoothing of "
            "the same noise (Cohen et al. 2019), beside FGSM / I-FGSM / PGD / MIM robust accuracy at the same attack sizes. "
            "Exit status 3 if a certificate exceeds what an attack left (a soundness bug)."
        ),
    )
    p.add_argument("--target", required=True, metavar="PATH", help="record directory (RUN_DIR/records/NAME) or a run directory with one record")
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="run directory for results and the report")
    p.add_argument("--draws", type=arg("--draws", lambda n, x: v.integer(n, x, minimum=2), int), default=2000, metavar="N", help="noise draws per test example (default 2000)")
    p.add_argument("--attack-sizes", type=_sizes(shared), metavar="S1,S2,...", help=f"attack sizes (default {','.join(map(str, DEFAULT_ATTACK_SIZES))})")
    p.add_argument("--attack", action="append", metavar="NAMES", help="attacks, comma separated (default fgsm,ifgsm,pgd,mim)")
    p.add_argument("--no-attacks", action="store_true", help="certify only")
    p.add_argument("--norm", choices=("l2", "linf"), help="attack norm (default: the one the model was calibrated for)")
    p.add_argument("--num-examples", type=arg("--num-examples", lambda n, x: v.integer(n, x, minimum=1), int), default=500, metavar="N", help="test examples (seeded subset; default 500)")
    p.add_argument("--confidence", type=arg("--confidence", v.open_unit), default=0.95, help="1 - eta of the score bounds (default 0.95)")
    p.add_argument("--bound", choices=("clopper-pearson", "hoeffding", "bernstein"), default="clopper-pearson", help="expected-score bound (default clopper-pearson on argmax counts)")
    p.add_argument("--no-smoothing", action="store_true", help="skip the randomized-smoothing certificate")
    p.add_argument("--selection-draws", type=arg("--selection-draws", lambda n, x: v.integer(n, x, minimum=1), int), default=100, metavar="N0", help="CERTIFY n0 (default 100)")
    p.add_argument("--smoothing-alpha", type=arg("--smoothing-alpha", v.open_unit), default=0.001, metavar="A", help="CERTIFY alpha (default 0.001)")
    p.add_argument("--eot-samples", type=arg("--eot-samples", lambda n, x: v.integer(n, x, minimum=1), int), metavar="K", help="noise draws averaged per attack gradient (default 8 for noisy models)")
    p.add_argument("--seed", type=shared["seed"], default=0, help="root seed (default 0)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N] (default auto)")
    p.add_argument("--data-root", metavar="DIR")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=lambda a: _cmd_certify(a, shared))
