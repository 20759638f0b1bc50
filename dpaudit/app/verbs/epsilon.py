"""``dpaudit epsilon``: ε of DP-SGD under every accountant, σ or T solved for a target ε, and one Gaussian mechanism.

Abadi et al. (2016) §3.1 (moments accountant), Mironov (2017) (RDP), Koskela et al. / dp_accounting
(PLD), and the Gaussian calibrations of Dwork & Roth, Balle & Wang (2018) and Phan et al. (2019,
Thm 2). Imports no torch, so it answers quickly.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import warnings
from collections.abc import Callable
from typing import Any

from dpaudit import _validate as v
from dpaudit.app.common import (
    EXIT_OK,
    UsageError,
    arg,
    delta_type,
    emit,
    fmt_eps_ub,
)

__all__ = ["register"]


#: Default of ``--max-num-steps``: the largest T ``--solve num-steps`` searches.
DEFAULT_MAX_NUM_STEPS = 10**7
# The smallest σ ``--solve noise-multiplier`` considers (the bisection's lower bracket stops
# once it falls below 1e-3; see smallest_noise_multiplier).
_SOLVER_MIN_SIGMA = 1e-3


def _num_up(x: float) -> str:
    """A number that errs safe upwards (an exact ε, a solved σ or noise std) for a terminal: six significant digits
    rounded up, ``inf`` as is.

    A σ or a noise std printed below the one solved for would miss the target ε; an ε printed
    below its value would understate it.
    """
    from dpaudit.results.numbers import fmt_upper_bound

    return "inf" if math.isinf(x) else fmt_upper_bound(x, 6).replace(",", "")


#: How a declined accountant's note starts (text output and the JSON ``notes``).
DECLINED = "declined: "


def _epsilons(
    event: object, names: tuple[str, ...], delta: float, setting: str
) -> tuple[dict[str, float], dict[str, str], dict[str, str]]:
    """ε under each accountant, which accountant produced each, and the notes (also on stderr).

    A declined accountant (its formula does not apply) has no value and no ``computed_by``
    entry, only its note ``"declined: <reason>"``.
    """
    from dpaudit.privacy.accountants import compute_epsilon_detailed

    values: dict[str, float] = {}
    computed_by: dict[str, str] = {}
    notes: dict[str, str] = {}
    for name in names:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = compute_epsilon_detailed(event, delta=delta, accountant=name)
        for w in dict.fromkeys(str(w.message) for w in caught):  # one line each, no source excerpt
            print(f"dpaudit epsilon: {name}: warning: {w}", file=sys.stderr)
        if res.declined:  # printed in place of the number: no stderr line
            notes[name] = DECLINED + res.note
            continue
        values[name], computed_by[name] = res.epsilon, res.computed_by
        if res.note:
            notes[name] = res.note
            # One line per accountant that fell back (or overflowed), on stderr, so --json stays clean.
            print(f"dpaudit epsilon: {name}: {res.note} ({setting})", file=sys.stderr)
    return values, computed_by, notes


def _eps_lines(
    names: tuple[str, ...], values: dict[str, float], computed_by: dict[str, str], notes: dict[str, str]
) -> list[str]:
    lines = []
    for n in names:
        if n not in values:
            lines.append(f"  {n:<8} {notes[n]}")
        else:
            lines.append(
                f"  {n:<8} {fmt_eps_ub(values[n])}"
                + (f"  (computed by {computed_by[n]})" if computed_by[n] != n else "")
            )
    return lines


def _cmd_epsilon(args: argparse.Namespace) -> int:
    from dpaudit.privacy.accountant_names import ACCOUNTANTS

    # dp_accounting logs "Negative Renyi divergence ... returning an epsilon of zero" through absl
    # for ε ≈ 0 settings (huge σ, tiny q); that is the right answer there, and the log lines
    # would break the one-line stderr of this verb.
    logging.getLogger("absl").setLevel(logging.ERROR)
    if args.mechanism == "gaussian":
        return _gaussian_epsilon(args)
    if args.sampling_rate is None:
        raise UsageError("--sampling-rate is required for --mechanism dpsgd", argument="--sampling-rate")
    names = ACCOUNTANTS.names() if args.accountant == "all" else (args.accountant,)
    if args.target_epsilon is None:
        return _dpsgd_epsilon(args, names)
    return _solve(args, names)


def _dpsgd_epsilon(args: argparse.Namespace, names: tuple[str, ...]) -> int:
    """ε of DP-SGD's sampled Gaussian at the given σ and T, under each accountant in ``names``."""
    from dpaudit.privacy.events import sampled_gaussian_event

    q, delta = args.sampling_rate, args.delta
    if args.noise_multiplier is None or args.num_steps is None:
        raise UsageError(
            "--noise-multiplier and --num-steps are required unless --target-epsilon is given",
            argument="--noise-multiplier",
        )
    event = sampled_gaussian_event(sampling_rate=q, noise_multiplier=args.noise_multiplier, num_steps=args.num_steps)
    setting = f"q={q:g}, sigma={args.noise_multiplier:g}, T={args.num_steps}"
    values, computed_by, notes = _epsilons(event, names, delta, setting)
    lines = [f"epsilon at delta={delta:g} for {setting}:"] + _eps_lines(names, values, computed_by, notes)
    # The ε values stay top-level keys (as before); computed_by says which accountant produced
    # each; a declined accountant has no key, only its note.
    emit(args, {**values, "computed_by": computed_by, "notes": notes}, "\n".join(lines))
    return EXIT_OK


