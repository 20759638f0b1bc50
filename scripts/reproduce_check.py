"""The battery's detection table: every example of ``examples/dp_bugs/`` through ``dpaudit check``.

Runs the conformance battery (through :mod:`dpaudit.api` only) once on every bug module of
``examples/dp_bugs/`` (its ``CLAIM``, its ``model``) and ``--runs`` times, with seeds 0, 1, …, on
every correct implementation (``BUG = ""``), and writes ``scripts/results/check/detection.json``
and ``detection.md``: bug × check → status (exit 3 or not), ε_LB and seconds, the CPU-seconds each
bug took, the cause the battery names first (its diagnosis, grey-box checks ranked first) and the
CPU-seconds of the grey-box replay, and the false alarms of each correct implementation out of
its runs. ::

    python scripts/reproduce_check.py            # 50 runs per correct implementation (~30-40 min on 2 cores)
    python scripts/reproduce_check.py --quick    # 3 runs: a smoke test of the table
    python scripts/reproduce_check.py --greybox-only --quick   # the grey-box checks alone (seconds per bug)

Goal (issue 33): every bug flagged by at least one check within 5 CPU-minutes, and no false
alarm in the correct implementations' runs. Each run's directory is removed once its
``check.json`` is read (the trials of 100 runs would fill a disk); ``--keep`` keeps them.

Each battery's row is kept under ``OUT/batteries/`` as soon as it ends, keyed by the example's
source (and its helpers'), the battery's own code, its claim and the options that change a verdict: a rerun, or a run
with another ``--only``, reuses every row already measured and says how many it reused, so the
full table can be built piece by piece and an interrupted run loses at most one battery.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dpaudit.api import (
    BatterySpec,
    RunDir,
    atomic_write_json,
    atomic_write_text,
    dpsgd_claim,
    fmt_lower_bound,
    fmt_upper_bound,
    read_json,
    run_check,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "dp_bugs"
OUT = ROOT / "scripts" / "results" / "check"
FIVE_CPU_MINUTES = 300.0


def _module(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"dp_bugs_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu_seconds() -> float:
    # Workers are joined when a battery's executor closes, so RUSAGE_CHILDREN holds their time.
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


#: The code a verdict depends on besides the example's: the checks, the trials and games, the bounds.
CHECK_CODE = ("attacks/audit", "dpaudit/privacy", "dpaudit/app/runs/check.py")


def _code_digest() -> bytes:
    """A digest of the battery's own code (:data:`CHECK_CODE`), so a row measured by other code is not reused."""
    digest = hashlib.sha256()
    for entry in CHECK_CODE:
        root = ROOT / entry
        for source in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            digest.update(str(source.relative_to(ROOT)).encode() + b"\0" + source.read_bytes() + b"\0")
    return digest.digest()


