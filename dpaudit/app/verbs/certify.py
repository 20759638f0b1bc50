"""``dpaudit certify``: certified vs conventional accuracy of a trained model.

Part of the application layer (docs/architecture.md, "Import rule"). For a record trained with a noise
layer (``pixeldp``, ``agm``, ``hgm``, ``secure-sgd``) it

1. measures the first layer's sensitivity Δ_r on the loaded weights, in the attack norm
   (:func:`dpaudit.robustness.noise.layer_sensitivity`), so the certificate rests on the model itself;
2. draws the noise n times per test input (:func:`dpaudit.robustness.montecarlo.sample_scores`) and
   certifies each input with the defense's own mechanism: expected-score bounds at confidence
   1 − η, the robustness condition, and the largest radius over (ε', δ')
   (Lecuyer et al. 2019, Prop. 1; Phan et al. 2019, Eq. 10) — and with randomized smoothing
   of the same noise (Cohen et al. 2019, CERTIFY); each conventional accuracy printed is that
   of the classifier its certificate covers, and names its prediction rule;
3. attacks the same inputs with FGSM, I-FGSM, PGD and MIM (expectation over the noise) at
   the same radii; the run's summary carries the soundness verdict (certified accuracy must
   never exceed the robust accuracy the strongest attack leaves) and this verb exits 3 if it
   found a violation — a bug;
4. stores everything under ``RUN_DIR/certify/<model id>/`` (JSON + NPZ, atomic; a rerun reuses
   a stored result only when its parameters match, and says so).

A ``smoothing`` record (Cohen et al. 2019) is certified by CERTIFY on its base model behind
Gaussian input noise, and attacked the same way (see :mod:`dpaudit.app.runs.certify`).

A model without a noise layer or smoothing spec (``nonprivate``, ``dpsgd``) is refused with exit status 2:
``dpaudit attack evasion`` measures its robust accuracy.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from attacks.evasion import EVASION_ATTACKS
from dpaudit import _validate as v
from dpaudit.app.common import (
    EXIT_OK,
    EXIT_VIOLATION,
    UsageError,
    add_common,
    arg,
    check_record,
    emit,
    path_type,
)
from dpaudit.app.runs.certify import DEFAULT_RADII, CertifySpec, NotCertifiable, run_certify
from dpaudit.limits import LIMITS
from dpaudit.options import limit_action

__all__ = ["register"]


def _radii() -> Any:
    def parse(text: str) -> list[float]:
        items = [t.strip() for t in text.split(",")]
        if any(not t for t in items):  # "0.1,,0.2" is a typo, not two radii
            raise argparse.ArgumentTypeError(
                f"--radii must be numbers separated by commas, with no empty item, got {text!r}"
            )
        try:
            values = [float(t) for t in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"--radii must be numbers separated by commas, got {text!r}") from None
        if not values or any(not (s >= 0) or s == float("inf") for s in values):
            raise argparse.ArgumentTypeError(f"--radii must be finite numbers >= 0, got {text!r}")
        return values

    parse.__name__ = "--radii"
    return parse


def _down(share: float) -> str:
    """A certified accuracy (a lower bound) for the terminal table: three significant digits rounded down."""
    from dpaudit.results.numbers import fmt_lower_bound

    return fmt_lower_bound(float(share), 3)


def _up(share: float) -> str:
    """A robust accuracy left by attacks (the true one is at most that) for the terminal table: three significant digits
    rounded up."""
    from dpaudit.results.numbers import fmt_upper_bound

    return fmt_upper_bound(float(share), 3)


def _count(flag: str, minimum: int) -> Any:
    return arg(flag, lambda n, x: v.integer(n, x, minimum=minimum), int)


def _cmd_certify(args: argparse.Namespace) -> int:
    from dpaudit.store import RunDir

    registered = EVASION_ATTACKS.names()  # the default: every registered evasion attack
    for group in args.attack or ():
        if not all(name.strip() for name in group.split(",")):  # "" or "pgd,,mim" is a typo, not "no attack"
            raise UsageError(
                "--attack must name attacks separated by commas "
                f"({', '.join(registered)}), got {group!r}; use --no-attacks for none",
                argument="--attack",
            )
    attacks = [a.strip() for group in (args.attack or [",".join(registered)]) for a in group.split(",")]
    if args.no_attacks:
        attacks = []
    check_record("--target", args.target)
    spec = CertifySpec(
        target=args.target,
        radii=tuple(args.radii) if args.radii else None,
        attacks=tuple(attacks),
        norm=args.norm,
        num_draws=args.num_draws,
        num_examples=args.num_examples,
        confidence=args.confidence,
        bound=args.bound,
        smoothing=not args.no_smoothing,
        num_selection_draws=args.num_selection_draws,
        smoothing_confidence=args.smoothing_confidence,
        num_eot_samples=args.num_eot_samples,
        seed=args.seed,
        device=args.device,
        data_root=args.data_root,
        progress=not args.quiet,
        i_know=getattr(args, "i_know", False),
    )
    run = RunDir(args.out)
    if args.dry_run:
        from dpaudit.app.plan import print_plan

        try:
            return print_plan(args, _dry_run_plan(spec, run))
        except NotCertifiable as exc:
            raise UsageError(str(exc), argument="--target") from None
    try:
        summary = run_certify(spec, run)
    except NotCertifiable as exc:
        raise UsageError(str(exc), argument="--target") from None
    except FileNotFoundError as exc:
        raise UsageError(f"--target {args.target!r}: {exc}", argument="--target") from None
    s = summary
    lines = [
        f"certified {s.model_id} ({s.defense}) on {s.num_examples} test examples ({s.norm} radii)",
        f"  noise std {s.noise_std:.4g}, sensitivity {s.sensitivity:.4g}, {s.num_draws} draws"
        + (f" ({s.draws_per_second:.0f} draws/s)" if s.draws_per_second else ""),
        # The conventional accuracy is the certified classifier's own, named, so the two rows
        # below it are read as one classifier with and without a certificate.
        f"  conventional accuracy {s.conventional_accuracy:.4f} of the "
        f"classifier certified as {s.defense}: {s.prediction_rule}",
    ]
    if s.smoothing is not None and s.mechanism != "smoothing":  # else it is the line above
        lines.append(
            f"  conventional accuracy {s.smoothing.conventional_accuracy:.4f} of the "
            f"classifier certified as smoothing: {s.smoothing.prediction_rule}"
        )
    if s.radii_source:
        lines.append(f"  radii {s.radii_source}")
    lines += [
        "  " + f"{'radius':<22}" + "".join(f"{r:>7g}" for r in s.radii),
        # Certified accuracies are lower bounds (rounded down), attacks' robust accuracies upper bounds (rounded up).
        "  " + f"{'certified ' + s.defense:<22}" + "".join(f"{_down(a):>7}" for a in s.certified_accuracy.values()),
    ]
    if s.smoothing is not None and s.mechanism != "smoothing":  # else it is the line above
        lines.append(
            "  "
            + f"{'certified smoothing':<22}"
            + "".join(f"{_down(a):>7}" for a in s.smoothing.certified_accuracy.values())
        )
    for name, accs in s.robust_accuracy.items():
        lines.append("  " + f"{'robust ' + name:<22}" + "".join(f"{_up(a):>7}" for a in accs.values()))
    if s.soundness_violations:
        where = ", ".join(
            f"{x.certificate} at radius {x.radius:g} ({_down(x.certified_accuracy)} > {_up(x.robust_accuracy)})"
            for x in s.soundness_violations
        )
        lines.append(
            f"  SOUNDNESS VIOLATION: certified accuracy exceeds the strongest attack's robust accuracy: {where}"
        )
    else:
        positive = [r for r in s.radii if r > 0]
        certified = [s.certified_accuracy, *([s.smoothing.certified_accuracy] if s.smoothing is not None else [])]
        if positive and all(acc.get(f"{r:g}", 0.0) == 0.0 for acc in certified for r in positive):
            # "certified <= robust" holds trivially for a certificate that certifies nothing.
            lines.append(
                "  vacuous at these radii: no certificate certifies any test point at a non-zero radius asked; "
                "see the report for the largest radius the model certifies"
            )
        lines.append(
            "  sound: no certificate exceeds the robust accuracy an attack left"
            if s.robust_accuracy
            else "  soundness not checked: no attacks ran"
        )
    lines.append(f"  results: {Path(run.certify_dir(s.model_id))}")
    from dpaudit.app.runs.report import render_reports

    index = render_reports(run)
    report = index.certified[0] if index.certified else index.index_html
    lines.append(f"  report:  {report}")
    emit(args, {**s.to_dict(), "report": str(report)}, "\n".join(lines))
    return EXIT_VIOLATION if s.soundness_violations else EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``certify`` to the ``dpaudit`` parser."""
    p = sub.add_parser(
        "certify",
        help="certified vs conventional accuracy (PixelDP/AGM/HGM/Secure-SGD, "
        "randomized smoothing) and evasion attacks",
        description=(
            "Monte Carlo certification of a noise-layer model (Lecuyer et al. 2019; "
            "Phan et al. 2019) and randomized smoothing of "
            "the same noise or of a smoothing model's input (Cohen et al. 2019), "
            "beside FGSM / I-FGSM / PGD / MIM robust accuracy at the same radii. "
            "Exit status 3 if a certificate exceeds what an attack left (a "
            "soundness bug); 2 for a model with neither a noise layer nor a "
            "smoothing spec."
        ),
    )
    p.add_argument(
        "--target",
        required=True,
        type=path_type("--target", must_exist="any"),
        metavar="PATH",
        help="record directory (RUN_DIR/records/NAME) or a run directory with one record",
    )
    add_common(p, out=True, seed=True, data_root=True, device="auto", quiet=True)
    limit_action(
        p.add_argument(
            "--num-draws",
            type=_count("--num-draws", 2),
            metavar="N",
            help="noise draws per test example (default: the record's spec, 2000 for a "
            "noise layer, 10000 for smoothing)",
        ),
        LIMITS["draws"],
    )
    p.add_argument(
        "--radii",
        type=_radii(),
        metavar="R1,R2,...",
        help="perturbation radii (default: 0 and the 10/25/50/75/90%% quantiles of the radii the model's own "
        "certificate certifies, rounded down; 0,"
        f"{','.join(map(str, DEFAULT_RADII))} when it certifies none)",
    )
    p.add_argument(
        "--attack",
        action="append",
        metavar="NAMES",
        help=f"attacks, comma separated (default {','.join(EVASION_ATTACKS.names())})",
    )
    p.add_argument("--no-attacks", action="store_true", help="certify only")
    p.add_argument("--norm", choices=("l2", "linf"), help="attack norm (default: the one the model was calibrated for)")
    limit_action(
        p.add_argument(
            "--num-examples",
            type=_count("--num-examples", 1),
            default=None,
            metavar="N",
            help="test examples (seeded subset; default: as many as fit 3 minutes of noise draws on 2 CPU cores, "
            "counted from the model's size, within 100-500: 500 for the digits MLP, 112 for hgm-cnn on MNIST)",
        ),
        LIMITS["examples"],
    )
    p.add_argument(
        "--confidence",
        type=arg("--confidence", v.open_unit),
        default=0.95,
        help="joint confidence 1 - eta of all score bounds of one test example (default 0.95)",
    )
    p.add_argument(
        "--bound",
        choices=("clopper-pearson", "hoeffding", "bernstein"),
        default="clopper-pearson",
        help="expected-score bound (default clopper-pearson on argmax counts)",
    )
    p.add_argument("--no-smoothing", action="store_true", help="skip the randomized-smoothing certificate")
    limit_action(
        p.add_argument(
            "--num-selection-draws",
            type=_count("--num-selection-draws", 1),
            metavar="N0",
            help="CERTIFY n0 (default: the record's spec, 100)",
        ),
        LIMITS["draws"],
    )
    p.add_argument(
        "--smoothing-confidence",
        type=arg("--smoothing-confidence", v.open_unit),
        metavar="C",
        help="confidence of each smoothing certificate, 1 - CERTIFY's alpha (default: the record's spec, 0.999)",
    )
    limit_action(
        p.add_argument(
            "--num-eot-samples",
            type=_count("--num-eot-samples", 1),
            metavar="K",
            help="noise draws averaged per attack gradient (default 8 for noisy models)",
        ),
        LIMITS["eot_samples"],
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (the certificates' measured time and memory; the evasion attacks are not "
        "counted) and exit without certifying",
    )
    p.set_defaults(func=lambda a: _cmd_certify(a))


def _dry_run_plan(spec: CertifySpec, run: Any) -> Any:
    """``certify --dry-run``: the certificates of ``spec`` at its example count (its evasion attacks are not counted).

    Here rather than in :mod:`dpaudit.app.plan`, which the certify run itself reads: the plan
    needs the run's resolution of the target, and the two would import each other.
    """
    from dpaudit.app.plan import certify_plan
    from dpaudit.app.runs.certify import _resolve, _with_default_examples
    from dpaudit.training import resolve_device

    target = _resolve(spec, run)
    spec = _with_default_examples(spec, target)
    try:
        device = str(resolve_device(spec.device))
    except (ValueError, RuntimeError):
        device = "cpu" if spec.device == "auto" else str(spec.device)
    assert spec.num_examples is not None  # set by _with_default_examples
    return certify_plan(
        record=target.record,
        num_examples=spec.num_examples,
        num_draws=target.num_draws + target.num_selection_draws,
        device=device,
    )