def _solve_noise_multiplier(args: argparse.Namespace, solve_with: str, notes_solver: list[str]) -> float:
    """The smallest σ whose ε at ``--num-steps`` stays within ``--target-epsilon`` (a note joins ``notes_solver`` at the
    search's floor)."""
    from dpaudit.privacy.accountants import compute_epsilon
    from dpaudit.privacy.calibration import calibrate_noise_multiplier
    from dpaudit.privacy.events import sampled_gaussian_event

    q, delta = args.sampling_rate, args.delta
    if args.noise_multiplier is not None:
        raise UsageError(
            f"--noise-multiplier={args.noise_multiplier!r} conflicts with --solve noise-multiplier; omit it",
            argument="--noise-multiplier",
        )
    if args.num_steps is None:
        raise UsageError("--num-steps is required to solve for the noise multiplier", argument="--num-steps")
    with warnings.catch_warnings():
        # Each bisection step may fall back from pld to rdp or warn about the order grid; the
        # final σ is re-evaluated below and its notes, if any, reported once.
        warnings.simplefilter("ignore", RuntimeWarning)  # PLDFallbackWarning, edge-of-grid notes
        try:
            sigma = calibrate_noise_multiplier(
                target_epsilon=args.target_epsilon,
                delta=delta,
                sampling_rate=q,
                num_steps=args.num_steps,
                accountant=solve_with,
            )
        except ValueError as exc:
            raise UsageError(str(exc), argument="--target-epsilon") from None
        if sigma < 2 * _SOLVER_MIN_SIGMA:
            floor_event = sampled_gaussian_event(
                sampling_rate=q, noise_multiplier=_SOLVER_MIN_SIGMA, num_steps=args.num_steps
            )
            if compute_epsilon(floor_event, delta=delta, accountant=solve_with) <= args.target_epsilon:
                notes_solver.append(
                    f"the search stops near sigma = {_SOLVER_MIN_SIGMA:g}; smaller noise "
                    f"multipliers may reach epsilon={args.target_epsilon:g} too"
                )
    return sigma


