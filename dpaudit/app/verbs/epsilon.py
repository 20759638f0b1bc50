"""``dpaudit epsilon``: ε of DP-SGD under every accountant, σ or T solved for a target ε, and one Gaussian mechanism.

Abadi et al. (2016) §3.1 (moments accountant), Mironov (2017) (RDP), Koskela et al. / dp_accounting
(PLD), and the Gaussian calibrations of Dwork & Roth, Balle & Wang (2018) and Phan et al. (2019,
Thm 2). Imports no torch, so it answers quickly.
"""

from __future__ import annotations

import argparse

from dpaudit import _validate as v
from dpaudit.app.common import (
    EXIT_OK,
    UsageError,
    arg,
    delta_type,
    emit,
    fmt_eps,
    positive_int,
)

__all__ = ["register"]


def _cmd_epsilon(args: argparse.Namespace) -> int:
    from dpaudit.privacy.accountants import (
        ACCOUNTANTS,
        calibrate_noise_multiplier,
        calibrate_num_steps,
        compute_epsilon,
        sampled_gaussian_event,
    )

    if args.mechanism == "gaussian":
        return _gaussian_epsilon(args)
    if args.sampling_rate is None:
        raise UsageError("--sampling-rate is required for --mechanism dpsgd")
    names = ACCOUNTANTS if args.accountant == "all" else (args.accountant,)
    q, delta = args.sampling_rate, args.delta
    if args.target_epsilon is None:
        if args.noise_multiplier is None or args.num_steps is None:
            raise UsageError("--noise-multiplier and --num-steps are required unless --target-epsilon is given")
        event = sampled_gaussian_event(sampling_rate=q, noise_multiplier=args.noise_multiplier, num_steps=args.num_steps)
        values = {n: compute_epsilon(event, delta=delta, accountant=n) for n in names}
        lines = [f"epsilon at delta={delta:g} for q={q:g}, sigma={args.noise_multiplier:g}, T={args.num_steps}:"]
        lines += [f"  {n:<8} {fmt_eps(e)}" for n, e in values.items()]
        emit(args, values, "\n".join(lines))
        return EXIT_OK

    solve_with = "pld" if args.accountant == "all" else args.accountant
    if args.solve == "noise-multiplier":
        if args.noise_multiplier is not None:
            raise UsageError(f"--noise-multiplier={args.noise_multiplier!r} conflicts with --solve noise-multiplier; omit it")
        if args.num_steps is None:
            raise UsageError("--num-steps is required to solve for the noise multiplier")
        sigma = calibrate_noise_multiplier(target_epsilon=args.target_epsilon, delta=delta, sampling_rate=q, num_steps=args.num_steps, accountant=solve_with)
        steps = args.num_steps
    else:
        if args.num_steps is not None:
            raise UsageError(f"--num-steps={args.num_steps!r} conflicts with --solve num-steps; omit it")
        if args.noise_multiplier is None:
            raise UsageError("--noise-multiplier is required to solve for the number of steps")
        sigma = args.noise_multiplier
        try:
            steps = calibrate_num_steps(target_epsilon=args.target_epsilon, delta=delta, sampling_rate=q, noise_multiplier=sigma, accountant=solve_with)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    event = sampled_gaussian_event(sampling_rate=q, noise_multiplier=sigma, num_steps=steps)
    values = {n: compute_epsilon(event, delta=delta, accountant=n) for n in names}
    payload = {
        "solve": args.solve.replace("-", "_"),
        "accountant": solve_with,
        "target_epsilon": args.target_epsilon,
        "delta": delta,
        "sampling_rate": q,
        "noise_multiplier": sigma,
        "num_steps": steps,
        "epsilon": values,
    }
    lines = [
        f"target epsilon {args.target_epsilon:g} at delta={delta:g} under '{solve_with}': "
        + (f"noise multiplier sigma = {sigma:.4f} for T={steps}" if args.solve == "noise-multiplier" else f"at most T = {steps} steps at sigma={sigma:g}"),
        "epsilon reached:",
    ] + [f"  {n:<8} {fmt_eps(e)}" for n, e in values.items()]
    emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _gaussian_epsilon(args: argparse.Namespace) -> int:
    """A single Gaussian mechanism: its exact ε at δ, or σ under each calibration."""
    from dpaudit.privacy.gaussian import (
        GAUSSIAN_CALIBRATIONS,
        calibrate_gaussian,
        gaussian_epsilon,
    )

    if args.sampling_rate is not None or args.num_steps is not None:
        raise UsageError("--sampling-rate and --num-steps apply to --mechanism dpsgd only")
    delta, sens = args.delta, args.sensitivity
    if args.target_epsilon is None:
        if args.noise_multiplier is None:
            raise UsageError("--noise-multiplier or --target-epsilon is required for --mechanism gaussian")
        sigma = args.noise_multiplier * sens
        eps = gaussian_epsilon(delta=delta, sigma=sigma, sensitivity=sens)
        payload = {"mechanism": "gaussian", "noise_multiplier": args.noise_multiplier, "sensitivity": sens, "delta": delta, "epsilon": eps}
        emit(args, payload, f"Gaussian mechanism, sigma = {args.noise_multiplier:g} x sensitivity {sens:g}: exact epsilon at delta={delta:g} is {eps:.6f} (Balle & Wang 2018)")
        return EXIT_OK
    if args.noise_multiplier is not None:
        raise UsageError(f"--noise-multiplier={args.noise_multiplier!r} conflicts with --target-epsilon for --mechanism gaussian; omit it")
    names = GAUSSIAN_CALIBRATIONS if args.calibration == "all" else (args.calibration,)
    sigmas: dict[str, float | None] = {}
    notes: dict[str, str] = {}
    for name in names:
        try:
            sigmas[name] = calibrate_gaussian(epsilon=args.target_epsilon, delta=delta, sensitivity=sens, method=name)
        except ValueError as exc:
            if args.calibration != "all":
                raise
            sigmas[name], notes[name] = None, str(exc)  # e.g. classical at epsilon > 1
    payload = {"mechanism": "gaussian", "target_epsilon": args.target_epsilon, "delta": delta, "sensitivity": sens, "sigma": sigmas}
    lines = [f"Gaussian noise std for epsilon={args.target_epsilon:g}, delta={delta:g}, sensitivity={sens:g}:"]
    lines += [f"  {n:<9} " + (f"{val:.6f}" if val is not None else f"n/a ({notes[n]})") for n, val in sigmas.items()]
    emit(args, payload, "\n".join(lines))
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``epsilon`` to the ``dpaudit`` parser."""
    from dpaudit.privacy.accountants import ACCOUNTANTS

    p = sub.add_parser(
        "epsilon",
        help="epsilon of DP-SGD under each accountant, or solve for sigma / steps",
        description="ε of the sampled Gaussian mechanism (DP-SGD) under the moments, RDP, PLD and strong-composition accountants; or solve for the noise multiplier (or steps) that reaches a target ε without overshooting it.",
    )
    p.add_argument(
        "--mechanism",
        choices=("dpsgd", "gaussian"),
        default="dpsgd",
        help="dpsgd: the sampled Gaussian composed over steps (default); gaussian: one Gaussian mechanism (exact ε, or σ under each calibration)",
    )
    p.add_argument("--sampling-rate", type=arg("--sampling-rate", v.half_open_unit), metavar="Q", help="Poisson sampling rate q = lot size / N, in (0, 1] (dpsgd)")
    p.add_argument("--noise-multiplier", type=arg("--noise-multiplier", v.positive), metavar="SIGMA", help="noise std / clipping norm, > 0")
    p.add_argument("--num-steps", type=positive_int("--num-steps"), metavar="T", help="number of steps (lots), >= 1")
    p.add_argument("--delta", type=delta_type, required=True, metavar="D", help="target delta in (0, 1)")
    p.add_argument("--accountant", choices=(*ACCOUNTANTS, "all"), default="all", help="accountant (default: all)")
    p.add_argument("--target-epsilon", type=arg("--target-epsilon", v.positive), metavar="E", help="solve for the value that reaches this epsilon")
    p.add_argument("--solve", choices=("noise-multiplier", "num-steps"), default="noise-multiplier", help="what --target-epsilon solves for (default: noise-multiplier)")
    p.add_argument(
        "--calibration",
        choices=("classical", "analytic", "extended", "all"),
        default="all",
        help="gaussian: calibration for --target-epsilon (classical: Dwork-Roth, epsilon <= 1; analytic: Balle-Wang; extended: Phan et al. Thm 2)",
    )
    p.add_argument("--sensitivity", type=arg("--sensitivity", v.positive), default=1.0, help="gaussian: L2 sensitivity (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=_cmd_epsilon)