def _row_key(path: Path, claim: dict[str, Any], *, seed: int, args: argparse.Namespace) -> str:
    """What a battery's row depends on: the example's code and helpers, the battery's code, claim, seed, options."""
    digest = hashlib.sha256(_code_digest())
    for source in [path, *sorted(path.parent.glob("_*.py"))]:
        digest.update(source.name.encode() + b"\0" + source.read_bytes() + b"\0")
    options = {
        "claim": claim,
        "seed": seed,
        "delta": args.delta,
        "budget_minutes": args.budget_minutes,
        "workers": args.workers,
        "greybox_only": args.greybox_only,
    }
    digest.update(json.dumps(options, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:16]


def _battery(path: Path, claim: dict[str, Any], *, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One battery's row, measured now or reused from ``OUT/batteries/`` (``row['reused']`` says which)."""
    stored = args.out / "batteries" / f"{path.stem}-{seed}-{_row_key(path, claim, seed=seed, args=args)}.json"
    if stored.is_file():
        row = dict(read_json(stored))
        row["reused"] = True
        return row
    row = _measure(path, claim, seed=seed, args=args)
    atomic_write_json(stored, row)
    return row


def _measure(path: Path, claim: dict[str, Any], *, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    spec = BatterySpec(
        train_fn=f"{path}:train",
        model_fn=f"{path}:model",
        claim=dpsgd_claim(**claim),
        delta=args.delta,
        budget_minutes=args.budget_minutes,
        seed=seed,
        num_workers=args.workers,
        checks=_greybox_names() if args.greybox_only else (),
    )
    out = Path(tempfile.mkdtemp(prefix=f"check-{path.stem}-", dir=args.scratch))
    cpu, wall = _cpu_seconds(), time.monotonic()
    try:
        report = run_check(spec, RunDir(out), progress=args.verbose)
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    row = report.to_dict()
    row.update(seed=seed, cpu_seconds=_cpu_seconds() - cpu, wall_seconds=time.monotonic() - wall)
    return row


def _greybox_names() -> tuple[str, ...]:
    """The registered grey-box checks (the battery runs them first)."""
    from dpaudit.api import CHECKS

    return tuple(n for n in CHECKS.names() if CHECKS[n].kind == "grey-box")


def _first_cause(row: dict[str, Any]) -> str:
    """The diagnosis's root cause: the first-ranked violated check and its cause (or finding)."""
    ranked = row.get("diagnosis") or []
    if not ranked:
        return "–"
    first = next(o for o in row["outcomes"] if o["name"] == ranked[0])
    return f"{first['name']}: {first.get('cause') or first['finding'].split(': ', 1)[-1]}"


def _replay_cpu(row: dict[str, Any]) -> float | None:
    """CPU-seconds of the grey-box replay (two trainings on D and D′, one more on D, and the hooks)."""
    for o in row["outcomes"]:
        seconds = o.get("details", {}).get("replay_cpu_seconds")
        if isinstance(seconds, (int, float)):
            return float(seconds)
    return None


def _cell(outcome: dict[str, Any]) -> str:
    mark = {"violated": "**exit 3**", "passed": "passed", "inconclusive": "inconclusive"}[outcome["status"]]
    if outcome.get("kind") == "grey-box":
        return mark  # a verdict read off the replay: no ε_LB
    if outcome["status"] == "violated" and outcome["epsilon_lb"] >= outcome["ceiling"] * (1 - 1e-6) - 1e-6:
        mark += " (saturated)"
    # A lower bound is printed rounded down, so the table never shows more evidence than was found.
    return f"{mark} ε_LB {fmt_lower_bound(outcome['epsilon_lb'])} ({outcome['seconds']:.0f} s)"


def _markdown(table: dict[str, Any]) -> str:
    checks = table["checks"]
    lines = [
        "Claim of every example: DP-SGD q=0.1, σ=3, T=50 (unless its module "
        f"says otherwise); ε_UB at δ={table['delta']:g}; "
        f"{table['confidence']:.0%} family-wise confidence; budget "
        f"{table['budget_minutes']:g} min; {table['workers']} worker processes.",
        "",
        "| bug | " + " | ".join(checks) + " | detected | CPU-s |",
        "|---|" + "---|" * len(checks) + "---|---|",
    ]
    for row in table["bugs"]:
        cells = {o["name"]: _cell(o) for o in row["outcomes"]}
        detected = "yes" if row["exit_status"] == 3 else "**no**"
        lines.append(
            f"| {row['module']} ({row['bug']}) | "
            + " | ".join(cells.get(c, "–") for c in checks)
            + f" | {detected} | {row['cpu_seconds']:.0f} |"
        )
    lines += [
        "",
        "Summary (the README's table): the largest ε_LB of each bug against the "
        "ε_UB of its claim, ε_LB rounded down and ε_UB up.",
        "",
    ]
    lines += [
        "| example | bug | first-named cause | checks that fired | largest ε_LB vs ε_UB | replay CPU-s | CPU-s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table["bugs"]:
        flagged = ", ".join(row.get("diagnosis") or []) or "**not detected**"
        best = max(row["outcomes"], key=lambda o: o["epsilon_lb"])
        ub = max(o["epsilon_ub"] for o in row["outcomes"])
        relation = ">" if best["epsilon_lb"] > ub else "≤"
        replay = _replay_cpu(row)
        lines.append(
            f"| `{row['module']}` | {row['bug']} | {_first_cause(row)} | {flagged} | "
            f"{fmt_lower_bound(best['epsilon_lb'])} {relation} {fmt_upper_bound(ub)} "
            f"| {'–' if replay is None else f'{replay:.1f}'} | {row['cpu_seconds']:.0f} |"
        )
    lines += [
        "",
        "| correct implementation | runs | false alarms (exit 3) | per check "
        "(false alarms, mean s) | mean wall s | mean CPU-s |",
        "|---|---|---|---|---|---|",
    ]
    for row in table["correct"]:
        per = ", ".join(
            f"{k} {n} ({row['mean_seconds_by_check'][k]:.1f} s)" for k, n in row["false_alarms_by_check"].items()
        )
        lines.append(
            f"| {row['module']} | {row['runs']} | {row['false_alarms']} | {per} | "
            f"{row['mean_wall_seconds']:.1f} | {row['mean_cpu_seconds']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="seeded runs per correct implementation (default 50)")
    parser.add_argument("--quick", action="store_true", help="3 runs per correct implementation")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budget-minutes", type=float, default=5.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--only", default="", help="comma-separated module names (default: all)")
    parser.add_argument(
        "--examples", type=Path, default=EXAMPLES, help="the catalogue's directory (default examples/dp_bugs)"
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--scratch", default=None, help="where run directories live while a battery runs")
    parser.add_argument("--keep", action="store_true", help="keep every run directory")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="rewrite detection.md from the stored detection.json, running nothing",
    )
    parser.add_argument("--verbose", action="store_true", help="the battery's own progress on stderr")
    parser.add_argument(
        "--greybox-only", action="store_true", help="run only the grey-box checks (one replayed pair per battery)"
    )
    args = parser.parse_args(argv)
    if args.render_only:
        # The tables again from the stored measurements, after a change to how they are printed.
        table = read_json(args.out / "detection.json")
        atomic_write_text(args.out / "detection.md", _markdown(table))
        print(_markdown(table))
        return 0
    runs = 3 if args.quick else args.runs
    only = {s for s in args.only.split(",") if s}
    paths = [
        p
        for p in sorted(args.examples.resolve().glob("*.py"))
        if not p.name.startswith("_") and (not only or p.stem in only)
    ]
    if not paths:
        raise SystemExit(f"no example modules under {args.examples}")
    table: dict[str, Any] = {
        "delta": args.delta,
        "confidence": 0.95,
        "budget_minutes": args.budget_minutes,
        "workers": args.workers,
        "runs": runs,
        "bugs": [],
        "correct": [],
        "checks": [],
    }
    started = time.monotonic()
    (args.out / "batteries").mkdir(parents=True, exist_ok=True)
    reused_count = 0
    for path in paths:
        module = _module(path)
        bug = getattr(module, "BUG", "")
        if bug:
            row = _battery(path, module.CLAIM, seed=0, args=args)
            row.update(module=path.stem, bug=bug, reported=getattr(module, "REPORTED", ""))
            reused = " (reused from an earlier run)" if row.pop("reused", False) else ""
            reused_count += bool(reused)
            table["bugs"].append(row)
            flagged = row.get("diagnosis") or []
            said = (
                f"exit 3, first cause {_first_cause(row)}; fired: {', '.join(flagged)}" if flagged else "NOT detected"
            )
            print(
                f"[{time.monotonic() - started:5.0f} s] {path.stem}: {said} ({row['cpu_seconds']:.0f} CPU-s){reused}",
                flush=True,
            )
            continue
        rows = []
        for seed in range(runs):
            rows.append(_battery(path, module.CLAIM, seed=seed, args=args))
            reused = " (reused from an earlier run)" if rows[-1].pop("reused", False) else ""
            reused_count += bool(reused)
            alarms = sum(r["exit_status"] == 3 for r in rows)
            print(
                f"[{time.monotonic() - started:5.0f} s] {path.stem} run "
                f"{seed + 1}/{runs}: exit {rows[-1]['exit_status']} ({alarms} false "
                f"alarm{'s' if alarms != 1 else ''} so far){reused}",
                flush=True,
            )
        by_check: dict[str, int] = {}
        for r in rows:
            for o in r["outcomes"]:
                by_check[o["name"]] = by_check.get(o["name"], 0) + (o["status"] == "violated")
        table["correct"].append(
            {
                "module": path.stem,
                "runs": runs,
                "false_alarms": sum(r["exit_status"] == 3 for r in rows),
                "false_alarms_by_check": by_check,
                "mean_wall_seconds": sum(r["wall_seconds"] for r in rows) / runs,
                "mean_cpu_seconds": sum(r["cpu_seconds"] for r in rows) / runs,
                "mean_seconds_by_check": {
                    name: sum(o["seconds"] for r in rows for o in r["outcomes"] if o["name"] == name) / runs
                    for name in by_check
                },
                "statuses": [{o["name"]: o["status"] for o in r["outcomes"]} for r in rows],
            }
        )
    for row in table["bugs"] + [{"outcomes": []}]:
        for o in row["outcomes"]:
            if o["name"] not in table["checks"]:
                table["checks"].append(o["name"])
    missed = [r["module"] for r in table["bugs"] if r["exit_status"] != 3 or r["cpu_seconds"] > FIVE_CPU_MINUTES]
    table["undetected_within_5_cpu_minutes"] = missed
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out / "detection.json", table)
    atomic_write_text(args.out / "detection.md", _markdown(table))
    print(_markdown(table))
    print(
        f"wrote {args.out / 'detection.json'} and detection.md in {time.monotonic() - started:.0f} s "
        f"({reused_count} batter{'y' if reused_count == 1 else 'ies'} reused from earlier runs)",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