def _solve_num_steps(args: argparse.Namespace, solve_with: str) -> int:
    """The largest T at ``--noise-multiplier`` whose ε stays within ``--target-epsilon`` (at most
    ``--max-num-steps``)."""
    from dpaudit.privacy.calibration import calibrate_num_steps

    if args.num_steps is not None:
        raise UsageError(
            f"--num-steps={args.num_steps!r} conflicts with --solve num-steps; omit it", argument="--num-steps"
        )
    if args.noise_multiplier is None:
        raise UsageError(
            "--noise-multiplier is required to solve for the number of steps", argument="--noise-multiplier"
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # PLDFallbackWarning, edge-of-grid notes
        try:
            return calibrate_num_steps(
                target_epsilon=args.target_epsilon,
                delta=args.delta,
                sampling_rate=args.sampling_rate,
                noise_multiplier=args.noise_multiplier,
                accountant=solve_with,
                max_steps=args.max_num_steps,
            )
        except ValueError as exc:
            raise UsageError(str(exc), argument="--target-epsilon") from None


def _solve(args: argparse.Namespace, names: tuple[str, ...]) -> int:
    """σ (or T) that reaches ``--target-epsilon`` under one accountant, and ε of the result under each in ``names``."""
    from dpaudit.privacy.events import sampled_gaussian_event

    q, delta = args.sampling_rate, args.delta
    solve_with = "pld" if args.accountant == "all" else args.accountant
    notes_solver: list[str] = []
    if args.solve == "noise-multiplier":
        sigma, steps = _solve_noise_multiplier(args, solve_with, notes_solver), args.num_steps
    else:
        sigma, steps = args.noise_multiplier, _solve_num_steps(args, solve_with)
    event = sampled_gaussian_event(sampling_rate=q, noise_multiplier=sigma, num_steps=steps)
    values, computed_by, notes = _epsilons(event, names, delta, f"q={q:g}, sigma={sigma:g}, T={steps}")
    payload = {
        "solve": args.solve.replace("-", "_"),
        "accountant": solve_with,
        "target_epsilon": args.target_epsilon,
        "delta": delta,
        "sampling_rate": q,
        "noise_multiplier": sigma,
        "num_steps": steps,
        "epsilon": values,
        "computed_by": computed_by,
        "notes": notes,
    }
    if args.solve == "num-steps":
        capped = steps == args.max_num_steps
        payload["max_num_steps"] = args.max_num_steps
        payload["capped"] = capped
        if capped:
            reached = values.get(solve_with)
            got = f"; T = {steps} gives epsilon = {fmt_eps_ub(reached)}" if reached is not None else ""
            notes_solver.append(
                f"the search stops at --max-num-steps {steps}: no T <= {steps} reaches "
                f"epsilon={args.target_epsilon:g}{got}"
            )
    payload["solver_notes"] = notes_solver
    for note in notes_solver:
        print(f"dpaudit epsilon: note: {note}", file=sys.stderr)
    lines = [
        f"target epsilon {args.target_epsilon:g} at delta={delta:g} under '{solve_with}': "
        + (
            f"noise multiplier sigma = {_num_up(sigma)} for T={steps}"
            if args.solve == "noise-multiplier"
            else f"at most T = {steps} steps at sigma={sigma:g}"
        ),
        *[f"note: {n}" for n in notes_solver],
        "epsilon reached:",
    ] + _eps_lines(names, values, computed_by, notes)
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
        raise UsageError("--sampling-rate and --num-steps apply to --mechanism dpsgd only", argument="--sampling-rate")
    delta, sens = args.delta, args.sensitivity
    if args.target_epsilon is None:
        if args.noise_multiplier is None:
            raise UsageError(
                "--noise-multiplier or --target-epsilon is required for --mechanism gaussian",
                argument="--noise-multiplier",
            )
        # ε depends on σ/Δ only, i.e. on the noise multiplier: evaluating at Δ = 1 avoids
        # σ = multiplier x Δ underflowing to 0 (or overflowing) for extreme but valid inputs.
        eps = gaussian_epsilon(delta=delta, sigma=args.noise_multiplier, sensitivity=1.0)
        payload = {
            "mechanism": "gaussian",
            "noise_multiplier": args.noise_multiplier,
            "sensitivity": sens,
            "delta": delta,
            "epsilon": eps,
        }
        emit(
            args,
            payload,
            f"Gaussian mechanism, sigma = {args.noise_multiplier:g} x sensitivity "
            f"{sens:g}: exact epsilon at delta={delta:g} is {_num_up(eps)} (Balle & "
            "Wang 2018)",
        )
        return EXIT_OK
    if args.noise_multiplier is not None:
        raise UsageError(
            f"--noise-multiplier={args.noise_multiplier!r} conflicts with "
            "--target-epsilon for --mechanism gaussian; omit it",
            argument="--noise-multiplier",
        )
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
    if all(val is None for val in sigmas.values()):
        first = next(iter(notes.values()))
        raise UsageError(
            f"no calibration applies to --target-epsilon={args.target_epsilon!r}, "
            f"--delta={delta!r}, --sensitivity={sens!r} ({first})",
            argument="--target-epsilon",
        )
    payload = {
        "mechanism": "gaussian",
        "target_epsilon": args.target_epsilon,
        "delta": delta,
        "sensitivity": sens,
        "sigma": sigmas,
    }
    lines = [f"Gaussian noise std for epsilon={args.target_epsilon:g}, delta={delta:g}, sensitivity={sens:g}:"]
    lines += [f"  {n:<9} " + (_num_up(val) if val is not None else f"n/a ({notes[n]})") for n, val in sigmas.items()]
    emit(args, payload, "\n".join(lines))
    return EXIT_OK


def _steps_type(name: str) -> Callable[[str], Any]:
    """A step count in [1, MAX_NUM_STEPS]: accountants convert T to a float, so 10**400 cannot be honoured."""
    from dpaudit.privacy.accountant_names import MAX_NUM_STEPS

    def check(n: str, x: Any) -> int:
        out = v.integer(n, x, minimum=1)
        if out > MAX_NUM_STEPS:
            raise v.invalid(n, f"{n} must be <= 10**18, got {out!r}")
        return out

    return arg(name, check, int)


def register(sub: argparse._SubParsersAction) -> None:
    """Adds ``epsilon`` to the ``dpaudit`` parser."""
    from dpaudit.privacy.accountant_names import ACCOUNTANTS

    p = sub.add_parser(
        "epsilon",
        help="epsilon of DP-SGD under each accountant, or solve for sigma / steps",
        description="ε of the sampled Gaussian mechanism (DP-SGD) under the moments, RDP, "
        "PLD and strong-composition accountants; or solve for the noise "
        "multiplier (or steps) that reaches a target ε without overshooting it.",
    )
    p.add_argument(
        "--mechanism",
        choices=("dpsgd", "gaussian"),
        default="dpsgd",
        help="dpsgd: the sampled Gaussian composed over steps (default); gaussian: "
        "one Gaussian mechanism (exact ε, or σ under each calibration)",
    )
    p.add_argument(
        "--sampling-rate",
        type=arg("--sampling-rate", v.half_open_unit),
        metavar="Q",
        help="Poisson sampling rate q = lot size / N, in (0, 1] (dpsgd)",
    )
    p.add_argument(
        "--noise-multiplier",
        type=arg("--noise-multiplier", v.positive),
        metavar="SIGMA",
        help="noise std / clipping norm, > 0",
    )
    p.add_argument(
        "--num-steps", type=_steps_type("--num-steps"), metavar="T", help="number of steps (lots), 1 to 10**18"
    )
    p.add_argument(
        "--max-num-steps",
        type=_steps_type("--max-num-steps"),
        default=DEFAULT_MAX_NUM_STEPS,
        metavar="T",
        help="--solve num-steps searches T up to this (default "
        f"{DEFAULT_MAX_NUM_STEPS:,}); reaching it is reported, never silent",
    )
    p.add_argument("--delta", type=delta_type, required=True, metavar="D", help="target delta in (0, 1)")
    p.add_argument(
        "--accountant", choices=(*ACCOUNTANTS.names(), "all"), default="all", help="accountant (default: all)"
    )
    p.add_argument(
        "--target-epsilon",
        type=arg("--target-epsilon", v.positive),
        metavar="E",
        help="solve for the value that reaches this epsilon",
    )
    p.add_argument(
        "--solve",
        choices=("noise-multiplier", "num-steps"),
        default="noise-multiplier",
        help="what --target-epsilon solves for (default: noise-multiplier)",
    )
    p.add_argument(
        "--calibration",
        choices=("classical", "analytic", "extended", "all"),
        default="all",
        help="gaussian: calibration for --target-epsilon (classical: Dwork-Roth, "
        "epsilon <= 1; analytic: Balle-Wang; extended: Phan et al. Thm 2)",
    )
    p.add_argument(
        "--sensitivity", type=arg("--sensitivity", v.positive), default=1.0, help="gaussian: L2 sensitivity (default 1)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.set_defaults(func=_cmd_epsilon)
