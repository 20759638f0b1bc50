"""``dpaudit certify``: certified vs conventional accuracy of a trained model.

Part of the application layer (DESIGN.md, "Import rule"). For a record trained with a noise
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

import argparse
from typing import Any

from dpaudit import _validate as v
from dpaudit.app.common import (
    EXIT_OK,
    EXIT_VIOLATION,
    UsageError,
    arg,
    emit,
    seed_type,
)
from dpaudit.app.runs.certify import (
    DEFAULT_ATTACK_SIZES,
    DEFAULT_ATTACKS,
    certify_record,
)

__all__ = ["register"]


def _sizes() -> Any:
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


def _cmd_certify(args: argparse.Namespace) -> int:
    attacks = [a for group in (args.attack or [",".join(DEFAULT_ATTACKS)]) for a in group.split(",") if a]
    if args.no_attacks:
        attacks = []
    try:
        summary = certify_record(
            args.target,
            out=args.out,
            num_draws=args.draws,
            attack_sizes=args.attack_sizes or list(DEFAULT_ATTACK_SIZES),
            attacks=attacks,
            norm=args.norm,
            num_examples=args.num_examples,
            confidence=args.confidence,
            bound=args.bound,
            smoothing=not args.no_smoothing,
            selection_draws=args.selection_draws,
            smoothing_alpha=args.smoothing_alpha,
            eot_samples=args.eot_samples,
            seed=args.seed,
            device=args.device,
            data_root=args.data_root,
            progress=not args.quiet,
        )
    except FileNotFoundError as exc:
        raise UsageError(f"--target {args.target!r}: {exc}") from None
    lines = [f"certified {summary['model_id']} on {summary['num_examples']} test examples ({summary['norm']} attacks)"]
    if "certified_accuracy" in summary:
        lines.append(f"  noise std {summary['noise_std']:.4g}, sensitivity {summary['sensitivity']:.4g}, {summary['num_draws']} draws ({summary['draws_per_second']:.0f} draws/s)")
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
    emit(args, payload, "\n".join(lines))
    return EXIT_VIOLATION if bad else EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``certify`` to the ``dpaudit`` parser."""
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
    p.add_argument("--attack-sizes", type=_sizes(), metavar="S1,S2,...", help=f"attack sizes (default {','.join(map(str, DEFAULT_ATTACK_SIZES))})")
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
    p.add_argument("--seed", type=seed_type, default=0, help="root seed (default 0)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda[:N] (default auto)")
    p.add_argument("--data-root", metavar="DIR")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=lambda a: _cmd_certify(a))
